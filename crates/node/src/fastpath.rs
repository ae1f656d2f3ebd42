//! Opening the replica's data plane (DESIGN §3, `docs/dataplane.md`): what the host does with
//! it is `waverunner_host::dataplane`, shared with the simulator.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use waverunner_dataplane::{self as dp, DataPlane};
use waverunner_fastpath as fp;
use waverunner_host::dataplane::DataPlaneHost;

use crate::clients::Inbox;
use crate::config::{DataPlaneKind, DurabilityMode, NodeConfig};
use crate::replica::Event;

/// The data plane of a replica and its host side (crate `waverunner-host`).
pub type DpHost = DataPlaneHost<Box<dyn DataPlane>>;

/// Opens the configured data plane. Packets it passes up go to the replica loop as
/// [`Event::Fast`]; client requests among them to `client_requests` (the native front-end),
/// if given. With it, the flag its wake-ups coalesce on (the loop clears it when it drains
/// the ring).
pub fn open(
    cfg: &NodeConfig,
    tx: Inbox,
    blind_reply_body: Vec<u8>,
    client_requests: Option<dp::PacketFn>,
) -> Result<(DpHost, Arc<AtomicBool>), String> {
    let SocketAddr::V4(bind) = cfg.listen.client else {
        return Err(format!(
            "dataplane = {:?} needs an IPv4 client address, not {}",
            cfg.dataplane, cfg.listen.client
        ));
    };
    let dcfg = dp::Config {
        self_id: cfg.id,
        group_id: fp::GROUP,
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
                let _ = tx.try_send(Event::Fast(src, pkt.to_vec(), std::time::Instant::now()));
            }
        }
    });
    let hooks = dp::Hooks { wake, host_packet };
    let plane: Box<dyn DataPlane> = match cfg.dataplane {
        DataPlaneKind::Udp => Box::new(
            dp::udp::UdpDataPlane::open(&dcfg, hooks)
                .map_err(|e| format!("cannot start the udp data plane on {bind}: {e}"))?,
        ),
        #[cfg(feature = "xdp")]
        DataPlaneKind::Xdp => Box::new(dp::xdp::XdpDataPlane::open(&dcfg, hooks).map_err(|e| {
            format!(
                "cannot start the xdp data plane on {:?} ({bind}): {e}; it needs root, \
                 native XDP on that interface, and a kernel with BPF ring buffers \
                 (use dataplane = \"udp\" on hosts without XDP)",
                dcfg.interface
            )
        })?),
        #[cfg(not(feature = "xdp"))]
        DataPlaneKind::Xdp => {
            return Err(
                "this build has no xdp data plane (the `xdp` feature of waverunner-node \
                 is off); use dataplane = \"udp\" or build with the feature"
                    .into(),
            )
        }
        DataPlaneKind::Off => return Err("no data plane configured".into()),
    };
    let defer_acks = cfg.durability == DurabilityMode::Fsync;
    Ok((
        DataPlaneHost::new(plane, cfg.id, fp::GROUP, defer_acks),
        wake_pending,
    ))
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
