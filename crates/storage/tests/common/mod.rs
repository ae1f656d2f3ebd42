//! Helpers shared by the integration tests.

#![allow(dead_code)] // each test binary uses a different subset

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use waverunner_raft::{ConfState, Entry, EntryKind, Snapshot, SnapshotMeta};
use waverunner_storage::{Durability, Recovered, Storage, StorageError};

/// A directory under the system temp dir, unique per process and call, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let p = std::env::temp_dir().join(format!(
            "waverunner-storage-{name}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        TempDir(p)
    }

    /// The data directory (not created: `Storage::open` creates it).
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Size of `ent`'s data, so tests can compute record sizes: 16 (frame) + 21 (entry) + 30.
pub const DATA_LEN: usize = 30;
/// Size of one entry record.
pub const RECORD_LEN: u64 = 16 + 21 + DATA_LEN as u64;
/// Size of a segment's header record.
pub const SEGMENT_HEADER_LEN: u64 = 16 + 20;

/// An entry whose data names its index and term (so a mix-up shows).
pub fn ent(index: u64, term: u64) -> Entry {
    let mut data = format!("i{index}t{term}").into_bytes();
    data.resize(DATA_LEN, b'.');
    Entry {
        term,
        index,
        kind: EntryKind::Normal,
        data: data.into(),
    }
}

/// Entries `lo..=hi` of term `term`.
pub fn ents(lo: u64, hi: u64, term: u64) -> Vec<Entry> {
    (lo..=hi).map(|i| ent(i, term)).collect()
}

pub fn snap(index: u64, term: u64) -> Snapshot {
    Snapshot {
        meta: SnapshotMeta {
            index,
            term,
            conf: conf(),
        },
        data: format!("state at {index}").into_bytes().into(),
    }
}

pub fn conf() -> ConfState {
    ConfState {
        voters: vec![1, 2, 3],
        learners: vec![],
    }
}

pub fn open(dir: &Path, d: Durability) -> (Storage, Recovered) {
    match Storage::open(dir, d) {
        Ok(x) => x,
        Err(e) => panic!("open {}: {e}", dir.display()),
    }
}

pub fn open_err(dir: &Path, d: Durability) -> StorageError {
    match Storage::open(dir, d) {
        Ok(_) => panic!("open {} succeeded on a damaged directory", dir.display()),
        Err(e) => e,
    }
}

/// The WAL segment files, in index order.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    let wal = dir.join("wal");
    if !wal.is_dir() {
        return Vec::new();
    }
    let mut v: Vec<PathBuf> = fs::read_dir(wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

/// The first index named by a segment file.
pub fn segment_first(p: &Path) -> u64 {
    p.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

pub fn file_len(p: &Path) -> u64 {
    fs::metadata(p).unwrap().len()
}

/// Cuts the last `n` bytes off a file.
pub fn chop(p: &Path, n: u64) {
    let f = fs::OpenOptions::new().write(true).open(p).unwrap();
    f.set_len(file_len(p) - n).unwrap();
}

/// Flips the bits of the byte at `offset`.
pub fn flip(p: &Path, offset: u64) {
    let mut data = fs::read(p).unwrap();
    data[offset as usize] ^= 0x5A;
    fs::write(p, data).unwrap();
}

/// Asserts that `r` holds exactly `want`.
pub fn assert_entries(r: &Recovered, want: &[Entry]) {
    let got: Vec<(u64, u64)> = r.entries.iter().map(|e| (e.index, e.term)).collect();
    let exp: Vec<(u64, u64)> = want.iter().map(|e| (e.index, e.term)).collect();
    assert_eq!(got, exp);
    assert_eq!(r.entries, want);
}
