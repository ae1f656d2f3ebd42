//! `waverunner member add|remove`: membership change of the local cluster, one replica at a
//! time, through the leader's admin HTTP (`POST /membership`, see `waverunner_node::admin`).
//!
//! - [`add_member`] starts a new replica (next id, fresh data directory, the cluster's network
//!   mode: loopback ports or a new namespace `wr-n<id>` on the bridge) with `join = true`,
//!   records it in `cluster.json`, asks the leader to add it as a learner, waits until its log
//!   has caught up, then promotes it to voter.
//! - [`remove_member`] asks the leader to remove a replica; once the removal is committed it
//!   stops the process and moves the replica to `removed` in `cluster.json` (its id is never
//!   reused; `status` shows it as removed, `down` cleans up after it).
//!
//! Both follow `not leader` answers to the leader they name and retry transient refusals
//! (`change pending`, `not committed in term`, …) until a deadline.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Subcommand;
use waverunner_node::admin::{self, AdminAnswer, MembershipRequest};
use waverunner_node::config::{Listen, Peer};
use waverunner_node::NodeConfig;

use crate::cluster::{
    self, default_dir, fetch_status, is_running, load, loopback_addrs, netns_addrs, netns_ip,
    netns_name, node_dir, ClusterFile, NetMode, NodeAddrs, NodeEntry, StatusView,
};

/// How long one membership request may go on being refused or unanswered.
const CHANGE_DEADLINE: Duration = Duration::from_secs(30);
/// The admin protocol's error code for a change that would leave too few voters up and caught
/// up; a refusal for good, so it ends up in the error `change` returns.
pub const QUORUM_REFUSAL: &str = "would lose quorum";
/// Timeout of one admin request (the replica answers once the change commits, or after its
/// request timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a new replica may take to catch up with the leader's log.
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(120);
/// A learner has caught up when the leader's view of its log is within this many entries of
/// the leader's own (the core's own test for a voter able to vote allows one batch, 64).
const CATCH_UP_LAG: u64 = 16;
/// Timeout of one `/status` request.
const STATUS_TIMEOUT: Duration = Duration::from_millis(1_000);

/// Options of `waverunner member`.
#[derive(clap::Args)]
pub struct MemberArgs {
    #[command(subcommand)]
    op: MemberOp,
}

#[derive(Subcommand)]
enum MemberOp {
    /// Start a new replica and add it to the group (learner, catch-up, voter).
    Add {
        /// Cluster directory [default: $WAVERUNNER_DIR or <temp dir>/waverunner-cluster].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Remove replica ID from the group, then stop it.
    Remove {
        /// The replica to remove (the leader included).
        id: u64,
        /// Cluster directory [default: $WAVERUNNER_DIR or <temp dir>/waverunner-cluster].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// `waverunner member`.
pub fn cmd_member(a: MemberArgs) -> ExitCode {
    let (what, dir, r) = match a.op {
        MemberOp::Add { dir } => {
            let dir = dir.unwrap_or_else(default_dir);
            let r = add_member(&dir).map(|id| format!("added replica {id}"));
            ("member add", dir, r)
        }
        MemberOp::Remove { id, dir } => {
            let dir = dir.unwrap_or_else(default_dir);
            let r = remove_member(&dir, id).map(|()| format!("removed replica {id}"));
            ("member remove", dir, r)
        }
    };
    match r {
        Ok(done) => {
            let cf = load(&dir).ok();
            let membership = cf.as_ref().map_or(String::new(), describe);
            if let Some(n) = cf.as_ref().and_then(|cf| {
                done.strip_prefix("added replica ")
                    .and_then(|id| id.parse::<u64>().ok())
                    .and_then(|id| cf.node(id))
            }) {
                let a = &n.addresses;
                println!(
                    "replica {} (pid {}{}): raft {} client {} redis {} memcache {} admin http://{}/status",
                    n.id,
                    n.pid,
                    n.netns.as_deref().map(|ns| format!(", netns {ns}")).unwrap_or_default(),
                    a.raft,
                    a.client,
                    a.redis,
                    a.memcache,
                    a.admin
                );
            }
            println!("{done}; {membership}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("waverunner {what}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The membership as the leader reports it: `voters 1,2,3 learners - (leader 2)`.
fn describe(cf: &ClusterFile) -> String {
    match leader_status(cf) {
        Some(s) => format!(
            "voters {} learners {} (leader {})",
            list(&s.voters),
            list(&s.learners),
            s.id
        ),
        None => "no leader to ask for the membership right now".into(),
    }
}

fn list(ids: &[u64]) -> String {
    if ids.is_empty() {
        return "-".into();
    }
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// The status of the replica that calls itself leader (the highest term wins), if any answers.
fn leader_status(cf: &ClusterFile) -> Option<StatusView> {
    cf.nodes
        .iter()
        .filter(|n| is_running(n))
        .filter_map(|n| fetch_status(n.addresses.admin, STATUS_TIMEOUT).ok())
        .map(|(v, _)| v)
        .filter(|v| v.role == "leader")
        .max_by_key(|v| v.term)
}

/// Asks the cluster for a membership change until it is done: follows `not leader` to the
/// leader named, retries transient refusals; `already` says, from the leader's status, whether
/// the change is in force anyway (a retry after an answer that got lost, say).
fn change(
    cf: &ClusterFile,
    req: &MembershipRequest,
    already: impl Fn(&StatusView) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + CHANGE_DEADLINE;
    let admin_of = |id: u64| cf.node(id).map(|n| n.addresses.admin);
    // Replicas whose process is gone cannot answer: ask the others (all, if none runs).
    let mut members: Vec<u64> = cf
        .nodes
        .iter()
        .filter(|n| is_running(n))
        .map(|n| n.id)
        .collect();
    if members.is_empty() {
        members = cf.nodes.iter().map(|n| n.id).collect();
    }
    let mut target = leader_status(cf).map_or(members[0], |s| s.id);
    let mut k = 0usize;
    let mut last;
    loop {
        let answer: Result<AdminAnswer, String> = match admin_of(target) {
            Some(a) => admin::request_membership(a, req, REQUEST_TIMEOUT),
            None => Err(format!("replica {target} is not in the cluster file")),
        };
        match answer {
            Ok(a) if a.ok => return Ok(()),
            Ok(a) => {
                let why = a.message.clone().unwrap_or_default();
                if !a.retriable() {
                    // Refused for good — unless the change is in force already.
                    if leader_status(cf).is_some_and(|s| already(&s)) {
                        return Ok(());
                    }
                    return Err(format!("replica {target} refused: {why}"));
                }
                last = format!("replica {target}: {why}");
                match a.leader {
                    Some(l) if l != 0 && l != target && admin_of(l).is_some() => {
                        target = l;
                        continue;
                    }
                    _ => {}
                }
                if a.error.as_deref() == Some("not leader") {
                    k += 1;
                    target = members[k % members.len()];
                }
            }
            Err(e) => {
                last = e;
                k += 1;
                target = members[k % members.len()];
            }
        }
        if Instant::now() >= deadline {
            if leader_status(cf).is_some_and(|s| already(&s)) {
                return Ok(());
            }
            return Err(format!(
                "gave up after {} s; last answer: {last}",
                CHANGE_DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The address plan of replica `id` in the cluster's network mode.
fn plan_addrs(cf: &ClusterFile, id: u64) -> Result<NodeAddrs, String> {
    match cf.mode {
        NetMode::Netns => {
            if id + 10 >= 100 {
                return Err(format!(
                    "replica {id} would need 10.77.0.{}: at most 89 replica ids in a namespace cluster",
                    id + 10
                ));
            }
            Ok(netns_addrs(id))
        }
        NetMode::Loopback => {
            let any = cf
                .nodes
                .iter()
                .chain(&cf.removed)
                .next()
                .ok_or("the cluster file lists no replica")?;
            let base = u64::from(any.addresses.raft.port())
                .checked_sub(any.id)
                .and_then(|b| u16::try_from(b).ok())
                .ok_or("cannot tell the cluster's base port from its replicas' addresses")?;
            if id >= 100 {
                return Err(format!(
                    "replica {id}: at most 99 replica ids in a loopback cluster"
                ));
            }
            loopback_addrs(base, id)
        }
    }
}

/// Starts a new replica and adds it to the group of the cluster in `dir`: learner, catch-up,
/// voter. Returns its id. On failure the new replica is stopped again (and, if it may have
/// become a member, removed), and recorded as removed so its id is never reused.
pub fn add_member(dir: &Path) -> Result<u64, String> {
    let _guard = cluster::RESTART_LOCK
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let mut cf = load(dir)?;
    let template = cf
        .nodes
        .iter()
        .find(|n| is_running(n))
        .ok_or("no replica of the cluster is running: start it first")?;
    let template = NodeConfig::load(&template.config).map_err(|e| e.to_string())?;
    let id = cf
        .nodes
        .iter()
        .chain(&cf.removed)
        .map(|n| n.id)
        .max()
        .unwrap_or(0)
        + 1;
    let addrs = plan_addrs(&cf, id)?;
    if cf.mode == NetMode::Loopback {
        cluster::check_node_ports_free(id, &addrs)?;
    }
    // The group's initial configuration: the replicas `up` started, removed ones included
    // (their removal is in the log the new replica receives).
    let mut initial: Vec<&NodeEntry> = cf
        .nodes
        .iter()
        .chain(&cf.removed)
        .filter(|n| !n.joined)
        .collect();
    initial.sort_by_key(|n| n.id);
    let ndir = node_dir(&cf.dir, id);
    let cfg = NodeConfig {
        id,
        data_dir: ndir.join("data"),
        listen: Listen {
            raft: addrs.raft,
            client: addrs.client,
            redis: Some(addrs.redis),
            memcache: Some(addrs.memcache),
            admin: Some(addrs.admin),
        },
        peers: initial
            .iter()
            .map(|n| Peer {
                id: n.id,
                raft: n.addresses.raft,
                client: Some(n.addresses.client),
            })
            .collect(),
        join: true,
        ..template
    };
    cfg.validate().map_err(|e| e.to_string())?;
    // A fresh data directory: a replica that joins must not start from an old log.
    match fs::remove_dir_all(&ndir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot clear {}: {e}", ndir.display()))
        }
        _ => {}
    }
    fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", cfg.data_dir.display()))?;
    let config = ndir.join("node.toml");
    fs::write(&config, cfg.to_toml())
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    let netns = (cf.mode == NetMode::Netns).then(|| netns_name(id));
    if let Some(ns) = &netns {
        cluster::add_netns_host(ns, netns_ip(id))?;
    }
    let mut node = NodeEntry {
        id,
        pid: 0,
        start_time: 0,
        netns,
        addresses: addrs.clone(),
        data_dir: cfg.data_dir.clone(),
        config,
        log: ndir.join("node.log"),
        joined: true,
    };
    let child = cluster::spawn_node(&cf, &node)?;
    node.pid = child.id();
    node.start_time = cluster::start_time_of(child.id());
    // Reap it if it exits while we wait (we stay its parent for as long as this runs).
    drop(child);
    cf.nodes.push(node.clone());
    cf.save()?;

    let result = join(&cf, &node, &addrs);
    if let Err(e) = result {
        // Undo: take it out of the group if it may be in, stop it, never reuse its id.
        let member =
            leader_status(&cf).is_some_and(|s| s.voters.contains(&id) || s.learners.contains(&id));
        let mut undo = String::new();
        if member {
            let req = MembershipRequest {
                op: "remove".into(),
                id,
                ..MembershipRequest::default()
            };
            if let Err(r) = change(&cf, &req, |s| {
                !s.voters.contains(&id) && !s.learners.contains(&id)
            }) {
                undo = format!(
                    "; removing it again failed too ({r}): run `waverunner member remove {id}`"
                );
            }
        }
        let _ = cluster::stop_node(&node);
        let tail = log_tail(&node.log);
        let mut cf = load(dir)?;
        if let Some(i) = cf.nodes.iter().position(|n| n.id == id) {
            let n = cf.nodes.remove(i);
            cf.removed.push(n);
            cf.save()?;
        }
        return Err(format!(
            "{e}{undo}\n--- replica {id}: last lines of its log ---\n{tail}(replica {id} has been stopped)"
        ));
    }
    Ok(id)
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for l in &lines[lines.len().saturating_sub(20)..] {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// Learner, catch-up, voter.
fn join(cf: &ClusterFile, node: &NodeEntry, addrs: &NodeAddrs) -> Result<(), String> {
    let id = node.id;
    // The new replica answers first (its admin server is up once it started).
    wait_answers(node, addrs.admin)?;
    let req = MembershipRequest {
        op: "add_learner".into(),
        id,
        raft: Some(addrs.raft.to_string()),
        client: Some(addrs.client.to_string()),
    };
    change(cf, &req, |s| {
        s.learners.contains(&id) || s.voters.contains(&id)
    })
    .map_err(|e| format!("adding replica {id} as a learner: {e}"))?;
    wait_caught_up(cf, node, addrs.admin)?;
    let req = MembershipRequest {
        op: "add_voter".into(),
        id,
        ..MembershipRequest::default()
    };
    change(cf, &req, |s| s.voters.contains(&id))
        .map_err(|e| format!("promoting replica {id} to voter: {e}"))
}

fn wait_answers(node: &NodeEntry, admin: SocketAddr) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if fetch_status(admin, STATUS_TIMEOUT).is_ok() {
            return Ok(());
        }
        if !is_running(node) {
            return Err(format!("replica {} exited during start-up", node.id));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "replica {} does not answer on http://{admin}/status",
                node.id
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the leader's view of the learner's log is within [`CATCH_UP_LAG`] entries of
/// its own last index and the learner applied what was committed when we began.
fn wait_caught_up(cf: &ClusterFile, node: &NodeEntry, admin: SocketAddr) -> Result<(), String> {
    let deadline = Instant::now() + CATCH_UP_DEADLINE;
    let mut target = None;
    let mut why = String::from("no leader");
    loop {
        if !is_running(node) {
            return Err(format!("replica {} exited while catching up", node.id));
        }
        if let Some(l) = leader_status(cf) {
            let target = *target.get_or_insert(l.commit_index);
            let matched = l
                .members
                .iter()
                .find(|m| m.id == node.id)
                .map_or(0, |m| m.match_index);
            match fetch_status(admin, STATUS_TIMEOUT) {
                Ok((s, _)) => {
                    if matched + CATCH_UP_LAG >= l.last_index && s.applied_index >= target {
                        return Ok(());
                    }
                    why = format!(
                        "the leader ({}) has {} entries, {} of them known on replica {}; it applied {} of {target}",
                        l.id, l.last_index, matched, node.id, s.applied_index
                    );
                }
                Err(e) => why = e,
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "replica {} did not catch up within {} s: {why}",
                node.id,
                CATCH_UP_DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Removes replica `id` from the group of the cluster in `dir`: once the removal is committed,
/// stops it and records it as removed. The leader may be removed: another takes over.
pub fn remove_member(dir: &Path, id: u64) -> Result<(), String> {
    let _guard = cluster::RESTART_LOCK
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let cf = load(dir)?;
    if cf.removed.iter().any(|n| n.id == id) {
        return Err(format!("replica {id} was removed already"));
    }
    let Some(node) = cf.node(id).cloned() else {
        return Err(format!(
            "the cluster in {} has no replica {id}",
            cf.dir.display()
        ));
    };
    if cf.nodes.len() == 1 {
        return Err(format!(
            "replica {id} is the last one: a group cannot remove its last voter (use `waverunner down`)"
        ));
    }
    let req = MembershipRequest {
        op: "remove".into(),
        id,
        ..MembershipRequest::default()
    };
    // Removal asked of the others when the replica is down: `change` starts at the leader.
    change(&cf, &req, |s| {
        s.id != id && !s.voters.contains(&id) && !s.learners.contains(&id)
    })
    .map_err(|e| format!("removing replica {id}: {e}"))?;
    // Committed: it will not be needed again. A removed leader has handed over leadership.
    if !cluster::stop_node(&node)? {
        return Err(format!(
            "replica {id} (pid {}) was removed from the group but survives SIGKILL",
            node.pid
        ));
    }
    let mut cf = load(dir)?;
    if let Some(i) = cf.nodes.iter().position(|n| n.id == id) {
        let n = cf.nodes.remove(i);
        cf.removed.push(n);
        cf.save()?;
    }
    cluster::wait_for_leader(&cf, Duration::from_secs(15))
        .map(|_| ())
        .map_err(|e| format!("replica {id} was removed, but the others have {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterFile, NetMode};
    use waverunner_node::config::{DurabilityMode, ReadModeConfig};

    fn entry(id: u64, base: u16, joined: bool) -> NodeEntry {
        NodeEntry {
            id,
            pid: 0,
            start_time: 0,
            netns: None,
            addresses: loopback_addrs(base, id).unwrap(),
            data_dir: "/x".into(),
            config: "/x/node.toml".into(),
            log: "/x/node.log".into(),
            joined,
        }
    }

    #[test]
    fn a_quorum_refusal_is_recognised_by_its_error_code() {
        let e = waverunner_node::AdminError::WouldLoseQuorum;
        assert_eq!(e.reason(), QUORUM_REFUSAL);
        assert!(e.to_string().contains(QUORUM_REFUSAL));
    }

    #[test]
    fn new_replicas_follow_the_clusters_address_plan() {
        let mut cf = ClusterFile {
            dir: "/tmp/x".into(),
            mode: NetMode::Loopback,
            bridge: None,
            client_netns: None,
            exe: "/bin/true".into(),
            durability: DurabilityMode::Fsync,
            read_mode: ReadModeConfig::ReadIndex,
            nodes: (2..=3).map(|id| entry(id, 23_000, false)).collect(),
            removed: vec![entry(1, 23_000, false)],
        };
        let a = plan_addrs(&cf, 4).unwrap();
        assert_eq!(a.raft, "127.0.0.1:23004".parse().unwrap());
        assert_eq!(a.admin, "127.0.0.1:23404".parse().unwrap());
        assert!(plan_addrs(&cf, 100).is_err());
        cf.mode = NetMode::Netns;
        assert_eq!(
            plan_addrs(&cf, 4).unwrap().raft,
            "10.77.0.14:7000".parse().unwrap()
        );
        assert!(plan_addrs(&cf, 90).is_err());
    }
}
