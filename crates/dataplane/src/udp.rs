//! The user-space data plane (`--dataplane udp`, `docs/dataplane.md`): the C fast-path handler
//! ([`waverunner_fastpath::handle`]) in one dedicated thread with batched, busy-polling UDP I/O
//! (the paper's "DPDK-Raft" counterpart, for hosts without XDP).
//!
//! # The thread
//!
//! [`UdpDataPlane::open`] binds the fast-path socket and spawns the thread `wr-dp-udp`, which
//! owns the registers, the peer list, the client table and every receive. It loops:
//!
//! 1. host commands (enable, disable, push, stop) from a channel;
//! 2. `recvmmsg` batches of up to [`BATCH`] datagrams (non-blocking) from the fast-path socket
//!    and, with [`Config::multicast`](crate::Config::multicast), from a second socket bound to
//!    the group (a socket bound to a unicast IP never sees multicast datagrams);
//! 3. every packet through the handler, its sends collected; at the end of the receive batch
//!    the ring records published and the register snapshot and counters updated, then the
//!    sends flushed in one `sendmmsg` batch (so a peer that sees a reply never sees older
//!    counters), and [`Hooks::wake`](crate::Hooks::wake) called (coalesced);
//! 4. with nothing received: **busy-poll** (retry `recvmmsg`, `sched_yield` between tries)
//!    until [`DEFAULT_SPIN`] has passed since the last packet or command, then block in
//!    `poll()` on the sockets and an eventfd the host signals with every command (timeout
//!    100 ms, a safety net only).
//!
//! Why a bounded spin and not pure spinning: the target machines run several replicas (a local
//! cluster puts three on two cores) plus clients; a thread that never sleeps takes a core from
//! them and raises latency for everyone. 50 µs covers the gap between the packets of a busy
//! stream (a request, its appends, their acks), so under load the thread never sleeps, and an
//! idle replica costs nothing. `WAVERUNNER_UDP_SPIN_US` overrides the spin (0 = always block).
//!
//! # Which thread calls the hooks
//!
//! Both [`Hooks`] callbacks run on the data-plane thread: `host_packet` once per
//! packet for the host (inline, in arrival order), `wake` after records were published and
//! only if no wake is outstanding (a [`DataPlane::drain`] re-arms it); `wake` also follows a
//! halt (`HALT`: the registers show `enabled = 0` and `halt_reason`), which may add no record
//! and pass nothing up (a follower's exhausted retransmissions). They must not block and
//! must not call back into this data plane's synchronous methods (`enable`, `disable`), which
//! would wait for the very thread that runs them.

use std::collections::VecDeque;
use std::io;
use std::mem;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use waverunner_fastpath as fp;
use waverunner_mmsg as mmsg;

use crate::{
    bucket_of, wall_ms, Config, Counters, DataPlane, Hooks, LatencyHistogram, RingEntry,
    RingRecord, HIST_BUCKETS, RING_CAPACITY,
};

/// Datagrams received (and sent) per `recvmmsg` (`sendmmsg`) call at most.
pub const BATCH: usize = 32;
/// Receive buffer per datagram: a fast-path packet is at most 64 + 1400 bytes; anything
/// longer is not one (it is truncated, counted malformed and given to the host as received).
const BUF_LEN: usize = 2048;
/// How long the thread busy-polls after the last packet or command before it blocks in
/// `poll()` (override with the environment variable `WAVERUNNER_UDP_SPIN_US`).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// The blocking `poll()` timeout: commands wake the thread through the eventfd, so this only
/// bounds how long a lost wake-up could delay it.
const POLL_TIMEOUT_MS: i32 = 100;

/// A host command to the data-plane thread.
enum Cmd {
    Enable {
        regs: Box<fp::Registers>,
        peers: Vec<(u64, SocketAddrV4)>,
        done: mpsc::SyncSender<()>,
    },
    Disable {
        done: mpsc::SyncSender<fp::Registers>,
    },
    Push(Vec<u8>),
    Stop,
}

/// Counters as atomics (one writer: the data-plane thread).
#[derive(Default)]
struct AtomicCounters {
    handled: AtomicU64,
    punted: AtomicU64,
    dropped: AtomicU64,
    retx_requests: AtomicU64,
    client_replies: AtomicU64,
    ring_full: AtomicU64,
    halts: AtomicU64,
    malformed: AtomicU64,
    shed: AtomicU64,
    shed_unanswered: AtomicU64,
}

impl AtomicCounters {
    fn add(&self, d: &Counters) {
        let pairs = [
            (&self.handled, d.handled),
            (&self.punted, d.punted),
            (&self.dropped, d.dropped),
            (&self.retx_requests, d.retx_requests),
            (&self.client_replies, d.client_replies),
            (&self.ring_full, d.ring_full),
            (&self.halts, d.halts),
            (&self.malformed, d.malformed),
            (&self.shed, d.shed),
            (&self.shed_unanswered, d.shed_unanswered),
        ];
        for (a, v) in pairs {
            if v != 0 {
                a.fetch_add(v, Ordering::Release);
            }
        }
    }

    fn get(&self) -> Counters {
        let l = |a: &AtomicU64| a.load(Ordering::Acquire);
        Counters {
            handled: l(&self.handled),
            punted: l(&self.punted),
            dropped: l(&self.dropped),
            retx_requests: l(&self.retx_requests),
            client_replies: l(&self.client_replies),
            ring_full: l(&self.ring_full),
            halts: l(&self.halts),
            malformed: l(&self.malformed),
            shed: l(&self.shed),
            shed_unanswered: l(&self.shed_unanswered),
        }
    }
}

/// State shared between the host and the data-plane thread.
struct Shared {
    /// The log ring (bounded by [`RING_CAPACITY`]: only the thread adds, only `drain` removes).
    ring: Mutex<VecDeque<RingRecord>>,
    /// A wake is outstanding (set by the thread when it calls `wake`, cleared by `drain`).
    woken: AtomicBool,
    /// The registers as of the end of the last batch (status only).
    regs: Mutex<fp::Registers>,
    counters: AtomicCounters,
    latency: Vec<AtomicU64>,
    /// Follower: appends at most this far ahead of the log go to the host to be held
    /// ([`fp::ahead`]; see [`UdpDataPlane::set_reorder_window`]).
    reorder_window: AtomicU32,
    /// Follower: when an append of its term last came ([`fp::leader_heard`], taken or not;
    /// [`crate::monotonic_ns`]; 0: never).
    heard_ns: AtomicU64,
}

/// The user-space data plane: the C handler in a dedicated busy-polling thread (module docs).
///
/// Dropping it stops the thread and joins it.
pub struct UdpDataPlane {
    shared: Arc<Shared>,
    sock: Arc<UdpSocket>,
    local: SocketAddrV4,
    cmds: mpsc::Sender<Cmd>,
    event: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl UdpDataPlane {
    /// Binds the fast-path socket on `cfg.bind` (port 0 picks a free port: see
    /// [`UdpDataPlane::local_addr`]), joins `cfg.multicast` if set (on the interface that holds
    /// the bind IP), and spawns the data-plane thread. The data plane starts disabled: every
    /// packet goes to `hooks.host_packet` until [`DataPlane::enable`].
    pub fn open(cfg: &Config, hooks: Hooks) -> io::Result<UdpDataPlane> {
        let (Some(host_packet), Some(wake)) = (hooks.host_packet, hooks.wake) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the udp data plane's thread is its handler: it needs host_packet and wake \
                 callbacks",
            ));
        };
        let sock = UdpSocket::bind(cfg.bind)?;
        sock.set_nonblocking(true)?;
        crate::set_socket_buffers(sock.as_raw_fd());
        let local = match sock.local_addr()? {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(a) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("fast-path address {a} is not IPv4"),
                ))
            }
        };
        let mcast = match cfg.multicast {
            None => None,
            Some(group) if local.ip().is_unspecified() => {
                // Bound to every address: this socket receives the group's datagrams itself.
                sock.join_multicast_v4(&group, &Ipv4Addr::UNSPECIFIED)?;
                None
            }
            Some(group) => Some(multicast_socket(group, local)?),
        };
        let event = Arc::new(eventfd()?);
        let shared = Arc::new(Shared {
            ring: Mutex::new(VecDeque::with_capacity(RING_CAPACITY)),
            woken: AtomicBool::new(false),
            regs: Mutex::new(fp::Registers {
                self_id: cfg.self_id,
                group_id: u64::from(cfg.group_id),
                ..Default::default()
            }),
            counters: AtomicCounters::default(),
            latency: (0..HIST_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            reorder_window: AtomicU32::new(fp::REORDER_WINDOW),
            heard_ns: AtomicU64::new(0),
        });
        let sock = Arc::new(sock);
        let (tx, rx) = mpsc::channel();
        let spin = std::env::var("WAVERUNNER_UDP_SPIN_US")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(DEFAULT_SPIN, Duration::from_micros);
        let worker = Worker {
            cfg: cfg.clone(),
            local,
            host_packet,
            wake,
            shared: shared.clone(),
            sock: sock.clone(),
            mcast,
            cmds: rx,
            event: event.clone(),
            spin,
            regs: *shared.regs.lock().expect("registers lock"),
            peers: Vec::new(),
            table: vec![Slot::default(); RING_CAPACITY],
            pending: Vec::new(),
            out: OutQueue::default(),
            delta: Counters::default(),
            dirty: false,
            halted: false,
            now_ns: 0,
            gap_pass_ns: 0,
            busy_tat_ns: 0,
            now_ms: 0,
        };
        let thread = std::thread::Builder::new()
            .name("wr-dp-udp".into())
            .spawn(move || worker.run())?;
        Ok(UdpDataPlane {
            shared,
            sock,
            local,
            cmds: tx,
            event,
            thread: Some(thread),
        })
    }

    /// The fast-path address the socket is bound to (with the port the kernel picked if
    /// `cfg.bind` had port 0). Packets pushed with [`DataPlane::push`] come "from" here.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// Follower: appends at most `n` entries ahead of the log go to the host (which holds
    /// them until the gap fills) instead of through the handler's gap rule; 0 turns it off
    /// (the handler's own gap rule, as its vectors have it). [`fp::REORDER_WINDOW`] at open.
    pub fn set_reorder_window(&self, n: u32) {
        self.shared.reorder_window.store(n, Ordering::Relaxed);
    }

    fn command(&self, cmd: Cmd) -> io::Result<()> {
        self.cmds.send(cmd).map_err(|_| gone())?;
        signal(self.event.as_raw_fd());
        Ok(())
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the udp data-plane thread has stopped",
    )
}

impl DataPlane for UdpDataPlane {
    fn kind(&self) -> &'static str {
        "udp"
    }

    fn max_inflight(&self) -> u64 {
        fp::SHED_INFLIGHT_UDP
    }

    /// Synchronous: when it returns, the thread runs every later packet with `regs`. `peers`
    /// entries with this replica's own id are ignored. Fails if the ring is not empty.
    fn enable(&mut self, regs: &fp::Registers, peers: &[(u64, SocketAddrV4)]) -> io::Result<()> {
        if !self.shared.ring.lock().expect("ring lock").is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "enable with records on the ring: drain it after disable",
            ));
        }
        let (done, wait) = mpsc::sync_channel(1);
        self.command(Cmd::Enable {
            regs: Box::new(*regs),
            peers: peers.to_vec(),
            done,
        })?;
        wait.recv().map_err(|_| gone())
    }

    fn disable(&mut self) -> fp::Registers {
        let (done, wait) = mpsc::sync_channel(1);
        let answered = self
            .command(Cmd::Disable { done })
            .ok()
            .and_then(|()| wait.recv().ok());
        answered.unwrap_or_else(|| {
            // The thread is gone (a hook panicked): nothing runs the handler any more.
            let mut r = *self.shared.regs.lock().expect("registers lock");
            r.enabled = 0;
            r
        })
    }

    fn drain(&mut self, out: &mut Vec<RingRecord>) {
        self.shared.woken.store(false, Ordering::SeqCst);
        out.extend(self.shared.ring.lock().expect("ring lock").drain(..));
    }

    /// Queued to the thread (returns before the handler ran; commands and pushes are handled
    /// in the order they were issued, so a push before a `disable` is handled before it). The
    /// packet's source is [`UdpDataPlane::local_addr`]: its entry has `source: None`, it never
    /// gets a data-plane client reply, a `REPLY` to it is discarded, and if the handler passes
    /// it up (or the data plane is disabled) `host_packet` gets it from `local_addr`.
    fn push(&mut self, pkt: &[u8]) -> io::Result<()> {
        self.command(Cmd::Push(pkt.to_vec()))
    }

    fn send_to(&self, pkt: &[u8], to: SocketAddr) -> io::Result<()> {
        send_one(&self.sock, pkt, to)
    }

    fn send_many(&self, pkts: &[(SocketAddr, Vec<u8>)]) -> usize {
        crate::send_many_from(&self.sock, pkts)
    }

    fn registers(&self) -> fp::Registers {
        *self.shared.regs.lock().expect("registers lock")
    }

    fn counters(&self) -> Counters {
        self.shared.counters.get()
    }

    fn leader_heard_ns(&self) -> u64 {
        self.shared.heard_ns.load(Ordering::Relaxed)
    }

    fn latency(&self) -> LatencyHistogram {
        LatencyHistogram {
            buckets: self
                .shared
                .latency
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }

    /// A clone of the fast-path socket. It is **non-blocking** (the flag is shared with the
    /// data-plane thread's descriptor): use it to send only (retry on `WouldBlock`), never to
    /// receive — the data-plane thread owns every receive.
    fn socket(&self) -> io::Result<UdpSocket> {
        self.sock.try_clone()
    }
}

impl Drop for UdpDataPlane {
    fn drop(&mut self) {
        let _ = self.command(Cmd::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends one datagram from a non-blocking socket, waiting (at most ~10 ms) for buffer space.
fn send_one(sock: &UdpSocket, pkt: &[u8], to: SocketAddr) -> io::Result<()> {
    for _ in 0..10 {
        match sock.send_to(pkt, to) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                mmsg::wait_writable(sock.as_raw_fd())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::WouldBlock,
        "fast-path socket send buffer stayed full",
    ))
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd (non-blocking; a full counter
    // means the thread has a wake-up pending anyway).
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

fn clear_event(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64 (non-blocking eventfd).
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// A socket bound to `group:port` (`SO_REUSEADDR`: replicas sharing a host share the port),
/// member of `group` on the interface holding `local`'s IP. Receives only that group.
fn multicast_socket(group: Ipv4Addr, local: SocketAddrV4) -> io::Result<UdpSocket> {
    // SAFETY: plain syscall; a non-negative result is a new descriptor we own.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is fresh and owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    crate::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    crate::setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_ALL, 0)?;
    let (sa, len) = mmsg::sockaddr(SocketAddr::V4(SocketAddrV4::new(group, local.port())));
    // SAFETY: `sa` is a live socket address of the length given.
    let rc = unsafe { libc::bind(fd, (&sa as *const libc::sockaddr_storage).cast(), len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    crate::set_socket_buffers(fd);
    let sock = UdpSocket::from(owned);
    sock.join_multicast_v4(&group, local.ip())?;
    Ok(sock)
}

/// Datagrams to send at the end of a batch (buffers reused across batches).
#[derive(Default)]
struct OutQueue {
    bufs: Vec<Vec<u8>>,
    dests: Vec<SocketAddrV4>,
    n: usize,
}

impl OutQueue {
    /// A cleared buffer for a datagram to `to`.
    fn next(&mut self, to: SocketAddrV4) -> &mut Vec<u8> {
        if self.n == self.bufs.len() {
            self.bufs
                .push(Vec::with_capacity(fp::HDR_LEN + fp::MAX_PAYLOAD as usize));
            self.dests.push(to);
        }
        self.dests[self.n] = to;
        let b = &mut self.bufs[self.n];
        b.clear();
        self.n += 1;
        b
    }

    /// Sends everything queued (`mmsg::send_all`). A datagram that cannot go (unreachable
    /// peer, full buffer) is lost, as on the wire; Raft retransmits.
    fn flush(&mut self, fd: RawFd) {
        let (dests, bufs) = (&self.dests, &self.bufs);
        mmsg::send_all(
            fd,
            self.n,
            |j| (SocketAddr::V4(dests[j]), bufs[j].as_slice()),
            |to, e| tracing::debug!("udp data plane: send to {to} failed: {e}"),
        );
        self.n = 0;
    }
}

/// The leader's client table: who asked for the entry at `index` (slot = index mod
/// [`RING_CAPACITY`], tagged with the index; 0 = empty, log indices start at 1).
#[derive(Clone, Copy, Default)]
struct Slot {
    index: u64,
    /// The client's address; `None` for pushed requests.
    source: Option<SocketAddrV4>,
    seq: u64,
    blind: bool,
    heartbeat: bool,
    /// Receipt time (ns since the worker's base instant).
    recv_ns: u64,
}

/// The data-plane thread's state.
struct Worker {
    cfg: Config,
    local: SocketAddrV4,
    /// `Hooks::host_packet` and `Hooks::wake` (this data plane requires both).
    host_packet: crate::PacketFn,
    wake: Arc<dyn Fn() + Send + Sync>,
    shared: Arc<Shared>,
    sock: Arc<UdpSocket>,
    mcast: Option<UdpSocket>,
    cmds: mpsc::Receiver<Cmd>,
    event: Arc<OwnedFd>,
    spin: Duration,
    regs: fp::Registers,
    peers: Vec<(u64, SocketAddrV4)>,
    table: Vec<Slot>,
    /// Ring records of the current batch, published at its end.
    pending: Vec<RingRecord>,
    out: OutQueue,
    delta: Counters,
    /// Registers changed in this batch.
    dirty: bool,
    /// The handler halted in this batch (the host is woken to notice it).
    halted: bool,
    /// Clock of the current batch ([`crate::monotonic_ns`]).
    now_ns: u64,
    /// Follower: when an append past the hold window last reached the gap rule.
    gap_pass_ns: u64,
    /// Leader: the busy replies' ration (`fp::busy_answer`).
    busy_tat_ns: u64,
    now_ms: u64,
}

impl Worker {
    fn run(mut self) {
        let mut batch = mmsg::RecvBatch::new(BATCH, BUF_LEN);
        let mut last_activity = Instant::now();
        loop {
            let mut active = false;
            loop {
                match self.cmds.try_recv() {
                    Ok(Cmd::Stop) | Err(mpsc::TryRecvError::Disconnected) => return,
                    Ok(cmd) => {
                        self.command(cmd);
                        active = true;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            let mut got = 0;
            for fd in [
                Some(self.sock.as_raw_fd()),
                self.mcast.as_ref().map(|s| s.as_raw_fd()),
            ]
            .into_iter()
            .flatten()
            {
                let n = match batch.recv(fd, libc::MSG_DONTWAIT) {
                    Ok(n) => n,
                    Err(e) => {
                        if !matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) {
                            tracing::debug!("udp data plane: recvmmsg: {e}");
                        }
                        0
                    }
                };
                if n == 0 {
                    continue;
                }
                got += n;
                self.begin_batch();
                for i in 0..n {
                    // An AF_INET socket: every source is IPv4.
                    let (Some(SocketAddr::V4(src)), pkt, trunc) = batch.get(i) else {
                        continue;
                    };
                    self.packet(src, pkt, trunc, false);
                }
                self.end_batch();
            }
            if got > 0 || active {
                last_activity = Instant::now();
                continue;
            }
            if last_activity.elapsed() < self.spin {
                std::thread::yield_now();
                continue;
            }
            self.block();
            last_activity = Instant::now();
        }
    }

    /// Waits in `poll()` for a datagram or a command.
    fn block(&self) {
        let ev = libc::POLLIN;
        let mut fds = [
            libc::pollfd {
                fd: self.event.as_raw_fd(),
                events: ev,
                revents: 0,
            },
            libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: ev,
                revents: 0,
            },
            libc::pollfd {
                fd: self.mcast.as_ref().map_or(-1, |s| s.as_raw_fd()),
                events: ev,
                revents: 0,
            },
        ];
        // SAFETY: three live pollfds (a negative fd is ignored by poll).
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 3, POLL_TIMEOUT_MS) };
        if rc > 0 && fds[0].revents & libc::POLLIN != 0 {
            clear_event(self.event.as_raw_fd());
        }
    }

    fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Enable { regs, peers, done } => {
                let regs = *regs;
                self.regs = regs;
                self.peers = peers
                    .into_iter()
                    .filter(|(id, _)| *id != regs.self_id)
                    .collect();
                self.table.fill(Slot::default());
                *self.shared.regs.lock().expect("registers lock") = regs;
                let _ = done.send(());
            }
            Cmd::Disable { done } => {
                self.regs.enabled = 0;
                self.table.fill(Slot::default());
                *self.shared.regs.lock().expect("registers lock") = self.regs;
                let _ = done.send(self.regs);
            }
            Cmd::Push(pkt) => {
                self.begin_batch();
                self.packet(self.local, &pkt, false, true);
                self.end_batch();
            }
            Cmd::Stop => {}
        }
    }

    fn begin_batch(&mut self) {
        self.now_ns = crate::monotonic_ns();
        self.now_ms = wall_ms();
    }

    /// Publishes the ring records, the registers and the counters, then sends, then wakes the
    /// host. Publishing first means whoever sees a packet this batch sent (a peer, a test) also
    /// sees everything the batch caused; sending first raced with them.
    fn end_batch(&mut self) {
        let records = !self.pending.is_empty();
        if records {
            self.shared
                .ring
                .lock()
                .expect("ring lock")
                .extend(self.pending.drain(..));
        }
        if self.dirty {
            *self.shared.regs.lock().expect("registers lock") = self.regs;
            self.dirty = false;
        }
        self.shared.counters.add(&self.delta);
        self.delta = Counters::default();
        if self.out.n > 0 {
            self.out.flush(self.sock.as_raw_fd());
        }
        let halted = mem::take(&mut self.halted);
        if (records || halted) && !self.shared.woken.swap(true, Ordering::SeqCst) {
            (self.wake)();
        }
    }

    fn to_host(&self, src: SocketAddrV4, pkt: &[u8]) {
        (self.host_packet)(SocketAddr::V4(src), pkt);
    }

    /// One packet (`pushed`: from the host via [`DataPlane::push`], `src` = our own address).
    fn packet(&mut self, src: SocketAddrV4, pkt: &[u8], trunc: bool, pushed: bool) {
        let (hdr, payload) = match fp::Header::decode(pkt) {
            Ok(x) if !trunc => x,
            _ => {
                self.delta.malformed += 1;
                self.to_host(src, pkt);
                return;
            }
        };
        if self.regs.enabled == 0 {
            self.delta.punted += 1;
            self.to_host(src, pkt);
            return;
        }
        // An append ahead of the log (one was lost or overtaken): the host holds it and
        // pushes it back once the gap fills; past the window, one a while reaches the gap
        // rule (the XDP program's rule, `fp::ahead`).
        let window = self.shared.reorder_window.load(Ordering::Relaxed);
        let now = self.now_ns;
        // The leader was alive then, whenever the host gets to it (a starved host's ticks).
        if fp::leader_heard(&self.regs, &hdr, pushed) {
            self.shared.heard_ns.store(now, Ordering::Relaxed);
        }
        match fp::ahead(&self.regs, &hdr, pushed, window, now, &mut self.gap_pass_ns) {
            fp::Ahead::Hold => {
                self.delta.punted += 1;
                self.to_host(src, pkt);
                return;
            }
            fp::Ahead::Drop => {
                self.delta.dropped += 1;
                return;
            }
            fp::Ahead::Handler => {}
        }
        // Only these can add ring records; the rest (REJECT, RETX_REQ, ...) still reach the
        // handler and the host when the ring is full.
        let may_record = matches!(hdr.kind, fp::CLIENT_REQUEST | fp::APPEND | fp::ACK);
        let ring_len = self.shared.ring.lock().expect("ring lock").len() + self.pending.len();
        // Overload: a busy reply rather than a full ring later, while their ration lasts (the
        // XDP program's rules).
        if fp::shed(
            &self.regs,
            &hdr,
            pushed,
            ring_len as u64,
            RING_CAPACITY as u64,
            fp::SHED_INFLIGHT_UDP,
        ) {
            self.delta.shed += 1;
            let busy = fp::rationed_busy_reply(
                &self.regs,
                &hdr,
                payload,
                self.now_ns,
                &mut self.busy_tat_ns,
            );
            if let Some((reply, body)) = busy {
                let b = self.out.next(src);
                b.extend_from_slice(&reply.to_bytes());
                b.extend_from_slice(&body);
            } else {
                self.delta.shed_unanswered += 1;
            }
            return;
        }
        if may_record && ring_len + 2 > RING_CAPACITY {
            self.delta.ring_full += 1;
            return;
        }
        let old_commit = self.regs.commit_index;
        let out = fp::handle(&mut self.regs, &hdr);
        self.dirty = true;
        let a = out.actions;

        // The entry's data: at the leader, stamped with its clock before it is broadcast.
        let mut data: Option<Vec<u8>> = None;
        let ordered = hdr.kind == fp::CLIENT_REQUEST && a.contains(fp::Actions::RING_ENTRY);
        if a.intersects(fp::Actions::RING_ENTRY | fp::Actions::BROADCAST) {
            let mut d = payload.to_vec();
            if ordered {
                fp::payload::stamp(&mut d, self.now_ms);
            }
            data = Some(d);
        }
        if a.contains(fp::Actions::RING_ENTRY) {
            let source = (ordered && !pushed).then_some(src);
            if ordered {
                self.table[(out.entry_index % RING_CAPACITY as u64) as usize] = Slot {
                    index: out.entry_index,
                    source,
                    seq: hdr.seq,
                    blind: hdr.flags & fp::F_BLIND_WRITE != 0,
                    heartbeat: hdr.flags & fp::F_HEARTBEAT != 0,
                    recv_ns: self.now_ns,
                };
            }
            self.pending.push(RingRecord::Entry(RingEntry {
                index: out.entry_index,
                term: out.entry_term,
                flags: hdr.flags,
                from: hdr.from,
                seq: hdr.seq,
                source,
                payload: data.clone().unwrap_or_default(),
            }));
        }
        if a.contains(fp::Actions::BROADCAST) {
            let d = data.as_deref().unwrap_or_default();
            for i in 0..self.peers.len() {
                let to = self.peers[i].1;
                let b = self.out.next(to);
                out.msg.encode(d, b);
            }
        }
        if a.contains(fp::Actions::REPLY) {
            if out.msg.kind == fp::RETX_REQ {
                self.delta.retx_requests += 1;
            }
            if !pushed {
                let b = self.out.next(src);
                b.extend_from_slice(&out.msg.to_bytes());
            }
        }
        let mut replied = false;
        if a.contains(fp::Actions::CLIENT_REPLY) {
            replied = self.client_reply(old_commit, out.reply_index);
        }
        if a.contains(fp::Actions::RING_COMMIT) {
            self.pending.push(RingRecord::Commit {
                index: out.commit_index,
                replied,
            });
        }
        if a.contains(fp::Actions::HALT) {
            self.delta.halts += 1;
            self.halted = true;
            tracing::debug!(
                "udp data plane halted: {:?}",
                fp::HaltReason::from_u32(out.halt_reason)
            );
        }
        if a.contains(fp::Actions::DROP) {
            self.delta.dropped += 1;
        }
        if a.contains(fp::Actions::TO_HOST) {
            self.delta.punted += 1;
            self.to_host(src, pkt);
        } else {
            self.delta.handled += 1;
        }
    }

    /// Entries `(old_commit, c]` committed: their latencies; the reply to `c`'s client if it
    /// was a blind write from a real client. Returns whether a reply was sent.
    fn client_reply(&mut self, old_commit: u64, c: u64) -> bool {
        let cap = RING_CAPACITY as u64;
        let lo = (old_commit + 1).max((c + 1).saturating_sub(cap));
        for i in lo..=c {
            let s = &mut self.table[(i % cap) as usize];
            if s.index != i {
                continue;
            }
            if !s.heartbeat {
                let b = bucket_of(self.now_ns.saturating_sub(s.recv_ns));
                self.shared.latency[b].fetch_add(1, Ordering::Relaxed);
            }
            if i != c {
                *s = Slot::default();
            }
        }
        let slot = &mut self.table[(c % cap) as usize];
        if slot.index != c {
            return false;
        }
        let s = mem::take(slot);
        let to = match s.source {
            Some(to) if s.blind && !self.cfg.blind_reply_body.is_empty() => to,
            _ => return false,
        };
        let body = &self.cfg.blind_reply_body;
        let len = 9 + body.len();
        if len > fp::MAX_PAYLOAD as usize {
            return false;
        }
        let hdr = fp::Header {
            kind: fp::CLIENT_REPLY,
            group_id: self.cfg.group_id,
            len: len as u16,
            term: self.regs.term,
            from: self.regs.self_id,
            index: c,
            commit: self.regs.commit_index,
            seq: s.seq,
            ..fp::Header::new(0)
        };
        let leader = self.regs.self_id;
        let b = self.out.next(to);
        b.extend_from_slice(&hdr.to_bytes());
        b.push(0);
        b.extend_from_slice(&leader.to_le_bytes());
        b.extend_from_slice(body);
        self.delta.client_replies += 1;
        true
    }
}
