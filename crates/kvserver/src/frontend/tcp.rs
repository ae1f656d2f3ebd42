//! The TCP front-ends' event loop: every RESP and memcached connection of a replica served by
//! one thread (mio over epoll), not a thread each: by default the replica loop itself, so a
//! request is read, proposed, replicated and answered without a hand-off between threads.
//!
//! A connection's pipelined commands are parsed as they arrive and submitted together, before
//! any answer is awaited. What every connection has ready at the end of one round of events
//! goes to the replica as one command — a batch entry ([`waverunner_kv::Op::Batch`]), applied in
//! order — so concurrent clients share a log entry and a replication round (group commit at no
//! added delay: a lone client's command leaves at once). A connection has at most one batch in
//! flight, so its commands apply in the order sent. Answers come back through a completion
//! queue and are written in request order (Redis and memcached semantics).
//!
//! A blocking pop (`BLPOP` …) that finds nothing parks its connection (nothing after it is
//! submitted, as Redis stops a blocked client): when this replica has applied new entries a
//! read-only probe (how many of its keys hold a list, or a sorted set: no log entry) looks, and only when it finds a key
//! does the pop go through the log again. The timeout answers as Redis does; a pop that
//! unblocks the client is one entry, whichever replica took the push, across leader changes.
//!
//! Bounds: [`MAX_PIPELINE`] commands in flight per connection and [`MAX_OUT`] bytes of unsent
//! replies; past either the connection is not read (TCP backpressure) until its answers
//! drain. `max_connections` connections per listener; more get the protocol's error and are
//! closed. A request larger than any the limits allow is refused with an error.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};

use waverunner_kv::codec::{batch_command, encode_op};
use waverunner_kv::{memcache, resp, Op, Response};
use waverunner_node::clients::{ClientLoop, Propose, Wake, FIRST_TOKEN};
use waverunner_node::replica::{ClientError, Handle, Submit};
use waverunner_node::sm::{Answer, Decoded};

use crate::kvsm::response_of;

use super::memcache as memcache_fe;
use super::native::NativeLoop;
use super::resp as resp_fe;
use super::{max_request, Limits, Mailbox, Protocol};

/// Commands of one connection submitted and not answered yet, at most. A client pipelining
/// more waits (its socket is not read) until answers drain.
pub const MAX_PIPELINE: usize = 1_024;

/// Bytes of replies waiting to be sent on one connection, at most, before it is no longer read:
/// a client that sends but does not read cannot make the replica buffer without bound.
pub const MAX_OUT: usize = 4 << 20;

/// A batch of several operations holds at most this many bytes without a data plane (a
/// larger operation goes alone); see `Limits::max_batch_bytes`.
pub const MAX_BATCH_BYTES: usize = 1 << 20;

/// Bytes read from a socket per `read` call.
const READ_CHUNK: usize = 64 << 10;

/// How often the loop looks at parked blocking pops (their timeouts, and whether new entries
/// were applied) while any is parked.
const PARKED_TICK: Duration = Duration::from_millis(2);

const LISTENER0: usize = FIRST_TOKEN;
/// The native client port's token ([`NativeLoop`]), below the connections'.
const NATIVE: usize = CONN0 - 1;
const CONN0: usize = 16;

/// How to turn the store's response into the reply a command expects.
pub(super) enum Render {
    /// A Redis reply; counted in `INFO commandstats` when `Timed`.
    Redis(resp::Render, resp::Proto, Option<Timed>),
    /// `EXEC`: an array of the queued commands' replies, in order; those of the store's
    /// operations come from the transaction's [`Response::Batch`], one per `Store` slot.
    Exec(Vec<ExecSlot>, resp::Proto),
    /// The reply, unless the client said `noreply`.
    Memcache(memcache::McRender, bool),
    /// A memcached binary answer.
    McBinary(waverunner_kv::mcbin::BinRender),
    /// A blocking pop (outside a transaction): parked while it finds nothing.
    Block(Box<Blocked>),
    /// Rendered (and counted) but not sent (`CLIENT REPLY OFF|SKIP`).
    Quiet(Box<Render>),
}

/// A blocking pop's state while its connection waits.
pub(super) struct Blocked {
    /// How its reply is rendered.
    pub how: resp::Render,
    pub proto: resp::Proto,
    /// The pop, encoded: submitted again when the probe finds a key.
    pub op: Vec<u8>,
    /// How many of its keys hold its type ([`waverunner_kv::Op::Ready`]), encoded: a read,
    /// submitted when new entries were applied.
    pub probe: Vec<u8>,
    /// When it answers `empty` (none: never).
    pub deadline: Option<Instant>,
    /// Its answer on timeout (Redis's: a nil array, or a nil for `BLMOVE`/`BRPOPLPUSH`).
    pub empty: waverunner_kv::Reply,
    /// For `INFO commandstats`.
    pub timed: Option<Timed>,
}

/// A command to count in `INFO commandstats` when answered: its name, and when it arrived.
pub(super) struct Timed {
    pub name: &'static str,
    pub since: Instant,
}

impl Timed {
    fn done(&self, reply: &[u8]) {
        super::stats::called(self.name, self.since.elapsed(), reply.starts_with(b"-"));
    }
}

impl Blocked {
    fn timed_out(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    fn empty_reply(&self) -> Vec<u8> {
        let r = resp::render_proto(&self.how, &Response::Reply(self.empty.clone()), self.proto);
        if let Some(t) = &self.timed {
            t.done(&r);
        }
        r
    }
}

/// A connection's parked blocking pop: its request number, and the applied index it has
/// seen everything up to (new entries after it may have pushed what it waits for).
struct Parked {
    seq: u64,
    seen: u64,
}

impl Render {
    fn reply(&self, r: Result<Response, ClientError>) -> Vec<u8> {
        match (self, r) {
            (Render::Redis(how, proto, timed), r) => {
                let out = match r {
                    Ok(resp) => resp::render_proto(how, &resp, *proto),
                    Err(e) => resp_fe::error(&e),
                };
                if let Some(t) = timed {
                    t.done(&out);
                }
                out
            }
            (Render::Exec(slots, proto), Ok(Response::Batch(rs))) => exec_reply(slots, &rs, *proto),
            // A watched key changed: nothing applied (RESP2's nil array, RESP3's null).
            (Render::Exec(_, proto), Ok(Response::Reply(waverunner_kv::Reply::NilArray))) => {
                let mut out = Vec::new();
                resp::reply(&mut out, &waverunner_kv::Reply::NilArray, *proto);
                out
            }
            (Render::Exec(_, proto), Ok(other)) => {
                // A refusal of the whole transaction (e.g. over maxmemory).
                resp::render_proto(&resp::Render::Ok, &other, *proto)
            }
            (Render::Exec(..), Err(e)) => resp_fe::error(&e),
            (Render::Memcache(_, true), _) => Vec::new(),
            (Render::Memcache(how, false), Ok(resp)) => memcache::render(how, &resp),
            (Render::Memcache(_, false), Err(e)) => memcache_fe::error(&e),
            (Render::McBinary(how), Ok(resp)) => waverunner_kv::mcbin::render(how, &resp),
            (Render::McBinary(how), Err(e)) => memcache_fe::binary_error(how, &e),
            (Render::Quiet(inner), r) => {
                inner.reply(r);
                Vec::new()
            }
            (Render::Block(b), r) => {
                let out = match r {
                    Ok(resp) => resp::render_proto(&b.how, &resp, b.proto),
                    Err(e) => resp_fe::error(&e),
                };
                if let Some(t) = &b.timed {
                    t.done(&out);
                }
                out
            }
        }
    }
}

/// A queued command's place in an `EXEC` answer.
pub(super) enum ExecSlot {
    /// Answered when queued (no store involved: `PING`, `ECHO`, a command's own error…).
    Ready(Vec<u8>),
    /// The next of the transaction's store operations, rendered so.
    Store(resp::Render),
}

/// `EXEC`'s answer: `*n`, then each slot's reply, store results taken from `rs` in order.
pub(super) fn exec_reply(slots: &[ExecSlot], rs: &[Response], proto: resp::Proto) -> Vec<u8> {
    let mut out = format!("*{}\r\n", slots.len()).into_bytes();
    let mut rs = rs.iter();
    for s in slots {
        match s {
            ExecSlot::Ready(r) => out.extend_from_slice(r),
            ExecSlot::Store(how) => match rs.next() {
                Some(r) => out.extend_from_slice(&resp::render_proto(how, r, proto)),
                None => out.extend_from_slice(b"-ERR internal error: a result is missing\r\n"),
            },
        }
    }
    out
}

/// What the parser made of the next bytes of a connection.
pub(super) enum Item {
    /// Write this (may be empty: nothing to answer).
    Reply(Vec<u8>),
    /// Submit this operation; answer with the rendering of its result.
    Store(waverunner_kv::Op, Render),
    /// Write this, then close the connection once everything before it is answered.
    Close(Vec<u8>),
    /// A question about the other connections, answered by the loop in this one's order.
    Ask(Ask),
}

/// What a connection asks of the loop (`CLIENT LIST`, `CLIENT UNBLOCK`).
pub(super) enum Ask {
    /// Every RESP connection's `CLIENT INFO` line (those with these ids), in `proto`; the
    /// reply suppressed when `quiet`.
    List {
        ids: Option<Vec<u64>>,
        proto: resp::Proto,
        quiet: bool,
    },
    /// Answer the blocking pop of the client `id` now: as on its timeout, or with an error.
    Unblock { id: u64, error: bool, quiet: bool },
}

/// One parsed item: the bytes it used, and bytes after the buffer still to be skipped (the
/// rest of a refused memcached value).
pub(super) struct Parsed {
    pub item: Item,
    pub used: usize,
    pub skip_more: usize,
}

/// A protocol's parser state for one connection.
pub(super) enum Codec {
    Redis(Box<resp_fe::Conn>),
    Memcache(memcache_fe::Conn),
}

impl Codec {
    fn next(&mut self, buf: &[u8], handle: &Handle) -> Option<Parsed> {
        match self {
            Codec::Redis(c) => c.next(buf, handle),
            Codec::Memcache(c) => c.next(buf, handle),
        }
    }
}

/// A reply's place in the connection's answer order.
enum Slot {
    Ready(Vec<u8>),
    Waiting(Render),
    /// An [`Ask`] the loop answers.
    Asked,
}

struct Conn {
    stream: TcpStream,
    proto: Protocol,
    /// Distinguishes this connection from an earlier one in the same slab slot (a late answer
    /// for a closed connection is dropped).
    gen: u64,
    codec: Codec,
    inbuf: Vec<u8>,
    /// Bytes of `inbuf` already parsed.
    parsed: usize,
    /// Bytes still to swallow as they arrive (a refused memcached value's rest).
    skip: usize,
    out: Vec<u8>,
    /// Bytes of `out` already sent.
    sent: usize,
    /// Answers in request order; `slots[0]` is request number `first`.
    slots: VecDeque<Slot>,
    first: u64,
    /// Operations parsed and not submitted yet.
    held: VecDeque<Held>,
    /// Operations were submitted and not answered: the next wait for them, so that a
    /// connection's commands apply in the order sent (a batch forwarded by a follower could
    /// otherwise overtake an earlier one, a read be served before the write sent ahead of it).
    in_flight: bool,
    /// The operations in flight when they are part of a batch of several, to submit them one
    /// by one if the batch is refused for memory (see [`Conn::answered`]).
    in_batch: Vec<Held>,
    /// Operations at the front of `held` to submit alone (after a refusal for memory).
    alone: usize,
    /// In the loop's list of connections to submit from.
    queued: bool,
    /// Close once everything queued is sent (QUIT, a protocol error, the peer's end of stream).
    closing: bool,
    /// Not read any more (closing, or the peer closed its side).
    read_done: bool,
    /// The socket may hold unread bytes: set by a readable event (and at accept), cleared
    /// once a read comes back short or would block. Edge-triggered epoll reports every
    /// arrival after that read as a new event, so a short read needs no second read to learn
    /// that the socket is empty (it was two extra `recvfrom` per request: one after the
    /// request, one after its answer was written).
    readable: bool,
    /// The peer's end of stream (or an error) was reported: read until a read says so, even
    /// after short reads (the end may have come with the last bytes, in the same event).
    hup: bool,
    /// A blocking pop waiting: nothing after it is submitted until it answers.
    parked: Option<Parked>,
    /// A blocking pop has waited and not answered yet (parked, or probing): a blocked client
    /// for `INFO`.
    blocked: bool,
    /// Asks parsed, for the loop to answer (request number, question).
    asks: Vec<(u64, Ask)>,
    /// `CLIENT UNBLOCK` arrived while the blocking pop was probing: when its answer finds
    /// nothing it answers as on a timeout (false) or with an error (true).
    unblock: Option<bool>,
    /// The applied index when what is in flight was submitted: a blocking pop (or its probe)
    /// in it saw every entry up to there.
    block_since: u64,
}

/// One connection's share of a submitted command: its requests, in order.
struct Part {
    conn: usize,
    gen: u64,
    seqs: Vec<u64>,
}

/// An answer from the replica loop for a command made of `parts` (one operation, or a batch
/// of several, from one or more connections).
struct Done {
    parts: Vec<Part>,
    result: Result<Answer, ClientError>,
}

/// Where the replica loop leaves answers; the front-end takes them in [`ClientLoop::turn`].
/// Bounded: a connection has at most one command in flight, so at most one answer per open
/// connection waits here (`max_connections` per listener).
type Completions = Mailbox<Done>;

/// The listeners the loop accepts on.
pub struct Listener {
    /// Bound, listening socket.
    pub socket: std::net::TcpListener,
    /// What it speaks.
    pub proto: Protocol,
}

/// The client front-ends: every RESP and memcached connection of a replica, and its native
/// clients (the port itself when no data plane owns it, else the replies to what the data plane
/// passes up), on one event loop, the replica loop itself by default
/// ([`waverunner_node::clients`]).
pub struct Frontend {
    listeners: Vec<(TcpListener, Protocol)>,
    native: NativeLoop,
    limits: Limits,
    /// Its state once registered on a poll.
    lp: Option<Loop>,
}

impl Frontend {
    /// A front-end accepting on `listeners` and serving `native`'s client port.
    pub fn new(
        listeners: Vec<Listener>,
        native: NativeLoop,
        limits: Limits,
    ) -> io::Result<Frontend> {
        assert!(listeners.len() <= NATIVE - LISTENER0);
        let mut ls = Vec::new();
        for l in listeners {
            l.socket.set_nonblocking(true)?;
            ls.push((TcpListener::from_std(l.socket), l.proto));
        }
        Ok(Frontend {
            listeners: ls,
            native,
            limits,
            lp: None,
        })
    }
}

impl ClientLoop for Frontend {
    fn register(&mut self, registry: &Registry, handle: &Handle, wake: Wake) -> io::Result<()> {
        for (i, (l, _)) in self.listeners.iter_mut().enumerate() {
            registry.register(l, Token(LISTENER0 + i), Interest::READABLE)?;
        }
        self.native
            .register(registry, Token(NATIVE), handle, wake.clone())?;
        let completions = Arc::new(Completions::new());
        completions.wake_with(wake);
        self.lp = Some(Loop {
            conns: Vec::new(),
            submitters: Vec::new(),
            free: Vec::new(),
            open: [0; 2],
            gens: 0,
            handle: handle.clone(),
            limits: self.limits,
            completions,
            conn_ids: 0,
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            parked: Vec::new(),
            wake: Vec::new(),
        });
        Ok(())
    }

    fn event(&mut self, registry: &Registry, ev: &mio::event::Event, _to: &mut dyn Propose) {
        let Some(lp) = self.lp.as_mut() else {
            return;
        };
        match ev.token() {
            Token(NATIVE) => self.native.on_readable(),
            Token(t) if t < CONN0 => {
                if let Some((l, proto)) = self.listeners.get_mut(t - LISTENER0) {
                    lp.accept(registry, l, *proto);
                }
            }
            Token(t) => {
                let i = t - CONN0;
                if let Some(Some(c)) = lp.conns.get_mut(i) {
                    if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                        c.readable = true;
                    }
                    c.hup |= ev.is_read_closed() || ev.is_error();
                }
                lp.pump(i);
            }
        }
    }

    fn turn(&mut self, to: &mut dyn Propose) {
        let Some(lp) = self.lp.as_mut() else {
            return;
        };
        lp.on_completions();
        lp.check_parked();
        for i in std::mem::take(&mut lp.wake) {
            lp.pump(i);
        }
        // Everything this round of events made ready leaves together.
        lp.submit(to);
        self.native.turn(to);
    }

    fn idle(&mut self) -> bool {
        self.lp.as_ref().is_none_or(|lp| lp.completions.idle()) && self.native.idle()
    }

    fn timeout(&self) -> Option<Duration> {
        self.lp
            .as_ref()
            .and_then(|lp| (!lp.parked.is_empty()).then_some(PARKED_TICK))
    }
}

struct Loop {
    conns: Vec<Option<Conn>>,
    /// Connections with operations ready to submit (none in flight), in the order they became
    /// ready; each at most once (`Conn::queued`), so bounded by the open connections.
    submitters: Vec<usize>,
    /// Free slots of `conns`.
    free: Vec<usize>,
    /// Open connections per protocol (`Protocol as usize`).
    open: [usize; 2],
    gens: u64,
    handle: Handle,
    limits: Limits,
    completions: Arc<Completions>,
    conn_ids: u64,
    /// What a read lands in before it is appended to its connection's buffer: zeroed once,
    /// not 64 KiB per read (that memset was 4 % of the machine's time at 50 clients).
    scratch: Box<[u8]>,
    /// Connections (slot, generation) with a parked blocking pop: at most the open ones.
    parked: Vec<(usize, u64)>,
    /// Connections to move on after another's request changed them (`CLIENT UNBLOCK`).
    wake: Vec<usize>,
}

impl Loop {
    fn accept(&mut self, registry: &mio::Registry, l: &mut TcpListener, proto: Protocol) {
        loop {
            let (mut stream, peer) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, say: the listener stays; the next edge retries.
                    tracing::warn!("accept: {e}");
                    return;
                }
            };
            if self.open[proto as usize] >= self.limits.max_connections {
                self.handle.client_error();
                let msg: &[u8] = match proto {
                    Protocol::Redis => b"-ERR max number of clients reached\r\n",
                    Protocol::Memcache => b"SERVER_ERROR too many open connections\r\n",
                };
                let _ = stream.write(msg);
                continue;
            }
            let _ = stream.set_nodelay(true);
            let i = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let interest = Interest::READABLE | Interest::WRITABLE;
            if let Err(e) = registry.register(&mut stream, Token(CONN0 + i), interest) {
                tracing::warn!("cannot watch a connection: {e}");
                self.free.push(i);
                continue;
            }
            self.conn_ids += 1;
            let codec = match proto {
                Protocol::Redis => {
                    let local = stream.local_addr().map(|a| a.to_string());
                    Codec::Redis(Box::new(resp_fe::Conn::new(
                        self.conn_ids,
                        peer.to_string(),
                        local.unwrap_or_default(),
                        self.limits,
                    )))
                }
                Protocol::Memcache => Codec::Memcache(memcache_fe::Conn::new(self.limits)),
            };
            self.gens += 1;
            self.open[proto as usize] += 1;
            self.handle.admission().count_clients(1, 0);
            self.conns[i] = Some(Conn {
                stream,
                proto,
                gen: self.gens,
                codec,
                inbuf: Vec::new(),
                parsed: 0,
                skip: 0,
                out: Vec::new(),
                sent: 0,
                slots: VecDeque::new(),
                first: 0,
                held: VecDeque::new(),
                in_flight: false,
                in_batch: Vec::new(),
                alone: 0,
                queued: false,
                closing: false,
                read_done: false,
                readable: true,
                hup: false,
                parked: None,
                asks: Vec::new(),
                unblock: None,
                blocked: false,
                block_since: 0,
            });
            // Bytes may have arrived with the connection.
            self.pump(i);
        }
    }

    /// Moves connection `i` on (its socket is ready, or answers came); closes it when done.
    /// Edge-triggered: it reads and writes until the kernel says it would block, or until
    /// the connection's bounds say stop (then answers arriving call it again).
    fn pump(&mut self, i: usize) {
        let Some(Some(c)) = self.conns.get_mut(i) else {
            return;
        };
        let mut alive = c.pump(&self.handle, self.limits, &mut self.scratch);
        // Questions about the other connections: answered here, then sent in order.
        while alive {
            let Some(Some(c)) = self.conns.get_mut(i) else {
                return;
            };
            if c.asks.is_empty() {
                break;
            }
            let asks = std::mem::take(&mut c.asks);
            for (seq, ask) in asks {
                let r = self.answer_ask(ask);
                let Some(Some(c)) = self.conns.get_mut(i) else {
                    return;
                };
                c.slots[(seq - c.first) as usize] = Slot::Ready(r);
            }
            let Some(Some(c)) = self.conns.get_mut(i) else {
                return;
            };
            alive = c.pump(&self.handle, self.limits, &mut self.scratch);
        }
        let Some(Some(c)) = self.conns.get_mut(i) else {
            return;
        };
        if alive && c.wants_submit() && !c.queued {
            c.queued = true;
            self.submitters.push(i);
        }
        if !alive {
            let c = self.conns[i].take().expect("checked");
            // Closing the descriptor removes it from the poll set.
            self.open[c.proto as usize] -= 1;
            self.handle
                .admission()
                .count_clients(-1, -i64::from(c.blocked));
            self.free.push(i);
        }
    }

    fn on_completions(&mut self) {
        let mut touched = Vec::new();
        let mut done = Vec::new();
        self.completions.take_into(&mut done);
        for d in done {
            let n: usize = d.parts.iter().map(|p| p.seqs.len()).sum();
            let mut results = results_of(d.result, n).into_iter();
            for part in d.parts {
                let k = part.seqs.len();
                let rs: Vec<_> = results.by_ref().take(k).collect();
                let Some(Some(c)) = self.conns.get_mut(part.conn) else {
                    continue;
                };
                if c.gen != part.gen {
                    continue; // the connection closed meanwhile
                }
                let was = c.blocked;
                c.answered(part.seqs, rs, n > 1);
                if c.blocked != was {
                    self.handle
                        .admission()
                        .count_clients(0, if c.blocked { 1 } else { -1 });
                }
                if c.parked.is_some() && !self.parked.contains(&(part.conn, c.gen)) {
                    self.parked.push((part.conn, c.gen));
                }
                touched.push(part.conn);
            }
        }
        // In the order answered (not by slot): blocked clients woken together pop in the
        // order they blocked, as Redis serves the longest waiting first.
        let mut seen = std::collections::HashSet::new();
        touched.retain(|i| seen.insert(*i));
        // Answers make room: write them, read and parse what waited behind the bounds.
        for i in touched {
            self.pump(i);
        }
    }

    /// The answer to a connection's [`Ask`].
    fn answer_ask(&mut self, ask: Ask) -> Vec<u8> {
        match ask {
            Ask::List { ids, proto, quiet } => {
                let mut lines: Vec<(u64, Vec<u8>)> = self
                    .conns
                    .iter()
                    .flatten()
                    .filter_map(|c| match &c.codec {
                        Codec::Redis(r) => Some((r.id(), r.info_line())),
                        Codec::Memcache(_) => None,
                    })
                    .filter(|(id, _)| ids.as_ref().is_none_or(|ids| ids.contains(id)))
                    .collect();
                lines.sort();
                if quiet {
                    return Vec::new();
                }
                let text: Vec<u8> = lines.into_iter().flat_map(|(_, l)| l).collect();
                resp::render_proto(
                    &resp::Render::Reply,
                    &Response::Reply(waverunner_kv::Reply::Bulk(text)),
                    proto,
                )
            }
            Ask::Unblock { id, error, quiet } => {
                let now_blocked = self
                    .conns
                    .iter_mut()
                    .flatten()
                    .find(|c| c.blocked && matches!(&c.codec, Codec::Redis(r) if r.id() == id));
                let done = match now_blocked {
                    None => false,
                    Some(c) => {
                        match c.parked.take() {
                            Some(p) => {
                                let slot = &mut c.slots[(p.seq - c.first) as usize];
                                let Slot::Waiting(Render::Block(b)) = slot else {
                                    unreachable!("a parked request is a waiting blocking pop");
                                };
                                *slot = Slot::Ready(if error {
                                    b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n".to_vec()
                                } else {
                                    b.empty_reply()
                                });
                                c.blocked = false;
                                self.handle.admission().count_clients(0, -1);
                            }
                            // Probing: its answer decides.
                            None => c.unblock = Some(error),
                        }
                        true
                    }
                };
                if let Some((i, _)) = self.conns.iter().enumerate().find(|(_, c)| {
                    c.as_ref()
                        .is_some_and(|c| matches!(&c.codec, Codec::Redis(r) if r.id() == id))
                }) {
                    if done {
                        self.wake.push(i);
                    }
                }
                if quiet {
                    Vec::new()
                } else {
                    format!(":{}\r\n", u8::from(done)).into_bytes()
                }
            }
        }
    }

    /// Parked blocking pops: a timed-out one answers; one that may find something now (this
    /// replica applied entries since it last looked) sends its probe.
    fn check_parked(&mut self) {
        if self.parked.is_empty() {
            return;
        }
        let now = Instant::now();
        let applied = self.handle.applied_index();
        let mut wake = Vec::new();
        self.parked.retain(|&(i, gen)| {
            let Some(Some(c)) = self.conns.get_mut(i) else {
                return false;
            };
            if c.gen != gen {
                return false;
            }
            let Some(p) = &c.parked else {
                return false;
            };
            let seq = p.seq;
            let seen = p.seen;
            let slot = &mut c.slots[(seq - c.first) as usize];
            let Slot::Waiting(Render::Block(b)) = slot else {
                unreachable!("a parked request is a waiting blocking pop");
            };
            if b.timed_out(now) {
                *slot = Slot::Ready(b.empty_reply());
                c.parked = None;
                c.blocked = false;
                self.handle.admission().count_clients(0, -1);
                wake.push(i);
                return false;
            }
            if applied > seen {
                c.held.push_front(Held::encoded(seq, b.probe.clone()));
                c.parked = None;
                wake.push(i);
                return false;
            }
            true
        });
        for i in wake {
            self.pump(i);
        }
    }

    /// Submits what the connections have ready: their operations packed, connection by
    /// connection, into commands of at most `max_batch_bytes` (a larger operation alone).
    fn submit(&mut self, to: &mut dyn Propose) {
        let max = self.limits.max_batch_bytes;
        let mut batch = Batch::default();
        for i in std::mem::take(&mut self.submitters) {
            let Some(Some(c)) = self.conns.get_mut(i) else {
                continue;
            };
            c.queued = false;
            let gen = c.gen;
            let Some(ops) = c.take(max) else {
                continue;
            };
            c.in_flight = true;
            // Whatever it holds saw every entry applied here by now.
            c.block_since = self.handle.applied_index();
            let bytes: usize = ops.iter().map(|h| h.encoded.len() + 4).sum();
            if !batch.parts.is_empty() && batch.bytes + bytes > max {
                self.send(std::mem::take(&mut batch), to);
            }
            batch.add(i, gen, ops, bytes);
        }
        if !batch.parts.is_empty() {
            self.send(batch, to);
        }
    }

    fn send(&mut self, mut b: Batch, to: &mut dyn Propose) {
        let n: usize = b.parts.iter().map(|(_, _, ops)| ops.len()).sum();
        // One operation is its own command. Several are copied into a batch, and each
        // connection keeps its own, to send them again one by one if the batch is refused for
        // memory (`Conn::answered`). The operations as parsed go along (the batch's as one
        // `Op::Batch`), for this replica to apply without decoding the command.
        let (mut command, mut decoded) = (None, None);
        if n > 1 {
            let all: Vec<&[u8]> = b
                .parts
                .iter()
                .flat_map(|(_, _, ops)| ops.iter().map(|h| &h.encoded[..]))
                .collect();
            command = Some(batch_command(&all));
            let ops: Option<Vec<Op>> = b
                .parts
                .iter_mut()
                .flat_map(|(_, _, ops)| ops.iter_mut().map(|h| h.op.take()))
                .collect();
            decoded = ops.map(Op::Batch);
        }
        let mut parts = Vec::with_capacity(b.parts.len());
        for (conn, gen, ops) in b.parts {
            let seqs = ops.iter().map(|h| h.seq).collect();
            if n > 1 {
                if let Some(Some(c)) = self.conns.get_mut(conn) {
                    c.in_batch = ops;
                }
            } else if let Some(h) = ops.into_iter().next() {
                command = Some(h.encoded);
                decoded = h.op;
            }
            parts.push(Part { conn, gen, seqs });
        }
        let d = self.completions.clone();
        to.submit(Submit {
            client: 0,
            seq: 0,
            command: command.expect("a batch holds an operation"),
            decoded: decoded.map(|op| Box::new(op) as Decoded),
            reply: Box::new(move |result| d.push(Done { parts, result })),
        });
    }
}

/// One connection's operations in a batch: its slot, generation, and operations.
type BatchPart = (usize, u64, Vec<Held>);

/// An operation parsed and not answered yet.
struct Held {
    /// Its request number on the connection.
    seq: u64,
    /// Encoded once, as parsed: what a submit sends.
    encoded: Vec<u8>,
    /// As parsed, until submitted: the replica that proposes it applies it without decoding
    /// the command. None for one submitted again (a blocking pop, a batch refused for
    /// memory): the bytes are applied.
    op: Option<Op>,
}

impl Held {
    fn encoded(seq: u64, encoded: Vec<u8>) -> Held {
        Held {
            seq,
            encoded,
            op: None,
        }
    }
}

/// A command being assembled from several connections' operations.
#[derive(Default)]
struct Batch {
    parts: Vec<BatchPart>,
    /// Bytes of the batch command so far (its header, each operation with its length).
    bytes: usize,
}

impl Batch {
    fn add(&mut self, conn: usize, gen: u64, ops: Vec<Held>, bytes: usize) {
        if self.parts.is_empty() {
            self.bytes = 5;
        }
        self.bytes += bytes;
        self.parts.push((conn, gen, ops));
    }
}

/// The result of a command of `n` operations, one per operation: a batch's results, or the
/// one operation's, or the failure for each.
fn results_of(result: Result<Answer, ClientError>, n: usize) -> Vec<Result<Response, ClientError>> {
    let undecodable = |e: String| ClientError::Unavailable(format!("undecodable result: {e}"));
    match result {
        Err(e) => (0..n).map(|_| Err(e.clone())).collect(),
        Ok(a) => match response_of(a) {
            Ok(Response::Batch(rs)) if n > 1 && rs.len() == n => rs.into_iter().map(Ok).collect(),
            Ok(r) if n == 1 => vec![Ok(r)],
            Ok(r) => {
                let e = undecodable(format!("{r:?} for {n} requests"));
                (0..n).map(|_| Err(e.clone())).collect()
            }
            Err(e) => (0..n).map(|_| Err(undecodable(e.to_string()))).collect(),
        },
    }
}

impl Conn {
    /// Moves the connection as far as it can go: sends answers ready in order, parses and
    /// submits what was read, reads more while the bounds allow. False once it is done with.
    fn pump(&mut self, handle: &Handle, limits: Limits, scratch: &mut [u8]) -> bool {
        loop {
            // Answers first: they make room under the bounds for what is parsed next.
            self.collect();
            if self.flush().is_err() {
                return false;
            }
            let parsed = self.parse(handle);
            if parsed {
                continue; // write what is ready, parse on (also after the end of stream)
            }
            if self.read_done && self.parked.is_some() {
                // The client left while blocked: nobody waits for the pop (Redis frees it).
                return false;
            }
            if self.closing || self.read_done {
                // Done once everything is answered and sent.
                return !(self.slots.is_empty() && self.sent == self.out.len());
            }
            if self.full() {
                return true; // backpressure: answers arriving call this again
            }
            if self.inbuf.len() - self.parsed > max_request(limits) {
                handle.client_error();
                let msg: &[u8] = match self.codec {
                    Codec::Redis(_) => b"-ERR Protocol error: request too large\r\n",
                    Codec::Memcache(_) => b"SERVER_ERROR object too large for cache\r\n",
                };
                self.push(msg.to_vec());
                self.closing = true;
                continue;
            }
            if !self.readable {
                return true; // read empty since the last edge: the next one brings more
            }
            match self.read(scratch) {
                Ok(true) => continue,
                Ok(false) => return true, // would block: the next edge brings more
                Err(_) => return false,
            }
        }
    }

    /// Past a bound: not parsed or read until answers drain.
    fn full(&self) -> bool {
        self.slots.len() >= MAX_PIPELINE || self.out.len() - self.sent >= MAX_OUT
    }

    /// Parses every complete command in the buffer (up to the bounds), answering those that
    /// need no store and holding the others for [`Conn::submit`]; whether it parsed anything.
    fn parse(&mut self, handle: &Handle) -> bool {
        let mut any = false;
        while !self.full() && !self.closing {
            let Some(p) = self.codec.next(&self.inbuf[self.parsed..], handle) else {
                break;
            };
            any = true;
            self.parsed += p.used;
            if p.skip_more > 0 {
                debug_assert_eq!(self.parsed, self.inbuf.len());
                self.skip = p.skip_more;
            }
            match p.item {
                Item::Reply(r) => self.push(r),
                Item::Close(r) => {
                    self.push(r);
                    self.closing = true;
                }
                Item::Ask(ask) => {
                    let seq = self.first + self.slots.len() as u64;
                    self.slots.push_back(Slot::Asked);
                    self.asks.push((seq, ask));
                }
                Item::Store(op, render) => {
                    let seq = self.first + self.slots.len() as u64;
                    self.slots.push_back(Slot::Waiting(render));
                    let mut encoded = Vec::new();
                    encode_op(&op, &mut encoded);
                    self.held.push_back(Held {
                        seq,
                        encoded,
                        op: Some(op),
                    });
                }
            }
        }
        if self.parsed == self.inbuf.len() {
            self.inbuf.clear();
            self.parsed = 0;
        } else if self.parsed > self.inbuf.len() / 2 {
            self.inbuf.drain(..self.parsed);
            self.parsed = 0;
        }
        any
    }

    /// Whether operations wait to be submitted and none is in flight (nor a blocking pop
    /// parked).
    fn wants_submit(&self) -> bool {
        !self.in_flight && self.parked.is_none() && !self.held.is_empty()
    }

    /// Takes the operations to submit next, encoded: as many as fit `max` bytes (at least
    /// one; one alone after a refusal for memory). None if some are in flight.
    fn take(&mut self, max: usize) -> Option<Vec<Held>> {
        if !self.wants_submit() {
            return None;
        }
        let (mut out, mut bytes) = (Vec::new(), 5);
        while let Some(Held { encoded: e, .. }) = self.held.front() {
            // (A batch's own header and per-operation lengths: 5 + 4 each.)
            if !out.is_empty() && (bytes + e.len() + 4 > max || self.alone > 0) {
                break;
            }
            bytes += e.len() + 4;
            out.push(self.held.pop_front().expect("checked"));
        }
        self.alone = self.alone.saturating_sub(1);
        Some(out)
    }

    /// The results of this connection's operations in flight (`several`: they were part of a
    /// batch of several operations): each request's reply takes its place. A batch refused
    /// for memory (none of it applied: it holds a command that may grow the state) goes
    /// again one operation at a time, so that only the commands that grow are refused, as
    /// Redis refuses them in a pipeline.
    ///
    /// A blocking pop that found nothing, or whose probe found nothing, parks; one whose
    /// probe found a key goes again.
    fn answered(
        &mut self,
        seqs: Vec<u64>,
        results: Vec<Result<Response, ClientError>>,
        several: bool,
    ) {
        debug_assert!(self.in_flight, "an answer without a request");
        self.in_flight = false;
        let sent = std::mem::take(&mut self.in_batch);
        if several && results.first() == Some(&Err(ClientError::OutOfMemory)) {
            debug_assert_eq!(sent.len(), seqs.len());
            self.alone = sent.len();
            for op in sent.into_iter().rev() {
                self.held.push_front(op);
            }
            return;
        }
        for (seq, r) in seqs.into_iter().zip(results) {
            let slot = &mut self.slots[(seq - self.first) as usize];
            let Slot::Waiting(render) = slot else {
                unreachable!("request {seq} answered twice");
            };
            if let Render::Block(b) = render {
                use waverunner_kv::Reply;
                // Nothing to pop (the pop's empty answer, or the probe's count of 0).
                // (A pop answering WRONGTYPE after its probe found a list reports its
                // destination's type, as Redis does when it wakes the client.)
                let nothing = matches!(
                    &r,
                    Ok(Response::Reply(Reply::NilArray | Reply::Nil) | Response::Int(0))
                );
                if nothing {
                    if let Some(error) = self.unblock.take() {
                        *slot = Slot::Ready(if error {
                            b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n".to_vec()
                        } else {
                            b.empty_reply()
                        });
                        self.blocked = false;
                    } else if b.timed_out(Instant::now()) {
                        *slot = Slot::Ready(b.empty_reply());
                        self.blocked = false;
                    } else {
                        self.parked = Some(Parked {
                            seq,
                            seen: self.block_since,
                        });
                        self.blocked = true;
                    }
                    continue;
                }
                // The probe found a key: pop.
                if let Ok(Response::Int(_)) = &r {
                    self.held.push_front(Held::encoded(seq, b.op.clone()));
                    continue;
                }
            }
            if matches!(render, Render::Block(_)) {
                self.blocked = false;
            }
            *slot = Slot::Ready(render.reply(r));
        }
    }

    /// Queues a reply after those before it.
    fn push(&mut self, r: Vec<u8>) {
        if self.slots.is_empty() {
            self.out.extend_from_slice(&r);
        } else {
            self.slots.push_back(Slot::Ready(r));
        }
    }

    /// Moves answers that are ready, in order, into the output.
    fn collect(&mut self) {
        while let Some(Slot::Ready(_)) = self.slots.front() {
            let Some(Slot::Ready(r)) = self.slots.pop_front() else {
                unreachable!()
            };
            self.out.extend_from_slice(&r);
            self.first += 1;
        }
    }

    /// Writes the output until done or the socket is full.
    fn flush(&mut self) -> io::Result<()> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
        Ok(())
    }

    /// Reads once; true if bytes came, false if the socket would block. End of stream: the
    /// connection answers what it has and closes.
    fn read(&mut self, scratch: &mut [u8]) -> io::Result<bool> {
        let r = loop {
            match self.stream.read(scratch) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        match r {
            Ok(0) => {
                self.read_done = true;
                Ok(true)
            }
            Ok(n) => {
                if n < scratch.len() && !self.hup {
                    self.readable = false; // a short read emptied the socket
                }
                self.inbuf.extend_from_slice(&scratch[..n]);
                if self.skip > 0 {
                    let k = self.skip.min(self.inbuf.len() - self.parsed);
                    self.inbuf.drain(self.parsed..self.parsed + k);
                    self.skip -= k;
                }
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}
