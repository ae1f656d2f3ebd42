//! The fan-out measurement (`waverunner bench fanout`): three ways for an XDP leader to send
//! one request to every follower behind its single interface (DESIGN §5), measured in one run.
//!
//! ```text
//!   wrf-snd (10.80.0.10) ─┐                      ┌─ wrf-f1 (10.80.0.2): wrf_follower (XDP)
//!   sender                ├─ wrf-br0 (bridge,  ──┤
//!   wrf-ldr (10.80.0.1) ──┘  mcast_snooping 0)   └─ wrf-f2 (10.80.0.3): wrf_follower (XDP)
//!   wrf_leader (XDP) + wrf_clone (TC ingress)
//! ```
//!
//! The sender sends a 50-byte UDP datagram to the leader; `wrf_leader` (bpf/fanout.bpf.c)
//! turns it into one copy per follower; each follower's `wrf_follower` answers the sender
//! directly (`XDP_TX`). The options ([`Fanout`]):
//!
//! - (a) [`Fanout::Multicast`]: rewrite to an IPv4 multicast group and `XDP_TX`; the bridge
//!   floods it.
//! - (b) [`Fanout::DevmapBroadcast`]: the same rewrite, then `bpf_redirect_map` with
//!   `BPF_F_BROADCAST` over a DEVMAP holding the leader's own ifindex once per follower:
//!   identical copies, each flooded by the bridge.
//! - (c) [`Fanout::TcClone`]: `XDP_PASS`, then a TC ingress program rewrites the destination
//!   per follower and `bpf_clone_redirect`s each copy to the interface's egress in a flat loop.
//!
//! Per option: the latency from sending a request to having both followers' answers (one
//! request outstanding at a time), and machine-wide CPU time per request (Δ `/proc/stat`,
//! softirq included, minus the background measured in a quiet window just before; the median
//! over rounds) at a fixed offered rate. Options are interleaved round by round so slow drifts
//! of the shared machine's load hit all of them alike. The bridge-side veth ends carry `wrf_pass` (DESIGN §5).
//! Everything is removed when the [`Testbed`] is dropped, on success, error or panic.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libbpf_rs::{
    MapCore, MapFlags, MapHandle, Object, ObjectBuilder, TcHookBuilder, Xdp, XdpFlags, TC_INGRESS,
};

use crate::cpu;
use crate::stats::{median, quantiles, Quantiles};
use waverunner_netns as netns;

static BPF_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fanout.bpf.o"));

/// Every namespace and link of the fan-out testbed starts with this.
pub const PREFIX: &str = "wrf-";
/// The bridge (multicast snooping off, so it floods multicast to every port).
pub const BRIDGE: &str = "wrf-br0";
/// The sender's namespace (and the bridge-side end of its veth).
pub const SENDER: &str = "wrf-snd";
/// The leader's namespace.
pub const LEADER: &str = "wrf-ldr";
/// The followers' namespaces.
pub const FOLLOWERS: [&str; 2] = ["wrf-f1", "wrf-f2"];
/// The sender's address.
pub const SENDER_IP: Ipv4Addr = Ipv4Addr::new(10, 80, 0, 10);
/// The leader's address.
pub const LEADER_IP: Ipv4Addr = Ipv4Addr::new(10, 80, 0, 1);
/// The followers' addresses.
pub const FOLLOWER_IPS: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 80, 0, 2), Ipv4Addr::new(10, 80, 0, 3)];
/// The multicast group of option (a) and (b).
pub const GROUP_IP: Ipv4Addr = Ipv4Addr::new(239, 80, 0, 1);
/// The UDP port of requests and copies.
pub const PORT: u16 = 9_950;
/// UDP payload bytes of a request (DESIGN §6).
pub const PAYLOAD: usize = 50;

const SENDER_MAC: [u8; 6] = [0x02, 0x80, 0, 0, 0, 0x10];
const LEADER_MAC: [u8; 6] = [0x02, 0x80, 0, 0, 0, 0x01];
const FOLLOWER_MACS: [[u8; 6]; 2] = [[0x02, 0x80, 0, 0, 0, 0x02], [0x02, 0x80, 0, 0, 0, 0x03]];
/// Requests per option and round before measuring (ARP, caches, the mode switch).
const WARMUP: usize = 200;
/// How long the sender waits for both answers to one request.
const REPLY_TIMEOUT: Duration = Duration::from_millis(20);
/// A round's machine-wide CPU counts only if the machine was at most this busy (percent of
/// all CPUs) in its quiet window: beyond it another tenant's load hides ours (a saturated
/// machine is 100% busy with or without our traffic).
pub const QUIET_BUSY_MAX_PCT: f64 = 25.0;
/// Per-CPU counters of bpf/fanout.bpf.c (`wrf_stats`).
const ST_N: u32 = 4;

/// One way to fan a request out (the `mode` of `wrf_lcfg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fanout {
    /// (a) One frame to an IPv4 multicast group with `XDP_TX`; the bridge copies it.
    Multicast,
    /// (b) `bpf_redirect_map(BPF_F_BROADCAST)` over a DEVMAP with the leader's own ifindex
    /// once per follower; identical copies, each addressed to the group.
    DevmapBroadcast,
    /// (c) `XDP_PASS`, then TC ingress `bpf_clone_redirect` once per follower (flat loop).
    TcClone,
}

impl Fanout {
    /// All options, (a) first: ratios are taken to it.
    pub const ALL: [Fanout; 3] = [Fanout::Multicast, Fanout::DevmapBroadcast, Fanout::TcClone];

    /// The name in the table.
    pub fn label(self) -> &'static str {
        match self {
            Fanout::Multicast => "(a) multicast + XDP_TX",
            Fanout::DevmapBroadcast => "(b) devmap BPF_F_BROADCAST",
            Fanout::TcClone => "(c) TC bpf_clone_redirect",
        }
    }

    fn mode(self) -> u32 {
        match self {
            Fanout::Multicast => 1,
            Fanout::DevmapBroadcast => 2,
            Fanout::TcClone => 3,
        }
    }
}

/// How much to measure.
#[derive(Clone, Debug)]
pub struct FanoutOptions {
    /// Latency samples per option, over all rounds.
    pub samples: usize,
    /// Longest latency measurement per option, over all rounds.
    pub latency_time: Duration,
    /// Offered rate of the CPU measurement, requests per second.
    pub rate: u64,
    /// Length of the CPU measurement per option, over all rounds (each round's window is
    /// preceded by a quiet window of half its length that measures the background).
    pub load_time: Duration,
    /// Rounds: in each, every option gets its share of samples and load time, in turn.
    pub rounds: usize,
}

impl Default for FanoutOptions {
    fn default() -> FanoutOptions {
        FanoutOptions {
            samples: 20_000,
            latency_time: Duration::from_secs(20),
            rate: 10_000,
            load_time: Duration::from_secs(10),
            rounds: 5,
        }
    }
}

/// What one option measured.
#[derive(Clone, Debug)]
pub struct OptionResult {
    /// Which option.
    pub fanout: Fanout,
    /// Send → both answers, p50/p90/p99 in nanoseconds (`None`: never both answers).
    pub latency: Option<Quantiles>,
    /// Latency requests sent (after warm-ups).
    pub sent: u64,
    /// Latency requests without both answers within the reply timeout.
    pub lost: u64,
    /// Answers received per latency request (2: one per follower; more: duplicate copies).
    pub answers_per_request: f64,
    /// Requests sent at the fixed rate.
    pub load_sent: u64,
    /// Of those, requests both followers answered.
    pub load_complete: u64,
    /// Wall time of the load windows.
    pub load_wall: Duration,
    /// Machine-wide busy clock ticks in the load windows (softirq included).
    pub busy_ticks: u64,
    /// Of those, softirq.
    pub softirq_ticks: u64,
    /// Busy ticks the quiet windows predict for the load windows (the background).
    pub background_ticks: f64,
    /// Machine CPU µs per request of each round quiet enough to count
    /// ([`QUIET_BUSY_MAX_PCT`]), its background subtracted.
    pub cpu_rounds: Vec<f64>,
    /// Softirq µs per request of every round, its background softirq subtracted.
    pub softirq_rounds: Vec<f64>,
    /// Rounds run.
    pub rounds: usize,
    /// Kernel counters over the option's runs: requests the leader's XDP took, answers the
    /// followers sent, clones made, clone failures.
    pub counters: [u64; ST_N as usize],
}

impl OptionResult {
    /// Machine CPU µs per request, each round's background subtracted: the median over rounds
    /// (robust to a round that another tenant's burst hit).
    pub fn cpu_us(&self) -> Option<f64> {
        median(&self.cpu_rounds)
    }

    /// The background's share of the busy ticks in the load windows, percent.
    pub fn background_pct(&self) -> Option<f64> {
        (self.busy_ticks > 0).then(|| self.background_ticks * 100.0 / self.busy_ticks as f64)
    }

    /// Machine CPU µs per request, background included.
    pub fn cpu_raw_us(&self) -> Option<f64> {
        cpu::us_per_op(self.busy_ticks, self.load_sent)
    }

    /// Softirq µs per request (where XDP, TC, veth and the bridge run): the median over
    /// rounds, each round's background softirq subtracted.
    pub fn softirq_us(&self) -> Option<f64> {
        median(&self.softirq_rounds)
    }
}

/// The result of a run: one entry per option, `Err` saying why an option could not be measured.
pub type FanoutReport = Vec<(Fanout, Result<OptionResult, String>)>;

/// The namespaces, the bridge and the loaded programs; removes all of it when dropped.
pub struct Testbed {
    net: netns::Bridged,
    leader: Option<Object>,
    followers: Vec<Object>,
    /// Why option (c) cannot run (attaching the TC program failed), if it cannot.
    tc_error: Option<String>,
    /// Why option (b) cannot run (filling the devmap failed), if it cannot.
    devmap_error: Option<String>,
}

impl Testbed {
    /// Builds the testbed (removing a leftover one first).
    pub fn create() -> Result<Testbed, String> {
        if !netns::is_root() {
            return Err("the fan-out measurement needs root (network namespaces, XDP)".into());
        }
        let nodes = [
            (SENDER, SENDER_IP, SENDER_MAC),
            (LEADER, LEADER_IP, LEADER_MAC),
            (FOLLOWERS[0], FOLLOWER_IPS[0], FOLLOWER_MACS[0]),
            (FOLLOWERS[1], FOLLOWER_IPS[1], FOLLOWER_MACS[1]),
        ];
        let macs = nodes.map(|(_, _, mac)| mac_str(&mac));
        let hosts: Vec<_> = nodes
            .iter()
            .zip(&macs)
            .map(|(&(ns, addr, _), mac)| (ns, addr, Some(mac.as_str())))
            .collect();
        let net = netns::Bridged::create(PREFIX, BRIDGE, &hosts)?;
        // From here on, a failure drops `tb`, which removes what was made.
        let mut tb = Testbed {
            net,
            leader: None,
            followers: Vec::new(),
            tc_error: None,
            devmap_error: None,
        };

        // The leader: its object also provides wrf_pass for the bridge-side ends.
        let leader = load_object()?;
        let pass = prog_fd(&leader, "wrf_pass")?;
        for (ns, _, _) in nodes {
            attach_xdp(&pass, netns::ifindex(ns)?, &format!("{ns} (bridge side)"))?;
        }
        let leader_prog = prog_fd(&leader, "wrf_leader")?;
        let clone_prog = prog_fd(&leader, "wrf_clone")?;
        let devmap = map_handle(&leader, "wrf_devmap")?;
        let (ifindex, tc_error, devmap_error) = netns::run_in(LEADER, move || {
            let ifindex = netns::ifindex("eth0")?;
            attach_xdp(&leader_prog, ifindex, "eth0 in wrf-ldr")?;
            let mut hook = TcHookBuilder::new(clone_prog.as_fd())
                .ifindex(ifindex)
                .replace(true)
                .handle(1)
                .priority(1)
                .hook(TC_INGRESS);
            let tc_error = hook
                .create()
                .and_then(|_| hook.attach())
                .err()
                .map(|e| format!("attaching wrf_clone at TC ingress of eth0: {e}"));
            // The devmap resolves an ifindex in the namespace of the thread that updates it.
            let mut devmap_error = None;
            for k in 0..FOLLOWERS.len() as u32 {
                if let Err(e) = devmap.update(
                    &k.to_ne_bytes(),
                    &(ifindex as u32).to_ne_bytes(),
                    MapFlags::ANY,
                ) {
                    devmap_error = Some(format!("devmap entry {k} = ifindex {ifindex}: {e}"));
                }
            }
            Ok((ifindex, tc_error, devmap_error))
        })?;
        tb.tc_error = tc_error;
        tb.devmap_error = devmap_error;
        update(&leader, "wrf_lcfg", &leader_cfg(0, ifindex as u32))?;
        tb.leader = Some(leader);

        for (i, ns) in FOLLOWERS.iter().enumerate() {
            let obj = load_object()?;
            update(&obj, "wrf_fcfg", &follower_cfg(i))?;
            let prog = prog_fd(&obj, "wrf_follower")?;
            let what = format!("eth0 in {ns}");
            netns::run_in(ns, move || {
                attach_xdp(&prog, netns::ifindex("eth0")?, &what)
            })?;
            tb.followers.push(obj);
        }
        Ok(tb)
    }

    fn leader(&self) -> Result<&Object, String> {
        self.leader
            .as_ref()
            .ok_or_else(|| "the leader's BPF object is gone".to_string())
    }

    fn set_mode(&self, f: Option<Fanout>) -> Result<(), String> {
        let leader = self.leader()?;
        let ifindex = netns::run_in(LEADER, || netns::ifindex("eth0"))?;
        update(
            leader,
            "wrf_lcfg",
            &leader_cfg(f.map_or(0, Fanout::mode), ifindex as u32),
        )
    }

    /// Kernel counters summed over the leader's and the followers' objects.
    fn counters(&self) -> [u64; ST_N as usize] {
        let mut c = [0u64; ST_N as usize];
        for obj in self.leader.iter().chain(self.followers.iter()) {
            let Some(m) = obj.maps().find(|m| m.name().to_str() == Some("wrf_stats")) else {
                continue;
            };
            for (k, slot) in c.iter_mut().enumerate() {
                if let Ok(Some(per_cpu)) = m.lookup_percpu(&(k as u32).to_ne_bytes(), MapFlags::ANY)
                {
                    *slot += per_cpu
                        .iter()
                        .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
                        .map(u64::from_ne_bytes)
                        .sum::<u64>();
                }
            }
        }
        c
    }

    /// Measures every option, round by round.
    pub fn measure(&self, o: &FanoutOptions) -> FanoutReport {
        let rounds = o.rounds.max(1);
        let mut acc: Vec<(Fanout, Result<Acc, String>)> = Fanout::ALL
            .iter()
            .map(|&f| {
                let usable = match f {
                    Fanout::TcClone => self.tc_error.clone().map_or(Ok(()), Err),
                    Fanout::DevmapBroadcast => self.devmap_error.clone().map_or(Ok(()), Err),
                    Fanout::Multicast => Ok(()),
                };
                (f, usable.map(|()| Acc::default()))
            })
            .collect();
        let samples = o.samples.div_ceil(rounds);
        let lat_time = o.latency_time / rounds as u32;
        let load_time = o.load_time / rounds as u32;
        for round in 0..rounds {
            for (f, slot) in acc.iter_mut() {
                let Ok(a) = slot else { continue };
                eprintln!("fanout: round {}/{rounds}: {}", round + 1, f.label());
                let before = self.counters();
                let r = self.set_mode(Some(*f)).and_then(|()| {
                    let lat = netns::run_in(SENDER, move || latency(samples, lat_time))?;
                    if lat.samples.is_empty() {
                        return Err(format!(
                            "no request got both answers ({} sent, {} answers in all); kernel \
                             counters (leader, answered, cloned, clone errors): {:?}",
                            lat.sent,
                            lat.answers,
                            diff(self.counters(), before)
                        ));
                    }
                    let rate = o.rate;
                    let load = netns::run_in(SENDER, move || load(rate, load_time))?;
                    Ok((lat, load))
                });
                match r {
                    Ok((lat, load)) => {
                        a.add(lat, load);
                        let d = diff(self.counters(), before);
                        for (s, x) in a.counters.iter_mut().zip(d) {
                            *s += x;
                        }
                    }
                    Err(e) => *slot = Err(e),
                }
            }
        }
        let _ = self.set_mode(None);
        acc.into_iter()
            .map(|(f, a)| (f, a.map(|a| a.finish(f))))
            .collect()
    }

    /// Removes everything now; returns what could not be removed.
    pub fn teardown(&mut self) -> Result<(), String> {
        // Deleting a namespace deletes its veth pair and the programs attached to it.
        let r = self.net.remove();
        self.leader = None;
        self.followers.clear();
        r
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!(
                "waverunner bench fanout: removing the testbed failed: {e}; remove the \
                 `{PREFIX}*` namespaces and links by hand (`ip netns del …`, `ip link del …`)"
            );
        }
    }
}

/// Builds the testbed, measures, removes the testbed.
pub fn measure(o: &FanoutOptions) -> Result<FanoutReport, String> {
    let mut tb = Testbed::create()?;
    let r = tb.measure(o);
    tb.teardown()?;
    Ok(r)
}

#[derive(Default)]
struct Acc {
    samples: Vec<u64>,
    sent: u64,
    lost: u64,
    answers: u64,
    load_sent: u64,
    load_complete: u64,
    load_wall: Duration,
    busy: u64,
    softirq: u64,
    background: f64,
    cpu_rounds: Vec<f64>,
    softirq_rounds: Vec<f64>,
    rounds: usize,
    counters: [u64; ST_N as usize],
}

impl Acc {
    fn add(&mut self, l: Latency, w: Load) {
        self.samples.extend(l.samples);
        self.sent += l.sent;
        self.lost += l.lost;
        self.answers += l.answers;
        self.load_sent += w.sent;
        self.load_complete += w.complete;
        self.load_wall += w.wall;
        self.busy += w.busy;
        self.softirq += w.softirq;
        self.background += w.background;
        self.rounds += 1;
        let per_req =
            |ticks: f64| ticks.max(0.0) * 1e6 / cpu::ticks_per_second() as f64 / w.sent as f64;
        if w.sent > 0 {
            if w.quiet_busy_pct <= QUIET_BUSY_MAX_PCT {
                self.cpu_rounds.push(per_req(w.busy as f64 - w.background));
            }
            self.softirq_rounds
                .push(per_req(w.softirq as f64 - w.softirq_background));
        }
    }

    fn finish(mut self, fanout: Fanout) -> OptionResult {
        OptionResult {
            fanout,
            latency: quantiles(&mut self.samples),
            sent: self.sent,
            lost: self.lost,
            answers_per_request: if self.sent > 0 {
                self.answers as f64 / self.sent as f64
            } else {
                0.0
            },
            load_sent: self.load_sent,
            load_complete: self.load_complete,
            load_wall: self.load_wall,
            busy_ticks: self.busy,
            softirq_ticks: self.softirq,
            background_ticks: self.background,
            cpu_rounds: self.cpu_rounds,
            softirq_rounds: self.softirq_rounds,
            rounds: self.rounds,
            counters: self.counters,
        }
    }
}

fn diff(a: [u64; ST_N as usize], b: [u64; ST_N as usize]) -> [u64; ST_N as usize] {
    let mut d = [0; ST_N as usize];
    for i in 0..ST_N as usize {
        d[i] = a[i].saturating_sub(b[i]);
    }
    d
}

/// Which follower an answer came from.
fn follower_of(from: SocketAddr) -> Option<usize> {
    match from {
        SocketAddr::V4(a) => FOLLOWER_IPS.iter().position(|ip| ip == a.ip()),
        SocketAddr::V6(_) => None,
    }
}

/// A sequence number base no earlier run of this process or another used (the clock in ns).
fn unique_base() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1 << 40, |d| d.as_nanos() as u64)
}

fn request(seq: u64) -> [u8; PAYLOAD] {
    let mut p = [b'w'; PAYLOAD];
    p[..8].copy_from_slice(&seq.to_le_bytes());
    p
}

fn seq_of(buf: &[u8]) -> Option<u64> {
    buf.get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
}

struct Latency {
    samples: Vec<u64>,
    sent: u64,
    lost: u64,
    answers: u64,
}

/// One request outstanding at a time: send, wait for both followers' answers (or the reply
/// timeout), next. A warm-up first.
fn latency(samples: usize, limit: Duration) -> Result<Latency, String> {
    let sock = UdpSocket::bind((SENDER_IP, 0)).map_err(|e| format!("bind in {SENDER}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(2)))
        .map_err(|e| e.to_string())?;
    let to = SocketAddr::from((LEADER_IP, PORT));
    let mut buf = [0u8; 2048];
    let mut out = Latency {
        samples: Vec::with_capacity(samples),
        sent: 0,
        lost: 0,
        answers: 0,
    };
    // Sequence numbers are unique per run so late answers of another run never match.
    let base = unique_base();
    let start = Instant::now();
    for i in 0..(WARMUP + samples) as u64 {
        if i >= WARMUP as u64 && start.elapsed() >= limit {
            break;
        }
        let seq = base.wrapping_add(i);
        let t0 = Instant::now();
        sock.send_to(&request(seq), to)
            .map_err(|e| format!("send to {to}: {e}"))?;
        let mut seen = [false; 2];
        let mut answers = 0u64;
        while seen != [true; 2] && t0.elapsed() < REPLY_TIMEOUT {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            if seq_of(&buf[..n]) != Some(seq) {
                // A late copy of an earlier request (option (b) sends each twice).
                if i > WARMUP as u64 {
                    out.answers += 1;
                }
                continue;
            }
            if let Some(k) = follower_of(from) {
                seen[k] = true;
                answers += 1;
            }
        }
        let rtt = t0.elapsed();
        if i < WARMUP as u64 {
            continue;
        }
        out.sent += 1;
        out.answers += answers;
        if seen == [true; 2] {
            out.samples.push(rtt.as_nanos() as u64);
        } else {
            out.lost += 1;
        }
    }
    Ok(out)
}

struct Load {
    sent: u64,
    complete: u64,
    wall: Duration,
    busy: u64,
    softirq: u64,
    background: f64,
    softirq_background: f64,
    quiet_busy_pct: f64,
}

/// A quiet window (the background), then `rate` requests per second for `time` with a
/// receiver counting answers; machine CPU over the loaded window.
fn load(rate: u64, time: Duration) -> Result<Load, String> {
    let sock = UdpSocket::bind((SENDER_IP, 0)).map_err(|e| format!("bind in {SENDER}: {e}"))?;
    let rx = sock.try_clone().map_err(|e| e.to_string())?;
    rx.set_read_timeout(Some(Duration::from_millis(10)))
        .map_err(|e| e.to_string())?;
    let total = (rate as f64 * time.as_secs_f64()) as u64;
    let base = unique_base();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let receiver = std::thread::Builder::new()
        .name("wrf-rx".into())
        .spawn(move || {
            let mut mask = vec![0u8; total as usize];
            let mut complete = 0u64;
            let mut buf = [0u8; 2048];
            while !stop2.load(Ordering::Relaxed) {
                let Ok((n, from)) = rx.recv_from(&mut buf) else {
                    continue;
                };
                let (Some(s), Some(k)) = (seq_of(&buf[..n]), follower_of(from)) else {
                    continue;
                };
                if let Some(m) = s
                    .checked_sub(base)
                    .and_then(|i| mask.get_mut(usize::try_from(i).ok()?))
                {
                    if *m != 3 {
                        *m |= 1 << k;
                        complete += u64::from(*m == 3);
                    }
                }
            }
            complete
        })
        .map_err(|e| format!("cannot start the receiver: {e}"))?;

    let quiet = time / 2;
    let q0 = cpu::machine()?;
    let tq = Instant::now();
    std::thread::sleep(quiet);
    let q1 = cpu::machine()?;
    let quiet_secs = tq.elapsed().as_secs_f64();
    let bg_per_sec = q1.busy.saturating_sub(q0.busy) as f64 / quiet_secs;
    let bg_softirq_per_sec = q1.softirq.saturating_sub(q0.softirq) as f64 / quiet_secs;
    let quiet_busy_pct = cpu::background_pct(
        q1.busy - q0.busy.min(q1.busy),
        q1.idle - q0.idle.min(q1.idle),
        0,
    )
    .unwrap_or(100.0);

    let to = SocketAddr::from((LEADER_IP, PORT));
    let c0 = cpu::machine()?;
    let t0 = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        let due = ((t0.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        while sent < due {
            sock.send_to(&request(base + sent), to)
                .map_err(|e| format!("send to {to}: {e}"))?;
            sent += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    std::thread::sleep(Duration::from_millis(20)); // the last answers
    let c1 = cpu::machine()?;
    let wall = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let complete = receiver
        .join()
        .map_err(|_| "the receiver panicked".to_string())?;
    Ok(Load {
        sent,
        complete,
        wall,
        busy: c1.busy.saturating_sub(c0.busy),
        softirq: c1.softirq.saturating_sub(c0.softirq),
        background: bg_per_sec * wall.as_secs_f64(),
        softirq_background: bg_softirq_per_sec * wall.as_secs_f64(),
        quiet_busy_pct,
    })
}

/// The Markdown table of a run, ratios to option (a).
pub fn render(report: &FanoutReport, o: &FanoutOptions) -> String {
    let base = report
        .iter()
        .find(|(f, _)| *f == Fanout::Multicast)
        .and_then(|(_, r)| r.as_ref().ok());
    let ratio = |x: Option<f64>, b: Option<f64>| match (x, b) {
        (Some(x), Some(b)) if b > 0.0 => format!("{:.2}", x / b),
        _ => "–".to_string(),
    };
    let us = |ns: u64| format!("{:.1}", ns as f64 / 1e3);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| option | p50 µs | p90 µs | p99 µs | p50 ÷ (a) | p99 ÷ (a) | answers/req | lost | \
         CPU µs/req | ÷ (a) | rounds counted | softirq µs/req | ÷ (a) | completed at {} req/s |",
        o.rate
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut notes = String::new();
    for (f, r) in report {
        match r {
            Ok(r) => {
                let q = r.latency.unwrap_or_default();
                let bq = base.and_then(|b| b.latency);
                let f1 = |x: Option<f64>| x.map_or("–".into(), |v| format!("{v:.1}"));
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {:.2} | {}/{} | {} | {} | {}/{} | {} | {} | {}/{} |",
                    f.label(),
                    us(q.p50),
                    us(q.p90),
                    us(q.p99),
                    ratio(Some(q.p50 as f64), bq.map(|b| b.p50 as f64)),
                    ratio(Some(q.p99 as f64), bq.map(|b| b.p99 as f64)),
                    r.answers_per_request,
                    r.lost,
                    r.sent,
                    f1(r.cpu_us()),
                    ratio(r.cpu_us(), base.and_then(OptionResult::cpu_us)),
                    r.cpu_rounds.len(),
                    r.rounds,
                    f1(r.softirq_us()),
                    ratio(r.softirq_us(), base.and_then(OptionResult::softirq_us)),
                    r.load_complete,
                    r.load_sent,
                );
                let _ = writeln!(
                    notes,
                    "- {}: kernel counters — leader XDP took {}, followers answered {}, clones \
                     {}, clone failures {}; load windows {:.1} s, background {:.0} of {} busy \
                     ticks (raw {} µs/req); CPU µs/req per counted round {}; softirq µs/req per round {}.",
                    f.label(),
                    r.counters[0],
                    r.counters[1],
                    r.counters[2],
                    r.counters[3],
                    r.load_wall.as_secs_f64(),
                    r.background_ticks,
                    r.busy_ticks,
                    r.cpu_raw_us().map_or("–".into(), |v| format!("{v:.1}")),
                    list(&r.cpu_rounds),
                    list(&r.softirq_rounds),
                );
            }
            Err(e) => {
                let _ = writeln!(
                    s,
                    "| {} | – | – | – | – | – | – | – | – | – | – | – | – | – |",
                    f.label()
                );
                let _ = writeln!(notes, "- {}: not measured: {e}", f.label());
            }
        }
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "CPU µs/req: machine-wide busy time (softirq included) per request, the background of a \
         quiet window before each round subtracted, median over the rounds whose quiet window \
         was at most {QUIET_BUSY_MAX_PCT:.0}% busy; softirq µs/req: the same for the softirq \
         column, median over all rounds. Latency: send → both followers' answers, one request \
         outstanding.\n"
    );
    s.push_str(&notes);
    s
}

fn list(v: &[f64]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter()
        .map(|x| format!("{x:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn load_object() -> Result<Object, String> {
    ObjectBuilder::default()
        .open_memory(BPF_OBJECT)
        .map_err(|e| format!("opening the fan-out BPF object: {e}"))?
        .load()
        .map_err(|e| format!("loading the fan-out BPF object (needs root): {e}"))
}

fn prog_fd(obj: &Object, name: &str) -> Result<OwnedFd, String> {
    obj.progs()
        .find(|p| p.name().to_str() == Some(name))
        .ok_or_else(|| format!("BPF program {name} missing from the fan-out object"))?
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("dup of the {name} descriptor: {e}"))
}

fn map_handle(obj: &Object, name: &str) -> Result<MapHandle, String> {
    let m = obj
        .maps()
        .find(|m| m.name().to_str() == Some(name))
        .ok_or_else(|| format!("BPF map {name} missing from the fan-out object"))?;
    MapHandle::try_from(&m).map_err(|e| format!("a handle on map {name}: {e}"))
}

fn update(obj: &Object, name: &str, value: &[u8]) -> Result<(), String> {
    map_handle(obj, name)?
        .update(&0u32.to_ne_bytes(), value, MapFlags::ANY)
        .map_err(|e| format!("writing map {name}: {e}"))
}

fn attach_xdp(fd: &OwnedFd, ifindex: i32, what: &str) -> Result<(), String> {
    Xdp::new(fd.as_fd())
        .attach(ifindex, XdpFlags::DRV_MODE)
        .map_err(|e| format!("attaching XDP in native mode to {what}: {e}"))
}

/// `struct wrf_leader_cfg` of bpf/fanout.bpf.c.
fn leader_cfg(mode: u32, ifindex: u32) -> Vec<u8> {
    let g = GROUP_IP.octets();
    let group_mac = [0x01, 0x00, 0x5e, g[1] & 0x7f, g[2], g[3]];
    let mut v = Vec::with_capacity(132);
    v.extend_from_slice(&mode.to_ne_bytes());
    v.extend_from_slice(&u32::from(PORT).to_ne_bytes());
    v.extend_from_slice(&LEADER_MAC);
    v.extend_from_slice(&group_mac);
    v.extend_from_slice(&LEADER_IP.octets());
    v.extend_from_slice(&g);
    v.extend_from_slice(&ifindex.to_ne_bytes());
    v.extend_from_slice(&(FOLLOWERS.len() as u32).to_ne_bytes());
    for i in 0..8 {
        match (FOLLOWER_MACS.get(i), FOLLOWER_IPS.get(i)) {
            (Some(mac), Some(ip)) => {
                v.extend_from_slice(mac);
                v.extend_from_slice(&[0, 0]);
                v.extend_from_slice(&ip.octets());
            }
            _ => v.extend_from_slice(&[0; 12]),
        }
    }
    v
}

/// `struct wrf_follower_cfg` of bpf/fanout.bpf.c.
fn follower_cfg(i: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&u32::from(PORT).to_ne_bytes());
    v.extend_from_slice(&FOLLOWER_MACS[i]);
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&FOLLOWER_IPS[i].octets());
    v
}

fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_layout() {
        // Sizes of the C structs (36 + 12 × 8, and 16).
        let l = leader_cfg(1, 7);
        assert_eq!(l.len(), 132);
        assert_eq!(&l[14..20], &[0x01, 0x00, 0x5e, 80, 0, 1]);
        assert_eq!(&l[36..42], &FOLLOWER_MACS[0]);
        assert_eq!(&l[44..48], &[10, 80, 0, 2]);
        assert_eq!(follower_cfg(1).len(), 16);
        assert_eq!(mac_str(&SENDER_MAC), "02:80:00:00:00:10");
        assert_eq!(follower_of(SocketAddr::from((FOLLOWER_IPS[1], 1))), Some(1));
        assert_eq!(seq_of(&request(42)), Some(42));
    }
}
