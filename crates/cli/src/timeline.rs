//! `waverunner timeline halt|reconfigure`: throughput at the client per 100 ms while the leader
//! is halted (the paper's Figure 8) or while the cluster is reconfigured from 3 to 2 replicas
//! (Figure 9). Each writes `OUT/<name>.csv` (`t_ms,ops`: operations completed in the 100 ms
//! starting at `t_ms`) and renders `OUT/<name>.png` with `scripts/plot_timeline.py`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use waverunner_chaos::history::{read_history, HistoryWriter, Outcome};
use waverunner_chaos::workload::{self, Counts, Protocol, Targets, WorkloadConfig};
use waverunner_node::config::{DurabilityMode, ReadModeConfig};

use crate::chaos::{self, parse_duration, ClusterGuard};
use crate::cluster::{self, DurabilityArg, NetnsChoice, UpOptions};

/// Width of one bucket of the timeline.
const BUCKET_US: u64 = 100_000;

/// Options of `waverunner timeline`.
#[derive(clap::Args)]
pub struct TimelineArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// The leader is stopped (SIGSTOP) at --at and continued (SIGCONT) at --until (Figure 8).
    Halt(Opts),
    /// A replica is removed from a 3-replica cluster at --at: 3 → 2 replicas (Figure 9).
    Reconfigure(Opts),
}

/// Which client protocol the timeline's clients use.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProtocolArg {
    /// Native UDP client (sessions, leader discovery).
    Native,
    /// Redis RESP over TCP.
    Resp,
    /// Half and half.
    Mixed,
}

/// Which replica `reconfigure` removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum RemoveArg {
    /// A follower.
    Follower,
    /// The leader (the configuration change then also moves leadership).
    Leader,
}

#[derive(clap::Args, Clone)]
struct Opts {
    /// Working directory: the cluster and the history [default: <temp dir>/waverunner-timeline].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Where the CSV and the PNG go.
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Closed-loop clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Client protocol.
    #[arg(long, value_enum, default_value = "native")]
    protocol: ProtocolArg,
    /// Durability of the replicas.
    #[arg(long, value_enum, default_value = "memory")]
    durability: DurabilityArg,
    /// Length of the run.
    #[arg(long, default_value = "25s", value_parser = parse_duration)]
    duration: Duration,
    /// When the fault happens.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    at: Duration,
    /// When the halted leader is continued (halt only).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    until: Duration,
    /// Which replica reconfigure removes.
    #[arg(long, value_enum, default_value = "follower")]
    remove: RemoveArg,
    /// First port on loopback (without root).
    #[arg(long, default_value_t = 19_500)]
    base_port: u16,
    /// Write the CSV only (no plot).
    #[arg(long)]
    no_plot: bool,
    /// Keep the working directory (history, replica logs).
    #[arg(long)]
    keep: bool,
}

/// `waverunner timeline`.
pub fn run(a: TimelineArgs) -> ExitCode {
    let (name, opts) = match &a.which {
        Which::Halt(o) => ("halt", o),
        Which::Reconfigure(o) => ("reconfigure", o),
    };
    match run_one(name, opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("waverunner timeline {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_one(name: &str, o: &Opts) -> Result<(), String> {
    if name == "reconfigure" {
        chaos::member::supported()?;
    }
    let dir = chaos::prepare_dir(
        &o.dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("waverunner-timeline")),
    )?;
    fs::write(dir.join("chaos-run.txt"), format!("timeline {name}\n"))
        .map_err(|e| e.to_string())?;
    fs::create_dir_all(&o.out).map_err(|e| format!("cannot create {}: {e}", o.out.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| e.to_string())?;
    }
    let cluster_dir = dir.join("cluster");
    let mut guard = ClusterGuard::new(cluster_dir.clone(), dir.join("logs"));
    let opts = UpOptions {
        nodes: 3,
        durability: match o.durability {
            DurabilityArg::Memory => DurabilityMode::Memory,
            DurabilityArg::Fsync => DurabilityMode::Fsync,
        },
        read_mode: ReadModeConfig::ReadIndex,
        dir: cluster_dir.clone(),
        netns: NetnsChoice::Auto,
        base_port: o.base_port,
        tick_ms: 10,
        election_ticks: 10,
        dataplanes: Vec::new(),
        maxmemory: 0,
        client_loop: Default::default(),
    };
    let cf = cluster::up(&opts)?;
    let history_path = dir.join("history.jsonl");
    let history = HistoryWriter::create(&history_path).map_err(|e| e.to_string())?;
    let targets = Targets::new(
        cf.client_addrs(),
        cf.nodes.iter().map(|n| n.addresses.redis).collect(),
    );
    let wcfg = WorkloadConfig {
        clients: o.clients,
        protocol: match o.protocol {
            ProtocolArg::Native => Protocol::Native,
            ProtocolArg::Resp => Protocol::Resp,
            ProtocolArg::Mixed => Protocol::Mixed,
        },
        seed: 1,
        ..WorkloadConfig::default()
    };
    let counts = Counts::default();
    let clients_stop = AtomicBool::new(false);
    let mut events: Vec<(u64, String)> = Vec::new();
    let mut result = Ok(());
    std::thread::scope(|s| {
        s.spawn(|| workload::run(&wcfg, &targets, &history, &clients_stop, &counts));
        let at = |d: Duration| {
            let until = d.as_micros() as u64;
            while !stop.load(Ordering::Relaxed) && history.now_us() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        at(o.at);
        let none = Default::default();
        let leader = chaos::current_leader(&cf, &none);
        match (name, leader) {
            (_, None) => result = Err("no leader at the time of the fault".to_string()),
            ("halt", Some(l)) => {
                let node = cf.node(l).cloned();
                if let Some(n) = &node {
                    let _ = cluster::kill_node(n, libc::SIGSTOP);
                    events.push((history.now_us(), format!("leader n{l} halted (SIGSTOP)")));
                    at(o.until);
                    let _ = cluster::kill_node(n, libc::SIGCONT);
                    events.push((history.now_us(), format!("n{l} resumed (SIGCONT)")));
                }
            }
            (_, Some(l)) => {
                // A follower: the one furthest behind, so that the voters left are caught up
                // (the leader refuses a removal that would leave a lagging majority).
                let victim = if o.remove == RemoveArg::Leader {
                    l
                } else {
                    cf.nodes
                        .iter()
                        .filter(|n| n.id != l)
                        .map(|n| {
                            let applied =
                                cluster::fetch_status(n.addresses.admin, Duration::from_secs(1))
                                    .map_or(0, |(v, _)| v.applied_index);
                            (applied, n.id)
                        })
                        .min()
                        .map_or(l, |(_, id)| id)
                };
                let t = history.now_us();
                // Under full load the other follower may lag a moment: retry for a few seconds.
                let mut removed = chaos::member::remove(&cluster_dir, victim);
                while removed
                    .as_ref()
                    .is_err_and(|e| e.contains("would lose quorum"))
                    && history.now_us() < t + 5_000_000
                {
                    std::thread::sleep(Duration::from_millis(100));
                    removed = chaos::member::remove(&cluster_dir, victim);
                }
                match removed {
                    Ok(()) => {
                        let role = if victim == l { "leader" } else { "follower" };
                        events.push((t, format!("{role} n{victim} removed: 3 -> 2 replicas")));
                        if let Ok(cf) = cluster::load(&cluster_dir) {
                            targets.set(
                                cf.client_addrs(),
                                cf.nodes.iter().map(|n| n.addresses.redis).collect(),
                            );
                        }
                    }
                    Err(e) => result = Err(e),
                }
            }
        }
        at(o.duration);
        clients_stop.store(true, Ordering::Relaxed);
    });
    drop(history);
    let _ = guard.teardown();
    result?;
    if stop.load(Ordering::Relaxed) {
        return Err("interrupted".into());
    }
    let ops = read_history(&history_path).map_err(|e| e.to_string())?;
    let end_us = o.duration.as_micros() as u64;
    let mut buckets = chaos::throughput_buckets(&ops, BUCKET_US, end_us);
    buckets.truncate((end_us / BUCKET_US) as usize);
    let csv = o.out.join(format!("{name}.csv"));
    let mut text = String::from("t_ms,ops\n");
    for (i, n) in buckets.iter().enumerate() {
        text.push_str(&format!("{},{n}\n", i as u64 * BUCKET_US / 1_000));
    }
    fs::write(&csv, text).map_err(|e| format!("cannot write {}: {e}", csv.display()))?;
    for (t, e) in &events {
        println!("[{:7.3}s] {e}", *t as f64 / 1e6);
    }
    let (ops_n, ok, failed, unknown) = counts.snapshot();
    println!("timeline {name}: {ops_n} operations ({ok} ok, {failed} failed, {unknown} unknown)");
    let mut completions: Vec<u64> = ops
        .iter()
        .filter(|o| o.outcome == Outcome::Ok)
        .filter_map(|o| o.return_us)
        .collect();
    completions.sort_unstable();
    println!("{}", describe(&buckets, &events, &completions));
    println!("csv: {}", csv.display());
    if !o.no_plot {
        let png = o.out.join(format!("{name}.png"));
        let title = match name {
            "halt" => format!(
                "Leader halted at {} s, resumed at {} s ({} clients, 3 replicas)",
                o.at.as_secs_f64(),
                o.until.as_secs_f64(),
                o.clients
            ),
            _ => format!(
                "Reconfiguration 3 -> 2 replicas at {} s ({} clients)",
                o.at.as_secs_f64(),
                o.clients
            ),
        };
        let marks: Vec<String> = events
            .iter()
            .map(|(t, e)| format!("{}:{e}", t / 1_000))
            .collect();
        plot(&csv, &png, &title, &marks)?;
        println!("png: {}", png.display());
    }
    if o.keep {
        println!("kept {}", dir.display());
    } else {
        let _ = fs::remove_dir_all(&dir);
    }
    Ok(())
}

/// Throughput between the events, and after each event the longest run of 100 ms buckets in
/// which no operation completed (within 3 s of it) and the emptiest bucket there.
pub fn describe(buckets: &[u64], events: &[(u64, String)], completions: &[u64]) -> String {
    let per_s = 1e6 / BUCKET_US as f64;
    let rate = |a: usize, b: usize| {
        let s = &buckets[a.min(buckets.len())..b.min(buckets.len())];
        if s.is_empty() {
            0.0
        } else {
            s.iter().sum::<u64>() as f64 * per_s / s.len() as f64
        }
    };
    let idx = |t_us: u64| (t_us / BUCKET_US) as usize;
    let mut lines = Vec::new();
    // Skip the first second of the run and of each interval (start-up, the event's own dip).
    let mut from = 10;
    for (t, what) in events {
        let e = idx(*t);
        lines.push(format!(
            "  {:.1}-{:.1} s: {:.0} ops/s",
            from as f64 / 10.0,
            e as f64 / 10.0,
            rate(from, e)
        ));
        let window = &buckets[e.min(buckets.len())..(e + 30).min(buckets.len())];
        let mut gap = 0;
        let mut run = 0;
        for &n in window {
            run = if n == 0 { run + 1 } else { 0 };
            gap = gap.max(run);
        }
        let low = window.iter().min().copied().unwrap_or(0);
        let (gap_us, gap_at) = longest_gap(completions, *t, *t + 3_000_000);
        lines.push(format!(
            "  at {:.3} s {what}: longest time without a completed operation in the 3 s after: {:.0} ms (from {:.3} s); {} empty 100 ms buckets in a row; emptiest bucket {} ops ({:.0} ops/s)",
            *t as f64 / 1e6,
            gap_us as f64 / 1e3,
            gap_at as f64 / 1e6,
            gap,
            low,
            low as f64 * per_s
        ));
        from = e + 10;
    }
    lines.push(format!(
        "  {:.1}-{:.1} s: {:.0} ops/s",
        from as f64 / 10.0,
        buckets.len() as f64 / 10.0,
        rate(from, buckets.len())
    ));
    lines.join("\n")
}

/// The longest interval between two consecutive completions (sorted µs) that overlaps
/// `[from, to)`, and where it starts: (length µs, start µs).
pub fn longest_gap(completions: &[u64], from: u64, to: u64) -> (u64, u64) {
    let start = completions.partition_point(|&c| c < from).saturating_sub(1);
    let mut best = (0, from);
    let mut prev = completions.get(start).copied().unwrap_or(from);
    for &c in &completions[(start + 1).min(completions.len())..] {
        if prev >= to {
            break;
        }
        if c - prev > best.0 {
            best = (c - prev, prev);
        }
        prev = c;
    }
    best
}

/// A python3 that has matplotlib: the one on PATH, else the system's.
fn python() -> Option<PathBuf> {
    ["python3", "/usr/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| {
            Command::new(p)
                .args(["-c", "import matplotlib"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

fn plot(csv: &Path, png: &Path, title: &str, marks: &[String]) -> Result<(), String> {
    let mut args = vec!["--title".to_string(), title.to_string()];
    for m in marks {
        args.push("--mark".into());
        args.push(m.clone());
    }
    plot_with("plot_timeline.py", csv, png, &args)
}

/// Runs `scripts/<script> CSV PNG ARGS…` with a python3 that has matplotlib.
pub(crate) fn plot_with(
    script: &str,
    csv: &Path,
    png: &Path,
    args: &[String],
) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(script);
    let py = python().ok_or_else(|| {
        format!(
            "no python3 with matplotlib to plot {} (install python3-matplotlib: scripts/install-deps.sh); the CSV is written",
            csv.display()
        )
    })?;
    let out = Command::new(py)
        .arg(&script)
        .arg(csv)
        .arg(png)
        .args(args)
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn gap_and_low() {
        let mut b = vec![100u64; 100];
        for x in &mut b[50..53] {
            *x = 0;
        }
        b[53] = 20;
        let done: Vec<u64> = (0..100u64)
            .filter(|i| b[*i as usize] > 0)
            .map(|i| i * 100_000 + 50_000)
            .collect();
        let s = describe(
            &b,
            &[(5_000_000, "halt".into()), (7_000_000, "resume".into())],
            &done,
        );
        assert!(s.contains("1.0-5.0 s: 1000 ops/s"), "{s}");
        assert!(s.contains("halt: longest time without a completed operation in the 3 s after: 400 ms (from 4.950 s); 3 empty"), "{s}");
        assert!(
            s.contains(
                "resume: longest time without a completed operation in the 3 s after: 100 ms"
            ),
            "{s}"
        );
        assert!(s.contains("8.0-10.0 s: 1000 ops/s"), "{s}");
    }
}
