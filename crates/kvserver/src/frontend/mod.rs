//! Client front-ends, one file per protocol: the native UDP protocol ([`native`]) and the TCP
//! text protocols, Redis RESP2 (`resp.rs`) and memcached (`memcache.rs`), whose connections
//! one event loop serves ([`tcp`]). A connection's pipelined commands are submitted together
//! and answered in order, so a client always reads its own writes.

mod memcache;
pub mod native;
mod resp;
mod stats;
pub mod tcp;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use waverunner_kv::Op;
use waverunner_node::clients::Wake;

use waverunner_node::config::{DataPlaneKind, NodeConfig};

/// Which TCP protocol a listener speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Protocol {
    /// Redis RESP2.
    Redis = 0,
    /// memcached text.
    Memcache = 1,
}

/// Limits of the TCP front-ends.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest value accepted.
    pub max_value: usize,
    /// Connections per listener.
    pub max_connections: usize,
    /// Bytes of a batch of several pipelined commands, at most: what one data-plane packet
    /// carries when a data plane is configured (a larger entry is a hand-off to software),
    /// [`tcp::MAX_BATCH_BYTES`] otherwise.
    pub max_batch_bytes: usize,
}

impl Limits {
    /// The limits a configuration sets.
    pub fn from_config(cfg: &NodeConfig) -> Limits {
        Limits {
            max_value: cfg.max_value_bytes,
            max_connections: cfg.max_connections,
            max_batch_bytes: if cfg.dataplane == DataPlaneKind::Off {
                tcp::MAX_BATCH_BYTES
            } else {
                waverunner_node::DATAPLANE_MAX_COMMAND
            },
        }
    }
}

/// `op` with this front-end's limits filled in: the longest value an `Append` or `Prepend`
/// may build is `max_value`. The limit travels in the log entry, so every replica enforces the
/// same one whatever its own configuration.
pub(super) fn with_limits(mut op: Op, limits: Limits) -> Op {
    if let Op::Append { max_len, .. }
    | Op::Prepend { max_len, .. }
    | Op::SetRange { max_len, .. }
    | Op::SetBit { max_len, .. } = &mut op
    {
        *max_len = limits.max_value as u64;
    }
    op
}

/// Bytes one RESP request may take: a few values of the largest size.
pub(super) fn max_request(limits: Limits) -> usize {
    (4 * limits.max_value).max(8 << 20)
}

/// Where the replica loop leaves what the front-ends' event loop takes at its next turn (TCP
/// answers, native replies). Its bound is its users'.
pub(crate) struct Mailbox<T> {
    items: Mutex<Vec<T>>,
    /// Wakes the poll the front-end runs on (set when it registers).
    wake: OnceLock<Wake>,
    /// The front-end looks before it sleeps: later items do not write the eventfd. Only a
    /// front-end on a thread of its own sleeps apart from the replica loop, and only then is
    /// its eventfd written.
    woken: AtomicBool,
}

impl<T> Mailbox<T> {
    pub(crate) fn new() -> Mailbox<T> {
        Mailbox {
            items: Mutex::new(Vec::new()),
            wake: OnceLock::new(),
            woken: AtomicBool::new(false),
        }
    }

    /// The front-end's poll is woken by `wake` (the first one set stays).
    pub(crate) fn wake_with(&self, wake: Wake) {
        let _ = self.wake.set(wake);
    }

    pub(crate) fn push(&self, t: T) {
        self.items.lock().expect("mailbox").push(t);
        if !self.woken.swap(true, Ordering::AcqRel) {
            if let Some(w) = self.wake.get() {
                w();
            }
        }
    }

    /// Moves what is there into `out` (empty before; its buffer is reused).
    pub(crate) fn take_into(&self, out: &mut Vec<T>) {
        debug_assert!(out.is_empty());
        std::mem::swap(out, &mut *self.items.lock().expect("mailbox"));
    }

    /// The front-end is about to sleep: false if items wait (then it must not).
    pub(crate) fn idle(&self) -> bool {
        self.woken.store(false, Ordering::SeqCst);
        if self.items.lock().expect("mailbox").is_empty() {
            return true;
        }
        self.woken.store(true, Ordering::SeqCst);
        false
    }
}
