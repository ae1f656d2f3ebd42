//! `waverunner chaos`: a real cluster, concurrent clients, a seeded fault schedule, and a
//! linearizability check of everything the clients saw (docs/chaos.md).
//!
//! A run: start a cluster of its own (network namespaces when root) in `DIR/cluster`; run the
//! workload (`waverunner_chaos::workload`) for the duration while the [`Scheduler`] injects
//! faults in phases (a fault for 1–5 s, then healed for 1–5 s); heal everything; wait for a
//! leader; read every key once more; wait until every replica has applied the same index with
//! the same state digest; check that every acknowledged write is present and run Porcupine on
//! the history. The last line printed is the summary:
//!
//! ```text
//! ops=N ok=N failed=N indeterminate=N anomalies=K linearizable=yes|no
//! ```
//!
//! The cluster is always torn down (also on a panic, and on SIGINT/SIGTERM). A failing run keeps
//! `DIR`: `history.jsonl`, `history.html` (Porcupine's visualization of the failing keys),
//! `schedule.log` (every fault with its time) and `logs/n<i>.log` (the replicas' logs).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use waverunner_chaos::history::{read_history, HistoryWriter, Input, Operation, Outcome, Output};
use waverunner_chaos::workload::{self, is_counter, Counts, Rng, Targets, WorkloadConfig};
use waverunner_client::load::{flood, FloodReport, Workload as LoadWorkload};
use waverunner_node::config::{DataPlaneKind, DurabilityMode, ReadModeConfig};

use crate::cluster::{self, ClusterFile, DurabilityArg, NetnsChoice, ReadModeArg, UpOptions};

/// The client id of the final reads in a history: the reads after every fault healed, which
/// the lost-write check compares every acknowledged write against.
pub const FINAL_READER: u64 = 1_000_000;

/// How long one fault lasts, and one healed phase: uniform in this range (ms), by default.
pub const PHASE_MS: (u64, u64) = (1_000, 5_000);
/// How long a `restart` keeps the replica down before starting it again (ms).
const RESTART_PAUSE_MS: (u64, u64) = (100, 1_000);
/// How long, after the faults healed, the cluster has to elect a leader.
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// How long, after the final reads, every replica has to reach the same applied index and digest.
const CONVERGE_WAIT: Duration = Duration::from_secs(30);
/// How long a restarted replica has to catch up (leave `recovering`) before the next fault.
const RECOVER_WAIT: Duration = Duration::from_secs(15);
/// How long a membership fault retries a removal the leader refuses as quorum-losing.
const QUORUM_REFUSAL_WAIT: Duration = Duration::from_secs(3);
/// Timeout of one `/status` request while faults are in force.
const STATUS_TIMEOUT: Duration = Duration::from_millis(400);
/// How long the final reads may take in all.
const FINAL_READ_WAIT: Duration = Duration::from_secs(30);

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum FaultKind {
    /// SIGKILL a replica (the leader or not; more than one in fsync mode), start it again when
    /// the phase heals.
    Kill,
    /// SIGSTOP a replica (the leader half the time: the paper's halt), SIGCONT when it heals.
    Pause,
    /// Network partitions with nftables: the leader isolated, minority/majority splits, one way.
    Partition,
    /// Packet loss and delay on some replicas' links (a TC BPF program).
    Loss,
    /// SIGKILL a replica (the leader half the time) and start it again 0.1–1 s later.
    Restart,
    /// Remove a replica from the configuration, and add one back when the phase heals.
    Membership,
    /// An open loop of native requests at twice the cluster's peak (measured at the first such
    /// phase) against the leader until the phase heals: overload must be a state, with busy
    /// answers, not an election. Not in the default set.
    Overload,
}

impl FaultKind {
    /// Every kind, in the order of the command line.
    pub const ALL: [FaultKind; 6] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Loss,
        FaultKind::Restart,
        FaultKind::Membership,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
            FaultKind::Loss => "loss",
            FaultKind::Restart => "restart",
            FaultKind::Membership => "membership",
            FaultKind::Overload => "overload",
        }
    }

    /// Whether injecting it needs root (network namespaces, nftables, TC).
    pub fn needs_root(self) -> bool {
        matches!(self, FaultKind::Partition | FaultKind::Loss)
    }

    /// `Err` names what is missing when this kind cannot be injected on this machine.
    pub fn available(self, root: bool) -> Result<(), String> {
        if self.needs_root() && !root {
            return Err(format!(
                "--faults {}: needs root (the replicas must run in their own network namespaces \
                 for nftables rules and TC programs); without root only kill, pause, restart and \
                 membership are possible",
                self.name()
            ));
        }
        match self {
            FaultKind::Kill | FaultKind::Pause | FaultKind::Restart => Ok(()),
            FaultKind::Partition | FaultKind::Loss => net::supported(),
            FaultKind::Membership => member::supported(),
            FaultKind::Overload => Ok(()),
        }
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Every fault kind this machine can inject.
pub fn available_faults() -> Vec<FaultKind> {
    let root = is_root();
    FaultKind::ALL
        .into_iter()
        .filter(|k| k.available(root).is_ok())
        .collect()
}

/// `60s`, `2m`, `500ms`, `1h`, or a number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (write 60s, 2m, 500ms)"))?;
    let ms = match unit {
        "" | "s" => n.checked_mul(1_000),
        "ms" => Some(n),
        "m" | "min" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    }
    .ok_or_else(|| format!("`{s}` is not a duration (write 60s, 2m, 500ms)"))?;
    Ok(Duration::from_millis(ms))
}

/// `MIN..MAX` milliseconds (MIN ≥ 100, MIN ≤ MAX).
pub fn parse_phase(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("`{s}`: write the phase length as MIN..MAX milliseconds, e.g. 1000..5000");
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let (a, b): (u64, u64) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a < 100 || b < a {
        return Err(bad());
    }
    Ok((a, b))
}

fn parse_nodes(s: &str) -> Result<u64, String> {
    match s.trim() {
        "3" => Ok(3),
        "5" => Ok(5),
        _ => Err(format!("`{s}`: a chaos cluster has 3 or 5 replicas")),
    }
}

/// The data plane on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DataPlaneArg {
    /// Vanilla Raft over TCP.
    Off,
    /// The user-space data plane (the handler in a busy-polling UDP thread).
    Udp,
    /// The XDP data plane (needs root: network namespaces).
    Xdp,
}

fn dataplane_name(d: DataPlaneArg) -> &'static str {
    match d {
        DataPlaneArg::Off => "off",
        DataPlaneArg::Udp => "udp",
        DataPlaneArg::Xdp => "xdp",
    }
}

fn dataplane_kinds(d: DataPlaneArg) -> Vec<DataPlaneKind> {
    match d {
        DataPlaneArg::Off => Vec::new(),
        DataPlaneArg::Udp => vec![DataPlaneKind::Udp],
        DataPlaneArg::Xdp => vec![DataPlaneKind::Xdp],
    }
}

/// Options of `waverunner chaos`.
#[derive(clap::Args, Clone)]
pub struct ChaosArgs {
    /// Replicas: 3 or 5.
    #[arg(long, default_value = "3", value_parser = parse_nodes)]
    pub nodes: u64,
    /// How long the workload and the faults run (60s, 2m, 500ms).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Concurrent clients: half native (UDP, sessions), half RESP (TCP).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=512))]
    pub clients: u64,
    /// Faults to inject, comma-separated [default: every kind this machine can inject].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub faults: Vec<FaultKind>,
    /// Data plane of the replicas (xdp needs root: network namespaces).
    #[arg(long, value_enum, default_value = "off")]
    pub dataplane: DataPlaneArg,
    /// memory: acknowledged in a majority's memory (never more than a minority down at once);
    /// fsync: on a majority's disk (kill may then take down a majority, even every replica).
    #[arg(long, value_enum, default_value = "memory")]
    pub durability: DurabilityArg,
    /// How linearizable reads are served.
    #[arg(long, value_enum, default_value = "read_index")]
    pub read_mode: ReadModeArg,
    /// Seed of the fault schedule and of the clients' choices [default: random, printed].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory of the run: the cluster, the history, the visualization, the replicas' logs
    /// [default: <temp dir>/waverunner-chaos].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep DIR after a passing run too (a failing run always keeps it).
    #[arg(long)]
    pub keep: bool,
    /// First port on loopback (without root): replica i uses P+i, P+100+i, … P+400+i.
    #[arg(long, default_value_t = 19_000)]
    pub base_port: u16,
    /// Length of each fault and of each healed phase between faults: uniform in MIN..MAX ms.
    #[arg(long, default_value = "1000..5000", value_parser = parse_phase)]
    pub phase_ms: (u64, u64),
    /// How long the clients use one key set before moving on to a fresh one (0: the same 8
    /// keys all along). Short per-key histories keep the checker fast and small.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub key_epoch: Duration,
    /// Pause of each client between two operations, in ms (0: closed loop at full speed).
    #[arg(long, default_value_t = 2)]
    pub think_ms: u64,
    /// How long Porcupine may search per key before the verdict is `unknown`.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub check_timeout: Duration,
    /// Do not run anything: check this history file as a run would (lost writes against its
    /// final reads, client 1000000, then Porcupine) and print the summary line.
    #[arg(long, value_name = "HISTORY")]
    pub check: Option<PathBuf>,
}

fn durability_mode(d: DurabilityArg) -> DurabilityMode {
    match d {
        DurabilityArg::Memory => DurabilityMode::Memory,
        DurabilityArg::Fsync => DurabilityMode::Fsync,
    }
}

fn read_mode(r: ReadModeArg) -> ReadModeConfig {
    match r {
        ReadModeArg::Log => ReadModeConfig::Log,
        ReadModeArg::ReadIndex => ReadModeConfig::ReadIndex,
        ReadModeArg::Lease => ReadModeConfig::Lease,
    }
}

fn durability_name(d: DurabilityArg) -> &'static str {
    match d {
        DurabilityArg::Memory => "memory",
        DurabilityArg::Fsync => "fsync",
    }
}

fn read_mode_name(r: ReadModeArg) -> &'static str {
    match r {
        ReadModeArg::Log => "log",
        ReadModeArg::ReadIndex => "read_index",
        ReadModeArg::Lease => "lease",
    }
}

/// The default directory of a run.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join("waverunner-chaos")
}

/// The file that marks a directory as a chaos run's (so a rerun may clear it).
const MARKER: &str = "chaos-run.txt";

/// Prepares `dir` for a run: creates it, or clears what an earlier run left in it. Refuses a
/// non-empty directory that is not a run's.
pub fn prepare_dir(dir: &Path) -> Result<PathBuf, String> {
    let dir = std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if dir.exists() {
        let empty = fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .next()
            .is_none();
        if !empty && !dir.join(MARKER).exists() {
            return Err(format!(
                "{} exists and is not a chaos run's directory (no {MARKER}); choose another --dir",
                dir.display()
            ));
        }
        // A cluster still running from an earlier run is refused by `up`; a dead one is
        // cleared by it. Everything else of the earlier run goes.
        for entry in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let entry = entry.map_err(|e| e.to_string())?;
            if entry.file_name() == "cluster" {
                continue;
            }
            let p = entry.path();
            let r = if p.is_dir() {
                fs::remove_dir_all(&p)
            } else {
                fs::remove_file(&p)
            };
            r.map_err(|e| format!("cannot remove {}: {e}", p.display()))?;
        }
    }
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

// ---------------------------------------------------------------------------------------------
// The cluster guard
// ---------------------------------------------------------------------------------------------

/// Tears the cluster down when dropped (also while unwinding from a panic): heals the network,
/// copies every replica's log to `DIR/logs/`, stops the replicas, removes what `up` created.
pub struct ClusterGuard {
    cluster_dir: PathBuf,
    logs_dir: PathBuf,
    done: bool,
}

impl ClusterGuard {
    /// Guards the cluster in `cluster_dir`; logs are copied to `logs_dir`.
    pub fn new(cluster_dir: PathBuf, logs_dir: PathBuf) -> ClusterGuard {
        ClusterGuard {
            cluster_dir,
            logs_dir,
            done: false,
        }
    }

    /// Tears down now; returns an error message if something could not be removed.
    pub fn teardown(&mut self) -> Result<(), String> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        if let Ok(cf) = cluster::load(&self.cluster_dir) {
            if let Err(e) = net::heal_all(&cf) {
                eprintln!("waverunner chaos: healing the network: {e}");
            }
            let _ = fs::create_dir_all(&self.logs_dir);
            for n in &cf.nodes {
                let _ = fs::copy(&n.log, self.logs_dir.join(format!("n{}.log", n.id)));
            }
        }
        cluster::down(&self.cluster_dir)
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!(
                "waverunner chaos: tearing the cluster down failed: {e}; run `waverunner down --dir {}`",
                self.cluster_dir.display()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster queries
// ---------------------------------------------------------------------------------------------

/// The replica that says it leads, with the highest term, among the running replicas not in
/// `skip` (paused ones would make the query wait).
pub fn current_leader(cf: &ClusterFile, skip: &BTreeSet<u64>) -> Option<u64> {
    let mut best: Option<(u64, u64)> = None;
    for n in cf
        .nodes
        .iter()
        .filter(|n| !skip.contains(&n.id) && cluster::is_running(n))
    {
        if let Ok((v, _)) = cluster::fetch_status(n.addresses.admin, STATUS_TIMEOUT) {
            if v.role == "leader" && best.is_none_or(|(t, _)| v.term > t) {
                best = Some((v.term, n.id));
            }
        }
    }
    best.map(|(_, id)| id)
}

/// Waits until replica `id` answers `/status` in a role other than `recovering` (it has its
/// log back); returns whether it did in time.
fn wait_recovered(cf: &ClusterFile, id: u64, timeout: Duration, stop: &AtomicBool) -> bool {
    let Some(n) = cf.node(id) else { return true };
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        if let Ok((v, _)) = cluster::fetch_status(n.addresses.admin, STATUS_TIMEOUT) {
            if v.role != "recovering" && v.leader != 0 {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Sleeps up to `d`, waking early when `stop` is set.
fn sleep_unless(d: Duration, stop: &AtomicBool) {
    let until = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

// ---------------------------------------------------------------------------------------------
// Network faults (waverunner_chaos::net) and membership change (member::add_member /
// remove_member): the plug-in points of the scheduler.
// ---------------------------------------------------------------------------------------------

/// A network fault, as the scheduler plans it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetPlan {
    /// Cut one replica off from every other replica (both ways).
    Isolate(u64),
    /// Two sides that cannot reach each other.
    Split(Vec<u64>, Vec<u64>),
    /// Packets from `from` to `to` are dropped; the other way works.
    OneWay { from: u64, to: u64 },
    /// Loss (percent) and delay (ms) on the links of these replicas.
    Loss {
        nodes: Vec<u64>,
        percent: u32,
        delay_ms: u32,
    },
}

impl std::fmt::Display for NetPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[u64]| {
            v.iter()
                .map(|i| format!("n{i}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            NetPlan::Isolate(id) => write!(f, "isolate n{id}"),
            NetPlan::Split(a, b) => write!(f, "split {} | {}", list(a), list(b)),
            NetPlan::OneWay { from, to } => write!(f, "one-way drop n{from} -> n{to}"),
            NetPlan::Loss {
                nodes,
                percent,
                delay_ms,
            } => write!(f, "loss {percent}% delay {delay_ms}ms on {}", list(nodes)),
        }
    }
}

/// The network faults, with `waverunner_chaos::net`: nftables partitions and TC BPF loss and
/// delay inside each replica's namespace.
pub(crate) mod net {
    use waverunner_chaos::net::{Direction, Net, NodeSpec};

    use super::NetPlan;
    use crate::cluster::{ClusterFile, NetMode};

    /// `Err` says why network faults cannot be injected.
    pub fn supported() -> Result<(), String> {
        let nft = std::process::Command::new("nft")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !nft {
            return Err(
                "network faults need the nft command (apt-get install nftables; \
                 scripts/install-deps.sh installs it)"
                    .into(),
            );
        }
        Ok(())
    }

    fn specs(cf: &ClusterFile) -> Result<Vec<NodeSpec>, String> {
        if cf.mode != NetMode::Netns {
            return Err("network faults need a cluster in network namespaces (run as root)".into());
        }
        cf.nodes
            .iter()
            .map(|n| match (&n.netns, n.addresses.raft.ip()) {
                (Some(ns), std::net::IpAddr::V4(ip)) => Ok(NodeSpec::new(n.id, ns.clone(), ip)),
                _ => Err(format!(
                    "replica {} has no namespace or no IPv4 address",
                    n.id
                )),
            })
            .collect()
    }

    /// Applies one network fault; it lasts as long as the returned [`Net`] (dropping it heals).
    pub fn apply(cf: &ClusterFile, plan: &NetPlan) -> Result<Net, String> {
        let nodes = specs(cf)?;
        let spec = |id: u64| {
            nodes
                .iter()
                .find(|n| n.id == id)
                .cloned()
                .ok_or_else(|| format!("no replica {id}"))
        };
        // Loss at the bridge: the in-namespace BPF program sits behind an XDP data plane.
        let net = Net::new(nodes.clone()).loss_at_bridge();
        let r = match plan {
            NetPlan::Isolate(id) => net.isolate(&spec(*id)?),
            NetPlan::Split(a, b) => {
                let side =
                    |ids: &[u64]| ids.iter().map(|&i| spec(i)).collect::<Result<Vec<_>, _>>();
                net.partition(&[side(a)?, side(b)?])
            }
            NetPlan::OneWay { from, to } => net.one_way(&spec(*from)?, &spec(*to)?),
            NetPlan::Loss {
                nodes: ids,
                percent,
                delay_ms,
            } => (|| {
                for &id in ids {
                    let n = spec(id)?;
                    for d in Direction::BOTH {
                        // The loss is split over both directions: p each way drops about 2p of
                        // the request/answer pairs.
                        net.set_loss_dir(&n, d, percent * 10_000 / 2)
                            .map_err(|e| e.to_string())?;
                    }
                    if *delay_ms > 0 {
                        net.set_delay(&n, delay_ms * 1_000, delay_ms * 500)
                            .map_err(|e| e.to_string())?;
                    }
                }
                Ok(())
            })()
            .map_err(waverunner_chaos::net::NetError),
        };
        r.map_err(|e| format!("{plan}: {e}"))?;
        Ok(net)
    }

    /// Removes every network fault from the cluster's namespaces (those that still exist).
    pub fn heal_all(cf: &ClusterFile) -> Result<(), String> {
        if cf.mode != NetMode::Netns {
            return Ok(());
        }
        let nodes = specs(cf)?;
        Net::new(nodes).heal_all().map_err(|e| e.to_string())
    }
}

/// Membership change with `waverunner member` (`crate::member`): remove a replica (it is
/// stopped once the removal commits), add a fresh one (learner, catch-up, voter).
pub(crate) mod member {
    use std::path::Path;

    /// `Err` says why membership faults cannot be injected (they always can).
    pub fn supported() -> Result<(), String> {
        Ok(())
    }

    /// Removes replica `id` from the configuration and stops it.
    pub fn remove(dir: &Path, id: u64) -> Result<(), String> {
        crate::member::remove_member(dir, id)
    }

    /// Starts a new replica and adds it to the configuration; returns its id.
    pub fn add(dir: &Path) -> Result<u64, String> {
        crate::member::add_member(dir)
    }

    /// Whether `remove` failed because the leader refused: the group would lose its quorum.
    pub fn is_quorum_refusal(e: &str) -> bool {
        e.contains(crate::member::QUORUM_REFUSAL)
    }
}

// ---------------------------------------------------------------------------------------------
// The scheduler
// ---------------------------------------------------------------------------------------------

/// A fault in force, and what healing it takes.
enum Active {
    /// Nothing was injected (the constraints did not allow it).
    None,
    /// Killed: start again at heal.
    Killed(Vec<u64>),
    /// Stopped: continue at heal.
    Paused(Vec<u64>),
    /// Killed and started again already: at heal, wait until they caught up.
    Restarted(Vec<u64>),
    /// A network fault: healed by [`waverunner_chaos::net::Net::heal_all`].
    Net(NetPlan, waverunner_chaos::net::Net),
    /// A replica removed from the configuration: add one back at heal.
    Removed(u64),
    /// An open loop flooding the leader: stopped at heal.
    Overload(Flood),
}

/// An overload phase in force.
struct Flood {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<FloodReport, waverunner_client::Error>>,
    rate: u64,
    peak: f64,
    /// The cluster before it started.
    before: Terms,
}

/// Keys the overload's requests use (`key-N`, apart from the checked clients' keys).
const FLOOD_KEYS: u64 = 10_000;

/// What tells an election from a hand-off, as the running replicas report it.
#[derive(Clone, Debug, Default)]
struct Terms {
    /// The highest term.
    term: u64,
    /// The leader a replica of that term knows (0: none).
    leader: u64,
    /// Data-plane disables (hand-offs to software) summed over the replicas, by reason.
    disables: BTreeMap<String, u64>,
}

impl Terms {
    fn of(cf: &ClusterFile) -> Terms {
        let mut t = Terms::default();
        for n in cf.nodes.iter().filter(|n| cluster::is_running(n)) {
            let Ok((v, _)) = cluster::fetch_status(n.addresses.admin, STATUS_TIMEOUT) else {
                continue;
            };
            if v.term > t.term || (v.term == t.term && t.leader == 0) {
                (t.term, t.leader) = (v.term, v.leader);
            }
            for (r, k) in v.fastpath.disables {
                *t.disables.entry(r).or_default() += k;
            }
        }
        t
    }

    /// `later`'s changes since `self`: "leader n1 → n1, disables +0; term +0" (the term
    /// last: the tests read it there).
    fn change(&self, later: &Terms) -> (u64, String) {
        let dt = later.term.saturating_sub(self.term);
        let added: Vec<(&String, u64)> = later
            .disables
            .iter()
            .map(|(r, k)| {
                (
                    r,
                    k.saturating_sub(self.disables.get(r).copied().unwrap_or(0)),
                )
            })
            .filter(|&(_, d)| d > 0)
            .collect();
        let total: u64 = added.iter().map(|&(_, d)| d).sum();
        let reasons = if added.is_empty() {
            String::new()
        } else {
            let each: Vec<String> = added.iter().map(|(r, d)| format!("{r} {d}")).collect();
            format!(" ({})", each.join(", "))
        };
        (
            dt,
            format!(
                "leader n{} → n{}, disables +{total}{reasons}; term +{dt}",
                self.leader, later.leader
            ),
        )
    }
}

/// Floods `target` at `rate` for `secs`.
fn flood_for(target: std::net::SocketAddr, rate: u64, secs: f64) -> Option<FloodReport> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let h = s.spawn(|| flood(target, rate, &flood_workload(), &stop));
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        h.join().ok().and_then(|r| r.ok())
    })
}

fn flood_workload() -> LoadWorkload {
    LoadWorkload {
        keys: FLOOD_KEYS,
        value_size: 32,
        write_fraction: 0.5,
    }
}

/// The cluster's peak, requests/s: open loops at doubling rates, half a second each, until
/// the answers fall below 80 % of what was offered; the best goodput seen (answers while the
/// loop ran, `FloodReport::goodput`). Also the best of all answers over the half second,
/// those that came after it included: how the peak was read until 2026-11-28, for the log.
fn measure_peak(target: std::net::SocketAddr) -> (f64, f64) {
    let (mut peak, mut with_drain) = (0f64, 0f64);
    let mut rate = 5_000u64;
    while rate <= 640_000 {
        let Some(r) = flood_for(target, rate, 0.5) else {
            break;
        };
        peak = peak.max(r.goodput());
        with_drain = with_drain.max(r.goodput_with_drain());
        if r.goodput() < 0.8 * rate as f64 {
            break;
        }
        rate *= 2;
    }
    (peak, with_drain)
}

/// Injects and heals faults, one phase at a time, from a seeded generator.
pub struct Scheduler<'a> {
    cluster_dir: PathBuf,
    durability: DurabilityMode,
    faults: Vec<FaultKind>,
    rng: Rng,
    /// Kinds left in this round.
    deck: Vec<FaultKind>,
    /// Range of a phase's length, ms.
    phase_ms: (u64, u64),
    clock: &'a HistoryWriter,
    stop: &'a AtomicBool,
    targets: &'a Targets,
    /// Replicas that are down now: killed, paused, or restarted and not yet caught up.
    down: BTreeSet<u64>,
    /// Fault windows [start, end) in µs, for throughput under faults.
    pub windows: Vec<(u64, u64, FaultKind)>,
    /// Faults injected, by kind.
    pub injected: BTreeMap<FaultKind, u64>,
    /// Problems of the harness itself (a restart that failed, …).
    pub errors: Vec<String>,
    log: Option<fs::File>,
    /// The cluster's peak (requests/s), once an overload phase measured it.
    peak: Option<f64>,
    /// Term changes during overload phases.
    pub overload_term_changes: u64,
}

impl<'a> Scheduler<'a> {
    /// A scheduler for the cluster in `cluster_dir`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cluster_dir: PathBuf,
        durability: DurabilityMode,
        faults: Vec<FaultKind>,
        seed: u64,
        clock: &'a HistoryWriter,
        stop: &'a AtomicBool,
        targets: &'a Targets,
        log: Option<fs::File>,
    ) -> Scheduler<'a> {
        Scheduler {
            cluster_dir,
            durability,
            faults,
            rng: Rng::new(seed ^ 0x5EED_FA17),
            deck: Vec::new(),
            phase_ms: PHASE_MS,
            clock,
            stop,
            targets,
            down: BTreeSet::new(),
            windows: Vec::new(),
            injected: BTreeMap::new(),
            errors: Vec::new(),
            log,
            peak: None,
            overload_term_changes: 0,
        }
    }

    /// Sets the range of a phase's length (ms).
    pub fn phases(&mut self, lo_ms: u64, hi_ms: u64) {
        self.phase_ms = (lo_ms.max(100), hi_ms.max(lo_ms.max(100)));
    }

    fn note(&mut self, what: String) {
        let t_us = self.clock.now_us();
        let line = format!("[{:7.3}s] {what}", t_us as f64 / 1e6);
        println!("{line}");
        if let Some(f) = self.log.as_mut() {
            let _ = writeln!(f, "{line}");
        }
    }

    fn error(&mut self, what: String) {
        self.note(format!("HARNESS ERROR: {what}"));
        self.errors.push(what);
    }

    fn cluster(&self) -> Result<ClusterFile, String> {
        cluster::load(&self.cluster_dir)
    }

    /// Replicas that may still go down without losing a majority.
    fn may_take_down(&self, cf: &ClusterFile) -> usize {
        let n = cf.nodes.len();
        let minority = (n.saturating_sub(1)) / 2;
        minority.saturating_sub(self.down.len())
    }

    /// Up to `count` targets: the leader first with probability `p_leader`, then random others
    /// among the replicas that are up.
    fn targets_for(&mut self, cf: &ClusterFile, count: usize, p_leader: f64) -> Vec<u64> {
        let mut up: Vec<u64> = cf
            .nodes
            .iter()
            .map(|n| n.id)
            .filter(|id| !self.down.contains(id))
            .collect();
        let mut out = Vec::new();
        if count == 0 || up.is_empty() {
            return out;
        }
        if self.rng.chance(p_leader) {
            if let Some(l) = current_leader(cf, &self.down) {
                out.push(l);
                up.retain(|&i| i != l);
            }
        }
        while out.len() < count && !up.is_empty() {
            let i = self.rng.below(up.len() as u64) as usize;
            out.push(up.swap_remove(i));
        }
        out
    }

    fn leader_tag(cf: &ClusterFile, down: &BTreeSet<u64>, ids: &[u64]) -> String {
        let l = current_leader(cf, down);
        ids.iter()
            .map(|&i| {
                if Some(i) == l {
                    format!("n{i} (leader)")
                } else {
                    format!("n{i}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The next kind of fault: every kind once per round, in a seeded random order, so a short
    /// run still sees each of them.
    fn next_kind(&mut self) -> FaultKind {
        if self.deck.is_empty() {
            self.deck = self.faults.clone();
            // Fisher-Yates with the seeded generator.
            for i in (1..self.deck.len()).rev() {
                let j = self.rng.below(i as u64 + 1) as usize;
                self.deck.swap(i, j);
            }
        }
        self.deck.pop().unwrap_or(FaultKind::Pause)
    }

    /// Runs fault phases until `until` (µs on the history's clock) or `stop`.
    pub fn run_until(&mut self, until_us: u64) {
        while !self.stop.load(Ordering::Relaxed) && self.clock.now_us() < until_us {
            let kind = self.next_kind();
            let (lo, hi) = self.phase_ms;
            let hold = Duration::from_millis(self.rng.range(lo, hi));
            let quiet = Duration::from_millis(self.rng.range(lo, hi));
            let start = self.clock.now_us();
            let active = match self.inject(kind) {
                Ok(a) => a,
                Err(e) => {
                    self.error(format!("{}: {e}", kind.name()));
                    Active::None
                }
            };
            let injected = !matches!(active, Active::None);
            if injected {
                *self.injected.entry(kind).or_default() += 1;
            }
            let left = Duration::from_micros(until_us.saturating_sub(self.clock.now_us()));
            sleep_unless(hold.min(left.max(Duration::from_millis(500))), self.stop);
            self.heal(active);
            if injected {
                self.windows.push((start, self.clock.now_us(), kind));
            }
            let left = Duration::from_micros(until_us.saturating_sub(self.clock.now_us()));
            sleep_unless(quiet.min(left), self.stop);
        }
    }

    fn inject(&mut self, kind: FaultKind) -> Result<Active, String> {
        let cf = self.cluster()?;
        match kind {
            FaultKind::Kill => {
                let may = self.may_take_down(&cf);
                let fsync = self.durability == DurabilityMode::Fsync;
                // fsync promises no loss even if every replica crashes: now and then take
                // down a majority, or all of them.
                let count = if fsync && self.down.is_empty() && self.rng.chance(0.25) {
                    self.rng
                        .range(cf.nodes.len() as u64 / 2 + 1, cf.nodes.len() as u64)
                        as usize
                } else if may == 0 {
                    self.note("kill: skipped (a majority must stay up)".into());
                    return Ok(Active::None);
                } else {
                    self.rng.range(1, may as u64) as usize
                };
                let ids = self.targets_for(&cf, count, 0.5);
                let tag = Self::leader_tag(&cf, &self.down, &ids);
                for &id in &ids {
                    self.sigkill(&cf, id)?;
                }
                self.note(format!("kill {tag}"));
                Ok(Active::Killed(ids))
            }
            FaultKind::Pause => {
                let may = self.may_take_down(&cf);
                if may == 0 {
                    self.note("pause: skipped (a majority must stay up)".into());
                    return Ok(Active::None);
                }
                let count = self.rng.range(1, may as u64) as usize;
                let ids = self.targets_for(&cf, count, 0.5);
                let tag = Self::leader_tag(&cf, &self.down, &ids);
                for &id in &ids {
                    if let Some(n) = cf.node(id) {
                        cluster::kill_node(n, libc::SIGSTOP)?;
                    }
                    self.down.insert(id);
                }
                self.note(format!("pause (SIGSTOP) {tag}"));
                Ok(Active::Paused(ids))
            }
            FaultKind::Restart => {
                if self.may_take_down(&cf) == 0 {
                    self.note("restart: skipped (a majority must stay up)".into());
                    return Ok(Active::None);
                }
                let ids = self.targets_for(&cf, 1, 0.5);
                let tag = Self::leader_tag(&cf, &self.down, &ids);
                for &id in &ids {
                    self.sigkill(&cf, id)?;
                }
                let pause = self.rng.range(RESTART_PAUSE_MS.0, RESTART_PAUSE_MS.1);
                self.note(format!(
                    "restart {tag}: killed, starting again in {pause} ms"
                ));
                sleep_unless(Duration::from_millis(pause), self.stop);
                for &id in &ids {
                    cluster::restart_node(&self.cluster_dir, id)?;
                }
                self.note(format!(
                    "restart: {} running again",
                    ids.iter()
                        .map(|i| format!("n{i}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                Ok(Active::Restarted(ids))
            }
            FaultKind::Partition => {
                let ids: Vec<u64> = cf.nodes.iter().map(|n| n.id).collect();
                let leader = current_leader(&cf, &self.down);
                let plan = match self.rng.below(4) {
                    0 => NetPlan::Isolate(leader.unwrap_or(*self.rng.pick(&ids))),
                    1 | 2 => {
                        // A minority (the leader in it half the time) against the majority.
                        let minority = self.rng.range(1, (ids.len() as u64 - 1) / 2) as usize;
                        let mut rest = ids.clone();
                        let mut side = Vec::new();
                        if let Some(l) = leader.filter(|_| self.rng.chance(0.5)) {
                            side.push(l);
                            rest.retain(|&i| i != l);
                        }
                        while side.len() < minority {
                            let i = self.rng.below(rest.len() as u64) as usize;
                            side.push(rest.swap_remove(i));
                        }
                        side.sort_unstable();
                        rest.sort_unstable();
                        NetPlan::Split(side, rest)
                    }
                    _ => {
                        // One way: the leader cannot reach a follower (or the reverse).
                        let l = leader.unwrap_or(ids[0]);
                        let others: Vec<u64> = ids.iter().copied().filter(|&i| i != l).collect();
                        let o = *self.rng.pick(&others);
                        if self.rng.chance(0.5) {
                            NetPlan::OneWay { from: l, to: o }
                        } else {
                            NetPlan::OneWay { from: o, to: l }
                        }
                    }
                };
                let net = net::apply(&cf, &plan)?;
                self.note(format!("partition: {plan}"));
                Ok(Active::Net(plan, net))
            }
            FaultKind::Loss => {
                let ids: Vec<u64> = cf.nodes.iter().map(|n| n.id).collect();
                let count = self.rng.range(1, ids.len() as u64) as usize;
                let mut pool = ids.clone();
                let mut nodes = Vec::new();
                while nodes.len() < count {
                    let i = self.rng.below(pool.len() as u64) as usize;
                    nodes.push(pool.swap_remove(i));
                }
                nodes.sort_unstable();
                let plan = NetPlan::Loss {
                    nodes,
                    percent: self.rng.range(5, 40) as u32,
                    delay_ms: *self.rng.pick(&[0, 0, 5, 20, 50]) as u32,
                };
                let net = net::apply(&cf, &plan)?;
                self.note(format!("loss: {plan}"));
                Ok(Active::Net(plan, net))
            }
            FaultKind::Membership => {
                if self.may_take_down(&cf) == 0 {
                    self.note("membership: skipped (a majority must stay up)".into());
                    return Ok(Active::None);
                }
                let ids = self.targets_for(&cf, 1, 0.3);
                let Some(&id) = ids.first() else {
                    return Ok(Active::None);
                };
                let tag = Self::leader_tag(&cf, &self.down, &ids);
                // The leader refuses a removal that would leave too few voters up and caught
                // up (a replica just back from a partition, say). That is the guard working,
                // not an anomaly: wait a little for the group to catch up, else skip.
                let deadline = Instant::now() + QUORUM_REFUSAL_WAIT;
                loop {
                    match member::remove(&self.cluster_dir, id) {
                        Ok(()) => break,
                        Err(e) if member::is_quorum_refusal(&e) => {
                            if Instant::now() >= deadline || self.stop.load(Ordering::Relaxed) {
                                self.note(format!("membership: skipped ({e})"));
                                return Ok(Active::None);
                            }
                            std::thread::sleep(Duration::from_millis(200));
                        }
                        Err(e) => return Err(e),
                    }
                }
                self.note(format!("membership: removed {tag}"));
                self.refresh_targets();
                Ok(Active::Removed(id))
            }
            FaultKind::Overload => {
                let Some(leader) = current_leader(&cf, &self.down) else {
                    self.note("overload: skipped (no leader)".into());
                    return Ok(Active::None);
                };
                let target = cf.node(leader).ok_or("the leader left")?.addresses.client;
                let peak = match self.peak {
                    Some(p) => p,
                    None => {
                        let (p, with_drain) = measure_peak(target);
                        self.note(format!(
                            "overload: the cluster's peak is about {p:.0} requests/s (50 % \
                             writes; {with_drain:.0} with the answers after each half second)"
                        ));
                        self.peak = Some(p);
                        p
                    }
                };
                let rate = (2.0 * peak).max(1_000.0) as u64;
                let before = Terms::of(&cf);
                let stop = Arc::new(AtomicBool::new(false));
                let s2 = stop.clone();
                let thread = std::thread::Builder::new()
                    .name("overload".into())
                    .spawn(move || flood(target, rate, &flood_workload(), &s2))
                    .map_err(|e| format!("cannot start the overload thread: {e}"))?;
                self.note(format!(
                    "overload: {rate} native requests/s (twice the peak) to the leader n{leader}"
                ));
                Ok(Active::Overload(Flood {
                    stop,
                    thread,
                    rate,
                    peak,
                    before,
                }))
            }
        }
    }

    fn sigkill(&mut self, cf: &ClusterFile, id: u64) -> Result<(), String> {
        let Some(n) = cf.node(id) else {
            return Ok(());
        };
        cluster::kill_node(n, libc::SIGKILL)?;
        if !cluster::wait_exit(n, Duration::from_secs(5)) {
            return Err(format!("n{id} (pid {}) survives SIGKILL", n.pid));
        }
        self.down.insert(id);
        Ok(())
    }

    fn refresh_targets(&self) {
        if let Ok(cf) = self.cluster() {
            self.targets.set(
                cf.client_addrs(),
                cf.nodes.iter().map(|n| n.addresses.redis).collect(),
            );
        }
    }

    fn heal(&mut self, active: Active) {
        match active {
            Active::None => {}
            Active::Killed(ids) => {
                for &id in &ids {
                    if let Err(e) = cluster::restart_node(&self.cluster_dir, id) {
                        self.error(format!("restarting n{id}: {e}"));
                    }
                }
                self.note(format!("heal: started {} again", list(&ids)));
                self.wait_caught_up(&ids);
            }
            Active::Restarted(ids) => {
                self.wait_caught_up(&ids);
            }
            Active::Paused(ids) => {
                if let Ok(cf) = self.cluster() {
                    for &id in &ids {
                        if let Some(n) = cf.node(id) {
                            if let Err(e) = cluster::kill_node(n, libc::SIGCONT) {
                                self.error(format!("SIGCONT n{id}: {e}"));
                            }
                        }
                        self.down.remove(&id);
                    }
                }
                self.note(format!("heal: continued (SIGCONT) {}", list(&ids)));
            }
            Active::Net(plan, net) => match net.heal_all() {
                Ok(()) => self.note(format!("heal: network ({plan})")),
                Err(e) => self.error(format!("healing the network ({plan}): {e}")),
            },
            Active::Overload(f) => {
                f.stop.store(true, Ordering::Relaxed);
                let r = f.thread.join();
                let after = self.cluster().map(|cf| Terms::of(&cf));
                let (dt, change) = f.before.change(after.as_ref().unwrap_or(&f.before));
                self.overload_term_changes += dt;
                match r {
                    Ok(Ok(r)) => self.note(format!(
                        "heal: overload at {}/s stopped: {} sent, {:.0} ok/s ({:.0} % of the peak \
                         {:.0}/s; {:.0} ok/s with the answers after the stop), {} refused, {} \
                         unanswered; {change}",
                        f.rate,
                        r.sent,
                        r.goodput(),
                        100.0 * r.goodput() / f.peak.max(1.0),
                        f.peak,
                        r.goodput_with_drain(),
                        r.refused,
                        r.sent.saturating_sub(r.ok + r.refused),
                    )),
                    Ok(Err(e)) => self.error(format!("overload: {e}")),
                    Err(_) => self.error("the overload thread panicked".into()),
                }
            }
            Active::Removed(id) => {
                match member::add(&self.cluster_dir) {
                    Ok(new) => self.note(format!("heal: n{id} removed earlier, added n{new}")),
                    Err(e) => self.error(format!("adding a replica: {e}")),
                }
                self.refresh_targets();
            }
        }
    }

    /// In memory mode a restarted replica has lost its log: it counts as down until it has
    /// caught up (left `recovering`). In fsync mode it is up once it answers.
    fn wait_caught_up(&mut self, ids: &[u64]) {
        let Ok(cf) = self.cluster() else { return };
        for &id in ids {
            if wait_recovered(&cf, id, RECOVER_WAIT, self.stop) {
                self.down.remove(&id);
                self.note(format!("n{id} caught up"));
            } else if !self.stop.load(Ordering::Relaxed) {
                self.note(format!(
                    "n{id} not caught up after {} s: still counted as down",
                    RECOVER_WAIT.as_secs()
                ));
            }
        }
    }

    /// Heals everything: continues paused replicas, starts killed ones, heals the network.
    pub fn heal_everything(&mut self) {
        let Ok(cf) = self.cluster() else { return };
        if let Err(e) = net::heal_all(&cf) {
            self.error(format!("healing the network: {e}"));
        }
        for n in &cf.nodes {
            if cluster::is_running(n) {
                let _ = cluster::kill_node(n, libc::SIGCONT);
            } else if let Err(e) = cluster::restart_node(&self.cluster_dir, n.id) {
                self.error(format!("restarting n{}: {e}", n.id));
            }
        }
        self.down.clear();
        self.note("heal: everything (network healed, every replica running)".into());
    }
}

fn list(ids: &[u64]) -> String {
    ids.iter()
        .map(|i| format!("n{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------------
// Checking
// ---------------------------------------------------------------------------------------------

/// What the check of a history found.
#[derive(Debug, Default)]
pub struct Analysis {
    /// Operations in the history (final reads included).
    pub ops: u64,
    /// Answered.
    pub ok: u64,
    /// Certainly not applied.
    pub failed: u64,
    /// Outcome unknown.
    pub indeterminate: u64,
    /// Everything wrong, one line each.
    pub anomalies: Vec<String>,
    /// Porcupine's verdict: `Some(true)` linearizable, `Some(false)` not, `None` undecided.
    pub linearizable: Option<bool>,
    /// What the checker said.
    pub checker_message: String,
}

impl Analysis {
    /// The summary line.
    pub fn summary(&self) -> String {
        format!(
            "ops={} ok={} failed={} indeterminate={} anomalies={} linearizable={}",
            self.ops,
            self.ok,
            self.failed,
            self.indeterminate,
            self.anomalies.len(),
            match self.linearizable {
                Some(true) => "yes",
                Some(false) => "no",
                None => "unknown",
            }
        )
    }

    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.anomalies.is_empty() && self.linearizable == Some(true)
    }
}

/// The lost-write check: every key's final read (client [`FINAL_READER`]) against every write
/// of the history. A register must hold the value of a write that no acknowledged write
/// followed; a counter must hold at least the sum of its acknowledged increments and at most
/// that plus the unknown ones. Returns one line per problem.
///
/// A `cas` writes its new value when it answers a match (or may have, when unknown); one that
/// answers "no match" wrote nothing.
pub fn lost_writes(ops: &[Operation]) -> Vec<String> {
    fn written_value(input: &Input) -> Option<&str> {
        match input {
            Input::Set { value } => Some(value),
            Input::Cas { new, .. } => Some(new),
            _ => None,
        }
    }
    let mut finals: BTreeMap<&str, Option<String>> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.client == FINAL_READER) {
        if let (Outcome::Ok, Some(Output::Get { value })) = (op.outcome, &op.output) {
            finals.insert(&op.key, value.clone());
        }
    }
    let mut out = Vec::new();
    let written: BTreeSet<&str> = ops
        .iter()
        .filter(|o| o.client != FINAL_READER && o.input.is_write())
        .map(|o| o.key.as_str())
        .collect();
    let final_read_keys: BTreeSet<&str> = ops
        .iter()
        .filter(|o| o.client == FINAL_READER)
        .map(|o| o.key.as_str())
        .collect();
    if final_read_keys.is_empty() {
        return out; // a history without final reads: only Porcupine judges it
    }
    for key in &written {
        let Some(fin) = finals.get(key) else {
            out.push(format!("key {key}: the final read never succeeded"));
            continue;
        };
        let writes: Vec<&Operation> = ops
            .iter()
            .filter(|o| o.client != FINAL_READER && o.key == *key && o.input.is_write())
            .collect();
        if is_counter(key) || writes.iter().all(|w| matches!(w.input, Input::Incr { .. })) {
            let sum = |outcome: Outcome| -> i64 {
                writes
                    .iter()
                    .filter(|w| w.outcome == outcome)
                    .filter_map(|w| match w.input {
                        Input::Incr { delta } => Some(delta),
                        _ => None,
                    })
                    .sum()
            };
            let (acked, maybe) = (sum(Outcome::Ok), sum(Outcome::Unknown));
            let value = match fin.as_deref().map(str::parse::<i64>) {
                None => 0,
                Some(Ok(v)) => v,
                Some(Err(_)) => {
                    out.push(format!("key {key}: final value {fin:?} is not a counter"));
                    continue;
                }
            };
            if value < acked {
                out.push(format!(
                    "key {key}: lost acknowledged increments: final value {value}, acknowledged increments add up to {acked}"
                ));
            } else if value > acked + maybe {
                out.push(format!(
                    "key {key}: final value {value} exceeds every increment that may have happened ({acked} acknowledged + {maybe} unknown): an increment applied twice, or a failed one applied"
                ));
            }
            continue;
        }
        // A `cas` answered "no match" wrote nothing.
        let acked: Vec<&&Operation> = writes
            .iter()
            .filter(|w| w.outcome == Outcome::Ok)
            .filter(|w| !matches!(w.output, Some(Output::Cas { ok: false })))
            .collect();
        match fin {
            None => {
                if !acked.is_empty() {
                    out.push(format!(
                        "key {key}: lost acknowledged writes: the key is missing after {} acknowledged writes",
                        acked.len()
                    ));
                }
            }
            Some(v) => {
                let source: Vec<&&Operation> = writes
                    .iter()
                    .filter(|w| written_value(&w.input) == Some(v.as_str()))
                    .filter(|w| !matches!(w.output, Some(Output::Cas { ok: false })))
                    .collect();
                match source.as_slice() {
                    [] => out.push(format!(
                        "key {key}: final value {v:?} was never written by any client"
                    )),
                    [w] if w.outcome == Outcome::Fail => out.push(format!(
                        "key {key}: final value {v:?} comes from a write recorded as failed"
                    )),
                    [w] if w.outcome == Outcome::Ok => {
                        let ret = w.return_us.unwrap_or(u64::MAX);
                        let lost: Vec<&&&Operation> =
                            acked.iter().filter(|a| a.call_us > ret).collect();
                        if let Some(first) = lost.first() {
                            out.push(format!(
                                "key {key}: lost acknowledged writes: final value {v:?} was written by client {} (returned at {} µs), yet {} acknowledged writes began after it returned (the first: {:?} by client {} at {} µs)",
                                w.client,
                                ret,
                                lost.len(),
                                written_value(&first.input).unwrap_or(""),
                                first.client,
                                first.call_us
                            ));
                        }
                    }
                    [_] => {} // an unknown write: it may have taken effect at any time
                    _ => out.push(format!(
                        "key {key}: value {v:?} was written more than once: the workload's values are not unique"
                    )),
                }
            }
        }
    }
    out
}

/// Checks a history file as a run does: counts, the lost-write check, Porcupine (its
/// visualization of failing keys goes to `html`).
pub fn analyze(history: &Path, html: &Path, timeout: Duration) -> Result<Analysis, String> {
    let ops = read_history(history).map_err(|e| e.to_string())?;
    let mut a = Analysis {
        ops: ops.len() as u64,
        ..Analysis::default()
    };
    for op in &ops {
        match op.outcome {
            Outcome::Ok => a.ok += 1,
            Outcome::Fail => a.failed += 1,
            Outcome::Unknown => a.indeterminate += 1,
        }
    }
    a.anomalies.extend(lost_writes(&ops));
    let checked = waverunner_chaos::check::checker_path()
        .and_then(|checker| waverunner_chaos::check_with(&checker, history, html, timeout));
    let v = match checked {
        Ok(v) => v,
        Err(e) => {
            a.linearizable = None;
            a.anomalies
                .push(format!("the linearizability checker gave no verdict: {e}"));
            return Ok(a);
        }
    };
    a.linearizable = v.linearizable;
    a.checker_message = v.message.clone();
    for line in v.message.lines() {
        if line.contains("is not linearizable") || line.contains("undecided") {
            a.anomalies.push(format!("porcupine: {line}"));
        }
    }
    if v.linearizable == Some(false) && !a.anomalies.iter().any(|l| l.starts_with("porcupine")) {
        a.anomalies
            .push("porcupine: the history is not linearizable".into());
    }
    Ok(a)
}

/// Completed (ok) operations per `bucket_us`, from time 0 to `end_us`.
pub fn throughput_buckets(ops: &[Operation], bucket_us: u64, end_us: u64) -> Vec<u64> {
    let n = (end_us / bucket_us + 1) as usize;
    let mut v = vec![0u64; n];
    for op in ops.iter().filter(|o| o.outcome == Outcome::Ok) {
        if let Some(r) = op.return_us {
            if let Some(b) = v.get_mut((r / bucket_us) as usize) {
                *b += 1;
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/// `waverunner chaos`.
pub fn run(a: ChaosArgs) -> ExitCode {
    if let Some(h) = &a.check {
        return check_only(h, &a);
    }
    match run_inner(&a) {
        Ok(code) => code,
        Err(e) => {
            // Nothing was checked: no summary line, exit status 2.
            eprintln!("waverunner chaos: {e}");
            ExitCode::from(2)
        }
    }
}

fn check_only(history: &Path, a: &ChaosArgs) -> ExitCode {
    let html = history.with_extension("html");
    match analyze(history, &html, a.check_timeout) {
        Ok(an) => {
            for l in &an.anomalies {
                println!("ANOMALY: {l}");
            }
            if an.linearizable == Some(false) {
                println!("visualization: {} (open it in a browser)", html.display());
            }
            println!("{}", an.summary());
            if an.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("waverunner chaos --check: {e}");
            ExitCode::from(2)
        }
    }
}

/// The command that runs the same schedule again.
fn replay_command(a: &ChaosArgs, seed: u64, faults: &[FaultKind], dir: &Path) -> String {
    format!(
        "waverunner chaos --nodes {} --duration {}ms --clients {} --faults {} --phase-ms {}..{} --key-epoch {}ms --dataplane {} --durability {} --read-mode {} --think-ms {} --seed {seed} --dir {}",
        a.nodes,
        a.duration.as_millis(),
        a.clients,
        faults.iter().map(|f| f.name()).collect::<Vec<_>>().join(","),
        a.phase_ms.0,
        a.phase_ms.1,
        a.key_epoch.as_millis(),
        dataplane_name(a.dataplane),
        durability_name(a.durability),
        read_mode_name(a.read_mode),
        a.think_ms,
        dir.display()
    )
}

fn run_inner(a: &ChaosArgs) -> Result<ExitCode, String> {
    let root = is_root();
    if a.dataplane == DataPlaneArg::Xdp && !root {
        return Err(
            "--dataplane xdp needs root: XDP attaches to each replica's interface in its own \
             network namespace; without root use --dataplane udp (loopback)"
                .into(),
        );
    }
    let mut faults: Vec<FaultKind> = if a.faults.is_empty() {
        available_faults()
    } else {
        a.faults.clone()
    };
    faults.sort_unstable();
    faults.dedup();
    for f in &faults {
        f.available(root)?;
    }
    let seed = a.seed.unwrap_or_else(waverunner_client::random_id);
    let dir = prepare_dir(&a.dir.clone().unwrap_or_else(default_dir))?;
    let replay = replay_command(a, seed, &faults, &dir);
    fs::write(dir.join(MARKER), format!("{replay}\n"))
        .map_err(|e| format!("cannot write {}: {e}", dir.join(MARKER).display()))?;

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }

    println!(
        "chaos: {} replicas, data plane {}, durability {}, read mode {}, {} clients, {} s, faults {}, seed {seed}, dir {}",
        a.nodes,
        dataplane_name(a.dataplane),
        durability_name(a.durability),
        read_mode_name(a.read_mode),
        a.clients,
        a.duration.as_secs_f64(),
        faults.iter().map(|f| f.name()).collect::<Vec<_>>().join(","),
        dir.display()
    );
    let cluster_dir = dir.join("cluster");
    let mut guard = ClusterGuard::new(cluster_dir.clone(), dir.join("logs"));
    let opts = UpOptions {
        nodes: a.nodes,
        durability: durability_mode(a.durability),
        read_mode: read_mode(a.read_mode),
        dir: cluster_dir.clone(),
        netns: NetnsChoice::Auto,
        base_port: a.base_port,
        tick_ms: 10,
        election_ticks: 10,
        dataplanes: dataplane_kinds(a.dataplane),
        maxmemory: 0,
        client_loop: Default::default(),
    };
    let cf = cluster::up(&opts)?;
    println!(
        "chaos: cluster up ({}), leader n{}",
        match cf.mode {
            cluster::NetMode::Netns => "network namespaces",
            cluster::NetMode::Loopback => "loopback",
        },
        cluster::wait_for_leader(&cf, Duration::from_secs(5)).unwrap_or(0)
    );

    let history_path = dir.join("history.jsonl");
    let html = dir.join("history.html");
    let history = HistoryWriter::create(&history_path)
        .map_err(|e| format!("cannot create {}: {e}", history_path.display()))?;
    let targets = Targets::new(
        cf.client_addrs(),
        cf.nodes.iter().map(|n| n.addresses.redis).collect(),
    );
    let wcfg = WorkloadConfig {
        clients: a.clients as usize,
        seed,
        think: Duration::from_millis(a.think_ms),
        key_epoch: a.key_epoch,
        ..WorkloadConfig::default()
    };
    let counts = Counts::default();
    let clients_stop = AtomicBool::new(false);
    let schedule_log = fs::File::create(dir.join("schedule.log")).ok();
    let mut sched = Scheduler::new(
        cluster_dir.clone(),
        opts.durability,
        faults.clone(),
        seed,
        &history,
        &stop,
        &targets,
        schedule_log,
    );
    sched.phases(a.phase_ms.0, a.phase_ms.1);
    let run_us = a.duration.as_micros() as u64;
    std::thread::scope(|s| {
        s.spawn(|| workload::run(&wcfg, &targets, &history, &clients_stop, &counts));
        // A short healthy start, then the faults.
        sleep_unless(Duration::from_millis(1_000).min(a.duration / 4), &stop);
        sched.run_until(run_us);
        sched.heal_everything();
        // The clients go on a moment on the healed cluster, so operations in flight finish.
        sleep_unless(Duration::from_millis(1_000), &stop);
        clients_stop.store(true, Ordering::Relaxed);
    });
    let injected = std::mem::take(&mut sched.injected);
    let windows = std::mem::take(&mut sched.windows);
    let harness_errors = std::mem::take(&mut sched.errors);
    drop(sched);
    let (ops, ok, failed, unknown) = counts.snapshot();
    println!(
        "chaos: workload done: {ops} operations ({ok} ok, {failed} failed, {unknown} unknown), {} faults injected ({})",
        injected.values().sum::<u64>(),
        injected
            .iter()
            .map(|(k, n)| format!("{} {n}", k.name()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "chaos: transactions (WATCH cas): {} applied, {} aborted or refused; {} commands on hashes, lists, sets and sorted sets (covered by the digest check)",
        counts.tx_applied.load(Ordering::Relaxed),
        counts.tx_aborted.load(Ordering::Relaxed),
        counts.collection_ops.load(Ordering::Relaxed)
    );
    if counts.unexpected.load(Ordering::Relaxed) > 0 {
        println!(
            "chaos: {} answers of an unexpected form (recorded as unknown)",
            counts.unexpected.load(Ordering::Relaxed)
        );
    }
    let mut anomalies: Vec<String> = Vec::new();
    if stop.load(Ordering::Relaxed) {
        drop(history);
        let td = guard.teardown();
        eprintln!(
            "chaos: interrupted; the cluster is torn down{}; the run so far is in {}",
            td.err()
                .map(|e| format!(" (with an error: {e})"))
                .unwrap_or_default(),
            dir.display()
        );
        println!("ops={ops} ok={ok} failed={failed} indeterminate={unknown} anomalies=0 linearizable=unknown");
        return Ok(ExitCode::from(130));
    }

    // After the faults: a leader, the final reads, convergence.
    let cf = cluster::load(&cluster_dir)?;
    let leader = cluster::wait_for_leader(&cf, LEADER_WAIT);
    match &leader {
        Ok(l) => println!("chaos: leader after healing: n{l}"),
        Err(e) => anomalies.push(format!("no leader after the faults healed: {e}")),
    }
    let keys = wcfg.keys_until(history.now_us());
    let finals = workload::final_reads(
        &cf.client_addrs(),
        &keys,
        FINAL_READER,
        &history,
        FINAL_READ_WAIT,
    );
    let unread: Vec<&str> = finals
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k.as_str())
        .collect();
    if !unread.is_empty() {
        anomalies.push(format!(
            "final reads failed for {} (no answer within {} s)",
            unread.join(", "),
            FINAL_READ_WAIT.as_secs()
        ));
    }
    match converge(&cf, CONVERGE_WAIT) {
        Ok(line) => println!("chaos: converged: {line}"),
        Err(e) => anomalies.push(format!("no convergence: {e}")),
    }
    history
        .flush()
        .map_err(|e| format!("writing the history: {e}"))?;
    drop(history);
    for e in &harness_errors {
        anomalies.push(format!("harness: {e}"));
    }

    // Throughput under faults and without.
    if let Ok(ops) = read_history(&history_path) {
        report_throughput(&ops, &windows, run_us);
    }

    let td = guard.teardown();
    if let Err(e) = td {
        anomalies.push(format!("teardown: {e}"));
    }

    println!("chaos: checking the history (lost writes, Porcupine)...");
    let started = Instant::now();
    let mut an = analyze(&history_path, &html, a.check_timeout)?;
    println!(
        "chaos: checked in {:.1} s{}",
        started.elapsed().as_secs_f64(),
        if an.checker_message.is_empty() {
            String::new()
        } else {
            format!(": {}", an.checker_message.replace('\n', "; "))
        }
    );
    an.anomalies.splice(0..0, anomalies);
    let passed = an.passed();
    if passed {
        if !a.keep {
            let _ = fs::remove_dir_all(&dir);
        } else {
            println!("chaos: kept {}", dir.display());
        }
    } else {
        println!("chaos: FAILED");
        for l in &an.anomalies {
            println!("ANOMALY: {l}");
        }
        if an.linearizable == Some(false) {
            println!(
                "  visualization:  {} (open it in a browser: each failing key, the longest linearizable prefix)",
                html.display()
            );
        }
        println!("  history:        {}", history_path.display());
        println!("  fault schedule: {}", dir.join("schedule.log").display());
        println!("  replica logs:   {}/n<i>.log", dir.join("logs").display());
        println!(
            "  check again:    waverunner chaos --check {}",
            history_path.display()
        );
        println!("  replay:         {replay}");
    }
    println!("{}", an.summary());
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// How far apart applied indexes may be at convergence: with a data plane on, the leader's
/// idle heartbeats are (empty) log entries, so the applied indexes move every tick and are
/// rarely equal at the instant each replica is asked; the digest (the state) must be equal.
const APPLIED_SLACK: u64 = 64;

/// Waits until every replica of `cf` runs and reports the same digest at (nearly: heartbeat
/// entries, [`APPLIED_SLACK`]) the same applied index.
pub fn converge(cf: &ClusterFile, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut seen = Vec::new();
        let mut why = String::new();
        for n in &cf.nodes {
            if !cluster::is_running(n) {
                why = format!("n{} is not running", n.id);
                continue;
            }
            match cluster::fetch_status(n.addresses.admin, Duration::from_secs(1)) {
                Ok((v, _)) => seen.push((n.id, v.applied_index, v.digest, v.keys)),
                Err(e) => why = format!("n{} does not answer: {e}", n.id),
            }
        }
        let same = seen.len() == cf.nodes.len()
            && seen
                .iter()
                .all(|s| s.1.abs_diff(seen[0].1) <= APPLIED_SLACK && s.2 == seen[0].2 && s.1 > 0);
        let line = seen
            .iter()
            .map(|(id, ap, dg, k)| format!("n{id} applied {ap} digest {dg:016x} keys {k}"))
            .collect::<Vec<_>>()
            .join("; ");
        if same {
            return Ok(line);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "after {} s: {line}{}",
                timeout.as_secs(),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({why})")
                }
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Prints throughput (ok operations per second) inside fault windows and outside them.
fn report_throughput(ops: &[Operation], windows: &[(u64, u64, FaultKind)], end_us: u64) {
    let buckets = throughput_buckets(ops, 100_000, end_us);
    let mut in_fault = (0u64, 0u64);
    let mut healthy = (0u64, 0u64);
    let mut per_kind: BTreeMap<FaultKind, (u64, u64)> = BTreeMap::new();
    for (i, &n) in buckets.iter().enumerate() {
        let t = i as u64 * 100_000;
        if t >= end_us {
            break;
        }
        match windows.iter().find(|(s, e, _)| t >= *s && t < *e) {
            Some((_, _, k)) => {
                in_fault.0 += n;
                in_fault.1 += 1;
                let e = per_kind.entry(*k).or_default();
                e.0 += n;
                e.1 += 1;
            }
            None => {
                healthy.0 += n;
                healthy.1 += 1;
            }
        }
    }
    let rate = |(n, b): (u64, u64)| {
        if b == 0 {
            0.0
        } else {
            n as f64 * 10.0 / b as f64
        }
    };
    println!(
        "chaos: throughput {:.0} ops/s healthy ({:.1} s), {:.0} ops/s under faults ({:.1} s){}",
        rate(healthy),
        healthy.1 as f64 / 10.0,
        rate(in_fault),
        in_fault.1 as f64 / 10.0,
        per_kind
            .iter()
            .map(|(k, v)| format!(", {} {:.0} ops/s", k.name(), rate(*v)))
            .collect::<String>()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(c: u64, k: &str, v: &str, call: u64, ret: u64) -> Operation {
        Operation::invoke(c, k, Input::Set { value: v.into() }, call).ok(ret, Output::Set)
    }

    fn fin(k: &str, v: Option<&str>, t: u64) -> Operation {
        Operation::invoke(FINAL_READER, k, Input::Get, t).ok(
            t + 1,
            Output::Get {
                value: v.map(String::from),
            },
        )
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("7x").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn lost_register_write_is_found() {
        let ops = vec![
            set(1, "r0", "c1-1", 10, 20),
            set(2, "r0", "c2-1", 30, 40),
            fin("r0", Some("c1-1"), 100),
        ];
        let l = lost_writes(&ops);
        assert_eq!(l.len(), 1, "{l:?}");
        assert!(l[0].contains("lost acknowledged writes"), "{l:?}");
        let ok = vec![
            set(1, "r0", "c1-1", 10, 20),
            set(2, "r0", "c2-1", 15, 40),
            fin("r0", Some("c1-1"), 100),
        ];
        assert!(lost_writes(&ok).is_empty());
        let missing = vec![set(1, "r0", "c1-1", 10, 20), fin("r0", None, 100)];
        assert_eq!(lost_writes(&missing).len(), 1);
        let phantom = vec![set(1, "r0", "c1-1", 10, 20), fin("r0", Some("zz"), 100)];
        assert_eq!(lost_writes(&phantom).len(), 1);
    }

    #[test]
    fn a_cas_writes_only_when_it_matched() {
        let cas = |c: u64, v: &str, call: u64, ret: u64, ok: bool| {
            Operation::invoke(
                c,
                "r0",
                Input::Cas {
                    expected: Some("c1-1".into()),
                    new: v.into(),
                },
                call,
            )
            .ok(ret, Output::Cas { ok })
        };
        // A "no match" after the final value's write lost nothing.
        let ops = vec![
            set(1, "r0", "c1-1", 10, 20),
            cas(2, "c2-1", 30, 40, false),
            fin("r0", Some("c1-1"), 100),
        ];
        assert!(lost_writes(&ops).is_empty(), "{:?}", lost_writes(&ops));
        // A match after it did, and its value may be the final one.
        let lost = vec![
            set(1, "r0", "c1-1", 10, 20),
            cas(2, "c2-1", 30, 40, true),
            fin("r0", Some("c1-1"), 100),
        ];
        let l = lost_writes(&lost);
        assert!(l.len() == 1 && l[0].contains("\"c2-1\""), "{l:?}");
        let won = vec![
            set(1, "r0", "c1-1", 10, 20),
            cas(2, "c2-1", 30, 40, true),
            fin("r0", Some("c2-1"), 100),
        ];
        assert!(lost_writes(&won).is_empty());
        // A value only a "no match" carried was never written.
        let phantom = vec![
            set(1, "r0", "c1-1", 10, 20),
            cas(2, "c2-1", 30, 40, false),
            fin("r0", Some("c2-1"), 100),
        ];
        assert_eq!(lost_writes(&phantom).len(), 1);
    }

    #[test]
    fn counter_bounds() {
        let incr = |c, d, call, out: Option<i64>| {
            let op = Operation::invoke(c, "n0", Input::Incr { delta: d }, call);
            match out {
                Some(v) => op.ok(call + 5, Output::Incr { value: v }),
                None => op.unknown(Some(call + 5)),
            }
        };
        let base = vec![incr(1, 2, 10, Some(2)), incr(2, 3, 20, None)];
        for (v, bad) in [(1, true), (2, false), (5, false), (6, true)] {
            let mut ops = base.clone();
            ops.push(fin("n0", Some(&v.to_string()), 100));
            assert_eq!(!lost_writes(&ops).is_empty(), bad, "final {v}");
        }
    }

    #[test]
    fn no_final_reads_no_lost_write_check() {
        let ops = vec![set(1, "r0", "c1-1", 10, 20)];
        assert!(lost_writes(&ops).is_empty());
    }

    #[test]
    fn buckets_count_ok_completions() {
        let ops = vec![
            set(1, "r0", "a", 10, 50_000),
            set(1, "r0", "b", 60_000, 150_000),
            Operation::invoke(2, "r0", Input::Get, 10).unknown(Some(120_000)),
        ];
        assert_eq!(throughput_buckets(&ops, 100_000, 250_000), vec![1, 1, 0]);
    }
}
