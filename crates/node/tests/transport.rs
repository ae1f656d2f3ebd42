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
use waverunner_node::transport::Transport;
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
    let stop = Arc::new(Stop::new().unwrap());
    let own = TcpListener::bind("127.0.0.1:0").unwrap();
    let own_addr = own.local_addr().unwrap();
    let peer = TcpListener::bind("127.0.0.1:0").unwrap();
    let peer_addr: SocketAddr = peer.local_addr().unwrap();
    let t = Transport::start(
        1,
        own,
        Some(own_addr),
        &[(2, peer_addr)],
        |_| true,
        stop.clone(),
    );
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
