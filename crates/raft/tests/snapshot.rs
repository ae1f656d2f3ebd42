//! InstallSnapshot in pieces: the window, lost, reordered and duplicated pieces, a follower
//! that restarted mid-transfer, a leader change mid-transfer.

mod common;

use common::*;
use waverunner_raft::*;

/// Snapshot bytes long enough for many pieces.
fn state(tag: u8) -> Vec<u8> {
    (0..100u8).map(|i| i.wrapping_mul(7) ^ tag).collect()
}

/// Three replicas with pieces of 8 bytes and a window of 24; node 1 leads, node 3 missed
/// everything and node 1 compacted: node 3 needs the snapshot.
fn lagging(tag: u8) -> Net {
    let mut net = Net::with(&[1, 2, 3], |c| {
        c.snapshot_chunk_bytes = 8;
        c.max_inflight_bytes = 24;
    });
    net.elect(1);
    net.isolate(3);
    for i in 0..5u8 {
        net.propose(1, &[i]);
    }
    let applied = net.r(1).applied_index();
    net.rm(1).compact(applied, state(tag)).unwrap();
    net.heal();
    net
}

fn pieces(msgs: &[Message]) -> Vec<(u64, usize)> {
    msgs.iter()
        .filter_map(|m| match &m.body {
            MessageBody::InstallSnapshot { offset, data, .. } => Some((*offset, data.len())),
            _ => None,
        })
        .collect()
}

fn installed(net: &Net, id: NodeId) -> Vec<u8> {
    net.nodes[&id]
        .snapshot
        .as_ref()
        .expect("snapshot installed")
        .data
        .to_vec()
}

/// Runs the network by hand until node 3 installed a snapshot: each round delivers what was
/// sent in the round before, through `net_does` (which may drop, reorder, duplicate); a
/// round with nothing in flight ticks.
fn pump(net: &mut Net, mut net_does: impl FnMut(Vec<Message>) -> Vec<Message>) {
    net.hold = true;
    for _ in 0..2_000 {
        if net.held.is_empty() {
            net.tick(1);
        }
        let msgs: Vec<Message> = net.held.drain(..).collect();
        let msgs = net_does(msgs);
        net.hold = false;
        net.deliver(msgs);
        net.hold = true;
        let more = net.collect();
        net.deliver(more);
        if net.nodes[&3].snapshot.is_some() {
            net.hold = false;
            let msgs: Vec<Message> = net.held.drain(..).collect();
            net.deliver(msgs);
            net.stabilize();
            return;
        }
    }
    panic!("the snapshot was never installed");
}

#[test]
fn a_snapshot_goes_in_pieces_within_the_window() {
    let mut net = lagging(1);
    let mut seen = Vec::new();
    pump(&mut net, |msgs| {
        let p = pieces(&msgs);
        // Never more than the window unacknowledged at once: three pieces of 8 bytes.
        assert!(p.len() <= 3, "window exceeded: {p:?}");
        seen.extend(p);
        msgs
    });
    assert_eq!(installed(&net, 3), state(1));
    let offsets: Vec<u64> = seen.iter().map(|p| p.0).collect();
    assert_eq!(
        offsets,
        (0..100).step_by(8).collect::<Vec<u64>>(),
        "each piece once, in order"
    );
    assert_eq!(seen.last(), Some(&(96, 4)));
    assert_eq!(net.r(3).counters().snapshots_installed, 1);
    net.propose(1, b"after");
    assert_eq!(net.nodes[&3].applied_data(), vec![b"after".to_vec()]);
}

#[test]
fn lost_reordered_and_duplicated_pieces_still_install_the_same_bytes() {
    let mut net = lagging(2);
    let mut n = 0usize;
    pump(&mut net, |mut msgs| {
        // Reversed; every third piece twice; every fifth piece lost.
        msgs.reverse();
        let mut out = Vec::new();
        for m in msgs {
            if matches!(m.body, MessageBody::InstallSnapshot { .. }) {
                n += 1;
                if n.is_multiple_of(5) {
                    continue;
                }
                if n.is_multiple_of(3) {
                    out.push(m.clone());
                }
            }
            out.push(m);
        }
        out
    });
    assert_eq!(
        installed(&net, 3),
        state(2),
        "the same bytes, whatever the network did"
    );
    let c = net.r(3).counters();
    assert!(
        c.snapshot_chunks_dropped > 0,
        "duplicates were seen and dropped"
    );
    assert_eq!(c.snapshots_installed, 1);
    assert!(
        net.r(1).counters().snapshot_chunks_sent > 13,
        "lost pieces were resent"
    );
    net.propose(1, b"after");
    assert_eq!(net.nodes[&3].applied_data(), vec![b"after".to_vec()]);
}

/// Runs a tick in which only the first `n` snapshot pieces get through.
fn first_pieces_only(net: &mut Net, n: u32) {
    let seen = std::rc::Rc::new(std::cell::Cell::new(0));
    let s = seen.clone();
    net.filter = Some(Box::new(move |m| {
        if let MessageBody::InstallSnapshot { .. } = m.body {
            s.set(s.get() + 1);
            return s.get() > n;
        }
        false
    }));
    net.tick(1);
    assert!(seen.get() >= n, "the transfer started");
}

#[test]
fn a_follower_that_restarted_mid_transfer_gets_it_from_the_start() {
    let mut net = lagging(3);
    // Only the first pieces arrive; then node 3 restarts with nothing of the transfer.
    first_pieces_only(&mut net, 2);
    net.restart(3, false);
    net.filter = None;
    net.tick(30);
    assert_eq!(installed(&net, 3), state(3));
    net.propose(1, b"after");
    assert_eq!(net.nodes[&3].applied_data(), vec![b"after".to_vec()]);
}

#[test]
fn a_leader_change_mid_transfer_starts_the_transfer_over() {
    let mut net = lagging(4);
    // Node 2 compacts too, with other bytes (a state machine's snapshot need not be
    // byte-identical across replicas).
    let applied = net.r(2).applied_index();
    net.rm(2).compact(applied, state(5)).unwrap();
    // Node 3 gets the first pieces from node 1 only.
    first_pieces_only(&mut net, 2);
    net.filter = None;
    // Node 1 goes away; node 2 takes over in a new term and sends its own snapshot.
    net.isolate(1);
    net.tick(40);
    assert_eq!(net.leader(), Some(2), "node 3's log is behind: node 2 wins");
    assert_eq!(
        installed(&net, 3),
        state(5),
        "the new leader's snapshot, whole"
    );
    assert_eq!(net.r(3).counters().snapshot_transfers_abandoned, 1);
    net.propose(2, b"after");
    assert_eq!(net.nodes[&3].applied_data(), vec![b"after".to_vec()]);
}

/// A sink over a disk that refuses the `fail_at`-th write (counting from 1) and then works.
struct Disk {
    buf: Vec<u8>,
    writes: std::sync::Arc<std::sync::atomic::AtomicU32>,
    fail_at: u32,
}

impl SnapshotSink for Disk {
    fn append(&mut self, data: &[u8]) -> Result<(), String> {
        use std::sync::atomic::Ordering;
        if self.writes.fetch_add(1, Ordering::Relaxed) + 1 == self.fail_at {
            return Err("disk full".into());
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }
    fn finish(self: Box<Self>) -> Result<bytes::Bytes, String> {
        Ok(self.buf.into())
    }
}

#[test]
fn a_receiving_disk_that_fails_abandons_the_transfer_and_the_next_one_installs() {
    let mut net = lagging(4);
    let writes = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let w = writes.clone();
    net.rm(3)
        .set_snapshot_sink(std::sync::Arc::new(move |_, _| {
            Ok(Box::new(Disk {
                buf: Vec::new(),
                writes: w.clone(),
                fail_at: 5,
            }))
        }));
    pump(&mut net, |msgs| msgs);
    assert_eq!(
        installed(&net, 3),
        state(4),
        "the same bytes, never a short install"
    );
    let c = net.r(3).counters();
    assert_eq!(
        c.snapshot_transfers_abandoned, 1,
        "the failed transfer was abandoned"
    );
    assert_eq!(c.snapshots_installed, 1);
    assert!(
        writes.load(std::sync::atomic::Ordering::Relaxed) > 13,
        "it started over"
    );
    net.propose(1, b"after");
    assert_eq!(net.nodes[&3].applied_data(), vec![b"after".to_vec()]);
}

/// A leader that snapshots faster than a follower receives its snapshot would start the
/// transfer over at each new one and the follower would never catch up (simulator seed 1532):
/// while the transfer progresses, compaction waits; a transfer that stalls holds nothing.
#[test]
fn compaction_waits_for_a_progressing_transfer_not_for_a_stalled_one() {
    let mut net = lagging(4);
    net.hold = true;
    net.tick(1); // the leader's heartbeat: node 3 answers, the leader starts the transfer
    for _ in 0..4 {
        let msgs: Vec<Message> = net.held.drain(..).collect();
        net.hold = false;
        net.deliver(msgs);
        net.hold = true;
        let more = net.collect();
        net.deliver(more);
    }
    assert_eq!(net.r(1).snapshot_in_transfer(), Some(3));
    net.hold = false;
    net.held.clear();
    net.propose(1, b"more");
    let applied = net.r(1).applied_index();
    assert_eq!(
        net.rm(1).compact(applied, state(5)),
        Err(CompactError::InTransfer { to: 3 })
    );
    // Node 3 goes silent: after three election timeouts without progress the transfer holds
    // nothing, and compaction goes ahead.
    net.isolate(3);
    net.tick_only(&[1, 2], 31);
    assert_eq!(net.r(1).snapshot_in_transfer(), None);
    assert!(net.rm(1).compact(applied, state(5)).is_ok());
    net.heal();
    net.tick(40);
    assert_eq!(
        installed(&net, 3),
        state(5),
        "the newer snapshot, sent over"
    );
}
