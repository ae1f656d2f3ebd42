//! Waverunner's data planes (DESIGN §2, §3; `docs/dataplane.md`).
//!
//! A data plane runs the fast-path handler of `waverunner-fastpath` (the paper's Figure 4) on
//! every fast-path packet that reaches the replica's fast-path UDP port, and hands the replica
//! what it did through a bounded **log ring** of [`RingRecord`]s:
//!
//! - [`xdp::XdpDataPlane`]: the handler inside an XDP program attached to the replica's
//!   interface (`bpf/`), registers in a memory-mapped BPF global, the ring a BPF ring buffer.
//! - [`udp::UdpDataPlane`]: the same C handler in a dedicated thread with batched,
//!   busy-polling UDP I/O, for hosts without XDP.
//!
//! Both speak the same wire format and interoperate in one cluster. The replica (crate
//! `waverunner-node`) drives either through the [`DataPlane`] trait and never touches the
//! handler itself.

#![deny(missing_docs)]

use std::io;
use std::mem;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::RawFd;
use std::sync::Arc;

use waverunner_fastpath as fp;

pub mod udp;
#[cfg(feature = "xdp")]
pub mod xdp;

/// Records the ring holds at most. A data plane whose ring is full drops the input packet
/// *before* the handler runs (counted in [`Counters::ring_full`]), so nothing is handled that
/// the host cannot see; Raft treats it as a lost packet.
pub const RING_CAPACITY: usize = 4096;

/// One record of the log ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingRecord {
    /// The data plane appended an entry.
    Entry(RingEntry),
    /// The data plane's commit index advanced to `index`.
    Commit {
        /// The new commit index.
        index: u64,
        /// The data plane itself sent the client reply of the entry at `index` (a blind
        /// write committed by the quorum-completing acknowledgement). The host must not
        /// answer that entry again: every acknowledged write gets exactly one reply.
        replied: bool,
    },
}

/// An entry the data plane appended (`FP_ACT_RING_ENTRY`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingEntry {
    /// Its log index.
    pub index: u64,
    /// Its term (the enabled term).
    pub term: u64,
    /// The input header's flags (`fp::F_BLIND_WRITE`, `fp::F_HEARTBEAT`).
    pub flags: u16,
    /// The input header's `from`: the client id at the leader, the leader's id at a follower.
    pub from: u64,
    /// The input header's `seq`.
    pub seq: u64,
    /// Leader only: the IPv4 source of the client request (where its reply goes); `None` at
    /// a follower and for requests the host pushed itself.
    pub source: Option<SocketAddrV4>,
    /// The entry's data: the request payload (stamped with the leader's clock when it is an
    /// entry envelope: `waverunner_fastpath::payload::stamp`, so TTLs are fixed by the
    /// leader's clock in the entry, as in software).
    pub payload: Vec<u8>,
}

/// Data-plane counters, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Fast-path packets the handler ran on (enabled, not punted).
    pub handled: u64,
    /// Packets passed to the host untouched (disabled, not ours to handle, deviations).
    pub punted: u64,
    /// Packets the handler refused (`FP_ACT_DROP`: duplicates, appends past a gap, stale acks)
    /// or whose reply could not be emitted; not acks taken into a match index or a commit.
    pub dropped: u64,
    /// Retransmission requests a follower sent.
    pub retx_requests: u64,
    /// Client replies the data plane generated itself.
    pub client_replies: u64,
    /// Packets dropped because the ring was full.
    pub ring_full: u64,
    /// Times the handler halted (cleared its enable flag).
    pub halts: u64,
    /// Packets on the fast-path port that are not valid fast-path packets (given to the host).
    pub malformed: u64,
    /// Client requests a leader refused (overload: `fp::shed`), with a busy reply or without.
    pub shed: u64,
    /// Of those, dropped without a reply: the busy replies' ration was spent
    /// (`fp::busy_answer`).
    pub shed_unanswered: u64,
}

/// Replication latency as the data plane measures it at the leader: from receipt of a client
/// request to the acknowledgement that completed its majority. Log-linear buckets: bucket `b`
/// holds values `v` (nanoseconds) with [`bucket_of`]`(v) == b`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Counts per bucket ([`HIST_BUCKETS`] of them).
    pub buckets: Vec<u64>,
}

/// Number of latency buckets: 4 sub-buckets per power of two, the last one open (≥ 2^40 ns).
pub const HIST_BUCKETS: usize = 160;

/// The bucket of a latency of `ns` nanoseconds: `4·(floor(log2 ns) − 1)` plus the two bits
/// below the leading one, for `ns ≥ 8`; values below 8 go to bucket `ns`. Mirrored in the BPF
/// program.
pub fn bucket_of(ns: u64) -> usize {
    if ns < 8 {
        return ns as usize;
    }
    let log = 63 - ns.leading_zeros() as u64; // ≥ 3
    let sub = (ns >> (log - 2)) & 3;
    ((4 * (log - 1) + sub) as usize).min(HIST_BUCKETS - 1)
}

/// The smallest value of bucket `b` (nanoseconds).
pub fn bucket_floor(b: usize) -> u64 {
    if b < 8 {
        return b as u64;
    }
    let log = (b / 4 + 1) as u64;
    let sub = (b % 4) as u64;
    (1u64 << log) | (sub << (log - 2))
}

impl LatencyHistogram {
    /// Observations in total.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The `q`-quantile (0..=1) as the floor of its bucket, in nanoseconds; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let want = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (b, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= want {
                return bucket_floor(b);
            }
        }
        0
    }
}

/// Where a data plane lives and what it serves.
#[derive(Clone, Debug)]
pub struct Config {
    /// This replica's node id.
    pub self_id: u64,
    /// The replication group id on the wire (header `group_id`).
    pub group_id: u32,
    /// The fast-path UDP address (also where native clients send requests). Its IP must be
    /// an address of `interface` for `xdp`.
    pub bind: SocketAddrV4,
    /// `xdp`: the interface to attach to (the one that holds `bind`'s IP).
    pub interface: Option<String>,
    /// `xdp`: the IPv4 multicast group the leader sends appends to (every replica's interface
    /// is on one L2 segment that floods it). `udp`: joined, so a `udp` follower receives an
    /// `xdp` leader's appends.
    pub multicast: Option<Ipv4Addr>,
    /// Body of the reply the data plane sends itself for a committed blind write, after the
    /// `status u8 = 0 | leader u64` prefix the data plane writes (the native protocol's
    /// encoded OK response). Empty disables data-plane client replies (the host answers).
    pub blind_reply_body: Vec<u8>,
}

/// A callback on a packet: (source, UDP payload).
pub type PacketFn = Arc<dyn Fn(SocketAddr, &[u8]) + Send + Sync>;

/// What a host that polls the ring itself ([`DataPlane::ring_fd`]) may do before it sleeps
/// ([`DataPlane::before_sleep`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingSleep {
    /// Sleep: the next record makes the ring's descriptor readable.
    Armed,
    /// Records are waiting: drain them first, do not sleep.
    Ready,
    /// Sleep at most this long, not woken per record: records keep coming and nobody waits on
    /// each (a follower's own apply is up to this much later).
    Nap(std::time::Duration),
}

/// What the data plane calls back into its host with. Both run on a data-plane thread and
/// must not block.
#[derive(Clone)]
pub struct Hooks {
    /// Records are waiting on the ring (coalesced: called at least once after records appear).
    ///
    /// `None`: the host polls [`DataPlane::ring_fd`] and drains the ring on its own loop (the
    /// `xdp` data plane then starts no ring thread); only `xdp` allows it.
    pub wake: Option<Arc<dyn Fn() + Send + Sync>>,
    /// A packet on the fast-path port for the host: the handler passed it up (`TO_HOST`), the
    /// data plane was disabled, or it is not a valid fast-path packet. (source, UDP payload).
    ///
    /// `None`: the host reads those packets from [`DataPlane::socket`] itself (on its event
    /// loop, with no thread between). Only a data plane that passes packets up through that
    /// socket (`xdp`) allows it; the `udp` data plane's thread is the handler and needs a
    /// callback.
    pub host_packet: Option<PacketFn>,
}

/// A data plane as the replica drives it (DESIGN §3; the hand-off is `docs/handoff.md`).
pub trait DataPlane: Send {
    /// `"xdp"` or `"udp"`.
    fn kind(&self) -> &'static str;

    /// Its leader's window: entries ordered and not committed at which it sheds clients'
    /// requests (`fp::shed`), and at which the host stops pushing its own
    /// (`dataplane_max_inflight`).
    fn max_inflight(&self) -> u64;

    /// Loads `regs` (which have `enabled = 1`) and turns the data plane on. `peers` are the
    /// fast-path addresses of the other voters (unicast fan-out, and where acks go). The ring
    /// must be empty (the host drained it at the last disable).
    fn enable(&mut self, regs: &fp::Registers, peers: &[(u64, SocketAddrV4)]) -> io::Result<()>;

    /// Clears the enable flag, waits until no handler invocation is in flight, and returns
    /// the registers as the data plane left them (with `enabled = 0`). Records still on the
    /// ring are returned by the following [`DataPlane::drain`] calls; after that no further
    /// record appears until the next enable.
    fn disable(&mut self) -> fp::Registers;

    /// Moves every record currently on the ring to `out`, in ring order. Never blocks.
    fn drain(&mut self, out: &mut Vec<RingRecord>);

    /// Runs a fast-path packet (a whole UDP payload: header + payload) through the handler as
    /// if it had arrived from this replica's own fast-path address: the leader pushes requests
    /// of its other front-ends, idle heartbeats, and (fsync) its own deferred acks this way.
    /// Records it produces may not wake anybody: see [`DataPlane::drain_due`].
    fn push(&mut self, pkt: &[u8]) -> io::Result<()>;

    /// Pushes several packets, in order, as [`DataPlane::push`] does each (`xdp`: one syscall
    /// per 64 of them, `xdp::PUSH_SLOTS`).
    fn push_batch(&mut self, pkts: &[&[u8]]) -> io::Result<()> {
        pkts.iter().try_for_each(|p| self.push(p))
    }

    /// The caller must [`DataPlane::drain`] soon: records of its pushes (and any produced
    /// meanwhile) are on the ring without having woken the reader (`xdp`: the loop reads
    /// them itself after its pushes instead of being woken for them).
    fn drain_due(&self) -> bool {
        false
    }

    /// Whether the host needs ring records as soon as they appear (a leader; a follower with
    /// requests waiting, or acknowledging after fsync) or may take them in batches a little
    /// later (`xdp`: at most `xdp::RING_NAP`). When turned on, the host drains afterwards.
    fn want_wakeups(&self, _urgent: bool) {}

    /// A descriptor that turns readable when records reach the ring of a host that armed its
    /// wake-up ([`DataPlane::before_sleep`]): the data plane was opened with no `Hooks::wake`,
    /// and the host polls this and drains the ring on its own loop. `None`: `Hooks::wake`
    /// tells the host.
    fn ring_fd(&self) -> Option<RawFd> {
        None
    }

    /// The host that polls [`DataPlane::ring_fd`] is about to sleep: arms the wake-up unless
    /// records wait or a nap will do.
    fn before_sleep(&self) -> RingSleep {
        RingSleep::Armed
    }

    /// The host that polls [`DataPlane::ring_fd`] is awake: records no longer wake it (it
    /// drains the ring every turn of its loop).
    fn after_sleep(&self) {}

    /// Sends a UDP payload from the fast-path port to `to`, bypassing the handler (host
    /// replies, retransmissions, deferred acks, forwards).
    fn send_to(&self, pkt: &[u8], to: SocketAddr) -> io::Result<()>;

    /// Sends several UDP payloads as [`DataPlane::send_to`] does each, in order (`xdp`, `udp`:
    /// one `sendmmsg` per 64); returns how many went. One that cannot go is skipped.
    fn send_many(&self, pkts: &[(SocketAddr, Vec<u8>)]) -> usize {
        pkts.iter()
            .filter(|(to, p)| self.send_to(p, *to).is_ok())
            .count()
    }

    /// The registers right now (a racy copy while enabled: for status only).
    fn registers(&self) -> fp::Registers;

    /// Counters summed over CPUs.
    fn counters(&self) -> Counters;

    /// Replication latency measured by the data plane (leader).
    fn latency(&self) -> LatencyHistogram;

    /// A handle on the fast-path UDP socket, for host threads that send from the fast-path
    /// port (front-end replies) while the replica loop owns the data plane.
    fn socket(&self) -> io::Result<std::net::UdpSocket> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this data plane does not share its socket",
        ))
    }

    /// Called by the replica every tick (XDP refreshes the clock offset it stamps with).
    fn tick(&self) {}

    /// Follower: when an append of the enabled term last came from the network
    /// (`fp::leader_heard`: taken into the log, a duplicate, held or dropped past the window;
    /// [`monotonic_ns`]; 0: never). The data plane goes on while the host is stopped or
    /// starved, and every such append proves the leader alive when it came (Raft's election
    /// timer restarts at each): the host does not count the ticks it missed before this time,
    /// and counts the rest after the ring's records (`docs/dataplane.md` "A starved host").
    fn leader_heard_ns(&self) -> u64 {
        0
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the XDP program's `bpf_ktime_get_ns()`, and the clock
/// of [`Instant`](std::time::Instant) on Linux.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The [`Instant`](std::time::Instant) of [`monotonic_ns`] time `ns` (now, if `ns` is later).
pub fn instant_at(ns: u64) -> std::time::Instant {
    let (now, now_ns) = (std::time::Instant::now(), monotonic_ns());
    now.checked_sub(std::time::Duration::from_nanos(now_ns.saturating_sub(ns)))
        .unwrap_or(now)
}

/// A boxed data plane is one: the node chooses xdp or udp at start.
impl<T: DataPlane + ?Sized> DataPlane for Box<T> {
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
    fn enable(&mut self, regs: &fp::Registers, peers: &[(u64, SocketAddrV4)]) -> io::Result<()> {
        (**self).enable(regs, peers)
    }
    fn disable(&mut self) -> fp::Registers {
        (**self).disable()
    }
    fn max_inflight(&self) -> u64 {
        (**self).max_inflight()
    }
    fn drain(&mut self, out: &mut Vec<RingRecord>) {
        (**self).drain(out)
    }
    fn push(&mut self, pkt: &[u8]) -> io::Result<()> {
        (**self).push(pkt)
    }
    fn push_batch(&mut self, pkts: &[&[u8]]) -> io::Result<()> {
        (**self).push_batch(pkts)
    }
    fn drain_due(&self) -> bool {
        (**self).drain_due()
    }
    fn want_wakeups(&self, urgent: bool) {
        (**self).want_wakeups(urgent)
    }
    fn ring_fd(&self) -> Option<RawFd> {
        (**self).ring_fd()
    }
    fn before_sleep(&self) -> RingSleep {
        (**self).before_sleep()
    }
    fn after_sleep(&self) {
        (**self).after_sleep()
    }
    fn send_to(&self, pkt: &[u8], to: SocketAddr) -> io::Result<()> {
        (**self).send_to(pkt, to)
    }
    fn send_many(&self, pkts: &[(SocketAddr, Vec<u8>)]) -> usize {
        (**self).send_many(pkts)
    }
    fn registers(&self) -> fp::Registers {
        (**self).registers()
    }
    fn counters(&self) -> Counters {
        (**self).counters()
    }
    fn latency(&self) -> LatencyHistogram {
        (**self).latency()
    }
    fn socket(&self) -> io::Result<std::net::UdpSocket> {
        (**self).socket()
    }
    fn tick(&self) {
        (**self).tick()
    }
    fn leader_heard_ns(&self) -> u64 {
        (**self).leader_heard_ns()
    }
}

/// Milliseconds since the Unix epoch by the local clock.
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Socket buffer size the fast-path sockets ask for (the kernel caps it at
/// `net.core.{r,w}mem_max` unless root).
const SOCKET_BUFFER: libc::c_int = 32 << 20;

pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a live c_int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Large socket buffers: bursts of appends and acks (and a follower's held appends, which
/// reach the host through this socket) must not overflow while the reader is descheduled.
pub(crate) fn set_socket_buffers(fd: RawFd) {
    use waverunner_mmsg::{set_buffer, Buffer};
    set_buffer(fd, Buffer::Receive, SOCKET_BUFFER);
    set_buffer(fd, Buffer::Send, SOCKET_BUFFER);
}

/// [`DataPlane::send_many`] from a data plane's fast-path socket (`mmsg::send_all`).
fn send_many_from(sock: &std::net::UdpSocket, pkts: &[(SocketAddr, Vec<u8>)]) -> usize {
    use std::os::fd::AsRawFd;
    waverunner_mmsg::send_all(
        sock.as_raw_fd(),
        pkts.len(),
        |i| (pkts[i].0, pkts[i].1.as_slice()),
        |to, e| tracing::debug!("data plane: send to {to} failed: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A data plane whose every method with a default says it was called.
    struct Marked {
        calls: Arc<AtomicU32>,
    }

    impl Marked {
        fn mark(&self) {
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
    }

    impl DataPlane for Marked {
        fn kind(&self) -> &'static str {
            "marked"
        }
        fn max_inflight(&self) -> u64 {
            fp::SHED_INFLIGHT_XDP
        }
        fn enable(&mut self, _: &fp::Registers, _: &[(u64, SocketAddrV4)]) -> io::Result<()> {
            Ok(())
        }
        fn disable(&mut self) -> fp::Registers {
            fp::Registers::default()
        }
        fn drain(&mut self, _: &mut Vec<RingRecord>) {}
        fn push(&mut self, _: &[u8]) -> io::Result<()> {
            Ok(())
        }
        fn push_batch(&mut self, _: &[&[u8]]) -> io::Result<()> {
            self.mark();
            Ok(())
        }
        fn drain_due(&self) -> bool {
            self.mark();
            false
        }
        fn want_wakeups(&self, _: bool) {
            self.mark();
        }
        fn ring_fd(&self) -> Option<RawFd> {
            self.mark();
            Some(3)
        }
        fn before_sleep(&self) -> RingSleep {
            self.mark();
            RingSleep::Ready
        }
        fn after_sleep(&self) {
            self.mark();
        }
        fn send_to(&self, _: &[u8], _: SocketAddr) -> io::Result<()> {
            Ok(())
        }
        fn send_many(&self, _: &[(SocketAddr, Vec<u8>)]) -> usize {
            self.mark();
            7
        }
        fn registers(&self) -> fp::Registers {
            fp::Registers::default()
        }
        fn counters(&self) -> Counters {
            Counters::default()
        }
        fn latency(&self) -> LatencyHistogram {
            LatencyHistogram::default()
        }
        fn socket(&self) -> io::Result<std::net::UdpSocket> {
            self.mark();
            Err(io::ErrorKind::Unsupported.into())
        }
        fn tick(&self) {
            self.mark();
        }
        fn leader_heard_ns(&self) -> u64 {
            self.mark();
            42
        }
    }

    /// The node drives its data plane boxed: a method the box does not forward runs the
    /// trait's default instead (the host's tick replay once read "never heard" from a live
    /// XDP plane that way).
    #[test]
    fn a_boxed_data_plane_forwards_every_method_with_a_default() {
        let calls = Arc::new(AtomicU32::new(0));
        let mut b: Box<dyn DataPlane> = Box::new(Marked {
            calls: calls.clone(),
        });
        fn generic<P: DataPlane>(p: &mut P) -> u64 {
            p.push_batch(&[]).unwrap();
            let _ = p.drain_due();
            p.want_wakeups(true);
            assert_eq!(p.ring_fd(), Some(3));
            assert_eq!(p.before_sleep(), RingSleep::Ready);
            p.after_sleep();
            let _ = p.socket();
            p.tick();
            assert_eq!(p.send_many(&[]), 7);
            p.leader_heard_ns()
        }
        assert_eq!(generic(&mut b), 42);
        assert_eq!(
            calls.load(Ordering::Relaxed),
            10,
            "every call reached the plane"
        );
    }

    #[test]
    fn buckets_are_monotonic_and_floors_round_trip() {
        let mut last = 0;
        for v in [0u64, 1, 3, 4, 5, 7, 8, 100, 1_000, 9_000, 1 << 20, u64::MAX] {
            let b = bucket_of(v);
            assert!(b >= last, "bucket of {v}");
            last = b;
            assert!(bucket_floor(b) <= v, "floor of bucket {b} ≤ {v}");
        }
        for b in 0..HIST_BUCKETS {
            assert_eq!(bucket_of(bucket_floor(b)), b, "bucket {b}");
        }
    }
}
