//! Three `udp` data planes replicating on loopback (leader + two followers, registers as the
//! Raft core hands them over): blind writes answered by the data plane, loss repaired by the
//! leader's host with `send_to`, disable under traffic, pushes, a follower fed by multicast.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use waverunner_dataplane::udp::UdpDataPlane;
use waverunner_dataplane::{wall_ms, Config, DataPlane, Hooks, RingEntry, RingRecord};
use waverunner_fastpath::payload::{Envelope, ENV_OFF_NOW_MS as STAMP_OFFSET};
use waverunner_fastpath::{self as fp, Header, Registers};

const GROUP: u32 = 7;
const TERM: u64 = 2;
/// The log when acceleration is enabled: the term's no-op at 5, committed.
const BASE: u64 = 5;
const BODY: &[u8] = b"+OK";
const WAIT: Duration = Duration::from_secs(5);

type HostPackets = Arc<Mutex<Vec<(SocketAddr, Vec<u8>)>>>;

struct Node {
    dp: UdpDataPlane,
    host: HostPackets,
    wakes: Arc<AtomicU64>,
    ring: Vec<RingRecord>,
}

impl Node {
    fn open(id: u64, multicast: Option<Ipv4Addr>) -> Node {
        let host: HostPackets = Arc::default();
        let wakes = Arc::new(AtomicU64::new(0));
        let (h, w) = (host.clone(), wakes.clone());
        let hooks = Hooks {
            wake: Some(Arc::new(move || {
                w.fetch_add(1, Ordering::Relaxed);
            })),
            host_packet: Some(Arc::new(move |from, p| {
                h.lock().unwrap().push((from, p.to_vec()))
            })),
        };
        let cfg = Config {
            self_id: id,
            group_id: GROUP,
            bind: "127.0.0.1:0".parse().unwrap(),
            interface: None,
            multicast,
            blind_reply_body: BODY.to_vec(),
        };
        Node {
            dp: UdpDataPlane::open(&cfg, hooks).expect("open"),
            host,
            wakes,
            ring: Vec::new(),
        }
    }

    fn addr(&self) -> SocketAddrV4 {
        self.dp.local_addr()
    }

    /// Drains until `done(ring so far)` holds.
    fn drain_until(&mut self, what: &str, done: impl Fn(&[RingRecord]) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            self.dp.drain(&mut self.ring);
            if done(&self.ring) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn entries(&self) -> Vec<&RingEntry> {
        self.ring
            .iter()
            .filter_map(|r| match r {
                RingRecord::Entry(e) => Some(e),
                RingRecord::Commit { .. } => None,
            })
            .collect()
    }

    fn commits(&self) -> Vec<(u64, bool)> {
        self.ring
            .iter()
            .filter_map(|r| match r {
                RingRecord::Commit { index, replied } => Some((*index, *replied)),
                RingRecord::Entry(_) => None,
            })
            .collect()
    }

    fn host_packets_of(&self, kind: u8) -> Vec<(SocketAddr, Header)> {
        self.host
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(a, p)| {
                Header::decode(p)
                    .ok()
                    .filter(|(h, _)| h.kind == kind)
                    .map(|(h, _)| (*a, h))
            })
            .collect()
    }
}

fn last_entry(ring: &[RingRecord]) -> u64 {
    ring.iter()
        .filter_map(|r| match r {
            RingRecord::Entry(e) => Some(e.index),
            RingRecord::Commit { .. } => None,
        })
        .max()
        .unwrap_or(0)
}

fn last_commit(ring: &[RingRecord]) -> u64 {
    ring.iter()
        .filter_map(|r| match r {
            RingRecord::Commit { index, .. } => Some(*index),
            RingRecord::Entry(_) => None,
        })
        .max()
        .unwrap_or(0)
}

/// Registers as the Raft core hands them over (crates/sim/src/dataplane.rs `enable`): the
/// term's no-op at [`BASE`] is committed everywhere.
fn regs(self_id: u64, voters: &[u64], leader: u64, flags: u32) -> Registers {
    let mut r = Registers {
        self_id,
        leader_id: leader,
        group_id: u64::from(GROUP),
        term: TERM,
        last_index: BASE,
        last_term: TERM,
        commit_index: BASE,
        term_start_index: BASE,
        enabled: 1,
        is_leader: u32::from(self_id == leader),
        flags,
        ..Default::default()
    };
    r.set_voters(voters);
    if self_id == leader {
        for m in &mut r.match_index[..voters.len()] {
            *m = BASE;
        }
    }
    r
}

/// An entry envelope as a native client sends it (origin 0, req 0, now_ms 0).
fn envelope(client: u64, seq: u64, cmd: &[u8]) -> Vec<u8> {
    Envelope {
        origin: 0,
        req: 0,
        client,
        seq,
        now_ms: 0,
        command: cmd.to_vec(),
    }
    .encode()
}

fn request(client: u64, seq: u64, flags: u16) -> Vec<u8> {
    let payload = envelope(client, seq, format!("SET k{seq} v").as_bytes());
    let h = Header {
        kind: fp::CLIENT_REQUEST,
        flags,
        len: payload.len() as u16,
        from: client,
        seq,
        ..Header::new(u64::from(GROUP))
    };
    let mut b = Vec::new();
    h.encode(&payload, &mut b);
    b
}

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    s
}

fn v4(s: &UdpSocket) -> SocketAddrV4 {
    match s.local_addr().unwrap() {
        SocketAddr::V4(a) => a,
        a => panic!("{a}"),
    }
}

fn recv(s: &UdpSocket, within: Duration) -> Option<(SocketAddr, Vec<u8>)> {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        match s.recv_from(&mut buf) {
            Ok((n, a)) => return Some((a, buf[..n].to_vec())),
            Err(_) if Instant::now() < deadline => {}
            Err(_) => return None,
        }
    }
}

/// Checks a data-plane reply to (client, seq) for the entry at `index`.
fn check_reply(pkt: &[u8], seq: u64, index: u64) {
    let (h, p) = Header::decode(pkt).expect("a fast-path reply");
    assert_eq!(h.kind, fp::CLIENT_REPLY);
    assert_eq!((h.seq, h.index, h.from, h.group_id), (seq, index, 1, GROUP));
    assert_eq!(p[0], 0, "status OK");
    assert_eq!(&p[1..9], &1u64.to_le_bytes(), "leader id");
    assert_eq!(&p[9..], BODY);
}

/// Leader 1 with followers 2 and 3, enabled.
fn cluster() -> (Node, Node, Node) {
    let (mut l, mut f2, mut f3) = (
        Node::open(1, None),
        Node::open(2, None),
        Node::open(3, None),
    );
    let voters = [1, 2, 3];
    let all = [(1, l.addr()), (2, f2.addr()), (3, f3.addr())];
    f2.dp.enable(&regs(2, &voters, 1, 0), &all).unwrap();
    f3.dp.enable(&regs(3, &voters, 1, 0), &all).unwrap();
    let lp = [(2, f2.addr()), (3, f3.addr())];
    l.dp.enable(&regs(1, &voters, 1, 0), &lp).unwrap();
    (l, f2, f3)
}

#[test]
fn udp_three_replicas_blind_writes() {
    let (mut l, mut f2, mut f3) = cluster();
    let client = socket();
    let t0 = wall_ms();
    const N: u64 = 50;
    for seq in 1..=N {
        client
            .send_to(&request(77, seq, fp::F_BLIND_WRITE), l.addr())
            .unwrap();
        let (from, pkt) = recv(&client, WAIT).unwrap_or_else(|| panic!("no reply to {seq}"));
        assert_eq!(
            from,
            SocketAddr::V4(l.addr()),
            "replies come from the fast-path port"
        );
        check_reply(&pkt, seq, BASE + seq);
    }
    assert!(
        recv(&client, Duration::from_millis(50)).is_none(),
        "one reply per request"
    );
    let t1 = wall_ms();
    let last = BASE + N;

    l.drain_until("leader commits", |r| last_commit(r) == last);
    // Followers learn commit N-1 from the last append (commit N rides on the next one).
    f2.drain_until("f2 entries", |r| {
        last_entry(r) == last && last_commit(r) == last - 1
    });
    f3.drain_until("f3 entries", |r| {
        last_entry(r) == last && last_commit(r) == last - 1
    });

    let le = l.entries();
    assert_eq!(le.len() as u64, N);
    for (i, e) in le.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(
            (e.index, e.term, e.from, e.seq),
            (BASE + seq, TERM, 77, seq)
        );
        assert_eq!(e.flags, fp::F_BLIND_WRITE);
        assert_eq!(e.source, Some(v4(&client)));
        let now = u64::from_le_bytes(
            e.payload[STAMP_OFFSET..STAMP_OFFSET + 8]
                .try_into()
                .unwrap(),
        );
        assert!(
            (t0..=t1).contains(&now),
            "stamped with the leader's clock: {now}"
        );
        let mut unstamped = e.payload.clone();
        unstamped[STAMP_OFFSET..STAMP_OFFSET + 8].fill(0);
        assert_eq!(
            unstamped,
            envelope(77, seq, format!("SET k{seq} v").as_bytes())
        );
    }
    for f in [&f2, &f3] {
        let fe = f.entries();
        assert_eq!(fe.len(), le.len());
        for (a, b) in fe.iter().zip(&le) {
            assert_eq!(
                a.payload, b.payload,
                "same entry data (and stamp) everywhere"
            );
            assert_eq!(
                (a.index, a.term, a.seq, a.flags),
                (b.index, b.term, b.seq, b.flags)
            );
            assert_eq!(
                (a.from, a.source),
                (1, None),
                "at a follower: from the leader"
            );
        }
        let c = f.commits();
        assert!(
            c.windows(2).all(|w| w[0].0 < w[1].0),
            "commits advance: {c:?}"
        );
        assert!(c.iter().all(|&(_, replied)| !replied));
    }
    let c = l.commits();
    assert_eq!(c, (1..=N).map(|s| (BASE + s, true)).collect::<Vec<_>>());

    // Both followers' acks arrive; the second of each pair commits nothing: taken into its
    // match index (FP_ACT_MATCHED), not dropped.
    let deadline = Instant::now() + WAIT;
    while l.dp.registers().match_index[..3] != [last; 3] {
        assert!(
            Instant::now() < deadline,
            "match index: {:?}",
            l.dp.registers()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = l.dp.registers();
    assert_eq!((r.last_index, r.commit_index, r.enabled), (last, last, 1));
    let lat = l.dp.latency();
    assert_eq!(lat.count(), N, "one latency sample per request");
    assert!(lat.quantile(0.5) > 0);
    eprintln!(
        "udp data plane, loopback, closed loop: replication latency p50 {} ns, p99 {} ns",
        lat.quantile(0.5),
        lat.quantile(0.99)
    );
    let lc = l.dp.counters();
    assert_eq!(lc.client_replies, N);
    assert_eq!(lc.handled, 3 * N, "requests and two acks each: {lc:?}");
    assert_eq!(
        lc.dropped, 0,
        "the second ack of each entry is taken, not dropped"
    );
    assert!(l.wakes.load(Ordering::Relaxed) > 0);
    for f in [&f2, &f3] {
        let c = f.dp.counters();
        assert_eq!((c.handled, c.retx_requests, c.halts), (N, 0, 0), "{c:?}");
        assert!(f.wakes.load(Ordering::Relaxed) > 0);
    }
    assert!(
        l.host.lock().unwrap().is_empty(),
        "nothing for the leader's host"
    );
}

/// A lossy link from the leader to follower 3: forwards both ways through one socket and
/// drops the append of entry `drop_index`.
fn lossy_link(
    leader: SocketAddrV4,
    follower: SocketAddrV4,
    drop_index: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> (SocketAddrV4, std::thread::JoinHandle<()>) {
    let s = socket();
    let addr = v4(&s);
    let t = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            let pkt = &buf[..n];
            if from == SocketAddr::V4(leader) {
                let h = Header::decode(pkt).expect("from the leader").0;
                if h.kind == fp::APPEND && h.index + 1 == drop_index.load(Ordering::Relaxed) {
                    continue;
                }
                s.send_to(pkt, follower).unwrap();
            } else {
                s.send_to(pkt, leader).unwrap();
            }
        }
    });
    (addr, t)
}

/// Polls `f` every millisecond until it gives something, for at most `WAIT`.
fn wait_some<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(x) = f() {
            return x;
        }
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn udp_loss_retransmission_by_the_host() {
    let (mut l, mut f2, mut f3) = (
        Node::open(1, None),
        Node::open(2, None),
        Node::open(3, None),
    );
    let drop_index = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (link, link_thread) = lossy_link(l.addr(), f3.addr(), drop_index.clone(), stop.clone());
    let voters = [1, 2, 3];
    let all = [(1, l.addr()), (2, f2.addr()), (3, f3.addr())];
    f2.dp.enable(&regs(2, &voters, 1, 0), &all).unwrap();
    f3.dp.enable(&regs(3, &voters, 1, 0), &all).unwrap();
    // First the handler's own gap rule (window 0); the host's hold comes last.
    f3.dp.set_reorder_window(0);
    // The leader's fan-out to 3 goes through the lossy link.
    l.dp.enable(&regs(1, &voters, 1, 0), &[(2, f2.addr()), (3, link)])
        .unwrap();

    let client = socket();
    let leader = l.addr();
    let write = |seq: u64| {
        client
            .send_to(&request(9, seq, fp::F_BLIND_WRITE), leader)
            .unwrap();
        let (_, pkt) = recv(&client, WAIT).unwrap_or_else(|| panic!("no reply to {seq}"));
        check_reply(&pkt, seq, BASE + seq);
    };
    for seq in 1..=3 {
        write(seq);
    }
    f3.drain_until("f3 has 3 entries", |r| last_entry(r) == BASE + 3);
    // The append of entry BASE+4 is lost on the way to 3; 2's ack still commits it.
    drop_index.store(BASE + 4, Ordering::Relaxed);
    write(4);
    write(5); // 3 sees a gap: RETX_REQ back to the leader, whose handler gives it to the host
    let retx = wait_some("a RETX_REQ at the leader's host", || {
        l.host_packets_of(fp::RETX_REQ).first().copied()
    });
    assert_eq!(
        (retx.1.from, retx.1.index, retx.1.log_term),
        (3, BASE + 3, TERM)
    );
    assert_eq!(f3.dp.counters().retx_requests, 1);
    assert_eq!(f3.dp.registers().last_index, BASE + 3);

    // The leader's host retransmits the missing entries from its log (the ring here).
    l.drain_until("leader has 5 entries", |r| last_entry(r) == BASE + 5);
    let commit = l.dp.registers().commit_index;
    let missing: Vec<RingEntry> = l
        .entries()
        .into_iter()
        .filter(|e| e.index > retx.1.index)
        .cloned()
        .collect();
    assert_eq!(missing.len(), 2);
    let append_of = |e: &RingEntry, commit: u64| {
        let h = Header {
            kind: fp::APPEND,
            flags: e.flags,
            len: e.payload.len() as u16,
            term: TERM,
            from: 1,
            index: e.index - 1,
            log_term: TERM,
            commit,
            seq: e.seq,
            ..Header::new(u64::from(GROUP))
        };
        let mut b = Vec::new();
        h.encode(&e.payload, &mut b);
        b
    };
    for e in &missing {
        l.dp.send_to(&append_of(e, commit), SocketAddr::V4(f3.addr()))
            .unwrap();
    }
    f3.drain_until("f3 caught up", |r| last_entry(r) == BASE + 5);
    let fr = f3.dp.registers();
    assert_eq!(
        (fr.last_index, fr.enabled, fr.gap_count, fr.retx_requests),
        (BASE + 5, 1, 0, 0)
    );
    let le = l.entries();
    let fe = f3.entries();
    assert_eq!(fe.len(), le.len());
    for (a, b) in fe.iter().zip(&le) {
        assert_eq!((a.index, &a.payload), (b.index, &b.payload));
    }
    // Its acks (to the retransmission's source, the leader) update its match index.
    let deadline = Instant::now() + WAIT;
    while l.dp.registers().match_index[2] != BASE + 5 {
        assert!(Instant::now() < deadline, "{:?}", l.dp.registers());
        std::thread::sleep(Duration::from_millis(1));
    }

    // A request that is not a blind write gets no data-plane reply: the host answers it.
    client.send_to(&request(9, 6, 0), l.addr()).unwrap();
    l.drain_until("commit of the non-blind write", |r| {
        last_commit(r) == BASE + 6
    });
    assert_eq!(l.commits().last(), Some(&(BASE + 6, false)));
    assert!(recv(&client, Duration::from_millis(100)).is_none());
    assert_eq!(l.dp.counters().client_replies, 5);
    f3.drain_until("f3 follows again", |r| last_entry(r) == BASE + 6);
    assert_eq!(l.dp.counters().halts + f3.dp.counters().halts, 0);

    // With its reorder window on (the default), the follower's data plane passes an append
    // ahead of its log to the host to be held, instead of the gap rule: no RETX_REQ from the
    // handler. Once the missing append arrives, the held one pushed back continues the log.
    f3.dp.set_reorder_window(fp::REORDER_WINDOW);
    let retx_before = f3.dp.counters().retx_requests;
    drop_index.store(BASE + 7, Ordering::Relaxed);
    write(7);
    write(8);
    let held = wait_some("the append ahead at the follower's host", || {
        f3.host.lock().unwrap().iter().find_map(|(_, p)| {
            Header::decode(p)
                .is_ok_and(|(h, _)| h.kind == fp::APPEND && h.index == BASE + 7)
                .then(|| p.clone())
        })
    });
    assert_eq!(
        f3.dp.counters().retx_requests,
        retx_before,
        "the gap rule ran"
    );
    assert_eq!(f3.dp.registers().last_index, BASE + 6);
    l.drain_until("leader has 8 entries", |r| last_entry(r) == BASE + 8);
    let lost = l
        .entries()
        .into_iter()
        .find(|e| e.index == BASE + 7)
        .cloned()
        .expect("entry 7 at the leader");
    let commit = l.dp.registers().commit_index;
    l.dp.send_to(&append_of(&lost, commit), SocketAddr::V4(f3.addr()))
        .unwrap();
    f3.drain_until("7 retransmitted", |r| last_entry(r) == BASE + 7);
    f3.dp.push(&held).unwrap();
    f3.drain_until("the held 8 pushed back", |r| last_entry(r) == BASE + 8);
    assert_eq!(l.dp.counters().halts + f3.dp.counters().halts, 0);

    stop.store(true, Ordering::Relaxed);
    link_thread.join().unwrap();
}

#[test]
fn udp_disable_while_traffic_flows() {
    let (mut l, mut f2, mut f3) = cluster();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let client = {
        let (stop, sent, to) = (stop.clone(), sent.clone(), l.addr());
        std::thread::spawn(move || {
            let s = socket();
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..20 {
                    seq += 1;
                    let _ = s.send_to(&request(5, seq, fp::F_BLIND_WRITE), to);
                }
                sent.store(seq, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(300));
            }
        })
    };
    let started = Instant::now();
    while l.entries().len() < 200 && started.elapsed() < WAIT {
        l.dp.drain(&mut l.ring);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(l.entries().len() >= 200, "traffic flows");
    let r = l.dp.disable();
    assert_eq!(r.enabled, 0);
    l.dp.drain(&mut l.ring);
    let host_before = l.host.lock().unwrap().len();
    // Requests keep coming; they now go to the host, and nothing more is ringed.
    let sent_at_disable = sent.load(Ordering::Relaxed);
    while sent.load(Ordering::Relaxed) < sent_at_disable + 100 {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(30));
    let mut more = Vec::new();
    l.dp.drain(&mut more);
    assert!(more.is_empty(), "records after disable: {}", more.len());
    assert!(
        l.host.lock().unwrap().len() > host_before,
        "requests go to the host"
    );
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();

    // The ring holds exactly what the registers say happened.
    let idx: Vec<u64> = l.entries().iter().map(|e| e.index).collect();
    assert_eq!(
        idx,
        (BASE + 1..=r.last_index).collect::<Vec<_>>(),
        "contiguous entries"
    );
    assert_eq!(last_commit(&l.ring), r.commit_index);
    assert_eq!(l.dp.registers(), r);
    let c = l.dp.counters();
    assert_eq!(c.halts, 0);

    std::thread::sleep(Duration::from_millis(20));
    for f in [&mut f2, &mut f3] {
        let fr = f.dp.disable();
        f.dp.drain(&mut f.ring);
        let idx: Vec<u64> = f.entries().iter().map(|e| e.index).collect();
        assert_eq!(idx, (BASE + 1..=fr.last_index).collect::<Vec<_>>());
        assert!(fr.last_index <= r.last_index);
        let commits = f.commits();
        assert_eq!(commits.last().map_or(BASE, |c| c.0), fr.commit_index);
        std::thread::sleep(Duration::from_millis(10));
        let mut more = Vec::new();
        f.dp.drain(&mut more);
        assert!(more.is_empty());
    }
    // Re-enable needs a drained ring, and works again.
    let mut lr = r;
    lr.enabled = 1;
    l.dp.enable(&lr, &[(2, f2.addr()), (3, f3.addr())]).unwrap();
    assert_eq!(l.dp.registers().enabled, 1);
}

#[test]
fn udp_push_is_local() {
    // A single voter with deferred acks (fsync durability): the host pushes its own
    // front-end's request and then its own ack once the entry is durable.
    let mut n = Node::open(1, None);
    n.dp.enable(&regs(1, &[1], 1, fp::R_DEFER_ACK), &[])
        .unwrap();
    let req = request(0, 1, fp::F_BLIND_WRITE);
    let t0 = wall_ms();
    n.dp.push(&req).unwrap();
    n.drain_until("pushed entry", |r| last_entry(r) == BASE + 1);
    let e = n.entries()[0].clone();
    assert_eq!((e.index, e.source, e.seq), (BASE + 1, None, 1));
    let now = u64::from_le_bytes(
        e.payload[STAMP_OFFSET..STAMP_OFFSET + 8]
            .try_into()
            .unwrap(),
    );
    assert!(now >= t0, "pushed requests are stamped too");
    assert!(
        n.commits().is_empty(),
        "deferred: not committed before the host's ack"
    );
    let ack = Header {
        kind: fp::ACK,
        term: TERM,
        from: 1,
        index: BASE + 1,
        ..Header::new(u64::from(GROUP))
    };
    n.dp.push(&ack.to_bytes()).unwrap();
    n.drain_until("commit", |r| last_commit(r) == BASE + 1);
    assert_eq!(
        n.commits(),
        vec![(BASE + 1, false)],
        "no client reply to a pushed request"
    );
    let c = n.dp.counters();
    assert_eq!((c.handled, c.client_replies, c.punted), (2, 0, 0));
    assert!(n.host.lock().unwrap().is_empty());

    // Disabled: a pushed packet reaches the host as if from our own address.
    n.dp.disable();
    n.dp.push(&req).unwrap();
    let deadline = Instant::now() + WAIT;
    while n.host.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        n.host.lock().unwrap()[0],
        (SocketAddr::V4(n.addr()), req.clone())
    );
    // Not a fast-path packet: malformed, to the host.
    let s = socket();
    s.send_to(b"GET / HTTP/1.0\r\n", n.addr()).unwrap();
    while n.dp.counters().malformed == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(n.host.lock().unwrap().len(), 2);
    // The shared socket sends from the fast-path port.
    n.dp.socket().unwrap().send_to(b"x", v4(&s)).unwrap();
    assert_eq!(recv(&s, WAIT).unwrap().0, SocketAddr::V4(n.addr()));
}

/// `IP_MULTICAST_IF`: send the group's datagrams out of the interface holding `ip`.
fn set_multicast_if(s: &UdpSocket, ip: Ipv4Addr) {
    use std::os::fd::AsRawFd;
    let a = libc::in_addr {
        s_addr: u32::from(ip).to_be(),
    };
    // SAFETY: passes a live in_addr of the size given.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_IF,
            (&a as *const libc::in_addr).cast(),
            std::mem::size_of::<libc::in_addr>() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "IP_MULTICAST_IF: {}",
        std::io::Error::last_os_error()
    );
}

#[test]
fn udp_follower_receives_multicast_appends() {
    // An `xdp` leader sends one APPEND to a multicast group; a `udp` follower joined it.
    let group: Ipv4Addr = "239.77.0.7".parse().unwrap();
    let mut f = Node::open(2, Some(group));
    f.dp.enable(&regs(2, &[1, 2, 3], 1, 0), &[]).unwrap();
    let leader = socket();
    set_multicast_if(&leader, Ipv4Addr::LOCALHOST);
    let payload = envelope(1, 1, b"SET a b");
    let h = Header {
        kind: fp::APPEND,
        len: payload.len() as u16,
        term: TERM,
        from: 1,
        index: BASE,
        log_term: TERM,
        commit: BASE,
        seq: 1,
        ..Header::new(u64::from(GROUP))
    };
    let mut b = Vec::new();
    h.encode(&payload, &mut b);
    assert_eq!(f.dp.leader_heard_ns(), 0, "nothing taken yet");
    let t0 = waverunner_dataplane::monotonic_ns();
    leader
        .send_to(&b, SocketAddrV4::new(group, f.addr().port()))
        .unwrap();
    f.drain_until("the multicast append", |r| last_entry(r) == BASE + 1);
    assert_eq!(f.entries()[0].payload, payload);
    // When it took the append (the host counts a starved loop's ticks from there).
    let heard = f.dp.leader_heard_ns();
    assert!(
        (t0..=waverunner_dataplane::monotonic_ns()).contains(&heard),
        "heard at {heard}, sent after {t0}"
    );
    let (from, ack) = recv(&leader, WAIT).expect("an ack back to the leader");
    assert_eq!(
        from,
        SocketAddr::V4(f.addr()),
        "acks come from the follower's fast-path port"
    );
    let ack = Header::decode(&ack).unwrap().0;
    assert_eq!((ack.kind, ack.from, ack.index), (fp::ACK, 2, BASE + 1));
}

#[test]
fn udp_full_ring_drops_before_the_handler() {
    // One voter: every request adds an entry and a commit record. Nothing drains.
    let mut n = Node::open(1, None);
    n.dp.enable(&regs(1, &[1], 1, 0), &[]).unwrap();
    let fits = (waverunner_dataplane::RING_CAPACITY / 2) as u64;
    for seq in 1..=fits + 10 {
        n.dp.push(&request(0, seq, 0)).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let c = n.dp.counters();
        if c.handled + c.ring_full == fits + 10 {
            assert_eq!((c.handled, c.ring_full), (fits, 10), "{c:?}");
            break;
        }
        assert!(Instant::now() < deadline, "{c:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The dropped requests never reached the handler: the registers show only what fit.
    assert_eq!(n.dp.registers().last_index, BASE + fits);
    n.dp.drain(&mut n.ring);
    assert_eq!(n.ring.len(), waverunner_dataplane::RING_CAPACITY);
    assert_eq!(last_commit(&n.ring), BASE + fits);
    // Drained, it handles again.
    n.dp.push(&request(0, fits + 11, 0)).unwrap();
    n.ring.clear();
    n.drain_until("after the drain", |r| last_entry(r) == BASE + fits + 1);
}

#[test]
fn udp_leader_sheds_clients_past_its_window_with_a_busy_reply() {
    // Leader 1 of 3 whose window of uncommitted entries is full (nothing acks): a client's
    // request gets a busy reply (status RETRY, its seq, its envelope's request id) and adds
    // nothing to the ring; the host's own push and a heartbeat are still ordered.
    let mut n = Node::open(1, None);
    let mut r = regs(1, &[1, 2, 3], 1, 0);
    r.last_index = BASE + fp::SHED_INFLIGHT_UDP;
    r.last_term = TERM;
    n.dp.enable(&r, &[]).unwrap();
    let client = socket();
    let payload = Envelope {
        origin: 3,
        req: 77,
        client: 9,
        seq: 4,
        now_ms: 0,
        command: b"SET a b".to_vec(),
    }
    .encode();
    let h = Header {
        kind: fp::CLIENT_REQUEST,
        len: payload.len() as u16,
        from: 9,
        seq: 4,
        ..Header::new(u64::from(GROUP))
    };
    let mut b = Vec::new();
    h.encode(&payload, &mut b);
    client.send_to(&b, n.addr()).unwrap();
    let (_, reply) = recv(&client, WAIT).expect("a busy reply");
    let (rh, p) = Header::decode(&reply).expect("a fast-path reply");
    assert_eq!(rh.kind, fp::CLIENT_REPLY);
    assert_eq!(
        (rh.seq, rh.index, rh.from),
        (4, 77, 1),
        "seq, request id, leader"
    );
    assert_eq!(p[0], fp::payload::STATUS_RETRY);
    assert_eq!(&p[1..9], &1u64.to_le_bytes(), "leader id");
    assert_eq!(&p[9..], b"busy");
    assert_eq!(n.dp.counters().shed, 1);
    assert_eq!(
        n.dp.registers().last_index,
        BASE + fp::SHED_INFLIGHT_UDP,
        "not ordered"
    );
    // Busy replies while their ration lasts, the rest dropped unanswered; one more after a
    // while.
    let sent = 4 * fp::BUSY_BURST;
    let t0 = Instant::now();
    for seq in 0..sent {
        client.send_to(&request(9, 100 + seq, 0), n.addr()).unwrap();
    }
    let mut answered = 0;
    while let Some((_, reply)) = recv(&client, Duration::from_millis(300)) {
        let (rh, p) = Header::decode(&reply).expect("a fast-path reply");
        assert_eq!(
            (rh.kind, rh.index, p[0]),
            (fp::CLIENT_REPLY, 0, fp::payload::STATUS_RETRY)
        );
        answered += 1;
        let c = n.dp.counters();
        if c.shed == 1 + sent && answered == sent - c.shed_unanswered {
            break;
        }
    }
    let refills = t0.elapsed().as_nanos() as u64 / fp::BUSY_EVERY_NS + 1;
    // The burst less the one spent above, and the refills while this ran.
    assert!(
        (fp::BUSY_BURST - 1..=fp::BUSY_BURST - 1 + refills).contains(&answered),
        "{answered} busy replies: the burst of {} less one, and {refills} refills at most",
        fp::BUSY_BURST
    );
    let c = n.dp.counters();
    assert_eq!((c.shed, c.shed_unanswered), (1 + sent, sent - answered));
    std::thread::sleep(Duration::from_nanos(2 * fp::BUSY_EVERY_NS));
    client.send_to(&b, n.addr()).unwrap();
    let (_, reply) = recv(&client, WAIT).expect("a busy reply: the ration refilled");
    assert_eq!(Header::decode(&reply).unwrap().0.index, 77);
    let shed = 2 + sent;
    assert_eq!(n.dp.counters().shed, shed);
    // The host's own push and a heartbeat are never shed.
    n.dp.push(&request(0, 1, 0)).unwrap();
    n.dp.push(&request(0, 2, fp::F_HEARTBEAT)).unwrap();
    n.drain_until("the host's push and the heartbeat", |r| {
        last_entry(r) == BASE + fp::SHED_INFLIGHT_UDP + 2
    });
    assert_eq!(n.dp.counters().shed, shed);
}
