#!/usr/bin/env python3
"""Writes handler.json and wire.json beside this file.

Every expectation below is written by hand from the paper's Figure 4 and the rules of
docs/interfaces.md §2 (see the comment of each case); nothing here runs the C or Rust code.
The only computation is the wire encoding of named header fields into hex, done with Python's
`struct` (independent of both the C `fp_write` and the Rust `Header::encode`, which the test
compares against it). Re-run after editing: `python3 vectors/gen_vectors.py`.
"""
import json
import os
import struct

MAGIC = 0x4E525657
TYPES = {"CLIENT_REQUEST": 1, "APPEND": 2, "ACK": 3, "REJECT": 4, "RETX_REQ": 5, "CLIENT_REPLY": 6}
HALTS = {"NONE": 0, "TERM_MISMATCH": 1, "LOG_MISMATCH": 2, "REJECT_RECEIVED": 3,
         "RETX_EXHAUSTED": 4, "UNKNOWN_PEER": 5}
HDR_FMT = "<IBBHIHHQQQQQQ"
assert struct.calcsize(HDR_FMT) == 64
HDR_FIELDS = ["magic", "version", "type", "flags", "group_id", "len", "reserved",
              "term", "from", "index", "log_term", "commit", "seq"]
F_BLIND_WRITE, F_HEARTBEAT, F_READ = 1, 2, 4
R_DEFER_ACK = 1
GROUP = 7


def hdr(type_, **kw):
    h = {"magic": MAGIC, "version": 1, "type": type_, "flags": 0, "group_id": GROUP, "len": 0,
         "reserved": 0, "term": 0, "from": 0, "index": 0, "log_term": 0, "commit": 0, "seq": 0}
    for k, v in kw.items():
        k = "from" if k == "from_" else k
        assert k in h, k
        h[k] = v
    return h


def hex_of(h):
    t = h["type"]
    t = TYPES[t] if isinstance(t, str) else t
    vals = [h[f] if f != "type" else t for f in HDR_FIELDS]
    return struct.pack(HDR_FMT, *vals).hex()


def with_hex(h):
    return {"fields": h, "hex": hex_of(h)}


def regs(**kw):
    r = {"self_id": 0, "leader_id": 0, "group_id": GROUP, "term": 0, "last_index": 0,
         "last_term": 0, "commit_index": 0, "term_start_index": 0, "ids": [0] * 8,
         "match_index": [0] * 8, "n_nodes": 0, "quorum": 0, "enabled": 1, "is_leader": 0,
         "flags": 0, "halt_reason": 0, "gap_count": 0, "retx_requests": 0}
    for k, v in kw.items():
        assert k in r, k
        if k in ("ids", "match_index"):
            v = list(v) + [0] * (8 - len(v))
        r[k] = v
    return r


def upd(r, **kw):
    """registers_after = registers_before with these fields changed (written by hand)."""
    out = json.loads(json.dumps(r))
    for k, v in kw.items():
        assert k in out, k
        if k in ("ids", "match_index"):
            v = list(v) + [0] * (8 - len(v))
        out[k] = v
    return out


# Standard states. Leader of a 3-voter group: self 1, peers 2 and 3, term 5, log ends at
# (10, 5), commit 8; match [10, 8, 7] (quorum-th largest = 8 = commit, consistent).
LEADER3 = regs(self_id=1, leader_id=1, term=5, last_index=10, last_term=5, commit_index=8,
               term_start_index=6, ids=[1, 2, 3], match_index=[10, 8, 7], n_nodes=3, quorum=2,
               is_leader=1)
# Follower 2 of the same group.
FOLLOWER3 = regs(self_id=2, leader_id=1, term=5, last_index=10, last_term=5, commit_index=8,
                 term_start_index=6, ids=[1, 2, 3], n_nodes=3, quorum=2)
# Leader of a 5-voter group, term 9, last entry (10, 8) from the previous term, commit 10,
# nothing of term 9 yet (term_start_index 11).
LEADER5 = regs(self_id=1, leader_id=1, term=9, last_index=10, last_term=8, commit_index=10,
               term_start_index=11, ids=[1, 2, 3, 4, 5], match_index=[10, 10, 10, 9, 10],
               n_nodes=5, quorum=3, is_leader=1)
# Leader of a 5-voter group with acks in flight: match [20, 18, 12, 11, 10], commit 12.
LEADER5B = regs(self_id=1, leader_id=1, term=3, last_index=20, last_term=3, commit_index=12,
                term_start_index=2, ids=[1, 2, 3, 4, 5], match_index=[20, 18, 12, 11, 10],
                n_nodes=5, quorum=3, is_leader=1)
# Leader of a 1-voter group.
LEADER1 = regs(self_id=1, leader_id=1, term=5, last_index=10, last_term=5, commit_index=10,
               term_start_index=6, ids=[1], match_index=[10], n_nodes=1, quorum=1, is_leader=1)

NO_OUT = {"entry_index": 0, "entry_term": 0, "commit_index": 0, "reply_index": 0}


def out(**kw):
    o = dict(NO_OUT)
    o.update(kw)
    return o


cases = []


def case(name, description, before, inp, actions, after, halt="NONE", out_fields=None, msg=None):
    assert name not in [c["name"] for c in cases], name
    if "REPLY" in actions or "BROADCAST" in actions:
        assert msg is not None, name
    else:
        assert msg is None, name
    if halt != "NONE":
        assert "HALT" in actions and after["enabled"] == 0 and after["halt_reason"] == HALTS[halt]
    cases.append({
        "name": name,
        "description": description,
        "registers_before": before,
        "input": with_hex(inp),
        "expected": {
            "actions": actions,
            "halt_reason": halt,
            "out": out_fields or dict(NO_OUT),
            "msg": with_hex(msg) if msg is not None else None,
        },
        "registers_after": after,
    })


APP_OK = dict(term=5, from_=1, index=10, log_term=5, commit=8, flags=F_BLIND_WRITE, len=16, seq=42)

# ---- gates -----------------------------------------------------------------------------------
b = upd(LEADER3, enabled=0)
case("disabled_leader_client_request", "ACC_ENABLE clear: everything goes to the host, no state change.",
     b, hdr("CLIENT_REQUEST", from_=1001, seq=1, len=8), ["TO_HOST"], b)
b = upd(FOLLOWER3, enabled=0)
case("disabled_follower_append", "A follower with acceleration off passes a valid append to the host.",
     b, hdr("APPEND", **APP_OK), ["TO_HOST"], b)
b = upd(LEADER3, enabled=0, halt_reason=3)
case("disabled_after_halt_ack", "A halted leader (enabled 0, halt_reason kept) sends a quorum-completing ack to the host.",
     b, hdr("ACK", term=5, from_=2, index=10), ["TO_HOST"], b)
case("wrong_group_client_request", "A client request of group 8 at the leader of group 7 goes to the host.",
     LEADER3, hdr("CLIENT_REQUEST", group_id=8, from_=1001, seq=1, len=8), ["TO_HOST"], LEADER3)
case("wrong_group_append", "An append of group 8 at a follower of group 7 goes to the host untouched (no halt).",
     FOLLOWER3, hdr("APPEND", group_id=8, **APP_OK), ["TO_HOST"], FOLLOWER3)
case("wrong_group_ack", "An ack of group 0 at the leader of group 7 goes to the host.",
     LEADER3, hdr("ACK", group_id=0, term=5, from_=2, index=10), ["TO_HOST"], LEADER3)

# ---- client request (Fig. 4 l.2-12) -------------------------------------------------------------
case("client_request_leader_3",
     "l.3-10: prev = (10, 5); last becomes (11, 5); self match 11; APPEND after (10, 5) with commit 8 to all but self. "
     "Match [11, 8, 7]: 2nd largest is 8 = commit, nothing commits.",
     LEADER3, hdr("CLIENT_REQUEST", flags=F_BLIND_WRITE, from_=1001, seq=42, len=16),
     ["RING_ENTRY", "BROADCAST"], upd(LEADER3, last_index=11, match_index=[11, 8, 7]),
     out_fields=out(entry_index=11, entry_term=5),
     msg=hdr("APPEND", flags=F_BLIND_WRITE, len=16, term=5, from_=1, index=10, log_term=5, commit=8, seq=42))
case("client_request_leader_5_new_term",
     "5 voters, first entry of term 9 after an entry of term 8: APPEND carries prev (10, 8); last becomes (11, 9). "
     "Match [11, 10, 10, 9, 10]: 3rd largest 10 = commit, nothing commits.",
     LEADER5, hdr("CLIENT_REQUEST", from_=2000, seq=7, len=100),
     ["RING_ENTRY", "BROADCAST"], upd(LEADER5, last_index=11, last_term=9, match_index=[11, 10, 10, 9, 10]),
     out_fields=out(entry_index=11, entry_term=9),
     msg=hdr("APPEND", len=100, term=9, from_=1, index=10, log_term=8, commit=10, seq=7))
case("client_request_single_node_commits",
     "1 voter, quorum 1: the self match (11) alone is a quorum, so the entry commits at once "
     "(RING_COMMIT, CLIENT_REPLY at 11). The APPEND (sent to nobody) carries the commit index from before (10).",
     LEADER1, hdr("CLIENT_REQUEST", flags=F_BLIND_WRITE, from_=1001, seq=5, len=4),
     ["RING_ENTRY", "RING_COMMIT", "BROADCAST", "CLIENT_REPLY"],
     upd(LEADER1, last_index=11, commit_index=11, match_index=[11]),
     out_fields=out(entry_index=11, entry_term=5, commit_index=11, reply_index=11),
     msg=hdr("APPEND", flags=F_BLIND_WRITE, len=4, term=5, from_=1, index=10, log_term=5, commit=10, seq=5))
case("client_request_heartbeat",
     "An empty heartbeat request (FP_F_HEARTBEAT, len 0) from the leader's own idle loop is an entry like any other; flags are copied.",
     LEADER3, hdr("CLIENT_REQUEST", flags=F_HEARTBEAT, from_=0, seq=0, len=0),
     ["RING_ENTRY", "BROADCAST"], upd(LEADER3, last_index=11, match_index=[11, 8, 7]),
     out_fields=out(entry_index=11, entry_term=5),
     msg=hdr("APPEND", flags=F_HEARTBEAT, len=0, term=5, from_=1, index=10, log_term=5, commit=8, seq=0))
b = upd(LEADER3, flags=R_DEFER_ACK)
case("client_request_defer_ack",
     "fsync durability (FP_R_DEFER_ACK): the leader's own match waits for its self-ack after persisting, so match stays [10, 8, 7].",
     b, hdr("CLIENT_REQUEST", flags=F_BLIND_WRITE, from_=1001, seq=43, len=16),
     ["RING_ENTRY", "BROADCAST"], upd(b, last_index=11),
     out_fields=out(entry_index=11, entry_term=5),
     msg=hdr("APPEND", flags=F_BLIND_WRITE, len=16, term=5, from_=1, index=10, log_term=5, commit=8, seq=43))
b = upd(LEADER1, flags=R_DEFER_ACK)
case("client_request_single_node_defer_ack",
     "1 voter with FP_R_DEFER_ACK: nothing commits until the self-ack after fsync.",
     b, hdr("CLIENT_REQUEST", from_=1001, seq=6, len=4),
     ["RING_ENTRY", "BROADCAST"], upd(b, last_index=11),
     out_fields=out(entry_index=11, entry_term=5),
     msg=hdr("APPEND", len=4, term=5, from_=1, index=10, log_term=5, commit=10, seq=6))
case("client_request_read_at_leader",
     "A client's read (FP_F_READ) is not ordered by the leader's handler: the host serves it, "
     "reads batched behind one entry (issue 13). Registers untouched, no ring entry, no APPEND.",
     LEADER3, hdr("CLIENT_REQUEST", flags=F_READ, from_=1001, seq=44, len=16), ["TO_HOST"], LEADER3)
case("client_request_at_follower", "l.11-12: not the leader, so software answers (redirect).",
     FOLLOWER3, hdr("CLIENT_REQUEST", from_=1001, seq=1, len=8), ["TO_HOST"], FOLLOWER3)
b = upd(LEADER3, self_id=4, leader_id=4)
case("client_request_leader_not_a_voter",
     "Decision: a leader whose id is not among the voters replicates but does not count itself (Raft), so no match changes.",
     b, hdr("CLIENT_REQUEST", from_=1001, seq=9, len=1),
     ["RING_ENTRY", "BROADCAST"], upd(b, last_index=11),
     out_fields=out(entry_index=11, entry_term=5),
     msg=hdr("APPEND", len=1, term=5, from_=4, index=10, log_term=5, commit=8, seq=9))

# ---- append at a follower (Fig. 4 l.15-30) ------------------------------------------------------
ACK11 = hdr("ACK", term=5, from_=2, index=11)
case("append_ok",
     "l.16-28: same term, prev (10, 5) is our tail: append 11, commit min(8, 11) = 8 unchanged, ack index 11.",
     FOLLOWER3, hdr("APPEND", **APP_OK), ["RING_ENTRY", "REPLY"], upd(FOLLOWER3, last_index=11),
     out_fields=out(entry_index=11, entry_term=5), msg=ACK11)
case("append_commit_update",
     "l.23: leader commit 10 > our 8 and <= our new last 11: commit becomes 10.",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, commit=10)), ["RING_ENTRY", "RING_COMMIT", "REPLY"],
     upd(FOLLOWER3, last_index=11, commit_index=10),
     out_fields=out(entry_index=11, entry_term=5, commit_index=10), msg=ACK11)
case("append_commit_capped",
     "Leader commit 50 is capped at our last index 11 (Raft: min(leaderCommit, index of last new entry)).",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, commit=50)), ["RING_ENTRY", "RING_COMMIT", "REPLY"],
     upd(FOLLOWER3, last_index=11, commit_index=11),
     out_fields=out(entry_index=11, entry_term=5, commit_index=11), msg=ACK11)
case("append_commit_lower_ignored",
     "A leader commit (5) below ours (8) never lowers the commit index.",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, commit=5)), ["RING_ENTRY", "REPLY"],
     upd(FOLLOWER3, last_index=11), out_fields=out(entry_index=11, entry_term=5), msg=ACK11)
b = upd(FOLLOWER3, flags=R_DEFER_ACK)
case("append_defer_ack_no_reply",
     "FP_R_DEFER_ACK: append and commit (9) but no ACK; the host acks after persisting.",
     b, hdr("APPEND", **dict(APP_OK, commit=9)), ["RING_ENTRY", "RING_COMMIT"],
     upd(b, last_index=11, commit_index=9), out_fields=out(entry_index=11, entry_term=5, commit_index=9))
b = upd(FOLLOWER3, gap_count=5, retx_requests=3)
case("append_resets_gap_counters", "Progress (an append at the tail) resets gap_count and retx_requests.",
     b, hdr("APPEND", **APP_OK), ["RING_ENTRY", "REPLY"],
     upd(b, last_index=11, gap_count=0, retx_requests=0),
     out_fields=out(entry_index=11, entry_term=5), msg=ACK11)
case("append_heartbeat", "An empty heartbeat entry (FP_F_HEARTBEAT, len 0) is appended like any other.",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, flags=F_HEARTBEAT, len=0, seq=0, commit=9)),
     ["RING_ENTRY", "RING_COMMIT", "REPLY"], upd(FOLLOWER3, last_index=11, commit_index=9),
     out_fields=out(entry_index=11, entry_term=5, commit_index=9), msg=ACK11)
b = upd(FOLLOWER3, term=7, last_index=30, last_term=6, commit_index=30)
case("append_first_of_new_term",
     "A follower whose log ends with an entry of term 6 appends the first entry of term 7 after prev (30, 6).",
     b, hdr("APPEND", term=7, from_=1, index=30, log_term=6, commit=30, len=3, seq=1),
     ["RING_ENTRY", "REPLY"], upd(b, last_index=31, last_term=7),
     out_fields=out(entry_index=31, entry_term=7), msg=hdr("ACK", term=7, from_=2, index=31))
RETX = hdr("RETX_REQ", term=5, from_=2, index=10, log_term=5)
case("append_gap_first_request",
     "l.19-20: prev 12 > last 10, a gap: first gap packet (gap_count 1) sends RETX_REQ with our tail (10, 5) and drops.",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, index=12)), ["REPLY", "DROP"],
     upd(FOLLOWER3, gap_count=1, retx_requests=1), msg=RETX)
b = upd(FOLLOWER3, gap_count=1, retx_requests=1)
case("append_gap_rate_limited", "Second gap packet (gap_count 2: not 1, not a multiple of 8): drop without a request.",
     b, hdr("APPEND", **dict(APP_OK, index=11)), ["DROP"], upd(b, gap_count=2))
b = upd(FOLLOWER3, gap_count=3, retx_requests=1)
case("append_gap_rate_limited_4th", "gap_count 4: neither 1 nor a multiple of FP_RETX_EVERY (8): drop without a request.",
     b, hdr("APPEND", **dict(APP_OK, index=12)), ["DROP"], upd(b, gap_count=4))
b = upd(FOLLOWER3, gap_count=15, retx_requests=2)
case("append_gap_16th", "gap_count 16 (a multiple of 8): a third request.",
     b, hdr("APPEND", **dict(APP_OK, index=20)), ["REPLY", "DROP"], upd(b, gap_count=16, retx_requests=3), msg=RETX)
b = upd(FOLLOWER3, gap_count=7, retx_requests=1)
case("append_gap_every_8th", "gap_count reaches 8 (a multiple of FP_RETX_EVERY): another RETX_REQ.",
     b, hdr("APPEND", **dict(APP_OK, index=13)), ["REPLY", "DROP"], upd(b, gap_count=8, retx_requests=2), msg=RETX)
b = upd(FOLLOWER3, gap_count=119, retx_requests=15)
case("append_gap_last_request", "gap_count 120 (multiple of 8) with 15 requests sent: the 16th and last request.",
     b, hdr("APPEND", **dict(APP_OK, index=14)), ["REPLY", "DROP"], upd(b, gap_count=120, retx_requests=16), msg=RETX)
b = upd(FOLLOWER3, gap_count=120, retx_requests=16)
case("append_gap_exhausted_halt",
     "16 requests sent without progress (FP_MAX_RETX_REQUESTS): the next gap packet halts (RETX_EXHAUSTED) and is dropped.",
     b, hdr("APPEND", **dict(APP_OK, index=14)), ["DROP", "HALT"],
     upd(b, gap_count=121, enabled=0, halt_reason=4), halt="RETX_EXHAUSTED")
case("append_duplicate", "l.21-22: prev 9 < last 10, already have it (duplicate): drop silently.",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, index=9)), ["DROP"], FOLLOWER3)
case("append_duplicate_old", "A very old duplicate (prev (3, 2)) is dropped too, whatever its prev term.",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, index=3, log_term=2)), ["DROP"], FOLLOWER3)
case("append_log_mismatch", "l.18: prev index 10 is our tail but prev term 4 != our last term 5: halt, software repairs.",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, log_term=4)), ["TO_HOST", "HALT"],
     upd(FOLLOWER3, enabled=0, halt_reason=2), halt="LOG_MISMATCH")
case("append_term_higher", "l.17: append of term 6 at a follower of term 5: halt, software handles the new term.",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, term=6)), ["TO_HOST", "HALT"],
     upd(FOLLOWER3, enabled=0, halt_reason=1), halt="TERM_MISMATCH")
case("append_term_lower", "l.17: append of term 4 from a deposed leader: halt, software rejects it (no reply from the handler).",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, term=4)), ["TO_HOST", "HALT"],
     upd(FOLLOWER3, enabled=0, halt_reason=1), halt="TERM_MISMATCH")
case("append_term_mismatch_before_gap", "The term check comes first: a gap packet of another term halts with TERM_MISMATCH.",
     FOLLOWER3, hdr("APPEND", **dict(APP_OK, term=6, index=15)), ["TO_HOST", "HALT"],
     upd(FOLLOWER3, enabled=0, halt_reason=1), halt="TERM_MISMATCH")
case("append_at_leader", "l.16: an append reaching a leader means another leader exists: halt (TERM_MISMATCH).",
     LEADER3, hdr("APPEND", **dict(APP_OK, from_=2)), ["TO_HOST", "HALT"],
     upd(LEADER3, enabled=0, halt_reason=1), halt="TERM_MISMATCH")

# ---- ack at the leader (Fig. 4 l.33-43) ---------------------------------------------------------
case("ack_advances_match_no_commit",
     "l.35-36: follower 3 acks 8 > match 7: match [10, 8, 8]; 2nd largest 8 = commit, nothing commits: taken, nothing to send (MATCHED).",
     LEADER3, hdr("ACK", term=5, from_=3, index=8), ["MATCHED"], upd(LEADER3, match_index=[10, 8, 8]))
case("ack_completes_quorum_3",
     "l.37-47: follower 2 acks 10: match [10, 10, 7], quorum 2 reached at 10 > commit 8: commit 10, client reply for 10.",
     LEADER3, hdr("ACK", term=5, from_=2, index=10), ["RING_COMMIT", "CLIENT_REPLY"],
     upd(LEADER3, match_index=[10, 10, 7], commit_index=10), out_fields=out(commit_index=10, reply_index=10))
case("ack_completes_quorum_5_out_of_order",
     "5 voters: follower 4 acks 19 (out of order, ahead of the others): match [20, 18, 12, 19, 10]; "
     "the 3rd largest is 18 < 19, so commit 18, not the ack's index.",
     LEADER5B, hdr("ACK", term=3, from_=4, index=19), ["RING_COMMIT", "CLIENT_REPLY"],
     upd(LEADER5B, match_index=[20, 18, 12, 19, 10], commit_index=18), out_fields=out(commit_index=18, reply_index=18))
case("ack_5_no_quorum_yet",
     "5 voters: follower 5 acks 11: match [20, 18, 12, 11, 11]; 3rd largest 12 = commit: MATCHED.",
     LEADER5B, hdr("ACK", term=3, from_=5, index=11), ["MATCHED"], upd(LEADER5B, match_index=[20, 18, 12, 11, 11]))
case("ack_5_commits_ack_index",
     "5 voters: follower 3 acks 13: match [20, 18, 13, 11, 10]; 3rd largest 13: commit 13.",
     LEADER5B, hdr("ACK", term=3, from_=3, index=13), ["RING_COMMIT", "CLIENT_REPLY"],
     upd(LEADER5B, match_index=[20, 18, 13, 11, 10], commit_index=13), out_fields=out(commit_index=13, reply_index=13))
b = regs(self_id=1, leader_id=1, term=4, last_index=30, last_term=4, commit_index=20, term_start_index=15,
         ids=[1, 2, 3, 4, 5, 6, 7, 8], match_index=[30, 25, 25, 24, 20, 19, 18, 10], n_nodes=8, quorum=5,
         is_leader=1)
case("ack_8_voters",
     "8 voters, quorum 5: follower 5 acks 28: match [30, 25, 25, 24, 28, 19, 18, 10]; 5th largest 24: commit 24.",
     b, hdr("ACK", term=4, from_=5, index=28), ["RING_COMMIT", "CLIENT_REPLY"],
     upd(b, match_index=[30, 25, 25, 24, 28, 19, 18, 10], commit_index=24), out_fields=out(commit_index=24, reply_index=24))
case("ack_duplicate", "l.35: ack 8 from follower 2 whose match is already 8: duplicate, drop.",
     LEADER3, hdr("ACK", term=5, from_=2, index=8), ["DROP"], LEADER3)
case("ack_reordered_lower", "An older ack (5) arriving after a newer one (match 8): drop, match never decreases.",
     LEADER3, hdr("ACK", term=5, from_=2, index=5), ["DROP"], LEADER3)
case("ack_stale_term", "An ack of term 4 at a leader of term 5: stale, drop (no halt).",
     LEADER3, hdr("ACK", term=4, from_=2, index=10), ["DROP"], LEADER3)
case("ack_higher_term", "l.48-49: an ack of term 6: someone is ahead of us, halt.",
     LEADER3, hdr("ACK", term=6, from_=2, index=10), ["TO_HOST", "HALT"],
     upd(LEADER3, enabled=0, halt_reason=1), halt="TERM_MISMATCH")
case("ack_unknown_peer", "An ack from node 9, not a voter (e.g. a learner): software's business, no halt.",
     LEADER3, hdr("ACK", term=5, from_=9, index=10), ["TO_HOST"], LEADER3)
b = upd(LEADER3, ids=[1, 2, 3, 4])
case("ack_peer_beyond_n_nodes", "ids[3] = 4 but n_nodes = 3: node 4 is not a voter, the ack goes to the host.",
     b, hdr("ACK", term=5, from_=4, index=10), ["TO_HOST"], b)
case("ack_index_beyond_last", "An ack of index 11 > our last index 10 acknowledges what we never sent: halt.",
     LEADER3, hdr("ACK", term=5, from_=2, index=11), ["TO_HOST", "HALT"],
     upd(LEADER3, enabled=0, halt_reason=2), halt="LOG_MISMATCH")
b = upd(LEADER3, last_index=12, term_start_index=11, match_index=[12, 9, 8])
case("ack_below_term_start_no_commit",
     "Raft §5.4.2: follower 3 acks 10: match [12, 9, 10], a quorum holds 10, but 10 < term_start_index 11 "
     "(an entry of an earlier term): not committed by counting; MATCHED.",
     b, hdr("ACK", term=5, from_=3, index=10), ["MATCHED"], upd(b, match_index=[12, 9, 10]))
case("ack_at_term_start_commits",
     "Follower 2 acks 11: match [12, 11, 8]; 11 >= term_start_index 11: commit 11 (and with it 9 and 10).",
     b, hdr("ACK", term=5, from_=2, index=11), ["RING_COMMIT", "CLIENT_REPLY"],
     upd(b, match_index=[12, 11, 8], commit_index=11), out_fields=out(commit_index=11, reply_index=11))
b = upd(LEADER3, flags=R_DEFER_ACK, last_index=11, match_index=[10, 11, 7], commit_index=10)
case("ack_self_fsync_commits",
     "fsync durability: the leader's host persisted up to 11 and sends itself an ack (from = self): "
     "match [11, 11, 7]: commit 11.",
     b, hdr("ACK", term=5, from_=1, index=11), ["RING_COMMIT", "CLIENT_REPLY"],
     upd(b, match_index=[11, 11, 7], commit_index=11), out_fields=out(commit_index=11, reply_index=11))
b = upd(LEADER3, flags=R_DEFER_ACK, last_index=11, match_index=[9, 8, 8], commit_index=8)
case("ack_self_fsync_no_commit",
     "Self-ack of 10 with followers at 8: match [10, 8, 8]; 2nd largest 8 = commit: MATCHED.",
     b, hdr("ACK", term=5, from_=1, index=10), ["MATCHED"], upd(b, match_index=[10, 8, 8]))
case("ack_at_follower", "A follower passes any ack to the host.",
     FOLLOWER3, hdr("ACK", term=5, from_=3, index=10), ["TO_HOST"], FOLLOWER3)

# ---- reject, retransmission request, client reply, unknown --------------------------------------
REJ = hdr("REJECT", term=5, from_=2, index=7, log_term=4)
case("reject_at_leader", "l.48-49: a follower rejected an append: halt, software repairs its log.",
     LEADER3, REJ, ["TO_HOST", "HALT"], upd(LEADER3, enabled=0, halt_reason=3), halt="REJECT_RECEIVED")
case("reject_at_follower", "A reject at a follower is software's business.", FOLLOWER3, REJ, ["TO_HOST"], FOLLOWER3)
RTX = hdr("RETX_REQ", term=5, from_=2, index=9, log_term=5)
case("retx_req_at_leader", "The leader's host retransmits from its log; the handler changes nothing.",
     LEADER3, RTX, ["TO_HOST"], LEADER3)
case("retx_req_at_follower", "A retransmission request at a follower goes to the host.", FOLLOWER3, RTX, ["TO_HOST"], FOLLOWER3)
CR = hdr("CLIENT_REPLY", term=5, from_=1, index=10, commit=10, seq=42, len=5)
case("client_reply_at_leader", "A client reply is not for the handler.", LEADER3, CR, ["TO_HOST"], LEADER3)
case("client_reply_at_follower", "A client reply is not for the handler.", FOLLOWER3, CR, ["TO_HOST"], FOLLOWER3)
case("unknown_type_at_leader",
     "Type 7 (fp_parse would already refuse it; the handler must still be safe): to the host.",
     LEADER3, hdr(7, term=5, from_=2, index=10), ["TO_HOST"], LEADER3)
case("type_zero_at_follower", "Type 0: to the host.", FOLLOWER3, hdr(0, **APP_OK), ["TO_HOST"], FOLLOWER3)

# ---- wire (fp_parse) cases -------------------------------------------------------------------
wire = []


def wcase(name, description, buf, expect):
    wire.append({"name": name, "description": description, "hex": buf.hex(), "expected": expect})


def raw(h):
    return bytes.fromhex(hex_of(h))


def ok(h, payload=b""):
    return {"ok": {"header": h, "payload": payload.hex()}}


h = hdr("ACK", term=5, from_=2, index=11)
wcase("valid_ack", "A 64-byte ACK without payload.", raw(h), ok(h))
h = hdr("CLIENT_REQUEST", flags=F_BLIND_WRITE, from_=1001, seq=42, len=5)
wcase("valid_client_request_with_payload", "CLIENT_REQUEST with a 5-byte payload.", raw(h) + b"hello", ok(h, b"hello"))
h = hdr("APPEND", term=5, from_=1, index=10, log_term=5, commit=8, len=2, seq=3)
wcase("valid_trailing_bytes", "len 2 with 4 bytes after the header: the payload is the first 2, the rest ignored.",
      raw(h) + b"\x01\x02\x03\x04", ok(h, b"\x01\x02"))
h = hdr("CLIENT_REPLY", term=1, from_=1, index=1, commit=1, len=1400, seq=1)
wcase("valid_max_payload", "len = FP_MAX_PAYLOAD (1400) with 1400 payload bytes.", raw(h) + bytes(range(256)) * 5 + bytes(120),
      ok(h, bytes(range(256)) * 5 + bytes(120)))
M = 2**64 - 1
h = hdr("RETX_REQ", flags=0xFFFF, group_id=0xFFFFFFFF, term=M, from_=M, index=M, log_term=M, commit=M, seq=M)
wcase("valid_all_ones", "Every field at its maximum (little-endian throughout).", raw(h), ok(h))
h = hdr("REJECT", group_id=0x01020304, term=0x1122334455667788, from_=2, index=0x0A0B0C0D, log_term=3, commit=0, seq=0)
wcase("valid_byte_order", "Distinct bytes per field to pin the little-endian order.", raw(h), ok(h))
wcase("short_empty", "An empty buffer.", b"", {"error": "SHORT"})
wcase("short_63", "63 bytes: one short of a header.", raw(hdr("ACK", term=5))[:63], {"error": "SHORT"})
wcase("bad_magic", "Magic 0 ...", raw(hdr("ACK", magic=0)), {"error": "MAGIC"})
wcase("bad_magic_big_endian", "Magic written big-endian (bytes N R V W).", raw(hdr("ACK", magic=0x5756524E)), {"error": "MAGIC"})
wcase("bad_version_2", "Version 2.", raw(hdr("ACK", version=2)), {"error": "VERSION"})
wcase("bad_version_0", "Version 0.", raw(hdr("ACK", version=0)), {"error": "VERSION"})
wcase("bad_type_0", "Type 0.", raw(hdr(0)), {"error": "TYPE"})
wcase("bad_type_7", "Type 7.", raw(hdr(7)), {"error": "TYPE"})
wcase("len_too_large", "len 1401 > FP_MAX_PAYLOAD, even with 1401 bytes present.",
      raw(hdr("CLIENT_REQUEST", len=1401)) + bytes(1401), {"error": "LEN"})
wcase("len_beyond_buffer", "len 10 but only 5 payload bytes.", raw(hdr("CLIENT_REQUEST", len=10)) + bytes(5), {"error": "LEN"})
wcase("len_on_bare_header", "len 1 on a bare 64-byte header.", raw(hdr("APPEND", len=1)), {"error": "LEN"})
wcase("reserved_nonzero", "reserved = 1.", raw(hdr("ACK", reserved=1)), {"error": "RESERVED"})
wcase("reserved_high_byte", "reserved = 0x8000.", raw(hdr("ACK", reserved=0x8000)), {"error": "RESERVED"})
wcase("order_short_before_magic", "A 10-byte garbage buffer is SHORT, not MAGIC.", b"\xff" * 10, {"error": "SHORT"})
wcase("order_magic_before_version", "Bad magic and bad version: MAGIC.", raw(hdr("ACK", magic=1, version=9)), {"error": "MAGIC"})
wcase("order_version_before_type", "Bad version and bad type: VERSION.", raw(hdr(9, version=9)), {"error": "VERSION"})
wcase("order_type_before_len", "Bad type and bad len: TYPE.", raw(hdr(9, len=2000)), {"error": "TYPE"})
wcase("order_len_before_reserved", "len beyond the buffer and reserved nonzero: LEN.",
      raw(hdr("APPEND", len=3, reserved=5)), {"error": "LEN"})

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "handler.json"), "w") as f:
    json.dump({"format": 1, "group_id_default": GROUP, "cases": cases}, f, indent=1)
    f.write("\n")
with open(os.path.join(here, "wire.json"), "w") as f:
    json.dump({"format": 1, "cases": wire}, f, indent=1)
    f.write("\n")
print(f"{len(cases)} handler cases, {len(wire)} wire cases")
