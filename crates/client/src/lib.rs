//! # waverunner-client
//!
//! A Rust client for Waverunner's native UDP protocol (`waverunner_kv::native`).
//!
//! - **Leader discovery and redirects**: any replica accepts requests (followers forward them to
//!   the leader); every reply names the leader, and the client sends there next.
//! - **Timeouts and exactly-once retries**: a request unanswered within its attempt's timeout is
//!   sent again with the *same* session id and sequence number, so the cluster applies it at
//!   most once and answers a retry from its session table. The timeout adapts to the round
//!   trips measured, as TCP's does ([`Rto`]); a second timeout in a row at one replica moves
//!   on to the next.
//! - **Load generation** ([`load`]): closed-loop (N clients, one request outstanding each) and
//!   open-loop (a fixed arrival rate) modes with latency percentiles.
//!
//! ```no_run
//! use waverunner_client::Client;
//! let mut c = Client::connect(&["127.0.0.1:7101".parse().unwrap()]).unwrap();
//! c.set(b"greeting", b"hello").unwrap();
//! assert_eq!(c.get(b"greeting").unwrap(), Some(b"hello".to_vec()));
//! ```

#![warn(missing_docs)]

pub mod load;
use waverunner_kv::native as proto;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use waverunner_kv::{Cond, Expiry, Op, Response};

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No replica answered before the deadline: the request may or may not have been applied.
    Timeout,
    /// The cluster refused the request as invalid (never applied).
    Rejected(String),
    /// The request cannot be sent (too large for a datagram, socket error).
    Local(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Timeout => write!(f, "no answer before the deadline (outcome unknown)"),
            Error::Rejected(m) => write!(f, "rejected: {m}"),
            Error::Local(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {}

/// Client settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// The longest wait for one attempt (the first, before any round trip is measured; a
    /// retry's timeout doubles up to it).
    pub attempt_timeout: Duration,
    /// How long to keep retrying one request.
    pub deadline: Duration,
    /// Session id; 0 disables sessions (and so exactly-once retries). Default: random.
    pub client_id: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            attempt_timeout: Duration::from_millis(300),
            deadline: Duration::from_secs(5),
            client_id: random_id(),
        }
    }
}

/// A random non-zero id (clock and process id mixed; sessions only need to be distinct).
pub fn random_id() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = t
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x.max(1)
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A client session with a cluster. One request at a time.
pub struct Client {
    sock: UdpSocket,
    nodes: Vec<SocketAddr>,
    /// Node id → address, learned from replies.
    ids: HashMap<u64, SocketAddr>,
    target: usize,
    seq: u64,
    opts: Options,
    /// Attempts sent again after a timeout or a retry status (metrics for load tests).
    pub retries: u64,
    /// The attempt timeout from the round trips measured.
    rto: Rto,
}

/// The shortest attempt timeout: a reply later than this is rare enough (a loop stalled, a
/// datagram lost or shed) that sending again costs the cluster little.
pub const MIN_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(10);

/// A retransmission timeout from measured round trips (RFC 6298's estimator: smoothed round
/// trip plus four deviations), within [`MIN_ATTEMPT_TIMEOUT`] and a ceiling. Why: a datagram
/// lost or shed without a reply (a data plane's leader refuses past its ration of busy
/// replies silently) otherwise cost the fixed timeout, 300 ms, against a round trip of
/// 30 µs to a few ms: 50 native writers at an `xdp` leader's saturation saw p99 15 ms and a
/// maximum of 400 ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rto {
    /// Smoothed round trip and its mean deviation, once one was measured.
    srtt: Option<(Duration, Duration)>,
    ceiling: Duration,
}

impl Rto {
    /// No round trip measured yet: the timeout is the ceiling.
    pub fn new(ceiling: Duration) -> Rto {
        Rto {
            srtt: None,
            ceiling: ceiling.max(MIN_ATTEMPT_TIMEOUT),
        }
    }

    /// A round trip measured (only of a request sent once: a reply to a retransmitted one
    /// may answer either attempt).
    pub fn sample(&mut self, rtt: Duration) {
        self.srtt = Some(match self.srtt {
            None => (rtt, rtt / 2),
            Some((srtt, var)) => {
                let dev = srtt.abs_diff(rtt);
                (srtt * 7 / 8 + rtt / 8, var * 3 / 4 + dev / 4)
            }
        });
    }

    /// The timeout of a first attempt.
    pub fn timeout(&self) -> Duration {
        match self.srtt {
            None => self.ceiling,
            Some((srtt, var)) => (srtt + 4 * var).clamp(MIN_ATTEMPT_TIMEOUT, self.ceiling),
        }
    }

    /// The timeout of the attempt after one that timed out after `last`.
    pub fn backoff(&self, last: Duration) -> Duration {
        (last * 2).min(self.ceiling)
    }
}

impl Client {
    /// A client of the replicas at `nodes` (native client addresses) with default options.
    pub fn connect(nodes: &[SocketAddr]) -> Result<Client, Error> {
        Client::with_options(nodes, Options::default())
    }

    /// A client with explicit options.
    pub fn with_options(nodes: &[SocketAddr], opts: Options) -> Result<Client, Error> {
        if nodes.is_empty() {
            return Err(Error::Local("no replica addresses given".into()));
        }
        let bind: SocketAddr = if nodes[0].is_ipv4() {
            "0.0.0.0:0".parse().expect("addr")
        } else {
            "[::]:0".parse().expect("addr")
        };
        let sock = UdpSocket::bind(bind).map_err(|e| Error::Local(format!("bind: {e}")))?;
        Ok(Client {
            sock,
            nodes: nodes.to_vec(),
            ids: HashMap::new(),
            target: 0,
            seq: 0,
            rto: Rto::new(opts.attempt_timeout),
            opts,
            retries: 0,
        })
    }

    /// The session id.
    pub fn id(&self) -> u64 {
        self.opts.client_id
    }

    /// The replica requests go to next.
    pub fn target(&self) -> SocketAddr {
        self.nodes[self.target]
    }

    /// Executes one operation: retried until answered or the deadline passes.
    pub fn execute(&mut self, op: &Op) -> Result<Response, Error> {
        self.seq += 1;
        let seq = self.seq;
        let pkt = proto::encode_request(self.opts.client_id, seq, op)
            .map_err(|e| Error::Local(e.to_string()))?;
        let deadline = Instant::now() + self.opts.deadline;
        let mut buf = vec![0u8; 2048];
        let mut timeout = self.rto.timeout();
        // Attempts of this request so far, and timeouts in a row at the current replica.
        let (mut attempts, mut timeouts_here) = (0u32, 0u32);
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout);
            }
            let to = self.nodes[self.target];
            self.sock
                .send_to(&pkt, to)
                .map_err(|e| Error::Local(format!("send to {to}: {e}")))?;
            attempts += 1;
            let until = (now + timeout).min(deadline);
            let reply = loop {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break None;
                }
                let _ = self.sock.set_read_timeout(Some(left));
                match self.sock.recv_from(&mut buf) {
                    Ok((n, from)) => match proto::decode_reply(&buf[..n]) {
                        Ok(r) if r.seq == seq => {
                            self.ids.insert(r.from, from);
                            break Some(r);
                        }
                        _ => continue, // a late reply to an earlier request, or garbage
                    },
                    Err(_) => break None,
                }
            };
            let Some(r) = reply else {
                self.retries += 1;
                // The same replica once more (a datagram lost, or shed with no reply), then
                // the next one (it may be down; a follower forwards to the leader).
                timeouts_here += 1;
                if timeouts_here >= 2 || timeout >= self.opts.attempt_timeout {
                    self.target = (self.target + 1) % self.nodes.len();
                    timeouts_here = 0;
                }
                timeout = self.rto.backoff(timeout);
                continue;
            };
            timeouts_here = 0;
            if attempts == 1 && r.status == proto::STATUS_OK {
                self.rto.sample(now.elapsed());
            }
            if let Some(&addr) = self.ids.get(&r.leader).filter(|_| r.leader != 0) {
                if let Some(i) = self.nodes.iter().position(|a| *a == addr) {
                    self.target = i;
                }
            } else if r.leader != 0 && r.leader != r.from {
                // A follower answered and the leader's address is not known yet (ids are
                // learned from replies): the next request tries the next replica, so the
                // client finds the leader within one round instead of staying on a follower
                // (whose every request costs a forward).
                self.target = (self.target + 1) % self.nodes.len();
            }
            match r.status {
                proto::STATUS_OK => return r.body.map_err(Error::Rejected),
                proto::STATUS_ERROR => {
                    return Err(Error::Rejected(r.body.err().unwrap_or_default()))
                }
                _ => {
                    // Retry (not applied) or unknown (may be applied): the same session and
                    // sequence number make a second application impossible.
                    self.retries += 1;
                    if r.leader == 0 {
                        self.target = (self.target + 1) % self.nodes.len();
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }

    /// `GET key`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        match self.execute(&Op::Get {
            keys: vec![key.to_vec()],
        })? {
            Response::Items(mut v) if v.len() == 1 => Ok(v.pop().flatten().map(|i| i.value)),
            other => Err(Error::Rejected(format!("unexpected result {other:?}"))),
        }
    }

    /// `SET key value`.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        match self.execute(&Op::Set {
            key: key.to_vec(),
            value: value.to_vec(),
            flags: 0,
            expiry: Expiry::None,
            cond: Cond::Always,
            get_old: false,
        })? {
            Response::Ok => Ok(()),
            other => Err(Error::Rejected(format!("unexpected result {other:?}"))),
        }
    }

    /// `DEL key`: whether it existed.
    pub fn del(&mut self, key: &[u8]) -> Result<bool, Error> {
        match self.execute(&Op::Del {
            keys: vec![key.to_vec()],
        })? {
            Response::Int(n) => Ok(n > 0),
            other => Err(Error::Rejected(format!("unexpected result {other:?}"))),
        }
    }

    /// `INCRBY key delta`: the new value.
    pub fn incr(&mut self, key: &[u8], delta: i64) -> Result<i64, Error> {
        match self.execute(&Op::IncrBy {
            key: key.to_vec(),
            delta,
        })? {
            Response::Int(n) => Ok(n),
            Response::Error(m) => Err(Error::Rejected(m)),
            other => Err(Error::Rejected(format!("unexpected result {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica on loopback with id `id` that answers every request OK (naming itself the
    /// leader) except those `drop` says to drop (by the count of datagrams it received).
    fn replica(id: u64, drop: impl Fn(u64) -> bool + Send + 'static) -> SocketAddr {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = s.local_addr().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; proto::MAX_DATAGRAM];
            let mut n_in = 0;
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                n_in += 1;
                if drop(n_in) {
                    continue;
                }
                let seq = proto::decode_request(&buf[..n]).unwrap().seq;
                let r = proto::encode_reply(id, seq, proto::STATUS_OK, id, Ok(&Response::Ok));
                let _ = s.send_to(&r, from);
            }
        });
        addr
    }

    #[test]
    fn the_attempt_timeout_follows_the_round_trips() {
        let ms = Duration::from_millis;
        let mut rto = Rto::new(ms(300));
        assert_eq!(rto.timeout(), ms(300), "nothing measured: the ceiling");
        for _ in 0..20 {
            rto.sample(Duration::from_micros(100));
        }
        assert_eq!(
            rto.timeout(),
            MIN_ATTEMPT_TIMEOUT,
            "fast replies: the floor"
        );
        for _ in 0..20 {
            rto.sample(ms(40));
        }
        assert!(rto.timeout() >= ms(40) && rto.timeout() < ms(300));
        assert_eq!(rto.backoff(ms(20)), ms(40));
        assert_eq!(
            rto.backoff(ms(200)),
            ms(300),
            "a retry waits at most the ceiling"
        );
    }

    #[test]
    fn a_lost_request_is_sent_again_after_the_measured_timeout() {
        // The 30th datagram is lost.
        let a = replica(1, |n| n == 30);
        let mut c = Client::connect(&[a]).unwrap();
        for _ in 0..29 {
            c.set(b"k", b"v").unwrap();
        }
        let t = Instant::now();
        c.set(b"k", b"v").unwrap();
        // The fixed 300 ms before; now the floor (10 ms) or a little more on a slow machine.
        assert!(
            t.elapsed() < Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(c.retries, 1);
        assert_eq!(c.target(), a, "one timeout: the same replica again");
    }

    #[test]
    fn two_timeouts_in_a_row_move_to_the_next_replica() {
        // Replica 1 answers its first 10 datagrams, then nothing.
        let (a, b) = (replica(1, |n| n > 10), replica(2, |_| false));
        let mut c = Client::connect(&[a, b]).unwrap();
        for _ in 0..10 {
            c.set(b"k", b"v").unwrap();
        }
        assert_eq!(c.target(), a);
        let t = Instant::now();
        c.set(b"k", b"v").unwrap();
        assert_eq!(c.retries, 2, "twice at replica 1, then answered by 2");
        assert_eq!(c.target(), b);
        assert!(
            t.elapsed() < Duration::from_millis(250),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn with_nothing_measured_a_timeout_moves_on_at_once() {
        let (a, b) = (replica(1, |_| true), replica(2, |_| false));
        let mut c = Client::with_options(
            &[a, b],
            Options {
                attempt_timeout: Duration::from_millis(50),
                ..Options::default()
            },
        )
        .unwrap();
        c.set(b"k", b"v").unwrap();
        assert_eq!((c.retries, c.target()), (1, b));
    }
}
