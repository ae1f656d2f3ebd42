//! Runs the byte-level test vectors (`vectors/*.json`, format in `vectors/README.md`) through
//! the C handler and both codecs (Rust `Header::encode`/`decode`, C `fp_write`/`fp_parse`).

use serde_json::Value;
use waverunner_fastpath::{
    handle, parse_c, write_c, Actions, HaltReason, Header, MsgType, Registers, WireError, MAX_NODES,
};

fn load(name: &str) -> Value {
    let path = format!("{}/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("missing or non-integer field {key:?} in {v}"))
}

fn u32_of(v: &Value, key: &str) -> u32 {
    u32::try_from(u64_of(v, key)).unwrap_or_else(|_| panic!("{key} does not fit u32"))
}

fn u16_of(v: &Value, key: &str) -> u16 {
    u16::try_from(u64_of(v, key)).unwrap_or_else(|_| panic!("{key} does not fit u16"))
}

fn u8_of(v: &Value, key: &str) -> u8 {
    u8::try_from(u64_of(v, key)).unwrap_or_else(|_| panic!("{key} does not fit u8"))
}

fn hex_decode(s: &str) -> Vec<u8> {
    assert_eq!(s.len() % 2, 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn header_of(v: &Value) -> Header {
    let kind = match &v["type"] {
        Value::String(s) => MsgType::from_name(s).unwrap_or_else(|| panic!("type {s}")) as u8,
        n => u8::try_from(n.as_u64().expect("type is a name or a number")).expect("type u8"),
    };
    Header {
        magic: u32_of(v, "magic"),
        version: u8_of(v, "version"),
        kind,
        flags: u16_of(v, "flags"),
        group_id: u32_of(v, "group_id"),
        len: u16_of(v, "len"),
        reserved: u16_of(v, "reserved"),
        term: u64_of(v, "term"),
        from: u64_of(v, "from"),
        index: u64_of(v, "index"),
        log_term: u64_of(v, "log_term"),
        commit: u64_of(v, "commit"),
        seq: u64_of(v, "seq"),
    }
}

fn array8(v: &Value, key: &str) -> [u64; MAX_NODES] {
    let a = v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is not an array"));
    assert_eq!(a.len(), MAX_NODES, "{key} must have {MAX_NODES} entries");
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

/// The named header must encode (Rust and C) to exactly the vector's hex.
fn check_header_hex(ctx: &str, fields: &Value, hex: &str) -> Header {
    let h = header_of(fields);
    let mut rust = Vec::new();
    h.encode(&[], &mut rust);
    assert_eq!(
        hex_encode(&rust),
        hex,
        "{ctx}: Rust encoder differs from the vector hex"
    );
    assert_eq!(
        hex_encode(&write_c(&h)),
        hex,
        "{ctx}: C encoder differs from the vector hex"
    );
    // A header with a valid type and no payload claimed parses back to itself in both codecs.
    if h.msg_type().is_some() && h.len == 0 {
        let bytes = hex_decode(hex);
        assert_eq!(
            Header::decode(&bytes).map(|x| x.0),
            Ok(h),
            "{ctx}: Rust decode"
        );
        assert_eq!(parse_c(&bytes), Ok(h), "{ctx}: C parse");
    }
    h
}

#[test]
fn handler_vectors() {
    let doc = load("handler.json");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 40, "at least 40 handler vectors");
    let mut names = std::collections::HashSet::new();
    for c in cases {
        let name = c["name"].as_str().expect("name");
        assert!(names.insert(name), "duplicate vector name {name}");
        assert!(
            c["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{name}: description"
        );
        let mut regs = registers_of(&c["registers_before"]);
        let input = &c["input"];
        let hdr = check_header_hex(
            &format!("{name} input"),
            &input["fields"],
            input["hex"].as_str().expect("input hex"),
        );
        let exp = &c["expected"];

        let out = handle(&mut regs, &hdr);

        let mut want = Actions::NONE;
        for a in exp["actions"].as_array().expect("actions") {
            let a = a.as_str().expect("action name");
            want |= Actions::from_name(a).unwrap_or_else(|| panic!("{name}: unknown action {a}"));
        }
        assert_eq!(out.actions, want, "{name}: actions");
        let halt = exp["halt_reason"].as_str().expect("halt_reason");
        let want_halt = if halt == "NONE" {
            0
        } else {
            HaltReason::from_name(halt).unwrap_or_else(|| panic!("{name}: halt {halt}")) as u32
        };
        assert_eq!(out.halt_reason, want_halt, "{name}: out.halt_reason");
        let o = &exp["out"];
        assert_eq!(
            out.entry_index,
            u64_of(o, "entry_index"),
            "{name}: entry_index"
        );
        assert_eq!(
            out.entry_term,
            u64_of(o, "entry_term"),
            "{name}: entry_term"
        );
        assert_eq!(
            out.commit_index,
            u64_of(o, "commit_index"),
            "{name}: commit_index"
        );
        assert_eq!(
            out.reply_index,
            u64_of(o, "reply_index"),
            "{name}: reply_index"
        );
        match &exp["msg"] {
            Value::Null => assert_eq!(out.msg, Header::default(), "{name}: msg must stay zero"),
            m => {
                let hex = m["hex"].as_str().expect("msg hex");
                let want_msg = check_header_hex(&format!("{name} msg"), &m["fields"], hex);
                assert_eq!(out.msg, want_msg, "{name}: msg fields");
                assert_eq!(
                    hex_encode(&out.msg.to_bytes()),
                    hex,
                    "{name}: msg wire bytes"
                );
            }
        }
        assert_eq!(
            regs,
            registers_of(&c["registers_after"]),
            "{name}: registers_after"
        );
    }
}

#[test]
fn wire_vectors() {
    let doc = load("wire.json");
    let cases = doc["cases"].as_array().expect("cases");
    let mut seen_errors = std::collections::HashSet::new();
    for c in cases {
        let name = c["name"].as_str().expect("name");
        let buf = hex_decode(c["hex"].as_str().expect("hex"));
        let rust = Header::decode(&buf);
        let cres = parse_c(&buf);
        let exp = &c["expected"];
        if let Some(e) = exp.get("error") {
            let e = e.as_str().expect("error name");
            let want = WireError::ALL
                .into_iter()
                .find(|x| x.name() == e)
                .unwrap_or_else(|| panic!("{name}: unknown error {e}"));
            assert_eq!(rust.map(|x| x.0), Err(want), "{name}: Rust decode");
            assert_eq!(cres, Err(want), "{name}: C parse");
            seen_errors.insert(want);
        } else {
            let ok = &exp["ok"];
            let want = header_of(&ok["header"]);
            let payload = hex_decode(ok["payload"].as_str().expect("payload"));
            let (h, p) = rust.unwrap_or_else(|e| panic!("{name}: Rust decode failed: {e}"));
            assert_eq!(h, want, "{name}: Rust header");
            assert_eq!(p, &payload[..], "{name}: Rust payload");
            assert_eq!(cres, Ok(want), "{name}: C header");
            // Re-encoding gives back the header bytes and payload (trailing bytes dropped).
            let mut enc = Vec::new();
            h.encode(p, &mut enc);
            assert_eq!(enc, buf[..64 + payload.len()], "{name}: re-encode");
            assert_eq!(write_c(&h)[..], buf[..64], "{name}: C re-encode");
        }
    }
    assert_eq!(
        seen_errors.len(),
        WireError::ALL.len(),
        "every WireError has a vector"
    );
}
