//! The machine-wide lock that integration-test clusters hold for their life, in every test
//! binary of the workspace that starts one (the cli's and kvserver's): one cluster at a time
//! keeps timing-sensitive tests honest, and only one namespace cluster exists at a time.
//! A module of each test binary (`mod cluster_lock;`; kvserver includes it by path); it
//! needs nothing but std.

use std::fs::{File, OpenOptions};

/// Takes the lock (blocks until no other test cluster runs); held until the file is dropped.
pub fn cluster_lock() -> File {
    use std::os::unix::io::AsRawFd;
    let path = std::env::temp_dir().join("waverunner-itest-cluster.lock");
    // flock works on a read-only descriptor too (the file may belong to another user).
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .or_else(|_| File::open(&path))
        .unwrap_or_else(|e| panic!("open the cluster lock file {}: {e}", path.display()));
    loop {
        if flock_exclusive(f.as_raw_fd()) == 0 {
            return f;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::Interrupted,
            "flock {}: {e}",
            path.display()
        );
    }
}

extern "C" {
    fn flock(fd: i32, op: i32) -> i32;
}

/// `flock(fd, LOCK_EX)` (not every including crate depends on `libc`).
fn flock_exclusive(fd: i32) -> i32 {
    const LOCK_EX: i32 = 2;
    // SAFETY: flock only reads its integer arguments; `fd` is a descriptor we own.
    unsafe { flock(fd, LOCK_EX) }
}
