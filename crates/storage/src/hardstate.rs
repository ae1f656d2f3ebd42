//! The hard-state file: term, vote, commit, and two flags, in two alternating copies.
//!
//! The file is 1024 bytes: two 512-byte slots, each holding one framed record (see
//! `record.rs`) padded with zeros. Update `seq` goes to slot `seq % 2` with one `pwrite` and one
//! `fdatasync`, so an update costs a single fsync (no rename, no directory fsync) and a write
//! torn by a crash damages only the copy being written: recovery takes the valid copy with the
//! highest `seq`. The older copy is then the state before the interrupted update, which was
//! never reported durable. Slots are sector-sized and sector-aligned so one write cannot tear
//! both.
//!
//! Slot payload: `seq: u64, mode: u8 (0 memory, 1 fsync), flags: u8, hard state (24 bytes)`.
//! Flag bit 0, `LOG_LOST`: the log was lost (durability changed from memory to fsync, or the
//! operator removed `wal/`) and the replica has not yet reported that it caught up; every open
//! reports `log_lost` until then, so a crash while catching up cannot turn a replica with a
//! partial log into a voter.
//!
//! The file is created atomically (temp, fsync, rename, directory fsync) with both slots valid,
//! so its existence means a previous boot happened.

use crate::codec::{self, Reader, Writer};
use crate::error::{io_err, StorageError};
use crate::fsutil;
use crate::record::{self, RecordType};
use crate::{Durability, StorageStats};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use waverunner_raft::HardState;

/// Name of the file in the data directory.
pub(crate) const FILE_NAME: &str = "hardstate";
const SLOT_SIZE: usize = 512;
const FILE_SIZE: usize = 2 * SLOT_SIZE;
const PAYLOAD_LEN: usize = 8 + 1 + 1 + codec::HARD_STATE_LEN;
const FLAG_LOG_LOST: u8 = 1;

/// What one copy holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Persisted {
    pub hs: HardState,
    /// The durability the replica ran with when it wrote this.
    pub mode: Durability,
    /// See the module docs.
    pub log_lost: bool,
}

/// The open hard-state file and what it durably holds.
pub(crate) struct HardStateFile {
    path: PathBuf,
    file: File,
    seq: u64,
    current: Persisted,
}

fn encode_slot(seq: u64, p: &Persisted) -> [u8; SLOT_SIZE] {
    let mut buf = Vec::with_capacity(SLOT_SIZE);
    let start = record::begin(&mut buf);
    let mut w = Writer::from_vec(buf);
    w.put_u64(seq);
    w.put_u8(match p.mode {
        Durability::Memory => 0,
        Durability::Fsync => 1,
    });
    w.put_u8(if p.log_lost { FLAG_LOG_LOST } else { 0 });
    codec::put_hard_state(&mut w, &p.hs);
    let mut buf = w.into_inner();
    record::finish(&mut buf, start, RecordType::HardState);
    let mut slot = [0u8; SLOT_SIZE];
    slot[..buf.len()].copy_from_slice(&buf);
    slot
}

/// Decodes the copy in slot `i`, or says why it is not valid.
fn decode_slot(data: &[u8], i: usize) -> Result<(u64, Persisted), String> {
    let f = record::parse(data, i * SLOT_SIZE, PAYLOAD_LEN).map_err(str::to_string)?;
    if f.ty != RecordType::HardState as u8 || f.payload.len() != PAYLOAD_LEN {
        return Err(format!(
            "not a hard-state record (type {}, {} bytes)",
            f.ty,
            f.payload.len()
        ));
    }
    let mut r = Reader::new(f.payload);
    let parse = |r: &mut Reader<'_>| -> Result<(u64, u8, u8, HardState), codec::CodecError> {
        Ok((
            r.get_u64()?,
            r.get_u8()?,
            r.get_u8()?,
            codec::get_hard_state(r)?,
        ))
    };
    let (seq, mode, flags, hs) = parse(&mut r).map_err(|e| e.to_string())?;
    let mode = match mode {
        0 => Durability::Memory,
        1 => Durability::Fsync,
        m => return Err(format!("unknown durability mode {m}")),
    };
    if seq % 2 != i as u64 {
        return Err(format!("sequence number {seq} in slot {i}"));
    }
    Ok((
        seq,
        Persisted {
            hs,
            mode,
            log_lost: flags & FLAG_LOG_LOST != 0,
        },
    ))
}

impl HardStateFile {
    /// Opens the file in `dir`; `None` if there is none (a first boot).
    pub fn open(dir: &Path) -> Result<Option<HardStateFile>, StorageError> {
        let path = dir.join(FILE_NAME);
        if !path.exists() {
            return Ok(None);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path, "open"))?;
        let len = file.metadata().map_err(io_err(&path, "stat"))?.len();
        if len != FILE_SIZE as u64 {
            return Err(StorageError::corrupt(
                &path,
                0,
                format!("the hard-state file is {len} bytes, expected {FILE_SIZE}"),
            ));
        }
        let mut data = [0u8; FILE_SIZE];
        file.read_exact_at(&mut data, 0)
            .map_err(io_err(&path, "read"))?;
        let (seq, current) = match (decode_slot(&data, 0), decode_slot(&data, 1)) {
            (Ok(a), Ok(b)) => {
                if a.0 > b.0 {
                    a
                } else {
                    b
                }
            }
            (Ok(a), Err(why)) | (Err(why), Ok(a)) => {
                // Normal after a crash during an update: the other copy is the previous state.
                tracing::warn!(
                    path = %path.display(),
                    "one copy of the hard state is invalid ({why}); using the other (seq {})",
                    a.0
                );
                a
            }
            (Err(a), Err(b)) => {
                return Err(StorageError::corrupt(
                    &path,
                    0,
                    format!("both copies of the hard state are invalid: slot 0: {a}; slot 1: {b}"),
                ))
            }
        };
        Ok(Some(HardStateFile {
            path,
            file,
            seq,
            current,
        }))
    }

    /// Creates the file in `dir` atomically, both copies holding `p`.
    pub fn create(
        dir: &Path,
        p: Persisted,
        stats: &mut StorageStats,
    ) -> Result<HardStateFile, StorageError> {
        let mut data = [0u8; FILE_SIZE];
        data[..SLOT_SIZE].copy_from_slice(&encode_slot(0, &p));
        data[SLOT_SIZE..].copy_from_slice(&encode_slot(1, &p));
        let file = fsutil::write_atomic(dir, FILE_NAME, &data, stats)?;
        stats.records_written += 2;
        Ok(HardStateFile {
            path: dir.join(FILE_NAME),
            file,
            seq: 1,
            current: p,
        })
    }

    /// What the file durably holds.
    pub fn current(&self) -> Persisted {
        self.current
    }

    /// Durably replaces the content with `p`: one write, one fdatasync.
    pub fn write(&mut self, p: Persisted, stats: &mut StorageStats) -> Result<(), StorageError> {
        let seq = self.seq + 1;
        let slot = encode_slot(seq, &p);
        let off = (seq % 2) * SLOT_SIZE as u64;
        self.file
            .write_all_at(&slot, off)
            .map_err(io_err(&self.path, "write"))?;
        stats.bytes_written += SLOT_SIZE as u64;
        stats.records_written += 1;
        fsutil::sync_data(&self.file, &self.path, stats)?;
        self.seq = seq;
        self.current = p;
        Ok(())
    }
}
