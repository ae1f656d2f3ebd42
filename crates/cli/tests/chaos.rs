//! `waverunner chaos` end to end: a short run with every fault kind passes, and the checking
//! path a run uses reports a deliberately stale read (and a lost write) as anomalies.
//!
//! Partitions and loss need root (network namespaces, nftables, TC). Without root the run test
//! prints `SKIPPED (needs root)` for them and runs the process faults only — unless `CI=true`,
//! where it fails: CI must exercise every fault kind.

mod cli_harness;
mod cluster_lock;

use cli_harness::cluster_lock;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The client id of the final reads (`chaos::FINAL_READER`).
const FINAL_READER: u64 = 1_000_000;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn unique_dir(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let d = std::env::temp_dir().join(format!(
        "waverunner-itest-chaos-{what}-{}-{nanos:08x}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&d);
    d
}

/// Runs `waverunner ARGS` with a time limit (SIGTERM, which makes chaos tear its cluster
/// down, then SIGKILL); returns (exit code, stdout, stderr).
fn run(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let o = cli_harness::run_limited(
        Command::new(cli_harness::BIN)
            .args(args)
            .env("WAVERUNNER_LOG", "warn"),
        limit,
    );
    (
        o.status.code(),
        cli_harness::text(&o.stdout),
        cli_harness::text(&o.stderr),
    )
}

/// The summary line's fields.
fn summary(stdout: &str) -> std::collections::HashMap<String, String> {
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("ops="),
        "last line is not the summary: {last:?}"
    );
    last.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Runs `waverunner ARGS` (a chaos run, at most 200 s) and requires it to pass: exit 0, no
/// anomaly, linearizable. Returns its stdout, a report for failure messages, and the summary.
fn run_linearizable(args: &[&str]) -> (String, String, std::collections::HashMap<String, String>) {
    let (code, stdout, stderr) = run(args, Duration::from_secs(200));
    let report = format!("exit {code:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    eprintln!("{stdout}");
    let s = summary(&stdout);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(s["anomalies"], "0", "{report}");
    assert_eq!(s["linearizable"], "yes", "{report}");
    (stdout, report, s)
}

#[test]
fn short_run_with_every_fault_passes() {
    let all = [
        "kill",
        "pause",
        "partition",
        "loss",
        "restart",
        "membership",
    ];
    let faults: Vec<&str> = if is_root() {
        all.to_vec()
    } else {
        assert!(
            !in_ci(),
            "CI must run the chaos test as root: partition and loss need network namespaces"
        );
        eprintln!(
            "\n*** SKIPPED (needs root): the partition and loss faults of waverunner chaos; \
             running kill, pause, restart and membership only ***\n"
        );
        vec!["kill", "pause", "restart", "membership"]
    };
    let seed = std::env::var("WAVERUNNER_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 % 1_000_000_007)
        });
    let dir = unique_dir("run");
    let _lock = cluster_lock();
    let faults_arg = faults.join(",");
    let seed_arg = seed.to_string();
    let dir_arg = dir.display().to_string();
    eprintln!("chaos test: seed {seed} (WAVERUNNER_CHAOS_SEED={seed} repeats the schedule)");
    let (stdout, report, s) = run_linearizable(&[
        "chaos",
        "--duration",
        "30s",
        "--faults",
        &faults_arg,
        "--seed",
        &seed_arg,
        "--dir",
        &dir_arg,
        "--phase-ms",
        "500..2000",
        "--base-port",
        "23000",
    ]);
    let ops: u64 = s["ops"].parse().unwrap();
    let ok: u64 = s["ok"].parse().unwrap();
    assert!(ops >= 2_000 && ok >= 1_000, "too little work: {report}");
    // Transactions were recorded and checked; collection commands ran (the digest check at
    // the end covers them).
    let tx = stdout
        .lines()
        .find(|l| l.starts_with("chaos: transactions"))
        .unwrap_or_else(|| panic!("no transaction summary: {report}"));
    let numbers: Vec<u64> = tx
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        numbers.len() >= 3 && numbers[0] > 0 && numbers[2] > 0,
        "no transaction applied or no collection command: {tx}"
    );
    // The scheduler deals every kind once per round: each one was injected.
    let line = stdout
        .lines()
        .find(|l| l.contains("faults injected ("))
        .unwrap_or_else(|| panic!("no fault summary: {report}"));
    for f in &faults {
        assert!(
            line.contains(&format!("{f} ")),
            "{f} never injected: {line}\n{report}"
        );
    }
    assert!(!dir.exists(), "a passing run removes its directory");
}

/// A history written by hand: two sequential writes and then a read of the first value — a
/// stale read — plus the final read a run appends.
fn stale_read_history() -> String {
    let lines = [
        r#"{"client":1,"key":"r0","op":"set","input":{"value":"c1-1"},"call_us":0,"return_us":10,"outcome":"ok","output":{}}"#.to_string(),
        r#"{"client":2,"key":"r0","op":"set","input":{"value":"c2-1"},"call_us":20,"return_us":30,"outcome":"ok","output":{}}"#.to_string(),
        r#"{"client":3,"key":"r0","op":"get","input":{},"call_us":40,"return_us":50,"outcome":"ok","output":{"value":"c1-1"}}"#.to_string(),
        r#"{"client":4,"key":"n0","op":"incr","input":{"delta":2},"call_us":5,"return_us":15,"outcome":"ok","output":{"value":2}}"#.to_string(),
        format!(r#"{{"client":{FINAL_READER},"key":"r0","op":"get","input":{{}},"call_us":100,"return_us":110,"outcome":"ok","output":{{"value":"c2-1"}}}}"#),
        format!(r#"{{"client":{FINAL_READER},"key":"n0","op":"get","input":{{}},"call_us":120,"return_us":130,"outcome":"ok","output":{{"value":"2"}}}}"#),
    ];
    lines.join("\n") + "\n"
}

fn check(history: &Path) -> (Option<i32>, String, String) {
    let h = history.display().to_string();
    run(&["chaos", "--check", &h], Duration::from_secs(180))
}

/// Overload is a state, not a failure: an open loop at twice the cluster's peak against the
/// leader (`--faults overload`, three phases) ends with the history linearizable, every
/// acknowledged write read back (the run's final reads), busy answers given, the same leader
/// at the start and the end of every phase, and no term change over the three phases (neither
/// a data-plane hand-off's re-enable nor an election the leader won again).
/// Goodput against the peak is printed, not asserted. Seed 7 throughout.
fn overload(dataplane: &str) {
    if dataplane == "xdp" && !is_root() {
        assert!(!in_ci(), "CI must run the xdp overload test as root");
        eprintln!(
            "\n*** SKIPPED (needs root): waverunner chaos --faults overload --dataplane xdp ***\n"
        );
        return;
    }
    let dir = unique_dir(&format!("overload-{dataplane}"));
    let _lock = cluster_lock();
    let dir_arg = dir.display().to_string();
    let (stdout, report, _) = run_linearizable(&[
        "chaos",
        "--dataplane",
        dataplane,
        "--duration",
        "16s",
        "--faults",
        "overload",
        "--seed",
        "7",
        "--dir",
        &dir_arg,
        "--phase-ms",
        "2000..3000",
        "--base-port",
        "23200",
    ]);
    let heals: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("heal: overload at"))
        .collect();
    assert!(!heals.is_empty(), "no overload phase ran: {report}");
    let field = |l: &str, suffix: &str| -> u64 {
        l.split(", ")
            .find_map(|f| f.strip_suffix(suffix).and_then(|n| n.parse().ok()))
            .unwrap_or_else(|| panic!("no \"{suffix}\" in {l}\n{report}"))
    };
    let terms: u64 = heals
        .iter()
        .map(|l| {
            l.rsplit_once("term +")
                .and_then(|(_, n)| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no term change in {l}\n{report}"))
        })
        .sum();
    assert_eq!(terms, 0, "term changes under overload:\n{report}");
    // No election: the leader of each phase's start leads at its end.
    for l in &heals {
        let (before, after) = l
            .split_once("leader n")
            .and_then(|(_, r)| r.split_once(',').map(|(ab, _)| ab))
            .and_then(|ab| ab.split_once(" → n"))
            .unwrap_or_else(|| panic!("no \"leader nA → nB\" in {l}\n{report}"));
        assert_eq!(
            before, after,
            "the leader changed under overload: {l}\n{report}"
        );
    }
    let refused: u64 = heals.iter().map(|l| field(l, " refused")).sum();
    assert!(
        refused > 0,
        "nothing was refused busy at twice the peak: {report}"
    );
}

/// Vanilla Raft: no term change at all.
#[test]
fn overload_is_a_state_not_an_election() {
    overload("off");
}

/// The user-space data plane: no term change, as the issue asks (zero elections, zero
/// hand-offs). Measured: none in 18 phases (`docs/chaos.md` "Overload"), none in 24 more of
/// this test's build (2026-11-28), none in 84 more since the busy replies are rationed (and
/// 51 more of release builds), none in 12 phases with `udp` and `xdp` after a stall's ticks
/// stopped expiring timeouts (`Raft::tick_stalled`); a follower that loses an append holds the
/// later ones until it is retransmitted.
#[test]
fn overload_with_the_udp_data_plane_is_a_state() {
    overload("udp");
}

/// The XDP data plane: the same. Measured: none in 17 runs (49 phases) since the store frees
/// what snapshot views kept on its own loop and queued packets are stepped before the ticks
/// (`docs/chaos.md` "Overload"); before those, 2 in 19 phases, and 7–10 a run on seed 7 before
/// the shedding. This test's own build (2026-11-28): one in 48 phases, then none in 84 since
/// the busy replies are rationed (one in 51 of release builds, before a starved follower's
/// ticks were counted from its data plane's last append), and none since a stall's ticks expire
/// no timeout (`Raft::tick_stalled`).
#[test]
fn overload_with_the_xdp_data_plane_is_a_state() {
    overload("xdp");
}

#[test]
fn checker_reports_a_stale_read() {
    let dir = unique_dir("check");
    fs::create_dir_all(&dir).unwrap();
    let history = dir.join("stale.jsonl");
    fs::write(&history, stale_read_history()).unwrap();
    let (code, stdout, stderr) = check(&history);
    let report = format!("exit {code:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    let s = summary(&stdout);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(s["linearizable"], "no", "{report}");
    assert_eq!(s["anomalies"], "1", "{report}");
    assert_eq!(s["ops"], "6", "{report}");
    assert!(
        stdout.contains("key \"r0\" is not linearizable"),
        "{report}"
    );
    assert!(
        dir.join("stale.html").is_file(),
        "no visualization: {report}"
    );

    // The same history without the stale read passes through the same path.
    let good: String = stale_read_history()
        .lines()
        .filter(|l| !l.contains(r#""client":3"#))
        .map(|l| format!("{l}\n"))
        .collect();
    let ok_history = dir.join("good.jsonl");
    fs::write(&ok_history, good).unwrap();
    let (code, stdout, stderr) = check(&ok_history);
    let s = summary(&stdout);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(s["linearizable"], "yes");
    assert_eq!(s["anomalies"], "0");

    // A lost acknowledged write: the final read shows the first of two acknowledged writes. (Its
    // history is not linearizable either.)
    let lost: String = stale_read_history()
        .lines()
        .filter(|l| !l.contains(r#""client":3"#))
        .map(|l| l.replace(r#"{"value":"c2-1"}}"#, r#"{"value":"c1-1"}}"#))
        .map(|l| format!("{l}\n"))
        .collect();
    let lost_history = dir.join("lost.jsonl");
    fs::write(&lost_history, lost).unwrap();
    let (code, stdout, stderr) = check(&lost_history);
    let s = summary(&stdout);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert_eq!(s["linearizable"], "no");
    assert_eq!(s["anomalies"], "2", "{stdout}");
    assert!(stdout.contains("lost acknowledged writes"), "{stdout}");
    fs::remove_dir_all(&dir).unwrap();
}
