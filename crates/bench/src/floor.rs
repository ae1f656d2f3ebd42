//! The floor: the round trip of a small UDP datagram between two network namespaces joined by
//! a bridge, the same kind of path as a namespace cluster's (veth + bridge + veth).
//!
//! ```text
//!   wrb-near (10.79.0.10) ── veth ── wrb-br0 ── veth ── wrb-far (10.79.0.11)
//!   sender, one datagram                                  eth0: wrb_echo (XDP, native) on
//!   outstanding at a time                                 port XDP_PORT; a user-space echo
//!                                                         socket on USER_PORT
//! ```
//!
//! Both host-side veth ends carry `wrb_pass` (a pass-through XDP program): a veth drops
//! `XDP_TX` frames unless its peer end has an XDP program (DESIGN §5). Everything is removed
//! again when the [`Testbed`] is dropped, on success, error or panic.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapFlags, Object, ObjectBuilder, Xdp, XdpFlags};

use crate::stats::{quantiles, Quantiles};
use waverunner_netns as netns;

static BPF_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/echo.bpf.o"));

/// Every namespace and link of the floor testbed starts with this.
pub const PREFIX: &str = "wrb-";
/// The bridge.
pub const BRIDGE: &str = "wrb-br0";
/// The sender's namespace (and the host end of its veth).
pub const NEAR: &str = "wrb-near";
/// The echo's namespace (and the host end of its veth).
pub const FAR: &str = "wrb-far";
/// The sender's address.
pub const NEAR_IP: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 10);
/// The echo's address.
pub const FAR_IP: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 11);
/// The port the XDP program answers.
pub const XDP_PORT: u16 = 9_900;
/// The port the user-space echo socket answers.
pub const USER_PORT: u16 = 9_901;
/// Datagrams sent before measuring (ARP, caches, the echo thread's first wake-up).
const WARMUP: usize = 200;
/// How long the sender waits for one answer before counting the datagram lost.
const REPLY_TIMEOUT: Duration = Duration::from_millis(20);

/// How much to measure.
#[derive(Clone, Debug)]
pub struct FloorOptions {
    /// Round trips per echo (after a warm-up).
    pub samples: usize,
    /// Longest time per echo.
    pub time_limit: Duration,
    /// UDP payload bytes per datagram.
    pub payload: usize,
}

impl Default for FloorOptions {
    fn default() -> FloorOptions {
        FloorOptions {
            samples: 20_000,
            time_limit: Duration::from_secs(10),
            payload: 50,
        }
    }
}

/// Round trips through one echo.
#[derive(Clone, Debug, Default)]
pub struct Rtt {
    /// p50/p90/p99 in nanoseconds (`None`: no answer at all).
    pub quantiles: Option<Quantiles>,
    /// Datagrams sent (after the warm-up).
    pub sent: u64,
    /// Datagrams without an answer within the reply timeout.
    pub lost: u64,
}

/// The floor: both echoes, measured back to back.
#[derive(Clone, Debug, Default)]
pub struct Floor {
    /// Answered by `wrb_echo` from XDP (`XDP_TX`).
    pub xdp: Rtt,
    /// Answered by a user-space socket (`recv_from` + `send_to`).
    pub user: Rtt,
    /// Frames `wrb_echo` answered (its own counter; at least `xdp.sent − xdp.lost`).
    pub xdp_echoed: u64,
}

/// The two namespaces, the bridge, the loaded programs and the user-space echo thread; removes
/// all of it when dropped.
pub struct Testbed {
    net: netns::Bridged,
    obj: Option<Object>,
    stop: Arc<AtomicBool>,
    echo: Option<JoinHandle<()>>,
}

impl Testbed {
    /// Builds the testbed (removing a leftover one first): namespaces, bridge, addresses, the
    /// XDP programs attached in native mode, and the user-space echo socket.
    pub fn create() -> Result<Testbed, String> {
        if !netns::is_root() {
            return Err("the floor needs root (network namespaces, XDP)".into());
        }
        let net = netns::Bridged::create(
            PREFIX,
            BRIDGE,
            &[(NEAR, NEAR_IP, None), (FAR, FAR_IP, None)],
        )?;
        // From here on, a failure drops `tb`, which removes what was made.
        let mut tb = Testbed {
            net,
            obj: None,
            stop: Arc::new(AtomicBool::new(false)),
            echo: None,
        };
        let obj = ObjectBuilder::default()
            .open_memory(BPF_OBJECT)
            .map_err(|e| format!("opening the echo BPF object: {e}"))?
            .load()
            .map_err(|e| format!("loading the echo BPF object (needs root): {e}"))?;
        let echo_fd = prog_fd(&obj, "wrb_echo")?;
        let pass_fd = prog_fd(&obj, "wrb_pass")?;
        for m in obj.maps() {
            if m.name().to_str() == Some("wrb_cfg") {
                m.update(
                    &0u32.to_ne_bytes(),
                    &u32::from(XDP_PORT).to_ne_bytes(),
                    MapFlags::ANY,
                )
                .map_err(|e| format!("configuring the echo port: {e}"))?;
            }
        }
        tb.obj = Some(obj);
        for host_end in [NEAR, FAR] {
            attach(&pass_fd, netns::ifindex(host_end)?, host_end)?;
        }
        netns::run_in(FAR, move || {
            attach(&echo_fd, netns::ifindex("eth0")?, "eth0 in wrb-far")
        })?;
        // The user-space echo: bound inside the far namespace before the measurement starts.
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = tb.stop.clone();
        let h = std::thread::Builder::new()
            .name("wrb-user-echo".into())
            .spawn(move || user_echo(stop, tx))
            .map_err(|e| format!("cannot start the echo thread: {e}"))?;
        tb.echo = Some(h);
        rx.recv_timeout(Duration::from_secs(5))
            .map_err(|_| "the user-space echo did not start".to_string())??;
        Ok(tb)
    }

    /// Measures both echoes from the near namespace, the XDP one first.
    pub fn measure(&self, opts: &FloorOptions) -> Result<Floor, String> {
        let o = opts.clone();
        let (xdp, user) = netns::run_in(NEAR, move || {
            let xdp = ping(SocketAddr::from((FAR_IP, XDP_PORT)), &o)
                .map_err(|e| format!("XDP echo: {e}"))?;
            let user = ping(SocketAddr::from((FAR_IP, USER_PORT)), &o)
                .map_err(|e| format!("user-space echo: {e}"))?;
            Ok((xdp, user))
        })?;
        Ok(Floor {
            xdp,
            user,
            xdp_echoed: self.echoed(),
        })
    }

    /// Frames `wrb_echo` has answered (summed over CPUs).
    fn echoed(&self) -> u64 {
        let Some(obj) = &self.obj else { return 0 };
        obj.maps()
            .find(|m| m.name().to_str() == Some("wrb_stats"))
            .and_then(|m| m.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY).ok())
            .flatten()
            .map(|per_cpu| {
                per_cpu
                    .iter()
                    .filter_map(|v| {
                        v.get(..8)
                            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
                    })
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Removes everything now; returns what could not be removed.
    pub fn teardown(&mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.echo.take() {
            let _ = h.join();
        }
        // Deleting a namespace deletes its veth pair and the XDP program attached to it.
        let r = self.net.remove();
        self.obj = None;
        r
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!(
                "waverunner bench: removing the floor testbed failed: {e}; remove the \
                 `{PREFIX}*` namespaces and links by hand (`ip netns del …`, `ip link del …`)"
            );
        }
    }
}

/// Builds the testbed, measures, removes the testbed.
pub fn measure(opts: &FloorOptions) -> Result<Floor, String> {
    let mut tb = Testbed::create()?;
    let r = tb.measure(opts);
    let t = tb.teardown();
    let f = r?;
    t?;
    Ok(f)
}

fn prog_fd(obj: &Object, name: &str) -> Result<OwnedFd, String> {
    obj.progs()
        .find(|p| p.name().to_str() == Some(name))
        .ok_or_else(|| format!("BPF program {name} missing from the echo object"))?
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("dup of the {name} descriptor: {e}"))
}

/// Attaches program `fd` in native (driver) mode to interface `ifindex` of the calling
/// thread's namespace.
fn attach(fd: &OwnedFd, ifindex: i32, what: &str) -> Result<(), String> {
    Xdp::new(fd.as_fd())
        .attach(ifindex, XdpFlags::DRV_MODE)
        .map_err(|e| format!("attaching XDP in native mode to {what}: {e}"))
}

/// The user-space echo: answers every datagram on `FAR_IP:USER_PORT` until `stop`.
fn user_echo(stop: Arc<AtomicBool>, ready: std::sync::mpsc::Sender<Result<(), String>>) {
    let sock = netns::enter(FAR).and_then(|()| {
        let s = UdpSocket::bind((FAR_IP, USER_PORT))
            .map_err(|e| format!("bind {FAR_IP}:{USER_PORT} in {FAR}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(|e| e.to_string())?;
        Ok(s)
    });
    let sock = match sock {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], from);
        }
    }
}

/// Sends datagrams to `to` one at a time (the next after the answer or a timeout) and records
/// each round trip; a warm-up first.
fn ping(to: SocketAddr, o: &FloorOptions) -> Result<Rtt, String> {
    let sock = UdpSocket::bind((NEAR_IP, 0)).map_err(|e| format!("bind in {NEAR}: {e}"))?;
    sock.connect(to).map_err(|e| format!("connect {to}: {e}"))?;
    sock.set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut pkt = vec![b'w'; o.payload.max(8)];
    let mut buf = [0u8; 2048];
    let mut samples = Vec::with_capacity(o.samples);
    let (mut sent, mut lost) = (0u64, 0u64);
    let mut warm = 0;
    let start = Instant::now();
    for i in 0..(WARMUP + o.samples) as u64 {
        if i == WARMUP as u64 && warm == 0 {
            return Err(format!("no answer from {to} to {WARMUP} datagrams"));
        }
        if start.elapsed() >= o.time_limit {
            break;
        }
        pkt[..8].copy_from_slice(&i.to_le_bytes());
        let t0 = Instant::now();
        sock.send(&pkt).map_err(|e| format!("send to {to}: {e}"))?;
        let answered = loop {
            match sock.recv(&mut buf) {
                Ok(n) if n >= 8 && buf[..8] == pkt[..8] => break true,
                Ok(_) => continue, // a late answer to an earlier datagram
                Err(_) => break false,
            }
        };
        let rtt = t0.elapsed();
        if i < WARMUP as u64 {
            warm += u64::from(answered);
            continue;
        }
        sent += 1;
        if answered {
            samples.push(rtt.as_nanos() as u64);
        } else {
            lost += 1;
        }
    }
    Ok(Rtt {
        quantiles: quantiles(&mut samples),
        sent,
        lost,
    })
}
