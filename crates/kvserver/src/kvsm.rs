//! The key-value store as a [`StateMachine`]: commands are encoded [`waverunner_kv::Op`]s,
//! results encoded [`waverunner_kv::Response`]s.

use waverunner_kv::codec::{decode_op, decode_response, encode_op, encode_response};
use waverunner_kv::{KvStore, Op, Response};

use waverunner_node::sm::{Answer, Decoded, SnapshotView, StateMachine};

/// The store's items shared in O(1) ([`KvStore::snapshot_view`]).
struct KvView(waverunner_kv::store::SnapshotView);

impl SnapshotView for KvView {
    fn write_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.0.write_to(w).map(|_| ())
    }

    fn len_bound(&self) -> usize {
        self.0.len_bound()
    }
}

/// The replicated key-value store.
#[derive(Default)]
pub struct KvMachine(pub KvStore);

fn encode(r: &Response) -> Vec<u8> {
    let mut out = Vec::new();
    encode_response(r, &mut out);
    out
}

/// The operation a front-end submitted decoded ([`Op`], one or a batch), or `None` for
/// anything else (then the bytes are applied).
fn decoded_op(command: &[u8], decoded: Decoded) -> Option<Op> {
    let Ok(op) = decoded.downcast::<Op>() else {
        debug_assert!(false, "a front-end submitted something other than an Op");
        return None;
    };
    // The other replicas apply the bytes: they must say the same.
    debug_assert_eq!(decode_op(command).as_ref(), Ok(&*op));
    Some(*op)
}

/// A request's result as the store's [`Response`], answered decoded ([`Answer::Decoded`],
/// from a request submitted with its [`Op`]) or encoded.
pub fn response_of(answer: Answer) -> Result<Response, String> {
    match answer {
        Answer::Encoded(b) => decode_response(&b).map_err(|e| e.to_string()),
        Answer::Decoded(r) => r
            .downcast::<Response>()
            .map(|r| *r)
            .map_err(|_| "a result that is not a Response".to_string()),
    }
}

impl StateMachine for KvMachine {
    fn apply(&mut self, index: u64, now_ms: u64, command: &[u8]) -> Vec<u8> {
        match decode_op(command) {
            Ok(op) => encode(&self.0.apply(index, now_ms, &op)),
            Err(e) => encode(&Response::Error(format!("malformed command: {e}"))),
        }
    }

    fn apply_decoded(
        &mut self,
        index: u64,
        now_ms: u64,
        command: &[u8],
        decoded: Decoded,
    ) -> Answer {
        match decoded_op(command, decoded) {
            Some(op) => Answer::Decoded(Box::new(self.0.apply(index, now_ms, &op))),
            None => Answer::Encoded(self.apply(index, now_ms, command)),
        }
    }

    fn query_decoded(&self, now_ms: u64, command: &[u8], decoded: Decoded) -> Answer {
        match decoded_op(command, decoded) {
            Some(op) => Answer::Decoded(Box::new(self.0.read(now_ms, &op))),
            None => Answer::Encoded(self.query(now_ms, command)),
        }
    }

    fn is_read_only(&self, command: &[u8]) -> bool {
        waverunner_kv::codec::is_read_only_command(command)
    }

    fn query(&self, now_ms: u64, command: &[u8]) -> Vec<u8> {
        match decode_op(command) {
            Ok(op) => encode(&self.0.read(now_ms, &op)),
            Err(e) => encode(&Response::Error(format!("malformed command: {e}"))),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        self.0.snapshot()
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotView> {
        Box::new(KvView(self.0.snapshot_view()))
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0 = KvStore::restore(snapshot).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn from_snapshot(snapshot: &[u8]) -> Option<Result<Self, String>> {
        Some(
            KvStore::restore(snapshot)
                .map(KvMachine)
                .map_err(|e| e.to_string()),
        )
    }

    fn digest(&self) -> u64 {
        self.0.digest()
    }

    fn size(&self) -> u64 {
        self.0.held() as u64
    }

    fn used_memory(&self) -> u64 {
        self.0.used_memory()
    }

    fn may_grow(&self, command: &[u8]) -> bool {
        // Redis's denyoom commands: those that store; DEL, EXPIRE, FLUSHALL and reads pass.
        // A batch (a pipeline) that holds one is refused whole: its commands are answered with
        // the refusal, none is applied.
        fn grows(op: &Op) -> bool {
            match op {
                Op::Batch(ops) | Op::Multi(ops) => ops.iter().any(grows),
                op => matches!(
                    op,
                    Op::Set { .. }
                        | Op::MSet { .. }
                        | Op::Cas { .. }
                        | Op::IncrBy { .. }
                        | Op::McIncr { .. }
                        | Op::McIncrOr { .. }
                        | Op::Append { .. }
                        | Op::Prepend { .. }
                        | Op::SetRange { .. }
                        | Op::MSetNx { .. }
                        | Op::Copy { .. }
                        | Op::IncrByFloat { .. }
                        | Op::SetBit { .. }
                ),
            }
        }
        decode_op(command).is_ok_and(|op| grows(&op))
    }

    fn reclaim(&mut self, budget: usize) -> usize {
        self.0.reclaim(budget)
    }

    fn housekeeping(&self, now_ms: u64) -> Option<Vec<u8>> {
        if !self.0.expired_waiting(now_ms) {
            return None;
        }
        let mut out = Vec::new();
        encode_op(&Op::Sweep, &mut out);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use waverunner_kv::resp::{command, Action};

    /// The operations a front-end submits for these Redis commands.
    fn ops(lines: &[&str]) -> Vec<Op> {
        lines
            .iter()
            .map(|l| {
                let args: Vec<Vec<u8>> = l.split(' ').map(|a| a.as_bytes().to_vec()).collect();
                match command(&args) {
                    Action::Store(op, _) => op,
                    _ => panic!("{l}: not an operation on the store"),
                }
            })
            .collect()
    }

    #[test]
    fn an_operation_applied_as_parsed_changes_the_state_as_its_encoding_does() {
        let mut all = ops(&[
            "SET a 1",
            "INCR a",
            "APPEND a xyz",
            "SET b 2 PX 5000",
            "LPUSH l x y z",
            "HSET h f v g w",
            "SADD s m n",
            "ZADD z 1 m 2 n",
            "GET a",
            "INCR l",
            "DEL b",
            "EXPIRE a 100",
        ]);
        let batch = Op::Batch(ops(&["SET c 3", "GET c", "LPOP l", "HDEL h f"]));
        all.push(batch);
        let (mut parsed, mut bytes) = (KvMachine::default(), KvMachine::default());
        for (i, op) in all.into_iter().enumerate() {
            let index = i as u64 + 1;
            let now_ms = 1_000 + index;
            let mut command = Vec::new();
            encode_op(&op, &mut command);
            let a = parsed.apply_decoded(index, now_ms, &command, Box::new(op.clone()));
            assert!(matches!(a, Answer::Decoded(_)), "{op:?} answered encoded");
            let b = bytes.apply(index, now_ms, &command);
            assert_eq!(
                response_of(a),
                decode_response(&b).map_err(|e| e.to_string())
            );
            assert_eq!(parsed.digest(), bytes.digest(), "after {op:?}");
            // A read as parsed answers as its encoding does.
            let get = ops(&["GET a"]).remove(0);
            let mut q = Vec::new();
            encode_op(&get, &mut q);
            let read = parsed.query_decoded(now_ms, &q, Box::new(get));
            assert_eq!(
                response_of(read),
                decode_response(&bytes.query(now_ms, &q)).map_err(|e| e.to_string())
            );
        }
        assert!(parsed.size() > 0);
    }

    #[test]
    fn what_is_not_an_operation_is_applied_from_the_bytes() {
        let op = ops(&["SET a 1"]).remove(0);
        let mut command = Vec::new();
        encode_op(&op, &mut command);
        let mut m = KvMachine::default();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            m.apply_decoded(1, 0, &command, Box::new(7u32))
        }));
        if cfg!(debug_assertions) {
            assert!(
                r.is_err(),
                "a debug build refuses a front-end's mistake loudly"
            );
        } else {
            assert!(matches!(r, Ok(Answer::Encoded(_))));
            assert_eq!(m.size(), 1);
        }
    }
}
