//! The native UDP client protocol (`waverunner_kv::native`): one datagram per request and
//! per reply. Invalid datagrams are counted and dropped (a reply to a forged source would be
//! a reflection vector).
//!
//! Without a data plane the client port is the front-ends' event loop's ([`NativeLoop`],
//! driven by [`super::tcp::Frontend`]: the replica loop itself by default). Datagrams are read
//! in batches (`recvmmsg`) and submitted with no hand-off between threads, and the replies of
//! one turn of the loop leave together (`sendmmsg`). With a data plane the data plane owns the
//! port and passes up the requests it does not order itself ([`Native::on_datagram`]): `xdp`
//! through its socket, which the replica loop reads (no thread between), `udp` from its own
//! thread.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use mio::{Interest, Registry, Token};
use waverunner_mmsg as mmsg;

use super::Mailbox;
use crate::kvsm::response_of;
use waverunner_kv::native::{self as proto, STATUS_ERROR, STATUS_OK, STATUS_RETRY, STATUS_UNKNOWN};

use waverunner_node::clients::{Propose, Wake};
use waverunner_node::replica::{ClientError, Handle, Submit};

/// Datagrams the loop reads per turn at most: the rest wait for the next turn (the loop does
/// not sleep while the socket may hold more), so a flood cannot hold the loop off Raft.
pub const READ_BUDGET: usize = 4 * mmsg::MAX_BATCH;

/// The client port's receive buffer: a burst waits there while the loop drives Raft between
/// its reads (the default, about 200 KiB, holds some 270 requests). Not more: it is the queue
/// ahead of admission, and under overload a request that waited past its client's timeout is
/// work for nothing (32 MiB, the fast path's, cost a third of the `off` goodput at twice the
/// peak), so past it the kernel drops, which the client's timeout answers.
pub const RECEIVE_BUFFER: libc::c_int = 1 << 20;

/// Whether the socket's receive queue is at least half full.
fn overloaded(fd: std::os::fd::RawFd) -> bool {
    mmsg::receive_queue(fd).is_some_and(|(used, size)| used >= size / 2)
}

/// The request in datagram `pkt` from `peer` as a submission whose reply goes to `send`, or
/// `None` (counted as a client error) if it is not a client's valid request.
fn request(
    pkt: &[u8],
    peer: SocketAddr,
    self_id: u64,
    handle: &Handle,
    send: Box<dyn FnOnce(Vec<u8>) + Send>,
) -> Option<Submit> {
    let req = match proto::decode_request(pkt) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!("dropped a bad datagram from {peer}: {e}");
            handle.client_error();
            return None;
        }
    };
    if req.origin != 0 {
        // Replicas forward over TCP; a datagram naming an origin is not a client's.
        tracing::debug!(
            "dropped a datagram from {peer} naming origin {}",
            req.origin
        );
        handle.client_error();
        return None;
    }
    let (h, seq) = (handle.clone(), req.seq);
    Some(Submit {
        client: req.client,
        seq: req.seq,
        command: req.command,
        decoded: Some(Box::new(req.op)),
        reply: Box::new(move |r| {
            let leader = h.leader();
            let pkt = match r.map(response_of) {
                Ok(Ok(resp)) => proto::encode_reply(self_id, seq, STATUS_OK, leader, Ok(&resp)),
                Ok(Err(e)) => {
                    let m = format!("undecodable result: {e}");
                    proto::encode_reply(self_id, seq, STATUS_ERROR, leader, Err(&m))
                }
                Err(e) => error_reply(self_id, seq, leader, &e),
            };
            send(pkt);
        }),
    })
}

/// The reply to request `seq` that failed with `e`: unknown outcome, error, or retry.
fn error_reply(self_id: u64, seq: u64, leader: u64, e: &ClientError) -> Vec<u8> {
    let status = match e {
        ClientError::Timeout | ClientError::ShuttingDown => STATUS_UNKNOWN,
        ClientError::OutOfMemory => STATUS_ERROR,
        _ => STATUS_RETRY,
    };
    proto::encode_reply(self_id, seq, status, leader, Err(&e.to_string()))
}

/// The requests a data plane passes up: decoded and submitted where they are read (the replica
/// loop for `xdp`, the data plane's thread for `udp`); their replies leave from the fast-path
/// socket with the client loop's next turn ([`Outbox`]).
pub struct Native {
    out: Arc<Outbox>,
    handle: Handle,
    self_id: u64,
}

impl Native {
    /// A front-end whose replies go out through `out` (which knows the socket).
    pub fn new(out: Arc<Outbox>, handle: Handle, self_id: u64) -> Native {
        Native {
            out,
            handle,
            self_id,
        }
    }

    /// Handles one datagram from `peer`, submitting it to `to` (the replica loop itself when
    /// it reads the data plane's socket).
    pub fn on_datagram(&self, pkt: &[u8], peer: SocketAddr, to: &mut dyn Propose) {
        let o = self.out.clone();
        let send = Box::new(move |p: Vec<u8>| o.push(peer, p));
        if let Some(s) = request(pkt, peer, self.self_id, &self.handle, send) {
            to.submit(s);
        }
    }
}

/// Native replies waiting for the client loop's next turn, and the socket they leave from.
/// Bounded: one per request submitted and not yet answered (the replica admits a bounded
/// number, `replica::MAX_ADMITTED`), and the busy replies of one turn (the ration's burst).
pub struct Outbox {
    replies: Mailbox<(SocketAddr, Vec<u8>)>,
    /// The client port (the data plane's fast-path socket when one runs), set once.
    sock: OnceLock<Arc<UdpSocket>>,
}

impl Outbox {
    /// An empty outbox with no socket yet.
    pub fn new() -> Arc<Outbox> {
        Arc::new(Outbox {
            replies: Mailbox::new(),
            sock: OnceLock::new(),
        })
    }

    /// Replies leave from `sock` (the first socket set stays).
    pub fn send_from(&self, sock: Arc<UdpSocket>) {
        let _ = self.sock.set(sock);
    }

    fn push(&self, to: SocketAddr, pkt: Vec<u8>) {
        self.replies.push((to, pkt));
    }

    /// Sends every reply waiting, in order (one `sendmmsg` per 64), through `scratch`.
    fn flush(&self, scratch: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let Some(sock) = self.sock.get() else {
            return;
        };
        self.replies.take_into(scratch);
        if scratch.is_empty() {
            return;
        }
        mmsg::send_all(
            sock.as_raw_fd(),
            scratch.len(),
            |i| (scratch[i].0, scratch[i].1.as_slice()),
            |to, e| tracing::debug!("native front-end: reply to {to} failed: {e}"),
        );
        scratch.clear();
    }
}

/// The native front-end on the client event loop: without a data plane it owns the client
/// port and reads it; with one it sends the replies to what the data plane passed up.
pub struct NativeLoop {
    /// The client port, when it is the front-end's (no data plane).
    sock: Option<mio::net::UdpSocket>,
    out: Arc<Outbox>,
    self_id: u64,
    batch: mmsg::RecvBatch,
    /// Set at registration.
    handle: Option<Handle>,
    /// The socket may hold datagrams not read yet.
    readable: bool,
    /// Scratch for a flush (reused).
    sending: Vec<(SocketAddr, Vec<u8>)>,
    /// The busy replies' ration (`fp::busy_answer`'s state) and its clock's origin.
    busy_tat: u64,
    epoch: Instant,
}

impl NativeLoop {
    /// The native front-end: of the client port `sock` when it is the front-end's (no data
    /// plane), else of the replies to what a data plane passes up ([`NativeLoop::outbox`]).
    pub fn new(sock: Option<UdpSocket>, self_id: u64) -> std::io::Result<NativeLoop> {
        let out = Outbox::new();
        let sock = match sock {
            Some(sock) => {
                sock.set_nonblocking(true)?;
                mmsg::set_buffer(sock.as_raw_fd(), mmsg::Buffer::Receive, RECEIVE_BUFFER);
                out.send_from(Arc::new(sock.try_clone()?));
                Some(mio::net::UdpSocket::from_std(sock))
            }
            None => None,
        };
        Ok(NativeLoop {
            readable: sock.is_some(),
            sock,
            out,
            self_id,
            batch: mmsg::RecvBatch::new(mmsg::MAX_BATCH, proto::MAX_DATAGRAM),
            handle: None,
            sending: Vec::new(),
            busy_tat: 0,
            epoch: Instant::now(),
        })
    }

    /// Where the replies to [`Native`]'s requests go (a data plane owns the port; its socket is
    /// set with [`Outbox::send_from`]).
    pub fn outbox(&self) -> Arc<Outbox> {
        self.out.clone()
    }

    /// Registers the socket, if it reads one, at `token`.
    pub(super) fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        handle: &Handle,
        wake: Wake,
    ) -> std::io::Result<()> {
        if let Some(s) = self.sock.as_mut() {
            registry.register(s, token, Interest::READABLE)?;
        }
        self.out.replies.wake_with(wake);
        self.handle = Some(handle.clone());
        Ok(())
    }

    /// The socket is readable.
    pub(super) fn on_readable(&mut self) {
        self.readable = true;
    }

    /// Sends the replies that came, reads and submits what arrived (at most
    /// [`READ_BUDGET`]), and sends the replies that gave at once (busy, refused).
    pub(super) fn turn(&mut self, to: &mut dyn Propose) {
        self.out.flush(&mut self.sending);
        let (Some(sock), Some(handle)) = (self.sock.as_ref(), self.handle.clone()) else {
            return;
        };
        let fd = sock.as_raw_fd();
        let mut read = 0;
        while self.readable && read < READ_BUDGET {
            let n = match self.batch.recv(fd, libc::MSG_DONTWAIT) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // An ICMP error queued on the socket (a client that went away): the next
                    // receive goes on.
                    tracing::debug!("native front-end: receive: {e}");
                    continue;
                }
            };
            read += n.max(1);
            for i in 0..n {
                let (src, pkt, truncated) = self.batch.get(i);
                let Some(peer) = src else { continue };
                if truncated {
                    tracing::debug!("dropped an oversize datagram from {peer}");
                    handle.client_error();
                    continue;
                }
                let o = self.out.clone();
                let send = Box::new(move |p: Vec<u8>| o.push(peer, p));
                if let Some(s) = request(pkt, peer, self.self_id, &handle, send) {
                    to.submit(s);
                }
            }
        }
        if self.readable && overloaded(fd) {
            self.shed(fd, &handle);
        }
        self.out.flush(&mut self.sending);
    }

    /// Overload: the loop read its budget and the socket's queue is still half full. Requests
    /// are refused as the data planes' leaders refuse them (`fp::busy_answer`): a busy reply
    /// while the ration lasts ([`waverunner_fastpath::BUSY_BURST`] at once, then one every
    /// [`waverunner_fastpath::BUSY_EVERY_NS`]); past it the kernel drops what does not fit, and
    /// the client's timeout answers it. One batch is read only when a reply is granted, and a
    /// refused request is read only as far as its header (as the data planes refuse it).
    fn shed(&mut self, fd: std::os::fd::RawFd, handle: &Handle) {
        let now = || self.epoch.elapsed().as_nanos() as u64;
        if !waverunner_fastpath::busy_answer(now(), &mut self.busy_tat) {
            return;
        }
        let Ok(n) = self.batch.recv(fd, libc::MSG_DONTWAIT) else {
            return;
        };
        let leader = handle.leader();
        let mut granted = true;
        for i in 0..n {
            if i > 0 {
                granted = waverunner_fastpath::busy_answer(now(), &mut self.busy_tat);
            }
            let (src, pkt, truncated) = self.batch.get(i);
            match (src, waverunner_fastpath::Header::decode(pkt)) {
                (Some(peer), Ok((h, _)))
                    if granted && !truncated && h.kind == waverunner_fastpath::CLIENT_REQUEST =>
                {
                    let busy = error_reply(self.self_id, h.seq, leader, &ClientError::Busy);
                    self.out.push(peer, busy);
                }
                (_, Err(_)) => handle.client_error(),
                _ => {}
            }
        }
        handle.admission().note_refused(n as u64);
    }

    /// The loop is about to sleep: false if replies wait or datagrams may (then it must not).
    pub(super) fn idle(&self) -> bool {
        !self.readable && self.out.replies.idle()
    }
}
