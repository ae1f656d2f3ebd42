//! What can go wrong, phrased for the operator who reads it in a log.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Why a storage operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StorageError {
    /// The operating system refused an operation.
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// What was being done ("open", "fdatasync", …).
        op: &'static str,
        /// The underlying error.
        source: io::Error,
    },
    /// The data directory holds something that is neither valid data nor a torn write left by
    /// a crash. The replica must not start on it.
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damage in `path`.
        offset: u64,
        /// What is wrong there.
        what: String,
    },
    /// A value is larger than the storage format allows; nothing was written.
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size in bytes.
        len: u64,
        /// The largest size accepted.
        max: u64,
    },
    /// An earlier write or fsync failed, so the state on disk is uncertain (after a failed
    /// fsync the kernel may have dropped the dirty pages): the storage refuses further work.
    Failed,
}

impl StorageError {
    pub(crate) fn corrupt(path: &Path, offset: u64, what: impl Into<String>) -> StorageError {
        StorageError::Corrupt {
            path: path.to_path_buf(),
            offset,
            what: what.into(),
        }
    }
}

/// `map_err` helper: an [`StorageError::Io`] about `path`.
pub(crate) fn io_err(path: &Path, op: &'static str) -> impl FnOnce(io::Error) -> StorageError {
    let path = path.to_path_buf();
    move |source| StorageError::Io { path, op, source }
}

/// The data directory a file belongs to (segments live one level down, in `wal/`).
fn data_dir(path: &Path) -> &Path {
    let parent = path.parent().unwrap_or(Path::new("."));
    if parent.file_name().is_some_and(|n| n == "wal") {
        parent.parent().unwrap_or(parent)
    } else {
        parent
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Io { path, op, source } => write!(
                f,
                "storage I/O error: could not {op} {}: {source}. Check the disk (free space, \
                 permissions, health), then restart the replica: it recovers from what is on disk",
                path.display()
            ),
            StorageError::Corrupt { path, offset, what } => {
                let dir = data_dir(path).display();
                write!(
                    f,
                    "the data directory {dir} is damaged: {} at byte offset {offset}: {what}. \
                     The replica refuses to start rather than lose or invent log entries. ",
                    path.display()
                )?;
                if path.file_name().is_some_and(|n| n == "hardstate") {
                    write!(
                        f,
                        "Its term and vote are unreadable. To restore the replica from its peers, \
                         remove it from the membership, wipe {dir}, and add it back: it rejoins \
                         empty and catches up by snapshot (wiping without removing it first could \
                         let it vote twice in one term)"
                    )
                } else {
                    write!(
                        f,
                        "To restore the replica from its peers: stop it, move {dir}/wal and \
                         {dir}/snapshot aside (keep {dir}/hardstate, which holds its term and \
                         vote), and start it again: it rejoins without its log, does not vote \
                         until it has caught up, and catches up from the leader by snapshot. \
                         Wiping the whole data directory also works once the replica has been \
                         removed from the membership and is added back"
                    )
                }
            }
            StorageError::TooLarge { what, len, max } => write!(
                f,
                "{what} of {len} bytes exceeds the storage limit of {max} bytes; nothing was \
                 written. Split the value (the client's request is too large)"
            ),
            StorageError::Failed => write!(
                f,
                "an earlier storage write or fsync failed, so what is on disk is uncertain; \
                 restart the replica so that it recovers from what is on disk"
            ),
        }
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StorageError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
