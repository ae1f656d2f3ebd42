//! The local cluster: `waverunner up`, `down`, `status` and `kv` (and, in `member.rs`,
//! `waverunner member add|remove`).
//!
//! `up` writes one `node.toml` per replica under a cluster directory, starts every replica as a
//! detached `waverunner node` process (each in its own network namespace when run as root), and
//! records what it started in `cluster.json`. Every other command — and chaos, bench and the
//! demo — finds the cluster through that file ([`load`]).
//!
//! Layout of a cluster directory:
//!
//! ```text
//! DIR/cluster.json      what runs: mode, per replica its id, pid, namespace, addresses, paths;
//!                       replicas removed from the group are listed apart (`removed`)
//! DIR/n<i>/node.toml    replica i's configuration (`waverunner node --config` reads it)
//! DIR/n<i>/node.log     replica i's standard output and error, appended across restarts
//! DIR/n<i>/data/        replica i's log, hard state and snapshots
//! ```

use std::fs;
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::{Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use waverunner_netns::{self as netns, ip};
use waverunner_node::config::{
    self, ClientLoopKind, DataPlaneKind, DurabilityMode, Listen, Peer, ReadModeConfig,
};
use waverunner_node::NodeConfig;

/// First port of a loopback cluster: replica i uses `P+i`, `P+100+i`, … `P+400+i`.
pub const DEFAULT_BASE_PORT: u16 = 17000;
/// The file in the cluster directory that records what `up` started.
pub const CLUSTER_FILE: &str = "cluster.json";
/// The bridge that joins every namespace of a netns cluster (host side: 10.77.0.1/24).
pub const BRIDGE: &str = "wrbr0";
/// The namespace for clients of a netns cluster (10.77.0.100/24).
pub const CLIENT_NETNS: &str = "wr-client";
/// Every network namespace and link we create starts with this, so cleanup removes only ours.
const NAME_PREFIX: &str = "wr";
/// Address of the bridge in the host namespace.
const BRIDGE_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Address of the clients namespace.
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
/// Standard ports of a replica in its own namespace.
const NETNS_PORTS: PortSet = PortSet {
    raft: 7000,
    client: 7100,
    redis: 6379,
    memcache: 11211,
    admin: 8080,
};
/// How long `up` waits for an elected leader.
const LEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// How long `down` gives replicas to stop after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// Timeout of one `/status` request.
const STATUS_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Lines of each replica's log printed when `up` fails.
const LOG_TAIL_LINES: usize = 20;

struct PortSet {
    raft: u16,
    client: u16,
    redis: u16,
    memcache: u16,
    admin: u16,
}

// ---------------------------------------------------------------------------------------------
// The cluster file
// ---------------------------------------------------------------------------------------------

/// How the replicas of a cluster reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetMode {
    /// Every replica on 127.0.0.1 with its own ports (no privileges needed).
    Loopback,
    /// One network namespace per replica on the bridge [`BRIDGE`] (needs root).
    Netns,
}

/// The addresses one replica serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddrs {
    /// Control-plane TCP between replicas.
    pub raft: SocketAddr,
    /// Native UDP client protocol (`waverunner kv`, the Rust client).
    pub client: SocketAddr,
    /// Redis RESP over TCP.
    pub redis: SocketAddr,
    /// memcached text protocol over TCP.
    pub memcache: SocketAddr,
    /// Admin HTTP (`/status`, `/metrics`).
    pub admin: SocketAddr,
}

/// One replica as `up` started it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEntry {
    /// Node id (1..=n).
    pub id: u64,
    /// Process id of the replica's last start (it may have exited since: see [`is_running`]).
    pub pid: u32,
    /// Start time of that process (clock ticks since boot, from `/proc/<pid>/stat`): with the
    /// pid it names the process even after the pid is reused. 0: unknown.
    #[serde(default)]
    pub start_time: u64,
    /// The network namespace it runs in, or `None` on loopback.
    pub netns: Option<String>,
    /// Where it listens.
    pub addresses: NodeAddrs,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Its `node.toml`.
    pub config: PathBuf,
    /// Its log file (standard output and error).
    pub log: PathBuf,
    /// It joined the running group (`waverunner member add`): it is not part of the group's
    /// initial configuration.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub joined: bool,
}

/// `DIR/cluster.json`: everything `up` started, for every later command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    /// The cluster directory (absolute).
    pub dir: PathBuf,
    /// Loopback ports or network namespaces.
    pub mode: NetMode,
    /// The bridge we created, if any.
    pub bridge: Option<String>,
    /// The clients namespace we created, if any.
    pub client_netns: Option<String>,
    /// The `waverunner` executable the replicas run.
    pub exe: PathBuf,
    /// Durability every replica was configured with.
    pub durability: DurabilityMode,
    /// Read mode every replica was configured with.
    pub read_mode: ReadModeConfig,
    /// The replicas, by id: the members of the group.
    pub nodes: Vec<NodeEntry>,
    /// Replicas removed from the group (`waverunner member remove`): stopped, never started
    /// again, their ids never reused; `down` still cleans up after them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<NodeEntry>,
}

impl ClusterFile {
    /// Path of the cluster file of `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(CLUSTER_FILE)
    }

    /// Native client addresses, in node order (what [`waverunner_client::Client::connect`] takes).
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|n| n.addresses.client).collect()
    }

    /// The replica with this id.
    pub fn node(&self, id: u64) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Writes the file atomically (a temporary file renamed over it), so a reader never sees
    /// half of it.
    pub fn save(&self) -> Result<(), String> {
        let path = ClusterFile::path(&self.dir);
        let tmp = self.dir.join(format!("{CLUSTER_FILE}.tmp"));
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        fs::write(&tmp, text + "\n")
            .and_then(|()| fs::rename(&tmp, &path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// Reads the cluster file of `dir`.
pub fn load(dir: &Path) -> Result<ClusterFile, String> {
    let dir = absolute(dir)?;
    let path = ClusterFile::path(&dir);
    let text = fs::read_to_string(&path).map_err(|e| {
        if e.kind() == ErrorKind::NotFound {
            format!(
                "no cluster in {} ({CLUSTER_FILE} is missing): start one with `waverunner up{}`",
                dir.display(),
                dir_flag(&dir)
            )
        } else {
            format!("cannot read {}: {e}", path.display())
        }
    })?;
    let mut cf: ClusterFile = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not a cluster file ({e}); remove the directory if nothing runs from it",
            path.display()
        )
    })?;
    cf.dir = dir;
    Ok(cf)
}

/// The cluster directory when none is given: `$WAVERUNNER_DIR`, else
/// `<temp dir>/waverunner-cluster`.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("WAVERUNNER_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => std::env::temp_dir().join("waverunner-cluster"),
    }
}

fn absolute(dir: &Path) -> Result<PathBuf, String> {
    std::path::absolute(dir).map_err(|e| format!("bad directory {}: {e}", dir.display()))
}

/// ` --dir DIR` when `dir` is not the default (for the commands we suggest to the user).
fn dir_flag(dir: &Path) -> String {
    match absolute(&default_dir()) {
        Ok(d) if d == dir => String::new(),
        _ => format!(" --dir {}", dir.display()),
    }
}

// ---------------------------------------------------------------------------------------------
// Planning: addresses and configurations
// ---------------------------------------------------------------------------------------------

/// Whether to put replicas in network namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NetnsChoice {
    /// Namespaces when running as root, loopback otherwise.
    Auto,
    /// Namespaces (needs root).
    On,
    /// Loopback ports.
    Off,
}

/// Everything `up` needs.
#[derive(Clone, Debug)]
pub struct UpOptions {
    /// Replicas (3 or 5 from the command line).
    pub nodes: u64,
    /// Durability of every replica.
    pub durability: DurabilityMode,
    /// Read mode of every replica.
    pub read_mode: ReadModeConfig,
    /// Cluster directory.
    pub dir: PathBuf,
    /// Namespaces or loopback.
    pub netns: NetnsChoice,
    /// First port of a loopback cluster (ignored with namespaces).
    pub base_port: u16,
    /// Milliseconds per Raft tick.
    pub tick_ms: u64,
    /// Election timeout in ticks.
    pub election_ticks: u32,
    /// Data plane per replica: replica `i` (1-based) uses `dataplanes[(i - 1) % len]`; empty
    /// means `off` everywhere. `xdp` needs network namespaces.
    pub dataplanes: Vec<DataPlaneKind>,
    /// Every replica's `maxmemory` in bytes (0: no limit).
    pub maxmemory: u64,
    /// Where every replica runs its client front-end.
    pub client_loop: ClientLoopKind,
}

/// The IPv4 multicast group an `xdp` leader sends appends to inside a namespace cluster
/// (administratively scoped; it never leaves the cluster's bridge).
pub const MULTICAST_GROUP: Ipv4Addr = Ipv4Addr::new(239, 77, 0, 1);

/// Parses `off`, `udp`, `xdp`, or a comma-separated list of them (one per replica, cycled).
pub fn parse_dataplanes(s: &str) -> Result<Vec<DataPlaneKind>, String> {
    s.split(',')
        .map(|p| match p.trim() {
            "off" => Ok(DataPlaneKind::Off),
            "udp" => Ok(DataPlaneKind::Udp),
            "xdp" => Ok(DataPlaneKind::Xdp),
            other => Err(format!(
                "unknown data plane {other:?}: use off, udp, xdp or a comma-separated list of them"
            )),
        })
        .collect()
}

impl UpOptions {
    /// The data plane of replica `id` (1-based).
    pub fn dataplane_of(&self, id: u64) -> DataPlaneKind {
        if self.dataplanes.is_empty() {
            return DataPlaneKind::Off;
        }
        self.dataplanes[((id - 1) as usize) % self.dataplanes.len()]
    }

    /// A 3-replica cluster in `dir` with the replica's own defaults.
    pub fn new(dir: impl Into<PathBuf>) -> UpOptions {
        UpOptions {
            nodes: 3,
            durability: DurabilityMode::Fsync,
            read_mode: ReadModeConfig::ReadIndex,
            dir: dir.into(),
            netns: NetnsChoice::Auto,
            base_port: DEFAULT_BASE_PORT,
            tick_ms: 10,
            election_ticks: 10,
            dataplanes: Vec::new(),
            maxmemory: 0,
            client_loop: ClientLoopKind::Replica,
        }
    }
}

/// Loopback addresses of replica `id` (1-based) for base port `base`: raft `base+id`, client
/// `base+100+id`, redis `base+200+id`, memcache `base+300+id`, admin `base+400+id`.
pub fn loopback_addrs(base: u16, id: u64) -> Result<NodeAddrs, String> {
    let port = |offset: u64| -> Result<u16, String> {
        u16::try_from(u64::from(base) + offset + id)
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| {
                format!(
                    "--base-port {base} is too high: replica {id} would need port {} (> 65535); use a base port of at most {}",
                    u64::from(base) + offset + id,
                    65535 - 400 - id
                )
            })
    };
    let at = |p: u16| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p);
    Ok(NodeAddrs {
        raft: at(port(0)?),
        client: at(port(100)?),
        redis: at(port(200)?),
        memcache: at(port(300)?),
        admin: at(port(400)?),
    })
}

/// Address of replica `id` inside its namespace: 10.77.0.(10+id).
pub fn netns_ip(id: u64) -> Ipv4Addr {
    // Ids are at most a handful (the fast path's MAX_NODES), far below the clients' .100.
    Ipv4Addr::new(10, 77, 0, 10 + id as u8)
}

/// Addresses of replica `id` inside its namespace: its own IP with the standard ports.
pub fn netns_addrs(id: u64) -> NodeAddrs {
    let at = |p: u16| SocketAddr::new(IpAddr::V4(netns_ip(id)), p);
    NodeAddrs {
        raft: at(NETNS_PORTS.raft),
        client: at(NETNS_PORTS.client),
        redis: at(NETNS_PORTS.redis),
        memcache: at(NETNS_PORTS.memcache),
        admin: at(NETNS_PORTS.admin),
    }
}

/// Name of replica `id`'s namespace (and of the host end of its veth).
pub fn netns_name(id: u64) -> String {
    format!("wr-n{id}")
}

/// Directory of replica `id` inside the cluster directory.
pub fn node_dir(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("n{id}"))
}

/// The configuration of every replica (ids 1..=n, `addrs[i]` for id i+1): each lists all the
/// others as peers.
pub fn node_configs(opts: &UpOptions, dir: &Path, addrs: &[NodeAddrs]) -> Vec<NodeConfig> {
    let ids = 1..=addrs.len() as u64;
    ids.clone()
        .zip(addrs)
        .map(|(id, a)| NodeConfig {
            id,
            data_dir: node_dir(dir, id).join("data"),
            durability: opts.durability,
            read_mode: opts.read_mode,
            dataplane: opts.dataplane_of(id),
            // Inside a namespace the replica's interface is eth0; on loopback there is no
            // shared segment to multicast on (and no xdp).
            dataplane_interface: (opts.dataplane_of(id) == DataPlaneKind::Xdp)
                .then(|| "eth0".to_string()),
            dataplane_multicast: (opts.dataplane_of(id) != DataPlaneKind::Off
                && !a.client.ip().is_loopback())
            .then_some(MULTICAST_GROUP),
            tick_ms: opts.tick_ms,
            election_ticks: opts.election_ticks,
            // The rest are the replica's own defaults.
            heartbeat_ticks: config::default_heartbeat_ticks(),
            snapshot_entries: config::default_snapshot_entries(),
            snapshot_bytes: config::default_snapshot_bytes(),
            request_timeout_ms: config::default_request_timeout_ms(),
            max_value_bytes: waverunner_node::config::MAX_VALUE_LIMIT,
            maxmemory: opts.maxmemory,
            client_loop: opts.client_loop,
            max_connections: config::default_max_connections(),
            listen: Listen {
                raft: a.raft,
                client: a.client,
                redis: Some(a.redis),
                memcache: Some(a.memcache),
                admin: Some(a.admin),
            },
            peers: ids
                .clone()
                .zip(addrs)
                .filter(|(pid, _)| *pid != id)
                .map(|(pid, pa)| Peer {
                    id: pid,
                    raft: pa.raft,
                    client: Some(pa.client),
                })
                .collect(),
            join: false,
        })
        .collect()
}

fn use_netns(choice: NetnsChoice) -> Result<bool, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    match choice {
        NetnsChoice::Off => Ok(false),
        NetnsChoice::Auto => Ok(root),
        NetnsChoice::On if root => Ok(true),
        NetnsChoice::On => Err(
            "--netns on needs root (it creates network namespaces, veth pairs and a bridge): \
             run as root, or use --netns off for a loopback cluster"
                .into(),
        ),
    }
}

/// Fails with a clear message when any loopback port of the plan is taken.
fn check_ports_free(addrs: &[NodeAddrs]) -> Result<(), String> {
    for (i, a) in addrs.iter().enumerate() {
        check_node_ports_free(i as u64 + 1, a)?;
    }
    Ok(())
}

/// Fails with a clear message when a loopback port of replica `id` is taken.
pub(crate) fn check_node_ports_free(id: u64, a: &NodeAddrs) -> Result<(), String> {
    let taken = |what: &str, addr: SocketAddr, e: std::io::Error| {
        format!(
            "cannot use {addr} ({what} of replica {id}): {e}; another cluster or program uses it: \
             choose another --base-port, or stop the other cluster with `waverunner down`"
        )
    };
    for (what, addr) in [
        ("raft", a.raft),
        ("redis", a.redis),
        ("memcache", a.memcache),
        ("admin", a.admin),
    ] {
        TcpListener::bind(addr).map_err(|e| taken(what, addr, e))?;
    }
    UdpSocket::bind(a.client).map_err(|e| taken("native client", a.client, e))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// Whether `pid` is a `… node --config <config>` process: the check that keeps us from ever
/// signalling a recycled pid (a zombie or an unrelated process has another command line).
fn is_node_process(pid: u32, config: &Path) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = raw.split(|&b| b == 0).collect();
    let config = config.as_os_str().as_bytes();
    args.contains(&&b"node"[..])
        && args
            .windows(2)
            .any(|w| w[0] == b"--config" && w[1] == config)
}

/// Whether the replica's recorded process is alive (running or stopped, not exited).
pub fn is_running(node: &NodeEntry) -> bool {
    match proc_state(node.pid) {
        Some((state, start)) if state != 'Z' && state != 'X' => {
            if node.start_time != 0 {
                start == node.start_time
            } else {
                is_node_process(node.pid, &node.config)
            }
        }
        _ => false,
    }
}

/// Sends `signal` (e.g. `libc::SIGKILL`, `SIGSTOP`, `SIGCONT`) to the replica if its process
/// still runs. Returns whether it was signalled.
pub fn kill_node(node: &NodeEntry, signal: i32) -> Result<bool, String> {
    // Signal only a live process that is a replica by its command line too. Right after a
    // start it may not have exec'd yet: give it a moment.
    let deadline = Instant::now() + Duration::from_millis(500);
    loop {
        if !is_running(node) {
            return Ok(false);
        }
        if is_node_process(node.pid, &node.config) {
            break;
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill has no memory preconditions; the pid was just checked to be our replica.
    if unsafe { libc::kill(node.pid as libc::pid_t, signal) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(false)
    } else {
        Err(format!(
            "cannot signal replica {} (pid {}): {e}",
            node.id, node.pid
        ))
    }
}

/// State letter and start time (in clock ticks since boot) of a process, from
/// `/proc/<pid>/stat`; `None` when there is no such process.
fn proc_state(pid: u32) -> Option<(char, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?; // field 22, starttime
    Some((state, start))
}

/// Waits until the replica's process has exited (gone, or a zombie whose sockets and files are
/// closed); returns whether it has.
pub fn wait_exit(node: &NodeEntry, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !is_running(node) {
            // If we are its parent (restart_node in a long-running process), reap it.
            // SAFETY: waitpid with WNOHANG and no status pointer only affects our children.
            unsafe { libc::waitpid(node.pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start time of a process we just spawned (0 if it cannot be read).
pub(crate) fn start_time_of(pid: u32) -> u64 {
    proc_state(pid).map_or(0, |(_, start)| start)
}

/// Starts one replica detached: a process group of its own and SIGHUP ignored (so the
/// terminal's signals do not reach it), stdin from /dev/null, stdout and stderr appended to its
/// log.
pub(crate) fn spawn_node(cf: &ClusterFile, node: &NodeEntry) -> Result<Child, String> {
    let mut log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .map_err(|e| format!("cannot open {}: {e}", node.log.display()))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let _ = writeln!(
        log,
        "--- waverunner: starting replica {} (unix time {now}) ---",
        node.id
    );
    let out = log
        .try_clone()
        .map_err(|e| format!("cannot open {}: {e}", node.log.display()))?;
    let mut cmd = match &node.netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&cf.exe);
            c
        }
        None => Command::new(&cf.exe),
    };
    cmd.arg("node")
        .arg("--config")
        .arg(&node.config)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(log);
    // A process group of its own, so the terminal's Ctrl-C does not reach it, and SIGHUP
    // ignored, so closing the terminal does not either. Not a session of its own: with the
    // kernel's autogroup scheduling (on by default) every session is a scheduling group of
    // its own, so each replica got the same share of the CPUs however busy, and the thread
    // priorities (client connections at nice 5, bulk work and snapshots at nice 10) only
    // ordered threads within one replica. Loading 3 M keys on two CPUs, a leader's frames then
    // went unsent for 150–300 ms and followers ran pre-vote rounds (5–6 a run, one term
    // change); with one group, none (docs/bench.md).
    // SAFETY: setpgid and signal are async-signal-safe, which is all pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setpgid(0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::signal(libc::SIGHUP, libc::SIG_IGN) == libc::SIG_ERR {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        if node.netns.is_some() && e.kind() == ErrorKind::NotFound {
            "the `ip` command is missing: install iproute2 (apt-get install iproute2)".to_string()
        } else {
            format!(
                "cannot start replica {} ({}): {e}",
                node.id,
                cf.exe.display()
            )
        }
    })
}

/// Serializes restarts and membership changes within one process (each rewrites
/// `cluster.json`).
pub(crate) static RESTART_LOCK: Mutex<()> = Mutex::new(());

/// Starts replica `id` of the cluster in `dir` again from its `node.toml` (after `kill_node`
/// with SIGKILL, say), records its new pid and returns it.
pub fn restart_node(dir: &Path, id: u64) -> Result<u32, String> {
    let _guard = RESTART_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut cf = load(dir)?;
    if cf.removed.iter().any(|n| n.id == id) {
        return Err(format!(
            "replica {id} was removed from the cluster in {}; it is never started again",
            cf.dir.display()
        ));
    }
    let i = cf
        .nodes
        .iter()
        .position(|n| n.id == id)
        .ok_or_else(|| format!("the cluster in {} has no replica {id}", cf.dir.display()))?;
    let node = &cf.nodes[i];
    if is_running(node) {
        return Err(format!(
            "replica {id} is still running (pid {}); kill it before restarting it",
            node.pid
        ));
    }
    let child = spawn_node(&cf, node)?;
    cf.nodes[i].pid = child.id();
    cf.nodes[i].start_time = start_time_of(child.id());
    cf.save()?;
    Ok(child.id())
}

fn log_tails(cf: &ClusterFile) -> String {
    let mut out = String::new();
    for n in &cf.nodes {
        let text = fs::read_to_string(&n.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
        out.push_str(&format!(
            "--- replica {}: last {} lines of its log ---\n",
            n.id,
            tail.len()
        ));
        for l in tail {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Network namespaces
// ---------------------------------------------------------------------------------------------

/// Our network namespaces (`wr-*`) that exist now.
fn our_namespaces() -> Result<Vec<String>, String> {
    netns::namespaces_with_prefix(&format!("{NAME_PREFIX}-"))
}

/// Our links in the host namespace (the bridge and `wr-*` veth ends) that exist now.
fn our_links() -> Result<Vec<String>, String> {
    let ours = format!("{NAME_PREFIX}-");
    Ok(netns::links_with_prefix(NAME_PREFIX)?
        .into_iter()
        .filter(|n| n == BRIDGE || n.starts_with(&ours))
        .collect())
}

/// Removes a bridge and namespaces that an earlier run left behind, unless a replica still
/// runs in one (then another netns cluster is up, and we must not cut it off).
fn remove_leftover_netns() -> Result<(), String> {
    let namespaces = our_namespaces()?;
    for ns in &namespaces {
        let pids: Vec<String> = ip(&["netns", "pids", ns])?
            .split_whitespace()
            .map(String::from)
            .collect();
        if !pids.is_empty() {
            return Err(format!(
                "network namespace {ns} still has processes (pids {}): a network-namespace cluster \
                 is already running on this host; stop it with `waverunner down --dir <its dir>` \
                 (or kill those processes), then run `up` again",
                pids.join(" ")
            ));
        }
    }
    for ns in &namespaces {
        ip(&["netns", "del", ns])?;
    }
    // Deleting a namespace deletes its veth pair; whatever remains is removed by name.
    for link in our_links()? {
        del_link(&link)?;
    }
    Ok(())
}

/// Creates the bridge, and one namespace with a veth on the bridge per entry of `hosts`.
fn create_netns(hosts: &[(String, Ipv4Addr)]) -> Result<(), String> {
    // Multicast snooping off: the bridge floods the xdp leader's multicast appends to every
    // port (docs/dataplane.md, fan-out).
    netns::add_bridge(BRIDGE)?;
    ip(&["addr", "add", &format!("{BRIDGE_IP}/24"), "dev", BRIDGE])?;
    for (ns, addr) in hosts {
        add_netns_host(ns, *addr)?;
    }
    Ok(())
}

/// Creates namespace `ns` with address `addr` on a veth attached to the bridge (which must
/// exist). A leftover namespace of that name without processes is replaced.
pub(crate) fn add_netns_host(ns: &str, addr: Ipv4Addr) -> Result<(), String> {
    debug_assert!(ns.starts_with(NAME_PREFIX));
    if our_namespaces()?.iter().any(|n| n == ns) {
        let pids = ip(&["netns", "pids", ns])?;
        if !pids.trim().is_empty() {
            return Err(format!(
                "network namespace {ns} already exists and has processes ({})",
                pids.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
        ip(&["netns", "del", ns])?;
    }
    if our_links()?.iter().any(|l| l == ns) {
        del_link(ns)?;
    }
    netns::add_host(ns, BRIDGE, addr, None)?;
    // XDP_TX out of a namespace's eth0 is dropped unless the veth's other end has an XDP
    // program too (DESIGN §5): a pass-through one, on every namespace so that the data planes
    // compare on the same path.
    if let Err(e) = waverunner_dataplane::xdp::attach_pass_through(ns) {
        eprintln!(
            "waverunner: WARNING: cannot attach the pass-through XDP program to {ns} ({e}); \
             an xdp replica behind it cannot send (XDP_TX)"
        );
    }
    Ok(())
}

/// Deletes the namespaces, veths and bridge this cluster created (those that still exist).
fn delete_netns(cf: &ClusterFile) -> Result<(), String> {
    let mut mine: Vec<&str> = cf
        .nodes
        .iter()
        .chain(&cf.removed)
        .filter_map(|n| n.netns.as_deref())
        .collect();
    mine.extend(cf.client_netns.as_deref());
    let mine: Vec<&str> = mine
        .into_iter()
        .filter(|n| n.starts_with(NAME_PREFIX))
        .collect();
    if mine.is_empty() && cf.bridge.is_none() {
        return Ok(());
    }
    let existing = our_namespaces()?;
    for ns in &mine {
        if existing.iter().any(|e| e == ns) {
            ip(&["netns", "del", ns])?;
        }
    }
    let links = our_links()?;
    for link in mine.iter().copied().chain(cf.bridge.as_deref()) {
        if links.iter().any(|l| l == link) {
            del_link(link)?;
        }
    }
    Ok(())
}

/// Deletes a link; one that vanished meanwhile (the kernel removes a veth pair together with
/// its namespace, asynchronously) is not an error.
fn del_link(link: &str) -> Result<(), String> {
    match ip(&["link", "del", link]) {
        Err(e) if e.contains("Cannot find device") => Ok(()),
        r => r.map(|_| ()),
    }
}

// ---------------------------------------------------------------------------------------------
// up, down, leader
// ---------------------------------------------------------------------------------------------

/// Starts a cluster as `opts` asks and returns once every replica agrees on a leader. On
/// failure everything it started is torn down again and the error carries the tail of each
/// replica's log.
pub fn up(opts: &UpOptions) -> Result<ClusterFile, String> {
    // The replica's own validation caps the size further (the fast path's register file).
    if opts.nodes == 0 || opts.nodes > 80 {
        return Err(format!(
            "--nodes {}: a cluster has 1 to 80 replicas",
            opts.nodes
        ));
    }
    let dir = absolute(&opts.dir)?;
    let netns = use_netns(opts.netns)?;
    if !netns && (1..=opts.nodes).any(|id| opts.dataplane_of(id) == DataPlaneKind::Xdp) {
        return Err(
            "--dataplane xdp needs network namespaces (--netns on, as root): XDP attaches to \
             each replica's own interface; on loopback use --dataplane udp"
                .into(),
        );
    }
    match load(&dir) {
        Ok(old) => {
            let running: Vec<String> = old
                .nodes
                .iter()
                .filter(|n| is_running(n))
                .map(|n| format!("replica {} pid {}", n.id, n.pid))
                .collect();
            if !running.is_empty() {
                return Err(format!(
                    "a cluster is already running in {} ({}); stop it first with `waverunner down{}`",
                    dir.display(),
                    running.join(", "),
                    dir_flag(&dir)
                ));
            }
            // A cluster that died (a reboot, kill -9): clear what it left.
            teardown(&old)?;
        }
        Err(_) if ClusterFile::path(&dir).exists() => {
            return Err(format!(
                "{} is unreadable; remove {} if no cluster runs from it",
                ClusterFile::path(&dir).display(),
                dir.display()
            ))
        }
        Err(_) => {
            let non_empty = fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some());
            if non_empty {
                return Err(format!(
                    "{} exists and is not a cluster directory (it has no {CLUSTER_FILE}); \
                     choose another --dir, or remove it",
                    dir.display()
                ));
            }
        }
    }
    let addrs: Vec<NodeAddrs> = if netns {
        (1..=opts.nodes).map(netns_addrs).collect()
    } else {
        (1..=opts.nodes)
            .map(|id| loopback_addrs(opts.base_port, id))
            .collect::<Result<Vec<_>, _>>()?
    };
    for cfg in node_configs(opts, &dir, &addrs) {
        cfg.validate().map_err(|e| e.to_string())?;
    }
    if netns {
        // Before anything is recorded as ours: a failure here must not tear down another
        // cluster's namespaces.
        remove_leftover_netns()?;
    } else {
        check_ports_free(&addrs)?;
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the waverunner executable to start replicas: {e}"))?;
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut cf = ClusterFile {
        dir: dir.clone(),
        mode: if netns {
            NetMode::Netns
        } else {
            NetMode::Loopback
        },
        bridge: netns.then(|| BRIDGE.to_string()),
        client_netns: netns.then(|| CLIENT_NETNS.to_string()),
        exe,
        durability: opts.durability,
        read_mode: opts.read_mode,
        nodes: Vec::new(),
        removed: Vec::new(),
    };
    // Saved before anything starts so that `down` can clean up after an `up` that died midway.
    cf.save()?;
    let mut children = Vec::new();
    let started = start_all(opts, &mut cf, &addrs, &mut children);
    match started {
        Ok(_leader) => Ok(cf),
        Err(e) => {
            let tails = log_tails(&cf);
            let cleanup = teardown(&cf);
            for mut c in children {
                // Our unreaped children: their pids cannot have been reused, killing is safe.
                if let Ok(None) = c.try_wait() {
                    let _ = c.kill();
                }
                let _ = c.wait();
            }
            let mut msg = format!("{e}\n{tails}");
            match cleanup {
                Ok(()) => {
                    msg.push_str("(everything that was started has been stopped and removed)")
                }
                Err(c) => msg.push_str(&format!(
                    "cleaning up failed too: {c}; run `waverunner down{}`",
                    dir_flag(&dir)
                )),
            }
            Err(msg)
        }
    }
}

fn start_all(
    opts: &UpOptions,
    cf: &mut ClusterFile,
    addrs: &[NodeAddrs],
    children: &mut Vec<Child>,
) -> Result<u64, String> {
    if cf.mode == NetMode::Netns {
        let mut hosts: Vec<(String, Ipv4Addr)> = (1..=opts.nodes)
            .map(|id| (netns_name(id), netns_ip(id)))
            .collect();
        hosts.push((CLIENT_NETNS.to_string(), CLIENT_IP));
        create_netns(&hosts)?;
    }
    for cfg in node_configs(opts, &cf.dir, addrs) {
        let ndir = node_dir(&cf.dir, cfg.id);
        fs::create_dir_all(&cfg.data_dir)
            .map_err(|e| format!("cannot create {}: {e}", cfg.data_dir.display()))?;
        let config = ndir.join("node.toml");
        fs::write(&config, cfg.to_toml())
            .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        let mut node = NodeEntry {
            id: cfg.id,
            pid: 0,
            start_time: 0,
            netns: (cf.mode == NetMode::Netns).then(|| netns_name(cfg.id)),
            addresses: addrs[(cfg.id - 1) as usize].clone(),
            data_dir: cfg.data_dir.clone(),
            config,
            log: ndir.join("node.log"),
            joined: false,
        };
        let child = spawn_node(cf, &node)?;
        node.pid = child.id();
        node.start_time = start_time_of(child.id());
        children.push(child);
        cf.nodes.push(node);
        cf.save()?;
    }
    // Our own children: an early exit shows as an exit status, no pid guessing needed.
    let mut check = || {
        for (c, n) in children.iter_mut().zip(&cf.nodes) {
            if let Ok(Some(status)) = c.try_wait() {
                return Err(format!(
                    "replica {} exited during start-up ({status}); its log says why:",
                    n.id
                ));
            }
        }
        Ok(())
    };
    wait_for_leader_checked(cf, LEADER_TIMEOUT, &mut check)
}

/// What a replica's `/status` shows.
pub use waverunner_node::metrics::Status as StatusView;

/// Fetches a replica's `/status`: the fields we use, and the whole JSON document.
pub fn fetch_status(
    admin: SocketAddr,
    timeout: Duration,
) -> Result<(StatusView, serde_json::Value), String> {
    let body = waverunner_node::admin::get(admin, "/status", timeout)
        .map_err(|e| format!("GET http://{admin}/status: {e}"))?;
    let value: serde_json::Value = serde_json::from_str(&body)
        .map_err(|e| format!("GET http://{admin}/status: not JSON: {e}"))?;
    let view = serde_json::from_value(value.clone())
        .map_err(|e| format!("GET http://{admin}/status: unexpected JSON: {e}"))?;
    Ok((view, value))
}

/// Waits until every running replica of `cf` answers `/status` naming the same leader, and
/// that leader runs and calls itself leader. Returns the leader's id.
pub fn wait_for_leader(cf: &ClusterFile, timeout: Duration) -> Result<u64, String> {
    wait_for_leader_checked(cf, timeout, &mut || Ok(()))
}

fn wait_for_leader_checked(
    cf: &ClusterFile,
    timeout: Duration,
    check: &mut dyn FnMut() -> Result<(), String>,
) -> Result<u64, String> {
    let deadline = Instant::now() + timeout;
    loop {
        check()?;
        let mut why = String::new();
        let mut views = Vec::new();
        for n in cf.nodes.iter().filter(|n| is_running(n)) {
            match fetch_status(n.addresses.admin, STATUS_TIMEOUT.min(timeout)) {
                Ok((v, _)) => views.push((n.id, v)),
                Err(e) => why = format!("replica {} does not answer: {e}", n.id),
            }
        }
        if views.is_empty() && why.is_empty() {
            return Err("no replica of the cluster is running".into());
        }
        if why.is_empty() {
            let leader = views[0].1.leader;
            let agreed = views.iter().all(|(_, v)| v.leader == leader);
            let leads = views
                .iter()
                .any(|(id, v)| *id == leader && v.role == "leader");
            if leader != 0 && agreed && leads {
                return Ok(leader);
            }
            why = views
                .iter()
                .map(|(id, v)| {
                    format!(
                        "replica {id}: {} in term {}, leader {}",
                        v.role, v.term, v.leader
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no leader within {} s: {why}",
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops every replica, deletes the namespaces, veths and bridge, and removes the directory.
/// Keeps the directory (so it can be retried) when the network cannot be removed.
fn teardown(cf: &ClusterFile) -> Result<(), String> {
    // Removed replicas were stopped when they were removed; stop them anyway, in case.
    let all: Vec<&NodeEntry> = cf.nodes.iter().chain(&cf.removed).collect();
    for n in all.iter().copied() {
        if kill_node(n, libc::SIGTERM)? {
            // A replica halted with SIGSTOP (chaos) handles SIGTERM only once continued.
            let _ = kill_node(n, libc::SIGCONT);
        }
    }
    let deadline = Instant::now() + TERM_GRACE;
    for n in all.iter().copied() {
        if !wait_exit(n, deadline.saturating_duration_since(Instant::now())) {
            eprintln!(
                "replica {} (pid {}) ignored SIGTERM for {} s: sending SIGKILL",
                n.id,
                n.pid,
                TERM_GRACE.as_secs()
            );
            kill_node(n, libc::SIGKILL)?;
            if !wait_exit(n, Duration::from_secs(2)) {
                return Err(format!(
                    "replica {} (pid {}) survives SIGKILL (stuck in the kernel?); try `waverunner down` again",
                    n.id, n.pid
                ));
            }
        }
    }
    delete_netns(cf)?;
    match fs::remove_dir_all(&cf.dir) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(format!("cannot remove {}: {e}", cf.dir.display()))
        }
        _ => Ok(()),
    }
}

/// Stops one replica: SIGTERM (and SIGCONT, should it be halted), then SIGKILL after
/// [`TERM_GRACE`]. Returns whether it has exited.
pub(crate) fn stop_node(n: &NodeEntry) -> Result<bool, String> {
    if kill_node(n, libc::SIGTERM)? {
        let _ = kill_node(n, libc::SIGCONT);
    }
    if wait_exit(n, TERM_GRACE) {
        return Ok(true);
    }
    kill_node(n, libc::SIGKILL)?;
    Ok(wait_exit(n, Duration::from_secs(2)))
}

/// Stops the cluster in `dir` and removes everything it created. Nothing to stop is not an
/// error.
pub fn down(dir: &Path) -> Result<(), String> {
    let dir = absolute(dir)?;
    if !ClusterFile::path(&dir).exists() {
        return Ok(());
    }
    teardown(&load(&dir)?)
}

// ---------------------------------------------------------------------------------------------
// Command-line front-ends
// ---------------------------------------------------------------------------------------------

/// Durability on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub enum DurabilityArg {
    /// Acknowledged once in the memory of a majority.
    Memory,
    /// Acknowledged once on the disk of a majority.
    Fsync,
}

/// Read mode on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub enum ReadModeArg {
    /// Reads go through the log.
    Log,
    /// ReadIndex: a heartbeat round confirms leadership.
    #[value(name = "read_index")]
    ReadIndex,
    /// Leader lease.
    Lease,
}

fn parse_nodes(s: &str) -> Result<u64, String> {
    match s.trim() {
        "3" => Ok(3),
        "5" => Ok(5),
        _ => Err(format!("`{s}`: a local cluster has 3 or 5 replicas")),
    }
}

/// Options of `waverunner up`.
#[derive(clap::Args)]
pub struct UpArgs {
    /// Replicas: 3 or 5.
    #[arg(long, default_value = "3", value_parser = parse_nodes)]
    nodes: u64,
    /// memory: acknowledged in a majority's memory; fsync: on a majority's disk.
    #[arg(long, value_enum, default_value = "fsync")]
    durability: DurabilityArg,
    /// How linearizable reads are served.
    #[arg(long, value_enum, default_value = "read_index")]
    read_mode: ReadModeArg,
    /// Cluster directory [default: $WAVERUNNER_DIR or <temp dir>/waverunner-cluster].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Network namespaces per replica (on needs root; auto: on when root).
    #[arg(long, value_enum, default_value = "auto")]
    netns: NetnsChoice,
    /// First port on loopback: replica i uses P+i (raft), P+100+i (client), P+200+i (redis),
    /// P+300+i (memcache), P+400+i (admin).
    #[arg(long, default_value_t = DEFAULT_BASE_PORT)]
    base_port: u16,
    /// Milliseconds per Raft tick.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    tick_ms: u64,
    /// Election timeout in ticks (randomized in [n, 2n)).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=100_000))]
    election_ticks: u32,
    /// Data plane: off, udp, xdp, or one per replica as a comma-separated list (cycled),
    /// e.g. xdp,udp,udp. xdp needs network namespaces (root).
    #[arg(long, default_value = "off")]
    dataplane: String,
    /// Every replica refuses writes that may grow the state while it holds more than this
    /// (bytes, or with a kb/mb/gb suffix as Redis takes it; 0: no limit).
    #[arg(long, default_value = "0", value_parser = parse_memory)]
    maxmemory: u64,
    /// Where each replica runs its RESP and memcached front-end: on its replica loop (run to
    /// completion) or on a thread of its own.
    #[arg(long, value_enum, default_value = "replica")]
    client_loop: ClientLoopArg,
}

/// `--client-loop`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ClientLoopArg {
    /// On the replica loop.
    Replica,
    /// On a thread of its own.
    Thread,
}

/// A byte count as Redis's configuration takes it: a number with an optional `b`, `kb`, `mb`,
/// `gb` (powers of 1024) or `k`, `m`, `g` (powers of 1000) suffix.
pub fn parse_memory(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = match &t[digits.len()..] {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        u => return Err(format!("unknown memory unit {u:?} (use b, kb, mb, gb)")),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("not a byte count: {s:?}"))
}

/// Options of `waverunner down`.
#[derive(clap::Args)]
pub struct DownArgs {
    /// Cluster directory [default: $WAVERUNNER_DIR or <temp dir>/waverunner-cluster].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Options of `waverunner status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// Cluster directory [default: $WAVERUNNER_DIR or <temp dir>/waverunner-cluster].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print every replica's /status document as a JSON array (null for a replica that is down).
    #[arg(long)]
    json: bool,
}

/// Options of `waverunner kv`.
#[derive(clap::Args)]
pub struct KvArgs {
    /// Cluster directory [default: $WAVERUNNER_DIR or <temp dir>/waverunner-cluster].
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    op: KvOp,
}

/// One key-value operation.
#[derive(Subcommand)]
enum KvOp {
    /// Print the value of KEY, or (nil).
    Get { key: String },
    /// Set KEY to VALUE.
    Set { key: String, value: String },
    /// Delete KEY: prints 1 if it existed, else 0.
    Del { key: String },
    /// Add BY (default 1) to the integer at KEY; prints the new value.
    Incr {
        key: String,
        #[arg(allow_negative_numbers = true)]
        by: Option<i64>,
    },
}

fn fail(cmd: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("waverunner {cmd}: {e}");
    ExitCode::FAILURE
}

/// `waverunner up`.
pub fn cmd_up(a: UpArgs) -> ExitCode {
    let opts = UpOptions {
        nodes: a.nodes,
        durability: match a.durability {
            DurabilityArg::Memory => DurabilityMode::Memory,
            DurabilityArg::Fsync => DurabilityMode::Fsync,
        },
        read_mode: match a.read_mode {
            ReadModeArg::Log => ReadModeConfig::Log,
            ReadModeArg::ReadIndex => ReadModeConfig::ReadIndex,
            ReadModeArg::Lease => ReadModeConfig::Lease,
        },
        dir: a.dir.unwrap_or_else(default_dir),
        netns: a.netns,
        base_port: a.base_port,
        tick_ms: a.tick_ms,
        election_ticks: a.election_ticks,
        dataplanes: match parse_dataplanes(&a.dataplane) {
            Ok(d) => d,
            Err(e) => return fail("up", e),
        },
        maxmemory: a.maxmemory,
        client_loop: match a.client_loop {
            ClientLoopArg::Replica => ClientLoopKind::Replica,
            ClientLoopArg::Thread => ClientLoopKind::Thread,
        },
    };
    let cf = match up(&opts) {
        Ok(cf) => cf,
        Err(e) => return fail("up", e),
    };
    let leader = wait_for_leader(&cf, Duration::from_secs(2)).unwrap_or(0);
    let d = dir_flag(&cf.dir);
    for n in &cf.nodes {
        let a = &n.addresses;
        println!(
            "replica {} (pid {}{}): raft {} client {} redis {} memcache {} admin http://{}/status  connect: redis-cli -h {} -p {}{}",
            n.id,
            n.pid,
            n.netns.as_deref().map(|ns| format!(", netns {ns}")).unwrap_or_default(),
            a.raft,
            a.client,
            a.redis,
            a.memcache,
            a.admin,
            a.redis.ip(),
            a.redis.port(),
            if n.id == leader { "  [leader]" } else { "" },
        );
    }
    println!(
        "cluster of {} replicas is up in {} (leader {leader}, durability {}, reads {}, {}).",
        cf.nodes.len(),
        cf.dir.display(),
        mode_name(cf.durability),
        read_mode_name(cf.read_mode),
        match &cf.client_netns {
            Some(ns) => format!(
                "network namespaces on bridge {BRIDGE}; clients namespace: `ip netns exec {ns} …`"
            ),
            None => "loopback".into(),
        }
    );
    println!(
        "next: `waverunner kv{d} set hello world`, `waverunner status{d}`; stop with `waverunner down{d}`"
    );
    ExitCode::SUCCESS
}

fn mode_name(d: DurabilityMode) -> &'static str {
    match d {
        DurabilityMode::Memory => "memory",
        DurabilityMode::Fsync => "fsync",
    }
}

fn read_mode_name(r: ReadModeConfig) -> &'static str {
    match r {
        ReadModeConfig::Log => "log",
        ReadModeConfig::ReadIndex => "read_index",
        ReadModeConfig::Lease => "lease",
    }
}

/// `waverunner down`.
pub fn cmd_down(a: DownArgs) -> ExitCode {
    let dir = match absolute(&a.dir.unwrap_or_else(default_dir)) {
        Ok(d) => d,
        Err(e) => return fail("down", e),
    };
    if !ClusterFile::path(&dir).exists() {
        println!("no cluster in {}: nothing to stop", dir.display());
        return ExitCode::SUCCESS;
    }
    let n = load(&dir).map(|cf| cf.nodes.len()).unwrap_or(0);
    match down(&dir) {
        Ok(()) => {
            println!("stopped {n} replicas and removed {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => fail("down", e),
    }
}

/// Every replica's data plane: hand-off state, the term it was enabled in, enables and
/// disables by reason, and the data plane's counters.
fn dataplane_table(
    cf: &ClusterFile,
    statuses: &[Option<(StatusView, serde_json::Value)>],
) -> String {
    let mut rows = vec![[
        "ID",
        "DATAPLANE",
        "STATE",
        "ENABLED_TERM",
        "ENABLES",
        "DISABLES",
        "HANDLED",
        "PUNTED",
        "DROPPED",
        "RETX_REQ",
        "RETRANSMITTED",
        "DP_REPLIES",
        "HOST_REPLIES",
        "RING_FULL",
        "SHED",
        "HALTS",
    ]
    .map(String::from)];
    for (n, s) in cf.nodes.iter().zip(statuses) {
        let Some((v, _)) = s else { continue };
        let f = &v.fastpath;
        let disables = if f.disables.is_empty() {
            "-".to_string()
        } else {
            f.disables
                .iter()
                .map(|(r, c)| format!("{r}:{c}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        rows.push([
            n.id.to_string(),
            v.dataplane.clone(),
            f.state.clone(),
            f.enabled_term.to_string(),
            f.enables.to_string(),
            disables,
            f.handled.to_string(),
            f.punted.to_string(),
            f.dropped.to_string(),
            f.retx_requests.to_string(),
            f.retransmitted.to_string(),
            f.client_replies.to_string(),
            f.host_replies.to_string(),
            f.ring_full.to_string(),
            f.shed.to_string(),
            f.halts.to_string(),
        ]);
    }
    table(&rows)
}

/// `waverunner status`.
pub fn cmd_status(a: StatusArgs) -> ExitCode {
    let cf = match load(&a.dir.unwrap_or_else(default_dir)) {
        Ok(cf) => cf,
        Err(e) => return fail("status", e),
    };
    let statuses: Vec<Option<(StatusView, serde_json::Value)>> = cf
        .nodes
        .iter()
        .map(|n| fetch_status(n.addresses.admin, STATUS_TIMEOUT).ok())
        .collect();
    let has_leader = statuses.iter().flatten().any(|(v, _)| v.role == "leader");
    if a.json {
        let docs: Vec<serde_json::Value> = statuses
            .iter()
            .map(|s| {
                s.as_ref()
                    .map_or(serde_json::Value::Null, |(_, v)| v.clone())
            })
            .collect();
        match serde_json::to_string_pretty(&docs) {
            Ok(s) => println!("{s}"),
            Err(e) => return fail("status", e),
        }
    } else {
        let mut rows = vec![[
            "ID",
            "ROLE",
            "TERM",
            "LEADER",
            "VOTERS",
            "LEARNERS",
            "COMMIT",
            "APPLIED",
            "LAST",
            "KEYS",
            "DATAPLANE",
            "DURABILITY",
            "REDIS",
            "CLIENT",
            "DIGEST",
        ]
        .map(String::from)];
        for (n, s) in cf.nodes.iter().zip(&statuses) {
            let (redis, client) = (
                n.addresses.redis.to_string(),
                n.addresses.client.to_string(),
            );
            rows.push(match s {
                Some((v, _)) => [
                    n.id.to_string(),
                    v.role.clone(),
                    v.term.to_string(),
                    v.leader.to_string(),
                    id_list(&v.voters),
                    id_list(&v.learners),
                    v.commit_index.to_string(),
                    v.applied_index.to_string(),
                    v.last_index.to_string(),
                    v.keys.to_string(),
                    format!(
                        "{} ({})",
                        v.dataplane,
                        if v.dataplane_enabled {
                            "enabled"
                        } else {
                            "disabled"
                        }
                    ),
                    v.durability.clone(),
                    redis,
                    client,
                    format!("{:016x}", v.digest),
                ],
                None => {
                    let dash = || "-".to_string();
                    [
                        n.id.to_string(),
                        "down".into(),
                        dash(),
                        dash(),
                        dash(),
                        dash(),
                        dash(),
                        dash(),
                        dash(),
                        dash(),
                        dash(),
                        dash(),
                        redis,
                        client,
                        dash(),
                    ]
                }
            });
        }
        for n in &cf.removed {
            let mut row: [String; 15] = std::array::from_fn(|_| "-".to_string());
            row[0] = n.id.to_string();
            row[1] = "removed".into();
            row[12] = n.addresses.redis.to_string();
            row[13] = n.addresses.client.to_string();
            rows.push(row);
        }
        print!("{}", table(&rows));
        let accelerated = statuses.iter().flatten().any(|(v, _)| v.dataplane != "off");
        if accelerated {
            println!();
            print!("{}", dataplane_table(&cf, &statuses));
        }
        if !has_leader {
            eprintln!(
                "no replica is leader (an election may be in progress; look again in a moment)"
            );
        }
    }
    if has_leader {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Node ids as `1,2,3`, or `-` for none.
fn id_list(ids: &[u64]) -> String {
    if ids.is_empty() {
        return "-".into();
    }
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// Left-aligned columns, two spaces apart.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut width = [0; N];
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `waverunner kv`.
pub fn cmd_kv(a: KvArgs) -> ExitCode {
    let cf = match load(&a.dir.unwrap_or_else(default_dir)) {
        Ok(cf) => cf,
        Err(e) => return fail("kv", e),
    };
    let mut c = match waverunner_client::Client::connect(&cf.client_addrs()) {
        Ok(c) => c,
        Err(e) => return fail("kv", e),
    };
    let out = match &a.op {
        KvOp::Get { key } => c.get(key.as_bytes()).map(|v| match v {
            Some(v) => v,
            None => b"(nil)".to_vec(),
        }),
        KvOp::Set { key, value } => c
            .set(key.as_bytes(), value.as_bytes())
            .map(|()| b"OK".to_vec()),
        KvOp::Del { key } => c.del(key.as_bytes()).map(|existed| {
            if existed {
                b"1".to_vec()
            } else {
                b"0".to_vec()
            }
        }),
        KvOp::Incr { key, by } => c
            .incr(key.as_bytes(), by.unwrap_or(1))
            .map(|n| n.to_string().into_bytes()),
    };
    match out {
        Ok(mut bytes) => {
            bytes.push(b'\n');
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(&bytes).and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail("kv", e),
            }
        }
        Err(waverunner_client::Error::Timeout) => fail(
            "kv",
            format!(
                "no replica answered in time (the operation may or may not have happened); is the cluster up? try `waverunner status{}`",
                dir_flag(&cf.dir)
            ),
        ),
        Err(e) => fail("kv", e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("wr-unit-{name}-{}", std::process::id()))
    }

    #[test]
    fn loopback_ports_follow_the_base_port() {
        let a = loopback_addrs(17000, 2).unwrap();
        assert_eq!(a.raft, "127.0.0.1:17002".parse().unwrap());
        assert_eq!(a.client, "127.0.0.1:17102".parse().unwrap());
        assert_eq!(a.redis, "127.0.0.1:17202".parse().unwrap());
        assert_eq!(a.memcache, "127.0.0.1:17302".parse().unwrap());
        assert_eq!(a.admin, "127.0.0.1:17402".parse().unwrap());
        // Five replicas never collide, across the five kinds of port.
        let mut all: Vec<SocketAddr> = (1..=5)
            .flat_map(|id| {
                let a = loopback_addrs(30000, id).unwrap();
                [a.raft, a.client, a.redis, a.memcache, a.admin]
            })
            .collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 25);
        assert!(loopback_addrs(65535 - 405, 5).is_ok());
        let e = loopback_addrs(65535 - 404, 5).unwrap_err();
        assert!(e.contains("too high"), "{e}");
    }

    #[test]
    fn netns_addresses_use_standard_ports_on_private_ips() {
        let a = netns_addrs(3);
        assert_eq!(a.raft, "10.77.0.13:7000".parse().unwrap());
        assert_eq!(a.client, "10.77.0.13:7100".parse().unwrap());
        assert_eq!(a.redis, "10.77.0.13:6379".parse().unwrap());
        assert_eq!(a.memcache, "10.77.0.13:11211".parse().unwrap());
        assert_eq!(a.admin, "10.77.0.13:8080".parse().unwrap());
        assert_eq!(netns_name(3), "wr-n3");
        for name in [netns_name(5), CLIENT_NETNS.into(), BRIDGE.into()] {
            assert!(name.starts_with(NAME_PREFIX) && name.len() < 16, "{name}");
        }
    }

    #[test]
    fn every_generated_config_parses_and_lists_the_others_as_peers() {
        for n in [3, 5] {
            let mut opts = UpOptions::new("/tmp/x");
            opts.nodes = n;
            opts.durability = DurabilityMode::Memory;
            opts.read_mode = ReadModeConfig::Lease;
            opts.tick_ms = 5;
            opts.election_ticks = 20;
            for addrs in [
                (1..=n)
                    .map(|id| loopback_addrs(17000, id).unwrap())
                    .collect::<Vec<_>>(),
                (1..=n).map(netns_addrs).collect(),
            ] {
                let cfgs = node_configs(&opts, Path::new("/tmp/x"), &addrs);
                assert_eq!(cfgs.len(), n as usize);
                for (i, c) in cfgs.iter().enumerate() {
                    let parsed = NodeConfig::from_toml(&c.to_toml()).unwrap();
                    assert_eq!(&parsed, c);
                    assert_eq!(parsed.id, i as u64 + 1);
                    assert_eq!(parsed.voters(), (1..=n).collect::<Vec<_>>());
                    assert_eq!(parsed.peers.len(), n as usize - 1);
                    for p in &parsed.peers {
                        let theirs = &addrs[p.id as usize - 1];
                        assert_eq!(p.raft, theirs.raft);
                        assert_eq!(p.client, Some(theirs.client));
                    }
                    assert_eq!(parsed.listen.raft, addrs[i].raft);
                    assert_eq!(parsed.listen.redis, Some(addrs[i].redis));
                    assert_eq!(
                        parsed.data_dir,
                        PathBuf::from(format!("/tmp/x/n{}/data", i + 1))
                    );
                    assert_eq!(parsed.durability, DurabilityMode::Memory);
                    assert_eq!(parsed.read_mode, ReadModeConfig::Lease);
                    assert_eq!((parsed.tick_ms, parsed.election_ticks), (5, 20));
                }
            }
        }
    }

    #[test]
    fn generated_configs_keep_the_replicas_own_defaults() {
        let minimal = "id = 1\ndata_dir = \"/d\"\n[listen]\nraft = \"127.0.0.1:1\"\nclient = \"127.0.0.1:2\"\n";
        let d = NodeConfig::from_toml(minimal).unwrap();
        let opts = UpOptions::new("/tmp/x");
        let c = &node_configs(
            &opts,
            Path::new("/tmp/x"),
            &[loopback_addrs(17000, 1).unwrap()],
        )[0];
        assert_eq!(
            (c.heartbeat_ticks, c.snapshot_entries, c.request_timeout_ms),
            (d.heartbeat_ticks, d.snapshot_entries, d.request_timeout_ms)
        );
        assert_eq!(c.snapshot_bytes, d.snapshot_bytes);
        assert_eq!(
            (c.max_value_bytes, c.max_connections),
            (d.max_value_bytes, d.max_connections)
        );
        assert_eq!((c.tick_ms, c.election_ticks), (d.tick_ms, d.election_ticks));
        assert_eq!((c.durability, c.read_mode), (d.durability, d.read_mode));
    }

    #[test]
    fn cluster_file_round_trips() {
        let dir = tmp("roundtrip");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let cf = ClusterFile {
            dir: dir.clone(),
            mode: NetMode::Netns,
            bridge: Some(BRIDGE.into()),
            client_netns: Some(CLIENT_NETNS.into()),
            exe: "/usr/bin/waverunner".into(),
            durability: DurabilityMode::Memory,
            read_mode: ReadModeConfig::ReadIndex,
            nodes: (1..=3)
                .map(|id| NodeEntry {
                    id,
                    pid: 1000 + id as u32,
                    start_time: 5000 + id,
                    netns: Some(netns_name(id)),
                    addresses: netns_addrs(id),
                    data_dir: node_dir(&dir, id).join("data"),
                    config: node_dir(&dir, id).join("node.toml"),
                    log: node_dir(&dir, id).join("node.log"),
                    joined: id == 3,
                })
                .collect(),
            removed: vec![],
        };
        cf.save().unwrap();
        let back = load(&dir).unwrap();
        assert_eq!(back, cf);
        assert_eq!(back.client_addrs()[1], "10.77.0.12:7100".parse().unwrap());
        assert_eq!(back.nodes.len(), 3);
        assert_eq!(
            back.nodes[2].addresses.admin,
            "10.77.0.13:8080".parse().unwrap()
        );
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(ClusterFile::path(&dir)).unwrap()).unwrap();
        assert_eq!(json["mode"], "netns");
        assert_eq!(json["nodes"][0]["netns"], "wr-n1");
        assert_eq!(json["nodes"][0]["addresses"]["redis"], "10.77.0.11:6379");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_or_foreign_cluster_files_say_what_to_do() {
        let dir = tmp("missing");
        let _ = fs::remove_dir_all(&dir);
        let e = load(&dir).unwrap_err();
        assert!(e.contains("waverunner up"), "{e}");
        assert!(
            down(&dir).is_ok(),
            "down with nothing there is not an error"
        );
        fs::create_dir_all(&dir).unwrap();
        fs::write(ClusterFile::path(&dir), "{").unwrap();
        assert!(load(&dir).unwrap_err().contains("not a cluster file"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn up_refuses_a_directory_that_is_not_a_cluster() {
        let dir = tmp("foreign");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("precious.txt"), "do not delete").unwrap();
        let mut opts = UpOptions::new(&dir);
        opts.netns = NetnsChoice::Off;
        let e = up(&opts).unwrap_err();
        assert!(e.contains("not a cluster directory"), "{e}");
        assert!(dir.join("precious.txt").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_up_shows_the_logs_and_removes_everything() {
        // In a unit test the "waverunner" executable is this test harness, which refuses
        // `node --config …`: every replica exits at once, as a broken replica would.
        let dir = tmp("failed-up");
        let _ = fs::remove_dir_all(&dir);
        let mut opts = UpOptions::new(&dir);
        opts.netns = NetnsChoice::Off;
        for base in (0..20).map(|k| 25_000 + 500 * k + (std::process::id() % 97) as u16) {
            opts.base_port = base;
            let e = up(&opts).unwrap_err();
            if e.contains("cannot use") {
                continue; // a port of this range is taken: try another
            }
            assert!(e.contains("exited during start-up"), "{e}");
            assert!(
                e.contains("--- replica 1: last"),
                "the error shows the log tails: {e}"
            );
            assert!(e.contains("has been stopped and removed"), "{e}");
            assert!(!dir.exists(), "a failed up leaves nothing behind");
            return;
        }
        panic!("no free port range for the test");
    }

    #[test]
    fn only_replica_processes_are_ever_signalled() {
        // Our own pid is alive but is no replica: it must look dead and never be signalled.
        let me = NodeEntry {
            id: 1,
            pid: std::process::id(),
            start_time: 0,
            netns: None,
            addresses: loopback_addrs(17000, 1).unwrap(),
            data_dir: "/nonexistent/data".into(),
            config: "/nonexistent/node.toml".into(),
            log: "/nonexistent/node.log".into(),
            joined: false,
        };
        assert!(!is_running(&me));
        assert_eq!(kill_node(&me, libc::SIGKILL), Ok(false));
        assert!(!is_node_process(0, Path::new("/x")));
        assert!(!is_node_process(u32::MAX, Path::new("/x")));
    }

    #[test]
    fn tables_align_columns() {
        let rows = vec![
            ["ID".to_string(), "ROLE".to_string()],
            ["10".to_string(), "leader".to_string()],
        ];
        assert_eq!(table(&rows), "ID  ROLE\n10  leader\n");
    }
}
