//! Client front-ends, one file per protocol: the native UDP protocol ([`native`]) and the TCP
//! text protocols, Redis RESP2 (`resp.rs`) and memcached (`memcache.rs`), served one thread per
//! connection (bounded by `max_connections`; this file). Each connection's commands are
//! executed in order, one at a time, so a client always reads its own writes; pipelined
//! commands are answered in one write.

mod memcache;
pub mod native;
mod resp;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use waverunner_kv::Op;

use waverunner_node::config::NodeConfig;
use waverunner_node::replica::Handle;
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
                    Protocol::Redis => resp::redis_conn(&mut s, &h, limits, &st),
                    Protocol::Memcache => memcache::memcache_conn(&mut s, &h, limits, &st),
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
pub(super) fn fill(s: &mut TcpStream, buf: &mut Vec<u8>, stop: &Stop) -> std::io::Result<bool> {
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

/// `op` with this front-end's limits filled in: the longest value an `Append` or `Prepend`
/// may build is `max_value`. The limit travels in the log entry, so every replica enforces the
/// same one whatever its own configuration.
pub(super) fn with_limits(mut op: Op, limits: Limits) -> Op {
    if let Op::Append { max_len, .. } | Op::Prepend { max_len, .. } = &mut op {
        *max_len = limits.max_value as u64;
    }
    op
}

/// Bytes one RESP request may take: a few values of the largest size.
pub(super) fn max_request(limits: Limits) -> usize {
    (4 * limits.max_value).max(8 << 20)
}
