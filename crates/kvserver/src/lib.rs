//! # waverunner-kvserver
//!
//! The key-value server: an application of the replication library (`waverunner-node`) that
//! replicates the key-value store (`waverunner-kv`, [`KvMachine`]) and serves it to native
//! UDP, Redis RESP and memcached text clients ([`frontend`]).

#![warn(missing_docs)]

pub mod frontend;
pub mod kvsm;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::{Arc, OnceLock};

pub use kvsm::KvMachine;
use waverunner_node::config::{DataPlaneKind, NodeConfig};
use waverunner_node::{start_replica_with, FastClients, Running, StartError};

fn bind_tcp(what: &str, a: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(a).map_err(|e| {
        StartError(format!(
            "cannot listen for {what} on {a}: {e} (is another replica running there?)"
        ))
    })
}

/// Lets the process open as many descriptors as its hard limit allows, as Redis does for
/// `maxclients`: a soft limit of 1 024 refused connections long before `max_connections`.
fn raise_descriptor_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write and read a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                tracing::warn!("cannot raise the descriptor limit to {}", r.rlim_max);
            }
        }
    }
}

/// Starts a key-value replica with its client front-ends (native UDP, RESP, memcached).
pub fn start_kv(cfg: NodeConfig) -> Result<Running, StartError> {
    cfg.validate().map_err(|e| StartError(e.to_string()))?;
    raise_descriptor_limit();
    // Without a data plane the native front-end owns the client port; with one, the data
    // plane does and passes client requests it does not order itself to the front-end.
    let udp = if cfg.dataplane == DataPlaneKind::Off {
        Some(UdpSocket::bind(cfg.listen.client).map_err(|e| {
            StartError(format!(
                "cannot listen for clients on udp {}: {e}",
                cfg.listen.client
            ))
        })?)
    } else {
        None
    };
    let redis = cfg
        .listen
        .redis
        .map(|a| bind_tcp("Redis clients", a))
        .transpose()?;
    let memcache = cfg
        .listen
        .memcache
        .map(|a| bind_tcp("memcached clients", a))
        .transpose()?;
    let native: Arc<OnceLock<frontend::native::Native>> = Arc::new(OnceLock::new());
    let cell = native.clone();
    let requests: waverunner_node::clients::FastRequestFn = Arc::new(
        move |src: SocketAddr, pkt: &[u8], to: &mut dyn waverunner_node::Propose| {
            if let Some(n) = cell.get() {
                n.on_datagram(pkt, src, to);
            }
        },
    );
    let limits = frontend::Limits::from_config(&cfg);
    let listeners: Vec<frontend::tcp::Listener> = [
        (redis, frontend::Protocol::Redis),
        (memcache, frontend::Protocol::Memcache),
    ]
    .into_iter()
    .filter_map(|(l, proto)| l.map(|socket| frontend::tcp::Listener { socket, proto }))
    .collect();
    // Native replies leave with the client loop's turns: from the port the loop reads without
    // a data plane, from the data plane's socket (set below) for what it passes up.
    let native_loop = frontend::native::NativeLoop::new(udp, cfg.id)
        .map_err(|e| StartError(format!("cannot set up the native front-end: {e}")))?;
    let passed_up = native_loop.outbox();
    let front_end: Option<Box<dyn waverunner_node::ClientLoop>> = Some(Box::new(
        frontend::tcp::Frontend::new(listeners, native_loop, limits)
            .map_err(|e| StartError(format!("cannot set up the client front-end: {e}")))?,
    ));
    let mut ok = Vec::new();
    waverunner_kv::codec::encode_response(&waverunner_kv::Response::Ok, &mut ok);
    let clients = FastClients {
        front_end,
        blind_reply_body: ok,
        requests: Some(requests),
    };
    let (running, dp_socket) = start_replica_with(cfg.clone(), KvMachine::default(), clients)?;
    if let Some(sock) = dp_socket {
        passed_up.send_from(Arc::new(sock));
        let _ = native.set(frontend::native::Native::new(
            passed_up,
            running.handle.clone(),
            cfg.id,
        ));
    }
    Ok(running)
}
