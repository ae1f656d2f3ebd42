//! TCP transport between replicas: two outbound connections per peer ([`Lane`]: control and
//! bulk), each with a bounded send queue and reconnection with backoff, and inbound connections whose frames are checked and handed
//! to the replica's event queue. Raft tolerates loss: a full queue or a broken connection drops
//! frames (counted), it never blocks the replica.
//!
//! Peers come and go with membership changes: [`Transport::add_peer`] starts talking to a new
//! member, [`Transport::remove_peer`] stops talking to a removed one (its sender thread ends and
//! closes the connection). Every outbound connection opens with `Hello` (who is speaking) and
//! `Advertise` (where the speaker listens), so a replica can answer a peer it has no address
//! for yet — a joining replica learns its leader's address this way.
//!
//! A peer that crashes or restarts closes its end of our outbound connection. Writing into
//! such a connection succeeds locally and loses the bytes (only the next write fails), so the
//! sender checks for the close before every write and every [`IDLE_CHECK`] while idle, and
//! sends the batch on a new connection instead. Without this, the first votes after a peer's
//! restart vanished and elections took a round more (split votes in the failover tests).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::mem;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use waverunner_raft::MessageBody;

use crate::priority::LowPriority;
use crate::stop::Stop;
use crate::wire::{self, Frame, Reassembly, HEADER_LEN};

/// Frames queued per peer before new ones are dropped.
pub const SEND_QUEUE: usize = 4_096;
/// Forwarded commands longer than this take the bulk lane.
const BULK_FORWARD: usize = 16 << 10;
/// Inbound connections accepted at once.
pub const MAX_INBOUND: usize = 64;
/// How often an idle sender checks that its peer has not closed the connection (a sender also
/// checks before every write, so this only starts a reconnection earlier).
const IDLE_CHECK: Duration = Duration::from_millis(500);
/// The longest wait between connection attempts to an unreachable peer: a restarted peer is
/// reached within this of listening again (its first messages, votes included, are lost
/// until then).
const MAX_BACKOFF: Duration = Duration::from_millis(100);

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
/// the kernel's receive time of the frame's last bytes, not when a receiver thread got to read
/// them: after a stall of the whole process, frames that waited in its sockets still count as
/// heard when they came (a leader stepped down by check-quorum, the missed ticks replayed
/// before frames its receivers read only after the stall).
pub type Inbound = (u64, Frame, Instant);

/// A TCP stream read with `recvmsg`, which remembers the kernel's receive time of the last
/// bytes read (`SO_TIMESTAMPNS`: a `timespec` of `CLOCK_REALTIME`).
struct Stamped {
    s: TcpStream,
    /// Receive time of the last bytes read (`CLOCK_REALTIME`), if the kernel gave one.
    last: Option<libc::timespec>,
}

impl Stamped {
    fn new(s: TcpStream) -> Stamped {
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

impl Read for Stamped {
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

struct PeerQueue {
    addr: SocketAddr,
    control: SyncSender<Frame>,
    bulk: SyncSender<Frame>,
    /// Set when the peer is removed: its sender threads end.
    gone: Arc<AtomicBool>,
}

/// Outbound half: queues per peer.
pub struct Transport {
    queues: Mutex<HashMap<u64, PeerQueue>>,
    /// Counters.
    pub stats: Arc<TransportStats>,
    self_id: u64,
    /// Where this replica listens for replicas, told to every peer after the hello.
    advertise: Option<SocketAddr>,
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
        deliver: impl Fn(Inbound) -> bool + Send + Sync + 'static,
        stop: Arc<Stop>,
    ) -> Arc<Transport> {
        let stats = Arc::new(TransportStats::default());
        let t = Arc::new(Transport {
            queues: Mutex::new(HashMap::new()),
            stats: stats.clone(),
            self_id,
            advertise,
            stop: stop.clone(),
        });
        for (id, addr) in peers {
            t.add_peer(*id, *addr);
        }
        let deliver = Arc::new(deliver);
        thread::Builder::new()
            .name("raft-accept".into())
            .spawn(move || accept_loop(listener, deliver, stats, stop))
            .expect("spawn accept thread");
        t
    }

    /// Starts connecting to a peer. Idempotent; a known peer at a new address is reconnected
    /// there.
    pub fn add_peer(&self, id: u64, addr: SocketAddr) {
        let mut q = self.queues.lock().expect("queues");
        if id == self.self_id || id == 0 {
            return;
        }
        match q.get(&id) {
            Some(p) if p.addr == addr => return,
            Some(p) => p.gone.store(true, Ordering::Relaxed),
            None => {}
        }
        let (control, control_rx) = sync_channel(SEND_QUEUE);
        let (bulk, bulk_rx) = sync_channel(SEND_QUEUE);
        let gone = Arc::new(AtomicBool::new(false));
        q.insert(
            id,
            PeerQueue {
                addr,
                control,
                bulk,
                gone: gone.clone(),
            },
        );
        for (lane, rx) in [(Lane::Control, control_rx), (Lane::Bulk, bulk_rx)] {
            let (stats, stop, gone, me, adv) = (
                self.stats.clone(),
                self.stop.clone(),
                gone.clone(),
                self.self_id,
                self.advertise,
            );
            let name = match lane {
                Lane::Control => format!("raft-send-{id}"),
                Lane::Bulk => format!("raft-bulk-{id}"),
            };
            thread::Builder::new()
                .name(name)
                .spawn(move || send_loop(me, adv, addr, rx, stats, stop, gone))
                .expect("spawn sender thread");
        }
    }

    /// Stops talking to a peer (a removed member): frames to it are dropped from now on, its
    /// sender thread ends and closes its connection. Unknown peers are ignored.
    pub fn remove_peer(&self, id: u64) {
        if let Some(p) = self.queues.lock().expect("queues").remove(&id) {
            p.gone.store(true, Ordering::Relaxed);
        }
    }

    /// The peers this transport talks to, by id.
    pub fn peers(&self) -> Vec<(u64, SocketAddr)> {
        let mut v: Vec<(u64, SocketAddr)> = self
            .queues
            .lock()
            .expect("queues")
            .iter()
            .map(|(id, p)| (*id, p.addr))
            .collect();
        v.sort_unstable();
        v
    }

    /// Queues `f` for peer `to`; drops it (counted) if the queue is full or `to` is unknown.
    /// The peer's sender thread encodes it: the replica loop never copies a large value into
    /// frames.
    pub fn send(&self, to: u64, f: Frame) {
        let q = self.queues.lock().expect("queues");
        let lane = Lane::of(&f);
        let queued = q.get(&to).is_some_and(|p| {
            match lane {
                Lane::Control => p.control.try_send(f),
                Lane::Bulk => p.bulk.try_send(f),
            }
            .is_ok()
        });
        if !queued {
            // The queue was full, the sender gone, or `to` unknown.
            self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn send_loop(
    me: u64,
    advertise: Option<SocketAddr>,
    addr: SocketAddr,
    rx: Receiver<Frame>,
    stats: Arc<TransportStats>,
    stop: Arc<Stop>,
    gone: Arc<AtomicBool>,
) {
    let mut backoff = Duration::from_millis(5);
    let ended = || stop.is_set() || gone.load(Ordering::Relaxed);
    // Frames taken from the queue for a connection found closed before they were written:
    // the next connection sends them first.
    let mut carried: Vec<u8> = Vec::new();
    let mut carried_n = 0u64;
    while !ended() {
        let mut s = match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => s,
            Err(_) => {
                // Frames queued for an unreachable peer are stale by the time it is back.
                let mut dropped = mem::take(&mut carried_n);
                carried.clear();
                while rx.try_recv().is_ok() {
                    dropped += 1;
                }
                stats.frames_dropped.fetch_add(dropped, Ordering::Relaxed);
                thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = Duration::from_millis(5);
        stats.connects.fetch_add(1, Ordering::Relaxed);
        let _ = s.set_nodelay(true);
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        let mut batch = Vec::new();
        wire::encode_frames(&Frame::Hello { node: me }, &mut batch);
        if let Some(raft) = advertise {
            wire::encode_frames(&Frame::Advertise { raft }, &mut batch);
        }
        batch.append(&mut carried);
        let mut n = mem::take(&mut carried_n);
        if s.write_all(&batch).is_err() {
            stats.frames_dropped.fetch_add(n, Ordering::Relaxed);
            continue;
        }
        stats.frames_sent.fetch_add(n, Ordering::Relaxed);
        batch.clear();
        loop {
            // A removed peer's queue is dropped with it: what was queued before the removal
            // (the last append, which tells it of its removal) is received, written, and then
            // the channel reports the disconnection. Checking `gone` here would lose it.
            if stop.is_set() {
                return;
            }
            let mut large = match rx.recv_timeout(IDLE_CHECK) {
                Ok(f) => wire::encode_or_large(&f, &mut batch),
                Err(RecvTimeoutError::Timeout) => {
                    // Notice a peer that went away while idle, so the reconnection (and its
                    // backoff) starts now rather than at the next frame.
                    if peer_closed(&s) {
                        stats.closed_found.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            n = 1;
            // Coalesce what is queued into one write (bounded); a large message ends the
            // batch and is written after it, piece by piece.
            while batch.len() < 4 << 20 && large.is_none() {
                match rx.try_recv() {
                    Ok(f) => {
                        large = wire::encode_or_large(&f, &mut batch);
                        n += 1;
                    }
                    Err(_) => break,
                }
            }
            // A write into a connection the peer has closed (it crashed or restarted) succeeds
            // locally and the bytes vanish; only the write after it fails. Check first, so the
            // batch goes to the peer's next incarnation instead of nowhere.
            if peer_closed(&s) {
                stats.closed_found.fetch_add(1, Ordering::Relaxed);
                carried = mem::take(&mut batch);
                if let Some(l) = &large {
                    l.write_to(&mut carried).expect("writing to memory");
                }
                carried_n = n;
                break;
            }
            let written = s.write_all(&batch);
            let written = written.and_then(|()| match &large {
                Some(l) => {
                    let _low = LowPriority::new();
                    l.write_to(&mut s)
                }
                None => Ok(()),
            });
            if written.is_err() {
                stats.frames_dropped.fetch_add(n, Ordering::Relaxed);
                batch.clear();
                break;
            }
            stats.frames_sent.fetch_add(n, Ordering::Relaxed);
            batch.clear();
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
        let e = std::io::Error::last_os_error();
        return !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        );
    }
    // 0: end of stream. >0: the peer broke protocol by writing; treat it as closed too.
    true
}

fn accept_loop<D: Fn(Inbound) -> bool + Send + Sync + 'static>(
    listener: TcpListener,
    deliver: Arc<D>,
    stats: Arc<TransportStats>,
    stop: Arc<Stop>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let _ = listener.set_nonblocking(true);
    while !stop.is_set() {
        let (s, _) = match listener.accept() {
            Ok(x) => x,
            Err(_) => {
                stop.wait_readable(listener.as_raw_fd(), None);
                continue;
            }
        };
        if open.load(Ordering::Relaxed) >= MAX_INBOUND {
            stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        open.fetch_add(1, Ordering::Relaxed);
        let (deliver, stats, open) = (deliver.clone(), stats.clone(), open.clone());
        let _ = thread::Builder::new()
            .name("raft-recv".into())
            .spawn(move || {
                if let Err(e) = recv_loop(s, &*deliver, &stats) {
                    stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("closing a replica connection: {e}");
                }
                open.fetch_sub(1, Ordering::Relaxed);
            });
    }
}

/// What one frame read from a connection gave.
enum Got {
    /// A whole frame.
    Frame(Frame),
    /// A chunk went into the reassembly; this is the message it completed, if any.
    Chunk(Option<Frame>),
}

/// Reads one frame into `buf` (reused from frame to frame); a chunk goes straight into `re`.
/// `None` at end of stream.
fn read_frame(
    s: &mut impl Read,
    buf: &mut Vec<u8>,
    re: &mut Reassembly,
) -> Result<Option<Got>, String> {
    let mut h = [0u8; HEADER_LEN];
    match s.read_exact(&mut h) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let (kind, len, crc) = wire::decode_header(&h).map_err(|e| e.to_string())?;
    buf.clear();
    let got = Read::by_ref(s)
        .take(len as u64)
        .read_to_end(buf)
        .map_err(|e| e.to_string())?;
    if got != len {
        return Err("end of stream inside a frame".into());
    }
    if kind == wire::K_CHUNK {
        if waverunner_storage::crc::crc32c(buf) != crc {
            return Err("checksum mismatch".into());
        }
        let (total, offset, inner, piece) = wire::split_chunk(buf).map_err(|e| e.to_string())?;
        return re
            .push(total, offset, inner, piece)
            .map(|f| Some(Got::Chunk(f)))
            .map_err(|e| e.to_string());
    }
    wire::decode_payload(kind, crc, buf)
        .map(|f| Some(Got::Frame(f)))
        .map_err(|e| e.to_string())
}

fn recv_loop(
    s: TcpStream,
    deliver: &dyn Fn(Inbound) -> bool,
    stats: &TransportStats,
) -> Result<(), String> {
    let _ = s.set_nodelay(true);
    let source = s.peer_addr().ok();
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut s = Stamped::new(s);
    let mut buf = Vec::new();
    let mut re = Reassembly::default();
    let from = match read_frame(&mut s, &mut buf, &mut re)? {
        Some(Got::Frame(Frame::Hello { node })) if node != 0 => node,
        Some(_) => return Err("the first frame was not a hello".into()),
        None => return Ok(()),
    };
    // Peers may be idle for long: only the hello has a deadline.
    s.s.set_read_timeout(None).map_err(|e| e.to_string())?;
    // Held while a large message arrives in chunks.
    let mut low: Option<LowPriority> = None;
    while let Some(got) = read_frame(&mut s, &mut buf, &mut re)? {
        stats.frames_received.fetch_add(1, Ordering::Relaxed);
        let f = match got {
            Got::Chunk(None) => {
                low.get_or_insert_with(LowPriority::new);
                continue;
            }
            Got::Chunk(Some(f)) => {
                low = None;
                f
            }
            Got::Frame(f) => f,
        };
        let f = match f {
            Frame::Chunk { .. } => return Err("a chunk frame inside a chunk stream".into()),
            Frame::Hello { .. } => return Err("a second hello".into()),
            Frame::Advertise { mut raft } => {
                // A replica listening on a wildcard address is reached at the address it
                // connected from.
                if raft.ip().is_unspecified() {
                    if let Some(src) = source {
                        raft.set_ip(src.ip());
                    }
                }
                Frame::Advertise { raft }
            }
            f => f,
        };
        if let Frame::Raft(m) = &f {
            if m.from != from {
                return Err(format!("node {from} sent a message from {}", m.from));
            }
        }
        if !deliver((from, f, s.arrived())) {
            return Ok(());
        }
    }
    Ok(())
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
