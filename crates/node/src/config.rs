//! A replica's configuration: a TOML file (`waverunner node --config FILE`), every option also
//! a command-line flag (the CLI overrides fields after loading).

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Durability of acknowledged writes (DESIGN §4; the README states both promises).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityMode {
    /// Acknowledged once in the memory of a majority; term and vote are persisted.
    Memory,
    /// Acknowledged once on the disk of a majority (group commit).
    Fsync,
}

/// How linearizable reads are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadModeConfig {
    /// Through the log, like a write (the paper's behaviour).
    Log,
    /// ReadIndex: the leader confirms its leadership with a heartbeat round.
    ReadIndex,
    /// Leader lease (bounded clock drift assumed).
    Lease,
}

/// Which data plane replicates the common case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataPlaneKind {
    /// Vanilla Raft over TCP only.
    Off,
    /// The handler in a user-space UDP thread.
    Udp,
    /// The handler in an XDP program in the NIC driver.
    Xdp,
}

/// Where the application's client front-end runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientLoopKind {
    /// On the replica loop: a request is read, proposed, replicated and answered by one
    /// thread (run to completion).
    #[default]
    Replica,
    /// On a thread of its own (at a lower CPU priority), submitting through the replica
    /// loop's queue.
    Thread,
}

/// Addresses this replica listens on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listen {
    /// Control-plane TCP transport between replicas.
    pub raft: SocketAddr,
    /// Native UDP client protocol (the fast-path wire format).
    pub client: SocketAddr,
    /// Redis RESP2 over TCP.
    pub redis: Option<SocketAddr>,
    /// memcached text protocol over TCP.
    pub memcache: Option<SocketAddr>,
    /// Admin HTTP: `/metrics` and `/status`.
    pub admin: Option<SocketAddr>,
}

/// Another replica of the initial configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// Its node id (non-zero, unique).
    pub id: u64,
    /// Its control-plane TCP address.
    pub raft: SocketAddr,
    /// Its native client UDP address (told to clients for leader discovery).
    pub client: Option<SocketAddr>,
}

/// Everything a replica needs to start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This replica's node id (non-zero, unique in the cluster).
    pub id: u64,
    /// Where the write-ahead log, hard state and snapshots live.
    pub data_dir: PathBuf,
    /// `memory` or `fsync`.
    #[serde(default = "default_durability")]
    pub durability: DurabilityMode,
    /// `log`, `read_index` or `lease`.
    #[serde(default = "default_read_mode")]
    pub read_mode: ReadModeConfig,
    /// `off` (vanilla Raft over TCP), `udp` (the handler in a user-space thread) or `xdp`
    /// (the handler in an XDP program on `dataplane_interface`).
    #[serde(default = "default_dataplane")]
    pub dataplane: DataPlaneKind,
    /// `xdp`: the interface that holds the client address (native XDP is attached to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataplane_interface: Option<String>,
    /// `xdp` leader: the IPv4 multicast group appends are sent to (the replicas share one L2
    /// segment that floods it); `udp` replicas join it. Default 239.77.0.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataplane_multicast: Option<std::net::Ipv4Addr>,
    /// Length of one Raft tick in milliseconds.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// Election timeout in ticks (randomized in [n, 2n)).
    #[serde(default = "default_election_ticks")]
    pub election_ticks: u32,
    /// Heartbeat interval in ticks.
    #[serde(default = "default_heartbeat_ticks")]
    pub heartbeat_ticks: u32,
    /// Take a snapshot every this many applied entries; the log keeps the entries since the
    /// snapshot before the last one (a trailing window of at least this many). Either trigger
    /// waits until the entries also hold a sixteenth of the state's size (amortized cost).
    #[serde(default = "default_snapshot_entries")]
    pub snapshot_entries: u64,
    /// Also take one when the entries applied since the last one hold this many bytes.
    #[serde(default = "default_snapshot_bytes")]
    pub snapshot_bytes: u64,
    /// A client request not answered within this many milliseconds fails with a timeout
    /// (its outcome is then unknown to the client); a large request has a second more per
    /// 32 MiB.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Largest value accepted from clients, in bytes (Redis's limit by default, 512 MiB).
    #[serde(default = "default_max_value")]
    pub max_value_bytes: usize,
    /// Refuse writes that may grow the state while it holds more than this many bytes (as
    /// the state machine accounts them); 0: no limit. Redis's `maxmemory` with the
    /// `noeviction` policy.
    #[serde(default)]
    pub maxmemory: u64,
    /// `replica` (the client front-end runs on the replica loop) or `thread` (on its own).
    #[serde(default)]
    pub client_loop: ClientLoopKind,
    /// Largest number of client connections per TCP front-end.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Addresses to listen on.
    pub listen: Listen,
    /// The other replicas of the group's initial configuration (a joining replica: every
    /// replica of it, since it is not one of them itself).
    #[serde(default)]
    pub peers: Vec<Peer>,
    /// This replica joins a running group: it is not part of the initial configuration (which
    /// is `peers` only), so it never campaigns until a leader adds it as a voter, and it learns
    /// the log (or a snapshot) and the members' addresses from the leader. Harmless on a
    /// restart after it joined: the configuration then comes from its log.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join: bool,
}

fn default_durability() -> DurabilityMode {
    DurabilityMode::Fsync
}
fn default_read_mode() -> ReadModeConfig {
    ReadModeConfig::ReadIndex
}
fn default_dataplane() -> DataPlaneKind {
    DataPlaneKind::Off
}
fn default_tick_ms() -> u64 {
    10
}
fn default_election_ticks() -> u32 {
    10
}
/// Ticks between a leader's heartbeats when nothing else is sent.
pub fn default_heartbeat_ticks() -> u32 {
    // Every 50 ms: two or more heartbeats per election timeout (100–200 ms; pre-vote and
    // check-quorum keep a late one from costing a term). A heartbeat round costs an idle
    // leader about eight thread wake-ups: one per tick used 1.8 % of a core, every 30 ms
    // 1.4 %, every 50 ms under 1 % (docs/bench.md, bench scale). Reads do not wait for it: a
    // ReadIndex round sends its own heartbeat at once.
    5
}
/// Log entries after which a snapshot is taken (see [`NodeConfig::snapshot_entries`]). At
/// 10 000, 50 closed-loop native writers (50 000 small writes a second) made every replica
/// snapshot five times a second, and a data-plane follower whose retransmission came a second
/// late found the entries compacted (a hand-off); 100 000 is etcd's `snapshot-count` too. Large
/// entries meet [`default_snapshot_bytes`] first.
pub fn default_snapshot_entries() -> u64 {
    100_000
}
/// Log bytes after which a snapshot is taken (see [`NodeConfig::snapshot_bytes`]).
pub fn default_snapshot_bytes() -> u64 {
    // A pipeline's commands share an entry (256 SETs of 100 bytes: 33 KB): counted in
    // entries alone, 10 000 of them held 330 MB of log, and at 64 MiB the log's two periods
    // doubled the memory per key of a million keys.
    8 << 20
}
/// How long a client request may wait for its answer.
pub fn default_request_timeout_ms() -> u64 {
    3_000
}
fn default_max_value() -> usize {
    MAX_VALUE_LIMIT
}

/// The largest `max_value_bytes` (Redis's `proto-max-bulk-len` default, 512 MiB): a log entry
/// holds one value of this size plus its key and command (storage's `MAX_ENTRY_DATA`).
pub const MAX_VALUE_LIMIT: usize = 512 << 20;
const _: () = assert!(MAX_VALUE_LIMIT < waverunner_storage::codec::MAX_ENTRY_DATA);
/// Redis's `maxclients` default: connections cost the event loop a buffer each, not a thread.
pub fn default_max_connections() -> usize {
    10_000
}

/// A configuration that cannot be used; the message says what to change.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl NodeConfig {
    /// Parses a TOML configuration and validates it.
    pub fn from_toml(text: &str) -> Result<NodeConfig, ConfigError> {
        let cfg: NodeConfig = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a TOML file.
    pub fn load(path: &std::path::Path) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
        NodeConfig::from_toml(&text)
            .map_err(|e| ConfigError(format!("{}: {}", path.display(), e.0)))
    }

    /// The TOML text of this configuration.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a configuration serializes")
    }

    /// Checks what the type system cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        if self.id == 0 {
            return err("id must be non-zero".into());
        }
        let mut ids = vec![self.id];
        for p in &self.peers {
            if p.id == 0 {
                return err("peer ids must be non-zero".into());
            }
            if ids.contains(&p.id) {
                return err(format!(
                    "node id {} appears twice (ids must be unique)",
                    p.id
                ));
            }
            ids.push(p.id);
        }
        if self.join && self.peers.is_empty() {
            return err(
                "join = true needs the group's initial configuration in [[peers]] (a replica \
                 cannot join a group it knows nothing of)"
                    .into(),
            );
        }
        if ids.len() > waverunner_fastpath::MAX_NODES {
            return err(format!(
                "{} replicas configured; at most {} are supported",
                ids.len(),
                waverunner_fastpath::MAX_NODES
            ));
        }
        if self.tick_ms == 0 || self.tick_ms > 10_000 {
            return err("tick_ms must be in 1..=10000".into());
        }
        if self.heartbeat_ticks == 0 || self.election_ticks <= self.heartbeat_ticks {
            return err("need 0 < heartbeat_ticks < election_ticks".into());
        }
        if self.snapshot_entries == 0 || self.snapshot_bytes == 0 {
            return err("snapshot_entries and snapshot_bytes must be > 0".into());
        }
        if self.request_timeout_ms == 0 {
            return err("request_timeout_ms must be > 0".into());
        }
        if self.max_value_bytes == 0 || self.max_value_bytes > MAX_VALUE_LIMIT {
            return err(format!("max_value_bytes must be in 1..={MAX_VALUE_LIMIT}"));
        }
        if self.max_connections == 0 {
            return err("max_connections must be > 0".into());
        }
        if self.dataplane != DataPlaneKind::Off {
            if !self.listen.client.is_ipv4() {
                return err(format!(
                    "dataplane = {:?} needs an IPv4 listen.client address (the fast-path port), not {}",
                    self.dataplane, self.listen.client
                ));
            }
            if let Some(p) = self
                .peers
                .iter()
                .find(|p| p.client.is_none_or(|a| !a.is_ipv4()))
            {
                return err(format!(
                    "dataplane = {:?} needs every peer's IPv4 client address (its fast-path port); peer {} has none",
                    self.dataplane, p.id
                ));
            }
            if self.voters().len() > waverunner_fastpath::MAX_NODES {
                return err(format!(
                    "the data plane replicates among at most {} voters; this configuration has {}",
                    waverunner_fastpath::MAX_NODES,
                    self.voters().len()
                ));
            }
            if let Some(g) = self.dataplane_multicast {
                if !g.is_multicast() {
                    return err(format!(
                        "dataplane_multicast = {g} is not an IPv4 multicast group"
                    ));
                }
            }
        }
        if self.dataplane == DataPlaneKind::Xdp && self.dataplane_interface.is_none() {
            return err(
                "dataplane = \"xdp\" needs dataplane_interface: the interface that holds the client address".into(),
            );
        }
        Ok(())
    }

    /// Ids of every replica of the initial configuration, sorted: the peers and, unless it
    /// joins a running group, this replica.
    pub fn voters(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.peers.iter().map(|p| p.id).collect();
        if !self.join {
            v.push(self.id);
        }
        v.sort_unstable();
        v
    }

    /// The election timeout in milliseconds (the lower bound of the randomized range).
    pub fn election_timeout_ms(&self) -> u64 {
        self.tick_ms * u64::from(self.election_ticks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
id = 1
data_dir = "/tmp/x"
[listen]
raft = "127.0.0.1:7001"
client = "127.0.0.1:7101"
[[peers]]
id = 2
raft = "127.0.0.1:7002"
"#;

    #[test]
    fn a_minimal_file_parses_with_defaults() {
        let c = NodeConfig::from_toml(GOOD).unwrap();
        assert_eq!(c.voters(), vec![1, 2]);
        assert_eq!(c.durability, DurabilityMode::Fsync);
        assert_eq!(c.read_mode, ReadModeConfig::ReadIndex);
        let again = NodeConfig::from_toml(&c.to_toml()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn a_joining_replica_is_not_in_the_initial_configuration() {
        let c = NodeConfig::from_toml(&GOOD.replace("id = 1\n", "id = 1\njoin = true\n")).unwrap();
        assert!(c.join);
        assert_eq!(c.voters(), vec![2]);
        let again = NodeConfig::from_toml(&c.to_toml()).unwrap();
        assert_eq!(again, c);
        assert!(
            !NodeConfig::from_toml(GOOD)
                .unwrap()
                .to_toml()
                .contains("join"),
            "join = false is not written"
        );
        let alone = "id = 4\njoin = true\ndata_dir = \"/x\"\n[listen]\nraft = \"127.0.0.1:1\"\nclient = \"127.0.0.1:2\"\n";
        let e = NodeConfig::from_toml(alone).unwrap_err().to_string();
        assert!(e.contains("initial configuration"), "{e}");
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        for (text, says) in [
            ("id = 1", "missing field"),
            (&GOOD.replace("id = 2", "id = 1"), "appears twice"),
            (&GOOD.replace("id = 1", "id = 0"), "non-zero"),
            (&format!("{GOOD}\nbogus = 3"), "unknown field"),
            (
                &GOOD.replace("id = 1\n", "id = 1\ndurability = \"paper\"\n"),
                "unknown variant",
            ),
            (
                &GOOD.replace("id = 1\n", "id = 1\ndataplane = \"udp\"\n"),
                "peer 2 has none",
            ),
            (
                &GOOD
                    .replace("id = 1\n", "id = 1\ndataplane = \"xdp\"\n")
                    .replace(
                        "raft = \"127.0.0.1:7002\"",
                        "raft = \"127.0.0.1:7002\"\nclient = \"127.0.0.1:7102\"",
                    ),
                "needs dataplane_interface",
            ),
            (
                &GOOD
                    .replace(
                        "id = 1\n",
                        "id = 1\ndataplane = \"udp\"\ndataplane_multicast = \"10.0.0.1\"\n",
                    )
                    .replace(
                        "raft = \"127.0.0.1:7002\"",
                        "raft = \"127.0.0.1:7002\"\nclient = \"127.0.0.1:7102\"",
                    ),
                "not an IPv4 multicast group",
            ),
            ("[[[", "invalid"),
        ] {
            let e = NodeConfig::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(says), "{e:?} should contain {says:?}");
        }
    }
}
