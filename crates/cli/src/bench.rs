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

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use waverunner_bench::floor::{self, Floor, FloorOptions};
use waverunner_bench::report::{self, ModeResult, Outcome, Row};
use waverunner_bench::{cpu, netns, stats, sweep};
use waverunner_client::load::{open_loop, Workload};
use waverunner_kv::{Cond, Expiry, Op};
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

fn parse_modes(s: &str) -> Result<Vec<(String, DataPlaneKind)>, String> {
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
    let datagram = waverunner_client::proto::encode_request(0, 1, &op).map_or(0, |p| p.len());
    (
        waverunner_client::proto::ENVELOPE_PREFIX + cmd.len(),
        datagram,
    )
}

/// The machine-wide lock the real-process tests take (crates/cli/tests): one namespace
/// cluster at a time on this host.
fn cluster_lock() -> Result<File, String> {
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
struct Down(PathBuf);

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
fn wait_enabled(cf: &ClusterFile, timeout: Duration) -> Result<(), String> {
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
}
