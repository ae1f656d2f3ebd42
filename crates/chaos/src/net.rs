//! Network fault injection for a cluster whose replicas each run in their own network namespace
//! (`waverunner up` as root: namespace `wr-n<i>`, device `eth0`, 10.77.0.(10+i)/24).
//!
//! Two mechanisms, both applied **inside the replica's namespace**, so a fault on one replica
//! never touches anything else on the host:
//!
//! * **Partitions** with nftables: our own table `inet waverunner_chaos` in each namespace, with
//!   a set `blocked_from` of peer addresses whose packets the `input` hook drops. Dropping on
//!   input (at the receiver) rather than on output means a sender sees silence — timeouts, as on
//!   a real network — instead of `EPERM` from its own `send`. [`Net::partition`] (both ways
//!   between groups), [`Net::one_way`], [`Net::isolate`] add to the sets; [`Net::heal_partitions`]
//!   deletes our tables (nobody else's). Clients (namespace `wr-client`) are unaffected unless
//!   their [`NodeSpec`] is put in a group.
//! * **Loss and delay** with a BPF program (`bpf/net_chaos.bpf.c`, compiled by `build.rs` with
//!   clang, embedded, loaded with libbpf-rs) attached with TC clsact to `eth0` egress and
//!   ingress. Parameters per direction live in a BPF array (`wrc_cfg`) that [`Net::set_loss`],
//!   [`Net::set_delay`] and friends update at run time; per-CPU counters in `wrc_stats`
//!   ([`Net::stats`]). Loss is a `bpf_get_prandom_u32()` draw per packet.
//!
//! # Delay: why a tap pump and not EDT
//!
//! The textbook way — set `skb->tstamp` in the TC egress program and let the `fq` qdisc hold each
//! packet until its departure time — does not work on this kernel (6.18, the project's machine
//! kind): it is built without `sch_fq`, `sch_etf`, `sch_netem` and the BPF qdisc
//! (`CONFIG_NET_SCH_{FQ,ETF,NETEM,BPF}` unset in `/proc/config.gz`, no modules), and nothing else
//! on the path honours a departure time. So the packets are held in user space instead:
//!
//! 1. For a delayed direction the TC program `bpf_redirect`s each (IPv4/IPv6) packet to a tap
//!    device in the same namespace (`wrc-out` for egress, `wrc-in` for ingress).
//! 2. A *pump* thread of the process that set the delay reads the tap, keeps each frame in a
//!    timer heap for `delay ± jitter` (uniform; jitter reorders, as netem's does), and writes it
//!    back into the tap.
//! 3. The tap's TC ingress program marks the frame and redirects it to `eth0`'s egress (or
//!    ingress, `BPF_F_INGRESS`), where the chaos program lets marked packets pass untouched.
//!
//! The tap has no checksum or segmentation offloads, so the kernel completes checksums and
//! segments GSO packets before handing them to the pump: TCP works unchanged through it. The pump
//! renews a lease (`wrc_lease`, CLOCK_MONOTONIC) every 20 ms; the BPF program delays packets only
//! while the lease is valid, so if the process dies (and its taps with it) the namespace falls
//! back to undelayed traffic within [`LEASE`] instead of black-holing. A delay therefore lasts
//! as long as the [`Net`] that set it: keep it alive for the length of the fault.
//!
//! # Limits
//!
//! Both mechanisms sit in the namespace's kernel stack, behind XDP: packets a replica's XDP data
//! plane consumes or transmits (`XDP_TX`) on `eth0` bypass netfilter and TC there. So partitions
//! are also applied **at the bridge** (nftables table `bridge waverunner_chaos` in the host
//! namespace: a set of (port, source address) dropped in the forward hook, the port being the
//! host end of the receiver's veth), which every frame between replicas crosses, the xdp
//! leader's multicast appends and `XDP_TX`'d acknowledgements included; and
//! [`Net::loss_at_bridge`] moves loss there too (a `numgen random` draw per frame on the
//! replica's port, `oifname` for its ingress, `iifname` for its egress). Delay stays on `eth0`:
//! with `--dataplane xdp` it only delays the software paths.
//!
//! Everything is idempotent; [`Net::heal_all`] removes our nftables tables, BPF filters and taps
//! from every namespace this [`Net`] knows, and by default dropping the [`Net`] does so too
//! ([`Net::keep_on_drop`] to leave partitions and loss in place; delays always end with it).

use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};
use libbpf_rs::{MapCore, MapFlags, MapHandle, Object, ObjectBuilder, TcHook, TcHookBuilder};
use waverunner_netns as netns;

/// The BPF object, compiled from `bpf/net_chaos.bpf.c` by `build.rs`.
static BPF_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/net_chaos.bpf.o"));

/// Our nftables table (family `inet`) in each namespace.
pub const NFT_TABLE: &str = "waverunner_chaos";
/// The device the BPF program is attached to inside each namespace.
pub const DEVICE: &str = "eth0";
/// The taps delayed packets pass through (egress, ingress), inside each namespace.
pub const TAP_NAMES: [&str; 2] = ["wrc-out", "wrc-in"];
/// TC filter handle and priority of our filters (on `eth0` and on the taps).
pub const TC_HANDLE: u32 = 0x5743; // "WC"
/// See [`TC_HANDLE`]. Priority 1: our filters run before anyone else's on the device.
pub const TC_PRIORITY: u32 = 1;
/// How long the BPF program keeps redirecting to a pump that stopped renewing its lease.
pub const LEASE: Duration = Duration::from_millis(500);
/// How often the pump renews its lease.
const RENEW: Duration = Duration::from_millis(20);
/// Frames one namespace's pump holds at most; more are dropped.
const MAX_HELD: usize = 50_000;

/// One replica (or the clients' namespace) as fault injection sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeSpec {
    /// Node id (informational; 0 for a clients namespace).
    pub id: u64,
    /// Its network namespace (`ip netns` name), e.g. `wr-n1`.
    pub netns: String,
    /// Its address on the cluster's bridge (on `eth0` in the namespace).
    pub ip: Ipv4Addr,
}

impl NodeSpec {
    /// A node.
    pub fn new(id: u64, netns: impl Into<String>, ip: Ipv4Addr) -> Self {
        NodeSpec {
            id,
            netns: netns.into(),
            ip,
        }
    }
}

/// Which way packets go through a replica's `eth0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Packets the replica sends.
    Egress,
    /// Packets the replica receives.
    Ingress,
}

impl Direction {
    /// Both directions.
    pub const BOTH: [Direction; 2] = [Direction::Egress, Direction::Ingress];

    fn key(self) -> u32 {
        match self {
            Direction::Egress => 0,
            Direction::Ingress => 1,
        }
    }

    fn index(self) -> usize {
        self.key() as usize
    }
}

/// Counters of one direction, summed over CPUs (`struct wrc_dir_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirStats {
    /// IPv4/IPv6 packets seen (a delayed packet counts once).
    pub packets: u64,
    /// Dropped by the loss draw.
    pub dropped: u64,
    /// Sent to the delay pump.
    pub delayed: u64,
    /// A delay was set but the pump's lease had expired, so they passed at once.
    pub undelayed: u64,
    /// Came back from the pump and went on their way.
    pub reinjected: u64,
}

impl DirStats {
    const SIZE: usize = 40;

    fn from_bytes(b: &[u8]) -> DirStats {
        let f = |i: usize| {
            b.get(i * 8..i * 8 + 8)
                .map(|s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
                .unwrap_or(0)
        };
        DirStats {
            packets: f(0),
            dropped: f(1),
            delayed: f(2),
            undelayed: f(3),
            reinjected: f(4),
        }
    }

    fn add(&mut self, o: &DirStats) {
        self.packets += o.packets;
        self.dropped += o.dropped;
        self.delayed += o.delayed;
        self.undelayed += o.undelayed;
        self.reinjected += o.reinjected;
    }
}

/// Counters of one node's BPF program (zero when none is attached).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Packets the node sent.
    pub egress: DirStats,
    /// Packets the node received.
    pub ingress: DirStats,
}

impl NetStats {
    /// The counters of one direction.
    pub fn dir(&self, d: Direction) -> &DirStats {
        match d {
            Direction::Egress => &self.egress,
            Direction::Ingress => &self.ingress,
        }
    }
}

/// The loss and delay of one direction as set in the BPF map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Impairment {
    /// Drop probability, parts per million.
    pub loss_ppm: u32,
    /// Added delay, µs.
    pub delay_us: u32,
    /// Jitter, ± µs (uniform) around the delay.
    pub jitter_us: u32,
}

/// `struct wrc_dir_cfg` of the BPF program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct DirCfg {
    loss_ppm: u32,
    delay_us: u32,
    jitter_us: u32,
    tap_ifindex: u32,
    dev_ifindex: u32,
}

impl DirCfg {
    const SIZE: usize = 24;

    fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        for (i, v) in [
            self.loss_ppm,
            self.delay_us,
            self.jitter_us,
            self.tap_ifindex,
            self.dev_ifindex,
            0,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
        }
        b
    }

    fn from_bytes(b: &[u8]) -> DirCfg {
        let f = |i: usize| {
            b.get(i * 4..i * 4 + 4)
                .map(|s| u32::from_ne_bytes(s.try_into().expect("4 bytes")))
                .unwrap_or(0)
        };
        DirCfg {
            loss_ppm: f(0),
            delay_us: f(1),
            jitter_us: f(2),
            tap_ifindex: f(3),
            dev_ifindex: f(4),
        }
    }

    fn delays(&self) -> bool {
        self.delay_us > 0 || self.jitter_us > 0
    }
}

/// An error of network fault injection: what was being done, and why it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetError(pub String);

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NetError {}

/// Result of this module.
pub type Result<T> = std::result::Result<T, NetError>;

fn err(msg: impl Into<String>) -> NetError {
    NetError(msg.into())
}

/// Network fault injection on a set of namespaces (the replicas of one cluster).
///
/// Methods take `&self` and are safe to call from several threads (they serialize on an internal
/// lock). Dropping a `Net` stops its delay pumps and, unless [`Net::keep_on_drop`] was called,
/// heals everything ([`Net::heal_all`]).
pub struct Net {
    nodes: Vec<NodeSpec>,
    heal_on_drop: bool,
    loss_at_bridge: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Namespaces we put nftables rules or BPF filters in (beyond `nodes`).
    touched: BTreeSet<String>,
    /// Delay pumps by namespace.
    pumps: HashMap<String, Pump>,
    /// Loss injected at the bridge ([`Net::loss_at_bridge`]): (namespace, direction) → ppm.
    bridge_loss: std::collections::BTreeMap<(String, usize), u32>,
}

impl Net {
    /// Fault injection for these nodes. Nothing is changed until a fault is set.
    pub fn new(nodes: Vec<NodeSpec>) -> Net {
        Net {
            nodes,
            heal_on_drop: true,
            loss_at_bridge: false,
            state: Mutex::new(State::default()),
        }
    }

    /// Leave partitions and loss in place when this `Net` is dropped (delays still end: their
    /// pumps are threads of this process).
    pub fn keep_on_drop(mut self) -> Net {
        self.heal_on_drop = false;
        self
    }

    /// Inject loss on the replica's port of the bridge (host end of its veth, nftables in the
    /// host namespace) instead of with the BPF program on `eth0`: the only place that also sees
    /// what an XDP data plane sends with `XDP_TX` and what it consumes before TC ingress (see
    /// the module's *Limits*). Delay stays on `eth0`.
    pub fn loss_at_bridge(mut self) -> Net {
        self.loss_at_bridge = true;
        self
    }

    /// The nodes given to [`Net::new`].
    pub fn nodes(&self) -> &[NodeSpec] {
        &self.nodes
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every namespace we know: the nodes', then any other we touched.
    fn namespaces(&self, st: &State) -> Vec<String> {
        let mut v: Vec<String> = self.nodes.iter().map(|n| n.netns.clone()).collect();
        for ns in &st.touched {
            if !v.contains(ns) {
                v.push(ns.clone());
            }
        }
        v
    }

    // ---------------------------------------------------------------- partitions (nftables)

    /// Nodes in different groups can no longer exchange packets, in either direction. Adds to
    /// whatever is blocked already (idempotent); [`Net::heal_partitions`] undoes all of it. A
    /// namespace that appears in no group is untouched — in particular the clients' namespace,
    /// unless a [`NodeSpec`] for it is in a group.
    pub fn partition(&self, groups: &[Vec<NodeSpec>]) -> Result<()> {
        let mut st = self.lock();
        for (gi, g) in groups.iter().enumerate() {
            let others: Vec<Ipv4Addr> = groups
                .iter()
                .enumerate()
                .filter(|(gj, _)| *gj != gi)
                .flat_map(|(_, h)| h.iter().map(|n| n.ip))
                .collect();
            for n in g {
                block_from(&mut st, n, &others)?;
            }
        }
        Ok(())
    }

    /// Packets from `from` to `to` are dropped; those from `to` to `from` still flow.
    pub fn one_way(&self, from: &NodeSpec, to: &NodeSpec) -> Result<()> {
        let mut st = self.lock();
        block_from(&mut st, to, &[from.ip])
    }

    /// Cuts `node` off from every other node given to [`Net::new`] (both directions).
    pub fn isolate(&self, node: &NodeSpec) -> Result<()> {
        let others: Vec<NodeSpec> = self
            .nodes
            .iter()
            .filter(|n| n.netns != node.netns)
            .cloned()
            .collect();
        self.partition(&[vec![node.clone()], others])
    }

    /// The addresses `node` currently drops packets from (empty: not partitioned).
    pub fn blocked_from(&self, node: &NodeSpec) -> Result<Vec<Ipv4Addr>> {
        let _st = self.lock();
        if !netns::exists(&node.netns) {
            return Ok(Vec::new());
        }
        let out = match nft(
            &node.netns,
            &format!("list set inet {NFT_TABLE} blocked_from\n"),
        ) {
            Ok(o) => o,
            Err(e) if e.0.contains("No such file or directory") => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(parse_nft_elements(&out))
    }

    /// Removes every partition: deletes our nftables table in every namespace we know.
    pub fn heal_partitions(&self) -> Result<()> {
        let mut st = self.lock();
        heal_partitions_locked(self, &mut st)
    }

    // ------------------------------------------------------------------- loss and delay (BPF)

    /// Drops `ppm` parts per million of the packets `node` sends (0: none). See
    /// [`Net::set_loss_dir`] for the other direction.
    pub fn set_loss(&self, node: &NodeSpec, ppm: u32) -> Result<()> {
        self.set_loss_dir(node, Direction::Egress, ppm)
    }

    /// Drops `ppm` parts per million of `node`'s packets in direction `dir`.
    pub fn set_loss_dir(&self, node: &NodeSpec, dir: Direction, ppm: u32) -> Result<()> {
        if ppm > 1_000_000 {
            return Err(err(format!("loss of {ppm} ppm is more than 100 %")));
        }
        let mut st = self.lock();
        if self.loss_at_bridge && host_link_exists(&node.netns) {
            let k = (node.netns.clone(), dir.index());
            if ppm == 0 {
                st.bridge_loss.remove(&k);
            } else {
                st.bridge_loss.insert(k, ppm);
            }
            return write_bridge_loss(&st);
        }
        if ppm == 0 && attached_maps(&node.netns)?.is_none() {
            return Ok(()); // nothing to undo: do not attach anything for it
        }
        st.touched.insert(node.netns.clone());
        let maps = ensure_attached(&node.netns)?;
        maps.update_cfg(dir, |c| c.loss_ppm = ppm)
    }

    /// Delays every packet `node` sends by `us` µs ± `jitter_us` (uniform; jitter reorders).
    /// `(0, 0)` removes the delay. See [`Net::set_delay_dir`] for the other direction.
    pub fn set_delay(&self, node: &NodeSpec, us: u32, jitter_us: u32) -> Result<()> {
        self.set_delay_dir(node, Direction::Egress, us, jitter_us)
    }

    /// Delays `node`'s packets in direction `dir` by `us` µs ± `jitter_us`. The delay is applied
    /// by a pump thread of this process (see the module documentation): it lasts while this
    /// `Net` lives.
    pub fn set_delay_dir(
        &self,
        node: &NodeSpec,
        dir: Direction,
        us: u32,
        jitter_us: u32,
    ) -> Result<()> {
        let mut st = self.lock();
        st.touched.insert(node.netns.clone());
        let maps = ensure_attached(&node.netns)?;
        maps.update_cfg(dir, |c| {
            c.delay_us = us;
            c.jitter_us = jitter_us;
        })?;
        let cfgs = maps.read_cfgs()?;
        if cfgs.iter().any(DirCfg::delays) {
            let alive = st
                .pumps
                .get(&node.netns)
                .is_some_and(|p| !p.thread.as_ref().is_some_and(|t| t.is_finished()));
            if !alive {
                if let Some(old) = st.pumps.remove(&node.netns) {
                    old.stop();
                }
                let pump = Pump::start(&node.netns, &maps)?;
                st.pumps.insert(node.netns.clone(), pump);
            }
        } else if let Some(p) = st.pumps.remove(&node.netns) {
            // No direction delays any more: stop redirecting, then let the pump flush.
            maps.update_cfg(Direction::Egress, |c| c.tap_ifindex = 0)?;
            maps.update_cfg(Direction::Ingress, |c| c.tap_ifindex = 0)?;
            p.stop();
        }
        Ok(())
    }

    /// The loss and delay currently set for `node` (both directions; zero when nothing is
    /// attached).
    pub fn impairment(&self, node: &NodeSpec) -> Result<[Impairment; 2]> {
        let _st = self.lock();
        let Some(maps) = attached_maps(&node.netns)? else {
            return Ok([Impairment::default(); 2]);
        };
        let c = maps.read_cfgs()?;
        Ok(c.map(|c| Impairment {
            loss_ppm: c.loss_ppm,
            delay_us: c.delay_us,
            jitter_us: c.jitter_us,
        }))
    }

    /// The counters of `node`'s BPF program, summed over CPUs (zero when none is attached).
    pub fn stats(&self, node: &NodeSpec) -> Result<NetStats> {
        let _st = self.lock();
        let Some(maps) = attached_maps(&node.netns)? else {
            return Ok(NetStats::default());
        };
        maps.stats()
    }

    /// Removes loss and delay from `node`: stops its pump (held packets are sent at once),
    /// detaches our BPF filters and deletes the taps. Partitions stay.
    pub fn clear(&self, node: &NodeSpec) -> Result<()> {
        let mut st = self.lock();
        clear_locked(&mut st, &node.netns)
    }

    /// [`Net::clear`] on every namespace we know.
    pub fn clear_all(&self) -> Result<()> {
        let mut st = self.lock();
        clear_all_locked(self, &mut st)
    }

    /// Removes every fault: [`Net::heal_partitions`] and [`Net::clear_all`]. Tries every
    /// namespace even if one fails, and reports the first failure.
    pub fn heal_all(&self) -> Result<()> {
        let mut st = self.lock();
        let a = clear_all_locked(self, &mut st);
        let b = heal_partitions_locked(self, &mut st);
        let c = if self.nodes.iter().any(|n| host_link_exists(&n.netns)) {
            let t = BRIDGE_TABLE;
            nft_host(&format!("add table bridge {t}\ndelete table bridge {t}\n")).map(|_| ())
        } else {
            Ok(())
        };
        a.and(b).and(c)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if self.heal_on_drop {
            let _ = self.heal_all();
        } else {
            let mut st = self.lock();
            let pumps: Vec<(String, Pump)> = st.pumps.drain().collect();
            for (ns, p) in pumps {
                if let Ok(Some(maps)) = attached_maps(&ns) {
                    for d in Direction::BOTH {
                        let _ = maps.update_cfg(d, |c| {
                            c.tap_ifindex = 0;
                            c.delay_us = 0;
                            c.jitter_us = 0;
                        });
                    }
                }
                p.stop();
            }
        }
    }
}

fn heal_partitions_locked(net: &Net, st: &mut State) -> Result<()> {
    let mut first = if net.nodes.iter().any(|n| host_link_exists(&n.netns)) {
        nft_host(&format!(
            "{}flush set bridge {BRIDGE_TABLE} blocked\n",
            bridge_base()
        ))
        .map(|_| ())
    } else {
        Ok(())
    };
    for ns in net.namespaces(st) {
        if !netns::exists(&ns) {
            continue;
        }
        // `add` then `delete`, in one transaction: deletes our table whether or not it exists.
        let r = nft(
            &ns,
            &format!("add table inet {NFT_TABLE}\ndelete table inet {NFT_TABLE}\n"),
        );
        if first.is_ok() {
            first = r.map(|_| ());
        }
    }
    first
}

fn clear_all_locked(net: &Net, st: &mut State) -> Result<()> {
    // Loss at the bridge: every rule goes (also those a `Net` of an earlier fault set).
    st.bridge_loss.clear();
    let mut first = if net.nodes.iter().any(|n| host_link_exists(&n.netns)) {
        write_bridge_loss(st)
    } else {
        Ok(())
    };
    for ns in net.namespaces(st) {
        let r = clear_locked(st, &ns);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

fn clear_locked(st: &mut State, ns: &str) -> Result<()> {
    if st.bridge_loss.keys().any(|(n, _)| n == ns) {
        st.bridge_loss.retain(|(n, _), _| n != ns);
        write_bridge_loss(st)?;
    }
    let pump = st.pumps.remove(ns);
    if !netns::exists(ns) {
        if let Some(p) = pump {
            p.stop();
        }
        return Ok(());
    }
    if let Some(maps) = attached_maps(ns)? {
        // Stop loss and redirection first, so nothing new reaches the pump.
        for d in Direction::BOTH {
            maps.write_cfg(
                d,
                DirCfg {
                    dev_ifindex: maps.cfgs_dev(d),
                    ..DirCfg::default()
                },
            )?;
        }
    }
    if let Some(p) = pump {
        p.stop();
    }
    let ns2 = ns.to_string();
    in_netns(ns, move || {
        for tap in TAP_NAMES {
            // Taps a pump of another (or a dead) process left behind.
            if ifindex(tap).is_some() {
                let _ = run("ip", &["-n", &ns2, "link", "del", tap]);
            }
        }
        if let Some(dev) = ifindex(DEVICE) {
            for ap in [libbpf_rs::TC_EGRESS, libbpf_rs::TC_INGRESS] {
                detach_ours(dev, ap)?;
            }
            remove_empty_clsact(&ns2);
        }
        Ok(())
    })
}

/// Deletes the clsact qdisc on `eth0` in `ns` if no filter is left on it (libbpf created it for
/// ours; a qdisc somebody else's filters use stays).
fn remove_empty_clsact(ns: &str) {
    let qdiscs = run("tc", &["-n", ns, "qdisc", "show", "dev", DEVICE]).unwrap_or_default();
    if !qdiscs.contains("clsact") {
        return;
    }
    for dir in ["ingress", "egress"] {
        match run("tc", &["-n", ns, "filter", "show", "dev", DEVICE, dir]) {
            Ok(out) if out.trim().is_empty() => {}
            _ => return,
        }
    }
    let _ = run("tc", &["-n", ns, "qdisc", "del", "dev", DEVICE, "clsact"]);
}

// ---------------------------------------------------------------------------- nftables

fn block_from(st: &mut State, node: &NodeSpec, ips: &[Ipv4Addr]) -> Result<()> {
    st.touched.insert(node.netns.clone());
    let ips: Vec<String> = ips
        .iter()
        .filter(|ip| **ip != node.ip)
        .map(|ip| ip.to_string())
        .collect();
    let t = NFT_TABLE;
    let mut script = format!(
        "add table inet {t}\n\
         add set inet {t} blocked_from {{ type ipv4_addr; }}\n\
         add chain inet {t} input {{ type filter hook input priority -300; policy accept; }}\n\
         flush chain inet {t} input\n\
         add rule inet {t} input ip saddr @blocked_from counter drop\n"
    );
    if !ips.is_empty() {
        script += &format!(
            "add element inet {t} blocked_from {{ {} }}\n",
            ips.join(", ")
        );
    }
    nft(&node.netns, &script)?;
    // The same at the bridge, on the way to the node: the namespace's input hook runs after
    // its XDP program, which consumes (and answers with XDP_TX) the data plane's packets.
    if host_link_exists(&node.netns) && !ips.is_empty() {
        let elems: Vec<String> = ips
            .iter()
            .map(|ip| format!("\"{}\" . {ip}", node.netns))
            .collect();
        nft_host(&format!(
            "{}add element bridge {BRIDGE_TABLE} blocked {{ {} }}\n",
            bridge_base(),
            elems.join(", ")
        ))?;
    }
    Ok(())
}

/// Our nftables table (family `bridge`) in the host namespace: partitions and loss on the
/// bridge ports, where every frame of a replica passes, XDP_TX'd ones included. A replica's
/// port is the host end of its veth, named like its namespace (`waverunner up`).
pub const BRIDGE_TABLE: &str = "waverunner_chaos";

/// Whether the host end of `ns`'s veth exists in this (the host) namespace.
fn host_link_exists(ns: &str) -> bool {
    Path::new("/sys/class/net").join(ns).exists()
}

/// Creates the bridge table, its `blocked` set (port . source address) and chains if missing.
fn bridge_base() -> String {
    let t = BRIDGE_TABLE;
    format!(
        "add table bridge {t}\n\
         add set bridge {t} blocked {{ type ifname . ipv4_addr; }}\n\
         add chain bridge {t} loss\n\
         add chain bridge {t} forward {{ type filter hook forward priority -300; policy accept; }}\n\
         flush chain bridge {t} forward\n\
         add rule bridge {t} forward oifname . ip saddr @blocked counter drop\n\
         add rule bridge {t} forward jump loss\n"
    )
}

/// Rewrites the bridge's loss chain from `st.bridge_loss`: a random draw per frame, on the
/// way to the replica (ingress) or from it (egress).
fn write_bridge_loss(st: &State) -> Result<()> {
    let t = BRIDGE_TABLE;
    // `loss` must exist before `forward` jumps to it.
    let mut script = format!("{}flush chain bridge {t} loss\n", bridge_base());
    for ((ns, dir), ppm) in &st.bridge_loss {
        let port = if *dir == Direction::Ingress.index() {
            "oifname"
        } else {
            "iifname"
        };
        script += &format!(
            "add rule bridge {t} loss {port} \"{ns}\" numgen random mod 1000000 < {ppm} counter drop\n"
        );
    }
    nft_host(&script).map(|_| ())
}

/// Runs an nft script in the host namespace (ours).
fn nft_host(script: &str) -> Result<String> {
    let bin = nft_binary()?;
    let mut child = Command::new(&bin)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("cannot run nft: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| err(format!("nft: writing the script: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| err(format!("nft: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "nft failed ({}): {}\nscript:\n{script}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn nft_binary() -> Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join("nft"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            err("`nft` not found: install the Debian package nftables (scripts/install-deps.sh)")
        })
}

/// Runs an nft script (`nft -f -`) inside namespace `ns`; returns its standard output.
fn nft(ns: &str, script: &str) -> Result<String> {
    let bin = nft_binary()?;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(&bin)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("cannot run `ip netns exec {ns} nft`: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| err(format!("nft in {ns}: writing the script: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| err(format!("nft in {ns}: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "nft in {ns} failed ({}): {}\nscript:\n{script}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The IPv4 addresses in the `elements = { … }` of `nft list set` output.
fn parse_nft_elements(out: &str) -> Vec<Ipv4Addr> {
    let Some(start) = out.find("elements") else {
        return Vec::new();
    };
    let rest = &out[start..];
    let body = rest
        .split_once('{')
        .and_then(|(_, b)| b.split_once('}'))
        .map(|(b, _)| b)
        .unwrap_or("");
    body.split(|c: char| c == ',' || c.is_whitespace())
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

// ---------------------------------------------------------------------------- namespaces
//
// The namespace helpers are `waverunner_netns`'s; these adapt their errors.

impl From<String> for NetError {
    fn from(s: String) -> NetError {
        NetError(s)
    }
}

/// Runs `f` on a thread inside network namespace `ns` (the calling thread's is untouched).
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    netns::run_in_scoped(ns, f)
}

/// Index of a device in the calling thread's namespace.
fn ifindex(name: &str) -> Option<u32> {
    netns::ifindex(name).ok().map(|i| i as u32)
}

fn run(cmd: &str, args: &[&str]) -> Result<String> {
    netns::command(cmd, args).map_err(NetError)
}

// ---------------------------------------------------------------------------- BPF

/// The maps of one namespace's attached program.
struct Maps {
    cfg: MapHandle,
    lease: MapHandle,
    stats: MapHandle,
    /// `dev_ifindex` of each direction as last read (kept across [`clear_locked`]).
    dev: [u32; 2],
}

const ZERO_U32: [u8; 4] = [0; 4];

impl Maps {
    fn ids(&self) -> Result<[u32; 3]> {
        let id = |m: &MapHandle| {
            m.info()
                .map(|i| i.info.id)
                .map_err(|e| err(format!("bpf map info: {e}")))
        };
        Ok([id(&self.cfg)?, id(&self.lease)?, id(&self.stats)?])
    }

    fn from_ids(ids: &[u32]) -> Result<Option<Maps>> {
        let (mut cfg, mut lease, mut stats) = (None, None, None);
        for &id in ids {
            let Ok(m) = MapHandle::from_map_id(id) else {
                continue;
            };
            match m.name().to_str() {
                Some("wrc_cfg") => cfg = Some(m),
                Some("wrc_lease") => lease = Some(m),
                Some("wrc_stats") => stats = Some(m),
                _ => {}
            }
        }
        let (Some(cfg), Some(lease), Some(stats)) = (cfg, lease, stats) else {
            return Ok(None);
        };
        let mut m = Maps {
            cfg,
            lease,
            stats,
            dev: [0; 2],
        };
        let c = m.read_cfgs()?;
        m.dev = [c[0].dev_ifindex, c[1].dev_ifindex];
        Ok(Some(m))
    }

    fn cfgs_dev(&self, d: Direction) -> u32 {
        self.dev[d.index()]
    }

    fn read_cfg(&self, d: Direction) -> Result<DirCfg> {
        let v = self
            .cfg
            .lookup(&d.key().to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| err(format!("reading wrc_cfg: {e}")))?
            .unwrap_or_default();
        Ok(DirCfg::from_bytes(&v))
    }

    fn read_cfgs(&self) -> Result<[DirCfg; 2]> {
        Ok([
            self.read_cfg(Direction::Egress)?,
            self.read_cfg(Direction::Ingress)?,
        ])
    }

    fn write_cfg(&self, d: Direction, c: DirCfg) -> Result<()> {
        self.cfg
            .update(&d.key().to_ne_bytes(), &c.to_bytes(), MapFlags::ANY)
            .map_err(|e| err(format!("updating wrc_cfg: {e}")))
    }

    fn update_cfg(&self, d: Direction, f: impl FnOnce(&mut DirCfg)) -> Result<()> {
        let mut c = self.read_cfg(d)?;
        f(&mut c);
        self.write_cfg(d, c)
    }

    fn set_lease(&self, until_ns: u64) -> Result<()> {
        self.lease
            .update(&ZERO_U32, &until_ns.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| err(format!("updating wrc_lease: {e}")))
    }

    fn stats(&self) -> Result<NetStats> {
        let mut s = NetStats::default();
        for d in Direction::BOTH {
            let per_cpu = self
                .stats
                .lookup_percpu(&d.key().to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| err(format!("reading wrc_stats: {e}")))?
                .unwrap_or_default();
            let t = match d {
                Direction::Egress => &mut s.egress,
                Direction::Ingress => &mut s.ingress,
            };
            for v in per_cpu {
                if v.len() >= DirStats::SIZE {
                    t.add(&DirStats::from_bytes(&v));
                }
            }
        }
        Ok(s)
    }
}

/// A TC hook on `ifindex` for our handle and priority. `fd` is the program to attach; for query
/// and detach libbpf ignores it (any descriptor will do).
fn tc_hook(fd: BorrowedFd<'_>, ifindex: u32, ap: libbpf_rs::TcAttachPoint) -> TcHook {
    TcHookBuilder::new(fd)
        .ifindex(ifindex as i32)
        .replace(true)
        .handle(TC_HANDLE)
        .priority(TC_PRIORITY)
        .hook(ap)
}

/// Runs `f` with libbpf's messages off: a query that finds nothing, or creating a clsact qdisc
/// that exists, is expected here, and libbpf would print the kernel's complaint to stderr.
fn quietly<T>(f: impl FnOnce() -> T) -> T {
    static PRINT: Mutex<()> = Mutex::new(());
    let _g = PRINT.lock().unwrap_or_else(|p| p.into_inner());
    let prev = libbpf_rs::set_print(None);
    let r = f();
    libbpf_rs::set_print(prev);
    r
}

/// The id of our program on `ifindex` at `ap`, if attached (calling thread's namespace).
fn query_ours(ifindex: u32, ap: libbpf_rs::TcAttachPoint) -> Option<u32> {
    let any = File::open("/dev/null").ok()?;
    quietly(|| tc_hook(any.as_fd(), ifindex, ap).query())
        .ok()
        .filter(|id| *id != 0)
}

fn detach_ours(ifindex: u32, ap: libbpf_rs::TcAttachPoint) -> Result<()> {
    if query_ours(ifindex, ap).is_none() {
        return Ok(());
    }
    let any = File::open("/dev/null").map_err(|e| err(format!("/dev/null: {e}")))?;
    match quietly(|| tc_hook(any.as_fd(), ifindex, ap).detach()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(format!("detaching our TC filter: {e}"))),
    }
}

fn prog_map_ids(prog_id: u32) -> Vec<u32> {
    ProgInfoIter::with_query_opts(ProgInfoQueryOptions::default().include_map_ids(true))
        .find(|p| p.id == prog_id)
        .map(|p| p.map_ids)
        .unwrap_or_default()
}

/// The maps of the program attached to `eth0` in `ns`, if any.
fn attached_maps(ns: &str) -> Result<Option<Maps>> {
    if !netns::exists(ns) {
        return Ok(None);
    }
    let ids = in_netns(ns, || {
        let Some(dev) = ifindex(DEVICE) else {
            return Ok(Vec::new());
        };
        Ok(query_ours(dev, libbpf_rs::TC_EGRESS)
            .or_else(|| query_ours(dev, libbpf_rs::TC_INGRESS))
            .map(prog_map_ids)
            .unwrap_or_default())
    })?;
    Maps::from_ids(&ids)
}

/// Opens and loads the BPF object, sharing `reuse`'s maps if given.
fn load_object(reuse: Option<&Maps>) -> Result<Object> {
    let mut open = ObjectBuilder::default()
        .open_memory(BPF_OBJECT)
        .map_err(|e| err(format!("opening the BPF object: {e}")))?;
    if let Some(m) = reuse {
        for mut map in open.maps_mut() {
            let fd = match map.name().to_str() {
                Some("wrc_cfg") => m.cfg.as_fd(),
                Some("wrc_lease") => m.lease.as_fd(),
                Some("wrc_stats") => m.stats.as_fd(),
                _ => continue,
            };
            map.reuse_fd(fd)
                .map_err(|e| err(format!("reusing a BPF map: {e}")))?;
        }
    }
    open.load()
        .map_err(|e| err(format!("loading the BPF program (needs root): {e}")))
}

fn prog_fd<'a>(obj: &'a Object, name: &str) -> Result<BorrowedFd<'a>> {
    // The fd borrows from `obj`; Program is a view into it.
    for p in obj.progs() {
        if p.name().to_str() == Some(name) {
            // SAFETY: the descriptor belongs to `obj`, which outlives the returned borrow.
            return Ok(unsafe { BorrowedFd::borrow_raw(p.as_fd().as_raw_fd()) });
        }
    }
    Err(err(format!("BPF program {name} missing from the object")))
}

/// Makes sure our programs are attached to `eth0` egress and ingress in `ns` (loading them if
/// not, keeping the existing maps if one direction survived) and returns their maps.
fn ensure_attached(ns: &str) -> Result<Maps> {
    if !netns::exists(ns) {
        return Err(err(format!("network namespace {ns} does not exist")));
    }
    let ids = in_netns(ns, || {
        let dev = ifindex(DEVICE)
            .ok_or_else(|| err(format!("no device {DEVICE} in network namespace {ns}")))?;
        let eg = query_ours(dev, libbpf_rs::TC_EGRESS);
        let ig = query_ours(dev, libbpf_rs::TC_INGRESS);
        if let (Some(e), Some(i)) = (eg, ig) {
            let (me, mi) = (prog_map_ids(e), prog_map_ids(i));
            if let Some(m) = Maps::from_ids(&me)? {
                if me == mi && m.dev[0] == dev {
                    return Ok(me);
                }
            }
        }
        // (Re)load, reusing the maps of whichever direction is still attached.
        let old = match eg.or(ig) {
            Some(p) => Maps::from_ids(&prog_map_ids(p))?,
            None => None,
        };
        let obj = load_object(old.as_ref())?;
        for (name, ap) in [
            ("wrc_egress", libbpf_rs::TC_EGRESS),
            ("wrc_ingress", libbpf_rs::TC_INGRESS),
        ] {
            let fd = prog_fd(&obj, name)?;
            let mut h = tc_hook(fd, dev, ap);
            quietly(|| h.create()).map_err(|e| {
                err(format!(
                    "creating the clsact qdisc on {DEVICE} in {ns}: {e}"
                ))
            })?;
            h.attach()
                .map_err(|e| err(format!("attaching {name} to {DEVICE} in {ns}: {e}")))?;
        }
        let maps = match old {
            Some(m) => m,
            None => {
                let p = query_ours(dev, libbpf_rs::TC_EGRESS)
                    .ok_or_else(|| err(format!("{name} vanished in {ns}", name = "wrc_egress")))?;
                Maps::from_ids(&prog_map_ids(p))?
                    .ok_or_else(|| err("the attached program has no maps"))?
            }
        };
        for d in Direction::BOTH {
            maps.update_cfg(d, |c| c.dev_ifindex = dev)?;
        }
        maps.ids().map(|a| a.to_vec())
    })?;
    Maps::from_ids(&ids)?.ok_or_else(|| err(format!("the BPF maps in {ns} vanished")))
}

// ---------------------------------------------------------------------------- delay pump

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One namespace's delay pump: a thread inside the namespace that owns its two taps.
struct Pump {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Pump {
    /// Creates the taps in `ns`, attaches the re-injection programs, starts the thread, and
    /// only then points the BPF program at the taps.
    fn start(ns: &str, maps: &Maps) -> Result<Pump> {
        let file = netns::open(ns)?;
        let map_ids = maps.ids()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Result<[u32; 2]>>();
        let ns2 = ns.to_string();
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("wrc-pump-{ns}"))
            .spawn(move || {
                let setup = (|| {
                    netns::enter_file(&file, &ns2)?;
                    drop(file);
                    // Best effort: a pump that waits behind busy threads adds to the delay.
                    // SAFETY: gettid and setpriority on our own thread id.
                    unsafe {
                        let tid = libc::gettid() as libc::id_t;
                        libc::setpriority(libc::PRIO_PROCESS, tid, -10);
                    }
                    let maps = Maps::from_ids(&map_ids)?
                        .ok_or_else(|| err(format!("the BPF maps in {ns2} vanished")))?;
                    let taps = [open_tap(&ns2, TAP_NAMES[0])?, open_tap(&ns2, TAP_NAMES[1])?];
                    let obj = load_object(Some(&maps))?;
                    for (tap, prog) in taps.iter().zip(["wrc_reinj_out", "wrc_reinj_in"]) {
                        let mut h =
                            tc_hook(prog_fd(&obj, prog)?, tap.ifindex, libbpf_rs::TC_INGRESS);
                        quietly(|| h.create())
                            .map_err(|e| err(format!("clsact on {}: {e}", tap.name)))?;
                        h.attach()
                            .map_err(|e| err(format!("attaching {prog} to {}: {e}", tap.name)))?;
                    }
                    maps.set_lease(mono_ns() + LEASE.as_nanos() as u64)?;
                    Ok((maps, taps))
                })();
                match setup {
                    Ok((maps, taps)) => {
                        let _ = tx.send(Ok([taps[0].ifindex, taps[1].ifindex]));
                        pump_loop(&maps, &taps, &stop2);
                        let _ = maps.set_lease(0);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| err(format!("spawning the delay pump: {e}")))?;
        let pump = Pump {
            stop,
            thread: Some(thread),
        };
        let taps = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                pump.stop();
                return Err(e);
            }
            Err(_) => {
                pump.stop();
                return Err(err(format!("the delay pump in {ns} did not start")));
            }
        };
        for d in Direction::BOTH {
            maps.update_cfg(d, |c| c.tap_ifindex = taps[d.index()])?;
        }
        Ok(pump)
    }

    /// Stops the thread: it drains its taps, sends every held frame at once, and closes the
    /// taps (which deletes them).
    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Tap {
    name: &'static str,
    fd: OwnedFd,
    ifindex: u32,
    mac: [u8; 6],
}

/// Creates (or takes over) tap `name` in the calling thread's namespace: no IPv6, no ARP, up,
/// non-blocking, no offloads.
fn open_tap(ns: &str, name: &'static str) -> Result<Tap> {
    let ctx = |what: &str, e: std::io::Error| err(format!("tap {name} in {ns}: {what}: {e}"));
    let mut attempt = 0;
    let fd = loop {
        // SAFETY: plain open(2) of a device node with a static path.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(ctx("open /dev/net/tun", std::io::Error::last_os_error()));
        }
        // SAFETY: raw is a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = ifreq(name);
        req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF takes a pointer to an ifreq, which req is.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if r == 0 {
            break fd;
        }
        let e = std::io::Error::last_os_error();
        // EBUSY: a pump of another process owns it; take it over (that pump then stops).
        if attempt == 0 && e.raw_os_error() == Some(libc::EBUSY) {
            attempt += 1;
            let _ = run("ip", &["-n", ns, "link", "del", name]);
            continue;
        }
        return Err(ctx("TUNSETIFF", e));
    };
    // Keep the kernel from sending anything of its own (IPv6 autoconfiguration) into the tap.
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
    // SAFETY: a plain datagram socket for interface ioctls, owned below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(ctx("socket", std::io::Error::last_os_error()));
    }
    // SAFETY: s was just created and is owned here.
    let sock = unsafe { OwnedFd::from_raw_fd(s) };
    let mut req = ifreq(name);
    // SAFETY: SIOCGIFFLAGS / SIOCSIFFLAGS / SIOCGIFHWADDR take a pointer to an ifreq.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(ctx("SIOCGIFFLAGS", std::io::Error::last_os_error()));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_NOARP) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req) < 0 {
            return Err(ctx("SIOCSIFFLAGS", std::io::Error::last_os_error()));
        }
    }
    let mut req = ifreq(name);
    // SAFETY: as above.
    let mac = unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) < 0 {
            return Err(ctx("SIOCGIFHWADDR", std::io::Error::last_os_error()));
        }
        let d = req.ifr_ifru.ifru_hwaddr.sa_data;
        [d[0], d[1], d[2], d[3], d[4], d[5]].map(|b| b as u8)
    };
    let ifindex = ifindex(name).ok_or_else(|| err(format!("tap {name} in {ns} vanished")))?;
    Ok(Tap {
        name,
        fd,
        ifindex,
        mac,
    })
}

fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    req
}

/// A frame the pump holds, ordered by due time (then arrival).
struct Held {
    due_ns: u64,
    seq: u64,
    dir: usize,
    frame: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due_ns, self.seq) == (o.due_ns, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.due_ns, o.seq).cmp(&(self.due_ns, self.seq))
    }
}

fn pump_loop(maps: &Maps, taps: &[Tap; 2], stop: &AtomicBool) {
    let mut heap: BinaryHeap<Held> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut rng = crate::workload::Rng::new(mono_ns());
    let mut next_renew = 0u64;
    let mut buf = vec![0u8; 65_536];
    let mut files: Vec<File> = Vec::new();
    for t in taps {
        match t.fd.try_clone() {
            Ok(fd) => files.push(File::from(fd)),
            Err(_) => return,
        }
    }
    loop {
        let now = mono_ns();
        let stopping = stop.load(Ordering::SeqCst);
        if !stopping && now >= next_renew {
            if maps.set_lease(now + LEASE.as_nanos() as u64).is_err() {
                break;
            }
            next_renew = now + RENEW.as_nanos() as u64;
        }
        // Read whatever the taps have.
        let mut gone = false;
        let mut params: Option<[DirCfg; 2]> = None;
        for (dir, (t, f)) in taps.iter().zip(files.iter_mut()).enumerate() {
            loop {
                match f.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let frame = &buf[..n];
                        // Frames the tap's own stack sent (source MAC = the tap's): not ours.
                        if n < 14 || frame[6..12] == t.mac {
                            continue;
                        }
                        if heap.len() >= MAX_HELD {
                            continue;
                        }
                        // The parameters as of now (one map read per wake-up with frames), so
                        // a change applies to the very next packet.
                        let params = match params {
                            Some(p) => p,
                            None => match maps.read_cfgs() {
                                Ok(c) => *params.insert(c),
                                Err(_) => {
                                    gone = true;
                                    break;
                                }
                            },
                        };
                        let p = params[dir];
                        let base = p.delay_us as i64 * 1000;
                        let j = p.jitter_us as i64 * 1000;
                        let off = if j > 0 {
                            rng.below(2 * j as u64 + 1) as i64 - j
                        } else {
                            0
                        };
                        let due = if stopping {
                            now
                        } else {
                            now + (base + off).max(0) as u64
                        };
                        seq += 1;
                        heap.push(Held {
                            due_ns: due,
                            seq,
                            dir,
                            frame: frame.to_vec(),
                        });
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => {
                        // The tap was deleted (another process took over, or clear): stop.
                        gone = true;
                        break;
                    }
                }
            }
        }
        // Send what is due (everything, when stopping).
        let now = mono_ns();
        while let Some(h) = heap.peek() {
            if !stopping && !gone && h.due_ns > now {
                break;
            }
            let h = heap.pop().expect("peeked");
            let _ = files[h.dir].write(&h.frame);
        }
        if stopping || gone {
            break;
        }
        // Sleep until the next frame is due, the lease needs renewing, or a tap has a frame.
        let wake = heap.peek().map_or(next_renew, |h| h.due_ns.min(next_renew));
        let wait = wake.saturating_sub(mono_ns()).min(RENEW.as_nanos() as u64);
        let ts = libc::timespec {
            tv_sec: (wait / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait % 1_000_000_000) as libc::c_long,
        };
        let mut fds = [
            libc::pollfd {
                fd: taps[0].fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: taps[1].fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: fds and ts are valid for the duration of the call.
        unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cfg_round_trips() {
        let c = DirCfg {
            loss_ppm: 300_000,
            delay_us: 20_000,
            jitter_us: 5,
            tap_ifindex: 7,
            dev_ifindex: 2,
        };
        assert_eq!(DirCfg::from_bytes(&c.to_bytes()), c);
    }

    #[test]
    fn nft_elements() {
        let out = "table inet waverunner_chaos {\n\tset blocked_from {\n\t\ttype ipv4_addr\n\t\t\
                   elements = { 10.78.0.12, 10.78.0.13 }\n\t}\n}\n";
        assert_eq!(
            parse_nft_elements(out),
            vec![Ipv4Addr::new(10, 78, 0, 12), Ipv4Addr::new(10, 78, 0, 13)]
        );
        assert!(parse_nft_elements("set blocked_from {\n type ipv4_addr\n}\n").is_empty());
    }

    #[test]
    fn held_frames_come_out_earliest_first() {
        let mut h = BinaryHeap::new();
        for (due, seq) in [(30, 1), (10, 2), (20, 3), (10, 4)] {
            h.push(Held {
                due_ns: due,
                seq,
                dir: 0,
                frame: Vec::new(),
            });
        }
        let order: Vec<(u64, u64)> =
            std::iter::from_fn(|| h.pop().map(|x| (x.due_ns, x.seq))).collect();
        assert_eq!(order, vec![(10, 2), (10, 4), (20, 3), (30, 1)]);
    }
}
