//! The chaos workload: concurrent closed-loop clients over a small key set, half through the
//! native UDP client (sessions: exactly-once retries) and half through Redis RESP over TCP,
//! each operation recorded in a [`HistoryWriter`] with its invocation and completion time and
//! its outcome.
//!
//! Keys: `r<i>.<epoch>` are *registers* (`get` and `set` with values unique per write,
//! `c<client>-<n>`), `n<i>.<epoch>` are *counters* (`get` and `incr`). Keeping the two apart
//! means an `incr` never meets a non-numeric value, and unknown `set`s (unique values) stay cheap
//! for the checker. Every [`WorkloadConfig::key_epoch`] (10 s) the clients move on to a fresh key
//! set, as Jepsen's independent keys do: Porcupine checks each key on its own, so a key's history
//! stays short, and an operation with an unknown outcome stays open only until its key's history
//! ends, not to the end of the run (an unknown `incr` left open over a long history makes the
//! search explode: a 120 s run on 8 fixed keys took the checker past 24 GB).
//!
//! RESP clients also write registers through transactions: a `cas` is `WATCH k`, `GET k`, and
//! when the value is the one expected `MULTI`, `SET k new`, `EXEC` (else `UNWATCH`, and the
//! answer is "no match"); an `EXEC` that answers nil (the key changed) applied nothing. And
//! they send commands on hashes, lists, sets and sorted sets to keys of their own (`t…`),
//! not recorded (their replies are not checked), so that the final digest check covers
//! every type and the commands that pick at random.
//!
//! Outcomes, as the checker needs them (`crates/chaos/README.md`):
//!
//! | client | ok | fail (certainly not applied) | unknown (may have been applied) |
//! |---|---|---|---|
//! | native | an answer | `Rejected` (refused as invalid), an error result (`incr` of a non-counter) | `Timeout`, a local socket error |
//! | RESP | an answer | the connection could not be made (nothing sent); `-ERR replica busy`; `-ERR value is not an integer…`; a `cas` that failed before its `EXEC` was sent, or whose `EXEC` answered nil | any other error reply, a timeout, a lost connection after sending |

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use waverunner_client::{Client, Error as ClientError, Options as ClientOptions};
use waverunner_kv::{Cond, Expiry, Op, Response};

use crate::history::{HistoryWriter, Input, Operation, Outcome, Output};

/// A small, fast, seedable pseudo-random generator (SplitMix64): the same seed gives the same
/// sequence on every machine.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// A random element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// A generator for a sub-task, independent of this one's later draws.
    pub fn fork(&mut self, salt: u64) -> Rng {
        Rng::new(self.next_u64() ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }
}

/// The replicas' client-facing addresses. Shared by every client and replaceable while the
/// workload runs (after a membership change): a client picks up a new list the next time it
/// connects (RESP) or after its next timeout (native).
#[derive(Debug, Default)]
pub struct Targets {
    inner: RwLock<(u64, Vec<SocketAddr>, Vec<SocketAddr>)>,
}

impl Targets {
    /// Native UDP addresses and Redis addresses, one of each per replica.
    pub fn new(native: Vec<SocketAddr>, redis: Vec<SocketAddr>) -> Targets {
        Targets {
            inner: RwLock::new((1, native, redis)),
        }
    }

    /// Replaces both lists.
    pub fn set(&self, native: Vec<SocketAddr>, redis: Vec<SocketAddr>) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        g.0 += 1;
        g.1 = native;
        g.2 = redis;
    }

    /// (generation, native addresses, Redis addresses).
    pub fn get(&self) -> (u64, Vec<SocketAddr>, Vec<SocketAddr>) {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Which protocol the clients speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Even-numbered clients native, odd-numbered ones RESP.
    Mixed,
    /// Every client native (UDP, sessions).
    Native,
    /// Every client RESP (TCP).
    Resp,
}

/// What the clients do.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Concurrent clients.
    pub clients: usize,
    /// Which protocol each client speaks.
    pub protocol: Protocol,
    /// Register keys per epoch, `r<i>.<epoch>` (get/set).
    pub registers: usize,
    /// Counter keys per epoch, `n<i>.<epoch>` (get/incr).
    pub counters: usize,
    /// Fraction of operations that read.
    pub read_fraction: f64,
    /// How long the clients use one key set before moving on to the next (zero: one key set
    /// for the whole run).
    pub key_epoch: Duration,
    /// Seed of every client's choices.
    pub seed: u64,
    /// Pause between a client's operations (zero: closed loop at full speed).
    pub think: Duration,
    /// RESP clients: fraction of register writes made as a `cas` in a `WATCH` transaction.
    pub cas_fraction: f64,
    /// RESP clients: fraction of their commands sent to collection keys (not recorded).
    pub collection_fraction: f64,
    /// Native client: how long one request keeps being retried (same session and sequence
    /// number) before it is given up as unknown.
    pub native_deadline: Duration,
    /// Native client: how long one attempt waits before trying the next replica.
    pub native_attempt: Duration,
    /// RESP: how long to wait for a reply (then: unknown, and the connection is dropped).
    pub resp_timeout: Duration,
    /// RESP: how long to wait for a connection (then: fail, nothing was sent).
    pub resp_connect_timeout: Duration,
}

impl Default for WorkloadConfig {
    fn default() -> WorkloadConfig {
        WorkloadConfig {
            clients: 16,
            protocol: Protocol::Mixed,
            registers: 4,
            counters: 4,
            read_fraction: 0.5,
            key_epoch: Duration::from_secs(10),
            seed: 1,
            think: Duration::ZERO,
            cas_fraction: 0.3,
            collection_fraction: 0.2,
            native_deadline: Duration::from_secs(10),
            native_attempt: Duration::from_millis(300),
            resp_timeout: Duration::from_secs(5),
            resp_connect_timeout: Duration::from_millis(500),
        }
    }
}

impl WorkloadConfig {
    /// The key epoch at `t_us` on the history's clock.
    pub fn epoch_at(&self, t_us: u64) -> u64 {
        match self.key_epoch.as_micros() as u64 {
            0 => 0,
            e => t_us / e,
        }
    }

    /// The keys of one epoch: registers, then counters.
    pub fn keys_of(&self, epoch: u64) -> Vec<String> {
        let mut keys: Vec<String> = (0..self.registers)
            .map(|i| format!("r{i}.{epoch}"))
            .collect();
        keys.extend((0..self.counters).map(|i| format!("n{i}.{epoch}")));
        keys
    }

    /// Every key the workload may have touched from time 0 to `t_us`.
    pub fn keys_until(&self, t_us: u64) -> Vec<String> {
        (0..=self.epoch_at(t_us))
            .flat_map(|e| self.keys_of(e))
            .collect()
    }
}

/// Whether a key is a counter (`n…`) rather than a register (`r…`).
pub fn is_counter(key: &str) -> bool {
    key.starts_with('n')
}

/// Counts of a workload run (every client together).
#[derive(Debug, Default)]
pub struct Counts {
    /// Operations invoked.
    pub ops: AtomicU64,
    /// Answered.
    pub ok: AtomicU64,
    /// Certainly not applied.
    pub failed: AtomicU64,
    /// Outcome unknown.
    pub unknown: AtomicU64,
    /// Answers of an unexpected form (a harness or server bug; recorded as unknown).
    pub unexpected: AtomicU64,
    /// `cas` transactions whose `EXEC` was applied / answered nil (a watched key changed).
    pub tx_applied: AtomicU64,
    pub tx_aborted: AtomicU64,
    /// Commands sent to collection keys (not recorded).
    pub collection_ops: AtomicU64,
}

impl Counts {
    fn add(&self, outcome: Outcome) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Outcome::Ok => &self.ok,
            Outcome::Fail => &self.failed,
            Outcome::Unknown => &self.unknown,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// (ops, ok, failed, unknown) now.
    pub fn snapshot(&self) -> (u64, u64, u64, u64) {
        (
            self.ops.load(Ordering::Relaxed),
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.unknown.load(Ordering::Relaxed),
        )
    }
}

/// Runs the workload until `stop` is set: `cfg.clients` threads, each finishing its operation
/// in flight before it returns. Every operation goes to `history`. Client ids are
/// `0..cfg.clients`; with [`Protocol::Mixed`] even ids are native clients, odd ids RESP.
pub fn run(
    cfg: &WorkloadConfig,
    targets: &Targets,
    history: &HistoryWriter,
    stop: &AtomicBool,
    counts: &Counts,
) {
    std::thread::scope(|s| {
        let mut rng = Rng::new(cfg.seed);
        for c in 0..cfg.clients {
            let crng = rng.fork(c as u64);
            std::thread::Builder::new()
                .name(format!("chaos-client-{c}"))
                .spawn_scoped(s, move || {
                    let mut w = Worker {
                        id: c as u64,
                        cfg,
                        rng: crng,
                        history,
                        counts,
                        written: 0,
                        seen: HashMap::new(),
                    };
                    let native = match cfg.protocol {
                        Protocol::Mixed => c % 2 == 0,
                        Protocol::Native => true,
                        Protocol::Resp => false,
                    };
                    if native {
                        w.run_native(targets, stop);
                    } else {
                        w.run_resp(targets, stop);
                    }
                })
                .expect("spawn a client thread");
        }
    });
}

struct Worker<'a> {
    id: u64,
    cfg: &'a WorkloadConfig,
    rng: Rng,
    history: &'a HistoryWriter,
    counts: &'a Counts,
    /// Writes issued so far (for unique values).
    written: u64,
    /// The last value this client read or wrote per register (what a `cas` expects).
    seen: HashMap<String, Option<String>>,
}

impl Worker<'_> {
    /// The next operation of a RESP client: [`Worker::next_op`], some register writes as a
    /// `cas` expecting the value this client last saw.
    fn next_resp_op(&mut self) -> (String, Input) {
        let (key, input) = self.next_op();
        match input {
            Input::Set { value } if self.rng.chance(self.cfg.cas_fraction) => {
                let expected = self.seen.get(&key).cloned().flatten();
                (
                    key,
                    Input::Cas {
                        expected,
                        new: value,
                    },
                )
            }
            input => (key, input),
        }
    }

    /// A command on a collection key of this epoch (`t<type><i>.<epoch>`).
    fn collection_command(&mut self) -> Vec<Vec<u8>> {
        let epoch = self.cfg.epoch_at(self.history.now_us());
        let i = self.rng.below(2);
        let m = format!("m{}", self.rng.below(8));
        let n = self.rng.range(1, 3).to_string();
        let words: Vec<String> = match self.rng.below(14) {
            0 => vec!["HSET".into(), format!("th{i}.{epoch}"), m, n],
            1 => vec!["HINCRBY".into(), format!("th{i}.{epoch}"), m, n],
            2 => vec![
                "HRANDFIELD".into(),
                format!("th{i}.{epoch}"),
                n,
                "WITHVALUES".into(),
            ],
            3 => vec!["LPUSH".into(), format!("tl{i}.{epoch}"), m],
            4 => vec!["RPOP".into(), format!("tl{i}.{epoch}")],
            5 => vec![
                "LMOVE".into(),
                format!("tl{i}.{epoch}"),
                format!("tl{}.{epoch}", 1 - i),
                "LEFT".into(),
                "RIGHT".into(),
            ],
            6 => vec!["SADD".into(), format!("ts{i}.{epoch}"), m],
            7 => vec!["SPOP".into(), format!("ts{i}.{epoch}")],
            8 => vec![
                "SRANDMEMBER".into(),
                format!("ts{i}.{epoch}"),
                format!("-{n}"),
            ],
            9 => vec![
                "SINTERSTORE".into(),
                format!("ts2.{epoch}"),
                format!("ts0.{epoch}"),
                format!("ts1.{epoch}"),
            ],
            10 => vec!["ZADD".into(), format!("tz{i}.{epoch}"), n, m],
            11 => vec!["ZINCRBY".into(), format!("tz{i}.{epoch}"), n, m],
            12 => vec!["ZPOPMIN".into(), format!("tz{i}.{epoch}")],
            _ => vec![
                "ZRANDMEMBER".into(),
                format!("tz{i}.{epoch}"),
                n,
                "WITHSCORES".into(),
            ],
        };
        words.into_iter().map(String::into_bytes).collect()
    }

    /// The next operation: a key and what to do with it.
    fn next_op(&mut self) -> (String, Input) {
        let keys = self.cfg.registers + self.cfg.counters;
        let k = self.rng.below(keys.max(1) as u64) as usize;
        let read = self.rng.chance(self.cfg.read_fraction);
        let epoch = self.cfg.epoch_at(self.history.now_us());
        if k < self.cfg.registers {
            let key = format!("r{k}.{epoch}");
            if read {
                (key, Input::Get)
            } else {
                self.written += 1;
                let value = format!("c{}-{}", self.id, self.written);
                (key, Input::Set { value })
            }
        } else {
            let key = format!("n{}.{epoch}", k - self.cfg.registers);
            if read {
                (key, Input::Get)
            } else {
                (
                    key,
                    Input::Incr {
                        delta: 1 + self.rng.below(4) as i64,
                    },
                )
            }
        }
    }

    fn record(&self, op: Operation) {
        self.counts.add(op.outcome);
        if let Err(e) = self.history.record(&op) {
            // A bug in the harness (an invalid operation) or a full disk: say so loudly; the
            // check of an incomplete history would be wrong.
            panic!("cannot record {op}: {e}");
        }
    }

    fn think(&self) {
        if !self.cfg.think.is_zero() {
            std::thread::sleep(self.cfg.think);
        }
    }

    fn run_native(&mut self, targets: &Targets, stop: &AtomicBool) {
        let mut client: Option<(u64, Client)> = None;
        while !stop.load(Ordering::Relaxed) {
            let (gen, native, _) = targets.get();
            if client.as_ref().is_none_or(|(g, _)| *g != gen) {
                // Start each client at a different replica (reads are served where they land).
                let mut native = native;
                if !native.is_empty() {
                    let n = native.len();
                    native.rotate_left(self.id as usize % n);
                }
                let opts = ClientOptions {
                    attempt_timeout: self.cfg.native_attempt,
                    deadline: self.cfg.native_deadline,
                    client_id: waverunner_client::random_id(),
                };
                match Client::with_options(&native, opts) {
                    Ok(c) => client = Some((gen, c)),
                    Err(e) => panic!("native client {}: {e}", self.id),
                }
            }
            let Some((_, c)) = client.as_mut() else {
                continue;
            };
            let (key, input) = self.next_op();
            let op = native_op(&key, &input);
            let call = self.history.now_us();
            let r = c.execute(&op);
            let ret = self.history.now_us();
            let inv = Operation::invoke(self.id, key, input.clone(), call);
            let rec = match r {
                Ok(resp) => match native_output(&input, resp) {
                    Ok(out) => inv.ok(ret, out),
                    Err(Some(_)) => inv.fail(Some(ret)),
                    Err(None) => {
                        self.counts.unexpected.fetch_add(1, Ordering::Relaxed);
                        inv.unknown(Some(ret))
                    }
                },
                Err(ClientError::Rejected(_)) => inv.fail(Some(ret)),
                Err(ClientError::Timeout) | Err(ClientError::Local(_)) => {
                    // A new client (a new session) after a timeout: the old one's target may
                    // be a replica that is gone for good.
                    client = None;
                    inv.unknown(Some(ret))
                }
            };
            self.record(rec);
            self.think();
        }
    }

    fn run_resp(&mut self, targets: &Targets, stop: &AtomicBool) {
        let mut conn: Option<BufReader<TcpStream>> = None;
        let mut next = self.id as usize;
        while !stop.load(Ordering::Relaxed) {
            if let Some(s) = conn.as_mut() {
                if self.rng.chance(self.cfg.collection_fraction) {
                    let cmd = self.collection_command();
                    self.counts.collection_ops.fetch_add(1, Ordering::Relaxed);
                    if resp_call(s, &cmd).is_err() {
                        conn = None;
                    }
                    continue;
                }
            }
            let (key, input) = self.next_resp_op();
            let call = self.history.now_us();
            let inv = Operation::invoke(self.id, key.clone(), input.clone(), call);
            if conn.is_none() {
                let (_, _, redis) = targets.get();
                if redis.is_empty() {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                let addr = redis[next % redis.len()];
                next = next.wrapping_add(1);
                match connect(addr, self.cfg) {
                    Ok(s) => conn = Some(BufReader::new(s)),
                    Err(_) => {
                        // Nothing was sent: certainly not applied.
                        self.record(inv.fail(Some(self.history.now_us())));
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                }
            }
            let Some(s) = conn.as_mut() else { continue };
            if let Input::Cas { expected, new } = &input {
                let (verdict, keep) = resp_cas(s, &key, expected.as_deref(), new);
                let ret = self.history.now_us();
                let rec = match verdict {
                    RespVerdict::Ok(out) => {
                        if out == (Output::Cas { ok: true }) {
                            self.counts.tx_applied.fetch_add(1, Ordering::Relaxed);
                            self.seen.insert(key.clone(), Some(new.clone()));
                        }
                        inv.ok(ret, out)
                    }
                    RespVerdict::Fail => {
                        self.counts.tx_aborted.fetch_add(1, Ordering::Relaxed);
                        inv.fail(Some(ret))
                    }
                    RespVerdict::Unknown => inv.unknown(Some(ret)),
                    RespVerdict::Unexpected => {
                        self.counts.unexpected.fetch_add(1, Ordering::Relaxed);
                        inv.unknown(Some(ret))
                    }
                };
                if !keep {
                    conn = None;
                }
                self.record(rec);
                self.think();
                continue;
            }
            let r = resp_call(s, &resp_command(&key, &input));
            let ret = self.history.now_us();
            match (&input, &r) {
                (Input::Get, Ok(Reply::Bulk(v))) => {
                    let v = v.as_ref().map(|v| String::from_utf8_lossy(v).into_owned());
                    self.seen.insert(key.clone(), v);
                }
                (Input::Set { value }, Ok(Reply::Simple(ok))) if ok == "OK" => {
                    self.seen.insert(key.clone(), Some(value.clone()));
                }
                _ => {}
            }
            let rec = match r {
                Ok(reply) => match resp_output(&input, reply) {
                    RespVerdict::Ok(out) => inv.ok(ret, out),
                    RespVerdict::Fail => inv.fail(Some(ret)),
                    RespVerdict::Unknown => {
                        conn = None;
                        inv.unknown(Some(ret))
                    }
                    RespVerdict::Unexpected => {
                        self.counts.unexpected.fetch_add(1, Ordering::Relaxed);
                        conn = None;
                        inv.unknown(Some(ret))
                    }
                },
                Err(_) => {
                    conn = None;
                    inv.unknown(Some(ret))
                }
            };
            self.record(rec);
            self.think();
        }
    }
}

/// The native client operation for a history input.
fn native_op(key: &str, input: &Input) -> Op {
    let key = key.as_bytes().to_vec();
    match input {
        Input::Get => Op::Get { keys: vec![key] },
        Input::Set { value } => Op::Set {
            key,
            value: value.as_bytes().to_vec(),
            flags: 0,
            expiry: Expiry::None,
            cond: Cond::Always,
            get_old: false,
        },
        Input::Incr { delta } => Op::IncrBy { key, delta: *delta },
        Input::Cas { .. } => unreachable!("the workload does not use cas"),
    }
}

/// `Ok`: the output; `Err(Some(msg))`: an error result (not applied); `Err(None)`: an answer
/// of the wrong form.
fn native_output(input: &Input, resp: Response) -> Result<Output, Option<String>> {
    match (input, resp) {
        (Input::Get, Response::Items(mut v)) if v.len() == 1 => Ok(Output::Get {
            value: v
                .pop()
                .flatten()
                .map(|i| String::from_utf8_lossy(&i.value).into_owned()),
        }),
        (Input::Set { .. }, Response::Ok) => Ok(Output::Set),
        (Input::Incr { .. }, Response::Int(n)) => Ok(Output::Incr { value: n }),
        (_, Response::Error(m)) => Err(Some(m)),
        _ => Err(None),
    }
}

// ---------------------------------------------------------------------------------------------
// A minimal RESP2 client
// ---------------------------------------------------------------------------------------------

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+…`
    Simple(String),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$…` (`None`: `$-1`, nil).
    Bulk(Option<Vec<u8>>),
    /// `*…` (`None`: `*-1`).
    Array(Option<Vec<Reply>>),
}

fn connect(addr: SocketAddr, cfg: &WorkloadConfig) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, cfg.resp_connect_timeout)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(cfg.resp_timeout))?;
    s.set_write_timeout(Some(cfg.resp_timeout))?;
    Ok(s)
}

/// Connects to a Redis front-end with the given timeouts for connecting and for each reply.
pub fn resp_connect(
    addr: SocketAddr,
    connect_timeout: Duration,
    timeout: Duration,
) -> std::io::Result<BufReader<TcpStream>> {
    let cfg = WorkloadConfig {
        resp_connect_timeout: connect_timeout,
        resp_timeout: timeout,
        ..WorkloadConfig::default()
    };
    connect(addr, &cfg).map(BufReader::new)
}

/// The RESP command for a history input.
fn resp_command(key: &str, input: &Input) -> Vec<Vec<u8>> {
    let b = |s: &str| s.as_bytes().to_vec();
    match input {
        Input::Get => vec![b("GET"), b(key)],
        Input::Set { value } => vec![b("SET"), b(key), b(value)],
        Input::Incr { delta } => vec![b("INCRBY"), b(key), b(&delta.to_string())],
        Input::Cas { .. } => unreachable!("the workload does not use cas"),
    }
}

/// A `cas` through a `WATCH` transaction: the verdict, and whether the connection may be
/// used again (its state is known: no transaction or watch left open).
fn resp_cas(
    s: &mut BufReader<TcpStream>,
    key: &str,
    expected: Option<&str>,
    new: &str,
) -> (RespVerdict, bool) {
    let b = |s: &str| s.as_bytes().to_vec();
    // Until EXEC is sent nothing can be applied: any trouble is a certain failure.
    let before_exec = |r: std::io::Result<Reply>, want: &str| match r {
        Ok(Reply::Simple(x)) if x == want => Ok(()),
        _ => Err((RespVerdict::Fail, false)),
    };
    if let Err(e) = before_exec(resp_call(s, &[b("WATCH"), b(key)]), "OK") {
        return e;
    }
    let current = match resp_call(s, &[b("GET"), b(key)]) {
        Ok(Reply::Bulk(v)) => v.map(|v| String::from_utf8_lossy(&v).into_owned()),
        _ => return (RespVerdict::Fail, false),
    };
    if current.as_deref() != expected {
        let clean = matches!(resp_call(s, &[b("UNWATCH")]), Ok(Reply::Simple(_)));
        return (RespVerdict::Ok(Output::Cas { ok: false }), clean);
    }
    if let Err(e) = before_exec(resp_call(s, &[b("MULTI")]), "OK") {
        return e;
    }
    if let Err(e) = before_exec(resp_call(s, &[b("SET"), b(key), b(new)]), "QUEUED") {
        return e;
    }
    match resp_call(s, &[b("EXEC")]) {
        Ok(Reply::Array(Some(v))) if v == [Reply::Simple("OK".into())] => {
            (RespVerdict::Ok(Output::Cas { ok: true }), true)
        }
        // The watched key changed: nothing applied.
        Ok(Reply::Array(None)) => (RespVerdict::Fail, true),
        Ok(Reply::Error(e)) if e.starts_with("EXECABORT") || e.contains("replica busy") => {
            (RespVerdict::Fail, false)
        }
        Ok(Reply::Error(_)) | Err(_) => (RespVerdict::Unknown, false),
        Ok(_) => (RespVerdict::Unexpected, false),
    }
}

/// Sends one command (an array of bulk strings) and reads its reply.
pub fn resp_call(s: &mut BufReader<TcpStream>, args: &[Vec<u8>]) -> std::io::Result<Reply> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    s.get_mut().write_all(&out)?;
    read_reply(s, 0)
}

fn bad(m: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, m.into())
}

fn read_line(s: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = Vec::new();
    let n = s.by_ref().take(64 << 10).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    if !line.ends_with(b"\r\n") {
        return Err(bad("reply line without CRLF"));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| bad("reply line is not UTF-8"))
}

/// Reads one RESP2 reply.
pub fn read_reply(s: &mut impl BufRead, depth: usize) -> std::io::Result<Reply> {
    if depth > 8 {
        return Err(bad("reply nested too deeply"));
    }
    let line = read_line(s)?;
    let (kind, rest) = line.split_at(line.len().min(1));
    let num = || {
        rest.parse::<i64>()
            .map_err(|_| bad(format!("bad number {rest:?}")))
    };
    Ok(match kind {
        "+" => Reply::Simple(rest.to_string()),
        "-" => Reply::Error(rest.to_string()),
        ":" => Reply::Int(num()?),
        "$" => {
            let n = num()?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let n = usize::try_from(n).map_err(|_| bad("bulk too long"))?;
                if n > 64 << 20 {
                    return Err(bad("bulk too long"));
                }
                let mut v = vec![0; n + 2];
                s.read_exact(&mut v)?;
                if !v.ends_with(b"\r\n") {
                    return Err(bad("bulk without CRLF"));
                }
                v.truncate(n);
                Reply::Bulk(Some(v))
            }
        }
        "*" => {
            let n = num()?;
            if n < 0 {
                Reply::Array(None)
            } else {
                let mut items = Vec::new();
                for _ in 0..n.min(1 << 20) {
                    items.push(read_reply(s, depth + 1)?);
                }
                Reply::Array(Some(items))
            }
        }
        _ => return Err(bad(format!("unknown reply type in {line:?}"))),
    })
}

enum RespVerdict {
    Ok(Output),
    Fail,
    Unknown,
    Unexpected,
}

/// Error replies that say the command certainly was not applied.
fn resp_error_is_refusal(input: &Input, e: &str) -> bool {
    // `replica busy`: refused before it reached the log. A non-counter value: the store
    // answered an error and changed nothing (only possible for incr).
    e.contains("replica busy")
        || (matches!(input, Input::Incr { .. }) && e.contains("not an integer"))
}

fn resp_output(input: &Input, reply: Reply) -> RespVerdict {
    match (input, reply) {
        (Input::Get, Reply::Bulk(v)) => RespVerdict::Ok(Output::Get {
            value: v.map(|v| String::from_utf8_lossy(&v).into_owned()),
        }),
        (Input::Set { .. }, Reply::Simple(s)) if s == "OK" => RespVerdict::Ok(Output::Set),
        (Input::Incr { .. }, Reply::Int(n)) => RespVerdict::Ok(Output::Incr { value: n }),
        (i, Reply::Error(e)) if resp_error_is_refusal(i, &e) => RespVerdict::Fail,
        (_, Reply::Error(_)) => RespVerdict::Unknown,
        _ => RespVerdict::Unexpected,
    }
}

// ---------------------------------------------------------------------------------------------
// Final reads
// ---------------------------------------------------------------------------------------------

/// Reads every key once through the native client (a fresh session), recording each read as
/// client `client` in `history`: the reads after the faults healed that show whether every
/// acknowledged write survived. Each key is retried (a new read each time) until it is
/// answered or `deadline` passes. Returns the values read, `None` for a key that could not be
/// read.
pub fn final_reads(
    native: &[SocketAddr],
    keys: &[String],
    client: u64,
    history: &HistoryWriter,
    deadline: Duration,
) -> Vec<(String, Option<Option<String>>)> {
    let until = Instant::now() + deadline;
    let mut out = Vec::new();
    let opts = ClientOptions {
        attempt_timeout: Duration::from_millis(300),
        deadline: Duration::from_secs(3),
        client_id: waverunner_client::random_id(),
    };
    let mut c = match Client::with_options(native, opts) {
        Ok(c) => c,
        Err(_) => return keys.iter().map(|k| (k.clone(), None)).collect(),
    };
    for key in keys {
        let mut got = None;
        while got.is_none() && Instant::now() < until {
            let call = history.now_us();
            let r = c.execute(&native_op(key, &Input::Get));
            let ret = history.now_us();
            let inv = Operation::invoke(client, key.clone(), Input::Get, call);
            let rec = match r.map(|resp| native_output(&Input::Get, resp)) {
                Ok(Ok(Output::Get { value })) => {
                    got = Some(value.clone());
                    inv.ok(ret, Output::Get { value })
                }
                Ok(Err(Some(_))) | Err(ClientError::Rejected(_)) => inv.fail(Some(ret)),
                _ => inv.unknown(Some(ret)),
            };
            let _ = history.record(&rec);
        }
        out.push((key.clone(), got));
    }
    let _ = history.flush();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_spread() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let xs: Vec<u64> = (0..100).map(|_| a.below(10)).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.below(10)).collect();
        assert_eq!(xs, ys);
        for v in 0..10 {
            assert!(xs.contains(&v), "{v} never drawn");
        }
        let mut c = Rng::new(7);
        for _ in 0..1000 {
            let r = c.range(1, 5);
            assert!((1..=5).contains(&r));
        }
    }

    #[test]
    fn resp_replies_parse() {
        let text = b"+OK\r\n-ERR replica busy, retry\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n$1\r\na\r\n:1\r\n";
        let mut r = BufReader::new(&text[..]);
        assert_eq!(read_reply(&mut r, 0).unwrap(), Reply::Simple("OK".into()));
        assert_eq!(
            read_reply(&mut r, 0).unwrap(),
            Reply::Error("ERR replica busy, retry".into())
        );
        assert_eq!(read_reply(&mut r, 0).unwrap(), Reply::Int(42));
        assert_eq!(
            read_reply(&mut r, 0).unwrap(),
            Reply::Bulk(Some(b"abc".to_vec()))
        );
        assert_eq!(read_reply(&mut r, 0).unwrap(), Reply::Bulk(None));
        assert_eq!(
            read_reply(&mut r, 0).unwrap(),
            Reply::Array(Some(vec![Reply::Bulk(Some(b"a".to_vec())), Reply::Int(1)]))
        );
        assert!(read_reply(&mut r, 0).is_err());
    }

    #[test]
    fn outcomes_of_resp_replies() {
        let set = Input::Set { value: "x".into() };
        let incr = Input::Incr { delta: 1 };
        assert!(matches!(
            resp_output(&set, Reply::Simple("OK".into())),
            RespVerdict::Ok(Output::Set)
        ));
        assert!(matches!(
            resp_output(&set, Reply::Error("ERR replica busy, retry".into())),
            RespVerdict::Fail
        ));
        assert!(matches!(
            resp_output(
                &set,
                Reply::Error("ERR timed out waiting for the cluster (outcome unknown)".into())
            ),
            RespVerdict::Unknown
        ));
        assert!(matches!(
            resp_output(
                &incr,
                Reply::Error("ERR value is not an integer or out of range".into())
            ),
            RespVerdict::Fail
        ));
        assert!(matches!(
            resp_output(&incr, Reply::Int(7)),
            RespVerdict::Ok(Output::Incr { value: 7 })
        ));
        assert!(matches!(
            resp_output(&Input::Get, Reply::Int(7)),
            RespVerdict::Unexpected
        ));
    }

    #[test]
    fn ops_are_unique_writes_over_the_key_set() {
        let cfg = WorkloadConfig::default();
        let dir = std::env::temp_dir().join(format!("wr-workload-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let h = HistoryWriter::create(dir.join("h.jsonl")).unwrap();
        let counts = Counts::default();
        let mut w = Worker {
            id: 3,
            cfg: &cfg,
            rng: Rng::new(9),
            history: &h,
            counts: &counts,
            written: 0,
            seen: HashMap::new(),
        };
        let mut values = std::collections::HashSet::new();
        let keys = cfg.keys_of(0);
        for _ in 0..2000 {
            let (k, i) = w.next_op();
            assert!(keys.contains(&k));
            match i {
                Input::Set { value } => {
                    assert!(!is_counter(&k));
                    assert!(values.insert(value));
                }
                Input::Incr { delta } => {
                    assert!(is_counter(&k));
                    assert!((1..=4).contains(&delta));
                }
                Input::Get => {}
                Input::Cas { .. } => panic!("no cas"),
            }
        }
        assert!(values.len() > 300);
        let rotating = WorkloadConfig {
            key_epoch: Duration::from_secs(10),
            ..WorkloadConfig::default()
        };
        assert_eq!(rotating.epoch_at(25_000_000), 2);
        assert_eq!(rotating.keys_until(25_000_000).len(), 24);
        assert_eq!(rotating.keys_of(2)[0], "r0.2");
        assert_eq!(rotating.keys_of(2)[7], "n3.2");
        drop(h);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
