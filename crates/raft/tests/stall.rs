//! Ticks that passed while a replica could not run (`Raft::tick_stalled`): the lease counts
//! them, but no timeout against a peer expires inside a stall.

mod common;
use common::*;
use waverunner_raft::*;

fn stalled(net: &mut Net, id: NodeId, n: usize) {
    for _ in 0..n {
        net.rm(id).tick_stalled();
    }
}

/// The whole machine stalled: the follower's ticks passed, and its leader's heartbeats, sent
/// as the leader resumed too, had not reached it yet. It does not campaign inside the stall;
/// the heartbeat that comes next keeps it a follower.
#[test]
fn a_follower_does_not_time_out_its_leader_inside_a_stall() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let pre = net.r(2).counters().pre_elections;
    stalled(&mut net, 2, 30); // past any randomized timeout (10..20)
    assert!(net.collect().is_empty(), "no campaign inside the stall");
    assert_eq!(net.r(2).role(), Role::Follower);
    assert!(net.r(2).counters().timeouts_held_in_stall > 0);
    net.tick_only(&[1], 5); // the leader's heartbeat
    net.tick_only(&[2], 1); // the first on-time tick: the heartbeat came
    assert_eq!(net.r(2).role(), Role::Follower);
    assert_eq!(net.r(2).counters().pre_elections, pre);
    assert_eq!(net.r(2).leader(), 1);
}

/// Its leader really died: the follower campaigns at the second on-time tick after the stall.
/// The first one comes at any moment after the stall (the phase of the ticks), maybe before
/// its leader, stalled too, has run again: it still holds.
#[test]
fn a_follower_whose_leader_died_campaigns_at_the_second_tick_after_a_stall() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.isolate(1);
    let pre = net.r(2).counters().pre_elections;
    stalled(&mut net, 2, 30);
    assert_eq!(net.r(2).counters().pre_elections, pre);
    net.rm(2).tick();
    assert_eq!(
        net.r(2).counters().pre_elections,
        pre,
        "the first on-time tick holds"
    );
    net.rm(2).tick();
    assert_eq!(
        net.r(2).counters().pre_elections,
        pre + 1,
        "it campaigns at the second"
    );
}

/// A heartbeat stepped inside a stall restarts the follower's timeout and its run of holds:
/// a long stall whose frames show a live leader never times it out, however many ticks are
/// held in all.
#[test]
fn a_heartbeat_inside_a_stall_restarts_the_hold() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let pre = net.r(2).counters().pre_elections;
    for _ in 0..4 {
        stalled(&mut net, 2, 30);
        net.tick_only(&[1], 5); // the leader's heartbeat, stepped between the stall's ticks
    }
    assert!(
        net.r(2).counters().timeouts_held_in_stall > u64::from(net.r(2).max_stall_hold()),
        "more ticks held in all than in a row"
    );
    net.tick_only(&[2], 2);
    assert_eq!(net.r(2).counters().pre_elections, pre);
    assert_eq!(net.r(2).leader(), 1);
}

/// A loop late at every tick (each of its ticks is a stalled one) still times out a dead
/// leader: a timeout is held at most `max_stall_hold` ticks in a row.
#[test]
fn a_follower_late_at_every_tick_still_campaigns() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.isolate(1);
    assert_eq!(net.r(2).max_stall_hold(), 21); // two election timeouts of 10 ticks, and one
    stalled(&mut net, 2, 20 + 21);
    assert!(net.r(2).counters().pre_elections > 0);
}

/// A leader's check-quorum window does not end inside a stall: its followers' answers may be
/// on their way. It ends at the second on-time tick, and a leader cut off steps down within
/// the next window.
#[test]
fn a_leaders_check_quorum_does_not_end_inside_a_stall() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.isolate(1);
    stalled(&mut net, 1, 30); // three windows
    net.stabilize();
    assert_eq!(net.r(1).role(), Role::Leader);
    assert_eq!(net.r(1).counters().check_quorum_step_downs, 0);
    // The held window ends at the second on-time tick (its answers came before the
    // partition); the next one, 10 ticks later, has none.
    net.tick_only(&[1], 2);
    assert_eq!(net.r(1).role(), Role::Leader);
    net.tick_only(&[1], 10);
    assert_eq!(net.r(1).role(), Role::Follower);
    assert_eq!(net.r(1).counters().check_quorum_step_downs, 1);
}

/// The lease follows real time through a stall: a leader stalled past its lease answers no
/// read from it, though it still leads.
#[test]
fn a_stall_ends_a_leaders_lease() {
    let mut net = Net::lease_leader();
    net.isolate(1);
    stalled(&mut net, 1, 16);
    assert_eq!(net.r(1).role(), Role::Leader);
    assert!(
        !net.read_answered(1, b"l"),
        "no lease read after a stall longer than the lease"
    );
}

/// A stalled follower's keepalive thread answers for it (`Raft::keepalive_messages`): the
/// answer keeps the leader's check-quorum from stepping down, but renews no lease, because
/// the stalled follower may be granting a vote in the batch it is busy with.
#[test]
fn a_followers_keepalive_answer_keeps_its_leader_but_renews_no_lease() {
    let mut net = Net::lease_leader();
    let answers: Vec<Message> = [2, 3]
        .iter()
        .flat_map(|&id| net.r(id).keepalive_messages())
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers
        .iter()
        .all(|m| m.to == 1 && matches!(m.body, MessageBody::KeepaliveResponse)));
    net.isolate(1);
    // Three check-quorum windows, the followers' keepalive answers every tick.
    for _ in 0..60 {
        net.tick_only(&[1], 1);
        for m in &answers {
            net.rm(1).step(m.clone()).expect("a keepalive answer");
        }
    }
    assert_eq!(net.r(1).role(), Role::Leader, "check-quorum held");
    assert_eq!(net.r(1).counters().check_quorum_step_downs, 0);
    assert!(
        !net.read_answered(1, b"l"),
        "a lease read from keepalive answers alone"
    );
}

/// One long stall is one event: however many ticks its replay counts (here 60, in gaps
/// between clients' requests, which restart no timer), only its first election timeout of
/// them counts towards the bound on holding. The follower waits for its leader's heartbeat
/// until the second on-time tick, as after a short stall. Counted whole, the bound expired
/// its timeout at resume (the simulator's whole-cluster pause, seed 160).
#[test]
fn a_long_stall_holds_a_timeout_to_its_end() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    let pre = net.r(2).counters().pre_elections;
    for nth in 0..60 {
        net.rm(2).tick_stalled_nth(nth);
    }
    net.rm(2).tick(); // the first on-time tick
    assert!(net.collect().is_empty(), "no campaign inside the stall");
    assert_eq!(net.r(2).counters().pre_elections, pre);
    assert!(net.r(2).counters().timeouts_held_in_stall > u64::from(net.r(2).max_stall_hold()));
    net.tick_only(&[1], 5); // the leader's heartbeat
    net.tick_only(&[2], 1);
    assert_eq!(net.r(2).counters().pre_elections, pre);
    assert_eq!(net.r(2).leader(), 1);
}

/// Stalls back to back, each a replay of its own, still time out a dead leader: every stall
/// counts its first election timeout of ticks towards the bound (of two and one), so by the
/// fourth it has expired.
#[test]
fn stalls_back_to_back_still_time_out_a_dead_leader() {
    let mut net = Net::new(&[1, 2, 3]);
    net.elect(1);
    net.isolate(1);
    for _ in 0..4 {
        for nth in 0..30 {
            net.rm(2).tick_stalled_nth(nth);
        }
    }
    assert!(net.r(2).counters().pre_elections > 0);
}

/// A leader does not start enabling its data plane (a campaign in a new term) from a stall's
/// ticks, nor at the on-time tick after it: that its followers are synchronized and active is
/// known from before the stall, and the ticks replayed after a campaign's start run its
/// election timer down. Started so, the campaign timed out at resume and the leader lost its
/// term (the simulator's whole-cluster pause, seed 305). It enables once it has heard its
/// followers again.
#[test]
fn a_leader_enables_its_data_plane_only_on_time() {
    let mut net = Net::with(&[1, 2, 3], |c| {
        c.dataplane = true;
        c.enable_backoff_ticks = 5;
    });
    net.elect(1);
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::Off);
    for _ in 0..20 {
        net.rm(1).tick_stalled();
    }
    net.rm(1).tick();
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::Off);
    assert_eq!(net.r(1).counters().dataplane_enable_attempts, 0);
    net.stabilize();
    for _ in 0..12 {
        net.tick(1);
        if net.r(1).counters().dataplane_enable_attempts > 0 {
            break;
        }
    }
    net.stabilize();
    assert_eq!(net.r(1).counters().dataplane_enable_attempts, 1);
    assert_eq!(net.r(1).dataplane_state(), DataPlaneState::On { term: 2 });
}
