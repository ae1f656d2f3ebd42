//! `waverunner`: the one binary of Waverunner.
//!
//! `node` runs one replica; `sim` runs the deterministic simulator. Chaos and bench come with
//! the issues that build them.

mod bench;
mod chaos;
mod cluster;
mod frontend;
mod load;
mod member;
mod node;
mod peers;
mod timeline;

use std::ops::Range;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::{Parser, Subcommand, ValueEnum};

/// mimalloc rather than glibc's malloc: no per-allocation header (the store holds one
/// allocation per key) and freed memory is reused instead of unmapped, so a large value does
/// not pay tens of thousands of page faults for every buffer it passes through (docs/bench.md).
/// Its version 2 (the crate's `v2` feature), not 3: after a million keys loaded in batches, v3
/// kept 1.68–1.77× Redis's memory per key, v2 1.30–1.35× (docs/bench.md, bench scale).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use waverunner_sim::{run_seeds, Durability, SimOptions};

#[derive(Parser)]
#[command(
    name = "waverunner",
    version,
    about = "Linearizable replicated key-value service on Raft with an XDP fast path"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once at start-up: the size does not matter
enum Command {
    /// Run one replica of the key-value service (until SIGTERM/SIGINT).
    Node(node::NodeArgs),
    /// Start a local cluster and wait until it has a leader.
    Up(cluster::UpArgs),
    /// Stop the local cluster and remove everything it created.
    Down(cluster::DownArgs),
    /// Show every replica of the local cluster; exits non-zero when there is no leader.
    Status(cluster::StatusArgs),
    /// Get, set, delete or increment a key in the local cluster.
    Kv(cluster::KvArgs),
    /// Add a replica to the local cluster, or remove one (membership change under load).
    Member(member::MemberArgs),
    /// Run a bounded workload through the native client and print throughput and latency.
    Load(load::LoadArgs),
    /// Run the deterministic simulator over a range of seeds; exits non-zero on any violation.
    Sim(SimArgs),
    /// Run a cluster under a seeded fault schedule and check the clients' history for
    /// linearizability; exits non-zero on any anomaly.
    Chaos(chaos::ChaosArgs),
    /// Throughput per 100 ms while the leader is halted or the cluster reconfigured (CSV + PNG).
    Timeline(timeline::TimelineArgs),
    /// Benchmarks: `bench replication` (latency, throughput and CPU per write of each data
    /// plane against the XDP echo floor; needs root), `bench fanout`, and `bench scale`
    /// (millions of keys against Redis: memory, idle CPU, snapshots, catch-up).
    Bench(bench::BenchArgs),
    /// Print the Redis commands the server knows, as the README lists them.
    Commands,
}

#[derive(Clone, Copy, ValueEnum)]
enum DurabilityArg {
    Memory,
    Fsync,
}

#[derive(Clone, Copy, ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(clap::Args)]
struct SimArgs {
    /// Seeds to run, as A..B (B excluded) or a single seed N.
    #[arg(long, value_parser = parse_seeds, default_value = "1..101")]
    seeds: Range<u64>,
    /// Replicas in the simulated cluster.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    nodes: u64,
    /// What a crash keeps: `memory` loses the log (term and vote survive), `fsync` keeps it.
    #[arg(long, value_enum, default_value = "memory")]
    durability: DurabilityArg,
    /// Whether replicas hand replication to the simulated data plane (the real C handler).
    #[arg(long, value_enum, default_value = "on")]
    dataplane: OnOff,
    /// Simulated milliseconds of faults per seed.
    #[arg(long, default_value_t = 1_500)]
    fault_ms: u64,
    /// Simulated milliseconds allowed for recovery after the faults heal (the summary prints
    /// the slowest recovery, to show the margin).
    #[arg(long, default_value_t = waverunner_sim::SimOptions::default().heal_ms)]
    heal_ms: u64,
    /// Worker threads (default: the number of CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one line per seed.
    #[arg(long)]
    verbose: bool,
    /// Print every notable event (roles, faults, membership) of each seed to standard error.
    #[arg(long)]
    trace: bool,
}

fn parse_seeds(s: &str) -> Result<Range<u64>, String> {
    let num = |x: &str| {
        x.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{x}` is not a seed number; write seeds as A..B or N"))
    };
    match s.split_once("..") {
        Some((a, b)) => {
            let (a, b) = (num(a)?, num(b)?);
            if b <= a {
                return Err(format!(
                    "empty seed range {a}..{b}: the end is excluded, so write {a}..{}",
                    a + 1
                ));
            }
            Ok(a..b)
        }
        None => {
            let n = num(s)?;
            Ok(n..n + 1)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The simulator runs the replicas' host code, whose info lines (enables, disables) would
    // be millions per run: warnings only unless asked.
    let default_level = match cli.command {
        Command::Sim(_) => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WAVERUNNER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Node(a) => node::run(a),
        Command::Up(a) => cluster::cmd_up(a),
        Command::Down(a) => cluster::cmd_down(a),
        Command::Status(a) => cluster::cmd_status(a),
        Command::Kv(a) => cluster::cmd_kv(a),
        Command::Member(a) => member::cmd_member(a),
        Command::Load(a) => load::run(a),
        Command::Sim(a) => sim(a),
        Command::Chaos(a) => chaos::run(a),
        Command::Timeline(a) => timeline::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Commands => {
            print!("{}", waverunner_kv::resp::commands_list());
            ExitCode::SUCCESS
        }
    }
}

fn sim(a: SimArgs) -> ExitCode {
    let durability = match a.durability {
        DurabilityArg::Memory => Durability::Memory,
        DurabilityArg::Fsync => Durability::Fsync,
    };
    let opts = SimOptions {
        nodes: a.nodes as usize,
        durability,
        dataplane: matches!(a.dataplane, OnOff::On),
        fault_ms: a.fault_ms,
        heal_ms: a.heal_ms,
        trace: a.trace,
    };
    let dname = match a.durability {
        DurabilityArg::Memory => "memory",
        DurabilityArg::Fsync => "fsync",
    };
    let dp = match a.dataplane {
        OnOff::On => "on",
        OnOff::Off => "off",
    };
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let started = std::time::Instant::now();
    let done = AtomicU64::new(0);
    let verbose = a.verbose;
    let reports = run_seeds(a.seeds.clone(), &opts, threads, &|r| {
        done.fetch_add(1, Ordering::Relaxed);
        if verbose {
            let s = &r.stats;
            println!(
                "seed={} violations={} events={} writes={}/{} (data plane {}) term={} dp_enables={} dp_disables={} crashes={} lost_logs={} partitions={} membership={} transfers={} snapshots={}",
                r.seed, r.violations.len(), s.events, s.writes_acked, s.writes_sent, s.writes_acked_by_dataplane,
                s.max_term, s.dataplane_enables, s.dataplane_disables, s.crashes, s.lost_logs, s.partitions,
                s.membership_changes, s.transfers, s.snapshots_installed
            );
        }
    });
    let mut violations = 0;
    let mut total = waverunner_sim::Stats::default();
    let mut slowest = 0;
    for r in &reports {
        let s = &r.stats;
        total.events += s.events;
        total.writes_sent += s.writes_sent;
        total.writes_acked += s.writes_acked;
        total.writes_acked_by_dataplane += s.writes_acked_by_dataplane;
        total.writes_acked_by_host_reply += s.writes_acked_by_host_reply;
        total.fast_reads_sent += s.fast_reads_sent;
        total.fast_reads_passed_up += s.fast_reads_passed_up;
        total.batch_writes_acked += s.batch_writes_acked;
        total.dataplane_enables += s.dataplane_enables;
        total.dataplane_disables += s.dataplane_disables;
        total.dataplane_disables_large += s.dataplane_disables_large;
        total.crashes += s.crashes;
        total.lost_logs += s.lost_logs;
        total.pauses += s.pauses;
        total.partitions += s.partitions;
        total.loss_bursts += s.loss_bursts;
        total.membership_changes += s.membership_changes;
        total.transfers += s.transfers;
        total.deposed += s.deposed;
        total.snapshots_installed += s.snapshots_installed;
        total.snapshot_pieces += s.snapshot_pieces;
        total.snapshot_pieces_dropped += s.snapshot_pieces_dropped;
        total.snapshot_transfers_abandoned += s.snapshot_transfers_abandoned;
        total.retransmissions += s.retransmissions;
        total.ring_reordered += s.ring_reordered;
        total.held_appends += s.held_appends;
        total.fast_rejects += s.fast_rejects;
        total.reads_sent += s.reads_sent;
        total.reads_checked += s.reads_checked;
        total.reads_served += s.reads_served;
        total.reads_refused += s.reads_refused;
        total.reads_batched += s.reads_batched;
        total.forwarded += s.forwarded;
        total.request_timeouts += s.request_timeouts;
        total.held_back += s.held_back;
        total.dataplane_busy += s.dataplane_busy;
        total.keepalives += s.keepalives;
        total.ticks_not_counted += s.ticks_not_counted;
        total.timeouts_held += s.timeouts_held;
        if s.recovery_us > total.recovery_us {
            total.recovery_us = s.recovery_us;
            slowest = r.seed;
        }
        if !r.violations.is_empty() {
            violations += 1;
            eprintln!("seed {} FAILED:", r.seed);
            for v in &r.violations {
                eprintln!("  {v}");
            }
            eprintln!(
                "  reproduce: waverunner sim --seeds {} --nodes {} --durability {dname} --dataplane {dp} --fault-ms {} --heal-ms {}",
                r.seed, a.nodes, a.fault_ms, a.heal_ms
            );
        }
    }
    println!(
        "checked {} seeds ({} nodes, durability {dname}, data plane {dp}) in {:.1}s: {} events, {} of {} writes acknowledged ({} by the data plane, {} ordered by it and answered by its host, {} in batch entries), {} data-plane enables, {} disables ({} for large writes), {} crashes ({} lost logs), {} pauses, {} partitions, {} loss bursts, {} membership changes, {} leader transfers, {} leaders deposed after election, {} snapshots installed ({} pieces delivered, {} dropped as duplicate or out of order, {} transfers abandoned unfinished), {} retransmitted entries, {} ring records out of order, {} appends held and pushed again, {} fast-path rejects, {} requests forwarded to the leader, {} timed out, {} proposals held back by a leader's bound ({} for the data plane's in-flight bound), {} reads ({} sent to a fast-path port, {} of those passed up to a host; {} checked against acknowledged writes, {} served after their read index applied, {} refused a ReadIndex, {} batched behind another read's entry), {} keepalive messages from paused replicas, {} ticks resumed followers did not count (before their data plane last heard the leader), {} stalled ticks at which a timeout stood at its last tick; the slowest recovery after the heal took {} ms (seed {slowest})",
        reports.len(), a.nodes, started.elapsed().as_secs_f64(), total.events, total.writes_acked, total.writes_sent,
        total.writes_acked_by_dataplane, total.writes_acked_by_host_reply, total.batch_writes_acked, total.dataplane_enables, total.dataplane_disables, total.dataplane_disables_large, total.crashes, total.lost_logs,
        total.pauses, total.partitions, total.loss_bursts, total.membership_changes, total.transfers,
        total.deposed, total.snapshots_installed, total.snapshot_pieces, total.snapshot_pieces_dropped,
        total.snapshot_transfers_abandoned, total.retransmissions, total.ring_reordered,
        total.held_appends, total.fast_rejects, total.forwarded, total.request_timeouts, total.held_back, total.dataplane_busy,
        total.reads_sent, total.fast_reads_sent, total.fast_reads_passed_up, total.reads_checked, total.reads_served, total.reads_refused, total.reads_batched, total.keepalives,
        total.ticks_not_counted, total.timeouts_held, total.recovery_us / 1_000
    );
    println!("seeds={} violations={violations}", reports.len());
    if violations > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
