//! The linearizability checker (tools/lincheck, Porcupine) on hand-written and generated
//! histories: it says yes to linearizable ones, including ones with unknown outcomes, and no to
//! stale reads and lost updates. Needs the Go toolchain (scripts/install-deps.sh installs it).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use waverunner_chaos::check::{build_checker, check_with, default_repo_root, go_tool};
use waverunner_chaos::{HistoryWriter, Input, Operation, Output, Verdict};

fn checker() -> PathBuf {
    build_checker(&default_repo_root()).unwrap_or_else(|e| {
        panic!("cannot build the checker: {e}\n(run scripts/install-deps.sh to install Go)")
    })
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("lincheck")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `ops` as a history and checks it; the visualization, if any, is `<dir>/out.html`.
fn run(name: &str, ops: &[Operation]) -> (Verdict, PathBuf) {
    let dir = scratch(name);
    let history = dir.join("history.jsonl");
    let w = HistoryWriter::create(&history).unwrap();
    for op in ops {
        w.record(op).unwrap();
    }
    w.flush().unwrap();
    let html = dir.join("out.html");
    let verdict = check_with(&checker(), &history, &html, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (verdict, html)
}

fn get(c: u64, k: &str, call: u64, ret: u64, v: Option<&str>) -> Operation {
    Operation::invoke(c, k, Input::Get, call).ok(
        ret,
        Output::Get {
            value: v.map(str::to_string),
        },
    )
}

fn set(c: u64, k: &str, call: u64, ret: u64, v: &str) -> Operation {
    Operation::invoke(c, k, Input::Set { value: v.into() }, call).ok(ret, Output::Set)
}

fn set_unknown(c: u64, k: &str, call: u64, v: &str) -> Operation {
    Operation::invoke(c, k, Input::Set { value: v.into() }, call).unknown(Some(call + 3_000_000))
}

fn incr(c: u64, k: &str, call: u64, ret: u64, delta: i64, new: i64) -> Operation {
    Operation::invoke(c, k, Input::Incr { delta }, call).ok(ret, Output::Incr { value: new })
}

fn cas(
    c: u64,
    k: &str,
    call: u64,
    ret: u64,
    expected: Option<&str>,
    new: &str,
    ok: bool,
) -> Operation {
    Operation::invoke(
        c,
        k,
        Input::Cas {
            expected: expected.map(str::to_string),
            new: new.into(),
        },
        call,
    )
    .ok(ret, Output::Cas { ok })
}

fn assert_yes(name: &str, ops: &[Operation]) -> Verdict {
    let (v, _) = run(name, ops);
    assert_eq!(v.linearizable, Some(true), "{name}: {v:?}");
    v
}

fn assert_no(name: &str, ops: &[Operation], failing_key: &str) -> Verdict {
    let (v, html) = run(name, ops);
    assert_eq!(v.linearizable, Some(false), "{name}: {v:?}");
    assert!(
        v.message
            .contains(&format!("key {failing_key:?} is not linearizable")),
        "{name}: the failing key is not named: {}",
        v.message
    );
    let page = std::fs::read_to_string(&html)
        .unwrap_or_else(|e| panic!("{name}: no visualization at {}: {e}", html.display()));
    assert!(
        page.contains("<html") && page.len() > 1000,
        "{name}: bad html"
    );
    v
}

/// (a) Overlapping sets, gets, incrs and cas on several keys, with a valid linearization.
#[test]
fn concurrent_linearizable_history() {
    let ops = vec![
        // x: set a and set b overlap; reads during the overlap may see either.
        set(1, "x", 0, 100, "a"),
        set(2, "x", 50, 150, "b"),
        get(3, "x", 60, 70, Some("a")),
        get(4, "x", 80, 160, Some("b")),
        get(3, "x", 90, 200, Some("b")),
        get(5, "x", 0, 10, None),
        // c: a counter, increments overlapping each other and reads.
        incr(1, "c", 200, 300, 1, 2),
        incr(2, "c", 210, 250, 1, 1),
        get(3, "c", 220, 400, Some("2")),
        incr(4, "c", 260, 500, 5, 7),
        get(5, "c", 510, 520, Some("7")),
        // y: compare-and-set racing with a write.
        cas(1, "y", 400, 500, None, "first", true),
        cas(2, "y", 410, 600, None, "second", false),
        set(3, "y", 450, 700, "s"),
        cas(4, "y", 650, 800, Some("s"), "t", true),
        get(5, "y", 810, 900, Some("t")),
    ];
    let v = assert_yes("concurrent", &ops);
    assert_eq!((v.ops, v.keys), (ops.len(), 3));
}

/// (b) A stale read: set 2 completes, then a later, non-overlapping read returns 1.
#[test]
fn stale_read_is_caught() {
    let ops = [
        set(1, "k", 0, 10, "1"),
        set(1, "k", 20, 30, "2"),
        get(2, "k", 40, 50, Some("1")),
        // Another key, linearizable, must not be blamed.
        set(3, "other", 0, 100, "z"),
        get(4, "other", 50, 60, Some("z")),
    ];
    let v = assert_no("stale-read", &ops, "k");
    assert!(!v.message.contains("key \"other\" is not"), "{}", v.message);
    assert_eq!((v.ops, v.keys), (5, 2));

    // The same read overlapping the second write is fine.
    let ok = [
        set(1, "k", 0, 10, "1"),
        set(1, "k", 20, 45, "2"),
        get(2, "k", 40, 50, Some("1")),
    ];
    assert_yes("stale-read-overlapping", &ok);
}

/// (c) An unknown write may take effect, late or never.
#[test]
fn unknown_writes_may_or_may_not_apply() {
    // Its effect shows up long after the client gave up.
    let shows_up = [
        set(1, "k", 0, 10, "1"),
        set_unknown(2, "k", 20, "2"),
        get(3, "k", 30, 40, Some("1")),
        get(3, "k", 5_000_000, 5_000_010, Some("2")),
        get(4, "k", 5_000_020, 5_000_030, Some("2")),
    ];
    assert_yes("unknown-shows-up", &shows_up);

    // It never shows up.
    let never = [
        set(1, "k", 0, 10, "1"),
        set_unknown(2, "k", 20, "2"),
        get(3, "k", 30, 40, Some("1")),
        get(3, "k", 5_000_000, 5_000_010, Some("1")),
    ];
    assert_yes("unknown-never", &never);

    // An unknown increment and cas, whose effects show up in later answers.
    let counters = [
        incr(1, "c", 0, 10, 1, 1),
        Operation::invoke(2, "c", Input::Incr { delta: 10 }, 20).unknown(None),
        incr(3, "c", 100, 110, 1, 12),
        Operation::invoke(
            4,
            "d",
            Input::Cas {
                expected: None,
                new: "v".into(),
            },
            0,
        )
        .unknown(Some(50)),
        cas(5, "d", 60, 70, None, "w", false),
        get(5, "d", 80, 90, Some("v")),
    ];
    assert_yes("unknown-incr-cas", &counters);

    // But unknown is not a licence for anything: the write is seen before it was invoked...
    let too_early = [
        set(1, "k", 0, 10, "1"),
        get(3, "k", 20, 30, Some("2")),
        set_unknown(2, "k", 40, "2"),
    ];
    assert_no("unknown-too-early", &too_early, "k");
    // ...or it is seen, then the older value comes back.
    let flicker = [
        set(1, "k", 0, 10, "1"),
        set_unknown(2, "k", 20, "2"),
        get(3, "k", 30, 40, Some("2")),
        get(3, "k", 50, 60, Some("1")),
    ];
    assert_no("unknown-flicker", &flicker, "k");
    // ...or an unknown increment applied twice.
    let twice = [
        incr(1, "c", 0, 10, 1, 1),
        Operation::invoke(2, "c", Input::Incr { delta: 10 }, 20).unknown(None),
        get(3, "c", 100, 110, Some("21")),
    ];
    assert_no("unknown-incr-twice", &twice, "c");
}

/// (d) A lost increment: two acknowledged increments, a later read shows only one.
#[test]
fn lost_increment_is_caught() {
    let ops = [
        incr(1, "c", 0, 10, 1, 1),
        incr(2, "c", 5, 15, 1, 2),
        get(3, "c", 20, 30, Some("1")),
    ];
    assert_no("lost-incr", &ops, "c");
    // Both increments answering the same value is the same bug.
    let dup = [incr(1, "c", 0, 10, 1, 1), incr(2, "c", 5, 15, 1, 1)];
    assert_no("duplicate-incr", &dup, "c");
    // An increment succeeding on a value that is not a counter.
    let not_counter = [set(1, "c", 0, 10, "abc"), incr(2, "c", 20, 30, 1, 1)];
    assert_no("incr-not-counter", &not_counter, "c");
}

/// (e) Failed operations are left out: a failed write is never seen.
#[test]
fn failed_operations_are_ignored() {
    let ops = [
        set(1, "k", 0, 10, "1"),
        Operation::invoke(2, "k", Input::Set { value: "2".into() }, 20).fail(Some(30)),
        Operation::invoke(2, "k", Input::Incr { delta: 5 }, 31).fail(None),
        Operation::invoke(4, "k", Input::Get, 32).unknown(None),
        get(3, "k", 40, 50, Some("1")),
    ];
    let v = assert_yes("failed-ignored", &ops);
    assert_eq!((v.ops, v.keys), (2, 1), "{v:?}");
    // Were the failed write applied, the read would be stale.
    let applied = [
        set(1, "k", 0, 10, "1"),
        set(2, "k", 20, 30, "2"),
        get(3, "k", 40, 50, Some("1")),
    ];
    assert_no("failed-counted", &applied, "k");
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What a real store does to one key: the sequential model the checker also uses.
fn apply(state: &mut Option<String>, input: &Input) -> Result<Output, ()> {
    match input {
        Input::Get => Ok(Output::Get {
            value: state.clone(),
        }),
        Input::Set { value } => {
            *state = Some(value.clone());
            Ok(Output::Set)
        }
        Input::Incr { delta } => {
            let cur = match state {
                None => 0,
                Some(s) => match s.parse::<i64>() {
                    Ok(v) if v.to_string() == *s => v,
                    _ => return Err(()),
                },
            };
            let new = cur.checked_add(*delta).ok_or(())?;
            *state = Some(new.to_string());
            Ok(Output::Incr { value: new })
        }
        Input::Cas { expected, new } => {
            let ok = state == expected;
            if ok {
                *state = Some(new.clone());
            }
            Ok(Output::Cas { ok })
        }
    }
}

/// How [`simulated_history`] shapes a history.
struct Shape {
    ops: usize,
    keys: usize,
    clients: u64,
    /// Longest operation, µs.
    max_latency: u64,
    /// Percent of operations with an unknown outcome (as many again fail).
    unknown_pct: u64,
}

/// A linearizable history: clients invoke operations with random overlaps; each takes effect
/// at a random instant within its interval (an unknown one maybe never), in the order of those
/// instants, on a sequential store; the answers are what the store gave.
fn simulated_history(seed: u64, shape: &Shape) -> Vec<Operation> {
    let Shape {
        ops: n,
        keys,
        clients,
        max_latency,
        unknown_pct,
    } = *shape;
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let values = ["1", "2", "3", "7", "10", "x"];
    // (op, linearization instant or None if never applied)
    let mut planned: Vec<(Operation, Option<u64>)> = Vec::with_capacity(n);
    let mut clock = vec![0u64; clients as usize];
    for _ in 0..n {
        let c = rng.below(clients);
        let call = clock[c as usize] + rng.below(40);
        let ret = call + 1 + rng.below(max_latency);
        clock[c as usize] = ret + 1;
        let key = format!("k{}", rng.below(keys as u64));
        let input = match rng.below(100) {
            0..=39 => Input::Get,
            40..=59 => Input::Set {
                value: values[rng.below(values.len() as u64) as usize].to_string(),
            },
            60..=84 => Input::Incr {
                delta: rng.below(7) as i64 - 2,
            },
            _ => Input::Cas {
                expected: match rng.below(values.len() as u64 + 1) as usize {
                    i if i == values.len() => None,
                    i => Some(values[i].to_string()),
                },
                new: values[rng.below(values.len() as u64) as usize].to_string(),
            },
        };
        let at = call + rng.below(ret - call + 1);
        let mut op = Operation::invoke(c + 1, key, input, call);
        op.return_us = Some(ret);
        let roll = rng.below(100);
        let applied = match roll {
            _ if roll < unknown_pct => {
                // Unknown: timed out; applied or not.
                op = op.unknown(Some(ret));
                rng.chance(50).then_some(at)
            }
            _ if roll < 2 * unknown_pct => {
                op = op.fail(Some(ret));
                None
            }
            _ => {
                // Answered: the output is filled in below, when the store applies it.
                op.outcome = waverunner_chaos::Outcome::Ok;
                Some(at)
            }
        };
        planned.push((op, applied));
    }
    let mut order: Vec<usize> = (0..planned.len())
        .filter(|&i| planned[i].1.is_some())
        .collect();
    order.sort_by_key(|&i| planned[i].1);
    let mut store: std::collections::HashMap<String, Option<String>> = Default::default();
    for i in order {
        let (op, _) = &mut planned[i];
        let state = store.entry(op.key.clone()).or_default();
        let mut scratch = state.clone();
        match apply(&mut scratch, &op.input) {
            Ok(out) => {
                *state = scratch;
                if op.outcome == waverunner_chaos::Outcome::Ok {
                    op.output = Some(out);
                }
            }
            // The store answered an error (incr on a non-counter): not applied.
            Err(()) => *op = op.clone().fail(op.return_us),
        }
    }
    planned.into_iter().map(|(op, _)| op).collect()
}

/// (f) 2000 random operations on 5 keys from a simulated linearizable store: yes, quickly.
#[test]
fn random_linearizable_histories_pass() {
    let checker = checker();
    for seed in 1..=3 {
        let ops = simulated_history(
            seed,
            &Shape {
                ops: 2000,
                keys: 5,
                clients: 8,
                max_latency: 120,
                unknown_pct: 3,
            },
        );
        let unknown = ops
            .iter()
            .filter(|o| o.outcome == waverunner_chaos::Outcome::Unknown)
            .count();
        assert!(
            unknown > 10,
            "seed {seed}: only {unknown} unknown operations"
        );
        let dir = scratch(&format!("random-{seed}"));
        let history = dir.join("history.jsonl");
        let w = HistoryWriter::create(&history).unwrap();
        for op in &ops {
            w.record(op).unwrap();
        }
        drop(w);
        let start = Instant::now();
        let v = check_with(
            &checker,
            &history,
            &dir.join("out.html"),
            Duration::from_secs(60),
        )
        .unwrap();
        let took = start.elapsed();
        assert_eq!(v.linearizable, Some(true), "seed {seed}: {v:?}");
        assert_eq!(v.keys, 5);
        assert!(v.ops > 1800, "seed {seed}: {v:?}");
        assert!(took < Duration::from_secs(10), "seed {seed}: took {took:?}");

        // The same history ending with a stale read is caught: after everything else, one
        // client writes "old" then "new" to a key, and a later read returns "old".
        let end = ops.iter().filter_map(|o| o.return_us).max().unwrap() + 1_000;
        let mut bad = ops.clone();
        bad.push(set(100, "k0", end, end + 10, "old"));
        bad.push(set(100, "k0", end + 20, end + 30, "new"));
        bad.push(get(100, "k0", end + 40, end + 50, Some("old")));
        let bad_path = dir.join("bad.jsonl");
        let w = HistoryWriter::create(&bad_path).unwrap();
        for op in &bad {
            w.record(op).unwrap();
        }
        drop(w);
        let bad_html = dir.join("bad.html");
        let v = check_with(&checker, &bad_path, &bad_html, Duration::from_secs(60)).unwrap();
        assert_eq!(
            v.linearizable,
            Some(false),
            "seed {seed}: stale read passed: {v:?}"
        );
        assert!(
            v.message.contains("key \"k0\" is not linearizable"),
            "{v:?}"
        );
        assert!(bad_html.is_file());
    }
}

/// A check that runs out of time answers unknown, naming the undecided keys.
#[test]
fn timeout_is_unknown() {
    // Many clients on few keys, long operations and many unknown increments: Porcupine needs
    // seconds for this, far more than the 1 ms it is given.
    let ops = simulated_history(
        7,
        &Shape {
            ops: 20_000,
            keys: 3,
            clients: 32,
            max_latency: 300,
            unknown_pct: 10,
        },
    );
    let dir = scratch("timeout");
    let history = dir.join("history.jsonl");
    let w = HistoryWriter::create(&history).unwrap();
    for op in &ops {
        w.record(op).unwrap();
    }
    drop(w);
    let v = check_with(
        &checker(),
        &history,
        &dir.join("out.html"),
        Duration::from_millis(1),
    )
    .unwrap();
    assert_eq!(v.linearizable, None, "{v:?}");
    assert_eq!(v.keys, 3);
    assert!(v.message.contains("undecided"), "{}", v.message);
}

/// The checker refuses malformed input with a message naming the line.
#[test]
fn malformed_history_is_an_error() {
    let dir = scratch("malformed");
    let history = dir.join("history.jsonl");
    std::fs::write(
        &history,
        "{\"client\":1,\"key\":\"k\",\"op\":\"get\",\"input\":{},\"call_us\":1,\"return_us\":2,\"outcome\":\"ok\",\"output\":{\"value\":null}}\n\n{\"client\":1,\"key\":\"k\",\"op\":\"put\"}\n",
    )
    .unwrap();
    let err = check_with(
        &checker(),
        &history,
        &dir.join("out.html"),
        Duration::from_secs(5),
    )
    .unwrap_err();
    assert!(err.contains("history.jsonl:3"), "{err}");
    let err = check_with(
        &checker(),
        &dir.join("missing.jsonl"),
        &dir.join("out.html"),
        Duration::from_secs(5),
    )
    .unwrap_err();
    assert!(err.contains("missing.jsonl"), "{err}");
}

/// An empty history is trivially linearizable.
#[test]
fn empty_history() {
    let (v, _) = run("empty", &[]);
    assert_eq!((v.linearizable, v.ops, v.keys), (Some(true), 0, 0));
}

/// The checker's own Go tests: the model's steps, the parser, and that leaving out or bounding
/// unknown writes (an optimization) never changes a verdict, on 20000 random small histories.
#[test]
fn checker_go_unit_tests() {
    let go = go_tool().unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(go)
        .args(["test", "-count=1", "."])
        .current_dir(default_repo_root().join("tools/lincheck"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "go test in tools/lincheck failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
