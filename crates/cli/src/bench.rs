//! `waverunner bench replication`: the replication benchmark of DESIGN §6.
//!
//! First the floor (`waverunner_bench::floor`): the round trip of a 50-byte UDP datagram
//! between two network namespaces on a bridge, answered from XDP and from a user-space socket.
//! Then, for each data plane of `--modes`, a 3-replica namespace cluster (durability `memory`)
//! and an open-loop sweep of 50-byte SETs from the clients' namespace to the leader, one offered
//! rate after the other, until throughput stops growing or more than 1% of the requests fail.
//! Per rate it records the client's end-to-end latency, the leader's replication latency (the
//! difference of its `/status` histogram `replication_latency_ns` before and after), and CPU
//! time per committed entry: the leader process's (`/proc/<pid>/stat`) and the whole machine's
//! (`/proc/stat`, softirq — where XDP runs — included).
//!
//! Every run is bounded: a rate runs at most `--duration-ms` (and at most 1 M requests), the
//! floor at most 20 000 round trips and 10 s per echo. Clusters and namespaces are removed on
//! success, error and panic (drop guards).
//!
//! `waverunner bench fanout` is `waverunner_bench::fanout`; `waverunner bench scale` (millions
//! of keys against redis-server) is the last part of this file.

use std::cell::Cell;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use waverunner_bench::floor::{self, Floor, FloorOptions};
use waverunner_bench::report::{self, ModeResult, Outcome, Row};
use waverunner_bench::scale::{self, Counts, Disruption, SizeResult, Snapshot};
use waverunner_bench::{cpu, stats, sweep};
use waverunner_client::load::{open_loop, Workload};
use waverunner_kv::{Cond, Expiry, Op};
use waverunner_netns as netns;
use waverunner_node::config::{DataPlaneKind, DurabilityMode};

use crate::cluster::{self, ClusterFile, NetnsChoice, StatusView, UpOptions};

/// Options of `waverunner bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(clap::Subcommand)]
enum BenchWhat {
    /// Replication and end-to-end latency, throughput and CPU per write for each data plane,
    /// against the XDP echo floor (DESIGN §6). Needs root.
    Replication(ReplicationArgs),
    /// Fan-out from XDP to every follower: multicast + XDP_TX, devmap BPF_F_BROADCAST, TC
    /// bpf_clone_redirect, side by side (docs/fanout.md). Needs root.
    Fanout(FanoutArgs),
    /// Millions of keys in a loopback cluster against redis-server: load rate, memory per
    /// key, idle CPU, elections, write latency during a snapshot, snapshot and catch-up
    /// speed (docs/bench.md).
    Scale(ScaleArgs),
    /// Redis 7 (async and SET + WAIT 1), etcd and waverunner off/udp/xdp side by side on the
    /// same namespace layout: redis-benchmark, closed loops of majority-acknowledged writes,
    /// CPU per write, one writer's latency (docs/bench.md). Needs root.
    Peers(crate::peers::PeersArgs),
    /// The RESP front-end's event mechanism alone, epoll (mio) against io_uring, without
    /// replication, on a namespace pair (docs/bench.md). Needs root.
    Frontend(crate::frontend::FrontendArgs),
}

/// Options of `waverunner bench scale`.
#[derive(clap::Args)]
struct ScaleArgs {
    /// Key counts to run, in this order (comma-separated; `k` = ×1000, `M` = ×1 000 000).
    #[arg(long, default_value = scale::DEFAULT_KEYS)]
    keys: String,
    /// Length of the idle window, in seconds.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    idle_secs: u64,
    /// Length of the write-latency measurement outside a snapshot, in seconds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    latency_secs: u64,
    /// Loader connections, each pipelining 256 SETs per write (the same for Redis).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    connections: u64,
    /// Also write the report (Markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Cluster directory [default: <temp dir>/waverunner-bench-scale]; Redis runs in DIR-redis.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Options of `waverunner bench fanout` (see `waverunner_bench::fanout`).
#[derive(clap::Args)]
struct FanoutArgs {
    /// Latency samples per option.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    samples: u64,
    /// Longest latency measurement per option, in milliseconds.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    latency_ms: u64,
    /// Offered rate of the CPU measurement, requests per second.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=200_000))]
    rate: u64,
    /// Length of the CPU measurement per option, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    load_ms: u64,
    /// Rounds the options take turns in.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=20))]
    rounds: u64,
}

/// Options of `waverunner bench replication`.
#[derive(clap::Args)]
struct ReplicationArgs {
    /// Data planes to run, in order (comma-separated: xdp, udp, off).
    #[arg(long, default_value = "xdp,udp,off")]
    modes: String,
    /// Length of the load at each offered rate, in milliseconds.
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    duration_ms: u64,
    /// Offered rates, requests per second, increasing (`k` = ×1000).
    #[arg(long, default_value = "2k,5k,10k,20k,40k,80k")]
    rates: String,
    /// Also write the report (Markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Round trips per echo of the floor (0: skip the floor).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    floor_samples: u64,
    /// How long to wait for the leader to enable its data plane (xdp, udp), in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    enable_timeout_ms: u64,
    /// Cluster directory [default: <temp dir>/waverunner-bench].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// UDP payload bytes of one request (envelope + encoded SET), as DESIGN §6 asks.
const REQUEST_PAYLOAD: usize = 50;
/// Distinct keys of the workload.
const KEYS: u64 = 1_000;
/// An answer later than this counts as failed.
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);
/// Most requests of one rate.
const MAX_OPS: u64 = 1_000_000;
/// Unmeasured load before the sweep (ARP, caches, the leader's first batches).
const WARMUP: Duration = Duration::from_millis(500);
/// Timeout of one `/status` request.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// Runs `waverunner bench`.
pub fn run(a: BenchArgs) -> ExitCode {
    match a.what {
        BenchWhat::Replication(r) => match replication(&r) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("waverunner bench replication: {e}");
                ExitCode::FAILURE
            }
        },
        BenchWhat::Scale(s) => match scale_bench(&s) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("waverunner bench scale: {e}");
                ExitCode::FAILURE
            }
        },
        BenchWhat::Frontend(f) => match crate::frontend::run(&f) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("waverunner bench frontend: {e}");
                ExitCode::FAILURE
            }
        },
        BenchWhat::Peers(p) => match crate::peers::run(&p) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("waverunner bench peers: {e}");
                ExitCode::FAILURE
            }
        },
        BenchWhat::Fanout(f) => {
            use waverunner_bench::fanout;
            let o = fanout::FanoutOptions {
                samples: f.samples as usize,
                latency_time: Duration::from_millis(f.latency_ms),
                rate: f.rate,
                load_time: Duration::from_millis(f.load_ms),
                rounds: f.rounds as usize,
            };
            match fanout::measure(&o) {
                Ok(r) => {
                    println!("{}", fanout::render(&r, &o));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("waverunner bench fanout: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

pub(crate) fn parse_modes(s: &str) -> Result<Vec<(String, DataPlaneKind)>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(|m| match m {
            "xdp" => Ok((m.to_string(), DataPlaneKind::Xdp)),
            "udp" => Ok((m.to_string(), DataPlaneKind::Udp)),
            "off" => Ok((m.to_string(), DataPlaneKind::Off)),
            _ => Err(format!("unknown data plane `{m}`: use xdp, udp or off")),
        })
        .collect()
}

fn replication(a: &ReplicationArgs) -> Result<(), String> {
    let modes = parse_modes(&a.modes)?;
    let rates = sweep::parse_rates(&a.rates)?;
    if !netns::is_root() {
        return Err(
            "needs root: it creates network namespaces and attaches XDP programs".to_string(),
        );
    }
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("waverunner-bench"));
    let started = Instant::now();
    let w = workload();
    let command = std::iter::once("waverunner".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    println!(
        "# waverunner bench replication\n\n{}",
        setup(&command, &w, a)
    );

    let floor = if a.floor_samples > 0 {
        let opts = FloorOptions {
            samples: a.floor_samples as usize,
            payload: REQUEST_PAYLOAD,
            ..FloorOptions::default()
        };
        match floor::measure(&opts) {
            Ok(f) => {
                println!("## Floor\n\n{}", report::render_floor(&f));
                Some(f)
            }
            Err(e) => {
                println!("## Floor\n\nfailed: {e}\n");
                None
            }
        }
    } else {
        None
    };

    let mut results = Vec::new();
    for (name, kind) in &modes {
        eprintln!("bench: data plane {name} …");
        let outcome = run_mode(name, *kind, &rates, a, &dir, &w);
        let m = ModeResult {
            mode: name.clone(),
            outcome,
        };
        println!("{}", report::render_mode(&m));
        results.push(m);
    }

    let verdicts = report::verdicts(floor.as_ref(), &results);
    let text = render_all(
        &command,
        &w,
        a,
        floor.as_ref(),
        &results,
        &verdicts,
        started,
    );
    println!(
        "## Against DESIGN §6\n\n{}",
        report::render_verdicts(&verdicts)
    );
    if let Some(out) = &a.out {
        std::fs::write(out, &text).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        eprintln!("bench: report written to {}", out.display());
    }
    Ok(())
}

/// What ran: the command and the workload.
fn setup(command: &str, w: &Workload, a: &ReplicationArgs) -> String {
    let (payload, udp) = request_sizes(w.value_size);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "command: `{command}`\n\nrequests: SET of a {}-byte value to one of {KEYS} keys \
         (`key-N`): fast-path payload {payload} bytes (45 of them the entry envelope), UDP \
         payload {udp} bytes; open loop from namespace {} to the leader's native client port, \
         {} ms per offered rate; 3 replicas in network namespaces, durability memory. The floor \
         echoes {REQUEST_PAYLOAD}-byte UDP payloads. Machine: {} CPUs, load average {load} \
         when this was printed.\n",
        w.value_size,
        cluster::CLIENT_NETNS,
        a.duration_ms,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    )
}

fn render_all(
    command: &str,
    w: &Workload,
    a: &ReplicationArgs,
    floor: Option<&Floor>,
    results: &[ModeResult],
    verdicts: &[report::Verdict],
    started: Instant,
) -> String {
    let mut s = format!(
        "{}\n(the whole run took {:.0} s)\n\n",
        setup(command, w, a),
        started.elapsed().as_secs_f64()
    );
    s.push_str("### Floor\n\n");
    match floor {
        Some(f) => s.push_str(&report::render_floor(f)),
        None => s.push_str("not measured\n"),
    }
    s.push('\n');
    for m in results {
        s.push_str(&report::render_mode(m));
        s.push('\n');
    }
    s.push_str("### Against DESIGN §6\n\n");
    s.push_str(&report::render_verdicts(verdicts));
    s
}

/// The SET of the benchmark: the smallest the native protocol carries whose fast-path payload
/// (entry envelope + encoded SET) is at least [`REQUEST_PAYLOAD`] bytes. The envelope alone is
/// 45 bytes, so with a short key and a 1-byte value the payload is already larger: the value
/// stays at 1 byte and [`request_sizes`] reports the real sizes.
fn workload() -> Workload {
    let value_size = (1..REQUEST_PAYLOAD)
        .find(|&v| request_sizes(v).0 >= REQUEST_PAYLOAD)
        .unwrap_or(1);
    Workload {
        keys: KEYS,
        value_size,
        write_fraction: 1.0,
    }
}

/// (fast-path payload, UDP payload) bytes of a SET of a key of the middle length with a value
/// of `value_size` bytes.
fn request_sizes(value_size: usize) -> (usize, usize) {
    let op = Op::Set {
        key: format!("key-{}", KEYS / 2).into_bytes(),
        value: vec![b'v'; value_size],
        flags: 0,
        expiry: Expiry::None,
        cond: Cond::Always,
        get_old: false,
    };
    let mut cmd = Vec::new();
    waverunner_kv::codec::encode_op(&op, &mut cmd);
    let datagram = waverunner_kv::native::encode_request(0, 1, &op).map_or(0, |p| p.len());
    (
        waverunner_fastpath::payload::ENV_PREFIX + cmd.len(),
        datagram,
    )
}

/// The machine-wide lock the real-process tests take (crates/cli/tests): one namespace
/// cluster at a time on this host.
pub(crate) fn cluster_lock() -> Result<File, String> {
    let path = std::env::temp_dir().join("waverunner-itest-cluster.lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(f);
    }
    eprintln!(
        "bench: waiting for the cluster lock {} (another cluster test runs) …",
        path.display()
    );
    loop {
        // SAFETY: as above.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("flock {}: {e}", path.display()));
        }
    }
}

/// Takes the cluster in `dir` down when dropped.
pub(crate) struct Down(pub(crate) PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        if let Err(e) = cluster::down(&self.0) {
            eprintln!(
                "bench: taking the cluster down failed: {e}; run `waverunner down --dir {}`",
                self.0.display()
            );
        }
    }
}

fn run_mode(
    name: &str,
    kind: DataPlaneKind,
    rates: &[u64],
    a: &ReplicationArgs,
    dir: &std::path::Path,
    w: &Workload,
) -> Outcome {
    let _lock = match cluster_lock() {
        Ok(l) => l,
        Err(e) => return Outcome::Failed(e),
    };
    // A cluster an interrupted run left here.
    if let Err(e) = cluster::down(dir) {
        return Outcome::Failed(format!("removing an old cluster in {}: {e}", dir.display()));
    }
    let mut opts = UpOptions::new(dir);
    opts.durability = DurabilityMode::Memory;
    opts.netns = NetnsChoice::On;
    opts.dataplanes = vec![kind];
    let _down = Down(dir.to_path_buf());
    let cf = match cluster::up(&opts) {
        Ok(cf) => cf,
        Err(e) => return Outcome::Failed(format!("`up` with data plane {name}: {e}")),
    };
    if kind != DataPlaneKind::Off {
        if let Err(why) = wait_enabled(&cf, Duration::from_millis(a.enable_timeout_ms)) {
            return Outcome::NotEnabled(why);
        }
    }
    // Warm-up at the lightest rate, not measured.
    if let Err(e) = load(&cf, rates[0], WARMUP, w) {
        return Outcome::Failed(format!("warm-up: {e}"));
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut stop = None;
    for (i, &rate) in rates.iter().enumerate() {
        let row = match measure_rate(&cf, kind, rate, Duration::from_millis(a.duration_ms), w) {
            Ok(r) => r,
            Err(e) => {
                stop = Some(format!("at {rate}/s: {e}"));
                break;
            }
        };
        eprintln!(
            "bench: {name} {rate}/s: achieved {:.0}/s, errors {:.2}%, e2e p50 {} µs, replication p50 {} µs",
            row.achieved,
            row.error_fraction() * 100.0,
            row.e2e.map_or(0, |q| q.p50) / 1_000,
            row.replication.map_or(0, |q| q.p50) / 1_000,
        );
        let previous: Vec<f64> = rows.iter().map(|r| r.achieved).collect();
        let mut s = sweep::should_stop(&previous, row.achieved, row.error_fraction())
            .map(|s| s.to_string());
        let disrupted = row.disrupted;
        rows.push(row);
        // The data plane handed off during the rate: measure the next rate only once it is
        // back on (and the new leader's histogram and CPU are the ones read).
        if s.is_none() && disrupted && kind != DataPlaneKind::Off {
            if let Err(why) = wait_enabled(&cf, Duration::from_millis(a.enable_timeout_ms)) {
                s = Some(format!("the data plane did not come back: {why}"));
            }
        }
        if let Some(s) = s {
            if i + 1 < rates.len() {
                stop = Some(s);
            }
            break;
        }
    }
    Outcome::Ran { rows, stop }
}

fn leader_status(cf: &ClusterFile) -> Result<(u64, StatusView), String> {
    let leader = cluster::wait_for_leader(cf, Duration::from_secs(5))?;
    let node = cf
        .node(leader)
        .ok_or_else(|| format!("leader {leader} is not in the cluster file"))?;
    let (v, _) = cluster::fetch_status(node.addresses.admin, STATUS_TIMEOUT)?;
    Ok((leader, v))
}

/// Waits until the leader says its data plane is enabled; else says why not.
pub(crate) fn wait_enabled(cf: &ClusterFile, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no status");
    while Instant::now() < deadline {
        match leader_status(cf) {
            Ok((_, v)) if v.dataplane_enabled => return Ok(()),
            Ok((id, v)) => {
                last = format!(
                    "leader {id} (data plane `{}`): hand-off state `{}`, blocker `{}`, {} enables, last disable `{}`",
                    v.dataplane,
                    v.fastpath.state,
                    v.fastpath.blocker,
                    v.fastpath.enables,
                    v.fastpath.last_disable_reason
                )
            }
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "not enabled within {:.0} s: {last}",
        timeout.as_secs_f64()
    ))
}

/// Open-loop load from the clients' namespace to the leader.
fn load(
    cf: &ClusterFile,
    rate: u64,
    duration: Duration,
    w: &Workload,
) -> Result<waverunner_client::load::Report, String> {
    let leader = cluster::wait_for_leader(cf, Duration::from_secs(5))?;
    let target = cf
        .node(leader)
        .ok_or_else(|| format!("leader {leader} is not in the cluster file"))?
        .addresses
        .client;
    let ns = cf
        .client_netns
        .clone()
        .ok_or("the cluster has no clients namespace")?;
    let w = w.clone();
    netns::run_in(&ns, move || {
        // Sleeps of the generator end when asked, not up to 50 µs later (the default slack),
        // so rates of tens of thousands per second are paced rather than bursty.
        // SAFETY: prctl with an integer argument; affects only this thread and its children.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        open_loop(target, rate, duration, MAX_OPS, REPLY_TIMEOUT, &w).map_err(|e| e.to_string())
    })
}

fn measure_rate(
    cf: &ClusterFile,
    kind: DataPlaneKind,
    rate: u64,
    duration: Duration,
    w: &Workload,
) -> Result<Row, String> {
    let (leader, s0) = leader_status(cf)?;
    let pid = cf
        .node(leader)
        .map(|n| n.pid)
        .ok_or("leader not in the cluster file")?;
    let ours: Vec<u32> = cf
        .nodes
        .iter()
        .map(|n| n.pid)
        .chain([std::process::id()])
        .collect();
    let p0 = cpu::process(pid)?;
    let o0 = cpu::processes(&ours);
    let m0 = cpu::machine()?;
    let r = load(cf, rate, duration, w)?;
    let p1 = cpu::process(pid)?;
    let o1 = cpu::processes(&ours);
    let m1 = cpu::machine()?;
    let (leader1, s1) = leader_status(cf)?;

    let commits = s1.commit_index.saturating_sub(s0.commit_index);
    let mut notes = Vec::new();
    let mut disrupted = false;
    if leader1 != leader || s1.term != s0.term {
        disrupted = true;
        notes.push(format!(
            "leader/term changed: {leader}@{} → {leader1}@{}",
            s0.term, s1.term
        ));
    }
    if kind != DataPlaneKind::Off {
        let disables = |s: &StatusView| s.fastpath.disables.values().sum::<u64>();
        if !s1.dataplane_enabled || disables(&s1) != disables(&s0) {
            disrupted = true;
            notes.push(format!(
                "data plane disabled during the run (last reason `{}`)",
                s1.fastpath.last_disable_reason
            ));
        }
    }
    if commits > r.ok + r.ok / 20 + 10 {
        notes.push(format!("{commits} commits for {} answered writes", r.ok));
    }
    let mut e2e: Vec<u64> = r.latencies_us.iter().map(|us| us * 1_000).collect();
    let replication = stats::histogram_quantiles(&stats::histogram_delta(
        &s0.replication_latency_ns,
        &s1.replication_latency_ns,
    ));
    Ok(Row {
        offered: rate,
        achieved: r.throughput(),
        ok: r.ok,
        failed: r.failed,
        e2e: stats::quantiles(&mut e2e),
        replication: if leader1 == leader { replication } else { None },
        commits,
        leader_cpu_us: cpu::us_per_op(p1.saturating_sub(p0), commits),
        machine_cpu_us: cpu::us_per_op(m1.busy.saturating_sub(m0.busy), commits),
        softirq_us: cpu::us_per_op(m1.softirq.saturating_sub(m0.softirq), commits),
        background_pct: cpu::background_pct(
            m1.busy.saturating_sub(m0.busy),
            m1.idle.saturating_sub(m0.idle),
            o1.saturating_sub(o0),
        ),
        note: notes.join("; "),
        disrupted,
    })
}

// ---------------------------------------------------------------------------------------------
// bench scale
// ---------------------------------------------------------------------------------------------
//
// Per size of `--keys`: a fresh loopback cluster (`waverunner up … --durability memory`, run as
// a child process of this same binary) and a fresh redis-server; both loaded with the same
// keys; then memory, an idle window, write latency outside and during an on-demand snapshot
// (`POST /snapshot` on the leader), and a wiped follower catching up. Everything is torn down
// before the next size, also on failure (drop guards).

/// How long the leader may take to answer `POST /snapshot` (it answers once on disk).
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(600);
/// The closed-loop writer runs this long before the snapshot is requested.
const SNAPSHOT_LEAD: Duration = Duration::from_millis(200);
/// Snapshots taken back to back at most, for the writes during a snapshot.
const SNAPSHOTS_MAX: usize = 20;

fn scale_bench(a: &ScaleArgs) -> Result<(), String> {
    let sizes = scale::parse_keys(&a.keys)?;
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the waverunner executable: {e}"))?;
    let dir = std::path::absolute(
        a.dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("waverunner-bench-scale")),
    )
    .map_err(|e| format!("bad --dir: {e}"))?;
    let started = Instant::now();
    let redis = apt_binary("redis-server", "redis-server", "bench scale");
    let command = std::iter::once("waverunner".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let head = scale_setup(&command, a, &redis);
    println!("# waverunner bench scale\n\n{head}");
    let mut results = Vec::new();
    for &n in &sizes {
        eprintln!("bench scale: {n} keys …");
        let mut r = SizeResult {
            keys: n,
            ..SizeResult::default()
        };
        if let Err(e) = measure_size(&mut r, a, &exe, &dir, redis.as_ref().ok()) {
            eprintln!("bench scale: {n} keys: {e}");
            r.notes.push(format!("stopped: {e}"));
        }
        println!("{}", scale::render_detail(&r));
        results.push(r);
    }
    let table = scale::render(&results);
    println!("## Results\n\n{table}");
    if let Some(out) = &a.out {
        let mut text = format!(
            "{head}\n(the whole run took {:.0} s)\n\n",
            started.elapsed().as_secs_f64()
        );
        for r in &results {
            text.push_str(&scale::render_detail(r));
            text.push('\n');
        }
        text.push_str(&table);
        std::fs::write(out, &text).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        eprintln!("bench scale: report written to {}", out.display());
    }
    Ok(())
}

/// What ran: the command, the workload, the machine.
fn scale_setup(command: &str, a: &ScaleArgs, redis: &Result<PathBuf, String>) -> String {
    let first = |path: &str, n: usize| {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .split_whitespace()
            .take(n)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .nth(1)
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or("?".into(), |kb| format!("{:.1}", kb as f64 / 1_048_576.0));
    let redis = match redis {
        Ok(bin) => std::process::Command::new(bin)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| bin.display().to_string()),
        Err(e) => format!("skipped ({e})"),
    };
    format!(
        "command: `{command}`\n\nper size: a 3-replica loopback cluster (`waverunner up --nodes 3 \
         --dataplane off --durability memory --netns off`) and redis-server (`--save '' \
         --appendonly no`), each loaded with SET `key:NNNNNNNNNNNN` of {}-byte values, {} SETs \
         per write over {} connection(s), to the leader's Redis port; idle {} s; closed-loop \
         writes for {} s outside a snapshot and for as long during snapshots (`POST /snapshot` \
         on the leader, repeated); then one follower is stopped, its data directory wiped but \
         for its term and vote, and it is restarted.\n\n\
         Redis: {redis}. Machine: {} CPUs, {mem} GiB, kernel {}, load average {} when this was \
         printed.\n",
        scale::VALUE_BYTES,
        scale::PIPELINE,
        a.connections,
        a.idle_secs,
        a.latency_secs,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        first("/proc/sys/kernel/osrelease", 1),
        first("/proc/loadavg", 3),
    )
}

/// `bin` on the PATH (or in /usr/bin, /usr/sbin); as root, installed with `apt-get install
/// package` when missing. `who` prefixes what is printed.
pub(crate) fn apt_binary(bin: &str, package: &str, who: &str) -> Result<PathBuf, String> {
    let find = || {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
            .map(|d| d.join(bin))
            .find(|p| p.is_file())
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    if !netns::is_root() {
        let why = format!("{bin} is not installed and we are not root (apt-get install {package})");
        eprintln!("{who}: {bin} is skipped: {why}");
        return Err(why);
    }
    eprintln!("{who}: {bin} is missing: apt-get install -y {package} …");
    let install = || {
        std::process::Command::new("apt-get")
            .args(["install", "-y", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
    };
    let mut out = install();
    if !out.as_ref().is_ok_and(|o| o.status.success()) {
        // A fresh machine may have no package lists yet.
        let _ = std::process::Command::new("apt-get")
            .arg("update")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output();
        out = install();
    }
    match (out, find()) {
        (_, Some(p)) => Ok(p),
        (Ok(o), None) => {
            let text = String::from_utf8_lossy(&o.stderr);
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            let why = format!(
                "apt-get install {package} failed ({}): {}",
                o.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            );
            eprintln!("{who}: {bin} is skipped: {why}");
            Err(why)
        }
        (Err(e), None) => {
            let why = format!("cannot run apt-get: {e}");
            eprintln!("{who}: {bin} is skipped: {why}");
            Err(why)
        }
    }
}

/// A redis-server we started on a loopback port, without persistence; stopped (SIGTERM, then
/// SIGKILL) and its directory removed when dropped.
struct RedisServer {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    dir: PathBuf,
}

impl RedisServer {
    fn start(bin: &std::path::Path, dir: &std::path::Path) -> Result<RedisServer, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let log_path = dir.join("redis.log");
        let log = File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = std::process::Command::new(bin)
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--dir"])
            .arg(dir)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut s = RedisServer {
            child,
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = s.child.try_wait() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!("redis-server exited at start ({status}): {log}"));
            }
            let ping = scale::Resp::connect(s.addr).and_then(|mut c| c.call(&[b"PING"]));
            if matches!(ping, Ok(scale::Reply::Status(ref p)) if p == "PONG") {
                return Ok(s);
            }
            if Instant::now() >= deadline {
                s.stop();
                return Err(format!("redis-server on {} does not answer PING", s.addr));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn used_memory(&self) -> Result<u64, String> {
        match scale::Resp::connect(self.addr)?.call(&[b"INFO", b"memory"])? {
            scale::Reply::Bulk(Some(b)) => scale::parse_used_memory(&String::from_utf8_lossy(&b)),
            other => Err(format!("INFO memory answered {other:?}")),
        }
    }

    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill on our own unreaped child, whose pid cannot have been reused.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while let Ok(None) = self.child.try_wait() {
                if Instant::now() >= deadline {
                    let _ = self.child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `waverunner ARGS` (this binary) and passes its output on; fails with its output.
fn run_self(exe: &std::path::Path, args: &[&OsStr]) -> Result<(), String> {
    let what = args
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let out = std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `waverunner {what}`: {e}"))?;
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        eprintln!("bench scale: {l}");
    }
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`waverunner {what}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A base port whose loopback ports are all free: the default one if it is, else one in
/// 20000..32000 (another cluster may hold the default).
fn free_base_port(replicas: u16) -> Result<u16, String> {
    let free = |base: u16| {
        (1..=replicas).all(|i| {
            (0..5u16).all(|k| {
                let p = base + 100 * k + i;
                std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
                    && std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok()
            })
        })
    };
    if free(cluster::DEFAULT_BASE_PORT) {
        return Ok(cluster::DEFAULT_BASE_PORT);
    }
    let mut x = u64::from(std::process::id()) ^ started_nanos();
    for _ in 0..200 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let base = 20_000 + ((x >> 33) % 11_500) as u16;
        if free(base) {
            return Ok(base);
        }
    }
    Err("no free loopback port range for the cluster in 20000..32000".into())
}

fn started_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Every answering replica's `/status`: the typed view and the whole document.
fn statuses(cf: &ClusterFile) -> Vec<(u64, StatusView, serde_json::Value)> {
    cf.nodes
        .iter()
        .filter_map(|n| {
            cluster::fetch_status(n.addresses.admin, STATUS_TIMEOUT)
                .ok()
                .map(|(v, j)| (n.id, v, j))
        })
        .collect()
}

fn counts_of(v: &StatusView) -> Counts {
    Counts {
        term: v.term,
        elections: v.counters.elections,
        handoffs: v.fastpath.disables.values().sum(),
        snapshots: v.counters.snapshots_taken,
        recoveries: v.counters.recovery_reelections,
    }
}

/// The counters a disruption moves, of every answering replica.
pub(crate) fn counts(cf: &ClusterFile) -> Vec<(u64, Counts)> {
    statuses(cf)
        .iter()
        .map(|(id, v, _)| (*id, counts_of(v)))
        .collect()
}

/// The leader's `used_memory` (its state as it accounts it), if its `/status` has one.
fn leader_used_memory(cf: &ClusterFile, leader: u64) -> Option<u64> {
    let admin = cf.node(leader)?.addresses.admin;
    let (_, j) = cluster::fetch_status(admin, STATUS_TIMEOUT).ok()?;
    j.get("used_memory")?.as_u64()
}

/// `snapshot.last_bytes` of a `/status` document (absent before the replica reports it).
fn last_snapshot_bytes(status: &serde_json::Value) -> Option<u64> {
    status
        .get("snapshot")?
        .get("last_bytes")?
        .as_u64()
        .filter(|&b| b > 0)
}

/// What `POST /snapshot` answered: 404 means this build has no such endpoint.
fn parse_snapshot_answer(code: u16, body: &str) -> Snapshot {
    match code {
        404 => Snapshot::NotAvailable,
        200 => {
            let v: serde_json::Value = match serde_json::from_str(body) {
                Ok(v) => v,
                Err(e) => return Snapshot::Failed(format!("200 without JSON ({e}): {body}")),
            };
            let field = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
            match (field("index"), field("bytes"), field("duration_ms")) {
                (Some(index), Some(bytes), Some(duration_ms)) => Snapshot::Taken {
                    index,
                    bytes,
                    duration_ms,
                },
                _ => Snapshot::Failed(format!(
                    "200 without index, bytes and duration_ms: {}",
                    body.trim()
                )),
            }
        }
        _ => Snapshot::Failed(format!("answered {code}: {}", body.trim())),
    }
}

/// Prints a progress line about once a second while `n` keys load into `what`.
fn progress(what: &'static str, n: u64) -> impl FnMut(u64, Duration) {
    let mut last = (0u64, Duration::ZERO);
    move |loaded, elapsed| {
        let dt = (elapsed - last.1).as_secs_f64().max(1e-3);
        eprintln!(
            "bench scale: {what}: {loaded}/{n} keys ({:.0}%), {:.0} keys/s (last {dt:.1} s: {:.0} keys/s)",
            loaded as f64 * 100.0 / n.max(1) as f64,
            loaded as f64 / elapsed.as_secs_f64().max(1e-3),
            (loaded - last.0) as f64 / dt
        );
        last = (loaded, elapsed);
    }
}

/// Waits until every replica has applied what the leader had committed; says how far each
/// got if they do not within `timeout`.
fn wait_applied(cf: &ClusterFile, leader: u64, timeout: Duration) -> Result<(), String> {
    let admin = cf
        .node(leader)
        .ok_or("the leader is not in the cluster file")?
        .addresses
        .admin;
    let target = cluster::fetch_status(admin, STATUS_TIMEOUT)?.0.commit_index;
    let deadline = Instant::now() + timeout;
    loop {
        let s = statuses(cf);
        if s.len() == cf.nodes.len() && s.iter().all(|(_, v, _)| v.applied_index >= target) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "not every replica applied index {target} within {:.0} s: {}",
                timeout.as_secs_f64(),
                s.iter()
                    .map(|(id, v, _)| format!("n{id} {}", v.applied_index))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until no replica is taking a snapshot, seen twice in a row 0.3 s apart (a load's
/// last snapshot holds a view of the state, and the log it will compact); says so if that
/// takes longer than `timeout`.
fn wait_settled(cf: &ClusterFile, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut quiet = 0;
    loop {
        let s = statuses(cf);
        if s.len() == cf.nodes.len() && s.iter().all(|(_, v, _)| !v.snapshot.in_progress) {
            quiet += 1;
            if quiet == 2 {
                return Ok(());
            }
        } else {
            quiet = 0;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "a replica was still taking a snapshot {:.0} s after the load",
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn rate(n: u64, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64().max(1e-6)
}

/// One size, step by step into `r`; an error ends the size (what was measured stays in `r`).
fn measure_size(
    r: &mut SizeResult,
    a: &ScaleArgs,
    exe: &std::path::Path,
    dir: &std::path::Path,
    redis_bin: Option<&PathBuf>,
) -> Result<(), String> {
    let n = r.keys;
    let conns = a.connections as usize;
    let _lock = cluster_lock()?;
    // A cluster an interrupted run left here.
    cluster::down(dir).map_err(|e| format!("removing an old cluster in {}: {e}", dir.display()))?;
    let base = free_base_port(3)?.to_string();
    let _down = Down(dir.to_path_buf());
    let up = [
        "up",
        "--nodes",
        "3",
        "--dataplane",
        "off",
        "--durability",
        "memory",
        "--netns",
        "off",
        "--base-port",
        &base,
        "--dir",
    ];
    let args: Vec<&OsStr> = up.iter().map(OsStr::new).chain([dir.as_os_str()]).collect();
    run_self(exe, &args)?;
    let cf = cluster::load(dir)?;
    let rss0: Vec<(u64, u32, u64)> = cf
        .nodes
        .iter()
        .map(|n| Ok((n.id, n.pid, scale::rss(n.pid)?)))
        .collect::<Result<_, String>>()?;
    let mut redis_dir = dir.as_os_str().to_owned();
    redis_dir.push("-redis");
    let mut redis = match redis_bin {
        Some(bin) => match RedisServer::start(bin, std::path::Path::new(&redis_dir)) {
            Ok(s) => Some(s),
            Err(e) => {
                r.notes.push(format!("Redis skipped: {e}"));
                None
            }
        },
        None => {
            r.notes
                .push("Redis skipped: redis-server is not installed".into());
            None
        }
    };
    let redis0 = match &redis {
        Some(s) => Some((scale::rss(s.pid())?, s.used_memory()?)),
        None => None,
    };

    // Load the cluster, then Redis.
    let leader = cluster::wait_for_leader(&cf, Duration::from_secs(10))?;
    let target = cf
        .node(leader)
        .ok_or("the leader is not in the cluster file")?
        .addresses
        .redis;
    eprintln!("bench scale: loading {n} keys into the leader n{leader} ({target}) …");
    let c0 = counts(&cf);
    let used0 = leader_used_memory(&cf, leader);
    let took = scale::load(target, n, conns, &mut progress("waverunner", n))?;
    r.wr_load = Some(rate(n, took));
    if let Err(e) = wait_applied(
        &cf,
        leader,
        Duration::from_secs(60) + Duration::from_millis(n / 20),
    ) {
        r.notes.push(e);
    }
    r.during_load = Some(Disruption::between(&c0, &counts(&cf)));
    if let (Some(before), Some(after)) = (used0, leader_used_memory(&cf, leader)) {
        r.wr_used_per_key = Some(scale::per_key(before, after, n));
    }
    for &(id, pid, before) in &rss0 {
        r.wr_rss_loaded_per_key
            .push((id, scale::per_key(before, scale::rss(pid)?, n)));
    }
    if let Err(e) = wait_settled(&cf, Duration::from_secs(30)) {
        r.notes.push(e);
    }
    for &(id, pid, before) in &rss0 {
        r.wr_rss_per_key
            .push((id, scale::per_key(before, scale::rss(pid)?, n)));
    }
    if let (Some(s), Some((rss_before, used_before))) = (&redis, redis0) {
        eprintln!(
            "bench scale: loading {n} keys into redis-server ({}) …",
            s.addr
        );
        match scale::load(s.addr, n, conns, &mut progress("redis", n)) {
            Ok(took) => {
                r.redis_load = Some(rate(n, took));
                r.redis_rss_per_key = Some(scale::per_key(rss_before, scale::rss(s.pid())?, n));
                r.redis_used_per_key = Some(scale::per_key(used_before, s.used_memory()?, n));
            }
            Err(e) => r.notes.push(format!("Redis load failed: {e}")),
        }
    }
    // Redis is done: stop it so that it takes no memory or CPU from the replicas.
    redis.take();

    // Idle.
    eprintln!("bench scale: idle for {} s …", a.idle_secs);
    let window = Duration::from_secs(a.idle_secs);
    let c0 = counts(&cf);
    let t0: Vec<(u64, u32, u64)> = cf
        .nodes
        .iter()
        .map(|n| Ok((n.id, n.pid, cpu::process(n.pid)?)))
        .collect::<Result<_, String>>()?;
    let start = Instant::now();
    std::thread::sleep(window);
    for &(id, pid, before) in &t0 {
        let ticks = cpu::process(pid)?.saturating_sub(before);
        r.idle_cpu.push((
            id,
            scale::cpu_pct(ticks, cpu::ticks_per_second(), start.elapsed()),
        ));
    }
    r.during_idle = Some(Disruption::between(&c0, &counts(&cf)));
    for &(id, pid, before) in &rss0 {
        r.wr_rss_idle_per_key
            .push((id, scale::per_key(before, scale::rss(pid)?, n)));
    }

    // Write latency outside a snapshot.
    let leader = cluster::wait_for_leader(&cf, Duration::from_secs(10))?;
    let node = cf
        .node(leader)
        .ok_or("the leader is not in the cluster file")?;
    let (target, admin) = (node.addresses.redis, node.addresses.admin);
    eprintln!("bench scale: closed-loop writes for {} s …", a.latency_secs);
    let c0 = counts(&cf);
    let never = std::sync::atomic::AtomicBool::new(false);
    let samples = scale::closed_loop(
        target,
        n,
        Instant::now(),
        &never,
        Duration::from_secs(a.latency_secs),
    )?;
    let mut ns: Vec<u64> = samples.iter().map(|s| s.ns).collect();
    r.outside = stats::quantiles(&mut ns);
    let d = Disruption::between(&c0, &counts(&cf));
    if d.snapshots > 0 {
        r.notes.push(format!(
            "{} automatic snapshot(s) (snapshot_entries) during the writes outside a snapshot",
            d.snapshots
        ));
    }

    // Write latency during snapshots: taken back to back until they have lasted as long as
    // the measurement outside (a single snapshot of 1 M keys lasts 0.7 s, too few writes for
    // a p99 that means anything).
    eprintln!(
        "bench scale: POST /snapshot to the leader n{leader}, again until {} s, with writes running …",
        a.latency_secs
    );
    let c0 = counts(&cf);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let t0 = Instant::now();
    let want = Duration::from_secs(a.latency_secs);
    let (answers, windows, samples) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            scale::closed_loop(
                target,
                n,
                t0,
                &stop,
                SNAPSHOT_TIMEOUT + SNAPSHOT_LEAD * 2 + want,
            )
        });
        std::thread::sleep(SNAPSHOT_LEAD);
        let (mut answers, mut windows) = (Vec::new(), Vec::new());
        let mut spent = Duration::ZERO;
        while answers.is_empty() || (spent < want && answers.len() < SNAPSHOTS_MAX) {
            let from = t0.elapsed();
            let answer = waverunner_node::admin::post(admin, "/snapshot", "{}", SNAPSHOT_TIMEOUT);
            let to = t0.elapsed();
            let ok = matches!(answer, Ok((200, _)));
            answers.push(answer);
            windows.push((from, to));
            spent += to - from;
            if !ok {
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let samples = writer
            .join()
            .unwrap_or_else(|_| Err("the writer panicked".into()));
        (answers, windows, samples)
    });
    let taken = answers.len();
    let snaps: Vec<Snapshot> = answers
        .into_iter()
        .map(|a| match a {
            Ok((code, body)) => parse_snapshot_answer(code, &body),
            Err(e) => Snapshot::Failed(format!("POST http://{admin}/snapshot: {e}")),
        })
        .collect();
    let speeds: Vec<String> = snaps
        .iter()
        .filter_map(|s| s.mb_per_s().map(|v| format!("{v:.0}")))
        .collect();
    let snap = scale::median_snapshot(snaps).expect("one answer at least");
    match &snap {
        Snapshot::NotAvailable => eprintln!("bench scale: snapshot: not available in this build"),
        Snapshot::Failed(e) => eprintln!("bench scale: snapshot failed: {e}"),
        Snapshot::Taken { .. } => {
            r.during_snapshot = Some(Disruption::between(&c0, &counts(&cf)));
            if taken > 1 {
                let spent: Duration = windows.iter().map(|(f, t)| *t - *f).sum();
                r.notes.push(format!(
                    "{taken} snapshots back to back ({:.1} s) for the writes during a snapshot, \
                     at {} MB/s; the snapshot columns are the median's",
                    spent.as_secs_f64(),
                    speeds.join(", ")
                ));
            }
            match samples {
                Ok(samples) => {
                    let mut ns = scale::overlapping(&samples, &windows);
                    r.during = stats::quantiles(&mut ns);
                }
                Err(e) => r
                    .notes
                    .push(format!("writes during the snapshot failed: {e}")),
            }
        }
    }
    let snap_bytes = match snap {
        Snapshot::Taken { bytes, .. } => Some(bytes),
        _ => None,
    };
    r.snapshot = Some(snap);

    // A wiped follower catching up.
    let restarted = Cell::new(None);
    let c0 = counts(&cf);
    r.catch_up = Some(catch_up(&cf, leader, snap_bytes, n, &restarted));
    r.during_catch_up = Some(Disruption::between(&c0, &counts(&cf)));

    eprintln!("bench scale: waverunner down …");
    run_self(
        exe,
        &[OsStr::new("down"), OsStr::new("--dir"), dir.as_os_str()],
    )?;
    if let Some(pid) = restarted.get() {
        // The restarted replica is our child: reap it.
        // SAFETY: waitpid with WNOHANG and no status pointer only affects our children.
        unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
    }
    Ok(())
}

/// Removes everything in `dir` but the hard state file.
fn wipe_but_hard_state(dir: &std::path::Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_name() == HARD_STATE_FILE {
            continue;
        }
        if e.file_type()?.is_dir() {
            std::fs::remove_dir_all(e.path())?;
        } else {
            std::fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

/// The file of a data directory that holds term and vote (crates/storage: on-disk format).
const HARD_STATE_FILE: &str = "hardstate";

/// Stops a follower, wipes its data directory but for its term and vote, starts it again and
/// times it until its applied index reaches the leader's commit index and its digest equals the
/// leader's. `restarted` gets the pid of the new process (our child).
///
/// Term and vote stay because Raft needs them: a replica that forgot them could vote twice in
/// a term, and it looks like a new, empty replica that the leader still counts as up to date —
/// it then sends it nothing, and it never catches up (a replica that lost everything rejoins
/// through `waverunner member`). Everything else goes: the follower rejoins as recovering and
/// needs the whole state from the leader.
fn catch_up(
    cf: &ClusterFile,
    leader: u64,
    snapshot_bytes: Option<u64>,
    n: u64,
    restarted: &Cell<Option<u32>>,
) -> Result<scale::CatchUp, String> {
    let f = cf
        .nodes
        .iter()
        .find(|x| x.id != leader)
        .ok_or("no follower")?;
    let l = cf
        .node(leader)
        .ok_or("the leader is not in the cluster file")?;
    eprintln!(
        "bench scale: stopping follower n{} (pid {}), wiping {} but for {HARD_STATE_FILE}, restarting it …",
        f.id,
        f.pid,
        f.data_dir.display()
    );
    if !cluster::stop_node(f)? {
        return Err(format!("follower n{} (pid {}) did not stop", f.id, f.pid));
    }
    wipe_but_hard_state(&f.data_dir)
        .map_err(|e| format!("wiping {}: {e}", f.data_dir.display()))?;
    let started = Instant::now();
    restarted.set(Some(cluster::restart_node(&cf.dir, f.id)?));
    let timeout = Duration::from_secs(120) + Duration::from_millis(n / 10);
    loop {
        let lv = cluster::fetch_status(l.addresses.admin, STATUS_TIMEOUT);
        let fv = cluster::fetch_status(f.addresses.admin, STATUS_TIMEOUT);
        let last = match (lv, fv) {
            (Ok((lv, lj)), Ok((fv, _))) => {
                if fv.applied_index >= lv.commit_index && fv.digest == lv.digest {
                    return Ok(scale::CatchUp {
                        follower: f.id,
                        secs: started.elapsed().as_secs_f64(),
                        bytes: last_snapshot_bytes(&lj).or(snapshot_bytes),
                        installed: fv.counters.snapshots_installed,
                    });
                }
                format!(
                    "n{} applied {} digest {:016x}, leader commit {} digest {:016x}",
                    f.id, fv.applied_index, fv.digest, lv.commit_index, lv.digest
                )
            }
            (Err(e), _) | (_, Err(e)) => e,
        };
        if started.elapsed() >= timeout {
            let log = std::fs::read_to_string(&f.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "bench scale: n{} did not catch up; the end of its log {}:\n{}",
                f.id,
                f.log.display(),
                lines[lines.len().saturating_sub(15)..].join("\n")
            );
            return Err(format!(
                "not caught up within {:.0} s: {last}",
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        let m = parse_modes("xdp, off").unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].1, DataPlaneKind::Off);
        assert!(parse_modes("dpdk").is_err());
    }

    #[test]
    fn requests_are_about_fifty_bytes() {
        let w = workload();
        assert!(w.value_size > 0 && w.value_size < REQUEST_PAYLOAD);
        let (payload, udp) = request_sizes(w.value_size);
        assert!(
            payload >= REQUEST_PAYLOAD && udp > payload,
            "{payload} {udp}"
        );
        assert_eq!(w.write_fraction, 1.0);
    }

    #[test]
    fn snapshot_answers() {
        assert_eq!(
            parse_snapshot_answer(404, "not found: try GET /metrics"),
            Snapshot::NotAvailable
        );
        assert_eq!(
            parse_snapshot_answer(200, r#"{"index":1200,"bytes":5000000,"duration_ms":25}"#),
            Snapshot::Taken {
                index: 1_200,
                bytes: 5_000_000,
                duration_ms: 25
            }
        );
        assert_eq!(
            parse_snapshot_answer(200, r#"{"index":1200,"bytes":5000000,"duration_ms":25}"#)
                .mb_per_s(),
            Some(200.0)
        );
        for (code, body) in [(200, "ok"), (200, r#"{"index":1}"#), (503, "no leader")] {
            assert!(
                matches!(parse_snapshot_answer(code, body), Snapshot::Failed(_)),
                "{code} {body}"
            );
        }
        let status: serde_json::Value = serde_json::from_str(
            r#"{"id":1,"snapshot":{"last_index":9,"last_bytes":4096,"last_duration_ms":1,"in_progress":false}}"#,
        )
        .unwrap();
        assert_eq!(last_snapshot_bytes(&status), Some(4_096));
        assert_eq!(last_snapshot_bytes(&serde_json::json!({"id": 1})), None);
    }

    #[test]
    fn scale_args_default_to_the_three_sizes() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            what: BenchWhat,
        }
        let Cli {
            what: BenchWhat::Scale(a),
        } = Cli::try_parse_from(["bench", "scale"]).unwrap()
        else {
            panic!("not scale");
        };
        assert_eq!(
            scale::parse_keys(&a.keys).unwrap(),
            vec![1_000_000, 5_000_000, 10_000_000]
        );
        assert_eq!((a.idle_secs, a.latency_secs, a.connections), (60, 5, 1));
        assert!(Cli::try_parse_from(["bench", "scale", "--idle-secs", "0"]).is_err());
    }
}
