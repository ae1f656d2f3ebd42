//! End-to-end tests of the local cluster commands with the real binary: `waverunner up`,
//! `status`, `kv` and `down`, on loopback ports and (as root) in network namespaces.
//!
//! Every test stops its cluster with `waverunner down` from a guard's `Drop`, so a failed
//! assertion never leaves replicas or namespaces behind.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_waverunner");

/// No command of these tests should take this long (`up` gives up on a leader after 15 s).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the binary with `args`, killing it if it hangs.
fn run(args: &[&str]) -> Output {
    run_cmd(Command::new(BIN).args(args))
}

fn run_cmd(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    // Read both pipes on threads so a chatty command cannot block on a full pipe.
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

/// Runs the binary and asserts it succeeds; returns its standard output.
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

/// Runs `waverunner down --dir DIR` when dropped, also while a test panics.
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

/// A fresh directory path (not created) under the temporary directory.
fn unique_dir(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "waverunner-cluster-test-{what}-{}-{nanos}",
        std::process::id()
    ))
}

/// The machine-wide lock that integration-test clusters hold for their life (shared with the
/// other test binaries' harness): one cluster at a time keeps timing-sensitive tests honest.
fn cluster_lock() -> File {
    use std::os::unix::io::AsRawFd;
    let path = std::env::temp_dir().join("waverunner-itest-cluster.lock");
    // flock works on a read-only descriptor too (the file may belong to another user).
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

/// A base port P whose cluster ports (P+i … P+400+i for 3 replicas) are all free, in
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
        let free = (1..=3u16).all(|i| {
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

/// Process ids recorded in DIR/cluster.json.
fn pids(dir: &Path) -> Vec<u32> {
    let text = fs::read_to_string(dir.join("cluster.json")).expect("cluster.json exists");
    let v: serde_json::Value = serde_json::from_str(&text).expect("cluster.json is JSON");
    v["nodes"]
        .as_array()
        .expect("nodes array")
        .iter()
        .map(|n| n["pid"].as_u64().expect("pid") as u32)
        .collect()
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// `status` exits 0 and shows `nodes` rows with exactly one leader.
fn check_status(d: &str, nodes: usize) {
    let table = ok(&["status", "--dir", d]);
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), nodes, "{table}");
    let leaders = rows
        .iter()
        .filter(|r| r.split_whitespace().nth(1) == Some("leader"))
        .count();
    assert_eq!(leaders, 1, "exactly one leader:\n{table}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).expect("status --json");
    let docs = json.as_array().expect("an array");
    assert_eq!(docs.len(), nodes);
    assert!(docs.iter().all(|s| s["id"].as_u64().is_some()), "{json}");
}

/// After `down`: the directory is gone, the replicas dead, and `down` again is a no-op.
fn check_down(dir: &Path, pids: &[u32]) {
    let d = dir.display().to_string();
    let out = ok(&["down", "--dir", &d]);
    assert!(out.contains("stopped 3 replicas"), "{out}");
    assert!(!dir.exists(), "{d} is removed");
    for &pid in pids {
        assert!(!alive(pid), "replica pid {pid} is dead after down");
    }
    let again = ok(&["down", "--dir", &d]);
    assert!(again.contains("nothing to stop"), "{again}");
    let status = run(&["status", "--dir", &d]);
    assert!(!status.status.success());
    assert!(
        text(&status.stderr).contains("waverunner up"),
        "{}",
        text(&status.stderr)
    );
}

#[test]
fn loopback_cluster_up_status_kv_down() {
    let _lock = cluster_lock();
    let dir = unique_dir("loopback");
    let d = dir.display().to_string();
    let _down = Down(dir.clone());
    let base = free_base_port();
    let up = ok(&[
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
    assert!(
        up.contains(&format!("redis-cli -h 127.0.0.1 -p {}", base + 201)),
        "up tells how to connect:\n{up}"
    );
    assert_eq!(
        up.lines().filter(|l| l.starts_with("replica ")).count(),
        3,
        "{up}"
    );

    check_status(&d, 3);
    assert_eq!(ok(&["kv", "--dir", &d, "set", "a", "1"]).trim(), "OK");
    assert_eq!(ok(&["kv", "--dir", &d, "get", "a"]).trim(), "1");
    assert_eq!(ok(&["kv", "--dir", &d, "incr", "n", "5"]).trim(), "5");
    assert_eq!(ok(&["kv", "--dir", &d, "incr", "n", "-2"]).trim(), "3");
    assert_eq!(ok(&["kv", "--dir", &d, "incr", "n"]).trim(), "4");
    assert_eq!(ok(&["kv", "--dir", &d, "del", "a"]).trim(), "1");
    assert_eq!(ok(&["kv", "--dir", &d, "del", "a"]).trim(), "0");
    assert_eq!(ok(&["kv", "--dir", &d, "get", "a"]).trim(), "(nil)");
    let bad = run(&["kv", "--dir", &d, "incr", "n", "x"]);
    assert!(!bad.status.success(), "a non-number is refused");

    // A second `up` on the same directory refuses and leaves the running cluster alone.
    let again = run(&[
        "up",
        "--netns",
        "off",
        "--dir",
        &d,
        "--base-port",
        &base.to_string(),
    ]);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("waverunner down"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(ok(&["kv", "--dir", &d, "get", "n"]).trim(), "4");

    let pids = pids(&dir);
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|&p| alive(p)));
    check_down(&dir, &pids);
}

#[test]
fn netns_cluster_up_status_kv_down() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the network-namespace cluster test needs root, and CI runs as root"
        );
        // Straight to the stderr handle: libtest captures eprintln! of passing tests.
        let _ = std::io::stderr().write_all(
            b"\n*** SKIPPED (needs root): netns_cluster_up_status_kv_down; run the tests as root to cover network namespaces ***\n\n",
        );
        return;
    }
    let _lock = cluster_lock();
    let dir = unique_dir("netns");
    let d = dir.display().to_string();
    let _down = Down(dir.clone());
    let up = ok(&["up", "--nodes", "3", "--netns", "on", "--dir", &d]);
    assert!(up.contains("netns wr-n1"), "{up}");
    assert!(up.contains("redis-cli -h 10.77.0.12 -p 6379"), "{up}");
    let namespaces = text(&run_cmd(Command::new("ip").args(["netns", "list"])).stdout);
    for ns in ["wr-n1", "wr-n2", "wr-n3", "wr-client"] {
        assert!(namespaces.contains(ns), "{ns} exists:\n{namespaces}");
    }

    check_status(&d, 3);
    assert_eq!(ok(&["kv", "--dir", &d, "set", "a", "1"]).trim(), "OK");
    // From the host (through the bridge) and from the clients namespace.
    assert_eq!(ok(&["kv", "--dir", &d, "get", "a"]).trim(), "1");
    let from_clients = run_cmd(Command::new("ip").args([
        "netns",
        "exec",
        "wr-client",
        BIN,
        "kv",
        "--dir",
        &d,
        "get",
        "a",
    ]));
    assert!(
        from_clients.status.success(),
        "{}",
        text(&from_clients.stderr)
    );
    assert_eq!(text(&from_clients.stdout).trim(), "1");
    // Redis clients on the host reach a replica's RESP port.
    let mut s =
        TcpStream::connect_timeout(&"10.77.0.12:6379".parse().unwrap(), Duration::from_secs(5))
            .expect("connect to replica 2's Redis port from the host");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n").unwrap();
    let mut reply = [0u8; 64];
    let n = s.read(&mut reply).expect("a RESP reply");
    assert_eq!(&reply[..n], b"$1\r\n1\r\n");

    let pids = pids(&dir);
    check_down(&dir, &pids);
    let namespaces = text(&run_cmd(Command::new("ip").args(["netns", "list"])).stdout);
    assert!(
        !namespaces.contains("wr-"),
        "namespaces removed:\n{namespaces}"
    );
    let links = text(&run_cmd(Command::new("ip").args(["-o", "link", "show"])).stdout);
    assert!(
        !links.contains("wrbr0") && !links.contains("wr-n"),
        "links removed:\n{links}"
    );
}
