//! Leader transfer and reads.

mod common;
use common::*;
use waverunner_raft::*;

#[test]
fn transfer_to_a_lagging_follower_catches_it_up_first() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.filter = Some(Box::new(|m: &Message| {
        m.to == 2 && matches!(m.body, MessageBody::Append { .. })
    }));
    net.propose(1, b"a");
    net.rm(1).transfer_leader(2).unwrap();
    assert_eq!(net.r(1).transferee(), 2);
    assert_eq!(
        net.rm(1).propose(b"b".to_vec()),
        Err(ProposeError::TransferInProgress)
    );
    net.stabilize();
    assert_eq!(
        net.r(1).role(),
        Role::Leader,
        "no TimeoutNow before 2 is up to date"
    );
    net.filter = None;
    net.tick(1);
    assert_eq!(net.r(2).role(), Role::Leader);
    assert_eq!(net.r(2).term(), 2);
    assert_eq!(net.r(1).role(), Role::Follower);
    assert_eq!(net.r(1).leader(), 2);
    assert!(net
        .delivered
        .iter()
        .any(|m| m.from == 1 && m.to == 2 && m.body == MessageBody::TimeoutNow));
    assert!(net.delivered.iter().any(|m| m.from == 2
        && matches!(
            m.body,
            MessageBody::Vote {
                kind: CampaignKind::Forced,
                ..
            }
        )));
}

#[test]
fn transfer_aborts_after_an_election_timeout() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.isolate(2);
    net.propose(1, b"a");
    net.rm(1).transfer_leader(2).unwrap();
    assert_eq!(
        net.rm(1).propose(b"b".to_vec()),
        Err(ProposeError::TransferInProgress)
    );
    net.tick_only(&[1, 3], 10);
    assert_eq!(net.r(1).transferee(), 0);
    assert_eq!(net.r(1).counters().transfers_aborted, 1);
    assert_eq!(net.r(1).role(), Role::Leader);
    assert!(net.rm(1).propose(b"b".to_vec()).is_ok());
    assert_eq!(
        net.rm(1).transfer_leader(9),
        Err(ProposeError::InvalidTransferTarget)
    );
    assert_eq!(
        net.rm(3).transfer_leader(2),
        Err(ProposeError::NotLeader { leader: 1 })
    );
}

#[test]
fn read_index_waits_for_a_heartbeat_round() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    net.hold = true;
    net.rm(1).read_index(b"r1".to_vec()).unwrap();
    let msgs = net.collect();
    assert!(
        net.nodes[&1].read_states.is_empty(),
        "not before a quorum confirmed leadership"
    );
    let hbs: Vec<&Message> = msgs
        .iter()
        .filter(|m| matches!(m.body, MessageBody::Heartbeat { .. }))
        .collect();
    assert_eq!(hbs.len(), 2);
    assert!(hbs.iter().all(|m| m.body
        == MessageBody::Heartbeat {
            commit: 2,
            context: b"r1".to_vec()
        }));
    net.hold = false;
    net.deliver(msgs);
    net.stabilize();
    assert_eq!(
        net.nodes[&1].read_states,
        vec![ReadState {
            index: 2,
            context: b"r1".to_vec()
        }]
    );
}

#[test]
fn read_index_refused_before_the_first_commit_of_the_term() {
    let mut net = Net::new(&[1, 2, 3]);
    net.filter = Some(Box::new(|m: &Message| {
        m.to == 1 && matches!(m.body, MessageBody::AppendResponse { .. })
    }));
    net.elect(1);
    assert_eq!(
        net.rm(1).read_index(b"r".to_vec()),
        Err(ReadError::NotCommittedInTerm)
    );
    assert_eq!(net.rm(1).read_index(vec![]), Err(ReadError::EmptyContext));
}

#[test]
fn a_follower_read_the_leader_cannot_answer_yet_is_refused_not_dropped() {
    let mut net = Net::new(&[1, 2, 3]);
    net.filter = Some(Box::new(|m: &Message| {
        m.to == 1 && matches!(m.body, MessageBody::AppendResponse { .. })
    }));
    net.elect(1);
    net.rm(2).read_index(b"f".to_vec()).unwrap();
    net.stabilize();
    assert!(net.delivered.iter().any(|m| m.from == 1
        && m.to == 2
        && m.body
            == MessageBody::ReadIndexRefused {
                context: b"f".to_vec()
            }));
    assert_eq!(net.nodes[&2].read_refusals, vec![b"f".to_vec()]);
    assert!(net.nodes[&2].read_states.is_empty(), "never served");
    assert_eq!(net.r(1).counters().reads_dropped, 1);
}

#[test]
fn a_read_index_sent_to_a_follower_is_refused() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    net.read_index_to(2, 3, b"g");
    assert_eq!(net.nodes[&2].read_refusals, vec![b"g".to_vec()]);
    assert!(net.nodes[&2].read_states.is_empty());
}

#[test]
fn followers_forward_reads_to_the_leader() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    net.rm(2).read_index(b"f".to_vec()).unwrap();
    net.stabilize();
    assert!(net
        .delivered
        .iter()
        .any(|m| m.from == 2 && m.to == 1 && matches!(m.body, MessageBody::ReadIndex { .. })));
    assert_eq!(
        net.nodes[&2].read_states,
        vec![ReadState {
            index: 2,
            context: b"f".to_vec()
        }]
    );
    assert!(net.nodes[&1].read_states.is_empty());
    let mut lone = Raft::new(
        cfg(5),
        Bootstrap {
            conf: conf(&[5, 6, 7]),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(lone.read_index(b"x".to_vec()), Err(ReadError::NoLeader));
}

#[test]
fn lease_reads_answer_at_once_while_the_lease_holds() {
    let mut net = Net::lease_leader();
    net.hold = true;
    net.rm(1).read_index(b"l".to_vec()).unwrap();
    let msgs = net.collect();
    assert_eq!(
        net.nodes[&1].read_states,
        vec![ReadState {
            index: 2,
            context: b"l".to_vec()
        }]
    );
    assert!(msgs.iter().all(
        |m| !matches!(&m.body, MessageBody::Heartbeat { context, .. } if !context.is_empty())
    ));
    net.hold = false;
    net.held.clear();
    // Partitioned for longer than the lease: falls back to a ReadIndex round (no answer).
    net.isolate(1);
    net.tick_only(&[1], 16);
    assert_eq!(net.r(1).role(), Role::Leader);
    assert!(
        !net.read_answered(1, b"l2"),
        "no lease: no answer without a quorum"
    );
}

#[test]
fn a_leader_that_transfers_leadership_serves_no_more_lease_reads() {
    // TimeoutNow makes the target campaign past the other followers' leases: the old leader's
    // lease is void from then on, though it leads until it hears of the new term.
    let mut net = Net::lease_leader();
    net.hold = true;
    net.rm(1).read_index(b"before".to_vec()).unwrap();
    let _ = net.collect();
    assert_eq!(net.nodes[&1].read_states.len(), 1, "the lease holds");
    net.rm(1).transfer_leader(2).unwrap();
    let msgs = net.collect();
    assert!(msgs
        .iter()
        .any(|m| m.to == 2 && m.body == MessageBody::TimeoutNow));
    assert_eq!(
        net.r(1).role(),
        Role::Leader,
        "the TimeoutNow is not delivered"
    );
    net.rm(1).read_index(b"after".to_vec()).unwrap();
    let msgs = net.collect();
    assert_eq!(
        net.nodes[&1].read_states.len(),
        1,
        "no lease read once leadership was handed over"
    );
    assert!(
        msgs.iter().any(|m| matches!(&m.body,
            MessageBody::Heartbeat { context, .. } if context == b"after")),
        "a ReadIndex round instead"
    );
}

#[test]
fn a_leader_cut_off_from_its_followers_stops_growing_its_uncommitted_log() {
    let mut net = Net::with(&[1, 2, 3], |c| {
        c.max_uncommitted_entries = 3;
        c.check_quorum = false;
    });
    net.elect(1);
    let commit = net.r(1).commit_index();
    net.isolate(1);
    for i in 0..3u8 {
        assert!(net.rm(1).propose(vec![i]).is_ok());
    }
    assert_eq!(net.rm(1).propose(vec![9]), Err(ProposeError::Busy));
    assert_eq!(
        net.r(1).last_index(),
        commit + 3,
        "at most 3 past the commit index"
    );
    // Once they commit, it takes proposals again.
    net.heal();
    net.tick(2);
    assert_eq!(net.r(1).commit_index(), commit + 3);
    assert!(net.rm(1).propose(vec![10]).is_ok());
}
