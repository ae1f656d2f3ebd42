//! The key-value service of a 3-replica cluster of real `waverunner node` processes, driven by
//! real clients: `redis-cli` and `redis-benchmark`, pymemcache and the libmemcached tools, and
//! the native UDP client. Every command goes through every replica (followers forward writes to
//! the leader), and reads through every replica must see a write acknowledged through another
//! (linearizable reads).

mod cluster_lock;
mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const WAIT: Duration = Duration::from_secs(20);

/// Sends `bytes` without half-closing and reads until the server closes (or 5 s).
fn send_and_read_open(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, bool) {
    use std::io::Write;
    let mut s = connect(addr, Duration::from_secs(5));
    s.write_all(bytes).expect("write");
    read_to_close(&mut s, Duration::from_secs(5))
}

fn cluster3(opts: Opts) -> Cluster {
    let mut c = Cluster::start(3, opts);
    c.wait_leader(WAIT);
    c
}

/// `redis-cli` `args` at `addr` must print exactly `want`.
#[track_caller]
fn on(addr: SocketAddr, args: &[&str], want: &str) {
    let got = redis(addr, args);
    assert_eq!(got, want, "redis-cli {args:?} at {addr}");
}

/// `redis-cli` `args` must print `want` at every replica.
#[track_caller]
fn everywhere(c: &Cluster, args: &[&str], want: &str) {
    for id in c.ids() {
        let got = redis(c.redis_addr(id), args);
        assert_eq!(got, want, "redis-cli {args:?} at node {id}");
    }
}

/// The integer of a `(integer) N` line.
#[track_caller]
fn int_of(s: &str) -> i64 {
    s.strip_prefix("(integer) ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an integer reply: {s:?}"))
}

/// `TTL`/`PTTL`-like `args` must give an integer in `range` at every replica.
#[track_caller]
fn int_everywhere_in(c: &Cluster, args: &[&str], range: std::ops::RangeInclusive<i64>) {
    for id in c.ids() {
        let n = int_of(&redis(c.redis_addr(id), args));
        assert!(
            range.contains(&n),
            "redis-cli {args:?} at node {id}: {n} not in {range:?}"
        );
    }
}

#[test]
fn redis_cli_every_command_through_every_replica() {
    require_tool("redis-cli");
    let c = cluster3(Opts::default());
    for w in c.ids() {
        let a = c.redis_addr(w);
        let k = |s: &str| format!("w{w}:{s}");
        let (k1, k2, ex, px, sn, gs, m1, m2, ctr, ap, nosuch) = (
            k("k1"),
            k("k2"),
            k("ex"),
            k("px"),
            k("sn"),
            k("gs"),
            k("m1"),
            k("m2"),
            k("ctr"),
            k("ap"),
            k("nosuch"),
        );

        // Commands answered without the store.
        on(a, &["PING"], "PONG");
        on(a, &["PING", "hello world"], "\"hello world\"");
        on(a, &["ECHO", "hi there"], "\"hi there\"");

        on(a, &["FLUSHALL"], "OK");
        everywhere(&c, &["DBSIZE"], "(integer) 0");

        // SET and its options; GET everywhere right after each acknowledged write.
        on(a, &["SET", &k1, "v1"], "OK");
        everywhere(&c, &["GET", &k1], "\"v1\"");
        on(a, &["SET", &k1, "v2", "XX"], "OK");
        everywhere(&c, &["GET", &k1], "\"v2\"");
        on(a, &["SET", &k1, "v3", "NX"], "(nil)");
        everywhere(&c, &["GET", &k1], "\"v2\"");
        on(a, &["SET", &k2, "v", "NX"], "OK");
        on(a, &["SET", &nosuch, "v", "XX"], "(nil)");
        everywhere(&c, &["EXISTS", &k2, &nosuch], "(integer) 1");
        on(a, &["SET", &k1, "v4", "GET"], "\"v2\"");
        everywhere(&c, &["GET", &k1], "\"v4\"");
        on(a, &["SET", &ex, "v", "EX", "100"], "OK");
        int_everywhere_in(&c, &["TTL", &ex], 95..=100);
        int_everywhere_in(&c, &["PTTL", &ex], 90_000..=100_000);
        on(a, &["SET", &px, "v", "PX", "60000"], "OK");
        int_everywhere_in(&c, &["PTTL", &px], 50_000..=60_000);
        on(
            a,
            &["SET", &px, "v", "EX", "notanumber"],
            "(error) ERR value is not an integer or out of range",
        );
        on(
            a,
            &["SET", &px, "v", "NX", "XX"],
            "(error) ERR syntax error",
        );

        // SETNX, GETSET.
        on(a, &["SETNX", &k1, "x"], "(integer) 0");
        on(a, &["SETNX", &sn, "x"], "(integer) 1");
        everywhere(&c, &["GET", &sn], "\"x\"");
        on(a, &["GETSET", &k1, "v5"], "\"v4\"");
        on(a, &["GETSET", &gs, "a"], "(nil)");
        everywhere(&c, &["GET", &k1], "\"v5\"");
        everywhere(&c, &["GET", &gs], "\"a\"");

        // MSET, MGET, DEL, EXISTS.
        on(a, &["MSET", &m1, "a", &m2, "b"], "OK");
        everywhere(
            &c,
            &["MGET", &m1, &nosuch, &m2],
            "1) \"a\"\n2) (nil)\n3) \"b\"",
        );
        on(a, &["DEL", &m1, &m2, &nosuch], "(integer) 2");
        everywhere(&c, &["EXISTS", &m1, &m2], "(integer) 0");
        everywhere(&c, &["GET", &m1], "(nil)");
        everywhere(&c, &["EXISTS", &k1, &k2, &nosuch], "(integer) 2");

        // Counters.
        on(a, &["INCR", &ctr], "(integer) 1");
        on(a, &["INCRBY", &ctr, "10"], "(integer) 11");
        on(a, &["DECR", &ctr], "(integer) 10");
        on(a, &["DECRBY", &ctr, "5"], "(integer) 5");
        everywhere(&c, &["GET", &ctr], "\"5\"");
        on(
            a,
            &["INCR", &k1],
            "(error) ERR value is not an integer or out of range",
        );
        on(
            a,
            &["INCRBY", &ctr, "x"],
            "(error) ERR value is not an integer or out of range",
        );
        everywhere(&c, &["GET", &ctr], "\"5\"");

        // APPEND, STRLEN.
        on(a, &["APPEND", &ap, "hello"], "(integer) 5");
        on(a, &["APPEND", &ap, " world"], "(integer) 11");
        everywhere(&c, &["GET", &ap], "\"hello world\"");
        everywhere(&c, &["STRLEN", &ap], "(integer) 11");
        everywhere(&c, &["STRLEN", &nosuch], "(integer) 0");

        // EXPIRE, PEXPIRE, TTL, PTTL, PERSIST.
        on(a, &["EXPIRE", &ap, "100"], "(integer) 1");
        int_everywhere_in(&c, &["TTL", &ap], 95..=100);
        on(a, &["PEXPIRE", &ap, "50000"], "(integer) 1");
        int_everywhere_in(&c, &["PTTL", &ap], 40_000..=50_000);
        on(a, &["PERSIST", &ap], "(integer) 1");
        everywhere(&c, &["TTL", &ap], "(integer) -1");
        everywhere(&c, &["PTTL", &ap], "(integer) -1");
        on(a, &["PERSIST", &ap], "(integer) 0");
        everywhere(&c, &["TTL", &nosuch], "(integer) -2");
        everywhere(&c, &["PTTL", &nosuch], "(integer) -2");
        on(a, &["EXPIRE", &nosuch, "10"], "(integer) 0");
        everywhere(&c, &["GET", &ap], "\"hello world\"");

        // DBSIZE, KEYS, SCAN: k1 k2 ex px sn gs ctr ap.
        let mut mine: Vec<String> = [&k1, &k2, &ex, &px, &sn, &gs, &ctr, &ap]
            .iter()
            .map(|s| s.to_string())
            .collect();
        mine.sort();
        everywhere(&c, &["DBSIZE"], "(integer) 8");
        for id in c.ids() {
            let keys = redis_raw(c.redis_addr(id), &["KEYS", &k("*")]);
            assert_eq!(keys.lines().collect::<Vec<_>>(), mine, "KEYS at node {id}");
        }
        everywhere(
            &c,
            &["KEYS", &k("k?")],
            &format!("1) \"{k1}\"\n2) \"{k2}\""),
        );
        everywhere(&c, &["KEYS", &k("[ms][1n]")], &format!("1) \"{sn}\""));
        everywhere(&c, &["KEYS", "nomatch*"], "(empty array)");
        for id in c.ids() {
            let mut cursor = "0".to_string();
            let mut seen = Vec::new();
            for round in 0.. {
                assert!(round < 100, "SCAN at node {id} did not finish in 100 calls");
                let page = redis_raw(
                    c.redis_addr(id),
                    &["SCAN", &cursor, "MATCH", &k("*"), "COUNT", "3"],
                );
                let mut lines = page.lines();
                cursor = lines.next().expect("a cursor").to_string();
                seen.extend(lines.filter(|l| !l.is_empty()).map(String::from));
                if cursor == "0" {
                    break;
                }
            }
            let set: BTreeSet<&String> = seen.iter().collect();
            assert_eq!(
                set.len(),
                seen.len(),
                "SCAN at node {id} returned a key twice: {seen:?}"
            );
            assert_eq!(
                set.into_iter().cloned().collect::<Vec<_>>(),
                mine,
                "SCAN at node {id}"
            );
        }

        // INFO, COMMAND, CLIENT.
        // INFO shows the Raft role and leader as /status does (compared only when /status
        // shows the same leader before and after, so that an election in between on a loaded
        // machine does not fail the test).
        let st_before = c.status(w);
        let info = redis_raw(a, &["INFO"]);
        let st_after = c.status(w);
        // /metrics parses with the reference OpenMetrics parser (Python prometheus_client),
        // and carries the latency histogram and its exact quantiles.
        let (code, metrics) =
            http_get(c.admin_addr(w), "/metrics", Duration::from_secs(5)).expect("/metrics");
        assert_eq!(code, 200, "{metrics}");
        let parsed = run_with_timeout(
            Command::new(python_with_prometheus_client()).args([
                "-c",
                "import sys\n\
                 from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
                 for f in text_string_to_metric_families(sys.stdin.read()):\n    \
                 print(f.name, f.type, len(f.samples))",
            ]),
            Some(metrics.as_bytes()),
            Duration::from_secs(20),
        );
        let families = String::from_utf8_lossy(&parsed.stdout).into_owned();
        assert!(
            parsed.status.success(),
            "/metrics of node {w} does not parse as OpenMetrics: {}\n{metrics}",
            String::from_utf8_lossy(&parsed.stderr)
        );
        for family in [
            "waverunner_write_latency_seconds histogram",
            "waverunner_write_latency_seconds_quantile gauge",
            "waverunner_busy counter",
            "waverunner_dataplane_disables counter",
            "waverunner_term gauge",
        ] {
            assert!(
                families
                    .lines()
                    .any(|l| l.starts_with(&format!("{family} "))),
                "no {family} in /metrics of node {w}: {families}"
            );
        }
        // Writes answered here have exact latency quantiles in /status (HDR histogram).
        let q = st_after.write_latency.quantiles;
        assert!(
            st_after.write_latency.count > 0
                && q.p50_us > 0
                && q.p50_us <= q.p99_us
                && q.p99_us <= q.max_us,
            "write latency quantiles at node {w}: {:?}",
            st_after.write_latency
        );
        assert!(info.starts_with("# Server"), "INFO: {info}");
        assert!(info.contains("redis_version:"), "INFO: {info}");
        for section in [
            "# Memory",
            "# Persistence",
            "# Stats",
            "# Replication",
            "# CPU",
            "# Raft",
        ] {
            assert!(info.contains(section), "INFO lacks {section}: {info}");
        }
        let cpu = redis_raw(a, &["INFO", "CPU"]);
        assert!(
            cpu.contains("used_cpu_user:") && !cpu.contains("used_memory"),
            "INFO CPU: {cpu}"
        );
        if (st_before.term, st_before.leader) == (st_after.term, st_after.leader) {
            for field in [
                format!("raft_role:{}", st_after.role),
                format!("raft_leader:{}", st_after.leader),
                format!("raft_term:{}", st_after.term),
            ] {
                assert!(
                    info.contains(&field),
                    "INFO at node {w} lacks {field}: {info}"
                );
            }
        }
        assert!(int_of(&redis(a, &["COMMAND", "COUNT"])) > 30);
        let list = redis_raw(a, &["COMMAND", "LIST"]);
        for cmd in ["get", "set", "incr", "scan", "flushall"] {
            assert!(
                list.lines().any(|l| l == cmd),
                "COMMAND LIST lacks {cmd}: {list}"
            );
        }
        on(a, &["CLIENT", "SETNAME", &format!("itest-{w}")], "OK");
        let out = redis_script(a, &format!("CLIENT SETNAME itest-{w}\nCLIENT GETNAME\n"));
        assert_eq!(
            out,
            format!("OK\n\"itest-{w}\"\n"),
            "CLIENT SETNAME then GETNAME on one connection"
        );
        on(
            a,
            &["CLIENT", "SETNAME", "has space"],
            "(error) ERR Client names cannot contain spaces, newlines or special characters.",
        );

        // The other commands the front-end supports beyond the issue's list.
        let (sx, psx) = (k("setex"), k("psetex"));
        on(a, &["SETEX", &sx, "100", "v"], "OK");
        int_everywhere_in(&c, &["TTL", &sx], 95..=100);
        on(a, &["PSETEX", &psx, "100000", "v"], "OK");
        int_everywhere_in(&c, &["PTTL", &psx], 90_000..=100_000);
        everywhere(&c, &["TYPE", &sx], "string");
        everywhere(&c, &["TYPE", &nosuch], "none");
        on(a, &["EXPIREAT", &sx, "1"], "(integer) 1");
        everywhere(&c, &["EXISTS", &sx], "(integer) 0");
        on(a, &["UNLINK", &psx, &nosuch], "(integer) 1");
        everywhere(&c, &["EXISTS", &psx], "(integer) 0");
        on(a, &["SELECT", "0"], "OK");
        on(a, &["SELECT", "1"], "(error) ERR DB index is out of range");
        on(
            a,
            &["CONFIG", "GET", "databases"],
            "1) \"databases\"\n2) \"1\"",
        );
        let hello = redis(a, &["HELLO", "2"]);
        let lines: Vec<&str> = hello.lines().map(str::trim).collect();
        assert!(
            lines.starts_with(&["1) \"server\"", "2) \"redis\""]),
            "HELLO 2: {hello}"
        );
        // QUIT answers +OK and closes (a raw connection: redis-cli handles QUIT itself).
        let (out, closed) = send_and_read_open(a, b"PING\r\nQUIT\r\nPING\r\n");
        assert_eq!(out, b"+PONG\r\n+OK\r\n", "QUIT at node {w}");
        assert!(closed, "QUIT at node {w} did not close the connection");

        // An unknown command.
        let got = redis(a, &["NOSUCHCMD", "a", "b"]);
        assert!(
            got.starts_with(
                "(error) ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b'"
            ),
            "{got:?}"
        );

        // FLUSHALL empties every replica.
        on(a, &["FLUSHALL"], "OK");
        everywhere(&c, &["DBSIZE"], "(integer) 0");
        everywhere(&c, &["GET", &k1], "(nil)");
    }
}

/// `COMMAND` without a subcommand (what client libraries send to learn the command table)
/// answers an array and leaves the connection usable (it used to panic the connection thread).
#[test]
fn redis_bare_command_and_info_fields() {
    require_tool("redis-cli");
    let c = cluster3(Opts::default());
    for id in c.ids() {
        let a = c.redis_addr(id);
        let out = redis_script(a, "COMMAND\nPING\n");
        // An array (the command table; empty is what the kv crate documents).
        assert!(
            out.starts_with("1) ") || out.starts_with("(empty array)"),
            "COMMAND at node {id}: {out:?}"
        );
        assert!(
            out.ends_with("PONG\n"),
            "COMMAND then PING on one connection at node {id}: {out:?}"
        );
        // INFO names each field once (a client parsing it into a map must not see duplicates).
        let info = redis_raw(a, &["INFO"]);
        let mut seen = BTreeSet::new();
        for line in info.lines().filter(|l| l.contains(':')) {
            let name = line.split(':').next().unwrap_or_default();
            assert!(
                seen.insert(name.to_string()),
                "INFO at node {id} repeats {name}: {info}"
            );
        }
        // INFO commandstats counts calls, errors and refusals per command; INFO clients the
        // connections.
        redis_script(
            a,
            "SET cs:k 1\nGET cs:k\nINCR cs:nokey x\nHSET cs:k f v\nGET\n",
        );
        let stats = redis_raw(a, &["INFO", "commandstats"]);
        let field = |name: &str| {
            stats
                .lines()
                .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
                .unwrap_or_else(|| panic!("no cmdstat_{name} at node {id}: {stats}"))
                .to_string()
        };
        assert!(field("set").contains("calls=1,"), "{stats}");
        assert!(field("hset").contains("failed_calls=1"), "{stats}");
        assert!(field("get").contains("rejected_calls=1,"), "{stats}");
        assert!(
            !info.contains("cmdstat_"),
            "commandstats is not a default section"
        );
        let clients = redis_raw(a, &["INFO", "clients"]);
        // (At least this one: an earlier client's close may not be seen yet.)
        let connected: u64 = clients
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no connected_clients: {clients}"));
        assert!(connected >= 1, "{clients}");
        assert!(clients.contains("blocked_clients:0"), "{clients}");
        assert!(
            !c.logs(id).contains("panicked"),
            "node {id} log:\n{}",
            c.logs(id)
        );
    }
}

/// `SET … PX 300` with real time: visible everywhere at once, gone everywhere after 400 ms.
#[test]
fn redis_ttl_in_real_time() {
    require_tool("redis-cli");
    let c = cluster3(Opts::default());
    for w in c.ids() {
        let key = format!("ttl-{w}");
        let t0 = Instant::now();
        on(c.redis_addr(w), &["SET", &key, "v", "PX", "300"], "OK");
        let acked = Instant::now();
        for id in c.ids() {
            let got = redis(c.redis_addr(id), &["PTTL", &key]);
            // The expiry is fixed from the leader's clock when it proposes the entry, after t0.
            if t0.elapsed() < Duration::from_millis(290) {
                let ms = int_of(&got);
                assert!((1..=300).contains(&ms), "PTTL {key} at node {id}: {got}");
            } else {
                eprintln!(
                    "PTTL at node {id} came {:?} after the SET: too late to require the key",
                    t0.elapsed()
                );
            }
        }
        // Expired 300 ms after the entry's timestamp, which is before the acknowledgement.
        let until = acked + Duration::from_millis(400);
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        everywhere(&c, &["GET", &key], "(nil)");
        everywhere(&c, &["EXISTS", &key], "(integer) 0");
        everywhere(&c, &["PTTL", &key], "(integer) -2");
    }
    everywhere(&c, &["DBSIZE"], "(integer) 0");
}

/// Reads through every replica see the last write acknowledged through any other, in every
/// read mode.
#[test]
fn linearizable_reads_through_every_replica_in_every_read_mode() {
    for mode in ["read_index", "lease", "log"] {
        let c = cluster3(Opts {
            read_mode: mode,
            ..Opts::default()
        });
        let mut clients: Vec<_> = c.ids().iter().map(|&id| c.client_of(&[id])).collect();
        for i in 0..60u32 {
            let w = i as usize % clients.len();
            let v = format!("{mode}-{i}");
            clients[w]
                .set(b"lin", v.as_bytes())
                .unwrap_or_else(|e| panic!("{mode}: set {i} via node {}: {e}", w + 1));
            for (r, cl) in clients.iter_mut().enumerate() {
                let got = cl
                    .get(b"lin")
                    .unwrap_or_else(|e| panic!("{mode}: get via node {}: {e}", r + 1));
                assert_eq!(
                    got.as_deref(),
                    Some(v.as_bytes()),
                    "{mode}: read via node {} after a write acknowledged via node {}",
                    r + 1,
                    w + 1
                );
            }
        }
        assert_eq!(c.status(1).read_mode, mode);
    }
}

#[test]
fn redis_benchmark_set_get_incr() {
    let bench = require_tool("redis-benchmark");
    let mut c = cluster3(Opts::default());
    let leader = c.wait_leader(WAIT);
    let follower = c
        .ids()
        .into_iter()
        .find(|&id| id != leader)
        .expect("a follower");
    for id in [leader, follower] {
        let a = c.redis_addr(id);
        let o = run_with_timeout(
            Command::new(&bench).args([
                "-h",
                &a.ip().to_string(),
                "-p",
                &a.port().to_string(),
                "-t",
                "set,get,incr",
                "-n",
                "2000",
                "-c",
                "10",
                "-q",
            ]),
            None,
            Duration::from_secs(180),
        );
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            o.status.success(),
            "redis-benchmark at node {id}: {}\n{out}\n{err}",
            o.status
        );
        // -q prints progress lines ending in \r and one final line per test.
        let text = out.replace('\r', "\n");
        for t in ["SET", "GET", "INCR"] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("{t}: ")) && l.contains("requests per second")),
                "redis-benchmark at node {id}: no result for {t}:\n{out}"
            );
        }
        for bad in ["ERR", "rror"] {
            assert!(
                !out.contains(bad) && !err.contains(bad),
                "redis-benchmark at node {id} reported errors:\n{out}\n{err}"
            );
        }
        println!(
            "redis-benchmark via node {id} ({}):",
            if id == leader { "leader" } else { "follower" }
        );
        for l in text.lines().filter(|l| l.contains("requests per second")) {
            println!("  {l}");
        }
    }
    // 3 × 2000 requests per run, and every replica still agrees.
    c.wait_converged(WAIT);
    on(
        c.redis_addr(follower),
        &["EXISTS", "key:__rand_int__", "counter:__rand_int__"],
        "(integer) 2",
    );
    // Its default list of tests (lists, sets, hashes, sorted sets, MSET…) through a follower:
    // every one answered, no error.
    let a = c.redis_addr(follower);
    let o = run_with_timeout(
        Command::new(&bench).args([
            "-h",
            &a.ip().to_string(),
            "-p",
            &a.port().to_string(),
            "-n",
            "1000",
            "-c",
            "10",
            "-q",
        ]),
        None,
        Duration::from_secs(300),
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success(),
        "redis-benchmark default run: {out}\n{err}"
    );
    let text = out.replace('\r', "\n");
    for t in [
        "PING_INLINE",
        "PING_MBULK",
        "SET",
        "GET",
        "INCR",
        "LPUSH",
        "RPUSH",
        "LPOP",
        "RPOP",
        "SADD",
        "HSET",
        "SPOP",
        "ZADD",
        "ZPOPMIN",
        "LRANGE_100 (first 100 elements)",
        "LRANGE_600 (first 600 elements)",
        "MSET (10 keys)",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{t}: ")) && l.contains("requests per second")),
            "redis-benchmark default run: no result for {t}:\n{out}"
        );
    }
    for bad in ["ERR", "rror", "WRONGTYPE"] {
        assert!(
            !out.contains(bad) && !err.contains(bad),
            "redis-benchmark default run reported errors:\n{out}\n{err}"
        );
    }
    c.wait_converged(WAIT);
}

#[test]
fn memcached_pymemcache_through_every_replica() {
    let py = python_with_pymemcache();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/memcache_suite.py");
    let c = cluster3(Opts::default());
    let ports: Vec<String> = c
        .ids()
        .iter()
        .map(|&id| c.memcache_addr(id).port().to_string())
        .collect();
    for w in c.ids() {
        let mut cmd = Command::new(&py);
        cmd.arg(script)
            .arg(format!("w{w}:"))
            .arg(c.memcache_addr(w).port().to_string())
            .args(&ports);
        let o = run_with_timeout(&mut cmd, None, Duration::from_secs(120));
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "memcache_suite.py through node {w}: {}\n{out}\n{err}",
            o.status
        );
        assert!(out.contains("memcache suite passed"), "{out}\n{err}");
        print!("node {w}: {out}");
    }
}

#[test]
fn memcached_libmemcached_tools_round_trip() {
    let cp = require_one_of(&["memccp", "memcp"]);
    let cat = require_one_of(&["memccat", "memcat"]);
    let rm = require_tool("memcrm");
    let c = cluster3(Opts::default());
    let dir = unique_dir("memc");
    let servers = |id: u64| format!("--servers={}", c.memcache_addr(id));
    for w in c.ids() {
        let name = format!("itest-file-{w}.txt");
        let path = dir.join(&name);
        let content = format!("hello from node {w}\nsecond line\n");
        std::fs::write(&path, &content).expect("write the file");
        let o = run_with_timeout(
            Command::new(&cp).arg(servers(w)).arg(&path),
            None,
            Duration::from_secs(30),
        );
        assert!(o.status.success(), "{cp:?} via node {w}: {o:?}");
        for r in c.ids() {
            let o = run_with_timeout(
                Command::new(&cat).arg(servers(r)).arg(&name),
                None,
                Duration::from_secs(30),
            );
            assert!(o.status.success(), "{cat:?} {name} via node {r}: {o:?}");
            assert!(
                String::from_utf8_lossy(&o.stdout).starts_with(&content),
                "{cat:?} {name} via node {r}: {:?}",
                String::from_utf8_lossy(&o.stdout)
            );
        }
        let other = w % 3 + 1;
        let o = run_with_timeout(
            Command::new(&rm).arg(servers(other)).arg(&name),
            None,
            Duration::from_secs(30),
        );
        assert!(o.status.success(), "memcrm {name} via node {other}: {o:?}");
        for r in c.ids() {
            let o = run_with_timeout(
                Command::new(&cat).arg(servers(r)).arg(&name),
                None,
                Duration::from_secs(30),
            );
            assert!(
                !o.status.success(),
                "{cat:?} {name} via node {r} after memcrm: {o:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn native_client_through_every_replica() {
    let c = cluster3(Opts::default());
    let ids = c.ids();
    let mut clients: Vec<_> = ids.iter().map(|&id| c.client_of(&[id])).collect();
    for (w, cw) in ids.iter().zip(0..) {
        let key = format!("native-{w}");
        clients[cw].set(key.as_bytes(), b"v1").expect("set");
        for (r, cr) in ids.iter().zip(0..) {
            assert_eq!(
                clients[cr].get(key.as_bytes()).expect("get"),
                Some(b"v1".to_vec()),
                "{key} via node {r}"
            );
        }
        assert_eq!(clients[cw].get(b"native-missing").expect("get"), None);
        assert!(clients[cw].del(key.as_bytes()).expect("del"));
        assert!(!clients[cw].del(key.as_bytes()).expect("del"));
        for (r, cr) in ids.iter().zip(0..) {
            assert_eq!(
                clients[cr].get(key.as_bytes()).expect("get"),
                None,
                "{key} via node {r} after del"
            );
        }
    }
    // One counter incremented through each replica in turn: every increment applied once.
    let mut expect = 0;
    for round in 0..5 {
        for (w, cw) in ids.iter().zip(0..) {
            expect += 1 + round;
            let got = clients[cw].incr(b"native-ctr", 1 + round).expect("incr");
            assert_eq!(got, expect, "incr via node {w}");
        }
    }
    assert_eq!(clients[0].incr(b"native-ctr", -expect).expect("incr"), 0);
    // A client that knows every replica finds the leader, whichever it asks first, and stays
    // there.
    let leader = c.status(ids[0]).leader;
    let mut order: Vec<u64> = ids.iter().copied().filter(|&i| i != leader).collect();
    order.push(leader);
    let mut all = c.client_of(&order);
    all.set(b"native-all", b"x").expect("set");
    for _ in 0..ids.len() {
        all.get(b"native-all").expect("get");
    }
    assert_eq!(
        all.target(),
        c.client_addr(leader),
        "the client stays on a follower"
    );
    assert_eq!(all.get(b"native-all").expect("get"), Some(b"x".to_vec()));
    // The value a native write stored is what Redis and memcached clients read.
    on(c.redis_addr(2), &["GET", "native-all"], "\"x\"");
}

/// A burst of native requests from one socket, more than the client loop reads in one turn
/// (`native::READ_BUDGET`, 256), sent before any answer is read: every one is answered once,
/// with its own sequence number, and every write is then readable through another replica.
#[test]
fn a_burst_of_native_requests_is_answered_in_full() {
    use waverunner_kv::native::{decode_reply, encode_request, STATUS_OK};
    let mut c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(WAIT);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    const N: u64 = 600;
    // Replies are read as they come, into a receive buffer for all of them, as the load
    // generator's (`waverunner_client::load`): a default buffer holds about 270 of these
    // datagrams, and the replies of one turn of the leader's loop leave together.
    let rx = sock.try_clone().expect("clone");
    waverunner_mmsg::set_buffer(
        std::os::fd::AsRawFd::as_raw_fd(&sock),
        waverunner_mmsg::Buffer::Receive,
        8 << 20,
    );
    let reader = std::thread::spawn(move || {
        let mut seen = BTreeSet::new();
        let mut buf = [0u8; 2048];
        while (seen.len() as u64) < N {
            let Ok((n, _)) = rx.recv_from(&mut buf) else {
                break;
            };
            let r = decode_reply(&buf[..n]).expect("a reply");
            assert_eq!(r.status, STATUS_OK, "seq {}: {:?}", r.seq, r.body);
            assert!(seen.insert(r.seq), "seq {} answered twice", r.seq);
        }
        seen
    });
    for seq in 1..=N {
        let op = waverunner_kv::Op::Set {
            key: format!("burst-{seq}").into_bytes(),
            value: seq.to_string().into_bytes(),
            flags: 0,
            expiry: waverunner_kv::Expiry::None,
            cond: waverunner_kv::Cond::Always,
            get_old: false,
        };
        let pkt = encode_request(0, seq, &op).expect("encode");
        sock.send_to(&pkt, c.client_addr(leader)).expect("send");
    }
    let seen = reader.join().expect("the reader");
    assert_eq!(
        seen.len() as u64,
        N,
        "answered; the leader's counters: {:?}",
        c.status(leader).counters
    );
    assert_eq!(seen, (1..=N).collect::<BTreeSet<u64>>());
    let other = c
        .ids()
        .into_iter()
        .find(|&i| i != leader)
        .expect("a follower");
    let mut cl = c.client_of(&[other]);
    for seq in [1, N / 2, N] {
        assert_eq!(
            cl.get(format!("burst-{seq}").as_bytes()).expect("get"),
            Some(seq.to_string().into_bytes())
        );
    }
}

/// Runs a Python `script` with redis-py 8; it must print a line starting with `ok`.
fn redis_py_8(script: &str, what: &str) {
    let (py, path) = python_with_redis_py_8();
    let o = run_with_timeout(
        Command::new(&py)
            .env("PYTHONPATH", &path)
            .arg("-c")
            .arg(script),
        None,
        Duration::from_secs(60),
    );
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("ok"),
        "{what}: {} {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// redis-py 8 with its default settings (it opens with `HELLO 3` and parses RESP3) on the
/// leader and on a follower, and the same with `protocol=2`: strings, nulls, maps, INFO, the
/// connection's name, a pipeline.
#[test]
fn redis_py_8_default_settings_resp3_and_resp2() {
    let c = cluster3(Opts::default());
    let leader = c.status(c.ids()[0]).leader;
    let follower = *c.ids().iter().find(|&&i| i != leader).expect("a follower");
    for (id, proto) in [(leader, 3), (follower, 3), (leader, 2), (follower, 2)] {
        let addr = c.redis_addr(id);
        let kwargs = if proto == 2 { ", protocol=2" } else { "" };
        let script = format!(
            r#"
import redis
assert redis.__version__.startswith("8."), redis.__version__
r = redis.Redis(host="{ip}", port={port}, socket_timeout=10{kwargs})
assert r.ping() is True
k = "py8:{id}:{proto}"
assert r.set(k, "v") is True
assert r.get(k) == b"v"
assert r.get(k + ":missing") is None
assert r.mget([k, k + ":missing"]) == [b"v", None]
assert r.set(k, "w", nx=True) is None
assert r.set(k, "w", xx=True, get=True) == b"v"
assert r.incr(k + ":n") == 1
assert r.expire(k, 100) is True
assert 0 < r.ttl(k) <= 100
s = lambda x: x.decode() if isinstance(x, bytes) else x
cg = r.config_get("databases")
assert {{s(a): s(b) for a, b in cg.items()}} == {{"databases": "1"}}, cg
info = r.info()
assert info["redis_version"] == "7.0.0", info
assert r.client_setname("app") is True
assert s(r.client_getname()) == "app"
assert r.client_id() > 0
p = r.pipeline(transaction=False)
p.set(k + ":p", "1").incr(k + ":p").get(k + ":p")
assert p.execute() == [True, 2, b"2"]
c = r.connection_pool.get_connection()
c.send_command("HELLO")
hello = c.read_response()
r.connection_pool.release(c)
got = hello[b"proto"] if isinstance(hello, dict) else dict(zip(hello[::2], hello[1::2]))[b"proto"]
assert got == {proto}, hello
print("ok")
"#,
            ip = addr.ip(),
            port = addr.port(),
        );
        redis_py_8(
            &script,
            &format!("redis-py 8 (protocol {proto}) at node {id}"),
        );
    }
}

/// `MULTI` … `EXEC` on the leader and on a follower, byte for byte as Redis 7 answers: queued
/// commands answered `+QUEUED`, `EXEC` with every reply in order (a command's own error in its
/// place, the others applied), `DISCARD`, queueing errors ending in `EXECABORT`, misuse errors;
/// and redis-py's default pipeline (a transaction).
#[test]
fn transactions_multi_exec_discard() {
    let c = cluster3(Opts::default());
    let leader = c.status(c.ids()[0]).leader;
    let follower = *c.ids().iter().find(|&&i| i != leader).expect("a follower");
    for id in [leader, follower] {
        let addr = c.redis_addr(id);
        let k = format!("tx{id}");
        let cmds: Vec<Vec<&[u8]>> = vec![
            vec![b"EXEC"],
            vec![b"DISCARD"],
            vec![b"MULTI"],
            vec![b"SET", k.as_bytes(), b"a"],
            vec![b"INCR", k.as_bytes()],
            vec![b"APPEND", k.as_bytes(), b"b"],
            vec![b"GET", k.as_bytes()],
            vec![b"PING"],
            vec![b"MULTI"],
            vec![b"EXEC"],
            vec![b"MULTI"],
            vec![b"SET", k.as_bytes(), b"lost"],
            vec![b"DISCARD"],
            vec![b"MULTI"],
            vec![b"SET", k.as_bytes(), b"lost"],
            vec![b"NOSUCH"],
            vec![b"GET"],
            vec![b"EXEC"],
            vec![b"GET", k.as_bytes()],
            vec![b"MULTI"],
            vec![b"EXEC"],
            vec![b"MULTI"],
            vec![b"SET", k.as_bytes(), b"never"],
            vec![b"SAVE"],
            vec![b"EXEC"],
            vec![b"GET", k.as_bytes()],
        ];
        let mut req = Vec::new();
        for a in &cmds {
            req.extend(resp_cmd(a));
        }
        let (out, _) = send_and_read(addr, &req, Duration::from_secs(10));
        let want = "-ERR EXEC without MULTI\r\n\
             -ERR DISCARD without MULTI\r\n\
             +OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
             -ERR MULTI calls can not be nested\r\n\
             *5\r\n+OK\r\n-ERR value is not an integer or out of range\r\n:2\r\n$2\r\nab\r\n+PONG\r\n\
             +OK\r\n+QUEUED\r\n+OK\r\n\
             +OK\r\n+QUEUED\r\n\
             -ERR unknown command 'NOSUCH', with args beginning with: \r\n\
             -ERR wrong number of arguments for 'get' command\r\n\
             -EXECABORT Transaction discarded because of previous errors.\r\n\
             $2\r\nab\r\n\
             +OK\r\n*0\r\n\
             +OK\r\n+QUEUED\r\n\
             -ERR Command not allowed inside a transaction\r\n\
             -EXECABORT Transaction discarded because of previous errors.\r\n\
             $2\r\nab\r\n";
        assert_eq!(String::from_utf8_lossy(&out), want, "at node {id}");
    }
    // redis-py's default pipeline is a transaction.
    for id in [leader, follower] {
        let addr = c.redis_addr(id);
        let script = format!(
            r#"
import redis
r = redis.Redis(host="{ip}", port={port}, socket_timeout=10)
p = r.pipeline()
p.set("txpy{id}", 5).incrby("txpy{id}", 3).get("txpy{id}")
assert p.execute() == [True, 8, b"8"]
print("ok")
"#,
            ip = addr.ip(),
            port = addr.port(),
        );
        redis_py_8(&script, &format!("redis-py transaction at node {id}"));
    }
}

/// memcached's meta commands on the leader and on a follower, byte for byte as memcached
/// 1.6.18 answered the same exchanges (recorded against it on this machine): `mn`; `mg` with
/// value, flags, size, key, opaque, quiet misses and TTL; `ms` in every mode, with compare and
/// quiet; `md`; `ma` up and down with its value; `me`; refused flags and lines.
#[test]
fn memcached_meta_commands_as_memcached_answers() {
    let c = cluster3(Opts::default());
    let leader = c.status(c.ids()[0]).leader;
    let follower = *c.ids().iter().find(|&&i| i != leader).expect("a follower");
    for id in [leader, follower] {
        let addr = c.memcache_addr(id);
        let k = |s: &str| s.replace("KEY", &format!("m{id}"));
        let cases: Vec<(String, String)> = [
            ("mn\r\n", "MN\r\n"),
            ("ms KEY 2 T90 F5\r\nhi\r\n", "HD\r\n"),
            ("mg KEY v f s k O123\r\n", "VA 2 f5 s2 kKEY O123\r\nhi\r\n"),
            ("mg KEY\r\n", "HD\r\n"),
            ("mg KEYnope v\r\n", "EN\r\n"),
            ("mg KEYnope v q\r\nmn\r\n", "MN\r\n"),
            ("mg KEYnope v O9 k\r\n", "EN O9 kKEYnope\r\n"),
            ("ms KEY 2 q\r\nyo\r\nmn\r\n", "MN\r\n"),
            ("ms KEY 2 ME\r\nyo\r\n", "NS\r\n"),
            ("ms KEYbar 2 MR\r\nyo\r\n", "NS\r\n"),
            ("ms KEY 1 MA\r\n!\r\nmg KEY v\r\n", "HD\r\nVA 3\r\nyo!\r\n"),
            ("ms KEY 2 C1\r\nzz\r\n", "EX\r\n"),
            ("md KEYnope\r\n", "NF\r\n"),
            ("md KEYnope q\r\nmn\r\n", "NF\r\nMN\r\n"),
            ("md KEY q\r\nmn\r\n", "MN\r\n"),
            ("ma KEYnope\r\n", "NF\r\n"),
            (
                "ms KEYn 1\r\n5\r\nma KEYn\r\nma KEYn v\r\nma KEYn MD D10 v\r\n",
                "HD\r\nHD\r\nVA 1\r\n7\r\nVA 1\r\n0\r\n",
            ),
            ("ma KEYn q\r\nmn\r\n", "MN\r\n"),
            ("me KEYnope\r\n", "EN\r\n"),
            ("mg KEYn zz\r\n", "CLIENT_ERROR invalid flag\r\n"),
            ("mg\r\n", "ERROR\r\n"),
            ("ms KEY\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("mg KEYn T30 t v\r\n", "VA 1 t30\r\n1\r\n"),
            (
                "ms KEYs 3 MS\r\nabc\r\nma KEYs\r\n",
                "HD\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            ("ms KEYbig 2 MP\r\nxx\r\n", "NS\r\n"),
            ("mg KEYn s k\r\n", "HD s1 kKEYn\r\n"),
        ]
        .iter()
        .map(|(a, b)| (k(a), k(b)))
        .collect();
        for (req, want) in &cases {
            let (out, _) = send_and_read(addr, req.as_bytes(), Duration::from_secs(10));
            assert_eq!(String::from_utf8_lossy(&out), *want, "{req:?} at node {id}");
        }
        // CAS: `mg c` names the item's CAS; `ms C` with it replaces, a stale one does not;
        // `ms c` returns the new one; `me` shows it.
        let (out, _) = send_and_read(addr, k("mg KEYn c\r\n").as_bytes(), Duration::from_secs(10));
        let out = String::from_utf8_lossy(&out).into_owned();
        let cas: u64 = out
            .trim()
            .strip_prefix("HD c")
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("mg c: {out:?}"));
        let req = k(&format!("ms KEYn 1 C{cas} c\r\n9\r\n"));
        let (out, _) = send_and_read(addr, req.as_bytes(), Duration::from_secs(10));
        let out = String::from_utf8_lossy(&out).into_owned();
        let new: u64 = out
            .trim()
            .strip_prefix("HD c")
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("ms C c: {out:?}"));
        assert!(new > cas, "{cas} then {new}");
        let (out, _) = send_and_read(addr, req.as_bytes(), Duration::from_secs(10));
        assert_eq!(String::from_utf8_lossy(&out), "EX\r\n", "a stale CAS");
        let (out, _) = send_and_read(addr, k("me KEYn\r\n").as_bytes(), Duration::from_secs(10));
        assert_eq!(
            String::from_utf8_lossy(&out),
            k(&format!(
                "ME KEYn exp=-1 la=0 cas={new} fetch=no cls=1 size=1\r\n"
            ))
        );
    }
}

/// libmemcached's `memccapable`, text (`-a`) and binary (`-b`), on the leader and on a
/// follower: every test passes, as against memcached 1.6 (it flushes the cluster).
#[test]
fn memccapable_text_and_binary_on_leader_and_follower() {
    let capable = require_tool("memccapable");
    let c = cluster3(Opts::default());
    let leader = c.status(c.ids()[0]).leader;
    let follower = *c.ids().iter().find(|&&i| i != leader).expect("a follower");
    for id in [leader, follower] {
        let addr = c.memcache_addr(id);
        for mode in ["-a", "-b"] {
            let o = run_with_timeout(
                Command::new(&capable)
                    .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
                    .args([mode, "-t", "5"]),
                None,
                Duration::from_secs(120),
            );
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success() && out.contains("All tests passed"),
                "memccapable {mode} at node {id}: {out} {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// Hashes, lists, sets and sorted sets through redis-py 8 (RESP3 and RESP2) on the leader and
/// a follower, inside its default (transactional) pipeline too; then every replica holds the
/// same digest and answers the same, and `TYPE`/`SCAN … TYPE` see every type.
#[test]
fn data_types_through_redis_py_on_every_replica() {
    let c = cluster3(Opts::default());
    let leader = c.status(c.ids()[0]).leader;
    let follower = *c.ids().iter().find(|&&i| i != leader).expect("a follower");
    for (id, proto) in [(leader, 3), (follower, 3), (leader, 2), (follower, 2)] {
        let addr = c.redis_addr(id);
        let script = format!(
            r#"
import redis
r = redis.Redis(host="{ip}", port={port}, socket_timeout=10, protocol={proto})
k = "types:{id}:{proto}:"
assert r.hset(k + "h", mapping={{"a": "1", "b": "2"}}) == 2
assert r.hget(k + "h", "a") == b"1"
assert r.hgetall(k + "h") == {{b"a": b"1", b"b": b"2"}}
assert r.hincrby(k + "h", "a", 5) == 6
assert r.hdel(k + "h", "b") == 1
assert r.rpush(k + "l", "x", "y", "z") == 3
assert r.lpush(k + "l", "w") == 4
assert r.lrange(k + "l", 0, -1) == [b"w", b"x", b"y", b"z"]
assert r.lpop(k + "l") == b"w"
assert r.rpop(k + "l", 2) == [b"z", b"y"]
assert r.sadd(k + "s", "m1", "m2", "m3") == 3
assert r.smembers(k + "s") == {{b"m1", b"m2", b"m3"}}
assert r.sismember(k + "s", "m2") in (True, 1)
assert r.srem(k + "s", "m1") == 1
assert r.type(k + "h") in (b"hash", "hash")
assert r.type(k + "l") in (b"list", "list")
assert r.type(k + "s") in (b"set", "set")
try:
    r.hget(k + "s", "x")
    raise SystemExit("WRONGTYPE expected")
except redis.ResponseError as e:
    assert str(e).startswith("WRONGTYPE"), e
p = r.pipeline()
p.hset(k + "h2", "f", "v").sadd(k + "s2", "a").rpush(k + "l2", "1").hgetall(k + "h2")
assert p.execute() == [1, 1, 1, {{b"f": b"v"}}]
assert sorted(r.scan_iter(match=k + "*", _type="set")) == sorted([(k + "s").encode(), (k + "s2").encode()])
print("ok")
"#,
            ip = addr.ip(),
            port = addr.port(),
        );
        redis_py_8(
            &script,
            &format!("redis-py 8 types (protocol {proto}) at node {id}"),
        );
    }
    let k = format!("types:{leader}:3:");
    everywhere(&c, &["HGET", &format!("{k}h"), "a"], "\"6\"");
    everywhere(&c, &["LRANGE", &format!("{k}l"), "0", "-1"], "1) \"x\"");
    everywhere(&c, &["SCARD", &format!("{k}s")], "(integer) 2");
    everywhere(&c, &["TYPE", &format!("{k}h2")], "hash");
    everywhere(
        &c,
        &["OBJECT", "ENCODING", &format!("{k}s")],
        "\"listpack\"",
    );
    // Every replica converges on the same state, collections included.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen: Vec<(u64, u64)> = c
            .ids()
            .iter()
            .map(|&id| {
                let st = c.status(id);
                (st.applied_index, st.digest)
            })
            .collect();
        if seen.windows(2).all(|w| w[0] == w[1]) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replicas did not converge: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `WATCH`: a transaction whose watched key another client changed — through another replica
/// — is not applied (`EXEC` answers nil); untouched, it is; `UNWATCH`, `DISCARD` and `EXEC`
/// end the watch. Then redis-py's optimistic-locking helper (`transaction()` with `watch`)
/// counts 4 × 25 increments from four racing clients on different replicas exactly.
#[test]
fn watch_aborts_when_another_replica_changed_the_key() {
    let c = cluster3(Opts::default());
    let leader = c.status(c.ids()[0]).leader;
    let follower = *c.ids().iter().find(|&&i| i != leader).expect("a follower");
    for (watcher, writer) in [(leader, follower), (follower, leader)] {
        let k = format!("w{watcher}");
        let w = |args: &[&str]| redis(c.redis_addr(writer), args);
        let script = format!(
            r#"
import redis
r = redis.Redis(host="{ip}", port={port}, socket_timeout=10)
other = redis.Redis(host="{oip}", port={oport}, socket_timeout=10)
k = "{k}"
r.set(k, "1")
# Not changed: applied.
p = r.pipeline()
p.watch(k)
p.multi()
p.incr(k)
assert p.execute() == [2], "untouched"
# Changed by another client on another replica: not applied.
p = r.pipeline()
p.watch(k)
other.set(k, "100")
p.multi()
p.incr(k)
try:
    p.execute()
    raise SystemExit("EXEC applied a transaction whose watched key changed")
except redis.WatchError:
    pass
assert r.get(k) == b"100"
# Deleted, and given an expiry: changes too.
for change in (lambda: other.delete(k), lambda: other.expire(k, 1000)):
    r.set(k, "1")
    p = r.pipeline()
    p.watch(k)
    change()
    p.multi()
    p.set(k, "tx")
    try:
        p.execute()
        raise SystemExit("a watched change was missed")
    except redis.WatchError:
        pass
# UNWATCH forgets.
p = r.pipeline()
p.watch(k)
other.set(k, "5")
p.unwatch()
p.multi()
p.incr(k)
assert p.execute() == [6]
# Optimistic locking from four clients on three replicas: no increment lost.
import threading
ports = [{ports}]
def work(port):
    cl = redis.Redis(host="{ip}", port=port, socket_timeout=10)
    for _ in range(25):
        def add(pipe):
            v = int(pipe.get(k + ":n") or 0)
            pipe.multi()
            pipe.set(k + ":n", v + 1)
        cl.transaction(add, k + ":n")
ts = [threading.Thread(target=work, args=(ports[i % len(ports)],)) for i in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
assert r.get(k + ":n") == b"100", r.get(k + ":n")
print("ok")
"#,
            ip = c.redis_addr(watcher).ip(),
            port = c.redis_addr(watcher).port(),
            oip = c.redis_addr(writer).ip(),
            oport = c.redis_addr(writer).port(),
            ports = c
                .ids()
                .iter()
                .map(|&id| c.redis_addr(id).port().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        );
        redis_py_8(
            &script,
            &format!("WATCH on node {watcher}, writes on {writer}"),
        );
        assert_eq!(w(&["GET", &format!("{k}:n")]), "\"100\"");
    }
}

/// Blocking pops block: `BLPOP` on a follower wakes when another client pushes on the leader,
/// with the element; a timeout answers nil after it; a command pipelined behind a blocked
/// `BLPOP` waits for it; `BZPOPMIN` and `BLMOVE` too; and a `BLPOP` waiting on a follower
/// is woken by a push made after the leader was killed and another elected, while a
/// transaction watching a key across that leader change aborts when the new leader changed
/// it, and applies when watched again.
#[test]
fn blocking_pops_wait_for_a_push_across_a_leader_change() {
    let mut c = cluster3(Opts::default());
    let leader = c.status(c.ids()[0]).leader;
    let follower = *c.ids().iter().find(|&&i| i != leader).expect("a follower");
    let (fa, la) = (c.redis_addr(follower), c.redis_addr(leader));
    let script = format!(
        r#"
import redis, threading, time, socket
f = redis.Redis(host="{fip}", port={fport}, socket_timeout=20)
l = redis.Redis(host="{lip}", port={lport}, socket_timeout=20)
def later(d, fn):
    t = threading.Timer(d, fn); t.start(); return t
# A push on the leader wakes a BLPOP on the follower.
t0 = time.time()
later(0.3, lambda: l.rpush("bq", "x", "y"))
assert f.blpop(["none", "bq"], timeout=10) == (b"bq", b"x")
waited = time.time() - t0
assert 0.25 < waited < 5, waited
assert f.lrange("bq", 0, -1) == [b"y"]
# Timeouts answer nil, after the timeout.
t0 = time.time()
assert f.blpop(["empty"], timeout=0.3) is None
assert time.time() - t0 >= 0.29
assert f.blmove("empty", "dst", timeout=0.2) is None
# BZPOPMIN and BLMOVE wake too.
later(0.2, lambda: l.zadd("bz", {{"m": 2.5}}))
assert f.bzpopmin("bz", timeout=10) == (b"bz", b"m", 2.5)
later(0.2, lambda: l.lpush("src", "v"))
assert f.blmove("src", "dst", timeout=10, src="RIGHT", dest="LEFT") == b"v"
assert l.lrange("dst", 0, -1) == [b"v"]
# A command pipelined behind a blocked pop waits for it.
s = socket.create_connection(("{fip}", {fport}), timeout=10)
s.sendall(b"*3\r\n$5\r\nBLPOP\r\n$2\r\npq\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n")
time.sleep(0.3)
s.setblocking(False)
try:
    early = s.recv(100)
except BlockingIOError:
    early = b""
assert early == b"", early
s.setblocking(True)
l.rpush("pq", "z")
got = b""
while not got.endswith(b"+PONG\r\n"):
    got += s.recv(100)
assert got == b"*2\r\n$2\r\npq\r\n$1\r\nz\r\n+PONG\r\n", got
print("ok")
"#,
        fip = fa.ip(),
        fport = fa.port(),
        lip = la.ip(),
        lport = la.port(),
    );
    redis_py_8(&script, "blocking pops");

    // Across a leader change: a BLPOP waits on a follower that stays; the leader is killed;
    // a push through the new leader wakes it.
    let stays = *c.ids().iter().find(|&&i| i != leader).expect("a follower");
    let sa = c.redis_addr(stays);
    let blocked = std::thread::spawn(move || redis(sa, &["BLPOP", "failover", "20"]));
    // A transaction across the leader change too: a key watched before it, changed through
    // the new leader after it, aborts the EXEC; watched again, it applies.
    use std::io::{Read, Write};
    let mut tx = connect(sa, Duration::from_secs(20));
    let expect = |tx: &mut std::net::TcpStream, args: &[&[u8]], want: &[u8]| {
        tx.write_all(&resp_cmd(args)).expect("write");
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while got.len() < want.len() {
            let n = tx.read(&mut buf).expect("read");
            assert!(n > 0, "connection closed after {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "{args:?}"
        );
    };
    expect(&mut tx, &[b"SET", b"txk", b"1"], b"+OK\r\n");
    expect(&mut tx, &[b"WATCH", b"txk"], b"+OK\r\n");
    std::thread::sleep(Duration::from_millis(500));
    c.kill(leader, libc::SIGKILL);
    let new_leader = c.wait_leader(WAIT);
    assert_ne!(new_leader, leader);
    let pushed = redis(c.redis_addr(new_leader), &["RPUSH", "failover", "after"]);
    assert_eq!(pushed, "(integer) 1");
    let got = blocked.join().expect("the blocked client");
    assert_eq!(got, "1) \"failover\"\n2) \"after\"");
    assert_eq!(redis(c.redis_addr(new_leader), &["SET", "txk", "2"]), "OK");
    expect(&mut tx, &[b"MULTI"], b"+OK\r\n");
    expect(&mut tx, &[b"INCR", b"txk"], b"+QUEUED\r\n");
    expect(&mut tx, &[b"EXEC"], b"*-1\r\n");
    expect(&mut tx, &[b"WATCH", b"txk"], b"+OK\r\n");
    expect(&mut tx, &[b"MULTI"], b"+OK\r\n");
    expect(&mut tx, &[b"INCR", b"txk"], b"+QUEUED\r\n");
    expect(&mut tx, &[b"EXEC"], b"*1\r\n:3\r\n");
}

/// `CLIENT LIST` (every connection of the replica, with its name and last command),
/// `CLIENT NO-EVICT`, `CLIENT REPLY OFF|ON|SKIP` (replies withheld, commands still run) and
/// `CLIENT UNBLOCK` (a blocked `BLPOP` answered at once, as on its timeout or with an error),
/// on the leader and a follower, byte for byte.
#[test]
fn client_list_reply_and_unblock() {
    let c = cluster3(Opts::default());
    let leader = c.status(c.ids()[0]).leader;
    let follower = *c.ids().iter().find(|&&i| i != leader).expect("a follower");
    for id in [leader, follower] {
        let addr = c.redis_addr(id);
        let script = format!(
            r#"
import socket, time
def conn():
    s = socket.create_connection(("{ip}", {port})); s.settimeout(10); return s
def send(s, *a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x.encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    s.sendall(out)
def read(s, want):
    got = b""
    while len(got) < len(want):
        got += s.recv(4096)
    assert got == want, (got, want)
def read_until(s, end):
    got = b""
    while not got.endswith(end):
        got += s.recv(4096)
    return got
a, b = conn(), conn()
send(b, "CLIENT", "SETNAME", "bee"); read(b, b"+OK\r\n")
send(b, "CLIENT", "ID"); bid = read_until(b, b"\r\n")[1:-2].decode()
send(a, "CLIENT", "LIST")
lst = read_until(a, b"\n\r\n").decode()
assert "id=%s " % bid in lst and "name=bee " in lst and "cmd=client " in lst, lst
assert lst.count("id=") == 2, lst
send(a, "CLIENT", "NO-EVICT", "on"); read(a, b"+OK\r\n")
send(a, "CLIENT", "REPLY", "OFF"); send(a, "SET", "cl:x", "1"); send(a, "GET", "cl:x")
send(a, "CLIENT", "REPLY", "ON"); send(a, "GET", "cl:x")
read(a, b"+OK\r\n$1\r\n1\r\n")
send(a, "CLIENT", "REPLY", "SKIP"); send(a, "INCR", "cl:x"); send(a, "GET", "cl:x")
read(a, b"$1\r\n2\r\n")
send(b, "BLPOP", "cl:none", "0")
time.sleep(0.5)
send(a, "CLIENT", "UNBLOCK", bid, "ERROR"); read(a, b":1\r\n")
read(b, b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n")
send(a, "CLIENT", "UNBLOCK", bid); read(a, b":0\r\n")
send(b, "BLPOP", "cl:none", "0")
time.sleep(0.5)
send(a, "CLIENT", "UNBLOCK", bid, "TIMEOUT"); read(a, b":1\r\n")
read(b, b"*-1\r\n")
print("ok")
"#,
            ip = addr.ip(),
            port = addr.port(),
        );
        redis_py_8(&script, &format!("CLIENT commands at node {id}"));
    }
}
