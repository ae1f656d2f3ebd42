//! What the CLI's end-to-end tests share: running the binary with a deadline, `down` on drop,
//! unique directories, the machine-wide cluster lock, free loopback ports, live pids.
#![allow(dead_code)] // each test binary uses a part

use std::fs;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_waverunner");

/// No command of these tests should take this long (`up` gives up on a leader after 15 s;
/// `member add` waits for catch-up).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(90);

/// Runs the binary with `args`, killing it if it hangs.
pub fn run(args: &[&str]) -> Output {
    run_cmd(Command::new(BIN).args(args))
}

pub fn run_cmd(cmd: &mut Command) -> Output {
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

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs the binary and asserts it succeeds; returns its standard output.
pub fn ok(args: &[&str]) -> String {
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
pub struct Down(pub PathBuf);

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
pub fn unique_dir(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "waverunner-cli-test-{what}-{}-{nanos}",
        std::process::id()
    ))
}

pub use crate::cluster_lock::cluster_lock;

/// A base port P whose cluster ports (P+i … P+400+i for replicas 1..=`replicas`) are all free,
/// in 20000..32000 (below the kernel's usual ephemeral range).
pub fn free_base_port(replicas: u16) -> u16 {
    let mut x = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    for _ in 0..200 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let base = 20_000 + ((x >> 33) % 11_500) as u16;
        let free = (1..=replicas).all(|i| {
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

/// Whether `pid` is a live process (not gone, not a zombie).
pub fn alive(pid: u64) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Runs `cmd` with a time limit: SIGTERM (chaos then tears its cluster down), SIGKILL a minute
/// later; a run that needed the SIGTERM fails the test.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start waverunner");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let mut termed = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() >= deadline && !termed {
            // SAFETY: our own child, not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            termed = true;
        }
        if Instant::now() >= deadline + Duration::from_secs(60) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let o = Output {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    };
    assert!(
        !termed,
        "timed out after {limit:?}:\n{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}
