//! The deterministic simulator of Waverunner.
//!
//! It runs several replicas — each the real Raft core (`waverunner-raft`), the real host logic
//! the node ships (`waverunner-host`: client requests and their routing, every ready batch,
//! the host side of the data-plane hand-off, reads, membership changes, compaction) and a
//! simulated data plane around the real C protocol handler
//! (`waverunner-fastpath`) — over a simulated network
//! that drops, duplicates, delays, reorders and partitions, while replicas crash (with their log
//! kept on disk, or in `memory` durability lost), pause (their data plane runs on, as XDP in
//! the kernel does), change membership and hand leadership
//! over. After every step it checks election safety, log matching, leader completeness,
//! state-machine safety, monotonic commit and that no acknowledged write is lost under the
//! durability mode's promise, that every read reflects the writes acknowledged before it
//! began, that a membership change answered as committed is the entry at its index, and that
//! every replica reaches the same state of the shipped key-value store at the same index (each
//! write also applies a command on a hash, list, set or sorted set there, random picks
//! included, and its snapshot travels in the simulated snapshots); after
//! the faults heal it checks liveness: a leader, a new write
//! applied on every replica, and (with a data plane) acceleration enabled again.
//!
//! Everything is a function of the seed: a failing seed reproduces with
//! `waverunner sim --seeds N..N+1 --nodes K --durability D`.

pub mod checker;
pub mod dataplane;
pub mod rng;
pub mod world;

pub use world::{Durability, SeedReport, SimOptions, Stats, World};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Runs one seed. An assertion that fails in the code under test (the Raft core, the host,
/// the handler's wrapper) is a violation of that seed, not the end of the run.
pub fn run_seed(seed: u64, opts: &SimOptions) -> SeedReport {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        World::new(seed, opts.clone()).run()
    }));
    run.unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        SeedReport {
            seed,
            violations: vec![format!("assertion failed: {what}")],
            stats: Stats::default(),
        }
    })
}

/// Runs `seeds` on `threads` worker threads and returns the reports in seed order.
/// `progress` is called with each finished report (from the worker threads).
pub fn run_seeds(
    seeds: std::ops::Range<u64>,
    opts: &SimOptions,
    threads: usize,
    progress: &(dyn Fn(&SeedReport) + Sync),
) -> Vec<SeedReport> {
    let next = AtomicU64::new(seeds.start);
    let out = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= seeds.end {
                    break;
                }
                let r = run_seed(seed, opts);
                progress(&r);
                out.lock().unwrap().push(r);
            });
        }
    });
    let mut v = out.into_inner().unwrap();
    v.sort_by_key(|r| r.seed);
    v
}
