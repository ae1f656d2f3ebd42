//! Log replication (Raft §5.3, §5.4.2): repair of divergent followers, the commit rule,
//! fast backtracking, pipelining, batching, snapshots and compaction.

mod common;
use common::*;
use std::collections::BTreeMap;
use waverunner_raft::*;

fn node_with_log(
    id: NodeId,
    voters: &[NodeId],
    term: Term,
    terms: &[Term],
    f: impl Fn(&mut Config),
) -> Node {
    let mut c = cfg(id);
    c.pre_vote = false;
    c.check_quorum = false;
    f(&mut c);
    let boot = Bootstrap {
        hard_state: HardState {
            term,
            vote: 0,
            commit: 0,
        },
        conf: conf(voters),
        entries: log_of(terms),
        ..Default::default()
    };
    Node::new(c, boot)
}

/// Raft paper Figure 7: a new leader of term 8 repairs followers that miss entries (a, b),
/// have extra uncommitted entries (c, d) or both (e, f).
#[test]
fn figure7_followers_are_repaired() {
    let ids = [1, 2, 3, 4, 5, 6, 7];
    let logs: [(NodeId, &[Term]); 7] = [
        (1, &[1, 1, 1, 4, 4, 5, 5, 6, 6, 6]),
        (2, &[1, 1, 1, 4, 4, 5, 5, 6, 6]),          // (a)
        (3, &[1, 1, 1, 4]),                         // (b)
        (4, &[1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6]),    // (c)
        (5, &[1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7]), // (d)
        (6, &[1, 1, 1, 4, 4, 4, 4]),                // (e)
        (7, &[1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3]),    // (f)
    ];
    let mut nodes = BTreeMap::new();
    for (id, terms) in logs {
        nodes.insert(id, node_with_log(id, &ids, 7, terms, |_| {}));
    }
    let mut net = Net::from_nodes(nodes);
    net.elect(1);
    assert_eq!(net.r(1).term(), 8);
    let want: Vec<Term> = (1..=11).map(|i| net.r(1).term_of(i).unwrap()).collect();
    assert_eq!(want, vec![1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 8]);
    for id in ids {
        let got: Vec<Term> = (1..=net.r(id).last_index())
            .map(|i| net.r(id).term_of(i).unwrap())
            .collect();
        assert_eq!(got, want, "follower {id} repaired");
        assert_eq!(net.r(id).commit_index(), 11);
        // The persisted log matches too (truncation reached the disk).
        let stored: Vec<Term> = net.nodes[&id].stored.iter().map(|e| e.term).collect();
        assert_eq!(stored, want, "follower {id} disk");
    }
    assert!(net.errors.is_empty(), "{:?}", net.errors);
}

/// Fast backtracking: follower (f) of Figure 7 diverges from index 4 on; with the term hint
/// the leader needs one rejection instead of seven.
#[test]
fn fast_backtracking_skips_whole_terms() {
    let ids = [1, 2, 3];
    let mut nodes = BTreeMap::new();
    nodes.insert(
        1,
        node_with_log(1, &ids, 7, &[1, 1, 1, 4, 4, 5, 5, 6, 6, 6], |_| {}),
    );
    nodes.insert(
        2,
        node_with_log(2, &ids, 7, &[1, 1, 1, 4, 4, 5, 5, 6, 6, 6], |_| {}),
    );
    nodes.insert(
        3,
        node_with_log(3, &ids, 7, &[1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3], |_| {}),
    );
    let mut net = Net::from_nodes(nodes);
    net.elect(1);
    let rejects: Vec<&Message> = net
        .delivered
        .iter()
        .filter(|m| {
            m.from == 3 && matches!(m.body, MessageBody::AppendResponse { reject: true, .. })
        })
        .collect();
    assert_eq!(rejects.len(), 1, "one rejection carries the hint");
    assert_eq!(
        rejects[0].body,
        MessageBody::AppendResponse {
            reject: true,
            index: 10,
            hint_index: 10,
            hint_term: 3,
            recovering: false
        }
    );
    let appends_to_3 = net
        .delivered
        .iter()
        .filter(|m| {
            m.to == 3
                && matches!(&m.body, MessageBody::Append { entries, .. } if !entries.is_empty())
        })
        .count();
    assert_eq!(appends_to_3, 2, "probe at 10, then the whole suffix from 4");
    assert_eq!(net.r(3).term_of(4), Some(4));
    assert_eq!(net.r(3).last_index(), 11);
}

struct Fig8 {
    net: Net,
}

/// Raft paper Figure 8 (a)–(c), five servers S1..S5.
fn figure8_through_c() -> Fig8 {
    let ids = [1, 2, 3, 4, 5];
    let mut nodes = BTreeMap::new();
    for id in ids {
        let mut n = node_with_log(id, &ids, 1, &[1], |c| c.max_entries_per_msg = 1);
        n.raft = Raft::new(
            n.cfg.clone(),
            Bootstrap {
                hard_state: HardState {
                    term: 1,
                    vote: 0,
                    commit: 1,
                },
                conf: conf(&ids),
                entries: log_of(&[1]),
                ..Default::default()
            },
        )
        .unwrap();
        nodes.insert(id, n);
    }
    let mut net = Net::from_nodes(nodes);
    // (a) S1 leads term 2 and replicates index 2 (its term-2 entry) to S2 only.
    net.filter = Some(Box::new(|m: &Message| {
        m.from == 1 && m.to >= 3 && matches!(m.body, MessageBody::Append { .. })
    }));
    net.elect(1);
    assert_eq!(net.r(1).term(), 2);
    assert_eq!((net.r(2).term_of(2), net.r(3).term_of(2)), (Some(2), None));
    assert_eq!(net.r(1).commit_index(), 1);
    // (b) S1 crashes; S5 wins term 3 with S3 and S4 and appends index 2 of term 3 locally.
    net.isolate(1);
    net.filter = Some(Box::new(|m: &Message| {
        m.from == 5 && matches!(m.body, MessageBody::Append { .. })
    }));
    net.elect(5);
    assert_eq!(net.r(5).term(), 3);
    assert_eq!(net.r(5).term_of(2), Some(3));
    // (c) S5 crashes; S1 restarts and wins term 4 (after a failed term-3 attempt) and
    // replicates index 2 of term 2 — but not yet its own term-4 entry — to S3 and S4.
    net.heal();
    net.isolate(5);
    net.restart(5, false);
    net.restart(1, false);
    // S3 and S4 may see (and reject) the first probe, which reveals that they lack index 2;
    // every other append that carries the term-4 entry is lost.
    let probed = std::rc::Rc::new(std::cell::RefCell::new(std::collections::BTreeSet::new()));
    net.filter = Some(Box::new(move |m: &Message| match &m.body {
        MessageBody::Append { entries, .. }
            if m.from == 1 && entries.iter().any(|e| e.term == 4) =>
        {
            !(m.to != 2 && probed.borrow_mut().insert(m.to))
        }
        _ => false,
    }));
    net.rm(1).campaign();
    net.stabilize();
    assert_eq!(
        net.r(1).role(),
        Role::Candidate,
        "S3, S4 voted for S5 in term 3"
    );
    net.elect(1);
    assert_eq!(net.r(1).term(), 4);
    for id in [1, 2, 3, 4] {
        assert_eq!(
            net.r(id).term_of(2),
            Some(2),
            "S{id} holds index 2 of term 2"
        );
    }
    assert_eq!(net.r(1).progress(3).unwrap().0, 2);
    assert_eq!(net.r(1).progress(4).unwrap().0, 2);
    // The heart of §5.4.2: replicated on a majority, yet NOT committed by counting, because
    // it is not of the leader's term.
    assert_eq!(net.r(1).commit_index(), 1);
    Fig8 { net }
}

#[test]
fn figure8_d_previous_term_entry_on_a_majority_can_still_be_overwritten() {
    let Fig8 { mut net } = figure8_through_c();
    // (d) S1 crashes; S5 is elected (term 5, after a rejected term-4 attempt) with S2–S4.
    net.isolate(1);
    let keep: Vec<(NodeId, NodeId)> = net
        .blocked
        .iter()
        .copied()
        .filter(|(a, b)| *a == 1 || *b == 1)
        .collect();
    net.heal();
    net.blocked.extend(keep);
    net.filter = None;
    net.rm(5).campaign();
    net.stabilize();
    assert_ne!(net.r(5).role(), Role::Leader);
    net.elect(5);
    assert_eq!(net.r(5).term(), 5);
    for id in [2, 3, 4, 5] {
        assert_eq!(
            net.r(id).term_of(2),
            Some(3),
            "S{id}: index 2 overwritten with S5's term-3 entry"
        );
        assert_eq!(net.r(id).commit_index(), 3);
    }
    // It was never committed or applied anywhere with term 2.
    for n in net.nodes.values() {
        assert!(n.applied.iter().all(|e| !(e.index == 2 && e.term == 2)));
    }
}

#[test]
fn figure8_e_entry_of_current_term_commits_and_protects_earlier_ones() {
    let Fig8 { mut net } = figure8_through_c();
    // (e) S1 replicates its term-4 entry to a majority: index 3 commits, index 2 with it.
    net.filter = None;
    net.tick_only(&[1], 2);
    assert_eq!(net.r(1).commit_index(), 3);
    assert_eq!(
        net.nodes[&1]
            .applied
            .iter()
            .map(|e| (e.index, e.term))
            .collect::<Vec<_>>(),
        vec![(1, 1), (2, 2), (3, 4)]
    );
    // Now S5 cannot win: a majority has a log with a term-4 entry.
    net.isolate(1);
    let keep: Vec<(NodeId, NodeId)> = net
        .blocked
        .iter()
        .copied()
        .filter(|(a, b)| *a == 1 || *b == 1)
        .collect();
    net.heal();
    net.blocked.extend(keep);
    for _ in 0..3 {
        net.rm(5).campaign();
        net.stabilize();
        assert_ne!(net.r(5).role(), Role::Leader);
    }
    for id in [2, 3, 4] {
        assert_eq!(net.r(id).term_of(2), Some(2));
    }
}

#[test]
fn pipelining_is_bounded_by_the_inflight_window() {
    let mut net = Net::with(&[1, 2, 3], |c| {
        c.max_inflight_msgs = 2;
        c.max_entries_per_msg = 1;
    });
    net.elect(1);
    assert_eq!(net.r(1).progress_state(2), Some(ProgressState::Replicate));
    net.hold = true;
    for i in 0..5u8 {
        net.rm(1).propose(vec![i]).unwrap();
    }
    let msgs = net.collect();
    let to2: Vec<&Message> = msgs
        .iter()
        .filter(|m| {
            m.to == 2
                && matches!(&m.body, MessageBody::Append { entries, .. } if !entries.is_empty())
        })
        .collect();
    assert_eq!(to2.len(), 2, "only two unacknowledged appends per follower");
    net.deliver(msgs);
    net.hold = false;
    let held: Vec<Message> = net.held.drain(..).collect();
    net.deliver(held);
    net.stabilize();
    assert_eq!(
        net.nodes[&2].applied_data().len(),
        5,
        "acks open the window until everything is replicated"
    );
}

#[test]
fn catch_up_is_batched_by_entries_and_bytes() {
    let mut net = Net::with(&[1, 2, 3], |c| {
        c.max_entries_per_msg = 3;
        c.max_bytes_per_msg = 250;
    });
    net.elect(1);
    net.isolate(3);
    for _ in 0..10 {
        net.propose(1, &[7; 100]);
    }
    net.heal();
    net.delivered.clear();
    net.tick(3);
    let sizes: Vec<usize> = net
        .delivered
        .iter()
        .filter_map(|m| match &m.body {
            MessageBody::Append { entries, .. } if m.to == 3 && !entries.is_empty() => {
                Some(entries.len())
            }
            _ => None,
        })
        .collect();
    assert!(
        sizes.iter().all(|n| *n <= 2),
        "250 bytes fit two 100-byte entries: {sizes:?}"
    );
    assert_eq!(sizes.iter().sum::<usize>(), 10);
    assert_eq!(net.r(3).commit_index(), net.r(1).commit_index());
}

#[test]
fn heartbeat_commit_is_capped_by_the_followers_match() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    // 3 only misses entries (its acks are lost), so the leader still believes match = 1.
    net.filter = Some(Box::new(|m: &Message| {
        m.to == 3 && matches!(m.body, MessageBody::Append { .. })
    }));
    net.propose(1, b"a");
    net.propose(1, b"b");
    assert_eq!(net.r(1).commit_index(), 3);
    net.delivered.clear();
    net.tick_only(&[1], 1);
    let hb = net
        .delivered
        .iter()
        .find(|m| m.to == 3 && matches!(m.body, MessageBody::Heartbeat { .. }))
        .unwrap();
    assert_eq!(
        hb.body,
        MessageBody::Heartbeat {
            commit: 1,
            context: vec![]
        }
    );
}

#[test]
fn lagging_follower_gets_a_snapshot() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.isolate(3);
    for i in 0..5u8 {
        net.propose(1, &[i]);
    }
    let applied = net.r(1).applied_index();
    assert_eq!(applied, 6);
    net.rm(1).compact(applied, b"state@6".to_vec()).unwrap();
    assert_eq!(net.r(1).first_index(), 7);
    net.heal();
    net.delivered.clear();
    net.tick(2);
    assert_eq!(net.r(1).counters().snapshots_sent, 1);
    assert_eq!(net.r(3).counters().snapshots_installed, 1);
    let snap = net.nodes[&3]
        .snapshot
        .clone()
        .expect("snapshot persisted through Ready::snapshot");
    assert_eq!(
        (snap.meta.index, snap.meta.term, &snap.data[..]),
        (6, 1, &b"state@6"[..])
    );
    assert_eq!(snap.meta.conf, conf(&[1, 2, 3]));
    let ack = net
        .delivered
        .iter()
        .find(|m| {
            m.from == 3 && matches!(m.body, MessageBody::AppendResponse { reject: false, .. })
        })
        .unwrap();
    assert_eq!(
        ack.body,
        MessageBody::AppendResponse {
            reject: false,
            index: 6,
            hint_index: 0,
            hint_term: 0,
            recovering: false
        }
    );
    net.propose(1, b"after");
    assert_eq!(net.r(3).commit_index(), 7);
    assert_eq!(net.nodes[&3].applied_data(), vec![b"after".to_vec()]);
    assert_eq!(net.r(1).progress_state(3), Some(ProgressState::Replicate));
}

#[test]
fn compaction_rules_and_restart_from_snapshot() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    net.propose(1, b"b");
    assert_eq!(net.rm(2).compact(9, vec![]), Err(CompactError::NotApplied));
    net.rm(2).compact(2, b"s".to_vec()).unwrap();
    assert_eq!(
        net.rm(2).compact(2, vec![]),
        Err(CompactError::AlreadyCompacted)
    );
    assert_eq!(net.r(2).term_of(2), Some(1));
    assert_eq!(net.r(2).term_of(1), None);
    assert_eq!(
        net.r(2)
            .entries(1, 3)
            .iter()
            .map(|e| e.index)
            .collect::<Vec<_>>(),
        vec![3]
    );
    // Restart from snapshot + remaining entries.
    let snap = net.r(2).snapshot().cloned().unwrap();
    let boot = Bootstrap {
        hard_state: net.r(2).hard_state(),
        conf: ConfState::default(),
        snapshot: Some(snap),
        entries: net.r(2).entries(3, 3),
        log_lost: false,
    };
    let r = Raft::new(cfg(2), boot).unwrap();
    assert_eq!(
        (r.first_index(), r.last_index(), r.commit_index()),
        (3, 3, 3)
    );
    assert_eq!(
        r.conf_state(),
        &conf(&[1, 2, 3]),
        "configuration from the snapshot"
    );
}

#[test]
fn leader_counts_itself_only_for_persisted_entries() {
    let mut net = Net::new(&[1]);
    net.elect(1);
    assert_eq!(net.r(1).commit_index(), 1);
    net.rm(1).propose(b"x".to_vec()).unwrap();
    assert_eq!(net.r(1).commit_index(), 1, "not persisted yet");
    let rd = net.rm(1).ready();
    assert_eq!(rd.entries.len(), 1);
    assert!(rd.committed_entries.is_empty());
    net.rm(1).advance();
    assert_eq!(
        net.r(1).commit_index(),
        2,
        "persisted: the single voter commits"
    );
    let rd = net.rm(1).ready();
    assert_eq!(rd.committed_entries.len(), 1);
    assert_eq!(rd.hard_state.unwrap().commit, 2);
}
