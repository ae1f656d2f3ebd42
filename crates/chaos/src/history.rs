//! The history of a chaos run: every operation a client invoked, when, and what it saw.
//!
//! A history file holds one JSON object per line:
//!
//! ```text
//! {"client":3,"key":"k1","op":"set","input":{"value":"v7"},"call_us":1200,"return_us":1450,"outcome":"ok","output":{}}
//! {"client":4,"key":"k1","op":"get","input":{},"call_us":1300,"return_us":1500,"outcome":"ok","output":{"value":"v7"}}
//! {"client":5,"key":"k2","op":"incr","input":{"delta":2},"call_us":1310,"return_us":null,"outcome":"unknown","output":null}
//! {"client":6,"key":"k2","op":"cas","input":{"expected":null,"new":"x"},"call_us":1320,"return_us":1400,"outcome":"ok","output":{"ok":true}}
//! ```
//!
//! | field | meaning |
//! |---|---|
//! | `client` | the client (a sequential process) that invoked it |
//! | `key` | the one key it touched |
//! | `op`, `input` | `get` `{}`; `set` `{"value": s}`; `incr` `{"delta": i64}`; `cas` `{"expected": s or null, "new": s}` |
//! | `call_us` | when it was invoked, in microseconds on a clock shared by every client (monotonic) |
//! | `return_us` | when the client got its answer; required for `ok`, may be `null` otherwise |
//! | `outcome` | `ok`: the client saw the answer; `fail`: definitely not applied; `unknown`: may or may not have been applied (a timeout, a lost connection) |
//! | `output` | for `ok` only (`null` otherwise): `get` `{"value": s or null}` (null: no such key); `set` `{}`; `incr` `{"value": new i64}`; `cas` `{"ok": bool}` |
//!
//! The model each key is checked against: a register holding a string or nothing. `get` reads
//! it; `set` writes it; `incr` adds `delta` to a missing key (read as 0) or a Redis-syntax
//! decimal and stores the sum (a value that is not such a decimal, or an overflow, is an error
//! and changes nothing, so the harness records it as `fail`); `cas` writes `new` if the value
//! equals `expected` (`null`: if the key is missing) and answers whether it did.
//!
//! **The unknown-outcome rule.** `fail` operations are left out of the check. An `unknown`
//! operation is given to Porcupine with a return time after every other operation, and the
//! model accepts it in any state, applying its input if it applies at all: the checker may place
//! its effect anywhere after its call, or nowhere (last). This is what Jepsen and etcd's
//! robustness tests do. A harness that cannot tell whether a write happened must record
//! `unknown`, never `fail`: recording `fail` for a write that did happen makes a correct
//! system look non-linearizable when its effect is read.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Deserializer, Serialize};

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// Read the key.
    Get,
    /// Write `value`.
    Set { value: String },
    /// Add `delta` (a missing key counts as 0), answering the new value (Redis `INCRBY`).
    Incr { delta: i64 },
    /// Write `new` if the value is `expected` (`None`: if the key is missing).
    Cas {
        expected: Option<String>,
        new: String,
    },
}

impl Input {
    /// The `op` field: `get`, `set`, `incr` or `cas`.
    pub fn op(&self) -> &'static str {
        match self {
            Input::Get => "get",
            Input::Set { .. } => "set",
            Input::Incr { .. } => "incr",
            Input::Cas { .. } => "cas",
        }
    }

    /// Whether the operation can change the key.
    pub fn is_write(&self) -> bool {
        !matches!(self, Input::Get)
    }
}

/// What the client saw, for an operation whose outcome is [`Outcome::Ok`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// The value read, `None` if the key was missing.
    Get { value: Option<String> },
    /// The write was applied.
    Set,
    /// The value after the increment.
    Incr { value: i64 },
    /// Whether the comparison matched (and the new value was written).
    Cas { ok: bool },
}

impl Output {
    fn op(&self) -> &'static str {
        match self {
            Output::Get { .. } => "get",
            Output::Set => "set",
            Output::Incr { .. } => "incr",
            Output::Cas { .. } => "cas",
        }
    }
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The client saw the answer.
    Ok,
    /// Definitely not applied (refused: no leader, busy, an error reply). Left out of the check.
    Fail,
    /// May or may not have been applied (timed out, connection lost). Checked as an operation
    /// that never returns and whose answer is unknown.
    Unknown,
}

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "Line", try_from = "Line")]
pub struct Operation {
    /// The client (a sequential process) that invoked it.
    pub client: u64,
    /// The key it touched.
    pub key: String,
    /// What the client asked for.
    pub input: Input,
    /// Invocation time, microseconds, on a clock shared by every client.
    pub call_us: u64,
    /// Completion time: required for [`Outcome::Ok`], optional otherwise.
    pub return_us: Option<u64>,
    /// How it ended.
    pub outcome: Outcome,
    /// What the client saw: `Some` exactly when the outcome is [`Outcome::Ok`].
    pub output: Option<Output>,
}

impl Operation {
    /// An operation just invoked: its outcome is [`Outcome::Unknown`] until one of
    /// [`ok`](Self::ok), [`fail`](Self::fail) or [`unknown`](Self::unknown) says otherwise.
    pub fn invoke(client: u64, key: impl Into<String>, input: Input, call_us: u64) -> Self {
        Operation {
            client,
            key: key.into(),
            input,
            call_us,
            return_us: None,
            outcome: Outcome::Unknown,
            output: None,
        }
    }

    /// The client saw `output` at `return_us`.
    pub fn ok(mut self, return_us: u64, output: Output) -> Self {
        self.return_us = Some(return_us);
        self.outcome = Outcome::Ok;
        self.output = Some(output);
        self
    }

    /// Definitely not applied; the client learnt so at `return_us`.
    pub fn fail(mut self, return_us: Option<u64>) -> Self {
        self.return_us = return_us;
        self.outcome = Outcome::Fail;
        self.output = None;
        self
    }

    /// May or may not have been applied; the client gave up at `return_us`.
    pub fn unknown(mut self, return_us: Option<u64>) -> Self {
        self.return_us = return_us;
        self.outcome = Outcome::Unknown;
        self.output = None;
        self
    }

    /// Checks the invariants the checker relies on: an output exactly for `ok`, of the
    /// input's kind; a return time for `ok`, not before the call.
    pub fn validate(&self) -> Result<(), String> {
        match (self.outcome, &self.output) {
            (Outcome::Ok, None) => return Err("an ok operation needs an output".into()),
            (Outcome::Ok, Some(out)) if out.op() != self.input.op() => {
                return Err(format!(
                    "a {} operation cannot have a {} output",
                    self.input.op(),
                    out.op()
                ))
            }
            (Outcome::Fail | Outcome::Unknown, Some(_)) => {
                return Err(format!(
                    "a {} operation has no output",
                    match self.outcome {
                        Outcome::Fail => "failed",
                        _ => "unknown",
                    }
                ))
            }
            _ => {}
        }
        match self.return_us {
            None if self.outcome == Outcome::Ok => Err("an ok operation needs return_us".into()),
            Some(r) if r < self.call_us => {
                Err(format!("return_us {r} is before call_us {}", self.call_us))
            }
            _ if self.call_us >= i64::MAX as u64
                || self.return_us.is_some_and(|r| r >= i64::MAX as u64) =>
            {
                Err("timestamps must be below 2^63 - 1".into())
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&line)
    }
}

/// The wire form of an operation: a flat JSON object.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    client: u64,
    key: String,
    op: String,
    #[serde(default)]
    input: Option<WireInput>,
    call_us: u64,
    return_us: Option<u64>,
    outcome: Outcome,
    #[serde(default)]
    output: Option<WireOutput>,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delta: Option<i64>,
    /// Absent: `None`; `null`: `Some(None)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    expected: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    new: Option<String>,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireOutput {
    /// Absent: `None`; `null`: `Some(Null)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    value: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ok: Option<bool>,
}

/// Deserializes a field that is present (possibly `null`) as `Some`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl From<Operation> for Line {
    fn from(op: Operation) -> Line {
        let name = op.input.op().to_string();
        let input = match op.input {
            Input::Get => WireInput::default(),
            Input::Set { value } => WireInput {
                value: Some(value),
                ..WireInput::default()
            },
            Input::Incr { delta } => WireInput {
                delta: Some(delta),
                ..WireInput::default()
            },
            Input::Cas { expected, new } => WireInput {
                expected: Some(expected),
                new: Some(new),
                ..WireInput::default()
            },
        };
        let output = op.output.map(|out| match out {
            Output::Get { value } => WireOutput {
                value: Some(value.map_or(serde_json::Value::Null, serde_json::Value::String)),
                ok: None,
            },
            Output::Set => WireOutput::default(),
            Output::Incr { value } => WireOutput {
                value: Some(value.into()),
                ok: None,
            },
            Output::Cas { ok } => WireOutput {
                value: None,
                ok: Some(ok),
            },
        });
        Line {
            client: op.client,
            key: op.key,
            op: name,
            input: Some(input),
            call_us: op.call_us,
            return_us: op.return_us,
            outcome: op.outcome,
            output,
        }
    }
}

impl TryFrom<Line> for Operation {
    type Error = String;

    fn try_from(line: Line) -> Result<Operation, String> {
        let i = line.input.unwrap_or_default();
        let input = match line.op.as_str() {
            "get"
                if i.value.is_none()
                    && i.delta.is_none()
                    && i.expected.is_none()
                    && i.new.is_none() =>
            {
                Input::Get
            }
            "get" => return Err("get takes no input fields".into()),
            "set" => match i {
                WireInput {
                    value: Some(value),
                    delta: None,
                    expected: None,
                    new: None,
                } => Input::Set { value },
                _ => return Err(r#"set needs input {"value": string} and nothing else"#.into()),
            },
            "incr" => match i {
                WireInput {
                    value: None,
                    delta: Some(delta),
                    expected: None,
                    new: None,
                } => Input::Incr { delta },
                _ => return Err(r#"incr needs input {"delta": i64} and nothing else"#.into()),
            },
            "cas" => match i {
                WireInput {
                    value: None,
                    delta: None,
                    expected: Some(expected),
                    new: Some(new),
                } => Input::Cas { expected, new },
                _ => {
                    return Err(
                        r#"cas needs input {"expected": string|null, "new": string}"#.into(),
                    )
                }
            },
            other => return Err(format!("op {other:?} is not get, set, incr or cas")),
        };
        // The output of an operation without an answer is ignored, as the checker does.
        let output = match line.outcome {
            Outcome::Ok => {
                let o = line.output.unwrap_or_default();
                Some(match (&input, o.value, o.ok) {
                    (Input::Get, Some(serde_json::Value::Null), None) => {
                        Output::Get { value: None }
                    }
                    (Input::Get, Some(serde_json::Value::String(s)), None) => {
                        Output::Get { value: Some(s) }
                    }
                    (Input::Get, ..) => {
                        return Err(r#"get output is {"value": string|null}"#.into())
                    }
                    (Input::Set { .. }, None, None) => Output::Set,
                    (Input::Set { .. }, ..) => return Err("set has no output fields".into()),
                    (Input::Incr { .. }, Some(v), None) if v.as_i64().is_some() => Output::Incr {
                        value: v.as_i64().unwrap_or_default(),
                    },
                    (Input::Incr { .. }, ..) => {
                        return Err(r#"incr output is {"value": i64}"#.into())
                    }
                    (Input::Cas { .. }, None, Some(ok)) => Output::Cas { ok },
                    (Input::Cas { .. }, ..) => return Err(r#"cas output is {"ok": bool}"#.into()),
                })
            }
            Outcome::Fail | Outcome::Unknown => None,
        };
        let op = Operation {
            client: line.client,
            key: line.key,
            input,
            call_us: line.call_us,
            return_us: line.return_us,
            outcome: line.outcome,
            output,
        };
        op.validate()?;
        Ok(op)
    }
}

/// Appends operations to a history file, one line each. Shared by every client thread.
///
/// Lines are buffered: call [`flush`](Self::flush) before handing the file to the checker
/// (dropping the writer flushes too).
pub struct HistoryWriter {
    out: Mutex<BufWriter<File>>,
    path: PathBuf,
    epoch: Instant,
}

impl HistoryWriter {
    /// Creates (or truncates) the history file.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        Self::with_file(path, File::create(path)?)
    }

    /// Opens the history file for appending, creating it if needed.
    pub fn append(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Self::with_file(path, file)
    }

    fn with_file(path: &Path, file: File) -> io::Result<Self> {
        Ok(HistoryWriter {
            out: Mutex::new(BufWriter::new(file)),
            path: path.to_path_buf(),
            epoch: Instant::now(),
        })
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Microseconds since this writer was created, on a monotonic clock: a shared clock for
    /// `call_us` and `return_us`. Read it just before sending a request and just after its
    /// answer arrives. (A history appended to by several writers needs one clock for all.)
    pub fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Appends one operation. An operation that breaks [`Operation::validate`] is refused
    /// (`InvalidInput`): it is a bug in the harness.
    pub fn record(&self, op: &Operation) -> io::Result<()> {
        op.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut line = serde_json::to_vec(op).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        out.write_all(&line)
    }

    /// Writes buffered lines to the file.
    pub fn flush(&self) -> io::Result<()> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

impl Drop for HistoryWriter {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Reads a history file. Blank lines are skipped; a malformed line is an `InvalidData` error
/// naming the file and line.
pub fn read_history(path: impl AsRef<Path>) -> io::Result<Vec<Operation>> {
    let path = path.as_ref();
    let file = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let mut ops = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let op: Operation = serde_json::from_str(&line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}:{}: {e}", path.display(), i + 1),
            )
        })?;
        ops.push(op);
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_kinds() -> Vec<Operation> {
        vec![
            Operation::invoke(1, "k1", Input::Get, 10).ok(
                20,
                Output::Get {
                    value: Some("a".into()),
                },
            ),
            Operation::invoke(1, "k1", Input::Get, 21).ok(22, Output::Get { value: None }),
            Operation::invoke(2, "k2", Input::Set { value: "v".into() }, 11).ok(19, Output::Set),
            Operation::invoke(3, "k3", Input::Incr { delta: -4 }, 12)
                .ok(18, Output::Incr { value: -4 }),
            Operation::invoke(
                4,
                "k4",
                Input::Cas {
                    expected: None,
                    new: "n".into(),
                },
                13,
            )
            .ok(17, Output::Cas { ok: true }),
            Operation::invoke(
                5,
                "k4",
                Input::Cas {
                    expected: Some("n".into()),
                    new: "m".into(),
                },
                14,
            )
            .unknown(None),
            Operation::invoke(6, "k2", Input::Set { value: "w".into() }, 15).fail(Some(16)),
            Operation::invoke(7, "k2", Input::Incr { delta: 1 }, 15).unknown(Some(3_000_015)),
        ]
    }

    #[test]
    fn wire_form_is_flat_json() {
        let ops = all_kinds();
        let lines: Vec<String> = ops.iter().map(|o| o.to_string()).collect();
        assert_eq!(
            lines[0],
            r#"{"client":1,"key":"k1","op":"get","input":{},"call_us":10,"return_us":20,"outcome":"ok","output":{"value":"a"}}"#
        );
        assert_eq!(
            lines[1],
            r#"{"client":1,"key":"k1","op":"get","input":{},"call_us":21,"return_us":22,"outcome":"ok","output":{"value":null}}"#
        );
        assert_eq!(
            lines[2],
            r#"{"client":2,"key":"k2","op":"set","input":{"value":"v"},"call_us":11,"return_us":19,"outcome":"ok","output":{}}"#
        );
        assert_eq!(
            lines[3],
            r#"{"client":3,"key":"k3","op":"incr","input":{"delta":-4},"call_us":12,"return_us":18,"outcome":"ok","output":{"value":-4}}"#
        );
        assert_eq!(
            lines[4],
            r#"{"client":4,"key":"k4","op":"cas","input":{"expected":null,"new":"n"},"call_us":13,"return_us":17,"outcome":"ok","output":{"ok":true}}"#
        );
        assert_eq!(
            lines[5],
            r#"{"client":5,"key":"k4","op":"cas","input":{"expected":"n","new":"m"},"call_us":14,"return_us":null,"outcome":"unknown","output":null}"#
        );
        assert_eq!(
            lines[6],
            r#"{"client":6,"key":"k2","op":"set","input":{"value":"w"},"call_us":15,"return_us":16,"outcome":"fail","output":null}"#
        );
        for (op, line) in ops.iter().zip(&lines) {
            let back: Operation = serde_json::from_str(line).unwrap();
            assert_eq!(&back, op);
        }
    }

    #[test]
    fn writer_and_reader_round_trip() {
        let dir =
            std::env::temp_dir().join(format!("waverunner-chaos-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.jsonl");
        let w = HistoryWriter::create(&path).unwrap();
        let ops = all_kinds();
        std::thread::scope(|s| {
            for chunk in ops.chunks(3) {
                let w = &w;
                s.spawn(move || {
                    for op in chunk {
                        w.record(op).unwrap();
                    }
                });
            }
        });
        w.flush().unwrap();
        let mut back = read_history(&path).unwrap();
        back.sort_by_key(|o| (o.client, o.call_us));
        let mut want = ops.clone();
        want.sort_by_key(|o| (o.client, o.call_us));
        assert_eq!(back, want);
        assert!(w.now_us() < 60_000_000);
        drop(w);
        let w = HistoryWriter::append(&path).unwrap();
        w.record(&ops[0]).unwrap();
        drop(w);
        assert_eq!(read_history(&path).unwrap().len(), ops.len() + 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn malformed_lines_are_refused() {
        let bad = [
            r#"{"client":1,"key":"k","op":"put","input":{},"call_us":1,"return_us":2,"outcome":"ok","output":{}}"#,
            r#"{"client":1,"key":"k","op":"set","input":{},"call_us":1,"return_us":2,"outcome":"ok","output":{}}"#,
            r#"{"client":1,"key":"k","op":"set","input":{"value":"a"},"call_us":1,"return_us":null,"outcome":"ok","output":{}}"#,
            r#"{"client":1,"key":"k","op":"set","input":{"value":"a"},"call_us":5,"return_us":2,"outcome":"ok","output":{}}"#,
            r#"{"client":1,"key":"k","op":"get","input":{},"call_us":1,"return_us":2,"outcome":"ok","output":{}}"#,
            r#"{"client":1,"key":"k","op":"incr","input":{"delta":1},"call_us":1,"return_us":2,"outcome":"ok","output":{"value":"3"}}"#,
            r#"{"client":1,"key":"k","op":"cas","input":{"new":"b"},"call_us":1,"return_us":2,"outcome":"ok","output":{"ok":true}}"#,
            r#"{"client":1,"key":"k","op":"get","input":{},"call_us":1,"return_us":2,"outcome":"maybe","output":null}"#,
            r#"{"client":1,"key":"k","op":"get","input":{},"call_us":1,"return_us":2,"outcome":"ok","output":{"value":"a"},"extra":1}"#,
        ];
        for line in bad {
            assert!(
                serde_json::from_str::<Operation>(line).is_err(),
                "accepted {line}"
            );
        }
        let wrong_kind = Operation::invoke(1, "k", Input::Get, 1).ok(2, Output::Set);
        assert!(wrong_kind.validate().is_err());
    }
}
