//! # waverunner-client
//!
//! A Rust client for Waverunner's native UDP protocol (`waverunner_kv::native`).
//!
//! - **Leader discovery and redirects**: any replica accepts requests (followers forward them to
//!   the leader); every reply names the leader, and the client sends there next.
//! - **Timeouts and exactly-once retries**: a request unanswered within the attempt timeout is
//!   sent again — to the next replica — with the *same* session id and sequence number, so the
//!   cluster applies it at most once and answers a retry from its session table.
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
    /// How long to wait for one attempt before retrying elsewhere.
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
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout);
            }
            let to = self.nodes[self.target];
            self.sock
                .send_to(&pkt, to)
                .map_err(|e| Error::Local(format!("send to {to}: {e}")))?;
            let until = (now + self.opts.attempt_timeout).min(deadline);
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
                self.target = (self.target + 1) % self.nodes.len();
                continue;
            };
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
