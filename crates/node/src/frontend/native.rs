//! The native UDP client protocol (`waverunner_client::proto`): one datagram per request and
//! per reply. Invalid datagrams are counted and dropped (a reply to a forged source would be
//! a reflection vector).

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use waverunner_client::proto::{self, STATUS_ERROR, STATUS_OK, STATUS_RETRY, STATUS_UNKNOWN};
use waverunner_kv::codec::{decode_response, encode_op};
use waverunner_kv::Response;

use crate::replica::{ClientError, Handle};

/// Serves datagrams on `sock` until `stop`.
pub fn serve(sock: UdpSocket, handle: Handle, self_id: u64, stop: Arc<AtomicBool>) {
    let sock = Arc::new(sock);
    let _ = sock.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = vec![0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, peer)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let req = match proto::decode_request(&buf[..n]) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("dropped a bad datagram from {peer}: {e}");
                handle.client_error();
                continue;
            }
        };
        let mut command = Vec::new();
        encode_op(&req.op, &mut command);
        let (out, h) = (sock.clone(), handle.clone());
        let seq = req.seq;
        handle.submit(
            req.client,
            req.seq,
            command,
            Box::new(move |r| {
                let leader = h.status().leader;
                let pkt = match r.map(|b| decode_response(&b)) {
                    Ok(Ok(resp)) => proto::encode_reply(self_id, seq, STATUS_OK, leader, Ok(&resp)),
                    Ok(Err(e)) => {
                        let m = format!("undecodable result: {e}");
                        proto::encode_reply(self_id, seq, STATUS_ERROR, leader, Err(&m))
                    }
                    Err(e) => {
                        let status = match e {
                            ClientError::Timeout | ClientError::ShuttingDown => STATUS_UNKNOWN,
                            _ => STATUS_RETRY,
                        };
                        proto::encode_reply(self_id, seq, status, leader, Err(&e.to_string()))
                    }
                };
                let _ = out.send_to(&pkt, peer);
            }),
        );
    }
}

/// Runs one operation through the replica (front-ends of TCP protocols use it).
pub fn exec(handle: &Handle, op: &waverunner_kv::Op) -> Result<Response, ClientError> {
    let mut command = Vec::new();
    encode_op(op, &mut command);
    let bytes = handle.call(0, 0, command)?;
    decode_response(&bytes)
        .map_err(|e| ClientError::Unavailable(format!("undecodable result: {e}")))
}
