//! # waverunner-storage
//!
//! The durable storage of one Waverunner replica: the Raft hard state (term, vote, commit), the
//! log in write-ahead-log segments, and the latest snapshot. The host persists each
//! [`waverunner_raft::Ready`] with [`Storage::save_snapshot`], [`Storage::append`] and
//! [`Storage::set_hard_state`], in that order, then calls [`Storage::sync`] once (group commit)
//! before sending the ready's messages. At start, [`Storage::open`] recovers what is on disk and
//! [`Recovered::into_bootstrap`] turns it into the core's [`waverunner_raft::Bootstrap`].
//!
//! ## Durability modes (DESIGN §4)
//!
//! - [`Durability::Fsync`]: everything is written and [`Storage::sync`] makes it durable with
//!   one `fdatasync` per touched file. No acknowledged write is lost even if every replica
//!   crashes at once.
//! - [`Durability::Memory`] (the paper's model): only term and vote are persisted (fsynced by
//!   `sync` whenever they change). Entries and snapshots are not kept on disk (a snapshot the
//!   replica takes is backed by an unlinked file, not by memory); a restart reports
//!   [`Recovered::log_lost`] and the core rejoins as `Role::Recovering`.
//!
//! ## On-disk format (all integers little-endian)
//!
//! ```text
//! <dir>/hardstate                 1024 bytes: two 512-byte slots, written alternately
//! <dir>/snapshot                  one record, replaced atomically (temp, fsync, rename, dir fsync)
//! <dir>/wal/<first index:020>.seg segment: header record, then one record per entry (~64 MiB)
//! record  = header_crc u32 | len u32 | body_crc u32 | type u8 | 0 u8 x3 | payload[len]
//!           header_crc = CRC-32C(bytes 4..16), body_crc = CRC-32C(payload)
//! types   = 1 segment header (magic "WVRNSEG1", version u32, first index u64)
//!           2 entry (codec::put_entry)   3 snapshot (codec::put_snapshot)
//!           4 hard state (seq u64, mode u8, flags u8, codec::put_hard_state)
//! limits  = entry data <= 513 MiB, snapshot data <= 1 GiB, <= 4096 voters and learners
//! ```
//!
//! A conflicting suffix is removed by cutting the files (no truncate markers; see `wal.rs`).
//! Recovery cuts a torn tail (a bad last record of the last segment with nothing valid after
//! it) and refuses to start on anything else that is bad ([`StorageError::Corrupt`], whose
//! message tells the operator how to restore the replica from its peers).
//!
//! One known false alarm: a crash can leave unsynced pages written out of order, so that a
//! never-written hole is followed by valid (but equally unsynced) records; recovery cannot tell
//! that from damage and refuses to start. The advice in the error restores the replica.
//!
//! Not done: an exclusive lock on the data directory (two processes must not open it at once;
//! `File::try_lock` needs Rust 1.89, the workspace supports 1.80).

#![warn(missing_docs)]

pub mod codec;
pub mod crc;
mod error;
mod fsutil;
mod hardstate;
mod record;
mod segment;
mod snapshot;
mod wal;

pub use error::StorageError;
pub use snapshot::{SnapshotWriter, WRITEBACK_BYTES};
pub use wal::DEFAULT_ROLL_SIZE;

use hardstate::{HardStateFile, Persisted};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use wal::Wal;
use waverunner_raft::{
    Bootstrap, ConfState, Entry, HardState, Index, Snapshot, SnapshotMeta, Term,
};

/// Name of the WAL directory inside the data directory.
const WAL_DIR: &str = "wal";

/// What survives a crash (DESIGN §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Only term and vote are persisted; a restart loses the log and the replica recovers it
    /// from its peers.
    Memory,
    /// Term, vote, commit, entries and snapshots are persisted; `sync` makes them durable.
    Fsync,
}

/// Counters for metrics. All are totals since [`Storage::open`], except `segments`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// `fsync`/`fdatasync` calls, on files and directories.
    pub fsyncs: u64,
    /// Bytes written to files.
    pub bytes_written: u64,
    /// Records written (entries, segment headers, hard-state copies, snapshots).
    pub records_written: u64,
    /// WAL segment files that exist now.
    pub segments: u64,
    /// Torn tails cut off the last segment at open (at most 1 per open).
    pub torn_tails_truncated: u64,
    /// Conflicting suffixes removed by [`Storage::append`].
    pub suffixes_truncated: u64,
    /// Snapshots written by [`Storage::save_snapshot`].
    pub snapshots_saved: u64,
}

/// What [`Storage::open`] found on disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Term, vote and commit. With `log_lost` in memory durability, commit is 0.
    pub hard_state: HardState,
    /// The latest snapshot, if any (never in memory durability).
    pub snapshot: Option<Snapshot>,
    /// The entries after the snapshot (or from index 1), consecutive.
    pub entries: Vec<Entry>,
    /// The replica ran before but its log is gone: always on a restart in memory durability;
    /// in fsync durability after switching from memory durability or after the operator moved
    /// `wal/` aside, and on every open until [`Storage::mark_caught_up`]. The core then starts
    /// as `Role::Recovering` and does not vote until it has caught up.
    pub log_lost: bool,
}

impl Recovered {
    /// The core's starting state, with `initial_conf` the group's initial membership (used when
    /// there is no snapshot; see [`Bootstrap::conf`]).
    pub fn into_bootstrap(self, initial_conf: ConfState) -> Bootstrap {
        let base = self.snapshot.as_ref().map_or(0, |s| s.meta.index);
        let last = self.entries.last().map_or(base, |e| e.index);
        let mut hard_state = self.hard_state;
        // `Raft::new` refuses a commit index beyond the recovered log (unless the log was
        // lost). `sync` makes the log durable before the hard state, so this only happens when
        // a torn tail took entries the disk had claimed durable: start from what is there.
        if hard_state.commit > last {
            tracing::warn!(
                commit = hard_state.commit,
                last,
                "the persisted commit index is beyond the recovered log; clamping it"
            );
            hard_state.commit = last;
        }
        Bootstrap {
            hard_state,
            conf: initial_conf,
            snapshot: self.snapshot,
            entries: self.entries,
            log_lost: self.log_lost,
        }
    }
}

/// Terms of the entries after the snapshot: enough to tell whether a snapshot matches the log,
/// kept in both modes.
#[derive(Debug)]
struct Terms {
    /// Index of `terms[0]` (snapshot index + 1).
    first: Index,
    terms: VecDeque<Term>,
}

impl Terms {
    fn last(&self) -> Index {
        self.first + self.terms.len() as Index - 1
    }

    fn get(&self, i: Index) -> Option<Term> {
        let pos = i.checked_sub(self.first)?;
        self.terms.get(usize::try_from(pos).ok()?).copied()
    }

    fn truncate_from(&mut self, i: Index) {
        assert!(i >= self.first, "truncating below the snapshot");
        self.terms.truncate((i - self.first) as usize);
    }

    /// Drops the terms of entries at or below `i`.
    fn drop_through(&mut self, i: Index) {
        let n = (i + 1)
            .saturating_sub(self.first)
            .min(self.terms.len() as Index);
        self.terms.drain(..n as usize);
        self.first = self.first.max(i + 1);
    }
}

/// Writes snapshot files for a [`Storage`] from another thread (see
/// [`Storage::snapshot_files`]).
#[derive(Clone, Debug)]
pub struct SnapshotFiles {
    dir: PathBuf,
    durability: Durability,
    file: Arc<Mutex<Index>>,
}

impl SnapshotFiles {
    /// Starts a snapshot of `meta`: stream its data into the writer, then
    /// [`SnapshotWriter::finish`] it. In fsync durability the finished file replaces the one
    /// in place unless that one is newer (the owner installed a leader's meanwhile): the file
    /// never goes back. The owner then calls [`Storage::snapshot_written`]; a crash in
    /// between leaves a snapshot newer than the log's start, which recovery handles. In memory
    /// durability the file is only the snapshot's backing store: unlinked once mapped,
    /// freed with its last reference.
    pub fn create(&self, meta: SnapshotMeta) -> Result<SnapshotWriter, StorageError> {
        SnapshotWriter::create(&self.dir, self.durability, self.file.clone(), meta)
    }

    /// Where the Raft core puts a snapshot it receives ([`waverunner_raft::Raft::set_snapshot_sink`]):
    /// streamed into a file as for [`SnapshotFiles::create`], so it is never whole in memory
    /// and, in fsync durability, already in place when the core installs it
    /// ([`Storage::save_snapshot`] then writes nothing).
    pub fn sink(&self) -> waverunner_raft::SinkFactory {
        let files = self.clone();
        std::sync::Arc::new(move |meta, _total| {
            files
                .create(meta.clone())
                .map(|w| Box::new(w) as Box<dyn waverunner_raft::SnapshotSink>)
                .map_err(|e| {
                    tracing::warn!("cannot receive a snapshot: {e}");
                    e.to_string()
                })
        })
    }
}

/// The durable storage of one replica. See the crate docs.
pub struct Storage {
    dir: PathBuf,
    durability: Durability,
    hard: HardStateFile,
    /// Latest hard state given to `set_hard_state`; `sync` persists it.
    hard_state: HardState,
    /// `None` in memory durability.
    wal: Option<Wal>,
    /// Index and term of the latest snapshot, (0, 0) if none.
    snap: (Index, Term),
    /// The index of the snapshot in the file, shared with [`SnapshotFiles`]: every write of the
    /// file holds it, and none replaces a newer snapshot with an older one.
    file: Arc<Mutex<Index>>,
    terms: Terms,
    stats: StorageStats,
    /// A write or fsync failed: refuse further work (see [`StorageError::Failed`]).
    failed: bool,
}

impl Storage {
    /// Opens (creating if needed) the data directory and recovers what is on disk.
    ///
    /// Fails with [`StorageError::Corrupt`] on damage a crash cannot explain, and with
    /// [`StorageError::Io`] when the operating system refuses.
    pub fn open(dir: &Path, durability: Durability) -> Result<(Storage, Recovered), StorageError> {
        let mut stats = StorageStats::default();
        fsutil::create_dir(dir, &mut stats)?;
        fsutil::remove_tmp_files(dir)?;
        let existing = HardStateFile::open(dir)?;
        let wal_dir = dir.join(WAL_DIR);
        let snap_path = dir.join(snapshot::FILE_NAME);

        let (hard, snapshot, wal, entries, log_lost) = match durability {
            Durability::Memory => {
                let (hard, log_lost) = match existing {
                    None => {
                        let p = Persisted {
                            hs: HardState::default(),
                            mode: Durability::Memory,
                            log_lost: false,
                        };
                        (HardStateFile::create(dir, p, &mut stats)?, false)
                    }
                    Some(mut f) => {
                        // A restart: only term and vote survive in this mode.
                        let cur = f.current();
                        let p = Persisted {
                            hs: HardState {
                                commit: 0,
                                ..cur.hs
                            },
                            mode: Durability::Memory,
                            log_lost: false,
                        };
                        if p != cur {
                            f.write(p, &mut stats)?;
                        }
                        (f, true)
                    }
                };
                // A log left by an earlier fsync-mode run cannot be trusted once the replica
                // has run without it (the hard state now says so); do not keep it around.
                let a = fsutil::remove_if_exists(&wal_dir)?;
                let b = fsutil::remove_if_exists(&snap_path)?;
                if a || b {
                    tracing::warn!(dir = %dir.display(), "memory durability: removed the log of an earlier fsync-durability run");
                    fsutil::sync_dir(dir, &mut stats)?;
                }
                (hard, None, None, Vec::new(), log_lost)
            }
            Durability::Fsync => {
                let (hard, log_lost) = match existing {
                    None => {
                        // First boot. We never write a log without a hard state beside it.
                        let wal_used = wal_dir.is_dir()
                            && std::fs::read_dir(&wal_dir)
                                .map_err(error::io_err(&wal_dir, "list"))?
                                .next()
                                .is_some();
                        if wal_used || snap_path.exists() {
                            return Err(StorageError::corrupt(
                                &dir.join(hardstate::FILE_NAME),
                                0,
                                "the hard-state file is missing but a log or snapshot exists",
                            ));
                        }
                        // wal/ first: a hard state then always implies that wal/ was created.
                        fsutil::create_dir(&wal_dir, &mut stats)?;
                        let p = Persisted {
                            hs: HardState::default(),
                            mode: Durability::Fsync,
                            log_lost: false,
                        };
                        (HardStateFile::create(dir, p, &mut stats)?, false)
                    }
                    Some(mut f) => {
                        let cur = f.current();
                        let mut p = Persisted {
                            mode: Durability::Fsync,
                            ..cur
                        };
                        if cur.mode == Durability::Memory {
                            // The last run kept its log in memory: it is gone, and whatever
                            // wal/ or snapshot hold predates that run.
                            tracing::warn!(dir = %dir.display(), "switching from memory to fsync durability: the replica starts without its log");
                            p.log_lost = true;
                            p.hs.commit = 0;
                            fsutil::remove_if_exists(&wal_dir)?;
                            fsutil::remove_if_exists(&snap_path)?;
                            fsutil::sync_dir(dir, &mut stats)?;
                        } else if !wal_dir.is_dir() {
                            // The operator moved the log aside (the advice of a Corrupt error).
                            tracing::warn!(dir = %dir.display(), "wal/ is missing: the replica starts without its log and catches up from its peers");
                            p.log_lost = true;
                        }
                        // Durable before anything is appended to the new log.
                        if p != cur {
                            f.write(p, &mut stats)?;
                        }
                        (f, p.log_lost)
                    }
                };
                let snapshot = snapshot::load(dir)?;
                let snap_id = snapshot
                    .as_ref()
                    .map_or((0, 0), |s| (s.meta.index, s.meta.term));
                let (wal, entries) = Wal::recover(&wal_dir, snap_id, &mut stats)?;
                (hard, snapshot, Some(wal), entries, log_lost)
            }
        };

        let snap = snapshot
            .as_ref()
            .map_or((0, 0), |s| (s.meta.index, s.meta.term));
        let terms = Terms {
            first: snap.0 + 1,
            terms: entries.iter().map(|e| e.term).collect(),
        };
        let hs = hard.current().hs;
        let storage = Storage {
            dir: dir.to_path_buf(),
            durability,
            hard,
            hard_state: hs,
            wal,
            snap,
            file: Arc::new(Mutex::new(snap.0)),
            terms,
            stats,
            failed: false,
        };
        let recovered = Recovered {
            hard_state: hs,
            snapshot,
            entries,
            log_lost,
        };
        Ok((storage, recovered))
    }

    /// Appends entries to the log. If `entries[0].index <= last_index()`, the log is first
    /// truncated from that index (a leader overwrote a conflicting suffix; the truncation is
    /// durable when this returns). Not durable until [`Storage::sync`].
    ///
    /// # Panics
    /// If the entries are not consecutive, start at or below the snapshot index, or would leave
    /// a gap after `last_index()`: the core never asks for that.
    pub fn append(&mut self, entries: &[Entry]) -> Result<(), StorageError> {
        self.check()?;
        let Some(first) = entries.first() else {
            return Ok(());
        };
        assert!(
            first.index > self.snap.0,
            "append at index {} at or below the snapshot index {}",
            first.index,
            self.snap.0
        );
        assert!(
            first.index <= self.last_index() + 1,
            "append at index {} leaves a gap after the last index {}",
            first.index,
            self.last_index()
        );
        for w in entries.windows(2) {
            assert_eq!(
                w[1].index,
                w[0].index + 1,
                "appended entries must be consecutive"
            );
            debug_assert!(w[1].term >= w[0].term, "entry terms must not decrease");
        }
        if let Some(e) = entries
            .iter()
            .find(|e| e.data.len() > codec::MAX_ENTRY_DATA)
        {
            return Err(StorageError::TooLarge {
                what: "log entry",
                len: e.data.len() as u64,
                max: codec::MAX_ENTRY_DATA as u64,
            });
        }
        let r = self.append_inner(entries);
        self.poison_on_error(r)
    }

    fn append_inner(&mut self, entries: &[Entry]) -> Result<(), StorageError> {
        let first = entries[0].index;
        if first <= self.last_index() {
            self.terms.truncate_from(first);
            if let Some(wal) = &mut self.wal {
                wal.truncate_from(first, &mut self.stats)?;
            }
            self.stats.suffixes_truncated += 1;
        }
        if let Some(wal) = &mut self.wal {
            wal.append(entries, &mut self.stats)?;
            debug_assert_eq!(wal.next_index(), entries[entries.len() - 1].index + 1);
        }
        self.terms.terms.extend(entries.iter().map(|e| e.term));
        Ok(())
    }

    /// Records the hard state (term, vote, commit). Not durable until [`Storage::sync`]. In
    /// memory durability only term and vote are persisted.
    ///
    /// # Panics
    /// If the term decreases, or the vote changes within a term: the core never does that.
    pub fn set_hard_state(&mut self, hs: HardState) -> Result<(), StorageError> {
        self.check()?;
        let cur = self.hard_state;
        assert!(
            hs.term >= cur.term,
            "term went back from {} to {}",
            cur.term,
            hs.term
        );
        assert!(
            hs.term > cur.term || cur.vote == 0 || hs.vote == cur.vote,
            "vote changed from {} to {} in term {}",
            cur.vote,
            hs.vote,
            hs.term
        );
        debug_assert!(
            hs.commit <= self.last_index(),
            "commit {} beyond the last index {}: persist snapshot and entries before the hard state",
            hs.commit,
            self.last_index()
        );
        self.hard_state = hs;
        Ok(())
    }

    /// Group commit: makes everything appended or recorded since the last sync durable, with
    /// one fdatasync per touched file (none when nothing changed): the log first, then the
    /// hard state, so a durable commit index never points past the durable log. Returns how
    /// many records it made durable.
    pub fn sync(&mut self) -> Result<usize, StorageError> {
        self.check()?;
        let r = self.sync_inner();
        self.poison_on_error(r)
    }

    fn sync_inner(&mut self) -> Result<usize, StorageError> {
        let mut n = 0;
        if let Some(wal) = &mut self.wal {
            n += wal.sync(&mut self.stats)?;
        }
        let want = self.persisted(self.hard.current().log_lost);
        if want != self.hard.current() {
            self.hard.write(want, &mut self.stats)?;
            n += 1;
        }
        Ok(n)
    }

    /// What the hard-state file should hold.
    fn persisted(&self, log_lost: bool) -> Persisted {
        let hs = match self.durability {
            Durability::Memory => HardState {
                commit: 0,
                ..self.hard_state
            },
            Durability::Fsync => self.hard_state,
        };
        Persisted {
            hs,
            mode: self.durability,
            log_lost,
        }
    }

    /// Writes a snapshot durably and atomically (temp file, fsync, rename, directory fsync),
    /// then drops the log entries it covers: whole segments at or below the snapshot index are
    /// deleted, entries above it stay. If the log does not contain the snapshot's last entry
    /// (`meta.index`, `meta.term`), as after an InstallSnapshot from a leader, the whole log is
    /// discarded and the next entry appended must be `meta.index + 1`. In memory durability
    /// nothing is written; only the indexes are tracked.
    ///
    /// # Panics
    /// If the snapshot is older than the last one saved.
    pub fn save_snapshot(&mut self, snap: &Snapshot) -> Result<(), StorageError> {
        self.check()?;
        let s = snap.meta.index;
        assert!(
            s >= self.snap.0,
            "snapshot at index {s} is older than the saved one at {}",
            self.snap.0
        );
        if self.durability == Durability::Fsync {
            snapshot::check_size(snap)?;
        }
        let r = self.save_snapshot_inner(snap);
        self.poison_on_error(r)
    }

    /// What a thread other than the owner's needs to write a snapshot file
    /// ([`SnapshotFiles::create`]) while the owner goes on appending.
    pub fn snapshot_files(&self) -> SnapshotFiles {
        SnapshotFiles {
            dir: self.dir.clone(),
            durability: self.durability,
            file: self.file.clone(),
        }
    }

    /// Records a snapshot that [`SnapshotFiles::create`] already made durable (in `fsync`
    /// durability; in `memory` nothing is durable) and compacts the log it covers, as
    /// [`Storage::save_snapshot`] does after writing the file itself.
    ///
    /// # Panics
    /// If the snapshot is older than the last one saved.
    pub fn snapshot_written(&mut self, meta: &SnapshotMeta) -> Result<(), StorageError> {
        self.check()?;
        assert!(
            meta.index >= self.snap.0,
            "snapshot at index {} is older than the saved one at {}",
            meta.index,
            self.snap.0
        );
        let r = self.adopt_snapshot(meta.index, meta.term);
        self.poison_on_error(r)
    }

    fn save_snapshot_inner(&mut self, snap: &Snapshot) -> Result<(), StorageError> {
        let (s, t) = (snap.meta.index, snap.meta.term);
        if self.durability == Durability::Fsync {
            // First the snapshot, then the log it replaces: a crash in between leaves both, and
            // recovery finishes the job (`Wal::recover`). Under the file's lock: a background
            // writer (`SnapshotFiles`) shares it.
            let mut file = self.file.lock().expect("snapshot file");
            // Already there when it came through the sink (`SnapshotFiles::sink`): a snapshot
            // at the same index holds the same state.
            if *file < s {
                snapshot::save(&self.dir, snap, &mut self.stats)?;
                *file = s;
            }
        }
        self.adopt_snapshot(s, t)
    }

    fn adopt_snapshot(&mut self, s: Index, t: Term) -> Result<(), StorageError> {
        let contains = if s == self.snap.0 {
            t == self.snap.1
        } else {
            self.terms.get(s) == Some(t)
        };
        if contains {
            self.terms.drop_through(s);
            if let Some(wal) = &mut self.wal {
                wal.compact(s, &mut self.stats)?;
            }
        } else {
            self.terms = Terms {
                first: s + 1,
                terms: VecDeque::new(),
            };
            if let Some(wal) = &mut self.wal {
                wal.discard_all(s + 1, &mut self.stats)?;
            }
        }
        self.snap = (s, t);
        debug_assert_eq!(self.terms.first, s + 1);
        Ok(())
    }

    /// Records that a replica which opened with [`Recovered::log_lost`] has caught up (the core
    /// left `Role::Recovering`): later opens in fsync durability no longer report `log_lost`.
    /// Syncs first. A no-op in memory durability, where every restart loses the log.
    pub fn mark_caught_up(&mut self) -> Result<(), StorageError> {
        self.check()?;
        if self.durability == Durability::Memory || !self.hard.current().log_lost {
            return Ok(());
        }
        let r = (|| {
            if let Some(wal) = &mut self.wal {
                wal.sync(&mut self.stats)?;
            }
            let p = self.persisted(false);
            self.hard.write(p, &mut self.stats)
        })();
        self.poison_on_error(r)
    }

    /// Index of the last entry (the snapshot index if the log is empty).
    pub fn last_index(&self) -> Index {
        self.terms.last()
    }

    /// Index of the first entry after the snapshot (1 without a snapshot).
    pub fn first_index(&self) -> Index {
        self.snap.0 + 1
    }

    /// The durability this storage was opened with.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Counters for metrics.
    pub fn stats(&self) -> StorageStats {
        StorageStats {
            segments: self.wal.as_ref().map_or(0, |w| w.segment_count() as u64),
            ..self.stats
        }
    }

    /// Sets the size (bytes) at which a WAL segment is closed and the next one started
    /// (default [`DEFAULT_ROLL_SIZE`]); small values are for tests. A segment always holds at
    /// least one entry.
    ///
    /// # Panics
    /// If `bytes` is 0.
    pub fn set_segment_roll_size(&mut self, bytes: u64) {
        assert!(bytes > 0, "roll size must be positive");
        if let Some(wal) = &mut self.wal {
            wal.set_roll_size(bytes);
        }
    }

    fn check(&self) -> Result<(), StorageError> {
        if self.failed {
            Err(StorageError::Failed)
        } else {
            Ok(())
        }
    }

    fn poison_on_error<T>(&mut self, r: Result<T, StorageError>) -> Result<T, StorageError> {
        if let Err(e) = &r {
            tracing::error!("storage failed, refusing further writes: {e}");
            self.failed = true;
        }
        r
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("dir", &self.dir)
            .field("durability", &self.durability)
            .field("snapshot", &self.snap)
            .field("last_index", &self.last_index())
            .field("failed", &self.failed)
            .finish()
    }
}
