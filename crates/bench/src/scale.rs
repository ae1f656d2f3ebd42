//! The parts of `waverunner bench scale` that need no cluster: the `--keys` list, a small RESP
//! client (pipelined loading, a closed-loop writer), memory from procfs and Redis's `INFO`,
//! the counters compared across a phase, and the final table with its verdicts.
//!
//! The command itself (crates/cli/src/bench.rs) starts the cluster and `redis-server`, takes
//! the snapshot and restarts the follower; docs/bench.md describes the run.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::stats::Quantiles;

/// Sizes run when `--keys` is not given.
pub const DEFAULT_KEYS: &str = "1000000,5000000,10000000";
/// Bytes of every value loaded and written.
pub const VALUE_BYTES: usize = 100;
/// SET commands per write of the loader.
pub const PIPELINE: usize = 256;
/// Keys are `key:` and this many digits, so every key has the same length.
pub const KEY_DIGITS: usize = 12;
/// The largest key count a 12-digit key can number.
pub const MAX_KEYS: u64 = 999_999_999_999;
/// A reply slower than this fails the load (a stuck server must not hang the run).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The targets, in the order of [`SizeResult::verdicts`].
pub const TARGETS: [&str; 6] = [
    "idle CPU < 1% of a core (each replica)",
    "0 elections, 0 hand-offs (load, idle, snapshot)",
    "write p99 during snapshot ≤ 2× outside",
    "memory per key ≤ 1.5× Redis (RSS, largest replica)",
    "snapshot write ≥ 200 MB/s",
    "catch-up ≥ 200 MB/s",
];

/// Parses `--keys`: comma-separated counts, `k` = ×1000 and `M` = ×1 000 000 (`20k,1M`).
/// Order is kept (the user chooses it); zero, duplicates and counts a key cannot number are
/// refused.
pub fn parse_keys(s: &str) -> Result<Vec<u64>, String> {
    let mut out: Vec<u64> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (num, mult) = if let Some(n) = part.strip_suffix(['k', 'K']) {
            (n, 1_000)
        } else if let Some(n) = part.strip_suffix(['m', 'M']) {
            (n, 1_000_000)
        } else {
            (part, 1)
        };
        let v = num
            .trim()
            .replace('_', "")
            .parse::<u64>()
            .ok()
            .and_then(|v| v.checked_mul(mult))
            .filter(|&v| (1..=MAX_KEYS).contains(&v))
            .ok_or_else(|| {
                format!("`{part}` is not a key count (1 to {MAX_KEYS}, e.g. 20000, 20k or 1M)")
            })?;
        if out.contains(&v) {
            return Err(format!("{v} keys are listed twice"));
        }
        out.push(v);
    }
    if out.is_empty() {
        return Err("no key counts given".into());
    }
    Ok(out)
}

/// The key numbered `i`: `key:000000000123`.
pub fn key(i: u64) -> String {
    format!("key:{i:0KEY_DIGITS$}")
}

/// The value of every SET: printable, so a `redis-cli GET` shows something sensible.
pub fn value() -> Vec<u8> {
    (0..VALUE_BYTES).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Appends a RESP command of `args` (an array of bulk strings) to `out`.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    let _ = write!(out, "*{}\r\n", args.len());
    for a in args {
        let _ = write!(out, "${}\r\n", a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends `SET key(i) value` to `out`.
pub fn encode_set(out: &mut Vec<u8>, i: u64, value: &[u8]) {
    encode_command(out, &[b"SET", key(i).as_bytes(), value]);
}

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Status(String),
    /// `-ERR …`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$n` and its bytes; `None` is the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*n` and its elements; `None` is the null array.
    Array(Option<Vec<Reply>>),
}

fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..end], end + 2))
}

fn number(b: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad number `{}`", String::from_utf8_lossy(b)))
}

/// Parses one reply at the start of `buf`: `Ok(None)` when it is incomplete, else the reply
/// and the bytes it took.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some((head, mut used)) = line(&buf[1..]) else {
        return Ok(None);
    };
    used += 1;
    let text = || String::from_utf8_lossy(head).into_owned();
    let reply = match kind {
        b'+' => Reply::Status(text()),
        b'-' => Reply::Error(text()),
        b':' => Reply::Int(number(head)?),
        b'$' => {
            let n = number(head)?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let n = n as usize;
                if buf.len() < used + n + 2 {
                    return Ok(None);
                }
                if &buf[used + n..used + n + 2] != b"\r\n" {
                    return Err("bulk string not followed by CRLF".into());
                }
                let data = buf[used..used + n].to_vec();
                used += n + 2;
                Reply::Bulk(Some(data))
            }
        }
        b'*' => {
            let n = number(head)?;
            if n < 0 {
                Reply::Array(None)
            } else {
                let mut items = Vec::new();
                for _ in 0..n {
                    match parse_reply(&buf[used..])? {
                        Some((r, k)) => {
                            items.push(r);
                            used += k;
                        }
                        None => return Ok(None),
                    }
                }
                Reply::Array(Some(items))
            }
        }
        other => return Err(format!("not a RESP reply (starts with byte {other:#04x})")),
    };
    Ok(Some((reply, used)))
}

/// A RESP connection: commands written as given, replies read one at a time.
pub struct Resp {
    stream: TcpStream,
    addr: SocketAddr,
    buf: Vec<u8>,
    pos: usize,
}

impl Resp {
    /// Connects to `addr` (no Nagle: the closed-loop writer sends one small command at a time).
    pub fn connect(addr: SocketAddr) -> Result<Resp, String> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .map_err(|e| format!("{addr}: {e}"))?;
        Ok(Resp {
            stream,
            addr,
            buf: Vec::with_capacity(64 << 10),
            pos: 0,
        })
    }

    /// Writes `bytes` (one or many encoded commands).
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(bytes)
            .map_err(|e| format!("write to {}: {e}", self.addr))
    }

    /// Reads the next reply.
    pub fn reply(&mut self) -> Result<Reply, String> {
        loop {
            if let Some((r, n)) = parse_reply(&self.buf[self.pos..])
                .map_err(|e| format!("from {}: {e}", self.addr))?
            {
                self.pos += n;
                if self.pos == self.buf.len() {
                    self.buf.clear();
                    self.pos = 0;
                }
                return Ok(r);
            }
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            let mut tmp = [0u8; 64 << 10];
            match self.stream.read(&mut tmp) {
                Ok(0) => return Err(format!("{} closed the connection", self.addr)),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read from {}: {e}", self.addr)),
            }
        }
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut out = Vec::new();
        encode_command(&mut out, args);
        self.send(&out)?;
        self.reply()
    }
}

/// Checks that a SET was answered `+OK`.
fn expect_ok(r: Reply, i: u64) -> Result<(), String> {
    match r {
        Reply::Status(s) if s == "OK" => Ok(()),
        other => Err(format!("SET {} answered {other:?}", key(i))),
    }
}

/// Loads keys `0..n` with [`PIPELINE`] SETs per write over `connections` connections (each a
/// contiguous range of keys), every reply checked. Calls `progress(loaded, elapsed)` about
/// once a second; returns the time it took.
pub fn load(
    addr: SocketAddr,
    n: u64,
    connections: usize,
    progress: &mut dyn FnMut(u64, Duration),
) -> Result<Duration, String> {
    let connections = (connections.max(1) as u64).min(n.max(1));
    let loaded = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let value = value();
    let started = Instant::now();
    let result = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..connections)
            .map(|c| {
                let (lo, hi) = (n * c / connections, n * (c + 1) / connections);
                let (loaded, failed, value) = (&loaded, &failed, &value);
                scope.spawn(move || -> Result<(), String> {
                    let r = load_range(addr, lo, hi, value, loaded, failed);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        let mut next = Duration::from_secs(1);
        while !workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if started.elapsed() >= next {
                progress(loaded.load(Ordering::Relaxed), started.elapsed());
                next += Duration::from_secs(1);
            }
        }
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("a loader thread panicked".into()))
            })
            .collect::<Result<Vec<()>, String>>()
    });
    let took = started.elapsed();
    result?;
    progress(loaded.load(Ordering::Relaxed), took);
    Ok(took)
}

fn load_range(
    addr: SocketAddr,
    lo: u64,
    hi: u64,
    value: &[u8],
    loaded: &AtomicU64,
    failed: &AtomicBool,
) -> Result<(), String> {
    let mut c = Resp::connect(addr)?;
    let mut out = Vec::with_capacity(PIPELINE * (VALUE_BYTES + 64));
    let mut i = lo;
    while i < hi {
        if failed.load(Ordering::Relaxed) {
            return Ok(()); // another connection failed; its error is the one reported
        }
        let end = (i + PIPELINE as u64).min(hi);
        out.clear();
        for k in i..end {
            encode_set(&mut out, k, value);
        }
        c.send(&out)?;
        for k in i..end {
            expect_ok(c.reply()?, k)?;
        }
        loaded.fetch_add(end - i, Ordering::Relaxed);
        i = end;
    }
    Ok(())
}

/// One write of the closed-loop writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When it was sent, from the writer's start.
    pub at: Duration,
    /// How long until its reply, ns.
    pub ns: u64,
}

/// One connection, one SET at a time (overwriting keys `0..keys` in turn), until `stop` is
/// set or `limit` has passed. `t0` is the origin of [`Sample::at`].
pub fn closed_loop(
    addr: SocketAddr,
    keys: u64,
    t0: Instant,
    stop: &AtomicBool,
    limit: Duration,
) -> Result<Vec<Sample>, String> {
    let mut c = Resp::connect(addr)?;
    let value = value();
    let mut out = Vec::new();
    let mut samples = Vec::new();
    let started = Instant::now();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < limit {
        out.clear();
        encode_set(&mut out, i % keys.max(1), &value);
        let sent = Instant::now();
        c.send(&out)?;
        expect_ok(c.reply()?, i % keys.max(1))?;
        samples.push(Sample {
            at: sent.saturating_duration_since(t0),
            ns: sent.elapsed().as_nanos() as u64,
        });
        i += 1;
    }
    Ok(samples)
}

/// Latencies (ns) of the samples in flight at some moment of one of the `windows` `[from, to]`.
pub fn overlapping(samples: &[Sample], windows: &[(Duration, Duration)]) -> Vec<u64> {
    samples
        .iter()
        .filter(|s| {
            let end = s.at + Duration::from_nanos(s.ns);
            windows.iter().any(|&(from, to)| s.at <= to && end >= from)
        })
        .map(|s| s.ns)
        .collect()
}

/// Resident set size in bytes from the text of `/proc/<pid>/status` (`VmRSS:  1234 kB`).
pub fn parse_vm_rss(status: &str) -> Result<u64, String> {
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS line (a kernel thread, or a zombie)")?;
    let mut f = line["VmRSS:".len()..].split_whitespace();
    let kb = f
        .next()
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| format!("bad line `{line}`"))?;
    match f.next() {
        Some("kB") => Ok(kb * 1024),
        _ => Err(format!("bad unit in `{line}`")),
    }
}

/// Resident set size of process `pid`, bytes.
pub fn rss(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    parse_vm_rss(&text).map_err(|e| format!("{path}: {e}"))
}

/// `used_memory` (bytes) from the text of Redis's `INFO memory`.
pub fn parse_used_memory(info: &str) -> Result<u64, String> {
    info.lines()
        .filter_map(|l| l.trim_end().split_once(':'))
        .find(|(k, _)| *k == "used_memory")
        .ok_or("INFO has no used_memory field")?
        .1
        .parse()
        .map_err(|e| format!("INFO used_memory: {e}"))
}

/// `(RSS after − RSS before) / keys`, bytes per key.
pub fn per_key(before: u64, after: u64, keys: u64) -> f64 {
    (after as f64 - before as f64) / keys.max(1) as f64
}

/// CPU ticks over a window as a percentage of one core.
pub fn cpu_pct(ticks: u64, ticks_per_second: u64, window: Duration) -> f64 {
    let secs = window.as_secs_f64();
    if secs <= 0.0 {
        return 0.0;
    }
    ticks as f64 / ticks_per_second.max(1) as f64 / secs * 100.0
}

/// One replica's counters that a disruption moves, read from its `/status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Current term.
    pub term: u64,
    /// `counters.elections`: elections it started.
    pub elections: u64,
    /// Sum of `fastpath.disables`: data-plane hand-offs back to software.
    pub handoffs: u64,
    /// `counters.snapshots_taken`.
    pub snapshots: u64,
    /// `counters.recovery_reelections`: of `elections`, those a leader ran for itself so that a
    /// voter that restarted without its log may finish recovering (the catch-up causes one).
    pub recoveries: u64,
}

/// What changed in a phase, over the replicas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Disruption {
    /// Increase of the highest term.
    pub terms: u64,
    /// Elections started, all replicas.
    pub elections: u64,
    /// Data-plane hand-offs, all replicas.
    pub handoffs: u64,
    /// Snapshots taken, all replicas (the replicas also snapshot every `snapshot_entries`).
    pub snapshots: u64,
    /// Of `elections`, the leader's re-elections for a recovering voter.
    pub recoveries: u64,
}

impl Disruption {
    /// The change between two readings `(replica id, counts)`; a replica in only one of them
    /// (restarted, not answering) adds nothing but the term.
    pub fn between(before: &[(u64, Counts)], after: &[(u64, Counts)]) -> Disruption {
        let max_term = |v: &[(u64, Counts)]| v.iter().map(|(_, c)| c.term).max().unwrap_or(0);
        let mut d = Disruption {
            terms: max_term(after).saturating_sub(max_term(before)),
            ..Disruption::default()
        };
        for (id, a) in after {
            if let Some((_, b)) = before.iter().find(|(i, _)| i == id) {
                d.elections += a.elections.saturating_sub(b.elections);
                d.handoffs += a.handoffs.saturating_sub(b.handoffs);
                d.snapshots += a.snapshots.saturating_sub(b.snapshots);
                d.recoveries += a.recoveries.saturating_sub(b.recoveries);
            }
        }
        d
    }

    /// No term change, no election, no hand-off.
    pub fn clean(&self) -> bool {
        self.terms == 0 && self.elections == 0 && self.handoffs == 0
    }
}

/// The on-demand snapshot of the leader (`POST /snapshot`).
#[derive(Clone, Debug, PartialEq)]
pub enum Snapshot {
    /// The admin server has no `/snapshot` (404).
    NotAvailable,
    /// It answered, but not with a snapshot.
    Failed(String),
    /// Taken and on disk.
    Taken {
        /// Last index it covers.
        index: u64,
        /// Its size on disk.
        bytes: u64,
        /// How long it took, as the replica measured it.
        duration_ms: u64,
    },
}

impl Snapshot {
    /// Megabytes (10⁶ bytes) per second of the snapshot write.
    pub fn mb_per_s(&self) -> Option<f64> {
        match *self {
            Snapshot::Taken {
                bytes, duration_ms, ..
            } => Some(bytes as f64 / 1e6 / (duration_ms.max(1) as f64 / 1e3)),
            _ => None,
        }
    }
}

/// Of snapshots taken back to back, the one to report: the first that was not taken, if any,
/// else the median by write speed (the first of a row is not typical: it may follow an idle
/// window or a free of the one before). `None` for none.
pub fn median_snapshot(mut snaps: Vec<Snapshot>) -> Option<Snapshot> {
    if let Some(i) = snaps
        .iter()
        .position(|s| !matches!(s, Snapshot::Taken { .. }))
    {
        return Some(snaps.swap_remove(i));
    }
    snaps.sort_by(|a, b| a.mb_per_s().partial_cmp(&b.mb_per_s()).expect("finite"));
    let mid = snaps.len() / 2;
    snaps.into_iter().nth(mid)
}

/// A wiped follower catching up.
#[derive(Clone, Debug, PartialEq)]
pub struct CatchUp {
    /// The follower restarted.
    pub follower: u64,
    /// From its restart until its applied index reached the leader's commit index and its
    /// digest equalled the leader's.
    pub secs: f64,
    /// The snapshot it had to receive (the leader's last), if the leader reports its size.
    pub bytes: Option<u64>,
    /// Snapshots it installed meanwhile.
    pub installed: u64,
}

impl CatchUp {
    /// Megabytes per second: snapshot bytes over the catch-up time.
    pub fn mb_per_s(&self) -> Option<f64> {
        self.bytes.map(|b| b as f64 / 1e6 / self.secs.max(1e-3))
    }
}

/// Everything measured at one size; a step that failed or was skipped leaves its fields empty
/// and says why in `notes`.
#[derive(Clone, Debug, Default)]
pub struct SizeResult {
    /// Keys loaded.
    pub keys: u64,
    /// Load rate into the cluster's leader, keys/s.
    pub wr_load: Option<f64>,
    /// Load rate into redis-server, keys/s.
    pub redis_load: Option<f64>,
    /// RSS growth per key of each replica once it has applied the load, `(id, bytes per
    /// key)`: a transient, with the load's last snapshot still being written (its view of the
    /// state, and the log it will compact, are held).
    pub wr_rss_loaded_per_key: Vec<(u64, f64)>,
    /// The same once no replica is taking a snapshot: the state the cluster holds after the
    /// load (the target's measure, as Redis's is taken once its load is done).
    pub wr_rss_per_key: Vec<(u64, f64)>,
    /// The same after the idle period (the log compacted, freed memory returned).
    pub wr_rss_idle_per_key: Vec<(u64, f64)>,
    /// Growth of the leader's own `used_memory` (its state as it accounts it) per key.
    pub wr_used_per_key: Option<f64>,
    /// RSS growth per key of redis-server.
    pub redis_rss_per_key: Option<f64>,
    /// Growth of Redis's own `used_memory` per key.
    pub redis_used_per_key: Option<f64>,
    /// Each replica's CPU while idle, % of one core, `(id, pct)`.
    pub idle_cpu: Vec<(u64, f64)>,
    /// Changes during the load.
    pub during_load: Option<Disruption>,
    /// Changes while idle.
    pub during_idle: Option<Disruption>,
    /// Changes while the snapshot was taken (and the writer ran).
    pub during_snapshot: Option<Disruption>,
    /// Changes while a follower caught up (not a target: the leader re-elects itself in a new
    /// term once a recovering replica is back, by design).
    pub during_catch_up: Option<Disruption>,
    /// Write latency outside a snapshot, ns.
    pub outside: Option<Quantiles>,
    /// Write latency while the snapshot was taken, ns.
    pub during: Option<Quantiles>,
    /// The snapshot, once tried.
    pub snapshot: Option<Snapshot>,
    /// The catch-up, once tried.
    pub catch_up: Option<Result<CatchUp, String>>,
    /// Anything unusual, and why a step is missing.
    pub notes: Vec<String>,
}

impl SizeResult {
    /// The largest replica's RSS per key.
    pub fn wr_rss_max(&self) -> Option<f64> {
        self.wr_rss_per_key.iter().map(|&(_, b)| b).reduce(f64::max)
    }

    /// Largest replica's RSS per key over Redis's.
    pub fn mem_ratio(&self) -> Option<f64> {
        match (self.wr_rss_max(), self.redis_rss_per_key) {
            (Some(w), Some(r)) if r > 0.0 => Some(w / r),
            _ => None,
        }
    }

    /// The busiest replica's idle CPU.
    pub fn idle_cpu_max(&self) -> Option<f64> {
        self.idle_cpu.iter().map(|&(_, p)| p).reduce(f64::max)
    }

    /// p99 during the snapshot over p99 outside.
    pub fn p99_ratio(&self) -> Option<f64> {
        match (self.during, self.outside) {
            (Some(d), Some(o)) => Some(d.p99 as f64 / o.p99.max(1) as f64),
            _ => None,
        }
    }

    fn snapshot_mb_per_s(&self) -> Option<f64> {
        self.snapshot.as_ref().and_then(Snapshot::mb_per_s)
    }

    fn catch_up_mb_per_s(&self) -> Option<f64> {
        match &self.catch_up {
            Some(Ok(c)) => c.mb_per_s(),
            _ => None,
        }
    }

    /// Whether each of [`TARGETS`] was met; `None` when it could not be measured.
    pub fn verdicts(&self) -> [Option<bool>; 6] {
        let phases: Vec<Disruption> = [self.during_load, self.during_idle, self.during_snapshot]
            .into_iter()
            .flatten()
            .collect();
        [
            self.idle_cpu_max().map(|p| p < 1.0),
            (!phases.is_empty()).then(|| phases.iter().all(Disruption::clean)),
            self.p99_ratio().map(|r| r <= 2.0),
            self.mem_ratio().map(|r| r <= 1.5),
            self.snapshot_mb_per_s().map(|v| v >= 200.0),
            self.catch_up_mb_per_s().map(|v| v >= 200.0),
        ]
    }
}

fn f(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.digits$}"))
}

fn lat(q: Option<Quantiles>) -> String {
    q.map_or("n/a".into(), |q| {
        format!("{:.0} / {:.0}", q.p50 as f64 / 1e3, q.p99 as f64 / 1e3)
    })
}

fn phase(d: Option<Disruption>) -> String {
    d.map_or("n/a".into(), |d| {
        format!("{}/{}/{}", d.terms, d.elections, d.handoffs)
    })
}

fn verdict(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a",
    }
}

/// "not available in this build" for a missing `/snapshot`, else `alt`.
fn snapshot_or(r: &SizeResult, alt: String) -> String {
    match &r.snapshot {
        Some(Snapshot::NotAvailable) => "not available in this build".into(),
        _ => alt,
    }
}

/// The final Markdown table: one row per size, the measurements, then a verdict per target.
pub fn render(results: &[SizeResult]) -> String {
    let mut s = String::from("targets: ");
    s.push_str(
        &TARGETS
            .iter()
            .enumerate()
            .map(|(i, t)| format!("({}) {t}", i + 1))
            .collect::<Vec<_>>()
            .join("; "),
    );
    s.push_str(
        ".\nElections columns: Δterm/elections/hand-offs over all replicas. Memory: growth \
         per key of the process's RSS, and of the state as each server accounts it \
         (`used_memory`). MB = 10⁶ bytes.\n\n",
    );
    s.push_str(
        "| keys | load wr keys/s | load redis keys/s | RSS B/key wr (max) | RSS B/key redis \
         | used_memory B/key wr | used_memory B/key redis | mem wr/redis | idle CPU % (max) | elections load | \
         elections idle | elections snapshot | write p50/p99 µs outside | write p50/p99 µs \
         during snapshot | p99 during/outside | snapshot s / MB / MB/s | catch-up s | catch-up \
         MB/s | (1) | (2) | (3) | (4) | (5) | (6) | notes |\n",
    );
    s.push_str(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---|---:|---|---:|---:|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let snap = match &r.snapshot {
            Some(Snapshot::Taken {
                bytes, duration_ms, ..
            }) => format!(
                "{:.2} / {:.1} / {}",
                *duration_ms as f64 / 1e3,
                *bytes as f64 / 1e6,
                f(r.snapshot_mb_per_s(), 0)
            ),
            Some(Snapshot::NotAvailable) => "not available in this build".into(),
            Some(Snapshot::Failed(_)) => "failed".into(),
            None => "n/a".into(),
        };
        let (cu_s, cu_mb) = match &r.catch_up {
            Some(Ok(c)) => (format!("{:.2}", c.secs), f(c.mb_per_s(), 0)),
            Some(Err(_)) => ("failed".into(), "n/a".into()),
            None => ("n/a".into(), "n/a".into()),
        };
        let mut row = format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.keys,
            f(r.wr_load, 0),
            f(r.redis_load, 0),
            f(r.wr_rss_max(), 1),
            f(r.redis_rss_per_key, 1),
            f(r.wr_used_per_key, 1),
            f(r.redis_used_per_key, 1),
            f(r.mem_ratio(), 2),
            f(r.idle_cpu_max(), 2),
            phase(r.during_load),
            phase(r.during_idle),
            snapshot_or(r, phase(r.during_snapshot)),
            lat(r.outside),
            snapshot_or(r, lat(r.during)),
            snapshot_or(r, f(r.p99_ratio(), 2)),
            snap,
            cu_s,
            cu_mb,
        );
        for v in r.verdicts() {
            let _ = write!(row, " {} |", verdict(v));
        }
        let _ = writeln!(row, " {} |", r.notes.join("; ").replace('|', "\\|"));
        s.push_str(&row);
    }
    s
}

/// The details of one size that the table leaves out: per replica, and why a step is missing.
pub fn render_detail(r: &SizeResult) -> String {
    let mut s = format!("### {} keys\n\n", r.keys);
    let per = |v: &[(u64, f64)], digits: usize| {
        v.iter()
            .map(|(id, x)| format!("n{id} {x:.digits$}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        s,
        "- load: waverunner {} keys/s, redis {} keys/s",
        f(r.wr_load, 0),
        f(r.redis_load, 0)
    );
    let _ = writeln!(
        s,
        "- RSS growth per key once no replica was taking a snapshot: {}; redis {}; ratio {}. used_memory growth per key: leader {}, \
         redis {}",
        if r.wr_rss_per_key.is_empty() {
            "n/a".into()
        } else {
            per(&r.wr_rss_per_key, 1)
        },
        f(r.redis_rss_per_key, 1),
        f(r.mem_ratio(), 2),
        f(r.wr_used_per_key, 1),
        f(r.redis_used_per_key, 1)
    );
    // Another reading of every replica's RSS per key, with the largest one's ratio to Redis.
    let mut rss_line = |when: &str, per_key: &[(u64, f64)]| {
        if per_key.is_empty() {
            return;
        }
        let max = per_key.iter().map(|&(_, b)| b).reduce(f64::max);
        let ratio = match (max, r.redis_rss_per_key) {
            (Some(w), Some(r)) if r > 0.0 => Some(w / r),
            _ => None,
        };
        let _ = writeln!(
            s,
            "- RSS growth per key {when}: {}; ratio to redis {}",
            per(per_key, 1),
            f(ratio, 2)
        );
    };
    rss_line(
        "as soon as every replica had applied the load (its last snapshot still being written)",
        &r.wr_rss_loaded_per_key,
    );
    rss_line("after the idle period", &r.wr_rss_idle_per_key);
    let _ = writeln!(
        s,
        "- idle CPU (% of one core): {}",
        if r.idle_cpu.is_empty() {
            "n/a".into()
        } else {
            per(&r.idle_cpu, 2)
        }
    );
    for (name, d) in [
        ("load", r.during_load),
        ("idle", r.during_idle),
        ("snapshot", r.during_snapshot),
        ("catch-up", r.during_catch_up),
    ] {
        if let Some(d) = d {
            let _ = writeln!(
                s,
                "- {name}: term +{}, elections {}{}, hand-offs {}, snapshots taken {}",
                d.terms,
                d.elections,
                if d.recoveries > 0 {
                    format!(
                        " ({} of them the leader re-electing itself for a voter that restarted \
                         without its log)",
                        d.recoveries
                    )
                } else {
                    String::new()
                },
                d.handoffs,
                d.snapshots
            );
        }
    }
    let _ = writeln!(
        s,
        "- write p50/p99 µs: outside {} ({} writes), during snapshot {} ({} writes)",
        lat(r.outside),
        r.outside.map_or(0, |q| q.count),
        snapshot_or(r, lat(r.during)),
        r.during.map_or(0, |q| q.count)
    );
    match &r.snapshot {
        Some(Snapshot::Taken {
            index,
            bytes,
            duration_ms,
        }) => {
            let _ = writeln!(
                s,
                "- snapshot: index {index}, {bytes} bytes in {duration_ms} ms ({} MB/s)",
                f(r.snapshot_mb_per_s(), 0)
            );
        }
        Some(Snapshot::NotAvailable) => s.push_str("- snapshot: not available in this build\n"),
        Some(Snapshot::Failed(e)) => {
            let _ = writeln!(s, "- snapshot: failed: {e}");
        }
        None => {}
    }
    match &r.catch_up {
        Some(Ok(c)) => {
            let _ = writeln!(
                s,
                "- catch-up of n{}: {:.2} s, {} MB/s ({} snapshot bytes, {} installed)",
                c.follower,
                c.secs,
                f(c.mb_per_s(), 0),
                c.bytes.map_or("unknown".into(), |b| b.to_string()),
                c.installed
            );
        }
        Some(Err(e)) => {
            let _ = writeln!(s, "- catch-up: failed: {e}");
        }
        None => {}
    }
    for n in &r.notes {
        let _ = writeln!(s, "- note: {n}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse() {
        assert_eq!(
            parse_keys(DEFAULT_KEYS).unwrap(),
            vec![1_000_000, 5_000_000, 10_000_000]
        );
        assert_eq!(
            parse_keys(" 20k, 1M ,1_500").unwrap(),
            vec![20_000, 1_000_000, 1_500]
        );
        // The user's order is kept.
        assert_eq!(parse_keys("5000,1000").unwrap(), vec![5_000, 1_000]);
        for bad in ["", ",", "0", "x", "1k,1000", "-5", "1000000M", "1e6"] {
            assert!(parse_keys(bad).is_err(), "{bad}");
        }
        assert_eq!(key(123), "key:000000000123");
        assert_eq!(key(MAX_KEYS).len(), key(0).len());
    }

    #[test]
    fn resp_encoding_and_replies() {
        let mut out = Vec::new();
        encode_set(&mut out, 7, b"vv");
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000007\r\n$2\r\nvv\r\n"
        );
        assert_eq!(value().len(), VALUE_BYTES);

        let buf = b"+OK\r\n-ERR no\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n$0\r\n\r\n";
        let mut at = 0;
        let mut got = Vec::new();
        while let Some((r, n)) = parse_reply(&buf[at..]).unwrap() {
            got.push(r);
            at += n;
        }
        assert_eq!(at, buf.len());
        assert_eq!(
            got,
            vec![
                Reply::Status("OK".into()),
                Reply::Error("ERR no".into()),
                Reply::Int(42),
                Reply::Bulk(Some(b"abc".to_vec())),
                Reply::Bulk(None),
                Reply::Array(Some(vec![Reply::Int(1), Reply::Bulk(Some(Vec::new()))])),
            ]
        );
        // Incomplete: wait for more.
        for part in [&b"+O"[..], b"$3\r\nab", b"*2\r\n:1\r\n", b""] {
            assert_eq!(parse_reply(part).unwrap(), None, "{part:?}");
        }
        assert!(parse_reply(b"?x\r\n").is_err());
        assert!(parse_reply(b"$2\r\nabcd\r\n").is_err());
        assert!(parse_reply(b":x\r\n").is_err());
        assert!(expect_ok(Reply::Status("OK".into()), 1).is_ok());
        assert!(expect_ok(Reply::Error("ERR timeout".into()), 1)
            .unwrap_err()
            .contains("key:000000000001"));
    }

    #[test]
    fn memory_parsing() {
        let status =
            "Name:\twaverunner\nVmPeak:\t  900000 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 1 kB\n";
        assert_eq!(parse_vm_rss(status).unwrap(), 12345 * 1024);
        assert!(parse_vm_rss("Name:\tkthreadd\n").is_err());
        assert!(parse_vm_rss("VmRSS:\t x kB\n").is_err());
        assert!(parse_vm_rss("VmRSS:\t 12 MB\n").is_err());
        assert!(rss(std::process::id()).unwrap() > 0);

        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n\
                    used_memory_rss:4000000\r\n";
        assert_eq!(parse_used_memory(info).unwrap(), 1_048_576);
        assert!(parse_used_memory("used_memory_rss:5\r\n").is_err());
        assert!(parse_used_memory("used_memory:lots\r\n").is_err());

        assert_eq!(per_key(1_000, 3_000, 10), 200.0);
        assert_eq!(per_key(3_000, 1_000, 10), -200.0);
        assert_eq!(cpu_pct(50, 100, Duration::from_secs(10)), 5.0);
        assert_eq!(cpu_pct(50, 100, Duration::ZERO), 0.0);
    }

    #[test]
    fn samples_in_a_window() {
        let ms = Duration::from_millis;
        let s = |at: u64, took: u64| Sample {
            at: ms(at),
            ns: took * 1_000_000,
        };
        let samples = [s(0, 5), s(8, 4), s(20, 1), s(29, 2), s(40, 1)];
        // Overlapping [10, 30]: the one sent at 8 still in flight at 10, and the ones sent
        // before 30.
        assert_eq!(
            overlapping(&samples, &[(ms(10), ms(30))]),
            vec![4_000_000, 1_000_000, 2_000_000]
        );
        assert!(overlapping(&samples, &[(ms(100), ms(200))]).is_empty());
        // Two windows: each sample once.
        assert_eq!(
            overlapping(
                &samples,
                &[(ms(0), ms(1)), (ms(39), ms(41)), (ms(40), ms(40))]
            ),
            vec![5_000_000, 1_000_000]
        );
    }

    #[test]
    fn the_median_snapshot() {
        let t = |bytes, duration_ms| Snapshot::Taken {
            index: bytes,
            bytes,
            duration_ms,
        };
        assert_eq!(median_snapshot(vec![]), None);
        assert_eq!(
            median_snapshot(vec![t(100, 10), t(300, 10), t(200, 10)]),
            Some(t(200, 10))
        );
        let failed = Snapshot::Failed("no".into());
        assert_eq!(
            median_snapshot(vec![t(1, 1), failed.clone(), t(2, 1)]),
            Some(failed)
        );
    }

    #[test]
    fn disruption_between_readings() {
        let c = |term, elections, handoffs, snapshots| Counts {
            term,
            elections,
            handoffs,
            snapshots,
            recoveries: elections / 2,
        };
        let before = [(1, c(2, 1, 0, 3)), (2, c(2, 0, 0, 3)), (3, c(2, 0, 0, 3))];
        let same = Disruption::between(&before, &before);
        assert!(same.clean());
        assert_eq!(same, Disruption::default());
        let after = [(1, c(3, 1, 0, 5)), (2, c(3, 2, 1, 4)), (4, c(9, 9, 9, 9))];
        let d = Disruption::between(&before, &after);
        // Replica 4 was not in the first reading: only its term counts.
        assert_eq!(d.terms, 7);
        assert_eq!((d.elections, d.handoffs, d.snapshots), (2, 1, 3));
        assert_eq!(d.recoveries, 1, "replica 2: 0 → 1");
        assert!(!d.clean());
    }

    fn q(p50: u64, p99: u64) -> Option<Quantiles> {
        Some(Quantiles {
            p50,
            p90: p99,
            p99,
            count: 1_000,
        })
    }

    fn full() -> SizeResult {
        SizeResult {
            keys: 1_000_000,
            wr_load: Some(50_000.0),
            redis_load: Some(400_000.0),
            wr_rss_per_key: vec![(1, 240.0), (2, 250.0), (3, 245.0)],
            wr_rss_loaded_per_key: vec![(1, 300.0)],
            wr_rss_idle_per_key: vec![(1, 230.0)],
            wr_used_per_key: Some(150.0),
            redis_rss_per_key: Some(200.0),
            redis_used_per_key: Some(180.0),
            idle_cpu: vec![(1, 0.5), (2, 0.2), (3, 0.3)],
            during_load: Some(Disruption::default()),
            during_idle: Some(Disruption::default()),
            during_snapshot: Some(Disruption {
                snapshots: 1,
                ..Disruption::default()
            }),
            during_catch_up: Some(Disruption {
                terms: 1,
                elections: 1,
                ..Disruption::default()
            }),
            outside: q(200_000, 900_000),
            during: q(250_000, 2_700_000),
            snapshot: Some(Snapshot::Taken {
                index: 1_000_100,
                bytes: 150_000_000,
                duration_ms: 500,
            }),
            catch_up: Some(Ok(CatchUp {
                follower: 2,
                secs: 1.5,
                bytes: Some(150_000_000),
                installed: 1,
            })),
            notes: vec!["a | b".into()],
        }
    }

    #[test]
    fn verdicts_and_table() {
        let r = full();
        assert_eq!(r.wr_rss_max(), Some(250.0));
        assert_eq!(r.mem_ratio(), Some(1.25));
        assert_eq!(r.p99_ratio(), Some(3.0));
        assert_eq!(
            r.verdicts(),
            [
                Some(true),  // 0.5% idle
                Some(true),  // a snapshot is no disruption, the catch-up not a target
                Some(false), // p99 3×
                Some(true),  // 1.25× Redis
                Some(true),  // 300 MB/s
                Some(false), // 100 MB/s
            ]
        );
        let t = render(std::slice::from_ref(&r));
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(rows.len(), 3, "{t}");
        // Every row has as many cells as the header.
        let cells = |l: &str| l.matches('|').count() - l.matches("\\|").count();
        assert!(rows.iter().all(|l| cells(l) == cells(rows[0])), "{t}");
        assert!(rows[2].starts_with(
            "| 1000000 | 50000 | 400000 | 250.0 | 200.0 | 150.0 | 180.0 | 1.25 | 0.50 | 0/0/0 |"
        ));
        assert!(
            rows[2].contains("| 200 / 900 | 250 / 2700 | 3.00 | 0.50 / 150.0 / 300 | 1.50 | 100 |")
        );
        assert!(rows[2].contains("| met | met | NOT met | met | met | NOT met | a \\| b |"));
        let d = render_detail(&r);
        assert!(d.contains("n2 250.0"));
        assert!(d.contains("its last snapshot still being written): n1 300.0; ratio to redis 1.50"));
        assert!(d.contains("- catch-up: term +1, elections 1, hand-offs 0"));

        // Nothing measured beyond the load, no Redis, no /snapshot: n/a, not a panic.
        let r = SizeResult {
            keys: 20_000,
            wr_load: Some(3_000.0),
            snapshot: Some(Snapshot::NotAvailable),
            catch_up: Some(Err("timed out".into())),
            notes: vec!["Redis skipped: redis-server is not installed".into()],
            ..SizeResult::default()
        };
        assert_eq!(r.verdicts(), [None; 6]);
        let t = render(&[r.clone(), full()]);
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(rows.len(), 4);
        assert!(rows.iter().all(|l| cells(l) == cells(rows[0])), "{t}");
        assert!(rows[2].contains("not available in this build"));
        assert!(rows[2].contains("| failed | n/a |"));
        let d = render_detail(&r);
        assert!(d.contains("snapshot: not available in this build"));
        assert!(d.contains("catch-up: failed: timed out"));
    }
}
