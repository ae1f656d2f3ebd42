//! The hand-off to the data plane (DESIGN §3, docs/handoff.md): every enable condition and
//! every disable trigger.

mod common;
use common::*;
use waverunner_raft::*;

fn dp_net(f: impl Fn(&mut Config)) -> Net {
    Net::with(&[1, 2, 3], |c| {
        c.dataplane = true;
        c.enable_backoff_ticks = 5;
        f(c);
    })
}

/// Elect 1 and let it enable the data plane with RequestVoteFPGA.
fn enabled() -> Net {
    enabled_with(|_| {})
}

/// [`enabled`], with the configuration changed by `f`.
fn enabled_with(f: impl Fn(&mut Config)) -> Net {
    let mut net = dp_net(f);
    net.elect(1);
    net.tick(1);
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::On { term: 2 });
    net
}

fn software_appends_after(net: &Net, from: usize) -> usize {
    net.delivered[from..]
        .iter()
        .filter(|m| {
            matches!(
                m.body,
                MessageBody::Append { .. } | MessageBody::Heartbeat { .. }
            )
        })
        .count()
}

#[test]
fn accelerate_election_enables_synced_voters() {
    let mut net = dp_net(|_| {});
    net.elect(1);
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::Off);
    net.delivered.clear();
    net.tick(1);
    let votes: Vec<&Message> = net
        .delivered
        .iter()
        .filter(|m| matches!(m.body, MessageBody::Vote { .. }))
        .collect();
    assert_eq!(votes.len(), 2);
    assert!(votes.iter().all(|m| m.term == 2
        && m.body
            == MessageBody::Vote {
                last_index: 1,
                last_term: 1,
                kind: CampaignKind::Accelerate
            }));
    assert!(
        net.delivered
            .iter()
            .all(|m| !matches!(m.body, MessageBody::PreVote { .. })),
        "no pre-vote"
    );
    assert!(net
        .delivered
        .iter()
        .filter(|m| m.to == 1 && matches!(m.body, MessageBody::VoteResponse { .. }))
        .all(|m| m.body
            == MessageBody::VoteResponse {
                reject: false,
                accelerated: true
            }));
    // Leader: no no-op (everything is committed already), registers as the paper's CSRs.
    let r = net.r(1);
    assert_eq!(
        (r.role(), r.term(), r.last_index(), r.commit_index()),
        (Role::Leader, 2, 1, 1)
    );
    assert_eq!(r.dataplane_state(), DataPlaneState::On { term: 2 });
    assert_eq!(
        net.last_dp_cmd(1),
        Some(DataPlaneCommand::Enable(DataPlaneRegisters {
            self_id: 1,
            leader_id: 1,
            is_leader: true,
            term: 2,
            last_index: 1,
            last_term: 1,
            commit_index: 1,
            term_start_index: 2,
            // The leader won with 2's grant; 3's arrived later and is learned from its acks.
            match_index: vec![(1, 1), (2, 1), (3, 0)],
            defer_ack: false,
        }))
    );
    for id in [2, 3] {
        assert_eq!(net.r(id).dataplane_state(), DataPlaneState::On { term: 2 });
        assert_eq!(net.r(id).leader(), 1);
        assert_eq!(
            net.last_dp_cmd(id),
            Some(DataPlaneCommand::Enable(DataPlaneRegisters {
                self_id: id,
                leader_id: 1,
                is_leader: false,
                term: 2,
                last_index: 1,
                last_term: 1,
                commit_index: 1,
                term_start_index: 2,
                match_index: vec![(1, 0), (2, 0), (3, 0)],
                defer_ack: false,
            }))
        );
        assert_eq!(net.r(id).counters().dataplane_enables, 1);
    }
    assert_eq!(net.r(1).counters().dataplane_enable_attempts, 1);
}

#[test]
fn voter_enables_only_if_its_log_ends_where_the_candidates_does() {
    let mut net = dp_net(|_| {});
    net.elect(1);
    net.propose(1, b"a");
    // A direct RequestVoteFPGA from 3 claiming a longer log: 2 grants (3 is more up to date)
    // but does not enable.
    let m = Message {
        from: 3,
        to: 2,
        term: 5,
        body: MessageBody::Vote {
            last_index: 7,
            last_term: 1,
            kind: CampaignKind::Accelerate,
        },
    };
    net.rm(2).step(m).unwrap();
    let rd = net.rm(2).ready();
    assert_eq!(
        rd.messages[0].body,
        MessageBody::VoteResponse {
            reject: false,
            accelerated: false
        }
    );
    assert_eq!(rd.dataplane, None);
    assert_eq!(net.r(2).dataplane_state(), DataPlaneState::Off);
    net.rm(2).advance();
}

#[test]
fn no_enable_while_a_voter_lags() {
    let mut net = dp_net(|_| {});
    net.filter = Some(Box::new(|m: &Message| {
        m.to == 3 && matches!(m.body, MessageBody::Append { .. })
    }));
    net.elect(1);
    net.tick(12);
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::Off);
    assert_eq!(net.r(1).counters().dataplane_enable_attempts, 0);
    assert_eq!(net.r(1).term(), 1);
    net.filter = None;
    net.tick(2);
    assert_eq!(
        net.r(1).dataplane_state(),
        DataPlaneState::On { term: 2 },
        "enabled once 3 caught up"
    );
}

#[test]
fn no_enable_with_a_learner_or_without_the_dataplane_flag() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.tick(10);
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::Off);
    let mut net = dp_net(|_| {});
    net.elect(1);
    net.add(
        4,
        cfg(4),
        Bootstrap {
            conf: conf(&[1, 2, 3]),
            ..Default::default()
        },
    );
    net.rm(1)
        .propose_conf_change(ConfChange::AddLearner(4))
        .unwrap();
    net.tick(10);
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::Off);
}

#[test]
fn an_accelerated_leader_refuses_a_follower_read_index() {
    // It has no software heartbeats to confirm its leadership with; the follower serves the
    // read through the log instead.
    let mut net = enabled();
    net.read_index_to(3, 1, b"r");
    assert_eq!(net.nodes[&3].read_refusals, vec![b"r".to_vec()]);
    assert!(net.nodes[&3].read_states.is_empty());
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::On { term: 2 });
}

#[test]
fn accelerate_without_an_accelerated_majority_gives_a_software_leader() {
    let mut net = Net::with(&[1, 2, 3], |c| {
        c.dataplane = c.id == 1; // followers cannot accelerate
        c.enable_backoff_ticks = 5;
    });
    net.elect(1);
    net.tick(1);
    let r = net.r(1);
    assert_eq!(r.counters().dataplane_enable_attempts, 1);
    assert_eq!((r.role(), r.term()), (Role::Leader, 2));
    assert_eq!(r.dataplane_state(), DataPlaneState::Off);
    assert_eq!(
        r.term_of(r.last_index()),
        Some(2),
        "an ordinary leader appends its no-op"
    );
    assert_eq!(r.commit_index(), 2);
    // Backoff restarted: no new attempt for 5 ticks.
    net.tick(4);
    assert_eq!(net.r(1).counters().dataplane_enable_attempts, 1);
    net.tick(1);
    assert_eq!(net.r(1).counters().dataplane_enable_attempts, 2);
}

#[test]
fn ring_appends_and_commits_replace_software_replication() {
    let mut net = enabled();
    let mark = net.delivered.len();
    assert_eq!(net.rm(1).propose(b"x".to_vec()), Ok(Proposal::ViaDataPlane));
    net.stabilize();
    assert_eq!(
        net.nodes[&1].dp_props,
        vec![b"x".to_vec()],
        "handed to the host through Ready"
    );
    net.dp_push(1);
    for id in [1, 2, 3] {
        assert_eq!(net.r(id).last_index(), 2);
        assert_eq!(net.r(id).term_of(2), Some(2));
        assert_eq!(net.r(id).commit_index(), 2);
        assert_eq!(net.nodes[&id].applied_data(), vec![b"x".to_vec()]);
        assert_eq!(
            net.nodes[&id].stored.last().unwrap().data[..],
            b"x"[..],
            "persisted via Ready::entries"
        );
    }
    // Idle: the leader pushes empty heartbeats through the data plane; nobody times out.
    for _ in 0..40 {
        net.tick(1);
        net.dp_push(1);
    }
    assert_eq!(
        software_appends_after(&net, mark),
        0,
        "no software Append/Heartbeat while On"
    );
    assert!(net.r(1).counters().dataplane_heartbeats >= 40);
    for id in [1, 2, 3] {
        assert_eq!(net.r(id).dataplane_state(), DataPlaneState::On { term: 2 });
        assert_eq!(net.r(id).term(), 2);
    }
    assert_eq!(
        net.rm(1).read_index(b"r".to_vec()),
        Err(ReadError::DataPlaneEnabled)
    );
    // Ring records are checked.
    let bad = Entry {
        term: 2,
        index: 99,
        kind: EntryKind::Normal,
        data: vec![].into(),
    };
    assert!(net.rm(2).dataplane_append(bad).is_err());
    let bad = Entry {
        term: 1,
        index: net.r(2).last_index() + 1,
        kind: EntryKind::Normal,
        data: vec![].into(),
    };
    assert!(net.rm(2).dataplane_append(bad).is_err());
    net.rm(2).dataplane_commit(1); // never backwards
    assert!(net.r(2).commit_index() > 1);
}

#[test]
fn halted_disables_imports_registers_and_stays_leader() {
    let mut net = enabled();
    net.rm(1).propose(b"a".to_vec()).unwrap();
    net.rm(1).propose(b"b".to_vec()).unwrap();
    net.stabilize();
    net.dp_push(1);
    net.rm(1)
        .dataplane_halted(DisableReason::RetransmitExhausted);
    net.stabilize();
    assert_eq!(
        net.r(1).dataplane_state(),
        DataPlaneState::Disabling {
            reason: DisableReason::RetransmitExhausted
        }
    );
    assert_eq!(
        net.last_dp_cmd(1),
        Some(DataPlaneCommand::Disable(
            DisableReason::RetransmitExhausted
        ))
    );
    assert_eq!(net.rm(1).propose(b"c".to_vec()), Err(ProposeError::Retry));
    net.rm(1).tick(); // time stands still while disabling
    net.dp_finish_disable(1);
    let r = net.r(1);
    assert_eq!(
        (r.role(), r.term(), r.dataplane_state()),
        (Role::Leader, 2, DataPlaneState::Off)
    );
    assert_eq!(r.counters().dataplane_disables, 1);
}

#[test]
fn software_append_in_the_same_term_disables_the_follower_first() {
    let mut net = enabled();
    net.rm(1).propose(b"a".to_vec()).unwrap();
    net.stabilize();
    net.dp_push(1);
    net.rm(1).dataplane_halted(DisableReason::Host);
    net.stabilize();
    net.dp_finish_disable(1);
    // The leader resumed software replication: its append (same term) reached followers that
    // are still On. They disable first and keep the message.
    for id in [2, 3] {
        assert_eq!(
            net.r(id).dataplane_state(),
            DataPlaneState::Disabling {
                reason: DisableReason::NewTerm
            }
        );
        assert!(net.r(id).dataplane_stashed() >= 1);
        assert_eq!(
            net.last_dp_cmd(id),
            Some(DataPlaneCommand::Disable(DisableReason::NewTerm))
        );
    }
    assert_eq!(net.rm(1).propose(b"b".to_vec()), Ok(Proposal::Appended(3)));
    net.stabilize();
    assert_eq!(net.r(2).last_index(), 2, "not appended while disabling");
    net.dp_finish_disable(2);
    net.dp_finish_disable(3);
    for id in [2, 3] {
        assert_eq!(net.r(id).dataplane_state(), DataPlaneState::Off);
        assert_eq!(net.r(id).dataplane_stashed(), 0);
        assert_eq!(
            net.r(id).last_index(),
            3,
            "stashed append replayed after the disable"
        );
        assert_eq!(
            net.nodes[&id].applied_data(),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
    }
    assert_eq!(net.r(1).commit_index(), 3);
    assert_eq!(net.r(1).progress_state(2), Some(ProgressState::Replicate));
}

#[test]
fn reject_received_by_an_enabled_leader_disables_then_is_handled() {
    let mut net = enabled();
    let rej = Message {
        from: 2,
        to: 1,
        term: 2,
        body: MessageBody::AppendResponse {
            reject: true,
            index: 1,
            hint_index: 0,
            hint_term: 0,
            recovering: false,
        },
    };
    net.rm(1).step(rej).unwrap();
    assert_eq!(
        net.r(1).dataplane_state(),
        DataPlaneState::Disabling {
            reason: DisableReason::RejectReceived
        }
    );
    assert_eq!(net.r(1).dataplane_stashed(), 1);
    net.stabilize();
    net.dp_finish_disable(1);
    assert_eq!(net.r(1).role(), Role::Leader);
    assert_eq!(
        net.r(1).counters().append_rejects_received,
        1,
        "the stashed reject was processed"
    );
}

#[test]
fn follower_election_timeout_while_on_disables_then_campaigns() {
    let mut net = enabled();
    net.isolate(1);
    let pre = net.r(2).counters().pre_elections;
    let mut disabled_at = None;
    for t in 0..40 {
        net.tick_only(&[2], 1);
        if matches!(net.r(2).dataplane_state(), DataPlaneState::Disabling { .. }) {
            disabled_at = Some(t);
            break;
        }
    }
    assert!(disabled_at.is_some());
    assert_eq!(
        net.r(2).dataplane_state(),
        DataPlaneState::Disabling {
            reason: DisableReason::ElectionTimeout
        }
    );
    assert_eq!(
        net.r(2).role(),
        Role::Follower,
        "no campaign before the data plane is off"
    );
    assert_eq!(net.r(2).counters().pre_elections, pre);
    net.dp_finish_disable(2);
    assert_eq!(net.r(2).dataplane_state(), DataPlaneState::Off);
    assert_eq!(
        net.r(2).counters().pre_elections,
        pre + 1,
        "campaigned right after the disable"
    );
    // 3 times out too; a new leader emerges among 2 and 3, in software mode.
    for _ in 0..60 {
        net.tick_only(&[2, 3], 1);
        for id in [2, 3] {
            if matches!(
                net.r(id).dataplane_state(),
                DataPlaneState::Disabling { .. }
            ) {
                net.dp_finish_disable(id);
            }
        }
        if net.leader().is_some_and(|l| l != 1) {
            break;
        }
    }
    let l = net.leader().unwrap();
    assert!(l == 2 || l == 3);
    assert!(net.r(l).term() > 2);
    assert_eq!(net.r(l).dataplane_state(), DataPlaneState::Off);
}

/// A follower whose data plane lost an append holds the leader's later ones while it waits
/// for the retransmission (`DataPlaneHost`); each proves the leader alive, as any append from
/// it does in Raft, so the follower does not campaign however long a busy leader takes. What
/// does not come from the leader of this term restarts nothing.
#[test]
fn a_follower_holding_the_leaders_appends_does_not_time_out() {
    let mut net = enabled();
    net.isolate(1);
    // Held appends from the leader, two a tick: ten election timeouts and no disable.
    for _ in 0..200 {
        net.tick_only(&[2], 1);
        net.rm(2).dataplane_leader_heard(1, 2);
        assert_eq!(net.r(2).dataplane_state(), DataPlaneState::On { term: 2 });
    }
    assert_eq!(net.r(2).role(), Role::Follower);
    // From another sender or of another term: the timer runs out as without them.
    let mut disabled = false;
    for _ in 0..40 {
        net.tick_only(&[2], 1);
        net.rm(2).dataplane_leader_heard(3, 2);
        net.rm(2).dataplane_leader_heard(1, 1);
        net.rm(2).dataplane_leader_heard(1, 3);
        if net.r(2).dataplane_state()
            == (DataPlaneState::Disabling {
                reason: DisableReason::ElectionTimeout,
            })
        {
            disabled = true;
            break;
        }
    }
    assert!(
        disabled,
        "appends not from the leader of this term kept the timer quiet"
    );
}

/// A leader whose data plane is on and whose host is stalled sends no appends (its data
/// plane stops ordering once the host falls behind), but its keepalive thread sends
/// keepalives: each restarts a follower's election timer, leaves its data plane on and its
/// commit index alone, and is answered liveness-only.
#[test]
fn a_stalled_accelerated_leaders_keepalive_heartbeats_keep_followers_on() {
    let mut net = enabled();
    let ka = net.r(1).keepalive_messages();
    assert_eq!(ka.len(), 2, "one to each follower: {ka:?}");
    for m in &ka {
        assert!(matches!(&m.body, MessageBody::Keepalive), "{m:?}");
    }
    let commit = net.r(2).commit_index();
    net.isolate(1);
    // Ten election timeouts with a keepalive every tick and nothing else: no disable.
    for _ in 0..200 {
        net.tick_only(&[2], 1);
        let to2 = net
            .r(1)
            .keepalive_messages()
            .into_iter()
            .find(|m| m.to == 2);
        net.rm(2).step(to2.expect("to 2")).expect("a keepalive");
        assert_eq!(net.r(2).dataplane_state(), DataPlaneState::On { term: 2 });
    }
    assert_eq!(
        (net.r(2).role(), net.r(2).commit_index()),
        (Role::Follower, commit)
    );
    let answers = net.node(2).handle_ready();
    assert!(
        answers
            .iter()
            .all(|m| matches!(&m.body, MessageBody::KeepaliveResponse)),
        "{answers:?}"
    );
    // Without them the timer runs out as before.
    let mut disabled = false;
    for _ in 0..40 {
        net.tick_only(&[2], 1);
        if net.r(2).dataplane_state()
            == (DataPlaneState::Disabling {
                reason: DisableReason::ElectionTimeout,
            })
        {
            disabled = true;
            break;
        }
    }
    assert!(disabled);
}

#[test]
fn leader_check_quorum_while_on_disables_then_steps_down() {
    let mut net = enabled();
    net.isolate(1);
    for _ in 0..12 {
        net.tick_only(&[1], 1);
        net.dp_push(1); // appends only reach the leader itself: commit cannot advance
        if matches!(net.r(1).dataplane_state(), DataPlaneState::Disabling { .. }) {
            break;
        }
    }
    assert_eq!(
        net.r(1).dataplane_state(),
        DataPlaneState::Disabling {
            reason: DisableReason::ElectionTimeout
        }
    );
    assert_eq!(net.r(1).role(), Role::Leader);
    net.dp_finish_disable(1);
    assert_eq!(
        net.r(1).role(),
        Role::Follower,
        "stepped down after the disable"
    );
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::Off);
}

/// A leader whose loop was starved replays the ticks it missed before it hands anything out
/// (`waverunner_host::ticks`): the heartbeats those ticks queue were never sent, so a window
/// that closes in the replay with nothing committed is not "stuck". Once they are pushed and
/// commit, it leads on.
#[test]
fn a_starved_leader_replaying_ticks_does_not_step_down_for_pushes_never_sent() {
    let mut net = enabled();
    let window = 10; // election_tick of `enabled()`
    for _ in 0..3 * window {
        net.rm(1).tick();
    }
    assert!(
        matches!(net.r(1).dataplane_state(), DataPlaneState::On { .. }),
        "{:?}",
        net.r(1).dataplane_state()
    );
    assert_eq!(net.r(1).counters().check_quorum_step_downs, 0);
    net.stabilize();
    net.dp_push(1);
    for _ in 0..2 * window {
        net.tick_only(&[1, 2, 3], 1);
        net.dp_push(1);
    }
    assert_eq!(net.r(1).role(), Role::Leader);
    assert!(matches!(
        net.r(1).dataplane_state(),
        DataPlaneState::On { .. }
    ));
    assert_eq!(net.r(1).counters().check_quorum_step_downs, 0);
}

#[test]
fn term_change_while_on_disables_before_the_term_moves() {
    let mut net = enabled();
    // A stale (lower-term) message changes nothing in Raft and leaves the data plane on.
    let stale = Message {
        from: 1,
        to: 2,
        term: 1,
        body: MessageBody::Heartbeat {
            commit: 0,
            context: vec![],
        },
    };
    net.rm(2).step(stale).unwrap();
    assert_eq!(net.r(2).dataplane_state(), DataPlaneState::On { term: 2 });
    // A message of a higher term: disable first, the term moves only after the disable.
    let higher = Message {
        from: 3,
        to: 2,
        term: 7,
        body: MessageBody::Vote {
            last_index: 9,
            last_term: 2,
            kind: CampaignKind::Forced,
        },
    };
    net.rm(2).step(higher).unwrap();
    assert_eq!(
        net.r(2).dataplane_state(),
        DataPlaneState::Disabling {
            reason: DisableReason::NewTerm
        }
    );
    assert_eq!(net.r(2).term(), 2);
    net.node(2).handle_ready();
    net.dp_finish_disable(2);
    assert_eq!(net.r(2).term(), 7);
    assert_eq!(net.r(2).hard_state().vote, 3);
}

#[test]
fn membership_change_and_transfer_while_on_disable_and_ask_to_retry() {
    let mut net = enabled();
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::AddLearner(4)),
        Err(ProposeError::Retry)
    );
    assert_eq!(
        net.r(1).dataplane_state(),
        DataPlaneState::Disabling {
            reason: DisableReason::MembershipChange
        }
    );
    assert_eq!(
        net.rm(1).propose_conf_change(ConfChange::AddLearner(4)),
        Err(ProposeError::Retry)
    );
    net.stabilize();
    net.dp_finish_disable(1);
    for id in [2, 3] {
        net.dp_finish_disable(id);
    }
    assert!(net
        .rm(1)
        .propose_conf_change(ConfChange::AddLearner(4))
        .is_ok());

    let mut net = enabled();
    assert_eq!(net.rm(1).transfer_leader(2), Err(ProposeError::Retry));
    assert_eq!(
        net.r(1).dataplane_state(),
        DataPlaneState::Disabling {
            reason: DisableReason::LeaderTransfer
        }
    );
    net.stabilize();
    net.dp_finish_disable(1);
    for id in [2, 3] {
        net.dp_finish_disable(id);
    }
    net.rm(1).transfer_leader(2).unwrap();
    net.stabilize();
    assert_eq!(net.r(2).role(), Role::Leader);
    assert_eq!(net.r(2).term(), 3);
}

#[test]
fn disabling_stash_is_bounded_and_time_stands_still() {
    let mut net = enabled();
    net.rm(2).dataplane_halted(DisableReason::LogMismatch);
    for _ in 0..300 {
        let hb = Message {
            from: 1,
            to: 2,
            term: 2,
            body: MessageBody::Heartbeat {
                commit: 1,
                context: vec![],
            },
        };
        net.rm(2).step(hb).unwrap();
    }
    assert_eq!(net.r(2).dataplane_stashed(), STASH_BOUND);
    assert_eq!(
        net.r(2).counters().dataplane_stash_dropped,
        300 - STASH_BOUND as u64
    );
    for _ in 0..100 {
        net.rm(2).tick();
    }
    assert_eq!(
        net.r(2).counters().pre_elections,
        0,
        "ticks are ignored while disabling"
    );
    net.node(2).handle_ready();
    net.dp_finish_disable(2);
    assert_eq!(net.r(2).dataplane_stashed(), 0);
    assert_eq!(net.r(2).dataplane_state(), DataPlaneState::Off);
    assert_eq!(net.r(2).role(), Role::Follower);
}

#[test]
fn backoff_delays_the_next_enable_after_a_disable() {
    let mut net = enabled();
    net.rm(1).dataplane_halted(DisableReason::Host);
    net.stabilize();
    net.dp_finish_disable(1);
    for id in [2, 3] {
        net.dp_finish_disable(id);
    }
    assert_eq!(net.r(1).counters().dataplane_enable_attempts, 1);
    net.tick(4);
    assert_eq!(
        net.r(1).counters().dataplane_enable_attempts,
        1,
        "within the backoff"
    );
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::Off);
    net.tick(1);
    assert_eq!(net.r(1).counters().dataplane_enable_attempts, 2);
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::On { term: 3 });
}

/// A proposal larger than a data-plane packet is replicated by software: the leader hands
/// over and asks to retry; once off, the same proposal is appended and committed by software,
/// and a small one afterwards goes through the data plane again once it is back.
#[test]
fn a_proposal_larger_than_a_packet_hands_over_to_software() {
    let mut net = enabled_with(|c| c.dataplane_max_proposal = 100);
    // Small enough: the data plane takes it.
    assert_eq!(net.rm(1).propose(vec![1; 100]), Ok(Proposal::ViaDataPlane));
    assert_eq!(net.rm(1).propose(vec![2; 101]), Err(ProposeError::Retry));
    assert_eq!(
        net.r(1).dataplane_state(),
        DataPlaneState::Disabling {
            reason: DisableReason::LargeProposal
        }
    );
    net.stabilize();
    net.dp_finish_disable(1);
    for id in [2, 3] {
        net.dp_finish_disable(id);
    }
    let Ok(Proposal::Appended(index)) = net.rm(1).propose(vec![2; 101]) else {
        panic!("the large proposal is appended by software once the data plane is off");
    };
    net.stabilize();
    for id in [1, 2, 3] {
        assert!(net.r(id).commit_index() >= index, "node {id}");
    }
}

/// With the data plane on, the leader orders at most `dataplane_max_inflight` entries beyond
/// its commit index, counting the proposals not pushed yet: the next is refused busy (the
/// host retries it), so its own clients' requests do not pile up in the network. A commit
/// makes room again.
#[test]
fn the_data_plane_leader_refuses_proposals_past_its_in_flight_bound() {
    let mut net = enabled_with(|c| c.dataplane_max_inflight = 4);
    // Waiting to be pushed counts.
    for i in 0..4 {
        assert_eq!(net.rm(1).propose(vec![i]), Ok(Proposal::ViaDataPlane));
    }
    assert_eq!(net.rm(1).propose(vec![9]), Err(ProposeError::Busy));
    // Handed to the host (Ready), pushed and committed: room again.
    net.stabilize();
    net.dp_push(1);
    assert_eq!(net.r(1).commit_index(), net.r(1).last_index());
    // Ordered and not committed counts too.
    net.isolate(1);
    for i in 0..4 {
        assert_eq!(net.rm(1).propose(vec![i]), Ok(Proposal::ViaDataPlane));
        net.stabilize();
        net.dp_push(1);
    }
    assert_eq!(net.r(1).last_index(), net.r(1).commit_index() + 4);
    assert_eq!(net.rm(1).propose(vec![9]), Err(ProposeError::Busy));
}

/// An answer stashed while the data plane was being disabled proves its sender alive when it
/// came, not when the disable ends. A hand-off that began in a stalled leader's replay ended
/// after the stall's ticks, and a lease counted from its end outlived the followers' election
/// timers: the simulator found a stale lease read (seed 1361, 3 nodes, fsync, data plane on).
#[test]
fn answers_stashed_while_disabling_renew_no_lease_from_the_disables_end() {
    let mut net = enabled_with(|c| {
        c.read_mode = ReadMode::Lease;
        c.election_tick = 20; // lease = 20 - 5 = 15 ticks
    });
    net.propose(1, b"a");
    net.dp_push(1); // an entry of the term, committed through the data plane
    let last = net.r(1).last_index();
    assert_eq!(
        (net.r(1).commit_index(), net.r(1).term_of(last)),
        (last, Some(2))
    );
    let answer = |from, reject| Message {
        from,
        to: 1,
        term: 2,
        body: MessageBody::AppendResponse {
            reject,
            index: if reject { 1 } else { last },
            hint_index: 0,
            hint_term: 0,
            recovering: false,
        },
    };
    // A reject starts the disable; both followers' acks come right after, stashed.
    net.rm(1).step(answer(2, true)).unwrap();
    net.rm(1).step(answer(2, false)).unwrap();
    net.rm(1).step(answer(3, false)).unwrap();
    assert_eq!(net.r(1).dataplane_stashed(), 3);
    // The disable ends more than a lease later (a stall's ticks replayed meanwhile).
    for _ in 0..16 {
        net.rm(1).tick();
    }
    net.hold = true;
    net.node(1).handle_ready();
    net.dp_finish_disable(1);
    assert_eq!(net.r(1).role(), Role::Leader);
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::Off);
    net.rm(1).read_index(b"r".to_vec()).unwrap();
    let msgs = net.collect();
    assert!(
        net.nodes[&1].read_states.is_empty(),
        "answered from a lease of answers 16 ticks old: {:?}",
        net.nodes[&1].read_states
    );
    assert!(
        msgs.iter()
            .any(|m| matches!(&m.body, MessageBody::Heartbeat { context, .. } if context == b"r")),
        "a ReadIndex round instead: {msgs:?}"
    );
}
