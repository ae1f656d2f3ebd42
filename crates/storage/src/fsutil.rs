//! File-system helpers: directory fsync, atomic file replacement, leftovers of a crash.
//!
//! A rename or unlink is durable only once the directory holding it is fsynced; a new file's
//! size is durable only after `fsync` (not `fdatasync`) of a fresh file. Every fsync is counted.

use crate::error::{io_err, StorageError};
use crate::StorageStats;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Suffix of files being written before an atomic rename.
pub(crate) const TMP_SUFFIX: &str = ".tmp";

/// `fdatasync` on `file`.
pub(crate) fn sync_data(
    file: &File,
    path: &Path,
    stats: &mut StorageStats,
) -> Result<(), StorageError> {
    stats.fsyncs += 1;
    file.sync_data().map_err(io_err(path, "fdatasync"))
}

/// Makes creations, renames and removals inside `dir` durable.
pub(crate) fn sync_dir(dir: &Path, stats: &mut StorageStats) -> Result<(), StorageError> {
    stats.fsyncs += 1;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir, "fsync directory"))
}

/// Creates `dir` (and missing parents) if needed, durably. Returns whether it was created.
pub(crate) fn create_dir(dir: &Path, stats: &mut StorageStats) -> Result<bool, StorageError> {
    if dir.is_dir() {
        return Ok(false);
    }
    fs::create_dir_all(dir).map_err(io_err(dir, "create directory"))?;
    // The new directory's entry lives in its parent.
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent, stats)?;
    }
    Ok(true)
}

/// Creates `path` empty (truncating a leftover), for reading and writing.
pub(crate) fn create_empty(path: &Path) -> Result<File, StorageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(io_err(path, "create"))
}

/// Replaces `dir/name` with `bytes` atomically: after a crash the file holds either the old or
/// the new content, never a mix. Written to `name.tmp`, fsynced, renamed, directory fsynced.
pub(crate) fn write_atomic(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    stats: &mut StorageStats,
) -> Result<File, StorageError> {
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let path = dir.join(name);
    let mut f = create_empty(&tmp)?;
    f.write_all(bytes).map_err(io_err(&tmp, "write"))?;
    stats.bytes_written += bytes.len() as u64;
    stats.fsyncs += 1;
    f.sync_all().map_err(io_err(&tmp, "fsync"))?;
    fs::rename(&tmp, &path).map_err(io_err(&path, "rename into place"))?;
    sync_dir(dir, stats)?;
    Ok(f)
}

/// Removes `*.tmp` files a crash left in `dir` (half-written replacements; the originals are
/// intact). Returns how many were removed.
pub(crate) fn remove_tmp_files(dir: &Path) -> Result<usize, StorageError> {
    let mut n = 0;
    for ent in fs::read_dir(dir).map_err(io_err(dir, "list"))? {
        let ent = ent.map_err(io_err(dir, "list"))?;
        let name = ent.file_name();
        if name.to_string_lossy().ends_with(TMP_SUFFIX) && ent.path().is_file() {
            fs::remove_file(ent.path()).map_err(io_err(&ent.path(), "remove"))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Removes `path` if it exists (a file or a directory tree). Returns whether it existed.
pub(crate) fn remove_if_exists(path: &Path) -> Result<bool, StorageError> {
    if path.is_dir() {
        fs::remove_dir_all(path).map_err(io_err(path, "remove directory"))?;
        Ok(true)
    } else if path.exists() {
        fs::remove_file(path).map_err(io_err(path, "remove"))?;
        Ok(true)
    } else {
        Ok(false)
    }
}
