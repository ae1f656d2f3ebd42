//! The key-value store as a [`StateMachine`]: commands are encoded [`waverunner_kv::Op`]s,
//! results encoded [`waverunner_kv::Response`]s.

use waverunner_kv::codec::{decode_op, encode_op, encode_response};
use waverunner_kv::{KvStore, Op, Response};

use waverunner_node::sm::{SnapshotView, StateMachine};

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

impl StateMachine for KvMachine {
    fn apply(&mut self, index: u64, now_ms: u64, command: &[u8]) -> Vec<u8> {
        match decode_op(command) {
            Ok(op) => encode(&self.0.apply(index, now_ms, &op)),
            Err(e) => encode(&Response::Error(format!("malformed command: {e}"))),
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
