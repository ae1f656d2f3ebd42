//! The XDP data plane (`--dataplane xdp`, `docs/dataplane.md`).
//!
//! The fast-path handler of `crates/fastpath/c` runs inside an XDP program (`bpf/`) attached in
//! native (driver) mode to the replica's interface. Its registers are a BPF global that this
//! module memory-maps ([`XdpProgram`]); its log ring is a BPF ring buffer that a thread of
//! [`XdpDataPlane`] consumes into a bounded queue.
//!
//! Threads of an [`XdpDataPlane`] (named so in `ps -L`):
//! - `xdp-host`: reads the fast-path socket (what the program passed up, everything while
//!   disabled) and calls [`Hooks::host_packet`]; not started when the host reads the socket
//!   itself (`host_packet` is `None`: the replica loop does, with no thread between);
//! - `xdp-ring`: waits on the BPF ring buffer, moves records into the queue (at most
//!   [`QUEUE_CAPACITY`]; when it is full the BPF ring fills and the program drops inputs,
//!   counted as `ring_full`), and calls [`Hooks::wake`]; not started when the host reads the
//!   ring itself (`wake` is `None`: the replica loop polls [`XdpProgram::ring_fd`]).
//!
//! Everything here needs root (`CAP_BPF`, `CAP_NET_ADMIN`).

use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, RingBuffer, RingBufferBuilder};
use waverunner_fastpath as fp;

use crate::{
    Config, Counters, DataPlane, Hooks, LatencyHistogram, RingEntry, RingRecord, HIST_BUCKETS,
};

#[allow(clippy::all, clippy::pedantic, missing_docs, unsafe_op_in_unsafe_fn)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/waverunner.skel.rs"));
}

use skel::{types, WaverunnerSkel, WaverunnerSkelBuilder};

/// XDP verdict `XDP_ABORTED`.
pub const XDP_ABORTED: u32 = 0;
/// XDP verdict `XDP_DROP`.
pub const XDP_DROP: u32 = 1;
/// XDP verdict `XDP_PASS`.
pub const XDP_PASS: u32 = 2;
/// XDP verdict `XDP_TX`.
pub const XDP_TX: u32 = 3;

/// Records the ring thread keeps queued for [`DataPlane::drain`] at most (twice
/// [`crate::RING_CAPACITY`]). Beyond it the thread stops consuming the BPF ring buffer (8 MiB:
/// at least 5548 maximum-size entries with their commit records), which then fills, and the
/// program drops inputs before handling them (`ring_full`).
pub const QUEUE_CAPACITY: usize = 2 * crate::RING_CAPACITY;

/// The multicast group appends go to when [`Config::multicast`] is `None`.
pub const DEFAULT_MULTICAST: Ipv4Addr = Ipv4Addr::new(239, 87, 82, 1);

/// Bytes of [`Config::blind_reply_body`] the program can send at most (`WR_BODY_MAX`).
pub const MAX_BLIND_REPLY_BODY: usize = 256;

/// Ring record kinds and sizes (`bpf/wr_ring.h`).
const REC_ENTRY: u32 = 1;
const REC_COMMIT: u32 = 2;
const REC_WAKE: u32 = 3;
const REC_HDR: usize = 48;
/// `BPF_F_TEST_XDP_LIVE_FRAMES`.
const TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Frames one pull carries at most (`WR_PUSH_SLOTS`).
pub const PUSH_SLOTS: usize = 64;
/// Bytes of one pushed frame at most (`WR_PUSH_FRAME_MAX`).
pub const PUSH_FRAME_MAX: usize = 1536;
/// The metadata that makes a test-run frame a pull (`WR_PULL_MAGIC`).
const PULL_MAGIC: u64 = 0x004c_4c55_5052_5777;
// The C header owns the layout: a slot is its length, a reserved word and the frame.
const _: () = assert!(std::mem::size_of::<types::wr_push_slot>() == 8 + PUSH_FRAME_MAX);
const _: () = assert!(
    std::mem::size_of::<types::bss>() >= PUSH_SLOTS * std::mem::size_of::<types::wr_push_slot>()
);
/// `BPF_XDP` attach type.
const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_DRV_MODE`.
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

fn bpf_err(what: &str, e: libbpf_rs::Error) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// What the program needs to know about where it runs (BPF globals, set before it sees a packet).
#[derive(Clone, Debug)]
pub struct XdpSettings {
    /// The fast-path UDP port (host order).
    pub port: u16,
    /// This replica's IPv4 address (the source of everything it sends).
    pub self_ip: Ipv4Addr,
    /// This replica's interface MAC address.
    pub self_mac: [u8; 6],
    /// The multicast group appends go to (MAC `01:00:5e` + its low 23 bits).
    pub multicast: Ipv4Addr,
    /// [`Config::blind_reply_body`] (at most [`MAX_BLIND_REPLY_BODY`] bytes; empty: the host
    /// answers every client).
    pub blind_reply_body: Vec<u8>,
}

/// The result of one non-live [`XdpProgram::test_run`].
#[derive(Clone, Debug)]
pub struct TestRun {
    /// The XDP verdict ([`XDP_PASS`], [`XDP_TX`], [`XDP_DROP`], ...).
    pub verdict: u32,
    /// The frame as the program left it.
    pub frame: Vec<u8>,
}

/// The consumer side of the BPF ring buffer: libbpf's consumer and the records it parsed.
struct RingState {
    ring: RingBuffer<'static>,
}

// SAFETY: the libbpf ring buffer consumer is used by one thread at a time (it lives in a
// Mutex); its callback only touches the queue, which is itself behind a Mutex.
unsafe impl Send for RingState {}

/// The loaded XDP program, not attached anywhere: registers, ring, counters and
/// `BPF_PROG_TEST_RUN`. [`XdpDataPlane`] attaches one; tests drive one directly.
pub struct XdpProgram {
    skel: WaverunnerSkel<'static>,
    bss: *mut types::bss,
    ring: Mutex<RingState>,
    queue: Arc<Mutex<VecDeque<RingRecord>>>,
    ring_epoll: RawFd,
    /// Wake records read (`bpf/wr_ring.h`): how often a producer woke the sleeping reader.
    wakeups: Arc<AtomicU64>,
    /// The reader is in (or about to enter) its sleep in [`XdpProgram::consume_or_wait`]: a
    /// [`XdpProgram::drain`] that consumes meanwhile sets its flag again (see there).
    reader_asleep: AtomicBool,
    /// [`XdpProgram::hold_wakeups`] was called and no [`XdpProgram::drain`] followed yet.
    held: AtomicBool,
    /// Held through a pull ([`XdpProgram::run_live_batch`]): the push slots have one writer.
    pulling: Mutex<()>,
    /// The host wants every record at once ([`XdpProgram::want_wakeups`]); else the reader,
    /// while records keep coming, looks every [`RING_NAP`] instead of being woken per record.
    urgent: AtomicBool,
    /// The host reads the ring itself on its loop ([`XdpProgram::read_by_host`]): no reader
    /// thread sleeps on it.
    host_reads: AtomicBool,
    /// The host reads the ring and its last drain took records: they keep coming.
    recent: AtomicBool,
}

// SAFETY: `bss` points to the memory-mapped `.bss` of the loaded object, valid as long as
// `skel` lives; every access to shared words is volatile or atomic (the BPF program mutates
// them concurrently anyway). Test runs are syscalls on the program's fd. The ring consumer is
// behind a Mutex.
unsafe impl Send for XdpProgram {}
// SAFETY: as above.
unsafe impl Sync for XdpProgram {}

impl XdpProgram {
    /// Loads the program (the verifier runs here) and sets its globals. Registers start zero
    /// (disabled).
    pub fn load(settings: &XdpSettings) -> io::Result<XdpProgram> {
        if settings.blind_reply_body.len() > MAX_BLIND_REPLY_BODY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "blind reply body of {} bytes: the XDP program sends at most {MAX_BLIND_REPLY_BODY}",
                    settings.blind_reply_body.len()
                ),
            ));
        }
        // The skeleton borrows its object storage for its whole life; one small allocation
        // per load is leaked for it (the object itself is freed when the skeleton drops).
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let open = WaverunnerSkelBuilder::default()
            .open(storage)
            .map_err(|e| bpf_err("opening the XDP object", e))?;
        let mut skel = open
            .load()
            .map_err(|e| bpf_err("loading the XDP program (verifier)", e))?;
        let bss: *mut types::bss = match skel.maps.bss_data.as_deref_mut() {
            Some(b) => b,
            None => return Err(io::Error::other("the XDP object has no memory-mapped .bss")),
        };

        let queue: Arc<Mutex<VecDeque<RingRecord>>> = Arc::default();
        let q = Arc::clone(&queue);
        let wakeups: Arc<AtomicU64> = Arc::default();
        let w = Arc::clone(&wakeups);
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&skel.maps.wr_ring, move |data: &[u8]| {
                if let Some(rec) = parse_record(data) {
                    q.lock().unwrap_or_else(|e| e.into_inner()).push_back(rec);
                } else if data.len() >= 4 && le32(data, 0) == REC_WAKE {
                    w.fetch_add(1, Ordering::Relaxed);
                }
                0
            })
            .map_err(|e| bpf_err("ring buffer", e))?;
        let ring = builder.build().map_err(|e| bpf_err("ring buffer", e))?;
        let ring_epoll = ring.epoll_fd();

        let prog = XdpProgram {
            skel,
            bss,
            ring: Mutex::new(RingState { ring }),
            wakeups,
            reader_asleep: AtomicBool::new(false),
            held: AtomicBool::new(false),
            pulling: Mutex::new(()),
            urgent: AtomicBool::new(true),
            host_reads: AtomicBool::new(false),
            recent: AtomicBool::new(false),
            queue,
            ring_epoll,
        };
        // SAFETY: nothing runs the program yet; plain writes to the mapped .bss.
        unsafe {
            let b = &mut *prog.bss;
            b.fp_port = settings.port.to_be();
            b.shed_inflight = fp::SHED_INFLIGHT_XDP;
            b.self_ip = u32::from_ne_bytes(settings.self_ip.octets());
            b.group_ip = u32::from_ne_bytes(settings.multicast.octets());
            b.self_mac = settings.self_mac;
            b.blind_reply_body = [0; MAX_BLIND_REPLY_BODY];
            b.blind_reply_body[..settings.blind_reply_body.len()]
                .copy_from_slice(&settings.blind_reply_body);
            b.blind_reply_len = settings.blind_reply_body.len() as u32;
        }
        prog.refresh_clock();
        Ok(prog)
    }

    fn regs_ptr(&self) -> *mut fp::Registers {
        const _: () = assert!(
            std::mem::size_of::<types::fp_registers>() == std::mem::size_of::<fp::Registers>()
        );
        // SAFETY: `bss` is valid for the life of `self`; only the address is taken.
        unsafe { std::ptr::addr_of_mut!((*self.bss).regs).cast::<fp::Registers>() }
    }

    fn enabled_word(&self) -> &AtomicU32 {
        // SAFETY: `enabled` is an aligned u32 in the mapped .bss, valid for the life of `self`.
        unsafe { &*std::ptr::addr_of_mut!((*self.regs_ptr()).enabled).cast::<AtomicU32>() }
    }

    /// Writes the registers: `enabled` is cleared first (and every invocation in flight
    /// waited for, as in [`XdpProgram::disable`]) and written last, after a fence, so the
    /// handler never runs on half-written registers.
    pub fn write_registers(&self, regs: &fp::Registers) {
        let en = self.enabled_word();
        self.disable();
        let mut r = *regs;
        r.enabled = 0;
        // SAFETY: aligned pointer into the mapped .bss.
        unsafe { std::ptr::write_volatile(self.regs_ptr(), r) };
        fence(Ordering::SeqCst);
        en.store(regs.enabled, Ordering::SeqCst);
    }

    /// Follower: when an append of its term last came (`fp_leader_heard_inline`, taken or
    /// not; `bpf_ktime_get_ns()`, [`crate::monotonic_ns`]; 0: never).
    pub fn heard_ns(&self) -> u64 {
        // SAFETY: aligned u64 in the mapped .bss.
        unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.bss).heard_ns)) }
    }

    /// The registers now (a racy copy while the program runs).
    pub fn read_registers(&self) -> fp::Registers {
        fence(Ordering::SeqCst);
        // SAFETY: aligned pointer into the mapped .bss.
        unsafe { std::ptr::read_volatile(self.regs_ptr()) }
    }

    /// Clears the enable flag and waits until no invocation is in flight (`docs/dataplane.md`
    /// "Concurrency"). Returns the registers as the program left them.
    pub fn disable(&self) -> fp::Registers {
        self.enabled_word().store(0, Ordering::SeqCst);
        let start = Instant::now();
        let mut warned = false;
        while self.in_flight() != 0 {
            if !warned && start.elapsed() > Duration::from_secs(1) {
                tracing::warn!("xdp: invocations still in flight 1 s after disable");
                warned = true;
            }
            std::hint::spin_loop();
        }
        self.read_registers()
    }

    /// Invocations in flight, summed over CPUs.
    pub fn in_flight(&self) -> u64 {
        // SAFETY: `inflight` is an aligned u64 array in the mapped .bss; the program updates
        // it with atomic adds, so it is read atomically too.
        let slots = unsafe { &*std::ptr::addr_of!((*self.bss).inflight) };
        slots
            .iter()
            .map(|w| {
                // SAFETY: same word, viewed as an atomic.
                let a = unsafe { &*(w as *const u64).cast::<AtomicU64>() };
                a.load(Ordering::SeqCst)
            })
            .fold(0u64, u64::wrapping_add)
    }

    /// The leader's window the program sheds at (`shed_inflight`, set at load).
    pub fn shed_inflight(&self) -> u64 {
        // SAFETY: aligned u64 in the mapped .bss, written once at load.
        unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.bss).shed_inflight)) }
    }

    /// Follower: appends at most `n` entries ahead of the log go to the host (which holds
    /// them until the gap fills) instead of through the handler's gap rule; 0 turns it off
    /// (the handler vectors run with it off).
    pub fn set_reorder_window(&self, n: u32) {
        // SAFETY: aligned u32 in the mapped .bss.
        unsafe { std::ptr::write_volatile(std::ptr::addr_of_mut!((*self.bss).reorder_window), n) };
    }

    /// Sets the clock offset the leader stamps entries with: `CLOCK_REALTIME −
    /// CLOCK_MONOTONIC` (the program adds it to `bpf_ktime_get_ns()`).
    pub fn refresh_clock(&self) {
        let off = wall_offset_ns();
        // SAFETY: aligned u64 in the mapped .bss.
        unsafe {
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*self.bss).wall_offset_ns), off)
        };
    }

    /// Runs the program once on `frame` with `BPF_PROG_TEST_RUN` (not live: nothing is sent;
    /// the rewritten frame is returned). Ring records it produces are on the ring.
    pub fn test_run(&self, frame: &[u8]) -> io::Result<TestRun> {
        let mut out = vec![0u8; frame.len() + 4096];
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ..Default::default()
        };
        let res = self
            .skel
            .progs
            .waverunner_xdp
            .test_run(input)
            .map_err(|e| bpf_err("BPF_PROG_TEST_RUN", e))?;
        let verdict = res.return_value;
        let n = res.data.as_ref().map_or(0, |d| d.len());
        out.truncate(n);
        Ok(TestRun {
            verdict,
            frame: out,
        })
    }

    /// Runs the program on each of `frames` in order, as if they had arrived on interface
    /// `ifindex`, in one syscall: the frames go to the program's push slots and one live test
    /// run repeats a pull frame `frames.len()` times, each repetition becoming the next frame
    /// (`bpf/wr_maps.h` "push_q"). A live test run sets up and tears down a page pool per
    /// syscall: with one syscall per frame that was a fifth of the leader thread's time at
    /// pipeline 16. At most [`PUSH_SLOTS`] frames of [`PUSH_FRAME_MAX`] bytes: as many as the
    /// kernel's default batch of a live test run (64), so every repetition gets a page freshly
    /// initialised with the pull frame, none a recycled one. Live frames
    /// (`BPF_F_TEST_XDP_LIVE_FRAMES`): `XDP_TX` sends a frame out of interface `ifindex`,
    /// `XDP_PASS` hands it to that interface's stack; `ifindex` is looked up in the network
    /// namespace of the calling thread.
    pub fn run_live_batch(&self, frames: &[Vec<u8>], ifindex: u32) -> io::Result<()> {
        self.pull(frames.len(), ifindex, |i, slot| {
            let f = &frames[i];
            slot.get_mut(..f.len())
                .map(|s| {
                    s.copy_from_slice(f);
                    f.len()
                })
                .ok_or_else(too_large)
        })
    }

    /// [`XdpProgram::run_live_batch`] on `n` frames that `fill(i, slot)` writes straight into
    /// push slot `i` (returning the frame's length): the host's pushes are not copied once
    /// more on the way.
    fn pull(
        &self,
        n: usize,
        ifindex: u32,
        mut fill: impl FnMut(usize, &mut [u8]) -> io::Result<usize>,
    ) -> io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        if n > PUSH_SLOTS {
            return Err(too_large());
        }
        let _one_pull = self.pulling.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `bss` is the mapped .bss; the slots and counters are read by the program
        // only during the test run below, which this thread (the only pusher, under
        // `pulling`) starts after writing them (the syscall orders the writes before the
        // program's reads). A slot's frame is PUSH_FRAME_MAX bytes (asserted above).
        unsafe {
            let bss = self.bss;
            for i in 0..n {
                let slot = std::ptr::addr_of_mut!((*bss).push_q[i]);
                let dst = std::ptr::addr_of_mut!((*slot).frame) as *mut u8;
                let len = fill(i, std::slice::from_raw_parts_mut(dst, PUSH_FRAME_MAX))?;
                std::ptr::addr_of_mut!((*slot).len).write_volatile(len as u32);
            }
            std::ptr::addr_of_mut!((*bss).push_count).write_volatile(n as u32);
            std::ptr::addr_of_mut!((*bss).push_next).write_volatile(0);
        }
        fence(Ordering::SeqCst);
        // The pull frame: 8 bytes of metadata (the magic), then a minimal Ethernet frame that
        // each repetition replaces.
        let mut data = [0u8; 8 + 64];
        data[..8].copy_from_slice(&PULL_MAGIC.to_le_bytes());
        // struct xdp_md: data (= the metadata's length), data_end, data_meta, ingress_ifindex,
        // rx_queue_index, egress_ifindex.
        let md: [u32; 6] = [8, data.len() as u32, 0, ifindex, 0, 0];
        let mut ctx = [0u8; 24];
        for (i, w) in md.iter().enumerate() {
            ctx[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
        }
        let input = libbpf_rs::ProgramInput {
            data_in: Some(&data),
            context_in: Some(&mut ctx),
            flags: TEST_XDP_LIVE_FRAMES,
            repeat: n as u32,
            ..Default::default()
        };
        self.skel
            .progs
            .waverunner_xdp
            .test_run(input)
            .map_err(|e| bpf_err("BPF_PROG_TEST_RUN (pull)", e))?;
        // SAFETY: as above; the program is done with the counters.
        let taken = unsafe { std::ptr::addr_of!((*self.bss).push_next).read_volatile() };
        if (taken as usize) < n {
            return Err(io::Error::other(format!(
                "a pull took {taken} of {n} frames"
            )));
        }
        Ok(())
    }

    fn ring_waiting_word(&self) -> &AtomicU32 {
        // SAFETY: `ring_waiting` is an aligned u32 in the mapped .bss, valid for the life of
        // `self`; the program exchanges it atomically, so it is accessed atomically here too.
        unsafe {
            &*std::ptr::addr_of_mut!((*self.bss).ring_waiting)
                .cast::<u32>()
                .cast::<AtomicU32>()
        }
    }

    /// Says whether the ring's reader sleeps (`bpf/wr_ring.h`, wake-ups): while set, the next
    /// invocation that submits a record clears it and adds a wake record. Sequentially
    /// consistent, so that a look at the ring after setting it cannot miss a record whose
    /// producer did not see it set.
    pub fn set_ring_waiting(&self, waiting: bool) {
        self.ring_waiting_word()
            .store(waiting as u32, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Whether the reader's flag is still set (no producer has taken it).
    pub fn ring_waiting(&self) -> bool {
        self.ring_waiting_word().load(Ordering::SeqCst) != 0
    }

    /// Wake records read so far: how many times a producer woke the sleeping reader.
    pub fn ring_wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Consumes at most `max` records from the BPF ring into the queue; returns how many.
    fn consume(&self, max: usize) -> usize {
        let st = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let n = st.ring.consume_raw_n(max);
        n.max(0) as usize
    }

    /// Consumes at most `max` records into the queue; with none on the ring, sleeps until a
    /// producer wakes it or `timeout` passes, then consumes. Returns how many it consumed.
    /// It sleeps only after it found the ring empty with its flag set (`bpf/wr_ring.h`), so
    /// producers wake it only while it sleeps: no wake-up per record while it is busy.
    pub fn consume_or_wait(&self, max: usize, timeout: Duration) -> usize {
        let n = self.consume(max);
        if n > 0 {
            return n;
        }
        // Empty: set the flag, then look once more (a record submitted before its producer
        // could see the flag is found here; one after comes with a wake record). Asleep is
        // said first, so that a drain that takes the record and its wake record sees it.
        self.reader_asleep.store(true, Ordering::SeqCst);
        self.set_ring_waiting(true);
        let n = self.consume(max);
        if n > 0 {
            self.set_ring_waiting(false);
            self.reader_asleep.store(false, Ordering::SeqCst);
            return n;
        }
        self.wait_ring(timeout.as_millis().min(i32::MAX as u128) as i32);
        self.reader_asleep.store(false, Ordering::SeqCst);
        self.consume(max)
    }

    /// Sleeps on the ring's epoll for at most `ms` (a wake record cuts it short). An error
    /// other than an interrupt is logged and slept off, so a broken descriptor cannot spin.
    fn wait_ring(&self, ms: i32) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: the epoll fd lives as long as `self`; one event buffer.
        let r = unsafe { libc::epoll_wait(self.ring_epoll, &mut ev, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!("xdp-ring: epoll_wait: {e}");
                std::thread::sleep(Duration::from_millis(ms.clamp(1, 10) as u64));
            }
        }
    }

    /// The caller drains the ring itself ([`XdpProgram::drain`]) after what it runs next: until
    /// then, records do not wake the sleeping reader. The replica loop says so before it pushes
    /// (`XdpDataPlane::push`): the program runs in its own syscall, often with the followers'
    /// acks processed in the same softirq, so the entry and its commit are on the ring when the
    /// push returns, and waking the `xdp-ring` thread for them (a self-interrupt, a thread
    /// switch and an event to the loop) would only tell the loop what it is about to read.
    pub fn hold_wakeups(&self) {
        self.held.store(true, Ordering::SeqCst);
        self.set_ring_waiting(false);
    }

    /// Whether the host needs each record as soon as it is on the ring (a leader answers
    /// clients from commit records; a follower with requests waiting on its applied index, or
    /// acknowledging after fsync), or may read them in batches up to [`RING_NAP`] late (a
    /// follower nobody waits on: its entries are acknowledged by the program). Turning it on
    /// arms the reader's wake-up at once; the caller then drains what is already there.
    pub fn want_wakeups(&self, urgent: bool) {
        let turned_on = self.urgent.swap(urgent, Ordering::SeqCst) != urgent && urgent;
        // A host that reads the ring is awake when it says so, and drains every turn.
        if turned_on && !self.host_reads.load(Ordering::Relaxed) {
            self.set_ring_waiting(true);
        }
    }

    /// From now on the host reads the ring itself, on its event loop, instead of a thread: it
    /// polls [`XdpProgram::ring_fd`], drains every turn ([`XdpProgram::drain`]), and is the
    /// reader that sleeps ([`XdpProgram::before_sleep`], [`XdpProgram::after_sleep`]). A
    /// busy loop then costs producers no wake-up at all, a sleeping one a wake record per
    /// sleep, and no thread switch lies between a record and the loop.
    pub fn read_by_host(&self) {
        self.host_reads.store(true, Ordering::SeqCst);
    }

    /// The ring buffer map's descriptor: readable while records are on the ring; a wake record
    /// (forced wake-up) reports it to a poll that waits on it.
    pub fn ring_fd(&self) -> RawFd {
        self.skel.maps.wr_ring.as_fd().as_raw_fd()
    }

    /// The host that reads the ring is about to sleep. A follower nobody waits on, whose last
    /// drain took records, naps ([`RING_NAP`]) instead of being woken per record. Otherwise the
    /// reader's flag is set and the ring looked at once more (`bpf/wr_ring.h`): records found
    /// there mean no sleep; else a producer sees the flag and rings a wake record.
    pub fn before_sleep(&self) -> crate::RingSleep {
        if !self.urgent.load(Ordering::SeqCst) && self.recent.load(Ordering::Relaxed) {
            return crate::RingSleep::Nap(RING_NAP);
        }
        self.set_ring_waiting(true);
        if self.consume(usize::MAX) > 0 || self.queued() > 0 {
            self.set_ring_waiting(false);
            return crate::RingSleep::Ready;
        }
        crate::RingSleep::Armed
    }

    /// The host that reads the ring woke: while it is awake no record rings for it.
    pub fn after_sleep(&self) {
        self.set_ring_waiting(false);
    }

    /// See [`XdpProgram::want_wakeups`].
    pub fn wakeups_wanted(&self) -> bool {
        self.urgent.load(Ordering::SeqCst)
    }

    /// Sleeps on the ring for at most `t` without asking to be woken: only a wake record
    /// rung for another reason (the host turned [`XdpProgram::want_wakeups`] on) cuts it short.
    pub fn nap(&self, t: Duration) {
        self.wait_ring(t.as_millis().clamp(1, i32::MAX as u128) as i32);
    }

    /// Whether [`XdpProgram::hold_wakeups`] was called since the last drain.
    pub fn wakeups_held(&self) -> bool {
        self.held.load(Ordering::SeqCst)
    }

    /// Moves every record on the ring (and in the queue) to `out`, in ring order.
    ///
    /// If the reader sleeps meanwhile, a record this takes may have come with the wake record
    /// meant for it, and taking that too leaves the reader's epoll with nothing to report:
    /// it sleeps on with its flag cleared, and later records would wait for its timeout
    /// (seen: one write in a hundred took 10 ms, the replica's tick). So the flag is set again
    /// and the ring looked at once more, as the reader does before it sleeps.
    pub fn drain(&self, out: &mut Vec<RingRecord>) {
        let st = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        self.held.store(false, Ordering::SeqCst);
        let _ = st.ring.consume_raw();
        if self.reader_asleep.load(Ordering::SeqCst) {
            self.set_ring_waiting(true);
            let _ = st.ring.consume_raw();
        }
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        self.recent.store(!q.is_empty(), Ordering::Relaxed);
        out.extend(q.drain(..));
    }

    fn queued(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Counters summed over CPUs.
    pub fn counters(&self) -> Counters {
        // `struct wr_counters`: one u64 per field of `Counters`, in its order.
        let mut c = [0u64; 10];
        if let Ok(Some(per_cpu)) = self
            .skel
            .maps
            .wr_counters
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        {
            for v in per_cpu {
                debug_assert_eq!(v.len(), c.len() * 8, "struct wr_counters changed");
                for (i, slot) in c.iter_mut().enumerate() {
                    *slot += read_u64(&v, i * 8);
                }
            }
        }
        Counters {
            handled: c[0],
            punted: c[1],
            dropped: c[2],
            retx_requests: c[3],
            client_replies: c[4],
            ring_full: c[5],
            halts: c[6],
            malformed: c[7],
            shed: c[8],
            shed_unanswered: c[9],
        }
    }

    /// The replication latency histogram summed over CPUs.
    pub fn latency(&self) -> LatencyHistogram {
        let mut buckets = vec![0u64; HIST_BUCKETS];
        if let Ok(Some(per_cpu)) = self
            .skel
            .maps
            .wr_latency
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        {
            for v in per_cpu {
                for (i, b) in buckets.iter_mut().enumerate() {
                    *b += read_u64(&v, i * 8);
                }
            }
        }
        LatencyHistogram { buckets }
    }

    fn prog_fd(&self) -> RawFd {
        self.skel.progs.waverunner_xdp.as_fd().as_raw_fd()
    }
}

fn read_u64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map_or(0, |s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
}

fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Parses one ring record (layout in `docs/dataplane.md` "Ring records").
fn parse_record(b: &[u8]) -> Option<RingRecord> {
    if b.len() < REC_HDR {
        return None;
    }
    match le32(b, 0) {
        REC_ENTRY => {
            let len = (le16(b, 6) as usize).min(b.len() - REC_HDR);
            let ip = Ipv4Addr::new(b[40], b[41], b[42], b[43]);
            let port = u16::from_be_bytes([b[44], b[45]]);
            Some(RingRecord::Entry(RingEntry {
                index: le64(b, 8),
                term: le64(b, 16),
                flags: le16(b, 4),
                from: le64(b, 24),
                seq: le64(b, 32),
                source: (!ip.is_unspecified()).then(|| SocketAddrV4::new(ip, port)),
                payload: b[REC_HDR..REC_HDR + len].to_vec(),
            }))
        }
        REC_COMMIT => Some(RingRecord::Commit {
            index: le64(b, 8),
            replied: le16(b, 4) & 1 != 0,
        }),
        _ => None,
    }
}

/// `CLOCK_REALTIME − CLOCK_MONOTONIC` in nanoseconds (what `bpf_ktime_get_ns()` lacks to be a
/// wall clock).
pub fn wall_offset_ns() -> u64 {
    fn now(clock: libc::clockid_t) -> i128 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out pointer.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
    }
    let mono = now(libc::CLOCK_MONOTONIC);
    let real = now(libc::CLOCK_REALTIME);
    let mono2 = now(libc::CLOCK_MONOTONIC);
    (real - (mono + mono2) / 2).max(0) as u64
}

fn too_large() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("a pull carries at most {PUSH_SLOTS} frames of {PUSH_FRAME_MAX} bytes"),
    )
}

/// Bytes of the Ethernet, IPv4 and UDP headers of [`udp_frame`].
pub const FRAME_HEADERS: usize = 42;

/// An Ethernet/IPv4/UDP frame (IPv4 checksum set, UDP checksum 0) carrying `payload`.
pub fn udp_frame(
    src_mac: [u8; 6],
    src: SocketAddrV4,
    dst_mac: [u8; 6],
    dst: SocketAddrV4,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME_HEADERS + payload.len());
    f.extend_from_slice(&frame_headers(src_mac, src, dst_mac, dst, payload.len()));
    f.extend_from_slice(payload);
    f
}

/// The headers of [`udp_frame`] for a payload of `len` bytes.
fn frame_headers(
    src_mac: [u8; 6],
    src: SocketAddrV4,
    dst_mac: [u8; 6],
    dst: SocketAddrV4,
    len: usize,
) -> [u8; FRAME_HEADERS] {
    let mut f = [0u8; FRAME_HEADERS];
    f[..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let tot = (20 + 8 + len) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&tot.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.ip().octets());
    ip[16..20].copy_from_slice(&dst.ip().octets());
    let mut sum: u32 = ip
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum();
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[14..34].copy_from_slice(&ip);
    f[34..36].copy_from_slice(&src.port().to_be_bytes());
    f[36..38].copy_from_slice(&dst.port().to_be_bytes());
    f[38..40].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    f
}

/// Index, MAC and first IPv4 address of interface `name`, looked up in the calling thread's
/// network namespace (ioctls on a socket, not /sys, which shows the namespace it was mounted
/// in).
pub fn interface_info(name: &str) -> io::Result<(u32, [u8; 6], Option<Ipv4Addr>)> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?}"),
        ));
    }
    // SAFETY: plain socket call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket we own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    let ioctl = |req: &mut libc::ifreq, op: libc::Ioctl| -> io::Result<()> {
        // SAFETY: `req` is a valid ifreq for these SIOCGIF* requests.
        if unsafe { libc::ioctl(sock.as_raw_fd(), op, req as *mut libc::ifreq) } < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    let mut r = req;
    ioctl(&mut r, libc::SIOCGIFINDEX)
        .map_err(|e| io::Error::new(e.kind(), format!("no interface {name:?}: {e}")))?;
    // SAFETY: SIOCGIFINDEX filled the ifindex member.
    let ifindex = unsafe { r.ifr_ifru.ifru_ifindex } as u32;
    let mut r = req;
    ioctl(&mut r, libc::SIOCGIFHWADDR)?;
    let mut mac = [0u8; 6];
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member.
    let hw = unsafe { r.ifr_ifru.ifru_hwaddr };
    for (m, b) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *m = *b as u8;
    }
    let mut r = req;
    let ip = match ioctl(&mut r, libc::SIOCGIFADDR) {
        Ok(()) => {
            // SAFETY: SIOCGIFADDR filled the addr member with a sockaddr_in.
            let sa = unsafe { r.ifr_ifru.ifru_addr };
            // sockaddr_in: family (2), port (2), address (4).
            let d = sa.sa_data;
            Some(Ipv4Addr::new(
                d[2] as u8, d[3] as u8, d[4] as u8, d[5] as u8,
            ))
        }
        Err(_) => None,
    };
    Ok((ifindex, mac, ip))
}

/// Attaches a trivial `XDP_PASS` program to `ifname` in native (driver) mode through netlink,
/// so it stays attached after this process exits (until the interface goes or another program
/// replaces it). `XDP_TX` on a veth drops every frame unless the peer end has an XDP program
/// (DESIGN §5): the cluster harness calls this on the far end of every replica's veth. The
/// interface is looked up in the calling thread's network namespace.
pub fn attach_pass_through(ifname: &str) -> io::Result<()> {
    let (ifindex, _, _) = interface_info(ifname)?;
    // r0 = XDP_PASS; exit.
    let insns = [
        libbpf_sys::bpf_insn {
            code: 0xb7, // BPF_ALU64 | BPF_MOV | BPF_K
            _bitfield_align_1: [],
            _bitfield_1: libbpf_sys::bpf_insn::new_bitfield_1(0, 0),
            off: 0,
            imm: XDP_PASS as i32,
        },
        libbpf_sys::bpf_insn {
            code: 0x95, // BPF_JMP | BPF_EXIT
            _bitfield_align_1: [],
            _bitfield_1: libbpf_sys::bpf_insn::new_bitfield_1(0, 0),
            off: 0,
            imm: 0,
        },
    ];
    let name = c"wr_xdp_pass";
    let license = c"GPL";
    // SAFETY: valid instruction array and C strings; null opts mean defaults.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_XDP,
            name.as_ptr(),
            license.as_ptr(),
            insns.as_ptr(),
            insns.len() as libbpf_sys::size_t,
            std::ptr::null_mut(),
        )
    };
    if fd < 0 {
        return Err(io::Error::other(format!(
            "loading the pass-through XDP program: {}",
            io::Error::from_raw_os_error(-fd)
        )));
    }
    // SAFETY: a fresh fd we own; the kernel keeps the program while it is attached.
    let prog = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscall wrapper; null opts.
    let rc = unsafe {
        libbpf_sys::bpf_xdp_attach(
            ifindex as i32,
            prog.as_raw_fd(),
            XDP_FLAGS_DRV_MODE,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        return Err(io::Error::other(format!(
            "attaching a pass-through XDP program in native mode to {ifname}: {}",
            io::Error::from_raw_os_error(-rc)
        )));
    }
    Ok(())
}

/// Attaches `prog_fd` to `ifindex` in native mode as a BPF link (detached when the link fd
/// closes, from any thread or namespace, and when the process dies).
fn attach_native_link(prog_fd: RawFd, ifindex: u32, ifname: &str) -> io::Result<OwnedFd> {
    // SAFETY: zero is a valid value of this plain C struct.
    let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as libbpf_sys::size_t;
    opts.flags = XDP_FLAGS_DRV_MODE;
    // SAFETY: valid fds and options.
    let fd = unsafe { libbpf_sys::bpf_link_create(prog_fd, ifindex as i32, BPF_XDP, &opts) };
    if fd < 0 {
        let e = io::Error::from_raw_os_error(-fd);
        return Err(io::Error::new(
            e.kind(),
            format!(
                "cannot attach the XDP data plane in native (driver) mode to {ifname}: {e} \
                 (the driver must support native XDP, e.g. veth, and no other XDP program may \
                 be attached; there is no fallback to generic mode)"
            ),
        ));
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The XDP data plane of one replica (see the module docs).
pub struct XdpDataPlane {
    prog: Arc<XdpProgram>,
    ifindex: u32,
    self_mac: [u8; 6],
    self_addr: SocketAddrV4,
    socket: UdpSocket,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    link: Option<OwnedFd>,
}

impl XdpDataPlane {
    /// Loads the program, sets its globals (port, this interface's MAC and IP, the multicast
    /// group, the blind reply body, the clock offset; registers disabled with `self_id` and
    /// `group_id`), binds the fast-path socket on `cfg.bind`, attaches the program in native
    /// mode to `cfg.interface` (an error if that fails: never a silent fallback) and starts
    /// the `xdp-host` and `xdp-ring` threads. Must be called from a thread in the network
    /// namespace of the interface; needs root.
    pub fn open(cfg: &Config, hooks: Hooks) -> io::Result<XdpDataPlane> {
        let ifname = cfg.interface.as_deref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the xdp data plane needs an interface (Config::interface)",
            )
        })?;
        let (ifindex, self_mac, if_ip) = interface_info(ifname)?;
        let self_ip = if cfg.bind.ip().is_unspecified() {
            if_ip.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{ifname} has no IPv4 address and the bind address is unspecified"),
                )
            })?
        } else {
            *cfg.bind.ip()
        };
        let self_addr = SocketAddrV4::new(self_ip, cfg.bind.port());
        let settings = XdpSettings {
            port: cfg.bind.port(),
            self_ip,
            self_mac,
            multicast: cfg.multicast.unwrap_or(DEFAULT_MULTICAST),
            blind_reply_body: cfg.blind_reply_body.clone(),
        };
        let prog = Arc::new(XdpProgram::load(&settings)?);
        prog.set_reorder_window(fp::REORDER_WINDOW);
        prog.write_registers(&fp::Registers {
            self_id: cfg.self_id,
            group_id: cfg.group_id as u64,
            ..Default::default()
        });

        let socket = UdpSocket::bind(cfg.bind)?;
        // A follower's held appends come up through this socket in bursts while the host is
        // busy: the default buffer (about 200 packets) dropped them.
        crate::set_socket_buffers(socket.as_raw_fd());
        socket.set_read_timeout(Some(Duration::from_millis(200)))?;
        let link = attach_native_link(prog.prog_fd(), ifindex, ifname)?;

        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        if let Some(host) = hooks.host_packet.clone() {
            let sock = socket.try_clone()?;
            let stop = Arc::clone(&stop);
            threads.push(
                std::thread::Builder::new()
                    .name("xdp-host".into())
                    .spawn(move || {
                        let mut buf = vec![0u8; 65536];
                        while !stop.load(Ordering::Relaxed) {
                            match sock.recv_from(&mut buf) {
                                Ok((n, src)) => {
                                    if stop.load(Ordering::Relaxed) {
                                        break;
                                    }
                                    host(src, &buf[..n]);
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        io::ErrorKind::WouldBlock
                                            | io::ErrorKind::TimedOut
                                            | io::ErrorKind::Interrupted
                                    ) => {}
                                Err(e) => {
                                    tracing::warn!("xdp-host: recv: {e}");
                                    std::thread::sleep(Duration::from_millis(10));
                                }
                            }
                        }
                    })?,
            );
        }
        if let Some(wake) = hooks.wake.clone() {
            let prog = Arc::clone(&prog);
            let stop = Arc::clone(&stop);
            threads.push(
                std::thread::Builder::new()
                    .name("xdp-ring".into())
                    .spawn(move || ring_thread(&prog, &stop, &*wake))?,
            );
        } else {
            prog.read_by_host();
        }
        tracing::info!(
            "xdp data plane attached to {ifname} (ifindex {ifindex}), fast path {self_addr}, \
             multicast {}",
            settings.multicast
        );
        Ok(XdpDataPlane {
            prog,
            ifindex,
            self_mac,
            self_addr,
            socket,
            stop,
            threads,
            link: Some(link),
        })
    }

    /// Refreshes the wall-clock offset the leader stamps entries with (`waverunner_fastpath::payload::ENV_OFF_NOW_MS`); the
    /// replica calls it every tick (also what [`DataPlane::tick`] does).
    pub fn refresh_clock(&self) {
        self.prog.refresh_clock();
    }

    /// The loaded program (registers, test runs), e.g. for status pages and tests.
    pub fn program(&self) -> &XdpProgram {
        &self.prog
    }

    /// The fast-path address (IP of the interface, port of [`Config::bind`]).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.self_addr
    }
}

/// Moves ring records into the queue and wakes the replica loop. While the host does not
/// want every record at once ([`XdpProgram::want_wakeups`]) and records keep coming, it naps
/// [`RING_NAP`] between looks instead of asking to be woken: one wake-up of the loop per nap
/// for the records of many appends. When a look finds nothing it sleeps until woken, as ever.
fn ring_thread(prog: &XdpProgram, stop: &AtomicBool, wake: &(dyn Fn() + Send + Sync)) {
    let mut napping = false;
    while !stop.load(Ordering::Relaxed) {
        let room = QUEUE_CAPACITY.saturating_sub(prog.queued());
        if room == 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let n = if napping && !prog.wakeups_wanted() {
            prog.nap(RING_NAP);
            prog.consume(room)
        } else {
            prog.consume_or_wait(room, RING_WAIT)
        };
        napping = n > 0;
        if n > 0 {
            wake();
        }
    }
}

/// How long the ring thread sleeps at most (it then looks at its stop flag).
const RING_WAIT: Duration = Duration::from_millis(50);

/// How long the ring thread naps between looks while records keep coming and the host does
/// not want each at once: a follower nobody waits on applies up to this much later.
pub const RING_NAP: Duration = Duration::from_millis(1);

impl Drop for XdpDataPlane {
    fn drop(&mut self) {
        self.link = None; // detaches the program
        self.stop.store(true, Ordering::Relaxed);
        // The host thread notices `stop` within its read timeout (200 ms). No shutdown(2):
        // a recvfrom on a shut-down UDP socket returns an empty address, on which std panics.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl DataPlane for XdpDataPlane {
    fn kind(&self) -> &'static str {
        "xdp"
    }

    fn max_inflight(&self) -> u64 {
        self.prog.shed_inflight()
    }

    fn enable(&mut self, regs: &fp::Registers, _peers: &[(u64, SocketAddrV4)]) -> io::Result<()> {
        // Fan-out goes to the multicast group and acks go back to the append's source, so the
        // peers' addresses are not needed here.
        self.prog.write_registers(regs);
        Ok(())
    }

    fn disable(&mut self) -> fp::Registers {
        self.prog.disable()
    }

    fn drain(&mut self, out: &mut Vec<RingRecord>) {
        self.prog.drain(out);
    }

    fn ring_fd(&self) -> Option<RawFd> {
        self.prog
            .host_reads
            .load(Ordering::Relaxed)
            .then(|| self.prog.ring_fd())
    }

    fn before_sleep(&self) -> crate::RingSleep {
        self.prog.before_sleep()
    }

    fn after_sleep(&self) {
        self.prog.after_sleep()
    }

    fn push(&mut self, pkt: &[u8]) -> io::Result<()> {
        self.push_batch(&[pkt])
    }

    fn push_batch(&mut self, pkts: &[&[u8]]) -> io::Result<()> {
        if pkts.is_empty() {
            return Ok(());
        }
        self.prog.hold_wakeups();
        let (mac, addr) = (self.self_mac, self.self_addr);
        for chunk in pkts.chunks(PUSH_SLOTS) {
            // Each frame is written into its push slot: headers, then the packet.
            self.prog.pull(chunk.len(), self.ifindex, |i, slot| {
                let p = chunk[i];
                let len = FRAME_HEADERS + p.len();
                let f = slot.get_mut(..len).ok_or_else(too_large)?;
                f[..FRAME_HEADERS].copy_from_slice(&frame_headers(mac, addr, mac, addr, p.len()));
                f[FRAME_HEADERS..].copy_from_slice(p);
                Ok(len)
            })?;
        }
        Ok(())
    }

    fn drain_due(&self) -> bool {
        self.prog.wakeups_held()
    }

    fn want_wakeups(&self, urgent: bool) {
        self.prog.want_wakeups(urgent)
    }

    fn send_to(&self, pkt: &[u8], to: SocketAddr) -> io::Result<()> {
        self.socket.send_to(pkt, to).map(|_| ())
    }

    fn send_many(&self, pkts: &[(SocketAddr, Vec<u8>)]) -> usize {
        crate::send_many_from(&self.socket, pkts)
    }

    fn registers(&self) -> fp::Registers {
        self.prog.read_registers()
    }

    fn counters(&self) -> Counters {
        self.prog.counters()
    }

    fn latency(&self) -> LatencyHistogram {
        self.prog.latency()
    }

    fn socket(&self) -> io::Result<UdpSocket> {
        self.socket.try_clone()
    }

    fn tick(&self) {
        self.prog.refresh_clock();
    }

    fn leader_heard_ns(&self) -> u64 {
        self.prog.heard_ns()
    }
}
