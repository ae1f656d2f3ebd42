//! `waverunner bench frontend`: the front-end's event mechanism measured on its own, epoll
//! (mio, as the replica loop serves RESP) against io_uring.
//!
//! Two single-threaded RESP servers answer `PING`, `SET` and `GET` from one map, with the
//! project's RESP parser, and differ only in how they wait and do I/O:
//!
//! - [`Engine::Epoll`]: what `crates/kvserver/src/frontend/tcp.rs` does: edge-triggered
//!   readiness from `epoll_wait`, then per ready connection a `read` (a second only when the
//!   first filled the buffer) and a `write` of its answers: about two system calls per request
//!   at one request per connection, plus one `epoll_wait` per round;
//! - [`Engine::Uring`]: one `io_uring` (single issuer, deferred task work), a `recv` always
//!   posted per connection and a `send` per batch of answers; every operation of a round goes
//!   to the kernel in the one `io_uring_enter` that also waits for the next completions.
//!
//! Each server counts its requests and its own system calls, so the bench can print both per
//! request beside the throughput and the machine's CPU per request.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use waverunner_kv::resp::{parse_command, Limits};

/// How a server waits for its sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// mio over epoll, edge-triggered, as the replica loop.
    Epoll,
    /// io_uring, one submission and wait per round.
    Uring,
}

impl Engine {
    /// Its name in the bench's table.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Epoll => "epoll (mio)",
            Engine::Uring => "io_uring",
        }
    }
}

/// What a server counted.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests answered.
    pub requests: AtomicU64,
    /// System calls the server thread made for its I/O and waiting.
    pub syscalls: AtomicU64,
}

/// A server on its own thread; stops when dropped.
pub struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
    /// What it counted so far.
    pub counters: Arc<Counters>,
}

impl Server {
    /// Serves `listener` (bound wherever the caller chose, e.g. inside a namespace) with `engine`.
    pub fn start(engine: Engine, listener: TcpListener) -> io::Result<Server> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let (s, c) = (Arc::clone(&stop), Arc::clone(&counters));
        let thread = std::thread::Builder::new()
            .name(format!("fe-{engine:?}").to_lowercase())
            .spawn(move || match engine {
                Engine::Epoll => epoll::serve(listener, &s, &c),
                Engine::Uring => uring::serve(listener, &s, &c),
            })?;
        Ok(Server {
            stop,
            thread: Some(thread),
            counters,
        })
    }

    /// Stops the server and returns what its thread ended with.
    pub fn stop(mut self) -> io::Result<()> {
        self.end()
    }

    fn end(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the server thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// How long a server waits before it looks at its stop flag again.
const STOP_POLL: Duration = Duration::from_millis(50);
/// Bytes read at once per connection.
const READ_BUF: usize = 16 * 1024;
/// Bytes of unparsed input a connection may hold; past it the connection is closed.
const MAX_INPUT: usize = 1 << 20;

/// The served map and the answers, shared by both engines.
#[derive(Default)]
struct Store {
    map: HashMap<Vec<u8>, Vec<u8>>,
    limits: Limits,
}

impl Store {
    /// Answers every complete request at the start of `input` into `out`; returns the bytes
    /// used and the number answered, or `Err` on a protocol error (its reply is in `out`; the
    /// caller closes after sending it).
    fn answer(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(usize, u64), ()> {
        let (mut used, mut n) = (0, 0);
        loop {
            match parse_command(&input[used..], &self.limits) {
                Ok(Some((args, len))) => {
                    used += len;
                    n += 1;
                    self.one(&args, out);
                }
                Ok(None) => return Ok((used, n)),
                Err(e) => {
                    out.extend_from_slice(&e.reply());
                    return Err(());
                }
            }
        }
    }

    fn one(&mut self, args: &[Vec<u8>], out: &mut Vec<u8>) {
        let Some(name) = args.first() else { return };
        match (name.to_ascii_uppercase().as_slice(), args.len()) {
            (b"PING", 1) => out.extend_from_slice(b"+PONG\r\n"),
            (b"SET", 3) => {
                self.map.insert(args[1].clone(), args[2].clone());
                out.extend_from_slice(b"+OK\r\n");
            }
            (b"GET", 2) => match self.map.get(&args[1]) {
                Some(v) => {
                    out.extend_from_slice(format!("${}\r\n", v.len()).as_bytes());
                    out.extend_from_slice(v);
                    out.extend_from_slice(b"\r\n");
                }
                None => out.extend_from_slice(b"$-1\r\n"),
            },
            // redis-benchmark asks for `save` and `appendonly` first.
            (b"CONFIG", _) => out.extend_from_slice(b"*0\r\n"),
            _ => out.extend_from_slice(b"-ERR this bench server knows PING, SET and GET\r\n"),
        }
    }
}

mod epoll {
    use super::*;
    use mio::net::{TcpListener as MioListener, TcpStream};
    use mio::{Events, Interest, Poll, Token};

    const LISTENER: Token = Token(usize::MAX);

    struct Conn {
        stream: TcpStream,
        input: Vec<u8>,
        out: Vec<u8>,
        sent: usize,
        closing: bool,
    }

    pub(super) fn serve(l: TcpListener, stop: &AtomicBool, c: &Counters) -> io::Result<()> {
        l.set_nonblocking(true)?;
        let mut listener = MioListener::from_std(l);
        let mut poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let mut events = Events::with_capacity(1024);
        let mut conns: Vec<Option<Conn>> = Vec::new();
        let mut store = Store::default();
        let mut scratch = vec![0u8; READ_BUF];
        let mut syscalls = 0u64;
        while !stop.load(Ordering::Relaxed) {
            syscalls += 1;
            if let Err(e) = poll.poll(&mut events, Some(STOP_POLL)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            for ev in events.iter() {
                if ev.token() == LISTENER {
                    loop {
                        syscalls += 1;
                        match listener.accept() {
                            Ok((mut stream, _)) => {
                                let _ = stream.set_nodelay(true);
                                let i =
                                    conns.iter().position(Option::is_none).unwrap_or_else(|| {
                                        conns.push(None);
                                        conns.len() - 1
                                    });
                                poll.registry().register(
                                    &mut stream,
                                    Token(i),
                                    Interest::READABLE | Interest::WRITABLE,
                                )?;
                                conns[i] = Some(Conn {
                                    stream,
                                    input: Vec::new(),
                                    out: Vec::new(),
                                    sent: 0,
                                    closing: false,
                                });
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(_) => break,
                        }
                    }
                    continue;
                }
                let i = ev.token().0;
                let Some(conn) = conns.get_mut(i).and_then(Option::as_mut) else {
                    continue;
                };
                let mut answered = 0;
                if ev.is_readable() && !conn.closing {
                    // As the front-end: read again only when the last read filled the buffer.
                    loop {
                        syscalls += 1;
                        match conn.stream.read(&mut scratch) {
                            Ok(0) => {
                                conn.closing = true;
                                break;
                            }
                            Ok(n) => {
                                conn.input.extend_from_slice(&scratch[..n]);
                                if n < scratch.len() {
                                    break;
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => {
                                conn.closing = true;
                                break;
                            }
                        }
                    }
                    match store.answer(&conn.input, &mut conn.out) {
                        Ok((used, n)) => {
                            conn.input.drain(..used);
                            answered = n;
                        }
                        Err(()) => conn.closing = true,
                    }
                    if conn.input.len() > MAX_INPUT {
                        conn.closing = true;
                    }
                }
                c.requests.fetch_add(answered, Ordering::Relaxed);
                while conn.sent < conn.out.len() {
                    syscalls += 1;
                    match conn.stream.write(&conn.out[conn.sent..]) {
                        Ok(n) => conn.sent += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => {
                            conn.closing = true;
                            conn.sent = conn.out.len();
                        }
                    }
                }
                if conn.sent == conn.out.len() {
                    conn.out.clear();
                    conn.sent = 0;
                    if conn.closing {
                        let mut gone = conns[i].take().expect("the connection is there");
                        let _ = poll.registry().deregister(&mut gone.stream);
                    }
                }
            }
            c.syscalls.store(syscalls, Ordering::Relaxed);
        }
        Ok(())
    }
}

mod uring {
    use super::*;
    use io_uring::{cqueue, opcode, squeue, types, IoUring};

    /// Operations in flight at most: a `recv` and a `send` per connection, and the accept.
    const RING_ENTRIES: u32 = 4096;
    const ACCEPT: u64 = u64::MAX;
    const RECV: u64 = 0;
    const SEND: u64 = 1 << 62;

    struct Conn {
        fd: std::os::fd::OwnedFd,
        /// The `recv` target: the kernel writes here while a `recv` is posted.
        rbuf: Box<[u8]>,
        input: Vec<u8>,
        /// Answers not yet handed to a `send`.
        out: Vec<u8>,
        /// The bytes of the posted `send` (untouched while it is posted) and how many went.
        sending: Vec<u8>,
        sent: usize,
        recv_posted: bool,
        send_posted: bool,
        closing: bool,
    }

    impl Conn {
        fn recv(&mut self, i: usize) -> squeue::Entry {
            self.recv_posted = true;
            opcode::Recv::new(
                types::Fd(self.fd.as_raw_fd()),
                self.rbuf.as_mut_ptr(),
                self.rbuf.len() as u32,
            )
            .build()
            .user_data(RECV | i as u64)
        }

        /// Posts a `send` of what is left of `sending`, or of `out` once `sending` is all sent.
        fn send(&mut self, i: usize) -> Option<squeue::Entry> {
            if self.send_posted {
                return None;
            }
            if self.sent == self.sending.len() {
                if self.out.is_empty() {
                    return None;
                }
                self.sending.clear();
                self.sent = 0;
                std::mem::swap(&mut self.sending, &mut self.out);
            }
            self.send_posted = true;
            let rest = &self.sending[self.sent..];
            Some(
                opcode::Send::new(
                    types::Fd(self.fd.as_raw_fd()),
                    rest.as_ptr(),
                    rest.len() as u32,
                )
                .build()
                .user_data(SEND | i as u64),
            )
        }
    }

    pub(super) fn serve(l: TcpListener, stop: &AtomicBool, c: &Counters) -> io::Result<()> {
        let mut ring: IoUring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(RING_ENTRIES)?;
        let accept = opcode::AcceptMulti::new(types::Fd(l.as_raw_fd()))
            .build()
            .user_data(ACCEPT);
        let mut pending: Vec<squeue::Entry> = vec![accept.clone()];
        let mut conns: Vec<Option<Conn>> = Vec::new();
        let mut store = Store::default();
        let mut done: Vec<(u64, i32, u32)> = Vec::new();
        let mut syscalls = 0u64;
        let ts = types::Timespec::from(STOP_POLL);
        let args = types::SubmitArgs::new().timespec(&ts);
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: every buffer a pending entry points to (a connection's `rbuf` and
            // `sending`) stays in place and untouched until its completion is read: a
            // connection is freed only when neither operation is posted, and `sending` is
            // changed only when no `send` is.
            unsafe {
                let mut sq = ring.submission_shared();
                let room = sq.capacity() - sq.len();
                let n = pending.len().min(room);
                sq.push_multiple(&pending[..n])
                    .expect("there is room for them");
                pending.drain(..n);
            }
            syscalls += 1;
            match ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => return Err(e),
            }
            done.extend(
                ring.completion()
                    .map(|e| (e.user_data(), e.result(), e.flags())),
            );
            for (ud, res, flags) in done.drain(..) {
                if ud == ACCEPT {
                    if res >= 0 {
                        // SAFETY: the completion of an accept: a new descriptor we own.
                        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(res as RawFd) };
                        set_nodelay(fd.as_raw_fd());
                        syscalls += 1;
                        let i = conns.iter().position(Option::is_none).unwrap_or_else(|| {
                            conns.push(None);
                            conns.len() - 1
                        });
                        let mut conn = Conn {
                            fd,
                            rbuf: vec![0u8; READ_BUF].into_boxed_slice(),
                            input: Vec::new(),
                            out: Vec::new(),
                            sending: Vec::new(),
                            sent: 0,
                            recv_posted: false,
                            send_posted: false,
                            closing: false,
                        };
                        pending.push(conn.recv(i));
                        conns[i] = Some(conn);
                    }
                    if !cqueue::more(flags) {
                        pending.push(accept.clone());
                    }
                    continue;
                }
                let i = (ud & !SEND) as usize;
                let Some(conn) = conns.get_mut(i).and_then(Option::as_mut) else {
                    continue;
                };
                if ud & SEND != 0 {
                    conn.send_posted = false;
                    if res > 0 {
                        conn.sent += res as usize;
                    } else {
                        // The peer is gone: nothing more can be sent.
                        conn.closing = true;
                        conn.sent = conn.sending.len();
                        conn.out.clear();
                    }
                } else {
                    conn.recv_posted = false;
                    if res > 0 && !conn.closing {
                        conn.input.extend_from_slice(&conn.rbuf[..res as usize]);
                        match store.answer(&conn.input, &mut conn.out) {
                            Ok((used, n)) => {
                                conn.input.drain(..used);
                                c.requests.fetch_add(n, Ordering::Relaxed);
                            }
                            Err(()) => conn.closing = true,
                        }
                        if conn.input.len() > MAX_INPUT {
                            conn.closing = true;
                        }
                        if !conn.closing {
                            pending.push(conn.recv(i));
                        }
                    } else {
                        conn.closing = true;
                    }
                }
                if let Some(e) = conn.send(i) {
                    pending.push(e);
                }
                // Closed once its last answers (a protocol error's reply too) are sent.
                if conn.closing && !conn.recv_posted && !conn.send_posted {
                    conns[i] = None;
                }
            }
            c.syscalls.store(syscalls, Ordering::Relaxed);
        }
        Ok(())
    }

    fn set_nodelay(fd: RawFd) {
        let one: libc::c_int = 1;
        // SAFETY: a plain setsockopt on a socket we own, with a pointer to a live int.
        unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    fn roundtrip(engine: Engine) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = Server::start(engine, l).unwrap();
        let mut streams: Vec<_> = (0..3)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        for (k, s) in streams.iter_mut().enumerate() {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            // A pipeline, split mid-request to exercise the partial parse.
            let req = format!(
                "*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$2\r\nk{k}\r\n$2\r\nv{k}\r\n\
                 *2\r\n$3\r\nGET\r\n$2\r\nk{k}\r\n*2\r\n$3\r\nGET\r\n$1\r\nx\r\n*1\r\n$4\r\nNOPE\r\n"
            );
            let (a, b) = req.as_bytes().split_at(20);
            s.write_all(a).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            s.write_all(b).unwrap();
        }
        for (k, s) in streams.iter_mut().enumerate() {
            let mut r = std::io::BufReader::new(s.try_clone().unwrap());
            let mut lines = Vec::new();
            for _ in 0..6 {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                lines.push(line);
            }
            assert_eq!(
                lines,
                [
                    "+PONG\r\n".to_string(),
                    "+OK\r\n".into(),
                    "$2\r\n".into(),
                    format!("v{k}\r\n"),
                    "$-1\r\n".into(),
                    "-ERR this bench server knows PING, SET and GET\r\n".into(),
                ],
                "{engine:?}"
            );
        }
        // A malformed request: an error, then the connection closes.
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"*1\r\n$x\r\n").unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert!(got.starts_with(b"-ERR"), "{engine:?}: {got:?}");
        drop(streams);
        let c = &server.counters;
        assert_eq!(c.requests.load(Ordering::Relaxed), 15, "{engine:?}");
        assert!(c.syscalls.load(Ordering::Relaxed) > 0);
        server.stop().unwrap();
    }

    #[test]
    fn the_epoll_server_answers_pipelines_in_order() {
        roundtrip(Engine::Epoll);
    }

    #[test]
    fn the_io_uring_server_answers_pipelines_in_order() {
        if let Err(e) = io_uring::IoUring::new(2) {
            // `kernel.io_uring_disabled`, a seccomp filter, an old kernel.
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "io_uring is not available: {e}"
            );
            eprintln!("SKIPPED: the io_uring bench server: io_uring is not available here: {e}");
            return;
        }
        roundtrip(Engine::Uring);
    }
}
