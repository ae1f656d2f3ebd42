//! Property test: random registers and headers through the C handler, with the invariants of
//! docs/interfaces.md §2 checked after every step. No extra crates: a seeded xorshift PRNG.

use waverunner_fastpath::{
    handle, Actions, HaltReason, Header, MsgType, Output, Registers, MAGIC, MAX_NODES,
    MAX_RETX_REQUESTS, R_DEFER_ACK, VERSION,
};

/// xorshift64*: small, deterministic, good enough to spread test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// `base` moved by -2..=+2, not below 0.
    fn near(&mut self, base: u64) -> u64 {
        (base + self.below(5)).saturating_sub(2)
    }
}

fn random_registers(rng: &mut Rng) -> Registers {
    let mut r = Registers::default();
    let n = 1 + rng.below(MAX_NODES as u64) as usize;
    let voters: Vec<u64> = (0..n as u64).map(|i| 10 + i * 3).collect();
    r.set_voters(&voters);
    if rng.chance(5) {
        r.quorum = rng.below(n as u64 + 2) as u32; // misconfigured quorum
    }
    r.self_id = if rng.chance(95) {
        voters[rng.below(n as u64) as usize]
    } else {
        99
    };
    r.is_leader = rng.chance(50) as u32;
    r.leader_id = if r.is_leader != 0 {
        r.self_id
    } else {
        voters[0]
    };
    r.group_id = 1 + rng.below(2);
    r.term = 1 + rng.below(4);
    r.last_index = rng.below(30);
    r.last_term = if r.last_index == 0 {
        0
    } else {
        1 + rng.below(r.term)
    };
    r.commit_index = rng.below(r.last_index + 1);
    r.term_start_index = rng.below(r.last_index + 2);
    for m in &mut r.match_index[..n] {
        *m = rng.below(r.last_index + 1);
    }
    if let Some(s) = r.slot_of(r.self_id) {
        if r.is_leader != 0 && rng.chance(80) {
            r.match_index[s] = r.last_index;
        }
    }
    r.enabled = rng.chance(95) as u32;
    r.flags = if rng.chance(30) { R_DEFER_ACK } else { 0 };
    r.gap_count = if rng.chance(5) {
        u32::MAX - rng.below(2) as u32
    } else {
        rng.below(20) as u32
    };
    r.retx_requests = rng.below(u64::from(MAX_RETX_REQUESTS) + 2) as u32;
    r
}

fn random_header(rng: &mut Rng, r: &Registers) -> Header {
    let t = if rng.chance(95) {
        MsgType::ALL[rng.below(6) as usize] as u8
    } else {
        rng.below(256) as u8
    };
    let mut h = Header {
        magic: MAGIC,
        version: VERSION,
        kind: t,
        ..Header::default()
    };
    h.flags = rng.below(4) as u16;
    h.group_id = if rng.chance(95) {
        r.group_id as u32
    } else {
        rng.next() as u32
    };
    h.len = rng.below(1401) as u16;
    h.term = if rng.chance(80) {
        r.term
    } else {
        rng.near(r.term)
    };
    h.from = if rng.chance(85) && r.n_nodes > 0 {
        r.ids[rng.below(u64::from(r.n_nodes)) as usize]
    } else {
        rng.below(100)
    };
    h.index = if rng.chance(60) {
        r.last_index
    } else {
        rng.near(r.last_index)
    };
    h.log_term = if rng.chance(80) {
        r.last_term
    } else {
        rng.near(r.last_term)
    };
    h.commit = rng.near(r.last_index);
    h.seq = rng.next();
    if rng.chance(1) {
        // Extreme values must not break anything.
        h.index = u64::MAX;
        h.commit = u64::MAX;
        h.term = u64::MAX;
    }
    h
}

fn check(step: &str, before: &Registers, hdr: &Header, after: &Registers, out: &Output) {
    let a = out.actions;
    let ctx = || format!("{step}\n before {before:?}\n in {hdr:?}\n after {after:?}\n out {out:?}");

    // Only known action bits.
    let all = Actions::NAMED.iter().fold(0, |acc, (x, _)| acc | x.bits());
    assert_eq!(a.bits() & !all, 0, "unknown action bits: {}", ctx());

    // Exactly one disposition of the input: to the host, dropped, consumed onto the ring, or
    // taken into a match index.
    let to_host = a.contains(Actions::TO_HOST);
    let drop = a.contains(Actions::DROP);
    let ring = a.intersects(Actions::RING_ENTRY | Actions::RING_COMMIT);
    let matched = a.contains(Actions::MATCHED);
    assert_eq!(
        to_host as u8 + drop as u8 + ring as u8 + matched as u8,
        1,
        "exactly one disposition: {}",
        ctx()
    );
    if to_host {
        assert!(
            (a.bits() & !(Actions::TO_HOST | Actions::HALT).bits()) == 0,
            "{}",
            ctx()
        );
        if !a.contains(Actions::HALT) {
            assert_eq!(
                before,
                after,
                "TO_HOST without HALT changes nothing: {}",
                ctx()
            );
        }
    }
    if drop {
        assert!(
            (a.bits() & !(Actions::DROP | Actions::REPLY | Actions::HALT).bits()) == 0,
            "{}",
            ctx()
        );
    }
    // A matched ack moved its sender's match index, and nothing else: not the commit index.
    if matched {
        assert_eq!(a, Actions::MATCHED, "{}", ctx());
        assert!(
            after.match_index != before.match_index && after.commit_index == before.commit_index,
            "MATCHED moves a match index only: {}",
            ctx()
        );
    }

    // Disabled or foreign packets go to the host untouched.
    if before.enabled == 0 || u64::from(hdr.group_id) != before.group_id {
        assert_eq!(a, Actions::TO_HOST, "{}", ctx());
        assert_eq!(before, after, "{}", ctx());
    }

    // Halt <=> enabled cleared with a reason.
    if a.contains(Actions::HALT) {
        assert_eq!(after.enabled, 0, "{}", ctx());
        assert!(
            HaltReason::from_u32(after.halt_reason).is_some(),
            "{}",
            ctx()
        );
        assert_eq!(out.halt_reason, after.halt_reason, "{}", ctx());
        assert_ne!(before.enabled, 0, "{}", ctx());
    } else {
        assert_eq!(out.halt_reason, 0, "{}", ctx());
        assert_eq!(after.enabled, before.enabled, "{}", ctx());
        assert_eq!(after.halt_reason, before.halt_reason, "{}", ctx());
    }

    // Log: grows by at most one, exactly when RING_ENTRY, at the tail with the current term.
    assert!(after.last_index >= before.last_index, "{}", ctx());
    assert!(after.last_index - before.last_index <= 1, "{}", ctx());
    if a.contains(Actions::RING_ENTRY) {
        assert_eq!(after.last_index, before.last_index + 1, "{}", ctx());
        assert_eq!(out.entry_index, after.last_index, "{}", ctx());
        assert_eq!(out.entry_term, before.term, "{}", ctx());
        assert_eq!(after.last_term, before.term, "{}", ctx());
    } else {
        assert_eq!(after.last_index, before.last_index, "{}", ctx());
        assert_eq!(after.last_term, before.last_term, "{}", ctx());
        assert_eq!((out.entry_index, out.entry_term), (0, 0), "{}", ctx());
    }

    // Commit: never decreases, never passes the log, changes exactly with RING_COMMIT.
    assert!(after.commit_index >= before.commit_index, "{}", ctx());
    if before.commit_index <= before.last_index {
        assert!(after.commit_index <= after.last_index, "{}", ctx());
    }
    if a.contains(Actions::RING_COMMIT) {
        assert!(after.commit_index > before.commit_index, "{}", ctx());
        assert_eq!(out.commit_index, after.commit_index, "{}", ctx());
    } else {
        assert_eq!(after.commit_index, before.commit_index, "{}", ctx());
        assert_eq!(out.commit_index, 0, "{}", ctx());
    }
    if a.contains(Actions::CLIENT_REPLY) {
        assert!(a.contains(Actions::RING_COMMIT), "{}", ctx());
        assert_eq!(out.reply_index, after.commit_index, "{}", ctx());
    } else {
        assert_eq!(out.reply_index, 0, "{}", ctx());
    }

    // Leader commits only entries of its term, and only what a quorum holds.
    if before.is_leader != 0 && a.contains(Actions::RING_COMMIT) {
        let c = after.commit_index;
        assert!(c >= before.term_start_index, "{}", ctx());
        let n = (after.n_nodes as usize).min(MAX_NODES);
        let holders = after.match_index[..n].iter().filter(|&&m| m >= c).count();
        assert!(
            holders >= after.quorum as usize && after.quorum > 0,
            "{}",
            ctx()
        );
    }

    // Match indexes never decrease; at most one changes per step.
    let mut changed = 0;
    for i in 0..MAX_NODES {
        assert!(after.match_index[i] >= before.match_index[i], "{}", ctx());
        changed += (after.match_index[i] != before.match_index[i]) as u32;
    }
    assert!(changed <= 1, "{}", ctx());

    // Configuration registers are never written by the handler.
    assert_eq!(
        (after.self_id, after.leader_id, after.group_id, after.term),
        (
            before.self_id,
            before.leader_id,
            before.group_id,
            before.term
        ),
        "{}",
        ctx()
    );
    assert_eq!(
        (
            after.ids,
            after.n_nodes,
            after.quorum,
            after.is_leader,
            after.flags
        ),
        (
            before.ids,
            before.n_nodes,
            before.quorum,
            before.is_leader,
            before.flags
        ),
        "{}",
        ctx()
    );
    assert_eq!(after.term_start_index, before.term_start_index, "{}", ctx());

    // Outgoing messages: well-formed headers of our group and term, from us.
    if a.intersects(Actions::REPLY | Actions::BROADCAST) {
        assert!(
            !(a.contains(Actions::REPLY) && a.contains(Actions::BROADCAST)),
            "{}",
            ctx()
        );
        let m = &out.msg;
        assert_eq!(
            (m.magic, m.version, m.reserved),
            (MAGIC, VERSION, 0),
            "{}",
            ctx()
        );
        assert_eq!(u64::from(m.group_id), before.group_id, "{}", ctx());
        assert_eq!((m.term, m.from), (before.term, before.self_id), "{}", ctx());
        let want = if a.contains(Actions::BROADCAST) {
            MsgType::Append
        } else if a.contains(Actions::DROP) {
            MsgType::RetxReq
        } else {
            MsgType::Ack
        };
        assert_eq!(m.msg_type(), Some(want), "{}", ctx());
        if want != MsgType::Append {
            assert_eq!(m.len, 0, "{}", ctx());
        }
        let mut buf = Vec::new();
        m.encode(&vec![0; m.len as usize], &mut buf);
        if m.len <= waverunner_fastpath::MAX_PAYLOAD {
            assert_eq!(Header::decode(&buf).map(|x| x.0), Ok(*m), "{}", ctx());
        }
    } else {
        assert_eq!(out.msg, Header::default(), "{}", ctx());
    }

    // Follower gap bookkeeping: retransmission requests are bounded.
    if a.contains(Actions::REPLY) && a.contains(Actions::DROP) {
        assert!(after.retx_requests <= MAX_RETX_REQUESTS, "{}", ctx());
        assert_eq!(after.retx_requests, before.retx_requests + 1, "{}", ctx());
    }
}

#[test]
fn random_registers_and_headers_keep_the_invariants() {
    let mut rng = Rng(0x5741_5645_5255_4E52); // "WAVERUNR"
    let mut steps = 0u32;
    let mut seen = [0u32; Actions::NAMED.len()];
    for round in 0..1000 {
        let mut regs = random_registers(&mut rng);
        for i in 0..20 {
            let hdr = random_header(&mut rng, &regs);
            let before = regs;
            let out = handle(&mut regs, &hdr);
            check(
                &format!("round {round} step {i}"),
                &before,
                &hdr,
                &regs,
                &out,
            );
            for (k, (a, _)) in Actions::NAMED.iter().enumerate() {
                seen[k] += out.actions.contains(*a) as u32;
            }
            steps += 1;
            if regs.enabled == 0 && rng.chance(90) {
                // Software would take over; sometimes re-enable to keep exercising the path.
                regs.enabled = 1;
                regs.halt_reason = 0;
                regs.gap_count = 0;
                regs.retx_requests = 0;
            }
        }
    }
    assert_eq!(steps, 20_000);
    // The generator must reach every action often enough for the invariants to mean something.
    for (k, (_, name)) in Actions::NAMED.iter().enumerate() {
        assert!(seen[k] >= 100, "action {name} seen only {} times", seen[k]);
    }
    eprintln!("actions seen: {seen:?}");
}

#[test]
fn every_type_at_every_role_is_handled() {
    // Exhaustive over types 0..=255 and both roles, from a consistent state.
    for leader in [0, 1] {
        for t in 0..=255u8 {
            let mut r = Registers::default();
            r.set_voters(&[1, 2, 3]);
            r.self_id = if leader == 1 { 1 } else { 2 };
            r.is_leader = leader;
            r.enabled = 1;
            r.term = 2;
            r.last_index = 5;
            r.last_term = 2;
            let mut h = Header::of(MsgType::Ack);
            h.kind = t;
            h.term = 2;
            h.from = 3;
            h.index = 5;
            h.log_term = 2;
            let before = r;
            let out = handle(&mut r, &h);
            check(&format!("type {t} leader {leader}"), &before, &h, &r, &out);
            if MsgType::from_u8(t).is_none() {
                assert_eq!(out.actions, Actions::TO_HOST);
            }
        }
    }
}
