//! Every case of `crates/fastpath/vectors/handler.json` through the XDP program with
//! `BPF_PROG_TEST_RUN` (not live): registers, verdict, the emitted frame byte for byte, and the
//! ring records (vectors/README.md "handler.json", docs/dataplane.md).

mod xdp_common;

use std::net::SocketAddrV4;

use serde_json::Value;
use waverunner_dataplane::xdp::{XDP_DROP, XDP_PASS, XDP_TX};
use waverunner_dataplane::{RingEntry, RingRecord};
use waverunner_fastpath::{Registers, MAX_NODES};
use xdp_common::*;

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("field {k} missing in {v}"))
}

fn array8(v: &Value, k: &str) -> [u64; MAX_NODES] {
    let mut out = [0; MAX_NODES];
    for (o, x) in out.iter_mut().zip(v[k].as_array().expect("array")) {
        *o = x.as_u64().expect("u64");
    }
    out
}

fn registers_of(v: &Value) -> Registers {
    Registers {
        self_id: u(v, "self_id"),
        leader_id: u(v, "leader_id"),
        group_id: u(v, "group_id"),
        term: u(v, "term"),
        last_index: u(v, "last_index"),
        last_term: u(v, "last_term"),
        commit_index: u(v, "commit_index"),
        term_start_index: u(v, "term_start_index"),
        ids: array8(v, "ids"),
        match_index: array8(v, "match_index"),
        n_nodes: u(v, "n_nodes") as u32,
        quorum: u(v, "quorum") as u32,
        enabled: u(v, "enabled") as u32,
        is_leader: u(v, "is_leader") as u32,
        flags: u(v, "flags") as u32,
        halt_reason: u(v, "halt_reason") as u32,
        gap_count: u(v, "gap_count") as u32,
        retx_requests: u(v, "retx_requests") as u32,
    }
}

#[test]
fn xdp_handler_vectors() {
    if !root_or_skip("xdp_handler_vectors") {
        return;
    }
    let path = format!(
        "{}/../fastpath/vectors/handler.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read vectors")).expect("json");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 40);
    // No blind reply body: the data plane never answers clients here (no client table hits
    // anyway: every case starts from fresh registers).
    let prog = load(b"");
    let peer = SocketAddrV4::new(PEER_IP, 5555);
    let mut ran = 0;
    for c in cases {
        let name = c["name"].as_str().expect("name");
        let before = registers_of(&c["registers_before"]);
        let after = registers_of(&c["registers_after"]);
        let exp = &c["expected"];
        let actions: Vec<&str> = exp["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .map(|a| a.as_str().expect("action"))
            .collect();
        let has = |a: &str| actions.contains(&a);
        let input = &c["input"];
        let fields = &input["fields"];
        let len = u(fields, "len") as usize;
        let mut payload = hex_decode(input["hex"].as_str().expect("hex"));
        payload.resize(64 + len, 0);
        let parses = fields["type"].is_string();

        let mut stale = Vec::new();
        prog.drain(&mut stale);
        prog.write_registers(&before);
        let c0 = prog.counters();
        // Every other case the reader says it sleeps: an invocation that rings a record must
        // then wake it, once, and take its flag (one that only reserved and discarded may too);
        // a reader that does not sleep is never woken.
        let sleeping = ran % 2 == 0;
        prog.set_ring_waiting(sleeping);
        let w0 = prog.ring_wakeups();
        let run = prog.test_run(&frame_from_peer(&payload)).expect("test run");
        let c1 = prog.counters();
        let mut records = Vec::new();
        prog.drain(&mut records);
        let regs = prog.read_registers();
        let woken = prog.ring_wakeups() - w0;
        assert!(woken <= sleeping as u64, "{name}: {woken} wake records");
        if !records.is_empty() {
            assert_eq!(
                woken, sleeping as u64,
                "{name}: records rung, reader not woken"
            );
        }
        assert_eq!(
            prog.ring_waiting(),
            sleeping && woken == 0,
            "{name}: the producer that woke the reader took its flag"
        );
        prog.set_ring_waiting(false);

        if !parses {
            assert_eq!(
                run.verdict, XDP_PASS,
                "{name}: refused by fp_parse: to the host"
            );
            assert_eq!(regs, before, "{name}: registers unchanged");
            assert!(records.is_empty(), "{name}: no records");
            assert_eq!(c1.malformed, c0.malformed + 1, "{name}: malformed");
            ran += 1;
            continue;
        }
        assert_eq!(regs, after, "{name}: registers after");
        let want_verdict = if has("TO_HOST") {
            XDP_PASS
        } else if has("BROADCAST") || has("REPLY") {
            XDP_TX
        } else {
            XDP_DROP
        };
        assert_eq!(run.verdict, want_verdict, "{name}: verdict for {actions:?}");
        assert_eq!(
            c1.halts - c0.halts,
            has("HALT") as u64,
            "{name}: halts counter"
        );
        if has("TO_HOST") {
            assert_eq!(c1.punted, c0.punted + 1, "{name}: punted");
            assert_eq!(
                run.frame,
                frame_from_peer(&payload),
                "{name}: passed untouched"
            );
        } else {
            assert_eq!(c1.handled, c0.handled + 1, "{name}: handled");
        }
        // Only what the handler refused counts as dropped: not an ack taken into a match index
        // (MATCHED) or a commit, though its frame ends here too.
        assert_eq!(
            c1.dropped - c0.dropped,
            has("DROP") as u64,
            "{name}: dropped counter"
        );

        let f = &run.frame;
        if let Value::Object(m) = &exp["msg"] {
            let hex = hex_decode(m["hex"].as_str().expect("msg hex"));
            assert!(f.len() >= 106, "{name}: frame of {} bytes", f.len());
            assert_eq!(&f[42..106], &hex[..], "{name}: emitted header bytes");
            assert!(ipv4_checksum_ok(f), "{name}: IPv4 checksum");
            assert_eq!(&f[6..12], &SELF_MAC, "{name}: from our MAC");
            assert_eq!(&f[26..30], &SELF_IP.octets(), "{name}: from our IP");
            assert_eq!(&f[34..36], &PORT.to_be_bytes(), "{name}: from our port");
            assert_eq!(&f[40..42], &[0, 0], "{name}: UDP checksum 0");
            let udp_len = u16::from_be_bytes([f[38], f[39]]) as usize;
            let ip_len = u16::from_be_bytes([f[16], f[17]]) as usize;
            if has("BROADCAST") {
                assert_eq!(f.len(), 106 + len, "{name}: APPEND carries the payload");
                assert_eq!(&f[106..], &payload[64..], "{name}: payload");
                let g = GROUP.octets();
                assert_eq!(
                    &f[0..6],
                    &[0x01, 0x00, 0x5e, g[1] & 0x7f, g[2], g[3]],
                    "{name}: group MAC"
                );
                assert_eq!(&f[30..34], &g, "{name}: to the group");
                assert_eq!(
                    &f[36..38],
                    &PORT.to_be_bytes(),
                    "{name}: to the fast-path port"
                );
            } else {
                assert_eq!(f.len(), 106, "{name}: a reply has no payload");
                assert_eq!(&f[0..6], &PEER_MAC, "{name}: back to the sender's MAC");
                assert_eq!(&f[30..34], &PEER_IP.octets(), "{name}: back to the sender");
                assert_eq!(
                    &f[36..38],
                    &5555u16.to_be_bytes(),
                    "{name}: to the sender's port"
                );
            }
            assert_eq!(udp_len, f.len() - 34, "{name}: UDP length");
            assert_eq!(ip_len, f.len() - 14, "{name}: IP total length");
        }

        let out = &exp["out"];
        let mut want = Vec::new();
        if has("RING_ENTRY") {
            want.push(RingRecord::Entry(RingEntry {
                index: u(out, "entry_index"),
                term: u(out, "entry_term"),
                flags: u(fields, "flags") as u16,
                from: u(fields, "from"),
                seq: u(fields, "seq"),
                source: (fields["type"] == "CLIENT_REQUEST").then_some(peer),
                payload: vec![0; len],
            }));
        }
        if has("RING_COMMIT") {
            want.push(RingRecord::Commit {
                index: u(out, "commit_index"),
                replied: false,
            });
        }
        assert_eq!(records, want, "{name}: ring records");
        ran += 1;
    }
    assert_eq!(prog.counters().ring_full, 0, "ring_full never");
    eprintln!("xdp_handler_vectors: {ran} cases through the XDP program");
}

/// A client request frame from the peer: an envelope from replica `origin` (request `req`).
fn client_request(seq: u64, origin: u64, req: u64, flags: u16) -> Vec<u8> {
    client_request_of(seq, origin, req, flags, b"SET a b").0
}

/// A client's request carrying `command`, as a frame from the peer, and its payload.
fn client_request_of(
    seq: u64,
    origin: u64,
    req: u64,
    flags: u16,
    command: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    use waverunner_fastpath::{payload::Envelope, Header, CLIENT_REQUEST};
    let payload = Envelope {
        origin,
        req,
        client: 9,
        seq,
        now_ms: 0,
        command: command.to_vec(),
    }
    .encode();
    let h = Header {
        kind: CLIENT_REQUEST,
        flags,
        len: payload.len() as u16,
        from: 9,
        seq,
        ..Header::new(1)
    };
    let mut b = Vec::new();
    h.encode(&payload, &mut b);
    (frame_from_peer(&b), payload)
}

/// A follower's append of `b"abc"` after entry `prev` of term 2, from leader 1.
fn follower_append(prev: u64) -> Vec<u8> {
    use waverunner_fastpath::{Header, APPEND};
    let h = Header {
        kind: APPEND,
        len: 3,
        term: 2,
        from: 1,
        index: prev,
        log_term: 2,
        ..Header::new(1)
    };
    let mut b = Vec::new();
    h.encode(b"abc", &mut b);
    frame_from_peer(&b)
}

/// Follower 2 of the leader's group, term and log ([`leader_regs`]).
fn follower_regs() -> Registers {
    Registers {
        self_id: 2,
        is_leader: 0,
        ..leader_regs(&[1, 2, 3])
    }
}

/// A leader's registers (self 1, group 1, term 2) over `voters`, everything committed at 5.
fn leader_regs(voters: &[u64]) -> Registers {
    let mut r = Registers {
        self_id: 1,
        leader_id: 1,
        group_id: 1,
        term: 2,
        last_index: 5,
        last_term: 2,
        commit_index: 5,
        term_start_index: 5,
        enabled: 1,
        is_leader: 1,
        ..Default::default()
    };
    r.set_voters(voters);
    r
}

/// Checks a busy reply frame to the peer: status RETRY, body "busy", `seq` and `req` echoed.
fn check_busy(run: &waverunner_dataplane::xdp::TestRun, seq: u64, req: u64, what: &str) {
    use waverunner_fastpath::{payload::STATUS_RETRY, Header, CLIENT_REPLY};
    assert_eq!(run.verdict, XDP_TX, "{what}: sent back");
    let f = &run.frame;
    assert_eq!(&f[0..6], &PEER_MAC, "{what}: to the sender's MAC");
    assert_eq!(&f[30..34], &PEER_IP.octets(), "{what}: to the sender");
    assert!(ipv4_checksum_ok(f), "{what}: IPv4 checksum");
    let (h, p) = Header::decode(&f[42..]).expect("a fast-path reply");
    assert_eq!(h.kind, CLIENT_REPLY, "{what}");
    assert_eq!(
        (h.seq, h.index, h.from),
        (seq, req, 1),
        "{what}: seq, request id, leader"
    );
    assert_eq!(p[0], STATUS_RETRY, "{what}: status");
    assert_eq!(&p[1..9], &1u64.to_le_bytes(), "{what}: leader id");
    assert_eq!(&p[9..], b"busy", "{what}: body");
}

#[test]
fn xdp_leader_sheds_clients_past_its_window_or_a_quarter_ring() {
    if !root_or_skip("xdp_leader_sheds_clients_past_its_window_or_a_quarter_ring") {
        return;
    }
    use waverunner_fastpath::{BUSY_BURST, BUSY_EVERY_NS, F_HEARTBEAT, SHED_INFLIGHT_XDP};
    let prog = load(b"");
    let mut records = Vec::new();
    assert_eq!(
        prog.shed_inflight(),
        SHED_INFLIGHT_XDP,
        "the window set at load"
    );

    // The window: entries ordered and not committed reach SHED_INFLIGHT_XDP (nothing acks).
    let mut r = leader_regs(&[1, 2, 3]);
    r.last_index = r.commit_index + SHED_INFLIGHT_XDP;
    prog.write_registers(&r);
    let run = prog.test_run(&client_request(4, 3, 77, 0)).expect("run");
    check_busy(&run, 4, 77, "window full");
    assert_eq!(prog.counters().shed, 1);
    assert_eq!(
        prog.read_registers().last_index,
        r.last_index,
        "not ordered"
    );
    // Busy replies while their ration lasts, then dropped unanswered; one more after a while.
    let t0 = std::time::Instant::now();
    let mut answered = 0u64;
    for seq in 100.. {
        let run = prog.test_run(&client_request(seq, 0, 0, 0)).expect("run");
        if run.verdict == XDP_DROP {
            break;
        }
        check_busy(&run, seq, 0, "a client's, within the ration");
        answered += 1;
        assert!(answered <= 100 * BUSY_BURST, "the ration never ran out");
    }
    let refills = t0.elapsed().as_nanos() as u64 / BUSY_EVERY_NS + 1;
    // The burst less the one spent above, and the refills while this ran.
    assert!(
        (BUSY_BURST - 1..=BUSY_BURST - 1 + refills).contains(&answered),
        "{answered} busy replies: the burst of {BUSY_BURST} less one, and {refills} refills at most"
    );
    let c = prog.counters();
    assert_eq!((c.shed, c.shed_unanswered), (answered + 2, 1));
    std::thread::sleep(std::time::Duration::from_nanos(2 * BUSY_EVERY_NS));
    let run = prog.test_run(&client_request(5, 0, 0, 0)).expect("run");
    check_busy(&run, 5, 0, "the ration refilled");
    assert_eq!(prog.counters().shed, answered + 3);
    let shed = answered + 3;
    // The whole burst again for the shed below.
    std::thread::sleep(std::time::Duration::from_nanos(
        2 * BUSY_BURST * BUSY_EVERY_NS,
    ));
    // A heartbeat is never shed: ordered.
    let run = prog
        .test_run(&client_request(5, 0, 0, F_HEARTBEAT))
        .expect("run");
    assert_eq!(run.verdict, XDP_TX, "the heartbeat's append");
    assert_eq!(prog.read_registers().last_index, r.last_index + 1);
    assert_eq!(prog.counters().shed, shed);
    prog.drain(&mut records);

    // The ring: one voter commits at once; with nothing drained, requests are ordered until
    // what waits for the host passes a quarter of the admission budget (1 MiB of the 8 MiB
    // ring, `WR_RING_ADMIT_BYTES`), then shed.
    records.clear();
    prog.write_registers(&leader_regs(&[1]));
    let mut ordered = 0u64;
    let mut seq = 10;
    loop {
        seq += 1;
        let run = prog.test_run(&client_request(seq, 0, 0, 0)).expect("run");
        if prog.counters().shed == shed + 1 {
            check_busy(&run, seq, 0, "ring a quarter full");
            break;
        }
        ordered += 1;
        assert!(ordered < 5_000, "never shed");
    }
    assert_eq!(
        prog.counters().ring_full,
        0,
        "shed long before the ring is full"
    );
    prog.drain(&mut records);
    let entries = records
        .iter()
        .filter(|r| matches!(r, RingRecord::Entry(_)))
        .count() as u64;
    assert_eq!(
        entries, ordered,
        "every request before the shed one was ordered"
    );
    // A small request's entry record takes 256 + 8 ring bytes, its commit 48 + 8: shed past
    // 256 KiB. With one record size for every entry (1456 + 56) it was 174; with the whole
    // ring as the budget, 1 388 of those (2 MiB): a leader host about 150 ms behind at twice
    // the peak load, too late to retransmit a lost append in time.
    assert_eq!(
        ordered,
        (256 << 10) / (264 + 56) + 1,
        "small requests ordered before the shed"
    );
    // Drained: ordered again. Requests too large for a small record take a large one, their
    // payload whole: fewer fit the same share.
    std::thread::sleep(std::time::Duration::from_nanos(
        2 * BUSY_BURST * BUSY_EVERY_NS,
    ));
    let big = |seq: u64| client_request_of(seq, 0, 0, 0, &[b'v'; 1000]);
    let mut large = 0u64;
    let mut sent = Vec::new();
    loop {
        seq += 1;
        let (frame, payload) = big(seq);
        let run = prog.test_run(&frame).expect("run");
        if prog.counters().shed == shed + 2 {
            check_busy(&run, seq, 0, "ring a quarter full of large records");
            break;
        }
        assert_ne!(run.verdict, XDP_DROP, "a large request ordered");
        sent.push(payload);
        large += 1;
        assert!(large < 5_000, "never shed");
    }
    assert_eq!(
        large,
        (256 << 10) / (1456 + 56) + 1,
        "large requests ordered"
    );
    records.clear();
    prog.drain(&mut records);
    let got: Vec<&Vec<u8>> = records
        .iter()
        .filter_map(|r| match r {
            RingRecord::Entry(e) => Some(&e.payload),
            _ => None,
        })
        .collect();
    assert_eq!(got.len(), sent.len());
    for (g, s) in got.iter().zip(&sent) {
        // The leader stamps its clock into the envelope: compare around it.
        assert_eq!(g.len(), s.len(), "a large payload whole");
        assert_eq!(&g[..33], &s[..33]);
        assert_eq!(&g[41..], &s[41..]);
    }
    eprintln!(
        "xdp shedding: {ordered} small and {large} large requests ordered before the ring \
         passed the admission share"
    );
}

/// A follower past its hold window: the handler's gap rule sees at most one append per
/// `GAP_PASS_NS` (the rest are dropped), so its budget of retransmission requests lasts about
/// 1.3 s whatever the rate; within the window an append goes to the host to be held.
#[test]
fn xdp_follower_past_its_window_lets_one_append_a_while_reach_the_gap_rule() {
    if !root_or_skip("xdp_follower_past_its_window_lets_one_append_a_while_reach_the_gap_rule") {
        return;
    }
    use waverunner_fastpath::GAP_PASS_NS;
    let prog = load(b"");
    prog.set_reorder_window(4);
    // Follower 2 of the same group, term and log.
    prog.write_registers(&follower_regs());
    let append = follower_append;
    let t0 = std::time::Instant::now();
    let verdicts: Vec<u32> = (0..40)
        .map(|i| prog.test_run(&append(100 + i)).expect("run").verdict)
        .collect();
    assert!(
        t0.elapsed().as_nanos() < u128::from(GAP_PASS_NS),
        "the runs took longer than a pass interval: nothing to check"
    );
    let after = prog.read_registers();
    assert_eq!(
        (after.gap_count, after.retx_requests, after.last_index),
        (1, 1, 5),
        "one append reached the gap rule (its first RETX_REQ)"
    );
    assert_eq!(verdicts.iter().filter(|&&v| v == XDP_DROP).count(), 39);
    assert_eq!(prog.counters().retx_requests, 1);
    // Within the window: to the host, whatever the throttle.
    assert_eq!(prog.test_run(&append(7)).expect("run").verdict, XDP_PASS);
    // A pass interval later, the next one reaches the rule again.
    std::thread::sleep(std::time::Duration::from_nanos(GAP_PASS_NS));
    prog.test_run(&append(200)).expect("run");
    assert_eq!(prog.read_registers().gap_count, 2);
}

/// A follower's program records when an append of its term last came (the host counts a
/// starved loop's ticks from there), whatever became of it: taken, a duplicate, or dropped
/// past the hold window. Another term's append leaves the time alone.
#[test]
fn xdp_follower_records_when_it_last_heard_its_leader() {
    if !root_or_skip("xdp_follower_records_when_it_last_heard_its_leader") {
        return;
    }
    use waverunner_dataplane::monotonic_ns;
    let prog = load(b"");
    prog.write_registers(&follower_regs());
    let append = follower_append;
    assert_eq!(prog.heard_ns(), 0, "nothing heard yet");
    let t0 = monotonic_ns();
    prog.test_run(&append(5)).expect("run");
    let t1 = monotonic_ns();
    assert_eq!(prog.read_registers().last_index, 6, "taken");
    let heard = prog.heard_ns();
    assert!((t0..=t1).contains(&heard), "{t0} <= {heard} <= {t1}");
    for (prev, what) in [(4, "a duplicate"), (5_000, "an append past the window")] {
        let t = monotonic_ns();
        prog.test_run(&append(prev)).expect("run");
        assert_eq!(prog.read_registers().last_index, 6, "{what}: not taken");
        assert!(prog.heard_ns() >= t, "{what}: heard");
    }
    // In term 3, a term-2 append says nothing of the leader.
    prog.write_registers(&Registers {
        term: 3,
        ..prog.read_registers()
    });
    let heard = prog.heard_ns();
    prog.test_run(&append(6)).expect("run");
    assert_eq!(prog.heard_ns(), heard, "another term's append");
}
