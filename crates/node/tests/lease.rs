//! A lease read is answered on the core's clock (its ticks). A request the loop takes up
//! while a tick is overdue must not be answered from the lease before the loop counts them:
//! the process may have been stopped after it last counted its ticks, and another leader
//! elected meanwhile. One replica
//! in lease mode, a state machine whose read-only check takes longer than the election timeout
//! for one command (the loop does not tick while it runs).

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use waverunner_node::config::{DurabilityMode, NodeConfig, ReadModeConfig};
use waverunner_node::{start_replica, StateMachine};

/// The last byte written; `b"slow"` is a read whose check holds the loop.
#[derive(Default)]
struct Last(u8);

impl StateMachine for Last {
    fn apply(&mut self, _: u64, _: u64, c: &[u8]) -> Vec<u8> {
        if !self.is_read_only(c) {
            self.0 = c[0];
        }
        vec![self.0]
    }
    fn is_read_only(&self, c: &[u8]) -> bool {
        if c == b"slow" {
            std::thread::sleep(Duration::from_millis(300));
        }
        c.is_empty() || c == b"slow"
    }
    fn query(&self, _: u64, _: &[u8]) -> Vec<u8> {
        vec![self.0]
    }
    fn snapshot(&self) -> Vec<u8> {
        vec![self.0]
    }
    fn restore(&mut self, s: &[u8]) -> Result<(), String> {
        self.0 = *s.first().ok_or("empty")?;
        Ok(())
    }
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

#[test]
fn a_read_taken_up_while_a_tick_is_overdue_waits_for_the_ticks() {
    let dir = std::env::temp_dir().join(format!("waverunner-lease-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = NodeConfig::from_toml(&format!(
        "id = 1\ndata_dir = \"{}\"\n[listen]\nraft = \"{}\"\nclient = \"{}\"\n",
        dir.join("n1").display(),
        free_addr(),
        free_addr(),
    ))
    .expect("config");
    cfg.durability = DurabilityMode::Memory;
    cfg.read_mode = ReadModeConfig::Lease;
    let one = start_replica(cfg, Last::default()).unwrap();
    // `/status` is published as the loop goes: wait for what it should say.
    let wait_until = |what: &str, f: &dyn Fn(&waverunner_node::metrics::Status) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !f(&one.handle.status()) {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_until("it leads", &|s| s.role == "leader");
    assert_eq!(one.handle.call(7, 1, vec![42]).unwrap(), vec![42]);
    wait_until("the write is counted", &|s| s.counters.proposals >= 1);
    let proposals = one.handle.status().counters.proposals;
    assert_eq!(one.handle.status().counters.lease_reads_late, 0);
    // The check holds the loop 300 ms (many ticks): the read is decided on a late clock.
    assert_eq!(one.handle.call(0, 0, b"slow".to_vec()).unwrap(), vec![42]);
    wait_until("the late read is counted", &|s| {
        s.counters.lease_reads_late == 1
    });
    // It waited for the ticks, then was read without the log.
    assert_eq!(one.handle.status().counters.proposals, proposals);
    one.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
