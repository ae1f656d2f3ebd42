//! The write-ahead log: an ordered set of segments (`segment.rs`) in `wal/`.
//!
//! Invariants, checked at recovery and kept by every operation:
//! - segment `k + 1` starts exactly where segment `k` ends (no gap, no overlap);
//! - every segment but the last is complete on disk: before a new segment is created the
//!   current one is fdatasynced ("sealed"), so a bad record in a non-last segment is damage,
//!   never a torn write;
//! - only the last segment is written to, always at its end.
//!
//! Truncating a conflicting suffix cuts the files physically (no truncate-marker records):
//! later segments are unlinked newest first and the directory fsynced, then the segment holding
//! the first conflicting entry is `ftruncate`d at that entry's offset (offsets are kept in
//! memory) and fdatasynced *before* new records are written. That extra fsync matters: without
//! it a crash could leave the new records on disk with the old, longer file size, and the old
//! records behind them would then look like valid data after garbage, i.e. like damage.
//! Conflicts only follow a change of leader, so the cost is rare.

use crate::error::{io_err, StorageError};
use crate::fsutil;
use crate::record::{self, RecordType};
use crate::segment::{self, Segment};
use crate::StorageStats;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use waverunner_raft::{Entry, Index, Term};

/// Default size at which the active segment is closed and a new one started: 64 MiB.
pub const DEFAULT_ROLL_SIZE: u64 = 64 << 20;

pub(crate) struct Wal {
    dir: PathBuf,
    segments: Vec<Segment>,
    /// Open handle of the last segment.
    active: Option<File>,
    /// Index the next appended entry must have.
    next: Index,
    roll_size: u64,
    /// The active segment has writes not yet fdatasynced.
    dirty: bool,
    /// Records written since the last `sync`.
    unsynced: usize,
    /// Reused encoding buffer.
    buf: Vec<u8>,
}

impl Wal {
    /// Reads every segment in `dir` (created if missing) and returns the WAL with the entries
    /// after the snapshot `snap` (index, term). Cuts a torn tail off the last segment; refuses
    /// damage anywhere else.
    pub fn recover(
        dir: &Path,
        snap: (Index, Term),
        stats: &mut StorageStats,
    ) -> Result<(Wal, Vec<Entry>), StorageError> {
        fsutil::create_dir(dir, stats)?;
        fsutil::remove_tmp_files(dir)?;
        let mut found = Vec::new();
        for ent in fs::read_dir(dir).map_err(io_err(dir, "list"))? {
            let ent = ent.map_err(io_err(dir, "list"))?;
            let name = ent.file_name();
            match segment::parse_name(&name.to_string_lossy()) {
                Some(first) => found.push((first, ent.path())),
                None => {
                    tracing::warn!(path = %ent.path().display(), "ignoring unknown file in the WAL directory")
                }
            }
        }
        found.sort();

        let mut wal = Wal {
            dir: dir.to_path_buf(),
            segments: Vec::with_capacity(found.len()),
            active: None,
            next: snap.0 + 1,
            roll_size: DEFAULT_ROLL_SIZE,
            dirty: false,
            unsynced: 0,
            buf: Vec::new(),
        };
        let mut entries: Vec<Entry> = Vec::new();
        let mut term_at_snap = None;
        let mut prev_term = 0;
        let n = found.len();
        for (i, (first, path)) in found.into_iter().enumerate() {
            if let Some(prev) = wal.segments.last() {
                if first != prev.next_index() {
                    return Err(StorageError::corrupt(
                        &path,
                        0,
                        format!(
                            "segment starts at index {first} but the previous segment {} ends at \
                             index {} (a segment is missing or overlaps)",
                            prev.path.display(),
                            prev.next_index() - 1
                        ),
                    ));
                }
            } else if first > snap.0 + 1 {
                return Err(StorageError::corrupt(
                    &path,
                    0,
                    format!(
                        "the log starts at index {first} but the snapshot covers only up to {}: \
                         entries {}..{} are missing",
                        snap.0,
                        snap.0 + 1,
                        first - 1
                    ),
                ));
            }
            // Reads the whole segment: bounded by the roll size plus one record.
            let data = fs::read(&path).map_err(io_err(&path, "read"))?;
            let p = segment::parse(&data, first, prev_term)
                .map_err(|(off, what)| StorageError::corrupt(&path, off, what))?;
            if let Some(torn) = &p.torn {
                if i + 1 < n {
                    return Err(StorageError::corrupt(
                        &path,
                        torn.offset,
                        format!(
                            "{} in a segment that is not the last (segments are synced before \
                             the next one is created, so this is damage, not a torn write)",
                            torn.why
                        ),
                    ));
                }
                tracing::warn!(
                    path = %path.display(),
                    offset = torn.offset,
                    bytes = data.len() as u64 - torn.offset,
                    "truncating a torn tail left by a crash ({}); the entries in it were never \
                     reported durable",
                    torn.why
                );
                let f = fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_err(&path, "open"))?;
                f.set_len(torn.offset).map_err(io_err(&path, "truncate"))?;
                fsutil::sync_data(&f, &path, stats)?;
                stats.torn_tails_truncated += 1;
            }
            prev_term = p.entries.last().map_or(prev_term, |e| e.term);
            for e in p.entries {
                if e.index == snap.0 {
                    term_at_snap = Some(e.term);
                }
                if e.index > snap.0 {
                    entries.push(e);
                }
            }
            wal.segments.push(Segment {
                first,
                path,
                len: p.valid_len,
                offsets: p.offsets,
            });
        }

        if let Some(first) = wal.segments.first().map(|s| s.first) {
            let last = wal.segments.last().map_or(0, |s| s.next_index()) - 1;
            if first <= snap.0 && term_at_snap != Some(snap.1) {
                // The log overlaps the snapshot but does not contain its last entry: an
                // InstallSnapshot replaced the log and the crash came between writing the
                // snapshot and deleting the old log. Finish the job.
                tracing::warn!(
                    dir = %dir.display(),
                    "the log (indexes {first}..={last}) does not contain the snapshot's last entry \
                     (index {}, term {}): discarding it, as the interrupted snapshot install would have",
                    snap.0,
                    snap.1
                );
                entries.clear();
                wal.discard_all(snap.0 + 1, stats)?;
            } else {
                wal.next = last + 1;
                // Finish an interrupted compaction.
                wal.compact(snap.0, stats)?;
            }
        }
        if let Some(seg) = wal.segments.last() {
            wal.active = Some(seg.open()?);
        }
        debug_assert_eq!(entries.first().map_or(snap.0 + 1, |e| e.index), snap.0 + 1);
        debug_assert_eq!(entries.last().map_or(snap.0, |e| e.index), wal.next - 1);
        Ok((wal, entries))
    }

    /// Sets the size at which segments roll.
    pub fn set_roll_size(&mut self, bytes: u64) {
        assert!(bytes > 0, "roll size must be positive");
        self.roll_size = bytes;
    }

    /// Number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Index the next appended entry must have.
    pub fn next_index(&self) -> Index {
        self.next
    }

    /// Writes `entries` (the first must have index `next_index()`, all consecutive) at the end
    /// of the log. Not durable until [`Wal::sync`].
    pub fn append(
        &mut self,
        entries: &[Entry],
        stats: &mut StorageStats,
    ) -> Result<(), StorageError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        assert_eq!(first.index, self.next, "WAL append must continue the log");
        if self.segments.is_empty() {
            self.start_segment(first.index, stats)?;
        }
        self.buf.clear();
        for e in entries {
            assert_eq!(e.index, self.next, "appended entries must be consecutive");
            let seg = self.segments.last().expect("an active segment");
            // Roll once the segment is full, but never leave a segment without entries.
            if !seg.offsets.is_empty() && seg.len + self.buf.len() as u64 >= self.roll_size {
                self.flush(stats)?;
                self.seal(stats)?;
                self.start_segment(e.index, stats)?;
            }
            let seg = self.segments.last_mut().expect("an active segment");
            seg.offsets.push(seg.len + self.buf.len() as u64);
            let start = record::begin(&mut self.buf);
            let mut w = crate::codec::Writer::from_vec(std::mem::take(&mut self.buf));
            crate::codec::put_entry(&mut w, e);
            self.buf = w.into_inner();
            record::finish(&mut self.buf, start, RecordType::Entry);
            self.next += 1;
            self.unsynced += 1;
            stats.records_written += 1;
        }
        self.flush(stats)
    }

    /// Writes the encoding buffer at the end of the active segment.
    fn flush(&mut self, stats: &mut StorageStats) -> Result<(), StorageError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let seg = self.segments.last_mut().expect("an active segment");
        let file = self.active.as_ref().expect("an open active segment");
        file.write_all_at(&self.buf, seg.len)
            .map_err(io_err(&seg.path, "write"))?;
        seg.len += self.buf.len() as u64;
        stats.bytes_written += self.buf.len() as u64;
        self.buf.clear();
        self.dirty = true;
        Ok(())
    }

    /// Makes the active segment complete on disk before another one is created after it.
    fn seal(&mut self, stats: &mut StorageStats) -> Result<(), StorageError> {
        if self.dirty {
            let seg = self.segments.last().expect("an active segment");
            let file = self.active.as_ref().expect("an open active segment");
            fsutil::sync_data(file, &seg.path, stats)?;
            self.dirty = false;
        }
        Ok(())
    }

    fn start_segment(
        &mut self,
        first: Index,
        stats: &mut StorageStats,
    ) -> Result<(), StorageError> {
        debug_assert!(!self.dirty, "the previous segment must be sealed first");
        let (seg, file) = Segment::create(&self.dir, first, stats)?;
        self.segments.push(seg);
        self.active = Some(file);
        Ok(())
    }

    /// Removes the entries from `index` on (a leader overwrote them). `index` must be in the
    /// WAL: `segments[0].first <= index < next_index()`. Durable when it returns.
    pub fn truncate_from(
        &mut self,
        index: Index,
        stats: &mut StorageStats,
    ) -> Result<(), StorageError> {
        assert!(index < self.next, "truncating beyond the end of the WAL");
        let k = self
            .segments
            .iter()
            .rposition(|s| s.first <= index)
            .expect("truncating below the start of the WAL");
        if k + 1 < self.segments.len() {
            self.active = None;
            // Newest first: a crash part-way leaves a shorter, still contiguous log.
            while self.segments.len() > k + 1 {
                let seg = self.segments.pop().expect("a segment");
                fs::remove_file(&seg.path).map_err(io_err(&seg.path, "remove"))?;
            }
            fsutil::sync_dir(&self.dir, stats)?;
        }
        let seg = &mut self.segments[k];
        let pos = (index - seg.first) as usize;
        assert!(pos < seg.offsets.len(), "entry {index} not in its segment");
        let cut = seg.offsets[pos];
        let file = match self.active.take() {
            Some(f) => f,
            None => seg.open()?,
        };
        file.set_len(cut).map_err(io_err(&seg.path, "truncate"))?;
        // See the module docs: the cut must be durable before new records land after it.
        fsutil::sync_data(&file, &seg.path, stats)?;
        seg.offsets.truncate(pos);
        seg.len = cut;
        self.active = Some(file);
        self.dirty = false;
        self.next = index;
        Ok(())
    }

    /// Deletes the segments whose entries are all at or below `index` (covered by a snapshot).
    /// The segment holding `index + 1` stays, with its entries at or below `index`.
    pub fn compact(&mut self, index: Index, stats: &mut StorageStats) -> Result<(), StorageError> {
        assert!(index < self.next, "compacting beyond the end of the WAL");
        let n = self
            .segments
            .iter()
            .take_while(|s| s.next_index() <= index + 1)
            .count();
        if n == 0 {
            return Ok(());
        }
        if n == self.segments.len() {
            // The active segment goes too (it ends exactly at `index`).
            self.seal(stats)?;
            self.active = None;
        }
        // Oldest first: a crash part-way leaves a log that still starts at or below `index + 1`.
        for seg in self.segments.drain(..n) {
            fs::remove_file(&seg.path).map_err(io_err(&seg.path, "remove"))?;
        }
        fsutil::sync_dir(&self.dir, stats)?;
        Ok(())
    }

    /// Deletes every segment; the next entry appended will be `next`.
    pub fn discard_all(
        &mut self,
        next: Index,
        stats: &mut StorageStats,
    ) -> Result<(), StorageError> {
        self.active = None;
        self.dirty = false;
        self.unsynced = 0; // whatever was unsynced is gone, not made durable
        if !self.segments.is_empty() {
            while let Some(seg) = self.segments.pop() {
                fs::remove_file(&seg.path).map_err(io_err(&seg.path, "remove"))?;
            }
            fsutil::sync_dir(&self.dir, stats)?;
        }
        self.next = next;
        Ok(())
    }

    /// Makes every record written since the last sync durable (one fdatasync if any).
    /// Returns how many records that was.
    pub fn sync(&mut self, stats: &mut StorageStats) -> Result<usize, StorageError> {
        self.seal(stats)?;
        Ok(std::mem::take(&mut self.unsynced))
    }
}
