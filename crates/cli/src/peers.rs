//! `waverunner bench peers` (docs/bench.md): Redis 7 (a primary and two replicas, async and
//! with `WAIT 1`), etcd (three members) and waverunner (`off`, `udp`, `xdp`) in one run, on the
//! same namespace layout (one namespace per server, the clients in `wr-client`), measured the
//! same way: redis-benchmark SET and GET at 50 clients with pipeline 1 and 16, 50 closed-loop
//! writers whose every reply means what the system promises, machine-wide CPU per write, and
//! one writer's latency. The measuring parts are `waverunner_bench::peers`.
//!
//! The peers run inside the namespaces of a waverunner `off` cluster (idle meanwhile; it is
//! measured right after them), then `udp` and `xdp` clusters of their own. Needs root.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use waverunner_bench::peers::{self, LoopResult, SystemResult, WriteOp, MANY};
use waverunner_bench::scale::{Disruption, Reply, Resp};
use waverunner_bench::{cpu, native};
use waverunner_netns as netns;
use waverunner_node::config::{ClientLoopKind, DataPlaneKind, DurabilityMode};

use crate::cluster::{self, ClusterFile, NetnsChoice, UpOptions, CLIENT_NETNS};

/// Options of `waverunner bench peers`.
#[derive(clap::Args)]
pub struct PeersArgs {
    /// Waverunner data planes to measure, in this order (comma-separated: off, udp, xdp; a
    /// `+thread` suffix runs the front-end on its own thread instead of the replica loop).
    #[arg(long, default_value = "off,udp,xdp,xdp+thread")]
    modes: String,
    /// Seconds of each closed loop (50 writers, then 1).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=120))]
    secs: u64,
    /// Requests of each redis-benchmark run at pipeline 1 (four times as many at 16).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1_000..=10_000_000))]
    requests: u64,
    /// Skip the peers (Redis, etcd): waverunner only.
    #[arg(long)]
    no_peers: bool,
    /// Also write the report (Markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Draw the throughput plot (PNG) here; its CSV goes beside it.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Working directory [default: <temp dir>/waverunner-bench-peers].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Redis's port in each namespace (waverunner's own RESP port there is 6379).
const REDIS_PORT: u16 = 6380;
/// etcd's client and peer ports in each namespace.
const ETCD_CLIENT_PORT: u16 = 2379;
const ETCD_PEER_PORT: u16 = 2380;
/// Writes of each closed loop at most (the time bound usually ends it first).
const MAX_OPS: u64 = 2_000_000;
/// Unmeasured writes before each system's measurements.
const WARMUP: Duration = Duration::from_secs(1);

pub fn run(a: &PeersArgs) -> Result<(), String> {
    if !netns::is_root() {
        return Err(
            "needs root: it creates network namespaces (and installs the peers with apt \
                    when missing)"
                .into(),
        );
    }
    let mut modes = Vec::new();
    for m in a.modes.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let (plane, client_loop) = match m.strip_suffix("+thread") {
            Some(p) => (p, ClientLoopKind::Thread),
            None => (m, ClientLoopKind::Replica),
        };
        let (_, kind) = crate::bench::parse_modes(plane)?
            .pop()
            .ok_or_else(|| format!("no data plane in mode `{m}`"))?;
        modes.push((m.to_string(), kind, client_loop));
    }
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("waverunner-bench-peers"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let bench = crate::bench::apt_binary("redis-benchmark", "redis-tools", "bench peers")?;
    let (redis, etcd) = if a.no_peers {
        (None, None)
    } else {
        (
            crate::bench::apt_binary("redis-server", "redis-server", "bench peers").ok(),
            crate::bench::apt_binary("etcd", "etcd-server", "bench peers").ok(),
        )
    };
    let _lock = crate::bench::cluster_lock()?;
    let t0 = Instant::now();
    let mut rows: Vec<SystemResult> = Vec::new();
    for (i, (name, kind, client_loop)) in modes.iter().enumerate() {
        let cdir = dir.join(format!("cluster-{}", name.replace('+', "-")));
        cluster::down(&cdir).map_err(|e| format!("an old cluster in {}: {e}", cdir.display()))?;
        let mut opts = UpOptions::new(&cdir);
        opts.durability = DurabilityMode::Memory;
        opts.netns = NetnsChoice::On;
        opts.dataplanes = vec![*kind];
        opts.client_loop = *client_loop;
        eprintln!("bench peers: waverunner {name}: up …");
        let _down = crate::bench::Down(cdir.clone());
        let cf = cluster::up(&opts).map_err(|e| format!("`up` with data plane {name}: {e}"))?;
        // The peers run in the first cluster's namespaces, before it is measured.
        if i == 0 {
            if let Some(bin) = &redis {
                rows.extend(measure_redis(bin, &bench, &cf, &dir, a));
            }
            if let Some(bin) = &etcd {
                rows.push(measure_etcd(bin, &cf, &dir, a));
            }
        }
        rows.push(measure_waverunner(name, *kind, &bench, &cf, a));
    }
    if redis.is_none() && !a.no_peers {
        eprintln!("bench peers: WARNING: Redis was not measured (no redis-server)");
    }
    if etcd.is_none() && !a.no_peers {
        eprintln!("bench peers: WARNING: etcd was not measured (no etcd)");
    }
    let report = render(&rows, a, t0.elapsed());
    println!("{report}");
    if let Some(out) = &a.out {
        std::fs::write(out, &report).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    if let Some(png) = &a.plot {
        let csv = png.with_extension("csv");
        std::fs::write(&csv, peers::render_csv(&rows))
            .map_err(|e| format!("{}: {e}", csv.display()))?;
        crate::timeline::plot_with("plot_peers.py", &csv, png, &[])?;
        eprintln!("bench peers: plot {}", png.display());
    }
    Ok(())
}

fn render(rows: &[SystemResult], a: &PeersArgs, took: Duration) -> String {
    let mut s = String::from("# waverunner bench peers\n\n");
    s += &format!(
        "command: `waverunner bench peers --modes {} --secs {} --requests {}`; took {:.0} s. \
         Servers in namespaces wr-n1..3 (10.77.0.11–13) on one bridge, clients in {CLIENT_NETNS}; \
         {}-byte values; redis-benchmark `-c {MANY} -d {} -t set` and `-t get` each with `-P 1` ({} \
         requests) and `-P 16` ({}); closed loops of {} s. Machine: {} CPUs.\n\n",
        a.modes,
        a.secs,
        a.requests,
        took.as_secs_f64(),
        peers::VALUE_BYTES,
        peers::VALUE_BYTES,
        a.requests,
        a.requests * PIPELINED_TIMES,
        a.secs,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    s += &peers::render_table(rows);
    let native = peers::render_native_table(rows);
    if !native.is_empty() {
        s += "\nWaverunner's native clients (UDP, one datagram per request and per reply: what a \
              data plane answers itself), each reply committed on a majority:\n\n";
        s += &native;
    }
    s += "\nTargets (issue 13):\n\n";
    s += &peers::render_verdicts(&peers::verdicts(rows));
    s += "- XDP replication p50 ≤ 3× the XDP echo floor: measured by `waverunner bench \
          replication`, not here.\n";
    let notes: Vec<String> = rows
        .iter()
        .flat_map(|r| r.notes.iter().map(move |n| format!("- {}: {n}", r.name)))
        .collect();
    if !notes.is_empty() {
        s += "\nNotes:\n\n";
        s += &notes.join("\n");
        s += "\n";
    }
    s
}

/// A server process in a namespace: SIGTERM, then SIGKILL, when dropped.
struct Proc {
    child: Child,
    what: String,
}

impl Proc {
    fn start(ns: &str, bin: &Path, args: &[String], log: &Path) -> Result<Proc, String> {
        let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {} in {ns}: {e}", bin.display()))?;
        Ok(Proc {
            child,
            what: format!("{} in {ns}", bin.display()),
        })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "bench peers: {} did not stop on SIGTERM: SIGKILL",
            self.what
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ns_of(cf: &ClusterFile, i: usize) -> Result<(String, Ipv4Addr), String> {
    let n = cf
        .nodes
        .get(i)
        .ok_or("the cluster has fewer than 3 replicas")?;
    let ns = n.netns.clone().ok_or("the cluster is not in namespaces")?;
    Ok((ns, cluster::netns_ip(n.id)))
}

/// Polls `f` every 100 ms until it is true, for at most `timeout`.
fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("{what}: not within {:.0} s", timeout.as_secs_f64()))
}

fn in_client_ns() -> Result<(), String> {
    netns::enter(CLIENT_NETNS)
}

/// A closed loop from the clients' namespace, with the machine's CPU over it.
fn closed(
    addr: SocketAddr,
    op: WriteOp,
    clients: usize,
    secs: u64,
) -> (Result<LoopResult, String>, Option<f64>) {
    let c0 = cpu::machine().ok();
    let r = peers::closed_loop(
        addr,
        op,
        clients,
        Duration::from_secs(secs),
        MAX_OPS,
        &in_client_ns,
    );
    let c1 = cpu::machine().ok();
    let cpu = r
        .as_ref()
        .ok()
        .and_then(|r| cpu::machine_us_per_op(c0, c1, r.ops));
    (r, cpu)
}

/// The closed loops of one system into `row`: a warm-up, 50 writers, 1 writer.
fn loops(row: &mut SystemResult, addr: SocketAddr, op: WriteOp, secs: u64) {
    row.op = Some(op);
    let _ = peers::closed_loop(addr, op, MANY, WARMUP, MAX_OPS, &in_client_ns);
    eprintln!(
        "bench peers: {}: {MANY} closed-loop writers for {secs} s …",
        row.name
    );
    let (many, cpu) = closed(addr, op, MANY, secs);
    match many {
        Ok(m) => {
            if let Some(e) = &m.first_error {
                row.notes
                    .push(format!("{} of {MANY} writers failed: {e}", m.errors));
            }
            eprintln!(
                "bench peers: {}: {:.0} writes/s, p50 {} µs",
                row.name,
                m.rate(),
                m.latency.map_or(0, |q| q.p50 / 1_000)
            );
            row.many = Some(m);
            row.cpu_us_per_write = cpu;
        }
        Err(e) => row.notes.push(format!("{MANY} writers: {e}")),
    }
    eprintln!("bench peers: {}: 1 writer for {secs} s …", row.name);
    match closed(addr, op, 1, secs).0 {
        Ok(o) => {
            if let Some(e) = &o.first_error {
                row.notes.push(format!("the single writer failed: {e}"));
            }
            row.one = Some(o);
        }
        Err(e) => row.notes.push(format!("1 writer: {e}")),
    }
}

/// [`MANY`] native clients writing to the leader's client port for `secs` (after a second
/// unmeasured), driven by a thread per CPU, with the machine's CPU over it; then one native
/// client for `secs`.
fn native_loop(row: &mut SystemResult, cf: &ClusterFile, secs: u64) {
    let addr = match cluster::wait_for_leader(cf, Duration::from_secs(10))
        .ok()
        .and_then(|l| cf.node(l))
    {
        Some(n) => n.addresses.client,
        None => {
            row.notes.push("native writers: no leader".into());
            return;
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run = |clients: usize, d: Duration| {
        native::closed_loop(addr, clients, threads, d, MAX_OPS, &in_client_ns)
    };
    let _ = run(MANY, WARMUP);
    for clients in [MANY, 1] {
        eprintln!(
            "bench peers: {}: {clients} native writer(s) for {secs} s …",
            row.name
        );
        let c0 = cpu::machine().ok();
        let r = run(clients, Duration::from_secs(secs));
        let c1 = cpu::machine().ok();
        let (r, x) = match r {
            Ok(r) => r,
            Err(e) => {
                row.notes.push(format!("{clients} native writer(s): {e}"));
                continue;
            }
        };
        eprintln!(
            "bench peers: {}: {:.0} native writes/s, p50 {} µs ({} busy, {} sent again)",
            row.name,
            r.rate(),
            r.latency.map_or(0, |q| q.p50 / 1_000),
            x.busy,
            x.resent
        );
        if let Some(e) = &r.first_error {
            row.notes.push(format!(
                "{} of {clients} native writers failed: {e}",
                r.errors
            ));
        }
        if x != native::NativeExtra::default() {
            row.notes.push(format!(
                "{clients} native writer(s): {} busy replies (sent again after {} ms), {} \
                 requests sent again after {} ms unanswered",
                x.busy,
                native::BUSY_BACKOFF.as_millis(),
                x.resent,
                native::RESEND_AFTER.as_millis()
            ));
        }
        if clients == 1 {
            row.native_one = Some(r);
        } else {
            row.native_cpu_us = cpu::machine_us_per_op(c0, c1, r.ops);
            row.native = Some(r);
        }
    }
}

/// redis-benchmark's requests with pipeline 16, in multiples of `--requests` (those with
/// pipeline 1): enough for the machine's CPU time over them to be read to a few per cent.
const PIPELINED_TIMES: u64 = 8;

/// redis-benchmark SET and GET at 50 clients, pipeline 1 and 16, from the clients' namespace;
/// each test on its own, so that the machine's CPU over the pipelined SETs is theirs alone.
fn redis_benchmark(row: &mut SystemResult, bench: &Path, addr: SocketAddr, requests: u64) {
    for (pipeline, n) in [(1u64, requests), (16, requests * PIPELINED_TIMES)] {
        eprintln!(
            "bench peers: {}: redis-benchmark SET, GET, pipeline {pipeline} …",
            row.name
        );
        for test in ["SET", "GET"] {
            let c0 = cpu::machine().ok();
            let out = Command::new("ip")
                .args(["netns", "exec", CLIENT_NETNS])
                .arg(bench)
                .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
                .args(["-t", &test.to_lowercase(), "-c", &MANY.to_string(), "-q"])
                .args(["-d", &peers::VALUE_BYTES.to_string()])
                .args(["-n", &n.to_string(), "-P", &pipeline.to_string()])
                .stdin(Stdio::null())
                .output();
            let c1 = cpu::machine().ok();
            let text = match out {
                Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
                Ok(o) => {
                    row.notes.push(format!(
                        "redis-benchmark {test} -P {pipeline} failed ({}): {}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr).trim()
                    ));
                    continue;
                }
                Err(e) => {
                    row.notes.push(format!("cannot run redis-benchmark: {e}"));
                    return;
                }
            };
            let line = peers::parse_redis_benchmark(&text)
                .into_iter()
                .find(|l| l.test == test);
            if line.is_none() {
                row.notes.push(format!(
                    "redis-benchmark {test} -P {pipeline} printed no result: {}",
                    text.trim()
                ));
            }
            match (test, pipeline) {
                ("SET", 1) => row.set_p1 = line,
                ("GET", 1) => row.get_p1 = line,
                ("SET", _) => {
                    row.cpu_us_per_set_p16 = line
                        .as_ref()
                        .and_then(|_| cpu::machine_us_per_op(c0, c1, n));
                    row.set_p16 = line;
                }
                _ => row.get_p16 = line,
            }
        }
    }
}

fn measure_redis(
    bin: &Path,
    bench: &Path,
    cf: &ClusterFile,
    dir: &Path,
    a: &PeersArgs,
) -> Vec<SystemResult> {
    let mut async_row = SystemResult {
        name: peers::REDIS_ASYNC.into(),
        ..Default::default()
    };
    let mut wait_row = SystemResult {
        name: peers::REDIS_WAIT.into(),
        ..Default::default()
    };
    let started = (|| -> Result<(Vec<Proc>, SocketAddr), String> {
        let (_, primary_ip) = ns_of(cf, 0)?;
        let mut procs = Vec::new();
        for i in 0..3 {
            let (ns, ip) = ns_of(cf, i)?;
            let d = dir.join(format!("redis-{}", i + 1));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            let mut args: Vec<String> = [
                "--port",
                &REDIS_PORT.to_string(),
                "--bind",
                &ip.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--dir",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.push(d.display().to_string());
            if i > 0 {
                args.extend([
                    "--replicaof".to_string(),
                    primary_ip.to_string(),
                    REDIS_PORT.to_string(),
                ]);
            }
            procs.push(Proc::start(&ns, bin, &args, &d.join("redis.log"))?);
        }
        let addr = SocketAddr::V4(SocketAddrV4::new(primary_ip, REDIS_PORT));
        wait_for(
            "Redis primary with 2 replicas online",
            Duration::from_secs(20),
            || {
                Resp::connect(addr)
                    .and_then(|mut c| c.call(&[b"INFO", b"replication"]))
                    .is_ok_and(|r| match r {
                        Reply::Bulk(Some(b)) => {
                            let t = String::from_utf8_lossy(&b);
                            t.contains("connected_slaves:2")
                                && t.matches("state=online").count() == 2
                        }
                        _ => false,
                    })
            },
        )?;
        Ok((procs, addr))
    })();
    let (procs, addr) = match started {
        Ok(x) => x,
        Err(e) => {
            async_row.notes.push(format!("not started: {e}"));
            wait_row.notes.push(format!("not started: {e}"));
            return vec![async_row, wait_row];
        }
    };
    redis_benchmark(&mut async_row, bench, addr, a.requests);
    loops(&mut async_row, addr, WriteOp::Set, a.secs);
    loops(&mut wait_row, addr, WriteOp::SetWait, a.secs);
    drop(procs);
    vec![async_row, wait_row]
}

fn measure_etcd(bin: &Path, cf: &ClusterFile, dir: &Path, a: &PeersArgs) -> SystemResult {
    let mut row = SystemResult {
        name: peers::ETCD.into(),
        ..Default::default()
    };
    let started = (|| -> Result<(Vec<Proc>, SocketAddr), String> {
        let members: Vec<(String, Ipv4Addr)> =
            (0..3).map(|i| ns_of(cf, i)).collect::<Result<_, _>>()?;
        let initial = members
            .iter()
            .enumerate()
            .map(|(i, (_, ip))| format!("e{}=http://{ip}:{ETCD_PEER_PORT}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut procs = Vec::new();
        for (i, (ns, ip)) in members.iter().enumerate() {
            let d = dir.join(format!("etcd-{}", i + 1));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            let client = format!("http://{ip}:{ETCD_CLIENT_PORT}");
            let peer = format!("http://{ip}:{ETCD_PEER_PORT}");
            let args: Vec<String> = vec![
                "--name".into(),
                format!("e{}", i + 1),
                "--data-dir".into(),
                d.join("data").display().to_string(),
                "--listen-client-urls".into(),
                client.clone(),
                "--advertise-client-urls".into(),
                client,
                "--listen-peer-urls".into(),
                peer.clone(),
                "--initial-advertise-peer-urls".into(),
                peer,
                "--initial-cluster".into(),
                initial.clone(),
                "--initial-cluster-token".into(),
                "waverunner-bench-peers".into(),
                "--initial-cluster-state".into(),
                "new".into(),
            ];
            procs.push(Proc::start(ns, bin, &args, &d.join("etcd.log"))?);
        }
        let addrs: Vec<SocketAddr> = members
            .iter()
            .map(|(_, ip)| SocketAddr::V4(SocketAddrV4::new(*ip, ETCD_CLIENT_PORT)))
            .collect();
        let mut leader = None;
        wait_for(
            "etcd members up with a leader",
            Duration::from_secs(30),
            || {
                leader = etcd_leader(&addrs);
                leader.is_some()
            },
        )?;
        Ok((procs, leader.expect("found")))
    })();
    let (procs, addr) = match started {
        Ok(x) => x,
        Err(e) => {
            row.notes.push(format!("not started: {e}"));
            return row;
        }
    };
    row.notes.push(format!(
        "writes go to the leader ({addr}) through etcd's HTTP/JSON gateway (`/v3/kv/put`, one \
         request per write on keep-alive connections), not gRPC; data directory on this \
         machine's disk, fsync as etcd does"
    ));
    loops(&mut row, addr, WriteOp::EtcdPut, a.secs);
    drop(procs);
    row
}

/// The client address of the etcd member that is the leader, once one is.
fn etcd_leader(addrs: &[SocketAddr]) -> Option<SocketAddr> {
    for &a in addrs {
        let Ok(mut c) = peers::Etcd::connect(a) else {
            continue;
        };
        let Ok((200, body)) = c.post("/v3/maintenance/status", "{}") else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
        let me = v["header"]["member_id"].as_str();
        let leader = v["leader"].as_str();
        if me.is_some() && me == leader {
            return Some(a);
        }
    }
    None
}

fn measure_waverunner(
    name: &str,
    kind: DataPlaneKind,
    bench: &Path,
    cf: &ClusterFile,
    a: &PeersArgs,
) -> SystemResult {
    let mut row = SystemResult {
        name: peers::waverunner(name),
        ..Default::default()
    };
    let addr = (|| -> Result<SocketAddr, String> {
        if kind != DataPlaneKind::Off {
            crate::bench::wait_enabled(cf, Duration::from_secs(20))?;
        }
        let leader = cluster::wait_for_leader(cf, Duration::from_secs(10))?;
        Ok(cf
            .node(leader)
            .ok_or("the leader is not in the cluster file")?
            .addresses
            .redis)
    })();
    let addr = match addr {
        Ok(a) => a,
        Err(e) => {
            row.notes.push(format!("not measured: {e}"));
            return row;
        }
    };
    let c0 = crate::bench::counts(cf);
    redis_benchmark(&mut row, bench, addr, a.requests);
    loops(&mut row, addr, WriteOp::Set, a.secs);
    native_loop(&mut row, cf, a.secs);
    let d = Disruption::between(&c0, &crate::bench::counts(cf));
    row.notes.push(format!(
        "while measured: term +{}, {} elections, {} data-plane hand-offs (summed over the \
         replicas)",
        d.terms, d.elections, d.handoffs
    ));
    row
}
