//! End-to-end test of `waverunner member add|remove` with the real binary on loopback ports:
//! `up --nodes 3` → `member add` (4 voters) → `member remove 1` (3 voters, replica 1 stopped
//! and shown as removed) → the key-value service still works → `down` (always, from a guard).
//!
//! It takes the machine-wide lock of the other real-process tests: one cluster at a time.

mod cli_harness;
mod cluster_lock;
use cli_harness::*;
use std::fs;
use std::path::Path;

fn cluster_json(dir: &Path) -> serde_json::Value {
    let text = fs::read_to_string(dir.join("cluster.json")).expect("cluster.json exists");
    serde_json::from_str(&text).expect("cluster.json is JSON")
}

/// `status` rows by id: (role, voters column).
fn status_rows(d: &str) -> Vec<(u64, String, String)> {
    let table = ok(&["status", "--dir", d]);
    let mut lines = table.lines();
    let head: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    let voters = head
        .iter()
        .position(|c| *c == "VOTERS")
        .expect("a VOTERS column");
    lines
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (
                cols[0].parse().expect("an id"),
                cols[1].to_string(),
                cols[voters].to_string(),
            )
        })
        .collect()
}

/// The voters the leader reports in `status --json`.
fn leader_voters(d: &str) -> Vec<u64> {
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).expect("status --json");
    let leader = json
        .as_array()
        .expect("an array")
        .iter()
        .find(|s| s["role"] == "leader")
        .unwrap_or_else(|| panic!("a leader: {json}"));
    leader["voters"]
        .as_array()
        .expect("voters")
        .iter()
        .map(|v| v.as_u64().expect("an id"))
        .collect()
}

#[test]
fn member_add_then_remove_on_loopback() {
    let _lock = cluster_lock();
    let dir = unique_dir("loopback");
    let d = dir.display().to_string();
    let _down = Down(dir.clone());
    let base = free_base_port(4);
    ok(&[
        "up",
        "--nodes",
        "3",
        "--netns",
        "off",
        "--dir",
        &d,
        "--base-port",
        &base.to_string(),
    ]);
    assert_eq!(ok(&["kv", "--dir", &d, "set", "before", "1"]).trim(), "OK");

    // Grow to four.
    let out = ok(&["member", "add", "--dir", &d]);
    assert!(out.contains("added replica 4"), "{out}");
    assert!(out.contains("voters 1,2,3,4"), "{out}");
    assert!(
        out.contains(&format!("raft 127.0.0.1:{}", base + 4)),
        "the new replica follows the port plan:\n{out}"
    );
    let rows = status_rows(&d);
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(
        rows.iter()
            .all(|(_, role, v)| role != "down" && v == "1,2,3,4"),
        "{rows:?}"
    );
    assert_eq!(leader_voters(&d), vec![1, 2, 3, 4]);
    let cf = cluster_json(&dir);
    assert_eq!(cf["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(cf["nodes"][3]["id"], 4);
    assert_eq!(cf["nodes"][3]["joined"], true);
    // The new replica serves the data written before it joined.
    assert_eq!(ok(&["kv", "--dir", &d, "get", "before"]).trim(), "1");

    // Shrink by replica 1: stopped, shown as removed, never counted again.
    let pid1 = cf["nodes"][0]["pid"].as_u64().unwrap();
    let out = ok(&["member", "remove", "1", "--dir", &d]);
    assert!(out.contains("removed replica 1"), "{out}");
    assert!(out.contains("voters 2,3,4"), "{out}");
    assert!(!alive(pid1), "replica 1 (pid {pid1}) is stopped");
    let rows = status_rows(&d);
    assert_eq!(rows.len(), 4, "{rows:?}");
    for (id, role, voters) in &rows {
        if *id == 1 {
            assert_eq!(role, "removed", "{rows:?}");
        } else {
            assert_eq!(voters, "2,3,4", "{rows:?}");
        }
    }
    assert_eq!(leader_voters(&d), vec![2, 3, 4]);
    let cf = cluster_json(&dir);
    assert_eq!(cf["removed"][0]["id"], 1);
    assert_eq!(cf["nodes"].as_array().unwrap().len(), 3);

    // The service works on the three.
    assert_eq!(ok(&["kv", "--dir", &d, "set", "after", "2"]).trim(), "OK");
    assert_eq!(ok(&["kv", "--dir", &d, "get", "after"]).trim(), "2");
    assert_eq!(ok(&["kv", "--dir", &d, "get", "before"]).trim(), "1");
    assert_eq!(ok(&["kv", "--dir", &d, "incr", "n", "3"]).trim(), "3");

    // Refusals say why.
    let again = run(&["member", "remove", "1", "--dir", &d]);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("removed already"),
        "{}",
        text(&again.stderr)
    );
    let unknown = run(&["member", "remove", "9", "--dir", &d]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown.stderr).contains("no replica 9"),
        "{}",
        text(&unknown.stderr)
    );

    let pids: Vec<u64> = cf["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["pid"].as_u64().unwrap())
        .collect();
    let out = ok(&["down", "--dir", &d]);
    assert!(out.contains("stopped 3 replicas"), "{out}");
    assert!(!dir.exists());
    for pid in pids {
        assert!(!alive(pid), "pid {pid} is stopped after down");
    }
}
