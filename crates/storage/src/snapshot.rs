//! The snapshot file: one framed record (type `Snapshot`) whose payload is
//! `codec::put_snapshot`, replaced atomically (temp, fsync, rename, directory fsync). Only the
//! latest snapshot is kept.
//!
//! A snapshot taken by the replica is streamed into a file of its own ([`SnapshotWriter`]) and
//! then read through a read-only mapping of that file, never held as a buffer: the Raft core
//! slices its pieces from the mapping, and memory holds only the pages being sent. Mapping is
//! sound because no snapshot file is ever modified after it is written: each is written under
//! a fresh temporary name, then only renamed into place or unlinked (the mapping keeps an
//! unlinked file's pages).

use crate::codec::{self, Reader, Writer};
use crate::crc::{crc32c, crc32c_combine, crc32c_update};
use crate::error::{io_err, StorageError};
use crate::fsutil;
use crate::record::{self, RecordType};
use crate::{Durability, StorageStats};
use bytes::Bytes;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use waverunner_raft::{Index, Snapshot, SnapshotMeta};

/// Name of the file in the data directory.
pub(crate) const FILE_NAME: &str = "snapshot";

/// Largest payload of the snapshot record: the data plus generous room for the metadata.
pub(crate) const MAX_PAYLOAD: usize =
    codec::MAX_SNAPSHOT_DATA + 8 + 8 + 8 + 16 * codec::MAX_MEMBERS + 4;
// A record's length, and the data's, are `u32`: the `as u32` in `finish` never truncates.
const _: () = assert!(MAX_PAYLOAD <= u32::MAX as usize);

/// Reads the snapshot in `dir`, if any, through a mapping of the file (its data is a slice of
/// the mapping). Any damage is corruption: the file is only ever replaced whole, so a crash
/// cannot tear it.
pub(crate) fn load(dir: &Path) -> Result<Option<Snapshot>, StorageError> {
    let path = dir.join(FILE_NAME);
    if !path.exists() {
        return Ok(None);
    }
    let file = File::open(&path).map_err(io_err(&path, "open"))?;
    let len = file.metadata().map_err(io_err(&path, "stat"))?.len();
    // Checked before mapping the file.
    if len > (record::HEADER_LEN + MAX_PAYLOAD) as u64 {
        return Err(StorageError::corrupt(
            &path,
            0,
            format!("snapshot file of {len} bytes exceeds the maximum snapshot size"),
        ));
    }
    let data = map(&file, &path)?;
    let f = record::parse(&data, 0, MAX_PAYLOAD).map_err(|w| StorageError::corrupt(&path, 0, w))?;
    if f.ty != RecordType::Snapshot as u8 {
        return Err(StorageError::corrupt(
            &path,
            0,
            format!("record type {} is not a snapshot", f.ty),
        ));
    }
    if f.end != data.len() {
        return Err(StorageError::corrupt(
            &path,
            f.end as u64,
            format!("{} bytes after the snapshot record", data.len() - f.end),
        ));
    }
    let offset = record::HEADER_LEN as u64;
    let mut r = Reader::new(f.payload);
    let parsed = codec::get_snapshot_meta(&mut r).and_then(|meta| {
        let d = r.get_bytes(codec::MAX_SNAPSHOT_DATA)?;
        r.finish()?;
        Ok((meta, d.as_ptr() as usize - data.as_ptr() as usize, d.len()))
    });
    let (meta, at, n) = parsed
        .map_err(|e| StorageError::corrupt(&path, offset, format!("snapshot payload: {e}")))?;
    Ok(Some(Snapshot {
        meta,
        data: data.slice(at..at + n),
    }))
}

/// A read-only mapping of `file` as shared bytes (empty files map to empty bytes).
fn map(file: &File, path: &Path) -> Result<Bytes, StorageError> {
    if file.metadata().map_err(io_err(path, "stat"))?.len() == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: snapshot files are never modified once written (see the module docs); the
    // mapping is read-only and private.
    let m = unsafe { memmap2::Mmap::map(file) }.map_err(io_err(path, "map"))?;
    Ok(Bytes::from_owner(m))
}

/// Bytes of a snapshot file written, in fsync durability, before the kernel is asked to start
/// writing them back (`sync_file_range`, without waiting). The fsync that completes the file
/// then waits for about the last window, not for the whole snapshot: a follower's loop runs
/// it when it installs a leader's snapshot, and a 1 GiB file dirty in the page cache took
/// seconds to sync.
pub const WRITEBACK_BYTES: u64 = 8 << 20;

/// A snapshot being taken: the state machine streams its bytes in ([`io::Write`]), and
/// [`SnapshotWriter::finish`] completes the file and returns the snapshot, its data mapped from
/// the file. Bytes go to a temporary file of their own, so that another snapshot (one
/// installed from a leader) can be written meanwhile; in fsync durability the finished file
/// replaces `snapshot` if it is newer than the one there, and otherwise, and always in memory
/// durability, it is unlinked once mapped.
pub struct SnapshotWriter {
    pub(crate) dir: PathBuf,
    pub(crate) durability: Durability,
    /// The index of the snapshot in `snapshot`, shared with the owner's `Storage`.
    pub(crate) file_index: Arc<Mutex<Index>>,
    meta: SnapshotMeta,
    /// Record header, metadata and data length: written last, at offset 0.
    prefix: Vec<u8>,
    tmp: PathBuf,
    /// `None` once finished.
    out: Option<BufWriter<File>>,
    data_len: u64,
    data_crc: u32,
    /// Data bytes handed to write-back so far (fsync durability).
    written_back: u64,
    /// Write-back requests made ([`WRITEBACK_BYTES`] each).
    writebacks: u64,
}

impl SnapshotWriter {
    pub(crate) fn create(
        dir: &Path,
        durability: Durability,
        file_index: Arc<Mutex<Index>>,
        meta: SnapshotMeta,
    ) -> Result<SnapshotWriter, StorageError> {
        let mut w = Writer::new();
        codec::put_snapshot_meta(&mut w, &meta);
        w.put_u32(0); // the data's length, known at the end
        let mut prefix = vec![0u8; record::HEADER_LEN];
        prefix.extend_from_slice(&w.into_inner());
        let tmp = dir.join(format!("{FILE_NAME}-{}{}", meta.index, fsutil::TMP_SUFFIX));
        let file = fsutil::create_empty(&tmp)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&prefix).map_err(io_err(&tmp, "write"))?;
        Ok(SnapshotWriter {
            dir: dir.to_path_buf(),
            durability,
            file_index,
            meta,
            prefix,
            tmp,
            out: Some(out),
            data_len: 0,
            data_crc: 0,
            written_back: 0,
            writebacks: 0,
        })
    }

    /// Write-back requests this writer made: one per [`WRITEBACK_BYTES`] of data in fsync
    /// durability, none in memory durability.
    pub fn writebacks(&self) -> u64 {
        self.writebacks
    }

    /// In fsync durability, once a window of [`WRITEBACK_BYTES`] is complete, flushes it to
    /// the file and starts its write-back. A failure to start it is not an error: the final
    /// fsync writes it.
    fn maybe_write_back(&mut self) -> io::Result<()> {
        if self.durability != Durability::Fsync
            || self.data_len - self.written_back < WRITEBACK_BYTES
        {
            return Ok(());
        }
        let out = self.out.as_mut().expect("not finished");
        out.flush()?;
        let start = self.prefix.len() as u64 + self.written_back;
        let len = self.data_len - self.written_back;
        // SAFETY: sync_file_range on an open descriptor has no memory preconditions.
        let _ = unsafe {
            libc::sync_file_range(
                out.get_ref().as_raw_fd(),
                start as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        self.written_back = self.data_len;
        self.writebacks += 1;
        Ok(())
    }

    /// Completes the file (the record header and the data's length go in last) and returns
    /// the snapshot, its data mapped from the file. In fsync durability the file is durable
    /// and in place before this returns.
    pub fn finish(mut self) -> Result<Snapshot, StorageError> {
        let out = self.out.take().expect("finished once");
        let (dir, tmp, data_len, data_crc) = (&self.dir, &self.tmp, self.data_len, self.data_crc);
        let (meta, mut prefix) = (self.meta.clone(), std::mem::take(&mut self.prefix));
        let file = out
            .into_inner()
            .map_err(|e| io_err(tmp, "write")(e.into_error()))?;
        let h = record::HEADER_LEN;
        let n = prefix.len();
        prefix[n - 4..].copy_from_slice(&(data_len as u32).to_le_bytes());
        let payload_len = (n - h) as u64 + data_len;
        let body_crc = crc32c_combine(crc32c(&prefix[h..]), data_crc, data_len);
        let header = record::header(payload_len as u32, body_crc, RecordType::Snapshot);
        prefix[..h].copy_from_slice(&header);
        file.write_all_at(&prefix, 0)
            .map_err(io_err(tmp, "write"))?;
        let mut stats = StorageStats::default();
        let data = map(&file, tmp)?;
        debug_assert_eq!(data.len() as u64, n as u64 + data_len);
        let in_place = self.durability == Durability::Fsync && {
            stats.fsyncs += 1;
            file.sync_all().map_err(io_err(tmp, "fsync"))?;
            // Under the file's lock: the owner's `save_snapshot` shares it, and the file never
            // goes back to an older snapshot.
            let mut index = self.file_index.lock().expect("snapshot file");
            if meta.index > *index {
                let path = dir.join(FILE_NAME);
                fs::rename(tmp, &path).map_err(io_err(&path, "rename into place"))?;
                fsutil::sync_dir(dir, &mut stats)?;
                *index = meta.index;
                true
            } else {
                false
            }
        };
        if !in_place {
            fs::remove_file(tmp).map_err(io_err(tmp, "remove"))?;
        }
        Ok(Snapshot {
            meta,
            data: data.slice(n..),
        })
    }
}

impl Write for SnapshotWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.data_len + buf.len() as u64 > codec::MAX_SNAPSHOT_DATA as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "snapshot data over the limit of {} bytes",
                    codec::MAX_SNAPSHOT_DATA
                ),
            ));
        }
        let out = self.out.as_mut().expect("not finished");
        out.write_all(buf)?;
        self.data_crc = crc32c_update(self.data_crc, buf);
        self.data_len += buf.len() as u64;
        self.maybe_write_back()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.as_mut().map_or(Ok(()), |o| o.flush())
    }
}

/// A snapshot received from a leader goes to a file the same way ([`SnapshotFiles::sink`]).
///
/// [`SnapshotFiles::sink`]: crate::SnapshotFiles::sink
impl waverunner_raft::SnapshotSink for SnapshotWriter {
    fn append(&mut self, data: &[u8]) -> Result<(), String> {
        self.write_all(data).map_err(|e| {
            let e = format!("snapshot file {}: {e}", self.tmp.display());
            tracing::warn!("receiving a snapshot failed: {e}");
            e
        })
    }

    fn finish(self: Box<Self>) -> Result<Bytes, String> {
        SnapshotWriter::finish(*self).map(|s| s.data).map_err(|e| {
            tracing::warn!("receiving a snapshot failed: {e}");
            e.to_string()
        })
    }
}

impl Drop for SnapshotWriter {
    fn drop(&mut self) {
        // Abandoned (an error while streaming, or in `finish`): the partial file goes. A
        // finished file was renamed or removed already, unless `finish` failed.
        if self.out.is_some() || self.tmp.exists() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Refuses a snapshot the format cannot hold, before anything is written.
pub(crate) fn check_size(s: &Snapshot) -> Result<(), StorageError> {
    if s.data.len() > codec::MAX_SNAPSHOT_DATA {
        return Err(StorageError::TooLarge {
            what: "snapshot",
            len: s.data.len() as u64,
            max: codec::MAX_SNAPSHOT_DATA as u64,
        });
    }
    let members = s.meta.conf.voters.len().max(s.meta.conf.learners.len());
    if members > codec::MAX_MEMBERS {
        return Err(StorageError::TooLarge {
            what: "snapshot membership",
            len: members as u64,
            max: codec::MAX_MEMBERS as u64,
        });
    }
    Ok(())
}

/// Durably replaces the snapshot in `dir` with `s`.
pub(crate) fn save(dir: &Path, s: &Snapshot, stats: &mut StorageStats) -> Result<(), StorageError> {
    check_size(s)?;
    let members = s.meta.conf.voters.len() + s.meta.conf.learners.len();
    let mut buf = Vec::with_capacity(record::HEADER_LEN + 32 + 8 * members + s.data.len());
    let start = record::begin(&mut buf);
    let mut w = Writer::from_vec(buf);
    codec::put_snapshot(&mut w, s);
    let mut buf = w.into_inner();
    record::finish(&mut buf, start, RecordType::Snapshot);
    fsutil::write_atomic(dir, FILE_NAME, &buf, stats)?;
    stats.records_written += 1;
    stats.snapshots_saved += 1;
    Ok(())
}
