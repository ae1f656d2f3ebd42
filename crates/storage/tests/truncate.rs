//! A leader overwrites a conflicting suffix: the new suffix is what survives a reopen.

mod common;

use common::*;
use waverunner_storage::Durability;

#[test]
fn conflicting_suffix_in_one_segment() {
    let t = TempDir::new("conflict-one");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.append(&ents(1, 10, 1)).unwrap();
        s.sync().unwrap();
        s.append(&ents(6, 8, 2)).unwrap();
        assert_eq!(s.last_index(), 8);
        s.sync().unwrap();
        assert_eq!(s.stats().suffixes_truncated, 1);
    }
    let mut want = ents(1, 5, 1);
    want.extend(ents(6, 8, 2));
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &want);
    // The file was cut, not marked: exactly 8 records remain.
    let seg = &segments(t.path())[0];
    assert_eq!(file_len(seg), SEGMENT_HEADER_LEN + 8 * RECORD_LEN);
}

#[test]
fn conflicting_suffix_before_the_first_sync() {
    let t = TempDir::new("conflict-unsynced");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.append(&ents(1, 10, 1)).unwrap();
        s.append(&ents(3, 4, 2)).unwrap();
        s.append(&ents(5, 6, 2)).unwrap();
        s.append(&ents(6, 7, 3)).unwrap();
        s.sync().unwrap();
    }
    let mut want = ents(1, 2, 1);
    want.extend(ents(3, 5, 2));
    want.extend(ents(6, 7, 3));
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &want);
}

#[test]
fn conflicting_suffix_across_segments() {
    let t = TempDir::new("conflict-many");
    let roll = SEGMENT_HEADER_LEN + 4 * RECORD_LEN; // four entries per segment
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.set_segment_roll_size(roll);
        s.append(&ents(1, 50, 1)).unwrap();
        s.sync().unwrap();
        assert_eq!(s.stats().segments, 13);
        s.append(&ents(14, 16, 2)).unwrap();
        // Segments starting at 17 and later are gone; 13..=16 holds 13 and the new 14..=16.
        assert_eq!(s.stats().segments, 4);
        s.sync().unwrap();
        s.append(&ents(17, 30, 2)).unwrap();
        s.sync().unwrap();
    }
    let firsts: Vec<u64> = segments(t.path())
        .iter()
        .map(|p| segment_first(p))
        .collect();
    assert_eq!(firsts, vec![1, 5, 9, 13, 17, 21, 25, 29]);
    let mut want = ents(1, 13, 1);
    want.extend(ents(14, 30, 2));
    let (mut s, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &want);

    // Overwrite exactly at a segment's first entry: that segment is emptied, earlier ones stay.
    s.set_segment_roll_size(roll);
    s.append(&ents(21, 22, 3)).unwrap();
    s.sync().unwrap();
    drop(s);
    let firsts: Vec<u64> = segments(t.path())
        .iter()
        .map(|p| segment_first(p))
        .collect();
    assert_eq!(firsts, vec![1, 5, 9, 13, 17, 21]);
    want.truncate(20);
    want.extend(ents(21, 22, 3));
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &want);
}

#[test]
fn overwriting_the_whole_log() {
    let t = TempDir::new("conflict-all");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.set_segment_roll_size(SEGMENT_HEADER_LEN + 2 * RECORD_LEN);
        s.append(&ents(1, 9, 1)).unwrap();
        s.sync().unwrap();
        s.append(&ents(1, 3, 2)).unwrap();
        s.sync().unwrap();
    }
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &ents(1, 3, 2));
}

#[test]
fn memory_mode_tracks_the_overwrite() {
    let t = TempDir::new("conflict-memory");
    let (mut s, _) = open(t.path(), Durability::Memory);
    s.append(&ents(1, 10, 1)).unwrap();
    s.append(&ents(4, 5, 2)).unwrap();
    assert_eq!(s.last_index(), 5);
    s.append(&ents(6, 6, 2)).unwrap();
    assert_eq!(s.last_index(), 6);
}

#[test]
#[should_panic(expected = "leaves a gap")]
fn a_gap_is_a_bug() {
    let t = TempDir::new("gap-panic");
    let (mut s, _) = open(t.path(), Durability::Fsync);
    s.append(&ents(1, 3, 1)).unwrap();
    let _ = s.append(&ents(5, 6, 1));
}

#[test]
#[should_panic(expected = "consecutive")]
fn non_consecutive_entries_are_a_bug() {
    let t = TempDir::new("consecutive-panic");
    let (mut s, _) = open(t.path(), Durability::Fsync);
    let mut e = ents(1, 3, 1);
    e.remove(1);
    let _ = s.append(&e);
}

#[test]
#[should_panic(expected = "at or below the snapshot index")]
fn truncating_below_the_snapshot_is_a_bug() {
    let t = TempDir::new("below-snap-panic");
    let (mut s, _) = open(t.path(), Durability::Fsync);
    s.append(&ents(1, 10, 1)).unwrap();
    s.save_snapshot(&snap(5, 1)).unwrap();
    let _ = s.append(&ents(5, 6, 2));
}
