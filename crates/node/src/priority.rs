//! What threads do while they wait: bulk work yields the CPU to the replica loop and the
//! control lane.

/// Nice value of a client connection's thread: below the replica loop and the peer
/// connections (nice 0), above bulk work (nice 10).
pub const CLIENT_NICE: libc::c_int = 5;

/// The calling thread, for the rest of its life, at [`CLIENT_NICE`]: a client connection.
/// On a saturated machine clients then wait, not heartbeats: with eight pipelining
/// connections and five million keys on two CPUs, followers went 150–350 ms without their
/// leader's frames and ran pre-vote rounds (once an election). Lowering a thread's own
/// priority needs no privilege.
pub fn client_thread() {
    let _ = set_nice(CLIENT_NICE);
}

/// Sets the calling thread's nice value; its thread id if that worked.
fn set_nice(nice: libc::c_int) -> Option<libc::id_t> {
    // SAFETY: gettid and setpriority on the calling thread have no memory preconditions.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        (libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0).then_some(tid)
    }
}

/// The calling thread at a lower CPU priority (nice 10) while the guard lives: a thread that
/// moves a large message (a 64 MiB value, a snapshot) or writes a snapshot leaves the CPU to the
/// replica loops and the control connections, so heartbeats and votes keep their pace on a busy machine (three
/// replicas on two cores spent seconds copying a large value and fell into elections). Only
/// where the priority can be raised back afterwards (root, or `CAP_SYS_NICE`); elsewhere
/// nothing changes.
pub struct LowPriority(Option<libc::id_t>);

impl LowPriority {
    /// Lowers the calling thread's priority until the guard is dropped.
    pub fn new() -> LowPriority {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return LowPriority(None);
        }
        LowPriority(set_nice(10))
    }
}

impl Drop for LowPriority {
    fn drop(&mut self) {
        if let Some(tid) = self.0 {
            // SAFETY: setpriority on this thread has no memory preconditions.
            unsafe {
                let _ = libc::setpriority(libc::PRIO_PROCESS, tid, 0);
            }
        }
    }
}
