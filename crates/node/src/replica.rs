//! The replica loop: one thread owns the Raft core, the storage and the replicated state, and
//! handles events in order — ticks, frames from peers, client requests, admin commands
//! (membership changes, leader transfer) — then acts on the core's ready batches (persist,
//! send, apply, answer). Nothing else touches Raft state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use waverunner_raft::{
    ConfChange, Config as RaftConfig, Entry, EntryKind, HardState, ProposeError, Raft, ReadError,
    ReadMode, Ready, Role,
};
use waverunner_storage::Storage;

use crate::config::{DurabilityMode, NodeConfig, ReadModeConfig};
use crate::metrics::{Counters, Histogram, MemberStatus, Status};
use crate::sm::{
    EntryData, Envelope, MemberAddrs, MemberRecord, Outcome, Replicated, StateMachine,
};
use crate::transport::Transport;
use crate::wire::Frame;

/// Events queued to the replica loop at most; a client request beyond it is refused (busy).
pub const EVENT_QUEUE: usize = 65_536;
/// Client requests in flight at one replica at most; beyond it requests are refused (busy).
pub const MAX_IN_FLIGHT: usize = 100_000;

/// Why a client request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// Not answered in time: the write may or may not have happened.
    Timeout,
    /// No leader could take the request in time, or the cluster refused it (never applied).
    Unavailable(String),
    /// The session already moved past this sequence number (never applied now).
    Stale,
    /// Too many requests in flight; try again (never applied).
    Busy,
    /// The replica is shutting down (outcome unknown if it was already proposed).
    ShuttingDown,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Timeout => {
                write!(f, "timed out waiting for the cluster (outcome unknown)")
            }
            ClientError::Unavailable(why) => write!(f, "cluster unavailable: {why}"),
            ClientError::Stale => write!(f, "stale request: the session has a newer one"),
            ClientError::Busy => write!(f, "replica busy, retry"),
            ClientError::ShuttingDown => write!(f, "replica shutting down"),
        }
    }
}

/// Called once with the result of a client request.
pub type Replier = Box<dyn FnOnce(Result<Vec<u8>, ClientError>) + Send>;

/// A client request for the replica loop.
pub struct Submit {
    /// Session id (0: none).
    pub client: u64,
    /// Sequence number in the session.
    pub seq: u64,
    /// The state-machine command.
    pub command: Vec<u8>,
    /// Where the answer goes.
    pub reply: Replier,
}

/// A membership or leadership command (admin HTTP `POST /membership`, `/transfer-leader`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminCmd {
    /// Add `id` as a learner; every replica learns its addresses through the log.
    AddLearner {
        /// The new member.
        id: u64,
        /// Its control-plane TCP address.
        raft: SocketAddr,
        /// Its native client address.
        client: Option<SocketAddr>,
    },
    /// Promote learner `id` to voter (or add it directly, then `raft` is needed).
    AddVoter {
        /// The member.
        id: u64,
        /// Its control-plane address, if not already known from its learner record.
        raft: Option<SocketAddr>,
        /// Its native client address.
        client: Option<SocketAddr>,
    },
    /// Remove voter or learner `id` (the leader included).
    Remove {
        /// The member.
        id: u64,
    },
    /// Hand leadership to voter `id`.
    TransferLeader {
        /// The voter to lead.
        id: u64,
    },
}

/// Why an admin command failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminError {
    /// This replica does not lead; `leader` is the one it knows (0: none). Ask there.
    NotLeader {
        /// The known leader, 0 if none.
        leader: u64,
    },
    /// Another membership change is not committed yet (one at a time): retry.
    ChangePending,
    /// The leader has not committed an entry of its term yet: retry in a moment.
    NotCommittedInTerm,
    /// Too few voters would be up and caught up after the change.
    WouldLoseQuorum,
    /// The change does not apply (already a member, not a member, a removed id, …).
    Invalid(String),
    /// A hand-off or a leader transfer is in progress: retry.
    Retry(String),
    /// The change was proposed but not committed in time: it may still commit.
    Timeout,
    /// The change was proposed but another entry took its place (leadership changed): it
    /// will never commit.
    Lost,
    /// Too many events queued: retry.
    Busy,
    /// The replica is stopping.
    ShuttingDown,
}

impl AdminError {
    /// A short, stable reason (`"not leader"`, `"change pending"`, …) for callers to match.
    pub fn reason(&self) -> &'static str {
        match self {
            AdminError::NotLeader { .. } => "not leader",
            AdminError::ChangePending => "change pending",
            AdminError::NotCommittedInTerm => "not committed in term",
            AdminError::WouldLoseQuorum => "would lose quorum",
            AdminError::Invalid(_) => "invalid",
            AdminError::Retry(_) => "retry",
            AdminError::Timeout => "timeout",
            AdminError::Lost => "lost",
            AdminError::Busy => "busy",
            AdminError::ShuttingDown => "shutting down",
        }
    }

    /// Whether the same command may simply be sent again (to the same replica or, for
    /// `not leader`, to the leader it names).
    pub fn retriable(&self) -> bool {
        !matches!(self, AdminError::Invalid(_) | AdminError::WouldLoseQuorum)
    }
}

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminError::NotLeader { leader: 0 } => write!(f, "not leader (no leader known)"),
            AdminError::NotLeader { leader } => write!(f, "not leader (the leader is {leader})"),
            AdminError::ChangePending => {
                write!(
                    f,
                    "change pending: another membership change is not committed yet"
                )
            }
            AdminError::NotCommittedInTerm => {
                write!(f, "not committed in term: the new leader has not committed an entry of its term yet")
            }
            AdminError::WouldLoseQuorum => write!(
                f,
                "would lose quorum: too few voters would be up and caught up after the change"
            ),
            AdminError::Invalid(why) => write!(f, "invalid: {why}"),
            AdminError::Retry(why) => write!(f, "retry: {why}"),
            AdminError::Timeout => write!(
                f,
                "timeout: proposed but not committed in time (it may still commit)"
            ),
            AdminError::Lost => write!(
                f,
                "lost: leadership changed before the change committed (it never will)"
            ),
            AdminError::Busy => write!(f, "busy: replica queue full, retry"),
            AdminError::ShuttingDown => write!(f, "shutting down"),
        }
    }
}

impl std::error::Error for AdminError {}

/// Called once with the result of an admin command: the index of the committed change (0 for
/// a leader transfer, which is answered once started).
pub type AdminReply = Box<dyn FnOnce(Result<u64, AdminError>) + Send>;

/// An event for the replica loop.
pub enum Event {
    /// A frame from a peer.
    Peer(u64, Frame),
    /// A client request.
    Submit(Submit),
    /// A membership or leadership command.
    Admin(AdminCmd, AdminReply),
    /// Bad client input seen by a front-end (counted).
    ClientError,
    /// Stop.
    Shutdown,
}

/// What front-ends and the admin server hold to talk to the replica.
#[derive(Clone)]
pub struct Handle {
    tx: SyncSender<Event>,
    status: Arc<Mutex<Status>>,
}

impl Handle {
    /// A handle on the queue `tx` of a replica publishing into `status`.
    pub fn new(tx: SyncSender<Event>, status: Arc<Mutex<Status>>) -> Handle {
        Handle { tx, status }
    }

    /// Submits a request; `reply` is called exactly once.
    pub fn submit(&self, client: u64, seq: u64, command: Vec<u8>, reply: Replier) {
        let s = Submit {
            client,
            seq,
            command,
            reply,
        };
        match self.tx.try_send(Event::Submit(s)) {
            Ok(()) => {}
            Err(TrySendError::Full(Event::Submit(s))) => (s.reply)(Err(ClientError::Busy)),
            Err(TrySendError::Disconnected(Event::Submit(s))) => {
                (s.reply)(Err(ClientError::ShuttingDown))
            }
            Err(_) => unreachable!("submitted a Submit"),
        }
    }

    /// Submits a request and waits for its answer.
    pub fn call(&self, client: u64, seq: u64, command: Vec<u8>) -> Result<Vec<u8>, ClientError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.submit(
            client,
            seq,
            command,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv().unwrap_or(Err(ClientError::ShuttingDown))
    }

    /// Runs an admin command and waits for its result: a membership change is answered once
    /// committed (or failed), a leader transfer once started.
    pub fn admin(&self, cmd: AdminCmd) -> Result<u64, AdminError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let reply: AdminReply = Box::new(move |r| {
            let _ = tx.send(r);
        });
        match self.tx.try_send(Event::Admin(cmd, reply)) {
            Ok(()) => rx.recv().unwrap_or(Err(AdminError::ShuttingDown)),
            Err(TrySendError::Full(_)) => Err(AdminError::Busy),
            Err(TrySendError::Disconnected(_)) => Err(AdminError::ShuttingDown),
        }
    }

    /// Counts a bad client input.
    pub fn client_error(&self) {
        let _ = self.tx.try_send(Event::ClientError);
    }

    /// The status the replica published last (every tick).
    pub fn status(&self) -> Status {
        self.status.lock().expect("status").clone()
    }

    /// The replica loop's queue (for the transport).
    pub fn sender(&self) -> SyncSender<Event> {
        self.tx.clone()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Waiting for a leader (retried every tick).
    Routing,
    /// Proposed by this replica as leader.
    Proposed,
    /// Forwarded to the leader.
    Forwarded,
    /// Waiting for a ReadIndex answer or for the applied index to reach it.
    Reading,
}

struct Request {
    client: u64,
    seq: u64,
    command: Vec<u8>,
    read: bool,
    stage: Stage,
    reply: Replier,
    started: Instant,
    deadline: Instant,
}

/// Milliseconds since the Unix epoch by the local clock.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A membership change proposed for an admin command, answered when its entry commits.
struct PendingAdmin {
    index: u64,
    term: u64,
    reply: AdminReply,
    deadline: Instant,
}

/// A fatal error of the replica loop (storage failed): the replica stops.
#[derive(Debug)]
pub struct Fatal(pub String);

/// The replica loop's state.
pub struct Replica<S: StateMachine> {
    cfg: NodeConfig,
    raft: Raft,
    storage: Storage,
    state: Replicated<S>,
    transport: Arc<Transport>,
    status: Arc<Mutex<Status>>,
    addresses: crate::metrics::Addresses,
    next_req: u64,
    requests: HashMap<u64, Request>,
    retry: Vec<u64>,
    /// Reads answered by ReadIndex, waiting for the applied index: (index, request id).
    reads_waiting: BTreeSet<(u64, u64)>,
    counters: Counters,
    write_latency: Histogram,
    read_latency: Histogram,
    role: Role,
    /// The hard state last written to storage, and the newest one the core reported.
    persisted_hard: HardState,
    latest_hard: HardState,
    /// Membership changes waiting for their entry to commit.
    admin_pending: Vec<PendingAdmin>,
    /// The addresses the transport talks to: configured peers, the replicated address book,
    /// and addresses peers advertised (for ids known no other way).
    peer_addrs: BTreeMap<u64, SocketAddr>,
}

impl<S: StateMachine> Replica<S> {
    /// Opens storage, restores the state machine and builds the Raft core.
    pub fn open(
        cfg: NodeConfig,
        sm: S,
        transport: Arc<Transport>,
        status: Arc<Mutex<Status>>,
        addresses: crate::metrics::Addresses,
    ) -> Result<Replica<S>, Fatal> {
        let durability = match cfg.durability {
            DurabilityMode::Memory => waverunner_storage::Durability::Memory,
            DurabilityMode::Fsync => waverunner_storage::Durability::Fsync,
        };
        let (storage, recovered) = Storage::open(&cfg.data_dir, durability).map_err(|e| {
            Fatal(format!(
                "cannot open storage in {}: {e}",
                cfg.data_dir.display()
            ))
        })?;
        let initial = waverunner_raft::ConfState {
            voters: cfg.voters(),
            learners: vec![],
        };
        let boot = recovered.into_bootstrap(initial);
        let persisted_hard = boot.hard_state;
        let mut state = Replicated::new(sm);
        if let Some(s) = &boot.snapshot {
            state
                .restore(s.meta.index, &s.data)
                .map_err(|e| Fatal(format!("cannot restore the snapshot on disk: {e}")))?;
        }
        let rcfg = RaftConfig {
            id: cfg.id,
            election_tick: cfg.election_ticks,
            heartbeat_tick: cfg.heartbeat_ticks,
            read_mode: match cfg.read_mode {
                ReadModeConfig::Lease => ReadMode::Lease,
                _ => ReadMode::ReadIndex,
            },
            seed: wall_ms() ^ (u64::from(std::process::id()) << 32) ^ cfg.id,
            ..RaftConfig::default()
        };
        let raft = Raft::new(rcfg, boot).map_err(|e| Fatal(format!("cannot start Raft: {e}")))?;
        let next_req = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        let role = raft.role();
        let peer_addrs = cfg.peers.iter().map(|p| (p.id, p.raft)).collect();
        let mut replica = Replica {
            cfg,
            raft,
            storage,
            state,
            transport,
            status,
            addresses,
            // Request ids are unique across restarts: an entry proposed by an earlier
            // incarnation must never answer a request of this one.
            next_req,
            requests: HashMap::new(),
            retry: Vec::new(),
            reads_waiting: BTreeSet::new(),
            counters: Counters::default(),
            write_latency: Histogram::default(),
            read_latency: Histogram::default(),
            role,
            persisted_hard,
            latest_hard: persisted_hard,
            admin_pending: Vec::new(),
            peer_addrs,
        };
        replica.sync_transport();
        Ok(replica)
    }

    /// Brings the transport in line with the address book (after a snapshot was restored).
    fn sync_transport(&mut self) {
        for id in self.state.removed.clone() {
            self.forget_peer(id);
        }
        for (id, m) in self.state.members.clone() {
            self.learn_addr(id, m.raft, true);
        }
    }

    /// Talks to `id` at `addr` from now on. Addresses from the log (`authoritative`) replace
    /// what is known; an advertised one is used only for an id known no other way. Removed
    /// members are never talked to again.
    fn learn_addr(&mut self, id: u64, addr: SocketAddr, authoritative: bool) {
        if id == 0 || id == self.cfg.id || self.state.removed.contains(&id) {
            return;
        }
        match self.peer_addrs.get(&id) {
            Some(a) if *a == addr => return,
            Some(_) if !authoritative => return,
            _ => {}
        }
        tracing::info!("node {}: peer {id} is at {addr}", self.cfg.id);
        self.peer_addrs.insert(id, addr);
        self.transport.add_peer(id, addr);
    }

    /// Stops talking to a removed member.
    fn forget_peer(&mut self, id: u64) {
        if self.peer_addrs.remove(&id).is_some() {
            tracing::info!(
                "node {}: stopped talking to removed member {id}",
                self.cfg.id
            );
        }
        self.transport.remove_peer(id);
    }

    /// Runs until shutdown or a fatal error.
    pub fn run(mut self, rx: Receiver<Event>, stop: Arc<AtomicBool>) -> Result<(), Fatal> {
        let tick = Duration::from_millis(self.cfg.tick_ms);
        let mut next_tick = Instant::now() + tick;
        self.drive()?;
        self.publish();
        'outer: loop {
            let now = Instant::now();
            if now >= next_tick {
                // Every tick that elapsed counts, also those missed while the process was
                // stopped or starved: a leader's lease and a follower's election timer follow
                // real time, so a paused leader's lease has expired before it serves again.
                let missed = (now - next_tick).as_nanos() / tick.as_nanos().max(1);
                // Two election timeouts expire every timer; more would only repeat heartbeats.
                let cap = 2 * u64::from(self.cfg.election_ticks) + 1;
                let ticks = (missed as u64 + 1).min(cap);
                self.on_tick(ticks);
                next_tick += tick * (missed as u32).saturating_add(1);
                if next_tick <= now {
                    next_tick = now + tick;
                }
            }
            match rx.recv_timeout(next_tick.saturating_duration_since(Instant::now())) {
                Ok(ev) => {
                    if !self.on_event(ev) {
                        break 'outer;
                    }
                    // Take what else is queued before persisting: one sync for all (group commit).
                    for _ in 0..1_024 {
                        match rx.try_recv() {
                            Ok(ev) => {
                                if !self.on_event(ev) {
                                    break 'outer;
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
            self.drive()?;
        }
        self.drive()?;
        if self.latest_hard != self.persisted_hard {
            let _ = self.storage.set_hard_state(self.latest_hard);
        }
        let _ = self.storage.sync();
        for (_, r) in self.requests.drain() {
            (r.reply)(Err(ClientError::ShuttingDown));
        }
        for p in self.admin_pending.drain(..) {
            (p.reply)(Err(AdminError::ShuttingDown));
        }
        self.publish();
        Ok(())
    }

    fn on_event(&mut self, ev: Event) -> bool {
        match ev {
            Event::Peer(from, f) => self.on_frame(from, f),
            Event::Submit(s) => self.on_submit(s),
            Event::Admin(cmd, reply) => self.on_admin(cmd, reply),
            Event::ClientError => self.counters.client_errors += 1,
            Event::Shutdown => return false,
        }
        true
    }

    fn on_admin(&mut self, cmd: AdminCmd, reply: AdminReply) {
        match cmd {
            AdminCmd::TransferLeader { id } => match self.raft.transfer_leader(id) {
                Ok(()) => {
                    self.counters.membership_changes += 1;
                    tracing::info!("node {}: transferring leadership to {id}", self.cfg.id);
                    reply(Ok(0));
                }
                Err(e) => reply(Err(admin_error(e))),
            },
            AdminCmd::AddLearner { id, raft, client } => {
                let rec = MemberRecord { id, raft, client };
                self.propose_change(ConfChange::AddLearner(id), Some(rec), reply);
            }
            AdminCmd::AddVoter { id, raft, client } => {
                let rec = raft.map(|raft| MemberRecord { id, raft, client });
                self.propose_change(ConfChange::AddVoter(id), rec, reply);
            }
            AdminCmd::Remove { id } => self.propose_change(ConfChange::Remove(id), None, reply),
        }
    }

    /// Proposes a membership change, preceded by the new member's address record when it is
    /// not in the address book yet; answers once the change commits.
    fn propose_change(&mut self, cc: ConfChange, rec: Option<MemberRecord>, reply: AdminReply) {
        let id = cc.node();
        if self.raft.role() != Role::Leader {
            return reply(Err(AdminError::NotLeader {
                leader: self.raft.leader(),
            }));
        }
        if self.state.removed.contains(&id) {
            return reply(Err(AdminError::Invalid(format!(
                "node {id} was removed from the group; a removed id is never reused"
            ))));
        }
        let conf = self.raft.conf_state().clone();
        if conf.apply(cc).is_none() {
            return reply(Err(AdminError::Invalid(format!(
                "{cc:?} does not apply to voters {:?}, learners {:?}",
                conf.voters, conf.learners
            ))));
        }
        let known =
            self.state.members.contains_key(&id) || self.cfg.peers.iter().any(|p| p.id == id);
        if let ConfChange::AddLearner(_) | ConfChange::AddVoter(_) = cc {
            match &rec {
                Some(r) => {
                    let book = MemberAddrs {
                        raft: r.raft,
                        client: r.client,
                    };
                    if self.state.members.get(&id) != Some(&book) {
                        // The address goes first: whoever has the change has the address.
                        if let Err(e) = self.raft.propose(r.encode()) {
                            return reply(Err(admin_error(e)));
                        }
                    }
                    // The leader replicates to the new member from the moment it appends.
                    self.learn_addr(id, r.raft, true);
                }
                None if !known => {
                    return reply(Err(AdminError::Invalid(format!(
                        "the address of node {id} is unknown: give \"raft\" (and \"client\")"
                    ))));
                }
                None => {}
            }
        }
        match self.raft.propose_conf_change(cc) {
            Ok(index) => {
                self.counters.membership_changes += 1;
                tracing::info!(
                    "node {}: proposed {cc:?} at index {index} in term {}",
                    self.cfg.id,
                    self.raft.term()
                );
                self.admin_pending.push(PendingAdmin {
                    index,
                    term: self.raft.term(),
                    reply,
                    deadline: Instant::now()
                        + Duration::from_millis(self.cfg.request_timeout_ms.max(1_000)),
                });
            }
            Err(e) => reply(Err(admin_error(e))),
        }
    }

    /// Answers the admin command waiting for the entry at `e.index`, now committed.
    fn resolve_admin(&mut self, e: &Entry) {
        let Some(i) = self.admin_pending.iter().position(|p| p.index == e.index) else {
            return;
        };
        let p = self.admin_pending.swap_remove(i);
        if p.term == e.term && e.kind == EntryKind::ConfChange {
            (p.reply)(Ok(e.index));
        } else {
            (p.reply)(Err(AdminError::Lost));
        }
    }

    /// A committed membership change: a removed member is not talked to any more.
    fn on_conf_applied(&mut self, cc: ConfChange) {
        tracing::info!(
            "node {}: membership change {cc:?} committed; voters {:?}, learners {:?}",
            self.cfg.id,
            self.raft.conf_state().voters,
            self.raft.conf_state().learners
        );
        if let ConfChange::Remove(id) = cc {
            if id == self.cfg.id {
                tracing::warn!(
                    "node {}: this replica was removed from the group; it stays quiet until stopped",
                    self.cfg.id
                );
            } else {
                self.forget_peer(id);
            }
        }
    }

    fn on_submit(&mut self, s: Submit) {
        self.counters.requests += 1;
        if self.requests.len() >= MAX_IN_FLIGHT {
            self.counters.busy += 1;
            (s.reply)(Err(ClientError::Busy));
            return;
        }
        let read =
            self.cfg.read_mode != ReadModeConfig::Log && self.state.sm.is_read_only(&s.command);
        let id = self.next_req;
        self.next_req += 1;
        let now = Instant::now();
        self.requests.insert(
            id,
            Request {
                client: s.client,
                seq: s.seq,
                command: s.command,
                read,
                stage: Stage::Routing,
                reply: s.reply,
                started: now,
                deadline: now + Duration::from_millis(self.cfg.request_timeout_ms),
            },
        );
        self.route(id);
    }

    /// Sends a request on its way: a read to ReadIndex, a write into the log (leader) or to
    /// the leader (follower); without a leader it waits for the next tick.
    fn route(&mut self, id: u64) {
        let Some(r) = self.requests.get(&id) else {
            return;
        };
        debug_assert_eq!(r.stage, Stage::Routing);
        if r.read {
            match self.raft.read_index(id.to_le_bytes().to_vec()) {
                Ok(()) => self.set_stage(id, Stage::Reading),
                Err(
                    ReadError::NoLeader
                    | ReadError::Retry
                    | ReadError::NotCommittedInTerm
                    | ReadError::Unavailable
                    | ReadError::DataPlaneEnabled,
                ) => self.retry.push(id),
                Err(e) => self.fail(id, ClientError::Unavailable(e.to_string())),
            }
            return;
        }
        if self.raft.role() == Role::Leader {
            let env = Envelope {
                origin: self.cfg.id,
                req: id,
                client: r.client,
                seq: r.seq,
                now_ms: wall_ms(),
                command: r.command.clone(),
            };
            match self.raft.propose(env.encode()) {
                Ok(_) => {
                    self.counters.proposals += 1;
                    self.set_stage(id, Stage::Proposed);
                }
                Err(ProposeError::Retry | ProposeError::TransferInProgress) => self.retry.push(id),
                Err(ProposeError::NotLeader { .. }) => self.retry.push(id),
                Err(e) => self.fail(id, ClientError::Unavailable(e.to_string())),
            }
            return;
        }
        let leader = self.raft.leader();
        if leader != 0 && leader != self.cfg.id {
            let f = Frame::Forward {
                req: id,
                client: r.client,
                seq: r.seq,
                command: r.command.clone(),
            };
            self.transport.send(leader, &f);
            self.counters.forwarded += 1;
            self.set_stage(id, Stage::Forwarded);
        } else {
            self.retry.push(id);
        }
    }

    fn set_stage(&mut self, id: u64, stage: Stage) {
        if let Some(r) = self.requests.get_mut(&id) {
            r.stage = stage;
        }
    }

    fn fail(&mut self, id: u64, e: ClientError) {
        if let Some(r) = self.requests.remove(&id) {
            if e == ClientError::Timeout {
                self.counters.timeouts += 1;
            }
            (r.reply)(Err(e));
        }
    }

    fn answer(&mut self, id: u64, result: Vec<u8>) {
        if let Some(r) = self.requests.remove(&id) {
            let us = r.started.elapsed().as_micros() as u64;
            if r.read {
                self.read_latency.observe(us);
            } else {
                self.write_latency.observe(us);
            }
            self.counters.answered += 1;
            (r.reply)(Ok(result));
        }
    }

    fn on_frame(&mut self, from: u64, f: Frame) {
        match f {
            Frame::Raft(m) => {
                if let Err(e) = self.raft.step(m) {
                    tracing::debug!("rejected a message from {from}: {e}");
                }
            }
            Frame::Forward {
                req,
                client,
                seq,
                command,
            } => {
                let proposed = self.raft.role() == Role::Leader && {
                    let env = Envelope {
                        origin: from,
                        req,
                        client,
                        seq,
                        now_ms: wall_ms(),
                        command,
                    };
                    self.raft.propose(env.encode()).is_ok()
                };
                if proposed {
                    self.counters.proposals += 1;
                } else {
                    // Not in the log: the origin may route it again without risk of a double apply.
                    let leader = self.raft.leader();
                    self.transport
                        .send(from, &Frame::ForwardNack { req, leader });
                }
            }
            Frame::ForwardNack { req, .. } => {
                if self
                    .requests
                    .get(&req)
                    .is_some_and(|r| r.stage == Stage::Forwarded)
                {
                    self.set_stage(req, Stage::Routing);
                    self.retry.push(req);
                }
            }
            Frame::Advertise { raft } => self.learn_addr(from, raft, false),
            Frame::Hello { .. } | Frame::Chunk { .. } => {}
        }
    }

    fn on_tick(&mut self, ticks: u64) {
        debug_assert!(ticks >= 1);
        for _ in 0..ticks {
            self.raft.tick();
        }
        let now = Instant::now();
        let expired: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut k = 0;
        while k < self.admin_pending.len() {
            if self.admin_pending[k].deadline <= now {
                let p = self.admin_pending.swap_remove(k);
                (p.reply)(Err(AdminError::Timeout));
            } else {
                k += 1;
            }
        }
        for id in expired {
            let routing = self
                .requests
                .get(&id)
                .is_some_and(|r| r.stage == Stage::Routing);
            if routing {
                // Never proposed nor forwarded: certainly not applied.
                self.fail(id, ClientError::Unavailable("no leader".into()));
            } else {
                self.fail(id, ClientError::Timeout);
            }
        }
        self.reads_waiting
            .retain(|(_, id)| self.requests.contains_key(id));
        for id in std::mem::take(&mut self.retry) {
            if self
                .requests
                .get(&id)
                .is_some_and(|r| r.stage == Stage::Routing)
            {
                self.route(id);
            }
        }
        self.publish();
    }

    /// Acts on every ready batch: persist, send, apply, answer.
    fn drive(&mut self) -> Result<(), Fatal> {
        while self.raft.has_ready() {
            let rd = self.raft.ready();
            self.handle_ready(rd)?;
            self.raft.advance();
            self.serve_reads();
            self.maybe_compact()?;
        }
        Ok(())
    }

    fn handle_ready(&mut self, rd: Ready) -> Result<(), Fatal> {
        let storage_err = |e: waverunner_storage::StorageError| Fatal(format!("storage: {e}"));
        if let Some(ss) = rd.soft_state {
            if ss.role != self.role {
                tracing::info!(
                    "node {} is now {:?} in term {} (leader {})",
                    self.cfg.id,
                    ss.role,
                    self.raft.term(),
                    ss.leader
                );
                if ss.role == Role::Leader {
                    self.counters.leader_elected += 1;
                }
                if self.role == Role::Recovering {
                    // Caught up from a leader: from now on a restart keeps this log.
                    self.storage
                        .mark_caught_up()
                        .map_err(|e| Fatal(format!("storage: {e}")))?;
                }
                if matches!(ss.role, Role::Candidate | Role::PreCandidate)
                    && !matches!(self.role, Role::Candidate | Role::PreCandidate)
                {
                    self.counters.elections += 1;
                }
                self.role = ss.role;
            }
        }
        if let Some(cmd) = &rd.dataplane {
            // No data plane is built yet: the core is configured without one.
            return Err(Fatal(format!("unexpected data-plane command {cmd:?}")));
        }
        // A leader may send its appends before its own disk write finishes (Raft §10.2.1):
        // the core counts the leader toward a commit only for entries it persisted. Anything
        // that depends on a new term or vote, and every follower's acknowledgement, goes out
        // only after the sync below.
        let term_vote = |hs: &HardState| (hs.term, hs.vote);
        let early = self.raft.role() == Role::Leader
            && rd.snapshot.is_none()
            && rd
                .hard_state
                .is_none_or(|hs| term_vote(&hs) == term_vote(&self.persisted_hard));
        let mut messages = rd.messages;
        if early {
            for m in messages.drain(..) {
                let to = m.to;
                self.transport.send(to, &Frame::Raft(m));
            }
        }
        if let Some(snap) = &rd.snapshot {
            self.storage.save_snapshot(snap).map_err(storage_err)?;
            self.state
                .restore(snap.meta.index, &snap.data)
                .map_err(|e| Fatal(format!("cannot install the leader's snapshot: {e}")))?;
            self.counters.snapshots_installed += 1;
            tracing::info!("installed a snapshot at index {}", snap.meta.index);
            self.sync_transport();
        }
        if !rd.entries.is_empty() {
            self.storage.append(&rd.entries).map_err(storage_err)?;
        }
        if let Some(hs) = rd.hard_state {
            // Term and vote must be durable before any message that depends on them. The
            // commit index need not be (a restarted replica learns it again from a leader), so
            // it is written only along with them and at shutdown: one sync per batch, not two.
            if (hs.term, hs.vote) != (self.persisted_hard.term, self.persisted_hard.vote) {
                self.storage.set_hard_state(hs).map_err(storage_err)?;
                self.persisted_hard = hs;
            }
            self.latest_hard = hs;
        }
        if self.storage.sync().map_err(storage_err)? > 0 {
            self.counters.fsyncs += 1;
        }
        for m in messages {
            let to = m.to;
            self.transport.send(to, &Frame::Raft(m));
        }
        for e in &rd.committed_entries {
            if e.index <= self.state.applied {
                continue;
            }
            self.counters.applied_entries += 1;
            if !self.admin_pending.is_empty() {
                self.resolve_admin(e);
            }
            if e.kind == EntryKind::ConfChange {
                match ConfChange::decode(&e.data) {
                    Some(cc) => {
                        self.state.apply_conf(e.index, cc);
                        self.on_conf_applied(cc);
                    }
                    None => self.state.skip(e.index),
                }
                continue;
            }
            if e.data.is_empty() {
                self.state.skip(e.index);
                continue;
            }
            let env = match EntryData::decode(&e.data) {
                Ok(EntryData::Command(env)) => env,
                Ok(EntryData::Member(rec)) => {
                    self.state.apply_member(e.index, &rec);
                    self.learn_addr(rec.id, rec.raft, true);
                    continue;
                }
                Err(err) => {
                    // Only replicas write entries; a bad one is a bug, but it must not wedge us.
                    tracing::error!("entry {} is not an envelope: {err}", e.index);
                    self.state.skip(e.index);
                    continue;
                }
            };
            let outcome = self.state.apply(e.index, &env);
            if env.origin != self.cfg.id {
                continue;
            }
            let mine = self
                .requests
                .get(&env.req)
                .is_some_and(|r| r.client == env.client && r.seq == env.seq && !r.read);
            if !mine {
                continue;
            }
            match outcome {
                Outcome::Applied(r) => self.answer(env.req, r),
                Outcome::Duplicate(r) => {
                    self.counters.duplicates += 1;
                    self.answer(env.req, r);
                }
                Outcome::Stale => self.fail(env.req, ClientError::Stale),
            }
        }
        for rs in rd.read_states {
            let Ok(b) = <[u8; 8]>::try_from(rs.context.as_slice()) else {
                continue;
            };
            let id = u64::from_le_bytes(b);
            if self
                .requests
                .get(&id)
                .is_some_and(|r| r.stage == Stage::Reading)
            {
                self.reads_waiting.insert((rs.index, id));
            }
        }
        Ok(())
    }

    fn serve_reads(&mut self) {
        while let Some(&(index, id)) = self.reads_waiting.first() {
            if index > self.state.applied {
                break;
            }
            self.reads_waiting.pop_first();
            let Some(r) = self.requests.get(&id) else {
                continue;
            };
            let result = self
                .state
                .sm
                .query(wall_ms().max(self.state.now_ms), &r.command);
            self.answer(id, result);
        }
    }

    fn maybe_compact(&mut self) -> Result<(), Fatal> {
        let applied = self.state.applied;
        if applied < self.raft.first_index() + self.cfg.snapshot_entries {
            return Ok(());
        }
        let data = self.state.snapshot();
        if self.raft.compact(applied, data).is_ok() {
            let snap = self.raft.snapshot().expect("just compacted").clone();
            self.storage
                .save_snapshot(&snap)
                .map_err(|e| Fatal(format!("storage: {e}")))?;
            self.counters.snapshots_taken += 1;
        }
        Ok(())
    }

    fn publish(&mut self) {
        let t = &self.transport.stats;
        self.counters.frames_rejected = t.frames_rejected.load(Ordering::Relaxed);
        self.counters.frames_dropped = t.frames_dropped.load(Ordering::Relaxed);
        self.counters.messages_rejected = self.raft.counters().messages_rejected;
        let conf = self.raft.conf_state().clone();
        let members = self.member_status();
        let s = Status {
            id: self.cfg.id,
            role: role_name(self.raft.role()).into(),
            term: self.raft.term(),
            leader: self.raft.leader(),
            commit_index: self.raft.commit_index(),
            applied_index: self.state.applied,
            last_index: self.raft.last_index(),
            first_index: self.raft.first_index(),
            voters: conf.voters,
            learners: conf.learners,
            members,
            dataplane: "off".into(),
            dataplane_enabled: false,
            fastpath: Default::default(),
            replication_latency_ns: Vec::new(),
            durability: match self.cfg.durability {
                DurabilityMode::Memory => "memory",
                DurabilityMode::Fsync => "fsync",
            }
            .into(),
            read_mode: match self.cfg.read_mode {
                ReadModeConfig::Log => "log",
                ReadModeConfig::ReadIndex => "read_index",
                ReadModeConfig::Lease => "lease",
            }
            .into(),
            addresses: self.addresses.clone(),
            keys: self.state.sm.size(),
            digest: self.state.sm.digest(),
            counters: self.counters.clone(),
            write_latency: self.write_latency.clone(),
            read_latency: self.read_latency.clone(),
        };
        *self.status.lock().expect("status") = s;
    }
}

impl<S: StateMachine> Replica<S> {
    fn member_status(&self) -> Vec<MemberStatus> {
        let conf = self.raft.conf_state();
        let leader = self.raft.role() == Role::Leader;
        let mut out = Vec::new();
        for (id, role) in conf
            .voters
            .iter()
            .map(|v| (*v, "voter"))
            .chain(conf.learners.iter().map(|l| (*l, "learner")))
        {
            let book = self.state.members.get(&id);
            let peer = self.cfg.peers.iter().find(|p| p.id == id);
            let (raft, client) = if id == self.cfg.id {
                (Some(self.cfg.listen.raft), Some(self.cfg.listen.client))
            } else {
                (
                    book.map(|b| b.raft)
                        .or_else(|| self.peer_addrs.get(&id).copied()),
                    book.and_then(|b| b.client)
                        .or_else(|| peer.and_then(|p| p.client)),
                )
            };
            let match_index = if !leader {
                0
            } else if id == self.cfg.id {
                self.raft.last_index()
            } else {
                self.raft.progress(id).map_or(0, |(m, _)| m)
            };
            out.push(MemberStatus {
                id,
                role: role.into(),
                raft: raft.map(|a| a.to_string()).unwrap_or_default(),
                client: client.map(|a| a.to_string()).unwrap_or_default(),
                match_index,
            });
        }
        out.sort_by_key(|m| m.id);
        out
    }
}

fn admin_error(e: ProposeError) -> AdminError {
    match e {
        ProposeError::NotLeader { leader } => AdminError::NotLeader { leader },
        ProposeError::Retry => AdminError::Retry("the data plane is being handed over".into()),
        ProposeError::TransferInProgress => {
            AdminError::Retry("a leader transfer is in progress".into())
        }
        ProposeError::ConfChangePending => AdminError::ChangePending,
        ProposeError::NotCommittedInTerm => AdminError::NotCommittedInTerm,
        ProposeError::InvalidConfChange => {
            AdminError::Invalid("the change does not apply to the configuration".into())
        }
        ProposeError::WouldLoseQuorum => AdminError::WouldLoseQuorum,
        ProposeError::InvalidTransferTarget => AdminError::Invalid(
            "the transfer target is not a voter that can lead (caught up, not recovering)".into(),
        ),
    }
}

/// The name of a role in `/status`.
pub fn role_name(r: Role) -> &'static str {
    match r {
        Role::Follower => "follower",
        Role::PreCandidate => "pre_candidate",
        Role::Candidate => "candidate",
        Role::Leader => "leader",
        Role::Recovering => "recovering",
    }
}
