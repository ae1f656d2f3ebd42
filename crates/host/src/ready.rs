//! What a replica does with a ready batch of its Raft core, in the order that makes it safe:
//! the data-plane command first, a leader's appends before its own disk write where Raft
//! allows it (§10.2.1), persistence and one sync, the fsync durability's deferred ack, every
//! other message after the sync, then apply, data-plane proposals and reads. The node and the
//! simulator both run [`handle_ready`]; what differs between them (a disk or a simulated one,
//! sockets or a simulated network, the key-value store or the simulator's) is behind
//! [`ReadyIo`].

use waverunner_dataplane::DataPlane;
use waverunner_raft::{
    Entry, HardState, Message, Raft, ReadState, Ready, Role, Snapshot, SoftState,
};

use crate::dataplane::DataPlaneHost;
use crate::Time;

/// The parts of a replica that [`handle_ready`] works on directly.
pub struct Parts<'a, P: DataPlane> {
    /// The Raft core.
    pub raft: &'a mut Raft,
    /// The data plane's host side, if the replica has a data plane.
    pub dp: Option<&'a mut DataPlaneHost<P>>,
    /// What [`handle_ready`] remembers between batches.
    pub st: &'a mut ReadyState,
}

/// The replica's side of a ready batch: storage, network and state machine. An error is fatal
/// to the replica.
pub trait ReadyIo {
    /// The replica's data plane type.
    type Plane: DataPlane;
    /// The core, the data plane's host and the batch state, borrowed together.
    fn parts(&mut self) -> Parts<'_, Self::Plane>;
    /// The role or the leader changed (before anything else of the batch).
    fn soft_state(&mut self, ss: SoftState) -> Result<(), String>;
    /// Sends `m` to its peer.
    fn send(&mut self, m: Message);
    /// Stores a snapshot the leader sent and starts installing it into the state machine
    /// (committed entries after it wait for it: [`ReadyIo::apply`]).
    fn install_snapshot(&mut self, snap: &Snapshot) -> Result<(), String>;
    /// Stores `entries`; they replace stored entries at the same or higher indexes.
    fn append(&mut self, entries: &[Entry]) -> Result<(), String>;
    /// Stores a term and vote (called only when either changed).
    fn set_hard_state(&mut self, hs: HardState) -> Result<(), String>;
    /// Makes everything stored so far durable (as the durability mode asks).
    fn sync(&mut self) -> Result<(), String>;
    /// Applies committed entries in order, each exactly once, and answers their clients.
    fn apply(&mut self, committed: Vec<Entry>);
    /// The state machine's applied index (after [`ReadyIo::apply`]).
    fn applied(&self) -> u64;
    /// Reads the leader refused (contexts) and reads that may be served once their index is
    /// applied.
    fn reads(&mut self, refusals: Vec<Vec<u8>>, states: Vec<ReadState>);
}

/// What [`handle_ready`] remembers between batches.
#[derive(Clone, Debug, Default)]
pub struct ReadyState {
    /// The commit index at the end of the last batch: it never goes back.
    pub commit_seen: u64,
    /// The term and vote last stored.
    pub persisted_hard: HardState,
    /// The newest hard state the core reported (its commit index is stored only with a new
    /// term or vote, and at shutdown).
    pub latest_hard: HardState,
}

impl ReadyState {
    /// The state of a replica that restarted with `hard` on disk.
    pub fn new(hard: HardState) -> ReadyState {
        ReadyState {
            commit_seen: 0,
            persisted_hard: hard,
            latest_hard: hard,
        }
    }
}

/// Handles one ready batch (the caller then calls `Raft::advance`).
pub fn handle_ready<I: ReadyIo>(mut rd: Ready, io: &mut I, now: Time) -> Result<(), String> {
    if let Some(ss) = rd.soft_state.take() {
        io.soft_state(ss)?;
    }
    let early = {
        let Parts { raft, dp, st } = io.parts();
        if let Some(cmd) = rd.dataplane.take() {
            // Before the messages of this ready: an Enable must be in force when they go out.
            let Some(d) = dp else {
                return Err(format!("data-plane command {cmd:?} without a data plane"));
            };
            d.command(raft, cmd, now)?;
        }
        // A leader may send its appends before its own disk write finishes (Raft §10.2.1):
        // the core counts the leader toward a commit only for entries it persisted. Anything
        // that depends on a new term or vote, and every follower's acknowledgement, goes out
        // only after the sync below.
        raft.role() == Role::Leader
            && rd.snapshot.is_none()
            && rd
                .hard_state
                .is_none_or(|hs| term_vote(&hs) == term_vote(&st.persisted_hard))
    };
    let mut messages = std::mem::take(&mut rd.messages);
    if early {
        for m in messages.drain(..) {
            io.send(m);
        }
    }
    if let Some(snap) = &rd.snapshot {
        io.install_snapshot(snap)?;
    }
    if !rd.entries.is_empty() {
        io.append(&rd.entries)?;
    }
    if let Some(hs) = rd.hard_state {
        // Term and vote must be durable before any message that depends on them. The commit
        // index need not be (a restarted replica learns it again from a leader), so it is
        // written only along with them: one sync per batch, not two.
        if term_vote(&hs) != term_vote(&io.parts().st.persisted_hard) {
            io.set_hard_state(hs)?;
            io.parts().st.persisted_hard = hs;
        }
        io.parts().st.latest_hard = hs;
    }
    io.sync()?;
    if let Some(last) = rd.entries.last() {
        let Parts { raft, dp, .. } = io.parts();
        if let Some(d) = dp {
            d.deferred_ack(raft, last.index);
        }
    }
    for m in messages {
        io.send(m);
    }
    io.apply(std::mem::take(&mut rd.committed_entries));
    // Beliefs the rest of the loop builds on.
    let applied = io.applied();
    let Parts { raft, dp, st } = io.parts();
    let (id, commit) = (raft.id(), raft.commit_index());
    assert!(
        commit >= st.commit_seen,
        "node {id}: commit index went back from {} to {commit}",
        st.commit_seen
    );
    assert!(
        applied <= commit,
        "node {id}: applied index {applied} beyond the commit index {commit}"
    );
    st.commit_seen = commit;
    let proposals = std::mem::take(&mut rd.dataplane_proposals);
    match dp {
        Some(d) => {
            let refs: Vec<&[u8]> = proposals.iter().map(|p| &p[..]).collect();
            d.push_proposals(&refs);
        }
        None if !proposals.is_empty() => {
            return Err("data-plane proposals without a data plane".into());
        }
        None => {}
    }
    io.reads(
        std::mem::take(&mut rd.read_refusals),
        std::mem::take(&mut rd.read_states),
    );
    Ok(())
}

fn term_vote(hs: &HardState) -> (u64, u64) {
    (hs.term, hs.vote)
}
