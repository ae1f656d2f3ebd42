//! TCP transport between replicas, on one thread per replica (`raft-net`, a mio loop): two
//! outbound connections per peer ([`Lane`]: control and bulk), each with a bounded queue and
//! reconnection with backoff, and the inbound connections, whose frames are checked and
//! handed to the replica's event queue. Raft tolerates loss: a full queue or a broken
//! connection drops frames (counted), it never blocks the replica.
//!
//! Why a thread of its own and not the replica loop (issue 13 allows one more thread per
//! replica): the keepalive thread sends heartbeats through the transport while the loop is
//! held (a large apply, a busy machine), so peers' connections must move while the loop does
//! not. One thread replaces the nine or more the transport had per replica of three (a sender
//! per peer and lane, an acceptor, a receiver per inbound connection): frames the loop sends
//! in one turn leave in one wake-up of this thread, and no sender sleeps and wakes per frame.
//!
//! Large messages (over [`wire::MAX_FRAME`]: a 64 MiB value) and snapshot pieces (read from
//! the snapshot file's mapping) are moved by a short-lived helper thread (`raft-large`) at
//! bulk priority, for the time they take: the lane lends it
//! its connection to encode and write the message, an inbound connection where one starts
//! is lent to read and reassemble it, and both come back. The transport thread stays light:
//! when it copied and checksummed 64 MiB itself, the scheduler made it wait like any heavy
//! thread, heartbeats and acknowledgements waited with it (a turn of 160 ms on two busy
//! CPUs), and the leader stepped down by check-quorum.
//!
//! Peers come and go with membership changes: [`Transport::add_peer`] starts talking to a new
//! member, [`Transport::remove_peer`] stops talking to a removed one (what was queued for it
//! is still written, then its connections close). Every outbound connection opens with
//! `Hello` (who is speaking) and `Advertise` (where the speaker listens), so a replica can
//! answer a peer it has no address for yet — a joining replica learns its leader's address
//! this way.
//!
//! A peer that crashes or restarts closes its end of our outbound connection. Writing into
//! such a connection succeeds locally and loses the bytes (only the next write fails), so the
//! thread watches outbound connections for the close (the peer never writes on them) and
//! checks again before every batch, and sends the batch on a new connection instead. Without
//! this, the first votes after a peer's restart vanished and elections took a round more
//! (split votes in the failover tests).

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::mem;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use mio::net::{TcpListener as Listener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use waverunner_raft::MessageBody;

use crate::clients::Bell;
use crate::priority::LowPriority;
use crate::stop::Stop;
use crate::wire::{self, Frame, Large, Reassembly, HEADER_LEN};

/// Frames queued per peer and lane before new ones are dropped.
pub const SEND_QUEUE: usize = 4_096;
/// Forwarded commands longer than this take the bulk lane.
const BULK_FORWARD: usize = 16 << 10;
/// Inbound connections open at once.
pub const MAX_INBOUND: usize = 64;
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// A connection with bytes to write that takes none for this long is given up (the peer is
/// stuck): its frames are dropped and it reconnects.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// An inbound connection must say hello within this.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait before connecting again to an unreachable peer.
const MIN_BACKOFF: Duration = Duration::from_millis(5);
/// The longest wait between connection attempts to an unreachable peer: a restarted peer is
/// reached within this of listening again (its first messages, votes included, are lost
/// until then).
const MAX_BACKOFF: Duration = Duration::from_millis(100);
/// Bytes a connection reads per turn of the thread before the other connections get theirs.
const TURN_BYTES: usize = 1 << 20;
/// A helper reading a large message gives up after this without a byte of it.
const LARGE_IDLE: Duration = Duration::from_secs(30);
/// Encoded frames gathered into one write, at most (a large message ends a batch).
const BATCH_BYTES: usize = 4 << 20;
/// Room a read asks for at least.
const READ_ROOM: usize = 64 << 10;
/// A turn of the transport thread longer than this is logged at debug level (target `stall`).
const STALL: Duration = Duration::from_millis(5);
/// Poll tokens: the bell is [`crate::clients::BELL`] (0).
const LISTENER: Token = Token(1);
const STOP: Token = Token(2);
const FIRST_CONN: usize = 3;

/// Transport counters (exported in `/metrics`).
#[derive(Default, Debug)]
pub struct TransportStats {
    /// Frames sent to peers.
    pub frames_sent: AtomicU64,
    /// Frames dropped because a peer's queue was full or its connection broke.
    pub frames_dropped: AtomicU64,
    /// Frames received from peers.
    pub frames_received: AtomicU64,
    /// Malformed frames or connections (bad magic, checksum, encoding): the connection closes.
    pub frames_rejected: AtomicU64,
    /// Outbound connections established.
    pub connects: AtomicU64,
    /// Outbound connections found closed by the peer (it crashed or restarted) before a write.
    pub closed_found: AtomicU64,
}

/// What inbound connections deliver: (sender node id, frame, when it arrived). The arrival is
/// the kernel's receive time of the frame's last bytes, not when the transport got to read
/// them: after a stall of the whole process, frames that waited in its sockets still count as
/// heard when they came (a leader stepped down by check-quorum, the missed ticks replayed
/// before frames read only after the stall).
pub type Inbound = (u64, Frame, Instant);

/// What became of a frame handed to the replica.
pub enum Delivery {
    /// Queued for the replica loop.
    Taken,
    /// The loop's queue is full: the frame comes back, and its connection is not read until
    /// the frame is taken (TCP backpressure on that peer, not on the others).
    Full(Inbound),
    /// The replica is gone: the connection closes.
    Closed,
}

/// A TCP stream read with `recvmsg`, which remembers the kernel's receive time of the last
/// bytes read (`SO_TIMESTAMPNS`: a `timespec` of `CLOCK_REALTIME`).
struct Stamped<S> {
    s: S,
    /// Receive time of the last bytes read (`CLOCK_REALTIME`), if the kernel gave one.
    last: Option<libc::timespec>,
}

impl<S: AsRawFd> Stamped<S> {
    fn new(s: S) -> Stamped<S> {
        let on: libc::c_int = 1;
        // SAFETY: a valid option value of the size given, for an open socket. Without it
        // frames are stamped when read (as before): an error is not fatal.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Stamped { s, last: None }
    }

    /// When the last bytes read arrived, as an `Instant`: now less their age by the real-time
    /// clock. Never later than now; now when the kernel gave no time or the clocks disagree by
    /// more than a second either way (a clock step).
    fn arrived(&self) -> Instant {
        let now = Instant::now();
        let Some(ts) = self.last else {
            return now;
        };
        let Ok(wall) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
            return now;
        };
        let at = Duration::new(
            ts.tv_sec.max(0) as u64,
            ts.tv_nsec.clamp(0, 999_999_999) as u32,
        );
        match wall.checked_sub(at) {
            Some(age) if age <= Duration::from_secs(1) => now.checked_sub(age).unwrap_or(now),
            _ => now,
        }
    }
}

impl<S: AsRawFd> Read for Stamped<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Room for one cmsg of a timespec (aligned as the kernel writes it).
        let mut control = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: zeroed is a valid msghdr; every pointer set below outlives the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = loop {
            // SAFETY: `msg` describes `buf` and `control`, both valid for writes of their
            // lengths for the duration of the call.
            let n = unsafe { libc::recvmsg(self.s.as_raw_fd(), &mut msg, 0) };
            if n >= 0 {
                break n as usize;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        // SAFETY: the kernel filled `msg_control` up to `msg_controllen`; CMSG_FIRSTHDR and
        // CMSG_NXTHDR stay within it, and a SCM_TIMESTAMPNS payload is one timespec.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    self.last = Some(std::ptr::read_unaligned(
                        libc::CMSG_DATA(c).cast::<libc::timespec>(),
                    ));
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok(n)
    }
}

/// Which of a peer's two connections a frame takes. Bulk data (appends, snapshots) has a
/// connection of its own, so heartbeats, votes and acknowledgements never
/// wait behind a 64 MiB value: a follower keeps hearing its leader while a large entry is on
/// the wire. Raft tolerates the reordering between the two (and within each, order is kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Everything small: votes, heartbeats, acknowledgements, forwards.
    Control,
    /// Appends and snapshots.
    Bulk,
}

impl Lane {
    /// The lane `f` travels in.
    pub fn of(f: &Frame) -> Lane {
        match f {
            Frame::Raft(m) => match &m.body {
                // Every append, also an empty one that carries a commit index: appends
                // keep their order among themselves (an empty one overtaking the entries
                // before it is refused, and a removed follower that got the commit of its
                // removal before the entry never learned it was removed).
                MessageBody::Append { .. } => Lane::Bulk,
                MessageBody::InstallSnapshot { .. } => Lane::Bulk,
                _ => Lane::Control,
            },
            // A forwarded command can be a large value; forwards need no order among them
            // (a client waits for each answer).
            Frame::Forward { command, .. } if command.len() > BULK_FORWARD => Lane::Bulk,
            _ => Lane::Control,
        }
    }
}

/// A peer's queues as senders fill them.
#[derive(Default)]
struct Queued {
    control: VecDeque<Frame>,
    bulk: VecDeque<Frame>,
}

impl Queued {
    fn lane(&mut self, lane: Lane) -> &mut VecDeque<Frame> {
        match lane {
            Lane::Control => &mut self.control,
            Lane::Bulk => &mut self.bulk,
        }
    }

    fn is_empty(&self) -> bool {
        self.control.is_empty() && self.bulk.is_empty()
    }
}

/// A peer as senders see it: where it listens, which incarnation of its connections
/// (`generation`: a new one per [`Transport::add_peer`] at a new address) and its queues.
struct Peer {
    addr: SocketAddr,
    generation: u64,
    queued: Queued,
}

/// What other threads hand the transport thread.
#[derive(Default)]
struct Outbox {
    peers: HashMap<u64, Peer>,
    /// Peers removed (or moved to another address) with what was queued for them: written,
    /// then their connections close. Bounded by membership changes.
    retired: Vec<(u64, Peer)>,
    /// Connections a helper thread moved a large message on, handed back (one per lane and
    /// inbound connection at most).
    returned: Vec<Returned>,
    next_generation: u64,
}

impl Outbox {
    fn is_empty(&self) -> bool {
        self.retired.is_empty()
            && self.returned.is_empty()
            && self.peers.values().all(|p| p.queued.is_empty())
    }
}

/// A large message of a lane, after the frames before it.
enum Big {
    /// Not encoded yet.
    Frame(Frame),
    /// Encoded as chunk frames.
    Large(Large),
    /// Encoded as one frame after all.
    Bytes(Vec<u8>),
}

/// How a large message lent to a helper fared.
enum Sent {
    Written,
    /// The peer had closed the connection before a byte was written: the message goes on the
    /// next connection.
    Closed(Big),
    /// Failed part way: dropped (counted).
    Failed(String),
}

/// A connection handed back by a helper thread.
enum Returned {
    Out {
        generation: u64,
        lane: Lane,
        s: TcpStream,
        sent: Sent,
    },
    In {
        token: Token,
        c: Box<In>,
        read: Result<(), String>,
    },
}

/// The peers' connections of one replica. Other threads queue frames ([`Transport::send`]);
/// the `raft-net` thread writes them.
pub struct Transport {
    outbox: Mutex<Outbox>,
    /// Rings the transport thread's poll while it sleeps.
    bell: Bell,
    /// Counters.
    pub stats: Arc<TransportStats>,
    self_id: u64,
    stop: Arc<Stop>,
}

impl Transport {
    /// Starts accepting on `listener` (delivering to `deliver`) and connecting to `peers`;
    /// `advertise` (this replica's listening address) is told to every peer it connects to.
    pub fn start(
        self_id: u64,
        listener: TcpListener,
        advertise: Option<SocketAddr>,
        peers: &[(u64, SocketAddr)],
        deliver: impl FnMut(Inbound) -> Delivery + Send + 'static,
        stop: Arc<Stop>,
    ) -> io::Result<Arc<Transport>> {
        let poll = Poll::new()?;
        let t = Arc::new(Transport {
            outbox: Mutex::new(Outbox::default()),
            bell: Bell::new(poll.registry())?,
            stats: Arc::new(TransportStats::default()),
            self_id,
            stop: stop.clone(),
        });
        for (id, addr) in peers {
            t.add_peer(*id, *addr);
        }
        listener.set_nonblocking(true)?;
        let mut listener = Listener::from_std(listener);
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        poll.registry()
            .register(&mut SourceFd(&stop.fd()), STOP, Interest::READABLE)?;
        let mut net = Net {
            t: t.clone(),
            poll,
            listener,
            deliver,
            advertise,
            peers: HashMap::new(),
            inbound: HashMap::new(),
            lent_in: 0,
            outbound: HashMap::new(),
            generations: Vec::new(),
            next_token: FIRST_CONN,
            again: false,
            next: None,
        };
        thread::Builder::new()
            .name("raft-net".into())
            .spawn(move || net.run())?;
        Ok(t)
    }

    /// Starts connecting to a peer. Idempotent; a known peer at a new address is reconnected
    /// there (what was queued for the old address is still written there).
    pub fn add_peer(&self, id: u64, addr: SocketAddr) {
        if id == self.self_id || id == 0 {
            return;
        }
        let mut o = self.outbox.lock().expect("outbox");
        if o.peers.get(&id).is_some_and(|p| p.addr == addr) {
            return;
        }
        if let Some(old) = o.peers.remove(&id) {
            o.retired.push((id, old));
        }
        o.next_generation += 1;
        let generation = o.next_generation;
        o.peers.insert(
            id,
            Peer {
                addr,
                generation,
                queued: Queued::default(),
            },
        );
        drop(o);
        self.bell.ring();
    }

    /// Stops talking to a peer (a removed member): frames to it are dropped from now on; what
    /// was queued before is written, then its connections close. Unknown peers are ignored.
    pub fn remove_peer(&self, id: u64) {
        let mut o = self.outbox.lock().expect("outbox");
        if let Some(p) = o.peers.remove(&id) {
            o.retired.push((id, p));
            drop(o);
            self.bell.ring();
        }
    }

    /// The peers this transport talks to, by id.
    pub fn peers(&self) -> Vec<(u64, SocketAddr)> {
        let mut v: Vec<(u64, SocketAddr)> = self
            .outbox
            .lock()
            .expect("outbox")
            .peers
            .iter()
            .map(|(id, p)| (*id, p.addr))
            .collect();
        v.sort_unstable();
        v
    }

    /// Queues `f` for peer `to`; drops it (counted) if the queue is full or `to` is unknown.
    /// The transport encodes it: the replica loop never copies a large value into frames.
    pub fn send(&self, to: u64, f: Frame) {
        let lane = Lane::of(&f);

        let queued = {
            let mut o = self.outbox.lock().expect("outbox");
            // Unless the queue is full, or `to` unknown.
            o.peers
                .get_mut(&to)
                .map(|p| p.queued.lane(lane))
                .filter(|q| q.len() < SEND_QUEUE)
                .map(|q| q.push_back(f))
                .is_some()
        };
        if queued {
            self.bell.ring();
        } else {
            self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hands a connection back to the transport thread.
    fn give_back(&self, r: Returned) {
        self.outbox.lock().expect("outbox").returned.push(r);
        self.bell.ring();
    }
}

/// An outbound connection's state.
enum Conn {
    /// Not connected: the next attempt is due at `retry`.
    Down { retry: Instant },
    /// Connecting since `since`.
    Connecting {
        s: TcpStream,
        token: Token,
        since: Instant,
    },
    /// Connected. `checked`: known open since the last batch was written (a new connection),
    /// so the next batch needs no check for the peer's close.
    Up {
        s: TcpStream,
        token: Token,
        checked: bool,
    },
    /// Lent to a helper thread writing a large message; its poll token stays registered.
    Lent { token: Token },
}

/// One lane of one peer: its frames, in order, from queue to socket.
struct Out {
    queue: VecDeque<Frame>,
    conn: Conn,
    /// Encoded frames not yet written, from `at`: `frames` of them, after `hello` bytes of the
    /// connection's own hello and address. A batch not begun when the connection was found
    /// closed is carried to the next one.
    buf: Vec<u8>,
    at: usize,
    frames: u64,
    hello: usize,
    /// A large message after `buf`: once `buf` is written, the connection is lent to a helper
    /// thread that writes it.
    big: Option<Big>,
    backoff: Duration,
    /// When the last write took bytes (or the batch began).
    progress: Instant,
}

impl Out {
    fn new(now: Instant) -> Out {
        Out {
            queue: VecDeque::new(),
            conn: Conn::Down { retry: now },
            buf: Vec::new(),
            at: 0,
            frames: 0,
            hello: 0,
            big: None,
            backoff: MIN_BACKOFF,
            progress: now,
        }
    }

    /// Nothing waits to be written, and the connection is here.
    fn idle(&self) -> bool {
        self.queue.is_empty()
            && self.at == self.buf.len()
            && self.big.is_none()
            && !matches!(self.conn, Conn::Lent { .. })
    }

    /// Drops the batch being written and the large message (counted); the queue stays.
    fn drop_batch(&mut self, stats: &TransportStats) {
        let n = self.frames + u64::from(self.big.is_some());
        stats.frames_dropped.fetch_add(n, Ordering::Relaxed);
        self.buf.clear();
        self.at = 0;
        self.frames = 0;
        self.hello = 0;
        self.big = None;
    }

    /// Drops everything queued and unwritten (counted).
    fn drop_all(&mut self, stats: &TransportStats) {
        self.drop_batch(stats);
        stats
            .frames_dropped
            .fetch_add(self.queue.len() as u64, Ordering::Relaxed);
        self.queue.clear();
    }

    /// Closes the connection (not one lent: its helper hands it back); the next attempt is
    /// due at `retry`.
    fn close(&mut self, outbound: &mut HashMap<Token, (u64, Lane)>, poll: &Poll, retry: Instant) {
        match mem::replace(&mut self.conn, Conn::Down { retry }) {
            Conn::Down { .. } => {}
            Conn::Lent { token } => {
                debug_assert!(false, "closed a lent connection");
                self.conn = Conn::Lent { token };
            }
            Conn::Connecting { mut s, token, .. } | Conn::Up { mut s, token, .. } => {
                outbound.remove(&token);
                let _ = poll.registry().deregister(&mut s);
            }
        }
    }

    /// A connection attempt failed: what was queued is stale by the time the peer is back
    /// (dropped, counted); the next attempt waits the backoff, which doubles.
    fn connect_failed(
        &mut self,
        outbound: &mut HashMap<Token, (u64, Lane)>,
        poll: &Poll,
        now: Instant,
        stats: &TransportStats,
    ) {
        self.drop_all(stats);
        self.close(outbound, poll, now + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// The connection broke, or the peer closed it: a batch not begun is carried to the next
    /// connection (without this connection's hello); one partly written is dropped (its
    /// frames cannot be resumed on another). Reconnects at once.
    fn broken(
        &mut self,
        outbound: &mut HashMap<Token, (u64, Lane)>,
        poll: &Poll,
        now: Instant,
        stats: &TransportStats,
    ) {
        if self.at > 0 {
            self.drop_batch(stats);
        } else {
            self.buf.drain(..self.hello);
            self.hello = 0;
        }
        self.close(outbound, poll, now);
    }

    /// The connection is up: it opens with the hello and the address, then what was carried.
    fn up(&mut self, now: Instant, stats: &TransportStats, me: u64, advertise: Option<SocketAddr>) {
        let Conn::Connecting { s, token, .. } =
            mem::replace(&mut self.conn, Conn::Down { retry: now })
        else {
            unreachable!("up from connecting only");
        };
        let _ = s.set_nodelay(true);
        stats.connects.fetch_add(1, Ordering::Relaxed);
        self.backoff = MIN_BACKOFF;
        assert_eq!(self.at, 0, "a carried batch was begun");
        let mut b = Vec::with_capacity(64 + self.buf.len());
        wire::encode_frames(&Frame::Hello { node: me }, &mut b);
        if let Some(raft) = advertise {
            wire::encode_frames(&Frame::Advertise { raft }, &mut b);
        }
        self.hello = b.len();
        b.append(&mut self.buf);
        self.buf = b;
        self.progress = now;
        self.conn = Conn::Up {
            s,
            token,
            checked: true,
        };
    }

    /// Writes what the connection takes: batches of queued frames, up to a large message.
    fn flush(&mut self, now: Instant, stats: &TransportStats) -> Flushed {
        let Conn::Up { s, checked, .. } = &mut self.conn else {
            unreachable!("flush an open connection only");
        };
        loop {
            if self.at == self.buf.len() {
                // The last batch is written: a large message after it, or the next batch.
                self.buf.clear();
                self.at = 0;
                self.hello = 0;
                if let Some(big) = self.big.take() {
                    return Flushed::Lend(big);
                }
                while self.buf.len() < BATCH_BYTES {
                    let Some(f) = self.queue.pop_front() else {
                        break;
                    };
                    if heavy(&f) {
                        self.big = Some(Big::Frame(f));
                        break;
                    }
                    if let Some(l) = wire::encode_or_large(&f, &mut self.buf) {
                        self.big = Some(Big::Large(l));
                        break;
                    }
                    self.frames += 1;
                }
                if self.buf.is_empty() {
                    match self.big.take() {
                        Some(big) => return Flushed::Lend(big),
                        None => return Flushed::Done,
                    }
                }
                self.progress = now;
                // A write into a connection the peer has closed (it crashed or restarted)
                // succeeds locally and the bytes vanish; only the write after it fails. Check
                // first, so the batch goes to the peer's next incarnation instead of nowhere.
                if !mem::take(checked) && peer_closed(s) {
                    stats.closed_found.fetch_add(1, Ordering::Relaxed);
                    return Flushed::Broken;
                }
            }
            match s.write(&self.buf[self.at..]) {
                Ok(0) => return Flushed::Broken,
                Ok(n) => {
                    self.progress = now;
                    self.at += n;
                    if self.at == self.buf.len() {
                        stats.frames_sent.fetch_add(self.frames, Ordering::Relaxed);
                        self.frames = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The peer reads slower than we write: wait for room (an event), for so
                    // long at most.
                    return if now.duration_since(self.progress) >= WRITE_TIMEOUT {
                        Flushed::Broken
                    } else {
                        Flushed::Waiting(self.progress + WRITE_TIMEOUT)
                    };
                }
                Err(_) => return Flushed::Broken,
            }
        }
    }
}

/// What a flush left.
enum Flushed {
    /// Everything written.
    Done,
    /// The socket is full: an event says when there is room; give up at this deadline.
    Waiting(Instant),
    /// The connection broke or the peer closed it.
    Broken,
    /// What is left starts with a large message: lend the connection to a helper.
    Lend(Big),
}

/// Whether encoding `f` is bulk work for a helper: a large message (a 64 MiB value), or a
/// snapshot piece, whose bytes are read from the snapshot file's mapping (page faults, maybe
/// disk reads) as they are encoded.
fn heavy(f: &Frame) -> bool {
    wire::payload_hint(f) > wire::MAX_FRAME
        || matches!(f, Frame::Raft(m) if matches!(m.body, MessageBody::InstallSnapshot { .. }))
}

/// A helper thread's work on a lent outbound connection: encodes a large message and writes
/// it, at bulk priority.
fn write_large(t: &Transport, s: &TcpStream, big: Big) -> Sent {
    let _low = LowPriority::new();
    let big = match big {
        Big::Frame(f) => {
            let mut b = Vec::new();
            match wire::encode_or_large(&f, &mut b) {
                Some(l) => Big::Large(l),
                None => Big::Bytes(b),
            }
        }
        encoded => encoded,
    };
    if peer_closed(s) {
        return Sent::Closed(big);
    }
    let mut w = Blocking { stop: &t.stop, s };
    let written = match &big {
        Big::Large(l) => l.write_to(&mut w),
        Big::Bytes(b) => w.write_all(b),
        Big::Frame(_) => unreachable!("encoded above"),
    };
    match written {
        Ok(()) => Sent::Written,
        Err(e) => Sent::Failed(e.to_string()),
    }
}

/// A non-blocking socket written as a blocking one: a write waits for room
/// ([`WRITE_TIMEOUT`] without progress at most, or until the stop).
struct Blocking<'a> {
    stop: &'a Stop,
    s: &'a TcpStream,
}

impl Write for Blocking<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let mut s = self.s;
        loop {
            match s.write(b) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !self
                        .stop
                        .wait_writable(self.s.as_raw_fd(), Some(WRITE_TIMEOUT))
                    {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                }
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A peer's two lanes, for one generation of its address.
struct PeerConns {
    id: u64,
    addr: SocketAddr,
    lanes: [Out; 2],
    /// Removed: its lanes write what they have, then close.
    retiring: bool,
}

/// An inbound connection.
struct In {
    s: Stamped<TcpStream>,
    /// Who it is (0 until its hello).
    from: u64,
    opened: Instant,
    source: SocketAddr,
    /// Bytes read and not yet parsed: `buf[lo..hi]`.
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    re: Reassembly,
    /// Inside a chunk stream (a large message arrives).
    chunking: bool,
    /// A large message a helper reassembled, and when its last bytes came: not checked nor
    /// delivered yet.
    completed: Option<(Frame, Instant)>,
    /// A frame the loop's queue had no room for.
    held: Option<Inbound>,
    /// More may be readable (edge-triggered readiness not used up).
    more: bool,
}

/// Where an inbound connection stands after a pump.
enum Pumped {
    Open,
    Closed,
    Failed(String),
    /// A large message started: lend the connection to a helper.
    Lend,
}

/// What one frame read from a connection gave.
enum Got {
    /// A whole frame.
    Frame(Frame),
    /// A chunk went into the reassembly; this is the message it completed, if any.
    Chunk(Option<Frame>),
}

impl In {
    /// Delivers what was held, then parses, delivers and reads (a [`TURN_BYTES`] share);
    /// `again` is set when a share was used up with more to read.
    fn pump(
        &mut self,
        deliver: &mut impl FnMut(Inbound) -> Delivery,
        stats: &TransportStats,
        again: &mut bool,
    ) -> Pumped {
        if let Some(h) = self.held.take() {
            match deliver(h) {
                Delivery::Taken => {}
                Delivery::Full(h) => {
                    self.held = Some(h);
                    return Pumped::Open;
                }
                Delivery::Closed => return Pumped::Closed,
            }
        }
        if let Some((f, at)) = self.completed.take() {
            if let Some(p) = self.offer(f, at, deliver) {
                return p;
            }
        }
        let mut budget = TURN_BYTES;
        loop {
            loop {
                let got = match self.next_frame() {
                    Ok(Some(g)) => g,
                    Ok(None) => break,
                    Err(e) => return Pumped::Failed(e),
                };
                stats.frames_received.fetch_add(1, Ordering::Relaxed);
                let f = match got {
                    Got::Chunk(None) if !mem::replace(&mut self.chunking, true) => {
                        return Pumped::Lend;
                    }
                    Got::Chunk(None) => continue,
                    Got::Chunk(Some(f)) => {
                        self.chunking = false;
                        f
                    }
                    Got::Frame(f) => f,
                };
                let at = self.s.arrived();
                if let Some(p) = self.offer(f, at, deliver) {
                    return p;
                }
            }
            if !self.more {
                return Pumped::Open;
            }
            if budget == 0 {
                *again = true;
                return Pumped::Open;
            }
            self.make_room();
            match self.s.read(&mut self.buf[self.hi..]) {
                Ok(0) if self.lo == self.hi => return Pumped::Closed,
                Ok(0) => return Pumped::Failed("end of stream inside a frame".into()),
                Ok(n) => {
                    self.hi += n;
                    budget = budget.saturating_sub(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.more = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Pumped::Failed(e.to_string()),
            }
        }
    }

    /// Checks a frame and hands it to the replica; `None` to go on.
    fn offer(
        &mut self,
        f: Frame,
        at: Instant,
        deliver: &mut impl FnMut(Inbound) -> Delivery,
    ) -> Option<Pumped> {
        let f = match (self.from, f) {
            (0, Frame::Hello { node }) if node != 0 => {
                self.from = node;
                return None;
            }
            (0, _) => return Some(Pumped::Failed("the first frame was not a hello".into())),
            (_, Frame::Chunk { .. }) => {
                return Some(Pumped::Failed("a chunk frame inside a chunk stream".into()))
            }
            (_, Frame::Hello { .. }) => return Some(Pumped::Failed("a second hello".into())),
            (_, Frame::Advertise { mut raft }) => {
                // A replica listening on a wildcard address is reached at the address it
                // connected from.
                if raft.ip().is_unspecified() {
                    raft.set_ip(self.source.ip());
                }
                Frame::Advertise { raft }
            }
            (_, f) => f,
        };
        if let Frame::Raft(m) = &f {
            if m.from != self.from {
                return Some(Pumped::Failed(format!(
                    "node {} sent a message from {}",
                    self.from, m.from
                )));
            }
        }
        match deliver((self.from, f, at)) {
            Delivery::Taken => None,
            Delivery::Full(h) => {
                self.held = Some(h);
                Some(Pumped::Open)
            }
            Delivery::Closed => Some(Pumped::Closed),
        }
    }

    /// A helper thread's work on a lent inbound connection: reads the rest of a large
    /// message's chunks at bulk priority, until the message is whole (then `completed`) or a
    /// frame of another kind is next.
    fn read_large(&mut self, t: &Transport) -> Result<(), String> {
        let _low = LowPriority::new();
        loop {
            while self.next_kind() == Some(wire::K_CHUNK) {
                match self.next_frame()? {
                    None => break,
                    Some(Got::Chunk(done)) => {
                        t.stats.frames_received.fetch_add(1, Ordering::Relaxed);
                        if let Some(f) = done {
                            self.chunking = false;
                            self.completed = Some((f, self.s.arrived()));
                            return Ok(());
                        }
                    }
                    Some(Got::Frame(_)) => unreachable!("a chunk's kind"),
                }
            }
            if self.next_kind().is_some_and(|k| k != wire::K_CHUNK) {
                return Ok(());
            }
            self.make_room();
            match self.s.read(&mut self.buf[self.hi..]) {
                Ok(0) => return Err("end of stream inside a large message".into()),
                Ok(n) => self.hi += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !t.stop.wait_readable(self.s.s.as_raw_fd(), Some(LARGE_IDLE)) {
                        return Err(format!("no bytes of a large message for {LARGE_IDLE:?}"));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// The kind of the next frame, once its header is read.
    fn next_kind(&self) -> Option<u8> {
        self.buf[self.lo..self.hi]
            .first_chunk::<HEADER_LEN>()
            .map(|h| h[wire::KIND_AT])
    }

    /// At least [`READ_ROOM`] free after `hi` (what is unparsed moves to the front).
    fn make_room(&mut self) {
        if self.lo == self.hi {
            (self.lo, self.hi) = (0, 0);
            if !self.chunking && self.buf.len() > 4 * READ_ROOM {
                // A large frame passed: give its buffer back.
                self.buf = vec![0; READ_ROOM];
            }
        }
        if self.buf.len() - self.hi < READ_ROOM {
            self.buf.copy_within(self.lo..self.hi, 0);
            (self.lo, self.hi) = (0, self.hi - self.lo);
        }
        if self.buf.len() - self.hi < READ_ROOM {
            self.buf.resize(self.hi + READ_ROOM, 0);
        }
    }

    /// The next whole frame read, if any; a chunk goes straight into the reassembly.
    fn next_frame(&mut self) -> Result<Option<Got>, String> {
        let avail = &self.buf[self.lo..self.hi];
        let Some(h) = avail.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let (kind, len, crc) = wire::decode_header(h).map_err(|e| e.to_string())?;
        if avail.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let payload = &avail[HEADER_LEN..HEADER_LEN + len];
        self.lo += HEADER_LEN + len;
        if kind == wire::K_CHUNK {
            if waverunner_storage::crc::crc32c(payload) != crc {
                return Err("checksum mismatch".into());
            }
            let (total, offset, inner, piece) =
                wire::split_chunk(payload).map_err(|e| e.to_string())?;
            return self
                .re
                .push(total, offset, inner, piece)
                .map(|f| Some(Got::Chunk(f)))
                .map_err(|e| e.to_string());
        }
        wire::decode_payload(kind, crc, payload)
            .map(|f| Some(Got::Frame(f)))
            .map_err(|e| e.to_string())
    }
}

/// The transport thread's state.
struct Net<D> {
    t: Arc<Transport>,
    poll: Poll,
    listener: Listener,
    deliver: D,
    advertise: Option<SocketAddr>,
    /// By generation.
    peers: HashMap<u64, PeerConns>,
    inbound: HashMap<Token, In>,
    /// Inbound connections lent to helpers (they count against [`MAX_INBOUND`]).
    lent_in: usize,
    /// Outbound connections' tokens: (generation, lane).
    outbound: HashMap<Token, (u64, Lane)>,
    /// The peers' generations, gathered each turn (kept to reuse its allocation).
    generations: Vec<u64>,
    next_token: usize,
    /// Work is left for the next turn: poll without sleeping.
    again: bool,
    /// The earliest deadline of a connection (a retry, a timeout).
    next: Option<Instant>,
}

impl<D: FnMut(Inbound) -> Delivery> Net<D> {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            if self.t.stop.is_set() {
                return;
            }
            let now = Instant::now();
            self.again = false;
            self.next = None;
            self.take_outbox(now);
            let taken = Instant::now();
            self.drive_outbound(now);
            let written = Instant::now();
            self.drive_inbound(now);
            let read = Instant::now();
            if read.duration_since(now) > STALL {
                tracing::debug!(
                    target: "stall",
                    "node {}: a transport turn took {} µs (outbox {}, writes {}, reads {})",
                    self.t.self_id,
                    read.duration_since(now).as_micros(),
                    taken.duration_since(now).as_micros(),
                    written.duration_since(taken).as_micros(),
                    read.duration_since(written).as_micros()
                );
            }
            let mut timeout = if self.again {
                Some(Duration::ZERO)
            } else if self.inbound.values().any(|c| c.held.is_some()) {
                // The loop's queue was full: try again shortly.
                Some(Duration::from_millis(1))
            } else {
                self.next.map(|d| d.saturating_duration_since(now))
            };
            self.t.bell.sleep();
            // What was queued before the bell was armed rang nobody.
            if !self.t.outbox.lock().expect("outbox").is_empty() {
                timeout = Some(Duration::ZERO);
            }
            let polled = self.poll.poll(&mut events, timeout);
            self.t.bell.awake();
            if let Err(e) = polled {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("replica transport: poll failed: {e}");
                    return;
                }
            }
            for ev in events.iter() {
                match ev.token() {
                    STOP => return,
                    LISTENER => self.accept(),
                    t => {
                        if let Some(c) = self.inbound.get_mut(&t) {
                            c.more = true;
                        } else if let Some(&(generation, lane)) = self.outbound.get(&t) {
                            self.outbound_event(generation, lane, ev.is_readable());
                        }
                    }
                }
            }
        }
    }

    fn token(&mut self) -> Token {
        self.next_token += 1;
        Token(self.next_token)
    }

    fn deadline(&mut self, at: Instant) {
        self.next = Some(self.next.map_or(at, |n| n.min(at)));
    }

    /// Takes what other threads queued: frames, peers added and removed, connections handed
    /// back by helpers.
    fn take_outbox(&mut self, now: Instant) {
        let t = self.t.clone();
        let stats = &t.stats;
        let mut guard = t.outbox.lock().expect("outbox");
        let o = &mut *guard;
        let take = |peers: &mut HashMap<u64, PeerConns>, id: u64, p: &mut Peer| {
            let pc = peers.entry(p.generation).or_insert_with(|| PeerConns {
                id,
                addr: p.addr,
                lanes: [Out::new(now), Out::new(now)],
                retiring: false,
            });
            for lane in [Lane::Control, Lane::Bulk] {
                let (q, out) = (p.queued.lane(lane), &mut pc.lanes[lane.index()]);
                let room = SEND_QUEUE.saturating_sub(out.queue.len());
                if q.len() > room {
                    stats
                        .frames_dropped
                        .fetch_add((q.len() - room) as u64, Ordering::Relaxed);
                    q.truncate(room);
                }
                if out.queue.is_empty() {
                    mem::swap(&mut out.queue, q);
                } else {
                    out.queue.append(q);
                }
            }
        };
        for (id, p) in o.peers.iter_mut() {
            take(&mut self.peers, *id, p);
        }
        for (id, mut p) in o.retired.drain(..) {
            take(&mut self.peers, id, &mut p);
            if let Some(pc) = self.peers.get_mut(&p.generation) {
                pc.retiring = true;
            }
        }
        let returned = mem::take(&mut o.returned);
        drop(guard);
        for r in returned {
            match r {
                Returned::Out {
                    generation,
                    lane,
                    s,
                    sent,
                } => self.returned_out(generation, lane, s, sent, now),
                Returned::In { token, mut c, read } => {
                    self.lent_in -= 1;
                    match read {
                        Ok(()) => {
                            // Readiness may have come and gone while it was away.
                            c.more = true;
                            self.inbound.insert(token, *c);
                        }
                        Err(e) => {
                            stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!("closing a replica connection: {e}");
                            let _ = self.poll.registry().deregister(&mut c.s.s);
                        }
                    }
                }
            }
        }
    }

    /// An outbound connection a helper wrote a large message on, back.
    fn returned_out(
        &mut self,
        generation: u64,
        lane: Lane,
        mut s: TcpStream,
        sent: Sent,
        now: Instant,
    ) {
        let stats = &self.t.stats;
        let Some(pc) = self.peers.get_mut(&generation) else {
            let _ = self.poll.registry().deregister(&mut s);
            return;
        };
        let out = &mut pc.lanes[lane.index()];
        let Conn::Lent { token } = out.conn else {
            panic!("a connection returned twice");
        };
        match sent {
            Sent::Written => {
                stats.frames_sent.fetch_add(1, Ordering::Relaxed);
                out.conn = Conn::Up {
                    s,
                    token,
                    checked: false,
                };
                return;
            }
            Sent::Closed(big) => {
                stats.closed_found.fetch_add(1, Ordering::Relaxed);
                debug_assert!(out.big.is_none() && out.buf.is_empty());
                out.big = Some(big);
            }
            Sent::Failed(e) => {
                stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    "replica transport: a large message to {} failed: {e}",
                    pc.id
                );
            }
        }
        self.outbound.remove(&token);
        let _ = self.poll.registry().deregister(&mut s);
        out.conn = Conn::Down { retry: now };
    }

    /// Moves every outbound lane on: connects, writes, times out; ends retired peers' lanes
    /// once they wrote what they had.
    fn drive_outbound(&mut self, now: Instant) {
        let mut generations = mem::take(&mut self.generations);
        generations.clear();
        generations.extend(self.peers.keys().copied());
        for &generation in &generations {
            for lane in [Lane::Control, Lane::Bulk] {
                self.drive(generation, lane, now);
            }
            let done = self.peers.get(&generation).is_some_and(|pc| {
                pc.retiring
                    && pc
                        .lanes
                        .iter()
                        .all(|o| o.idle() || matches!(o.conn, Conn::Down { .. }))
            });
            if done {
                let mut pc = self.peers.remove(&generation).expect("present");
                for out in &mut pc.lanes {
                    out.drop_all(&self.t.stats);
                    out.close(&mut self.outbound, &self.poll, now);
                }
            }
        }
        self.generations = generations;
    }

    fn drive(&mut self, generation: u64, lane: Lane, now: Instant) {
        let t = self.t.clone();
        let stats = &t.stats;
        let Some(pc) = self.peers.get_mut(&generation) else {
            return;
        };
        let (id, addr, retiring) = (pc.id, pc.addr, pc.retiring);
        let out = &mut pc.lanes[lane.index()];
        let mut deadline = None;
        match &mut out.conn {
            Conn::Lent { .. } => {}
            Conn::Down { .. } if retiring => {
                // A removed peer that cannot be reached is not reconnected.
                out.drop_all(stats);
            }
            Conn::Down { retry } if *retry > now => deadline = Some(*retry),
            Conn::Down { .. } => {
                self.next_token += 1;
                let token = Token(self.next_token);
                let registered = TcpStream::connect(addr).and_then(|mut s| {
                    self.poll
                        .registry()
                        .register(&mut s, token, Interest::READABLE | Interest::WRITABLE)
                        .map(|()| s)
                });
                match registered {
                    Ok(s) => {
                        self.outbound.insert(token, (generation, lane));
                        out.conn = Conn::Connecting {
                            s,
                            token,
                            since: now,
                        };
                        deadline = Some(now + CONNECT_TIMEOUT);
                    }
                    Err(_) => {
                        out.connect_failed(&mut self.outbound, &self.poll, now, stats);
                        deadline = Some(now + out.backoff);
                    }
                }
            }
            Conn::Connecting { since, .. } if now.duration_since(*since) >= CONNECT_TIMEOUT => {
                tracing::debug!("replica transport: connecting to {id} at {addr} timed out");
                out.connect_failed(&mut self.outbound, &self.poll, now, stats);
                deadline = Some(now + out.backoff);
            }
            Conn::Connecting { since, .. } => deadline = Some(*since + CONNECT_TIMEOUT),
            Conn::Up { .. } => match out.flush(now, stats) {
                Flushed::Done => {}
                Flushed::Waiting(d) => deadline = Some(d),
                Flushed::Broken => {
                    out.broken(&mut self.outbound, &self.poll, now, stats);
                    self.again = true;
                }
                Flushed::Lend(big) => {
                    let Conn::Up { s, token, .. } =
                        mem::replace(&mut out.conn, Conn::Down { retry: now })
                    else {
                        unreachable!("flushed an open connection");
                    };
                    out.conn = Conn::Lent { token };
                    let helper = t.clone();
                    let spawned =
                        thread::Builder::new()
                            .name("raft-large".into())
                            .spawn(move || {
                                let sent = write_large(&helper, &s, big);
                                helper.give_back(Returned::Out {
                                    generation,
                                    lane,
                                    s,
                                    sent,
                                });
                            });
                    if let Err(e) = spawned {
                        // The connection and the message went with the closure.
                        tracing::warn!("replica transport: cannot start a helper: {e}");
                        stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
                        self.outbound.remove(&token);
                        out.conn = Conn::Down { retry: now };
                    }
                }
            },
        }
        if let Some(d) = deadline {
            self.deadline(d);
        }
    }

    /// A readiness event of an outbound connection.
    fn outbound_event(&mut self, generation: u64, lane: Lane, readable: bool) {
        let now = Instant::now();
        let (me, advertise) = (self.t.self_id, self.advertise);
        let t = self.t.clone();
        let Some(pc) = self.peers.get_mut(&generation) else {
            return;
        };
        let out = &mut pc.lanes[lane.index()];
        match &mut out.conn {
            Conn::Connecting { s, .. } => {
                if matches!(s.take_error(), Ok(Some(_)) | Err(_)) {
                    out.connect_failed(&mut self.outbound, &self.poll, now, &t.stats);
                } else if s.peer_addr().is_ok() {
                    out.up(now, &t.stats, me, advertise);
                }
                // Otherwise not connected yet: a later event says.
            }
            // The peer never writes on our connection: readable means it closed.
            Conn::Up { s, .. } if readable && peer_closed(s) => {
                t.stats.closed_found.fetch_add(1, Ordering::Relaxed);
                out.broken(&mut self.outbound, &self.poll, now, &t.stats);
            }
            _ => {}
        }
    }

    fn accept(&mut self) {
        loop {
            let (mut s, source) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("replica transport: accept failed: {e}");
                    return;
                }
            };
            if self.inbound.len() + self.lent_in >= MAX_INBOUND {
                self.t.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let token = self.token();
            if self
                .poll
                .registry()
                .register(&mut s, token, Interest::READABLE)
                .is_err()
            {
                continue;
            }
            let _ = s.set_nodelay(true);
            self.inbound.insert(
                token,
                In {
                    s: Stamped::new(s),
                    from: 0,
                    opened: Instant::now(),
                    source,
                    buf: vec![0; READ_ROOM],
                    lo: 0,
                    hi: 0,
                    re: Reassembly::default(),
                    chunking: false,
                    completed: None,
                    held: None,
                    more: true,
                },
            );
        }
    }

    /// Reads and delivers what inbound connections have; closes the broken ones and those
    /// that did not say hello in time; lends those where a large message starts.
    fn drive_inbound(&mut self, now: Instant) {
        let mut closed = Vec::new();
        let mut lend = Vec::new();
        let mut next = self.next;
        for (token, c) in self.inbound.iter_mut() {
            if c.from == 0 {
                if now.duration_since(c.opened) >= HELLO_TIMEOUT {
                    self.t.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("closing a replica connection: no hello in {HELLO_TIMEOUT:?}");
                    closed.push(*token);
                    continue;
                }
                let d = c.opened + HELLO_TIMEOUT;
                next = Some(next.map_or(d, |n| n.min(d)));
            }
            if !c.more && c.held.is_none() && c.completed.is_none() {
                continue;
            }
            match c.pump(&mut self.deliver, &self.t.stats, &mut self.again) {
                Pumped::Open => {}
                Pumped::Lend => lend.push(*token),
                Pumped::Closed => closed.push(*token),
                Pumped::Failed(e) => {
                    self.t.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("closing a replica connection: {e}");
                    closed.push(*token);
                }
            }
        }
        self.next = next;
        for token in closed {
            if let Some(mut c) = self.inbound.remove(&token) {
                let _ = self.poll.registry().deregister(&mut c.s.s);
            }
        }
        for token in lend {
            let c = Box::new(self.inbound.remove(&token).expect("present"));
            let helper = self.t.clone();
            let spawned = thread::Builder::new()
                .name("raft-large".into())
                .spawn(move || {
                    let mut c = c;
                    let read = c.read_large(&helper);
                    helper.give_back(Returned::In { token, c, read });
                });
            match spawned {
                Ok(_) => self.lent_in += 1,
                Err(e) => {
                    // The connection went with the closure: closed.
                    tracing::warn!("replica transport: cannot start a helper: {e}");
                    self.t.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

impl Lane {
    fn index(self) -> usize {
        match self {
            Lane::Control => 0,
            Lane::Bulk => 1,
        }
    }
}

/// Whether the peer closed (or reset) this outbound connection. The peer never writes on it,
/// so anything readable is an end of stream or an error.
fn peer_closed(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: a one-byte peek into a live local buffer on an open socket.
    let rc = unsafe {
        libc::recv(
            s.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        );
    }
    // 0: end of stream. >0: the peer broke protocol by writing; treat it as closed too.
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_waited_in_the_socket_are_stamped_when_they_arrived() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        let mut rx = Stamped::new(rx);
        // The kernel turns receive timestamps on for the whole machine a moment after the
        // first socket asks (a deferred static key): until then reads carry none.
        let mut b = [0u8; 5];
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            tx.write_all(b"warm!").unwrap();
            rx.read_exact(&mut b).unwrap();
            if rx.last.is_some_and(|t| t.tv_sec > 0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the kernel gives no receive timestamps"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        tx.write_all(b"early").unwrap();
        // The receiver is late by at least this much.
        std::thread::sleep(Duration::from_millis(300));
        rx.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"early");
        let age = rx.arrived().elapsed();
        assert!(age >= Duration::from_millis(250), "stamped {age:?} ago");
        // Bytes read as they come are stamped about now.
        tx.write_all(b"late!").unwrap();
        rx.read_exact(&mut b).unwrap();
        assert!(rx.arrived().elapsed() < Duration::from_millis(250));
    }
}
