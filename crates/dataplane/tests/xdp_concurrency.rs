//! The XDP program on every CPU at once (one thread pinned per CPU, `BPF_PROG_TEST_RUN` in a
//! loop, bounded in count and time): the handler runs under its spin lock, so the registers,
//! the emitted frames and the ring agree exactly.

mod xdp_common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use waverunner_dataplane::xdp::{XdpProgram, XDP_DROP, XDP_TX};
use waverunner_dataplane::RingRecord;
use waverunner_fastpath::{Header, MsgType, Registers};
use xdp_common::*;

const PER_CPU: usize = 3000;
const TIME_LIMIT: Duration = Duration::from_secs(20);

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET on an index below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let rc = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(
            rc,
            0,
            "pin to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `body(cpu, i)` on every CPU at once while a drainer empties the ring; returns every
/// worker's results and the ring records.
fn on_every_cpu<T: Send>(
    prog: &XdpProgram,
    body: impl Fn(usize, usize) -> Option<T> + Sync,
) -> (Vec<T>, Vec<RingRecord>) {
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let mut results = Vec::new();
    let mut records = Vec::new();
    std::thread::scope(|s| {
        let drainer = s.spawn(|| {
            let mut recs = Vec::new();
            while !done.load(Ordering::SeqCst) {
                prog.drain(&mut recs);
                std::thread::sleep(Duration::from_millis(1));
            }
            prog.drain(&mut recs);
            recs
        });
        let workers: Vec<_> = (0..cpus())
            .map(|cpu| {
                let body = &body;
                s.spawn(move || {
                    pin_to(cpu);
                    let mut out = Vec::new();
                    for i in 0..PER_CPU {
                        if start.elapsed() > TIME_LIMIT {
                            break;
                        }
                        if let Some(t) = body(cpu, i) {
                            out.push(t);
                        }
                    }
                    out
                })
            })
            .collect();
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::SeqCst); // before any panic below: the drainer must stop
        records = drainer.join().expect("drainer");
        for j in joined {
            results.extend(j.expect("worker"));
        }
    });
    (results, records)
}

fn entry_indices(records: &[RingRecord]) -> Vec<u64> {
    records
        .iter()
        .filter_map(|r| match r {
            RingRecord::Entry(e) => Some(e.index),
            _ => None,
        })
        .collect()
}

/// Node 1 leading a group of one voter (group 7, term 2), enabled: each request commits at
/// once, so the window of uncommitted entries stays open (nothing acks here; with more voters
/// the leader would shed requests past `SHED_INFLIGHT_XDP`).
fn leader_regs() -> Registers {
    let mut regs = Registers {
        self_id: 1,
        leader_id: 1,
        group_id: 7,
        term: 2,
        term_start_index: 1,
        is_leader: 1,
        enabled: 1,
        ..Default::default()
    };
    regs.set_voters(&[1]);
    regs
}

/// An 8-byte client request of client 9 with sequence number `seq`.
fn client_request(seq: u64) -> Vec<u8> {
    let mut h = Header::of(MsgType::ClientRequest);
    h.group_id = 7;
    h.from = 9;
    h.seq = seq;
    h.len = 8;
    let mut pkt = Vec::new();
    h.encode(&[1u8; 8], &mut pkt);
    pkt
}

#[test]
fn xdp_leader_on_every_cpu() {
    if !root_or_skip("xdp_leader_on_every_cpu") {
        return;
    }
    let prog = load(b"ok");
    prog.write_registers(&leader_regs());

    let (appends, records) = on_every_cpu(&prog, |cpu, i| {
        let mut h = Header::of(MsgType::ClientRequest);
        h.group_id = 7;
        h.from = 1000 + cpu as u64;
        h.seq = i as u64 + 1;
        h.len = 16;
        let mut pkt = Vec::new();
        h.encode(&[cpu as u8; 16], &mut pkt);
        let run = prog.test_run(&frame_from_peer(&pkt)).expect("test run");
        match run.verdict {
            XDP_TX => {
                let (a, payload) = Header::decode(&run.frame[42..]).expect("an APPEND");
                if a.msg_type() == Some(MsgType::ClientReply) {
                    return None; // shed: the drainer fell a quarter ring behind
                }
                assert_eq!(a.msg_type(), Some(MsgType::Append));
                assert_eq!(payload, &[cpu as u8; 16]);
                Some(a.index) // prev index
            }
            v => {
                assert_eq!(v, XDP_DROP, "only a full ring may drop");
                None
            }
        }
    });
    let after = prog.read_registers();
    let c = prog.counters();
    let n = appends.len() as u64;
    eprintln!(
        "xdp_leader_on_every_cpu: {} CPUs, {n} requests ordered, ring_full {}",
        cpus(),
        c.ring_full
    );
    assert!(n > 0);
    assert_eq!(after.last_index, n, "last_index = handled requests");
    assert_eq!(c.handled, n);
    let prevs: BTreeSet<u64> = appends.iter().copied().collect();
    assert_eq!(prevs.len() as u64, n, "every APPEND has its own prev index");
    assert_eq!(prevs, (0..n).collect(), "prev indexes 0..n");
    let mut idx = entry_indices(&records);
    assert_eq!(idx.len() as u64, n, "one ring entry per request");
    idx.sort_unstable();
    assert_eq!(idx, (1..=n).collect::<Vec<_>>(), "each index exactly once");
}

#[test]
fn xdp_follower_on_every_cpu() {
    if !root_or_skip("xdp_follower_on_every_cpu") {
        return;
    }
    let prog = load(b"");
    let mut regs = Registers {
        self_id: 2,
        leader_id: 1,
        group_id: 7,
        term: 2,
        enabled: 1,
        ..Default::default()
    };
    regs.set_voters(&[1, 2, 3]);
    prog.write_registers(&regs);

    let (acks, records) = on_every_cpu(&prog, |_cpu, _i| {
        // The tail as this CPU last saw it: appends for an older tail are duplicates.
        let last = prog.read_registers().last_index;
        let mut h = Header::of(MsgType::Append);
        h.group_id = 7;
        h.term = 2;
        h.from = 1;
        h.index = last;
        h.log_term = if last == 0 { 0 } else { 2 };
        h.commit = last;
        h.len = 8;
        let mut pkt = Vec::new();
        h.encode(&last.to_le_bytes(), &mut pkt);
        let run = prog.test_run(&frame_from_peer(&pkt)).expect("test run");
        match run.verdict {
            XDP_TX => {
                let (a, _) = Header::decode(&run.frame[42..]).expect("a reply");
                assert_eq!(a.msg_type(), Some(MsgType::Ack), "no gaps: only acks");
                assert_eq!(a.index, last + 1);
                Some(a.index)
            }
            v => {
                assert_eq!(v, XDP_DROP, "a duplicate");
                None
            }
        }
    });
    let after = prog.read_registers();
    let c = prog.counters();
    let n = acks.len() as u64;
    eprintln!(
        "xdp_follower_on_every_cpu: {} CPUs, {n} appends acknowledged, {} duplicates dropped",
        cpus(),
        c.dropped
    );
    assert!(n > 0);
    assert_eq!(after.enabled, 1, "no halt");
    assert_eq!(after.last_index, n, "last_index = acknowledged appends");
    let set: BTreeSet<u64> = acks.iter().copied().collect();
    assert_eq!(
        set,
        (1..=n).collect(),
        "each index acknowledged exactly once"
    );
    let mut idx = entry_indices(&records);
    assert_eq!(idx.len() as u64, n, "one ring entry per append");
    idx.sort_unstable();
    assert_eq!(idx, (1..=n).collect::<Vec<_>>(), "each index exactly once");
    for r in &records {
        if let RingRecord::Entry(e) = r {
            assert_eq!(
                e.payload,
                (e.index - 1).to_le_bytes(),
                "payload of {}",
                e.index
            );
            assert_eq!(e.source, None, "no source at a follower");
        }
    }
}

/// Ring wake-ups lose nothing: a producer on each CPU in turn rings one record at a time
/// while the reader sleeps on the ring between records (`XdpProgram::consume_or_wait`, as the
/// ring thread). Every other record the producer drains itself at once, as the replica loop
/// does after it pushes a request: a third of those after holding wake-ups first
/// (`hold_wakeups`, as `XdpDataPlane::push` does), the others not (its drain then takes the
/// wake record meant for the reader). The next record must still wake the reader. A missed
/// wake-up leaves the reader asleep until its timeout (2 s), which fails the test; the reader
/// is woken at most once per record, and never for a record rung with wake-ups held.
#[test]
fn xdp_ring_wakeups_are_never_missed() {
    if !root_or_skip("xdp_ring_wakeups_are_never_missed") {
        return;
    }
    const ROUNDS: u64 = 2_000;
    let prog = load(b"ok");
    prog.write_registers(&leader_regs());
    let by_reader = std::sync::atomic::AtomicU64::new(0);
    let held = std::sync::atomic::AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let (slow, by_producer) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut slow = Vec::new();
            let mut recs = Vec::new();
            while !done.load(Ordering::SeqCst) {
                let t = Instant::now();
                let n = prog.consume_or_wait(64, Duration::from_secs(2));
                if n > 0 && t.elapsed() >= Duration::from_secs(2) {
                    slow.push(by_reader.load(Ordering::SeqCst));
                }
                prog.drain(&mut recs);
                by_reader.store(entry_indices(&recs).len() as u64, Ordering::SeqCst);
            }
            slow
        });
        let producer = s.spawn(|| {
            let mut mine = Vec::new();
            for i in 0..ROUNDS {
                if start.elapsed() > TIME_LIMIT {
                    break;
                }
                pin_to(i as usize % cpus());
                let pkt = client_request(i + 1);
                let hold = i % 6 == 0;
                if hold {
                    prog.hold_wakeups();
                    held.fetch_add(1, Ordering::SeqCst);
                }
                let run = prog.test_run(&frame_from_peer(&pkt)).expect("test run");
                assert_eq!(run.verdict, XDP_TX, "round {i}");
                if i % 2 == 0 {
                    prog.drain(&mut mine);
                    assert!(!prog.wakeups_held(), "a drain ends the hold");
                }
                let t = Instant::now();
                while by_reader.load(Ordering::SeqCst) + (entry_indices(&mine).len() as u64) < i + 1
                {
                    assert!(
                        t.elapsed() < Duration::from_secs(5),
                        "round {i}: the reader never got the record"
                    );
                    std::thread::yield_now();
                }
            }
            entry_indices(&mine).len() as u64
        });
        let p = producer.join();
        done.store(true, Ordering::SeqCst);
        let slow = reader.join().expect("reader");
        (slow, p.expect("producer"))
    });
    let rounds = by_reader.load(Ordering::SeqCst) + by_producer;
    eprintln!(
        "xdp_ring_wakeups_are_never_missed: {rounds} records ({by_producer} drained by the \
         producer), {} wake records",
        prog.ring_wakeups()
    );
    assert!(rounds > 0);
    assert!(
        slow.is_empty(),
        "the reader overslept after records {slow:?}"
    );
    let held = held.load(Ordering::SeqCst);
    assert!(held > 0);
    assert!(
        prog.ring_wakeups() <= rounds - held,
        "at most one wake record per record rung without a hold, none for the {held} held"
    );
}

/// A follower nobody waits on lets its ring reader nap between looks
/// (`XdpProgram::want_wakeups(false)`); turning wake-ups on again arms the reader's flag at
/// once, so the next record wakes a reader in the middle of its nap instead of letting it
/// sleep it out.
#[test]
fn turning_wakeups_on_cuts_the_readers_nap_short() {
    if !root_or_skip("turning_wakeups_on_cuts_the_readers_nap_short") {
        return;
    }
    let prog = load(b"ok");
    prog.write_registers(&leader_regs());
    assert!(
        prog.wakeups_wanted(),
        "wanted until the host says otherwise"
    );
    prog.want_wakeups(false);
    prog.set_ring_waiting(false);
    assert!(!prog.wakeups_wanted());
    let woke_after = std::thread::scope(|s| {
        let napper = s.spawn(|| {
            let t = Instant::now();
            prog.nap(Duration::from_secs(3));
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(100));
        prog.want_wakeups(true);
        assert!(prog.ring_waiting(), "turning wake-ups on arms the flag");
        let run = prog
            .test_run(&frame_from_peer(&client_request(1)))
            .expect("test run");
        assert_eq!(run.verdict, XDP_TX);
        napper.join().expect("napper")
    });
    assert!(
        woke_after < Duration::from_secs(2),
        "the nap was not cut short by the record: {woke_after:?}"
    );
    let mut recs = Vec::new();
    prog.drain(&mut recs);
    assert_eq!(entry_indices(&recs).len(), 1);
    assert_eq!(prog.ring_wakeups(), 1, "one wake record");
    // Turning it on when it is on already does not arm anything.
    prog.set_ring_waiting(false);
    prog.want_wakeups(true);
    assert!(!prog.ring_waiting());
}

/// The host's own packets reach the program only through pulls (`XdpProgram::run_live_batch`):
/// a frame from the program's own address that is not one (a test run's recycled frame that
/// lost its pull metadata, or a forged one) is dropped, never ordered.
#[test]
fn a_frame_from_our_own_address_that_is_not_a_pull_is_dropped() {
    if !root_or_skip("a_frame_from_our_own_address_that_is_not_a_pull_is_dropped") {
        return;
    }
    let prog = load(b"ok");
    prog.write_registers(&leader_regs());
    let me = std::net::SocketAddrV4::new(SELF_IP, PORT);
    let frame =
        waverunner_dataplane::xdp::udp_frame(SELF_MAC, me, SELF_MAC, me, &client_request(1));
    let before = prog.read_registers();
    let run = prog.test_run(&frame).expect("test run");
    assert_eq!(run.verdict, XDP_DROP);
    assert_eq!(prog.read_registers(), before, "nothing ordered");
    let from_peer = prog
        .test_run(&frame_from_peer(&client_request(1)))
        .expect("test run");
    assert_eq!(
        from_peer.verdict, XDP_TX,
        "the same request from a client is taken"
    );
}

/// An edge-triggered epoll on one descriptor, as the replica loop's poll (mio) waits on the
/// ring: it reports a wake-up, not records that were there already.
struct Edge(std::os::fd::OwnedFd);

impl Edge {
    fn on(fd: std::os::fd::RawFd) -> Edge {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscalls; the new descriptor is owned once checked.
        unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            assert!(
                ep >= 0,
                "epoll_create1: {}",
                std::io::Error::last_os_error()
            );
            let mut ev = libc::epoll_event {
                events: (libc::EPOLLIN | libc::EPOLLET) as u32,
                u64: 0,
            };
            let rc = libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev);
            assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
            Edge(std::os::fd::OwnedFd::from_raw_fd(ep))
        }
    }

    /// Whether a wake-up came within `ms`.
    fn woke_within(&self, ms: i32) -> bool {
        use std::os::fd::AsRawFd;
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: one live event buffer.
        unsafe { libc::epoll_wait(self.0.as_raw_fd(), &mut ev, 1, ms) == 1 }
    }
}

/// A host that reads the ring itself (the replica loop with `xdp`, `XdpProgram::read_by_host`)
/// is the reader that sleeps: it arms the wake-up only before it sleeps, and a record rung
/// then makes the ring's descriptor readable, with one wake record; a record already there
/// means no sleep; a follower nobody waits on naps instead of arming while records keep
/// coming; and turning wake-ups on while the loop is awake arms nothing.
#[test]
fn a_host_that_reads_the_ring_is_woken_only_while_it_sleeps() {
    if !root_or_skip("a_host_that_reads_the_ring_is_woken_only_while_it_sleeps") {
        return;
    }
    use waverunner_dataplane::xdp::RING_NAP;
    use waverunner_dataplane::RingSleep;
    let prog = load(b"ok");
    prog.write_registers(&leader_regs());
    prog.read_by_host();
    let ring = Edge::on(prog.ring_fd());
    let mut recs = Vec::new();

    // Awake: a record rings for nobody.
    prog.set_ring_waiting(false);
    let run = prog
        .test_run(&frame_from_peer(&client_request(1)))
        .expect("run");
    assert_eq!(run.verdict, XDP_TX);
    assert_eq!(prog.ring_wakeups(), 0);
    // About to sleep with it on the ring: no sleep.
    assert_eq!(prog.before_sleep(), RingSleep::Ready);
    assert!(!prog.ring_waiting(), "not armed while records wait");
    prog.drain(&mut recs);
    assert_eq!(entry_indices(&recs), vec![1]);

    // Empty: armed; the next record wakes the descriptor, once.
    prog.drain(&mut recs);
    assert_eq!(prog.before_sleep(), RingSleep::Armed);
    assert!(prog.ring_waiting());
    let _ = ring.woke_within(0); // the registration's own edge
    assert!(!ring.woke_within(0), "nothing rang");
    prog.test_run(&frame_from_peer(&client_request(2)))
        .expect("run");
    assert!(!prog.ring_waiting(), "the producer took the flag");
    assert!(ring.woke_within(2_000), "the record woke the sleeper");
    prog.after_sleep();
    prog.drain(&mut recs);
    assert_eq!(entry_indices(&recs), vec![1, 2]);
    assert_eq!(prog.ring_wakeups(), 1, "one wake record");

    // A follower nobody waits on, records coming: a nap, nothing armed.
    prog.want_wakeups(false);
    prog.test_run(&frame_from_peer(&client_request(3)))
        .expect("run");
    prog.drain(&mut recs);
    assert_eq!(prog.before_sleep(), RingSleep::Nap(RING_NAP));
    assert!(!prog.ring_waiting());
    // Nothing came at the last look: armed again.
    prog.drain(&mut recs);
    assert_eq!(prog.before_sleep(), RingSleep::Armed);
    prog.after_sleep();
    assert!(!prog.ring_waiting(), "awake: disarmed");
    // Turning wake-ups on while awake arms nothing (the loop drains every turn).
    prog.want_wakeups(true);
    assert!(!prog.ring_waiting());
}

/// The replica loop as the ring's reader loses no wake-up: producers on every CPU in turn
/// ring one record at a time while the reader drains, arms and sleeps on the ring's
/// descriptor as the loop does (`before_sleep`, an edge-triggered `epoll_wait`,
/// `after_sleep`). A missed wake-up leaves it asleep until its 2 s timeout, which fails the
/// test.
#[test]
fn a_host_reading_the_ring_never_misses_a_wakeup() {
    if !root_or_skip("a_host_reading_the_ring_never_misses_a_wakeup") {
        return;
    }
    use waverunner_dataplane::RingSleep;
    const ROUNDS: u64 = 2_000;
    let prog = load(b"ok");
    prog.write_registers(&leader_regs());
    prog.read_by_host();
    let ring = Edge::on(prog.ring_fd());
    let taken = std::sync::atomic::AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let slow = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut slow = Vec::new();
            let mut recs = Vec::new();
            while !done.load(Ordering::SeqCst) {
                prog.drain(&mut recs);
                let n = entry_indices(&recs).len() as u64;
                taken.store(n, Ordering::SeqCst);
                if n.is_multiple_of(2) {
                    // Late to sleep, as a busy loop is: the next record often comes between
                    // the drain and the arming, which `before_sleep`'s second look must see.
                    std::thread::sleep(Duration::from_micros(300));
                }
                match prog.before_sleep() {
                    RingSleep::Ready => continue,
                    RingSleep::Nap(t) => std::thread::sleep(t),
                    RingSleep::Armed => {
                        if !ring.woke_within(2_000) {
                            // Timed out: a record found now waited for the timeout.
                            let before = entry_indices(&recs).len();
                            prog.drain(&mut recs);
                            if entry_indices(&recs).len() > before {
                                slow.push(before as u64);
                            }
                            taken.store(entry_indices(&recs).len() as u64, Ordering::SeqCst);
                        }
                    }
                }
                prog.after_sleep();
            }
            slow
        });
        let producer = s.spawn(|| {
            for i in 0..ROUNDS {
                if start.elapsed() > TIME_LIMIT {
                    break;
                }
                pin_to(i as usize % cpus());
                let run = prog
                    .test_run(&frame_from_peer(&client_request(i + 1)))
                    .expect("test run");
                assert_eq!(run.verdict, XDP_TX, "round {i}");
                let t = Instant::now();
                while taken.load(Ordering::SeqCst) < i + 1 {
                    assert!(
                        t.elapsed() < Duration::from_secs(5),
                        "round {i}: the reader never got the record"
                    );
                    std::thread::yield_now();
                }
            }
        });
        let p = producer.join();
        done.store(true, Ordering::SeqCst);
        let slow = reader.join().expect("reader");
        p.expect("producer");
        slow
    });
    let rounds = taken.load(Ordering::SeqCst);
    eprintln!(
        "a_host_reading_the_ring_never_misses_a_wakeup: {rounds} records, {} wake records",
        prog.ring_wakeups()
    );
    assert!(rounds > 0);
    assert!(
        slow.is_empty(),
        "the reader overslept after records {slow:?}"
    );
    assert!(
        prog.ring_wakeups() <= rounds,
        "at most one wake record per record"
    );
}
