//! Pending ReadIndex requests (Raft dissertation §6.4).

use crate::quorum::has_quorum;
use crate::types::{Index, NodeId};
use std::collections::{BTreeSet, VecDeque};

/// One read waiting for a heartbeat round to confirm leadership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRequest {
    /// The request's context (identifies it in heartbeats).
    pub context: Vec<u8>,
    /// The leader's commit index when the request arrived.
    pub index: Index,
    /// Who asked: this replica or a follower that forwarded it.
    pub from: NodeId,
    /// Voters that acknowledged a heartbeat carrying this context (or a later one).
    pub acks: BTreeSet<NodeId>,
}

/// The queue of pending reads, oldest first.
#[derive(Clone, Debug, Default)]
pub struct ReadOnly {
    queue: VecDeque<ReadRequest>,
}

impl ReadOnly {
    /// Queues a read at `index`; the leader acknowledges itself.
    pub fn add(&mut self, leader: NodeId, from: NodeId, index: Index, context: Vec<u8>) {
        let mut acks = BTreeSet::new();
        acks.insert(leader);
        self.queue.push_back(ReadRequest {
            context,
            index,
            from,
            acks,
        });
    }

    /// The context that heartbeats carry now: the newest pending read's.
    pub fn last_context(&self) -> Vec<u8> {
        self.queue
            .back()
            .map(|r| r.context.clone())
            .unwrap_or_default()
    }

    /// Records that `from` answered a heartbeat with `context`. If the request of that context
    /// (and so every older one) is confirmed by a quorum of `voters`, removes and returns them.
    pub fn ack(&mut self, from: NodeId, context: &[u8], voters: &[NodeId]) -> Vec<ReadRequest> {
        let Some(pos) = self.queue.iter().position(|r| r.context == context) else {
            return Vec::new();
        };
        // A heartbeat carrying a newer context was sent after every older request was queued.
        for r in self.queue.iter_mut().take(pos + 1) {
            r.acks.insert(from);
        }
        if has_quorum(voters, |v| self.queue[pos].acks.contains(&v)) {
            self.queue.drain(..=pos).collect()
        } else {
            Vec::new()
        }
    }

    /// Number of pending reads.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no read is pending.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drops every pending read (leadership lost).
    pub fn clear(&mut self) {
        self.queue.clear();
    }
}
