//! The replica's side of its data plane (DESIGN §3, `docs/dataplane.md`, `docs/handoff.md`):
//! opening it, translating between the Raft core's registers and the handler's, what the host
//! does with packets the data plane passes up, and the bookkeeping behind status.

use std::collections::BTreeMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::Instant;

use waverunner_dataplane::{self as dp, DataPlane, RingRecord};
use waverunner_fastpath as fp;
use waverunner_raft::DisableReason;

use crate::config::{DataPlaneKind, NodeConfig};
use crate::replica::Event;

/// Group id of the fast path on the wire (the native client protocol's).
pub const GROUP: u32 = waverunner_client::proto::GROUP as u32;

/// Client-table entries the leader's host keeps at most (older ones are forgotten: their
/// clients time out and retry, exactly once by their session).
pub const MAX_DP_CLIENTS: usize = 65_536;

/// A replica whose data plane is off sends at most one REJECT per this interval.
pub const REJECT_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

/// Appends a follower holds for reordering at most (the XDP window is 1024 entries).
pub const MAX_HELD: usize = 2048;

/// The leader answers retransmission requests for the same follower position at most once
/// per this interval.
pub const RETX_SPACING: std::time::Duration = std::time::Duration::from_millis(5);

/// A held append whose gap has not filled after this long asks the leader to retransmit.
pub const HOLD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(20);

/// Entries retransmitted per retransmission request at most.
pub const RETX_BATCH: u64 = 256;

/// A request the data plane ordered at this leader on behalf of a native client.
#[derive(Clone, Copy, Debug)]
pub struct DpClient {
    /// Where the reply goes.
    pub source: SocketAddrV4,
    /// Session and sequence number from the header.
    pub client: u64,
    /// Sequence number.
    pub seq: u64,
    /// The data plane already replied.
    pub replied: bool,
}

/// The data plane of a replica and what its host keeps about it.
pub struct DpHost {
    /// The data plane.
    pub plane: Box<dyn DataPlane>,
    /// Leader: requests from native clients by index, until applied.
    pub clients: BTreeMap<u64, DpClient>,
    /// fsync: the highest index this replica acknowledged after persisting.
    pub acked_persisted: u64,
    /// Scratch buffer for ring records.
    pub records: Vec<RingRecord>,
    /// Fast-path addresses of the other members.
    pub peers: BTreeMap<u64, SocketAddrV4>,
    /// Status bookkeeping.
    pub enables: u64,
    /// Disables by reason.
    pub disables: BTreeMap<String, u64>,
    /// The last disable's reason.
    pub last_reason: String,
    /// Entries retransmitted.
    pub retransmitted: u64,
    /// Replies the host sent for data-plane entries.
    pub host_replies: u64,
    /// Heartbeats pushed.
    pub heartbeats: u64,
    /// The term of the last enable.
    pub enabled_term: u64,
    /// Follower: appends ahead of the log, by previous index, with when they arrived.
    pub held: BTreeMap<u64, (Instant, Vec<u8>)>,
    /// Appends pushed back through the data plane after reordering.
    pub reordered: u64,
    /// Leader: the last retransmission per follower address (its position, when).
    pub retx_sent: BTreeMap<SocketAddr, (u64, Instant)>,
    /// When this replica last sent a fast-path REJECT.
    pub last_reject: Option<Instant>,
    /// Fast-path REJECTs sent (appends this replica's software could not take).
    pub rejects_sent: u64,
    /// Ring entries that arrived before an entry of a lower index, by index.
    pub reorder: BTreeMap<u64, dp::RingEntry>,
    /// Commit records waiting for their entry: index → the data plane replied.
    pub commits: BTreeMap<u64, bool>,
    /// Leader: entries other replicas forwarded, not yet committed (bounded by the ring).
    pub remote_pending: std::collections::BTreeSet<u64>,
    /// A wake-up for the replica loop is queued (coalesces ring wake-ups).
    pub wake_pending: Arc<AtomicBool>,
}

/// A `DisableReason` as status shows it.
pub fn reason_name(r: DisableReason) -> String {
    let s = format!("{r:?}");
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The handler's halt code as the core's reason.
pub fn halt_reason(code: u32) -> DisableReason {
    match code {
        fp::HALT_TERM_MISMATCH => DisableReason::TermMismatch,
        fp::HALT_LOG_MISMATCH => DisableReason::LogMismatch,
        fp::HALT_REJECT_RECEIVED => DisableReason::RejectReceived,
        fp::HALT_RETX_EXHAUSTED => DisableReason::RetransmitExhausted,
        _ => DisableReason::Host,
    }
}

/// A fast-path packet from this replica: header fields filled, then encoded with `payload`.
pub fn packet(h: fp::Header, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fp::HDR_LEN + payload.len());
    fp::Header {
        len: payload.len() as u16,
        ..h
    }
    .encode(payload, &mut out);
    out
}

/// A header of `kind` from `self_id` in group [`GROUP`].
pub fn header(kind: u8, self_id: u64) -> fp::Header {
    fp::Header {
        kind,
        from: self_id,
        ..fp::Header::new(u64::from(GROUP))
    }
}

/// Opens the configured data plane. Packets it passes up go to the replica loop as
/// [`Event::Fast`]; client requests among them to `client_requests` (the native front-end),
/// if given.
pub fn open(
    cfg: &NodeConfig,
    tx: SyncSender<Event>,
    blind_reply_body: Vec<u8>,
    client_requests: Option<dp::PacketFn>,
) -> Result<DpHost, String> {
    let SocketAddr::V4(bind) = cfg.listen.client else {
        return Err(format!(
            "dataplane = {:?} needs an IPv4 client address, not {}",
            cfg.dataplane, cfg.listen.client
        ));
    };
    let dcfg = dp::Config {
        self_id: cfg.id,
        group_id: GROUP,
        bind,
        interface: cfg.dataplane_interface.clone(),
        multicast: cfg.dataplane_multicast,
        blind_reply_body,
    };
    let wake_pending = Arc::new(AtomicBool::new(false));
    let (wtx, wflag) = (tx.clone(), wake_pending.clone());
    let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        if !wflag.swap(true, Ordering::AcqRel) {
            let _ = wtx.try_send(Event::Ring);
        }
    });
    let host_packet: dp::PacketFn = Arc::new(move |src: SocketAddr, pkt: &[u8]| {
        let is_request = pkt.len() > 5 && pkt[5] == fp::CLIENT_REQUEST;
        match (&client_requests, is_request) {
            (Some(f), true) => f(src, pkt),
            _ => {
                let _ = tx.try_send(Event::Fast(src, pkt.to_vec()));
            }
        }
    });
    let hooks = dp::Hooks { wake, host_packet };
    let plane: Box<dyn DataPlane> = match cfg.dataplane {
        DataPlaneKind::Udp => Box::new(
            dp::udp::UdpDataPlane::open(&dcfg, hooks)
                .map_err(|e| format!("cannot start the udp data plane on {bind}: {e}"))?,
        ),
        DataPlaneKind::Xdp => Box::new(dp::xdp::XdpDataPlane::open(&dcfg, hooks).map_err(|e| {
            format!(
                "cannot start the xdp data plane on {:?} ({bind}): {e}; it needs root, \
                 native XDP on that interface, and a kernel with BPF ring buffers \
                 (use dataplane = \"udp\" on hosts without XDP)",
                dcfg.interface
            )
        })?),
        DataPlaneKind::Off => return Err("no data plane configured".into()),
    };
    Ok(DpHost {
        plane,
        clients: BTreeMap::new(),
        acked_persisted: 0,
        records: Vec::new(),
        peers: BTreeMap::new(),
        enables: 0,
        disables: BTreeMap::new(),
        last_reason: String::new(),
        retransmitted: 0,
        host_replies: 0,
        heartbeats: 0,
        enabled_term: 0,
        remote_pending: Default::default(),
        reorder: BTreeMap::new(),
        commits: BTreeMap::new(),
        held: BTreeMap::new(),
        reordered: 0,
        retx_sent: BTreeMap::new(),
        last_reject: None,
        rejects_sent: 0,
        wake_pending,
    })
}

impl DpHost {
    /// Remembers the native client of an entry the data plane ordered (leader).
    pub fn remember(&mut self, index: u64, c: DpClient) {
        if self.clients.len() >= MAX_DP_CLIENTS {
            self.clients.pop_first();
        }
        self.clients.insert(index, c);
    }
}

/// Software replication latency: proposal → commit at the leader (nanosecond buckets of
/// `waverunner_dataplane::bucket_of`).
#[derive(Default)]
pub struct SoftwareLatency {
    /// Proposal times by index (bounded).
    pub proposed: BTreeMap<u64, Instant>,
    /// Counts per bucket.
    pub buckets: Vec<u64>,
}

impl SoftwareLatency {
    /// Proposals remembered at most.
    pub const BOUND: usize = 100_000;

    /// The leader proposed `index` now.
    pub fn proposed(&mut self, index: u64) {
        if self.proposed.len() >= Self::BOUND {
            self.proposed.pop_first();
        }
        self.proposed.insert(index, Instant::now());
    }

    /// Everything up to `commit` committed now.
    pub fn committed(&mut self, commit: u64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; dp::HIST_BUCKETS];
        }
        while let Some((&i, _)) = self.proposed.first_key_value() {
            if i > commit {
                break;
            }
            let t = self.proposed.pop_first().expect("non-empty").1;
            self.buckets[dp::bucket_of(t.elapsed().as_nanos() as u64)] += 1;
        }
    }

    /// Forgets proposals (leadership lost).
    pub fn clear(&mut self) {
        self.proposed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_snake_case() {
        assert_eq!(
            reason_name(DisableReason::RetransmitExhausted),
            "retransmit_exhausted"
        );
        assert_eq!(reason_name(DisableReason::NewTerm), "new_term");
    }
}
