//! # waverunner-node
//!
//! One Waverunner replica: the Raft core driven by a single replica loop ([`replica`]), the
//! TCP transport between replicas ([`transport`], [`wire`]), durable storage
//! (`waverunner-storage`), the replicated state machine ([`sm`]: implement [`StateMachine`] to
//! replicate your own), and for the key-value store its client front-ends (native UDP, Redis
//! RESP, memcached text) and admin HTTP (`/metrics`, `/status`, and `POST /membership`,
//! `POST /transfer-leader` for membership change: see [`admin`]).
//!
//! Data plane: `off` (vanilla Raft over TCP), `udp` or `xdp` (crate `waverunner-dataplane`);
//! [`fastpath`] is the replica's side of the hand-off (DESIGN §3).

#![warn(missing_docs)]

pub mod admin;
pub mod config;
pub mod fastpath;
pub mod frontend;
pub mod kvsm;
pub mod metrics;
pub(crate) mod priority;
pub mod replica;
pub mod sm;
pub mod stop;
pub mod transport;
pub mod wire;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

pub use config::NodeConfig;
pub use kvsm::KvMachine;
pub use replica::{AdminCmd, AdminError, ClientError, Handle};
pub use sm::StateMachine;

use metrics::{Addresses, Status};
use replica::{Event, Fatal, Replica};
use stop::Stop;
use transport::Transport;

/// A replica that could not start; the message says what to fix.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

fn bind_tcp(what: &str, a: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(a).map_err(|e| {
        StartError(format!(
            "cannot listen for {what} on {a}: {e} (is another replica running there?)"
        ))
    })
}

/// A running replica.
pub struct Running {
    /// Submit commands, read the status.
    pub handle: Handle,
    stop: Arc<Stop>,
    core: Option<JoinHandle<Result<(), Fatal>>>,
}

impl Running {
    /// Stops the replica (persisting what it has) and waits for it.
    pub fn shutdown(mut self) -> Result<(), StartError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), StartError> {
        self.stop.set();
        let _ = self.handle.sender().try_send(Event::Shutdown);
        match self.core.take().map(|h| h.join()) {
            Some(Ok(Err(Fatal(m)))) => Err(StartError(m)),
            Some(Err(_)) => Err(StartError("the replica loop panicked".into())),
            _ => Ok(()),
        }
    }

    /// Waits until the replica loop ends (a fatal error, or a shutdown from elsewhere).
    pub fn wait(mut self) -> Result<(), StartError> {
        match self.core.take().map(|h| h.join()) {
            Some(Ok(Err(Fatal(m)))) => Err(StartError(m)),
            Some(Err(_)) => Err(StartError("the replica loop panicked".into())),
            _ => Ok(()),
        }
    }

    /// Whether the replica loop is still running.
    pub fn is_running(&self) -> bool {
        self.core.as_ref().is_some_and(|h| !h.is_finished())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Starts a replica of any state machine: transport, storage, replica loop, admin HTTP and
/// the configured data plane. Clients talk to it through [`Running::handle`].
pub fn start_replica<S: StateMachine>(cfg: NodeConfig, sm: S) -> Result<Running, StartError> {
    start_replica_with(cfg, sm, Vec::new(), None).map(|(r, _)| r)
}

/// What the native front-end does with a client request that reached the fast-path port.
type RequestFn = waverunner_dataplane::PacketFn;

fn start_replica_with<S: StateMachine>(
    cfg: NodeConfig,
    sm: S,
    blind_reply_body: Vec<u8>,
    client_requests: Option<RequestFn>,
) -> Result<(Running, Option<UdpSocket>), StartError> {
    cfg.validate().map_err(|e| StartError(e.to_string()))?;
    let raft_listener = bind_tcp("replicas", cfg.listen.raft)?;
    let admin_listener = cfg
        .listen
        .admin
        .map(|a| bind_tcp("admin HTTP", a))
        .transpose()?;
    let addresses = Addresses {
        raft: cfg.listen.raft.to_string(),
        client: cfg.listen.client.to_string(),
        redis: cfg.listen.redis.map(|a| a.to_string()).unwrap_or_default(),
        memcache: cfg
            .listen
            .memcache
            .map(|a| a.to_string())
            .unwrap_or_default(),
        admin: cfg.listen.admin.map(|a| a.to_string()).unwrap_or_default(),
    };
    let stop =
        Arc::new(Stop::new().map_err(|e| StartError(format!("cannot create the stop pipe: {e}")))?);
    let (tx, rx) = sync_channel(replica::EVENT_QUEUE);
    let status = Arc::new(Mutex::new(Status {
        id: cfg.id,
        role: "starting".into(),
        ..Status::default()
    }));
    let handle = Handle::new(tx.clone(), status.clone());
    let peers: Vec<(u64, SocketAddr)> = cfg.peers.iter().map(|p| (p.id, p.raft)).collect();
    let inbox = tx.clone();
    let transport = Transport::start(
        cfg.id,
        raft_listener,
        Some(cfg.listen.raft),
        &peers,
        move |(from, f, at)| inbox.send(Event::Peer(from, f, at)).is_ok(),
        stop.clone(),
    );
    let (dp, dp_socket) = if cfg.dataplane == config::DataPlaneKind::Off {
        (None, None)
    } else {
        let d = fastpath::open(&cfg, tx.clone(), blind_reply_body, client_requests)
            .map_err(StartError)?;
        let sock = d.0.plane.socket().map_err(|e| {
            StartError(format!(
                "cannot share the {} data plane's socket: {e}",
                d.0.plane.kind()
            ))
        })?;
        tracing::info!(
            "node {}: {} data plane on {} (starts disabled; the leader enables it)",
            cfg.id,
            d.0.plane.kind(),
            cfg.listen.client
        );
        (Some(d), Some(sock))
    };
    let keepalive = Arc::new(replica::KeepAlive::default());
    {
        let (ka, t, s) = (keepalive.clone(), transport.clone(), stop.clone());
        let tick = std::time::Duration::from_millis(cfg.tick_ms);
        std::thread::Builder::new()
            .name("keepalive".into())
            .spawn(move || replica::run_keepalive(ka, t, tick, s))
            .map_err(|e| StartError(format!("cannot start the keepalive thread: {e}")))?;
    }
    let replica = Replica::open(cfg.clone(), sm, transport, status, keepalive, addresses, dp)
        .map_err(|Fatal(m)| StartError(m))?;
    let stop2 = stop.clone();
    let core = std::thread::Builder::new()
        .name(format!("replica-{}", cfg.id))
        .spawn(move || {
            let r = replica.run(rx, stop2.clone());
            stop2.set();
            if let Err(Fatal(m)) = &r {
                tracing::error!("replica stopped: {m}");
            }
            r
        })
        .map_err(|e| StartError(format!("cannot start the replica thread: {e}")))?;
    if let Some(l) = admin_listener {
        let (h, s) = (handle.clone(), stop.clone());
        std::thread::Builder::new()
            .name("admin".into())
            .spawn(move || admin::serve(l, h, s))
            .map_err(|e| StartError(format!("cannot start the admin thread: {e}")))?;
    }
    Ok((
        Running {
            handle,
            stop,
            core: Some(core),
        },
        dp_socket,
    ))
}

/// Starts a key-value replica with its client front-ends (native UDP, RESP, memcached).
pub fn start_kv(cfg: NodeConfig) -> Result<Running, StartError> {
    cfg.validate().map_err(|e| StartError(e.to_string()))?;
    // Without a data plane the native front-end owns the client port; with one, the data
    // plane does and passes client requests it does not order itself to the front-end.
    let udp = if cfg.dataplane == config::DataPlaneKind::Off {
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
    let requests: RequestFn = Arc::new(move |src: SocketAddr, pkt: &[u8]| {
        if let Some(n) = cell.get() {
            n.on_datagram(pkt, src);
        }
    });
    let mut ok = Vec::new();
    waverunner_kv::codec::encode_response(&waverunner_kv::Response::Ok, &mut ok);
    let (running, dp_socket) =
        start_replica_with(cfg.clone(), KvMachine::default(), ok, Some(requests))?;
    if let Some(sock) = dp_socket {
        let _ = native.set(frontend::native::Native::new(
            Arc::new(sock),
            running.handle.clone(),
            cfg.id,
        ));
    }
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map(|_| ())
            .map_err(|e| StartError(format!("cannot start the {name} thread: {e}")))
    };
    if let Some(udp) = udp {
        let (h, s, id) = (running.handle.clone(), running.stop.clone(), cfg.id);
        spawn(
            "native",
            Box::new(move || frontend::native::serve(udp, h, id, s)),
        )?;
    }
    let limits = frontend::Limits::from_config(&cfg);
    if let Some(l) = redis {
        let (h, s) = (running.handle.clone(), running.stop.clone());
        spawn(
            "redis",
            Box::new(move || frontend::serve_tcp(l, h, s, limits, frontend::Protocol::Redis)),
        )?;
    }
    if let Some(l) = memcache {
        let (h, s) = (running.handle.clone(), running.stop.clone());
        spawn(
            "memcache",
            Box::new(move || frontend::serve_tcp(l, h, s, limits, frontend::Protocol::Memcache)),
        )?;
    }
    Ok(running)
}
