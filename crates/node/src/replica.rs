//! The replica loop: one thread owns the Raft core, the storage and the replicated state, and
//! handles events in order — ticks, frames from peers, client requests, admin commands
//! (membership changes, leader transfer) — then acts on the core's ready batches (persist,
//! send, apply, answer). Nothing else touches Raft state.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use waverunner_raft::{
    Bytes, ConfChange, Config as RaftConfig, DataPlaneState, Entry, EntryKind, HardState, Message,
    Raft, ReadMode, Ready, Role, Snapshot,
};
use waverunner_storage::Storage;

use crate::clients::{Bell, ClientLoop, Inbox, Propose, BELL, FAST, POLL_EVENTS, RING};
use crate::config::{DurabilityMode, NodeConfig, ReadModeConfig};
use crate::fastpath::{DpHost, FastPort, Passed, SoftwareLatency};
use crate::metrics::{Counters, MemberStatus, Status};
use crate::sm::{
    Answer, Decoded, EntryData, Envelope, MemberAddrs, MemberRecord, Outcome, Replicated,
    StateMachine,
};
use crate::stop::Stop;
use crate::transport::Transport;
use crate::wire::Frame;
use waverunner_dataplane::RingSleep;
use waverunner_host::membership::Membership;
use waverunner_host::ready::{Parts, ReadyIo, ReadyState};
use waverunner_host::requests::{Cx, Effect, Requests};
use waverunner_host::snapshots::Compaction;
use waverunner_host::status::Protocol;
use waverunner_host::ticks::{replay_stall, Replay, StallHost};
use waverunner_host::Time;

/// Events queued to the replica loop at most; a client request beyond it is refused (busy).
pub const EVENT_QUEUE: usize = 65_536;
/// How often at most a leader asks its state machine for upkeep work
/// ([`StateMachine::housekeeping`]).
pub const HOUSEKEEPING_INTERVAL: Duration = Duration::from_millis(100);

/// Drops `b` on a short-lived thread when it is large and this is its last reference: freeing
/// a buffer of hundreds of megabytes unmaps it page by page. Bulk work: at a low priority
/// (with snapshots of 1 M keys back to back, a free at nice 0 after each tripled the write
/// p99).
fn free_off_loop(b: Option<waverunner_raft::Bytes>) {
    if let Some(b) = b.filter(|b| b.len() >= 16 << 20) {
        let _ = std::thread::Builder::new()
            .name("free".into())
            .spawn(move || {
                let _low = crate::priority::LowPriority::new();
                drop(b)
            });
    }
}

/// The most ticks an idle loop sleeps through (the status it publishes is at most this old).
const MAX_IDLE_TICKS: u32 = 10;

/// The replica loop acts on ready batches for this long at most before it looks at its
/// ticks and events again (the batches left wait for the next turn).
const DRIVE_SLICE: Duration = Duration::from_millis(5);

/// What the state machine frees at most per turn of the loop ([`StateMachine::reclaim`]):
/// about 100 µs of cold frees. The loop does not sleep while a step found more.
const SM_RECLAIM_STEP: usize = 1_024;

/// A ready batch that takes longer than this to persist, send and apply is logged and counted
/// (`slow_drives_total`): the loop sends no heartbeat meanwhile.
const SLOW_DRIVE: Duration = Duration::from_millis(50);

pub use waverunner_host::requests::ClientError;

/// Called once with the result of a client request (decoded only for a request submitted
/// with its command decoded).
pub type Replier = Box<dyn FnOnce(Result<Answer, ClientError>) + Send>;

/// A client request for the replica loop.
pub struct Submit {
    /// Session id (0: none).
    pub client: u64,
    /// Sequence number in the session.
    pub seq: u64,
    /// The state-machine command.
    pub command: Vec<u8>,
    /// The command as the front-end had it before encoding it (sessionless requests only):
    /// applied or read without decoding `command`, and answered with the result as is.
    pub decoded: Option<Decoded>,
    /// Where the answer goes.
    pub reply: Replier,
}

/// A request in the host's table: where its answer goes, and its command as the front-end
/// decoded it, until it is applied or read.
struct Pending {
    reply: Replier,
    decoded: Option<Decoded>,
}

/// A membership or leadership command (admin HTTP `POST /membership`, `/transfer-leader`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminCmd {
    /// Take a snapshot now (admin HTTP `POST /snapshot`); answered with its index once it is
    /// written.
    Snapshot,
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

pub use waverunner_host::membership::AdminError;

/// Called once with the result of an admin command: the index of the committed change (0 for
/// a leader transfer, which is answered once started).
pub type AdminReply = Box<dyn FnOnce(Result<u64, AdminError>) + Send>;

/// A snapshot being written by a background thread.
struct SnapJob {
    index: u64,
    started: Instant,
    rx: Receiver<Result<Snapshot, String>>,
    /// `POST /snapshot` requests made before it started: this snapshot answers them.
    waiters: Vec<AdminReply>,
}

/// A leader's snapshot being decoded into a new state on another thread, swapped in when
/// complete: the loop keeps answering its leader meanwhile (decoding a million keys on the loop
/// took it 0.5 s and more). The committed entries that follow the snapshot wait here.
struct Restore<S> {
    index: u64,
    started: Instant,
    rx: std::sync::mpsc::Receiver<Option<Result<Replicated<S>, String>>>,
    /// The snapshot, restored on the loop if the state machine cannot build a state off it.
    data: Bytes,
    /// Committed entries after `index`, in order: applied once the state is in place (at most
    /// what the core hands out in the meantime: its log).
    pending: Vec<Entry>,
}

/// What the replica loop leaves for the keepalive thread ([`run_keepalive`]): the messages
/// the core allows it to send now, and when the loop last ticked.
#[derive(Default)]
pub struct KeepAlive {
    msgs: Mutex<Vec<Message>>,
    /// Milliseconds since `epoch` at the loop's last tick.
    last_tick_ms: AtomicU64,
    /// Milliseconds since `epoch` until which the loop sleeps on purpose (idle): not a stall.
    idle_until_ms: AtomicU64,
    epoch: OnceLock<Instant>,
    /// Keepalive messages sent.
    pub sent: AtomicU64,
}

impl KeepAlive {
    fn now_ms(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis() as u64
    }
}

/// A loop stalled longer than this is not busy but stuck: its keepalive thread stops speaking
/// for it, so that followers elect another leader. The longest stall of a working loop
/// measured is about 0.4 s (a follower starved on two CPUs under 50 closed-loop writers).
pub const KEEPALIVE_MAX_STALL: Duration = Duration::from_secs(2);

/// What the keepalive thread does next, `now_ms` after the loop's last tick (or the end of its
/// idle sleep) at `last_ms`.
#[derive(Debug, PartialEq, Eq)]
enum KeepaliveStep {
    /// No stall yet: sleep this many milliseconds, until one could first be seen.
    Wait(u64),
    /// A stall that is not a failure: send what the core allows.
    Send,
    /// Stalled past [`KEEPALIVE_MAX_STALL`]: stuck, not busy; say nothing.
    Quiet,
}

fn keepalive_step(now_ms: u64, last_ms: u64, tick: Duration) -> KeepaliveStep {
    let stale = 2 * tick.as_millis() as u64;
    if now_ms < last_ms + stale {
        KeepaliveStep::Wait((last_ms + stale - now_ms).clamp(1, 2 * stale))
    } else if now_ms > last_ms + KEEPALIVE_MAX_STALL.as_millis() as u64 {
        KeepaliveStep::Quiet
    } else {
        KeepaliveStep::Send
    }
}

/// Sends what the Raft core allows while the loop has not ticked for more than two ticks (it
/// applies a large value, or the machine is busy): a leader's heartbeats, a follower's
/// liveness-only answer ([`Raft::keepalive_messages`]), so nobody campaigns or steps down
/// because of a stall that is not a failure; not past [`KEEPALIVE_MAX_STALL`]. Ends with
/// `stop`.
pub fn run_keepalive(
    ka: Arc<KeepAlive>,
    transport: Arc<Transport>,
    tick: Duration,
    stop: Arc<Stop>,
) {
    while !stop.is_set() {
        // Wakes when a stall could first be seen: two ticks after the loop's last tick, or
        // after the end of its idle sleep (an idle leader's loop sleeps until its heartbeat).
        let last = ka
            .last_tick_ms
            .load(Ordering::Relaxed)
            .max(ka.idle_until_ms.load(Ordering::Relaxed));
        match keepalive_step(ka.now_ms(), last, tick) {
            KeepaliveStep::Wait(ms) => {
                stop.sleep(Duration::from_millis(ms));
                continue;
            }
            KeepaliveStep::Quiet => {
                stop.sleep(2 * tick);
                continue;
            }
            KeepaliveStep::Send => {}
        }
        let msgs = ka.msgs.lock().expect("keepalive").clone();
        tracing::debug!(
            target: "stall",
            "keepalive: the loop last ticked {} ms ago; sending {} messages",
            ka.now_ms().saturating_sub(last),
            msgs.len()
        );
        for m in msgs {
            ka.sent.fetch_add(1, Ordering::Relaxed);
            transport.send(m.to, Frame::Raft(m));
        }
        stop.sleep(2 * tick);
    }
}

/// The replica loop at the end of a stall, for [`replay_stall`]: its frames are the events
/// that waited in its queue with an arrival time; the others keep their order in `backlog`
/// (bounded by [`EVENT_QUEUE`]) and come after all the ticks.
struct LoopStall<'a, S: StateMachine> {
    r: &'a mut Replica<S>,
    rx: &'a Receiver<Event>,
    backlog: &'a mut VecDeque<Event>,
    /// When the next tick is due after this replay.
    end: Instant,
}

impl<S: StateMachine> StallHost for LoopStall<'_, S> {
    type Frame = Event;

    fn raft(&mut self) -> &mut Raft {
        &mut self.r.raft
    }

    /// Appends the data plane took while this loop was starved are on the ring: fed first, so
    /// a follower's election timer counts from the last one it really got rather than from
    /// before the stall. The ticks due before that last one are not counted: the ring proves
    /// the leader alive then, and Raft's timer restarts at every append (counted after the
    /// feed, a follower stopped or starved 150 ms or more while its data plane took the
    /// appends timed out a live leader, and the data plane handed off).
    fn feed_data_plane(&mut self, replay: &mut Replay) {
        let r = &mut *self.r;
        let epoch = r.epoch;
        let Some(d) = r.dp.as_mut() else { return };
        let skipped = d.skip_ticks_before_leader_heard(&mut r.raft, replay, |ns| {
            host_time(epoch, waverunner_dataplane::instant_at(ns))
        });
        if skipped > 0 {
            tracing::debug!(
                "node {}: {skipped} ticks before the data plane last heard the leader not counted",
                r.cfg.id
            );
        }
        r.on_ring();
    }

    fn next_frame(&mut self) -> Option<(Time, Event)> {
        while self.backlog.len() < EVENT_QUEUE {
            let ev = self.rx.try_recv().ok()?;
            match ev.arrived() {
                Some(arrived) => {
                    return Some((self.r.time_of(arrived), ev));
                }
                None => self.backlog.push_back(ev),
            }
        }
        None
    }

    /// Stepping it held the loop past the next tick (a 64 MiB forwarded value proposed): the
    /// frames queued behind it came during the hold, after ticks this replay does not count.
    /// Stepped now, before those ticks, they left a leader's check-quorum a whole window
    /// without its followers' answers when the ticks were counted next, and it stepped down.
    fn step_frame(&mut self, ev: Event) -> bool {
        self.r.on_event(ev);
        Instant::now() >= self.end
    }
}

/// An event for the replica loop.
pub enum Event {
    /// A frame from a peer, and when the transport received it.
    Peer(u64, Frame, Instant),
    /// A client request.
    Submit(Submit),
    /// A membership or leadership command.
    Admin(AdminCmd, AdminReply),
    /// Bad client input seen by a front-end (counted).
    ClientError,
    /// Records wait on the data plane's log ring.
    Ring,
    /// A fast-path packet the data plane passed up: (source, UDP payload, when the data
    /// plane's host thread received it).
    Fast(SocketAddr, Vec<u8>, Instant),
    /// Stop.
    Shutdown,
}

impl Event {
    /// When a peer's frame or a data-plane packet came: news of who was alive then, stepped
    /// in step with the ticks ([`Replica::tick_if_due`]). Other events carry no such news.
    fn arrived(&self) -> Option<Instant> {
        match self {
            Event::Peer(_, _, at) | Event::Fast(_, _, at) => Some(*at),
            _ => None,
        }
    }
}

/// Client requests admitted at one replica at most: queued to its loop or in flight there.
/// Beyond it the front-end's own thread refuses a request (busy) without queuing it. Clients
/// then never fill the loop's queue, which the peers' frames share: with the bound at the
/// queue's 65 536 events, an open loop of 130 000 native requests a second (about twice what
/// the machine sustains) queued a second of requests ahead of the followers' answers, and the
/// cluster held an election. At 4 096 a request waits at most about 0.1 s at the peak rate.
pub const MAX_ADMITTED: usize = waverunner_host::requests::MAX_IN_FLIGHT;

/// The front-ends' admission count, shared by every [`Handle`] of a replica and the replica.
#[derive(Debug, Default)]
pub struct Admission {
    /// Requests admitted and not answered yet (at most [`MAX_ADMITTED`]).
    pending: std::sync::atomic::AtomicUsize,
    /// Requests refused for it.
    refused: AtomicU64,
    /// The last log index this replica applied, stored as each entry is applied (before
    /// its answer goes out): what `WATCH` watches from.
    applied: AtomicU64,
    /// Client connections open, and those waiting in a blocking command (the front-ends
    /// keep them; `INFO clients` reports them).
    connected: AtomicU64,
    blocked: AtomicU64,
}

impl Admission {
    /// Admits one request unless [`MAX_ADMITTED`] are pending; the guard gives it back.
    fn admit_one(self: &Arc<Admission>) -> Option<Admitted> {
        if self.pending.fetch_add(1, Ordering::AcqRel) >= MAX_ADMITTED {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(Admitted(self.clone()))
    }

    /// `s`, its reply holding an admission until it is called; `None` (and `s` answered
    /// busy) when [`MAX_ADMITTED`] requests are pending.
    fn admit(self: &Arc<Admission>, s: Submit) -> Option<Submit> {
        let Some(admitted) = self.admit_one() else {
            (s.reply)(Err(ClientError::Busy));
            return None;
        };
        let reply = s.reply;
        Some(Submit {
            reply: Box::new(move |r| {
                drop(admitted);
                reply(r)
            }),
            ..s
        })
    }

    /// Requests admitted and not answered yet.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// A front-end refused `n` requests before admission (shed from its socket's queue): counted
    /// with the refusals (`busy`).
    pub fn note_refused(&self, n: u64) {
        self.refused.fetch_add(n, Ordering::Relaxed);
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The last log index applied (at least: it may lag an apply in progress).
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Client connections open, and blocked in a blocking command.
    pub fn clients(&self) -> (u64, u64) {
        (
            self.connected.load(Ordering::Relaxed),
            self.blocked.load(Ordering::Relaxed),
        )
    }

    /// A front-end's connections opened (+) or closed (-), and blocked or woken.
    pub fn count_clients(&self, connected: i64, blocked: i64) {
        let add = |a: &AtomicU64, d: i64| {
            if d >= 0 {
                a.fetch_add(d as u64, Ordering::Relaxed);
            } else {
                a.fetch_sub(d.unsigned_abs(), Ordering::Relaxed);
            }
        };
        add(&self.connected, connected);
        add(&self.blocked, blocked);
    }

    fn set_applied(&self, index: u64) {
        self.applied.store(index, Ordering::Release);
    }
}

/// One admitted request: released when its reply is given (or dropped unanswered, at
/// shutdown).
struct Admitted(Arc<Admission>);

impl Drop for Admitted {
    fn drop(&mut self) {
        let was = self.0.pending.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(was > 0, "admission released twice");
    }
}

/// What front-ends and the admin server hold to talk to the replica.
#[derive(Clone)]
pub struct Handle {
    tx: Inbox,
    status: Arc<Mutex<Status>>,
    admission: Arc<Admission>,
    latencies: Arc<crate::metrics::Latencies>,
}

impl Handle {
    /// A handle on the queue `tx` of a replica publishing into `status`, admitting client
    /// requests through `admission`.
    pub fn new(
        tx: Inbox,
        status: Arc<Mutex<Status>>,
        admission: Arc<Admission>,
        latencies: Arc<crate::metrics::Latencies>,
    ) -> Handle {
        Handle {
            tx,
            status,
            admission,
            latencies,
        }
    }

    /// Submits a request; its `reply` is called exactly once (at once with busy when
    /// [`MAX_ADMITTED`] requests are pending).
    pub fn submit(&self, s: Submit) {
        let Some(s) = self.admission.admit(s) else {
            return;
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
        self.submit(Submit {
            client,
            seq,
            command,
            decoded: None,
            reply: Box::new(move |r| {
                let _ = tx.send(r.map(Answer::encoded));
            }),
        });
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

    /// The same with the write and read latency histograms and quantiles (computed now, from
    /// the replica's HDR histograms: for `/status` and `/metrics`, not for every INFO).
    pub fn status_with_latency(&self) -> Status {
        let mut s = self.status();
        self.latencies.fill(&mut s);
        s
    }

    /// The last log index this replica applied (what `WATCH` watches from): every entry up
    /// to it is applied; a later one may be too.
    pub fn applied_index(&self) -> u64 {
        self.admission.applied()
    }

    /// The request path's shared counters.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The leader as last published (0: none known), without copying the whole status: every
    /// native reply carries it.
    pub fn leader(&self) -> u64 {
        self.status.lock().expect("status").leader
    }

    /// The replica loop's queue (for the transport).
    pub fn sender(&self) -> Inbox {
        self.tx.clone()
    }
}

/// What the host's request routing needs of a replica, now (a macro: it borrows the fields,
/// not the whole replica, whose `requests` the caller then uses).
macro_rules! cx {
    ($r:expr) => {
        Cx {
            raft: &mut $r.raft,
            dp: $r.dp.as_mut(),
            now: $r.epoch.elapsed(),
            wall_ms: wall_ms(),
        }
    };
}

/// Loop work that took longer than this is logged at debug level (target `stall`): what held
/// the loop, when a latency tail needs explaining (`WAVERUNNER_LOG=stall=debug`). Wall time:
/// it includes time the thread waited for a CPU.
const STALL: Duration = Duration::from_millis(1);

fn stall(id: u64, since: Instant, what: impl FnOnce() -> String) {
    let took = since.elapsed();
    if took > STALL {
        tracing::debug!(target: "stall", "node {id}: {} held the loop {} µs", what(), took.as_micros());
    }
}

/// Milliseconds since the Unix epoch by the local clock.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What the replica loop waits on: its queue, its poll with the queue's bell, and the client
/// front-end it runs (registered on the poll already), if any.
pub struct LoopIo {
    /// The queue other threads fill ([`Inbox`]).
    pub rx: Receiver<Event>,
    /// The loop's poll.
    pub poll: mio::Poll,
    /// Rung by [`Inbox`] senders while the loop sleeps on `poll`.
    pub bell: Arc<Bell>,
    /// The application's front-end, run to completion on this loop.
    pub clients: Option<Box<dyn ClientLoop>>,
    /// The data plane's fast-path socket, when the loop reads it (`xdp`), registered on the
    /// poll already.
    pub fast: Option<FastPort>,
}

/// The replica loop's own front-end proposing straight into the loop: no queue, no wake-up.
struct Direct<'a, S: StateMachine>(&'a mut Replica<S>);

impl<S: StateMachine> Propose for Direct<'_, S> {
    fn submit(&mut self, s: Submit) {
        let Some(s) = self.0.admission.admit(s) else {
            return;
        };
        let t = Instant::now();
        self.0.on_submit(s);
        stall(self.0.cfg.id, t, || "a client request".into());
    }
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
    keepalive: Arc<KeepAlive>,
    /// The front-ends' admission of client requests (its refusals are counted as busy).
    admission: Arc<Admission>,
    /// Write and read latencies, for their quantiles.
    latencies: Arc<crate::metrics::Latencies>,
    /// The term, role and leader last in `/status`.
    published: (u64, Role, u64),
    /// When the transport last received a frame from each peer (for the log line that
    /// explains a leader's step-down; bounded by the members).
    heard: HashMap<u64, Instant>,
    addresses: crate::metrics::Addresses,
    /// Client requests from submission to answer (the host's routing).
    requests: Requests<Pending, Answer>,
    counters: Counters,
    role: Role,
    /// What the ready handling remembers between batches (the hard state stored and the
    /// newest one, the commit index seen).
    ready_st: ReadyState,
    /// Membership changes waiting for their entry to commit.
    admin_pending: Membership<AdminReply>,
    /// The addresses the transport talks to: configured peers, the replicated address book,
    /// and addresses peers advertised (for ids known no other way).
    peer_addrs: BTreeMap<u64, SocketAddr>,
    /// The data plane, if one is configured, and its host side.
    dp: Option<DpHost>,
    /// A wake-up for ring records is queued (the data plane's wake hook coalesces on it).
    dp_wake: Arc<std::sync::atomic::AtomicBool>,
    /// The origin of the time the host logic is given ([`waverunner_host::Time`]).
    epoch: Instant,
    /// When the next tick is due: the ticks before it are counted in the core's clock.
    next_tick: Instant,
    /// Until when the loop last meant to sleep with nothing to do ([`Replica::idle_wake`]):
    /// the ticks before it are counted late on purpose, not because of a stall.
    slept_until: Instant,
    /// Lease reads submitted while a tick was overdue, routed once the ticks are counted
    /// (bounded by the admitted requests).
    late_reads: Vec<Submit>,
    /// Replication latency measured by software (leader, data plane off).
    sw_latency: SoftwareLatency,
    /// When the leader last proposed upkeep work, and the entry's index (it proposes no more
    /// until that one is applied).
    housekeeping: (Instant, u64),
    /// The snapshot a background thread is writing, if any.
    snap_job: Option<SnapJob>,
    /// A leader's snapshot a background thread is decoding into a new state, if any.
    restoring: Option<Restore<S>>,
    /// When to snapshot, the newest snapshot and the trailing window of the log.
    compaction: Compaction,
    /// Writes snapshot files off the loop.
    snap_files: waverunner_storage::SnapshotFiles,
    /// `POST /snapshot` requests waiting for the next snapshot to start.
    snap_waiters: Vec<AdminReply>,
    /// The last snapshot taken, for `/status`.
    snap_status: crate::metrics::SnapshotStatus,
    /// The process's RSS, read from `/proc` at most once a second.
    rss: Rss,
}

/// What the replica shares with the node's other threads.
pub struct Shared {
    /// The peers' connections.
    pub transport: Arc<Transport>,
    /// What the replica publishes for `/status` and the front-ends.
    pub status: Arc<Mutex<Status>>,
    /// The heartbeats the keepalive thread sends while the loop is stalled.
    pub keepalive: Arc<KeepAlive>,
    /// The front-ends' admission of client requests.
    pub admission: Arc<Admission>,
    /// Write and read latencies (quantiles for whoever reads the status).
    pub latencies: Arc<crate::metrics::Latencies>,
}

impl<S: StateMachine> Replica<S> {
    /// Opens storage, restores the state machine and builds the Raft core.
    pub fn open(
        cfg: NodeConfig,
        sm: S,
        shared: Shared,
        addresses: crate::metrics::Addresses,
        dp: Option<(DpHost, Arc<std::sync::atomic::AtomicBool>)>,
    ) -> Result<Replica<S>, Fatal> {
        let Shared {
            transport,
            status,
            keepalive,
            admission,
            latencies,
        } = shared;
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
        let snap_files = storage.snapshot_files();
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
            dataplane: dp.is_some(),
            defer_ack: dp.is_some() && cfg.durability == DurabilityMode::Fsync,
            dataplane_max_proposal: waverunner_host::dataplane::MAX_PROPOSAL,
            // The host's pushes are bound by its data plane's own window.
            dataplane_max_inflight: dp
                .as_ref()
                .map_or(u64::MAX, |(d, _)| d.plane.max_inflight()),
            ..RaftConfig::default()
        };
        let mut raft =
            Raft::new(rcfg, boot).map_err(|e| Fatal(format!("cannot start Raft: {e}")))?;
        // A leader's snapshot is received into a file, never whole in memory.
        raft.set_snapshot_sink(snap_files.sink());
        let (id, request_timeout_ms) = (cfg.id, cfg.request_timeout_ms);
        let (snapshot_entries, snapshot_bytes) = (cfg.snapshot_entries, cfg.snapshot_bytes);
        let first_req = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        let role = raft.role();
        let peer_addrs = cfg.peers.iter().map(|p| (p.id, p.raft)).collect();
        let mut dp = dp;
        if let Some(d) = dp.as_mut() {
            for p in &cfg.peers {
                if let Some(SocketAddr::V4(a)) = p.client {
                    d.0.peers.insert(p.id, a);
                }
            }
        }
        let mut replica = Replica {
            cfg,
            raft,
            storage,
            state,
            transport,
            status,
            keepalive,
            admission,
            latencies,
            published: (0, Role::Follower, 0),
            heard: HashMap::new(),
            addresses,
            // Request ids are unique across restarts: an entry proposed by an earlier
            // incarnation must never answer a request of this one.
            requests: Requests::new(id, first_req, Duration::from_millis(request_timeout_ms)),
            counters: Counters::default(),
            role,
            ready_st: ReadyState::new(persisted_hard),
            admin_pending: Membership::new(Duration::from_millis(request_timeout_ms.max(1_000))),
            peer_addrs,
            dp_wake: dp
                .as_ref()
                .map_or_else(Default::default, |(_, w)| w.clone()),
            dp: dp.map(|(d, _)| d),
            epoch: Instant::now(),
            next_tick: Instant::now(),
            slept_until: Instant::now(),
            late_reads: Vec::new(),
            sw_latency: SoftwareLatency::default(),
            housekeeping: (Instant::now(), 0),
            snap_job: None,
            compaction: Compaction::new(snapshot_entries, snapshot_bytes),
            snap_files,
            snap_waiters: Vec::new(),
            snap_status: Default::default(),
            restoring: None,
            rss: Rss::default(),
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
            self.learn_fast_addr(id, m.client);
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

    /// The fast-path address of member `id` (its native client address).
    fn learn_fast_addr(&mut self, id: u64, client: Option<SocketAddr>) {
        if let (Some(d), Some(SocketAddr::V4(a))) = (self.dp.as_mut(), client) {
            if id != self.cfg.id {
                d.peers.insert(id, a);
            }
        }
    }

    /// Stops talking to a removed member.
    fn forget_peer(&mut self, id: u64) {
        self.heard.remove(&id);
        if self.peer_addrs.remove(&id).is_some() {
            tracing::info!(
                "node {}: stopped talking to removed member {id}",
                self.cfg.id
            );
        }
        self.transport.remove_peer(id);
    }

    /// When the loop, with no event, must wake: at the next tick, or (nothing waits for a
    /// tick: no request, retry, admin command, snapshot job or data plane) at the first tick
    /// that does more than count ([`Raft::idle_ticks`]), the ticks between replayed then. An
    /// idle leader wakes for its heartbeats, an idle follower for its leader's, instead of a
    /// hundred times a second.
    fn idle_wake(&self, tick: Duration) -> Instant {
        let busy = self.dp.is_some()
            || !self.requests.is_empty()
            || !self.admin_pending.is_empty()
            || !self.snap_waiters.is_empty()
            || self.snap_job.is_some()
            || self.restoring.is_some();
        let ticks = if busy {
            1
        } else {
            self.raft.idle_ticks().min(MAX_IDLE_TICKS)
        };
        let wake = self.next_tick + tick * (ticks - 1);
        let ka = &self.keepalive;
        let ms = ka.now_ms() + wake.saturating_duration_since(Instant::now()).as_millis() as u64;
        ka.idle_until_ms.store(ms, Ordering::Relaxed);
        wake
    }

    /// Counts the ticks that elapsed up to now, if any, and sends what they produced; then
    /// routes the lease reads that waited for them.
    fn tick_if_due(
        &mut self,
        tick: Duration,
        rx: &Receiver<Event>,
        backlog: &mut VecDeque<Event>,
    ) -> Result<(), Fatal> {
        self.count_ticks(tick, rx, backlog)?;
        for s in std::mem::take(&mut self.late_reads) {
            // Late again only if the loop was held since the ticks were counted: through the
            // log then, rather than waiting again.
            let current = Instant::now() < self.next_tick;
            self.route(s, current);
        }
        Ok(())
    }

    /// Counts the ticks that elapsed up to now, if any, and sends what they produced.
    fn count_ticks(
        &mut self,
        tick: Duration,
        rx: &Receiver<Event>,
        backlog: &mut VecDeque<Event>,
    ) -> Result<(), Fatal> {
        // Again while stepping a frame held the loop past the next tick: the ticks of that
        // hold are counted in step with the frames that came during it.
        while self.count_ticks_once(tick, rx, backlog)? {}
        Ok(())
    }

    /// One replay of the ticks due; true if a frame stepped in it held the loop past the next
    /// tick (the ticks since are due, with the frames that came meanwhile).
    fn count_ticks_once(
        &mut self,
        tick: Duration,
        rx: &Receiver<Event>,
        backlog: &mut VecDeque<Event>,
    ) -> Result<bool, Fatal> {
        let at = |t: Instant| self.time_of(t);
        let now = Instant::now();
        // Every tick that elapsed counts, also those missed while the process was stopped or
        // starved (`waverunner_host::ticks`: capped at two election timeouts).
        let Some((mut replay, missed, next)) = Replay::due(
            at(self.next_tick),
            at(self.slept_until),
            at(now),
            tick,
            self.cfg.election_ticks,
        ) else {
            return Ok(false);
        };
        // A stall (this loop applied a large value, the machine was busy, the process was
        // stopped): the ticks it missed are replayed in step with what peers sent meanwhile,
        // each frame after the ticks that passed before it arrived (its kernel receive time).
        // Other events keep their order and come after all the ticks.
        if missed >= 10 {
            tracing::info!(
                "node {}: the loop missed {missed} ticks (role {:?})",
                self.cfg.id,
                self.role
            );
        }
        // Also on time: what peers and the data plane sent since the last tick may still wait
        // in the queue behind a busy loop (a follower's held appends waited 50-130 ms under a
        // write flood, and it timed out a live leader). They prove who was alive when they
        // came, so they are stepped before the ticks that passed after their arrival.
        let end = self.epoch + next;
        let overran = replay_stall(
            &mut LoopStall {
                r: self,
                rx,
                backlog,
                end,
            },
            &mut replay,
        );
        self.on_tick(&mut replay);
        let ka = &self.keepalive;
        ka.last_tick_ms.store(ka.now_ms(), Ordering::Relaxed);
        // A leader's heartbeats (none while an enabled data plane carries them), a follower's
        // liveness-only answer.
        *ka.msgs.lock().expect("keepalive") = self.raft.keepalive_messages();
        self.next_tick = end;
        // What the tick produced (heartbeats, a campaign's vote requests) goes out now, not
        // when the next event or tick wakes this loop. Left for the next wake-up, an idle
        // replica's vote requests waited a tick, and two survivors of a crashed leader woke
        // each other with them at the same instant: split votes.
        self.drive_for(Some(DRIVE_SLICE))?;
        Ok(overran)
    }

    /// Runs until shutdown or a fatal error: takes what other threads queued, the client
    /// front-end's socket events (run to completion, [`crate::clients`]), then acts on the
    /// ready batches; sleeps on the poll when nothing is queued and nothing is ready.
    pub fn run(mut self, io: LoopIo, stop: Arc<Stop>) -> Result<(), Fatal> {
        let LoopIo {
            rx,
            mut poll,
            bell,
            mut clients,
            mut fast,
        } = io;
        let tick = Duration::from_millis(self.cfg.tick_ms);
        // The data plane's ring, when the loop reads it (`xdp`): drained every turn, its
        // wake-up armed only while the loop sleeps.
        let ring = self.dp.as_ref().and_then(|d| d.plane.ring_fd());
        if let Some(fd) = ring {
            poll.registry()
                .register(&mut mio::unix::SourceFd(&fd), RING, mio::Interest::READABLE)
                .map_err(|e| Fatal(format!("cannot poll the data plane's ring: {e}")))?;
        }
        self.next_tick = Instant::now() + tick;
        self.drive()?;
        self.publish();
        // Events taken from the queue during a stall while peers' frames were stepped first.
        let mut backlog: VecDeque<Event> = VecDeque::new();
        // The state machine had more to free than one step: the loop does not sleep on it.
        let mut reclaiming = false;
        let mut events = mio::Events::with_capacity(POLL_EVENTS);
        'outer: loop {
            // Take what is queued before persisting: one sync for all (group commit).
            let mut queued = 0;
            while queued < 1_024 {
                // Time first: a process stopped (SIGSTOP) or starved while an event waited
                // would otherwise handle it with the clock of before the stall, e.g. serve a
                // lease read from a lease that expired meanwhile. And an event that held the
                // loop (a 64 MiB value) leaves peers' answers queued behind it: they must be
                // stepped in step with the ticks that passed, not before all of them (a
                // leader then found the second election timeout of the stall without an
                // answer and stepped down).
                self.tick_if_due(tick, &rx, &mut backlog)?;
                let next = match backlog.pop_front() {
                    Some(ev) => Ok(ev),
                    None => rx.try_recv(),
                };
                match next {
                    Ok(ev) => {
                        queued += 1;
                        let t = Instant::now();
                        if !self.on_event(ev) {
                            break 'outer;
                        }
                        let took = t.elapsed();
                        if took > SLOW_DRIVE {
                            tracing::info!(
                                "node {}: one event took {} ms",
                                self.cfg.id,
                                took.as_millis()
                            );
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => break 'outer,
                }
            }
            // Sleep only with nothing queued, nothing ready, nothing to free and no answer
            // waiting to be written; a sender rings the bell only while the loop sleeps.
            let sleep = queued == 0
                && !reclaiming
                && !self.raft.has_ready()
                && clients.as_mut().is_none_or(|c| c.idle())
                && fast.as_ref().is_none_or(|f| !f.readable());
            let mut timeout = Some(Duration::ZERO);
            let mut armed = false;
            if sleep {
                bell.sleep();
                match rx.try_recv() {
                    Ok(ev) => backlog.push_back(ev),
                    Err(_) => {
                        let wake = self.idle_wake(tick);
                        self.slept_until = wake;
                        let mut t = wake.saturating_duration_since(Instant::now());
                        if let Some(c) = clients.as_ref().and_then(|c| c.timeout()) {
                            t = t.min(c);
                        }
                        if let Some(d) = self.dp.as_ref().filter(|_| ring.is_some()) {
                            armed = true;
                            match d.plane.before_sleep() {
                                RingSleep::Armed => {}
                                RingSleep::Ready => t = Duration::ZERO,
                                RingSleep::Nap(n) => t = t.min(n),
                            }
                        }
                        timeout = Some(t);
                    }
                }
            }
            if sleep || clients.is_some() || fast.is_some() || ring.is_some() {
                if let Err(e) = poll.poll(&mut events, timeout) {
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(Fatal(format!("the replica loop's poll failed: {e}")));
                    }
                }
                bell.awake();
                if armed {
                    if let Some(d) = self.dp.as_ref() {
                        d.plane.after_sleep();
                    }
                }
                // Time first, here too: the process may have been stopped or starved in the
                // poll, and a request read now must not be served with the clock of before
                // (a lease read from a lease that expired meanwhile).
                self.tick_if_due(tick, &rx, &mut backlog)?;
                let t = Instant::now();
                let mut n = 0;
                for ev in events.iter() {
                    match (ev.token(), clients.as_mut(), fast.as_mut()) {
                        (BELL | RING, _, _) => {}
                        (FAST, _, Some(f)) => f.on_readable(),
                        (_, Some(c), _) => {
                            n += 1;
                            c.event(poll.registry(), ev, &mut Direct(&mut self));
                        }
                        _ => {}
                    }
                }
                stall(self.cfg.id, t, || format!("{n} socket events"));
                if ring.is_some() {
                    // Every turn, whatever woke the loop: records of the data plane's own
                    // inputs (acks, appends) do not wake a loop that is awake.
                    let t = Instant::now();
                    self.on_ring();
                    stall(self.cfg.id, t, || "the ring".into());
                }
                if let Some(f) = fast.as_mut() {
                    let t = Instant::now();
                    self.read_fast(f);
                    stall(self.cfg.id, t, || "the fast-path socket".into());
                }
                if let Some(c) = clients.as_mut() {
                    // Everything this round of events made ready is proposed together.
                    let t = Instant::now();
                    c.turn(&mut Direct(&mut self));
                    stall(self.cfg.id, t, || "the front-end's turn".into());
                }
            }
            if stop.is_set() {
                break;
            }
            let t = Instant::now();
            self.drive_for(Some(DRIVE_SLICE))?;
            reclaiming = self.state.sm.reclaim(SM_RECLAIM_STEP) == SM_RECLAIM_STEP;
            let took = t.elapsed();
            if took > SLOW_DRIVE {
                self.counters.slow_drives += 1;
                tracing::warn!("one ready batch took {} ms", took.as_millis());
            }
            // The answers the batches gave go out now (and what they let connections send:
            // time first again).
            if let Some(c) = clients.as_mut() {
                self.tick_if_due(tick, &rx, &mut backlog)?;
                let t = Instant::now();
                c.turn(&mut Direct(&mut self));
                stall(self.cfg.id, t, || {
                    "the front-end's turn after a drive".into()
                });
            }
        }
        self.drive()?;
        if self.ready_st.latest_hard != self.ready_st.persisted_hard {
            let _ = self.storage.set_hard_state(self.ready_st.latest_hard);
        }
        let _ = self.storage.sync();
        for s in self.late_reads.drain(..) {
            (s.reply)(Err(ClientError::ShuttingDown));
        }
        let now = self.now();
        self.requests.fail_all(ClientError::ShuttingDown, now);
        self.flush_requests();
        self.admin_pending.fail_all(AdminError::ShuttingDown);
        self.answer_admin();
        self.publish();
        if let Some(c) = clients.as_mut() {
            c.turn(&mut Direct(&mut self));
        }
        Ok(())
    }

    fn on_event(&mut self, ev: Event) -> bool {
        let t = Instant::now();
        let what = match &ev {
            Event::Peer(..) => "a peer's frame",
            Event::Submit(_) => "a client request",
            Event::Admin(..) => "an admin command",
            Event::ClientError => "a client error",
            Event::Ring => "the ring",
            Event::Fast(..) => "a fast-path packet",
            Event::Shutdown => "shutdown",
        };
        let go_on = self.on_event_inner(ev);
        stall(self.cfg.id, t, || what.into());
        go_on
    }

    fn on_event_inner(&mut self, ev: Event) -> bool {
        match ev {
            Event::Peer(from, f, at) => {
                self.heard.insert(from, at);
                self.on_frame(from, f)
            }
            Event::Submit(s) => self.on_submit(s),
            Event::Admin(cmd, reply) => self.on_admin(cmd, reply),
            Event::ClientError => self.counters.client_errors += 1,
            Event::Ring => self.on_ring(),
            Event::Fast(src, pkt, _) => self.on_fast(src, &pkt),
            Event::Shutdown => return false,
        }
        true
    }

    fn on_admin(&mut self, cmd: AdminCmd, reply: AdminReply) {
        match cmd {
            AdminCmd::Snapshot => self.snap_waiters.push(reply),
            AdminCmd::TransferLeader { id } => match self.raft.transfer_leader(id) {
                Ok(()) => {
                    self.counters.membership_changes += 1;
                    tracing::info!("node {}: transferring leadership to {id}", self.cfg.id);
                    reply(Ok(0));
                }
                Err(e) => reply(Err(e.into())),
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
        let (state, peers) = (&self.state, &self.cfg.peers);
        let record = || match &rec {
            Some(r) if matches!(cc, ConfChange::AddLearner(_) | ConfChange::AddVoter(_)) => {
                let book = MemberAddrs {
                    raft: r.raft,
                    client: r.client,
                };
                Ok((state.members.get(&id) != Some(&book)).then(|| r.encode()))
            }
            None if matches!(cc, ConfChange::AddLearner(_) | ConfChange::AddVoter(_))
                && !state.members.contains_key(&id)
                && !peers.iter().any(|p| p.id == id) =>
            {
                Err(AdminError::Invalid(format!(
                    "the address of node {id} is unknown: give \"raft\" (and \"client\")"
                )))
            }
            _ => Ok(None),
        };
        let removed = self.state.removed.contains(&id);
        let now = self.now();
        match self
            .admin_pending
            .propose(&mut self.raft, cc, removed, record, reply, now)
        {
            Ok(index) => {
                if let Some(r) = &rec {
                    // The leader replicates to the new member from the moment it appends.
                    self.learn_addr(id, r.raft, true);
                }
                self.counters.membership_changes += 1;
                tracing::info!(
                    "node {}: proposed {cc:?} at index {index} in term {}",
                    self.cfg.id,
                    self.raft.term()
                );
            }
            Err((e, reply)) => reply(Err(e)),
        }
    }

    /// Answers the admin commands whose changes committed, were lost or timed out.
    fn answer_admin(&mut self) {
        let answers = self.admin_pending.take_answers();
        if answers.iter().any(|(_, r)| r.is_ok()) {
            // Who asked reads `/status` next (`waverunner member` prints the membership): the
            // configuration in force already includes the change.
            self.publish();
        }
        for (reply, r) in answers {
            reply(r);
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
        if self.cfg.maxmemory > 0
            && self.state.sm.used_memory() > self.cfg.maxmemory
            && self.state.sm.may_grow(&s.command)
        {
            // Checked where the request enters, against this replica's state (Redis checks
            // before running the command): deterministic state-machine results do not depend
            // on any replica's configuration.
            self.requests.stats.requests += 1;
            self.counters.oom_refused += 1;
            (s.reply)(Err(ClientError::OutOfMemory));
            return;
        }
        let read =
            self.cfg.read_mode != ReadModeConfig::Log && self.state.sm.is_read_only(&s.command);
        // A lease read is answered on the core's clock, its ticks: only while no tick is
        // overdue. One that lags (the process was stopped, or the loop busy, after it last
        // counted them) could take an expired lease for a live one and answer a read that came
        // after another leader's write with the value from before it. Such a read waits until
        // the loop has counted the ticks (they come first in its next turn).
        if read && self.cfg.read_mode == ReadModeConfig::Lease && Instant::now() >= self.next_tick {
            self.counters.lease_reads_late += 1;
            self.late_reads.push(s);
            return;
        }
        self.route(s, read);
    }

    /// Hands a request to the host's routing (`read`: it may be served without the log).
    fn route(&mut self, s: Submit, read: bool) {
        let mut cx = cx!(self);
        // A session's result is remembered encoded: its request is applied from the bytes.
        let decoded = s.decoded.filter(|_| s.client == 0);
        let token = Pending {
            reply: s.reply,
            decoded,
        };
        self.requests
            .submit(&mut cx, s.client, s.seq, s.command, read, token);
        self.flush_requests();
    }

    /// Carries out what the request routing decided: frames to peers, answers to clients.
    fn flush_requests(&mut self) {
        for e in self.requests.take_effects() {
            match e {
                Effect::Forward {
                    to,
                    req,
                    client,
                    seq,
                    command,
                } => self.transport.send(
                    to,
                    Frame::Forward {
                        req,
                        client,
                        seq,
                        command,
                    },
                ),
                Effect::Nack { to, req, leader } => {
                    self.transport.send(to, Frame::ForwardNack { req, leader })
                }
                Effect::Appended(index) => self.sw_latency.proposed(index),
                Effect::Done {
                    token,
                    result,
                    read,
                    latency,
                } => {
                    if result.is_ok() {
                        self.latencies.record(read, latency.as_micros() as u64);
                    }
                    (token.reply)(result);
                }
            }
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
            } => self.propose_forwarded(Envelope {
                origin: from,
                req,
                client,
                seq,
                now_ms: 0,
                command,
            }),
            Frame::ForwardNack { req, .. } => {
                self.requests.on_nack(req);
                self.flush_requests();
            }
            Frame::Advertise { raft } => self.learn_addr(from, raft, false),
            Frame::Hello { .. } | Frame::Chunk { .. } => {}
        }
    }

    /// The last ticks of `replay` (the one due now at least).
    fn on_tick(&mut self, replay: &mut Replay) {
        debug_assert!(replay.rest() >= 1);
        let now = self.now();
        if let Some(d) = self.dp.as_mut() {
            d.on_tick(&mut self.raft, now);
        }
        let rest = replay.rest();
        replay.count(&mut self.raft, rest);
        self.admin_pending.on_tick(self.now());
        self.answer_admin();
        let mut cx = cx!(self);
        self.requests.on_tick(&mut cx);
        self.flush_requests();
        self.housekeep();
        if self.snap_job.is_none() {
            free_off_loop(self.compaction.settle(&mut self.raft));
        }
        self.publish();
    }

    /// As leader, proposes the state machine's upkeep command (the store's sweep of expired
    /// items), a bounded step at most every [`HOUSEKEEPING_INTERVAL`] and one at a time.
    fn housekeep(&mut self) {
        let (last, index) = self.housekeeping;
        if self.raft.role() != Role::Leader
            || index > self.state.applied
            || last.elapsed() < HOUSEKEEPING_INTERVAL
        {
            return;
        }
        let now_ms = wall_ms();
        let Some(command) = self.state.sm.housekeeping(now_ms) else {
            return;
        };
        // Origin this replica, request 0: no request waits for it (ids start far above 0).
        let env = Envelope {
            origin: self.cfg.id,
            req: 0,
            client: 0,
            seq: 0,
            now_ms,
            command,
        };
        self.housekeeping = (Instant::now(), self.raft.last_index() + 1);
        if self.raft.propose(env.encode()).is_ok() {
            self.requests.stats.proposals += 1;
        }
    }

    /// Acts on every ready batch: persist, send, apply, answer.
    fn drive(&mut self) -> Result<(), Fatal> {
        self.drive_for(None)
    }

    /// [`Replica::drive`], stopping after `budget` with batches left: the loop comes back to
    /// them after its ticks and events (a replica that fell behind applies slice by slice,
    /// `max_committed_bytes_per_ready`, instead of holding the loop until it caught up).
    fn drive_for(&mut self, budget: Option<Duration>) -> Result<(), Fatal> {
        let t0 = Instant::now();
        let t = Instant::now();
        self.poll_restore()?;
        stall(self.cfg.id, t, || "polling a restore".into());
        loop {
            // Between ready batches only (a batch may carry a data-plane command the ring's
            // state depends on): a follower's held appends that now continue its log, whether
            // records must wake this loop at once, and the records
            // of this loop's own pushes, which woke nobody (`DataPlane::drain_due`): often the
            // entry with its commit.
            if !self.raft.has_ready() {
                let now = self.now();
                let waiting = !self.requests.is_empty();
                if let Some(d) = self.dp.as_mut() {
                    d.between_batches(&mut self.raft, waiting, now);
                }
            }
            if !self.raft.has_ready() && self.dp.as_ref().is_some_and(|d| d.plane.drain_due()) {
                self.on_ring();
            }
            if !self.raft.has_ready() {
                break;
            }
            let t = Instant::now();
            let rd = self.raft.ready();
            let n = rd.committed_entries.len();
            self.handle_ready(rd)?;
            self.flush_fast_replies();
            stall(self.cfg.id, t, || format!("a ready batch ({n} committed)"));
            self.raft.advance();
            let mut cx = cx!(self);
            self.requests.after_ready(&mut cx);
            if self.raft.role() == Role::Leader {
                self.sw_latency.committed(self.raft.commit_index());
            }
            self.serve_reads();
            self.flush_requests();
            if budget.is_some_and(|b| t0.elapsed() >= b) {
                break;
            }
        }
        self.flush_fast_replies();
        // Also with nothing ready (O(1) unless a snapshot is due): a snapshot finished or
        // asked for on an idle replica (a single replica's `POST /snapshot` waited for the
        // next write when this ran only after a ready batch).
        let t = Instant::now();
        self.maybe_compact()?;
        stall(self.cfg.id, t, || "compaction".into());
        // A new term, role or leader is in `/status` at once: an idle replica publishes only
        // when it ticks, and it ticks only when its timers need it.
        if self.published != (self.raft.term(), self.raft.role(), self.raft.leader()) {
            self.publish();
        }
        Ok(())
    }

    fn handle_ready(&mut self, rd: Ready) -> Result<(), Fatal> {
        let now = self.now();
        waverunner_host::ready::handle_ready(rd, self, now).map_err(Fatal)
    }

    /// Applies committed entries in order and answers their clients.
    fn apply_committed(&mut self, committed: &[Entry]) {
        for e in committed {
            if e.index <= self.state.applied {
                continue;
            }
            assert_eq!(
                e.index,
                self.state.applied + 1,
                "node {}: a committed entry after a gap",
                self.cfg.id
            );
            self.counters.applied_entries += 1;
            self.compaction.applied(e.data.len() as u64);
            if !self.admin_pending.is_empty() {
                self.admin_pending.on_applied(e);
                self.answer_admin();
            }
            if e.kind == EntryKind::ConfChange {
                match ConfChange::decode(&e.data) {
                    Some(cc) => {
                        self.state.apply_conf(e.index, cc);
                        self.on_conf_applied(cc);
                        // A membership change is in `/status` at once, not at the next tick
                        // (an idle follower ticks only when its timers need it).
                        self.publish();
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
                    self.learn_fast_addr(rec.id, rec.client);
                    continue;
                }
                Err(err) => {
                    // Only replicas write entries; a bad one is a bug, but it must not wedge us.
                    tracing::error!("entry {} is not an envelope: {err}", e.index);
                    self.state.skip(e.index);
                    continue;
                }
            };
            if env.origin == 0 {
                let outcome = self.state.apply(e.index, &env);
                self.admission.set_applied(e.index);
                self.answer_fast_client(e.index, &env, &outcome);
                continue;
            }
            // This replica's own request, submitted decoded: applied without decoding it.
            let now = self.now();
            let (state, counters) = (&mut self.state, &mut self.counters);
            self.requests.on_applied(
                e.index,
                env.origin,
                env.req,
                env.client,
                env.seq,
                |mine| match mine.and_then(|p| p.decoded.take()) {
                    Some(d) => {
                        counters.applied_decoded += 1;
                        Outcome::Applied(state.apply_decoded(e.index, &env, d))
                    }
                    None => state.apply(e.index, &env).map(Answer::Encoded),
                },
                now,
            );
            self.admission.set_applied(e.index);
        }
    }

    /// Starts decoding a leader's snapshot into a new state on another thread. One that is
    /// still being decoded is superseded (its entries are all covered by the new one: the core
    /// installs only snapshots past its commit index).
    fn start_restore(&mut self, snap: &Snapshot) {
        let index = snap.meta.index;
        assert!(
            self.state.applied < index,
            "a snapshot at {index} installed over applied index {}",
            self.state.applied
        );
        if let Some(old) = self.restoring.take() {
            assert!(old.pending.iter().all(|e| e.index <= index));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let in_place = tx.clone();
        let data = snap.data.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("restore-{}", self.cfg.id))
            .spawn(move || {
                let _low = crate::priority::LowPriority::new();
                let _ = tx.send(Replicated::<S>::from_snapshot(index, &data));
            });
        if let Err(e) = spawned {
            // No thread: the loop restores it in place when it next polls.
            tracing::warn!("cannot start a restore thread ({e}); restoring on the loop");
            let _ = in_place.send(None);
        }
        self.restoring = Some(Restore {
            index,
            started: Instant::now(),
            rx,
            data: snap.data.clone(),
            pending: Vec::new(),
        });
    }

    /// Swaps in the state a restore thread finished, then applies the entries that waited.
    fn poll_restore(&mut self) -> Result<(), Fatal> {
        let Some(r) = &self.restoring else {
            return Ok(());
        };
        let got = match r.rx.try_recv() {
            Ok(got) => got,
            Err(std::sync::mpsc::TryRecvError::Empty) => return Ok(()),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                Some(Err("the restore thread died".into()))
            }
        };
        let r = self.restoring.take().expect("checked");
        let fatal = |e: String| Fatal(format!("cannot install the leader's snapshot: {e}"));
        match got {
            Some(state) => {
                let state = state.map_err(fatal)?;
                assert_eq!(state.applied, r.index);
                self.state = state;
            }
            None => self.state.restore(r.index, &r.data).map_err(fatal)?,
        }
        self.counters.snapshots_installed += 1;
        tracing::info!(
            "installed a snapshot at index {} ({} bytes in {} ms)",
            r.index,
            r.data.len(),
            r.started.elapsed().as_millis()
        );
        self.sync_transport();
        debug_assert!(r.pending.windows(2).all(|w| w[0].index + 1 == w[1].index));
        self.apply_committed(&r.pending);
        self.serve_reads();
        self.publish();
        Ok(())
    }

    fn serve_reads(&mut self) {
        let now = self.now();
        for (_, id) in self.requests.reads_ready(self.state.applied) {
            let decoded = self.requests.token_mut(id).and_then(|p| p.decoded.take());
            let Some(command) = self.requests.command(id) else {
                continue;
            };
            let now_ms = wall_ms().max(self.state.now_ms);
            let result = match decoded {
                Some(d) => {
                    self.counters.applied_decoded += 1;
                    self.state.sm.query_decoded(now_ms, command, d)
                }
                None => Answer::Encoded(self.state.sm.query(now_ms, command)),
            };
            self.requests.answer(id, result, now);
        }
    }

    /// Starts a snapshot when the log has grown by `snapshot_entries` entries or
    /// `snapshot_bytes` bytes since the last one (or one was asked for), and adopts the one a
    /// background thread finished. Taking one costs the loop O(1) (a view of the state that
    /// later writes do not change); serializing and writing it happen on the thread.
    fn maybe_compact(&mut self) -> Result<(), Fatal> {
        self.poll_snapshot()?;
        if self.snap_job.is_some() || self.restoring.is_some() {
            return Ok(());
        }
        let applied = self.state.applied;
        let base = self.compaction.base(&self.raft);
        let due = self
            .compaction
            .due(&self.raft, applied, self.state.sm.used_memory())
            || !self.snap_waiters.is_empty();
        if !due {
            return Ok(());
        }
        let meta = (applied > base)
            .then(|| self.raft.snapshot_meta(applied))
            .flatten();
        let Some(meta) = meta else {
            // Nothing applied since the last one: that one answers who asked.
            for w in self.snap_waiters.drain(..) {
                w(Ok(base));
            }
            return Ok(());
        };
        let job = self.state.snapshot_job();
        debug_assert_eq!(job.index, meta.index);
        let files = self.snap_files.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name(format!("snapshot-{}", self.cfg.id))
            .spawn(move || {
                // At idle priority while it keeps its floor: a write's p99 during snapshots
                // of 1 M keys back to back was 2.0–2.6× the p99 outside at bulk priority.
                let _low = crate::priority::LowPriority::idle();
                // Streamed to a file, never whole in memory; the snapshot's data is then a
                // mapping of that file.
                let r = files
                    .create(meta)
                    .map_err(|e| e.to_string())
                    .and_then(|mut w| {
                        let mut paced = crate::priority::Paced::with_floor(
                            &mut w,
                            crate::priority::SNAPSHOT_PACE,
                            crate::priority::SNAPSHOT_FLOOR,
                        );
                        job.write_to(&mut paced).map_err(|e| e.to_string())?;
                        w.finish().map_err(|e| e.to_string())
                    });
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a snapshot thread: {e}");
            return Ok(());
        }
        self.compaction.started();
        self.snap_status.in_progress = true;
        self.snap_job = Some(SnapJob {
            index: applied,
            started: Instant::now(),
            rx,
            waiters: std::mem::take(&mut self.snap_waiters),
        });
        Ok(())
    }

    /// Adopts a snapshot the background thread finished: the storage compacts its log to it,
    /// the Raft core to the one before it (the trailing window).
    fn poll_snapshot(&mut self) -> Result<(), Fatal> {
        let Some(job) = &self.snap_job else {
            return Ok(());
        };
        let r = match job.rx.try_recv() {
            Ok(r) => r,
            Err(std::sync::mpsc::TryRecvError::Empty) => return Ok(()),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => Err("the thread died".into()),
        };
        let job = self.snap_job.take().expect("checked");
        self.snap_status.in_progress = false;
        let snap = match r {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("snapshot at index {} failed: {e}", job.index);
                self.counters.snapshot_failures += 1;
                for w in job.waiters {
                    w(Err(AdminError::Retry(format!("snapshot failed: {e}"))));
                }
                return Ok(());
            }
        };
        let index = snap.meta.index;
        let took = job.started.elapsed();
        if index > self.raft.snapshot_index() {
            // A snapshot installed from the leader meanwhile supersedes this one.
            self.storage
                .snapshot_written(&snap.meta)
                .map_err(|e| Fatal(format!("storage: {e}")))?;
            self.snap_status.last_index = index;
            self.snap_status.last_bytes = snap.data.len() as u64;
            self.snap_status.last_duration_ms = took.as_millis() as u64;
            self.counters.snapshots_taken += 1;
            tracing::info!(
                "snapshot at index {index}: {} bytes in {} ms",
                snap.data.len(),
                took.as_millis()
            );
            // The core drops the snapshot it held; the last reference is freed off the loop
            // (unmapping hundreds of megabytes took the loop 100–350 ms).
            let dp_needed = self.dp.as_ref().and_then(|d| d.lowest_match(&self.raft));
            free_off_loop(self.compaction.taken(&mut self.raft, snap, dp_needed));
        }
        // Who asked reads `/status` next: it shows this snapshot.
        self.publish();
        for w in job.waiters {
            w(Ok(index));
        }
        Ok(())
    }

    fn publish(&mut self) {
        self.published = (self.raft.term(), self.raft.role(), self.raft.leader());
        // Entries skipped and snapshots installed move it too.
        self.admission.set_applied(self.state.applied);
        let t = &self.transport.stats;
        // Peer frames the transport refused, and fast-path packets the host could not read.
        self.counters.frames_rejected = t.frames_rejected.load(Ordering::Relaxed)
            + self.dp.as_ref().map_or(0, |d| d.stats.bad_packets);
        self.counters.frames_dropped = t.frames_dropped.load(Ordering::Relaxed);
        self.counters.peer_connections_lost = t.closed_found.load(Ordering::Relaxed);
        self.counters.keepalives_sent = self.keepalive.sent.load(Ordering::Relaxed);
        let rc = self.raft.counters();
        self.counters.messages_rejected = rc.messages_rejected;
        self.counters.snapshot_pieces_sent = rc.snapshot_chunks_sent;
        self.counters.snapshot_pieces_dropped = rc.snapshot_chunks_dropped;
        self.counters.snapshot_transfers_abandoned = rc.snapshot_transfers_abandoned;
        self.counters.recovery_reelections = rc.recovery_reelections;
        self.counters.timeouts_held_in_stall = rc.timeouts_held_in_stall;
        let q = &self.requests.stats;
        self.counters.requests = q.requests;
        self.counters.busy = q.busy + self.admission.refused.load(Ordering::Relaxed);
        self.counters.proposals = q.proposals;
        self.counters.forwarded = q.forwarded;
        self.counters.held_back = q.held_back;
        self.counters.reads_refused = q.reads_refused;
        self.counters.reads_batched = q.reads_batched;
        self.counters.answered = q.answered;
        self.counters.duplicates = q.duplicates;
        self.counters.timeouts = q.timeouts;
        let p = Protocol::of(&self.raft, self.state.applied);
        let members = self.member_status(&p);
        let (fastpath, replication_latency_ns) = self.fastpath_status();
        let s = Status {
            id: self.cfg.id,
            role: p.role.into(),
            term: p.term,
            leader: p.leader,
            commit_index: p.commit_index,
            applied_index: p.applied_index,
            last_index: p.last_index,
            first_index: p.first_index,
            voters: p.voters(),
            learners: p.learners(),
            members,
            dataplane: self.dp.as_ref().map_or("off", |d| d.plane.kind()).into(),
            dataplane_enabled: p.dataplane_enabled,
            fastpath,
            replication_latency_ns,
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
            used_memory: self.state.sm.used_memory(),
            snapshot: self.snap_status.clone(),
            rss_bytes: self.rss.get(),
            maxmemory: self.cfg.maxmemory,
            digest: self.state.sm.digest(),
            counters: self.counters.clone(),
            // Filled from the HDR histograms by whoever reads `/status` or `/metrics`.
            write_latency: Default::default(),
            read_latency: Default::default(),
        };
        *self.status.lock().expect("status") = s;
    }
}

impl<S: StateMachine> Replica<S> {
    /// The members with the addresses this replica knows for them.
    fn member_status(&self, p: &Protocol) -> Vec<MemberStatus> {
        p.members
            .iter()
            .map(|m| {
                let id = m.id;
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
                MemberStatus {
                    id,
                    role: if m.voter { "voter" } else { "learner" }.into(),
                    raft: raft.map(|a| a.to_string()).unwrap_or_default(),
                    client: client.map(|a| a.to_string()).unwrap_or_default(),
                    match_index: m.match_index,
                }
            })
            .collect()
    }
}

/// The process's resident set size, read at most once a second (a read per tick is a file
/// open, read and close 100 times a second).
#[derive(Default)]
struct Rss(std::cell::Cell<(Option<Instant>, u64)>);

impl Rss {
    fn get(&self) -> u64 {
        let (at, v) = self.0.get();
        if at.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return v;
        }
        let v = rss_bytes();
        self.0.set((Some(Instant::now()), v));
        v
    }
}

/// This process's resident set size (0 if `/proc` cannot tell).
fn rss_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// The host side of the data plane (DESIGN §3, `docs/dataplane.md`).
impl<S: StateMachine> Replica<S> {
    /// The time for the host logic: since this replica started.
    fn now(&self) -> waverunner_host::Time {
        self.time_of(Instant::now())
    }

    /// The host logic's time of `t`.
    fn time_of(&self, t: Instant) -> waverunner_host::Time {
        host_time(self.epoch, t)
    }

    /// Feeds every record on the data plane's ring to the core.
    fn on_ring(&mut self) {
        let now = self.now();
        let Some(d) = self.dp.as_mut() else { return };
        self.dp_wake.store(false, Ordering::Release);
        d.consume_ring(&mut self.raft, now);
    }

    /// What the data plane passed up through its socket (`xdp`), read on the loop: clients'
    /// requests proposed straight into Raft, the rest to the host.
    fn read_fast(&mut self, port: &mut FastPort) {
        port.read(|src, pkt, passed| match passed {
            Passed::Request(f) => f(src, pkt, &mut Direct(self)),
            Passed::Host => self.on_fast(src, pkt),
            Passed::Oversize => {
                tracing::debug!("dropped an oversize datagram from {src} on the fast-path port");
                self.counters.client_errors += 1;
            }
        });
    }

    /// A fast-path packet the data plane passed up: software Raft handles it as the Raft
    /// message it is.
    fn on_fast(&mut self, src: SocketAddr, pkt: &[u8]) {
        let now = self.now();
        let removed = self.state.removed.contains(&self.cfg.id);
        let Some(d) = self.dp.as_mut() else { return };
        self.dp_wake.store(false, Ordering::Release);
        d.on_packet(&mut self.raft, src, pkt, removed, now);
    }

    /// A request replica `env.origin` forwarded over TCP: the host proposes it or NACKs it.
    fn propose_forwarded(&mut self, env: Envelope) {
        let mut cx = cx!(self);
        self.requests.propose_forwarded(env, &mut cx);
        self.flush_requests();
    }

    /// The leader answers a native client whose request its data plane ordered, unless the
    /// data plane already did (exactly one reply per acknowledged write).
    fn answer_fast_client(&mut self, index: u64, env: &Envelope, outcome: &Outcome) {
        let leader = self.raft.leader();
        let Some(d) = self.dp.as_mut() else { return };
        self.requests.stats.answered +=
            d.answer_client(index, env.client, env.seq, leader, outcome) as u64;
    }

    /// Sends the replies [`Replica::answer_fast_client`] queued (after each ready batch and
    /// once a drive is over: a restore's pending entries are applied outside a batch).
    fn flush_fast_replies(&mut self) {
        if let Some(d) = self.dp.as_mut() {
            self.requests.stats.answered += d.flush_replies() as u64;
        }
    }

    /// The data plane's part of status.
    fn fastpath_status(&self) -> (crate::metrics::FastPathStatus, Vec<u64>) {
        let mut lat = self.sw_latency.buckets.clone();
        let mut f = crate::metrics::FastPathStatus {
            state: match self.raft.dataplane_state() {
                DataPlaneState::Off => "off",
                DataPlaneState::Enabling { .. } => "enabling",
                DataPlaneState::On { .. } => "on",
                DataPlaneState::Disabling { .. } => "disabling",
            }
            .into(),
            ..Default::default()
        };
        if self.raft.role() == Role::Leader && self.raft.dataplane_state() == DataPlaneState::Off {
            f.blocker = self.raft.dataplane_blocker().unwrap_or("").into();
        }
        if let Some(d) = &self.dp {
            let c = d.plane.counters();
            let r = d.plane.registers();
            let h = &d.stats;
            f.enabled_term = h.enabled_term;
            f.enables = h.enables;
            f.disables = h.disables.clone();
            f.last_disable_reason = h.last_reason.clone();
            f.retransmitted = h.retransmitted;
            f.host_replies = h.host_replies;
            f.heartbeats = h.heartbeats;
            f.reordered = h.reordered;
            f.retx_asked = h.retx_asked;
            f.retx_outdated = h.retx_outdated;
            f.rejects_sent = h.rejects_sent;
            f.handled = c.handled;
            f.punted = c.punted;
            f.dropped = c.dropped;
            f.retx_requests = c.retx_requests;
            f.client_replies = c.client_replies;
            f.ring_full = c.ring_full;
            f.shed = c.shed;
            f.shed_unanswered = c.shed_unanswered;
            f.halts = c.halts;
            f.malformed = c.malformed;
            f.last_index = r.last_index;
            f.commit_index = r.commit_index;
            let dl = d.plane.latency();
            if lat.len() < dl.buckets.len() {
                lat.resize(dl.buckets.len(), 0);
            }
            for (i, v) in dl.buckets.iter().enumerate() {
                lat[i] += v;
            }
        }
        (f, lat)
    }
}

/// The node's side of a ready batch (`waverunner_host::ready`): its storage, transport and
/// state machine.
impl<S: StateMachine> ReadyIo for Replica<S> {
    type Plane = Box<dyn waverunner_dataplane::DataPlane>;

    fn parts(&mut self) -> Parts<'_, Self::Plane> {
        Parts {
            raft: &mut self.raft,
            dp: self.dp.as_mut(),
            st: &mut self.ready_st,
        }
    }

    fn soft_state(&mut self, ss: waverunner_raft::SoftState) -> Result<(), String> {
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
            if self.role == Role::Leader || ss.role == Role::PreCandidate {
                // Why: how long ago each peer was last heard from.
                let now = Instant::now();
                let mut ages: Vec<(u64, u128)> = self
                    .heard
                    .iter()
                    .map(|(id, at)| (*id, now.saturating_duration_since(*at).as_millis()))
                    .collect();
                ages.sort_unstable();
                tracing::info!(
                    "node {}: peers last heard (id, ms ago): {ages:?}",
                    self.cfg.id
                );
            }
            if self.role == Role::Recovering {
                // Caught up from a leader: from now on a restart keeps this log.
                self.storage
                    .mark_caught_up()
                    .map_err(|e| format!("storage: {e}"))?;
            }
            if ss.role != Role::Leader {
                self.sw_latency.clear();
            }
            if matches!(ss.role, Role::Candidate | Role::PreCandidate)
                && !matches!(self.role, Role::Candidate | Role::PreCandidate)
            {
                self.counters.elections += 1;
            }
            self.role = ss.role;
        }
        self.requests.on_soft_state();
        Ok(())
    }

    fn send(&mut self, m: Message) {
        let to = m.to;
        self.transport.send(to, Frame::Raft(m));
    }

    fn install_snapshot(&mut self, snap: &Snapshot) -> Result<(), String> {
        self.storage
            .save_snapshot(snap)
            .map_err(|e| format!("storage: {e}"))?;
        self.start_restore(snap);
        self.compaction.installed(snap.meta.index);
        Ok(())
    }

    fn append(&mut self, entries: &[Entry]) -> Result<(), String> {
        self.storage
            .append(entries)
            .map_err(|e| format!("storage: {e}"))
    }

    fn set_hard_state(&mut self, hs: HardState) -> Result<(), String> {
        self.storage
            .set_hard_state(hs)
            .map_err(|e| format!("storage: {e}"))
    }

    fn sync(&mut self) -> Result<(), String> {
        if self.storage.sync().map_err(|e| format!("storage: {e}"))? > 0 {
            self.counters.fsyncs += 1;
        }
        Ok(())
    }

    fn apply(&mut self, committed: Vec<Entry>) {
        match &mut self.restoring {
            Some(r) => r.pending.extend(committed),
            None => self.apply_committed(&committed),
        }
    }

    fn applied(&self) -> u64 {
        self.state.applied
    }

    fn reads(&mut self, refusals: Vec<Vec<u8>>, states: Vec<waverunner_raft::ReadState>) {
        self.requests.on_read_states(refusals, states);
    }
}

/// The host logic's time of `t` on a loop started at `epoch` (`Replica::time_of`).
fn host_time(epoch: Instant, t: Instant) -> waverunner_host::Time {
    t.saturating_duration_since(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keepalive thread waits until the loop missed two ticks, speaks for it through a
    /// stall, and goes quiet once the stall passes `KEEPALIVE_MAX_STALL` (stuck, not busy), so
    /// that followers elect another leader.
    #[test]
    fn keepalive_speaks_for_a_stalled_loop_but_not_for_a_stuck_one() {
        let tick = Duration::from_millis(10);
        let max = KEEPALIVE_MAX_STALL.as_millis() as u64;
        assert_eq!(keepalive_step(1_000, 1_000, tick), KeepaliveStep::Wait(20));
        assert_eq!(keepalive_step(1_019, 1_000, tick), KeepaliveStep::Wait(1));
        assert_eq!(keepalive_step(1_020, 1_000, tick), KeepaliveStep::Send);
        assert_eq!(keepalive_step(1_400, 1_000, tick), KeepaliveStep::Send);
        assert_eq!(
            keepalive_step(1_000 + max, 1_000, tick),
            KeepaliveStep::Send
        );
        assert_eq!(
            keepalive_step(1_001 + max, 1_000, tick),
            KeepaliveStep::Quiet
        );
        // The loop ticks again: it waits, then speaks for the next stall.
        assert_eq!(keepalive_step(5_000, 4_995, tick), KeepaliveStep::Wait(15));
    }

    /// The front-ends admit at most `MAX_ADMITTED` requests: the next is refused busy at once,
    /// without reaching the loop's queue, and an answer makes room again.
    #[test]
    fn admission_refuses_beyond_the_bound_and_frees_on_answer() {
        let (tx, rx) = std::sync::mpsc::sync_channel(EVENT_QUEUE);
        let poll = mio::Poll::new().unwrap();
        let tx = Inbox::new(tx, Arc::new(Bell::new(poll.registry()).unwrap()));
        let admission = Arc::new(Admission::default());
        let h = Handle::new(tx, Arc::default(), admission.clone(), Arc::default());
        type Answers = Arc<Mutex<Vec<Result<Answer, ClientError>>>>;
        let answers: Answers = Arc::default();
        let submit = |seq: u64| {
            let a = answers.clone();
            h.submit(Submit {
                client: 1,
                seq,
                command: vec![],
                decoded: None,
                reply: Box::new(move |r| a.lock().unwrap().push(r)),
            });
        };
        for seq in 0..MAX_ADMITTED as u64 {
            submit(seq);
        }
        assert_eq!(admission.pending(), MAX_ADMITTED);
        assert!(answers.lock().unwrap().is_empty());
        submit(u64::MAX);
        assert!(matches!(
            answers.lock().unwrap().as_slice(),
            [Err(ClientError::Busy)]
        ));
        assert_eq!(admission.refused(), 1);
        assert_eq!(
            rx.try_iter().take(MAX_ADMITTED + 1).count(),
            MAX_ADMITTED,
            "one queued each"
        );
        // The queued events were dropped unanswered with the iterator: each gave its place back.
        assert_eq!(admission.pending(), 0);
        submit(7);
        let Ok(Event::Submit(s)) = rx.try_recv() else {
            panic!("admitted again");
        };
        assert_eq!(admission.pending(), 1);
        (s.reply)(Ok(Answer::Encoded(b"ok".to_vec())));
        assert_eq!(admission.pending(), 0);
        assert_eq!(answers.lock().unwrap().len(), 2);
    }
}
