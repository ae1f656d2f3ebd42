//! Bad input against real replica processes: garbage on every port, oversize values, unknown
//! commands, half-open connections, too many connections, and bad configuration files. Every
//! case on a running replica ends by checking that the replica is still alive and serving
//! every protocol, and that `/status` counted the bad input (`counters.client_errors`, or
//! `counters.frames_rejected` for the replica-to-replica port, whose input is not a client's).

mod cluster_lock;
mod common;

use std::io::Write;
use std::net::{Shutdown, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const WAIT: Duration = Duration::from_secs(20);
const READ: Duration = Duration::from_secs(5);

fn cluster(opts: Opts) -> (Cluster, u64) {
    let mut c = Cluster::start(3, opts);
    let leader = c.wait_leader(WAIT);
    (c, leader)
}

/// A follower of the cluster (bad input on a follower must not disturb the leader either).
fn follower(c: &Cluster, leader: u64) -> u64 {
    c.ids()
        .into_iter()
        .find(|&id| id != leader)
        .expect("a follower")
}

fn client_errors(c: &Cluster, id: u64) -> u64 {
    c.status(id).counters.client_errors
}

/// Waits (status is published every tick) until a counter of replica `id` reaches `at_least`.
#[track_caller]
fn wait_counter(
    c: &Cluster,
    id: u64,
    what: &str,
    get: impl Fn(&Status) -> u64,
    at_least: u64,
) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = get(&c.status(id));
        if v >= at_least {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "node {id}: counters.{what} is {v}, expected at least {at_least}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[track_caller]
fn client_errors_grew(c: &Cluster, id: u64, before: u64, by: u64) -> u64 {
    wait_counter(
        c,
        id,
        "client_errors",
        |s| s.counters.client_errors,
        before + by,
    )
}

/// Replica `id` is alive and serves Redis, memcached, the native protocol and `/status`, and
/// writes through it reach every replica.
#[track_caller]
fn assert_serving(c: &mut Cluster, id: u64) {
    c.assert_running(id);
    let key = format!("alive-{}", random_u64());
    assert_eq!(redis(c.redis_addr(id), &["PING"]), "PONG", "node {id}");
    assert_eq!(
        redis(c.redis_addr(id), &["SET", &key, "1"]),
        "OK",
        "node {id}"
    );
    for r in c.ids() {
        if c.live().contains(&r) {
            assert_eq!(
                redis(c.redis_addr(r), &["GET", &key]),
                "\"1\"",
                "node {r} after a write via node {id}"
            );
        }
    }
    let mut s = connect(c.memcache_addr(id), READ);
    s.write_all(format!("get {key}\r\nversion\r\n").as_bytes())
        .expect("write");
    let (out, _) = read_until(&mut s, READ, |b| {
        b.ends_with(b"\r\n") && b.starts_with(b"VALUE") && b.windows(7).any(|w| w == b"VERSION")
    });
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.starts_with(&format!("VALUE {key} 0 1\r\n1\r\nEND\r\nVERSION ")),
        "memcached at node {id}: {out:?}"
    );
    let mut cl = c.client_of(&[id]);
    assert_eq!(
        cl.get(key.as_bytes()).expect("native get"),
        Some(b"1".to_vec()),
        "native at node {id}"
    );
    c.status(id);
}

// ---------------------------------------------------------------------------------------------
// Garbage on every port

#[test]
fn garbage_on_the_redis_port() {
    require_tool("redis-cli");
    let (mut c, leader) = cluster(Opts::default());
    let id = follower(&c, leader);
    let a = c.redis_addr(id);
    let before = client_errors(&c, id);
    // (input, the reply it must start with, whether the server closes the connection)
    let cases: Vec<(Vec<u8>, &str, bool)> = vec![
        (
            b"*abc\r\n".to_vec(),
            "-ERR Protocol error: invalid multibulk length\r\n",
            true,
        ),
        (
            b"*1\r\n+PING\r\n".to_vec(),
            "-ERR Protocol error: expected '$', got '+'\r\n",
            true,
        ),
        (
            b"*1\r\n$-5\r\n".to_vec(),
            "-ERR Protocol error: invalid bulk length\r\n",
            true,
        ),
        (
            b"*1\r\n$4\r\nPINGxx".to_vec(),
            "-ERR Protocol error: expected CRLF after bulk data\r\n",
            true,
        ),
        (
            b"*99999999999999999999999\r\n".to_vec(),
            "-ERR Protocol error:",
            true,
        ),
        (
            vec![b'x'; 100 << 10],
            "-ERR Protocol error: too big inline request\r\n",
            true,
        ),
        (
            b"\"unbalanced\r\n".to_vec(),
            "-ERR Protocol error: unbalanced quotes in request\r\n",
            true,
        ),
        // Inline garbage is a command nobody knows; the connection stays usable.
        (
            b"\x01\x02\xfe\xff garbage\r\nPING\r\n".to_vec(),
            "-ERR unknown command '\x01\x02\u{fffd}\u{fffd}', with args beginning with: 'garbage' \r\n+PONG\r\n",
            false,
        ),
    ];
    let mut errors = 0;
    for (input, want, closes) in &cases {
        let (out, closed) = send_and_read(a, input, READ);
        let out = String::from_utf8_lossy(&out);
        assert!(
            out.starts_with(want),
            "{:?}: reply {out:?}, want {want:?}",
            String::from_utf8_lossy(&input[..input.len().min(40)])
        );
        assert!(
            closed,
            "the server must close (or we half-closed) after {want:?}"
        );
        if *closes {
            // A connection the server closed: nothing after the error.
            assert!(
                out.matches("\r\n").count() == 1,
                "one reply, then closed: {out:?}"
            );
        }
        errors += 1;
    }
    // Random binary garbage, on a connection of its own each.
    for seed in 1..=10 {
        let g = garbage(seed, 4096);
        let (out, _) = send_and_read(a, &g, READ);
        assert!(
            out.is_empty() || out.starts_with(b"-"),
            "random garbage {seed}: {:?}",
            String::from_utf8_lossy(&out)
        );
    }
    client_errors_grew(&c, id, before, errors);
    assert_serving(&mut c, id);
}

#[test]
fn garbage_on_the_memcached_port() {
    let (mut c, leader) = cluster(Opts::default());
    let id = follower(&c, leader);
    let a = c.memcache_addr(id);
    let before = client_errors(&c, id);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // Unknown, but the connection stays usable: the version after it is answered.
        (
            b"\x00\x01\x02\xff\xfe\r\nversion\r\n".to_vec(),
            "ERROR\r\nVERSION ",
        ),
        (
            b"set k 0 0 notanumber\r\n".to_vec(),
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (vec![b'z'; 3000], "CLIENT_ERROR line too long\r\n"),
        (
            b"set k 0 0 3\r\nabcdef\r\nversion\r\n".to_vec(),
            "CLIENT_ERROR bad data chunk\r\n",
        ),
        (
            b"incr k notanumber\r\nversion\r\n".to_vec(),
            "CLIENT_ERROR invalid numeric delta argument\r\nVERSION ",
        ),
        (
            b"touch k soon\r\nversion\r\n".to_vec(),
            "CLIENT_ERROR invalid exptime argument\r\nVERSION ",
        ),
        (
            b"delete k 5\r\nversion\r\n".to_vec(),
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\nVERSION ",
        ),
        (
            format!("get {}\r\nversion\r\n", "k".repeat(251)).into_bytes(),
            "CLIENT_ERROR bad command line format\r\nVERSION ",
        ),
    ];
    let errors = cases.len() as u64;
    for (input, want) in &cases {
        let (out, closed) = send_and_read(a, input, READ);
        let out = String::from_utf8_lossy(&out);
        assert!(
            out.starts_with(want),
            "{:?}: reply {out:?}, want {want:?}",
            String::from_utf8_lossy(&input[..input.len().min(40)])
        );
        assert!(closed);
    }
    for seed in 1..=10 {
        let g = garbage(seed, 4096);
        let (out, _) = send_and_read(a, &g, READ);
        let out = String::from_utf8_lossy(&out);
        assert!(
            out.lines().all(|l| l == "ERROR"
                || l.starts_with("CLIENT_ERROR")
                || l.starts_with("SERVER_ERROR")),
            "random garbage {seed}: {out:?}"
        );
    }
    client_errors_grew(&c, id, before, errors);
    assert_serving(&mut c, id);
}

#[test]
fn garbage_on_the_native_udp_port() {
    let (mut c, leader) = cluster(Opts::default());
    let id = follower(&c, leader);
    let before = client_errors(&c, id);
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let mut sent = 0u64;
    let mut dgrams: Vec<Vec<u8>> = vec![Vec::new(), vec![0], vec![0xff; 1500]];
    for seed in 1..=50u64 {
        dgrams.push(garbage(seed, 1 + (seed as usize * 37) % 1400));
    }
    // A request header with a valid look but a payload that does not decode to an operation.
    let mut valid = waverunner_kv::native::encode_request(
        7,
        1,
        &waverunner_kv::Op::Get {
            keys: vec![b"k".to_vec()],
        },
    )
    .expect("encode");
    let n = valid.len();
    for b in &mut valid[n - 3..] {
        *b ^= 0xa5;
    }
    dgrams.push(valid);
    for d in &dgrams {
        sock.send_to(d, c.client_addr(id)).expect("send");
        sent += 1;
    }
    // Invalid datagrams are dropped without a reply (a reply to a forged source would be a
    // reflection vector).
    let mut buf = [0u8; 2048];
    if let Ok((n, from)) = sock.recv_from(&mut buf) {
        panic!(
            "node {id} answered garbage: {n} bytes from {from}: {:?}",
            &buf[..n.min(64)]
        );
    }
    // The last datagram may decode (a mangled payload can still be an operation): count the
    // rest.
    client_errors_grew(&c, id, before, sent - 1);
    assert_serving(&mut c, id);
}

#[test]
fn garbage_on_the_replica_port() {
    let (mut c, leader) = cluster(Opts::default());
    let term = c.status(leader).term;
    let core_rejected: Vec<u64> = c
        .ids()
        .iter()
        .map(|&id| c.status(id).counters.messages_rejected)
        .collect();
    for id in c.ids() {
        let a = c.raft_addr(id);
        let before = c.status(id).counters.frames_rejected;
        // Random bytes: a bad magic.
        let mut inputs: Vec<Vec<u8>> = (1..=5).map(|s| garbage(s, 2048)).collect();
        // A good hello, then garbage.
        let mut hello = Vec::new();
        waverunner_node::wire::encode_frames(
            &waverunner_node::wire::Frame::Hello { node: 99 },
            &mut hello,
        );
        let mut x = hello.clone();
        x.extend_from_slice(&garbage(9, 500));
        inputs.push(x);
        // A good hello, then a frame whose checksum does not match.
        let mut x = hello.clone();
        let mut f = Vec::new();
        waverunner_node::wire::encode_frames(
            &waverunner_node::wire::Frame::ForwardNack { req: 1, leader: 1 },
            &mut f,
        );
        let last = f.len() - 1;
        f[last] ^= 0xff;
        x.extend_from_slice(&f);
        inputs.push(x);
        // A header announcing a frame far too large.
        let mut x = hello.clone();
        let mut big = hello[..waverunner_node::wire::HEADER_LEN].to_vec();
        big[8..12].copy_from_slice(&u32::MAX.to_le_bytes()); // the length, little-endian
        x.extend_from_slice(&big);
        inputs.push(x);
        for input in &inputs {
            let (out, closed) = send_and_read(a, input, READ);
            assert!(
                out.is_empty(),
                "node {id} answered garbage on its replica port: {out:?}"
            );
            assert!(closed, "node {id} kept a garbage replica connection open");
        }
        // Every connection is rejected and counted.
        wait_counter(
            &c,
            id,
            "frames_rejected",
            |s| s.counters.frames_rejected,
            before + inputs.len() as u64,
        );
        assert_serving(&mut c, id);
    }
    // Nothing reached the Raft cores: the transport rejected it all. (The leader and term
    // are only reported: on a loaded machine an election may happen for other reasons.)
    for (id, before) in c.ids().into_iter().zip(core_rejected) {
        assert_eq!(
            c.status(id).counters.messages_rejected,
            before,
            "garbage reached the Raft core of node {id}"
        );
    }
    let now = c.wait_leader(WAIT);
    let now_term = c.status(now).term;
    if (now, now_term) != (leader, term) {
        println!(
            "note: leader {leader} term {term} became leader {now} term {now_term} during the test"
        );
    }
}

#[test]
fn garbage_on_the_admin_port() {
    let (mut c, leader) = cluster(Opts::default());
    let id = follower(&c, leader);
    let a = c.admin_addr(id);
    let voters = c.status(id).voters;
    let before = client_errors(&c, id);
    // (input, the status line it must start with)
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (garbage(1, 1000), "HTTP/1.0 4"),
        (garbage(2, 1000), "HTTP/1.0 4"),
        (b"\r\n\r\n".to_vec(), "HTTP/1.0 4"),
        (b"POST /status HTTP/1.0\r\n\r\n".to_vec(), "HTTP/1.0 405"),
        (b"GET /membership HTTP/1.0\r\n\r\n".to_vec(), "HTTP/1.0 405"),
        (b"GET /nope HTTP/1.0\r\n\r\n".to_vec(), "HTTP/1.0 404"),
        (vec![b'G'; 10 << 10], "HTTP/1.0 413"),
        // The commands that change the cluster, with bad requests: nothing may change.
        (b"POST /membership HTTP/1.0\r\n\r\n".to_vec(), "HTTP/1.0 411"),
        (
            b"POST /membership HTTP/1.0\r\nContent-Length: 99999999\r\n\r\n".to_vec(),
            "HTTP/1.0 413",
        ),
        (
            [
                &b"POST /membership HTTP/1.0\r\nContent-Length: 300\r\n\r\n"[..],
                &garbage(3, 300),
            ]
            .concat(),
            "HTTP/1.0 400",
        ),
        (
            b"POST /membership HTTP/1.0\r\nContent-Length: 27\r\n\r\n{\"op\":\"remove\",\"id\":\"x\"}"
                .to_vec(),
            "HTTP/1.0 400",
        ),
        (
            b"POST /transfer-leader HTTP/1.0\r\nContent-Length: 8\r\n\r\n{\"id\":0}".to_vec(),
            "HTTP/1.0 400",
        ),
        // A body shorter than announced, then the client half-closes.
        (
            b"POST /transfer-leader HTTP/1.0\r\nContent-Length: 50\r\n\r\n{\"id\"".to_vec(),
            "HTTP/1.0 400",
        ),
    ];
    for (input, want) in &cases {
        let (out, closed) = send_and_read(a, input, READ);
        let out = String::from_utf8_lossy(&out);
        assert!(
            out.starts_with(want),
            "{:?}: admin reply {out:?}, want {want:?}",
            String::from_utf8_lossy(&input[..input.len().min(60)])
        );
        assert!(closed);
    }
    for r in c.ids() {
        assert_eq!(
            c.status(r).voters,
            voters,
            "node {r}: the membership changed"
        );
    }
    // Every one of them was a bad request, counted.
    client_errors_grew(&c, id, before, cases.len() as u64);
    // A connection that never sends anything does not block the others.
    let idle = connect(a, READ);
    let (code, _) = http_get(a, "/metrics", READ).expect("/metrics");
    assert_eq!(code, 200);
    // Idle connections are bounded: past the bound a request is answered 503 at once, and once
    // they are gone requests are served again.
    let mut more: Vec<_> = (0..waverunner_node::admin::MAX_CONNECTIONS)
        .map(|_| connect(a, READ))
        .collect();
    more.push(idle);
    std::thread::sleep(Duration::from_millis(200));
    let (out, closed) = send_and_read(a, b"GET /metrics HTTP/1.0\r\n\r\n", READ);
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.0 503"), "past the bound: {out:?}");
    assert!(closed);
    drop(more);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match http_get(a, "/metrics", READ) {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "not served again after the idle connections closed: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_serving(&mut c, id);
}

// ---------------------------------------------------------------------------------------------
// Oversize values, unknown commands

#[test]
fn oversize_value_over_redis() {
    require_tool("redis-cli");
    let (mut c, leader) = cluster(Opts {
        max_value_bytes: Some(1024),
        ..Opts::default()
    });
    for id in [leader, follower(&c, leader)] {
        let a = c.redis_addr(id);
        let key = format!("big-{id}");
        let before = client_errors(&c, id);
        let ok = "x".repeat(1024);
        assert_eq!(redis(a, &["SET", &key, &ok]), "OK");
        let too_big = "y".repeat(1025);
        let got = redis(a, &["SET", &key, &too_big]);
        assert!(
            got.starts_with("(error) ERR"),
            "SET of 1025 bytes with --max-value-bytes 1024 at node {id}: {got}"
        );
        let got = redis(a, &["SET", &key, &"z".repeat(100_000)]);
        assert!(got.starts_with("(error) ERR"), "SET of 100 kB: {got}");
        // The stored value is the last accepted one.
        for r in c.ids() {
            assert_eq!(redis_raw(c.redis_addr(r), &["GET", &key]), ok, "node {r}");
        }
        client_errors_grew(&c, id, before, 2);
        assert_serving(&mut c, id);
    }
}

#[test]
fn oversize_value_over_memcached() {
    let (mut c, leader) = cluster(Opts {
        max_value_bytes: Some(1024),
        ..Opts::default()
    });
    for id in [leader, follower(&c, leader)] {
        let before = client_errors(&c, id);
        let mut s = connect(c.memcache_addr(id), READ);
        let key = format!("mbig-{id}");
        // Exactly the limit is accepted.
        s.write_all(format!("set {key} 0 0 1024\r\n{}\r\n", "a".repeat(1024)).as_bytes())
            .expect("write");
        let (out, _) = read_until(&mut s, READ, |b| b.ends_with(b"\r\n"));
        assert_eq!(out, b"STORED\r\n");
        // One byte more is refused, its data block skipped, and the connection goes on. The
        // data block arrives in pieces after the reply.
        s.write_all(format!("set {key} 0 0 5000\r\n{}", "b".repeat(100)).as_bytes())
            .expect("write");
        let (out, _) = read_until(&mut s, READ, |b| b.ends_with(b"\r\n"));
        assert_eq!(
            String::from_utf8_lossy(&out),
            "SERVER_ERROR object too large for cache\r\n"
        );
        for _ in 0..7 {
            s.write_all(&[b'b'; 700]).expect("write");
            std::thread::sleep(Duration::from_millis(20));
        }
        s.write_all(b"\r\nget ").expect("write");
        s.write_all(key.as_bytes()).expect("write");
        s.write_all(b"\r\n").expect("write");
        let (out, _) = read_until(&mut s, READ, |b| b.ends_with(b"END\r\n"));
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("VALUE {key} 0 1024\r\n{}\r\nEND\r\n", "a".repeat(1024))
        );
        // One more in one piece, then a set that fits.
        s.write_all(
            format!(
                "set {key} 0 0 1025\r\n{}\r\nset {key} 0 0 2\r\nok\r\nget {key}\r\n",
                "c".repeat(1025)
            )
            .as_bytes(),
        )
        .expect("write");
        let (out, _) = read_until(&mut s, READ, |b| b.ends_with(b"END\r\n"));
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("SERVER_ERROR object too large for cache\r\nSTORED\r\nVALUE {key} 0 2\r\nok\r\nEND\r\n")
        );
        client_errors_grew(&c, id, before, 2);
        assert_serving(&mut c, id);
    }
}

/// `--max-value-bytes` bounds values built by APPEND and prepend too (Redis refuses to grow a
/// string past its limit, memcached refuses an append past its item size).
#[test]
fn append_cannot_grow_a_value_past_max_value_bytes() {
    require_tool("redis-cli");
    let (mut c, leader) = cluster(Opts {
        max_value_bytes: Some(1024),
        ..Opts::default()
    });
    let id = follower(&c, leader);
    let x = "x".repeat(1000);
    assert_eq!(redis(c.redis_addr(id), &["SET", "ap", &x]), "OK");
    let got = redis(c.redis_addr(id), &["APPEND", "ap", &x]);
    assert!(
        got.starts_with("(error) ERR"),
        "APPEND past the limit: {got}"
    );
    assert_eq!(redis(c.redis_addr(id), &["STRLEN", "ap"]), "(integer) 1000");
    let mut s = connect(c.memcache_addr(id), READ);
    s.write_all(format!("set m 0 0 1000\r\n{x}\r\nappend m 0 0 1000\r\n{x}\r\n").as_bytes())
        .expect("write");
    let (out, _) = read_until(&mut s, READ, |b| {
        b.windows(2).filter(|w| *w == b"\r\n").count() >= 2
    });
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.starts_with("STORED\r\nSERVER_ERROR"),
        "memcached append past the limit: {out:?}"
    );
    assert_serving(&mut c, id);
}

#[test]
fn unknown_commands_in_both_protocols() {
    require_tool("redis-cli");
    let (mut c, leader) = cluster(Opts::default());
    for id in c.ids() {
        let before = client_errors(&c, id);
        let got = redis(c.redis_addr(id), &["FROBNICATE", "x"]);
        assert_eq!(
            got,
            "(error) ERR unknown command 'FROBNICATE', with args beginning with: 'x' "
        );
        let got = redis(c.redis_addr(id), &["CLIENT", "FROB"]);
        assert!(
            got.starts_with("(error) ERR unknown subcommand 'FROB'"),
            "{got}"
        );
        let got = redis(c.redis_addr(id), &["GET"]);
        assert_eq!(
            got,
            "(error) ERR wrong number of arguments for 'get' command"
        );
        let (out, _) = send_and_read(
            c.memcache_addr(id),
            b"frobnicate x\r\nmz k v\r\nget\r\nversion\r\n",
            READ,
        );
        let out = String::from_utf8_lossy(&out);
        assert!(
            out.starts_with("ERROR\r\nERROR\r\nERROR\r\nVERSION "),
            "memcached at node {id}: {out:?}"
        );
        client_errors_grew(&c, id, before, 6);
        assert_serving(&mut c, id);
    }
    assert_eq!(c.wait_leader(WAIT), leader);
}

// ---------------------------------------------------------------------------------------------
// Half-open and too many connections

#[test]
fn half_open_connections_do_not_block_others() {
    require_tool("redis-cli");
    let (mut c, leader) = cluster(Opts::default());
    let id = follower(&c, leader);
    let before = client_errors(&c, id);
    // Partial commands, never finished (for now), on both protocols.
    let mut redis_half: Vec<_> = (0..20)
        .map(|_| {
            let mut s = connect(c.redis_addr(id), READ);
            s.write_all(b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$5\r\nab")
                .expect("write");
            s
        })
        .collect();
    let mut mc_half: Vec<_> = (0..20)
        .map(|_| {
            let mut s = connect(c.memcache_addr(id), READ);
            s.write_all(b"set mhalf 0 0 10\r\nabc").expect("write");
            s
        })
        .collect();
    // Connections that sent nothing at all.
    let _silent: Vec<_> = (0..10).map(|_| connect(c.redis_addr(id), READ)).collect();
    std::thread::sleep(Duration::from_millis(700));
    // Everyone else is served, promptly.
    for _ in 0..3 {
        let t = Instant::now();
        assert_serving(&mut c, id);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "serving took {:?} beside half-open connections",
            t.elapsed()
        );
    }
    assert_eq!(
        redis(c.redis_addr(id), &["EXISTS", "half", "mhalf"]),
        "(integer) 0"
    );
    // Finishing one correctly works; the parser resumed where the bytes stopped.
    let s = &mut redis_half[0];
    s.write_all(b"cde\r\n").expect("write");
    let (out, _) = read_until(s, READ, |b| b.ends_with(b"\r\n"));
    assert_eq!(out, b"+OK\r\n");
    let s = &mut mc_half[0];
    s.write_all(b"defghij\r\n").expect("write");
    let (out, _) = read_until(s, READ, |b| b.ends_with(b"\r\n"));
    assert_eq!(out, b"STORED\r\n");
    assert_eq!(redis(c.redis_addr(id), &["GET", "half"]), "\"abcde\"");
    assert_eq!(redis(c.redis_addr(id), &["GET", "mhalf"]), "\"abcdefghij\"");
    // Finishing one badly is a protocol error.
    let s = &mut redis_half[1];
    s.write_all(b"cdeXX").expect("write");
    let (out, closed) = read_to_close(s, READ);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "-ERR Protocol error: expected CRLF after bulk data\r\n"
    );
    assert!(closed);
    let s = &mut mc_half[1];
    s.write_all(b"defghijXX").expect("write");
    let (out, _) = read_until(s, READ, |b| b.ends_with(b"\r\n"));
    assert_eq!(
        String::from_utf8_lossy(&out),
        "CLIENT_ERROR bad data chunk\r\n"
    );
    // Abandoned halfway: closing them is harmless.
    for s in redis_half.iter().chain(mc_half.iter()) {
        let _ = s.shutdown(Shutdown::Both);
    }
    client_errors_grew(&c, id, before, 2);
    assert_serving(&mut c, id);
}

#[test]
fn too_many_connections_are_refused_and_slots_come_back() {
    require_tool("redis-cli");
    let (mut c, leader) = cluster(Opts {
        max_connections: Some(4),
        ..Opts::default()
    });
    let id = follower(&c, leader);
    for (addr, refusal) in [
        (c.redis_addr(id), "-ERR max number of clients reached\r\n"),
        (
            c.memcache_addr(id),
            "SERVER_ERROR too many open connections\r\n",
        ),
    ] {
        let before = client_errors(&c, id);
        let held: Vec<_> = (0..4).map(|_| connect(addr, READ)).collect();
        // The server counts a connection once its thread runs.
        std::thread::sleep(Duration::from_millis(300));
        let mut fifth = connect(addr, READ);
        let (out, closed) = read_to_close(&mut fifth, READ);
        assert_eq!(String::from_utf8_lossy(&out), refusal);
        assert!(closed);
        client_errors_grew(&c, id, before, 1);
        drop(held);
        // Slots come back once the server sees the connections close.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut s = connect(addr, READ);
            let _ = s.write_all(b"PING\r\n");
            let (out, _) = read_until(&mut s, Duration::from_secs(2), |b| b.ends_with(b"\r\n"));
            if out == b"+PONG\r\n" || out == b"ERROR\r\n" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "slots did not come back: {:?}",
                String::from_utf8_lossy(&out)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_serving(&mut c, id);
}

// ---------------------------------------------------------------------------------------------
// Bad configuration files

/// A valid configuration of replica 1 of 3 (ports 0: if it ever started, it would bind
/// ephemeral ports and harm nothing).
fn good_config(dir: &std::path::Path) -> String {
    format!(
        r#"id = 1
data_dir = "{}"
durability = "fsync"

[listen]
raft = "127.0.0.1:0"
client = "127.0.0.1:0"

[[peers]]
id = 2
raft = "127.0.0.1:1"

[[peers]]
id = 3
raft = "127.0.0.1:2"
"#,
        dir.join("data").display()
    )
}

/// `waverunner node --config FILE` must exit non-zero promptly with a message containing
/// every one of `says`.
#[track_caller]
fn node_refuses(dir: &std::path::Path, name: &str, text: &str, says: &[&str]) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the config");
    let o = run_with_timeout(
        Command::new(BIN).arg("node").arg("--config").arg(&path),
        None,
        Duration::from_secs(10),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "{name}: exited successfully; stderr {err}"
    );
    for s in says {
        assert!(
            err.contains(s),
            "{name}: the message should name {s:?}: {err}"
        );
    }
    assert!(
        !err.contains("panicked"),
        "{name}: a panic is not a message: {err}"
    );
    println!("{name}: exit {}: {}", o.status, err.trim());
}

#[test]
fn bad_config_files_are_refused_with_a_clear_message() {
    let dir = unique_dir("config");
    let good = good_config(&dir);
    // Each variant below breaks `good` in one way.
    node_refuses(
        &dir,
        "malformed.toml",
        "id = 1\n[listen\nraft = \"127.0.0.1:0\"\n",
        &["malformed.toml", "TOML"],
    );
    node_refuses(
        &dir,
        "garbage.toml",
        &String::from_utf8_lossy(&garbage(3, 300)),
        &["garbage.toml"],
    );
    node_refuses(
        &dir,
        "unknown_field.toml",
        &good.replace("durability", "bogus_field = 3\ndurability"),
        &["unknown field", "bogus_field"],
    );
    node_refuses(
        &dir,
        "unknown_listen_field.toml",
        &good.replace("raft = \"127.0.0.1:0\"", "rafts = \"127.0.0.1:0\""),
        &["unknown field", "rafts"],
    );
    node_refuses(
        &dir,
        "duplicate_self_id.toml",
        &good.replace("id = 3", "id = 1"),
        &["1", "appears twice"],
    );
    node_refuses(
        &dir,
        "duplicate_peer_id.toml",
        &good.replace("id = 3", "id = 2"),
        &["2", "appears twice"],
    );
    node_refuses(
        &dir,
        "bad_durability.toml",
        &good.replace("\"fsync\"", "\"paper\""),
        &["paper", "durability"],
    );
    node_refuses(
        &dir,
        "bad_address.toml",
        &good.replace("127.0.0.1:0", "localhost-nowhere"),
        &["localhost-nowhere"],
    );
    node_refuses(
        &dir,
        "missing_listen.toml",
        &good.replace("[listen]", "[elsewhere]"),
        &["listen"],
    );
    let missing = dir.join("does-not-exist.toml");
    let o = run_with_timeout(
        Command::new(BIN).arg("node").arg("--config").arg(&missing),
        None,
        Duration::from_secs(10),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("does-not-exist.toml"), "{err}");
    // Duplicate ids given as flags are refused the same way.
    let o = run_with_timeout(
        Command::new(BIN).args([
            "node",
            "--id",
            "1",
            "--data-dir",
            &dir.join("d").display().to_string(),
            "--listen-raft",
            "127.0.0.1:0",
            "--listen-client",
            "127.0.0.1:0",
            "--peer",
            "2=127.0.0.1:1",
            "--peer",
            "2=127.0.0.1:2",
        ]),
        None,
        Duration::from_secs(10),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("appears twice"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A configuration error should point at the user's file: its name, and the line of the
/// problem in it.
#[test]
fn config_errors_point_at_the_file_and_line() {
    let dir = unique_dir("config-line");
    let path = dir.join("unknown_field.toml");
    // The unknown field is on line 3.
    let text = good_config(&dir).replace("durability", "bogus_field = 3\ndurability");
    assert_eq!(
        text.lines().position(|l| l.starts_with("bogus_field")),
        Some(2)
    );
    std::fs::write(&path, text).expect("write");
    let o = run_with_timeout(
        Command::new(BIN).arg("node").arg("--config").arg(&path),
        None,
        Duration::from_secs(10),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!o.status.success());
    assert!(err.contains("unknown_field.toml"), "no file name: {err}");
    assert!(err.contains("line 3"), "not the file's line: {err}");
}
