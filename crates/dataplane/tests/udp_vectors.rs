//! Every case of `crates/fastpath/vectors/handler.json` (format in `vectors/README.md`) through
//! a real [`UdpDataPlane`] on loopback: the registers loaded with `enable`, the input sent from a
//! test socket (the 64-byte header plus `len` zero payload bytes), and what comes back checked
//! byte for byte: the reply to the sender, the appends at every peer socket, the ring records,
//! the host packets, the registers (`registers()` and `disable()`).

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use waverunner_dataplane::udp::UdpDataPlane;
use waverunner_dataplane::{Config, Counters, DataPlane, Hooks, RingEntry, RingRecord};
use waverunner_fastpath::{self as fp, Actions, Header, MsgType, Registers, MAX_NODES};

type HostPackets = Arc<Mutex<Vec<(SocketAddr, Vec<u8>)>>>;

const REPLY_BODY: &[u8] = b"OK!";

fn load() -> Value {
    let path = format!(
        "{}/../fastpath/vectors/handler.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("missing or non-integer field {key:?} in {v}"))
}

fn u32_of(v: &Value, key: &str) -> u32 {
    u32::try_from(u64_of(v, key)).expect("u32")
}

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn array8(v: &Value, key: &str) -> [u64; MAX_NODES] {
    let a = v[key].as_array().expect("array");
    let mut out = [0; MAX_NODES];
    for (o, x) in out.iter_mut().zip(a) {
        *o = x.as_u64().expect("u64");
    }
    out
}

fn registers_of(v: &Value) -> Registers {
    Registers {
        self_id: u64_of(v, "self_id"),
        leader_id: u64_of(v, "leader_id"),
        group_id: u64_of(v, "group_id"),
        term: u64_of(v, "term"),
        last_index: u64_of(v, "last_index"),
        last_term: u64_of(v, "last_term"),
        commit_index: u64_of(v, "commit_index"),
        term_start_index: u64_of(v, "term_start_index"),
        ids: array8(v, "ids"),
        match_index: array8(v, "match_index"),
        n_nodes: u32_of(v, "n_nodes"),
        quorum: u32_of(v, "quorum"),
        enabled: u32_of(v, "enabled"),
        is_leader: u32_of(v, "is_leader"),
        flags: u32_of(v, "flags"),
        halt_reason: u32_of(v, "halt_reason"),
        gap_count: u32_of(v, "gap_count"),
        retx_requests: u32_of(v, "retx_requests"),
    }
}

fn total(c: &Counters) -> u64 {
    c.handled + c.punted + c.malformed + c.ring_full
}

fn test_socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind test socket");
    s.set_nonblocking(true).expect("nonblocking");
    s
}

fn v4(s: &UdpSocket) -> SocketAddrV4 {
    match s.local_addr().expect("local addr") {
        SocketAddr::V4(a) => a,
        a => panic!("not IPv4: {a}"),
    }
}

/// Every datagram waiting on `s` (loopback delivery is done by the time the data plane
/// published its counters; a short grace period covers deferred softirq processing).
fn datagrams(s: &UdpSocket) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.recv_from(&mut buf) {
            Ok((n, from)) => out.push((from, buf[..n].to_vec())),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return out,
            Err(e) => panic!("recv: {e}"),
        }
    }
}

fn run_case(case: &Value, group_id: u32) {
    let name = case["name"].as_str().expect("name");
    let before = registers_of(&case["registers_before"]);
    let after = registers_of(&case["registers_after"]);
    let exp = &case["expected"];
    let actions = exp["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| Actions::from_name(a.as_str().expect("name")).expect("known action"))
        .fold(Actions::NONE, |x, y| x | y);
    let input = hex_decode(case["input"]["hex"].as_str().expect("input hex"));
    let f = &case["input"]["fields"];
    let len = u64_of(f, "len") as usize;
    let mut pkt = input.clone();
    pkt.resize(input.len() + len, 0);
    let input_type = f["type"].as_str().and_then(MsgType::from_name);
    let in_flags = u64_of(f, "flags") as u16;

    let host: HostPackets = Arc::default();
    let h = host.clone();
    let wakes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let w = wakes.clone();
    let hooks = Hooks {
        wake: Some(Arc::new(move || {
            w.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })),
        host_packet: Some(Arc::new(move |from, p| {
            h.lock().unwrap().push((from, p.to_vec()))
        })),
    };
    let cfg = Config {
        self_id: before.self_id,
        group_id,
        bind: "127.0.0.1:0".parse().unwrap(),
        interface: None,
        multicast: None,
        blind_reply_body: REPLY_BODY.to_vec(),
    };
    let mut dp = UdpDataPlane::open(&cfg, hooks).expect("open");
    // The vectors are the handler's: its own gap rule, not the host's hold (as in XDP's).
    dp.set_reorder_window(0);
    let sender = test_socket();
    let mut peers = Vec::new();
    let mut peer_socks = Vec::new();
    for &id in &before.ids[..before.n_nodes as usize] {
        if id != before.self_id {
            let s = test_socket();
            peers.push((id, v4(&s)));
            peer_socks.push((id, s));
        }
    }
    dp.enable(&before, &peers).expect("enable");
    assert_eq!(dp.registers(), before, "{name}: registers after enable");

    sender
        .send_to(&pkt, dp.local_addr())
        .expect("send the input");
    let deadline = Instant::now() + Duration::from_secs(5);
    while total(&dp.counters()) == 0 {
        assert!(
            Instant::now() < deadline,
            "{name}: the input was never handled"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    std::thread::sleep(Duration::from_millis(5));
    let c = dp.counters();
    assert_eq!(total(&c), 1, "{name}: one packet: {c:?}");

    // Registers (the racy status copy is exact once the packet was handled).
    assert_eq!(dp.registers(), after, "{name}: registers after");

    // Host packets.
    let got_host = host.lock().unwrap().clone();
    if actions.contains(Actions::TO_HOST) {
        assert_eq!(
            got_host,
            vec![(SocketAddr::V4(v4(&sender)), pkt.clone())],
            "{name}: the input must reach the host untouched"
        );
    } else {
        assert!(got_host.is_empty(), "{name}: unexpected host packets");
    }
    if input_type.is_none() {
        assert_eq!(c.malformed, 1, "{name}: an invalid type is malformed");
    }
    assert_eq!(
        c.halts,
        u64::from(actions.contains(Actions::HALT)),
        "{name}"
    );
    assert_eq!(
        c.dropped,
        u64::from(actions.contains(Actions::DROP)),
        "{name}"
    );

    // Ring records.
    let out = &exp["out"];
    let mut want = Vec::new();
    let is_request = input_type == Some(MsgType::ClientRequest);
    if actions.contains(Actions::RING_ENTRY) {
        want.push(RingRecord::Entry(RingEntry {
            index: u64_of(out, "entry_index"),
            term: u64_of(out, "entry_term"),
            flags: in_flags,
            from: u64_of(f, "from"),
            seq: u64_of(f, "seq"),
            source: is_request.then(|| v4(&sender)),
            payload: vec![0; len],
        }));
    }
    // A data-plane client reply: a blind client request that commits at once (one voter).
    let client_reply = actions.contains(Actions::CLIENT_REPLY)
        && is_request
        && in_flags & fp::F_BLIND_WRITE != 0
        && u64_of(out, "reply_index") == u64_of(out, "entry_index");
    if actions.contains(Actions::RING_COMMIT) {
        want.push(RingRecord::Commit {
            index: u64_of(out, "commit_index"),
            replied: client_reply,
        });
    }
    let mut ring = Vec::new();
    let woken = wakes.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        woken,
        u64::from(!want.is_empty() || actions.contains(Actions::HALT)),
        "{name}: one wake for records or a halt"
    );
    dp.drain(&mut ring);
    assert_eq!(ring, want, "{name}: ring records");
    assert_eq!(c.client_replies, u64::from(client_reply), "{name}");

    // What arrives back at the sender, and at the peers.
    let msg = if exp["msg"].is_null() {
        None
    } else {
        Some(hex_decode(exp["msg"]["hex"].as_str().expect("msg hex")))
    };
    let back = datagrams(&sender);
    let mut want_back = Vec::new();
    if actions.contains(Actions::REPLY) {
        want_back.push(msg.clone().expect("REPLY has a msg"));
    }
    if client_reply {
        let c_idx = u64_of(out, "reply_index");
        let hdr = Header {
            kind: fp::CLIENT_REPLY,
            group_id,
            len: (9 + REPLY_BODY.len()) as u16,
            term: after.term,
            from: after.self_id,
            index: c_idx,
            commit: after.commit_index,
            seq: u64_of(f, "seq"),
            ..Header::new(0)
        };
        let mut p = vec![0u8];
        p.extend_from_slice(&after.self_id.to_le_bytes());
        p.extend_from_slice(REPLY_BODY);
        let mut b = Vec::new();
        hdr.encode(&p, &mut b);
        want_back.push(b);
    }
    let back: Vec<Vec<u8>> = back
        .into_iter()
        .map(|(from, b)| {
            assert_eq!(
                from,
                SocketAddr::V4(dp.local_addr()),
                "{name}: from the fast-path port"
            );
            b
        })
        .collect();
    assert_eq!(back, want_back, "{name}: datagrams back at the sender");
    for (id, s) in &peer_socks {
        let got: Vec<Vec<u8>> = datagrams(s).into_iter().map(|(_, b)| b).collect();
        if actions.contains(Actions::BROADCAST) {
            let mut want = msg.clone().expect("BROADCAST has a msg");
            want.resize(want.len() + len, 0);
            assert_eq!(got, vec![want], "{name}: the append at peer {id}");
        } else {
            assert!(got.is_empty(), "{name}: peer {id} got {got:?}");
        }
    }

    // Disable answers the registers as the handler left them, with the enable flag clear.
    let mut r = dp.disable();
    assert_eq!(r.enabled, 0, "{name}: disabled");
    r.enabled = after.enabled;
    assert_eq!(r, after, "{name}: registers from disable");
    let mut rest = Vec::new();
    dp.drain(&mut rest);
    assert!(rest.is_empty(), "{name}: nothing after disable");
}

#[test]
fn udp_handler_vectors() {
    let v = load();
    let group_id = u32::try_from(u64_of(&v, "group_id_default")).expect("group id");
    let cases = v["cases"].as_array().expect("cases");
    assert!(cases.len() > 50, "the vector file has its cases");
    for case in cases {
        run_case(case, group_id);
    }
}
