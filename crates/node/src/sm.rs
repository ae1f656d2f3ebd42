//! The replicated state machine: the trait users implement, the entry envelope every command
//! travels in, and the client sessions that make retried commands exactly-once.

use std::collections::BTreeMap;

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
    /// The whole state, for a snapshot.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the state with a snapshot's.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;
    /// A digest of the state, so operators and tests can see that replicas converged.
    fn digest(&self) -> u64 {
        0
    }
    /// Number of items held (shown in `/status`).
    fn size(&self) -> u64 {
        0
    }
}

/// The data of a normal log entry: who asked, for which session, when, and the command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Replica that took the request from its client and answers it once applied.
    pub origin: u64,
    /// That replica's request id.
    pub req: u64,
    /// Client session id (0: no session, no deduplication).
    pub client: u64,
    /// Sequence number within the session.
    pub seq: u64,
    /// The leader's clock when it proposed the entry (ms since the Unix epoch).
    pub now_ms: u64,
    /// The state-machine command.
    pub command: Vec<u8>,
}

const ENVELOPE_VERSION: u8 = 1;

impl Envelope {
    /// Encodes the envelope as entry data.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(45 + self.command.len());
        w.put_u8(ENVELOPE_VERSION);
        w.put_u64(self.origin);
        w.put_u64(self.req);
        w.put_u64(self.client);
        w.put_u64(self.seq);
        w.put_u64(self.now_ms);
        w.put_bytes(&self.command);
        w.into_inner()
    }

    /// Decodes entry data.
    pub fn decode(b: &[u8]) -> Result<Envelope, CodecError> {
        let mut r = Reader::new(b);
        let version = r.get_u8()?;
        if version != ENVELOPE_VERSION {
            return Err(CodecError::Invalid {
                what: "envelope version",
                value: u64::from(version),
            });
        }
        let e = Envelope {
            origin: r.get_u64()?,
            req: r.get_u64()?,
            client: r.get_u64()?,
            seq: r.get_u64()?,
            now_ms: r.get_u64()?,
            command: r.get_bytes(MAX_DATA)?.to_vec(),
        };
        r.finish()?;
        Ok(e)
    }
}

/// Largest command or result inside an entry or a snapshot.
const MAX_DATA: usize = waverunner_storage::codec::MAX_ENTRY_DATA;

/// Most client sessions remembered; beyond it the least recently used one is forgotten
/// (deterministically: by the index of its last command).
pub const MAX_SESSIONS: usize = 10_000;

/// What applying an entry produced for its client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Applied now; the state machine's result.
    Applied(Vec<u8>),
    /// A retry of the session's last command: its remembered result, not applied again.
    Duplicate(Vec<u8>),
    /// An older command of the session than its last one: not applied.
    Stale,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Session {
    seq: u64,
    result: Vec<u8>,
    last_index: u64,
}

/// The replicated state: client sessions plus the user's state machine.
pub struct Replicated<S> {
    /// The user's state machine.
    pub sm: S,
    sessions: BTreeMap<u64, Session>,
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
            applied: 0,
            now_ms: 0,
        }
    }

    /// Applies a normal entry's envelope at `index`.
    pub fn apply(&mut self, index: u64, env: &Envelope) -> Outcome {
        assert!(index > self.applied, "entries are applied in order, once");
        self.applied = index;
        self.now_ms = self.now_ms.max(env.now_ms);
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

    /// Records that `index` (a no-op or configuration entry) was applied.
    pub fn skip(&mut self, index: u64) {
        assert!(index > self.applied, "entries are applied in order, once");
        self.applied = index;
    }

    /// Sessions remembered.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Snapshot of sessions and state machine.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.put_u64(self.now_ms);
        w.put_u32(self.sessions.len() as u32);
        for (id, s) in &self.sessions {
            w.put_u64(*id);
            w.put_u64(s.seq);
            w.put_u64(s.last_index);
            w.put_bytes(&s.result);
        }
        w.put_bytes(&self.sm.snapshot());
        w.into_inner()
    }

    /// Restores sessions and state machine from a snapshot taken at `index`.
    pub fn restore(&mut self, index: u64, data: &[u8]) -> Result<(), String> {
        let bad = |e: CodecError| format!("snapshot: {e}");
        let mut r = Reader::new(data);
        let now_ms = r.get_u64().map_err(bad)?;
        let n = r.get_u32().map_err(bad)? as usize;
        if n > MAX_SESSIONS {
            return Err(format!("snapshot: {n} sessions, more than {MAX_SESSIONS}"));
        }
        let mut sessions = BTreeMap::new();
        for _ in 0..n {
            let id = r.get_u64().map_err(bad)?;
            let seq = r.get_u64().map_err(bad)?;
            let last_index = r.get_u64().map_err(bad)?;
            let result = r.get_bytes(MAX_DATA).map_err(bad)?.to_vec();
            sessions.insert(
                id,
                Session {
                    seq,
                    result,
                    last_index,
                },
            );
        }
        let sm = r
            .get_bytes(waverunner_storage::codec::MAX_SNAPSHOT_DATA)
            .map_err(bad)?;
        r.finish().map_err(bad)?;
        self.sm.restore(sm)?;
        self.sessions = sessions;
        self.now_ms = now_ms;
        self.applied = index;
        Ok(())
    }
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
    fn envelopes_round_trip_and_reject_garbage() {
        let e = env(3, 4, 5);
        assert_eq!(Envelope::decode(&e.encode()).unwrap(), e);
        assert!(Envelope::decode(&[]).is_err());
        assert!(Envelope::decode(&[2; 50]).is_err());
        let mut b = e.encode();
        b.push(0);
        assert!(Envelope::decode(&b).is_err());
    }
}
