//! A replica installing a leader's snapshot keeps running while the snapshot is decoded: the
//! new state is built on a thread of its own and swapped in when complete. Two replicas in
//! one process (loopback), a state machine whose decoding waits behind a gate the test opens.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use waverunner_node::config::{DurabilityMode, NodeConfig, Peer};
use waverunner_node::{start_replica, AdminCmd, Running, StateMachine};

/// Open when true; `from_snapshot` waits for it.
static GATE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());
/// How many times `from_snapshot` was entered.
static DECODING: AtomicU64 = AtomicU64::new(0);

/// A sum of the commands' first bytes.
#[derive(Default)]
struct Gated(u64);

impl StateMachine for Gated {
    fn apply(&mut self, _: u64, _: u64, c: &[u8]) -> Vec<u8> {
        self.0 += u64::from(c.first().copied().unwrap_or(0));
        self.0.to_le_bytes().to_vec()
    }
    fn is_read_only(&self, c: &[u8]) -> bool {
        c.is_empty()
    }
    fn query(&self, _: u64, _: &[u8]) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(&mut self, s: &[u8]) -> Result<(), String> {
        self.0 = u64::from_le_bytes(s.try_into().map_err(|_| "bad sum")?);
        Ok(())
    }
    fn from_snapshot(s: &[u8]) -> Option<Result<Self, String>> {
        DECODING.fetch_add(1, Ordering::SeqCst);
        let (open, cv) = &GATE;
        let mut g = open.lock().unwrap();
        while !*g {
            g = cv.wait(g).unwrap();
        }
        let mut sm = Gated::default();
        Some(sm.restore(s).map(|()| sm))
    }
    fn digest(&self) -> u64 {
        self.0
    }
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

fn config(dir: &std::path::Path, id: u64, raft: SocketAddr, peers: Vec<Peer>) -> NodeConfig {
    let mut cfg = NodeConfig::from_toml(&format!(
        "id = {id}\ndata_dir = \"{}\"\n[listen]\nraft = \"{raft}\"\nclient = \"{}\"\n",
        dir.join(format!("n{id}")).display(),
        free_addr(),
    ))
    .expect("config");
    cfg.durability = DurabilityMode::Memory;
    cfg.snapshot_entries = 20;
    cfg.join = !peers.is_empty();
    cfg.peers = peers;
    cfg
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn write(r: &Running, seq: &mut u64, n: u64) {
    for _ in 0..n {
        *seq += 1;
        r.handle.call(7, *seq, vec![1]).expect("a write");
    }
}

#[test]
fn a_learner_keeps_up_with_its_leader_while_the_snapshot_it_installs_is_decoded() {
    let dir = std::env::temp_dir().join(format!("waverunner-restore-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let raft1 = free_addr();
    let one = start_replica(config(&dir, 1, raft1, Vec::new()), Gated::default()).unwrap();
    wait_until("replica 1 leads", || one.handle.status().role == "leader");
    let mut seq = 0;
    // Two snapshots with writes between: the log is compacted past its start, so a new
    // member needs a snapshot.
    write(&one, &mut seq, 50);
    one.handle.admin(AdminCmd::Snapshot).unwrap();
    write(&one, &mut seq, 50);
    one.handle.admin(AdminCmd::Snapshot).unwrap();
    write(&one, &mut seq, 10);
    wait_until("the log is compacted", || {
        one.handle.status().first_index > 1
    });

    let raft2 = free_addr();
    let peer = Peer {
        id: 1,
        raft: raft1,
        client: None,
    };
    let two = start_replica(config(&dir, 2, raft2, vec![peer]), Gated::default()).unwrap();
    one.handle
        .admin(AdminCmd::AddLearner {
            id: 2,
            raft: raft2,
            client: None,
        })
        .unwrap();
    wait_until("the learner decodes a snapshot", || {
        DECODING.load(Ordering::SeqCst) >= 1
    });
    wait_until("the learner's log starts after the snapshot", || {
        two.handle.status().first_index > 1
    });
    let before = two.handle.status();
    // Decoding waits behind the gate; the learner's loop does not: it takes the entries that
    // follow and learns their commit, and applies nothing until the state is in place.
    write(&one, &mut seq, 30);
    let leader_commit = one.handle.status().commit_index;
    wait_until("the learner learns the new commit index", || {
        two.handle.status().commit_index >= leader_commit
    });
    let during = two.handle.status();
    assert!(during.applied_index < before.first_index, "{during:?}");
    assert_eq!(
        during.counters.snapshots_installed, 0,
        "{:?}",
        during.counters
    );

    *GATE.0.lock().unwrap() = true;
    GATE.1.notify_all();
    wait_until("the learner applies up to its leader", || {
        let s = two.handle.status();
        s.applied_index >= leader_commit
    });
    let after = two.handle.status();
    assert_eq!(
        after.counters.snapshots_installed, 1,
        "{:?}",
        after.counters
    );
    // Every write counted once: the snapshot's and those that waited for it.
    write(&one, &mut seq, 1);
    let commit = one.handle.status().commit_index;
    wait_until("both replicas agree", || {
        let s = two.handle.status();
        s.applied_index >= commit && s.digest == seq
    });
    wait_until("the leader's status shows the last write", || {
        one.handle.status().digest == seq
    });
    drop(two);
    drop(one);
    let _ = std::fs::remove_dir_all(&dir);
}
