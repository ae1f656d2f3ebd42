//! Opening the replica's data plane (DESIGN §3, `docs/dataplane.md`): what the host does with
//! it is `waverunner_host::dataplane`, shared with the simulator.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mio::unix::SourceFd;
use mio::{Interest, Registry};
use waverunner_dataplane::{self as dp, DataPlane};
use waverunner_fastpath as fp;
use waverunner_host::dataplane::DataPlaneHost;
use waverunner_mmsg as mmsg;

use crate::clients::{FastRequestFn, Inbox, FAST};
use crate::config::{DataPlaneKind, DurabilityMode, NodeConfig};
use crate::replica::{Event, Handle};

/// The data plane of a replica and its host side (crate `waverunner-host`).
pub type DpHost = DataPlaneHost<Box<dyn DataPlane>>;

/// The data plane [`open`] opened, and how what it passes up reaches the replica loop.
pub struct Opened {
    /// The data plane and its host side.
    pub host: DpHost,
    /// The flag its ring wake-ups coalesce on (the loop clears it when it drains the ring).
    pub wake_pending: Arc<AtomicBool>,
    /// A handle on its fast-path socket, for the application's replies from that port.
    pub socket: UdpSocket,
    /// `xdp`: the fast-path socket, which the replica loop reads itself. `None` (`udp`): the
    /// data plane's thread queues what it passes up ([`Event::Fast`]; requests through the
    /// replica's queue).
    pub port: Option<FastPort>,
}

/// Opens the configured data plane. What it passes up reaches the replica loop: client
/// requests among it go to `client_requests` (the application's native front-end), if given,
/// the rest to the host. `handle` is the replica's (its queue, for a data plane whose own
/// thread passes packets up).
pub fn open(
    cfg: &NodeConfig,
    tx: Inbox,
    handle: &Handle,
    blind_reply_body: Vec<u8>,
    client_requests: Option<FastRequestFn>,
) -> Result<Opened, String> {
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
    // `xdp` passes packets up through its socket and records through its ring: the replica
    // loop polls both itself (no thread between). The `udp` data plane's thread is its
    // handler: it calls back, and its ring wake-ups reach the loop as events.
    let loop_reads = cfg.dataplane == DataPlaneKind::Xdp;
    let wake_pending = Arc::new(AtomicBool::new(false));
    let wake: Option<Arc<dyn Fn() + Send + Sync>> = if loop_reads {
        None
    } else {
        let (wtx, wflag) = (tx.clone(), wake_pending.clone());
        Some(Arc::new(move || {
            if !wflag.swap(true, Ordering::AcqRel) {
                let _ = wtx.try_send(Event::Ring);
            }
        }))
    };
    let host_packet: Option<dp::PacketFn> = if loop_reads {
        None
    } else {
        let (requests, handle) = (client_requests.clone(), handle.clone());
        Some(Arc::new(move |src: SocketAddr, pkt: &[u8]| {
            match (&requests, is_client_request(pkt)) {
                (Some(f), true) => f(src, pkt, &mut &handle),
                _ => {
                    let _ = tx.try_send(Event::Fast(src, pkt.to_vec(), Instant::now()));
                }
            }
        }))
    };
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
    let share = |r: io::Result<UdpSocket>| {
        r.map_err(|e| format!("cannot share the {} data plane's socket: {e}", plane.kind()))
    };
    let socket = share(plane.socket())?;
    let port = if loop_reads {
        Some(FastPort::new(share(socket.try_clone())?, client_requests))
    } else {
        None
    };
    let defer_acks = cfg.durability == DurabilityMode::Fsync;
    let mut host = DataPlaneHost::new(plane, cfg.id, fp::GROUP, defer_acks);
    host.set_election_timeout(std::time::Duration::from_millis(cfg.election_timeout_ms()));
    Ok(Opened {
        host,
        wake_pending,
        socket,
        port,
    })
}

/// Whether a passed-up packet is a client's request (for the application's front-end).
fn is_client_request(pkt: &[u8]) -> bool {
    fp::Header::kind_of(pkt) == Some(fp::CLIENT_REQUEST)
}

/// Datagrams the replica loop reads from the fast-path socket per turn at most: the rest wait
/// for the next turn (the loop does not sleep while the socket may hold more), so a flood
/// cannot hold the loop off Raft.
pub const FAST_READ_BUDGET: usize = 4 * mmsg::MAX_BATCH;

/// Bytes a datagram of the fast-path socket may have: a header and the largest payload fit.
/// A longer one is not a fast-path packet (dropped, counted as a client error).
const FAST_DATAGRAM: usize = 2048;
const _: () = assert!(FAST_DATAGRAM >= fp::HDR_LEN + fp::MAX_PAYLOAD as usize);

/// The data plane's fast-path socket as the replica loop reads it (`xdp`: what the program
/// passes up, everything while it is disabled): in batches (`recvmmsg`), on the loop's poll,
/// with no thread or queue between the socket and Raft.
pub struct FastPort {
    sock: UdpSocket,
    requests: Option<FastRequestFn>,
    batch: mmsg::RecvBatch,
    /// The socket may hold datagrams not read yet.
    readable: bool,
}

/// Where one datagram [`FastPort::read`] read goes.
pub enum Passed<'a> {
    /// A client's request: to the application's front-end.
    Request(&'a FastRequestFn),
    /// Anything else: to the host (`DataPlaneHost::on_packet`).
    Host,
    /// Longer than a fast-path packet can be: dropped.
    Oversize,
}

impl FastPort {
    /// The loop reads `sock`, a handle on the data plane's socket. The data plane also sends
    /// from it, so it stays blocking; the loop's reads do not wait.
    pub fn new(sock: UdpSocket, requests: Option<FastRequestFn>) -> FastPort {
        FastPort {
            sock,
            requests,
            batch: mmsg::RecvBatch::new(mmsg::MAX_BATCH, FAST_DATAGRAM),
            readable: true,
        }
    }

    /// Registers the socket on the loop's poll at [`FAST`] (edge-triggered: read until empty).
    pub fn register(&self, registry: &Registry) -> io::Result<()> {
        registry.register(
            &mut SourceFd(&self.sock.as_raw_fd()),
            FAST,
            Interest::READABLE,
        )
    }

    /// The poll reported the socket readable.
    pub fn on_readable(&mut self) {
        self.readable = true;
    }

    /// Whether the socket may hold datagrams not read yet (then the loop must not sleep).
    pub fn readable(&self) -> bool {
        self.readable
    }

    /// Reads at most [`FAST_READ_BUDGET`] datagrams and gives each to `each`, in order.
    pub fn read(&mut self, mut each: impl FnMut(SocketAddr, &[u8], Passed<'_>)) {
        let fd = self.sock.as_raw_fd();
        let mut read = 0;
        while self.readable && read < FAST_READ_BUDGET {
            let n = match self.batch.recv(fd, libc::MSG_DONTWAIT) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    break;
                }
                Err(e) => {
                    // Interrupted, or an ICMP error queued on the socket (a peer or a client
                    // that went away): the next receive goes on. It counts against the budget.
                    tracing::debug!("fast-path socket: receive: {e}");
                    read += 1;
                    continue;
                }
            };
            read += n.max(1);
            for i in 0..n {
                let (src, pkt, truncated) = self.batch.get(i);
                let Some(src) = src else { continue };
                let passed = match &self.requests {
                    _ if truncated => Passed::Oversize,
                    Some(f) if is_client_request(pkt) => Passed::Request(f),
                    _ => Passed::Host,
                };
                each(src, pkt, passed);
            }
        }
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

    fn packet(kind: fp::MsgType) -> Vec<u8> {
        let mut b = Vec::new();
        fp::Header::of(kind).encode(&[], &mut b);
        b
    }

    /// What one [`FastPort::read`] gave: ("request" | "host" | "oversize", its type byte).
    fn read_once(port: &mut FastPort) -> Vec<(&'static str, u8)> {
        let mut got = Vec::new();
        port.read(|_, pkt, passed| {
            let what = match passed {
                Passed::Request(_) => "request",
                Passed::Host => "host",
                Passed::Oversize => "oversize",
            };
            got.push((what, fp::Header::kind_of(pkt).unwrap_or(0)));
        });
        got
    }

    #[test]
    fn the_loop_reads_requests_to_the_front_end_the_rest_to_the_host_within_a_budget() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        mmsg::set_buffer(sock.as_raw_fd(), mmsg::Buffer::Receive, 1 << 20);
        let to = sock.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let requests: FastRequestFn = Arc::new(|_, _, _| {});
        let mut port = FastPort::new(sock.try_clone().unwrap(), Some(requests));

        // In order: a request, an append, an oversize datagram, an ack.
        tx.send_to(&packet(fp::MsgType::ClientRequest), to).unwrap();
        tx.send_to(&packet(fp::MsgType::Append), to).unwrap();
        tx.send_to(&vec![0u8; FAST_DATAGRAM + 1], to).unwrap();
        tx.send_to(&packet(fp::MsgType::Ack), to).unwrap();
        let got = read_once(&mut port);
        assert_eq!(
            got,
            vec![
                ("request", fp::CLIENT_REQUEST),
                ("host", fp::APPEND),
                ("oversize", 0),
                ("host", fp::ACK)
            ]
        );
        assert!(!port.readable(), "drained: the loop may sleep");

        // A flood is read a budget at a time; the loop must not sleep while more waits.
        port.on_readable();
        let flood = FAST_READ_BUDGET + 100;
        for _ in 0..flood {
            tx.send_to(&packet(fp::MsgType::ClientRequest), to).unwrap();
        }
        assert_eq!(read_once(&mut port).len(), FAST_READ_BUDGET);
        assert!(port.readable());
        assert_eq!(read_once(&mut port).len(), 100);
        assert!(!port.readable());

        // Without a front-end for requests, they go to the host, as every other packet.
        let mut bare = FastPort::new(sock, None);
        tx.send_to(&packet(fp::MsgType::ClientRequest), to).unwrap();
        assert_eq!(read_once(&mut bare), vec![("host", fp::CLIENT_REQUEST)]);
    }
}
