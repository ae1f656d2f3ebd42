//! Tests of `waverunner_chaos::net` on namespaces of their own: `wrt-a`, `wrt-b`, `wrt-c` on the
//! bridge `wrtbr0` (10.78.0.1/24; nodes at 10.78.0.11, .12, .13), never the cluster's `wr-*`
//! names, so a running cluster is never touched. They need root: otherwise they print
//! `SKIPPED (needs root)` and pass, unless `CI=true`, where they fail.
//!
//! The tests share those names, so they run one at a time (a lock), and each deletes its
//! namespaces and bridge in a drop guard, also when it panics. Measured numbers go to stderr
//! (`cargo test -p waverunner-chaos --test net -- --nocapture`).

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use waverunner_chaos::net::{Direction, Net, NodeSpec};

const BRIDGE: &str = "wrtbr0";
const NAMES: [&str; 3] = ["wrt-a", "wrt-b", "wrt-c"];
const ECHO_PORT: u16 = 7007;
const SINK_PORT: u16 = 7008;
const TCP_PORT: u16 = 7009;

static SERIAL: Mutex<()> = Mutex::new(());

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether to run: root. Not root: skip loudly, or fail under CI.
fn need_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: needs root (network namespaces, nftables, BPF), and CI=true");
    }
    // Straight to the process's stderr: libtest captures eprintln! of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED (needs root): {test} creates network namespaces, nftables rules and BPF programs ***\n"
    );
    false
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip").args(args).output();
}

fn ns_exec(ns: &str, cmd: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .output()
        .expect("ip netns exec");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Namespaces `wrt-*` on `wrtbr0`, deleted on drop (also on panic).
struct Lab {
    nodes: Vec<NodeSpec>,
    _serial: MutexGuard<'static, ()>,
}

impl Lab {
    fn new(n: usize) -> Lab {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        cleanup();
        ip(&["link", "add", BRIDGE, "type", "bridge"]);
        ip(&["addr", "add", "10.78.0.1/24", "dev", BRIDGE]);
        ip(&["link", "set", BRIDGE, "up"]);
        let mut nodes = Vec::new();
        for (i, ns) in NAMES.iter().take(n).enumerate() {
            let addr = Ipv4Addr::new(10, 78, 0, 11 + i as u8);
            ip(&["netns", "add", ns]);
            ip(&[
                "link", "add", ns, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ]);
            ip(&["link", "set", ns, "master", BRIDGE]);
            ip(&["link", "set", ns, "up"]);
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
            nodes.push(NodeSpec::new(i as u64 + 1, *ns, addr));
        }
        Lab {
            nodes,
            _serial: serial,
        }
    }

    fn node(&self, i: usize) -> &NodeSpec {
        &self.nodes[i]
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        cleanup();
    }
}

fn cleanup() {
    for ns in NAMES {
        ip_quiet(&["netns", "del", ns]);
        ip_quiet(&["link", "del", ns]);
    }
    ip_quiet(&["link", "del", BRIDGE]);
}

/// Runs `f` on a thread inside namespace `ns` (sockets made there stay there).
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let file = File::open(format!("/run/netns/{ns}")).expect("open netns");
    std::thread::spawn(move || {
        // SAFETY: setns affects only this thread.
        assert_eq!(
            unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        f()
    })
    .join()
    .expect("namespace thread")
}

/// A UDP socket bound in `n`'s namespace, with an 8 MiB receive buffer: on a loaded machine a
/// reader thread may wait its turn for a while, and a full buffer would look like injected loss.
fn udp_socket(n: &NodeSpec, port: u16) -> UdpSocket {
    let addr = SocketAddr::from((n.ip, port));
    let sock = in_ns(&n.netns, move || UdpSocket::bind(addr).expect("bind"));
    let size: libc::c_int = 8 << 20;
    // SAFETY: setsockopt with a pointer to a c_int of the given length.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
    sock
}

/// A UDP echo server in a node's namespace, stopped on drop.
struct Echo {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Echo {
    fn start(n: &NodeSpec) -> Echo {
        let sock = udp_socket(n, ECHO_PORT);
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !s2.load(Ordering::Relaxed) {
                if let Ok((len, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..len], from);
                }
            }
        });
        Echo {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `count` sequential pings from `from` to the echo server on `to`, each waiting up to
/// `timeout`; the round trips of those answered.
fn ping_rtts(from: &NodeSpec, to: &NodeSpec, count: u32, timeout: Duration) -> Vec<Duration> {
    let sock = udp_socket(from, 0);
    sock.set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let dst = SocketAddr::from((to.ip, ECHO_PORT));
    let mut rtts = Vec::new();
    let mut buf = [0u8; 64];
    for seq in 0..count {
        let msg = seq.to_be_bytes();
        let t0 = Instant::now();
        sock.send_to(&msg, dst).unwrap();
        while t0.elapsed() < timeout {
            if let Ok((n, _)) = sock.recv_from(&mut buf) {
                if n == 4 && buf[..4] == msg {
                    rtts.push(t0.elapsed());
                    break;
                }
            }
        }
    }
    rtts
}

/// Sends `count` pings paced 250 µs apart, collects the echoes on another thread until 1.5 s
/// after the last; the number answered.
fn ping_flood(from: &NodeSpec, to: &NodeSpec, count: u32) -> u32 {
    let sock = udp_socket(from, 0);
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let rx = sock.try_clone().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let receiver = std::thread::spawn(move || {
        let mut seen = HashSet::new();
        let mut buf = [0u8; 64];
        while !d2.load(Ordering::Relaxed) {
            if let Ok((4, _)) = rx.recv_from(&mut buf) {
                seen.insert(u32::from_be_bytes(buf[..4].try_into().unwrap()));
            }
        }
        seen.len() as u32
    });
    let dst = SocketAddr::from((to.ip, ECHO_PORT));
    let start = Instant::now();
    for seq in 0..count {
        let due = start + Duration::from_micros(250) * seq;
        while Instant::now() < due {
            std::hint::spin_loop();
        }
        sock.send_to(&seq.to_be_bytes(), dst).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    done.store(true, Ordering::Relaxed);
    receiver.join().unwrap()
}

/// Whether datagrams sent from `from` reach `to` (a plain receiver, no echo): 5 sent, any one
/// arriving within 1 s counts.
fn delivers(from: &NodeSpec, to: &NodeSpec) -> bool {
    let rx = udp_socket(to, SINK_PORT);
    rx.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let tx = udp_socket(from, 0);
    for _ in 0..5 {
        tx.send_to(b"hello", (to.ip, SINK_PORT)).unwrap();
    }
    let mut buf = [0u8; 16];
    matches!(rx.recv_from(&mut buf), Ok((5, src)) if src.ip() == from.ip)
}

/// A TCP exchange: `to` echoes `len` bytes back to `from`; whether it completed in time.
fn tcp_echo(from: &NodeSpec, to: &NodeSpec, len: usize, timeout: Duration) -> bool {
    let addr = SocketAddr::from((to.ip, TCP_PORT));
    let listener = in_ns(&to.netns, move || TcpListener::bind(addr).expect("listen"));
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + timeout;
    let server = std::thread::spawn(move || {
        while Instant::now() < deadline {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(timeout)).unwrap();
                    let mut buf = vec![0u8; 65536];
                    let mut n = 0;
                    while n < len {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(k) => {
                                if s.write_all(&buf[..k]).is_err() {
                                    return;
                                }
                                n += k;
                            }
                        }
                    }
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let sent = data.clone();
    let ok = in_ns(&from.netns, move || {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
            return false;
        };
        s.set_read_timeout(Some(timeout)).unwrap();
        s.set_write_timeout(Some(timeout)).unwrap();
        let writer = {
            let mut w = s.try_clone().unwrap();
            std::thread::spawn(move || w.write_all(&sent).is_ok())
        };
        let mut got = vec![0u8; len];
        let read_ok = s.read_exact(&mut got).is_ok();
        writer.join().unwrap() && read_ok && got == data
    });
    let _ = server.join();
    ok
}

fn median(v: &[Duration]) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    s[s.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[test]
fn connectivity_and_partitions() {
    if !need_root("connectivity_and_partitions") {
        return;
    }
    let lab = Lab::new(3);
    let (a, b, c) = (lab.node(0), lab.node(1), lab.node(2));
    let net = Net::new(lab.nodes.clone());
    let _echo_b = Echo::start(b);
    let all_pairs = [(a, b), (b, a), (a, c), (c, a), (b, c), (c, b)];

    for (x, y) in all_pairs {
        assert!(delivers(x, y), "baseline UDP {} -> {}", x.netns, y.netns);
    }
    assert_eq!(ping_rtts(a, b, 5, Duration::from_secs(1)).len(), 5);
    assert!(tcp_echo(a, b, 4096, Duration::from_secs(3)), "baseline TCP");

    // a | b c, twice (idempotent).
    net.partition(&[vec![a.clone()], vec![b.clone(), c.clone()]])
        .unwrap();
    net.partition(&[vec![a.clone()], vec![b.clone(), c.clone()]])
        .unwrap();
    assert_eq!(net.blocked_from(a).unwrap(), vec![b.ip, c.ip]);
    assert_eq!(net.blocked_from(b).unwrap(), vec![a.ip]);
    for (x, y) in [(a, b), (b, a), (a, c), (c, a)] {
        assert!(
            !delivers(x, y),
            "partitioned, yet {} -> {}",
            x.netns,
            y.netns
        );
    }
    assert!(delivers(b, c) && delivers(c, b), "same side must talk");
    assert!(ping_rtts(a, b, 3, Duration::from_millis(200)).is_empty());
    assert!(
        !tcp_echo(a, b, 4096, Duration::from_millis(700)),
        "TCP across a partition"
    );
    eprintln!("partition a|bc: a<->b, a<->c blocked both ways; b<->c flows");

    net.heal_partitions().unwrap();
    net.heal_partitions().unwrap();
    assert!(net.blocked_from(a).unwrap().is_empty());
    for (x, y) in all_pairs {
        assert!(delivers(x, y), "healed, yet {} -/-> {}", x.netns, y.netns);
    }
    assert!(
        tcp_echo(a, b, 4096, Duration::from_secs(3)),
        "TCP after heal"
    );

    // isolate c.
    net.isolate(c).unwrap();
    for (x, y) in [(a, c), (c, a), (b, c), (c, b)] {
        assert!(!delivers(x, y), "isolated, yet {} -> {}", x.netns, y.netns);
    }
    assert!(delivers(a, b) && delivers(b, a));
    net.heal_partitions().unwrap();
    for (x, y) in all_pairs {
        assert!(delivers(x, y), "healed, yet {} -/-> {}", x.netns, y.netns);
    }
    assert!(!ns_exec(&a.netns, &["nft", "list", "tables"]).contains("waverunner_chaos"));
}

#[test]
fn one_way_blocks_one_direction() {
    if !need_root("one_way_blocks_one_direction") {
        return;
    }
    let lab = Lab::new(3);
    let (a, b, c) = (lab.node(0), lab.node(1), lab.node(2));
    let net = Net::new(lab.nodes.clone());
    net.one_way(a, b).unwrap();
    net.one_way(a, b).unwrap();
    assert!(!delivers(a, b), "a -> b must be dropped");
    assert!(delivers(b, a), "b -> a must flow");
    assert!(delivers(a, c) && delivers(c, a) && delivers(b, c) && delivers(c, b));
    net.heal_partitions().unwrap();
    assert!(delivers(a, b) && delivers(b, a));
    eprintln!("one_way a->b: a->b blocked, b->a flows; healed");
}

#[test]
fn loss_drops_the_set_fraction() {
    if !need_root("loss_drops_the_set_fraction") {
        return;
    }
    let lab = Lab::new(2);
    let (a, b) = (lab.node(0), lab.node(1));
    let net = Net::new(lab.nodes.clone());
    let _echo = Echo::start(b);
    const N: u32 = 2000;

    assert_eq!(ping_flood(a, b, 200), 200, "no loss before any is set");

    // 30 % of what b sends (the echoes).
    net.set_loss(b, 300_000).unwrap();
    net.set_loss(b, 300_000).unwrap();
    let got = ping_flood(a, b, N);
    let lost = N - got;
    let frac = lost as f64 / N as f64;
    let st = net.stats(b).unwrap();
    eprintln!(
        "loss 30 % egress on b: {lost}/{N} pings lost = {:.1} %; b egress counters {:?}",
        frac * 100.0,
        st.egress
    );
    assert!((0.20..=0.40).contains(&frac), "egress loss {frac}");
    assert!(st.egress.dropped >= lost as u64, "{st:?}");

    // 30 % of what b receives (the requests).
    net.set_loss(b, 0).unwrap();
    net.set_loss_dir(b, Direction::Ingress, 300_000).unwrap();
    let got = ping_flood(a, b, N);
    let lost = N - got;
    let frac = lost as f64 / N as f64;
    let st = net.stats(b).unwrap();
    eprintln!(
        "loss 30 % ingress on b: {lost}/{N} pings lost = {:.1} %; b ingress counters {:?}",
        frac * 100.0,
        st.ingress
    );
    assert!((0.20..=0.40).contains(&frac), "ingress loss {frac}");
    assert!(st.ingress.dropped >= lost as u64, "{st:?}");

    // 100 %: nothing gets through; then clear restores.
    net.set_loss(b, 1_000_000).unwrap();
    assert_eq!(ping_flood(a, b, 100), 0);
    assert!(net.set_loss(b, 1_000_001).is_err());
    net.clear(b).unwrap();
    net.clear(b).unwrap();
    let got = ping_flood(a, b, 500);
    eprintln!("after clear: {got}/500 answered");
    assert_eq!(got, 500, "clear must restore");
    assert_eq!(net.stats(b).unwrap(), Default::default(), "detached");
}

#[test]
fn delay_adds_to_the_round_trip() {
    if !need_root("delay_adds_to_the_round_trip") {
        return;
    }
    let lab = Lab::new(2);
    let (a, b) = (lab.node(0), lab.node(1));
    let net = Net::new(lab.nodes.clone());
    let _echo = Echo::start(b);
    let t = Duration::from_secs(2);

    let base = ping_rtts(a, b, 50, t);
    assert_eq!(base.len(), 50);
    let base_med = median(&base);

    net.set_delay(b, 20_000, 0).unwrap();
    net.set_delay(b, 20_000, 0).unwrap();
    let d = ping_rtts(a, b, 50, t);
    assert_eq!(d.len(), 50, "no loss expected from a delay");
    let (dmin, dmed, dmax) = (
        *d.iter().min().unwrap(),
        median(&d),
        *d.iter().max().unwrap(),
    );
    eprintln!(
        "delay 20 ms egress on b: RTT min/median/max {:.2}/{:.2}/{:.2} ms (baseline median {:.3} ms); added {:.2} ms",
        ms(dmin),
        ms(dmed),
        ms(dmax),
        ms(base_med),
        ms(dmed.saturating_sub(base_med))
    );
    assert!(dmin >= base_med + Duration::from_millis(18), "min {dmin:?}");
    assert!(dmed < Duration::from_millis(40), "median {dmed:?}");
    let t0 = Instant::now();
    assert!(
        tcp_echo(a, b, 1 << 20, Duration::from_secs(10)),
        "1 MiB of TCP through the delay"
    );
    eprintln!(
        "TCP echo of 1 MiB through the 20 ms delay: {:.0} ms",
        ms(t0.elapsed())
    );
    let st = net.stats(b).unwrap();
    assert!(
        st.egress.delayed >= 50 && st.egress.reinjected >= 50,
        "{st:?}"
    );

    // Both directions: +40 ms.
    net.set_delay_dir(b, Direction::Ingress, 20_000, 0).unwrap();
    let d = ping_rtts(a, b, 20, t);
    assert_eq!(d.len(), 20);
    eprintln!(
        "delay 20 ms egress + 20 ms ingress on b: RTT median {:.2} ms",
        ms(median(&d))
    );
    assert!(*d.iter().min().unwrap() >= base_med + Duration::from_millis(38));
    net.set_delay_dir(b, Direction::Ingress, 0, 0).unwrap();

    // Jitter: 20 ± 5 ms.
    net.set_delay(b, 20_000, 5_000).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let d = ping_rtts(a, b, 100, t);
    assert_eq!(d.len(), 100);
    let (jmin, jmax) = (*d.iter().min().unwrap(), *d.iter().max().unwrap());
    eprintln!(
        "delay 20 ± 5 ms on b: RTT min/median/max {:.2}/{:.2}/{:.2} ms",
        ms(jmin),
        ms(median(&d)),
        ms(jmax)
    );
    assert!(jmin >= Duration::from_millis(14), "{jmin:?}");
    assert!(
        jmax - jmin >= Duration::from_millis(4),
        "no spread: {jmin:?}..{jmax:?}"
    );

    net.clear(b).unwrap();
    let d = ping_rtts(a, b, 50, t);
    assert_eq!(d.len(), 50);
    eprintln!("after clear: RTT median {:.3} ms", ms(median(&d)));
    assert!(median(&d) < Duration::from_millis(5), "clear must restore");
    assert!(
        !ns_exec(&b.netns, &["ip", "link"]).contains("wrc-"),
        "taps deleted"
    );
}

#[test]
fn heal_all_removes_everything() {
    if !need_root("heal_all_removes_everything") {
        return;
    }
    let lab = Lab::new(3);
    let (a, b, c) = (lab.node(0), lab.node(1), lab.node(2));
    {
        let net = Net::new(lab.nodes.clone());
        // Clearing and healing what was never set is fine.
        net.clear(a).unwrap();
        net.heal_all().unwrap();

        net.partition(&[vec![a.clone()], vec![b.clone(), c.clone()]])
            .unwrap();
        net.set_loss(b, 100_000).unwrap();
        net.set_delay(c, 5_000, 1_000).unwrap();
        net.set_delay_dir(c, Direction::Ingress, 5_000, 0).unwrap();
        assert!(ns_exec(&c.netns, &["ip", "link"]).contains("wrc-out"));
        assert!(
            ns_exec(&b.netns, &["tc", "filter", "show", "dev", "eth0", "egress"])
                .contains("wrc_egress")
        );
        net.heal_all().unwrap();
        net.heal_all().unwrap();
        for n in [a, b, c] {
            assert!(!ns_exec(&n.netns, &["nft", "list", "tables"]).contains("waverunner_chaos"));
            for dir in ["egress", "ingress"] {
                let f = ns_exec(&n.netns, &["tc", "filter", "show", "dev", "eth0", dir]);
                assert!(f.trim().is_empty(), "{}: {dir} filters left: {f}", n.netns);
            }
            assert!(!ns_exec(&n.netns, &["ip", "link"]).contains("wrc-"));
            let q = ns_exec(&n.netns, &["tc", "qdisc", "show", "dev", "eth0"]);
            assert!(!q.contains("clsact"), "{}: clsact left: {q}", n.netns);
        }
        for (x, y) in [(a, b), (b, a), (b, c), (c, b), (a, c), (c, a)] {
            assert!(delivers(x, y));
        }

        // Dropping a Net heals too.
        net.isolate(a).unwrap();
        net.set_delay(b, 10_000, 0).unwrap();
        assert!(!delivers(b, a));
    }
    assert!(delivers(b, a) && delivers(a, b), "drop heals");
    for n in [a, b] {
        assert!(!ns_exec(&n.netns, &["nft", "list", "tables"]).contains("waverunner_chaos"));
        assert!(!ns_exec(&n.netns, &["ip", "link"]).contains("wrc-"));
    }
}
