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
    let tid = gettid();
    // SAFETY: setpriority on the calling thread has no memory preconditions.
    (unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } == 0).then_some(tid)
}

/// Nice value of bulk work: a large message, a snapshot written or restored.
pub const BULK_NICE: libc::c_int = 10;

/// Time slice of a bulk thread, ns (the kernel's floor for a requested slice). With EEVDF
/// (Linux 6.6+) a thread, once picked, runs out its slice before a woken thread may take its
/// CPU, however low its nice value: with the default slice (0.75 ms × 1 + log₂ CPUs) a write's
/// p99 during a snapshot of 5 M keys was 1.47 ms against 0.41 outside. Linux 6.12+ honours a
/// requested slice; older kernels ignore the field.
pub const BULK_SLICE_NS: u64 = 100_000;

/// The calling thread at a lower CPU priority ([`BULK_NICE`], a [`BULK_SLICE_NS`] slice) while
/// the guard lives: a thread that moves a large message (a 64 MiB value, a snapshot) or writes a
/// snapshot leaves the CPU to the replica loops and the control connections, so heartbeats and
/// votes keep their pace on a busy machine (three replicas on two cores spent seconds copying a
/// large value and fell into elections) and a woken loop waits at most one short slice. Only
/// where the priority can be raised back afterwards (root, or `CAP_SYS_NICE`); elsewhere
/// nothing changes.
pub(crate) struct LowPriority(Option<libc::id_t>);

impl LowPriority {
    /// Lowers the calling thread's priority until the guard is dropped.
    pub(crate) fn new() -> LowPriority {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return LowPriority(None);
        }
        let tid = gettid();
        if set_fair(tid, BULK_NICE, BULK_SLICE_NS) {
            return LowPriority(Some(tid));
        }
        LowPriority(set_nice(BULK_NICE))
    }

    /// The calling thread at the idle policy (`SCHED_IDLE`) until the guard is dropped, or
    /// until [`to_bulk`] moves it up: a CPU running only idle-policy threads counts as free
    /// when the kernel places a woken thread, and a woken normal thread preempts an idle one
    /// at once, so a replica loop never waits behind it. The price is starvation on a busy
    /// machine (an idle thread gets ~0.3 % of a CPU beside a busy one), which the caller
    /// watches for ([`Paced::with_floor`]). Bulk priority where the policy is refused; only
    /// as root, like [`LowPriority::new`].
    pub(crate) fn idle() -> LowPriority {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return LowPriority(None);
        }
        let tid = gettid();
        if set_policy(tid, libc::SCHED_IDLE, 0, 0) {
            return LowPriority(Some(tid));
        }
        LowPriority::new()
    }
}

/// The calling thread, at idle or bulk priority under a [`LowPriority`] guard, moved to bulk
/// priority (the guard still restores it). True if it moved.
fn to_bulk() -> bool {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() }) == 0 && set_fair(gettid(), BULK_NICE, BULK_SLICE_NS)
}

impl Drop for LowPriority {
    fn drop(&mut self) {
        if let Some(tid) = self.0 {
            if !set_fair(tid, 0, 0) {
                // SAFETY: setpriority on this thread has no memory preconditions.
                unsafe {
                    let _ = libc::setpriority(libc::PRIO_PROCESS, tid, 0);
                }
            }
        }
    }
}

/// Bytes a second a snapshot is written at, at most: above the 200 MB/s it must reach, below
/// what one core does unhindered. A million keys snapshotted back to back at 800 MB/s kept one
/// of the two cores busy and put the write p99 of the loops sharing the other at 2.2× (5 M
/// keys); paced, the loops find a free core between bursts.
pub const SNAPSHOT_PACE: u64 = 320_000_000;

/// Bytes a second below which a snapshot written at idle priority moves up to bulk priority:
/// 20 % above the 200 MB/s a snapshot must reach.
pub const SNAPSHOT_FLOOR: u64 = 240_000_000;

/// A writer that passes bytes through at most `rate` a second (on average since it started,
/// in bursts of [`PACE_BURST`] bytes: it sleeps when ahead).
pub struct Paced<W> {
    inner: W,
    rate: u64,
    start: std::time::Instant,
    written: u64,
    since_check: usize,
    /// With a floor: the writing thread moves from idle to bulk priority once its average
    /// falls below it (checked from [`FLOOR_GRACE`] on), and stays there.
    floor: Option<u64>,
    /// Whether it moved.
    raised: bool,
}

/// How long a [`Paced`] writer with a floor runs before its average is held to the floor.
pub const FLOOR_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// Bytes between two checks of a [`Paced`] writer's pace (about 0.3 ms of writing at 800 MB/s).
pub const PACE_BURST: usize = 256 << 10;

impl<W> Paced<W> {
    /// `inner`, at most `rate` bytes a second.
    pub fn new(inner: W, rate: u64) -> Paced<W> {
        assert!(rate > 0);
        Paced {
            inner,
            rate,
            start: std::time::Instant::now(),
            written: 0,
            since_check: 0,
            floor: None,
            raised: false,
        }
    }

    /// The same, written by a thread at idle priority ([`LowPriority::idle`]) that moves up
    /// to bulk priority when it falls below `floor` bytes a second.
    pub fn with_floor(inner: W, rate: u64, floor: u64) -> Paced<W> {
        assert!(floor > 0 && floor <= rate);
        Paced {
            floor: Some(floor),
            ..Paced::new(inner, rate)
        }
    }

    /// Whether the writing thread was moved up to bulk priority.
    pub fn raised(&self) -> bool {
        self.raised
    }

    /// Below the floor: bytes written fewer than the floor's rate over the time elapsed.
    fn below_floor(&self) -> bool {
        let Some(floor) = self.floor else {
            return false;
        };
        let elapsed = self.start.elapsed();
        elapsed >= FLOOR_GRACE
            && u128::from(self.written) * 1_000_000_000 < u128::from(floor) * elapsed.as_nanos()
    }

    /// How long to wait before going on: the time `written` bytes take at the rate, less
    /// the time elapsed.
    fn ahead_by(&self) -> std::time::Duration {
        let due = std::time::Duration::from_nanos(
            (u128::from(self.written) * 1_000_000_000 / u128::from(self.rate)) as u64,
        );
        due.saturating_sub(self.start.elapsed())
    }
}

impl<W: std::io::Write> std::io::Write for Paced<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        self.since_check += n;
        if self.since_check >= PACE_BURST {
            self.since_check = 0;
            if !self.raised && self.below_floor() {
                self.raised = true;
                if to_bulk() {
                    tracing::debug!(
                        written = self.written,
                        "idle-priority writer below its floor: raised to bulk priority"
                    );
                }
            }
            let wait = self.ahead_by();
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn gettid() -> libc::id_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

/// `sched_setattr` of thread `tid` to the normal policy at `nice` with a requested slice of
/// `slice_ns` (0: the kernel's default). False where the call is refused or unknown.
fn set_fair(tid: libc::id_t, nice: libc::c_int, slice_ns: u64) -> bool {
    set_policy(tid, libc::SCHED_OTHER, nice, slice_ns)
}

/// `sched_setattr` of thread `tid` to a fair-class `policy` (normal, batch or idle).
fn set_policy(tid: libc::id_t, policy: libc::c_int, nice: libc::c_int, slice_ns: u64) -> bool {
    let attr = libc::sched_attr {
        size: std::mem::size_of::<libc::sched_attr>() as u32,
        sched_policy: policy as u32,
        sched_flags: 0,
        sched_nice: nice,
        sched_priority: 0,
        sched_runtime: slice_ns,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: `attr` is a valid sched_attr of the size it states and outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid,
            &attr as *const libc::sched_attr,
            0u32,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A paced writer takes at least the time its bytes take at its rate, and passes every
    /// byte through.
    #[test]
    fn a_paced_writer_keeps_its_rate() {
        use std::io::Write;
        let mut out = Vec::new();
        let t = std::time::Instant::now();
        {
            let mut w = Paced::new(&mut out, 100_000_000); // 100 MB/s
            let chunk = vec![7u8; 64 << 10];
            for _ in 0..80 {
                w.write_all(&chunk).unwrap(); // 5.2 MB: at least 50 ms
            }
        }
        assert_eq!(out.len(), 80 * (64 << 10));
        assert!(
            t.elapsed() >= std::time::Duration::from_millis(45),
            "{:?}",
            t.elapsed()
        );
    }

    /// The calling thread's scheduling policy and nice value.
    fn policy() -> (u32, i32) {
        let attr = attr_now();
        (attr.sched_policy, attr.sched_nice)
    }

    /// The calling thread's `sched_attr`.
    fn attr_now() -> libc::sched_attr {
        // SAFETY: sched_attr is plain data; all zeroes is a valid value.
        let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::sched_attr>() as u32;
        // SAFETY: `attr` is writable for `size` bytes.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sched_getattr,
                gettid(),
                &mut attr as *mut _,
                size,
                0u32,
            )
        };
        assert_eq!(r, 0);
        attr
    }

    /// An idle-priority writer that falls below its floor moves up to bulk priority, and the
    /// guard puts the thread back to normal.
    #[test]
    fn a_starved_idle_writer_moves_up() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP a_starved_idle_writer_moves_up: needs root to raise the priority back");
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI runs as root"
            );
            return;
        }
        /// A sink that takes 1 ms per write: about 64 MB/s in 64 KiB writes.
        struct Slow;
        impl std::io::Write for Slow {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                std::thread::sleep(std::time::Duration::from_millis(1));
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        std::thread::spawn(|| {
            use std::io::Write;
            assert_eq!(policy(), (libc::SCHED_OTHER as u32, 0));
            {
                let _low = LowPriority::idle();
                assert_eq!(policy().0, libc::SCHED_IDLE as u32);
                let mut w = Paced::with_floor(Slow, 1_000_000_000, 200_000_000);
                let chunk = vec![0u8; 64 << 10];
                let t = std::time::Instant::now();
                while !w.raised() && t.elapsed() < std::time::Duration::from_secs(2) {
                    w.write_all(&chunk).unwrap();
                }
                assert!(w.raised(), "64 MB/s is below a 200 MB/s floor");
                assert_eq!(policy(), (libc::SCHED_OTHER as u32, BULK_NICE));
            }
            assert_eq!(policy(), (libc::SCHED_OTHER as u32, 0));
            // A writer above its floor stays idle.
            let _low = LowPriority::idle();
            let mut out = Vec::new();
            let mut w = Paced::with_floor(&mut out, 400_000_000, 1_000);
            let chunk = vec![0u8; 64 << 10];
            for _ in 0..400 {
                w.write_all(&chunk).unwrap(); // 26 MB at 400 MB/s: 65 ms, past the grace
            }
            assert!(!w.raised());
            assert_eq!(policy().0, libc::SCHED_IDLE as u32);
        })
        .join()
        .unwrap();
    }

    /// The slice and nice value reach the kernel (as root) and are undone with the guard.
    #[test]
    fn bulk_priority_round_trip() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP bulk_priority_round_trip: needs root to raise the priority back");
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI runs as root"
            );
            return;
        }
        std::thread::spawn(|| {
            let nice = || {
                // SAFETY: getpriority of this thread has no memory preconditions.
                unsafe { libc::getpriority(libc::PRIO_PROCESS, gettid()) }
            };
            assert_eq!(nice(), 0);
            {
                let _low = LowPriority::new();
                assert_eq!(nice(), BULK_NICE);
                assert_eq!(
                    attr_now().sched_runtime,
                    BULK_SLICE_NS,
                    "the requested slice"
                );
            }
            assert_eq!(nice(), 0);
        })
        .join()
        .unwrap();
    }
}
