//! The replicated state machine: the trait users implement, the entry envelope every command
//! travels in, the client sessions that make retried commands exactly-once, and the members'
//! address book (node-level records in the log, so every replica learns where a new member
//! listens; snapshotted with the sessions).

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use waverunner_storage::codec::{CodecError, Reader, Writer};

/// A deterministic state machine replicated by Waverunner.
///
/// Every replica applies the same commands in the same order with the same `index` and
/// `now_ms`, so `apply` must depend on nothing else (no clocks, no randomness, no I/O).
/// Commands and results are opaque bytes; malformed commands must produce an error result,
/// never a panic (they are in the log forever).
pub trait StateMachine: Send + 'static {
    /// Applies `command`, committed at log `index` (strictly increasing), with the leader's
    /// timestamp `now_ms` (ms since the Unix epoch; use it for expiry, never the local clock).
    fn apply(&mut self, index: u64, now_ms: u64, command: &[u8]) -> Vec<u8>;
    /// Whether `command` only reads: such commands may be answered by a linearizable read
    /// (ReadIndex or lease) through [`StateMachine::query`] without going through the log.
    fn is_read_only(&self, command: &[u8]) -> bool;
    /// Answers a read-only command on the current state (`now_ms`: the local clock).
    fn query(&self, now_ms: u64, command: &[u8]) -> Vec<u8>;
    /// [`StateMachine::apply`] for a command this replica's own front-end proposed, given as
    /// the front-end had it before encoding it into `command` (`decoded`), with no session
    /// to remember its result: the state machine need not decode the command, and may return
    /// its result as is ([`Answer::Decoded`]) for the front-end to render. It must change the
    /// state exactly as `apply(index, now_ms, command)` would (the other replicas apply the
    /// bytes). The default applies the bytes.
    fn apply_decoded(
        &mut self,
        index: u64,
        now_ms: u64,
        command: &[u8],
        decoded: Decoded,
    ) -> Answer {
        let _ = decoded;
        Answer::Encoded(self.apply(index, now_ms, command))
    }
    /// [`StateMachine::query`] with the command as its front-end decoded it
    /// ([`StateMachine::apply_decoded`]). The default reads the bytes.
    fn query_decoded(&self, now_ms: u64, command: &[u8], decoded: Decoded) -> Answer {
        let _ = decoded;
        Answer::Encoded(self.query(now_ms, command))
    }
    /// The whole state, for a snapshot.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the state with a snapshot's.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;
    /// A new state from a snapshot, built on another thread while the replica keeps running
    /// (it is swapped in when complete: the replica's loop never spends O(state) installing a
    /// leader's snapshot). `None`, the default: the state machine cannot, and the snapshot is
    /// given to [`StateMachine::restore`] on the loop instead.
    fn from_snapshot(snapshot: &[u8]) -> Option<Result<Self, String>>
    where
        Self: Sized,
    {
        let _ = snapshot;
        None
    }
    /// The state at this moment, for another thread to write while the replica keeps
    /// applying. The default copies [`StateMachine::snapshot`] (O(state) on the replica loop);
    /// a state machine with a persistent or copy-on-write structure hands out a view in O(1).
    fn snapshot_view(&self) -> Box<dyn SnapshotView> {
        Box::new(BytesView(self.snapshot()))
    }
    /// A digest of the state, so operators and tests can see that replicas converged. Read
    /// on every tick: it must cost O(1) (keep it as the state changes).
    fn digest(&self) -> u64 {
        0
    }
    /// Number of items held (shown in `/status`). Read on every tick: O(1).
    fn size(&self) -> u64 {
        0
    }
    /// Bytes the state takes as the state machine accounts them: shown in `/status`,
    /// `/metrics` and `INFO memory`, and compared with `maxmemory`. Read on every tick: O(1).
    fn used_memory(&self) -> u64 {
        0
    }
    /// Whether `command` may make the state larger: while [`StateMachine::used_memory`] is
    /// above `maxmemory`, such commands are refused before they reach the log (Redis's
    /// `denyoom` commands); deletions and reads still pass.
    fn may_grow(&self, command: &[u8]) -> bool {
        !self.is_read_only(command)
    }
    /// Frees at most `budget` pieces of memory the state let go of but could not free at
    /// once (the key-value store keeps the values a snapshot view still shared, so that the
    /// view's thread does not free the loop's memory); returns how many. The replica calls
    /// it at every turn of its loop, and does not sleep while it returns `budget`. The default
    /// has nothing to free.
    fn reclaim(&mut self, budget: usize) -> usize {
        let _ = budget;
        0
    }
    /// A command the leader should propose now for the state's upkeep, in a bounded step (the
    /// key-value store removes expired items this way while no write does it), or `None`.
    /// `now_ms` is the leader's clock. The leader asks at most every
    /// [`crate::replica::HOUSEKEEPING_INTERVAL`], and not while the last one is uncommitted.
    fn housekeeping(&self, now_ms: u64) -> Option<Vec<u8>> {
        let _ = now_ms;
        None
    }
}

/// A command as its proposer's front-end had it before encoding it for the log
/// ([`StateMachine::apply_decoded`]). Type-erased so that the replica's handle, queue and
/// requests stay independent of the state machine's types; the state machine downcasts it.
pub type Decoded = Box<dyn Any + Send>;

/// A result as the replica hands it to the request's front-end.
pub enum Answer {
    /// Encoded by [`StateMachine::apply`] or [`StateMachine::query`].
    Encoded(Vec<u8>),
    /// As [`StateMachine::apply_decoded`] or [`StateMachine::query_decoded`] returned it:
    /// only for requests submitted with their command decoded.
    Decoded(Box<dyn Any + Send>),
}

impl Answer {
    /// The encoded result of a request submitted without its command decoded (such a
    /// request is always answered encoded).
    pub fn encoded(self) -> Vec<u8> {
        match self {
            Answer::Encoded(b) => b,
            Answer::Decoded(_) => panic!("a request submitted encoded was answered decoded"),
        }
    }
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Encoded(b) => write!(f, "Encoded({} bytes)", b.len()),
            Answer::Decoded(_) => write!(f, "Decoded(..)"),
        }
    }
}

/// A state machine's state at one moment, to be written by another thread
/// ([`StateMachine::snapshot_view`]).
pub trait SnapshotView: Send {
    /// Writes the state in [`StateMachine::restore`]'s format.
    fn write_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()>;
    /// At least the length `write_to` writes (0: unknown), so the snapshot's buffer is
    /// allocated once instead of grown (each growth copies what was written).
    fn len_bound(&self) -> usize {
        0
    }
}

/// A view that is already bytes (the default for state machines without a cheaper one).
struct BytesView(Vec<u8>);

impl SnapshotView for BytesView {
    fn write_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        w.write_all(&self.0)
    }

    fn len_bound(&self) -> usize {
        self.0.len()
    }
}

/// A snapshot to be written off the replica loop ([`Replicated::snapshot_job`]).
pub struct SnapshotJob {
    /// The applied index it captures.
    pub index: u64,
    head: Vec<u8>,
    sm: Box<dyn SnapshotView>,
    tail: Vec<u8>,
}

/// First word of a snapshot in the streamed layout: `STREAMED`, the clock, the sessions, the
/// address book, then the state machine's bytes to the end, unprefixed, so that they stream
/// to a file without their length being known first. The older layout began with the clock
/// (ms since the Unix epoch, never this value) and put the state machine, length-prefixed,
/// between the sessions and the address book; it still restores.
const STREAMED: u64 = u64::from_le_bytes(*b"WRSNAP02");

impl SnapshotJob {
    /// Writes the snapshot's bytes (what [`Replicated::restore`] takes) to `w`. O(state): run
    /// it off the loop.
    pub fn write_to(self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        w.write_all(&STREAMED.to_le_bytes())?;
        w.write_all(&self.head)?;
        w.write_all(&self.tail)?;
        self.sm.write_to(w)
    }

    /// The snapshot's bytes in memory (tests and the simulator; the node streams them to a
    /// file with [`SnapshotJob::write_to`]).
    pub fn run(self) -> Vec<u8> {
        let bound = 8 + self.head.len() + self.tail.len() + self.sm.len_bound();
        let mut out = Vec::with_capacity(bound);
        self.write_to(&mut out)
            .expect("a snapshot written to memory");
        out
    }
}

/// The data of a normal log entry: who asked, for which session, when, and the command. Its
/// layout has one owner, `waverunner_fastpath::payload` (with `c/payload.h`).
pub use waverunner_fastpath::payload::Envelope;

/// First byte of a [`MemberRecord`] entry (a client envelope starts with
/// `waverunner_fastpath::payload::ENV_TAG`).
const MEMBER_RECORD: u8 = waverunner_fastpath::payload::ENTRY_MEMBER_RECORD;

/// A node-level log record: member `id` listens for replicas at `raft` (and for native
/// clients at `client`). The leader appends one right before the `AddLearner` / `AddVoter`
/// entry of a new member, so every replica that has the configuration change also has the
/// address before it (Log Matching), and learns it when it applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRecord {
    /// The member's node id.
    pub id: u64,
    /// Its control-plane TCP address.
    pub raft: SocketAddr,
    /// Its native client UDP address, if it serves one.
    pub client: Option<SocketAddr>,
}

fn put_addr(w: &mut Writer, a: Option<SocketAddr>) {
    w.put_bytes(a.map(|a| a.to_string()).unwrap_or_default().as_bytes());
}

fn get_addr(r: &mut Reader) -> Result<Option<SocketAddr>, CodecError> {
    let b = r.get_bytes(64)?;
    if b.is_empty() {
        return Ok(None);
    }
    std::str::from_utf8(b)
        .ok()
        .and_then(|t| t.parse().ok())
        .map(Some)
        .ok_or(CodecError::Invalid {
            what: "socket address",
            value: b.len() as u64,
        })
}

impl MemberRecord {
    /// Encodes the record as entry data.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.put_u8(MEMBER_RECORD);
        w.put_u64(self.id);
        put_addr(&mut w, Some(self.raft));
        put_addr(&mut w, self.client);
        w.into_inner()
    }

    /// Decodes entry data written by [`MemberRecord::encode`].
    pub fn decode(b: &[u8]) -> Result<MemberRecord, CodecError> {
        let mut r = Reader::new(b);
        let tag = r.get_u8()?;
        if tag != MEMBER_RECORD {
            return Err(CodecError::Invalid {
                what: "member record tag",
                value: u64::from(tag),
            });
        }
        let id = r.get_u64()?;
        let raft = get_addr(&mut r)?.ok_or(CodecError::Invalid {
            what: "member raft address",
            value: 0,
        })?;
        let client = get_addr(&mut r)?;
        r.finish()?;
        Ok(MemberRecord { id, raft, client })
    }
}

/// What the data of a normal, non-empty log entry is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryData {
    /// A client command.
    Command(Envelope),
    /// A member's addresses.
    Member(MemberRecord),
}

impl EntryData {
    /// Decodes the data of a normal, non-empty entry.
    pub fn decode(b: &[u8]) -> Result<EntryData, String> {
        if b.first() == Some(&MEMBER_RECORD) {
            MemberRecord::decode(b)
                .map(EntryData::Member)
                .map_err(|e| e.to_string())
        } else {
            Envelope::decode(b, MAX_DATA)
                .map(EntryData::Command)
                .map_err(|e| e.to_string())
        }
    }
}

/// Where a member listens, as the address book holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberAddrs {
    /// Control-plane TCP.
    pub raft: SocketAddr,
    /// Native client UDP, if any.
    pub client: Option<SocketAddr>,
}

/// Most address-book entries (removed ids included) kept; beyond it the oldest removed ids
/// are forgotten.
pub const MAX_MEMBERS: usize = 4_096;

/// Largest command or result inside an entry or a snapshot.
const MAX_DATA: usize = waverunner_storage::codec::MAX_ENTRY_DATA;

/// Most client sessions remembered; beyond it the least recently used one is forgotten
/// (deterministically: by the index of its last command).
pub const MAX_SESSIONS: usize = 10_000;

pub use waverunner_host::requests::Outcome;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Session {
    seq: u64,
    result: Vec<u8>,
    last_index: u64,
}

/// The replicated state: client sessions, the members' address book, plus the user's state
/// machine.
pub struct Replicated<S> {
    /// The user's state machine.
    pub sm: S,
    sessions: BTreeMap<u64, Session>,
    /// Addresses of members that joined through the log (the initial members' addresses come
    /// from each replica's configuration).
    pub members: BTreeMap<u64, MemberAddrs>,
    /// Members whose removal was applied: never talked to again.
    pub removed: BTreeSet<u64>,
    /// Highest applied index.
    pub applied: u64,
    /// The newest leader timestamp applied.
    pub now_ms: u64,
}

impl<S: StateMachine> Replicated<S> {
    /// Wraps a fresh state machine.
    pub fn new(sm: S) -> Self {
        Replicated {
            sm,
            sessions: BTreeMap::new(),
            members: BTreeMap::new(),
            removed: BTreeSet::new(),
            applied: 0,
            now_ms: 0,
        }
    }

    /// Applies a normal entry's envelope at `index`.
    pub fn apply(&mut self, index: u64, env: &Envelope) -> Outcome {
        self.advance(index, env);
        if env.client == 0 {
            return Outcome::Applied(self.sm.apply(index, self.now_ms, &env.command));
        }
        if let Some(s) = self.sessions.get_mut(&env.client) {
            if env.seq == s.seq {
                s.last_index = index;
                return Outcome::Duplicate(s.result.clone());
            }
            if env.seq < s.seq {
                return Outcome::Stale;
            }
        }
        let result = self.sm.apply(index, self.now_ms, &env.command);
        if !self.sessions.contains_key(&env.client) && self.sessions.len() >= MAX_SESSIONS {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(id, s)| (s.last_index, **id))
                .map(|(id, _)| *id)
                .expect("non-empty");
            self.sessions.remove(&oldest);
        }
        self.sessions.insert(
            env.client,
            Session {
                seq: env.seq,
                result: result.clone(),
                last_index: index,
            },
        );
        Outcome::Applied(result)
    }

    /// Applies a normal entry's envelope at `index` that this replica's front-end proposed
    /// without a session, given its command as the front-end decoded it
    /// ([`StateMachine::apply_decoded`]).
    pub fn apply_decoded(&mut self, index: u64, env: &Envelope, decoded: Decoded) -> Answer {
        assert_eq!(env.client, 0, "a session's result is remembered encoded");
        self.advance(index, env);
        self.sm
            .apply_decoded(index, self.now_ms, &env.command, decoded)
    }

    /// Entry `index` is applied next: entries are applied in order, once, and the leader's
    /// clock never goes back.
    fn advance(&mut self, index: u64, env: &Envelope) {
        self.skip(index);
        self.now_ms = self.now_ms.max(env.now_ms);
    }

    /// Records that `index` (a no-op or configuration entry) was applied.
    pub fn skip(&mut self, index: u64) {
        assert!(index > self.applied, "entries are applied in order, once");
        self.applied = index;
    }

    /// Applies a member's address record at `index`. A removed member's record is ignored.
    pub fn apply_member(&mut self, index: u64, rec: &MemberRecord) {
        self.skip(index);
        if rec.id == 0 || self.removed.contains(&rec.id) {
            return;
        }
        self.members.insert(
            rec.id,
            MemberAddrs {
                raft: rec.raft,
                client: rec.client,
            },
        );
    }

    /// Applies a committed membership change at `index`: a removed member leaves the address
    /// book for good.
    pub fn apply_conf(&mut self, index: u64, cc: waverunner_raft::ConfChange) {
        self.skip(index);
        if let waverunner_raft::ConfChange::Remove(id) = cc {
            self.members.remove(&id);
            self.removed.insert(id);
            while self.removed.len() > MAX_MEMBERS {
                self.removed.pop_first();
            }
        }
    }

    /// Sessions remembered.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Snapshot of sessions and state machine.
    pub fn snapshot(&self) -> Vec<u8> {
        self.snapshot_job().run()
    }

    /// What a snapshot of this moment needs, taken cheaply so that another thread can write
    /// it while the loop keeps applying: the sessions and the address book (bounded by
    /// [`MAX_SESSIONS`] and [`MAX_MEMBERS`]) serialized now, the state machine as its
    /// [`StateMachine::snapshot_view`].
    pub fn snapshot_job(&self) -> SnapshotJob {
        let mut w = Writer::new();
        w.put_u64(self.now_ms);
        w.put_u32(self.sessions.len() as u32);
        for (id, s) in &self.sessions {
            w.put_u64(*id);
            w.put_u64(s.seq);
            w.put_u64(s.last_index);
            w.put_bytes(&s.result);
        }
        let head = w.into_inner();
        // The address book follows the state machine (absent in snapshots of older versions).
        let mut w = Writer::new();
        w.put_u32(self.members.len() as u32);
        for (id, m) in &self.members {
            w.put_u64(*id);
            put_addr(&mut w, Some(m.raft));
            put_addr(&mut w, m.client);
        }
        w.put_u32(self.removed.len() as u32);
        for id in &self.removed {
            w.put_u64(*id);
        }
        SnapshotJob {
            index: self.applied,
            head,
            sm: self.sm.snapshot_view(),
            tail: w.into_inner(),
        }
    }

    /// Restores sessions and state machine from a snapshot taken at `index`: all of it, or
    /// nothing (a damaged snapshot is refused with the reason).
    pub fn restore(&mut self, index: u64, data: &[u8]) -> Result<(), String> {
        let d = SnapshotParts::of(data)?;
        self.sm.restore(d.sm)?;
        self.members = d.members;
        self.removed = d.removed;
        self.sessions = d.sessions;
        self.now_ms = d.now_ms;
        self.applied = index;
        Ok(())
    }

    /// The state of a snapshot taken at `index`, built anew (on another thread: see
    /// [`StateMachine::from_snapshot`]); `None` when the state machine cannot.
    pub fn from_snapshot(index: u64, data: &[u8]) -> Option<Result<Self, String>> {
        let d = match SnapshotParts::of(data) {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        let sm = match S::from_snapshot(d.sm)? {
            Ok(sm) => sm,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(Replicated {
            sm,
            sessions: d.sessions,
            members: d.members,
            removed: d.removed,
            applied: index,
            now_ms: d.now_ms,
        }))
    }
}

/// A node snapshot read up to the state machine's part.
struct SnapshotParts<'a> {
    now_ms: u64,
    sessions: BTreeMap<u64, Session>,
    members: BTreeMap<u64, MemberAddrs>,
    removed: BTreeSet<u64>,
    sm: &'a [u8],
}

impl<'a> SnapshotParts<'a> {
    fn of(data: &'a [u8]) -> Result<SnapshotParts<'a>, String> {
        let bad = |e: CodecError| format!("snapshot: {e}");
        let mut r = Reader::new(data);
        let first = r.get_u64().map_err(bad)?;
        let streamed = first == STREAMED;
        let now_ms = if streamed {
            r.get_u64().map_err(bad)?
        } else {
            first
        };
        let sessions = get_sessions(&mut r).map_err(bad)?;
        let (sm, members, removed) = if streamed {
            let (members, removed) = get_book(&mut r)?;
            (r.get_raw(r.remaining()).map_err(bad)?, members, removed)
        } else {
            let sm = r
                .get_bytes(waverunner_storage::codec::MAX_SNAPSHOT_DATA)
                .map_err(bad)?;
            // Absent in snapshots of versions before the address book.
            let book = if r.remaining() > 0 {
                get_book(&mut r)?
            } else {
                Default::default()
            };
            r.finish().map_err(bad)?;
            (sm, book.0, book.1)
        };
        Ok(SnapshotParts {
            now_ms,
            sessions,
            members,
            removed,
            sm,
        })
    }
}

type Book = (BTreeMap<u64, MemberAddrs>, BTreeSet<u64>);

fn get_sessions(r: &mut Reader<'_>) -> Result<BTreeMap<u64, Session>, CodecError> {
    let n = r.get_u32()? as usize;
    if n > MAX_SESSIONS {
        return Err(CodecError::TooLong {
            what: "sessions",
            len: n as u64,
            max: MAX_SESSIONS as u64,
        });
    }
    let mut sessions = BTreeMap::new();
    for _ in 0..n {
        let id = r.get_u64()?;
        let seq = r.get_u64()?;
        let last_index = r.get_u64()?;
        let result = r.get_bytes(MAX_DATA)?.to_vec();
        sessions.insert(
            id,
            Session {
                seq,
                result,
                last_index,
            },
        );
    }
    Ok(sessions)
}

fn get_book(r: &mut Reader<'_>) -> Result<Book, String> {
    let bad = |e: CodecError| format!("snapshot: {e}");
    let n = r.get_u32().map_err(bad)? as usize;
    if n > MAX_MEMBERS {
        return Err(format!("snapshot: {n} members, more than {MAX_MEMBERS}"));
    }
    let mut members = BTreeMap::new();
    for _ in 0..n {
        let id = r.get_u64().map_err(bad)?;
        let raft = get_addr(r)
            .map_err(bad)?
            .ok_or("snapshot: a member without an address")?;
        let client = get_addr(r).map_err(bad)?;
        members.insert(id, MemberAddrs { raft, client });
    }
    let n = r.get_u32().map_err(bad)? as usize;
    if n > MAX_MEMBERS {
        return Err(format!(
            "snapshot: {n} removed members, more than {MAX_MEMBERS}"
        ));
    }
    let mut removed = BTreeSet::new();
    for _ in 0..n {
        removed.insert(r.get_u64().map_err(bad)?);
    }
    Ok((members, removed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter: every command adds its first byte.
    #[derive(Default)]
    struct Counter(u64);
    impl StateMachine for Counter {
        fn apply(&mut self, _: u64, _: u64, c: &[u8]) -> Vec<u8> {
            self.0 += u64::from(c.first().copied().unwrap_or(0));
            self.0.to_le_bytes().to_vec()
        }
        fn is_read_only(&self, c: &[u8]) -> bool {
            c.is_empty()
        }
        fn query(&self, _: u64, _: &[u8]) -> Vec<u8> {
            self.0.to_le_bytes().to_vec()
        }
        fn snapshot(&self) -> Vec<u8> {
            self.0.to_le_bytes().to_vec()
        }
        fn restore(&mut self, s: &[u8]) -> Result<(), String> {
            self.0 = u64::from_le_bytes(s.try_into().map_err(|_| "bad counter")?);
            Ok(())
        }
        fn from_snapshot(s: &[u8]) -> Option<Result<Self, String>> {
            let mut c = Counter::default();
            Some(c.restore(s).map(|()| c))
        }
    }

    /// A counter that can only be restored in place.
    #[derive(Default)]
    struct InPlace(Counter);
    impl StateMachine for InPlace {
        fn apply(&mut self, i: u64, n: u64, c: &[u8]) -> Vec<u8> {
            self.0.apply(i, n, c)
        }
        fn is_read_only(&self, c: &[u8]) -> bool {
            self.0.is_read_only(c)
        }
        fn query(&self, n: u64, c: &[u8]) -> Vec<u8> {
            self.0.query(n, c)
        }
        fn snapshot(&self) -> Vec<u8> {
            self.0.snapshot()
        }
        fn restore(&mut self, s: &[u8]) -> Result<(), String> {
            self.0.restore(s)
        }
    }

    fn env(client: u64, seq: u64, add: u8) -> Envelope {
        Envelope {
            origin: 1,
            req: 1,
            client,
            seq,
            now_ms: 5,
            command: vec![add],
        }
    }

    #[test]
    fn a_retried_command_is_applied_once() {
        let mut r = Replicated::new(Counter::default());
        assert_eq!(
            r.apply(1, &env(7, 1, 3)),
            Outcome::Applied(3u64.to_le_bytes().to_vec())
        );
        assert_eq!(
            r.apply(2, &env(7, 1, 3)),
            Outcome::Duplicate(3u64.to_le_bytes().to_vec())
        );
        assert_eq!(
            r.apply(3, &env(7, 2, 3)),
            Outcome::Applied(6u64.to_le_bytes().to_vec())
        );
        assert_eq!(r.apply(4, &env(7, 1, 3)), Outcome::Stale);
        // Without a session every command applies.
        assert_eq!(
            r.apply(5, &env(0, 1, 1)),
            Outcome::Applied(7u64.to_le_bytes().to_vec())
        );
        assert_eq!(
            r.apply(6, &env(0, 1, 1)),
            Outcome::Applied(8u64.to_le_bytes().to_vec())
        );
        assert_eq!(r.sm.0, 8);
    }

    #[test]
    fn sessions_survive_a_snapshot_and_are_bounded() {
        let mut r = Replicated::new(Counter::default());
        for c in 1..=(MAX_SESSIONS as u64 + 5) {
            r.apply(c, &env(c, 1, 1));
        }
        assert_eq!(r.sessions(), MAX_SESSIONS);
        let snap = r.snapshot();
        let mut back = Replicated::new(Counter::default());
        back.restore(r.applied, &snap).unwrap();
        assert_eq!(back.sessions(), MAX_SESSIONS);
        let i = back.applied + 1;
        let last = MAX_SESSIONS as u64 + 5;
        assert!(matches!(
            back.apply(i, &env(last, 1, 1)),
            Outcome::Duplicate(_)
        ));
        assert!(back.restore(1, &snap[..snap.len() - 1]).is_err());
    }

    #[test]
    fn a_state_built_from_a_snapshot_equals_one_restored_in_place() {
        let mut r = Replicated::new(Counter::default());
        for c in 1..=20u64 {
            r.apply(c, &env(c % 7, c, 3));
        }
        let m = MemberRecord {
            id: 4,
            raft: "127.0.0.1:7004".parse().unwrap(),
            client: None,
        };
        r.apply_member(21, &m);
        let snap = r.snapshot();
        let mut in_place = Replicated::new(Counter::default());
        in_place.restore(r.applied, &snap).unwrap();
        let built = Replicated::<Counter>::from_snapshot(r.applied, &snap)
            .expect("Counter builds one")
            .unwrap();
        for s in [&in_place, &built] {
            assert_eq!(s.sm.0, r.sm.0);
            assert_eq!((s.applied, s.now_ms), (r.applied, r.now_ms));
            assert_eq!(s.sessions, r.sessions);
            assert_eq!(s.members, r.members);
        }
        // A damaged snapshot is refused, whole or in the state machine's part.
        let torn = &snap[..snap.len() - 1];
        assert!(matches!(
            Replicated::<Counter>::from_snapshot(1, torn),
            Some(Err(_))
        ));
        assert!(matches!(
            Replicated::<Counter>::from_snapshot(1, &snap[..5]),
            Some(Err(_))
        ));
        // A state machine that cannot is restored on the loop instead.
        assert!(Replicated::<InPlace>::from_snapshot(r.applied, &snap).is_none());
    }

    #[test]
    fn the_address_book_is_replicated_and_snapshotted() {
        let mut r = Replicated::new(Counter::default());
        let rec = |id, port| MemberRecord {
            id,
            raft: format!("127.0.0.1:{port}").parse().unwrap(),
            client: (id % 2 == 0).then(|| format!("127.0.0.1:{}", port + 100).parse().unwrap()),
        };
        for (i, id) in [4u64, 5, 6].iter().enumerate() {
            let data = rec(*id, 7000 + *id as u16).encode();
            match EntryData::decode(&data).unwrap() {
                EntryData::Member(m) => r.apply_member(i as u64 + 1, &m),
                other => panic!("{other:?}"),
            }
        }
        r.apply_conf(4, waverunner_raft::ConfChange::Remove(5));
        r.apply_conf(5, waverunner_raft::ConfChange::AddVoter(6));
        // A removed member is never added back by a late record.
        r.apply_member(6, &rec(5, 1));
        assert_eq!(r.members.keys().copied().collect::<Vec<_>>(), vec![4, 6]);
        assert_eq!(r.members[&4].raft, "127.0.0.1:7004".parse().unwrap());
        assert_eq!(
            r.members[&4].client,
            Some("127.0.0.1:7104".parse().unwrap())
        );
        assert_eq!(
            r.members[&6].client,
            Some("127.0.0.1:7106".parse().unwrap())
        );
        r.apply_member(7, &rec(7, 7007));
        assert_eq!(r.members[&7].client, None);
        assert!(r.removed.contains(&5));
        assert_eq!(r.applied, 7);
        let snap = r.snapshot();
        let mut back = Replicated::new(Counter::default());
        back.restore(r.applied, &snap).unwrap();
        assert_eq!(back.members, r.members);
        assert_eq!(back.removed, r.removed);
        // Snapshots of older versions: the state machine length-prefixed before the book,
        // and before that without the book; they restore, with an empty one in the second.
        let mut old = Replicated::new(Counter::default());
        old.apply(1, &env(7, 1, 3));
        let layout_1 = |book: bool| {
            let job = old.snapshot_job();
            let mut w = Writer::new();
            w.put_raw(&job.head);
            w.put_bytes(&old.sm.snapshot());
            if book {
                w.put_raw(&job.tail);
            }
            w.into_inner()
        };
        for book in [true, false] {
            let mut back = Replicated::new(Counter::default());
            back.restore(1, &layout_1(book)).unwrap();
            assert_eq!(back.sessions(), 1);
            assert_eq!(back.sm.0, old.sm.0);
            let mut data = layout_1(book);
            data.push(0);
            assert!(back.restore(1, &data).is_err(), "trailing bytes");
        }
        // Client envelopes still decode as commands; garbage records are refused.
        let e = env(3, 4, 5);
        assert_eq!(
            EntryData::decode(&e.encode()).unwrap(),
            EntryData::Command(e)
        );
        assert!(EntryData::decode(&[2, 1, 2, 3]).is_err());
        let mut bad = rec(4, 7004).encode();
        bad.push(0);
        assert!(MemberRecord::decode(&bad).is_err());
    }

    #[test]
    fn envelopes_round_trip_and_reject_garbage() {
        let e = env(3, 4, 5);
        assert_eq!(Envelope::decode(&e.encode(), MAX_DATA).unwrap(), e);
        assert!(Envelope::decode(&[], MAX_DATA).is_err());
        assert!(Envelope::decode(&[2; 50], MAX_DATA).is_err());
        let mut b = e.encode();
        b.push(0);
        assert!(Envelope::decode(&b, MAX_DATA).is_err());
    }
}
