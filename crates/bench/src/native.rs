//! A closed loop of native writes (`waverunner_kv::native`: one datagram per request and one per
//! reply), the protocol a data plane answers itself: the paper's clients. One thread drives
//! every client (a UDP socket each, one poll), as [`crate::peers::closed_loop`] drives TCP
//! connections, so that the load costs the machine what the requests cost and no more.
//!
//! Each client has its own session (client id) and one `SET` in flight; its reply means
//! committed on a majority. A busy reply (`STATUS_RETRY`) sends the same request again after
//! [`BUSY_BACKOFF`], a request unanswered for [`RESEND_AFTER`] is sent again (the session makes
//! a second application impossible), as the native client library does with shorter waits.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use waverunner_kv::native as proto;
use waverunner_kv::{Cond, Expiry, Op};

use crate::peers::{LoopResult, KEYS_PER_CLIENT, VALUE_BYTES};
use crate::stats::quantiles;

/// After a busy reply, the same request goes again this much later.
pub const BUSY_BACKOFF: Duration = Duration::from_millis(1);

/// A request unanswered this long is sent again (a lost datagram, or a request shed past the
/// ration of busy replies).
pub const RESEND_AFTER: Duration = Duration::from_millis(50);

/// What a native closed loop did besides its writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NativeExtra {
    /// Busy replies (each followed by the same request again).
    pub busy: u64,
    /// Requests sent again because no reply came in [`RESEND_AFTER`].
    pub resent: u64,
}

struct Client {
    sock: mio::net::UdpSocket,
    id: u64,
    seq: u64,
    /// Writes issued by this client (its keys cycle through [`KEYS_PER_CLIENT`]).
    i: u64,
    pkt: Vec<u8>,
    /// When the write in flight was first sent (its latency's start); `None`: done.
    since: Option<Instant>,
    /// When it was last sent, or when it is due again after a busy reply.
    sent: Instant,
    due: Option<Instant>,
}

impl Client {
    fn send(&mut self) {
        // A full socket buffer loses the datagram: the resend timer covers it.
        let _ = self.sock.send(&self.pkt);
        self.sent = Instant::now();
        self.due = None;
    }
}

/// `clients` native clients writing to `addr` (a replica's client port, the leader's for
/// a data plane to answer) for at most `duration` and `max_ops` writes, driven by `threads`
/// threads (the clients shared out among them). `setup` runs first on each driving thread
/// (e.g. to enter the clients' network namespace).
///
/// Why more than one thread: on a veth the kernel runs the receiver's path in the sender's
/// system call, so with `xdp` a client's `send` runs the leader's program, the followers'
/// and the reply back to the client, all in the client thread's softirq: one thread
/// drives at most what one CPU replicates.
pub fn closed_loop(
    addr: SocketAddr,
    clients: usize,
    threads: usize,
    duration: Duration,
    max_ops: u64,
    setup: &(dyn Fn() -> Result<(), String> + Sync),
) -> Result<(LoopResult, NativeExtra), String> {
    assert!(clients > 0 && threads > 0 && max_ops > 0);
    let threads = threads.min(clients);
    let parts: Vec<Result<Part, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                // Thread t drives clients t, t + threads, …: their share of the writes too.
                let mine = (t..clients).step_by(threads).count();
                let ops = max_ops * mine as u64 / clients as u64;
                s.spawn(move || {
                    setup()?;
                    drive(addr, mine, duration, ops.max(1))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the native closed loop panicked".into()))
            })
            .collect()
    });
    let mut all = Part::default();
    for p in parts {
        let p = p?;
        all.ok += p.ok;
        all.errors += p.errors;
        all.elapsed = all.elapsed.max(p.elapsed);
        all.lat.extend(p.lat);
        all.extra.busy += p.extra.busy;
        all.extra.resent += p.extra.resent;
        all.first_error = all.first_error.or(p.first_error);
    }
    Ok((
        LoopResult {
            ops: all.ok,
            errors: all.errors,
            elapsed: all.elapsed,
            latency: quantiles(&mut all.lat),
            first_error: all.first_error,
        },
        all.extra,
    ))
}

/// What one driving thread did.
#[derive(Default)]
struct Part {
    ok: u64,
    errors: u64,
    elapsed: Duration,
    lat: Vec<u64>,
    first_error: Option<String>,
    extra: NativeExtra,
}

fn drive(
    addr: SocketAddr,
    clients: usize,
    duration: Duration,
    max_ops: u64,
) -> Result<Part, String> {
    let mut poll = Poll::new().map_err(|e| format!("poll: {e}"))?;
    let mut cs = Vec::with_capacity(clients);
    for c in 0..clients {
        let bind: SocketAddr = if addr.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        }
        .parse()
        .expect("an address");
        let mut sock = mio::net::UdpSocket::bind(bind).map_err(|e| format!("bind: {e}"))?;
        sock.connect(addr)
            .map_err(|e| format!("connect {addr}: {e}"))?;
        poll.registry()
            .register(&mut sock, Token(c), Interest::READABLE)
            .map_err(|e| format!("register: {e}"))?;
        cs.push(Client {
            sock,
            // Never an earlier run's session: its first request would be older than the
            // session's newest, refused as stale.
            id: waverunner_client::random_id(),
            seq: 0,
            i: 0,
            pkt: Vec::new(),
            since: None,
            sent: Instant::now(),
            due: None,
        });
    }
    let value = vec![b'v'; VALUE_BYTES];
    let start = Instant::now();
    let (mut issued, mut ok) = (0u64, 0u64);
    let mut extra = NativeExtra::default();
    let mut lat = Vec::new();
    let mut first_error = None;
    let mut errors = 0;
    // Issues client `c`'s next write if the run goes on; whether it did.
    let mut next = |c: usize, cl: &mut Client| -> Result<bool, String> {
        if start.elapsed() >= duration || issued >= max_ops {
            cl.since = None;
            return Ok(false);
        }
        issued += 1;
        cl.seq += 1;
        let op = Op::Set {
            key: format!("native:{c}:{}", cl.i % KEYS_PER_CLIENT).into_bytes(),
            value: value.clone(),
            flags: 0,
            expiry: Expiry::None,
            cond: Cond::Always,
            get_old: false,
        };
        cl.i += 1;
        cl.pkt = proto::encode_request(cl.id, cl.seq, &op).map_err(|e| e.to_string())?;
        cl.since = Some(Instant::now());
        cl.send();
        Ok(true)
    };
    let mut active = 0;
    for (c, cl) in cs.iter_mut().enumerate() {
        if next(c, cl)? {
            active += 1;
        }
    }
    let mut events = Events::with_capacity(clients.max(16));
    let mut buf = vec![0u8; proto::MAX_DATAGRAM];
    let mut last_sweep = Instant::now();
    // A bound on the run whatever the server does: the duration, then a last chance for the
    // writes in flight.
    let hard_end = start + duration + Duration::from_secs(5);
    while active > 0 && Instant::now() < hard_end {
        crate::peers::wait(&mut poll, &mut events, BUSY_BACKOFF)?;
        for ev in events.iter() {
            let c = ev.token().0;
            loop {
                let cl = &mut cs[c];
                let n = match cl.sock.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    // An ICMP error from an earlier send: the resend timer covers it.
                    Err(_) => continue,
                };
                let Ok(r) = proto::decode_reply(&buf[..n]) else {
                    continue;
                };
                let Some(since) = cl.since.filter(|_| r.seq == cl.seq) else {
                    continue; // a late reply to a request answered already
                };
                match r.status {
                    proto::STATUS_OK => {
                        ok += 1;
                        lat.push(since.elapsed().as_nanos() as u64);
                        if !next(c, &mut cs[c])? {
                            active -= 1;
                        }
                    }
                    proto::STATUS_RETRY => {
                        extra.busy += 1;
                        cl.due = Some(Instant::now() + BUSY_BACKOFF);
                    }
                    _ => {
                        errors += 1;
                        first_error.get_or_insert_with(|| format!("{:?}", r.body));
                        cl.since = None;
                        active -= 1;
                    }
                }
            }
        }
        // Busy replies due again and lost requests, every backoff at most.
        let now = Instant::now();
        if now.duration_since(last_sweep) >= BUSY_BACKOFF {
            last_sweep = now;
            for cl in cs.iter_mut().filter(|cl| cl.since.is_some()) {
                if cl.due.is_some_and(|d| d <= now) {
                    cl.send();
                } else if cl.due.is_none() && now.duration_since(cl.sent) >= RESEND_AFTER {
                    extra.resent += 1;
                    cl.send();
                }
            }
        }
    }
    Ok(Part {
        ok,
        errors,
        elapsed: start.elapsed(),
        lat,
        first_error,
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::net::UdpSocket;
    use std::sync::{Arc, Mutex};
    use waverunner_kv::Response;

    /// A loopback server that answers every request OK, except the first `busy` of each
    /// client (busy) and every `drop_every`-th datagram (no answer).
    fn server(busy: u64, drop_every: u64) -> SocketAddr {
        server_seeing(busy, drop_every, Arc::new(Mutex::new(HashSet::new())))
    }

    /// [`server`], recording every session id it sees in `ids`.
    fn server_seeing(busy: u64, drop_every: u64, ids: Arc<Mutex<HashSet<u64>>>) -> SocketAddr {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = s.local_addr().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; proto::MAX_DATAGRAM];
            let mut refused = std::collections::HashMap::<SocketAddr, u64>::new();
            let mut n_in = 0u64;
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                n_in += 1;
                if drop_every > 0 && n_in.is_multiple_of(drop_every) {
                    continue;
                }
                let req = proto::decode_request(&buf[..n]).unwrap();
                ids.lock().unwrap().insert(req.client);
                let seq = req.seq;
                let r = refused.entry(from).or_default();
                let pkt = if *r < busy {
                    *r += 1;
                    proto::encode_reply(1, seq, proto::STATUS_RETRY, 1, Err("busy"))
                } else {
                    proto::encode_reply(1, seq, proto::STATUS_OK, 1, Ok(&Response::Ok))
                };
                let _ = s.send_to(&pkt, from);
            }
        });
        addr
    }

    fn none() -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn every_client_writes_until_the_bound_on_one_thread() {
        let addr = server(0, 0);
        let (r, x) = closed_loop(addr, 8, 2, Duration::from_secs(20), 4_000, &none).unwrap();
        assert_eq!((r.ops, r.errors), (4_000, 0));
        assert_eq!(x, NativeExtra::default());
        assert!(r.latency.is_some());
    }

    /// Two runs in one process against one cluster: the second's sessions are new (reused,
    /// the cluster refused every request of the second run as stale).
    #[test]
    fn runs_never_share_a_session() {
        let ids = Arc::new(Mutex::new(HashSet::new()));
        let addr = server_seeing(0, 0, ids.clone());
        closed_loop(addr, 8, 2, Duration::from_secs(20), 100, &none).unwrap();
        let first = std::mem::take(&mut *ids.lock().unwrap());
        assert_eq!(first.len(), 8, "a session per client");
        closed_loop(addr, 8, 2, Duration::from_secs(20), 100, &none).unwrap();
        let second = ids.lock().unwrap();
        assert_eq!(second.len(), 8);
        assert!(first.is_disjoint(&second), "{first:?} and {second:?}");
    }

    #[test]
    fn busy_replies_and_lost_requests_are_sent_again() {
        // Two busy replies per client, and every 50th datagram lost.
        let addr = server(2, 50);
        let (r, x) = closed_loop(addr, 4, 1, Duration::from_secs(20), 1_000, &none).unwrap();
        assert_eq!((r.ops, r.errors), (1_000, 0));
        assert_eq!(x.busy, 8);
        assert!(x.resent >= 10, "{x:?}");
    }
}
