//! Three in-memory replicas: elect a leader, commit a few entries, print what happens.
//!
//! Run with `cargo run -p waverunner-raft --example three_nodes`.

use std::collections::BTreeMap;
use waverunner_raft::*;

fn main() {
    let voters = vec![1, 2, 3];
    let mut nodes: BTreeMap<NodeId, Raft> = voters
        .iter()
        .map(|id| {
            let cfg = Config {
                id: *id,
                seed: 1,
                ..Config::default()
            };
            let boot = Bootstrap {
                conf: ConfState {
                    voters: voters.clone(),
                    learners: vec![],
                },
                ..Default::default()
            };
            (*id, Raft::new(cfg, boot).expect("valid configuration"))
        })
        .collect();

    // Tick until someone's randomized election timeout fires and it wins.
    let mut tick = 0;
    while !nodes.values().any(|r| r.role() == Role::Leader) {
        tick += 1;
        for r in nodes.values_mut() {
            r.tick();
        }
        pump(&mut nodes);
    }
    let leader = nodes
        .values()
        .find(|r| r.role() == Role::Leader)
        .unwrap()
        .id();
    println!(
        "tick {tick}: node {leader} is leader of term {}",
        nodes[&leader].term()
    );

    for cmd in ["set x 1", "set y 2", "incr x"] {
        let p = nodes
            .get_mut(&leader)
            .unwrap()
            .propose(cmd.as_bytes().to_vec())
            .expect("leader accepts");
        println!("proposed {cmd:?}: {p:?}");
        pump(&mut nodes);
    }
    for r in nodes.values() {
        println!(
            "node {}: role {:?}, term {}, commit {}, applied {}",
            r.id(),
            r.role(),
            r.term(),
            r.commit_index(),
            r.applied_index()
        );
    }
}

/// Plays the host for every node until nothing is left to do: persist (nothing to do in
/// memory), send, apply, advance.
fn pump(nodes: &mut BTreeMap<NodeId, Raft>) {
    loop {
        let mut msgs = Vec::new();
        for r in nodes.values_mut() {
            if !r.has_ready() {
                continue;
            }
            let rd = r.ready();
            for e in &rd.committed_entries {
                if !e.data.is_empty() {
                    println!(
                        "  node {} applies #{} {:?}",
                        r.id(),
                        e.index,
                        String::from_utf8_lossy(&e.data)
                    );
                }
            }
            msgs.extend(rd.messages);
            r.advance();
        }
        if msgs.is_empty() {
            return;
        }
        for m in msgs {
            let to = m.to;
            nodes
                .get_mut(&to)
                .unwrap()
                .step(m)
                .expect("well-formed message");
        }
    }
}
