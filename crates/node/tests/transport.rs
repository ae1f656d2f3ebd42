//! The replica transport against a peer that crashes and comes back on the same address: the
//! first frame sent after the restart must reach the new incarnation, not vanish into the dead
//! connection (which is what made elections after a restart take an extra round). The
//! transport opens two connections per peer (control and bulk lanes); small frames such as
//! the `ForwardNack`s used here take the control one, a large forward the bulk one.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use waverunner_node::stop::Stop;
use waverunner_node::transport::{Delivery, Transport};
use waverunner_node::wire::{self, Frame, HEADER_LEN};

const WAIT: Duration = Duration::from_secs(3);

/// Reads one frame from a connection (None at end of stream or after `WAIT`).
fn read_frame(s: &mut TcpStream) -> Option<Frame> {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h).ok()?;
    let (kind, len, crc) = wire::decode_header(&h).expect("a valid header");
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).ok()?;
    Some(wire::decode_payload(kind, crc, &p).expect("a valid frame"))
}

/// Accepts the transport's connection and reads its hello and advertise.
fn accept(l: &TcpListener) -> TcpStream {
    l.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + WAIT;
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(_) => {
                assert!(Instant::now() < deadline, "the transport never connected");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    s.set_nonblocking(false).unwrap();
    assert!(matches!(read_frame(&mut s), Some(Frame::Hello { node: 1 })));
    assert!(matches!(read_frame(&mut s), Some(Frame::Advertise { .. })));
    s
}

fn nack(req: u64) -> Frame {
    Frame::ForwardNack { req, leader: 0 }
}

fn expect_nack(s: &mut TcpStream, req: u64) {
    match read_frame(s) {
        Some(Frame::ForwardNack { req: r, .. }) => assert_eq!(r, req),
        other => panic!("expected the frame {req}, got {other:?}"),
    }
}

/// Waits for the frame `req` on whichever of `conns` it arrives; returns that connection's
/// position.
fn find_nack(conns: &mut [TcpStream], req: u64) -> usize {
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "frame {req} never arrived");
        for (i, c) in conns.iter_mut().enumerate() {
            c.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
            let mut h = [0u8; HEADER_LEN];
            if c.peek(&mut h).is_ok_and(|n| n > 0) {
                expect_nack(c, req);
                return i;
            }
        }
    }
}

/// A transport (node 1) connected to a raw peer (node 2) that already received frame 1 on its
/// control connection.
struct Link {
    t: Arc<Transport>,
    peer: TcpListener,
    peer_addr: SocketAddr,
    conn: TcpStream,
    bulk: TcpStream,
    stop: Arc<Stop>,
}

fn link() -> Link {
    let peer = TcpListener::bind("127.0.0.1:0").unwrap();
    let peer_addr: SocketAddr = peer.local_addr().unwrap();
    let (t, stop) = sender(peer_addr);
    let mut conns = [accept(&peer), accept(&peer)];
    t.send(2, nack(1));
    let i = find_nack(&mut conns, 1);
    let [a, b] = conns;
    let (conn, bulk) = if i == 0 { (a, b) } else { (b, a) };
    Link {
        t,
        peer,
        peer_addr,
        conn,
        bulk,
        stop,
    }
}

#[test]
fn first_frame_after_a_peer_restart_reaches_the_new_incarnation() {
    let Link {
        t,
        peer,
        peer_addr,
        conn: first,
        bulk,
        stop,
    } = link();
    // The peer crashes: its process's sockets close, and it starts again on the same port.
    drop(first);
    drop(bulk);
    drop(peer);
    let peer = TcpListener::bind(peer_addr).expect("rebind the peer's port");
    // Give the close time to arrive, as a real restart would; the transport is idle meanwhile.
    std::thread::sleep(Duration::from_millis(50));

    t.send(2, nack(2));
    find_nack(&mut [accept(&peer), accept(&peer)], 2);
    assert!(t.stats.closed_found.load(Ordering::Relaxed) >= 1);
    assert_eq!(t.stats.frames_dropped.load(Ordering::Relaxed), 0);
    stop.set();
}

#[test]
fn a_frame_sent_the_moment_the_peer_closed_is_carried_to_the_next_connection() {
    let l = link();
    // Close and send at once: whether the idle check or the check before the write finds the
    // close, frame 2 must arrive on the next connection.
    drop(l.conn);
    l.t.send(2, nack(2));
    let mut second = accept(&l.peer);
    expect_nack(&mut second, 2);
    l.stop.set();
}

#[test]
fn frames_queued_before_a_peer_is_removed_are_still_sent() {
    let l = link();
    let t = &l.t;
    let (mut control, mut s) = (l.conn, l.bulk);
    // A frame larger than the socket buffers keeps the sender writing until the peer reads.
    let big = Frame::Forward {
        req: 1,
        client: 0,
        seq: 0,
        command: vec![7u8; 64 << 20],
    };
    t.send(2, big.clone());
    std::thread::sleep(Duration::from_millis(100));
    // The last frame before the removal (for a removed follower: the append that carries the
    // commit index of its removal), queued while the sender is still busy.
    t.send(2, nack(2));
    t.remove_peer(2);
    let mut re = wire::Reassembly::default();
    let deadline = Instant::now() + WAIT;
    let first = loop {
        assert!(Instant::now() < deadline, "the large frame never arrived");
        match read_frame(&mut s) {
            Some(Frame::Chunk {
                total,
                offset,
                kind,
                bytes,
            }) => {
                if let Some(f) = re.push(total, offset, kind, &bytes).unwrap() {
                    break f;
                }
            }
            other => panic!("expected chunks of the large frame, got {other:?}"),
        }
    };
    assert!(matches!(first, Frame::Forward { req: 1, .. }));
    expect_nack(&mut control, 2);
    // Then both connections close (end of stream, not a timeout): the removed peer is not
    // talked to any more.
    for c in [&mut s, &mut control] {
        c.set_read_timeout(Some(WAIT)).unwrap();
        assert_eq!(c.read(&mut [0u8; 1]).expect("end of stream"), 0);
    }
    l.stop.set();
}

/// A receiving transport, where it listens, what it delivered, and its stop.
type Receiver = (
    Arc<Transport>,
    SocketAddr,
    std::sync::mpsc::Receiver<(u64, Frame)>,
    Arc<Stop>,
);

/// A transport (node `id`) on loopback whose deliveries go to a channel, through `gate`.
fn receiver(
    id: u64,
    peers: &[(u64, SocketAddr)],
    mut gate: impl FnMut(&(u64, Frame, Instant)) -> bool + Send + 'static,
) -> Receiver {
    let stop = Arc::new(Stop::new().unwrap());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = Transport::start(
        id,
        l,
        Some(addr),
        peers,
        move |inb| {
            if !gate(&inb) {
                return Delivery::Full(inb);
            }
            let _ = tx.send((inb.0, inb.1));
            Delivery::Taken
        },
        stop.clone(),
    )
    .unwrap();
    (t, addr, rx, stop)
}

/// A transport (node 1) that talks to node 2 at `peer`, and its stop.
fn sender(peer: SocketAddr) -> (Arc<Transport>, Arc<Stop>) {
    let stop = Arc::new(Stop::new().unwrap());
    let own = TcpListener::bind("127.0.0.1:0").unwrap();
    let own_addr = own.local_addr().unwrap();
    let t = Transport::start(
        1,
        own,
        Some(own_addr),
        &[(2, peer)],
        |_| Delivery::Taken,
        stop.clone(),
    )
    .unwrap();
    (t, stop)
}

/// A raw peer connection to `addr` that said hello as `node`.
fn raw_peer(addr: SocketAddr, node: u64) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    write_frames(&mut s, &[Frame::Hello { node }]);
    s
}

fn write_frames(s: &mut TcpStream, frames: &[Frame]) {
    use std::io::Write;
    let mut b = Vec::new();
    for f in frames {
        wire::encode_frames(f, &mut b);
    }
    s.write_all(&b).unwrap();
}

fn recv(rx: &std::sync::mpsc::Receiver<(u64, Frame)>) -> (u64, Frame) {
    rx.recv_timeout(WAIT).expect("a frame delivered")
}

#[test]
fn a_full_loop_queue_holds_one_peers_frames_and_not_the_others() {
    let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = open.clone();
    // The loop's queue is "full" for node 7's frames until opened; node 9's always fit.
    let (_t, addr, rx, stop) = receiver(1, &[], move |(from, _, _)| {
        *from != 7 || gate.load(Ordering::SeqCst)
    });
    let mut held = raw_peer(addr, 7);
    let mut other = raw_peer(addr, 9);
    write_frames(&mut held, &(1..=50).map(nack).collect::<Vec<_>>());
    write_frames(&mut other, &(101..=150).map(nack).collect::<Vec<_>>());
    for req in 101..=150 {
        match recv(&rx) {
            (9, Frame::ForwardNack { req: r, .. }) => assert_eq!(r, req),
            other => panic!("expected node 9's frame {req}, got {other:?}"),
        }
    }
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "a frame the loop had no room for was delivered"
    );
    open.store(true, Ordering::SeqCst);
    // Held, then read on: every frame once, in order.
    for req in 1..=50 {
        match recv(&rx) {
            (7, Frame::ForwardNack { req: r, .. }) => assert_eq!(r, req),
            other => panic!("expected node 7's frame {req}, got {other:?}"),
        }
    }
    stop.set();
}

#[test]
fn garbage_closes_that_connection_only() {
    use std::io::Write;
    let (t, addr, rx, stop) = receiver(1, &[], |_| true);
    let mut good = raw_peer(addr, 7);
    let mut bad = raw_peer(addr, 8);
    bad.write_all(&[0xAB; 64]).unwrap();
    // The transport closes the bad connection: end of stream (or a reset) on our side.
    bad.set_read_timeout(Some(WAIT)).unwrap();
    assert!(!matches!(bad.read(&mut [0u8; 1]), Ok(n) if n > 0));
    let mut nohello = TcpStream::connect(addr).unwrap();
    write_frames(&mut nohello, &[nack(5)]);
    nohello.set_read_timeout(Some(WAIT)).unwrap();
    assert!(!matches!(nohello.read(&mut [0u8; 1]), Ok(n) if n > 0));
    write_frames(&mut good, &[nack(1)]);
    assert!(matches!(recv(&rx), (7, Frame::ForwardNack { req: 1, .. })));
    assert!(t.stats.frames_rejected.load(Ordering::Relaxed) >= 2);
    stop.set();
}

#[test]
fn a_large_message_does_not_hold_the_control_lane() {
    // Node 2 receives; node 1 sends a 64 MiB forward (bulk lane) and then small frames
    // (control lane): the small ones arrive while the large one is still on its way, and the
    // large one arrives whole.
    let (rt, raddr, rx, rstop) = receiver(2, &[], |_| true);
    let (t, stop) = sender(raddr);
    let command: Vec<u8> = (0..64usize << 20).map(|i| (i % 251) as u8).collect();
    t.send(
        2,
        Frame::Forward {
            req: 1,
            client: 0,
            seq: 0,
            command: command.clone(),
        },
    );
    // The small frames go once pieces of the large one arrive (four hellos and advertises
    // first).
    let deadline = Instant::now() + Duration::from_secs(10);
    while rt.stats.frames_received.load(Ordering::Relaxed) < 6 {
        assert!(Instant::now() < deadline, "the large frame never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    for req in 2..=20 {
        t.send(2, nack(req));
    }
    let mut order = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while order.len() < 20 {
        assert!(Instant::now() < deadline, "frames missing: got {order:?}");
        match rx.recv_timeout(Duration::from_secs(30)).expect("a frame") {
            (1, Frame::Advertise { .. }) => {}
            (1, Frame::ForwardNack { req, .. }) => order.push(req),
            (
                1,
                Frame::Forward {
                    req, command: c, ..
                },
            ) => {
                assert_eq!(req, 1);
                assert!(c == command, "the large frame arrived changed");
                order.push(req);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let large_at = order.iter().position(|r| *r == 1).unwrap();
    assert!(
        large_at > 0,
        "the control lane waited for the large frame: {order:?}"
    );
    let small: Vec<u64> = order.iter().copied().filter(|r| *r != 1).collect();
    assert_eq!(
        small,
        (2..=20).collect::<Vec<_>>(),
        "control frames out of order"
    );
    assert_eq!(t.stats.frames_dropped.load(Ordering::Relaxed), 0);
    stop.set();
    rstop.set();
}

#[test]
fn snapshot_pieces_go_through_a_helper_in_order_with_the_lane() {
    use waverunner_raft::{ConfState, Message, MessageBody, SnapshotMeta};
    // Snapshot pieces are read from the snapshot's mapping as they are encoded: a helper
    // writes each, the lane waits for it, and the pieces arrive whole and in order.
    let (_rt, raddr, rx, rstop) = receiver(2, &[], |_| true);
    let (t, stop) = sender(raddr);
    let piece = |offset: u64| {
        let data: Vec<u8> = (0..100_000u64)
            .map(|i| ((i + offset) % 253) as u8)
            .collect();
        Frame::Raft(Message {
            from: 1,
            to: 2,
            term: 3,
            body: MessageBody::InstallSnapshot {
                meta: SnapshotMeta {
                    index: 10,
                    term: 2,
                    conf: ConfState {
                        voters: vec![1, 2, 3],
                        learners: vec![],
                    },
                },
                total: 1_000_000,
                offset,
                data: data.into(),
            },
        })
    };
    let sent: Vec<Frame> = (0..10).map(|i| piece(i * 100_000)).collect();
    for f in &sent {
        t.send(2, f.clone());
    }
    let mut got = Vec::new();
    while got.len() < sent.len() {
        match rx.recv_timeout(WAIT).expect("a piece") {
            (1, Frame::Advertise { .. }) => {}
            (1, f) => got.push(f),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(got == sent, "pieces changed or out of order");
    // Counted when the helper hands the connection back, maybe after the piece arrived.
    let deadline = Instant::now() + WAIT;
    while t.stats.frames_sent.load(Ordering::Relaxed) < 10 {
        assert!(Instant::now() < deadline, "pieces not counted as sent");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(t.stats.frames_dropped.load(Ordering::Relaxed), 0);
    stop.set();
    rstop.set();
}

#[test]
fn a_peer_at_a_new_address_is_reconnected_there_and_the_old_connections_close() {
    let Link {
        t,
        peer: _old,
        conn: mut old_control,
        bulk: mut old_bulk,
        stop,
        ..
    } = link();
    let moved = TcpListener::bind("127.0.0.1:0").unwrap();
    t.add_peer(2, moved.local_addr().unwrap());
    assert_eq!(t.peers(), vec![(2, moved.local_addr().unwrap())]);
    t.send(2, nack(2));
    find_nack(&mut [accept(&moved), accept(&moved)], 2);
    // The old address's connections are closed: end of stream, not a timeout.
    for c in [&mut old_control, &mut old_bulk] {
        c.set_read_timeout(Some(WAIT)).unwrap();
        assert_eq!(c.read(&mut [0u8; 1]).expect("end of stream"), 0);
    }
    assert_eq!(t.stats.frames_dropped.load(Ordering::Relaxed), 0);
    stop.set();
}
