//! `waverunner bench frontend`: epoll (mio) against io_uring for the RESP front-end, without
//! replication (the servers are `waverunner_bench::frontend`), on the namespace layout of the
//! other benches: the server in `wrfe-srv`, redis-benchmark in `wrfe-cli`, on one bridge.
//! The two engines alternate, `--rounds` times each, the first of a round alternating too, so
//! that drift of this shared machine touches both; the ratios are of their medians.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Instant;

use waverunner_bench::frontend::{Engine, Server};
use waverunner_bench::peers::{self, MANY};
use waverunner_bench::{cpu, stats};
use waverunner_netns as netns;

/// Options of `waverunner bench frontend`.
#[derive(clap::Args)]
pub struct FrontendArgs {
    /// Rounds: each runs every engine once, alternating.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=20))]
    rounds: u64,
    /// Requests of each redis-benchmark run at pipeline 1 (four times as many at 16, a fifth
    /// for the single client).
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1_000..=10_000_000))]
    requests: u64,
    /// Also write the report (Markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

const PREFIX: &str = "wrfe-";
const BRIDGE: &str = "wrfe-br";
const SERVER_NS: &str = "wrfe-srv";
const CLIENT_NS: &str = "wrfe-cli";
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 2);
/// The first server's port; each server of a run takes the next.
const PORT: u16 = 6390;
const ENGINES: [Engine; 2] = [Engine::Epoll, Engine::Uring];

/// One redis-benchmark run against one engine.
#[derive(Clone, Debug, Default)]
struct Run {
    /// Requests per second by test (`SET`, `GET`).
    rps: Vec<(String, f64)>,
    p50_us: Option<f64>,
    /// Over the whole run (both tests): machine CPU µs and the server's system calls per
    /// request.
    cpu_us: Option<f64>,
    syscalls: Option<f64>,
}

impl Run {
    fn rps(&self, test: &str) -> Option<f64> {
        self.rps.iter().find(|(t, _)| t == test).map(|&(_, r)| r)
    }
}

/// The three runs of one engine in one round.
#[derive(Clone, Debug, Default)]
struct Round {
    p1: Run,
    p16: Run,
    single: Run,
}

pub fn run(a: &FrontendArgs) -> Result<(), String> {
    if !netns::is_root() {
        return Err("bench frontend needs root (network namespaces)".into());
    }
    let bench = crate::bench::apt_binary("redis-benchmark", "redis-tools", "bench frontend")?;
    let started = Instant::now();
    // Removed when dropped, on error and panic too.
    let _net = netns::Bridged::create(
        PREFIX,
        BRIDGE,
        &[(SERVER_NS, SERVER_IP, None), (CLIENT_NS, CLIENT_IP, None)],
    )?;
    let mut rounds: Vec<[Round; 2]> = Vec::new();
    for r in 0..a.rounds {
        let mut pair: [Round; 2] = Default::default();
        // Which engine goes first alternates; the very first server is warmed up unmeasured
        // (the first run of a fresh layout was 10 % slower than the rest, whichever engine).
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for e in order {
            let engine = ENGINES[e];
            eprintln!(
                "bench frontend: round {} of {}: {} …",
                r + 1,
                a.rounds,
                engine.name()
            );
            // A port per server: a ring's posted accept keeps its listener open a little
            // after the ring is gone (io_uring tears down asynchronously).
            let port = PORT + (r as u16) * ENGINES.len() as u16 + e as u16;
            let addr = SocketAddr::V4(SocketAddrV4::new(SERVER_IP, port));
            let l = netns::run_in(SERVER_NS, move || {
                std::net::TcpListener::bind(addr).map_err(|e| e.to_string())
            })?;
            let server = Server::start(engine, l).map_err(|e| format!("{engine:?}: {e}"))?;
            let n = a.requests;
            if r == 0 && e == order[0] {
                measure(
                    &bench,
                    &server,
                    addr,
                    &["-c", &MANY.to_string(), "-t", "set,get"],
                    n / 2,
                    1,
                )?;
            }
            pair[e] = Round {
                p1: measure(
                    &bench,
                    &server,
                    addr,
                    &["-c", &MANY.to_string(), "-t", "set,get"],
                    n,
                    1,
                )?,
                p16: measure(
                    &bench,
                    &server,
                    addr,
                    &["-c", &MANY.to_string(), "-t", "set,get"],
                    4 * n,
                    16,
                )?,
                single: measure(&bench, &server, addr, &["-c", "1", "-t", "set"], n / 5, 1)?,
            };
            server
                .stop()
                .map_err(|e| format!("{engine:?} server: {e}"))?;
        }
        rounds.push(pair);
    }
    let report = render(&rounds, a, started.elapsed().as_secs());
    print!("{report}");
    if let Some(out) = &a.out {
        std::fs::write(out, &report).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    Ok(())
}

fn measure(
    bench: &Path,
    server: &Server,
    addr: SocketAddr,
    args: &[&str],
    n: u64,
    pipeline: u64,
) -> Result<Run, String> {
    let c = &server.counters;
    let (req0, sys0) = (
        c.requests.load(Ordering::Relaxed),
        c.syscalls.load(Ordering::Relaxed),
    );
    let cpu0 = cpu::machine()?;
    let out = Command::new("ip")
        .args(["netns", "exec", CLIENT_NS])
        .arg(bench)
        .args([
            "-h",
            &addr.ip().to_string(),
            "-p",
            &addr.port().to_string(),
            "-q",
        ])
        .args(["-d", &peers::VALUE_BYTES.to_string()])
        .args(["-n", &n.to_string(), "-P", &pipeline.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run redis-benchmark: {e}"))?;
    let cpu1 = cpu::machine()?;
    if !out.status.success() {
        return Err(format!(
            "redis-benchmark {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let lines = peers::parse_redis_benchmark(&String::from_utf8_lossy(&out.stdout));
    if lines.is_empty() {
        return Err(format!("redis-benchmark {args:?} printed no result"));
    }
    let reqs = c.requests.load(Ordering::Relaxed) - req0;
    let sys = c.syscalls.load(Ordering::Relaxed) - sys0;
    Ok(Run {
        p50_us: lines.first().and_then(|l| l.p50_us),
        rps: lines.into_iter().map(|l| (l.test, l.rps)).collect(),
        cpu_us: cpu::us_per_op(cpu1.busy.saturating_sub(cpu0.busy), reqs),
        syscalls: (reqs > 0).then(|| sys as f64 / reqs as f64),
    })
}

/// The report: a row per engine and round, then the medians and their ratios.
fn render(rounds: &[[Round; 2]], a: &FrontendArgs, secs: u64) -> String {
    let f = |x: Option<f64>, k: f64, d: usize| match x {
        Some(x) => format!("{:.*}", d, x / k),
        None => "—".into(),
    };
    let mut s = format!(
        "## bench frontend: epoll (mio) against io_uring, RESP without replication\n\n\
         {} rounds, {} s; redis-benchmark `-c {MANY} -d {} -t set,get` with `-P 1` ({} requests) \
         and `-P 16` ({}), then `-c 1 -t set` ({}); the server alone in `{SERVER_NS}`, the \
         client in `{CLIENT_NS}`. CPU is the whole machine's over the run, per request; \
         system calls are the server thread's own, per request.\n\n\
         | engine | round | SET 50 clients | GET 50 clients | syscalls / req | CPU µs / req | SET P16 | GET P16 | syscalls / req P16 | CPU µs / req P16 | 1 client SET p50 µs |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        rounds.len(),
        secs,
        peers::VALUE_BYTES,
        a.requests,
        4 * a.requests,
        a.requests / 5,
    );
    for (r, pair) in rounds.iter().enumerate() {
        for (e, engine) in ENGINES.into_iter().enumerate() {
            let x = &pair[e];
            s += &format!(
                "| {} | {} | {} k | {} k | {} | {} | {} k | {} k | {} | {} | {} |\n",
                engine.name(),
                r + 1,
                f(x.p1.rps("SET"), 1e3, 1),
                f(x.p1.rps("GET"), 1e3, 1),
                f(x.p1.syscalls, 1.0, 2),
                f(x.p1.cpu_us, 1.0, 1),
                f(x.p16.rps("SET"), 1e3, 1),
                f(x.p16.rps("GET"), 1e3, 1),
                f(x.p16.syscalls, 1.0, 3),
                f(x.p16.cpu_us, 1.0, 2),
                f(x.single.p50_us, 1.0, 0),
            );
        }
    }
    type Pick = fn(&Round) -> Option<f64>;
    // (name, value, its unit's scale)
    let columns: [(&str, Pick, f64); 9] = [
        ("SET 50 clients, k/s", |x| x.p1.rps("SET"), 1e3),
        ("GET 50 clients, k/s", |x| x.p1.rps("GET"), 1e3),
        ("server syscalls / req, 50 clients", |x| x.p1.syscalls, 1.0),
        ("CPU µs / req, 50 clients", |x| x.p1.cpu_us, 1.0),
        ("SET pipeline 16, k/s", |x| x.p16.rps("SET"), 1e3),
        ("GET pipeline 16, k/s", |x| x.p16.rps("GET"), 1e3),
        (
            "server syscalls / req, pipeline 16",
            |x| x.p16.syscalls,
            1.0,
        ),
        ("CPU µs / req, pipeline 16", |x| x.p16.cpu_us, 1.0),
        ("1 client SET p50 µs", |x| x.single.p50_us, 1.0),
    ];
    s += "\n| median | epoll (mio) | io_uring | io_uring / epoll |\n|---|---:|---:|---:|\n";
    for (name, pick, k) in columns {
        let m = |e: usize| {
            let v: Vec<f64> = rounds.iter().filter_map(|p| pick(&p[e])).collect();
            stats::median(&v)
        };
        let (ep, ur) = (m(0), m(1));
        let ratio = match (ep, ur) {
            (Some(a), Some(b)) if a > 0.0 => format!("{:.2}×", b / a),
            _ => "—".into(),
        };
        s += &format!("| {name} | {} | {} | {ratio} |\n", f(ep, k, 2), f(ur, k, 2));
    }
    s
}
