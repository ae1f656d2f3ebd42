//! `waverunner load`: a bounded workload against the local cluster through the native client,
//! printing throughput and latency percentiles.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use waverunner_client::load::{closed_loop, open_loop, Workload};

use crate::cluster;

/// Options of `waverunner load`.
#[derive(clap::Args)]
pub struct LoadArgs {
    /// The cluster directory (default: as `waverunner up`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Closed loop: clients, each with one request outstanding.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Open loop instead: requests per second to the leader (no sessions, no retries).
    #[arg(long)]
    rate: Option<u64>,
    /// Longest run, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    duration_ms: u64,
    /// Most requests in total.
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Fraction of writes (SET); the rest are GETs.
    #[arg(long, default_value_t = 0.5)]
    write_fraction: f64,
    /// Bytes per value.
    #[arg(long, default_value_t = 32)]
    value_size: usize,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
}

/// Runs the workload and prints one summary line.
pub fn run(a: LoadArgs) -> ExitCode {
    let dir = a.dir.clone().unwrap_or_else(cluster::default_dir);
    let cf = match cluster::load(&dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("waverunner load: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !(0.0..=1.0).contains(&a.write_fraction) {
        eprintln!("waverunner load: --write-fraction must be between 0 and 1");
        return ExitCode::from(2);
    }
    let w = Workload {
        keys: a.keys.max(1),
        value_size: a.value_size,
        write_fraction: a.write_fraction,
    };
    let duration = Duration::from_millis(a.duration_ms);
    let report = match a.rate {
        Some(rate) => {
            let leader = match cluster::wait_for_leader(&cf, Duration::from_secs(5)) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("waverunner load: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let target = cf.node(leader).map(|n| n.addresses.client);
            let Some(target) = target else {
                eprintln!("waverunner load: leader {leader} is not in the cluster file");
                return ExitCode::FAILURE;
            };
            println!(
                "open loop: {rate} requests/s to the leader (node {leader}) for at most {:.1}s, {:.0}% writes of {} bytes over {} keys",
                duration.as_secs_f64(),
                w.write_fraction * 100.0,
                w.value_size,
                w.keys
            );
            open_loop(target, rate, duration, a.ops, Duration::from_secs(1), &w)
        }
        None => {
            println!(
                "closed loop: {} clients for at most {:.1}s, {:.0}% writes of {} bytes over {} keys, any replica",
                a.clients,
                duration.as_secs_f64(),
                w.write_fraction * 100.0,
                w.value_size,
                w.keys
            );
            closed_loop(&cf.client_addrs(), a.clients, duration, a.ops, &w)
        }
    };
    match report {
        Ok(r) => {
            println!("{}", r.summary());
            if r.ok == 0 {
                eprintln!("waverunner load: no request succeeded");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("waverunner load: {e}");
            ExitCode::FAILURE
        }
    }
}
