//! A harness for integration tests with real `waverunner node` processes on 127.0.0.1.
//!
//! [`Cluster::start`] spawns one process per replica with unique ports and a data directory
//! under a unique temporary directory, each replica's stdout and stderr going to its own log
//! file. Dropping the cluster (also while a test panics) kills every process and removes the
//! directory; on a panic it first prints the tail of every replica's log.
//!
//! Clusters of every test binary take a lock file in the temporary directory for their whole
//! life, so at most one cluster runs at a time on the machine: the timing checks (failover
//! within a bound) must not compete with other clusters for the CPUs of a small machine.
//!
//! Helpers run the real clients (`redis-cli`, `redis-benchmark`, the libmemcached tools,
//! python3 with pymemcache) with a time limit, and fail with a message naming
//! `scripts/install-deps.sh` when one is missing.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::collections::hash_map::RandomState;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_waverunner");

/// Milliseconds per Raft tick of every test cluster.
pub const TICK_MS: u64 = 10;
/// Election timeout in ticks: randomized in `[ELECTION_TICKS, 2 × ELECTION_TICKS)` ticks, so
/// 100–200 ms.
pub const ELECTION_TICKS: u64 = 10;
/// The upper end of the randomized election timeout, in ms (200).
pub const ELECTION_TIMEOUT_MAX_MS: u64 = 2 * ELECTION_TICKS * TICK_MS;

/// Ports each replica listens on: raft, client (UDP), redis, memcache, admin.
const PORTS_PER_NODE: u16 = 5;

/// How a cluster's replicas are configured.
#[derive(Clone, Debug)]
pub struct Opts {
    /// `memory` or `fsync`.
    pub durability: &'static str,
    /// `log`, `read_index` or `lease`.
    pub read_mode: &'static str,
    /// `--snapshot-entries`.
    pub snapshot_entries: Option<u64>,
    /// `--max-value-bytes`.
    pub max_value_bytes: Option<u64>,
    /// `--request-timeout-ms`.
    pub request_timeout_ms: Option<u64>,
    /// `--max-connections`.
    pub max_connections: Option<u64>,
    /// `--dataplane` (`off`, `udp`; `xdp` needs a namespace, not this loopback harness).
    pub dataplane: Option<&'static str>,
    /// `--maxmemory` in bytes.
    pub maxmemory: Option<u64>,
    /// `--client-loop` (`replica`, the default, or `thread`).
    pub client_loop: Option<&'static str>,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            durability: "fsync",
            read_mode: "read_index",
            snapshot_entries: None,
            max_value_bytes: None,
            request_timeout_ms: None,
            max_connections: None,
            dataplane: None,
            maxmemory: None,
            client_loop: None,
        }
    }
}

impl Opts {
    /// Default options with this durability.
    pub fn durability(d: &'static str) -> Opts {
        Opts {
            durability: d,
            ..Opts::default()
        }
    }
}

/// `/status` of a replica: the replica's own type.
pub use waverunner_node::metrics::Status;

struct Node {
    id: u64,
    raft: SocketAddr,
    client: SocketAddr,
    redis: SocketAddr,
    memcache: SocketAddr,
    admin: SocketAddr,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    stopped: bool,
    starts: u32,
}

/// A local cluster of replica processes. Node ids are `1..=n`.
pub struct Cluster {
    dir: PathBuf,
    opts: Opts,
    nodes: Vec<Node>,
    /// The machine-wide cluster lock, held for the cluster's life.
    lock: Option<File>,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A random number (std's randomly keyed hasher over the clock, the pid and a counter).
pub fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// A fresh, unique directory under the system's temporary directory.
pub fn unique_dir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "waverunner-itest-{what}-{}-{:016x}",
        std::process::id(),
        random_u64()
    ));
    fs::create_dir_all(&d).expect("create a temporary directory");
    d
}

/// Removes the directories of clusters whose test process died without cleaning up (killed
/// by a timeout, say): named `waverunner-itest-cluster-PID-…` with no process PID, and
/// holding this harness's node logs.
fn remove_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("waverunner-itest-cluster-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = fs::read_to_string(e.path().join("node1.log"))
            .is_ok_and(|l| l.starts_with("==== harness: start"));
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

use crate::cluster_lock::cluster_lock;

/// The ephemeral port range of the kernel: ports there may be taken by outgoing connections
/// at any moment (even between a replica's kill and its restart), so test ports avoid it.
fn ephemeral_range() -> (u16, u16) {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|x| x.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

fn port_free(p: u16) -> bool {
    TcpListener::bind(("127.0.0.1", p)).is_ok() && UdpSocket::bind(("127.0.0.1", p)).is_ok()
}

/// `count` consecutive free ports from a random base in 20000..60000 (outside the kernel's
/// ephemeral range), each checked by binding TCP and UDP.
fn pick_ports(count: u16) -> u16 {
    let (eph_lo, eph_hi) = ephemeral_range();
    for _ in 0..500 {
        let base = 20_000 + (random_u64() % u64::from(40_000 - count)) as u16;
        let end = base + count; // exclusive
        if end > eph_lo && base <= eph_hi {
            continue;
        }
        if (base..end).all(port_free) {
            return base;
        }
    }
    panic!("no {count} consecutive free ports found in 20000..60000 outside the ephemeral range {eph_lo}-{eph_hi}");
}

/// A GET over HTTP/1.0: status code and body.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, String), String> {
    http(addr, &format!("GET {path} HTTP/1.0\r\n\r\n"), timeout)
}

/// A POST without a body over HTTP/1.0: status code and body (panics on a transport error).
#[allow(dead_code)] // not every test file posts
pub fn http_post(addr: SocketAddr, path: &str, timeout: Duration) -> (u16, String) {
    let req = format!("POST {path} HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    http(addr, &req, timeout).unwrap_or_else(|e| panic!("POST {path} at {addr}: {e}"))
}

fn http(addr: SocketAddr, request: &str, timeout: Duration) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(|e| format!("read: {e}"))?;
    let out = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = out
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("malformed HTTP reply {out:?}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("malformed HTTP status line in {head:?}"))?;
    Ok((code, body.to_string()))
}

/// `/status` of the admin server at `addr`.
pub fn fetch_status(addr: SocketAddr) -> Result<Status, String> {
    let (code, body) = http_get(addr, "/status", Duration::from_secs(2))?;
    if code != 200 {
        return Err(format!("/status answered {code}: {body}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("bad /status JSON ({e}): {body}"))
}

impl Cluster {
    /// Starts `n` replicas (ids 1..=n) and waits until every admin server answers (not for a
    /// leader: see [`Cluster::wait_leader`]). Retries with other ports if one was taken.
    pub fn start(n: usize, opts: Opts) -> Cluster {
        assert!((1..=7).contains(&n), "1..=7 replicas");
        let mut lock = Some(cluster_lock());
        remove_stale_dirs();
        for attempt in 1..=5 {
            let dir = unique_dir("cluster");
            let base = pick_ports(PORTS_PER_NODE * n as u16);
            let addr = |i: usize, k: u16| -> SocketAddr {
                SocketAddr::from(([127, 0, 0, 1], base + PORTS_PER_NODE * i as u16 + k))
            };
            let nodes = (0..n)
                .map(|i| {
                    let id = i as u64 + 1;
                    Node {
                        id,
                        raft: addr(i, 0),
                        client: addr(i, 1),
                        redis: addr(i, 2),
                        memcache: addr(i, 3),
                        admin: addr(i, 4),
                        data_dir: dir.join(format!("node{id}")),
                        log: dir.join(format!("node{id}.log")),
                        child: None,
                        stopped: false,
                        starts: 0,
                    }
                })
                .collect();
            let mut c = Cluster {
                dir,
                opts: opts.clone(),
                nodes,
                lock: lock.take(),
            };
            for id in c.ids() {
                c.spawn(id);
            }
            match c.wait_admin_all(Duration::from_secs(20)) {
                Ok(()) => return c,
                Err(e) => {
                    let port_clash = c.ids().iter().any(|&id| {
                        let l = c.logs(id);
                        l.contains("cannot listen") || l.contains("Address already in use")
                    });
                    if !port_clash || attempt == 5 {
                        c.dump_logs();
                        panic!("the cluster did not start: {e}");
                    }
                    eprintln!("cluster start attempt {attempt}: a port was taken ({e}); retrying with other ports");
                    // Dropping the attempt kills its processes and removes its directory.
                    lock = c.lock.take();
                }
            }
        }
        unreachable!()
    }

    /// Node ids, 1..=n.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    fn node(&self, id: u64) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    fn node_mut(&mut self, id: u64) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// The `waverunner node` arguments of replica `id`.
    fn args(&self, id: u64) -> Vec<String> {
        let n = self.node(id);
        let mut a: Vec<String> = vec![
            "node".into(),
            "--id".into(),
            id.to_string(),
            "--data-dir".into(),
            n.data_dir.display().to_string(),
            "--durability".into(),
            self.opts.durability.into(),
            "--read-mode".into(),
            self.opts.read_mode.into(),
            "--tick-ms".into(),
            TICK_MS.to_string(),
            "--election-ticks".into(),
            ELECTION_TICKS.to_string(),
            "--listen-raft".into(),
            n.raft.to_string(),
            "--listen-client".into(),
            n.client.to_string(),
            "--listen-redis".into(),
            n.redis.to_string(),
            "--listen-memcache".into(),
            n.memcache.to_string(),
            "--listen-admin".into(),
            n.admin.to_string(),
        ];
        for (flag, v) in [
            ("--snapshot-entries", self.opts.snapshot_entries),
            ("--max-value-bytes", self.opts.max_value_bytes),
            ("--request-timeout-ms", self.opts.request_timeout_ms),
            ("--max-connections", self.opts.max_connections),
            ("--maxmemory", self.opts.maxmemory),
        ] {
            if let Some(v) = v {
                a.push(flag.into());
                a.push(v.to_string());
            }
        }
        if let Some(dp) = self.opts.dataplane {
            a.push("--dataplane".into());
            a.push(dp.into());
        }
        if let Some(l) = self.opts.client_loop {
            a.push("--client-loop".into());
            a.push(l.into());
        }
        for p in self.nodes.iter().filter(|p| p.id != id) {
            a.push("--peer".into());
            a.push(format!("{}={}/{}", p.id, p.raft, p.client));
        }
        a
    }

    fn spawn(&mut self, id: u64) {
        let args = self.args(id);
        let n = self.node_mut(id);
        assert!(n.child.is_none(), "node {id} is already running");
        n.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)
            .expect("open a node log");
        let _ = writeln!(
            log,
            "==== harness: start #{} of node {id}: {BIN} {}",
            n.starts,
            args.join(" ")
        );
        let mut cmd = Command::new(BIN);
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log)
            .env(
                "WAVERUNNER_LOG",
                std::env::var("WAVERUNNER_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("RUST_BACKTRACE", "1");
        // SAFETY: prctl is async-signal-safe. The replica dies with the test process even if
        // the test process is killed before it can clean up.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        n.child = Some(cmd.spawn().expect("spawn waverunner node"));
        n.stopped = false;
    }

    fn wait_admin_all(&mut self, timeout: Duration) -> Result<(), String> {
        for id in self.ids() {
            self.wait_admin(id, timeout)?;
        }
        Ok(())
    }

    /// Waits until replica `id`'s admin server answers `/status`.
    fn wait_admin(&mut self, id: u64, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let admin = self.node(id).admin;
        loop {
            if let Some(st) = self.exit_status(id) {
                return Err(format!("node {id} exited during start-up: {st}"));
            }
            match fetch_status(admin) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!(
                        "node {id}: /status not answering after {timeout:?}: {e}"
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// The exit status of replica `id` if its process has ended (it is then reaped).
    fn exit_status(&mut self, id: u64) -> Option<ExitStatus> {
        let n = self.node_mut(id);
        let st = n.child.as_mut()?.try_wait().expect("try_wait");
        if st.is_some() {
            n.child = None;
            n.stopped = false;
        }
        st
    }

    /// Panics if a replica that should be running has exited (a crash), with its log.
    pub fn assert_running(&mut self, id: u64) {
        assert!(
            self.node(id).child.is_some(),
            "node {id} is not supposed to be running"
        );
        if let Some(st) = self.exit_status(id) {
            panic!(
                "node {id} exited unexpectedly ({st}); its log:\n{}",
                tail(&self.logs(id), 80)
            );
        }
    }

    /// Whether replica `id` has a process (running or stopped).
    pub fn is_up(&self, id: u64) -> bool {
        self.node(id).child.is_some()
    }

    /// Replicas with a running (not stopped) process.
    pub fn live(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some() && !n.stopped)
            .map(|n| n.id)
            .collect()
    }

    /// The names of replica `id`'s threads (`/proc/PID/task/*/comm`).
    pub fn thread_names(&self, id: u64) -> Vec<String> {
        let n = self.node(id);
        let pid = n.child.as_ref().expect("running").id();
        let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .expect("task dir")
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .map(|s| s.trim().to_string())
            .collect();
        names.sort();
        names
    }

    /// Sends `sig` to replica `id`: `SIGKILL` waits for the process to end; `SIGTERM` waits
    /// (up to 10 s) and returns its exit status; `SIGSTOP` and `SIGCONT` wait until the kernel
    /// shows the process stopped or running.
    pub fn kill(&mut self, id: u64, sig: libc::c_int) -> Option<ExitStatus> {
        let n = self.node_mut(id);
        let child = n
            .child
            .as_mut()
            .unwrap_or_else(|| panic!("node {id} is not running"));
        let pid = child.id() as libc::pid_t;
        // SAFETY: a signal to our own child, which is not reaped yet (so the pid is its).
        let r = unsafe { libc::kill(pid, sig) };
        assert_eq!(
            r,
            0,
            "kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        );
        match sig {
            libc::SIGKILL => {
                let st = child.wait().expect("wait");
                n.child = None;
                n.stopped = false;
                Some(st)
            }
            libc::SIGTERM => {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    if let Some(st) = child.try_wait().expect("try_wait") {
                        n.child = None;
                        n.stopped = false;
                        return Some(st);
                    }
                    if Instant::now() >= deadline {
                        let _ = child.kill();
                        let _ = child.wait();
                        n.child = None;
                        panic!("node {id} did not stop within 10 s of SIGTERM");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            libc::SIGSTOP | libc::SIGCONT => {
                let want_stopped = sig == libc::SIGSTOP;
                n.stopped = want_stopped;
                let deadline = Instant::now() + Duration::from_secs(5);
                while proc_stopped(pid) != want_stopped {
                    assert!(
                        Instant::now() < deadline,
                        "node {id}: the kernel did not show it {} within 5 s",
                        if want_stopped { "stopped" } else { "running" }
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                None
            }
            _ => None,
        }
    }

    /// Kills every replica at once (SIGKILL to all, then reaps them).
    pub fn kill_all(&mut self) {
        for n in &self.nodes {
            if let Some(c) = &n.child {
                // SAFETY: a signal to our own, not yet reaped child.
                unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGKILL) };
            }
        }
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.wait();
            }
            n.stopped = false;
        }
    }

    /// Starts replica `id` again with the same configuration, ports and data directory, and
    /// waits until its admin server answers.
    pub fn restart(&mut self, id: u64) {
        self.spawn(id);
        if let Err(e) = self.wait_admin(id, Duration::from_secs(20)) {
            self.dump_logs();
            panic!("restart of node {id}: {e}");
        }
    }

    /// Starts replica `id` again without waiting for anything.
    pub fn restart_no_wait(&mut self, id: u64) {
        self.spawn(id);
    }

    /// Redis RESP address of replica `id`.
    pub fn redis_addr(&self, id: u64) -> SocketAddr {
        self.node(id).redis
    }

    /// memcached address of replica `id`.
    pub fn memcache_addr(&self, id: u64) -> SocketAddr {
        self.node(id).memcache
    }

    /// Native UDP client address of replica `id`.
    pub fn client_addr(&self, id: u64) -> SocketAddr {
        self.node(id).client
    }

    /// Native UDP client addresses of every replica, in id order.
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|n| n.client).collect()
    }

    /// Raft (replica-to-replica TCP) address of replica `id`.
    pub fn raft_addr(&self, id: u64) -> SocketAddr {
        self.node(id).raft
    }

    /// Admin HTTP address of replica `id`.
    pub fn admin_addr(&self, id: u64) -> SocketAddr {
        self.node(id).admin
    }

    /// Where replica `id` keeps its data.
    pub fn data_dir(&self, id: u64) -> &Path {
        &self.node(id).data_dir
    }

    /// `/status` of replica `id` (panics when it does not answer).
    pub fn status(&self, id: u64) -> Status {
        self.try_status(id)
            .unwrap_or_else(|e| panic!("node {id}: {e}"))
    }

    /// `/status` of replica `id`.
    pub fn try_status(&self, id: u64) -> Result<Status, String> {
        fetch_status(self.node(id).admin)
    }

    /// Waits until every live replica names the same leader, that leader is live and calls
    /// itself leader; returns its id. Polls every 20 ms.
    pub fn wait_leader(&mut self, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        loop {
            for id in self.live() {
                self.assert_running(id);
            }
            let live = self.live();
            let sts: Vec<Result<Status, String>> =
                live.iter().map(|&id| self.try_status(id)).collect();
            if let Some(l) = agreed_leader(&live, &sts) {
                return l;
            }
            let last = summary(&live, &sts);
            if Instant::now() >= deadline {
                self.dump_logs();
                panic!(
                    "no leader agreed by every live replica within {timeout:?}; last seen:\n{last}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until every live replica has the same applied index (equal to the highest commit
    /// index among them) and the same digest; returns their statuses.
    pub fn wait_converged(&mut self, timeout: Duration) -> Vec<Status> {
        let deadline = Instant::now() + timeout;
        let mut last;
        loop {
            for id in self.live() {
                self.assert_running(id);
            }
            let live = self.live();
            let sts: Vec<Result<Status, String>> =
                live.iter().map(|&id| self.try_status(id)).collect();
            if sts.iter().all(|s| s.is_ok()) {
                let sts: Vec<Status> = sts.into_iter().map(Result::unwrap).collect();
                let max_commit = sts.iter().map(|s| s.commit_index).max().unwrap_or(0);
                let first = &sts[0];
                if sts.iter().all(|s| {
                    s.applied_index == first.applied_index
                        && s.applied_index == max_commit
                        && s.digest == first.digest
                }) {
                    return sts;
                }
                last = sts
                    .iter()
                    .map(|s| {
                        format!(
                            "  node {}: {} term {} leader {} commit {} applied {} last {} keys {} digest {:016x}",
                            s.id, s.role, s.term, s.leader, s.commit_index, s.applied_index, s.last_index, s.keys, s.digest
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
            } else {
                last = summary(&live, &sts);
            }
            if Instant::now() >= deadline {
                self.dump_logs();
                panic!("replicas did not converge within {timeout:?}; last seen:\n{last}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log (stdout and stderr) of replica `id`, every start of it.
    pub fn logs(&self, id: u64) -> String {
        fs::read_to_string(&self.node(id).log).unwrap_or_default()
    }

    /// Prints the tail of every replica's log to standard error.
    pub fn dump_logs(&self) {
        for n in &self.nodes {
            eprintln!(
                "---- node {} log ({}), last 60 lines ----\n{}",
                n.id,
                n.log.display(),
                tail(&self.logs(n.id), 60)
            );
        }
    }

    /// A native client that talks to the given replicas only.
    pub fn client_of(&self, ids: &[u64]) -> waverunner_client::Client {
        let addrs: Vec<SocketAddr> = ids.iter().map(|&id| self.client_addr(id)).collect();
        waverunner_client::Client::with_options(
            &addrs,
            waverunner_client::Options {
                attempt_timeout: Duration::from_millis(300),
                deadline: Duration::from_secs(10),
                ..waverunner_client::Options::default()
            },
        )
        .expect("native client")
    }

    /// A native client that knows every replica.
    pub fn client(&self) -> waverunner_client::Client {
        self.client_of(&self.ids())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump_logs();
        }
        self.kill_all();
        if std::thread::panicking() && std::env::var_os("WAVERUNNER_ITEST_KEEP").is_some() {
            eprintln!("kept {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn agreed_leader(live: &[u64], sts: &[Result<Status, String>]) -> Option<u64> {
    let mut leader = None;
    for s in sts {
        let s = s.as_ref().ok()?;
        if s.leader == 0 || leader.is_some_and(|l| l != s.leader) {
            return None;
        }
        leader = Some(s.leader);
    }
    let l = leader?;
    let i = live.iter().position(|&id| id == l)?;
    (sts[i].as_ref().ok()?.role == "leader").then_some(l)
}

fn summary(live: &[u64], sts: &[Result<Status, String>]) -> String {
    live.iter()
        .zip(sts)
        .map(|(id, s)| match s {
            Ok(s) => format!(
                "  node {id}: {} term {} leader {} commit {} applied {}",
                s.role, s.term, s.leader, s.commit_index, s.applied_index
            ),
            Err(e) => format!("  node {id}: {e}"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the kernel shows process `pid` stopped (state `T`).
fn proc_stopped(pid: libc::pid_t) -> bool {
    let Ok(s) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    s.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|st| st == "T")
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// External clients

/// The path of tool `name` on PATH (or among `/usr/bin`, `/usr/local/bin`); fails the test with
/// a message naming `scripts/install-deps.sh` when it is missing.
pub fn require_tool(name: &str) -> PathBuf {
    find_tool(name).unwrap_or_else(|| {
        panic!("`{name}` is not installed: run scripts/install-deps.sh (it installs redis-tools, libmemcached-tools, python3 and python3-pymemcache)")
    })
}

/// The path of the first of `names` that is installed.
pub fn require_one_of(names: &[&str]) -> PathBuf {
    names
        .iter()
        .find_map(|n| find_tool(n))
        .unwrap_or_else(|| panic!("none of {names:?} is installed: run scripts/install-deps.sh"))
}

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A python3 that can import `module` (the Debian one first: pyenv shims may lack it); the
/// panic names the Debian `package` that install-deps.sh installs.
fn python_with(module: &str, package: &str) -> PathBuf {
    for p in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(p)
            .args(["-c", &format!("import {module}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return PathBuf::from(p);
        }
    }
    panic!("no python3 with {module}: run scripts/install-deps.sh (it installs {package})");
}

/// A python3 that can import pymemcache.
pub fn python_with_pymemcache() -> PathBuf {
    python_with("pymemcache", "python3-pymemcache")
}

/// A python3 that can import redis (redis-py).
pub fn python_with_redis() -> PathBuf {
    python_with("redis", "python3-redis")
}

/// The Debian python3 and a `PYTHONPATH` under which `import redis` is redis-py 8 (installed
/// by scripts/install-deps.sh into `target/py/redis-py-8.*`: Debian's redis-py predates RESP3).
pub fn python_with_redis_py_8() -> (PathBuf, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/py");
    let found = std::fs::read_dir(&dir).ok().and_then(|d| {
        d.filter_map(Result::ok).map(|e| e.path()).find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("redis-py-8."))
                && p.join("redis/__init__.py").is_file()
        })
    });
    match found {
        Some(p) => (PathBuf::from("/usr/bin/python3"), p),
        None => panic!(
            "redis-py 8 is not installed under {}: run scripts/install-deps.sh",
            dir.display()
        ),
    }
}

/// A python3 that can import prometheus_client (the reference OpenMetrics parser).
pub fn python_with_prometheus_client() -> PathBuf {
    python_with("prometheus_client", "python3-prometheus-client")
}

/// Runs `cmd` with stdin from `input`, killing it after `timeout`; returns its output.
pub fn run_with_timeout(cmd: &mut Command, input: Option<&[u8]>, timeout: Duration) -> Output {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {desc}: {e}"));
    let writer = input.map(|i| {
        let mut stdin = child.stdin.take().expect("stdin");
        let i = i.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&i);
        })
    });
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let ro = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let re = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let o = String::from_utf8_lossy(&ro.join().unwrap_or_default()).into_owned();
            let e = String::from_utf8_lossy(&re.join().unwrap_or_default()).into_owned();
            panic!("{desc} did not finish within {timeout:?}\nstdout: {o}\nstderr: {e}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    Output {
        status,
        stdout: ro.join().unwrap_or_default(),
        stderr: re.join().unwrap_or_default(),
    }
}

/// Runs `redis-cli --no-raw` with one command against `addr`; returns its output without the
/// final newline (`"(nil)"`, `"(integer) 3"`, `"\"v\""`, `"(error) ERR …"`, `"1) …"`).
pub fn redis(addr: SocketAddr, args: &[&str]) -> String {
    redis_mode(addr, "--no-raw", args)
}

/// Like [`redis`] with `--raw`: bulk strings as they are, one array element per line.
pub fn redis_raw(addr: SocketAddr, args: &[&str]) -> String {
    redis_mode(addr, "--raw", args)
}

/// `redis-cli -h ADDR -p PORT`, to add arguments to.
fn redis_cli(addr: SocketAddr) -> Command {
    let mut c = Command::new(require_tool("redis-cli"));
    c.arg("-h")
        .arg(addr.ip().to_string())
        .arg("-p")
        .arg(addr.port().to_string());
    c
}

fn redis_mode(addr: SocketAddr, mode: &str, args: &[&str]) -> String {
    let o = run_with_timeout(
        redis_cli(addr).arg(mode).args(args),
        None,
        Duration::from_secs(30),
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "redis-cli {args:?} against {addr} failed ({}): stdout {out:?} stderr {:?}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out.strip_suffix('\n').unwrap_or(&out).to_string()
}

/// Runs `redis-cli --no-raw` with commands read from standard input (one per line, all on one
/// connection); returns its output.
pub fn redis_script(addr: SocketAddr, script: &str) -> String {
    let o = run_with_timeout(
        redis_cli(addr).arg("--no-raw"),
        Some(script.as_bytes()),
        Duration::from_secs(30),
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "redis-cli script {script:?} against {addr} failed ({}): stdout {out:?} stderr {:?}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

// ---------------------------------------------------------------------------------------------
// Raw sockets

/// Connects to `addr` with read and write timeouts.
pub fn connect(addr: SocketAddr, timeout: Duration) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.set_read_timeout(Some(timeout)).expect("timeout");
    s.set_write_timeout(Some(timeout)).expect("timeout");
    let _ = s.set_nodelay(true);
    s
}

/// Reads from `s` until `done(bytes so far)` or the deadline; returns what was read and
/// whether the peer closed the connection.
pub fn read_until(
    s: &mut TcpStream,
    timeout: Duration,
    done: impl Fn(&[u8]) -> bool,
) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while !done(&out) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (out, false);
        }
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        match s.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return (out, false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A reset after our unread garbage counts as closed.
            Err(_) => return (out, true),
        }
    }
    (out, false)
}

/// Reads until the peer closes the connection (or the deadline): everything read and whether
/// it closed.
pub fn read_to_close(s: &mut TcpStream, timeout: Duration) -> (Vec<u8>, bool) {
    read_until(s, timeout, |_| false)
}

/// Sends `bytes` on a fresh connection to `addr`, half-closes it and reads until the server
/// closes (up to `timeout`).
pub fn send_and_read(addr: SocketAddr, bytes: &[u8], timeout: Duration) -> (Vec<u8>, bool) {
    let mut s = connect(addr, timeout);
    // The server may close as soon as it sees garbage: a failed write is part of the test.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    read_to_close(&mut s, timeout)
}

/// Deterministic pseudo-random bytes (xorshift), for garbage.
pub fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Pipelines

/// One RESP request.
pub fn resp_cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The length of the first complete RESP2 reply in `b` (simple, error, integer, bulk, array).
pub fn resp_reply_len(b: &[u8]) -> Option<usize> {
    let line = b.windows(2).position(|w| w == b"\r\n")?;
    let head = &b[..line];
    let n = || -> i64 {
        String::from_utf8_lossy(&head[1..])
            .parse()
            .expect("a length")
    };
    match head.first()? {
        b'+' | b'-' | b':' => Some(line + 2),
        b'$' if n() < 0 => Some(line + 2),
        b'$' => {
            let end = line + 2 + n() as usize + 2;
            (b.len() >= end).then_some(end)
        }
        b'*' => {
            let mut at = line + 2;
            for _ in 0..n().max(0) {
                at += resp_reply_len(&b[at..])?;
            }
            Some(at)
        }
        c => panic!("not a RESP reply: {:?}", *c as char),
    }
}

/// Splits `b` into complete RESP replies.
pub fn resp_replies(mut b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(n) = resp_reply_len(b) {
        out.push(b[..n].to_vec());
        b = &b[n..];
    }
    out
}

/// Pipelines of mixed reads and writes through `addr`, each checked to be answered in request
/// order: one raw write of `3 × n` commands (SET, INCR, GET per item) read back reply by reply;
/// the same through `redis-cli --pipe`; and a redis-py pipeline. `tag` keeps keys apart.
pub fn check_pipelines(addr: SocketAddr, tag: &str, n: usize) {
    // Raw: every reply in its place.
    let ctr = format!("{tag}:ctr");
    let base: i64 = redis(addr, &["GET", &ctr])
        .trim_matches('"')
        .parse()
        .unwrap_or(0);
    let mut req = Vec::new();
    for i in 0..n {
        let (k, v) = (format!("{tag}:k{i}"), format!("v{i}"));
        req.extend(resp_cmd(&[b"SET", k.as_bytes(), v.as_bytes()]));
        req.extend(resp_cmd(&[b"INCR", ctr.as_bytes()]));
        req.extend(resp_cmd(&[b"GET", k.as_bytes()]));
    }
    let mut s = connect(addr, Duration::from_secs(30));
    s.write_all(&req).expect("write the pipeline");
    let (got, _) = read_until(&mut s, Duration::from_secs(60), |b| {
        resp_replies(b).len() >= 3 * n
    });
    let replies = resp_replies(&got);
    assert_eq!(
        replies.len(),
        3 * n,
        "replies to a pipeline of {} at {addr}",
        3 * n
    );
    for i in 0..n {
        let v = format!("v{i}");
        assert_eq!(replies[3 * i], b"+OK\r\n", "SET #{i} at {addr}");
        assert_eq!(
            replies[3 * i + 1],
            format!(":{}\r\n", base + i as i64 + 1).into_bytes(),
            "INCR #{i} at {addr}: answered out of order"
        );
        assert_eq!(
            replies[3 * i + 2],
            format!("${}\r\n{v}\r\n", v.len()).into_bytes(),
            "GET #{i} at {addr}: answered out of order"
        );
    }

    // redis-cli --pipe: every reply counted, none an error.
    let mut pipe = Vec::new();
    for i in 0..n {
        let k = format!("{tag}:p{i}");
        pipe.extend(resp_cmd(&[b"SET", k.as_bytes(), b"x"]));
        pipe.extend(resp_cmd(&[b"GET", k.as_bytes()]));
    }
    let o = run_with_timeout(
        redis_cli(addr).arg("--pipe"),
        Some(&pipe),
        Duration::from_secs(60),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains(&format!("errors: 0, replies: {}", 2 * n)),
        "redis-cli --pipe at {addr}: {out} {}",
        String::from_utf8_lossy(&o.stderr)
    );

    // redis-py: a pipeline without MULTI (transactions are issue 14's), results in order.
    let py = python_with_redis();
    let script = format!(
        r#"
import redis, sys
r = redis.Redis(host="{ip}", port={port}, socket_timeout=30)
p = r.pipeline(transaction=False)
n = {n}
for i in range(n):
    p.set("{tag}:py%d" % i, "val%d" % i)
    p.incr("{tag}:pyc")
    p.get("{tag}:py%d" % i)
res = p.execute()
base = res[1] - 1
for i in range(n):
    assert res[3*i] is True, (i, res[3*i])
    assert res[3*i+1] == base + i + 1, (i, res[3*i+1])
    assert res[3*i+2] == ("val%d" % i).encode(), (i, res[3*i+2])
print("ok", len(res))
"#,
        ip = addr.ip(),
        port = addr.port(),
    );
    let o = run_with_timeout(
        Command::new(py).arg("-c").arg(&script),
        None,
        Duration::from_secs(60),
    );
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("ok"),
        "redis-py pipeline at {addr}: {} {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
