//! The leader's view of one follower: Probe / Replicate / Snapshot and the inflight window.

use crate::types::Index;
use std::collections::VecDeque;

/// How the leader sends to a follower.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressState {
    /// The leader does not know where the follower's log matches: one Append at a time,
    /// then wait for the answer (or the next heartbeat answer).
    Probe,
    /// The follower's log matches up to `match`: send optimistically, at most
    /// `max_inflight_msgs` unacknowledged messages.
    Replicate,
    /// A snapshot was sent; wait until the follower reports it installed.
    Snapshot,
}

/// Sliding window of unacknowledged Append messages, each remembered by its last index and
/// its payload bytes. Bound: at most `cap` messages and `max_bytes` payload bytes, except that
/// an empty window always takes one message (an entry larger than `max_bytes` still goes, alone).
/// So at most `max(max_bytes, largest entry) + max_bytes_per_msg` unacknowledged bytes per
/// follower: a large value cannot queue gigabytes in front of a follower.
#[derive(Clone, Debug)]
pub struct Inflights {
    cap: usize,
    max_bytes: usize,
    bytes: usize,
    sent: VecDeque<(Index, usize)>,
}

impl Inflights {
    /// An empty window of `cap` messages and `max_bytes` bytes.
    pub fn new(cap: usize, max_bytes: usize) -> Inflights {
        assert!(cap > 0 && max_bytes > 0);
        Inflights {
            cap,
            max_bytes,
            bytes: 0,
            sent: VecDeque::with_capacity(cap.min(1024)),
        }
    }

    /// Whether no more message may be sent.
    pub fn full(&self) -> bool {
        self.sent.len() >= self.cap || self.bytes >= self.max_bytes
    }

    /// Number of messages in flight.
    pub fn len(&self) -> usize {
        self.sent.len()
    }

    /// Payload bytes in flight.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.sent.is_empty()
    }

    /// Records a sent message that ends at `last` and carries `bytes` of entry data.
    pub fn add(&mut self, last: Index, bytes: usize) {
        assert!(!self.full(), "inflight window overflow");
        debug_assert!(self.sent.back().is_none_or(|b| b.0 < last));
        self.sent.push_back((last, bytes));
        self.bytes += bytes;
    }

    /// Frees every message that ends at or before `index` (acknowledged).
    pub fn free_le(&mut self, index: Index) {
        while self.sent.front().is_some_and(|f| f.0 <= index) {
            self.free_first();
        }
    }

    /// Frees the oldest message (a heartbeat answer proves the follower is alive).
    pub fn free_first(&mut self) {
        if let Some((_, b)) = self.sent.pop_front() {
            self.bytes -= b;
        }
        debug_assert!(!self.sent.is_empty() || self.bytes == 0);
    }

    /// Frees everything.
    pub fn reset(&mut self) {
        self.sent.clear();
        self.bytes = 0;
    }
}

/// The leader's view of one member.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Highest index known to match the leader's log.
    pub matched: Index,
    /// Next index to send.
    pub next: Index,
    /// How to send.
    pub state: ProgressState,
    /// Probe: a message was sent and not yet answered.
    pub probe_sent: bool,
    /// Snapshot: index of the snapshot sent.
    pub pending_snapshot: Index,
    /// Snapshot: heartbeat answers received since the last progress (the window is resent
    /// after a few; re-probe after an election timeout).
    pub snapshot_wait: u32,
    /// Snapshot: the offset of the next piece to send.
    pub snap_sent: u64,
    /// Snapshot: how much of it the follower said it holds (the most it said).
    pub snap_acked: u64,
    /// Snapshot: what the follower said last (less than `snap_acked` if it lost its prefix,
    /// or if answers were reordered).
    pub snap_reported: u64,
    /// Snapshot: the leader tick at which the transfer started or last made progress (a
    /// transfer that progressed within an election timeout holds off compaction).
    pub snap_progress_tick: u64,
    /// Heard from since the last check-quorum round.
    pub recent_active: bool,
    /// Leader tick at which it was last heard from (lease reads).
    pub last_active_tick: Option<u64>,
    /// The member reported it restarted without its log and is catching up.
    pub recovering: bool,
    /// Election timeouts in a row this recovering member was caught up yet still recovering.
    pub recovery_stuck: u8,
    /// The member is a learner (does not vote).
    pub is_learner: bool,
    /// The pipelining window.
    pub inflights: Inflights,
}

impl Progress {
    /// A fresh progress that probes from `next`.
    pub fn new(
        next: Index,
        inflight_cap: usize,
        inflight_bytes: usize,
        is_learner: bool,
    ) -> Progress {
        assert!(next > 0);
        Progress {
            matched: 0,
            next,
            state: ProgressState::Probe,
            probe_sent: false,
            pending_snapshot: 0,
            snapshot_wait: 0,
            snap_sent: 0,
            snap_acked: 0,
            snap_reported: 0,
            snap_progress_tick: 0,
            recent_active: false,
            last_active_tick: None,
            recovering: false,
            recovery_stuck: 0,
            is_learner,
            inflights: Inflights::new(inflight_cap, inflight_bytes),
        }
    }

    fn reset_state(&mut self, state: ProgressState) {
        self.state = state;
        self.probe_sent = false;
        self.pending_snapshot = 0;
        self.snapshot_wait = 0;
        self.snap_sent = 0;
        self.snap_acked = 0;
        self.snap_reported = 0;
        self.snap_progress_tick = 0;
        self.inflights.reset();
    }

    /// Back to probing from `match + 1` (or after the snapshot).
    pub fn become_probe(&mut self) {
        let from_snapshot = self.state == ProgressState::Snapshot;
        let snap = self.pending_snapshot;
        self.reset_state(ProgressState::Probe);
        self.next = if from_snapshot {
            self.matched.max(snap) + 1
        } else {
            self.matched + 1
        };
    }

    /// Start optimistic replication from `match + 1`.
    pub fn become_replicate(&mut self) {
        self.reset_state(ProgressState::Replicate);
        self.next = self.matched + 1;
    }

    /// A snapshot at `index` was sent.
    pub fn become_snapshot(&mut self, index: Index, now: u64) {
        self.reset_state(ProgressState::Snapshot);
        self.pending_snapshot = index;
        self.snap_progress_tick = now;
    }

    /// Whether the leader must not send now.
    pub fn is_paused(&self) -> bool {
        match self.state {
            ProgressState::Probe => self.probe_sent,
            ProgressState::Replicate => self.inflights.full(),
            ProgressState::Snapshot => true,
        }
    }

    /// An Append ending at `last` (with `n` entries of `bytes` data in all) was sent.
    pub fn sent(&mut self, last: Index, n: usize, bytes: usize) {
        match self.state {
            ProgressState::Replicate => {
                if n > 0 {
                    debug_assert_eq!(self.next + n as Index - 1, last);
                    self.next = last + 1;
                    self.inflights.add(last, bytes);
                }
            }
            ProgressState::Probe => self.probe_sent = true,
            ProgressState::Snapshot => unreachable!("append sent in snapshot state"),
        }
    }

    /// A successful acknowledgement of `index`. Returns whether `match` advanced.
    pub fn maybe_update(&mut self, index: Index) -> bool {
        let updated = index > self.matched;
        if updated {
            self.matched = index;
        }
        // Any success answers the probe (etcd's ProbeAcked): a probe answered with the match
        // the leader already knew (the empty append after an installed snapshot) left the
        // follower paused until the next heartbeat.
        self.probe_sent = false;
        self.next = self.next.max(index + 1);
        updated
    }

    /// A rejection of the Append whose previous index was `rejected`; `hint` is the highest
    /// index the leader may try next. Returns false if the rejection is stale.
    pub fn maybe_decr_to(&mut self, rejected: Index, hint: Index) -> bool {
        if self.state == ProgressState::Replicate {
            if rejected <= self.matched {
                return false;
            }
            self.next = self.matched + 1;
            return true;
        }
        if self.next == 0 || self.next - 1 != rejected {
            return false;
        }
        self.next = rejected.min(hint + 1).max(self.matched + 1);
        self.probe_sent = false;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflight_window_is_bounded() {
        let mut w = Inflights::new(3, 1 << 20);
        w.add(2, 10);
        w.add(4, 10);
        w.add(6, 10);
        assert!(w.full());
        w.free_le(4);
        assert_eq!(w.len(), 1);
        assert_eq!(w.bytes(), 10);
        w.free_first();
        assert!(w.is_empty());
        assert_eq!(w.bytes(), 0);
    }

    #[test]
    fn inflight_window_is_bounded_in_bytes_but_always_takes_one() {
        let mut w = Inflights::new(100, 1000);
        // An entry larger than the whole budget still goes, alone.
        w.add(1, 64 << 20);
        assert!(w.full());
        w.free_le(1);
        assert!(!w.full());
        w.add(2, 600);
        assert!(!w.full());
        w.add(3, 600);
        assert!(w.full(), "1200 bytes in flight of 1000");
        w.free_le(2);
        assert!(!w.full());
        assert_eq!(w.bytes(), 600);
    }

    #[test]
    fn probe_decrements_to_hint_but_not_below_match() {
        let mut p = Progress::new(11, 4, 1 << 20, false);
        p.matched = 3;
        assert!(!p.maybe_decr_to(5, 2)); // stale: not our last probe
        assert!(p.maybe_decr_to(10, 6));
        assert_eq!(p.next, 7);
        assert!(p.maybe_decr_to(6, 0));
        assert_eq!(p.next, 4);
        p.become_replicate();
        assert!(!p.maybe_decr_to(3, 0)); // rejected <= match: stale
    }
}
