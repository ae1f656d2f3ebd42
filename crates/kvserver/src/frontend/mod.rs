//! Client front-ends: the native UDP protocol ([`native`]) and the TCP text protocols, Redis
//! RESP2 and memcached, served one thread per connection (bounded by `max_connections`). Each
//! connection's commands are executed in order, one at a time, so a client always reads its
//! own writes; pipelined commands are answered in one write.

pub mod native;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use waverunner_kv::{memcache, resp, Op};

use waverunner_node::config::NodeConfig;
use waverunner_node::replica::{ClientError, Handle};
use waverunner_node::stop::Stop;

/// Which TCP protocol a listener speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Redis RESP2.
    Redis,
    /// memcached text.
    Memcache,
}

/// Limits of the TCP front-ends.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest value accepted.
    pub max_value: usize,
    /// Connections per listener.
    pub max_connections: usize,
}

impl Limits {
    /// The limits a configuration sets.
    pub fn from_config(cfg: &NodeConfig) -> Limits {
        Limits {
            max_value: cfg.max_value_bytes,
            max_connections: cfg.max_connections,
        }
    }
}

/// Accepts connections until `stop`.
pub fn serve_tcp(
    listener: TcpListener,
    handle: Handle,
    stop: Arc<Stop>,
    limits: Limits,
    proto: Protocol,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let _ = listener.set_nonblocking(true);
    while !stop.is_set() {
        let mut s = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => {
                stop.wait_readable(listener.as_raw_fd(), None);
                continue;
            }
        };
        let _ = s.set_nonblocking(false);
        if open.load(Ordering::Relaxed) >= limits.max_connections {
            handle.client_error();
            let msg: &[u8] = match proto {
                Protocol::Redis => b"-ERR max number of clients reached\r\n",
                Protocol::Memcache => b"SERVER_ERROR too many open connections\r\n",
            };
            let _ = s.write_all(msg);
            continue;
        }
        // The slot is given back when the guard drops: also if the connection thread panics
        // or cannot be spawned.
        let slot = Slot::take(&open);
        let (h, st) = (handle.clone(), stop.clone());
        let _ = std::thread::Builder::new()
            .name(format!("{proto:?}-conn").to_lowercase())
            .spawn(move || {
                let _slot = slot;
                waverunner_node::priority::client_thread();
                let _ = s.set_nodelay(true);
                let r = match proto {
                    Protocol::Redis => redis_conn(&mut s, &h, limits, &st),
                    Protocol::Memcache => memcache_conn(&mut s, &h, limits, &st),
                };
                if let Err(e) = r {
                    tracing::debug!("client connection closed: {e}");
                }
            });
    }
}

/// One of `max_connections` connection slots, held while a connection is served.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(open: &Arc<AtomicUsize>) -> Slot {
        open.fetch_add(1, Ordering::Relaxed);
        Slot(open.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reads more bytes into `buf`; false at end of stream or on shutdown.
fn fill(s: &mut TcpStream, buf: &mut Vec<u8>, stop: &Stop) -> std::io::Result<bool> {
    let mut tmp = [0u8; 16 << 10];
    // A timeout lets an idle connection notice a shutdown; half-open connections just idle.
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    loop {
        if stop.is_set() {
            return Ok(false);
        }
        match s.read(&mut tmp) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                buf.extend_from_slice(&tmp[..n]);
                return Ok(true);
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                continue
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

fn info_fields(handle: &Handle) -> Vec<(&'static str, String)> {
    let st = handle.status();
    vec![
        ("waverunner_version", env!("CARGO_PKG_VERSION").into()),
        ("process_id", std::process::id().to_string()),
        (
            "role",
            if st.role == "leader" {
                "master"
            } else {
                "slave"
            }
            .into(),
        ),
        ("raft_role", st.role.clone()),
        ("raft_term", st.term.to_string()),
        ("raft_leader", st.leader.to_string()),
        ("raft_commit_index", st.commit_index.to_string()),
        ("raft_applied_index", st.applied_index.to_string()),
        ("db0_keys", st.keys.to_string()),
        ("dataplane", st.dataplane.clone()),
        ("# Memory", String::new()),
        ("used_memory", st.used_memory.to_string()),
        ("used_memory_human", human_bytes(st.used_memory)),
        ("used_memory_rss", st.rss_bytes.to_string()),
        ("maxmemory", st.maxmemory.to_string()),
        ("maxmemory_human", human_bytes(st.maxmemory)),
        ("maxmemory_policy", "noeviction".into()),
    ]
}

/// Bytes as Redis's `*_human` fields write them (`1.50M`).
fn human_bytes(n: u64) -> String {
    let units = [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (u, size) in units {
        if n >= size {
            return format!("{:.2}{u}", n as f64 / size as f64);
        }
    }
    format!("{n}B")
}

fn redis_conn(
    s: &mut TcpStream,
    handle: &Handle,
    limits: Limits,
    stop: &Stop,
) -> std::io::Result<()> {
    let rl = resp::Limits {
        max_bulk: limits.max_value,
        ..resp::Limits::default()
    };
    static CONN_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let addr =
        |a: std::io::Result<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    let mut session = resp::Session::new(
        CONN_IDS.fetch_add(1, Ordering::Relaxed),
        addr(s.peer_addr()),
        addr(s.local_addr()),
    );
    let mut buf = Vec::new();
    let mut out = Vec::new();
    loop {
        let mut used = 0;
        loop {
            match resp::parse_command(&buf[used..], &rl) {
                Ok(Some((args, n))) => {
                    used += n;
                    if args.is_empty() {
                        continue;
                    }
                    match resp::command(&args) {
                        resp::Action::Reply(r) => {
                            if r.starts_with(b"-") {
                                handle.client_error();
                            }
                            out.extend_from_slice(&r);
                        }
                        resp::Action::Store(op, render) => {
                            match native::exec(handle, &with_limits(op, limits)) {
                                Ok(r) => out.extend_from_slice(&resp::render(&render, &r)),
                                Err(e) => out.extend_from_slice(&resp_error(&e)),
                            }
                        }
                        resp::Action::Info => {
                            out.extend_from_slice(&resp::render_info(&info_fields(handle)))
                        }
                        resp::Action::Client(cmd) => out.extend_from_slice(&session.client(&cmd)),
                        resp::Action::Quit => {
                            out.extend_from_slice(b"+OK\r\n");
                            s.write_all(&out)?;
                            return Ok(());
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    handle.client_error();
                    out.extend_from_slice(format!("-ERR {e}\r\n").as_bytes());
                    s.write_all(&out)?;
                    return Ok(());
                }
            }
        }
        buf.drain(..used);
        if !out.is_empty() {
            s.write_all(&out)?;
            out.clear();
        }
        if buf.len() > max_request(limits) {
            // One request larger than any sensible one: refuse it rather than buffer it.
            handle.client_error();
            s.write_all(b"-ERR Protocol error: request too large\r\n")?;
            return Ok(());
        }
        if !fill(s, &mut buf, stop)? {
            return Ok(());
        }
    }
}

/// A failed request as Redis answers it: `-OOM …` as Redis words it past `maxmemory`,
/// `-ERR …` otherwise.
fn resp_error(e: &ClientError) -> Vec<u8> {
    match e {
        ClientError::OutOfMemory => {
            b"-OOM command not allowed when used memory > 'maxmemory'.\r\n".to_vec()
        }
        e => format!("-ERR {e}\r\n").into_bytes(),
    }
}

/// A failed request as memcached answers it.
fn memcache_error(e: &ClientError) -> Vec<u8> {
    match e {
        ClientError::OutOfMemory => b"SERVER_ERROR out of memory storing object\r\n".to_vec(),
        e => format!("SERVER_ERROR {e}\r\n").into_bytes(),
    }
}

/// `op` with this front-end's limits filled in: the longest value an `Append` or `Prepend`
/// may build is `max_value`. The limit travels in the log entry, so every replica enforces the
/// same one whatever its own configuration.
fn with_limits(mut op: Op, limits: Limits) -> Op {
    if let Op::Append { max_len, .. } | Op::Prepend { max_len, .. } = &mut op {
        *max_len = limits.max_value as u64;
    }
    op
}

/// Bytes one RESP request may take: a few values of the largest size.
fn max_request(limits: Limits) -> usize {
    (4 * limits.max_value).max(8 << 20)
}

fn memcache_conn(
    s: &mut TcpStream,
    handle: &Handle,
    limits: Limits,
    stop: &Stop,
) -> std::io::Result<()> {
    let ml = memcache::Limits {
        max_value: limits.max_value,
        ..memcache::Limits::default()
    };
    let mut buf = Vec::new();
    let mut out = Vec::new();
    loop {
        let mut used = 0;
        loop {
            match memcache::parse_command(&buf[used..], &ml) {
                Ok(Some((cmd, n))) => {
                    used += n;
                    match memcache::command(cmd) {
                        memcache::McAction::Reply(r) => {
                            if r.starts_with(b"ERROR") || r.starts_with(b"CLIENT_ERROR") {
                                handle.client_error();
                            }
                            out.extend_from_slice(&r);
                        }
                        memcache::McAction::Store {
                            op,
                            render,
                            noreply,
                        } => {
                            let r = match native::exec(handle, &with_limits(op, limits)) {
                                Ok(r) => memcache::render(&render, &r),
                                Err(e) => memcache_error(&e),
                            };
                            if !noreply {
                                out.extend_from_slice(&r);
                            }
                        }
                        memcache::McAction::Stats => {
                            let st = handle.status();
                            let fields = vec![
                                ("pid", std::process::id().to_string()),
                                (
                                    "version",
                                    format!("waverunner-{}", env!("CARGO_PKG_VERSION")),
                                ),
                                ("curr_items", st.keys.to_string()),
                                ("raft_role", st.role.clone()),
                                ("raft_term", st.term.to_string()),
                                ("raft_commit_index", st.commit_index.to_string()),
                            ];
                            out.extend_from_slice(&memcache::render_stats(&fields));
                        }
                        memcache::McAction::Quit => {
                            s.write_all(&out)?;
                            return Ok(());
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    handle.client_error();
                    out.extend_from_slice(&e.reply());
                    if e.close {
                        s.write_all(&out)?;
                        return Ok(());
                    }
                    used += e.skip;
                    if used > buf.len() {
                        // The rest of an oversize value is still to come: swallow it as it arrives.
                        let mut left = used - buf.len();
                        buf.clear();
                        used = 0;
                        s.write_all(&out)?;
                        out.clear();
                        while left > 0 {
                            if !fill(s, &mut buf, stop)? {
                                return Ok(());
                            }
                            let k = left.min(buf.len());
                            buf.drain(..k);
                            left -= k;
                        }
                    }
                }
            }
        }
        buf.drain(..used);
        if !out.is_empty() {
            s.write_all(&out)?;
            out.clear();
        }
        if !fill(s, &mut buf, stop)? {
            return Ok(());
        }
    }
}
