//! Segment roll, compaction by snapshot, and snapshots that replace the whole log.

mod common;

use common::*;
use std::fs;
use waverunner_raft::{Config, HardState, Raft};
use waverunner_storage::{Durability, StorageError};

const FOUR_PER_SEGMENT: u64 = SEGMENT_HEADER_LEN + 4 * RECORD_LEN;

/// Entries 1..=40 (term 1) in ten segments of four.
fn forty(name: &str) -> TempDir {
    let t = TempDir::new(name);
    let (mut s, _) = open(t.path(), Durability::Fsync);
    s.set_segment_roll_size(FOUR_PER_SEGMENT);
    s.append(&ents(1, 40, 1)).unwrap();
    s.set_hard_state(HardState {
        term: 1,
        vote: 1,
        commit: 40,
    })
    .unwrap();
    s.sync().unwrap();
    assert_eq!(s.stats().segments, 10);
    t
}

fn firsts(t: &TempDir) -> Vec<u64> {
    segments(t.path())
        .iter()
        .map(|p| segment_first(p))
        .collect()
}

#[test]
fn segments_roll_at_the_roll_size() {
    let t = forty("roll");
    assert_eq!(firsts(&t), (0..10).map(|k| 1 + 4 * k).collect::<Vec<_>>());
    for p in segments(t.path()) {
        assert_eq!(file_len(&p), FOUR_PER_SEGMENT);
    }
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &ents(1, 40, 1));
}

#[test]
fn snapshot_deletes_covered_segments_and_keeps_the_rest() {
    let t = forty("compact");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.save_snapshot(&snap(22, 1)).unwrap();
        assert_eq!((s.first_index(), s.last_index()), (23, 40));
        assert_eq!(s.stats().snapshots_saved, 1);
    }
    // Segments 1..=20 go; 21..=24 holds the snapshot index and stays whole.
    assert_eq!(firsts(&t), vec![21, 25, 29, 33, 37]);
    assert!(t.path().join("snapshot").is_file());
    let (mut s, r) = open(t.path(), Durability::Fsync);
    assert_eq!(r.snapshot, Some(snap(22, 1)));
    assert_entries(&r, &ents(23, 40, 1));
    assert_eq!((s.first_index(), s.last_index()), (23, 40));
    let raft = Raft::new(Config::default(), r.into_bootstrap(conf())).unwrap();
    assert_eq!((raft.first_index(), raft.last_index()), (23, 40));

    // The log goes on, and a second snapshot replaces the first.
    s.set_segment_roll_size(FOUR_PER_SEGMENT);
    s.append(&ents(41, 44, 2)).unwrap();
    s.sync().unwrap();
    s.save_snapshot(&snap(36, 1)).unwrap();
    drop(s);
    // 33..=36 ends exactly at the snapshot index: covered whole.
    assert_eq!(firsts(&t), vec![37, 41]);
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_eq!(r.snapshot, Some(snap(36, 1)));
    let mut want = ents(37, 40, 1);
    want.extend(ents(41, 44, 2));
    assert_entries(&r, &want);
}

#[test]
fn snapshot_at_the_last_index_empties_the_log() {
    let t = forty("compact-all");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.save_snapshot(&snap(40, 1)).unwrap();
        assert_eq!(s.stats().segments, 0);
        assert_eq!((s.first_index(), s.last_index()), (41, 40));
        s.append(&ents(41, 41, 1)).unwrap();
        s.sync().unwrap();
    }
    assert_eq!(firsts(&t), vec![41]);
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_eq!(r.snapshot.as_ref().unwrap().meta.index, 40);
    assert_entries(&r, &ents(41, 41, 1));
}

#[test]
fn snapshot_that_does_not_match_the_log_discards_it() {
    // (index, term): a term the log does not have at that index, and an index beyond the log.
    for (index, term) in [(25, 7), (100, 7)] {
        let t = forty("install");
        {
            let (mut s, _) = open(t.path(), Durability::Fsync);
            s.save_snapshot(&snap(index, term)).unwrap();
            assert_eq!(s.stats().segments, 0);
            assert_eq!((s.first_index(), s.last_index()), (index + 1, index));
            s.append(&ents(index + 1, index + 2, term)).unwrap();
            s.set_hard_state(HardState {
                term,
                vote: 0,
                commit: index,
            })
            .unwrap();
            s.sync().unwrap();
        }
        assert_eq!(firsts(&t), vec![index + 1]);
        let (_, r) = open(t.path(), Durability::Fsync);
        assert_eq!(r.snapshot, Some(snap(index, term)));
        assert_entries(&r, &ents(index + 1, index + 2, term));
        Raft::new(Config::default(), r.into_bootstrap(conf())).unwrap();
    }
}

/// A crash between writing an installed snapshot and deleting the log it replaces.
#[test]
fn interrupted_install_is_finished_at_open() {
    let t = forty("install-crash");
    let other = TempDir::new("install-crash-src");
    {
        let (mut s, _) = open(other.path(), Durability::Fsync);
        s.save_snapshot(&snap(30, 5)).unwrap();
    }
    fs::copy(other.path().join("snapshot"), t.path().join("snapshot")).unwrap();
    let (s, r) = open(t.path(), Durability::Fsync);
    assert_eq!(r.snapshot, Some(snap(30, 5)));
    assert!(
        r.entries.is_empty(),
        "entries after 30 belong to another history"
    );
    assert_eq!(s.stats().segments, 0);
    assert_eq!(s.last_index(), 30);
}

/// A crash between writing a compaction snapshot and deleting the covered segments.
#[test]
fn interrupted_compaction_is_finished_at_open() {
    let t = forty("compact-crash");
    let other = TempDir::new("compact-crash-src");
    {
        let (mut s, _) = open(other.path(), Durability::Fsync);
        s.save_snapshot(&snap(30, 1)).unwrap();
    }
    fs::copy(other.path().join("snapshot"), t.path().join("snapshot")).unwrap();
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &ents(31, 40, 1));
    assert_eq!(firsts(&t), vec![29, 33, 37]);
}

#[test]
fn a_gap_between_snapshot_and_log_refuses_to_start() {
    let t = forty("snap-gap");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.save_snapshot(&snap(22, 1)).unwrap();
    }
    fs::remove_file(&segments(t.path())[0]).unwrap(); // 21..=24
    match open_err(t.path(), Durability::Fsync) {
        StorageError::Corrupt { what, .. } => assert!(what.contains("missing"), "{what}"),
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn memory_mode_writes_no_snapshot() {
    let t = TempDir::new("snap-memory");
    let (mut s, _) = open(t.path(), Durability::Memory);
    s.append(&ents(1, 10, 1)).unwrap();
    s.save_snapshot(&snap(8, 1)).unwrap();
    assert_eq!((s.first_index(), s.last_index()), (9, 10));
    s.save_snapshot(&snap(20, 2)).unwrap();
    assert_eq!((s.first_index(), s.last_index()), (21, 20));
    assert!(!t.path().join("snapshot").exists());
    assert_eq!(s.stats().snapshots_saved, 0);
}

#[test]
#[should_panic(expected = "older than the saved one")]
fn an_older_snapshot_is_a_bug() {
    let t = forty("snap-older");
    let (mut s, _) = open(t.path(), Durability::Fsync);
    s.save_snapshot(&snap(20, 1)).unwrap();
    let _ = s.save_snapshot(&snap(10, 1));
}
