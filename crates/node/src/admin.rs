//! Admin HTTP: `GET /metrics` (Prometheus text) and `GET /status` (JSON). A minimal HTTP/1.0
//! server: one short-lived connection per request, bounded request size, no keep-alive.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::replica::Handle;

/// Largest request head read.
const MAX_REQUEST: usize = 8 << 10;

/// Serves admin requests until `stop`.
pub fn serve(listener: TcpListener, handle: Handle, stop: Arc<AtomicBool>) {
    let _ = listener.set_nonblocking(true);
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, _)) => {
                let h = handle.clone();
                let _ = std::thread::Builder::new()
                    .name("admin-conn".into())
                    .spawn(move || {
                        let _ = one(s, &h);
                    });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn one(mut s: TcpStream, handle: &Handle) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = Vec::new();
    let mut tmp = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        let n = s.read(&mut tmp)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
        if buf.len() > MAX_REQUEST {
            return respond(
                &mut s,
                "413 Payload Too Large",
                "text/plain",
                "request too large\n",
            );
        }
    }
    let line = String::from_utf8_lossy(&buf);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return respond(&mut s, "405 Method Not Allowed", "text/plain", "only GET\n");
    }
    match path {
        "/metrics" => {
            let body = handle.status().prometheus();
            respond(&mut s, "200 OK", "text/plain; version=0.0.4", &body)
        }
        "/status" => {
            let body = serde_json::to_string_pretty(&handle.status()).expect("status serializes");
            respond(&mut s, "200 OK", "application/json", &body)
        }
        _ => respond(
            &mut s,
            "404 Not Found",
            "text/plain",
            "not found: try /metrics or /status\n",
        ),
    }
}

fn respond(s: &mut TcpStream, code: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.0 {code}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())
}

/// Fetches `path` from an admin server (for `waverunner status` and tests).
pub fn get(addr: std::net::SocketAddr, path: &str, timeout: Duration) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    match out.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.0 200") => Ok(body.to_string()),
        Some((head, _)) => Err(std::io::Error::other(format!(
            "admin server answered {}",
            head.lines().next().unwrap_or("")
        ))),
        None => Err(std::io::Error::other("malformed admin reply")),
    }
}
