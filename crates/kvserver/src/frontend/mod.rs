//! Client front-ends, one file per protocol: the native UDP protocol ([`native`]) and the TCP
//! text protocols, Redis RESP2 (`resp.rs`) and memcached (`memcache.rs`), whose connections
//! one event loop serves ([`tcp`]). A connection's pipelined commands are submitted together
//! and answered in order, so a client always reads its own writes.

mod memcache;
pub mod native;
mod resp;
mod stats;
pub mod tcp;

use waverunner_kv::Op;

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
