//! Leader election (Raft §5.2, §5.4.1), pre-vote, check-quorum, recovering replicas.

mod common;
use common::*;
use waverunner_raft::*;

#[test]
fn a_leader_is_elected_and_commits_its_noop() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    for id in [1, 2, 3] {
        assert_eq!(net.r(id).leader(), 1);
        assert_eq!(net.r(id).term(), 1);
        assert_eq!(
            net.r(id).commit_index(),
            1,
            "the no-op of term 1 is committed on {id}"
        );
        assert_eq!(net.nodes[&id].applied.len(), 1);
        assert!(net.nodes[&id].applied[0].data.is_empty());
    }
    assert_eq!(net.r(2).role(), Role::Follower);
    net.propose(1, b"x");
    for id in [1, 2, 3] {
        assert_eq!(net.nodes[&id].applied_data(), vec![b"x".to_vec()]);
    }
    assert!(net.errors.is_empty(), "{:?}", net.errors);
}

#[test]
fn randomized_timeouts_elect_exactly_one_leader_by_ticking() {
    let mut net = Net::with(&[1, 2, 3, 4, 5], |c| c.seed = 7);
    for _ in 0..40 {
        net.tick(1);
        net.assert_one_leader_per_term();
    }
    let l = net.leader().expect("a leader emerges from timeouts");
    for id in 1..=5 {
        assert_eq!(net.r(id).leader(), l);
    }
}

#[test]
fn vote_is_persisted_in_hard_state_and_survives_restart() {
    let mut net = Net::with(&[1, 2, 3], |c| c.pre_vote = false);
    net.isolate(3);
    net.blocked.remove(&(1, 2));
    net.blocked.remove(&(2, 1));
    net.rm(1).campaign();
    net.stabilize();
    assert_eq!(net.nodes[&2].hs.vote, 1, "vote for 1 persisted by 2");
    assert_eq!(net.nodes[&2].hs.term, 1);
    // 2 restarts; 3 campaigns in term 1 (same term) and must not get 2's vote.
    net.restart(2, false);
    assert_eq!(net.r(2).hard_state().vote, 1);
    net.heal();
    net.blocked.insert((3, 1));
    net.blocked.insert((1, 3));
    // Make 3 a term-1 candidate by hand: a vote request of term 1 from 3.
    let m = Message {
        from: 3,
        to: 2,
        term: 1,
        body: MessageBody::Vote {
            last_index: 5,
            last_term: 1,
            kind: CampaignKind::Election,
        },
    };
    net.rm(2).step(m).unwrap();
    let rd = net.rm(2).ready();
    assert_eq!(rd.messages.len(), 1);
    assert_eq!(
        rd.messages[0].body,
        MessageBody::VoteResponse {
            reject: true,
            accelerated: false
        }
    );
}

#[test]
fn candidate_with_stale_log_loses() {
    let mut net = Net::with(&[1, 2, 3], |c| {
        c.pre_vote = false;
        c.check_quorum = false;
    });
    net.elect(1);
    net.isolate(3);
    net.propose(1, b"a");
    net.propose(1, b"b");
    net.heal();
    net.isolate(1); // leader gone
    let t = net.r(3).term();
    net.rm(3).campaign();
    net.stabilize();
    assert_eq!(
        net.r(3).role(),
        Role::Candidate,
        "2 has a longer log and rejects 3: no majority"
    );
    assert_eq!(net.r(3).term(), t + 1);
    assert_eq!(net.r(2).term(), t + 1, "2 adopted the term");
    assert_eq!(net.r(2).hard_state().vote, 0, "2 did not vote for 3");
    net.rm(2).campaign();
    net.stabilize();
    assert_eq!(
        net.r(2).role(),
        Role::Leader,
        "2 is up to date and wins with 3's vote"
    );
}

#[test]
fn split_votes_resolve_by_randomized_timeouts() {
    let mut net = Net::with(&[1, 2, 3, 4], |c| {
        c.pre_vote = false;
        c.seed = 3;
    });
    // Two simultaneous candidates in a 4-node cluster: 1 and 2 each get one other vote.
    net.hold = true;
    net.rm(1).campaign();
    net.rm(2).campaign();
    let msgs = net.collect();
    net.hold = false;
    // Deliver 1's request to 3 first and 2's request to 4 first.
    let (first, rest): (Vec<Message>, Vec<Message>) = msgs
        .into_iter()
        .partition(|m| (m.from == 1 && m.to == 3) || (m.from == 2 && m.to == 4));
    net.deliver(first);
    net.deliver(rest);
    net.stabilize();
    assert_eq!(net.leader(), None, "split vote: nobody won term 1");
    assert_eq!(net.r(1).term(), 1);
    net.held.clear();
    for _ in 0..60 {
        net.tick(1);
        net.assert_one_leader_per_term();
        if net.leader().is_some() {
            break;
        }
    }
    assert!(net.leader().is_some(), "a later term elects a leader");
    assert!(net.r(net.leader().unwrap()).term() >= 2);
}

#[test]
fn pre_vote_keeps_a_partitioned_node_from_raising_terms() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let term = net.r(1).term();
    net.isolate(3);
    net.tick_only(&[3], 100);
    assert_eq!(
        net.r(3).term(),
        term,
        "pre-vote never succeeds, so the term does not rise"
    );
    assert_eq!(net.r(3).role(), Role::PreCandidate);
    net.heal();
    net.tick(3);
    assert_eq!(
        net.r(1).role(),
        Role::Leader,
        "the leader was not disrupted"
    );
    assert_eq!(net.r(1).term(), term);
    assert_eq!(net.r(3).leader(), 1);
}

#[test]
fn without_pre_vote_a_partitioned_node_disrupts() {
    let mut net = Net::with(&[1, 2, 3], |c| {
        c.pre_vote = false;
        c.check_quorum = false;
    });
    net.elect(1);
    net.isolate(3);
    net.tick_only(&[3], 60);
    assert!(net.r(3).term() > 1, "its term rose while isolated");
}

#[test]
fn check_quorum_leader_steps_down_without_a_quorum() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.isolate(1);
    net.tick_only(&[1], 20);
    assert_eq!(net.r(1).role(), Role::Follower);
    assert_eq!(net.r(1).counters().check_quorum_step_downs, 1);
}

#[test]
fn followers_in_lease_ignore_votes_but_forced_campaigns_pass() {
    let mut net = Net::with(&[1, 2, 3], |c| c.pre_vote = false);
    net.elect(1);
    // 3 campaigns by hand (no timeout): 2 heard from 1 recently and ignores it.
    net.rm(3).campaign();
    net.stabilize();
    assert_eq!(net.r(1).role(), Role::Leader);
    assert_eq!(net.r(2).leader(), 1);
    assert_eq!(
        net.r(2).term(),
        1,
        "the in-lease follower did not adopt the candidate's term"
    );
    // A forced vote (leader transfer) is granted despite the lease.
    let m = Message {
        from: 3,
        to: 2,
        term: 9,
        body: MessageBody::Vote {
            last_index: 99,
            last_term: 1,
            kind: CampaignKind::Forced,
        },
    };
    net.rm(2).step(m).unwrap();
    assert_eq!(net.r(2).term(), 9);
    assert_eq!(net.r(2).hard_state().vote, 3);
}

#[test]
fn recovering_replica_does_not_vote_and_rejoins() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    net.restart(3, true);
    assert_eq!(net.r(3).role(), Role::Recovering);
    // It does not grant votes, nor pre-votes.
    let pv = Message {
        from: 2,
        to: 3,
        term: 2,
        body: MessageBody::PreVote {
            last_index: 9,
            last_term: 1,
        },
    };
    net.rm(3).step(pv).unwrap();
    let v = Message {
        from: 2,
        to: 3,
        term: 2,
        body: MessageBody::Vote {
            last_index: 9,
            last_term: 1,
            kind: CampaignKind::Forced,
        },
    };
    net.rm(3).step(v).unwrap();
    let rd = net.rm(3).ready();
    let bodies: Vec<_> = rd.messages.iter().map(|m| m.body.clone()).collect();
    assert_eq!(
        bodies,
        vec![
            MessageBody::PreVoteResponse { reject: true },
            MessageBody::VoteResponse {
                reject: true,
                accelerated: false
            }
        ]
    );
    assert_eq!(net.r(3).hard_state().vote, 0);
    net.rm(3).advance();
    // It does not campaign either.
    net.isolate(3);
    net.tick_only(&[3], 50);
    assert_eq!(net.r(3).role(), Role::Recovering);
    assert_eq!(
        net.r(3).counters().elections + net.r(3).counters().pre_elections,
        0
    );
    // Back with the leader: the leader (term 2 now? no: 1 still leads its term) catches it up.
    net.heal();
    // 1's term may be behind 3's; let the cluster settle on a leader.
    net.tick(30);
    let l = net.leader().unwrap();
    net.propose(l, b"b");
    assert_eq!(
        net.r(3).role(),
        Role::Follower,
        "caught up with an entry of the leader's term"
    );
    assert_eq!(net.r(3).commit_index(), net.r(l).commit_index());
    assert_eq!(
        net.nodes[&3].applied_data(),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
}

#[test]
fn recovering_acks_count_toward_commit() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.restart(3, true);
    net.isolate(2); // the only other voter is recovering
    net.propose(1, b"a");
    net.tick(2);
    assert_eq!(
        net.nodes[&1].applied_data(),
        vec![b"a".to_vec()],
        "leader + recovering ack form a majority"
    );
    // 3 restarted in the leader's term: an entry of that term proves nothing about the
    // entries committed with the acks it lost, so it keeps recovering ...
    assert_eq!(net.r(3).role(), Role::Recovering);
    // ... and the leader cannot re-elect itself without 2 (3 may not vote).
    net.tick(40);
    assert_eq!(net.r(3).role(), Role::Recovering);
    assert_eq!(net.r(1).counters().recovery_reelections, 0);
}

#[test]
fn recovering_in_the_leaders_term_finishes_only_after_a_newer_term() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.propose(1, b"a");
    let t = net.r(1).term();
    net.restart(3, true);
    net.propose(1, b"b");
    net.tick(2);
    assert_eq!(net.r(3).last_index(), net.r(1).last_index(), "caught up");
    assert_eq!(
        net.r(3).role(),
        Role::Recovering,
        "an entry of its own restart term does not end recovery"
    );
    // The leader sees a caught-up voter stuck recovering and re-elects itself in a new term.
    net.tick(40);
    let l = net.leader().expect("a leader");
    assert!(net.r(l).term() > t, "a newer term");
    assert!(
        net.r(1).counters().recovery_reelections >= 1,
        "the leader re-elected itself for the recovering voter"
    );
    net.propose(l, b"c");
    net.tick(2);
    assert_eq!(net.r(3).role(), Role::Follower);
    assert_eq!(
        net.nodes[&3].applied_data(),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
}

/// `idle_ticks`: the ticks before it pass without a message or a role change, and the tick it
/// names does something (a leader's heartbeat, a follower's campaign) — a host may sleep
/// through the first and must wake for the last.
#[test]
fn idle_ticks_name_the_first_tick_that_does_something() {
    let mut net = Net::with(&[1, 2, 3], |c| c.heartbeat_tick = 3);
    net.elect(1);
    net.propose(1, b"x");
    for round in 0..30 {
        for id in [1u64, 2, 3] {
            net.stabilize();
            let k = net.r(id).idle_ticks();
            assert!(k >= 1);
            let (role, term) = (net.r(id).role(), net.r(id).term());
            for _ in 1..k {
                net.rm(id).tick();
                let msgs = net.node(id).handle_ready();
                assert!(
                    msgs.is_empty(),
                    "round {round}, node {id}: a tick before the one idle_ticks named sent {msgs:?}"
                );
                assert_eq!((net.r(id).role(), net.r(id).term()), (role, term));
            }
            net.rm(id).tick();
            let msgs = net.node(id).handle_ready();
            // A leader's named tick may be a check-quorum that passes silently; a follower's
            // is its campaign.
            let acted = !msgs.is_empty() || net.r(id).role() != role;
            assert!(
                acted || role == Role::Leader,
                "round {round}, node {id}: the tick idle_ticks named did nothing"
            );
            net.deliver(msgs);
        }
        if round == 10 {
            // Followers of a leader that went away campaign when idle_ticks said.
            net.isolate(1);
        }
    }
}
