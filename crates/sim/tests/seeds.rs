//! A few seeds of every configuration run as part of `cargo test`; `make test` runs thousands
//! more through `waverunner sim`.

use waverunner_sim::{run_seed, Durability, SimOptions};

fn check(nodes: usize, durability: Durability, dataplane: bool) {
    let opts = SimOptions {
        nodes,
        durability,
        dataplane,
        ..SimOptions::default()
    };
    for seed in 1..=8 {
        let r = run_seed(seed, &opts);
        assert!(
            r.violations.is_empty(),
            "seed {seed} ({nodes} nodes, {durability:?}, dataplane {dataplane}): {:#?}",
            r.violations
        );
        assert!(
            r.stats.writes_acked > 0,
            "seed {seed}: no write was acknowledged"
        );
        if dataplane {
            assert!(
                r.stats.dataplane_enables > 0,
                "seed {seed}: the data plane never enabled"
            );
        }
    }
}

#[test]
fn three_nodes_memory_with_dataplane() {
    check(3, Durability::Memory, true);
}

#[test]
fn five_nodes_fsync_with_dataplane() {
    check(5, Durability::Fsync, true);
}

#[test]
fn three_nodes_fsync_vanilla() {
    check(3, Durability::Fsync, false);
}

#[test]
fn same_seed_same_run() {
    let opts = SimOptions::default();
    let a = run_seed(42, &opts);
    let b = run_seed(42, &opts);
    assert_eq!(
        a.stats.events, b.stats.events,
        "the simulation is deterministic"
    );
    assert_eq!(a.stats.writes_acked, b.stats.writes_acked);
}
