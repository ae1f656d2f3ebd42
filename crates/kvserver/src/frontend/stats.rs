//! Per-command counters for `INFO commandstats`: calls, time, and the calls refused before
//! running (`rejected_calls`: a wrong number of arguments) or answered with an error
//! (`failed_calls`), as Redis 7 counts them. `usec` is the time from the command's arrival to
//! its answer on this replica — for a command through the log, replication included — not
//! Redis's CPU time in the command.
//!
//! One table per process (a process serves one replica); bounded by the command table (an
//! unknown command is not counted). Commands queued in a transaction are not counted yet.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Clone, Copy, Default)]
struct Stat {
    calls: u64,
    usec: u64,
    rejected: u64,
    failed: u64,
}

static STATS: Mutex<BTreeMap<&'static str, Stat>> = Mutex::new(BTreeMap::new());

fn with(name: &'static str, f: impl FnOnce(&mut Stat)) {
    let mut m = STATS.lock().unwrap_or_else(|e| e.into_inner());
    f(m.entry(name).or_default());
}

/// A command ran and was answered after `took`; `failed`: with an error.
pub(super) fn called(name: &'static str, took: Duration, failed: bool) {
    with(name, |s| {
        s.calls += 1;
        s.usec += took.as_micros() as u64;
        s.failed += u64::from(failed);
    });
}

/// A known command was refused before running (its arity).
pub(super) fn rejected(name: &'static str) {
    with(name, |s| s.rejected += 1);
}

/// The `cmdstat_<name>` field names, made once per command (bounded by the command table).
fn field_name(name: &'static str) -> &'static str {
    static NAMES: Mutex<BTreeMap<&'static str, &'static str>> = Mutex::new(BTreeMap::new());
    let mut m = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    m.entry(name)
        .or_insert_with(|| Box::leak(format!("cmdstat_{name}").into_boxed_str()))
}

/// The `Commandstats` fields, one per command seen, in name order.
pub(super) fn fields() -> Vec<(&'static str, String)> {
    let m = STATS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    m.into_iter()
        .map(|(name, s)| {
            let per = if s.calls == 0 {
                0.0
            } else {
                s.usec as f64 / s.calls as f64
            };
            (
                field_name(name),
                format!(
                    "calls={},usec={},usec_per_call={per:.2},rejected_calls={},failed_calls={}",
                    s.calls, s.usec, s.rejected, s.failed
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_as_redis_fields() {
        called("zz-test", Duration::from_micros(10), false);
        called("zz-test", Duration::from_micros(30), true);
        rejected("zz-test");
        let f = fields();
        let (name, v) = f.iter().find(|(n, _)| *n == "cmdstat_zz-test").unwrap();
        assert_eq!(*name, "cmdstat_zz-test");
        assert_eq!(
            v,
            "calls=2,usec=40,usec_per_call=20.00,rejected_calls=1,failed_calls=1"
        );
    }
}
