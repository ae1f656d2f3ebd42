//! The native UDP client protocol (`waverunner_kv::native`): one datagram per request and
//! per reply. Invalid datagrams are counted and dropped (a reply to a forged source would be
//! a reflection vector).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use waverunner_kv::codec::encode_op;

use crate::kvsm::response_of;
use waverunner_kv::native::{self as proto, STATUS_ERROR, STATUS_OK, STATUS_RETRY, STATUS_UNKNOWN};

use waverunner_node::replica::{ClientError, Handle, Submit};
use waverunner_node::stop::Stop;

/// The native front-end: decodes request datagrams, submits them, and answers from the
/// fast-path socket.
pub struct Native {
    sock: Arc<UdpSocket>,
    handle: Handle,
    self_id: u64,
}

impl Native {
    /// A front-end that replies through `sock`.
    pub fn new(sock: Arc<UdpSocket>, handle: Handle, self_id: u64) -> Native {
        Native {
            sock,
            handle,
            self_id,
        }
    }

    /// Handles one datagram from `peer`.
    pub fn on_datagram(&self, pkt: &[u8], peer: SocketAddr) {
        let req = match proto::decode_request(pkt) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("dropped a bad datagram from {peer}: {e}");
                self.handle.client_error();
                return;
            }
        };
        if req.origin != 0 {
            // Replicas forward over TCP; a datagram naming an origin is not a client's.
            tracing::debug!(
                "dropped a datagram from {peer} naming origin {}",
                req.origin
            );
            self.handle.client_error();
            return;
        }
        let mut command = Vec::new();
        encode_op(&req.op, &mut command);
        let (out, h, self_id) = (self.sock.clone(), self.handle.clone(), self.self_id);
        let seq = req.seq;
        self.handle.submit(Submit {
            client: req.client,
            seq: req.seq,
            command,
            decoded: Some(Box::new(req.op)),
            reply: Box::new(move |r| {
                let leader = h.leader();
                let pkt = match r.map(response_of) {
                    Ok(Ok(resp)) => proto::encode_reply(self_id, seq, STATUS_OK, leader, Ok(&resp)),
                    Ok(Err(e)) => {
                        let m = format!("undecodable result: {e}");
                        proto::encode_reply(self_id, seq, STATUS_ERROR, leader, Err(&m))
                    }
                    Err(e) => {
                        let status = match e {
                            ClientError::Timeout | ClientError::ShuttingDown => STATUS_UNKNOWN,
                            ClientError::OutOfMemory => STATUS_ERROR,
                            _ => STATUS_RETRY,
                        };
                        proto::encode_reply(self_id, seq, status, leader, Err(&e.to_string()))
                    }
                };
                let _ = out.send_to(&pkt, peer);
            }),
        });
    }
}

/// Serves datagrams on `sock` until `stop` (no data plane: the front-end owns the port).
pub fn serve(sock: UdpSocket, handle: Handle, self_id: u64, stop: Arc<Stop>) {
    let sock = Arc::new(sock);
    let native = Native::new(sock.clone(), handle, self_id);
    let mut buf = vec![0u8; 2048];
    while !stop.is_set() {
        // Sleeps until a datagram or the stop (the only reader: a readable socket does not
        // block the receive).
        if !stop.wait_readable(sock.as_raw_fd(), None) {
            continue;
        }
        let Ok((n, peer)) = sock.recv_from(&mut buf) else {
            continue;
        };
        native.on_datagram(&buf[..n], peer);
    }
}
