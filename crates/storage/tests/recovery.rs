//! Round trips through a reopen, in both durability modes, and the hand-off to the Raft core.

mod common;

use common::*;
use std::fs;
use waverunner_raft::{Config, HardState, Raft, Role};
use waverunner_storage::{codec, Durability, Storage, StorageError};

fn hs(term: u64, vote: u64, commit: u64) -> HardState {
    HardState { term, vote, commit }
}

#[test]
fn first_boot_is_not_a_lost_log() {
    for d in [Durability::Fsync, Durability::Memory] {
        let t = TempDir::new("first-boot");
        let (s, r) = open(t.path(), d);
        assert!(!r.log_lost, "{d:?}");
        assert_eq!(r.hard_state, HardState::default());
        assert!(r.entries.is_empty() && r.snapshot.is_none());
        assert_eq!((s.first_index(), s.last_index()), (1, 0));
        assert_eq!(s.durability(), d);
        assert!(t.path().join("hardstate").is_file());
        assert_eq!(t.path().join("wal").is_dir(), d == Durability::Fsync);
        // The core starts from it as an ordinary follower.
        let raft = Raft::new(Config::default(), r.into_bootstrap(conf())).unwrap();
        assert_eq!(raft.role(), Role::Follower);
    }
}

#[test]
fn fsync_round_trip() {
    let t = TempDir::new("fsync-rt");
    let mut want = ents(1, 40, 1);
    want.extend(ents(41, 100, 3));
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.append(&want[..40]).unwrap();
        s.append(&want[40..]).unwrap();
        s.set_hard_state(hs(3, 2, 90)).unwrap();
        assert_eq!(s.sync().unwrap(), 101, "100 entries and the hard state");
        let before = s.stats();
        assert_eq!(s.sync().unwrap(), 0, "nothing changed");
        assert_eq!(
            s.stats().fsyncs,
            before.fsyncs,
            "an idle sync does not fsync"
        );
        assert_eq!((s.first_index(), s.last_index()), (1, 100));
    }
    let (mut s, r) = open(t.path(), Durability::Fsync);
    assert!(!r.log_lost);
    assert_eq!(r.hard_state, hs(3, 2, 90));
    assert_entries(&r, &want);
    assert_eq!(s.stats().torn_tails_truncated, 0);
    assert_eq!((s.first_index(), s.last_index()), (1, 100));

    // Appending continues where the log ends, and survives another reopen.
    s.append(&ents(101, 105, 4)).unwrap();
    s.set_hard_state(hs(4, 1, 104)).unwrap();
    s.sync().unwrap();
    drop(s);
    let (_, r) = open(t.path(), Durability::Fsync);
    want.extend(ents(101, 105, 4));
    assert_entries(&r, &want);
    assert_eq!(r.hard_state, hs(4, 1, 104));
    let raft = Raft::new(Config::default(), r.into_bootstrap(conf())).unwrap();
    assert_eq!((raft.last_index(), raft.commit_index()), (105, 104));
}

#[test]
fn group_commit_is_one_fdatasync_per_touched_file() {
    let t = TempDir::new("group-commit");
    let (mut s, _) = open(t.path(), Durability::Fsync);
    let base = s.stats().fsyncs;
    // The first append creates the first segment (file fsync + directory fsync).
    s.append(&ents(1, 1, 1)).unwrap();
    s.sync().unwrap();
    let base_after_create = s.stats().fsyncs;
    assert_eq!(base_after_create - base, 3);
    for i in 0..5 {
        let before = s.stats().fsyncs;
        s.append(&ents(2 + i * 10, 11 + i * 10, 1)).unwrap();
        s.set_hard_state(hs(1, 0, 11 + i * 10)).unwrap();
        assert_eq!(s.sync().unwrap(), 11);
        assert_eq!(s.stats().fsyncs - before, 2, "WAL segment + hard state");
    }
    let before = s.stats().fsyncs;
    s.append(&ents(52, 60, 1)).unwrap();
    assert_eq!(s.sync().unwrap(), 9);
    assert_eq!(s.stats().fsyncs - before, 1, "WAL only");
}

#[test]
fn hard_state_is_written_only_by_sync() {
    let t = TempDir::new("hs-sync");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.set_hard_state(hs(2, 1, 0)).unwrap();
        s.sync().unwrap();
        s.set_hard_state(hs(3, 0, 0)).unwrap(); // never synced
    }
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_eq!(r.hard_state, hs(2, 1, 0));
}

#[test]
fn memory_mode_keeps_only_term_and_vote() {
    let t = TempDir::new("memory");
    {
        let (mut s, r) = open(t.path(), Durability::Memory);
        assert!(!r.log_lost);
        s.append(&ents(1, 10, 2)).unwrap();
        s.set_hard_state(hs(2, 3, 0)).unwrap();
        let before = s.stats();
        assert_eq!(s.sync().unwrap(), 1, "the new term and vote");
        assert_eq!(s.stats().fsyncs - before.fsyncs, 1);
        // Commit-only changes are not persisted in this mode: no fsync.
        s.set_hard_state(hs(2, 3, 7)).unwrap();
        let before = s.stats();
        assert_eq!(s.sync().unwrap(), 0);
        assert_eq!(s.stats().fsyncs, before.fsyncs);
        assert_eq!(s.last_index(), 10);
        assert_eq!(s.stats().segments, 0);
        s.save_snapshot(&snap(5, 2)).unwrap();
        assert_eq!((s.first_index(), s.last_index()), (6, 10));
    }
    // Nothing but the hard state reached the disk.
    let names: Vec<String> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["hardstate".to_string()]);

    let (_, r) = open(t.path(), Durability::Memory);
    assert!(r.log_lost);
    assert_eq!(r.hard_state, hs(2, 3, 0));
    assert!(r.entries.is_empty() && r.snapshot.is_none());
    let raft = Raft::new(Config::default(), r.into_bootstrap(conf())).unwrap();
    assert_eq!(raft.role(), Role::Recovering);
    assert_eq!(raft.term(), 2);
}

#[test]
fn torn_tail_under_a_durable_commit_is_clamped_for_the_core() {
    let t = TempDir::new("clamp");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.append(&ents(1, 5, 1)).unwrap();
        s.set_hard_state(hs(1, 1, 5)).unwrap();
        s.sync().unwrap();
    }
    // A disk that lost synced data: the last entry is gone but the commit index says 5.
    chop(&segments(t.path())[0], 3);
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &ents(1, 4, 1));
    assert_eq!(r.hard_state.commit, 5);
    let boot = r.into_bootstrap(conf());
    assert_eq!(boot.hard_state.commit, 4);
    let raft = Raft::new(Config::default(), boot).unwrap();
    assert_eq!(raft.commit_index(), 4);
}

#[test]
fn switching_memory_to_fsync_reports_the_log_lost_until_caught_up() {
    let t = TempDir::new("switch");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.append(&ents(1, 10, 1)).unwrap();
        s.set_hard_state(hs(1, 1, 10)).unwrap();
        s.sync().unwrap();
    }
    {
        // Memory durability drops the old log at once: it is stale from now on.
        let (mut s, r) = open(t.path(), Durability::Memory);
        assert!(r.log_lost);
        assert_eq!(r.hard_state, hs(1, 1, 0));
        assert!(!t.path().join("wal").exists());
        s.set_hard_state(hs(2, 2, 0)).unwrap();
        s.sync().unwrap();
    }
    {
        let (mut s, r) = open(t.path(), Durability::Fsync);
        assert!(r.log_lost, "the memory-mode run's log is gone");
        assert_eq!(r.hard_state, hs(2, 2, 0));
        assert!(r.entries.is_empty());
        s.append(&ents(1, 3, 2)).unwrap();
        s.sync().unwrap();
    }
    {
        // A crash before catching up: still not a voter.
        let (mut s, r) = open(t.path(), Durability::Fsync);
        assert!(r.log_lost);
        assert_entries(&r, &ents(1, 3, 2));
        s.mark_caught_up().unwrap();
    }
    let (_, r) = open(t.path(), Durability::Fsync);
    assert!(!r.log_lost);
    assert_entries(&r, &ents(1, 3, 2));
}

#[test]
fn moving_the_wal_aside_restarts_without_the_log() {
    let t = TempDir::new("wal-aside");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.append(&ents(1, 10, 4)).unwrap();
        s.set_hard_state(hs(4, 2, 8)).unwrap();
        s.sync().unwrap();
    }
    fs::remove_dir_all(t.path().join("wal")).unwrap();
    let (s, r) = open(t.path(), Durability::Fsync);
    assert!(r.log_lost);
    assert_eq!((r.hard_state.term, r.hard_state.vote), (4, 2));
    assert!(r.entries.is_empty());
    assert_eq!(s.last_index(), 0);
    let raft = Raft::new(Config::default(), r.into_bootstrap(conf())).unwrap();
    assert_eq!(raft.role(), Role::Recovering);
}

#[test]
fn a_log_without_a_hard_state_is_refused() {
    let t = TempDir::new("no-hs");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.append(&ents(1, 3, 1)).unwrap();
        s.sync().unwrap();
    }
    fs::remove_file(t.path().join("hardstate")).unwrap();
    match open_err(t.path(), Durability::Fsync) {
        StorageError::Corrupt { path, .. } => assert!(path.ends_with("hardstate")),
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn too_large_entries_are_refused_without_harm() {
    let t = TempDir::new("too-large");
    let (mut s, _) = open(t.path(), Durability::Fsync);
    s.append(&ents(1, 2, 1)).unwrap();
    let mut big = ent(3, 1);
    big.data = vec![0; codec::MAX_ENTRY_DATA + 1].into();
    let e = s.append(&[big]).unwrap_err();
    assert!(matches!(e, StorageError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("nothing was written"));
    s.append(&ents(3, 3, 1)).unwrap();
    s.sync().unwrap();
    drop(s);
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_entries(&r, &ents(1, 3, 1));
}

#[test]
fn an_io_failure_poisons_the_storage() {
    let t = TempDir::new("poison");
    let (mut s, _) = open(t.path(), Durability::Fsync);
    s.set_segment_roll_size(1);
    s.append(&ents(1, 1, 1)).unwrap();
    // Rolling to a new segment now fails: its directory is gone.
    fs::remove_dir_all(t.path().join("wal")).unwrap();
    let e = s.append(&ents(2, 2, 1)).unwrap_err();
    assert!(matches!(e, StorageError::Io { .. }), "{e}");
    assert!(e.to_string().contains("wal"), "{e}");
    assert!(matches!(s.sync(), Err(StorageError::Failed)));
    assert!(matches!(
        s.set_hard_state(HardState::default()),
        Err(StorageError::Failed)
    ));
    let _ = Storage::open; // the way out is a restart
}

#[test]
fn storage_can_move_to_a_storage_thread() {
    fn send<T: Send>() {}
    send::<Storage>();
    send::<StorageError>();
}

/// Takes `s` as the replica does: streamed through `Storage::snapshot_files` in pieces.
fn stream(
    files: &waverunner_storage::SnapshotFiles,
    s: &waverunner_raft::Snapshot,
) -> waverunner_raft::Snapshot {
    use std::io::Write;
    let mut w = files.create(s.meta.clone()).unwrap();
    for piece in s.data.chunks(3) {
        w.write_all(piece).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn a_background_snapshot_never_replaces_a_newer_one() {
    let t = TempDir::new("bg-snap");
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.append(&ents(1, 50, 1)).unwrap();
        s.sync().unwrap();
        let files = s.snapshot_files();
        // Written in the background, adopted by the owner afterwards.
        let written = stream(&files, &snap(20, 1));
        assert_eq!(written, snap(20, 1));
        s.snapshot_written(&snap(20, 1).meta).unwrap();
        // The owner installs a newer one (a leader's) while an older background write is late.
        s.save_snapshot(&snap(40, 1)).unwrap();
        let late = stream(&files, &snap(30, 1));
        assert_eq!(
            late,
            snap(30, 1),
            "a late snapshot is still usable in memory"
        );
    }
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_eq!(r.snapshot.map(|s| s.meta.index), Some(40));
    assert_eq!(r.entries.first().map(|e| e.index), Some(41));
    let left: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("snapshot"))
        .collect();
    assert_eq!(left, ["snapshot"], "no temporary file is left");
}

#[test]
fn a_streamed_snapshot_restarts_byte_exact_and_a_damaged_one_is_refused() {
    let t = TempDir::new("streamed");
    let big = waverunner_raft::Snapshot {
        meta: snap(20, 1).meta,
        data: (0..3_000_000u32)
            .map(|i| (i * 31 % 251) as u8)
            .collect::<Vec<u8>>()
            .into(),
    };
    {
        let (mut s, _) = open(t.path(), Durability::Fsync);
        s.append(&ents(1, 50, 1)).unwrap();
        s.sync().unwrap();
        let got = stream(&s.snapshot_files(), &big);
        assert_eq!(got, big);
        s.snapshot_written(&big.meta).unwrap();
    }
    let (_, r) = open(t.path(), Durability::Fsync);
    assert_eq!(
        r.snapshot.as_ref(),
        Some(&big),
        "the file restarts byte-exact"
    );
    // One flipped bit anywhere in the data: a clear refusal, not a wrong state.
    let path = t.path().join("snapshot");
    let mut bytes = fs::read(&path).unwrap();
    let at = bytes.len() - 1_234_567;
    bytes[at] ^= 0x10;
    fs::write(&path, &bytes).unwrap();
    match Storage::open(t.path(), Durability::Fsync) {
        Err(StorageError::Corrupt { .. }) => {}
        other => panic!("a damaged snapshot opened: {:?}", other.map(|_| ())),
    }
    // Torn: cut short.
    bytes[at] ^= 0x10;
    bytes.truncate(bytes.len() - 100);
    fs::write(&path, &bytes).unwrap();
    match Storage::open(t.path(), Durability::Fsync) {
        Err(StorageError::Corrupt { .. }) => {}
        other => panic!("a torn snapshot opened: {:?}", other.map(|_| ())),
    }
}

#[test]
fn in_memory_durability_a_streamed_snapshot_leaves_no_file() {
    let t = TempDir::new("streamed-mem");
    let (s, _) = open(t.path(), Durability::Memory);
    let got = stream(&s.snapshot_files(), &snap(7, 1));
    assert_eq!(got, snap(7, 1));
    let files: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("snapshot"))
        .collect();
    assert!(files.is_empty(), "{files:?}");
}

/// In fsync durability a snapshot file is handed to write-back as it grows, so the fsync that
/// completes it waits for the last window only; in memory durability it is never synced.
#[test]
fn a_large_snapshot_is_written_back_as_it_grows() {
    use std::io::Write;
    use waverunner_storage::WRITEBACK_BYTES;
    let mib = 1u64 << 20;
    let pieces = 3 * WRITEBACK_BYTES / mib + 1;
    for (mode, want) in [(Durability::Fsync, 3), (Durability::Memory, 0)] {
        let t = TempDir::new("writeback");
        let (s, _) = open(t.path(), mode);
        let mut w = s.snapshot_files().create(snap(20, 1).meta).unwrap();
        let piece = vec![7u8; mib as usize];
        for _ in 0..pieces {
            w.write_all(&piece).unwrap();
        }
        assert_eq!(w.writebacks(), want, "{mode:?}");
        let got = w.finish().unwrap();
        assert_eq!(got.data.len() as u64, pieces * mib);
        assert!(
            got.data.iter().all(|&b| b == 7),
            "{mode:?}: the bytes written"
        );
    }
}
