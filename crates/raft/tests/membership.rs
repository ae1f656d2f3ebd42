//! Single-server membership changes with learners (docs/membership.md).

mod common;
use common::*;
use waverunner_raft::*;

fn joining(net: &mut Net, id: NodeId) {
    // A new replica starts from the group's initial configuration; the configuration entries
    // of the log apply on top as it receives them.
    net.add(
        id,
        cfg(id),
        Bootstrap {
            conf: conf(&[1, 2, 3]),
            ..Default::default()
        },
    );
}

#[test]
fn add_learner_then_promote_to_voter() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    joining(&mut net, 4);
    let idx = net
        .rm(1)
        .propose_conf_change(ConfChange::AddLearner(4))
        .unwrap();
    assert_eq!(
        net.r(1).conf_state().learners,
        vec![4],
        "takes effect when appended, before commit"
    );
    net.stabilize();
    net.tick(2);
    for id in [1, 2, 3, 4] {
        assert_eq!(
            net.r(id).conf_state(),
            &ConfState {
                voters: vec![1, 2, 3],
                learners: vec![4]
            }
        );
        assert!(net.r(id).commit_index() >= idx);
    }
    assert_eq!(
        net.nodes[&4].applied_data(),
        vec![b"a".to_vec()],
        "the learner receives the log"
    );
    // A learner does not campaign and does not count toward commit.
    net.isolate(1);
    net.tick_only(&[4], 50);
    assert_eq!(
        net.r(4).counters().elections + net.r(4).counters().pre_elections,
        0
    );
    net.heal();
    net.isolate(2);
    net.isolate(3);
    net.rm(1).propose(b"b".to_vec()).unwrap();
    net.stabilize();
    assert!(
        net.nodes[&1].applied_data().len() == 1,
        "leader + learner is not a majority"
    );
    net.heal();
    net.tick(2);
    assert_eq!(net.nodes[&1].applied_data().len(), 2);
    // Promote.
    net.rm(1)
        .propose_conf_change(ConfChange::AddVoter(4))
        .unwrap();
    net.stabilize();
    net.tick(1);
    for id in [1, 2, 3, 4] {
        assert_eq!(net.r(id).conf_state(), &conf(&[1, 2, 3, 4]));
    }
    // Now 4 counts: with 2 and 3 away, 1 + 4 is not a majority of 4 — but with 2 back it is.
    net.isolate(3);
    net.propose(1, b"c");
    assert_eq!(net.nodes[&4].applied_data().last().unwrap(), b"c");
    assert!(net.errors.is_empty(), "{:?}", net.errors);
}

#[test]
fn one_change_at_a_time_and_only_after_a_commit_in_the_term() {
    let mut net = Net::with(&[1, 2, 3], |c| c.pre_vote = false);
    // A fresh leader whose no-op is not committed yet refuses changes.
    net.filter = Some(Box::new(|m: &Message| {
        m.to == 1 && matches!(m.body, MessageBody::AppendResponse { .. })
    }));
    net.elect(1);
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::AddLearner(4)),
        Err(ProposeError::NotCommittedInTerm)
    );
    net.filter = None;
    net.tick(1);
    assert_eq!(net.r(1).commit_index(), 1);
    // First change accepted; while it is uncommitted, a second is refused.
    net.isolate(2);
    net.isolate(3);
    net.rm(1)
        .propose_conf_change(ConfChange::AddLearner(4))
        .unwrap();
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::AddLearner(5)),
        Err(ProposeError::ConfChangePending)
    );
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::Remove(9)),
        Err(ProposeError::ConfChangePending)
    );
    net.heal();
    net.tick(1);
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::Remove(9)),
        Err(ProposeError::InvalidConfChange)
    );
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::AddVoter(2)),
        Err(ProposeError::InvalidConfChange)
    );
    assert!(net
        .rm(1)
        .propose_conf_change(ConfChange::AddLearner(5))
        .is_ok());
    assert_eq!(
        net.rm(2).propose_conf_change(ConfChange::AddLearner(6)),
        Err(ProposeError::NotLeader { leader: 1 })
    );
}

#[test]
fn remove_a_follower() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.rm(1)
        .propose_conf_change(ConfChange::Remove(3))
        .unwrap();
    net.stabilize();
    net.tick(1);
    assert_eq!(net.r(1).conf_state(), &conf(&[1, 2]));
    assert_eq!(
        net.r(3).conf_state(),
        &conf(&[1, 2]),
        "3 learned it was removed"
    );
    assert_eq!(net.r(1).progress(3), None);
    // 3 never campaigns again.
    net.isolate(3);
    net.tick_only(&[3], 60);
    assert_eq!(
        net.r(3).counters().elections + net.r(3).counters().pre_elections,
        0
    );
    // Commits need both remaining voters: 1 and 2.
    net.propose(1, b"x");
    assert_eq!(net.nodes[&2].applied_data(), vec![b"x".to_vec()]);
}

#[test]
fn remove_the_leader_hands_over_then_steps_down() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let idx = net
        .rm(1)
        .propose_conf_change(ConfChange::Remove(1))
        .unwrap();
    assert_eq!(net.r(1).conf_state(), &conf(&[2, 3]));
    net.stabilize();
    assert!(
        net.delivered
            .iter()
            .any(|m| m.from == 1 && m.body == MessageBody::TimeoutNow),
        "handed over"
    );
    assert_eq!(net.r(1).role(), Role::Follower);
    let l = net.leader().expect("a remaining voter took over at once");
    assert!(l == 2 || l == 3);
    assert!(net.r(l).commit_index() > idx);
    let before = net.r(1).counters().clone();
    net.tick_only(&[1], 60);
    assert_eq!(
        net.r(1).counters().elections,
        before.elections,
        "removed: never campaigns"
    );
    assert_eq!(net.r(1).counters().pre_elections, before.pre_elections);
    net.propose(l, b"after");
    assert_eq!(net.nodes[&2].applied_data(), vec![b"after".to_vec()]);
}

#[test]
fn configuration_rolls_back_when_its_entry_is_truncated() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.isolate(1);
    net.rm(1)
        .propose_conf_change(ConfChange::AddLearner(4))
        .unwrap();
    assert_eq!(net.r(1).conf_state().learners, vec![4]);
    // Meanwhile 2 leads term 2 and commits.
    net.tick_only(&[2, 3], 25);
    let l = net.leader().unwrap();
    assert_ne!(l, 1);
    net.propose(l, b"x");
    net.heal();
    net.tick(2);
    assert_eq!(net.r(1).role(), Role::Follower);
    assert_eq!(
        net.r(1).conf_state(),
        &conf(&[1, 2, 3]),
        "uncommitted AddLearner(4) truncated and rolled back"
    );
    assert_eq!(net.r(1).term_of(2), net.r(l).term_of(2));
}

#[test]
fn a_change_that_would_leave_no_voting_majority_is_refused() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    // 3 restarts without its log: it may not vote until it has caught up in a newer term.
    net.restart(3, true);
    net.propose(1, b"b");
    net.tick(1);
    assert_eq!(net.r(3).role(), Role::Recovering);
    // Removing 2 would leave {1, 3}: a majority of it needs 3's vote, which it cannot give.
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::Remove(2)),
        Err(ProposeError::WouldLoseQuorum)
    );
    // Removing 3 leaves {1, 2}, both able to vote.
    assert!(net.rm(1).propose_conf_change(ConfChange::Remove(3)).is_ok());
    // Silent voters stop counting once not heard from for an election timeout.
    let mut net = Net::new(&[1, 2, 3, 4, 5]);
    net.elect(1);
    net.propose(1, b"a");
    net.isolate(4);
    net.isolate(5);
    net.tick(15);
    assert_eq!(net.leader(), Some(1), "1, 2, 3 still form a quorum");
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::Remove(2)),
        Err(ProposeError::WouldLoseQuorum),
        "{{1, 3, 4, 5}} would have 2 able voters of the 3 it needs"
    );
    assert!(
        net.rm(1).propose_conf_change(ConfChange::Remove(4)).is_ok(),
        "{{1, 2, 3, 5}} keeps 3 able voters"
    );
}

#[test]
fn a_learner_is_added_while_a_voter_cannot_vote_yet() {
    // Voters {1, 2}; 2 restarts without its log. A majority needs 2, which is recovering:
    // adding a learner keeps the voters, so it is proposed (and commits once 2 is back).
    let mut net = Net::new(&[1, 2]);
    net.elect(1);
    net.propose(1, b"a");
    net.restart(2, true);
    net.propose(1, b"b");
    net.tick(1);
    assert_eq!(net.r(2).role(), Role::Recovering);
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::AddVoter(3)),
        Err(ProposeError::WouldLoseQuorum),
        "{{1, 2, 3}} would have 1 able voter of the 2 it needs"
    );
    assert!(net
        .rm(1)
        .propose_conf_change(ConfChange::AddLearner(3))
        .is_ok());
    assert_eq!(net.r(1).conf_state().learners, vec![3]);
}

#[test]
fn a_voter_holding_its_own_uncommitted_removal_campaigns_when_nobody_else_can_win() {
    // Voters 1..4, 1 leads; only 4 hears of its own removal, then 1 loses its log (memory
    // durability). 2 and 3 still count in {1, 2, 3, 4} and need a third vote: 1 is recovering
    // and 4 refuses (its log is longer). 4 campaigns in its latest configuration {1, 2, 3},
    // without itself, wins with 2 and 3, commits its removal and hands over.
    let mut net = Net::new(&[1, 2, 3, 4]);
    net.elect(1);
    net.propose(1, b"before");
    for o in [2, 3] {
        net.blocked.insert((1, o));
        net.blocked.insert((o, 1));
    }
    net.rm(1)
        .propose_conf_change(ConfChange::Remove(4))
        .unwrap();
    net.stabilize();
    assert_eq!(
        net.r(4).conf_state(),
        &conf(&[1, 2, 3]),
        "4 has its removal"
    );
    assert!(
        net.r(4).commit_index() < net.r(4).last_index(),
        "not committed"
    );
    assert_eq!(net.r(2).conf_state(), &conf(&[1, 2, 3, 4]));
    net.restart(1, true);
    net.heal();
    net.tick(80);
    let l = net
        .leader()
        .expect("a leader although the removal's leader lost its log");
    net.assert_one_leader_per_term();
    assert_ne!(l, 1);
    assert_eq!(
        net.r(l).conf_state(),
        &conf(&[1, 2, 3]),
        "the removal committed"
    );
    assert!(net.r(l).commit_index() >= net.r(4).last_index().min(net.r(l).last_index()));
    net.propose(l, b"after");
    assert_eq!(
        net.nodes[&2].applied_data(),
        vec![b"before".to_vec(), b"after".to_vec()]
    );
    net.assert_logs_agree();
}
