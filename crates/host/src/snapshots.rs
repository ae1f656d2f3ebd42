//! When a replica snapshots its state machine and how far it compacts its Raft log
//! (`docs/scale.md`): a snapshot is due after `snapshot_entries` entries or `snapshot_bytes`
//! bytes once the entries since the last one hold a [`LOG_SHARE`] of the state's size too, and
//! the log keeps a trailing window: the core is compacted to the snapshot before the newest,
//! so that a follower that fell briefly behind catches up from the log, not from a snapshot.
//! A snapshot transfer that is progressing holds compaction off
//! ([`waverunner_raft::Raft::snapshot_in_transfer`]).

use waverunner_raft::{Bytes, Raft, Snapshot};

/// A snapshot waits until the entries since the last one hold at least 1/`LOG_SHARE` of the
/// state's size: snapshot work stays at most `LOG_SHARE` times what is written, and the log
/// (two such periods, the trailing window included, at about 1.5 bytes of memory per byte of
/// entry) adds at most about a fifth to the state's memory. A quarter let the log hold 70–140
/// bytes per 100-byte key at a million keys, 1.8× Redis's memory per key in all
/// (docs/bench.md, bench scale).
pub const LOG_SHARE: u64 = 16;

/// A replica's compaction policy and its newest snapshot.
#[derive(Debug)]
pub struct Compaction {
    /// A snapshot after this many entries ...
    entries: u64,
    /// ... or this many entry bytes (and [`LOG_SHARE`]).
    bytes: u64,
    /// The newest snapshot written, not yet the log's compaction point.
    next: Option<Snapshot>,
    /// Entry bytes applied since the last snapshot started.
    since: u64,
}

impl Compaction {
    /// Snapshots after `entries` entries or `bytes` bytes (and [`LOG_SHARE`]).
    pub fn new(entries: u64, bytes: u64) -> Compaction {
        Compaction {
            entries,
            bytes,
            next: None,
            since: 0,
        }
    }

    /// An entry of `bytes` bytes was applied.
    pub fn applied(&mut self, bytes: u64) {
        self.since += bytes;
    }

    /// The index of the newest snapshot, or the core's.
    pub fn base(&self, raft: &Raft) -> u64 {
        self.next
            .as_ref()
            .map_or(raft.first_index() - 1, |s| s.meta.index)
    }

    /// Whether a snapshot is due at `applied` for a state of `state_bytes` bytes. O(1): a
    /// snapshot costs O(state), so it waits until the entries since the last one are worth it
    /// (a million keys snapshotted every 10 000 writes kept both cores busy and the load ended
    /// in elections).
    pub fn due(&self, raft: &Raft, applied: u64, state_bytes: u64) -> bool {
        let amortized = self.since >= state_bytes / LOG_SHARE;
        (applied >= self.base(raft) + self.entries || self.since >= self.bytes) && amortized
    }

    /// A snapshot starts: entries are counted from here.
    pub fn started(&mut self) {
        self.since = 0;
    }

    /// A snapshot was written: it is the newest, and the core is compacted to the one before
    /// it (the trailing window), unless a transfer of the core's snapshot is progressing (then
    /// at the next one). Returns the data of the snapshot the core dropped, for the caller to
    /// free (unmapping hundreds of megabytes is slow: the node frees it off its loop).
    pub fn taken(&mut self, raft: &mut Raft, snap: Snapshot) -> Option<Bytes> {
        assert!(
            self.next
                .as_ref()
                .is_none_or(|n| n.meta.index < snap.meta.index),
            "snapshots are taken in index order"
        );
        let prev = self.next.replace(snap)?;
        if prev.meta.index <= raft.snapshot_index() {
            return None;
        }
        let old = raft.snapshot().map(|s| s.data.clone());
        raft.compact(prev.meta.index, prev.data).ok().and(old)
    }

    /// The leader's snapshot at `index` was installed: it supersedes an older one of ours.
    pub fn installed(&mut self, index: u64) {
        if self.next.as_ref().is_some_and(|n| n.meta.index <= index) {
            self.next = None;
        }
        self.since = 0;
    }

    /// The newest snapshot written, if the core is not compacted to it.
    pub fn newest(&self) -> Option<&Snapshot> {
        self.next.as_ref()
    }
}
