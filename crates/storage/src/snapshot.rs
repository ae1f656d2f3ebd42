//! The snapshot file: one framed record (type `Snapshot`) whose payload is
//! `codec::put_snapshot`, replaced atomically (temp, fsync, rename, directory fsync). Only the
//! latest snapshot is kept.

use crate::codec::{self, Reader, Writer};
use crate::error::{io_err, StorageError};
use crate::fsutil;
use crate::record::{self, RecordType};
use crate::StorageStats;
use std::fs;
use std::path::Path;
use waverunner_raft::Snapshot;

/// Name of the file in the data directory.
pub(crate) const FILE_NAME: &str = "snapshot";

/// Largest payload of the snapshot record: the data plus generous room for the metadata.
pub(crate) const MAX_PAYLOAD: usize =
    codec::MAX_SNAPSHOT_DATA + 8 + 8 + 8 + 16 * codec::MAX_MEMBERS + 4;

/// Reads the snapshot in `dir`, if any. Any damage is corruption: the file is only ever
/// replaced whole, so a crash cannot tear it.
pub(crate) fn load(dir: &Path) -> Result<Option<Snapshot>, StorageError> {
    let path = dir.join(FILE_NAME);
    if !path.exists() {
        return Ok(None);
    }
    let len = fs::metadata(&path).map_err(io_err(&path, "stat"))?.len();
    // Checked before reading the file into memory.
    if len > (record::HEADER_LEN + MAX_PAYLOAD) as u64 {
        return Err(StorageError::corrupt(
            &path,
            0,
            format!("snapshot file of {len} bytes exceeds the maximum snapshot size"),
        ));
    }
    let data = fs::read(&path).map_err(io_err(&path, "read"))?;
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
    let s = codec::get_snapshot(&mut r)
        .and_then(|s| r.finish().map(|_| s))
        .map_err(|e| StorageError::corrupt(&path, offset, format!("snapshot payload: {e}")))?;
    Ok(Some(s))
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
