//! Torn tails are cut and counted; damage anywhere else refuses to start.

mod common;

use common::*;
use std::fs;
use std::io::Write;
use waverunner_raft::HardState;
use waverunner_storage::{Durability, StorageError};

/// A data directory with entries 1..=10 (term 1) synced, in one segment.
fn ten_entries(name: &str) -> TempDir {
    let t = TempDir::new(name);
    let (mut s, _) = open(t.path(), Durability::Fsync);
    s.append(&ents(1, 10, 1)).unwrap();
    s.set_hard_state(HardState {
        term: 1,
        vote: 1,
        commit: 0,
    })
    .unwrap();
    s.sync().unwrap();
    t
}

/// After a torn tail was cut: appending continues and survives another reopen.
fn continues_after_the_cut(t: &TempDir, kept: u64) {
    {
        let (mut s, r) = open(t.path(), Durability::Fsync);
        assert_eq!(s.stats().torn_tails_truncated, 0, "the cut was durable");
        assert_eq!(r.entries.len() as u64, kept);
        s.append(&ents(kept + 1, kept + 3, 2)).unwrap();
        s.sync().unwrap();
    }
    let (_, r) = open(t.path(), Durability::Fsync);
    let mut want = ents(1, kept, 1);
    want.extend(ents(kept + 1, kept + 3, 2));
    assert_entries(&r, &want);
}

#[test]
fn chopped_last_record_is_a_torn_tail() {
    let t = ten_entries("torn-chop");
    let seg = segments(t.path()).remove(0);
    chop(&seg, 3);
    let (s, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &ents(1, 9, 1));
    assert_eq!(s.stats().torn_tails_truncated, 1);
    assert_eq!(s.last_index(), 9);
    assert_eq!(file_len(&seg), SEGMENT_HEADER_LEN + 9 * RECORD_LEN);
    drop(s);
    continues_after_the_cut(&t, 9);
}

#[test]
fn a_partial_header_is_a_torn_tail() {
    let t = ten_entries("torn-header");
    let seg = segments(t.path()).remove(0);
    chop(&seg, RECORD_LEN - 5); // five bytes of the last record's frame header remain
    let (s, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &ents(1, 9, 1));
    assert_eq!(s.stats().torn_tails_truncated, 1);
}

#[test]
fn flipped_byte_in_the_last_record_is_a_torn_tail() {
    for offset_from_end in [1, 10, RECORD_LEN - 2] {
        let t = ten_entries("torn-flip");
        let seg = segments(t.path()).remove(0);
        flip(&seg, file_len(&seg) - offset_from_end);
        let (s, r) = open(t.path(), Durability::Fsync);
        assert_entries(&r, &ents(1, 9, 1));
        assert_eq!(s.stats().torn_tails_truncated, 1);
        drop(s);
        continues_after_the_cut(&t, 9);
    }
}

#[test]
fn zeros_after_the_last_record_are_a_torn_tail() {
    // The file system extended the file but the data never reached the disk.
    let t = ten_entries("torn-zeros");
    let seg = segments(t.path()).remove(0);
    let mut f = fs::OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[0u8; 8192]).unwrap();
    drop(f);
    let (s, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &ents(1, 10, 1));
    assert_eq!(s.stats().torn_tails_truncated, 1);
    drop(s);
    continues_after_the_cut(&t, 10);
}

#[test]
fn corrupt_record_followed_by_valid_ones_refuses_to_start() {
    let t = ten_entries("corrupt-middle");
    let seg = segments(t.path()).remove(0);
    let second = SEGMENT_HEADER_LEN + RECORD_LEN;
    flip(&seg, second + 20); // inside entry 2's payload
    let before = fs::read(&seg).unwrap();
    match open_err(t.path(), Durability::Fsync) {
        StorageError::Corrupt { path, offset, what } => {
            assert_eq!(path, seg);
            assert_eq!(offset, second);
            assert!(what.contains("valid entry record follows"), "{what}");
        }
        e => panic!("unexpected {e}"),
    }
    // Nothing was "repaired" behind the operator's back.
    assert_eq!(fs::read(&seg).unwrap(), before);
    let msg = open_err(t.path(), Durability::Fsync).to_string();
    assert!(msg.contains("damaged"), "{msg}");
    assert!(msg.contains(&seg.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("offset {second}")), "{msg}");
    assert!(msg.contains("keep"), "{msg}");
    assert!(msg.contains("catches up"), "{msg}");
}

#[test]
fn corrupt_length_followed_by_valid_records_refuses_to_start() {
    let t = ten_entries("corrupt-len");
    let seg = segments(t.path()).remove(0);
    let fifth = SEGMENT_HEADER_LEN + 4 * RECORD_LEN;
    flip(&seg, fifth + 5); // the length field: the header checksum catches it
    match open_err(t.path(), Durability::Fsync) {
        StorageError::Corrupt { path, offset, .. } => assert_eq!((path, offset), (seg, fifth)),
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn damage_in_a_segment_that_is_not_the_last_refuses_to_start() {
    let t = TempDir::new("corrupt-sealed");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.set_segment_roll_size(SEGMENT_HEADER_LEN + 4 * RECORD_LEN);
        s.append(&ents(1, 12, 1)).unwrap();
        s.sync().unwrap();
    }
    let segs = segments(t.path());
    assert_eq!(segs.len(), 3);
    // The last record of the first segment: nothing follows it *in that file*, but the
    // segment was sealed before the next one was created, so it cannot be torn.
    chop(&segs[0], 2);
    match open_err(t.path(), Durability::Fsync) {
        StorageError::Corrupt { path, what, .. } => {
            assert_eq!(path, segs[0]);
            assert!(what.contains("not the last"), "{what}");
        }
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn a_missing_segment_refuses_to_start() {
    let t = TempDir::new("gap");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.set_segment_roll_size(SEGMENT_HEADER_LEN + 4 * RECORD_LEN);
        s.append(&ents(1, 12, 1)).unwrap();
        s.sync().unwrap();
    }
    let segs = segments(t.path());
    fs::remove_file(&segs[1]).unwrap();
    match open_err(t.path(), Durability::Fsync) {
        StorageError::Corrupt { path, what, .. } => {
            assert_eq!(path, segs[2]);
            assert!(what.contains("missing"), "{what}");
        }
        e => panic!("unexpected {e}"),
    }
    // Losing the first segment is a gap too (nothing covers entries 1..=4).
    let t = TempDir::new("gap-first");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.set_segment_roll_size(SEGMENT_HEADER_LEN + 4 * RECORD_LEN);
        s.append(&ents(1, 12, 1)).unwrap();
        s.sync().unwrap();
    }
    fs::remove_file(&segments(t.path())[0]).unwrap();
    assert!(matches!(
        open_err(t.path(), Durability::Fsync),
        StorageError::Corrupt { .. }
    ));
}

#[test]
fn a_segment_header_that_disagrees_with_its_name_refuses_to_start() {
    let t = ten_entries("renamed");
    let seg = segments(t.path()).remove(0);
    fs::rename(&seg, seg.with_file_name("00000000000000000002.seg")).unwrap();
    assert!(matches!(
        open_err(t.path(), Durability::Fsync),
        StorageError::Corrupt { offset: 0, .. }
    ));
}

#[test]
fn a_torn_hard_state_copy_falls_back_to_the_other() {
    let t = TempDir::new("hs-torn");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        for term in [5, 6] {
            s.set_hard_state(HardState {
                term,
                vote: term,
                commit: 0,
            })
            .unwrap();
            s.sync().unwrap();
        }
    }
    // Creation wrote seq 0 and 1; term 5 went to seq 2 (slot 0), term 6 to seq 3 (slot 1).
    let path = t.path().join("hardstate");
    flip(&path, 512 + 20);
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_eq!(
        r.hard_state.term, 5,
        "the copy before the interrupted update"
    );

    flip(&path, 20);
    match open_err(t.path(), Durability::Fsync) {
        StorageError::Corrupt { path: p, .. } => assert_eq!(p, path),
        e => panic!("unexpected {e}"),
    }
    let msg = open_err(t.path(), Durability::Fsync).to_string();
    assert!(msg.contains("remove it from the membership"), "{msg}");
    // Memory durability reads the same file and refuses the same way.
    assert!(matches!(
        open_err(t.path(), Durability::Memory),
        StorageError::Corrupt { .. }
    ));
}

#[test]
fn a_hard_state_file_of_the_wrong_size_refuses_to_start() {
    let t = ten_entries("hs-size");
    chop(&t.path().join("hardstate"), 1);
    assert!(matches!(
        open_err(t.path(), Durability::Fsync),
        StorageError::Corrupt { .. }
    ));
}

#[test]
fn a_damaged_snapshot_refuses_to_start() {
    let t = ten_entries("snap-damage");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.save_snapshot(&snap(5, 1)).unwrap();
    }
    let path = t.path().join("snapshot");
    flip(&path, file_len(&path) - 3);
    match open_err(t.path(), Durability::Fsync) {
        StorageError::Corrupt { path: p, .. } => assert_eq!(p, path),
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn leftover_temp_files_are_ignored_and_removed() {
    let t = ten_entries("tmp-files");
    fs::write(t.path().join("snapshot.tmp"), b"half a snapshot").unwrap();
    fs::write(t.path().join("wal/00000000000000000011.seg.tmp"), b"half").unwrap();
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &ents(1, 10, 1));
    assert!(r.snapshot.is_none());
    assert!(!t.path().join("snapshot.tmp").exists());
    assert!(!t.path().join("wal/00000000000000000011.seg.tmp").exists());
}
