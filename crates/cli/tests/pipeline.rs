//! The TCP front-ends' event loop (`kvserver/src/frontend/tcp.rs`) against real clients on a
//! 3-replica cluster with the data plane off (the data-plane tests run the same pipeline checks
//! on `udp` and `xdp`): pipelines of mixed reads and writes answered in order through raw
//! sockets, `redis-cli --pipe` and redis-py; 2 000 connections at once on one replica; a
//! client that pipelines without reading is held back while others are served, and gets every
//! answer once it reads.

mod cluster_lock;
mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::*;

const WAIT: Duration = Duration::from_secs(20);

fn cluster3() -> Cluster {
    let mut c = Cluster::start(3, Opts::durability("memory"));
    c.wait_leader(WAIT);
    c
}

#[test]
fn pipelines_are_answered_in_order_through_every_replica() {
    require_tool("redis-cli");
    let c = cluster3();
    for id in c.ids() {
        let before = c.status(id).counters.applied_decoded;
        check_pipelines(c.redis_addr(id), &format!("n{id}"), 500);
        // Applied (or read) as parsed by the replica whose front-end took them, leader and
        // follower alike: nothing decoded the commands again.
        let decoded = c.status(id).counters.applied_decoded - before;
        assert!(decoded > 0, "node {id}: nothing applied as parsed");
        // Served by the replica loop: no front-end thread.
        let names = c.thread_names(id);
        assert!(!names.iter().any(|n| n == "clients"), "{names:?}");
        assert!(
            names.iter().any(|n| n == &format!("replica-{id}")),
            "{names:?}"
        );
    }
    // memcached: a pipeline of sets and gets in one write, answered in order.
    let mc = c.memcache_addr(c.ids()[0]);
    let mut req = Vec::new();
    for i in 0..300 {
        req.extend(
            format!(
                "set m{i} 0 0 {}\r\nv{i}\r\nget m{i}\r\n",
                format!("v{i}").len()
            )
            .into_bytes(),
        );
    }
    let mut want = Vec::new();
    for i in 0..300 {
        want.extend(
            format!(
                "STORED\r\nVALUE m{i} 0 {}\r\nv{i}\r\nEND\r\n",
                format!("v{i}").len()
            )
            .into_bytes(),
        );
    }
    let mut s = connect(mc, Duration::from_secs(30));
    s.write_all(&req).expect("write");
    let (got, _) = read_until(&mut s, Duration::from_secs(30), |b| b.len() >= want.len());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
}

/// The same pipelines with the front-end on a thread of its own (`client_loop = "thread"`),
/// submitting through the replica loop's queue instead of proposing on the loop; the native
/// port (no data plane: the front-end's) is served there too.
#[test]
fn pipelines_are_answered_in_order_with_the_front_end_on_its_own_thread() {
    require_tool("redis-cli");
    let mut c = Cluster::start(
        3,
        Opts {
            client_loop: Some("thread"),
            ..Opts::durability("memory")
        },
    );
    c.wait_leader(WAIT);
    for id in c.ids() {
        check_pipelines(c.redis_addr(id), &format!("t{id}"), 300);
        let mut native = c.client_of(&[id]);
        let key = format!("native-t{id}");
        native.set(key.as_bytes(), b"x").expect("native set");
        assert_eq!(
            native.get(key.as_bytes()).expect("native get"),
            Some(b"x".to_vec())
        );
        let names = c.thread_names(id);
        assert!(names.iter().any(|n| n == "clients"), "{names:?}");
    }
}

/// Raises this process's descriptor limit to its hard limit (2 000 sockets need more than the
/// usual 1 024).
fn raise_nofile(need: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a valid rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = r.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
    assert!(
        r.rlim_cur >= need,
        "the descriptor hard limit ({}) is below {need}",
        r.rlim_max
    );
}

#[test]
fn two_thousand_connections_at_once() {
    const N: usize = 2_000;
    raise_nofile(N as u64 + 512);
    let c = cluster3();
    let leader = c
        .ids()
        .into_iter()
        .find(|&i| c.status(i).role == "leader")
        .expect("leader");
    // Half on the leader, half on a follower (which forwards the writes).
    let follower = c
        .ids()
        .into_iter()
        .find(|&i| i != leader)
        .expect("follower");
    let mut conns = Vec::with_capacity(N);
    for i in 0..N {
        let id = if i % 2 == 0 { leader } else { follower };
        conns.push((i, connect(c.redis_addr(id), Duration::from_secs(60))));
    }
    // Every connection sends before any reads: all 2 000 are open and waiting at once.
    for (i, s) in &mut conns {
        let k = format!("conn{i}");
        let mut req = resp_cmd(&[b"SET", k.as_bytes(), k.as_bytes()]);
        req.extend(resp_cmd(&[b"GET", k.as_bytes()]));
        s.write_all(&req).expect("write");
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for (i, s) in &mut conns {
        let k = format!("conn{i}");
        let left = deadline.saturating_duration_since(Instant::now());
        let (got, _) = read_until(s, left, |b| resp_replies(b).len() >= 2);
        assert_eq!(
            resp_replies(&got),
            vec![
                b"+OK\r\n".to_vec(),
                format!("${}\r\n{k}\r\n", k.len()).into_bytes()
            ],
            "connection {i}"
        );
    }
    assert_eq!(
        redis(c.redis_addr(follower), &["GET", "conn1999"]),
        "\"conn1999\""
    );
}

#[test]
fn a_client_that_does_not_read_is_held_back_and_others_are_served() {
    let c = cluster3();
    let a = c.redis_addr(c.ids()[0]);
    let value = vec![b'v'; 1024];
    assert_eq!(
        redis(a, &["SET", "big", std::str::from_utf8(&value).unwrap()]),
        "OK"
    );
    // 20 000 GETs of a 1 KiB value: 20 MiB of answers, more than a connection may hold unsent.
    const N: usize = 20_000;
    let one = resp_cmd(&[b"GET", b"big"]);
    let mut greedy = connect(a, Duration::from_secs(60));
    let writer = {
        let mut w = greedy.try_clone().expect("clone");
        let req: Vec<u8> = one.iter().copied().cycle().take(one.len() * N).collect();
        std::thread::spawn(move || w.write_all(&req).is_ok())
    };
    std::thread::sleep(Duration::from_millis(500));
    // Meanwhile another client is served promptly.
    for i in 0..20 {
        let k = format!("other{i}");
        assert_eq!(redis(a, &["SET", &k, "1"]), "OK");
    }
    // The greedy client now reads every answer, in order.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut want_one = b"$1024\r\n".to_vec();
    want_one.extend_from_slice(&value);
    want_one.extend_from_slice(b"\r\n");
    // Every answer's bytes (the count was one byte short per answer once: the loop then stopped
    // reading about 19 answers early, depending on how the last read fell).
    let want = want_one.len() * N;
    let deadline = Instant::now() + Duration::from_secs(120);
    while got.len() < want && Instant::now() < deadline {
        match greedy.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("read: {e}"),
        }
    }
    assert!(writer.join().expect("writer"), "the pipeline was written");
    let replies = resp_replies(&got);
    assert_eq!(replies.len(), N);
    assert!(replies.iter().all(|r| *r == want_one));
}
