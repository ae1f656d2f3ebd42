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
//! The follower hands the prefix to a [`SnapshotSink`] as it grows (the host's: a file, so
//! that a snapshot is never whole in memory; by default a buffer) and installs what the sink
//! returns once every byte is in.
//!
//! [`Config::snapshot_chunk_bytes`]: crate::Config::snapshot_chunk_bytes
//! [`Config::max_inflight_bytes`]: crate::Config::max_inflight_bytes

use crate::progress::ProgressState;
use crate::raft::Raft;
use crate::types::{MessageBody, NodeId, Snapshot, SnapshotMeta, Term};
use bytes::Bytes;
use std::sync::Arc;

/// The largest snapshot a follower accepts (a piece claiming more is malformed).
pub const MAX_SNAPSHOT_BYTES: u64 = 4 << 30;
/// Pieces a follower keeps that arrived ahead of its prefix: at most this many, ...
pub const AHEAD_PIECES: usize = 256;
/// ... holding at most this many bytes.
pub const AHEAD_BYTES: usize = 32 << 20;

/// Where a follower puts a snapshot it receives: the bytes in order, each once, then
/// [`SnapshotSink::finish`] for the snapshot's data. The host's sink writes a file (the data
/// is then a mapping of it); errors abandon the transfer (counted in
/// `snapshot_transfers_abandoned`, the leader starts it again later).
pub trait SnapshotSink: Send {
    /// The next bytes of the snapshot.
    fn append(&mut self, data: &[u8]) -> Result<(), String>;
    /// Every byte is in: the snapshot's data, exactly the bytes appended.
    fn finish(self: Box<Self>) -> Result<Bytes, String>;
}

/// Makes the sink for a snapshot of `total` bytes described by `meta`
/// ([`Raft::set_snapshot_sink`]).
pub type SinkFactory =
    Arc<dyn Fn(&SnapshotMeta, u64) -> Result<Box<dyn SnapshotSink>, String> + Send + Sync>;

/// The default sink: a buffer reserved whole (a snapshot grown by doubling would be copied
/// again and again on the loop; `total` is bounded by step's checks).
struct MemorySink(Vec<u8>);

impl SnapshotSink for MemorySink {
    fn append(&mut self, data: &[u8]) -> Result<(), String> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Bytes, String> {
        Ok(self.0.into())
    }
}

/// The default [`SinkFactory`]: snapshots received into memory.
pub fn memory_sink() -> SinkFactory {
    Arc::new(|_, total| Ok(Box::new(MemorySink(Vec::with_capacity(total as usize)))))
}

/// A snapshot being received: its contiguous prefix (in the sink) and pieces that came early.
pub(crate) struct Incoming {
    from: NodeId,
    term: Term,
    meta: SnapshotMeta,
    total: u64,
    /// Length of the prefix handed to `sink`.
    have: u64,
    sink: Box<dyn SnapshotSink>,
    /// Pieces past the prefix, by offset (bounded by [`AHEAD_PIECES`], [`AHEAD_BYTES`]).
    ahead: std::collections::BTreeMap<u64, Bytes>,
    ahead_bytes: usize,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("from", &self.from)
            .field("term", &self.term)
            .field("meta", &self.meta)
            .field("total", &self.total)
            .field("have", &self.have)
            .field("ahead", &self.ahead.len())
            .finish()
    }
}

impl Incoming {
    /// Takes the piece at `offset`; whether it was of use (extended the prefix or was kept).
    /// `Err`: the sink failed.
    fn take(&mut self, offset: u64, data: Bytes) -> Result<bool, String> {
        let have = self.have;
        let end = offset + data.len() as u64;
        if end <= have || (offset > have && self.ahead.contains_key(&offset)) {
            return Ok(false); // a duplicate
        }
        if offset > have {
            if self.ahead.len() >= AHEAD_PIECES || self.ahead_bytes + data.len() > AHEAD_BYTES {
                return Ok(false);
            }
            self.ahead_bytes += data.len();
            self.ahead.insert(offset, data);
            return Ok(true);
        }
        self.extend(&data[(have - offset) as usize..])?;
        // Pieces that arrived early now continue the prefix.
        while let Some(e) = self.ahead.first_entry() {
            let (at, have) = (*e.key(), self.have);
            if at > have {
                break;
            }
            let piece = e.remove();
            self.ahead_bytes -= piece.len();
            let end = at + piece.len() as u64;
            if end > have {
                self.extend(&piece[(have - at) as usize..])?;
            }
        }
        Ok(true)
    }

    fn extend(&mut self, data: &[u8]) -> Result<(), String> {
        assert!(
            self.have + data.len() as u64 <= self.total,
            "snapshot prefix past its end"
        );
        self.sink.append(data)?;
        self.have += data.len() as u64;
        Ok(())
    }
}

impl Raft {
    /// Leader: a follower receiving the current snapshot whose transfer started or made
    /// progress within three election timeouts, if any. Compacting then would replace the
    /// snapshot under the transfer and start it over: a follower slower to receive a snapshot
    /// than the leader was to take the next one never caught up (simulator seed 1532, 3
    /// nodes, memory, data plane off). A stalled transfer (a dead follower) holds nothing.
    pub fn snapshot_in_transfer(&self) -> Option<NodeId> {
        if self.role != crate::types::Role::Leader {
            return None;
        }
        let current = self.log.snapshot_index();
        // Longer than the resend timer (a lost piece costs half an election timeout of
        // heartbeat answers), short enough that a dead follower holds the log briefly.
        let window = 3 * u64::from(self.cfg.election_tick);
        self.prs
            .iter()
            .find(|(_, pr)| {
                pr.state == ProgressState::Snapshot
                    && pr.pending_snapshot == current
                    && self.now.saturating_sub(pr.snap_progress_tick) <= window
            })
            .map(|(&id, _)| id)
    }

    /// Leader: starts sending its snapshot to `to` (which needs entries the log no longer has).
    pub(crate) fn start_snapshot(&mut self, to: NodeId) -> bool {
        let Some(index) = self.log.snapshot().map(|s| s.meta.index) else {
            return false;
        };
        let Some(pr) = self.prs.get_mut(&to) else {
            return false;
        };
        pr.become_snapshot(index, self.now);
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
            pr.become_snapshot(snap.meta.index, self.now);
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
            pr.snap_progress_tick = self.now;
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
            let sink = match (self.sink)(&meta, total) {
                Ok(s) => s,
                Err(_) => {
                    // The host could not start one (its sink said why): nothing held.
                    self.counters.snapshot_transfers_abandoned += 1;
                    self.send(from, MessageBody::SnapshotProgress { index, received: 0 });
                    return;
                }
            };
            self.incoming = Some(Incoming {
                from,
                term: self.term,
                meta: meta.clone(),
                total,
                have: 0,
                sink,
                ahead: std::collections::BTreeMap::new(),
                ahead_bytes: 0,
            });
        }
        let inc = self.incoming.as_mut().expect("set above");
        match inc.take(offset, data) {
            Ok(true) => {}
            // A duplicate, or too far ahead: the answer below tells the leader where we are.
            Ok(false) => self.counters.snapshot_chunks_dropped += 1,
            Err(_) => {
                self.abandon_incoming();
                self.send(from, MessageBody::SnapshotProgress { index, received: 0 });
                return;
            }
        }
        if inc.have < inc.total {
            let received = inc.have;
            self.send(from, MessageBody::SnapshotProgress { index, received });
            return;
        }
        let inc = self.incoming.take().expect("checked");
        let data = match inc.sink.finish() {
            Ok(d) => d,
            Err(_) => {
                self.counters.snapshot_transfers_abandoned += 1;
                self.send(from, MessageBody::SnapshotProgress { index, received: 0 });
                return;
            }
        };
        assert_eq!(
            data.len() as u64,
            inc.total,
            "the sink returned what it was given"
        );
        self.install_snapshot(
            from,
            Snapshot {
                meta: inc.meta,
                data,
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
            have: 0,
            sink: Box::new(MemorySink(Vec::new())),
            ahead: std::collections::BTreeMap::new(),
            ahead_bytes: 0,
        }
    }

    /// The prefix held so far (a copy of what went into the sink).
    fn prefix(i: Incoming) -> Vec<u8> {
        i.sink.finish().unwrap().to_vec()
    }

    fn piece(b: &[u8]) -> bytes::Bytes {
        bytes::Bytes::copy_from_slice(b)
    }

    #[test]
    fn the_prefix_grows_in_order_whatever_order_pieces_come_in() {
        let mut i = incoming(10);
        assert!(
            i.take(6, piece(b"ghij")).unwrap(),
            "ahead of the prefix: kept"
        );
        assert!(!i.take(6, piece(b"ghij")).unwrap(), "kept already");
        assert!(i.take(3, piece(b"def")).unwrap());
        assert_eq!(i.have, 0, "still a gap at 0");
        assert!(i.take(0, piece(b"abc")).unwrap());
        assert!(i.ahead.is_empty() && i.ahead_bytes == 0);
        assert!(!i.take(3, piece(b"def")).unwrap(), "a duplicate");
        assert_eq!(
            prefix(i),
            b"abcdefghij",
            "the kept pieces joined the prefix"
        );
    }

    #[test]
    fn overlapping_pieces_add_only_what_is_new() {
        let mut i = incoming(8);
        assert!(i.take(0, piece(b"abcd")).unwrap());
        assert!(i.take(2, piece(b"cdef")).unwrap());
        assert_eq!(i.have, 6);
        assert!(i.take(7, piece(b"h")).unwrap());
        assert!(i.take(5, piece(b"fg")).unwrap());
        assert_eq!(prefix(i), b"abcdefgh");
    }

    #[test]
    fn pieces_kept_ahead_are_bounded() {
        let mut i = incoming(u64::MAX);
        for k in 0..AHEAD_PIECES as u64 {
            assert!(i.take(10 + k, piece(b"x")).unwrap());
        }
        assert!(
            !i.take(5, piece(b"x")).unwrap(),
            "too many pieces ahead: dropped"
        );
        let mut i = incoming(u64::MAX);
        let big = bytes::Bytes::from(vec![0u8; AHEAD_BYTES]);
        assert!(i.take(1, big.clone()).unwrap());
        assert!(
            !i.take(1 + AHEAD_BYTES as u64, piece(b"x")).unwrap(),
            "too many bytes ahead"
        );
    }

    /// A sink that fails after `n` bytes (a full disk).
    struct Failing(usize);
    impl SnapshotSink for Failing {
        fn append(&mut self, data: &[u8]) -> Result<(), String> {
            self.0 = self.0.checked_sub(data.len()).ok_or("disk full")?;
            Ok(())
        }
        fn finish(self: Box<Self>) -> Result<Bytes, String> {
            Err("unused".into())
        }
    }

    #[test]
    fn a_failing_sink_is_an_error_not_a_prefix() {
        let mut i = incoming(10);
        i.sink = Box::new(Failing(4));
        assert!(i.take(0, piece(b"abc")).unwrap());
        assert!(i.take(3, piece(b"def")).is_err());
        assert_eq!(i.have, 3, "only what the sink took counts");
    }
}
