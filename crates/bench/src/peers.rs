//! The parts of `waverunner bench peers` that need no cluster (the orchestration is in
//! `crates/cli/src/peers.rs`, the method in docs/bench.md): `redis-benchmark -q`'s lines, a
//! closed loop of writes whose replies each mean what a system promises (RESP `SET`; `SET` then
//! `WAIT 1 0`, Redis's way to a majority-synced write; etcd's `/v3/kv/put` over its HTTP
//! gateway), the table, the CSV the plot is drawn from, and the verdicts against issue 13's
//! targets.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use base64::Engine as _;

use crate::scale::{encode_command, parse_reply, Reply};
use crate::stats::{quantiles, Quantiles};

/// Bytes of every value written (issue 13's measurements: 8-byte values).
pub const VALUE_BYTES: usize = 8;

/// Distinct keys each closed-loop client cycles through.
pub const KEYS_PER_CLIENT: u64 = 1_000;

/// How long a closed-loop client waits for one reply before it gives up.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// One result line of `redis-benchmark -q`, e.g.
/// `SET: 52603.89 requests per second, p50=0.743 msec`.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchLine {
    /// The test (`SET`, `GET`, …).
    pub test: String,
    /// Requests per second.
    pub rps: f64,
    /// Median latency, µs (redis-benchmark 7 prints it).
    pub p50_us: Option<f64>,
}

/// The result lines of `redis-benchmark -q` output (its progress lines, separated by `\r`,
/// say `rps=` and are skipped).
pub fn parse_redis_benchmark(out: &str) -> Vec<BenchLine> {
    out.split(['\r', '\n'])
        .filter_map(|l| {
            let (test, rest) = l.split_once(": ")?;
            if !rest.contains("requests per second") {
                return None;
            }
            let rps: f64 = rest.split_whitespace().next()?.parse().ok()?;
            let p50_us = rest
                .split("p50=")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse::<f64>().ok())
                .map(|ms| ms * 1_000.0);
            Some(BenchLine {
                test: test.trim().to_string(),
                rps,
                p50_us,
            })
        })
        .collect()
}

/// What one closed-loop write is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOp {
    /// RESP `SET k v`, `+OK` (waverunner: committed on a majority; Redis: on the primary only).
    Set,
    /// RESP `SET k v` and `WAIT 1 0` pipelined, `+OK` and `:n` with n ≥ 1: on the primary and
    /// one of its two replicas, a majority of three.
    SetWait,
    /// etcd `POST /v3/kv/put` (JSON over its gRPC gateway), status 200: committed by Raft.
    EtcdPut,
}

/// Appends the request of one [`WriteOp`] of `key` = `value` to `out` (`addr`: the server,
/// for etcd's `Host` header).
fn request(op: WriteOp, addr: SocketAddr, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match op {
        WriteOp::Set => encode_command(out, &[b"SET", key, value]),
        WriteOp::SetWait => {
            encode_command(out, &[b"SET", key, value]);
            encode_command(out, &[b"WAIT", b"1", b"0"]);
        }
        WriteOp::EtcdPut => {
            let req = post_request(addr, PUT, &put_body(key, value));
            out.extend_from_slice(req.as_bytes());
        }
    }
}

/// The answer to one [`WriteOp`] at the start of `buf`: `Ok(None)` while incomplete,
/// `Ok(Some(n))` (the bytes it took) when it says what the operation promises, an error
/// otherwise.
fn answered(op: WriteOp, buf: &[u8]) -> Result<Option<usize>, String> {
    match op {
        WriteOp::Set => match parse_reply(buf)? {
            None => Ok(None),
            Some((Reply::Status(s), n)) if s == "OK" => Ok(Some(n)),
            Some((other, _)) => Err(format!("SET answered {other:?}")),
        },
        WriteOp::SetWait => {
            let Some((set, n)) = parse_reply(buf)? else {
                return Ok(None);
            };
            if !matches!(&set, Reply::Status(s) if s == "OK") {
                return Err(format!("SET answered {set:?}"));
            }
            match parse_reply(&buf[n..])? {
                None => Ok(None),
                Some((Reply::Int(k), m)) if k >= 1 => Ok(Some(n + m)),
                Some((other, _)) => Err(format!("WAIT 1 0 answered {other:?}")),
            }
        }
        WriteOp::EtcdPut => match parse_http_response(buf)? {
            None => Ok(None),
            Some((status, body, n)) => put_answer(status, &body).map(|()| Some(n)),
        },
    }
}

/// `POST path` with a JSON body, as an HTTP/1.1 keep-alive request to `addr`.
fn post_request(addr: SocketAddr, path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// An HTTP/1.1 keep-alive connection to an etcd member's gRPC gateway.
pub struct Etcd {
    stream: TcpStream,
    addr: SocketAddr,
    buf: Vec<u8>,
}

impl Etcd {
    /// Connects to `addr` (an etcd client URL's host and port).
    pub fn connect(addr: SocketAddr) -> Result<Etcd, String> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .map_err(|e| format!("{addr}: {e}"))?;
        Ok(Etcd {
            stream,
            addr,
            buf: Vec::new(),
        })
    }

    /// `POST path` with a JSON body; the response's status and body.
    pub fn post(&mut self, path: &str, body: &str) -> Result<(u16, Vec<u8>), String> {
        let req = post_request(self.addr, path, body);
        self.stream
            .write_all(req.as_bytes())
            .map_err(|e| format!("write to {}: {e}", self.addr))?;
        loop {
            if let Some((status, body, used)) = parse_http_response(&self.buf)? {
                self.buf.drain(..used);
                return Ok((status, body));
            }
            let mut tmp = [0u8; 16 << 10];
            match self.stream.read(&mut tmp) {
                Ok(0) => return Err(format!("{} closed the connection", self.addr)),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read from {}: {e}", self.addr)),
            }
        }
    }

    /// A put of `key` = `value`, acknowledged once etcd committed it.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let (status, body) = self.post(PUT, &put_body(key, value))?;
        put_answer(status, &body)
    }
}

/// etcd's put over its gateway.
const PUT: &str = "/v3/kv/put";

/// The JSON of a put of `key` = `value`.
fn put_body(key: &[u8], value: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        b64.encode(key),
        b64.encode(value)
    )
}

/// Whether a put's answer says it was committed.
fn put_answer(status: u16, body: &[u8]) -> Result<(), String> {
    if status != 200 {
        return Err(format!(
            "put answered {status}: {}",
            String::from_utf8_lossy(body)
        ));
    }
    Ok(())
}

/// Parses one HTTP/1.1 response at the start of `buf` (a `Content-Length` or a chunked body):
/// `Ok(None)` while incomplete, else its status, body and the bytes it took.
pub fn parse_http_response(buf: &[u8]) -> Result<Option<(u16, Vec<u8>, usize)>, String> {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "response head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line `{status_line}`"))?;
    let mut length = None;
    let mut chunked = false;
    for l in lines {
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "content-length" {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bad Content-Length `{value}`"))?,
            );
        } else if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
            chunked = true;
        }
    }
    let mut at = end + 4;
    if chunked {
        let mut body = Vec::new();
        loop {
            let Some(e) = find(&buf[at..], b"\r\n") else {
                return Ok(None);
            };
            let size_text = std::str::from_utf8(&buf[at..at + e]).unwrap_or("");
            let size_text = size_text.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| format!("bad chunk size `{size_text}`"))?;
            at += e + 2;
            if buf.len() < at + size + 2 {
                return Ok(None);
            }
            body.extend_from_slice(&buf[at..at + size]);
            at += size + 2;
            if size == 0 {
                return Ok(Some((status, body, at)));
            }
        }
    }
    let n = length.unwrap_or(0);
    if buf.len() < at + n {
        return Ok(None);
    }
    let body = buf[at..at + n].to_vec();
    at += n;
    Ok(Some((status, body, at)))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What a closed loop did.
#[derive(Clone, Debug, Default)]
pub struct LoopResult {
    /// Writes answered as the operation promises.
    pub ops: u64,
    /// Writes that failed (the client then stops).
    pub errors: u64,
    /// From the first write sent to the last answer.
    pub elapsed: Duration,
    /// Latency of each answered write, ns.
    pub latency: Option<Quantiles>,
    /// The first failure, if any.
    pub first_error: Option<String>,
}

impl LoopResult {
    /// Answered writes a second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// One closed-loop client: its connection and the write it has in flight.
struct Client {
    stream: mio::net::TcpStream,
    /// The request in flight, and how much of it is written.
    out: Vec<u8>,
    sent: usize,
    /// What was read and not parsed yet.
    inbuf: Vec<u8>,
    /// Its keys' number for the next write.
    i: u64,
    /// When the write in flight was sent; `None`: it stopped.
    since: Option<Instant>,
    /// Latency of each answered write, ns.
    lat: Vec<u64>,
    /// Why it stopped early.
    error: Option<String>,
}

impl Client {
    /// Writes what of the request the socket takes (the rest when it is writable again).
    fn flush(&mut self) -> Result<(), String> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        Ok(())
    }

    /// Reads what is there through `scratch`; whether the server closed the connection. A
    /// read shorter than `scratch` emptied the socket (the poll is edge-triggered: more bytes
    /// make a new event), so it is not followed by one that would block: one read per answer,
    /// as redis-benchmark does, where two cost this one-thread client a syscall per write.
    fn read(&mut self, scratch: &mut [u8]) -> Result<bool, String> {
        loop {
            match self.stream.read(scratch) {
                Ok(0) => return Ok(true),
                Ok(n) => {
                    self.inbuf.extend_from_slice(&scratch[..n]);
                    if n < scratch.len() {
                        return Ok(false);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    fn stop(&mut self, error: Option<String>) {
        self.since = None;
        if self.error.is_none() {
            self.error = error;
        }
    }
}

/// `clients` connections to `addr`, each doing `op` one at a time (the next once the last is
/// answered) on its own keys with [`VALUE_BYTES`]-byte values, for `duration` or until `max_ops`
/// writes in all, whichever comes first.
///
/// One thread drives every connection (non-blocking sockets, one poll), as `redis-benchmark`
/// does: on a machine of two CPUs shared with the systems measured, a thread per client spent
/// as much CPU switching between its threads as some systems spent serving them. `setup` runs
/// first on that thread (e.g. to enter the clients' network namespace).
pub fn closed_loop(
    addr: SocketAddr,
    op: WriteOp,
    clients: usize,
    duration: Duration,
    max_ops: u64,
    setup: &(dyn Fn() -> Result<(), String> + Sync),
) -> Result<LoopResult, String> {
    assert!(clients > 0 && max_ops > 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            setup()?;
            drive(addr, op, clients, duration, max_ops)
        })
        .join()
        .unwrap_or_else(|_| Err("the closed loop panicked".into()))
    })
}

/// One wait of a closed loop's poll: an interrupted wait is an empty one.
pub(crate) fn wait(
    poll: &mut mio::Poll,
    events: &mut mio::Events,
    timeout: Duration,
) -> Result<(), String> {
    match poll.poll(events, Some(timeout)) {
        Err(e) if e.kind() != std::io::ErrorKind::Interrupted => Err(format!("poll: {e}")),
        _ => Ok(()),
    }
}

/// [`closed_loop`] on the calling thread.
fn drive(
    addr: SocketAddr,
    op: WriteOp,
    clients: usize,
    duration: Duration,
    max_ops: u64,
) -> Result<LoopResult, String> {
    use mio::{Events, Interest, Poll, Token};
    let mut poll = Poll::new().map_err(|e| format!("poll: {e}"))?;
    let mut cs = Vec::with_capacity(clients);
    for c in 0..clients {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = s.set_nodelay(true);
        s.set_nonblocking(true)
            .map_err(|e| format!("{addr}: {e}"))?;
        let mut stream = mio::net::TcpStream::from_std(s);
        poll.registry()
            .register(
                &mut stream,
                Token(c),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| format!("register: {e}"))?;
        cs.push(Client {
            stream,
            out: Vec::new(),
            sent: 0,
            inbuf: Vec::new(),
            i: 0,
            since: None,
            lat: Vec::new(),
            error: None,
        });
    }
    let value = [b'v'; VALUE_BYTES];
    let start = Instant::now();
    let mut issued = 0u64;
    // Sends client `c`'s next write if the run goes on; whether it did.
    let mut next = |c: usize, cl: &mut Client| -> Result<bool, String> {
        if start.elapsed() >= duration || issued >= max_ops {
            return Ok(false);
        }
        issued += 1;
        let key = format!("peers:{c}:{}", cl.i % KEYS_PER_CLIENT);
        cl.i += 1;
        cl.out.clear();
        cl.sent = 0;
        request(op, addr, key.as_bytes(), &value, &mut cl.out);
        cl.since = Some(Instant::now());
        cl.flush()?;
        Ok(true)
    };
    let mut active = 0;
    for (c, cl) in cs.iter_mut().enumerate() {
        match next(c, cl) {
            Ok(true) => active += 1,
            Ok(false) => {}
            Err(e) => cl.stop(Some(e)),
        }
    }
    let mut events = Events::with_capacity(clients.max(16));
    let mut scratch = vec![0u8; 16 << 10];
    while active > 0 {
        wait(&mut poll, &mut events, Duration::from_millis(100))?;
        for ev in events.iter() {
            let c = ev.token().0;
            let cl = &mut cs[c];
            if cl.since.is_none() {
                continue;
            }
            let mut step = || -> Result<bool, String> {
                if ev.is_writable() {
                    cl.flush()?;
                }
                let closed = cl.read(&mut scratch)?;
                // Every answer read: a write answered sends the next.
                while let Some(used) = answered(op, &cl.inbuf)? {
                    cl.inbuf.drain(..used);
                    let since = cl.since.expect("a write in flight");
                    cl.lat.push(since.elapsed().as_nanos() as u64);
                    if !next(c, cl)? {
                        return Ok(false);
                    }
                }
                if closed {
                    return Err(format!("{addr} closed the connection"));
                }
                Ok(true)
            };
            match step() {
                Ok(true) => {}
                Ok(false) => {
                    cl.stop(None);
                    active -= 1;
                }
                Err(e) => {
                    cl.stop(Some(e));
                    active -= 1;
                }
            }
        }
        // A write unanswered for too long stops its client.
        for cl in &mut cs {
            if cl.since.is_some_and(|t| t.elapsed() > REPLY_TIMEOUT) {
                cl.stop(Some(format!(
                    "no answer from {addr} within {REPLY_TIMEOUT:?}"
                )));
                active -= 1;
            }
        }
    }
    let elapsed = start.elapsed();
    let mut all = Vec::new();
    let mut r = LoopResult {
        elapsed,
        ..Default::default()
    };
    for cl in cs {
        r.ops += cl.lat.len() as u64;
        all.extend(cl.lat);
        if let Some(e) = cl.error {
            r.errors += 1;
            r.first_error.get_or_insert(e);
        }
    }
    r.latency = quantiles(&mut all);
    Ok(r)
}

/// One system's results.
#[derive(Clone, Debug, Default)]
pub struct SystemResult {
    /// E.g. `Redis 7, async` or `waverunner xdp`.
    pub name: String,
    /// What a write's reply means there, for the table.
    pub op: Option<WriteOp>,
    /// `redis-benchmark` SET and GET, 50 clients, pipeline 1 and 16 (RESP systems only).
    pub set_p1: Option<BenchLine>,
    /// GET, pipeline 1.
    pub get_p1: Option<BenchLine>,
    /// SET, pipeline 16.
    pub set_p16: Option<BenchLine>,
    /// GET, pipeline 16.
    pub get_p16: Option<BenchLine>,
    /// The closed loop of `op` at [`MANY`] clients.
    pub many: Option<LoopResult>,
    /// Machine-wide CPU µs per write answered in `many`.
    pub cpu_us_per_write: Option<f64>,
    /// Machine-wide CPU µs per write of `set_p16` (redis-benchmark's SETs, pipeline 16): a
    /// write's cost when requests come in batches, not one per round trip.
    pub cpu_us_per_set_p16: Option<f64>,
    /// The closed loop with one client.
    pub one: Option<LoopResult>,
    /// Waverunner only: [`MANY`] native clients (UDP, the protocol a data plane answers), each
    /// with one `SET` in flight ([`crate::native`]).
    pub native: Option<LoopResult>,
    /// Machine-wide CPU µs per write answered in `native`.
    pub native_cpu_us: Option<f64>,
    /// One native client.
    pub native_one: Option<LoopResult>,
    /// Why something is missing, and anything unusual.
    pub notes: Vec<String>,
}

/// Clients of the many-client closed loop (and of redis-benchmark).
pub const MANY: usize = 50;

fn rate(b: &Option<BenchLine>) -> Option<f64> {
    b.as_ref().map(|b| b.rps)
}

fn kps(x: Option<f64>) -> String {
    x.map_or("—".into(), |v| format!("{:.1} k", v / 1_000.0))
}

fn us(ns: Option<u64>) -> String {
    ns.map_or("—".into(), |v| format!("{}", v / 1_000))
}

/// The Markdown table: one row per system.
pub fn render_table(rs: &[SystemResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| system | a write's reply means | SET 50 clients | GET 50 clients | SET pipeline 16 | GET \
         pipeline 16 | CPU µs per SET, pipeline 16 (machine) | {MANY} closed-loop writers, \
         writes/s | their p50 / p99 µs | CPU µs per write (machine) | 1 writer p50 / p99 µs |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rs {
        let meaning = match r.op {
            Some(WriteOp::Set) if r.name.starts_with("Redis") => "on the primary (async)",
            Some(WriteOp::Set) => "committed on a majority",
            Some(WriteOp::SetWait) => "on the primary and one replica (WAIT 1)",
            Some(WriteOp::EtcdPut) => "committed on a majority",
            None => "—",
        };
        let many = r.many.as_ref();
        let one = r.one.as_ref();
        let _ = writeln!(
            s,
            "| {} | {meaning} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} / {} |",
            r.name,
            kps(rate(&r.set_p1)),
            kps(rate(&r.get_p1)),
            kps(rate(&r.set_p16)),
            kps(rate(&r.get_p16)),
            r.cpu_us_per_set_p16
                .map_or("—".into(), |v| format!("{v:.1}")),
            kps(many.map(LoopResult::rate)),
            us(many.and_then(|m| m.latency).map(|q| q.p50)),
            us(many.and_then(|m| m.latency).map(|q| q.p99)),
            r.cpu_us_per_write.map_or("—".into(), |v| format!("{v:.1}")),
            us(one.and_then(|m| m.latency).map(|q| q.p50)),
            us(one.and_then(|m| m.latency).map(|q| q.p99)),
        );
    }
    s
}

/// The Markdown table of the native clients (waverunner's rows that have them; empty if none).
pub fn render_native_table(rs: &[SystemResult]) -> String {
    let mut s = String::new();
    let rows: Vec<&SystemResult> = rs
        .iter()
        .filter(|r| r.native.is_some() || r.native_one.is_some())
        .collect();
    if rows.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "| system | {MANY} native writers, writes/s | their p50 / p99 µs | CPU µs per write \
         (machine) | 1 native writer p50 / p99 µs |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for r in rows {
        let (many, one) = (r.native.as_ref(), r.native_one.as_ref());
        let _ = writeln!(
            s,
            "| {} | {} | {} / {} | {} | {} / {} |",
            r.name,
            kps(many.map(LoopResult::rate)),
            us(many.and_then(|m| m.latency).map(|q| q.p50)),
            us(many.and_then(|m| m.latency).map(|q| q.p99)),
            r.native_cpu_us.map_or("—".into(), |v| format!("{v:.1}")),
            us(one.and_then(|m| m.latency).map(|q| q.p50)),
            us(one.and_then(|m| m.latency).map(|q| q.p99)),
        );
    }
    s
}

/// The CSV the plot is drawn from: system, then writes/s of SET 50 clients, SET pipeline 16,
/// the many-writer closed loop (empty where not measured).
pub fn render_csv(rs: &[SystemResult]) -> String {
    let mut s = String::from("system,set_50,set_p16,closed_loop_50,one_writer_p50_us\n");
    let f = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.0}"));
    for r in rs {
        let _ = writeln!(
            s,
            "{},{},{},{},{}",
            r.name.replace(',', ""),
            f(rate(&r.set_p1)),
            f(rate(&r.set_p16)),
            f(r.many.as_ref().map(LoopResult::rate)),
            f(r.one
                .as_ref()
                .and_then(|o| o.latency)
                .map(|q| q.p50 as f64 / 1_000.0)),
        );
    }
    s
}

/// The systems the verdicts compare, by the names the orchestration gives them.
pub const REDIS_ASYNC: &str = "Redis 7, async";
/// Redis with `WAIT 1` after each SET.
pub const REDIS_WAIT: &str = "Redis 7, SET + WAIT 1";
/// etcd, three members.
pub const ETCD: &str = "etcd, 3 members";
/// Waverunner with the given data plane.
pub fn waverunner(mode: &str) -> String {
    format!("waverunner {mode}")
}

/// One target of issue 13 and how it fared: `Some(true)` met, `Some(false)` not, `None` not
/// measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The target.
    pub target: String,
    /// Met?
    pub met: Option<bool>,
    /// The numbers.
    pub detail: String,
}

/// The verdicts against issue 13's targets, from the rows present.
pub fn verdicts(rs: &[SystemResult]) -> Vec<Verdict> {
    let get = |n: &str| rs.iter().find(|r| r.name == n);
    let xdp = get(&waverunner("xdp"));
    let off = get(&waverunner("off"));
    let redis = get(REDIS_ASYNC);
    let wait = get(REDIS_WAIT);
    let etcd = get(ETCD);
    let many = |r: Option<&SystemResult>| r.and_then(|r| r.many.as_ref()).map(LoopResult::rate);
    let one_p50 = |r: Option<&SystemResult>| {
        r.and_then(|r| r.one.as_ref())
            .and_then(|o| o.latency)
            .map(|q| q.p50 as f64)
    };
    let native_many =
        |r: Option<&SystemResult>| r.and_then(|r| r.native.as_ref()).map(LoopResult::rate);
    let native_one_p50 = |r: Option<&SystemResult>| {
        r.and_then(|r| r.native_one.as_ref())
            .and_then(|o| o.latency)
            .map(|q| q.p50 as f64)
    };
    let ratio = |target: &str, a: Option<f64>, b: Option<f64>, at_least: f64| {
        let (met, detail) = match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => (
                Some(a / b >= at_least),
                format!("{:.0} / {:.0} = {:.2}×", a, b, a / b),
            ),
            _ => (None, "not measured".into()),
        };
        Verdict {
            target: target.into(),
            met,
            detail,
        }
    };
    let xs = |r: Option<&SystemResult>, f: fn(&SystemResult) -> &Option<BenchLine>| {
        r.and_then(|r| rate(f(r)))
    };
    vec![
        ratio(
            "xdp SET at 50 clients ≥ Redis async",
            xs(xdp, |r| &r.set_p1),
            xs(redis, |r| &r.set_p1),
            1.0,
        ),
        ratio(
            "xdp SET with pipeline 16 ≥ 0.5× Redis async",
            xs(xdp, |r| &r.set_p16),
            xs(redis, |r| &r.set_p16),
            0.5,
        ),
        ratio(
            "50 writers, each reply committed on a majority: xdp ≥ 2× Redis SET + WAIT 1",
            many(xdp),
            many(wait),
            2.0,
        ),
        ratio(
            "1 writer p50: xdp ≤ Redis SET + WAIT 1 (their p50 over xdp's ≥ 1)",
            one_p50(wait),
            one_p50(xdp),
            1.0,
        ),
        ratio(
            "xdp ≥ 3× off in throughput (SET at 50 clients)",
            xs(xdp, |r| &r.set_p1),
            xs(off, |r| &r.set_p1),
            3.0,
        ),
        ratio(
            "xdp ≥ 3× off in throughput (50 native writers)",
            native_many(xdp),
            native_many(off),
            3.0,
        ),
        cpu_at_most(
            "xdp machine-wide CPU per committed write ≤ 10 µs (50 writers, one request per \
             round trip)",
            xdp.and_then(|r| r.cpu_us_per_write),
        ),
        cpu_at_most(
            "xdp machine-wide CPU per committed write ≤ 10 µs (SET with pipeline 16)",
            xdp.and_then(|r| r.cpu_us_per_set_p16),
        ),
        ratio(
            "etcd beaten ≥ 10× in throughput (50 writers)",
            many(xdp),
            many(etcd),
            10.0,
        ),
        ratio(
            "etcd beaten ≥ 10× in latency (1 writer p50, etcd's over xdp's)",
            one_p50(etcd),
            one_p50(xdp),
            10.0,
        ),
        ratio(
            "etcd beaten ≥ 10× in latency (1 native writer p50, etcd's over xdp's)",
            one_p50(etcd),
            native_one_p50(xdp),
            10.0,
        ),
    ]
}

/// The verdict on machine-wide CPU per committed write: at most 10 µs.
fn cpu_at_most(target: &str, cpu: Option<f64>) -> Verdict {
    Verdict {
        target: target.into(),
        met: cpu.map(|c| c <= 10.0),
        detail: cpu.map_or("not measured".into(), |c| format!("{c:.1} µs")),
    }
}

/// The verdicts as a Markdown list.
pub fn render_verdicts(v: &[Verdict]) -> String {
    let mut s = String::new();
    for v in v {
        let word = match v.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        let _ = writeln!(s, "- {}: **{word}** ({})", v.target, v.detail);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server that answers every `SET` with `set` and every `WAIT` with `wait`,
    /// on any number of connections, until the test ends.
    fn answering(set: &'static str, wait: &'static str) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                std::thread::spawn(move || {
                    let (mut buf, mut tmp) = (Vec::new(), [0u8; 4096]);
                    while let Ok(n) = s.read(&mut tmp) {
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&tmp[..n]);
                        let mut out = String::new();
                        // Each SET ends with its 8-byte value, each WAIT with its timeout.
                        loop {
                            let v = find(&buf, b"$8\r\nvvvvvvvv\r\n").map(|i| (i + 14, set));
                            let w = find(&buf, b"WAIT\r\n$1\r\n1\r\n$1\r\n0\r\n")
                                .map(|i| (i + 20, wait));
                            let Some((end, reply)) = [v, w].into_iter().flatten().min() else {
                                break;
                            };
                            out.push_str(reply);
                            buf.drain(..end);
                        }
                        if s.write_all(out.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn a_closed_loop_drives_every_client_to_the_bound_on_one_thread() {
        let addr = answering("+OK\r\n", ":1\r\n");
        let none = || Ok(());
        for op in [WriteOp::Set, WriteOp::SetWait] {
            let r = closed_loop(addr, op, 8, Duration::from_secs(20), 2_000, &none).unwrap();
            assert_eq!((r.ops, r.errors), (2_000, 0), "{op:?}: {:?}", r.first_error);
            assert_eq!(r.latency.map(|q| q.count), Some(2_000));
        }
        // Time bounds it too.
        let r = closed_loop(
            addr,
            WriteOp::Set,
            4,
            Duration::from_millis(200),
            u64::MAX,
            &none,
        )
        .unwrap();
        assert!(r.ops > 0 && r.errors == 0 && r.elapsed < Duration::from_secs(5));
    }

    #[test]
    fn a_closed_loop_stops_each_client_at_a_wrong_answer() {
        let none = || Ok(());
        let addr = answering("-ERR no\r\n", ":1\r\n");
        let r = closed_loop(addr, WriteOp::Set, 3, Duration::from_secs(20), 100, &none).unwrap();
        assert_eq!((r.ops, r.errors), (0, 3));
        assert!(r.first_error.unwrap().contains("SET answered"));
        // WAIT that found no replica: not a majority.
        let addr = answering("+OK\r\n", ":0\r\n");
        let r = closed_loop(
            addr,
            WriteOp::SetWait,
            2,
            Duration::from_secs(20),
            100,
            &none,
        )
        .unwrap();
        assert_eq!((r.ops, r.errors), (0, 2));
        assert!(r.first_error.unwrap().contains("WAIT 1 0 answered"));
    }

    #[test]
    fn redis_benchmark_lines() {
        let out = "SET: rps=12345.0 (overall: 11000.0) avg_msec=0.5 (overall: 0.5)\r\
                   SET: 52603.89 requests per second, p50=0.743 msec\n\
                   GET: 47058.82 requests per second, p50=0.791 msec\n\
                   PING_INLINE: 1000.00 requests per second\n";
        let l = parse_redis_benchmark(out);
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].test, "SET");
        assert!((l[0].rps - 52603.89).abs() < 1e-6);
        assert!((l[0].p50_us.unwrap() - 743.0).abs() < 1e-6);
        assert_eq!(l[2].p50_us, None);
    }

    #[test]
    fn http_responses() {
        let r =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}X";
        assert_eq!(
            parse_http_response(r).unwrap(),
            Some((200, b"{}".to_vec(), r.len() - 1))
        );
        assert_eq!(parse_http_response(&r[..r.len() - 3]).unwrap(), None);
        let c = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(
            parse_http_response(c).unwrap(),
            Some((200, b"abcde".to_vec(), c.len()))
        );
        assert_eq!(parse_http_response(&c[..c.len() - 2]).unwrap(), None);
        assert!(parse_http_response(b"garbage\r\n\r\n").is_err());
    }

    fn line(rps: f64) -> Option<BenchLine> {
        Some(BenchLine {
            test: "SET".into(),
            rps,
            p50_us: None,
        })
    }

    fn lp(rate: u64, p50_us: u64) -> Option<LoopResult> {
        Some(LoopResult {
            ops: rate,
            elapsed: Duration::from_secs(1),
            latency: Some(Quantiles {
                p50: p50_us * 1_000,
                p90: p50_us * 1_000,
                p99: p50_us * 2_000,
                count: rate,
            }),
            ..Default::default()
        })
    }

    #[test]
    fn verdicts_compare_the_right_rows() {
        let rs = vec![
            SystemResult {
                name: REDIS_ASYNC.into(),
                op: Some(WriteOp::Set),
                set_p1: line(80_000.0),
                set_p16: line(600_000.0),
                ..Default::default()
            },
            SystemResult {
                name: REDIS_WAIT.into(),
                op: Some(WriteOp::SetWait),
                many: lp(20_000, 150),
                one: lp(6_000, 150),
                ..Default::default()
            },
            SystemResult {
                name: ETCD.into(),
                op: Some(WriteOp::EtcdPut),
                many: lp(3_000, 2_000),
                one: lp(500, 1_500),
                ..Default::default()
            },
            SystemResult {
                name: waverunner("off"),
                op: Some(WriteOp::Set),
                set_p1: line(40_000.0),
                ..Default::default()
            },
            SystemResult {
                name: waverunner("xdp"),
                op: Some(WriteOp::Set),
                set_p1: line(60_000.0),
                set_p16: line(300_000.0),
                many: lp(50_000, 900),
                one: lp(7_000, 140),
                cpu_us_per_write: Some(35.0),
                cpu_us_per_set_p16: Some(6.0),
                native: lp(90_000, 400),
                native_one: lp(30_000, 30),
                ..Default::default()
            },
        ];
        let v = verdicts(&rs);
        let met: Vec<Option<bool>> = v.iter().map(|v| v.met).collect();
        assert_eq!(
            met,
            vec![
                Some(false), // 60k < 80k
                Some(true),  // 300k ≥ 300k
                Some(true),  // 50k ≥ 2 × 20k
                Some(true),  // 150 / 140 ≥ 1
                Some(false), // 60k < 3 × 40k
                None,        // off's native writers not measured
                Some(false), // 35 µs
                Some(true),  // 6 µs
                Some(true),  // 50k ≥ 10 × 3k
                Some(true),  // 1500 / 140 ≥ 10
                Some(true),  // 1500 / 30 ≥ 10
            ]
        );
        assert_eq!(v[1].detail, "300000 / 600000 = 0.50×");
        let t = render_table(&rs);
        assert!(t.contains(
            "| waverunner xdp | committed on a majority | 60.0 k | — | 300.0 k | — | 6.0 |"
        ));
        assert!(t.contains("| Redis 7, async | on the primary (async) |"));
        let n = render_native_table(&rs);
        assert_eq!(n.lines().count(), 3, "{n}");
        assert!(
            n.contains("| waverunner xdp | 90.0 k | 400 / 800 | — | 30 / 60 |"),
            "{n}"
        );
        assert!(render_native_table(&rs[..4]).is_empty());
        let csv = render_csv(&rs);
        assert!(
            csv.contains("\nwaverunner xdp,60000,300000,50000,140\n"),
            "{csv}"
        );
        assert!(csv.contains("\nRedis 7 async,80000,600000,,\n"), "{csv}");
        let md = render_verdicts(&v);
        assert!(md.contains(
            "- xdp SET at 50 clients ≥ Redis async: **NOT met** (60000 / 80000 = 0.75×)"
        ));
        // Nothing measured: every verdict says so.
        assert!(verdicts(&[]).iter().all(|v| v.met.is_none()));
    }
}
