//! Membership change with real replicas in one process (loopback TCP/UDP, admin HTTP): a
//! replica joins under load (learner, catch-up from a snapshot, voter), the group shrinks by a
//! follower and then by its leader, removed replicas left running stay quiet, and every
//! acknowledged write survives. Also: the admin answers name the reason of a refusal, and
//! members that joined survive restarts.
//!
//! The tests take the machine-wide lock of the real-process cluster tests
//! (`<tmp>/waverunner-itest-cluster.lock`): their timing checks must not compete for the CPUs.

use std::collections::BTreeMap;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use waverunner_client::{Client, Options};
use waverunner_kvserver::start_kv;
use waverunner_node::admin::{self, AdminAnswer, MembershipRequest};
use waverunner_node::config::{DurabilityMode, NodeConfig, Peer};
use waverunner_node::metrics::Status;
use waverunner_node::Running;

#[path = "../../cli/tests/cluster_lock/mod.rs"]
mod lock;
use lock::cluster_lock;

const TICK_MS: u64 = 10;
const ELECTION_TICKS: u32 = 10;
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Addresses of replica `id` for base port `base`.
struct Addrs {
    raft: SocketAddr,
    client: SocketAddr,
    admin: SocketAddr,
}

fn addrs(base: u16, id: u64) -> Addrs {
    let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    let id = id as u16;
    Addrs {
        raft: at(base + id),
        client: at(base + 20 + id),
        admin: at(base + 40 + id),
    }
}

/// A base port whose ports for replicas 1..=8 are free, in 20000..32000 (below the usual
/// ephemeral range, so outgoing connections do not take them meanwhile).
fn free_base() -> u16 {
    let mut x = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    for _ in 0..500 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let base = 20_000 + ((x >> 33) % 12_000) as u16;
        let free = (1..=8).all(|id| {
            let a = addrs(base, id);
            TcpListener::bind(a.raft).is_ok()
                && TcpListener::bind(a.admin).is_ok()
                && UdpSocket::bind(a.client).is_ok()
        });
        if free {
            return base;
        }
    }
    panic!("no free port range in 20000..32000");
}

/// A cluster of in-process key-value replicas.
struct Cluster {
    base: u16,
    dir: PathBuf,
    snapshot_entries: u64,
    durability: DurabilityMode,
    /// Ids of the initial configuration.
    initial: Vec<u64>,
    nodes: BTreeMap<u64, Option<Running>>,
}

impl Cluster {
    fn new(what: &str, n: u64, snapshot_entries: u64) -> Cluster {
        let dir = std::env::temp_dir().join(format!(
            "waverunner-membership-{what}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        let mut c = Cluster {
            base: free_base(),
            dir,
            snapshot_entries,
            durability: DurabilityMode::Fsync,
            initial: (1..=n).collect(),
            nodes: BTreeMap::new(),
        };
        for id in 1..=n {
            c.start(id, false);
        }
        c
    }

    fn config(&self, id: u64, join: bool) -> NodeConfig {
        let a = addrs(self.base, id);
        let mut cfg = NodeConfig::from_toml(&format!(
            "id = {id}\ndata_dir = \"{}\"\n[listen]\nraft = \"{}\"\nclient = \"{}\"\nadmin = \"{}\"\n",
            self.dir.join(format!("n{id}")).display(),
            a.raft,
            a.client,
            a.admin
        ))
        .expect("config");
        cfg.durability = self.durability;
        cfg.tick_ms = TICK_MS;
        cfg.election_ticks = ELECTION_TICKS;
        cfg.snapshot_entries = self.snapshot_entries;
        cfg.join = join;
        cfg.peers = self
            .initial
            .iter()
            .filter(|p| **p != id)
            .map(|&p| {
                let pa = addrs(self.base, p);
                Peer {
                    id: p,
                    raft: pa.raft,
                    client: Some(pa.client),
                }
            })
            .collect();
        let _ = cfg.listen.redis.take();
        cfg
    }

    /// Starts (or restarts, on its data directory) replica `id`.
    fn start(&mut self, id: u64, join: bool) {
        let cfg = self.config(id, join);
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = loop {
            match start_kv(cfg.clone()) {
                Ok(r) => break r,
                // A port of a replica just stopped may linger a moment.
                Err(e) if Instant::now() < deadline => {
                    eprintln!("start {id}: {e}; retrying");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("replica {id} does not start: {e}"),
            }
        };
        self.nodes.insert(id, Some(r));
    }

    fn stop(&mut self, id: u64) {
        if let Some(r) = self.nodes.get_mut(&id).and_then(Option::take) {
            r.shutdown().expect("clean shutdown");
        }
    }

    fn status(&self, id: u64) -> Status {
        self.nodes[&id].as_ref().expect("running").handle.status()
    }

    fn admin(&self, id: u64) -> SocketAddr {
        addrs(self.base, id).admin
    }

    fn client_addrs(&self, ids: &[u64]) -> Vec<SocketAddr> {
        ids.iter().map(|id| addrs(self.base, *id).client).collect()
    }

    /// Waits until one of `ids` leads and every other of them follows it; returns it.
    fn leader(&self, ids: &[u64]) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let st: Vec<Status> = ids.iter().map(|id| self.status(*id)).collect();
            let l = st[0].leader;
            if l != 0
                && st.iter().all(|s| s.leader == l)
                && st.iter().any(|s| s.id == l && s.role == "leader")
            {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no leader among {ids:?}: {:?}",
                st.iter()
                    .map(|s| (s.id, s.role.clone(), s.term, s.leader))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends a membership request, following `not leader` answers and retrying transient
    /// refusals, until it is answered for good.
    fn change(&self, req: &MembershipRequest, members: &[u64]) -> AdminAnswer {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut target = members[0];
        let mut k = 0;
        loop {
            let a = admin::request_membership(self.admin(target), req, HTTP_TIMEOUT)
                .unwrap_or_else(|e| panic!("{req:?} to {target}: {e}"));
            if !a.retriable() || a.ok {
                return a;
            }
            assert!(Instant::now() < deadline, "{req:?}: still refused: {a:?}");
            match a.leader {
                Some(l) if l != 0 && members.contains(&l) => target = l,
                _ => {
                    k += 1;
                    target = members[k % members.len()];
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            if a.error.as_deref() != Some("not leader") {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    fn add_learner(&self, id: u64, members: &[u64]) -> AdminAnswer {
        let a = addrs(self.base, id);
        self.change(
            &MembershipRequest {
                op: "add_learner".into(),
                id,
                raft: Some(a.raft.to_string()),
                client: Some(a.client.to_string()),
            },
            members,
        )
    }

    fn op(&self, op: &str, id: u64, members: &[u64]) -> AdminAnswer {
        self.change(
            &MembershipRequest {
                op: op.into(),
                id,
                ..MembershipRequest::default()
            },
            members,
        )
    }

    /// Waits until every one of `ids` reports `voters` and `learners`.
    fn wait_conf(&self, ids: &[u64], voters: &[u64], learners: &[u64]) {
        wait_until(&format!("{ids:?} see voters {voters:?}"), 10_000, || {
            ids.iter().all(|id| {
                let s = self.status(*id);
                s.voters == voters && s.learners == learners
            })
        });
    }

    /// Waits until restarted replica `id` is a voter of `members` again, caught up and (after
    /// losing its log) no longer recovering: a replica that lost its log votes again only
    /// once a leader of a newer term committed an entry (the leader re-elects itself for it).
    fn wait_member(&self, id: u64, members: &[u64]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.status(id);
            let others: Vec<Status> = members
                .iter()
                .filter(|m| **m != id)
                .map(|m| self.status(*m))
                .collect();
            let commit = others.iter().map(|o| o.commit_index).max().unwrap_or(0);
            if s.voters == members
                && s.role != "recovering"
                && s.role != "starting"
                && s.applied_index >= commit
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "replica {id} is not back: {:?}",
                std::iter::once(&s)
                    .chain(&others)
                    .map(|s| (
                        s.id,
                        s.role.clone(),
                        s.term,
                        s.leader,
                        s.commit_index,
                        s.applied_index,
                        s.voters.clone()
                    ))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until learner `id` caught up: the leader's view of its log is within a few
    /// entries of the leader's last index, and it applied what was committed when we began.
    fn wait_caught_up(&self, id: u64, members: &[u64]) {
        let leader = self.leader(members);
        let target = self.status(leader).commit_index;
        wait_until(&format!("learner {id} catches up"), 20_000, || {
            let l = self.status(leader);
            let matched = l
                .members
                .iter()
                .find(|m| m.id == id)
                .map_or(0, |m| m.match_index);
            matched + 8 >= l.last_index && self.status(id).applied_index >= target
        });
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            if let Some(r) = self.nodes.get_mut(&id).and_then(Option::take) {
                let _ = r.shutdown();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_until(what: &str, ms: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_millis(ms);
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writers that set unique keys until stopped, recording what was acknowledged.
struct Writers {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(String, String)>>>,
    count: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Writers {
    fn start(n: usize, nodes: Vec<SocketAddr>) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let count = Arc::new(AtomicU64::new(0));
        let threads = (0..n)
            .map(|w| {
                let (stop, acked, count, nodes) =
                    (stop.clone(), acked.clone(), count.clone(), nodes.clone());
                std::thread::spawn(move || {
                    let opts = Options {
                        attempt_timeout: Duration::from_millis(300),
                        deadline: Duration::from_secs(5),
                        ..Options::default()
                    };
                    let mut c = Client::with_options(&nodes, opts).expect("client");
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let (k, v) = (format!("w{w}-{i}"), format!("v{i}"));
                        if c.set(k.as_bytes(), v.as_bytes()).is_ok() {
                            acked.lock().unwrap().push((k, v));
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Writers {
            stop,
            acked,
            count,
            threads,
        }
    }

    fn acked(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Waits until `more` further writes are acknowledged.
    fn wait_more(&self, more: u64, what: &str) {
        let from = self.acked();
        wait_until(
            &format!("{more} writes acknowledged {what}"),
            20_000,
            || self.acked() >= from + more,
        );
    }

    fn finish(mut self) -> Vec<(String, String)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().expect("writer");
        }
        std::mem::take(&mut *self.acked.lock().unwrap())
    }
}

/// Every acknowledged write is readable (linearizable reads) through `nodes`.
fn check_acked(nodes: &[SocketAddr], acked: &[(String, String)]) {
    let mut c = Client::connect(nodes).expect("client");
    for (k, v) in acked {
        let got = c
            .get(k.as_bytes())
            .unwrap_or_else(|e| panic!("get {k}: {e}"));
        assert_eq!(
            got.as_deref(),
            Some(v.as_bytes()),
            "acknowledged write {k}={v} is lost"
        );
    }
}

#[test]
fn grow_to_four_then_shrink_to_two_under_load() {
    grow_then_shrink(DurabilityMode::Fsync);
}

#[test]
fn grow_to_four_then_shrink_to_two_under_load_in_memory() {
    grow_then_shrink(DurabilityMode::Memory);
}

fn grow_then_shrink(durability: DurabilityMode) {
    let _lock = cluster_lock();
    let mut c = Cluster::new("grow-shrink", 0, 200);
    c.durability = durability;
    c.initial = vec![1, 2, 3];
    for id in 1..=3 {
        c.start(id, false);
    }
    let l0 = c.leader(&[1, 2, 3]);
    let writers = Writers::start(4, c.client_addrs(&[1, 2, 3]));
    // Enough writes that the log is compacted: the new member must catch up from a snapshot.
    writers.wait_more(600, "before the change");
    wait_until("the leader compacted its log", 10_000, || {
        c.status(c.leader(&[1, 2, 3])).first_index > 1
    });

    // A joining replica that is not added yet stays quiet: no term, no election.
    c.start(4, true);
    std::thread::sleep(Duration::from_millis(
        20 * TICK_MS * u64::from(ELECTION_TICKS),
    ));
    let s4 = c.status(4);
    assert_eq!((s4.term, s4.counters.elections), (0, 0), "{s4:?}");
    assert_eq!(s4.voters, vec![1, 2, 3]);
    assert_eq!(c.status(l0).term, c.status(c.leader(&[1, 2, 3])).term);

    // Asking a follower names the leader.
    let l = c.leader(&[1, 2, 3]);
    let follower = [1, 2, 3].into_iter().find(|id| *id != l).unwrap();
    let a4 = addrs(c.base, 4);
    let a = admin::request_membership(
        c.admin(follower),
        &MembershipRequest {
            op: "add_learner".into(),
            id: 4,
            raft: Some(a4.raft.to_string()),
            client: Some(a4.client.to_string()),
        },
        HTTP_TIMEOUT,
    )
    .unwrap();
    assert_eq!(
        (a.ok, a.error.as_deref(), a.leader),
        (false, Some("not leader"), Some(l))
    );

    // Grow: learner, catch-up, voter — while the writers go on.
    let a = c.add_learner(4, &[1, 2, 3]);
    assert!(a.ok && a.index.unwrap() > 0, "{a:?}");
    c.wait_conf(&[1, 2, 3, 4], &[1, 2, 3], &[4]);
    c.wait_caught_up(4, &[1, 2, 3]);
    assert!(
        c.status(4).counters.snapshots_installed >= 1,
        "the learner caught up from a snapshot"
    );
    writers.wait_more(100, "with a learner");
    let a = c.op("add_voter", 4, &[1, 2, 3]);
    assert!(a.ok, "{a:?}");
    c.wait_conf(&[1, 2, 3, 4], &[1, 2, 3, 4], &[]);
    writers.wait_more(100, "with four voters");
    // Every member knows every other member's addresses (the new one's through the log).
    for id in 1..=4 {
        let s = c.status(id);
        for m in &s.members {
            let want = addrs(c.base, m.id);
            assert_eq!(m.raft, want.raft.to_string(), "{id} knows {}: {m:?}", m.id);
            assert_eq!(
                m.client,
                want.client.to_string(),
                "{id} knows {}: {m:?}",
                m.id
            );
        }
        assert_eq!(s.members.len(), 4, "{:?}", s.members);
    }

    // Shrink: a follower first.
    let l = c.leader(&[1, 2, 3, 4]);
    let f = [1, 2, 3].into_iter().find(|id| *id != l).unwrap();
    let a = c.op("remove", f, &[1, 2, 3, 4]);
    assert!(a.ok, "{a:?}");
    let three: Vec<u64> = [1, 2, 3, 4].into_iter().filter(|id| *id != f).collect();
    c.wait_conf(&three, &three, &[]);
    writers.wait_more(100, "after removing a follower");

    // Then the leader itself: a new leader takes over and the writes go on.
    let l = c.leader(&three);
    let a = c.op("remove", l, &three);
    assert!(a.ok, "{a:?}");
    let two: Vec<u64> = three.iter().copied().filter(|id| *id != l).collect();
    c.wait_conf(&two, &two, &[]);
    let l2 = c.leader(&two);
    assert_ne!(l2, l);
    writers.wait_more(200, "after removing the leader");

    // The removed replicas, left running, do not disrupt: over many election timeouts the
    // group's term stays put, and they start no election.
    let removed = [f, l];
    let before: Vec<(u64, u64)> = removed
        .iter()
        .map(|id| {
            let s = c.status(*id);
            (s.term, s.counters.elections)
        })
        .collect();
    let term = c.status(l2).term;
    std::thread::sleep(Duration::from_millis(
        15 * 2 * TICK_MS * u64::from(ELECTION_TICKS),
    ));
    for (id, (t, e)) in removed.iter().zip(&before) {
        let s = c.status(*id);
        assert_eq!(
            (s.term, s.counters.elections),
            (*t, *e),
            "removed {id}: {s:?}"
        );
        assert!(!s.voters.contains(id), "{id} knows it was removed: {s:?}");
    }
    for id in &two {
        let s = c.status(*id);
        assert_eq!((s.term, s.leader), (term, l2), "member {id}: {s:?}");
    }
    assert_eq!(c.leader(&two), l2);
    writers.wait_more(100, "at the end");

    let acked = writers.finish();
    assert!(acked.len() > 1_000, "{} writes acknowledged", acked.len());
    for id in removed {
        c.stop(id);
    }
    check_acked(&c.client_addrs(&two), &acked);
    // The two members converge on the same state.
    wait_until("the members converge", 10_000, || {
        let (a, b) = (c.status(two[0]), c.status(two[1]));
        a.applied_index == b.applied_index && a.digest == b.digest && a.keys == b.keys
    });
}

#[test]
fn refusals_name_their_reason() {
    let _lock = cluster_lock();
    let mut c = Cluster::new("refusals", 3, 10_000);
    let l = c.leader(&[1, 2, 3]);
    let all = [1, 2, 3];
    // Already a member; not a member; a malformed request.
    let a = c.op("add_voter", 2, &all);
    assert_eq!(
        (a.ok, a.error.as_deref()),
        (false, Some("invalid")),
        "{a:?}"
    );
    let a = c.op("remove", 9, &all);
    assert_eq!(
        (a.ok, a.error.as_deref()),
        (false, Some("invalid")),
        "{a:?}"
    );
    let a = c.op("add_voter", 9, &all);
    assert_eq!(
        (a.ok, a.error.as_deref()),
        (false, Some("invalid")),
        "{a:?}"
    );
    assert!(a.message.unwrap().contains("address"));
    let (code, body) = admin::post(c.admin(l), "/membership", "{\"op\":", HTTP_TIMEOUT).unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("bad request"), "{body}");
    let (code, _) = admin::post(c.admin(l), "/status", "{}", HTTP_TIMEOUT).unwrap();
    assert_eq!(code, 405);

    // Leader transfer to a follower.
    let to = all.into_iter().find(|id| *id != l).unwrap();
    let a = admin::request_transfer(c.admin(l), to, HTTP_TIMEOUT).unwrap();
    assert!(a.ok, "{a:?}");
    wait_until("the transfer completes", 5_000, || c.leader(&all) == to);
    let a = admin::request_transfer(c.admin(l), to, HTTP_TIMEOUT).unwrap();
    assert_eq!(
        (a.error.as_deref(), a.leader),
        (Some("not leader"), Some(to)),
        "{a:?}"
    );

    // With one replica down, removing a live one would leave too few voters able to vote.
    let l = c.leader(&all);
    let down = all.into_iter().find(|id| *id != l).unwrap();
    let live = all.into_iter().find(|id| *id != l && *id != down).unwrap();
    c.stop(down);
    std::thread::sleep(Duration::from_millis(
        5 * TICK_MS * u64::from(ELECTION_TICKS),
    ));
    let up = [l, live];
    let a = c.op("remove", live, &up);
    assert_eq!(
        (a.ok, a.error.as_deref()),
        (false, Some("would lose quorum")),
        "{a:?}"
    );
    // Removing the dead one is fine, and the two carry on.
    let a = c.op("remove", down, &up);
    assert!(a.ok, "{a:?}");
    let mut sorted = up.to_vec();
    sorted.sort_unstable();
    c.wait_conf(&up, &sorted, &[]);
    let mut k = Client::connect(&c.client_addrs(&up)).unwrap();
    k.set(b"after", b"1").unwrap();
    assert_eq!(k.get(b"after").unwrap().as_deref(), Some(&b"1"[..]));
}

#[test]
fn joined_members_and_initial_members_survive_restarts() {
    survive_restarts(DurabilityMode::Fsync);
}

/// With durability `memory` a restarted replica has lost its log: it learns everything again
/// from the leader, its configuration included (replayed on top of the initial one).
#[test]
fn joined_members_and_initial_members_survive_restarts_without_their_logs() {
    survive_restarts(DurabilityMode::Memory);
}

fn survive_restarts(durability: DurabilityMode) {
    let _lock = cluster_lock();
    let mut c = Cluster::new("restarts", 0, 10_000);
    c.durability = durability;
    c.initial = vec![1, 2, 3];
    for id in 1..=3 {
        c.start(id, false);
    }
    let all = [1, 2, 3];
    c.leader(&all);
    let mut k = Client::connect(&c.client_addrs(&all)).unwrap();
    k.set(b"a", b"1").unwrap();
    c.start(4, true);
    assert!(c.add_learner(4, &all).ok);
    c.wait_caught_up(4, &all);
    assert!(c.op("add_voter", 4, &all).ok);
    let four = [1, 2, 3, 4];
    c.wait_conf(&four, &four, &[]);
    // Replace an initial member: remove 1, so the group is 2, 3, 4.
    assert!(c.op("remove", 1, &four).ok);
    c.stop(1);
    let now = [2, 3, 4];
    c.wait_conf(&now, &now, &[]);
    k.set(b"b", b"2").unwrap();

    // The joined member restarts from its own log (its configuration says join = true; its
    // log says it is a voter) and votes again.
    c.stop(4);
    c.start(4, true);
    c.wait_member(4, &now);
    // An initial member restarts: its configuration knows 1, 2, 3; its log teaches it 4's
    // address and that 1 is gone.
    c.stop(2);
    c.start(2, false);
    c.wait_member(2, &now);
    let s = c.status(2);
    assert!(
        s.members
            .iter()
            .any(|m| m.id == 4 && m.raft == addrs(c.base, 4).raft.to_string()),
        "2 knows 4's address: {:?}",
        s.members
    );
    // Make 4 lead: it must reach 2 and 3 (it knows 2 and 3 from its configuration), and
    // 2 and 3 must answer it (they know its address from the log).
    let l = c.leader(&now);
    if l != 4 {
        let a = admin::request_transfer(c.admin(l), 4, HTTP_TIMEOUT).unwrap();
        assert!(a.ok, "{a:?}");
        wait_until("4 leads", 5_000, || c.leader(&now) == 4);
    }
    let mut k = Client::connect(&c.client_addrs(&now)).unwrap();
    k.set(b"c", b"3").unwrap();
    for (key, v) in [("a", "1"), ("b", "2"), ("c", "3")] {
        assert_eq!(
            k.get(key.as_bytes()).unwrap().as_deref(),
            Some(v.as_bytes())
        );
    }
    let s1 = c.leader(&now);
    assert_eq!(s1, 4);
}
