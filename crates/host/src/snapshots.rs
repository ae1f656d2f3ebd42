//! When a replica snapshots its state machine and how far it compacts its Raft log
//! (`docs/scale.md`): a snapshot is due after `snapshot_entries` entries or `snapshot_bytes`
//! bytes once the entries since the last one hold a [`LOG_SHARE`] of the state's size too, and
//! the log keeps a trailing window: the core is compacted to the snapshot before the newest,
//! so that a follower that fell briefly behind catches up from the log, not from a snapshot.
//! A snapshot transfer that is progressing holds compaction off
//! ([`waverunner_raft::Raft::snapshot_in_transfer`]), and so, for up to
//! [`DATA_PLANE_HOLD_PERIODS`] periods, does a data-plane follower behind the window.

use waverunner_raft::{Bytes, Raft, Role, Snapshot};

/// A snapshot waits until the entries since the last one hold at least 1/`LOG_SHARE` of the
/// state's size: snapshot work stays at most `LOG_SHARE` times what is written, and the log
/// (two such periods, the trailing window included, at about 1.5 bytes of memory per byte of
/// entry) adds at most about a fifth to the state's memory. A quarter let the log hold 70–140
/// bytes per 100-byte key at a million keys, 1.8× Redis's memory per key in all
/// (docs/bench.md, bench scale).
pub const LOG_SHARE: u64 = 16;

/// Periods of log a leader keeps at most for a data-plane follower that is behind the
/// trailing window (see [`Compaction::taken`]): further behind, it needs a snapshot anyway.
pub const DATA_PLANE_HOLD_PERIODS: u64 = 4;

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

    /// Compacts the core to the newest snapshot when the trailing window serves nobody: at a
    /// leader once every other member holds the newest snapshot's index, at a follower
    /// always (the window is for the followers of a leader). At rest after a fast load the
    /// window of a million keys held 632 batch entries, 44 MB, in a leader's log for good.
    /// Returns the data of the snapshot the core dropped, for the caller to free. O(members).
    pub fn settle(&mut self, raft: &mut Raft) -> Option<Bytes> {
        let index = self.next.as_ref()?.meta.index;
        if index <= raft.snapshot_index() {
            self.next = None;
            return None;
        }
        if raft.role() == Role::Leader {
            let me = raft.id();
            let cs = raft.conf_state();
            let held = cs
                .voters
                .iter()
                .chain(&cs.learners)
                .filter(|&&id| id != me)
                .all(|&id| {
                    raft.progress(id)
                        .is_some_and(|(matched, _)| matched >= index)
                });
            if !held {
                return None;
            }
        }
        let snap = self.next.take().expect("checked");
        let old = raft.snapshot().map(|s| s.data.clone());
        match raft.compact(snap.meta.index, snap.data.clone()) {
            Ok(()) => old,
            Err(_) => {
                self.next = Some(snap); // a transfer holds compaction off: later
                None
            }
        }
    }

    /// A snapshot starts: entries are counted from here.
    pub fn started(&mut self) {
        self.since = 0;
    }

    /// A snapshot was written: it is the newest, and the core is compacted to the one before
    /// it (the trailing window) — or to it, if the window would span two periods or more —
    /// unless a transfer of the core's snapshot is progressing (then at the next one).
    /// `dp_needed`: a leader whose data plane is on, the lowest match index of its followers
    /// there (`DataPlaneHost::lowest_match`); while compacting would drop entries such a
    /// follower still needs, the log is kept, up to [`DATA_PLANE_HOLD_PERIODS`] periods: the
    /// data plane retransmits to a follower from the log, and one behind the log is handed
    /// off to software (`SnapshotNeeded`). Returns the data of the snapshot the core dropped,
    /// for the caller to free (unmapping hundreds of megabytes is slow: the node frees it off
    /// its loop).
    pub fn taken(
        &mut self,
        raft: &mut Raft,
        snap: Snapshot,
        dp_needed: Option<u64>,
    ) -> Option<Bytes> {
        assert!(
            self.next
                .as_ref()
                .is_none_or(|n| n.meta.index < snap.meta.index),
            "snapshots are taken in index order"
        );
        let prev = self
            .next
            .replace(snap)
            .filter(|p| p.meta.index > raft.snapshot_index());
        let newest = self.next.as_ref().expect("just set").meta.index;
        let floor = prev
            .as_ref()
            .map_or(raft.snapshot_index(), |p| p.meta.index);
        let to_newest = newest >= floor + 2 * self.entries;
        let to = if to_newest {
            // The window from the one before would hold two periods or more (the first
            // snapshot after replaying a long log, or after applying a long run of entries
            // committed at once): to the newest, so that the log never holds much more than
            // two periods (a new member replayed 1 300 entries from such a window).
            self.next.take().expect("just set")
        } else {
            prev?
        };
        let behind = dp_needed.is_some_and(|m| m < to.meta.index);
        if behind && newest < raft.snapshot_index() + DATA_PLANE_HOLD_PERIODS * self.entries {
            if to_newest {
                self.next = Some(to);
            }
            return None;
        }
        let old = raft.snapshot().map(|s| s.data.clone());
        raft.compact(to.meta.index, to.data).ok().and(old)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{commit, single_leader};

    /// A single-replica leader that applied `n` entries.
    fn leader_with(n: u64) -> Raft {
        let mut r = single_leader(&[]);
        for _ in 0..n {
            r.propose(b"x".to_vec()).unwrap();
        }
        commit(&mut r);
        r
    }

    fn snap(r: &Raft, index: u64) -> Snapshot {
        Snapshot {
            meta: r.snapshot_meta(index).expect("applied"),
            data: vec![index as u8].into(),
        }
    }

    #[test]
    fn the_log_keeps_the_entries_since_the_snapshot_before_the_newest() {
        let mut r = leader_with(100);
        let mut c = Compaction::new(30, u64::MAX);
        c.applied(1_000);
        assert!(c.due(&r, 30, 0));
        c.started();
        let s = snap(&r, 30);
        c.taken(&mut r, s, None);
        assert_eq!(r.first_index(), 1, "one period: nothing compacted yet");
        assert_eq!(c.base(&r), 30);
        assert!(!c.due(&r, 59, 0), "not before a period after the newest");
        c.applied(1_000);
        assert!(c.due(&r, 60, 0));
        c.started();
        let s = snap(&r, 60);
        c.taken(&mut r, s, None);
        assert_eq!(
            r.first_index(),
            31,
            "compacted to the one before the newest"
        );
        assert_eq!(c.newest().map(|s| s.meta.index), Some(60));
    }

    /// The window stays while a member has not reached the newest snapshot (a learner that
    /// never answered), and goes once none needs it (a leader alone).
    #[test]
    fn the_window_goes_once_every_member_holds_the_newest_snapshot() {
        let mut lagging = single_leader(&[2]);
        for _ in 0..100 {
            lagging.propose(b"x".to_vec()).unwrap();
        }
        commit(&mut lagging); // the learner does not count towards commit, and never answers
        let mut alone = leader_with(100);
        let r = &mut alone;
        let mut c = Compaction::new(30, u64::MAX);
        c.started();
        let s = snap(r, 30);
        c.taken(r, s, None);
        assert_eq!(r.first_index(), 1, "the window: nothing compacted at first");
        assert!(c.settle(r).is_none(), "no snapshot dropped: there was none");
        assert_eq!(
            r.first_index(),
            31,
            "no other member: compacted to the newest"
        );
        assert!(c.settle(r).is_none());
        assert_eq!(r.first_index(), 31);
        assert!(lagging.applied_index() >= 30);
        let mut c = Compaction::new(30, u64::MAX);
        let s = snap(&lagging, 30);
        c.taken(&mut lagging, s, None);
        assert!(c.settle(&mut lagging).is_none());
        assert_eq!(
            lagging.first_index(),
            1,
            "a lagging learner keeps the window"
        );
    }

    #[test]
    fn without_an_older_snapshot_a_long_log_is_compacted_to_the_new_one() {
        let mut r = leader_with(100);
        let mut c = Compaction::new(30, u64::MAX);
        let s = snap(&r, 90);
        c.taken(&mut r, s, None);
        assert_eq!(r.first_index(), 91, "the log held three periods before it");
        assert!(c.newest().is_none(), "the core holds the newest");
    }

    #[test]
    fn a_window_of_more_than_two_periods_is_not_kept() {
        let mut r = leader_with(200);
        let mut c = Compaction::new(30, u64::MAX);
        let s = snap(&r, 30);
        c.taken(&mut r, s, None);
        let s = snap(&r, 150);
        c.taken(&mut r, s, None);
        assert_eq!(
            r.first_index(),
            151,
            "120 entries since the one before: to the newest"
        );
    }

    /// A data-plane follower behind the trailing window keeps the log for it, for at most
    /// `DATA_PLANE_HOLD_PERIODS` periods; one that caught up lets it go at the next snapshot.
    #[test]
    fn a_lagging_data_plane_follower_keeps_the_log_for_a_while() {
        let mut r = leader_with(300);
        let mut c = Compaction::new(30, u64::MAX);
        // A snapshot at `at`, the data-plane follower's match index `lag`: the first index kept.
        let mut take = |at: u64, lag: u64| {
            let s = snap(&r, at);
            c.taken(&mut r, s, Some(lag));
            r.first_index()
        };
        take(30, 10);
        assert_eq!(take(60, 10), 1, "the follower at 10 needs 11..");
        assert_eq!(take(90, 10), 1);
        assert_eq!(
            take(120, 10),
            91,
            "four periods kept: compacted anyway, to the one before the newest"
        );
        assert_eq!(take(150, 140), 121, "caught up: as without a data plane");
        assert_eq!(take(180, 175), 151);
    }

    #[test]
    fn a_snapshot_waits_until_the_entries_are_worth_a_share_of_the_state() {
        let r = leader_with(100);
        let mut c = Compaction::new(10, u64::MAX);
        c.applied(99);
        assert!(
            !c.due(&r, 50, 1_600),
            "99 bytes of entries against a 1600-byte state"
        );
        c.applied(1);
        assert!(c.due(&r, 50, 1_600));
    }

    #[test]
    fn an_installed_snapshot_supersedes_an_older_one_of_ours() {
        let mut r = leader_with(100);
        let mut c = Compaction::new(30, u64::MAX);
        let s = snap(&r, 40);
        c.taken(&mut r, s, None);
        c.installed(50);
        assert!(c.newest().is_none());
    }
}
