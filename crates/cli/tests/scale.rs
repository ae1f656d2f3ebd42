//! State at scale on a real 3-replica cluster: hundreds of thousands of keys without a term
//! change while idle, snapshots taken and installed on a wiped follower while writes go on,
//! 64 MiB values through redis-cli and a memcached client, and `maxmemory` refusals with
//! Redis's and memcached's own errors.

mod cluster_lock;
mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const WAIT: Duration = Duration::from_secs(30);

fn cluster3(opts: Opts) -> (Cluster, u64) {
    let mut c = Cluster::start(3, opts);
    let l = c.wait_leader(WAIT);
    (c, l)
}

/// SETs `prefix:i` = a `value_len`-byte value for `i` in `range` through one RESP connection,
/// pipelined 1000 at a time; every reply must be `+OK`.
fn resp_load(addr: SocketAddr, prefix: &str, range: std::ops::Range<u64>, value_len: usize) {
    let mut s = connect(addr, Duration::from_secs(5));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let value = vec![b'v'; value_len];
    let mut i = range.start;
    let mut reply = Vec::new();
    while i < range.end {
        let end = (i + 1000).min(range.end);
        let mut out = Vec::with_capacity(((end - i) as usize) * (value_len + 64));
        for k in i..end {
            let key = format!("{prefix}:{k}");
            write!(
                out,
                "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${value_len}\r\n",
                key.len()
            )
            .unwrap();
            out.extend_from_slice(&value);
            out.extend_from_slice(b"\r\n");
        }
        s.write_all(&out).expect("write the pipeline");
        let want = ((end - i) * 5) as usize;
        reply.clear();
        let mut buf = [0u8; 64 << 10];
        while reply.len() < want {
            let n = s.read(&mut buf).expect("read the replies");
            assert!(n > 0, "the server closed the connection during the load");
            reply.extend_from_slice(&buf[..n]);
        }
        assert_eq!(reply.len(), want, "{}", String::from_utf8_lossy(&reply));
        assert!(
            reply.chunks(5).all(|r| r == b"+OK\r\n"),
            "a SET was refused: {}",
            String::from_utf8_lossy(&reply[..want.min(400)])
        );
        i = end;
    }
}

fn term_and_elections(c: &Cluster) -> Vec<(u64, u64, u64)> {
    c.ids()
        .iter()
        .map(|&id| {
            let s = c.status(id);
            (s.term, s.counters.elections, s.counters.leader_elected)
        })
        .collect()
}

#[test]
fn an_idle_cluster_with_300k_keys_keeps_its_term() {
    let (mut c, leader) = cluster3(Opts::durability("memory"));
    let started = Instant::now();
    resp_load(c.redis_addr(leader), "k", 0..300_000, 16);
    eprintln!("loaded 300k keys in {:?}", started.elapsed());
    let sts = c.wait_converged(WAIT);
    for s in &sts {
        assert_eq!(s.keys, 300_000, "node {}", s.id);
        assert!(s.used_memory > 300_000 * 16, "node {}", s.id);
    }
    let before = term_and_elections(&c);
    // Idle: the digest, key count and memory in every tick's status cost O(1), so nothing
    // starves the loop (with an O(keys) digest, 80 000 keys ended in endless elections).
    std::thread::sleep(Duration::from_secs(10));
    let after = term_and_elections(&c);
    assert_eq!(
        before, after,
        "(term, elections, times elected) per replica changed"
    );
    let sts = c.wait_converged(WAIT);
    assert!(sts.iter().all(|s| s.digest == sts[0].digest));
}

/// Writes unique keys over RESP until stopped; records the acknowledged ones.
struct Writers {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    fn start(n: usize, redis: Vec<SocketAddr>) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..n)
            .map(|w| {
                let (stop, acked, addr) = (stop.clone(), acked.clone(), redis[w % redis.len()]);
                std::thread::spawn(move || {
                    let mut s = connect(addr, Duration::from_secs(5));
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut i = 0u64;
                    let mut buf = [0u8; 256];
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("w{w}:{i}");
                        let cmd =
                            format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$2\r\nok\r\n", key.len());
                        if s.write_all(cmd.as_bytes()).is_err() {
                            return;
                        }
                        let Ok(n) = s.read(&mut buf) else { return };
                        if &buf[..n] == b"+OK\r\n" {
                            acked.lock().unwrap().push(key);
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        Writers {
            stop,
            acked,
            threads,
        }
    }

    fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        Arc::try_unwrap(self.acked).unwrap().into_inner().unwrap()
    }
}

#[test]
fn a_wiped_follower_installs_a_snapshot_while_writes_continue() {
    let (mut c, leader) = cluster3(Opts {
        durability: "fsync",
        snapshot_entries: Some(2_000),
        ..Opts::default()
    });
    resp_load(c.redis_addr(leader), "base", 0..50_000, 100);
    let loaded = c.status(leader).applied_index;
    // A snapshot on demand: answered once written by the background thread.
    let (code, body) = http_post(c.admin_addr(leader), "/snapshot", WAIT);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"ok\":true"), "{body}");
    let st = c.status(leader);
    // (The load's pipelines are batches: fewer entries than keys.)
    assert!(st.snapshot.last_index >= loaded, "{:?}", st.snapshot);
    assert!(st.snapshot.last_bytes > 50_000 * 100, "{:?}", st.snapshot);
    assert!(st.counters.snapshots_taken >= 1);

    let follower = c.ids().into_iter().find(|&id| id != leader).unwrap();
    c.kill(follower, libc::SIGKILL);
    // Its log and snapshot are gone; the hard state (term and vote) stays, so it knows it
    // lost its log and rejoins as recovering (DESIGN §4). A directory wiped whole is a new
    // replica: that one is removed and added again as a member.
    let dir = c.data_dir(follower).to_path_buf();
    std::fs::remove_dir_all(dir.join("wal")).expect("wipe the follower's log");
    let _ = std::fs::remove_file(dir.join("snapshot"));
    let others: Vec<SocketAddr> = c
        .ids()
        .into_iter()
        .filter(|&id| id != follower)
        .map(|id| c.redis_addr(id))
        .collect();
    let writers = Writers::start(4, others);
    // Enough writes for the leader to snapshot and compact past what the follower had.
    std::thread::sleep(Duration::from_secs(2));
    c.restart(follower);
    std::thread::sleep(Duration::from_secs(3));
    let acked = writers.stop();
    assert!(
        acked.len() > 100,
        "only {} writes acknowledged",
        acked.len()
    );
    let sts = c.wait_converged(Duration::from_secs(60));
    let fst = sts.iter().find(|s| s.id == follower).unwrap();
    assert!(
        fst.counters.snapshots_installed >= 1,
        "the wiped follower caught up without a snapshot: {:?}",
        fst.counters
    );
    assert_eq!(fst.keys, 50_000 + acked.len() as u64);
    // Sent in pieces (512 KiB each; the state is over 5 MB), each answered.
    let pieces: u64 = sts.iter().map(|s| s.counters.snapshot_pieces_sent).sum();
    assert!(pieces >= 10, "snapshot pieces sent: {pieces}");
    // Every acknowledged write is on the follower that started from nothing.
    let mut script = String::new();
    for k in acked.iter().step_by((acked.len() / 200).max(1)) {
        script.push_str(&format!("GET {k}\n"));
    }
    let out = redis_script(c.redis_addr(follower), &script);
    assert!(
        out.lines().all(|l| l == "\"ok\""),
        "an acknowledged write is missing on the follower: {out}"
    );
}

fn value_file(len: usize) -> (PathBuf, Vec<u8>) {
    let v: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
    let p = unique_dir("bigvalue");
    std::fs::create_dir_all(&p).unwrap();
    let f = p.join("value");
    std::fs::write(&f, &v).unwrap();
    (f, v)
}

#[test]
fn a_64_mib_value_through_redis_cli_and_memcached() {
    let (mut c, leader) = cluster3(Opts::durability("memory"));
    let before = term_and_elections(&c);
    let (file, v) = value_file(64 << 20);
    let cli = require_tool("redis-cli");
    let follower = c.ids().into_iter().find(|&id| id != leader).unwrap();
    // Written through a follower (forwarded to the leader), read through every replica.
    let o = run_with_timeout(
        Command::new(&cli)
            .args(["-h", "127.0.0.1", "-p"])
            .arg(c.redis_addr(follower).port().to_string())
            .args(["-x", "SET", "big"]),
        Some(&v),
        Duration::from_secs(60),
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "OK");
    for id in c.ids() {
        let o = run_with_timeout(
            Command::new(&cli)
                .args(["-h", "127.0.0.1", "-p"])
                .arg(c.redis_addr(id).port().to_string())
                .args(["--raw", "GET", "big"]),
            None,
            Duration::from_secs(60),
        );
        assert!(o.status.success());
        assert_eq!(o.stdout.len(), v.len() + 1, "node {id}");
        assert!(o.stdout[..v.len()] == v[..], "node {id}: the value differs");
    }
    // memcached: pymemcache sets and gets 64 MiB through another replica.
    let py = python_with_pymemcache();
    let script = r#"
import sys
from pymemcache.client.base import Client
port, path = int(sys.argv[1]), sys.argv[2]
v = open(path, "rb").read()
c = Client(("127.0.0.1", port), timeout=60)
assert c.set("bigmc", v, noreply=False), "set refused"
got = c.get("bigmc")
assert got == v, "value differs: %r bytes" % (None if got is None else len(got))
print("ok", len(got))
"#;
    let o = run_with_timeout(
        Command::new(&py)
            .arg("-c")
            .arg(script)
            .arg(c.memcache_addr(leader).port().to_string())
            .arg(&file),
        None,
        Duration::from_secs(120),
    );
    assert!(
        o.status.success(),
        "pymemcache: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    c.wait_converged(WAIT);
    let after = term_and_elections(&c);
    assert_eq!(before, after, "a 64 MiB value caused an election");
    for id in c.ids() {
        let f = c.status(id).fastpath;
        assert!(
            f.disables.is_empty(),
            "node {id}: data-plane hand-offs {f:?}"
        );
    }
    let _ = std::fs::remove_dir_all(file.parent().unwrap());
}

#[test]
fn maxmemory_refuses_growth_with_redis_and_memcached_errors() {
    let (mut c, leader) = cluster3(Opts {
        durability: "memory",
        maxmemory: Some(1 << 20),
        ..Opts::default()
    });
    let addr = c.redis_addr(leader);
    let value = "x".repeat(1000);
    let mut refused = None;
    for i in 0..3_000 {
        let out = redis(addr, &["SET", &format!("k{i}"), &value]);
        if out != "OK" {
            refused = Some((i, out));
            break;
        }
    }
    let (i, out) = refused.expect("maxmemory never refused a write");
    assert!(i > 500, "refused too early, at key {i}");
    assert_eq!(
        out,
        "(error) OOM command not allowed when used memory > 'maxmemory'."
    );
    // Through a follower too, and for other writes that grow the state.
    let follower = c.ids().into_iter().find(|&id| id != leader).unwrap();
    let f = c.redis_addr(follower);
    assert_eq!(
        redis(f, &["APPEND", "k1", "more"]),
        "(error) OOM command not allowed when used memory > 'maxmemory'."
    );
    // memcached: its own error, and the connection stays usable.
    let (reply, _) = send_and_read(
        c.memcache_addr(leader),
        format!("set big 0 0 1000\r\n{value}\r\nget k5\r\n").as_bytes(),
        Duration::from_secs(5),
    );
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.starts_with("SERVER_ERROR out of memory storing object\r\nVALUE k5 0 1000\r\n"),
        "{reply}"
    );
    // Reads and deletions still pass, and the replica serves on.
    assert_eq!(redis(f, &["GET", "k1"]).len(), value.len() + 2);
    assert_eq!(redis(addr, &["DEL", "k0", "k1", "k2"]), "(integer) 3");
    // `/status` is published every tick (an idle leader ticks every heartbeat): wait, bounded,
    // for the one that counts both refusals at the leader (the SET and memcached's set).
    let deadline = std::time::Instant::now() + WAIT;
    let st = loop {
        let st = c.status(leader);
        if st.counters.oom_refused >= 2 || std::time::Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Refused once over the limit: the state holds about the limit (less what DEL freed).
    assert!(st.used_memory > (1 << 20) - 4000, "{}", st.used_memory);
    assert!(st.counters.oom_refused >= 2, "{:?}", st.counters);
    let info = redis_raw(addr, &["INFO", "memory"]);
    assert!(info.contains("maxmemory:1048576"), "{info}");
    assert!(info.contains("maxmemory_policy:noeviction"), "{info}");
    let used: u64 = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("used_memory:"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no used_memory in INFO: {info}"));
    assert!(used > 500_000, "{info}");
    let (_, metrics) = http_get(c.admin_addr(leader), "/metrics", WAIT).unwrap();
    assert!(
        metrics.contains("waverunner_oom_refused_total"),
        "{metrics}"
    );
    assert!(
        metrics.contains("waverunner_used_memory_bytes"),
        "{metrics}"
    );
    // Room again after deletions: writes pass.
    let mut keys: Vec<String> = (3..600).map(|i| format!("k{i}")).collect();
    keys.insert(0, "DEL".into());
    let args: Vec<&str> = keys.iter().map(String::as_str).collect();
    redis(addr, &args);
    assert_eq!(redis(addr, &["SET", "again", "1"]), "OK");
    c.wait_converged(WAIT);
}
