//! Malformed or inconsistent input is rejected with an error and counted; it never panics
//! and never changes the replica's state.

mod common;
use common::*;
use waverunner_raft::*;

fn msg(from: NodeId, to: NodeId, term: Term, body: MessageBody) -> Message {
    Message {
        from,
        to,
        term,
        body,
    }
}

fn append(prev_index: Index, prev_term: Term, entries: Vec<Entry>, commit: Index) -> MessageBody {
    MessageBody::Append {
        prev_index,
        prev_term,
        entries,
        commit,
    }
}

#[test]
fn malformed_messages_are_rejected_and_counted() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    let before = (
        net.r(2).hard_state(),
        net.r(2).last_index(),
        net.r(2).leader(),
    );
    let cc_bad = Entry {
        term: 1,
        index: 3,
        kind: EntryKind::ConfChange,
        data: vec![9, 9].into(),
    };
    let cases: Vec<(Message, &str)> = vec![
        (
            msg(1, 3, 1, MessageBody::TimeoutNow),
            "addressed to another replica",
        ),
        (msg(9, 2, 1, MessageBody::TimeoutNow), "unknown sender"),
        (msg(0, 2, 1, MessageBody::TimeoutNow), "sender 0"),
        (msg(2, 2, 1, MessageBody::TimeoutNow), "from itself"),
        (msg(1, 2, 0, append(2, 1, vec![], 0)), "term 0"),
        (
            msg(1, 2, 1, append(2, 1, vec![entry(1, 3), entry(1, 5)], 0)),
            "indexes not consecutive",
        ),
        (
            msg(1, 2, 1, append(2, 1, vec![entry(1, 4)], 0)),
            "does not follow prev_index",
        ),
        (
            msg(1, 2, 1, append(2, 1, vec![entry(3, 3)], 0)),
            "entry term above message term",
        ),
        (
            msg(1, 2, 2, append(2, 1, vec![entry(2, 3), entry(1, 4)], 0)),
            "entry terms decrease",
        ),
        (
            msg(1, 2, 1, append(2, 1, vec![entry(1, 3)], 4)),
            "commit beyond the entries sent",
        ),
        (
            msg(1, 2, 1, append(0, 1, vec![], 0)),
            "prev_index 0 with a term",
        ),
        (
            msg(1, 2, 1, append(2, 1, vec![cc_bad], 0)),
            "undecodable conf change",
        ),
        (
            msg(
                1,
                2,
                1,
                MessageBody::InstallSnapshot {
                    meta: SnapshotMeta::default(),
                    total: 0,
                    offset: 0,
                    data: vec![].into(),
                },
            ),
            "snapshot index 0",
        ),
        (
            msg(
                1,
                2,
                1,
                MessageBody::InstallSnapshot {
                    meta: SnapshotMeta {
                        index: 5,
                        term: 1,
                        conf: ConfState::default(),
                    },
                    total: 0,
                    offset: 0,
                    data: vec![].into(),
                },
            ),
            "snapshot with no voters",
        ),
        (
            msg(
                1,
                2,
                1,
                MessageBody::InstallSnapshot {
                    meta: SnapshotMeta {
                        index: 5,
                        term: 1,
                        conf: ConfState {
                            voters: vec![3, 1],
                            learners: vec![],
                        },
                    },
                    total: 0,
                    offset: 0,
                    data: vec![].into(),
                },
            ),
            "snapshot with unsorted conf",
        ),
        (
            msg(
                1,
                2,
                1,
                MessageBody::Vote {
                    last_index: 1,
                    last_term: 4,
                    kind: CampaignKind::Election,
                },
            ),
            "vote log term above term",
        ),
        (
            msg(3, 2, 1, append(2, 1, vec![], 1)),
            "second leader in term 1",
        ),
        (
            msg(
                1,
                2,
                1,
                MessageBody::Heartbeat {
                    commit: 50,
                    context: vec![],
                },
            ),
            "heartbeat commit beyond the log",
        ),
        (
            msg(1, 2, 1, append(0, 0, vec![entry(1, 1), entry(1, 2)], 0)),
            "conflict with a committed entry?",
        ),
    ];
    let mut rejected = 0;
    for (m, why) in cases {
        let r = net.rm(2).step(m);
        if why.ends_with('?') {
            // Same entries as committed ones: accepted (idempotent), not a conflict.
            assert!(r.is_ok(), "{why}");
            continue;
        }
        assert!(r.is_err(), "{why} must be rejected");
        rejected += 1;
        assert_eq!(
            net.r(2).counters().messages_rejected,
            rejected,
            "{why} counted"
        );
    }
    let conflict = msg(
        1,
        2,
        1,
        append(
            0,
            0,
            vec![
                entry(1, 1),
                Entry {
                    term: 1,
                    index: 2,
                    kind: EntryKind::Normal,
                    data: b"zz".to_vec().into(),
                },
            ],
            0,
        ),
    );
    assert!(
        net.rm(2).step(conflict).is_ok(),
        "same index and term: log matching says same entry"
    );
    let after = (
        net.r(2).hard_state(),
        net.r(2).last_index(),
        net.r(2).leader(),
    );
    assert_eq!(before, after, "rejected input changed nothing");
    // Leader side.
    let ack = msg(
        2,
        1,
        1,
        MessageBody::AppendResponse {
            reject: false,
            index: 99,
            hint_index: 0,
            hint_term: 0,
            recovering: false,
        },
    );
    assert!(matches!(
        net.rm(1).step(ack),
        Err(StepError::Inconsistent(_))
    ));
    let hint = msg(
        2,
        1,
        1,
        MessageBody::AppendResponse {
            reject: true,
            index: 1,
            hint_index: 5,
            hint_term: 0,
            recovering: false,
        },
    );
    assert!(matches!(net.rm(1).step(hint), Err(StepError::Malformed(_))));
    assert_eq!(net.r(1).counters().messages_rejected, 2);
    // Data-plane calls on a replica whose data plane is off.
    assert!(net.rm(2).dataplane_append(entry(1, 3)).is_err());
    assert_eq!(net.r(2).last_index(), 2);
}

#[test]
fn append_contradicting_committed_entries_never_touches_them() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    assert_eq!(net.r(2).commit_index(), 2);
    // A bogus "leader" of a later term claims index 2 has term 2: it contradicts a committed
    // entry. The follower answers with its commit index and keeps its log.
    let bogus = msg(3, 2, 2, append(1, 1, vec![entry(2, 2)], 0));
    net.rm(2).step(bogus).unwrap();
    assert_eq!(net.r(2).term_of(2), Some(1));
    let rd = net.rm(2).ready();
    assert!(rd.messages.iter().any(|m| m.to == 3
        && m.body
            == MessageBody::AppendResponse {
                reject: false,
                index: 2,
                hint_index: 0,
                hint_term: 0,
                recovering: false
            }));
    net.rm(2).advance();
}

/// A deterministic flood of random messages never panics any replica.
#[test]
fn random_messages_never_panic() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    let mut x: u64 = 0x1234_5678;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..20_000 {
        let from = rnd(5);
        let to = 1 + rnd(3);
        let term = rnd(4);
        let pi = rnd(5);
        let pt = rnd(3);
        let n = rnd(3);
        let entries: Vec<Entry> = (0..n).map(|i| entry(rnd(4), pi + 1 + i + rnd(2))).collect();
        let body = match rnd(14) {
            0 => MessageBody::PreVote {
                last_index: rnd(6),
                last_term: rnd(4),
            },
            1 => MessageBody::PreVoteResponse {
                reject: rnd(2) == 0,
            },
            2 => MessageBody::Vote {
                last_index: rnd(6),
                last_term: rnd(4),
                kind: CampaignKind::Election,
            },
            3 => MessageBody::VoteResponse {
                reject: rnd(2) == 0,
                accelerated: rnd(2) == 0,
            },
            4 => MessageBody::Append {
                prev_index: pi,
                prev_term: pt,
                entries,
                commit: rnd(6),
            },
            5 => MessageBody::AppendResponse {
                reject: rnd(2) == 0,
                index: rnd(6),
                hint_index: rnd(6),
                hint_term: rnd(4),
                recovering: rnd(4) == 0,
            },
            6 => MessageBody::Heartbeat {
                commit: rnd(6),
                context: vec![],
            },
            7 => MessageBody::HeartbeatResponse {
                context: vec![rnd(2) as u8],
            },
            8 => MessageBody::TimeoutNow,
            9 => MessageBody::ReadIndex { context: vec![1] },
            10 => MessageBody::ReadIndexResponse {
                context: vec![1],
                index: rnd(6),
            },
            11 => MessageBody::ReadIndexRefused { context: vec![1] },
            12 => MessageBody::SnapshotProgress {
                index: rnd(6),
                received: rnd(8),
            },
            _ => {
                let total = rnd(8);
                let offset = rnd(8);
                let len = rnd(4) as usize;
                MessageBody::InstallSnapshot {
                    meta: SnapshotMeta {
                        index: rnd(6),
                        term: rnd(4),
                        conf: conf(&[1, 2, 3]),
                    },
                    total,
                    offset,
                    data: vec![7; len].into(),
                }
            }
        };
        let _ = net.rm(to).step(Message {
            from,
            to,
            term,
            body,
        });
        if rnd(50) == 0 {
            net.tick(1);
        }
        net.stabilize();
        net.assert_one_leader_per_term();
    }
}
