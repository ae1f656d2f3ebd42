//! What `/metrics` (Prometheus text) and `/status` (JSON) show, as the replica last published it.

use serde::{Deserialize, Serialize};

/// Upper bounds of the latency histogram buckets, in microseconds.
pub const LATENCY_BUCKETS_US: [u64; 14] = [
    50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 500_000, 1_000_000,
    5_000_000,
];

/// A latency histogram as published (from [`Latencies`], when `/status` or `/metrics` is read):
/// fixed buckets for Prometheus, and exact quantiles.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Histogram {
    /// Count per bucket of [`LATENCY_BUCKETS_US`]; the last slot counts the rest.
    pub buckets: [u64; LATENCY_BUCKETS_US.len() + 1],
    /// Sum of observations, µs.
    pub sum_us: u64,
    /// Observations.
    pub count: u64,
    /// Quantiles of every observation.
    pub quantiles: Quantiles,
}

/// Latency quantiles, µs, from an HDR histogram of 3 significant digits: within 0.1 % of the
/// observed value, not a bucket's bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Quantiles {
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest.
    pub max_us: u64,
}

/// Highest latency the HDR histograms hold, µs (an hour); longer ones count as this.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;

/// One kind of request's latencies: an HDR histogram and the exact sum.
#[derive(Clone)]
struct Series {
    hdr: hdrhistogram::Histogram<u64>,
    sum_us: u64,
}

impl Series {
    /// The published form: counts per bucket of [`LATENCY_BUCKETS_US`], sum, count, quantiles.
    fn histogram(&self) -> Histogram {
        let h = &self.hdr;
        let mut out = Histogram {
            sum_us: self.sum_us,
            count: h.len(),
            ..Histogram::default()
        };
        if h.is_empty() {
            return out;
        }
        for v in h.iter_recorded() {
            let i = LATENCY_BUCKETS_US
                .iter()
                .position(|&b| v.value_iterated_to() <= b)
                .unwrap_or(LATENCY_BUCKETS_US.len());
            out.buckets[i] += v.count_at_value();
        }
        out.quantiles = Quantiles {
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        };
        out
    }
}

/// The replica's write and read latencies as HDR histograms (`hdrhistogram`): the replica
/// records each answered request once, in O(1); whoever reads `/status` or `/metrics` gets the
/// buckets and quantiles, computed then from a copy. Fixed size (3 significant digits from 1 µs
/// to [`MAX_LATENCY_US`]: about 200 KB each); nothing is copied per tick.
pub struct Latencies {
    write: std::sync::Mutex<Series>,
    read: std::sync::Mutex<Series>,
}

impl Default for Latencies {
    fn default() -> Latencies {
        let h = || {
            std::sync::Mutex::new(Series {
                hdr: hdrhistogram::Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                    .expect("valid HDR histogram bounds"),
                sum_us: 0,
            })
        };
        Latencies {
            write: h(),
            read: h(),
        }
    }
}

impl Latencies {
    /// Records one request's latency.
    pub fn record(&self, read: bool, us: u64) {
        let s = if read { &self.read } else { &self.write };
        let mut s = s.lock().expect("latency histogram");
        s.hdr.saturating_record(us.clamp(1, MAX_LATENCY_US));
        s.sum_us = s.sum_us.saturating_add(us);
    }

    /// Writes and reads as published. From a copy (a memcpy of the counts), so that the replica
    /// loop, which records under the same lock, waits for the copy only.
    pub fn histograms(&self) -> (Histogram, Histogram) {
        let of = |s: &std::sync::Mutex<Series>| s.lock().expect("latency histogram").clone();
        (of(&self.write).histogram(), of(&self.read).histogram())
    }

    /// Fills `s`'s write and read latency.
    pub fn fill(&self, s: &mut Status) {
        (s.write_latency, s.read_latency) = self.histograms();
    }
}

impl Histogram {
    /// Registers the histogram as `name` (buckets of [`LATENCY_BUCKETS_US`], in seconds), and
    /// its exact quantiles as the gauges `name`_quantile{quantile=…}.
    fn register(&self, reg: &mut prometheus_client::registry::Registry, name: &str, help: &str) {
        let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_US
            .iter()
            .zip(self.buckets)
            .map(|(b, n)| (*b as f64 / 1e6, n))
            .collect();
        buckets.push((f64::MAX, self.buckets[LATENCY_BUCKETS_US.len()]));
        reg.register(
            name,
            help,
            BucketHistogram {
                sum: self.sum_us as f64 / 1e6,
                count: self.count,
                buckets,
            },
        );
        let q = self.quantiles;
        reg.register(
            format!("{name}_quantile"),
            format!("{help}: exact quantiles (HDR histogram, 3 significant digits)"),
            Labeled::gauges(
                "quantile",
                [
                    ("0.5", q.p50_us),
                    ("0.9", q.p90_us),
                    ("0.99", q.p99_us),
                    ("0.999", q.p999_us),
                    ("1", q.max_us),
                ]
                .map(|(l, us)| (l.to_string(), us as f64 / 1e6)),
            ),
        );
    }
}

/// One replica's state as `/status` shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Status {
    /// Node id.
    pub id: u64,
    /// follower, pre_candidate, candidate, leader, recovering.
    pub role: String,
    /// Current term.
    pub term: u64,
    /// Known leader (0: none).
    pub leader: u64,
    /// Commit index.
    pub commit_index: u64,
    /// Applied index.
    pub applied_index: u64,
    /// Last log index.
    pub last_index: u64,
    /// First index still in the log (after compaction).
    pub first_index: u64,
    /// Voters of the configuration in force.
    pub voters: Vec<u64>,
    /// Learners of the configuration in force.
    pub learners: Vec<u64>,
    /// Every member of the configuration in force with its addresses as this replica knows
    /// them (and, on the leader, how far its log matches).
    pub members: Vec<MemberStatus>,
    /// The configured data plane: `off`, `udp` or `xdp`.
    pub dataplane: String,
    /// Whether the data plane is enabled.
    pub dataplane_enabled: bool,
    /// The data plane in detail: hand-off state, counts and reasons, its counters.
    pub fastpath: FastPathStatus,
    /// Replication latency at this replica as leader (request received → majority
    /// acknowledged), measured by the data plane while it is enabled and by software
    /// otherwise: counts per bucket of `waverunner_dataplane::bucket_of` (nanoseconds).
    pub replication_latency_ns: Vec<u64>,
    /// `memory` or `fsync`.
    pub durability: String,
    /// `log`, `read_index` or `lease`.
    pub read_mode: String,
    /// Addresses served.
    pub addresses: Addresses,
    /// Keys in the key-value store (expired ones not yet reclaimed included).
    pub keys: u64,
    /// Bytes the state takes as the state machine accounts them (compared with `maxmemory`).
    pub used_memory: u64,
    /// The last snapshot this replica took.
    pub snapshot: SnapshotStatus,
    /// This process's resident set size in bytes (`/proc/self/statm`).
    pub rss_bytes: u64,
    /// The configured `maxmemory` (0: no limit).
    pub maxmemory: u64,
    /// Digest of the replicated state (equal on replicas that applied the same index).
    pub digest: u64,
    /// Counters.
    pub counters: Counters,
    /// Write latency at this replica (request received → answered).
    pub write_latency: Histogram,
    /// Read latency at this replica.
    pub read_latency: Histogram,
}

/// The snapshots a replica takes, as `/status` shows them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotStatus {
    /// A background thread is writing one now.
    pub in_progress: bool,
    /// Applied index of the last one written (0: none yet).
    pub last_index: u64,
    /// Its size in bytes.
    pub last_bytes: u64,
    /// How long taking it took, from the view to the file.
    pub last_duration_ms: u64,
}

/// The data plane as `/status` shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FastPathStatus {
    /// Hand-off state of the Raft core: `off`, `enabling`, `on`, `disabling`.
    pub state: String,
    /// The term the data plane was enabled in (0 if never).
    pub enabled_term: u64,
    /// Why the leader is not enabling it now ("" when nothing blocks or not leader).
    pub blocker: String,
    /// Times the data plane was enabled at this replica.
    pub enables: u64,
    /// Times it was disabled, by reason (`new_term`, `reject_received`, ...).
    pub disables: std::collections::BTreeMap<String, u64>,
    /// The reason of the last disable ("" if none).
    pub last_disable_reason: String,
    /// Entries retransmitted by this replica's host (leader, on retransmission requests).
    pub retransmitted: u64,
    /// Client replies this replica's host sent for entries the data plane ordered.
    pub host_replies: u64,
    /// Heartbeats pushed through the data plane while idle.
    pub heartbeats: u64,
    /// Follower: appends that arrived ahead of the log, held and pushed back in order.
    pub reordered: u64,
    /// Follower: retransmissions its host asked for (held appends waiting on a lost one).
    pub retx_asked: u64,
    /// Leader: retransmission requests outdated by the follower's later acks, not answered.
    pub retx_outdated: u64,
    /// Fast-path REJECTs this replica sent while its data plane was off.
    pub rejects_sent: u64,
    /// The data plane's own counters (summed over CPUs).
    pub handled: u64,
    /// Packets passed to the host.
    pub punted: u64,
    /// Packets dropped (duplicates, gaps, stale acks).
    pub dropped: u64,
    /// Retransmission requests sent (follower).
    pub retx_requests: u64,
    /// Client replies generated by the data plane.
    pub client_replies: u64,
    /// Packets dropped because the log ring was full.
    pub ring_full: u64,
    /// Client requests the leader's data plane refused (overload).
    #[serde(default)]
    pub shed: u64,
    /// Of those, dropped without a busy reply (the ration of busy replies spent).
    #[serde(default)]
    pub shed_unanswered: u64,
    /// Times the handler halted.
    pub halts: u64,
    /// Malformed packets on the fast-path port.
    pub malformed: u64,
    /// Registers as last read: last log index, commit index.
    pub last_index: u64,
    /// Commit index in the registers.
    pub commit_index: u64,
}

/// One member as `/status` shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MemberStatus {
    /// Node id.
    pub id: u64,
    /// `voter` or `learner`.
    pub role: String,
    /// Its control-plane TCP address ("" if unknown here).
    pub raft: String,
    /// Its native client UDP address ("" if unknown here).
    pub client: String,
    /// Leader only: the highest index known to be in its log (0 elsewhere).
    pub match_index: u64,
}

/// Addresses a replica serves.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Addresses {
    /// Control-plane TCP.
    pub raft: String,
    /// Native UDP.
    pub client: String,
    /// Redis RESP.
    pub redis: String,
    /// memcached text.
    pub memcache: String,
    /// Admin HTTP.
    pub admin: String,
}

/// Monotonic counters.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// Client requests received (all front-ends).
    pub requests: u64,
    /// Writes proposed to the log by this replica as leader.
    pub proposals: u64,
    /// Requests forwarded to the leader.
    pub forwarded: u64,
    /// Proposals the leader held back (its bound on uncommitted entries, or on entries its
    /// data plane ordered and did not commit) and proposed again at a later tick.
    pub held_back: u64,
    /// Reads whose ReadIndex the leader refused (its data plane replicates, or it has not
    /// committed in its term yet), served through the log instead.
    pub reads_refused: u64,
    /// Reads served by another read's entry while the data plane replicates (one entry per
    /// batch of reads).
    pub reads_batched: u64,
    /// Entries applied.
    pub applied_entries: u64,
    /// Lease reads submitted while the loop's clock lagged (a tick overdue): held until it
    /// counted the ticks.
    pub lease_reads_late: u64,
    /// Commands and reads of this replica's front-end applied or read as the front-end
    /// decoded them, without decoding the command ([`crate::sm::StateMachine::apply_decoded`]).
    pub applied_decoded: u64,
    /// Client requests answered successfully.
    pub answered: u64,
    /// Client requests that timed out (outcome unknown to the client).
    pub timeouts: u64,
    /// Client requests refused because a queue was full.
    pub busy: u64,
    /// Writes refused because the state held more than `maxmemory`.
    pub oom_refused: u64,
    /// Ready batches that took the loop more than 50 ms (it sends no heartbeat meanwhile).
    pub slow_drives: u64,
    /// Heartbeats the keepalive thread sent while the loop was stalled.
    pub keepalives_sent: u64,
    /// Ticks of a stall (and the first on-time tick after it) at which a timeout stood at its
    /// last tick instead of expiring (it expires at the second on-time tick if nothing came).
    pub timeouts_held_in_stall: u64,
    /// Snapshots whose writing failed.
    pub snapshot_failures: u64,
    /// Retried commands answered from the session table.
    pub duplicates: u64,
    /// Elections this replica started.
    pub elections: u64,
    /// Times this replica became leader.
    pub leader_elected: u64,
    /// Elections this leader ran for itself, in a new term, so that a voter that restarted
    /// without its log may finish its recovery (part of `elections`).
    pub recovery_reelections: u64,
    /// Snapshots taken.
    pub snapshots_taken: u64,
    /// Snapshots installed from a leader.
    pub snapshots_installed: u64,
    /// InstallSnapshot pieces sent (resent ones included).
    pub snapshot_pieces_sent: u64,
    /// InstallSnapshot pieces dropped on arrival (duplicates, too far ahead, of a transfer
    /// whose start was missed).
    pub snapshot_pieces_dropped: u64,
    /// Snapshot transfers dropped unfinished (a new leader, term or snapshot).
    pub snapshot_transfers_abandoned: u64,
    /// Storage fsyncs.
    pub fsyncs: u64,
    /// Raft messages the core rejected as malformed or out of place.
    pub messages_rejected: u64,
    /// Frames or connections from peers rejected as malformed.
    pub frames_rejected: u64,
    /// Frames to peers dropped (queue full or connection down).
    pub frames_dropped: u64,
    /// Outbound peer connections found closed by the peer (it crashed or restarted).
    pub peer_connections_lost: u64,
    /// Bad client input: protocol errors, oversize values, unknown commands.
    pub client_errors: u64,
    /// Membership changes and leader transfers this replica proposed as leader (admin HTTP).
    pub membership_changes: u64,
}

impl Status {
    /// Prometheus exposition (OpenMetrics text, `prometheus-client`): counters, gauges, the
    /// latency histograms and their exact quantiles, from this status.
    pub fn prometheus(&self) -> String {
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let mut reg = prometheus_client::registry::Registry::with_prefix("waverunner");
        // prometheus-client ends every help text with a period itself.
        let mut gauge = |name: &str, help: &str, v: u64| {
            reg.register(name, help.trim_end_matches('.'), ConstGauge::new(v));
        };
        gauge("term", "Current Raft term.", self.term);
        gauge(
            "is_leader",
            "1 if this replica leads.",
            (self.role == "leader") as u64,
        );
        gauge("leader_id", "Known leader id (0: none).", self.leader);
        gauge("commit_index", "Commit index.", self.commit_index);
        gauge("applied_index", "Applied index.", self.applied_index);
        gauge("last_index", "Last log index.", self.last_index);
        gauge("keys", "Keys in the store.", self.keys);
        gauge(
            "used_memory_bytes",
            "Bytes the state takes as the state machine accounts them.",
            self.used_memory,
        );
        gauge(
            "rss_bytes",
            "Resident set size of the process.",
            self.rss_bytes,
        );
        gauge(
            "maxmemory_bytes",
            "Configured maxmemory (0: none).",
            self.maxmemory,
        );
        gauge(
            "dataplane_enabled",
            "1 if the data plane is enabled.",
            self.dataplane_enabled as u64,
        );
        let f = &self.fastpath;
        let c = &self.counters;
        let counters = [
            (
                "dataplane_enabled_term_GAUGE",
                "Term the data plane was enabled in.",
                f.enabled_term,
            ),
            ("dataplane_enables_total", "Data-plane enables.", f.enables),
            (
                "dataplane_handled_total",
                "Packets the data plane handled.",
                f.handled,
            ),
            (
                "dataplane_punted_total",
                "Packets passed to the host.",
                f.punted,
            ),
            (
                "dataplane_dropped_total",
                "Packets the data plane dropped.",
                f.dropped,
            ),
            (
                "dataplane_retx_requests_total",
                "Retransmission requests sent.",
                f.retx_requests,
            ),
            (
                "dataplane_retransmitted_total",
                "Entries retransmitted by the host.",
                f.retransmitted,
            ),
            (
                "dataplane_client_replies_total",
                "Client replies sent by the data plane.",
                f.client_replies,
            ),
            (
                "dataplane_host_replies_total",
                "Client replies sent by the host for data-plane entries.",
                f.host_replies,
            ),
            (
                "dataplane_ring_full_total",
                "Packets dropped: log ring full.",
                f.ring_full,
            ),
            (
                "dataplane_shed_total",
                "Client requests refused by the data plane (overload).",
                f.shed,
            ),
            (
                "dataplane_shed_unanswered_total",
                "Of those, dropped without a busy reply (the ration of busy replies spent).",
                f.shed_unanswered,
            ),
            ("dataplane_halts_total", "Handler halts.", f.halts),
            (
                "dataplane_malformed_total",
                "Malformed fast-path packets.",
                f.malformed,
            ),
            (
                "dataplane_heartbeats_total",
                "Idle heartbeats through the data plane.",
                f.heartbeats,
            ),
            (
                "dataplane_reordered_total",
                "Appends held for reordering and pushed back.",
                f.reordered,
            ),
            (
                "dataplane_retx_asked_total",
                "Retransmissions a follower's host asked for.",
                f.retx_asked,
            ),
            (
                "dataplane_retx_outdated_total",
                "Retransmission requests outdated by the follower's later acks.",
                f.retx_outdated,
            ),
            (
                "dataplane_rejects_sent_total",
                "REJECTs sent while the data plane was off.",
                f.rejects_sent,
            ),
            ("requests_total", "Client requests received.", c.requests),
            (
                "proposals_total",
                "Entries proposed as leader.",
                c.proposals,
            ),
            (
                "forwarded_total",
                "Requests forwarded to the leader.",
                c.forwarded,
            ),
            (
                "proposals_held_back_total",
                "Proposals held back by the leader's bound on uncommitted or in-flight entries.",
                c.held_back,
            ),
            ("commits_total", "Entries applied.", c.applied_entries),
            (
                "lease_reads_late_total",
                "Lease reads submitted while a tick was overdue: held until the ticks were counted.",
                c.lease_reads_late,
            ),
            (
                "applied_decoded_total",
                "Front-end commands applied or read as parsed, without decoding.",
                c.applied_decoded,
            ),
            ("answered_total", "Requests answered.", c.answered),
            (
                "reads_refused_total",
                "Reads whose ReadIndex the leader refused, served through the log.",
                c.reads_refused,
            ),
            (
                "reads_batched_total",
                "Reads served by another read's entry (data plane on).",
                c.reads_batched,
            ),
            ("timeouts_total", "Requests timed out.", c.timeouts),
            ("busy_total", "Requests refused: queue full.", c.busy),
            (
                "keepalives_sent_total",
                "Heartbeats sent by the keepalive thread while the loop was stalled.",
                c.keepalives_sent,
            ),
            (
                "slow_drives_total",
                "Ready batches that held the replica loop over 50 ms.",
                c.slow_drives,
            ),
            (
                "oom_refused_total",
                "Writes refused: used memory over maxmemory.",
                c.oom_refused,
            ),
            (
                "duplicates_total",
                "Retries answered from sessions.",
                c.duplicates,
            ),
            ("elections_total", "Elections started.", c.elections),
            (
                "timeouts_held_in_stall_total",
                "Stalled ticks at which a timeout stood at its last tick instead of expiring.",
                c.timeouts_held_in_stall,
            ),
            (
                "leader_elected_total",
                "Times elected leader.",
                c.leader_elected,
            ),
            (
                "recovery_reelections_total",
                "Leader re-elections for a voter that restarted without its log.",
                c.recovery_reelections,
            ),
            (
                "snapshots_taken_total",
                "Snapshots taken.",
                c.snapshots_taken,
            ),
            (
                "snapshot_failures_total",
                "Snapshots whose writing failed.",
                c.snapshot_failures,
            ),
            (
                "snapshots_installed_total",
                "Snapshots installed.",
                c.snapshots_installed,
            ),
            (
                "snapshot_pieces_sent_total",
                "InstallSnapshot pieces sent, resent ones included.",
                c.snapshot_pieces_sent,
            ),
            (
                "snapshot_pieces_dropped_total",
                "InstallSnapshot pieces dropped on arrival: duplicates, too far ahead, of a transfer whose start was missed.",
                c.snapshot_pieces_dropped,
            ),
            (
                "snapshot_transfers_abandoned_total",
                "Snapshot transfers dropped unfinished: a new leader, term or snapshot.",
                c.snapshot_transfers_abandoned,
            ),
            ("fsyncs_total", "Storage syncs.", c.fsyncs),
            (
                "messages_rejected_total",
                "Raft messages rejected.",
                c.messages_rejected,
            ),
            (
                "frames_rejected_total",
                "Peer frames rejected.",
                c.frames_rejected,
            ),
            (
                "frames_dropped_total",
                "Peer frames dropped.",
                c.frames_dropped,
            ),
            (
                "peer_connections_lost_total",
                "Outbound peer connections found closed by the peer.",
                c.peer_connections_lost,
            ),
            ("client_errors_total", "Bad client input.", c.client_errors),
            (
                "membership_changes_total",
                "Membership changes proposed.",
                c.membership_changes,
            ),
        ];
        for (name, help, v) in counters {
            let help = help.trim_end_matches('.');
            match name.strip_suffix("_total") {
                Some(name) => reg.register(name, help, ConstCounter::new(v)),
                None => reg.register(name.trim_end_matches("_GAUGE"), help, ConstGauge::new(v)),
            }
        }
        reg.register(
            "role",
            "Role of this replica",
            Labeled::gauges("role", [(self.role.clone(), 1.0)]),
        );
        reg.register(
            "dataplane_disables",
            "Data-plane disables (hand-offs to software), by reason",
            Labeled::counters(
                "reason",
                f.disables.iter().map(|(r, v)| (r.clone(), *v as f64)),
            ),
        );
        self.write_latency.register(
            &mut reg,
            "write_latency_seconds",
            "Write latency at this replica",
        );
        self.read_latency.register(
            &mut reg,
            "read_latency_seconds",
            "Read latency at this replica",
        );
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg)
            .expect("writing to a String does not fail");
        out
    }
}

/// A histogram already counted per bucket (`prometheus-client` builds its own from observations;
/// the replica publishes counts).
#[derive(Debug)]
struct BucketHistogram {
    sum: f64,
    count: u64,
    /// (upper bound, count in that bucket), the last bound `f64::MAX` (+Inf).
    buckets: Vec<(f64, u64)>,
}

impl prometheus_client::encoding::EncodeMetric for BucketHistogram {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.sum,
            self.count,
            &self.buckets,
            None,
        )
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

/// A family of constant values under one label (a gauge or a counter per label value).
#[derive(Debug)]
struct Labeled {
    counter: bool,
    label: &'static str,
    values: Vec<(String, f64)>,
}

impl Labeled {
    fn gauges(label: &'static str, values: impl IntoIterator<Item = (String, f64)>) -> Labeled {
        Labeled {
            counter: false,
            label,
            values: values.into_iter().collect(),
        }
    }

    fn counters(label: &'static str, values: impl IntoIterator<Item = (String, f64)>) -> Labeled {
        Labeled {
            counter: true,
            ..Labeled::gauges(label, values)
        }
    }
}

impl prometheus_client::encoding::EncodeMetric for Labeled {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        for (value, v) in &self.values {
            let labels = [(self.label, value.as_str())];
            let mut e = encoder.encode_family(&labels)?;
            if self.counter {
                e.encode_counter::<prometheus_client::encoding::NoLabelSet, _, f64>(
                    &(*v as u64),
                    None,
                )?;
            } else {
                e.encode_gauge(v)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        if self.counter {
            prometheus_client::metrics::MetricType::Counter
        } else {
            prometheus_client::metrics::MetricType::Gauge
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_in_prometheus() {
        let l = Latencies::default();
        for us in [10, 60, 60, 10_000_000] {
            l.record(false, us);
        }
        let mut st = Status::default();
        l.fill(&mut st);
        assert_eq!(st.write_latency.sum_us, 10_000_130);
        let s = st.prometheus();
        eprintln!("{s}");
        let name = "waverunner_write_latency_seconds";
        assert!(s.contains(&format!("# TYPE {name} histogram")), "{s}");
        assert!(
            s.contains(&format!("{name}_bucket{{le=\"0.00005\"}} 1")),
            "{s}"
        );
        assert!(
            s.contains(&format!("{name}_bucket{{le=\"0.0001\"}} 3")),
            "{s}"
        );
        assert!(s.contains(&format!("{name}_bucket{{le=\"5.0\"}} 3")), "{s}");
        assert!(
            s.contains(&format!("{name}_bucket{{le=\"+Inf\"}} 4")),
            "{s}"
        );
        assert!(s.contains(&format!("{name}_count 4")), "{s}");
        assert!(
            s.ends_with("# EOF\n"),
            "OpenMetrics text ends with # EOF: {s}"
        );
    }

    /// Quantiles come from every observation, within 0.1 %, not from a bucket's bound (the
    /// fixed buckets would put the median of 1..=1000 µs at 500 and its p99 at 1 000).
    #[test]
    fn latencies_give_exact_quantiles() {
        let l = Latencies::default();
        for us in 1..=1_000 {
            l.record(false, us);
        }
        l.record(true, 0); // counts as 1 µs
        l.record(true, u64::MAX); // counts as the bound
        let mut s = Status::default();
        l.fill(&mut s);
        let w = s.write_latency.quantiles;
        let near = |got: u64, want: u64| got.abs_diff(want) * 1_000 <= want;
        assert!(near(w.p50_us, 500), "{w:?}");
        assert!(near(w.p90_us, 900), "{w:?}");
        assert!(near(w.p99_us, 990), "{w:?}");
        assert!(near(w.p999_us, 999), "{w:?}");
        assert!(near(w.max_us, 1_000), "{w:?}");
        let r = s.read_latency.quantiles;
        assert_eq!(r.p50_us, 1);
        assert!(near(r.max_us, MAX_LATENCY_US), "{r:?}");
        let text = s.prometheus();
        let name = "waverunner_write_latency_seconds_quantile";
        assert!(text.contains(&format!("# TYPE {name} gauge")), "{text}");
        assert!(
            text.contains(&format!("{name}{{quantile=\"0.99\"}} 0.00099")),
            "{text}"
        );
        assert_eq!(
            Latencies::default().histograms().0.quantiles,
            Quantiles::default()
        );
    }
}
