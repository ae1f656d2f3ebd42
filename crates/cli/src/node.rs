//! `waverunner node`: runs one replica of the key-value service until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use waverunner_node::stop::Stop;
use waverunner_node::NodeConfig;

/// Options of `waverunner node`: a TOML file, each field of which a flag overrides.
#[derive(clap::Args)]
pub struct NodeArgs {
    /// The TOML configuration file (see the README for every field).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Node id (non-zero, unique in the cluster).
    #[arg(long)]
    id: Option<u64>,
    /// Data directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// memory | fsync.
    #[arg(long)]
    durability: Option<String>,
    /// log | read_index | lease.
    #[arg(long)]
    read_mode: Option<String>,
    /// off (udp and xdp are not built yet).
    #[arg(long)]
    dataplane: Option<String>,
    /// Milliseconds per Raft tick.
    #[arg(long)]
    tick_ms: Option<u64>,
    /// Election timeout in ticks.
    #[arg(long)]
    election_ticks: Option<u32>,
    /// Heartbeat interval in ticks.
    #[arg(long)]
    heartbeat_ticks: Option<u32>,
    /// Snapshot every this many applied entries.
    #[arg(long)]
    snapshot_entries: Option<u64>,
    /// Also snapshot once the entries applied since the last one hold this many bytes.
    #[arg(long)]
    snapshot_bytes: Option<u64>,
    /// Client request timeout in milliseconds.
    #[arg(long)]
    request_timeout_ms: Option<u64>,
    /// Largest value accepted, in bytes.
    #[arg(long)]
    max_value_bytes: Option<u64>,
    /// Client connections per TCP front-end.
    #[arg(long)]
    max_connections: Option<u64>,
    /// replica (the client front-end runs on the replica loop) | thread (on its own).
    #[arg(long)]
    client_loop: Option<String>,
    /// Refuse writes that may grow the state past this many bytes (kb/mb/gb suffixes as
    /// Redis takes them; 0: no limit).
    #[arg(long, value_parser = crate::cluster::parse_memory)]
    maxmemory: Option<u64>,
    /// Control-plane TCP address.
    #[arg(long)]
    listen_raft: Option<String>,
    /// Native UDP client address.
    #[arg(long)]
    listen_client: Option<String>,
    /// Redis RESP address.
    #[arg(long)]
    listen_redis: Option<String>,
    /// memcached address.
    #[arg(long)]
    listen_memcache: Option<String>,
    /// Admin HTTP address.
    #[arg(long)]
    listen_admin: Option<String>,
    /// A peer, as ID=RAFT_ADDR or ID=RAFT_ADDR/CLIENT_ADDR (repeat for each; replaces the
    /// file's peers).
    #[arg(long = "peer")]
    peers: Vec<String>,
    /// Join a running group: this replica is not in the initial configuration (the peers
    /// are), so it waits to be added (`POST /membership` on the leader) and never campaigns
    /// before it is a voter.
    #[arg(long)]
    join: bool,
}

/// Builds the configuration: the file's TOML table with every given flag written over it.
pub fn config_of(a: &NodeArgs) -> Result<NodeConfig, String> {
    let mut t: toml::Table = match &a.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            // Errors in the file are reported against its own lines; only a missing field may
            // still come from a flag.
            if let Err(e) = toml::from_str::<NodeConfig>(&text) {
                if !e.message().starts_with("missing field") {
                    return Err(format!("{}: {e}", p.display()));
                }
            }
            text.parse()
                .map_err(|e| format!("{}: invalid TOML: {e}", p.display()))?
        }
        None => toml::Table::new(),
    };
    let mut set = |k: &str, v: Option<toml::Value>| {
        if let Some(v) = v {
            t.insert(k.into(), v);
        }
    };
    let int = |v: Option<u64>| v.map(|x| toml::Value::Integer(x as i64));
    let s = |v: &Option<String>| v.clone().map(toml::Value::String);
    set("id", int(a.id));
    set(
        "data_dir",
        a.data_dir
            .as_ref()
            .map(|p| toml::Value::String(p.display().to_string())),
    );
    set("durability", s(&a.durability));
    set("read_mode", s(&a.read_mode));
    set("dataplane", s(&a.dataplane));
    set("tick_ms", int(a.tick_ms));
    set("election_ticks", int(a.election_ticks.map(u64::from)));
    set("heartbeat_ticks", int(a.heartbeat_ticks.map(u64::from)));
    set("snapshot_entries", int(a.snapshot_entries));
    set("snapshot_bytes", int(a.snapshot_bytes));
    set("request_timeout_ms", int(a.request_timeout_ms));
    set("max_value_bytes", int(a.max_value_bytes));
    set("max_connections", int(a.max_connections));
    set("client_loop", s(&a.client_loop));
    set("maxmemory", int(a.maxmemory));
    if a.join {
        set("join", Some(toml::Value::Boolean(true)));
    }
    let listen = t
        .entry("listen")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let toml::Value::Table(listen) = listen else {
        return Err("`listen` must be a table".into());
    };
    for (k, v) in [
        ("raft", &a.listen_raft),
        ("client", &a.listen_client),
        ("redis", &a.listen_redis),
        ("memcache", &a.listen_memcache),
        ("admin", &a.listen_admin),
    ] {
        if let Some(v) = v {
            listen.insert(k.into(), toml::Value::String(v.clone()));
        }
    }
    if !a.peers.is_empty() {
        let mut peers = Vec::new();
        for p in &a.peers {
            let (id, addrs) = p
                .split_once('=')
                .ok_or_else(|| format!("--peer {p}: write ID=RAFT_ADDR[/CLIENT_ADDR]"))?;
            let id: i64 = id
                .parse()
                .map_err(|_| format!("--peer {p}: `{id}` is not a node id"))?;
            let mut peer = toml::Table::new();
            peer.insert("id".into(), toml::Value::Integer(id));
            let (raft, client) = match addrs.split_once('/') {
                Some((r, c)) => (r, Some(c)),
                None => (addrs, None),
            };
            peer.insert("raft".into(), toml::Value::String(raft.into()));
            if let Some(c) = client {
                peer.insert("client".into(), toml::Value::String(c.into()));
            }
            peers.push(toml::Value::Table(peer));
        }
        t.insert("peers".into(), toml::Value::Array(peers));
    }
    NodeConfig::from_toml(&toml::to_string(&t).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

/// Runs the replica until a signal asks it to stop.
pub fn run(a: NodeArgs) -> ExitCode {
    let cfg = match config_of(&a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("waverunner node: {e}");
            return ExitCode::from(2);
        }
    };
    let stop = match Stop::new().and_then(|s| {
        s.on_signal(signal_hook::consts::SIGTERM)?;
        s.on_signal(signal_hook::consts::SIGINT)?;
        Ok(s)
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("waverunner node: cannot install a signal handler: {e}");
            return ExitCode::FAILURE;
        }
    };
    let id = cfg.id;
    let running = match waverunner_kvserver::start_kv(cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("waverunner node: {e}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!("node {id} started");
    while !stop.is_set() && running.is_running() {
        // A signal is noticed at once, a replica loop that ended within a second (an idle
        // replica's wake-ups are counted).
        stop.sleep(Duration::from_secs(1));
    }
    let signalled = stop.is_set();
    match running.shutdown() {
        Ok(()) if signalled => {
            tracing::info!("node {id} stopped cleanly");
            ExitCode::SUCCESS
        }
        Ok(()) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("waverunner node: {e}");
            ExitCode::FAILURE
        }
    }
}
