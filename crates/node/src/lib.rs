//! # waverunner-node
//!
//! The replication library: one Waverunner replica of any state machine. The Raft core
//! driven by a single replica loop ([`replica`]) through the host logic it shares with the
//! simulator (`waverunner-host`), the TCP transport between replicas ([`transport`],
//! [`wire`]), durable storage (`waverunner-storage`), the replicated state machine ([`sm`]:
//! implement [`StateMachine`] and call [`start_replica`]), and admin HTTP (`/metrics`,
//! `/status`, and `POST /membership`, `POST /transfer-leader` for membership change: see
//! [`admin`]). It knows no client protocol: the key-value server with its RESP, memcached
//! and native front-ends is an application of it (`waverunner-kvserver`).
//!
//! Data plane: `off` (vanilla Raft over TCP), `udp`, or `xdp` with the `xdp` feature (crate
//! `waverunner-dataplane`; without the feature the library builds without libbpf);
//! [`fastpath`] opens it (DESIGN §3).

#![warn(missing_docs)]

pub mod admin;
pub mod clients;
pub mod config;
pub mod fastpath;
pub mod metrics;
pub mod priority;
pub mod replica;
pub mod sm;
pub mod stop;
pub mod transport;
pub mod wire;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::mpsc::{sync_channel, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub use clients::{ClientLoop, Propose};
pub use config::NodeConfig;
pub use replica::{AdminCmd, AdminError, ClientError, Handle};
pub use sm::StateMachine;
/// The largest client command the data plane replicates itself (a larger one hands
/// replication over to software for its entry): what an application batching commands
/// stays under when a data plane is configured.
pub use waverunner_host::dataplane::MAX_COMMAND as DATAPLANE_MAX_COMMAND;

use metrics::{Addresses, Status};
use replica::{Event, Fatal, LoopIo, Replica};
use stop::Stop;
use transport::{Delivery, Transport};

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
    start_replica_with(cfg, sm, FastClients::default()).map(|(r, _)| r)
}

/// What an application gives the replica to serve its clients: its event-driven front-end,
/// and for clients on the fast-path port, what the data plane needs.
#[derive(Default)]
pub struct FastClients {
    /// The front-end, run on the replica loop (run to completion) or on a thread of its own,
    /// as `client_loop` in the configuration says.
    pub front_end: Option<Box<dyn ClientLoop>>,
    /// The result the data plane sends for a blind write it committed itself.
    pub blind_reply_body: Vec<u8>,
    /// What to do with a client request that reached the fast-path port and that the data
    /// plane did not order itself ([`clients::FastRequestFn`]).
    pub requests: Option<clients::FastRequestFn>,
}

/// [`start_replica`], with the application's fast-path clients; with a data plane, also the
/// fast-path socket the application answers its clients from.
pub fn start_replica_with<S: StateMachine>(
    cfg: NodeConfig,
    sm: S,
    clients: FastClients,
) -> Result<(Running, Option<UdpSocket>), StartError> {
    let FastClients {
        front_end,
        blind_reply_body,
        requests: client_requests,
    } = clients;
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
    let poll =
        mio::Poll::new().map_err(|e| StartError(format!("cannot create the loop's poll: {e}")))?;
    let bell = Arc::new(
        clients::Bell::new(poll.registry())
            .map_err(|e| StartError(format!("cannot create the loop's bell: {e}")))?,
    );
    let tx = clients::Inbox::new(tx, bell.clone());
    let status = Arc::new(Mutex::new(Status {
        id: cfg.id,
        role: "starting".into(),
        ..Status::default()
    }));
    let admission = Arc::new(replica::Admission::default());
    let latencies = Arc::new(metrics::Latencies::default());
    let handle = Handle::new(
        tx.clone(),
        status.clone(),
        admission.clone(),
        latencies.clone(),
    );
    let peers: Vec<(u64, SocketAddr)> = cfg.peers.iter().map(|p| (p.id, p.raft)).collect();
    let inbox = tx.clone();
    let transport = Transport::start(
        cfg.id,
        raft_listener,
        Some(cfg.listen.raft),
        &peers,
        move |(from, f, at)| match inbox.try_send(Event::Peer(from, f, at)) {
            Ok(()) => Delivery::Taken,
            Err(TrySendError::Full(Event::Peer(from, f, at))) => Delivery::Full((from, f, at)),
            Err(TrySendError::Full(_)) => unreachable!("sent a peer's frame"),
            Err(TrySendError::Disconnected(_)) => Delivery::Closed,
        },
        stop.clone(),
    )
    .map_err(|e| StartError(format!("cannot start the replica transport: {e}")))?;
    let (dp, dp_socket, fast_port) = if cfg.dataplane == config::DataPlaneKind::Off {
        (None, None, None)
    } else {
        let o = fastpath::open(&cfg, tx.clone(), &handle, blind_reply_body, client_requests)
            .map_err(StartError)?;
        if let Some(p) = &o.port {
            p.register(poll.registry()).map_err(|e| {
                StartError(format!(
                    "cannot register the fast-path socket on the loop: {e}"
                ))
            })?;
        }
        tracing::info!(
            "node {}: {} data plane on {} (starts disabled; the leader enables it)",
            cfg.id,
            o.host.plane.kind(),
            cfg.listen.client
        );
        (Some((o.host, o.wake_pending)), Some(o.socket), o.port)
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
    let shared = replica::Shared {
        transport,
        status,
        keepalive,
        admission,
        latencies,
    };
    let replica =
        Replica::open(cfg.clone(), sm, shared, addresses, dp).map_err(|Fatal(m)| StartError(m))?;
    let mut on_loop = None;
    if let Some(mut fe) = front_end {
        match cfg.client_loop {
            config::ClientLoopKind::Replica => {
                let b = bell.clone();
                let wake: clients::Wake = Arc::new(move || b.ring());
                fe.register(poll.registry(), &handle, wake).map_err(|e| {
                    StartError(format!("cannot register the client front-end: {e}"))
                })?;
                on_loop = Some(fe);
            }
            config::ClientLoopKind::Thread => {
                let (h, s) = (handle.clone(), stop.clone());
                std::thread::Builder::new()
                    .name("clients".into())
                    .spawn(move || {
                        priority::client_thread();
                        if let Err(e) = clients::serve_on_own_thread(fe, h, s) {
                            tracing::error!("client front-end stopped: {e}");
                        }
                    })
                    .map_err(|e| StartError(format!("cannot start the clients thread: {e}")))?;
            }
        }
    }
    let io = LoopIo {
        rx,
        poll,
        bell,
        clients: on_loop,
        fast: fast_port,
    };
    let stop2 = stop.clone();
    let core = std::thread::Builder::new()
        .name(format!("replica-{}", cfg.id))
        .spawn(move || {
            let r = replica.run(io, stop2.clone());
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
