//! End to end through real interfaces: three replicas in network namespaces with the XDP data
//! plane attached to their veths, a bridge (multicast snooping off) in a switch namespace with
//! pass-through XDP on its ends, and a client namespace. The leader orders blind writes in XDP,
//! fans them out to the multicast group, the followers append and acknowledge in XDP, and the
//! quorum-completing acknowledgement becomes the client's reply. Namespaces are named `wrx-*`,
//! addresses are in 10.78.0.0/24, and everything is removed at the end (also on failure).

mod xdp_common;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use waverunner_dataplane::xdp::{attach_pass_through, XdpDataPlane};
use waverunner_dataplane::{Config, DataPlane, Hooks, RingRecord};
use waverunner_fastpath::{Header, MsgType, Registers, F_BLIND_WRITE};
use xdp_common::root_or_skip;

const SW: &str = "wrx-sw";
const NODES: [&str; 3] = ["wrx-n1", "wrx-n2", "wrx-n3"];
const CLIENT: &str = "wrx-c";
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 78, 0, 1);
const PORT: u16 = 7100;
const REQUESTS: u64 = 20;
/// Requests the leader's host pushes itself: one, then a batch of more than one pull's slots.
const PUSHED: u64 = 1 + waverunner_dataplane::xdp::PUSH_SLOTS as u64 + 5;
const BODY: &[u8] = b"+OK";

fn node_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, 0, 1 + i as u8)
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

/// Removes every namespace of this test (when dropped too).
struct Netns;

impl Netns {
    fn clean() {
        for ns in [SW, NODES[0], NODES[1], NODES[2], CLIENT] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }

    fn create() -> Netns {
        Netns::clean();
        let guard = Netns;
        ip(&["netns", "add", SW]);
        ip(&[
            "-n",
            SW,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ]);
        ip(&["-n", SW, "link", "set", "br0", "up"]);
        let ends: Vec<(&str, Ipv4Addr)> = NODES
            .iter()
            .enumerate()
            .map(|(i, ns)| (*ns, node_ip(i)))
            .chain([(CLIENT, Ipv4Addr::new(10, 78, 0, 10))])
            .collect();
        for (k, (ns, addr)) in ends.iter().enumerate() {
            let host_end = format!("h{k}");
            ip(&["netns", "add", ns]);
            ip(&[
                "-n", SW, "link", "add", &host_end, "type", "veth", "peer", "name", "eth0",
                "netns", ns,
            ]);
            ip(&["-n", SW, "link", "set", &host_end, "master", "br0", "up"]);
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            in_netns(SW, || attach_pass_through(&host_end)).expect("pass-through XDP");
        }
        guard
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        Netns::clean();
    }
}

/// Runs `f` in a fresh thread that has entered network namespace `ns`.
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("netns file");
            // SAFETY: setns on this thread only, with a valid namespace fd.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("netns thread")
    })
}

/// What a replica's host received: (source, UDP payload).
type HostLog = Arc<Mutex<Vec<(SocketAddr, Vec<u8>)>>>;

struct Replica {
    dp: XdpDataPlane,
    wakes: Arc<AtomicU64>,
    host: HostLog,
}

fn open(i: usize) -> Replica {
    let wakes = Arc::new(AtomicU64::new(0));
    let host: HostLog = Arc::default();
    let hooks = Hooks {
        wake: {
            let w = Arc::clone(&wakes);
            Some(Arc::new(move || {
                w.fetch_add(1, Ordering::Relaxed);
            }))
        },
        host_packet: {
            let h = Arc::clone(&host);
            Some(Arc::new(move |src, pkt: &[u8]| {
                h.lock().unwrap().push((src, pkt.to_vec()))
            }))
        },
    };
    let cfg = Config {
        self_id: i as u64 + 1,
        group_id: 7,
        bind: SocketAddrV4::new(node_ip(i), PORT),
        interface: Some("eth0".into()),
        multicast: Some(GROUP),
        blind_reply_body: BODY.to_vec(),
    };
    let dp = in_netns(NODES[i], || XdpDataPlane::open(&cfg, hooks)).expect("open xdp");
    Replica { dp, wakes, host }
}

fn envelope(client: u64, seq: u64, cmd: &[u8]) -> Vec<u8> {
    let mut p = vec![1u8];
    for v in [0u64, 0, client, seq, 0] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(cmd);
    p
}

fn request(client: u64, seq: u64, flags: u16, cmd: &[u8]) -> Vec<u8> {
    let payload = envelope(client, seq, cmd);
    let mut h = Header::of(MsgType::ClientRequest);
    h.group_id = 7;
    h.flags = flags;
    h.from = client;
    h.seq = seq;
    h.len = payload.len() as u16;
    let mut pkt = Vec::new();
    h.encode(&payload, &mut pkt);
    pkt
}

/// Drains `r` until `pred` holds on everything drained so far (or 5 s pass).
fn drain_until(r: &mut Replica, all: &mut Vec<RingRecord>, pred: impl Fn(&[RingRecord]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        r.dp.drain(all);
        if pred(all) || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn entries(recs: &[RingRecord]) -> Vec<&waverunner_dataplane::RingEntry> {
    recs.iter()
        .filter_map(|r| match r {
            RingRecord::Entry(e) => Some(e),
            _ => None,
        })
        .collect()
}

fn commits(recs: &[RingRecord]) -> Vec<(u64, bool)> {
    recs.iter()
        .filter_map(|r| match r {
            RingRecord::Commit { index, replied } => Some((*index, *replied)),
            _ => None,
        })
        .collect()
}

#[test]
fn xdp_three_replicas_in_namespaces() {
    if !root_or_skip("xdp_three_replicas_in_namespaces") {
        return;
    }
    let _ns = Netns::create();
    let mut reps: Vec<Replica> = (0..3).map(open).collect();

    // The fast-path socket takes bursts of held appends while the host is busy: the default
    // buffer (about 200 packets) dropped them under load. As root the size asked for is set.
    for r in &reps {
        let sock = r.dp.socket().expect("socket");
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: reads a c_int into a live local of the length given.
        let rc = unsafe {
            libc::getsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        assert!(v >= 16 << 20, "fast-path receive buffer {v} bytes");
    }

    // Enable: leader 1 and followers 2, 3, all at (last 5, term 1), enabled term 2.
    for (i, r) in reps.iter_mut().enumerate() {
        let mut regs = Registers {
            self_id: i as u64 + 1,
            leader_id: 1,
            group_id: 7,
            term: 2,
            last_index: 5,
            last_term: 1,
            commit_index: 5,
            term_start_index: 6,
            is_leader: (i == 0) as u32,
            enabled: 1,
            ..Default::default()
        };
        regs.set_voters(&[1, 2, 3]);
        if i == 0 {
            regs.match_index = [5, 5, 5, 0, 0, 0, 0, 0];
        }
        r.dp.enable(&regs, &[]).expect("enable");
        r.dp.tick();
    }

    // The client: blind writes, exactly one reply each, from the leader's data plane.
    let leader = SocketAddrV4::new(node_ip(0), PORT);
    let client_addr = in_netns(CLIENT, || {
        let sock = UdpSocket::bind("10.78.0.10:0").expect("client socket");
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 2048];
        for seq in 1..=REQUESTS {
            sock.send_to(&request(500, seq, F_BLIND_WRITE, b"SET k v"), leader)
                .expect("send");
            let (n, from) = sock
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("no reply to request {seq}: {e}"));
            assert_eq!(
                from,
                SocketAddr::V4(leader),
                "reply from the leader's fast path"
            );
            let (h, body) = Header::decode(&buf[..n]).expect("a fast-path reply");
            assert_eq!(h.msg_type(), Some(MsgType::ClientReply), "request {seq}");
            assert_eq!(h.seq, seq);
            assert_eq!(h.index, 5 + seq, "committed index");
            assert_eq!(h.commit, 5 + seq);
            assert_eq!(h.from, 1);
            assert_eq!(h.term, 2);
            let mut want = vec![0u8];
            want.extend_from_slice(&1u64.to_le_bytes());
            want.extend_from_slice(BODY);
            assert_eq!(body, &want[..], "status 0 | leader 1 | body");
        }
        sock.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(
            sock.recv_from(&mut buf).is_err(),
            "exactly one reply per request"
        );
        sock.local_addr().expect("addr")
    });
    let SocketAddr::V4(client_addr) = client_addr else {
        unreachable!()
    };

    // The leader's host pushes requests of its own (not a client's: no data-plane reply):
    // one alone, then a batch larger than one pull carries (two syscalls), in order.
    let pushed: Vec<Vec<u8>> = (1..=PUSHED)
        .map(|k| request(1, k, 0, format!("SET h{k} v").as_bytes()))
        .collect();
    {
        let leader_dp = &mut reps[0].dp;
        let (first, rest) = pushed.split_at(1);
        in_netns(NODES[0], move || {
            leader_dp.push(&first[0])?;
            let refs: Vec<&[u8]> = rest.iter().map(|p| &p[..]).collect();
            leader_dp.push_batch(&refs)
        })
        .expect("push");
    }
    let last = 5 + REQUESTS + PUSHED;

    // Rings: every replica holds entries 6..=last; commits as each saw them.
    let mut recs: Vec<Vec<RingRecord>> = vec![Vec::new(), Vec::new(), Vec::new()];
    for (i, r) in reps.iter_mut().enumerate() {
        // A follower learns the commit index from the next append: the appends of one pull
        // leave together and carry the commit of when the pull began, so a follower's last
        // commit is somewhere after the client requests and before the last push.
        drain_until(r, &mut recs[i], |a| {
            entries(a).len() as u64 == last - 5
                && commits(a).last().is_some_and(|c| {
                    if i == 0 {
                        c.0 == last
                    } else {
                        c.0 > 5 + REQUESTS
                    }
                })
        });
    }
    let now = waverunner_dataplane::wall_ms();
    for (i, rs) in recs.iter().enumerate() {
        let es = entries(rs);
        let idx: Vec<u64> = es.iter().map(|e| e.index).collect();
        assert_eq!(
            idx,
            (6..=last).collect::<Vec<_>>(),
            "replica {}: entries",
            i + 1
        );
        for e in &es {
            assert_eq!(e.term, 2);
            let stamp = u64::from_le_bytes(e.payload[33..41].try_into().unwrap());
            assert!(
                stamp > now - 60_000 && stamp <= now + 1_000,
                "entry {} stamped with the leader's clock: {stamp} vs {now}",
                e.index
            );
            // Followers hold the leader's stamped payload.
            assert_eq!(e.payload, entries(&recs[0])[(e.index - 6) as usize].payload);
            if i == 0 && e.index <= 5 + REQUESTS {
                assert_eq!(e.source, Some(client_addr), "leader: the client's address");
                assert_eq!(e.flags, F_BLIND_WRITE);
                assert_eq!(e.from, 500);
            } else {
                assert_eq!(e.source, None, "no source: follower or pushed");
            }
            if e.index > 5 + REQUESTS {
                let k = e.index - 5 - REQUESTS;
                assert!(
                    e.payload.ends_with(format!("SET h{k} v").as_bytes()),
                    "replica {}: entry {} is push {k}, in order",
                    i + 1,
                    e.index
                );
            }
        }
        let cs = commits(rs);
        if i == 0 {
            let want: Vec<(u64, bool)> = (6..=last).map(|c| (c, c <= 5 + REQUESTS)).collect();
            assert_eq!(
                cs, want,
                "leader commits: replied by XDP except the pushed ones"
            );
        } else {
            let first: Vec<(u64, bool)> = (6..=5 + REQUESTS).map(|c| (c, false)).collect();
            assert_eq!(
                cs[..first.len()],
                first[..],
                "replica {}: commits from the appends, one per client request",
                i + 1
            );
            assert!(
                cs.windows(2).all(|w| w[0].0 < w[1].0) && cs.iter().all(|c| !c.1 && c.0 < last),
                "replica {}: commits rise, below the last push: {cs:?}",
                i + 1
            );
        }
        assert!(reps[i].wakes.load(Ordering::Relaxed) > 0, "wake called");
    }
    let c = reps[0].dp.counters();
    eprintln!("leader counters: {c:?}");
    eprintln!(
        "follower counters: {:?} {:?}",
        reps[1].dp.counters(),
        reps[2].dp.counters()
    );
    assert_eq!(c.client_replies, REQUESTS);
    assert_eq!(c.ring_full, 0);
    let lat = reps[0].dp.latency();
    eprintln!(
        "replication latency: {} samples, p50 {} ns, p99 {} ns",
        lat.count(),
        lat.quantile(0.5),
        lat.quantile(0.99)
    );
    assert_eq!(
        lat.count(),
        REQUESTS,
        "one latency sample per client request"
    );
    for f in &reps[1..] {
        assert_eq!(
            f.dp.counters().handled,
            last - 5,
            "followers handled every append"
        );
    }

    // Disable: registers back, nothing more on the ring.
    let mut after = Vec::new();
    for (i, r) in reps.iter_mut().enumerate() {
        let regs = r.dp.disable();
        assert_eq!(regs.enabled, 0, "replica {}", i + 1);
        assert_eq!(regs.halt_reason, 0);
        assert_eq!(regs.last_index, last, "replica {}: last_index", i + 1);
        assert_eq!(regs.last_term, 2);
        let want_commit = commits(&recs[i]).last().expect("a commit").0;
        assert_eq!(regs.commit_index, want_commit, "replica {}: commit", i + 1);
        if i == 0 {
            assert_eq!(&regs.match_index[..3], &[last, last, last], "match indexes");
        }
        let mut rest = Vec::new();
        r.dp.drain(&mut rest);
        assert!(rest.is_empty(), "replica {}: ring empty after drain", i + 1);
        after.push(regs);
    }

    // Disabled: a request goes to the leader's host, untouched.
    let pkt = request(500, 99, F_BLIND_WRITE, b"SET x y");
    let sent = pkt.clone();
    in_netns(CLIENT, move || {
        let sock = UdpSocket::bind(SocketAddrV4::new(client_addr.ip().to_owned(), 0)).unwrap();
        sock.send_to(&sent, leader).unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let got = reps[0].host.lock().unwrap().iter().any(|(_, p)| p == &pkt);
        if got {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "disabled: the host gets the request"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        reps[0].dp.registers().last_index,
        last,
        "nothing handled while off"
    );
    let xdp_attached = |ns: &str| {
        let out = Command::new("ip")
            .args(["-n", ns, "-d", "link", "show", "eth0"])
            .output()
            .expect("ip link show");
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    };
    assert!(
        NODES.iter().all(|ns| xdp_attached(ns)),
        "attached while open"
    );
    drop(reps);
    // Dropped: the program is detached from every replica's interface.
    for ns in NODES {
        assert!(!xdp_attached(ns), "{ns}: XDP still attached after drop");
    }
}
