//! Rows of the replication sweep, the tables printed for them, and the verdict against the
//! targets of DESIGN §6.

use std::fmt::Write as _;

use crate::floor::{Floor, Rtt};
use crate::stats::Quantiles;
use crate::sweep::MAX_ERROR_FRACTION;

/// What one offered rate measured on one data plane.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Offered load, requests per second.
    pub offered: u64,
    /// Achieved throughput: answered requests per second of the run.
    pub achieved: f64,
    /// Requests answered in time.
    pub ok: u64,
    /// Requests unanswered or answered too late.
    pub failed: u64,
    /// End-to-end latency at the client (scheduled send → answer), ns.
    pub e2e: Option<Quantiles>,
    /// Replication latency at the leader (receipt → majority acknowledged), ns; `None` when
    /// the leader reported no observations.
    pub replication: Option<Quantiles>,
    /// Entries the leader committed during the run.
    pub commits: u64,
    /// User + system time of the leader process per committed entry, µs.
    pub leader_cpu_us: Option<f64>,
    /// Busy time of the whole machine (every process, the load generator included, and
    /// softirq) per committed entry, µs.
    pub machine_cpu_us: Option<f64>,
    /// The softirq part of `machine_cpu_us` (where XDP runs), µs.
    pub softirq_us: Option<f64>,
    /// CPU the machine spent on anything but the replicas and the benchmark itself during
    /// the run, in percent of all CPUs (other people's builds on a shared machine): how noisy
    /// the row is.
    pub background_pct: Option<f64>,
    /// Anything unusual during the run (a leader change, the data plane disabled, …).
    pub note: String,
    /// The leader or term changed, or the data plane was disabled, during the run: the row
    /// does not measure the mode it is listed under and takes no part in the verdicts.
    pub disrupted: bool,
}

impl Row {
    /// Fraction of requests that failed.
    pub fn error_fraction(&self) -> f64 {
        let n = self.ok + self.failed;
        if n == 0 {
            1.0
        } else {
            self.failed as f64 / n as f64
        }
    }

    /// Whether the run is usable for a comparison: requests answered, few errors, no leader
    /// change and no hand-off during it.
    pub fn healthy(&self) -> bool {
        !self.disrupted && self.ok > 0 && self.error_fraction() <= MAX_ERROR_FRACTION
    }
}

/// What happened to one data plane.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The sweep ran; `stop` says why it ended early, if it did.
    Ran {
        /// One row per offered rate.
        rows: Vec<Row>,
        /// Why the sweep stopped before the last rate.
        stop: Option<String>,
    },
    /// The data plane never enabled on the leader; the reason shown by `/status`.
    NotEnabled(String),
    /// The cluster could not be run.
    Failed(String),
}

/// One data plane's results.
#[derive(Clone, Debug)]
pub struct ModeResult {
    /// `xdp`, `udp` or `off`.
    pub mode: String,
    /// Its rows or why there are none.
    pub outcome: Outcome,
}

impl ModeResult {
    /// The rows (none unless the sweep ran).
    pub fn rows(&self) -> &[Row] {
        match &self.outcome {
            Outcome::Ran { rows, .. } => rows,
            _ => &[],
        }
    }
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1_000.0)
}

fn q3(q: &Option<Quantiles>) -> String {
    match q {
        Some(q) => format!("{} / {} / {}", us(q.p50), us(q.p90), us(q.p99)),
        None => "n/a".into(),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.digits$}"))
}

/// The floor as a Markdown table.
pub fn render_floor(f: &Floor) -> String {
    let mut s = String::from(
        "| echo between two namespaces (50-byte UDP) | RTT p50 / p90 / p99 (µs) | round trips | lost |\n\
         |---|---|---:|---:|\n",
    );
    let line = |s: &mut String, name: &str, r: &Rtt| {
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} |",
            q3(&r.quantiles),
            r.sent - r.lost,
            r.lost
        );
    };
    line(
        &mut s,
        "XDP (`XDP_TX` from the far veth) — the floor",
        &f.xdp,
    );
    line(&mut s, "user-space socket", &f.user);
    s
}

/// One data plane's sweep as a Markdown table (or a line saying why there is none).
pub fn render_mode(m: &ModeResult) -> String {
    let mut s = format!("### `{}`\n\n", m.mode);
    match &m.outcome {
        Outcome::NotEnabled(why) => {
            let _ = writeln!(s, "not enabled: {why}");
        }
        Outcome::Failed(why) => {
            let _ = writeln!(s, "failed: {why}");
        }
        Outcome::Ran { rows, stop } => {
            s.push_str(
                "| offered/s | achieved/s | errors | e2e p50 / p90 / p99 (µs) | replication p50 / p90 / p99 (µs) | leader CPU µs/write | machine CPU µs/write (softirq) | other load | note |\n\
                 |---:|---:|---:|---|---|---:|---:|---:|---|\n",
            );
            for r in rows {
                let _ = writeln!(
                    s,
                    "| {} | {:.0} | {:.2}% | {} | {} | {} | {} ({}) | {}% | {} |",
                    r.offered,
                    r.achieved,
                    r.error_fraction() * 100.0,
                    q3(&r.e2e),
                    q3(&r.replication),
                    opt(r.leader_cpu_us, 1),
                    opt(r.machine_cpu_us, 1),
                    opt(r.softirq_us, 1),
                    opt(r.background_pct, 0),
                    r.note
                );
            }
            if let Some(stop) = stop {
                let _ = writeln!(s, "\nsweep stopped: {stop}");
            }
        }
    }
    s
}

/// One target of DESIGN §6 and whether this run met it.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// What is compared.
    pub name: String,
    /// The measured ratio, if it could be measured.
    pub value: Option<f64>,
    /// The target, e.g. `≤ 1.5`.
    pub target: String,
    /// Met, not met, or `None` when it could not be measured.
    pub met: Option<bool>,
    /// Where the numbers come from.
    pub detail: String,
}

fn verdict(
    name: &str,
    value: Option<f64>,
    target: &str,
    ok: impl Fn(f64) -> bool,
    detail: String,
) -> Verdict {
    Verdict {
        name: name.into(),
        value,
        target: target.into(),
        met: value.map(ok),
        detail,
    }
}

fn mode<'a>(modes: &'a [ModeResult], name: &str) -> &'a [Row] {
    modes
        .iter()
        .find(|m| m.mode == name)
        .map_or(&[], |m| m.rows())
}

/// The targets of DESIGN §6 this benchmark can judge, from the floor and the sweeps:
/// XDP replication p50 ≤ 1.5× the XDP echo RTT and p99 ≤ 1.5× its p50 (at the lightest load),
/// end-to-end p50 of `off` ≥ 3× that of `xdp` (lightest load both ran), leader CPU per write of
/// `off` ≥ 5× that of `xdp` (the highest load both ran healthily), and peak throughput of
/// `xdp` ≥ 3× that of `off`.
pub fn verdicts(floor: Option<&Floor>, modes: &[ModeResult]) -> Vec<Verdict> {
    let xdp = mode(modes, "xdp");
    let off = mode(modes, "off");
    let mut out = Vec::new();

    let floor_p50 = floor.and_then(|f| f.xdp.quantiles).map(|q| q.p50);
    let light = xdp.iter().find(|r| r.healthy() && r.replication.is_some());
    let (ratio, detail) = match (light, floor_p50) {
        (Some(r), Some(f)) => {
            let q = r.replication.unwrap_or_default();
            (
                Some(q.p50 as f64 / f.max(1) as f64),
                format!(
                    "replication p50 {} µs at {}/s against echo RTT p50 {} µs",
                    us(q.p50),
                    r.offered,
                    us(f)
                ),
            )
        }
        _ => (
            None,
            "needs an XDP row with replication latency and the floor".into(),
        ),
    };
    out.push(verdict(
        "XDP replication p50 / XDP echo RTT p50",
        ratio,
        "≤ 1.5",
        |v| v <= 1.5,
        detail,
    ));

    let (ratio, detail) = match light.and_then(|r| r.replication.map(|q| (r, q))) {
        Some((r, q)) => {
            let worst = xdp
                .iter()
                .filter(|r| r.healthy())
                .filter_map(|r| {
                    r.replication
                        .map(|q| (r.offered, q.p99 as f64 / q.p50.max(1) as f64))
                })
                .fold((0, 0.0f64), |a, b| if b.1 > a.1 { b } else { a });
            (
                Some(q.p99 as f64 / q.p50.max(1) as f64),
                format!(
                    "at {}/s: p99 {} µs, p50 {} µs; worst healthy rate {}/s: {:.2}",
                    r.offered,
                    us(q.p99),
                    us(q.p50),
                    worst.0,
                    worst.1
                ),
            )
        }
        None => (None, "needs an XDP row with replication latency".into()),
    };
    out.push(verdict(
        "XDP replication p99 / p50",
        ratio,
        "≤ 1.5",
        |v| v <= 1.5,
        detail,
    ));

    let common = |pick_highest: bool| {
        let mut pairs: Vec<(&Row, &Row)> = xdp
            .iter()
            .filter(|r| r.healthy())
            .filter_map(|x| {
                off.iter()
                    .find(|o| o.offered == x.offered && o.healthy())
                    .map(|o| (x, o))
            })
            .collect();
        if pick_highest {
            pairs.pop()
        } else {
            pairs.into_iter().next()
        }
    };
    let (ratio, detail) = match common(false) {
        Some((x, o)) => match (x.e2e, o.e2e) {
            (Some(qx), Some(qo)) => (
                Some(qo.p50 as f64 / qx.p50.max(1) as f64),
                format!(
                    "at {}/s: off p50 {} µs, xdp p50 {} µs",
                    x.offered,
                    us(qo.p50),
                    us(qx.p50)
                ),
            ),
            _ => (None, "no end-to-end samples".into()),
        },
        None => (
            None,
            "needs a rate both `xdp` and `off` ran with ≤ 1% errors".into(),
        ),
    };
    out.push(verdict(
        "end-to-end write p50: off / xdp",
        ratio,
        "≥ 3",
        |v| v >= 3.0,
        detail,
    ));

    let (ratio, detail) = match common(true) {
        Some((x, o)) => match (x.leader_cpu_us, o.leader_cpu_us) {
            (Some(cx), Some(co)) => (
                Some(co / cx.max(1e-3)),
                format!(
                    "at {}/s: off {co:.1} µs, xdp {cx:.1} µs per write (machine-wide incl. softirq and the load generator: off {}, xdp {})",
                    x.offered,
                    opt(o.machine_cpu_us, 1),
                    opt(x.machine_cpu_us, 1)
                ),
            ),
            _ => (None, "no commits measured".into()),
        },
        None => (None, "needs a rate both `xdp` and `off` ran with ≤ 1% errors".into()),
    };
    out.push(verdict(
        "leader CPU per committed write: off / xdp",
        ratio,
        "≥ 5",
        |v| v >= 5.0,
        detail,
    ));

    let peak = |rows: &[Row]| {
        rows.iter()
            .filter(|r| r.healthy())
            .map(|r| r.achieved)
            .fold(0.0, f64::max)
    };
    let (px, po) = (peak(xdp), peak(off));
    let (ratio, detail) = if px > 0.0 && po > 0.0 {
        (Some(px / po), format!("peak healthy throughput: xdp {px:.0}/s, off {po:.0}/s (bounded by the highest offered rate)"))
    } else {
        (None, "needs healthy rows of both `xdp` and `off`".into())
    };
    out.push(verdict(
        "throughput: xdp / off",
        ratio,
        "≥ 3",
        |v| v >= 3.0,
        detail,
    ));
    out
}

/// The verdicts as a Markdown table.
pub fn render_verdicts(v: &[Verdict]) -> String {
    let mut s = String::from(
        "| target (DESIGN §6) | measured | target | verdict | from |\n|---|---:|---:|---|---|\n",
    );
    for x in v {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            x.name,
            opt(x.value, 2),
            x.target,
            match x.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "not measured",
            },
            x.detail
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(p50: u64, p99: u64) -> Option<Quantiles> {
        Some(Quantiles {
            p50,
            p90: p50,
            p99,
            count: 100,
        })
    }

    fn row(offered: u64, e2e: u64, repl: Option<(u64, u64)>, cpu: f64) -> Row {
        Row {
            offered,
            achieved: offered as f64,
            ok: 1_000,
            failed: 0,
            e2e: q(e2e, e2e * 2),
            replication: repl.and_then(|(a, b)| q(a, b)),
            commits: 1_000,
            leader_cpu_us: Some(cpu),
            ..Row::default()
        }
    }

    #[test]
    fn verdicts_from_rows() {
        let floor = Floor {
            xdp: Rtt {
                quantiles: q(10_000, 20_000),
                sent: 10,
                lost: 0,
            },
            ..Floor::default()
        };
        let modes = vec![
            ModeResult {
                mode: "xdp".into(),
                outcome: Outcome::Ran {
                    rows: vec![
                        row(2_000, 30_000, Some((12_000, 30_000)), 2.0),
                        row(5_000, 30_000, Some((12_000, 14_000)), 1.0),
                    ],
                    stop: None,
                },
            },
            ModeResult {
                mode: "off".into(),
                outcome: Outcome::Ran {
                    rows: vec![
                        row(2_000, 120_000, None, 40.0),
                        row(5_000, 150_000, None, 20.0),
                    ],
                    stop: None,
                },
            },
        ];
        let v = verdicts(Some(&floor), &modes);
        assert_eq!(v.len(), 5);
        assert_eq!(v[0].met, Some(true)); // 1.2
        assert_eq!(v[1].met, Some(false)); // 30/12 = 2.5 at the lightest rate
        assert_eq!(v[2].value, Some(4.0)); // lightest common rate
        assert_eq!(v[3].value, Some(20.0)); // highest common rate
        assert_eq!(v[4].met, Some(false)); // same throughput
        let table = render_verdicts(&v);
        assert!(table.contains("NOT met") && table.contains("| met |"));
        // Nothing measured: no verdict, not a panic.
        let v = verdicts(None, &[]);
        assert!(v.iter().all(|x| x.met.is_none()));
        // A disrupted row takes no part.
        let mut modes = modes;
        if let Outcome::Ran { rows, .. } = &mut modes[0].outcome {
            rows[0].disrupted = true;
        }
        let v = verdicts(Some(&floor), &modes);
        assert_eq!(v[0].value, Some(1.2));
        assert_eq!(v[1].value, Some(14_000.0 / 12_000.0));
        assert_eq!(v[2].value, Some(5.0));
        assert!(render_mode(&ModeResult {
            mode: "udp".into(),
            outcome: Outcome::NotEnabled("x".into())
        })
        .contains("not enabled"));
    }
}
