//! Load generation with the native client: closed-loop (each of N clients keeps one request
//! outstanding) and open-loop (requests at a fixed rate whatever the answers; latency is
//! measured from the scheduled send time, so a stall is not hidden by coordinated omission).
//! Every run is bounded by both a duration and a request count.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use waverunner_kv::{Cond, Expiry, Op};
use waverunner_mmsg as mmsg;

use crate::{proto, Client, Error, Options};

/// The mix of operations.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Keys are `key-0` … `key-{keys-1}`.
    pub keys: u64,
    /// Bytes per value written.
    pub value_size: usize,
    /// Fraction of operations that are writes (SET); the rest are GETs.
    pub write_fraction: f64,
}

impl Default for Workload {
    fn default() -> Workload {
        Workload {
            keys: 1_000,
            value_size: 32,
            write_fraction: 0.5,
        }
    }
}

impl Workload {
    /// The `i`-th operation drawn with the pseudo-random state `x`.
    pub fn op(&self, x: &mut u64) -> Op {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let key = format!("key-{}", *x % self.keys.max(1)).into_bytes();
        let write = ((*x >> 20) % 10_000) as f64 / 10_000.0 < self.write_fraction;
        if write {
            Op::Set {
                key,
                value: vec![b'v'; self.value_size],
                flags: 0,
                expiry: Expiry::None,
                cond: Cond::Always,
                get_old: false,
            }
        } else {
            Op::Get { keys: vec![key] }
        }
    }
}

/// The `q`-quantile (0..=1) of `sorted` by the nearest-rank method (the smallest sample with
/// at least a fraction `q` of the samples at or below it); `None` when there are no samples.
/// The one definition of a sample quantile: the load generator and the benchmarks use it.
pub fn quantile_sorted(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(1, n);
    Some(sorted[rank - 1])
}

/// What a load run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Requests answered successfully.
    pub ok: u64,
    /// Requests that failed (timeouts included).
    pub failed: u64,
    /// Attempts retried.
    pub retries: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Latencies of successful requests, µs, sorted.
    pub latencies_us: Vec<u64>,
}

impl Report {
    /// Successful requests per second.
    pub fn throughput(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `q`-quantile latency in µs by [`quantile_sorted`] (0 without samples).
    pub fn percentile(&self, q: f64) -> u64 {
        quantile_sorted(&self.latencies_us, q).unwrap_or(0)
    }

    /// One line: throughput and percentiles.
    pub fn summary(&self) -> String {
        format!(
            "ok={} failed={} retries={} elapsed={:.2}s throughput={:.0}/s p50={}us p90={}us p99={}us max={}us",
            self.ok,
            self.failed,
            self.retries,
            self.elapsed.as_secs_f64(),
            self.throughput(),
            self.percentile(0.5),
            self.percentile(0.9),
            self.percentile(0.99),
            self.latencies_us.last().copied().unwrap_or(0)
        )
    }

    fn merge(&mut self, o: Report) {
        self.ok += o.ok;
        self.failed += o.failed;
        self.retries += o.retries;
        self.latencies_us.extend(o.latencies_us);
    }
}

/// `clients` clients, each with one request outstanding, for at most `duration` and `max_ops`
/// requests in total.
pub fn closed_loop(
    nodes: &[SocketAddr],
    clients: usize,
    duration: Duration,
    max_ops: u64,
    w: &Workload,
) -> Result<Report, Error> {
    let start = Instant::now();
    let per_client = max_ops.div_ceil(clients.max(1) as u64);
    let total = Arc::new(Mutex::new(Report::default()));
    let mut threads = Vec::new();
    for c in 0..clients.max(1) {
        let mut client = Client::with_options(nodes, Options::default())?;
        let (w, total) = (w.clone(), total.clone());
        threads.push(std::thread::spawn(move || {
            let mut r = Report::default();
            let mut x = 0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1);
            for _ in 0..per_client {
                if start.elapsed() >= duration {
                    break;
                }
                let op = w.op(&mut x);
                let t = Instant::now();
                match client.execute(&op) {
                    Ok(_) => {
                        r.ok += 1;
                        r.latencies_us.push(t.elapsed().as_micros() as u64);
                    }
                    Err(_) => r.failed += 1,
                }
            }
            r.retries = client.retries;
            total.lock().expect("report").merge(r);
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    let mut r = std::mem::take(&mut *total.lock().expect("report"));
    r.elapsed = start.elapsed();
    r.latencies_us.sort_unstable();
    Ok(r)
}

/// Bytes of an open loop's receive buffer: a second of answers at twice what a cluster
/// sustains on this machine queue there while the receiving thread waits for a CPU. With
/// the default (about 200 KiB), the generator itself dropped about a quarter of the answers
/// of an overload run (`UdpRcvbufErrors` where it ran), and counted them as unanswered.
const RECEIVE_BUFFER: libc::c_int = 16 << 20;

/// A UDP socket of `target`'s family on an ephemeral port with a [`RECEIVE_BUFFER`] (as
/// large as the system allows without root), and a second handle to it (the receiving
/// thread's).
fn sockets_for(target: SocketAddr) -> Result<(UdpSocket, UdpSocket), Error> {
    let sock = UdpSocket::bind(if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .map_err(|e| Error::Local(format!("bind: {e}")))?;
    mmsg::set_buffer(
        std::os::fd::AsRawFd::as_raw_fd(&sock),
        mmsg::Buffer::Receive,
        RECEIVE_BUFFER,
    );
    let rx = sock
        .try_clone()
        .map_err(|e| Error::Local(format!("socket: {e}")))?;
    Ok((sock, rx))
}

/// Requests to `target` at `rate` per second for at most `duration` and `max_ops` requests,
/// without sessions or retries (a load generator, not a correctness client); an answer later
/// than `timeout` counts as failed.
pub fn open_loop(
    target: SocketAddr,
    rate: u64,
    duration: Duration,
    max_ops: u64,
    timeout: Duration,
    w: &Workload,
) -> Result<Report, Error> {
    let (sock, rx) = sockets_for(target)?;
    let n = (rate as f64 * duration.as_secs_f64()).min(max_ops as f64) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let sent_at: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; n]));
    let done = Arc::new(AtomicBool::new(false));
    let (sent2, done2) = (sent_at.clone(), done.clone());
    let receiver = std::thread::spawn(move || {
        let mut lat = vec![None; n];
        let mut buf = vec![0u8; 2048];
        let _ = rx.set_read_timeout(Some(Duration::from_millis(20)));
        while !done2.load(Ordering::Relaxed) {
            let Ok((len, _)) = rx.recv_from(&mut buf) else {
                continue;
            };
            let now = Instant::now();
            let Ok(r) = proto::decode_reply(&buf[..len]) else {
                continue;
            };
            let i = r.seq as usize;
            if r.status != proto::STATUS_OK || i == 0 || i > n {
                continue;
            }
            if let Some(t) = sent2.lock().expect("sent")[i - 1] {
                lat[i - 1] = Some(now.duration_since(t).as_micros() as u64);
            }
        }
        lat
    });
    let start = Instant::now();
    let mut x = 0x2545_F491_4F6C_DD1D;
    for i in 0..n {
        let at = start + interval * i as u32;
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        let pkt = proto::encode_request(0, i as u64 + 1, &w.op(&mut x))
            .map_err(|e| Error::Local(e.to_string()))?;
        sent_at.lock().expect("sent")[i] = Some(at);
        let _ = sock.send_to(&pkt, target);
    }
    std::thread::sleep(timeout);
    done.store(true, Ordering::Relaxed);
    let lat = receiver
        .join()
        .map_err(|_| Error::Local("receiver panicked".into()))?;
    let mut r = Report {
        elapsed: start.elapsed() - timeout,
        ..Report::default()
    };
    let limit = timeout.as_micros() as u64;
    for l in lat {
        match l {
            Some(us) if us <= limit => {
                r.ok += 1;
                r.latencies_us.push(us);
            }
            _ => r.failed += 1,
        }
    }
    r.latencies_us.sort_unstable();
    Ok(r)
}

/// What [`flood`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloodReport {
    /// Requests sent.
    pub sent: u64,
    /// Answered OK.
    pub ok: u64,
    /// Of those, answered before the stop.
    pub ok_in_time: u64,
    /// Answered with another status (busy, not the leader, …).
    pub refused: u64,
    /// From the first request to the stop.
    pub elapsed: Duration,
}

impl FloodReport {
    /// Requests answered OK a second while the flood ran. Not `ok` over `elapsed`: the
    /// answers of the 0.2 s after the stop drain what the cluster had queued (its socket
    /// buffer, its admitted requests), and over a short flood they weigh more: counted, they
    /// raised the half-second samples of an `off` cluster's peak by 7-16 % and its 2-3 s
    /// floods at twice that by 1-5 % (`docs/chaos.md` "Overload").
    pub fn goodput(&self) -> f64 {
        self.ok_in_time as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Every answer OK over the flood's time, the drain's included (how goodput was read
    /// until 2026-11-28; for the log).
    pub fn goodput_with_drain(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Requests [`flood`] sends in one `sendmmsg`, and replies it reads in one `recvmmsg`, at most.
const FLOOD_BATCH: usize = mmsg::MAX_BATCH;

/// The least [`flood`] sleeps when it is ahead of its rate: it then sends what fell due
/// meanwhile in one batch (20 requests at 100 000 a second).
const FLOOD_QUANTUM: Duration = Duration::from_micros(200);

/// An open loop of `rate` native requests a second (no session: each its own) to `target`
/// until `stop` is set, answers counted as they come (0.2 s more after the stop). Unlike
/// [`open_loop`] it keeps no per-request record, so it runs as long as asked: overload.
///
/// It shares the machine with what it floods, so it costs as little per request as it can:
/// the requests due are sent in one `sendmmsg` (at most [`FLOOD_BATCH`]), it sleeps at least
/// [`FLOOD_QUANTUM`] when ahead, and replies are read in batches (`recvmmsg`). One `sendto`
/// and one sleep per request, as before, took 24 % of this two-CPU machine at 76 000 a
/// second, out of what the cluster had to serve with (`docs/chaos.md` "Overload").
pub fn flood(
    target: SocketAddr,
    rate: u64,
    w: &Workload,
    stop: &AtomicBool,
) -> Result<FloodReport, Error> {
    let (sock, rx) = sockets_for(target)?;
    let _ = rx.set_read_timeout(Some(Duration::from_millis(20)));
    let done = AtomicBool::new(false);
    let sending = AtomicBool::new(true);
    let rate = rate.max(1);
    std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            let (mut ok, mut ok_in_time, mut refused) = (0u64, 0u64, 0u64);
            let mut batch = mmsg::RecvBatch::new(FLOOD_BATCH, 2048);
            let fd = std::os::fd::AsRawFd::as_raw_fd(&rx);
            while !done.load(Ordering::Relaxed) {
                // Blocks for the first reply up to the socket's read timeout.
                let n = batch.recv(fd, libc::MSG_WAITFORONE).unwrap_or(0);
                let in_time = sending.load(Ordering::Relaxed);
                for i in 0..n {
                    match proto::decode_reply(batch.get(i).1) {
                        Ok(r) if r.status == proto::STATUS_OK => {
                            ok += 1;
                            ok_in_time += u64::from(in_time);
                        }
                        Ok(_) => refused += 1,
                        Err(_) => {}
                    }
                }
            }
            (ok, ok_in_time, refused)
        });
        let start = Instant::now();
        let mut x = 0x9E37_79B9_7F4A_7C15;
        let mut sent = 0u64;
        let mut batch: Vec<Vec<u8>> = Vec::with_capacity(FLOOD_BATCH);
        while !stop.load(Ordering::Relaxed) {
            // Requests due by now: the first at once, then one every 1/rate s.
            let due = (start.elapsed().as_secs_f64() * rate as f64) as u64 + 1;
            if due <= sent {
                let next = Duration::from_secs_f64(sent as f64 / rate as f64);
                let wait = next.saturating_sub(start.elapsed()).max(FLOOD_QUANTUM);
                std::thread::sleep(wait);
                continue;
            }
            batch.clear();
            for i in 0..(due - sent).min(FLOOD_BATCH as u64) {
                let pkt = proto::encode_request(0, sent + i + 1, &w.op(&mut x))
                    .map_err(|e| Error::Local(e.to_string()))?;
                batch.push(pkt);
            }
            send_batch(&sock, target, &batch);
            sent += batch.len() as u64;
        }
        let elapsed = start.elapsed();
        sending.store(false, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(200));
        done.store(true, Ordering::Relaxed);
        let (ok, ok_in_time, refused) = receiver
            .join()
            .map_err(|_| Error::Local("receiver panicked".into()))?;
        Ok(FloodReport {
            sent,
            ok,
            ok_in_time,
            refused,
            elapsed,
        })
    })
}

/// Sends every packet of `pkts` to `to`, a `sendmmsg` per [`mmsg::MAX_BATCH`] (more if it
/// stops short); a send error ends the batch (an open loop does not retry: those requests go
/// unanswered).
fn send_batch(sock: &UdpSocket, to: SocketAddr, pkts: &[Vec<u8>]) {
    let fd = std::os::fd::AsRawFd::as_raw_fd(sock);
    let mut from = 0;
    while from < pkts.len() {
        match mmsg::send_batch(fd, pkts[from..].iter().map(|p| (to, p.as_slice()))) {
            Ok(n) if n > 0 => from += n,
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flood keeps its rate in batches and counts every answer: a loopback socket
    /// answers each request, OK for odd sequence numbers and busy for even ones.
    #[test]
    fn a_flood_sends_at_its_rate_in_batches_and_counts_every_answer() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        server
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let target = server.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        // Slow enough that the server socket's default buffer outlasts a descheduled thread.
        let (rate, secs) = (5_000u64, 0.3);
        let (report, answered) = std::thread::scope(|s| {
            let srv = s.spawn(|| {
                let mut buf = [0u8; 2048];
                let mut answered = 0u64;
                // Bounded: it ends when the flood has been quiet for the read timeout.
                while let Ok((n, from)) = server.recv_from(&mut buf) {
                    let req = proto::decode_request(&buf[..n]).expect("a request");
                    let status = if req.seq % 2 == 1 {
                        proto::STATUS_OK
                    } else {
                        proto::STATUS_RETRY
                    };
                    let body = if status == proto::STATUS_OK {
                        Ok(&waverunner_kv::Response::Ok)
                    } else {
                        Err("busy")
                    };
                    let _ = server.send_to(&proto::encode_reply(1, req.seq, status, 1, body), from);
                    answered += 1;
                }
                answered
            });
            let f = s.spawn(|| flood(target, rate, &Workload::default(), &stop));
            std::thread::sleep(Duration::from_secs_f64(secs));
            stop.store(true, Ordering::Relaxed);
            let report = f.join().unwrap().unwrap();
            (report, srv.join().unwrap())
        });
        // Never ahead of its schedule by more than the first request.
        let scheduled = (report.elapsed.as_secs_f64() * rate as f64) as u64 + 1;
        assert!(report.sent <= scheduled, "{report:?} against {scheduled}");
        assert!(report.sent > 0);
        assert_eq!(answered, report.sent, "every request reached the server");
        assert_eq!(report.ok + report.refused, answered, "{report:?}");
        assert_eq!(report.ok, report.sent.div_ceil(2), "{report:?}");
        // This server keeps up: nearly every answer came while the flood ran.
        assert!(report.ok_in_time <= report.ok);
        assert!(report.ok_in_time * 10 >= report.ok * 9, "{report:?}");
        assert!(report.goodput() > 0.0);
    }

    #[test]
    fn goodput_counts_only_what_was_answered_while_the_flood_ran() {
        let r = FloodReport {
            sent: 1_000,
            ok: 600,
            ok_in_time: 400,
            refused: 0,
            elapsed: Duration::from_millis(500),
        };
        assert_eq!(r.goodput(), 800.0);
        assert_eq!(r.goodput_with_drain(), 1_200.0);
    }

    #[test]
    fn nearest_rank_quantiles() {
        assert_eq!(quantile_sorted(&[], 0.5), None);
        assert_eq!(quantile_sorted(&[7], 0.99), Some(7));
        assert_eq!(quantile_sorted(&[1, 2], 0.0), Some(1));
        assert_eq!(quantile_sorted(&[1, 2], 0.5), Some(1));
        assert_eq!(quantile_sorted(&[1, 2], 1.0), Some(2));
        let sorted: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile_sorted(&sorted, 0.99), Some(99));
        let r = Report {
            latencies_us: sorted,
            ..Report::default()
        };
        assert_eq!((r.percentile(0.5), r.percentile(0.9)), (50, 90));
        assert_eq!(Report::default().percentile(0.99), 0);
    }
}
