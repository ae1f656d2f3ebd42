//! InstallSnapshot in chunks (Raft §7, with the `offset`/`done` of the paper's Figure 13):
//! the leader sends a snapshot as pieces of at most [`Config::snapshot_chunk_bytes`], at most
//! [`Config::max_inflight_bytes`] unacknowledged (always one); the follower keeps the
//! contiguous prefix it received and answers each piece with how much it holds
//! ([`MessageBody::SnapshotProgress`]), and installs the snapshot once it holds all of it.
//!
//! Lost, duplicated and reordered pieces: the follower extends its prefix with the piece that
//! continues it, keeps a bounded number of pieces that arrived ahead of it (reordering), drops
//! duplicates, and always answers with its prefix length; an answer that reports progress
//! slides the leader's window. After a few heartbeat answers without progress (a piece was lost, or
//! every piece and answer of a window), the leader resends the window from the follower's
//! prefix. A new leader, a new term or a newer snapshot starts a transfer
//! over from offset 0: the follower's prefix is tied to (leader, term, snapshot metadata,
//! length).
//!
//! [`Config::snapshot_chunk_bytes`]: crate::Config::snapshot_chunk_bytes
//! [`Config::max_inflight_bytes`]: crate::Config::max_inflight_bytes

use crate::progress::ProgressState;
use crate::raft::Raft;
use crate::types::{MessageBody, NodeId, Snapshot, SnapshotMeta, Term};

/// The largest snapshot a follower accepts (a piece claiming more is malformed).
pub const MAX_SNAPSHOT_BYTES: u64 = 4 << 30;
/// Pieces a follower keeps that arrived ahead of its prefix: at most this many, ...
pub const AHEAD_PIECES: usize = 256;
/// ... holding at most this many bytes.
pub const AHEAD_BYTES: usize = 32 << 20;

/// A snapshot being received: the contiguous prefix of its bytes.
#[derive(Debug)]
pub(crate) struct Incoming {
    from: NodeId,
    term: Term,
    meta: SnapshotMeta,
    total: u64,
    buf: Vec<u8>,
    /// Pieces past the prefix, by offset (bounded by [`AHEAD_PIECES`], [`AHEAD_BYTES`]).
    ahead: std::collections::BTreeMap<u64, bytes::Bytes>,
    ahead_bytes: usize,
}

impl Incoming {
    /// Takes the piece at `offset`; whether it was of use (extended the prefix or was kept).
    fn take(&mut self, offset: u64, data: bytes::Bytes) -> bool {
        let have = self.buf.len() as u64;
        let end = offset + data.len() as u64;
        if end <= have || (offset > have && self.ahead.contains_key(&offset)) {
            return false; // a duplicate
        }
        if offset > have {
            if self.ahead.len() >= AHEAD_PIECES || self.ahead_bytes + data.len() > AHEAD_BYTES {
                return false;
            }
            self.ahead_bytes += data.len();
            self.ahead.insert(offset, data);
            return true;
        }
        self.buf
            .extend_from_slice(&data[(have - offset) as usize..]);
        // Pieces that arrived early now continue the prefix.
        while let Some(e) = self.ahead.first_entry() {
            let (at, have) = (*e.key(), self.buf.len() as u64);
            if at > have {
                break;
            }
            let piece = e.remove();
            self.ahead_bytes -= piece.len();
            let end = at + piece.len() as u64;
            if end > have {
                self.buf.extend_from_slice(&piece[(have - at) as usize..]);
            }
        }
        true
    }
}

impl Raft {
    /// Leader: starts sending its snapshot to `to` (which needs entries the log no longer has).
    pub(crate) fn start_snapshot(&mut self, to: NodeId) -> bool {
        let Some(index) = self.log.snapshot().map(|s| s.meta.index) else {
            return false;
        };
        let Some(pr) = self.prs.get_mut(&to) else {
            return false;
        };
        pr.become_snapshot(index);
        self.counters.snapshots_sent += 1;
        self.send_snapshot_window(to);
        true
    }

    /// Leader: sends the pieces the window allows to `to`, from its next offset.
    pub(crate) fn send_snapshot_window(&mut self, to: NodeId) {
        let Some(snap) = self.log.snapshot().cloned() else {
            return;
        };
        let chunk = self.cfg.snapshot_chunk_bytes as u64;
        let window = self.cfg.max_inflight_bytes as u64;
        let Some(pr) = self.prs.get_mut(&to) else {
            return;
        };
        if pr.state != ProgressState::Snapshot {
            return;
        }
        if pr.pending_snapshot != snap.meta.index {
            // Compacted again meanwhile: the older snapshot is gone, send the newer one.
            pr.become_snapshot(snap.meta.index);
            self.counters.snapshots_sent += 1;
        }
        let total = snap.data.len() as u64;
        let mut pieces = Vec::new();
        loop {
            let (sent, acked) = (pr.snap_sent, pr.snap_acked);
            debug_assert!(acked <= sent && sent <= total);
            let first = sent == acked;
            if (sent >= total && !(total == 0 && first)) || (!first && sent - acked >= window) {
                break;
            }
            let n = chunk.min(total - sent);
            pieces.push(MessageBody::InstallSnapshot {
                meta: snap.meta.clone(),
                total,
                offset: sent,
                data: snap.data.slice(sent as usize..(sent + n) as usize),
            });
            pr.snap_sent = sent + n;
            if n == 0 {
                break;
            }
        }
        self.counters.snapshot_chunks_sent += pieces.len() as u64;
        for body in pieces {
            self.send(to, body);
        }
    }

    /// Leader: `from` holds the first `received` bytes of the snapshot at `index`.
    pub(crate) fn handle_snapshot_progress(&mut self, from: NodeId, index: u64, received: u64) {
        let Some(pr) = self.prs.get_mut(&from) else {
            return;
        };
        pr.recent_active = true;
        if pr.state != ProgressState::Snapshot || pr.pending_snapshot != index {
            return;
        }
        let total = self.log.snapshot().map_or(0, |s| s.data.len() as u64);
        let received = received.min(total);
        pr.snap_reported = received;
        if received > pr.snap_acked {
            pr.snap_acked = received;
            pr.snap_sent = pr.snap_sent.max(received);
            pr.snapshot_wait = 0;
            self.send_snapshot_window(from);
        }
        // No progress (a duplicate, a piece after a gap, a late answer): nothing now. Resending
        // at each such answer multiplied the pieces under reordering (a million for a few
        // kilobytes in the simulator); the stall timer resends once instead.
    }

    /// Leader: a heartbeat answer from `from`, in the Snapshot state, that did not follow any
    /// progress: after a few the window is resent (every piece or answer of it was lost).
    pub(crate) fn snapshot_stalled(&mut self, from: NodeId) {
        let resend_after = (self.cfg.election_tick / 2).max(1);
        let Some(pr) = self.prs.get_mut(&from) else {
            return;
        };
        if pr.snapshot_wait > 0 && pr.snapshot_wait.is_multiple_of(resend_after) {
            // From what the follower last said it holds, if less (it lost its prefix).
            let at = pr.snap_acked.min(pr.snap_reported);
            pr.snap_acked = at;
            pr.snap_sent = at;
            self.send_snapshot_window(from);
        }
    }

    /// Follower: a piece of the leader's snapshot (the leader was accepted for this term).
    pub(crate) fn handle_snapshot_chunk(
        &mut self,
        from: NodeId,
        meta: SnapshotMeta,
        total: u64,
        offset: u64,
        data: bytes::Bytes,
    ) {
        let (index, term) = (meta.index, meta.term);
        if index <= self.log.committed() {
            self.abandon_incoming();
            let c = self.log.committed();
            self.append_response(from, false, c, 0, 0);
            return;
        }
        if self.log.match_term(index, term) {
            // We have the entries: just fast-forward the commit.
            self.abandon_incoming();
            self.log.commit_to(index);
            self.append_response(from, false, index, 0, 0);
            return;
        }
        let ours = self.incoming.as_ref().is_some_and(|i| {
            i.from == from && i.term == self.term && i.meta == meta && i.total == total
        });
        if !ours {
            if offset != 0 {
                // A transfer this replica holds nothing of (it restarted, or missed the start).
                self.counters.snapshot_chunks_dropped += 1;
                self.send(from, MessageBody::SnapshotProgress { index, received: 0 });
                return;
            }
            self.abandon_incoming();
            self.incoming = Some(Incoming {
                from,
                term: self.term,
                meta: meta.clone(),
                total,
                // Reserved whole: a snapshot grown by doubling would be copied again and again
                // on the loop. `total` is bounded by step's checks.
                buf: Vec::with_capacity(total as usize),
                ahead: std::collections::BTreeMap::new(),
                ahead_bytes: 0,
            });
        }
        let inc = self.incoming.as_mut().expect("set above");
        if !inc.take(offset, data) {
            // A duplicate, or too far ahead: the answer below tells the leader where we are.
            self.counters.snapshot_chunks_dropped += 1;
        }
        assert!(
            inc.buf.len() as u64 <= inc.total,
            "snapshot prefix past its end"
        );
        if (inc.buf.len() as u64) < inc.total {
            let received = inc.buf.len() as u64;
            self.send(from, MessageBody::SnapshotProgress { index, received });
            return;
        }
        let inc = self.incoming.take().expect("checked");
        self.install_snapshot(
            from,
            Snapshot {
                meta: inc.meta,
                data: inc.buf.into(),
            },
        );
    }

    /// Follower: drops the snapshot being received, if any (a new leader, term or snapshot).
    pub(crate) fn abandon_incoming(&mut self) {
        if self.incoming.take().is_some() {
            self.counters.snapshot_transfers_abandoned += 1;
        }
    }

    /// Follower: installs a whole snapshot received from `from`.
    fn install_snapshot(&mut self, from: NodeId, snapshot: Snapshot) {
        let index = snapshot.meta.index;
        debug_assert!(index > self.log.committed());
        let conf = snapshot.meta.conf.clone();
        self.log.restore(snapshot);
        self.confs = vec![(index, conf)];
        self.counters.snapshots_installed += 1;
        self.append_response(from, false, index, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incoming(total: u64) -> Incoming {
        Incoming {
            from: 1,
            term: 1,
            meta: SnapshotMeta::default(),
            total,
            buf: Vec::new(),
            ahead: std::collections::BTreeMap::new(),
            ahead_bytes: 0,
        }
    }

    fn piece(b: &[u8]) -> bytes::Bytes {
        bytes::Bytes::copy_from_slice(b)
    }

    #[test]
    fn the_prefix_grows_in_order_whatever_order_pieces_come_in() {
        let mut i = incoming(10);
        assert!(i.take(6, piece(b"ghij")), "ahead of the prefix: kept");
        assert!(!i.take(6, piece(b"ghij")), "kept already");
        assert!(i.take(3, piece(b"def")));
        assert_eq!(i.buf, b"", "still a gap at 0");
        assert!(i.take(0, piece(b"abc")));
        assert_eq!(i.buf, b"abcdefghij", "the kept pieces joined the prefix");
        assert!(i.ahead.is_empty() && i.ahead_bytes == 0);
        assert!(!i.take(3, piece(b"def")), "a duplicate");
    }

    #[test]
    fn overlapping_pieces_add_only_what_is_new() {
        let mut i = incoming(8);
        assert!(i.take(0, piece(b"abcd")));
        assert!(i.take(2, piece(b"cdef")));
        assert_eq!(i.buf, b"abcdef");
        assert!(i.take(7, piece(b"h")));
        assert!(i.take(5, piece(b"fg")));
        assert_eq!(i.buf, b"abcdefgh");
    }

    #[test]
    fn pieces_kept_ahead_are_bounded() {
        let mut i = incoming(u64::MAX);
        for k in 0..AHEAD_PIECES as u64 {
            assert!(i.take(10 + k, piece(b"x")));
        }
        assert!(!i.take(5, piece(b"x")), "too many pieces ahead: dropped");
        let mut i = incoming(u64::MAX);
        let big = bytes::Bytes::from(vec![0u8; AHEAD_BYTES]);
        assert!(i.take(1, big.clone()));
        assert!(
            !i.take(1 + AHEAD_BYTES as u64, piece(b"x")),
            "too many bytes ahead"
        );
    }
}
