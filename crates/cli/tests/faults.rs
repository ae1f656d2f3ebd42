//! Faults against real replica processes: a killed or halted leader, every replica crashing at
//! once, a follower losing its log, a follower far behind. Writes come from native clients that
//! record every acknowledged write; afterwards every acknowledged write must be readable
//! (through linearizable reads, on every replica) and the replicas must converge.
//!
//! Failover bound (the issue's): a new leader within 2 × the election timeout after the leader
//! is killed or halted. The election timeout is randomized in [10, 20) ticks of 10 ms, so its
//! upper end is 200 ms and the bound is 2 × 200 ms = 400 ms, plus 100 ms for polling `/status`
//! (published every tick) on a loaded machine: [`FAILOVER_BOUND`] = 500 ms, measured from the
//! signal to the first `/status` of a surviving replica naming another leader.

mod cluster_lock;
mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use waverunner_client::{Client, Error, Options};

const WAIT: Duration = Duration::from_secs(30);

/// 2 × the upper end of the election timeout, plus 100 ms of polling margin.
const FAILOVER_BOUND: Duration = Duration::from_millis(2 * ELECTION_TIMEOUT_MAX_MS + 100);

/// What a writer did: per key, the last acknowledged write and the writes whose outcome is
/// unknown (timed out), each with its position in the writer's sequence.
#[derive(Default)]
struct History {
    /// key → (sequence number, value) of the last acknowledged write.
    acked: HashMap<String, (u64, String)>,
    /// key → writes that timed out (may or may not have been applied).
    uncertain: HashMap<String, Vec<(u64, String)>>,
    acks: u64,
    timeouts: u64,
    rejected: Vec<String>,
    /// When each write was acknowledged.
    ack_times: Vec<Instant>,
}

impl History {
    fn merge(&mut self, o: History) {
        self.acked.extend(o.acked);
        self.uncertain.extend(o.uncertain);
        self.acks += o.acks;
        self.timeouts += o.timeouts;
        self.rejected.extend(o.rejected);
        self.ack_times.extend(o.ack_times);
    }

    /// Acknowledged writes after `t`.
    fn acks_after(&self, t: Instant) -> usize {
        self.ack_times.iter().filter(|&&a| a > t).count()
    }

    /// The values key `k` may hold: its last acknowledged value, or a value of a later write
    /// whose outcome is unknown (an earlier one cannot land after an acknowledged later write:
    /// the client reuses one session, whose older sequence numbers the cluster refuses).
    fn allowed(&self, k: &str) -> (Option<String>, Vec<String>) {
        let last = self.acked.get(k);
        let after = last.map_or(0, |(n, _)| *n);
        let later = self
            .uncertain
            .get(k)
            .map(|v| {
                v.iter()
                    .filter(|(n, _)| last.is_none() || *n > after)
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default();
        (last.map(|(_, v)| v.clone()), later)
    }

    fn keys(&self) -> Vec<String> {
        let mut k: Vec<String> = self
            .acked
            .keys()
            .chain(self.uncertain.keys())
            .cloned()
            .collect();
        k.sort();
        k.dedup();
        k
    }
}

/// A background thread of native-client writes (one at a time) to keys `prefix0..prefixN`.
struct Writer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<History>,
}

impl Writer {
    fn start(addrs: Vec<SocketAddr>, prefix: &str, keys: u64, pause: Duration) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let prefix = prefix.to_string();
        let thread = std::thread::spawn(move || {
            let mut cl = Client::with_options(
                &addrs,
                Options {
                    attempt_timeout: Duration::from_millis(200),
                    deadline: Duration::from_secs(3),
                    ..Options::default()
                },
            )
            .expect("client");
            let mut h = History::default();
            let started = Instant::now();
            // Bounded in count and time.
            for n in 1..=50_000u64 {
                if s.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(120) {
                    break;
                }
                let key = format!("{prefix}{}", n % keys);
                let value = format!("{prefix}v{n}");
                match cl.set(key.as_bytes(), value.as_bytes()) {
                    Ok(()) => {
                        h.acks += 1;
                        h.ack_times.push(Instant::now());
                        h.acked.insert(key, (n, value));
                    }
                    Err(Error::Timeout) => {
                        h.timeouts += 1;
                        h.uncertain.entry(key).or_default().push((n, value));
                    }
                    Err(e) => h.rejected.push(format!("write {n}: {e}")),
                }
                std::thread::sleep(pause);
            }
            h
        });
        Writer { stop, thread }
    }

    fn finish(self) -> History {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("writer thread")
    }
}

/// Writes `n` keys `prefix{i}` through a client of every replica, all acknowledged.
fn write_keys(c: &Cluster, prefix: &str, n: u64, threads: u64) -> History {
    let addrs = c.client_addrs();
    let prefix = prefix.to_string();
    let hs: Vec<JoinHandle<History>> = (0..threads)
        .map(|t| {
            let (addrs, prefix) = (addrs.clone(), prefix.clone());
            std::thread::spawn(move || {
                let mut cl = Client::with_options(
                    &addrs,
                    Options {
                        attempt_timeout: Duration::from_millis(300),
                        deadline: Duration::from_secs(20),
                        ..Options::default()
                    },
                )
                .expect("client");
                let mut h = History::default();
                for i in (t..n).step_by(threads as usize) {
                    let (key, value) = (format!("{prefix}{i}"), format!("{prefix}value-{i}"));
                    cl.set(key.as_bytes(), value.as_bytes())
                        .unwrap_or_else(|e| panic!("write {key}: {e}"));
                    h.acks += 1;
                    h.ack_times.push(Instant::now());
                    h.acked.insert(key, (i, value));
                }
                h
            })
        })
        .collect();
    let mut all = History::default();
    for h in hs {
        all.merge(h.join().expect("writer thread"));
    }
    all
}

/// Reads every key of `h` through every live replica (linearizable reads) and checks it holds
/// an allowed value. Returns how many reads were checked.
fn verify(c: &Cluster, h: &History) -> usize {
    let mut checked = 0;
    for id in c.live() {
        let mut cl = c.client_of(&[id]);
        for k in h.keys() {
            let got = cl
                .get(k.as_bytes())
                .unwrap_or_else(|e| panic!("read {k} via node {id}: {e}"));
            let got = got.map(|v| String::from_utf8_lossy(&v).into_owned());
            let (last, later) = h.allowed(&k);
            let ok = got == last || got.as_ref().is_some_and(|g| later.contains(g));
            assert!(
                ok,
                "key {k} via node {id}: read {got:?}; the last acknowledged write was {last:?}, later writes of unknown outcome {later:?}"
            );
            checked += 1;
        }
    }
    checked
}

/// Polls the `survivors`' `/status` (every 5 ms) until one names a leader other than `old`;
/// returns the time since `t0` and the new leader.
fn time_to_new_leader(c: &Cluster, old: u64, survivors: &[u64], t0: Instant) -> (Duration, u64) {
    let limit = Duration::from_secs(10);
    loop {
        for &id in survivors {
            if let Ok(s) = c.try_status(id) {
                if s.leader != 0 && s.leader != old {
                    return (t0.elapsed(), s.leader);
                }
            }
        }
        assert!(
            t0.elapsed() < limit,
            "no new leader within {limit:?} of losing leader {old}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn others(c: &Cluster, id: u64) -> Vec<u64> {
    c.ids().into_iter().filter(|&x| x != id).collect()
}

/// Waits until replica `id` is a follower of a leader other than itself.
fn wait_follower(c: &Cluster, id: u64, timeout: Duration) -> Status {
    let deadline = Instant::now() + timeout;
    loop {
        let s = c.try_status(id);
        if let Ok(s) = &s {
            if s.role == "follower" && s.leader != 0 && s.leader != id {
                return s.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "node {id} is not a follower after {timeout:?}: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// When a failover took longer than one election timeout (+50 ms), prints the survivors' last
/// role changes: the usual cause is a split vote (both survivors pre-candidates, then
/// candidates, in the same term).
fn explain_slow_failover(c: &Cluster, old: u64, dt: Duration, what: &str) {
    if dt > Duration::from_millis(ELECTION_TIMEOUT_MAX_MS + 50) {
        println!("{what}: a new leader only after {dt:?}; the survivors' last role changes:");
        for id in others(c, old) {
            let log = c.logs(id);
            let changes: Vec<&str> = log.lines().filter(|l| l.contains(" is now ")).collect();
            println!(
                "node {id}:\n{}",
                changes[changes.len().saturating_sub(8)..].join("\n")
            );
        }
    }
}

/// One SIGKILL of the leader under load: returns the failover time.
fn kill_leader_once(c: &mut Cluster, round: u32) -> Duration {
    let first = c.wait_leader(WAIT);
    let w = Writer::start(
        c.client_addrs(),
        &format!("kill{round}:"),
        20,
        Duration::from_millis(5),
    );
    std::thread::sleep(Duration::from_millis(300));
    // The leader right now (an election during the warm-up would make us kill a follower).
    let old = c.wait_leader(WAIT);
    if old != first {
        println!("round {round}: the leader changed from {first} to {old} before the kill");
    }
    let t0 = Instant::now();
    c.kill(old, libc::SIGKILL);
    let (dt, new) = time_to_new_leader(c, old, &others(c, old), t0);
    explain_slow_failover(c, old, dt, &format!("round {round}"));
    // The writes go on under the new leader, then the killed replica comes back.
    std::thread::sleep(Duration::from_millis(500));
    c.restart(old);
    std::thread::sleep(Duration::from_millis(300));
    let h = w.finish();
    assert!(h.rejected.is_empty(), "writes rejected: {:?}", h.rejected);
    assert!(
        h.acks_after(t0 + dt) > 10,
        "only {} writes acknowledged after the failover",
        h.acks_after(t0 + dt)
    );
    let sts = c.wait_converged(WAIT);
    let leader = c.wait_leader(WAIT);
    let back = wait_follower(c, old, WAIT);
    assert_eq!(back.leader, leader);
    let checked = verify(c, &h);
    println!(
        "round {round}: SIGKILL of leader {old}: node {new} leads after {dt:?} (bound {FAILOVER_BOUND:?}); {} writes acknowledged, {} timed out; {checked} reads checked; converged at index {}",
        h.acks, h.timeouts, sts[0].applied_index
    );
    dt
}

#[test]
fn sigkill_leader_under_load() {
    let mut c = Cluster::start(3, Opts::default());
    let dt = kill_leader_once(&mut c, 0);
    assert!(
        dt <= FAILOVER_BOUND,
        "a new leader after {dt:?}: more than 2 × the election timeout (2 × {ELECTION_TIMEOUT_MAX_MS} ms) + 100 ms of polling"
    );
}

/// Measures the failover time over 20 SIGKILLs (`WAVERUNNER_FAILOVER_RUNS`, at most 500),
/// prints the distribution and fails if any is over the bound.
#[test]
#[ignore = "measurement (about 30 s per 20 runs): run with --ignored --nocapture to see the failover-time distribution"]
fn sigkill_failover_distribution() {
    let runs: u32 = std::env::var("WAVERUNNER_FAILOVER_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
        .clamp(1, 500);
    let mut c = Cluster::start(3, Opts::default());
    let mut ts: Vec<Duration> = (1..=runs).map(|r| kill_leader_once(&mut c, r)).collect();
    ts.sort();
    let ms: Vec<u128> = ts.iter().map(|d| d.as_millis()).collect();
    println!(
        "failover after SIGKILL over {} runs, ms: min {} median {} p90 {} max {}; all: {ms:?}",
        ms.len(),
        ms[0],
        ms[ms.len() / 2],
        ms[ms.len() * 9 / 10],
        ms[ms.len() - 1]
    );
    let over = ts.iter().filter(|&&d| d > FAILOVER_BOUND).count();
    assert_eq!(over, 0, "{over} failovers over {FAILOVER_BOUND:?}: {ms:?}");
}

#[test]
fn sigstop_leader_then_sigcont() {
    let mut c = Cluster::start(3, Opts::default());
    c.wait_leader(WAIT);
    let w = Writer::start(c.client_addrs(), "stop:", 20, Duration::from_millis(5));
    std::thread::sleep(Duration::from_millis(300));
    let old = c.wait_leader(WAIT);
    let old_term = c.status(old).term;
    let t0 = Instant::now();
    c.kill(old, libc::SIGSTOP);
    let survivors = others(&c, old);
    let (dt, new) = time_to_new_leader(&c, old, &survivors, t0);
    let taken_over = t0.elapsed();
    explain_slow_failover(&c, old, dt, "SIGSTOP");
    assert!(
        taken_over < Duration::from_secs(1),
        "the new leader must take over while the old one is stopped"
    );
    // Halted for about 1 s in all.
    std::thread::sleep(Duration::from_secs(1).saturating_sub(t0.elapsed()));
    let stopped_for = t0.elapsed();
    c.kill(old, libc::SIGCONT);
    let back = wait_follower(&c, old, WAIT);
    assert!(
        back.term > old_term,
        "the old leader rejoined in term {} (was {old_term})",
        back.term
    );
    std::thread::sleep(Duration::from_millis(300));
    let h = w.finish();
    assert!(h.rejected.is_empty(), "writes rejected: {:?}", h.rejected);
    assert!(
        h.acks_after(t0 + dt) > 10,
        "only {} writes acknowledged after the failover",
        h.acks_after(t0 + dt)
    );
    let sts = c.wait_converged(WAIT);
    let leader = c.wait_leader(WAIT);
    assert_ne!(
        leader, old,
        "the old leader should not have taken over again so soon"
    );
    let checked = verify(&c, &h);
    println!(
        "SIGSTOP of leader {old} for {stopped_for:?}: node {new} leads after {dt:?} (bound {FAILOVER_BOUND:?}); node {old} rejoined as follower in term {}; {} writes acknowledged, {} timed out; {checked} reads checked; converged at index {}",
        back.term, h.acks, h.timeouts, sts[0].applied_index
    );
    assert!(
        dt <= FAILOVER_BOUND,
        "a new leader after {dt:?}: more than 2 × the election timeout (2 × {ELECTION_TIMEOUT_MAX_MS} ms) + 100 ms of polling"
    );
}

/// The whole machine stops (a VM descheduled, every process starved) for longer than an
/// election timeout, then runs again: the leader's heartbeats could not be sent or received
/// meanwhile, so the followers' missed ticks are no evidence against it. No one campaigns:
/// each follower's timeout stands at its last tick until the second on-time tick, a full tick
/// after the stall, and by then the resumed leader's heartbeat has come (`Raft::tick_stalled`).
/// Before, a follower that resumed first counted the stall's ticks and went pre-candidate at
/// once (a flake of `scale::a_64_mib_value_through_redis_cli_and_memcached`, where the test
/// machine stalled every replica for about 110 ms). With the hold until the first on-time
/// tick only, this test failed once in CI: a follower's first tick came 0.2 ms after its
/// replay, before its leader had run again.
#[test]
fn every_replica_stopped_at_once_keeps_its_leader() {
    let mut c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(WAIT);
    std::thread::sleep(Duration::from_millis(300));
    let state = |c: &Cluster| -> Vec<(u64, u64, u64)> {
        c.ids()
            .iter()
            .map(|&id| {
                let s = c.status(id);
                (s.term, s.counters.elections, s.leader)
            })
            .collect()
    };
    for round in 0..3 {
        let before = state(&c);
        let ids = c.ids();
        for &id in &ids {
            c.kill(id, libc::SIGSTOP);
        }
        // Longer than the longest election timeout (200 ms), shorter than the keepalive's
        // limit of a stall that is not a failure.
        std::thread::sleep(Duration::from_millis(400));
        // The followers first, the leader 2 ms later: a follower that resumes before its
        // leader must wait for it, also if its next tick comes before the leader runs.
        for &id in ids.iter().filter(|&&id| id != leader) {
            c.kill(id, libc::SIGCONT);
        }
        std::thread::sleep(Duration::from_millis(2));
        c.kill(leader, libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(600));
        let after = state(&c);
        assert_eq!(
            before, after,
            "round {round}: (term, elections, leader) of each replica changed after every replica stopped 400 ms"
        );
    }
    let held: u64 = c
        .ids()
        .iter()
        .map(|&id| c.status(id).counters.timeouts_held_in_stall)
        .sum();
    assert!(held > 0, "no timeout was held in the stalls");
}

/// Lease reads: a leader stopped past its lease, while another leader took writes, must not
/// answer a read that waited for it (in its socket) with the value from before the stop.
#[test]
fn sigstop_lease_leader_serves_no_stale_read_after_sigcont() {
    let mut c = Cluster::start(
        3,
        Opts {
            read_mode: "lease",
            ..Opts::default()
        },
    );
    let old = c.wait_leader(WAIT);
    assert_eq!(redis(c.redis_addr(old), &["SET", "lease", "before"]), "OK");
    assert_eq!(redis(c.redis_addr(old), &["GET", "lease"]), "\"before\"");
    // Connected before the stop, so the read reaches the stopped process's socket.
    let mut s = connect(c.redis_addr(old), WAIT);
    let t0 = Instant::now();
    c.kill(old, libc::SIGSTOP);
    let survivors = others(&c, old);
    let (_, new) = time_to_new_leader(&c, old, &survivors, t0);
    assert_eq!(redis(c.redis_addr(new), &["SET", "lease", "after"]), "OK");
    // The write is acknowledged; a read that starts now must see it.
    s.write_all(b"*2\r\n$3\r\nGET\r\n$5\r\nlease\r\n")
        .expect("queue the read");
    std::thread::sleep(Duration::from_millis(50));
    c.kill(old, libc::SIGCONT);
    let (got, _) = read_until(&mut s, WAIT, |b| b.ends_with(b"\r\n") && b.len() > 4);
    let got = String::from_utf8_lossy(&got).into_owned();
    assert!(
        !got.contains("before"),
        "stale read from the old leader after SIGCONT: {got:?}"
    );
    println!("read at the old leader {old} after SIGCONT (new leader {new}): {got:?}");
}

#[test]
fn fsync_every_replica_killed_at_once() {
    let mut c = Cluster::start(3, Opts::durability("fsync"));
    c.wait_leader(WAIT);
    assert_eq!(c.status(1).durability, "fsync");
    let mut h = write_keys(&c, "fs:", 300, 3);
    // More writes in flight at the moment of the crash: each acknowledged one must survive.
    let w = Writer::start(c.client_addrs(), "fsw:", 50, Duration::from_millis(1));
    std::thread::sleep(Duration::from_millis(400));
    c.kill_all();
    let inflight = w.finish();
    assert!(inflight.acks > 0, "no write acknowledged before the crash");
    let (acks, timeouts) = (inflight.acks, inflight.timeouts);
    h.merge(inflight);
    for id in c.ids() {
        c.restart(id);
    }
    c.wait_leader(WAIT);
    c.wait_converged(WAIT);
    let checked = verify(&c, &h);
    println!(
        "fsync: 300 writes, then {acks} acknowledged and {timeouts} timed out while every replica was killed; {checked} reads checked after the restart"
    );
}

#[test]
fn memory_follower_restarts_without_its_log_and_rejoins() {
    let mut c = Cluster::start(3, Opts::durability("memory"));
    let leader = c.wait_leader(WAIT);
    assert_eq!(c.status(leader).durability, "memory");
    let f = others(&c, leader)[0];
    let mut h = write_keys(&c, "mem:", 200, 2);
    let w = Writer::start(c.client_addrs(), "memw:", 20, Duration::from_millis(5));
    std::thread::sleep(Duration::from_millis(200));
    let before = c.status(f);
    c.kill(f, libc::SIGKILL);
    // The majority goes on without it.
    std::thread::sleep(Duration::from_millis(400));
    c.restart_no_wait(f);
    // Watch its roles until it follows again and has caught up.
    let deadline = Instant::now() + WAIT;
    let mut roles: Vec<String> = Vec::new();
    let mut first: Option<Status> = None;
    loop {
        c.assert_running(f);
        if let Ok(s) = c.try_status(f) {
            if first.is_none() {
                first = Some(s.clone());
            }
            if roles.last() != Some(&s.role) {
                roles.push(s.role.clone());
            }
            if s.role == "follower" && s.applied_index >= before.applied_index {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "node {f} did not rejoin as a follower; roles seen {roles:?}"
        );
        std::thread::sleep(Duration::from_millis(3));
    }
    std::thread::sleep(Duration::from_millis(300));
    h.merge(w.finish());
    assert!(h.rejected.is_empty(), "writes rejected: {:?}", h.rejected);
    let first = first.expect("a status");
    println!(
        "memory: node {f} had last index {} before the kill; after the restart its first /status showed role {} last index {} applied {}; roles seen: {roles:?}",
        before.last_index, first.role, first.last_index, first.applied_index
    );
    assert!(
        first.last_index < before.last_index,
        "node {f} restarted with its log (last index {} ≥ {} before the kill)",
        first.last_index,
        before.last_index
    );
    let rec = roles.iter().position(|r| r == "recovering");
    let fol = roles.iter().rposition(|r| r == "follower");
    assert!(
        matches!((rec, fol), (Some(r), Some(l)) if r < l),
        "node {f} should rejoin as recovering, then follower; roles seen {roles:?}"
    );
    let sts = c.wait_converged(WAIT);
    let checked = verify(&c, &h);
    println!(
        "memory: {} writes acknowledged, {} timed out; {checked} reads checked; converged at index {}",
        h.acks, h.timeouts, sts[0].applied_index
    );
}

/// How a follower falls behind.
#[derive(Clone, Copy, Debug)]
enum Behind {
    /// SIGSTOP, then SIGCONT.
    Halted,
    /// SIGKILL, then a restart (its log on disk ends far before the leader's snapshot).
    Killed,
}

fn far_behind_catches_up_by_snapshot(how: Behind) {
    let mut c = Cluster::start(
        3,
        Opts {
            snapshot_entries: Some(100),
            ..Opts::durability("fsync")
        },
    );
    let leader = c.wait_leader(WAIT);
    let f = others(&c, leader)[0];
    let mut h = write_keys(&c, "pre:", 20, 1);
    c.wait_converged(WAIT);
    let before = c.status(f);
    match how {
        Behind::Halted => {
            c.kill(f, libc::SIGSTOP);
        }
        Behind::Killed => {
            c.kill(f, libc::SIGKILL);
        }
    }
    h.merge(write_keys(&c, "snap:", 1000, 4));
    let l = c.wait_leader(WAIT);
    let lst = c.status(l);
    assert!(
        lst.first_index > before.last_index + 1,
        "the leader's log (first index {}) must have been compacted past the follower's end ({})",
        lst.first_index,
        before.last_index
    );
    match how {
        Behind::Halted => {
            c.kill(f, libc::SIGCONT);
        }
        Behind::Killed => c.restart(f),
    }
    let sts = c.wait_converged(WAIT);
    let fs = c.status(f);
    assert!(
        fs.counters.snapshots_installed >= 1,
        "node {f} caught up without installing a snapshot: {:?}",
        fs.counters
    );
    // Every replica's status after convergence (the one taken before the resume can be a
    // tick behind the last acknowledged write).
    for s in &sts {
        assert_eq!(s.keys, 1020, "keys at node {}", s.id);
    }
    assert_eq!(fs.keys, 1020, "keys at node {f}");
    let checked = verify(&c, &h);
    println!(
        "{how:?} follower {f}: was at index {}, the leader compacted to {}; it installed {} snapshot(s) and converged at index {}; {checked} reads checked",
        before.last_index, lst.first_index, fs.counters.snapshots_installed, sts[0].applied_index
    );
}

#[test]
fn halted_follower_catches_up_by_snapshot() {
    far_behind_catches_up_by_snapshot(Behind::Halted);
}

#[test]
fn killed_follower_catches_up_by_snapshot() {
    far_behind_catches_up_by_snapshot(Behind::Killed);
}

#[test]
fn sigterm_stops_a_replica_cleanly_and_it_rejoins() {
    let mut c = Cluster::start(3, Opts::durability("fsync"));
    let leader = c.wait_leader(WAIT);
    let mut h = write_keys(&c, "term:", 100, 2);
    let w = Writer::start(c.client_addrs(), "termw:", 20, Duration::from_millis(5));
    // A follower, then the leader, each stopped by SIGTERM under load and started again.
    let f = others(&c, leader)[0];
    for id in [f, leader] {
        std::thread::sleep(Duration::from_millis(200));
        let st = c.kill(id, libc::SIGTERM).expect("an exit status");
        assert!(st.success(), "node {id} exited with {st} after SIGTERM");
        assert!(
            c.logs(id).contains(&format!("node {id} stopped cleanly")),
            "node {id} log:\n{}",
            tail(&c.logs(id), 20)
        );
        std::thread::sleep(Duration::from_millis(300));
        c.wait_leader(WAIT);
        c.restart(id);
    }
    std::thread::sleep(Duration::from_millis(300));
    h.merge(w.finish());
    assert!(h.rejected.is_empty(), "writes rejected: {:?}", h.rejected);
    let sts = c.wait_converged(WAIT);
    let checked = verify(&c, &h);
    println!(
        "SIGTERM of follower {f} and of leader {leader}: {} writes acknowledged, {} timed out; {checked} reads checked; converged at index {}",
        h.acks, h.timeouts, sts[0].applied_index
    );
}
