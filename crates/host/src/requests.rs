//! Client requests at one replica, from the moment a front-end submits one until it is
//! answered: a write goes into the log (leader) or to the leader (follower: over the replica
//! transport, also while the data plane replicates); a read goes to ReadIndex
//! and waits for the apply ([`crate::reads`]), or through the log when the leader refused its
//! ReadIndex; with the data plane on, reads are batched behind one read through the log
//! ([`ReadBatch`]); without a leader a request waits and is routed again
//! every tick until its deadline. The origin replica answers its client when it applies the
//! entry; a request forwarded to it by another replica is proposed as is, or refused with a
//! NACK that lets its origin route it again (it was certainly not proposed).
//!
//! Requests are tokens of the caller's type `T` (the node: a reply callback; the simulator:
//! the id its checker knows). What the caller must carry out comes back as [`Effect`]s from
//! [`Requests::take_effects`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use waverunner_dataplane::DataPlane;
use waverunner_fastpath::payload::{Envelope, EnvelopeRef};
use waverunner_raft::{DataPlaneState, Proposal, ProposeError, Raft, ReadError, ReadState, Role};

use crate::dataplane::DataPlaneHost;
use crate::reads::{ReadBatch, ReadQueue};
use crate::Time;

/// Client requests in flight at one replica at most; beyond it requests are refused (busy).
pub const MAX_IN_FLIGHT: usize = 4_096;

/// With a data plane configured, a ReadIndex read unanswered after this long goes through the
/// log instead (a leader that cannot answer refuses at once; this covers lost messages).
pub const READ_FALLBACK: Duration = Duration::from_millis(100);

/// A large request's deadline is later by a second per this many bytes: a 64 MiB value
/// crosses the network twice and is copied and hashed on every replica, which a busy
/// two-core machine took over two seconds to do.
const LARGE_REQUEST_BYTES_PER_SEC: u64 = 32 << 20;

/// How long a request of `len` bytes may take before it fails (outcome unknown).
pub fn request_deadline(timeout: Duration, len: usize) -> Duration {
    timeout + Duration::from_millis(len as u64 * 1_000 / LARGE_REQUEST_BYTES_PER_SEC)
}

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
    /// The state holds more than `maxmemory` and the command may grow it (never applied).
    OutOfMemory,
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
            ClientError::OutOfMemory => {
                write!(f, "command not allowed when used memory > 'maxmemory'")
            }
        }
    }
}

impl std::error::Error for ClientError {}

/// What applying an entry produced for its client; `R`, the state machine's result as the
/// replica hands it on (its encoding, by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<R = Vec<u8>> {
    /// Applied now; the state machine's result.
    Applied(R),
    /// A retry of the session's last command: its remembered result, not applied again.
    Duplicate(R),
    /// An older command of the session than its last one: not applied.
    Stale,
}

impl<R> Outcome<R> {
    /// The same outcome with its result changed by `f`.
    pub fn map<S>(self, f: impl FnOnce(R) -> S) -> Outcome<S> {
        match self {
            Outcome::Applied(r) => Outcome::Applied(f(r)),
            Outcome::Duplicate(r) => Outcome::Duplicate(f(r)),
            Outcome::Stale => Outcome::Stale,
        }
    }
}

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for a leader (retried every tick).
    Routing,
    /// Proposed by this replica as leader.
    Proposed,
    /// Forwarded to the leader.
    Forwarded,
    /// Waiting for a ReadIndex answer or for the applied index to reach it.
    Reading,
    /// Data plane on: waiting for a read through the log to carry it ([`ReadBatch`]).
    Batched,
}

struct Request<T> {
    client: u64,
    seq: u64,
    command: Vec<u8>,
    /// Served by ReadIndex (false: through the log).
    read: bool,
    stage: Stage,
    token: T,
    started: Time,
    deadline: Time,
}

/// What the caller carries out.
#[derive(Debug, PartialEq, Eq)]
pub enum Effect<T, R = Vec<u8>> {
    /// Send request `req` to the leader `to` over the replica transport.
    Forward {
        /// The leader.
        to: u64,
        /// This replica's request id (the leader's NACK names it).
        req: u64,
        /// Client session.
        client: u64,
        /// Sequence number in the session.
        seq: u64,
        /// The state-machine command.
        command: Vec<u8>,
    },
    /// Tell replica `to` that its forwarded request `req` was not proposed (it may route it
    /// again: it was certainly not applied).
    Nack {
        /// The request's origin.
        to: u64,
        /// The origin's request id.
        req: u64,
        /// The leader as this replica knows it (0: none).
        leader: u64,
    },
    /// A request was appended to the leader's software log at this index.
    Appended(u64),
    /// A request is answered.
    Done {
        /// The caller's token.
        token: T,
        /// The result, or why it failed.
        result: Result<R, ClientError>,
        /// It was served as a read (ReadIndex), not through the log.
        read: bool,
        /// From submission to answer.
        latency: Duration,
    },
}

/// Counters of the requests at this replica.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Requests submitted.
    pub requests: u64,
    /// Refused because [`MAX_IN_FLIGHT`] were in flight.
    pub busy: u64,
    /// Proposed to the log by this replica as leader (its own and forwarded ones).
    pub proposals: u64,
    /// Proposals the leader's core refused busy (its bound on uncommitted entries, or on
    /// entries the data plane ordered and did not commit) and retried at the next tick.
    pub held_back: u64,
    /// Forwarded to the leader.
    pub forwarded: u64,
    /// Reads whose ReadIndex the leader refused, sent through the log instead.
    pub reads_refused: u64,
    /// Reads served by another read's entry (data plane on), without one of their own.
    pub reads_batched: u64,
    /// Answered successfully.
    pub answered: u64,
    /// Retries answered from the session table.
    pub duplicates: u64,
    /// Timed out (outcome unknown).
    pub timeouts: u64,
}

/// What routing needs of the replica: its core, its data plane's host, the time.
pub struct Cx<'a, P: DataPlane> {
    /// The Raft core.
    pub raft: &'a mut Raft,
    /// The data plane and its host, if one is configured.
    pub dp: Option<&'a mut DataPlaneHost<P>>,
    /// The time of the event.
    pub now: Time,
    /// The leader's clock for what it proposes (ms since the Unix epoch; the simulator's
    /// clock there).
    pub wall_ms: u64,
}

/// The requests of one replica (bounded by [`MAX_IN_FLIGHT`]): `T`, the caller's token for
/// each; `R`, the results they are answered with.
pub struct Requests<T, R = Vec<u8>> {
    /// This replica.
    me: u64,
    /// A request's deadline before its size is counted.
    timeout: Duration,
    /// The next request id (never 0: request 0 is the leader's upkeep, which nobody waits
    /// for).
    next: u64,
    /// The requests in flight by id (bounded by [`MAX_IN_FLIGHT`]). Ids grow with the time
    /// of submission, so the oldest come first.
    table: BTreeMap<u64, Request<T>>,
    /// The requests by deadline (each request in `table` once): expiry costs what expires,
    /// not a scan of every request at every tick.
    deadlines: BTreeSet<(Time, u64)>,
    /// Requests waiting for a leader (routed again at the next tick).
    retry: Vec<u64>,
    /// Reads whose ReadIndex the leader refused: routed through the log right after the ready
    /// that carried the refusal.
    refused: Vec<u64>,
    /// Reads given a read index, waiting for the apply.
    waiting: ReadQueue,
    /// Reads batched behind one read through the log (data plane on).
    batch: ReadBatch,
    /// When the batch's carrier was last sent.
    carrier_sent: Time,
    effects: Vec<Effect<T, R>>,
    /// Counters.
    pub stats: RequestStats,
}

impl<T, R> Requests<T, R> {
    /// The requests of replica `me`, whose ids start at `first_id` (distinct per incarnation:
    /// a NACK meant for an earlier one must not match a new request); each may take `timeout`.
    pub fn new(me: u64, first_id: u64, timeout: Duration) -> Requests<T, R> {
        Requests {
            me,
            timeout,
            next: first_id.max(1),
            table: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            retry: Vec::new(),
            refused: Vec::new(),
            waiting: ReadQueue::default(),
            batch: ReadBatch::default(),
            carrier_sent: Time::ZERO,
            effects: Vec::new(),
            stats: RequestStats::default(),
        }
    }

    /// Requests in flight.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether none is in flight.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// What the caller must carry out now, in order.
    pub fn take_effects(&mut self) -> Vec<Effect<T, R>> {
        std::mem::take(&mut self.effects)
    }

    /// A client request: `read` if the caller may serve it without the log (a read-only
    /// command and a read mode that allows it). Refused as busy beyond [`MAX_IN_FLIGHT`].
    pub fn submit<P: DataPlane>(
        &mut self,
        cx: &mut Cx<'_, P>,
        client: u64,
        seq: u64,
        command: Vec<u8>,
        read: bool,
        token: T,
    ) {
        self.stats.requests += 1;
        if self.table.len() >= MAX_IN_FLIGHT {
            self.stats.busy += 1;
            self.effects.push(Effect::Done {
                token,
                result: Err(ClientError::Busy),
                read,
                latency: Duration::ZERO,
            });
            return;
        }
        let id = self.next;
        self.next += 1;
        if let Some((_, last)) = self.table.last_key_value() {
            assert!(
                last.started <= cx.now,
                "time went back: {:?} after {:?}",
                cx.now,
                last.started
            );
        }
        let deadline = cx.now + request_deadline(self.timeout, command.len());
        self.deadlines.insert((deadline, id));
        self.table.insert(
            id,
            Request {
                client,
                seq,
                command,
                read,
                stage: Stage::Routing,
                token,
                started: cx.now,
                deadline,
            },
        );
        self.route(id, cx);
    }

    /// Sends request `id` on its way: a read to ReadIndex, a write into the log (leader) or
    /// to the leader (follower); without a leader it waits for the next tick.
    fn route<P: DataPlane>(&mut self, id: u64, cx: &mut Cx<'_, P>) {
        let Some(r) = self.table.get_mut(&id) else {
            return;
        };
        assert_eq!(r.stage, Stage::Routing, "request {id} routed twice");
        let dp_off = matches!(cx.raft.dataplane_state(), DataPlaneState::Off);
        if r.read && dp_off {
            match cx.raft.read_index(id.to_le_bytes().to_vec()) {
                Ok(()) => r.stage = Stage::Reading,
                Err(
                    ReadError::NoLeader
                    | ReadError::Retry
                    | ReadError::NotCommittedInTerm
                    | ReadError::Unavailable
                    | ReadError::DataPlaneEnabled,
                ) => self.retry.push(id),
                Err(e) => self.fail(id, ClientError::Unavailable(e.to_string()), cx.now),
            }
            return;
        }
        // With the data plane on (or handing over), ReadIndex would need software heartbeats
        // the data plane replaced: a read goes through the log, one for all reads that
        // arrived before it was sent (the paper sends each).
        if r.read {
            if !self.batch.arrive(id) {
                r.stage = Stage::Batched;
                return;
            }
            self.carrier_sent = cx.now;
        }
        r.read = false;
        if cx.raft.role() == Role::Leader {
            let env = EnvelopeRef {
                origin: self.me,
                req: id,
                client: r.client,
                seq: r.seq,
                now_ms: cx.wall_ms,
                command: &r.command,
            };
            match cx.raft.propose(env.encode()) {
                Ok(p) => {
                    r.stage = Stage::Proposed;
                    // In the log now; nothing routes a proposed request again but a
                    // carrier of reads, if its entry is lost.
                    if id != self.batch.carrier() {
                        r.command = Vec::new();
                    }
                    self.stats.proposals += 1;
                    if let Proposal::Appended(index) = p {
                        self.effects.push(Effect::Appended(index));
                    }
                }
                Err(ProposeError::Busy) => {
                    self.stats.held_back += 1;
                    self.retry.push(id);
                }
                Err(
                    ProposeError::Retry
                    | ProposeError::TransferInProgress
                    | ProposeError::NotLeader { .. },
                ) => self.retry.push(id),
                Err(e) => self.fail(id, ClientError::Unavailable(e.to_string()), cx.now),
            }
            return;
        }
        let leader = cx.raft.leader();
        if leader == 0 || leader == self.me {
            self.retry.push(id);
            return;
        }
        // A follower forwards a write over the replica transport, also with the data plane
        // on: the leader proposes it (its data plane then replicates it) or NACKs it (not
        // proposed: busy, no longer leader), and the request is routed again. Over the fast
        // path, a datagram the leader's data plane shed or lost ended in a timeout (outcome
        // unknown), since a busy reply cannot tell a shed copy from an ordered duplicate.
        self.effects.push(Effect::Forward {
            to: leader,
            req: id,
            client: r.client,
            seq: r.seq,
            command: r.command.clone(),
        });
        r.stage = Stage::Forwarded;
        self.stats.forwarded += 1;
    }

    /// Proposes a request replica `env.origin` forwarded (over the transport or the fast
    /// path), stamped with this leader's clock; its origin answers the client when it applies
    /// the entry. Not proposed (not leader, or a hand-off is running): a NACK tells the origin
    /// it may route the request again without risk of a double apply.
    pub fn propose_forwarded<P: DataPlane>(&mut self, env: Envelope, cx: &mut Cx<'_, P>) {
        if env.origin == 0 || env.origin == self.me {
            return; // not a replica's request, or our own come back
        }
        let (origin, req) = (env.origin, env.req);
        let env = Envelope {
            now_ms: cx.wall_ms,
            ..env
        };
        let proposed = cx.raft.role() == Role::Leader
            && match cx.raft.propose(env.encode()) {
                Ok(Proposal::Appended(index)) => {
                    self.effects.push(Effect::Appended(index));
                    true
                }
                Ok(Proposal::ViaDataPlane) => true,
                Err(_) => false,
            };
        if proposed {
            self.stats.proposals += 1;
        } else {
            self.effects.push(Effect::Nack {
                to: origin,
                req,
                leader: cx.raft.leader(),
            });
        }
    }

    /// The leader did not propose forwarded request `req`: route it again.
    pub fn on_nack(&mut self, req: u64) {
        if let Some(r) = self.table.get_mut(&req) {
            if r.stage == Stage::Forwarded {
                r.stage = Stage::Routing;
                self.retry.push(req);
            }
        }
    }

    /// A tick: requests past their deadline fail, reads whose ReadIndex went unanswered too
    /// long go through the log (with a data plane configured), and requests waiting for a
    /// leader are routed again.
    pub fn on_tick<P: DataPlane>(&mut self, cx: &mut Cx<'_, P>) {
        let now = cx.now;
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            let stage = self
                .table
                .get(&id)
                .expect("a deadline of a request in flight")
                .stage;
            let e = if stage == Stage::Routing {
                // Never proposed nor forwarded: certainly not applied.
                ClientError::Unavailable("no leader".into())
            } else {
                ClientError::Timeout
            };
            self.fail(id, e, now);
        }
        // A ReadIndex or its answer can be lost (a dropped frame, a leader change); with a
        // data plane, leadership changes hands often, so such a read goes through the log
        // after a while instead of waiting for its deadline. A read is safe to send twice.
        // Oldest first: the scan stops at the first request too young to fall back.
        if cx.dp.is_some() {
            for (&id, r) in self.table.iter_mut() {
                if now - r.started <= READ_FALLBACK {
                    break;
                }
                if r.stage == Stage::Reading {
                    r.read = false;
                    r.stage = Stage::Routing;
                    self.retry.push(id);
                }
            }
        }
        // A carrier's entry can be lost too (a dropped datagram, a truncated proposal): it
        // is sent again after a while (a read is safe to send twice).
        let carrier = self.batch.carrier();
        if carrier != 0 && now.saturating_sub(self.carrier_sent) > READ_FALLBACK {
            if let Some(r) = self.table.get_mut(&carrier) {
                if matches!(r.stage, Stage::Proposed | Stage::Forwarded) {
                    r.stage = Stage::Routing;
                    self.carrier_sent = now;
                    self.retry.push(carrier);
                }
            }
        }
        let table = &self.table;
        self.waiting
            .retain(|id| table.get(&id).is_some_and(|r| r.stage == Stage::Reading));
        let retry = std::mem::take(&mut self.retry);
        self.route_waiting(retry, cx);
        self.next_batch(cx);
    }

    /// With no carrier in flight, sends the reads that wait for one: through the log as one
    /// batch (data plane on), or each to ReadIndex (off again).
    fn next_batch<P: DataPlane>(&mut self, cx: &mut Cx<'_, P>) {
        let mut ids = self.batch.take_waiting();
        ids.retain(|id| {
            self.table
                .get(id)
                .is_some_and(|r| r.stage == Stage::Batched)
        });
        if ids.is_empty() {
            return;
        }
        for id in &ids {
            self.table.get_mut(id).expect("kept").stage = Stage::Routing;
        }
        if matches!(cx.raft.dataplane_state(), DataPlaneState::Off) {
            self.route_waiting(ids, cx);
            return;
        }
        let carrier = ids.remove(0);
        for id in &ids {
            self.table.get_mut(id).expect("kept").stage = Stage::Batched;
        }
        self.batch.form(carrier, ids);
        self.carrier_sent = cx.now;
        self.table.get_mut(&carrier).expect("kept").read = false;
        self.route(carrier, cx);
    }

    /// Routes those of `ids` that still wait for it.
    fn route_waiting<P: DataPlane>(&mut self, ids: Vec<u64>, cx: &mut Cx<'_, P>) {
        for id in ids {
            if self
                .table
                .get(&id)
                .is_some_and(|r| r.stage == Stage::Routing)
            {
                self.route(id, cx);
            }
        }
    }

    /// The core's soft state changed (or may have): a ReadIndex round dies with the
    /// leadership it was confirming (the core drops it), and one sent to a former leader goes
    /// unanswered, so reads not yet given an index are routed again rather than left to their
    /// deadline. Reads already given one only wait for the apply. A read is safe to send twice.
    pub fn on_soft_state(&mut self) {
        let waiting: HashSet<u64> = self.waiting.ids().collect();
        for (&id, r) in self.table.iter_mut() {
            if r.stage == Stage::Reading && !waiting.contains(&id) {
                r.stage = Stage::Routing;
                self.retry.push(id);
            }
        }
    }

    /// The ReadIndex answers of a ready batch: refused reads go through the log (once the
    /// batch is handled: [`Requests::after_ready`]); granted ones wait for the apply.
    pub fn on_read_states(&mut self, refusals: Vec<Vec<u8>>, states: Vec<ReadState>) {
        let id_of = |c: &[u8]| <[u8; 8]>::try_from(c).ok().map(u64::from_le_bytes);
        for context in refusals {
            let Some(id) = id_of(&context) else { continue };
            if let Some(r) = self.table.get_mut(&id) {
                if r.stage == Stage::Reading {
                    // Sent once: its ReadIndex was refused, not lost.
                    r.read = false;
                    r.stage = Stage::Routing;
                    self.stats.reads_refused += 1;
                    self.refused.push(id);
                }
            }
        }
        for rs in states {
            let Some(id) = id_of(&rs.context) else {
                continue;
            };
            if self
                .table
                .get(&id)
                .is_some_and(|r| r.stage == Stage::Reading)
            {
                self.waiting.wait(rs.index, id);
            }
        }
    }

    /// After a ready batch: the reads the leader refused go through the log.
    pub fn after_ready<P: DataPlane>(&mut self, cx: &mut Cx<'_, P>) {
        let refused = std::mem::take(&mut self.refused);
        self.route_waiting(refused, cx);
        self.next_batch(cx);
    }

    /// The reads that `applied` makes servable, as (read index, request id, command), in the
    /// order of their read index; the caller queries its state and calls
    /// [`Requests::answer`].
    pub fn reads_ready(&mut self, applied: u64) -> Vec<(u64, u64)> {
        self.waiting
            .ready(applied)
            .into_iter()
            .filter(|(_, id)| {
                self.table
                    .get(id)
                    .is_some_and(|r| r.stage == Stage::Reading)
            })
            .collect()
    }

    /// The command of request `id`.
    pub fn command(&self, id: u64) -> Option<&[u8]> {
        self.table.get(&id).map(|r| r.command.as_slice())
    }

    /// The token of request `id`.
    pub fn token(&self, id: u64) -> Option<&T> {
        self.table.get(&id).map(|r| &r.token)
    }

    /// The token of request `id`, to change.
    pub fn token_mut(&mut self, id: u64) -> Option<&mut T> {
        self.table.get_mut(&id).map(|r| &mut r.token)
    }

    /// Answers request `id` with `result`.
    pub fn answer(&mut self, id: u64, result: R, now: Time) {
        if let Some(r) = self.remove(id) {
            self.stats.answered += 1;
            self.effects.push(Effect::Done {
                token: r.token,
                result: Ok(result),
                read: r.read,
                latency: now.saturating_sub(r.started),
            });
        }
    }

    /// Fails request `id`.
    pub fn fail(&mut self, id: u64, e: ClientError, now: Time) {
        if let Some(r) = self.remove(id) {
            if e == ClientError::Timeout {
                self.stats.timeouts += 1;
            }
            self.effects.push(Effect::Done {
                token: r.token,
                result: Err(e),
                read: r.read,
                latency: now.saturating_sub(r.started),
            });
        }
    }

    /// Request `id`, out of the table and the deadlines.
    fn remove(&mut self, id: u64) -> Option<Request<T>> {
        let r = self.table.remove(&id)?;
        if id == self.batch.carrier() {
            // Not applied (an applied carrier hands its riders over first).
            self.batch.lost();
        }
        assert!(
            self.deadlines.remove(&(r.deadline, id)),
            "request {id} had no deadline"
        );
        Some(r)
    }

    /// Fails every request (the replica stops).
    pub fn fail_all(&mut self, e: ClientError, now: Time) {
        let ids: Vec<u64> = self.table.keys().copied().collect();
        for id in ids {
            self.fail(id, e.clone(), now);
        }
        self.retry.clear();
        self.refused.clear();
        self.waiting.clear();
        self.batch.clear();
    }

    /// Entry `index` is applied by `apply`, given the token of the request it carries
    /// (`origin`, request `req`, session `client`/`seq`) if it is this replica's own write in
    /// flight. If it is, answers that client with the outcome; if it carried a batch of reads,
    /// they are served from the state at `index` on ([`Requests::reads_ready`]).
    #[allow(clippy::too_many_arguments)]
    pub fn on_applied(
        &mut self,
        index: u64,
        origin: u64,
        req: u64,
        client: u64,
        seq: u64,
        apply: impl FnOnce(Option<&mut T>) -> Outcome<R>,
        now: Time,
    ) {
        let request = if origin == self.me {
            self.table
                .get_mut(&req)
                .filter(|r| r.client == client && r.seq == seq && !r.read)
        } else {
            None
        };
        let mine = request.is_some();
        let outcome = apply(request.map(|r| &mut r.token));
        if !mine {
            return;
        }
        if req == self.batch.carrier() && !matches!(outcome, Outcome::Stale) {
            for rider in self.batch.carried() {
                if let Some(r) = self.table.get_mut(&rider) {
                    if r.stage == Stage::Batched {
                        r.stage = Stage::Reading;
                        r.read = true;
                        self.waiting.wait(index, rider);
                        self.stats.reads_batched += 1;
                    }
                }
            }
        }
        match outcome {
            Outcome::Applied(r) => self.answer(req, r, now),
            Outcome::Duplicate(r) => {
                self.stats.duplicates += 1;
                self.answer(req, r, now);
            }
            Outcome::Stale => self.fail(req, ClientError::Stale, now),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Scenarios over three real Raft cores that pass their messages by hand; each replica's
    //! requests are driven as the node and the simulator drive them.
    use super::*;
    use std::collections::BTreeMap;
    use waverunner_raft::{Bootstrap, ConfState, Config, EntryKind, HardState, ReadMode};

    type Plane = Box<dyn DataPlane>;
    /// An answer: the replica that gave it, the request's token, the result.
    type Answer = (u64, &'static str, Result<Vec<u8>, ClientError>);

    struct Cluster {
        rafts: BTreeMap<u64, Raft>,
        requests: BTreeMap<u64, Requests<&'static str>>,
        /// Answers by replica: (token, result).
        answers: Vec<Answer>,
        /// Frames between hosts not yet delivered.
        frames: Vec<(u64, Effect<&'static str>)>,
        now: Time,
        /// Replicas cut off from everyone.
        down: Vec<u64>,
    }

    impl Cluster {
        fn new() -> Cluster {
            let mut rafts = BTreeMap::new();
            let mut requests = BTreeMap::new();
            for id in 1..=3 {
                let cfg = Config {
                    id,
                    seed: 7,
                    read_mode: ReadMode::ReadIndex,
                    ..Config::default()
                };
                let boot = Bootstrap {
                    hard_state: HardState::default(),
                    conf: ConfState {
                        voters: vec![1, 2, 3],
                        learners: vec![],
                    },
                    ..Default::default()
                };
                rafts.insert(id, Raft::new(cfg, boot).expect("bootstrap"));
                requests.insert(id, Requests::new(id, 1_000 * id, Duration::from_secs(1)));
            }
            let mut c = Cluster {
                rafts,
                requests,
                answers: Vec::new(),
                frames: Vec::new(),
                now: Duration::ZERO,
                down: Vec::new(),
            };
            c.rafts.get_mut(&1).unwrap().campaign();
            c.settle();
            assert_eq!(c.rafts[&1].role(), Role::Leader);
            c
        }

        fn with<R>(
            &mut self,
            id: u64,
            f: impl FnOnce(&mut Requests<&'static str>, &mut Cx<'_, Plane>) -> R,
        ) -> R {
            let mut cx = Cx::<Plane> {
                raft: self.rafts.get_mut(&id).unwrap(),
                dp: None,
                now: self.now,
                wall_ms: 1,
            };
            let r = f(self.requests.get_mut(&id).unwrap(), &mut cx);
            self.take(id);
            r
        }

        fn take(&mut self, id: u64) {
            for e in self.requests.get_mut(&id).unwrap().take_effects() {
                match e {
                    Effect::Done { token, result, .. } => self.answers.push((id, token, result)),
                    Effect::Appended(_) => {}
                    other => self.frames.push((id, other)),
                }
            }
        }

        /// Passes messages and frames, applies and serves until nothing moves.
        fn settle(&mut self) {
            for _ in 0..100 {
                let mut moved = false;
                let mut msgs = Vec::new();
                let ids: Vec<u64> = self.rafts.keys().copied().collect();
                for &id in &ids {
                    let raft = self.rafts.get_mut(&id).unwrap();
                    if !raft.has_ready() {
                        continue;
                    }
                    moved = true;
                    let rd = raft.ready();
                    msgs.extend(rd.messages);
                    raft.advance();
                    let rq = self.requests.get_mut(&id).unwrap();
                    if rd.soft_state.is_some() {
                        rq.on_soft_state();
                    }
                    rq.on_read_states(rd.read_refusals, rd.read_states);
                    for e in &rd.committed_entries {
                        if e.kind != EntryKind::Normal {
                            continue;
                        }
                        if let Ok(env) = Envelope::decode(&e.data, usize::MAX) {
                            let out = Outcome::Applied(format!("at {}", e.index).into_bytes());
                            rq.on_applied(
                                e.index,
                                env.origin,
                                env.req,
                                env.client,
                                env.seq,
                                |_| out,
                                self.now,
                            );
                        }
                    }
                    let applied = self.rafts[&id].commit_index();
                    let rq = self.requests.get_mut(&id).unwrap();
                    for (index, rid) in rq.reads_ready(applied) {
                        rq.answer(rid, format!("read at {index}").into_bytes(), self.now);
                    }
                    self.with(id, |rq, cx| rq.after_ready(cx));
                }
                for m in msgs {
                    if self.down.contains(&m.to) || self.down.contains(&m.from) {
                        continue;
                    }
                    let _ = self.rafts.get_mut(&m.to).unwrap().step(m);
                }
                for (from, f) in std::mem::take(&mut self.frames) {
                    moved = true;
                    match f {
                        Effect::Forward {
                            to,
                            req,
                            client,
                            seq,
                            command,
                        } => {
                            let env = Envelope {
                                origin: from,
                                req,
                                client,
                                seq,
                                now_ms: 0,
                                command,
                            };
                            self.with(to, |rq, cx| rq.propose_forwarded(env, cx));
                        }
                        Effect::Nack { to, req, .. } => {
                            self.requests.get_mut(&to).unwrap().on_nack(req)
                        }
                        _ => unreachable!(),
                    }
                }
                if !moved {
                    return;
                }
            }
            panic!("the cluster did not settle");
        }

        fn submit(&mut self, at: u64, command: &str, read: bool, token: &'static str) {
            let command = command.as_bytes().to_vec();
            self.with(at, |rq, cx| rq.submit(cx, 0, 0, command, read, token));
        }

        fn tick(&mut self, ms: u64) {
            self.now += Duration::from_millis(ms);
            for id in 1..=3 {
                self.with(id, |rq, cx| rq.on_tick(cx));
            }
        }

        fn answer(&self, token: &str) -> Option<&Result<Vec<u8>, ClientError>> {
            self.answers.iter().find(|a| a.1 == token).map(|a| &a.2)
        }
    }

    #[test]
    fn a_follower_forwards_a_write_and_answers_its_client_when_it_applies_the_entry() {
        let mut c = Cluster::new();
        c.submit(2, "set x", false, "w");
        assert!(c.answer("w").is_none(), "not before it is committed");
        c.settle();
        let (at, _, result) = &c.answers[0];
        assert_eq!(*at, 2, "the origin answers, not the leader");
        assert!(result.as_ref().unwrap().starts_with(b"at "));
        assert_eq!(c.requests[&2].stats.forwarded, 1);
        assert_eq!(c.requests[&1].stats.proposals, 1);
        assert!(c.requests[&2].is_empty());
    }

    #[test]
    fn a_forwarded_request_the_leader_cannot_propose_is_nacked_and_routed_again() {
        let mut c = Cluster::new();
        // Replica 3 believes 2 leads (a stale belief): 2 refuses with a NACK, and 3 routes
        // the request again once it knows the real leader.
        let env = Envelope {
            origin: 3,
            req: 77,
            client: 0,
            seq: 0,
            now_ms: 0,
            command: b"set y".to_vec(),
        };
        c.with(2, |rq, cx| rq.propose_forwarded(env, cx));
        assert!(matches!(
            c.frames[0].1,
            Effect::Nack {
                to: 3,
                req: 77,
                leader: 1
            }
        ));
        // A NACK for a request that is not forwarded changes nothing.
        c.settle();
        assert!(c.answers.is_empty());
        assert_eq!(c.requests[&2].stats.proposals, 0);

        c.submit(3, "set y", false, "y");
        let req = 3_000;
        c.requests.get_mut(&3).unwrap().on_nack(req);
        c.frames.clear(); // the first forward is lost: the leader never saw it
        c.tick(1);
        c.settle();
        assert_eq!(
            c.answer("y").map(|r| r.is_ok()),
            Some(true),
            "routed again, applied once"
        );
        assert_eq!(c.requests[&1].stats.proposals, 1);
    }

    #[test]
    fn without_a_leader_a_request_waits_then_fails_as_never_applied() {
        let mut c = Cluster::new();
        let term = c.rafts[&1].term();
        // A fresh replica that knows no leader.
        c.rafts.insert(
            3,
            Raft::new(
                Config {
                    id: 3,
                    seed: 7,
                    ..Config::default()
                },
                Bootstrap {
                    hard_state: HardState {
                        term,
                        vote: 0,
                        commit: 0,
                    },
                    conf: ConfState {
                        voters: vec![1, 2, 3],
                        learners: vec![],
                    },
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        c.down.push(3);
        c.submit(3, "set z", false, "z");
        assert!(c.frames.is_empty(), "nowhere to send it");
        c.tick(999);
        assert!(c.answer("z").is_none(), "still waiting for a leader");
        c.tick(1);
        assert_eq!(
            c.answer("z"),
            Some(&Err(ClientError::Unavailable("no leader".into())))
        );
    }

    #[test]
    fn a_forwarded_request_that_is_never_answered_times_out_with_its_outcome_unknown() {
        let mut c = Cluster::new();
        c.submit(2, "set w", false, "w");
        c.frames.clear(); // lost in transit
        c.tick(1_000);
        assert_eq!(c.answer("w"), Some(&Err(ClientError::Timeout)));
        assert_eq!(c.requests[&2].stats.timeouts, 1);
    }

    #[test]
    fn a_read_waits_for_its_read_index_and_never_enters_the_log() {
        let mut c = Cluster::new();
        c.submit(1, "set a", false, "w");
        c.settle();
        let last = c.rafts[&1].last_index();
        c.submit(2, "get a", true, "r");
        c.settle();
        let got = c.answer("r").unwrap().as_ref().unwrap();
        let index: u64 = std::str::from_utf8(got).unwrap()[8..].parse().unwrap();
        assert!(
            index >= last,
            "served at read index {index}, the write is at {last}"
        );
        assert_eq!(c.rafts[&1].last_index(), last, "no log entry for a read");
    }

    #[test]
    fn beyond_the_bound_requests_are_refused_busy() {
        let mut c = Cluster::new();
        c.down.extend([1, 2, 3]);
        for _ in 0..MAX_IN_FLIGHT {
            c.submit(2, "x", false, "ok");
        }
        c.answers.clear();
        c.submit(2, "x", false, "busy");
        assert_eq!(c.answer("busy"), Some(&Err(ClientError::Busy)));
        assert_eq!(c.requests[&2].len(), MAX_IN_FLIGHT);
        assert_eq!(c.requests[&2].stats.busy, 1);
    }

    #[test]
    fn a_large_request_has_a_later_deadline() {
        let t = Duration::from_secs(1);
        assert_eq!(request_deadline(t, 0), t);
        assert_eq!(request_deadline(t, 64 << 20), t + Duration::from_secs(2));
    }
}
