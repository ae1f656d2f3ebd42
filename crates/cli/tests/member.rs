//! End-to-end test of `waverunner member add|remove` with the real binary on loopback ports:
//! `up --nodes 3` → `member add` (4 voters) → `member remove 1` (3 voters, replica 1 stopped
//! and shown as removed) → the key-value service still works → `down` (always, from a guard).
//!
//! It takes the machine-wide lock of the other real-process tests: one cluster at a time.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_waverunner");

/// No command of this test should take this long.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(90);

fn run(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let e = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} did not finish within {COMMAND_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: o.join().expect("stdout reader"),
        stderr: e.join().expect("stderr reader"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "waverunner {} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs `waverunner down --dir DIR` when dropped, also while the test panics.
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let out = run(&["down", "--dir", &self.0.display().to_string()]);
        if !out.status.success() {
            eprintln!(
                "cleanup: waverunner down --dir {} failed: {}",
                self.0.display(),
                text(&out.stderr)
            );
        }
    }
}

fn unique_dir(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "waverunner-member-test-{what}-{}-{nanos}",
        std::process::id()
    ))
}

/// The machine-wide lock that integration-test clusters hold for their life.
fn cluster_lock() -> File {
    use std::os::unix::io::AsRawFd;
    let path = std::env::temp_dir().join("waverunner-itest-cluster.lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .or_else(|_| File::open(&path))
        .unwrap_or_else(|e| panic!("open the cluster lock file {}: {e}", path.display()));
    loop {
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return f;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "flock: {e}");
    }
}

/// A base port P whose cluster ports (P+i … P+400+i for replicas 1..=4) are all free, in
/// 20000..32000 (below the kernel's usual ephemeral range).
fn free_base_port() -> u16 {
    let mut x = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    for _ in 0..200 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let base = 20_000 + ((x >> 33) % 11_500) as u16;
        let free = (1..=4u16).all(|i| {
            (0..5u16).all(|k| {
                let p = base + 100 * k + i;
                TcpListener::bind(("127.0.0.1", p)).is_ok()
                    && UdpSocket::bind(("127.0.0.1", p)).is_ok()
            })
        });
        if free {
            return base;
        }
    }
    panic!("no free port range found in 20000..32000");
}

fn cluster_json(dir: &Path) -> serde_json::Value {
    let text = fs::read_to_string(dir.join("cluster.json")).expect("cluster.json exists");
    serde_json::from_str(&text).expect("cluster.json is JSON")
}

fn alive(pid: u64) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
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
    let base = free_base_port();
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
