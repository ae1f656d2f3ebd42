//! One thread carries all of a replica's peer connections (issue 13): however many peers and
//! inbound connections, the transport adds the `raft-net` thread and no other. (A file of its
//! own: other tests' transports would share the process.)

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use waverunner_node::stop::Stop;
use waverunner_node::transport::{Delivery, Transport};
use waverunner_node::wire::{self, Frame};

/// Names of this process's threads.
fn threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
fn one_thread_serves_every_peer_connection() {
    let stop = Arc::new(Stop::new().unwrap());
    let own = TcpListener::bind("127.0.0.1:0").unwrap();
    let own_addr = own.local_addr().unwrap();
    let peers: Vec<TcpListener> = (0..4)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<(u64, std::net::SocketAddr)> = peers
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 2, l.local_addr().unwrap()))
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let before = threads().len();
    let t = Transport::start(
        1,
        own,
        Some(own_addr),
        &addrs,
        move |inb| {
            let _ = tx.send(inb.0);
            Delivery::Taken
        },
        stop.clone(),
    )
    .unwrap();
    // Twenty inbound connections, each delivering a frame.
    let mut inbound = Vec::new();
    for node in 10..30u64 {
        let mut s = TcpStream::connect(own_addr).unwrap();
        let mut b = Vec::new();
        wire::encode_frames(&Frame::Hello { node }, &mut b);
        wire::encode_frames(&Frame::ForwardNack { req: 1, leader: 0 }, &mut b);
        s.write_all(&b).unwrap();
        inbound.push(s);
    }
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 20 {
        seen.insert(rx.recv_timeout(Duration::from_secs(3)).expect("delivered"));
    }
    // Every outbound lane connects (two per peer).
    let deadline = Instant::now() + Duration::from_secs(3);
    while t.stats.connects.load(std::sync::atomic::Ordering::Relaxed) < 8 {
        assert!(Instant::now() < deadline, "the lanes did not connect");
        std::thread::sleep(Duration::from_millis(5));
    }
    let names = threads();
    assert_eq!(
        names.len(),
        before + 1,
        "the transport added more than one thread: {names:?}"
    );
    assert_eq!(names.iter().filter(|n| *n == "raft-net").count(), 1);
    stop.set();
}
