//! Helpers of the host's tests.

use waverunner_raft::{Bootstrap, ConfState, Config, Entry, HardState, Raft, Role};

/// A single-voter group's leader (learners `learners`), its election committed.
pub fn single_leader(learners: &[u64]) -> Raft {
    let mut r = Raft::new(
        Config {
            id: 1,
            seed: 1,
            ..Config::default()
        },
        Bootstrap {
            hard_state: HardState::default(),
            conf: ConfState {
                voters: vec![1],
                learners: learners.to_vec(),
            },
            ..Default::default()
        },
    )
    .expect("bootstrap");
    r.campaign();
    commit(&mut r);
    assert_eq!(r.role(), Role::Leader);
    r
}

/// Runs the core's ready batches; the entries it committed.
pub fn commit(r: &mut Raft) -> Vec<Entry> {
    let mut out = Vec::new();
    while r.has_ready() {
        out.extend(r.ready().committed_entries);
        r.advance();
    }
    out
}
