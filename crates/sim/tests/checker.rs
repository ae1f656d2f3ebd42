//! The checker must be able to fail: each invariant is fed a history that breaks it.

use waverunner_raft::{Entry, EntryKind};
use waverunner_sim::checker::{entry_hash, Checker};

fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
    Entry {
        term,
        index,
        kind: EntryKind::Normal,
        data: data.to_vec().into(),
    }
}

#[test]
fn two_leaders_in_one_term_violate_election_safety() {
    let mut c = Checker::default();
    c.on_leader(1, 1, 5);
    c.on_leader(2, 1, 5);
    assert!(c.violations.is_empty(), "the same leader twice is fine");
    c.on_leader(3, 2, 5);
    assert_eq!(c.violations.len(), 1);
    assert!(c.violations[0].contains("election safety"));
}

#[test]
fn different_entries_under_one_index_and_term_violate_log_matching() {
    let mut c = Checker::default();
    c.on_entries(1, 1, &[entry(3, 2, b"a")]);
    c.on_entries(2, 2, &[entry(3, 2, b"a"), entry(3, 3, b"b")]);
    assert!(c.violations.is_empty());
    c.on_entries(3, 3, &[entry(3, 2, b"c")]);
    assert!(c.violations[0].contains("log matching"));
}

#[test]
fn two_decisions_at_one_index_violate_state_machine_safety() {
    let mut c = Checker::default();
    c.on_decided(1, 1, 4, 2, entry_hash(EntryKind::Normal, b"x"), None);
    c.on_decided(2, 2, 4, 2, entry_hash(EntryKind::Normal, b"x"), None);
    assert!(c.violations.is_empty());
    c.on_decided(3, 3, 4, 3, entry_hash(EntryKind::Normal, b"y"), None);
    assert!(c.violations[0].contains("state-machine safety"));
}

#[test]
fn an_acknowledged_write_overwritten_later_is_reported_lost() {
    let mut c = Checker::default();
    c.on_ack(1, 77, 9, 4, entry_hash(EntryKind::Normal, b"w77"), true);
    c.on_decided(2, 2, 9, 5, entry_hash(EntryKind::Normal, b"other"), None);
    assert!(c
        .violations
        .iter()
        .any(|v| v.contains("acknowledged write 77")));
}

#[test]
fn an_ack_for_an_entry_other_than_the_decided_one_is_reported() {
    let mut c = Checker::default();
    c.on_decided(1, 1, 9, 5, entry_hash(EntryKind::Normal, b"other"), None);
    c.on_ack(2, 77, 9, 4, entry_hash(EntryKind::Normal, b"w77"), false);
    assert!(c.violations.iter().any(|v| v.contains("write 77")));
}

#[test]
fn a_host_reply_naming_an_entry_without_its_write_is_reported() {
    let mut c = Checker::default();
    let h = entry_hash(EntryKind::Normal, b"w77");
    c.on_decided(1, 1, 9, 5, h, Some(77));
    c.on_client_reply(2, 1, 77, 9);
    assert!(c.violations.is_empty(), "{:?}", c.violations);
    assert_eq!(c.acked().get(&77), Some(&(9, 5, h, false)));
    c.on_client_reply(3, 1, 78, 9);
    assert!(c.violations[0].contains("write 78"), "{:?}", c.violations);
    c.on_client_reply(4, 1, 79, 10);
    assert!(
        c.violations[1].contains("index 10"),
        "undecided: {:?}",
        c.violations
    );
}

#[test]
fn a_native_client_answered_twice_for_one_entry_is_reported() {
    let mut c = Checker::default();
    c.on_fast_answer(1, 1, 9);
    c.on_fast_answer(2, 1, 10);
    assert!(c.violations.is_empty());
    c.on_fast_answer(3, 2, 9);
    assert!(c.violations[0].contains("entry 9 a second time"));
}

#[test]
fn a_leader_missing_a_decided_entry_violates_leader_completeness() {
    let mut c = Checker::default();
    c.on_decided(1, 1, 1, 1, 11, None);
    c.on_decided(1, 1, 2, 1, 12, None);
    c.check_leader_complete(2, 3, 0, |i| (i == 1).then_some(1));
    assert!(c.violations[0].contains("leader completeness"));
    let mut ok = Checker::default();
    ok.on_decided(1, 1, 1, 1, 11, None);
    ok.check_leader_complete(2, 3, 1, |_| None);
    assert!(
        ok.violations.is_empty(),
        "entries under the snapshot are covered"
    );
}

#[test]
fn a_read_index_below_an_acknowledged_write_is_a_stale_read() {
    let mut c = Checker::default();
    let e = entry(4, 1, b"w");
    c.on_decided(1, 1, 4, 1, entry_hash(e.kind, &e.data), None);
    c.on_ack(2, 7, 4, 1, entry_hash(e.kind, &e.data), false);
    let floor = c.read_floor();
    assert_eq!(floor, 4);
    c.on_read_index(3, 2, 1, 4, floor);
    c.on_read_index(3, 2, 2, 9, floor);
    assert!(c.violations.is_empty(), "at or above the floor is fine");
    c.on_read_index(4, 3, 3, 3, floor);
    assert_eq!(c.violations.len(), 1);
    assert!(c.violations[0].contains("stale read"));
}

#[test]
fn replicas_with_different_states_at_one_index_violate_state_agreement() {
    let mut c = Checker::default();
    c.on_state(1, 1, 5, 0xabc);
    c.on_state(2, 2, 5, 0xabc);
    c.on_state(3, 3, 6, 0x123);
    assert!(c.violations.is_empty());
    c.on_state(4, 2, 6, 0x124);
    assert_eq!(c.violations.len(), 1);
    assert!(
        c.violations[0].contains("state agreement"),
        "{:?}",
        c.violations
    );
}
