//! Admin HTTP: `GET /metrics` (Prometheus text), `GET /status` (JSON), and the membership
//! commands `POST /membership` and `POST /transfer-leader` (JSON in, JSON out). HTTP/1.0
//! answers, one short-lived connection per request, bounded request size and connections
//! ([`MAX_CONNECTIONS`], a 503 past it), no keep-alive. Requests (and, in the client
//! functions, answers) are parsed by `httparse`; the accept loop and its bound are ours:
//! `tiny_http` grows a thread per waiting connection without a bound, and hyper needs an async
//! runtime for three endpoints.
//!
//! ```text
//! POST /membership       {"op":"add_learner","id":4,"raft":"10.0.0.4:7000","client":"10.0.0.4:7100"}
//!                        {"op":"add_voter","id":4}        {"op":"remove","id":2}
//! POST /transfer-leader  {"id":3}
//! → 200 {"ok":true,"index":I}     the change is committed at index I (a transfer: started, I = 0)
//! → 409 {"ok":false,"error":"not leader","leader":3,"message":"…"}   ask replica 3 instead
//!       error: not leader | change pending | not committed in term | would lose quorum |
//!              invalid | retry | lost
//! → 503 busy | shutting down; 504 timeout (proposed, may still commit); 400 bad request
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::replica::{AdminCmd, AdminError, Handle};
use crate::stop::Stop;

/// Largest request head read.
const MAX_REQUEST: usize = 8 << 10;
/// Largest request body read.
const MAX_BODY: usize = 4 << 10;

/// Admin connections served at once at most (a thread each); past it a connection is answered
/// 503 at once and closed, so that idle or slow clients cannot pile up threads.
pub const MAX_CONNECTIONS: usize = 64;

/// Serves admin requests until `stop`.
pub fn serve(listener: TcpListener, handle: Handle, stop: Arc<Stop>) {
    let _ = listener.set_nonblocking(true);
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while !stop.is_set() {
        match listener.accept() {
            Ok((mut s, _)) => {
                use std::sync::atomic::Ordering;
                if open.load(Ordering::Acquire) >= MAX_CONNECTIONS {
                    // A short answer fits the new socket's buffer: this write does not block.
                    let _ = respond(
                        &mut s,
                        "503 Service Unavailable",
                        "text/plain",
                        "too many admin connections\n",
                    );
                    continue;
                }
                open.fetch_add(1, Ordering::AcqRel);
                let (h, open2) = (handle.clone(), open.clone());
                let spawned =
                    std::thread::Builder::new()
                        .name("admin-conn".into())
                        .spawn(move || {
                            let _ = one(s, &h);
                            open2.fetch_sub(1, Ordering::AcqRel);
                        });
                if spawned.is_err() {
                    open.fetch_sub(1, Ordering::AcqRel);
                }
            }
            Err(_) => {
                stop.wait_readable(listener.as_raw_fd(), None);
            }
        }
    }
}

/// The body of `POST /membership`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MembershipRequest {
    /// `add_learner`, `add_voter` or `remove`.
    pub op: String,
    /// The member.
    pub id: u64,
    /// Its control-plane TCP address (`add_learner`; `add_voter` of an unknown member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft: Option<String>,
    /// Its native client UDP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// The body of `POST /transfer-leader`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferRequest {
    /// The voter to lead.
    pub id: u64,
}

/// The answer to an admin command.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdminAnswer {
    /// Whether the command succeeded.
    pub ok: bool,
    /// The index of the committed change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// Why it failed: `not leader`, `change pending`, `not committed in term`,
    /// `would lose quorum`, `invalid`, `retry`, `lost`, `timeout`, `busy`, `shutting down`,
    /// `bad request`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// With `not leader`: the leader the replica knows (0: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<u64>,
    /// A sentence for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl AdminAnswer {
    fn failed(error: &str, message: String) -> AdminAnswer {
        AdminAnswer {
            ok: false,
            error: Some(error.into()),
            message: Some(message),
            ..AdminAnswer::default()
        }
    }

    /// Whether sending the same command again may succeed (perhaps to [`AdminAnswer::leader`]).
    pub fn retriable(&self) -> bool {
        !self.ok
            && !matches!(
                self.error.as_deref(),
                Some("invalid" | "would lose quorum" | "bad request")
            )
    }
}

fn answer_of(r: Result<u64, AdminError>) -> (&'static str, AdminAnswer) {
    match r {
        Ok(index) => (
            "200 OK",
            AdminAnswer {
                ok: true,
                index: Some(index),
                ..AdminAnswer::default()
            },
        ),
        Err(e) => {
            let code = match e {
                AdminError::Busy | AdminError::ShuttingDown => "503 Service Unavailable",
                AdminError::Timeout => "504 Gateway Timeout",
                _ => "409 Conflict",
            };
            let mut a = AdminAnswer::failed(e.reason(), e.to_string());
            if let AdminError::NotLeader { leader } = e {
                a.leader = Some(leader);
            }
            (code, a)
        }
    }
}

fn parse_addr(what: &str, a: &Option<String>) -> Result<Option<SocketAddr>, String> {
    a.as_deref()
        .map(|t| {
            t.parse()
                .map_err(|_| format!("\"{what}\": `{t}` is not ip:port"))
        })
        .transpose()
}

/// The command a membership request asks for.
pub fn membership_cmd(r: &MembershipRequest) -> Result<AdminCmd, String> {
    if r.id == 0 {
        return Err("\"id\" must be a non-zero node id".into());
    }
    let raft = parse_addr("raft", &r.raft)?;
    let client = parse_addr("client", &r.client)?;
    match r.op.as_str() {
        "add_learner" => Ok(AdminCmd::AddLearner {
            id: r.id,
            raft: raft.ok_or("add_learner needs \"raft\": the new member's address")?,
            client,
        }),
        "add_voter" => Ok(AdminCmd::AddVoter {
            id: r.id,
            raft,
            client,
        }),
        "remove" => Ok(AdminCmd::Remove { id: r.id }),
        op => Err(format!(
            "unknown \"op\" `{op}`: use add_learner, add_voter or remove"
        )),
    }
}

fn one(s: TcpStream, handle: &Handle) -> std::io::Result<()> {
    let mut bad = false;
    let r = serve_one(s, handle, &mut bad);
    if bad {
        // Bad admin requests count as bad client input, like garbage on the client ports.
        handle.client_error();
    }
    r
}

/// A request as the admin server reads it.
struct Request {
    method: String,
    path: String,
    /// `Content-Length`, if given.
    length: Option<usize>,
    body: Vec<u8>,
}

/// Reads one request: its head parsed by `httparse` (bounded by [`MAX_REQUEST`]), then a
/// body of `Content-Length` bytes (at most [`MAX_BODY`]). `Err((status, why))` for a request
/// that is refused unread.
fn read_request(s: &mut TcpStream) -> std::io::Result<Result<Request, (&'static str, String)>> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 1024];
    let (method, path, length, head_len) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let mut length = None;
                for h in req.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        let v = std::str::from_utf8(h.value).ok().map(str::trim);
                        match v.and_then(|v| v.parse::<usize>().ok()) {
                            Some(n) => length = Some(n),
                            None => {
                                return Ok(Err((
                                    "400 Bad Request",
                                    "Content-Length is not a number\n".into(),
                                )))
                            }
                        }
                    } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                        return Ok(Err((
                            "411 Length Required",
                            "no chunked bodies: send Content-Length\n".into(),
                        )));
                    }
                }
                let method = req.method.unwrap_or("").to_string();
                let path = req.path.unwrap_or("").to_string();
                break (method, path, length, head_len);
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Ok(Err(("400 Bad Request", format!("bad request: {e}\n")))),
        }
        if buf.len() > MAX_REQUEST {
            return Ok(Err(("413 Payload Too Large", "request too large\n".into())));
        }
        let n = s.read(&mut tmp)?;
        if n == 0 {
            return Ok(Err(("400 Bad Request", "incomplete request\n".into())));
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let mut body = buf[head_len..].to_vec();
    if let Some(length) = length {
        if length > MAX_BODY {
            return Ok(Err(("413 Payload Too Large", "body too large\n".into())));
        }
        while body.len() < length {
            let n = s.read(&mut tmp)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&tmp[..n]);
        }
        body.truncate(length);
    }
    Ok(Ok(Request {
        method,
        path,
        length,
        body,
    }))
}

fn serve_one(mut s: TcpStream, handle: &Handle, bad: &mut bool) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let req = match read_request(&mut s)? {
        Ok(r) => r,
        Err((code, why)) => {
            *bad = true;
            return respond(&mut s, code, "text/plain", &why);
        }
    };
    let (method, path) = (req.method.as_str(), req.path.as_str());
    if method != "GET" && method != "POST" {
        *bad = true;
        return respond(
            &mut s,
            "405 Method Not Allowed",
            "text/plain",
            "only GET and POST\n",
        );
    }
    match (method, path) {
        ("GET", "/metrics") => {
            let body = handle.status_with_latency().prometheus();
            respond(
                &mut s,
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                &body,
            )
        }
        ("GET", "/status") => {
            let body = serde_json::to_string_pretty(&handle.status_with_latency())
                .expect("status serializes");
            respond(&mut s, "200 OK", "application/json", &body)
        }
        ("POST", "/membership" | "/transfer-leader") => {
            if req.length.is_none() {
                *bad = true;
                return respond(
                    &mut s,
                    "411 Length Required",
                    "text/plain",
                    "a POST needs Content-Length\n",
                );
            }
            let body = &req.body;
            let cmd = if path == "/membership" {
                serde_json::from_slice::<MembershipRequest>(body)
                    .map_err(|e| format!("body is not a membership request: {e}"))
                    .and_then(|r| membership_cmd(&r))
            } else {
                serde_json::from_slice::<TransferRequest>(body)
                    .map_err(|e| format!("body is not a transfer request: {e}"))
                    .and_then(|r| {
                        if r.id == 0 {
                            Err("\"id\" must be a non-zero node id".into())
                        } else {
                            Ok(AdminCmd::TransferLeader { id: r.id })
                        }
                    })
            };
            let (code, answer) = match cmd {
                Ok(cmd) => answer_of(handle.admin(cmd)),
                Err(e) => {
                    *bad = true;
                    ("400 Bad Request", AdminAnswer::failed("bad request", e))
                }
            };
            let body = serde_json::to_string(&answer).expect("answer serializes") + "\n";
            respond(&mut s, code, "application/json", &body)
        }
        ("POST", "/snapshot") => {
            // Answered once the snapshot is written (the benchmark times it).
            match handle.admin(AdminCmd::Snapshot) {
                Ok(index) => {
                    let snap = handle.status().snapshot;
                    let body = serde_json::json!({
                        "ok": true,
                        "index": index,
                        "bytes": snap.last_bytes,
                        "duration_ms": snap.last_duration_ms,
                    })
                    .to_string()
                        + "\n";
                    respond(&mut s, "200 OK", "application/json", &body)
                }
                Err(e) => {
                    let (code, answer) = answer_of(Err(e));
                    let body = serde_json::to_string(&answer).expect("answer serializes") + "\n";
                    respond(&mut s, code, "application/json", &body)
                }
            }
        }
        (_, "/snapshot") => {
            *bad = true;
            respond(&mut s, "405 Method Not Allowed", "text/plain", "use POST\n")
        }
        (_, "/metrics" | "/status") => {
            *bad = true;
            respond(&mut s, "405 Method Not Allowed", "text/plain", "use GET\n")
        }
        (_, "/membership" | "/transfer-leader") => {
            *bad = true;
            respond(&mut s, "405 Method Not Allowed", "text/plain", "use POST\n")
        }
        _ => {
            *bad = true;
            respond(
                &mut s,
                "404 Not Found",
                "text/plain",
                "not found: try GET /metrics, GET /status, POST /membership, POST /transfer-leader, POST /snapshot\n",
            )
        }
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

/// Sends `request` to an admin server and reads its answer: the status code and the body
/// (the head parsed by `httparse`; the body up to `Content-Length`, or to the close).
fn exchange(addr: SocketAddr, request: &[u8], timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(request)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(&out) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return Err(std::io::Error::other("truncated admin reply"))
        }
        Err(e) => return Err(std::io::Error::other(format!("malformed admin reply: {e}"))),
    };
    let code = resp.code.unwrap_or(0);
    let length = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        });
    let mut body = &out[head_len..];
    if let Some(n) = length {
        if body.len() < n {
            return Err(std::io::Error::other("truncated admin reply body"));
        }
        body = &body[..n];
    }
    Ok((code, String::from_utf8_lossy(body).into_owned()))
}

/// Fetches `path` from an admin server (for `waverunner status` and tests).
pub fn get(addr: std::net::SocketAddr, path: &str, timeout: Duration) -> std::io::Result<String> {
    let req = format!("GET {path} HTTP/1.0\r\n\r\n");
    match exchange(addr, req.as_bytes(), timeout)? {
        (200, body) => Ok(body),
        (code, _) => Err(std::io::Error::other(format!(
            "admin server answered {code}"
        ))),
    }
}

/// Posts a JSON `body` to `path` of an admin server; returns the status code and the body of
/// the answer, whatever the code.
pub fn post(
    addr: SocketAddr,
    path: &str,
    body: &str,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let req = format!(
        "POST {path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    exchange(addr, req.as_bytes(), timeout)
}

/// Asks the admin server at `addr` for a membership change and decodes its answer (a refused
/// change is `Ok` with `ok: false`; `Err` means no answer).
pub fn request_membership(
    addr: SocketAddr,
    req: &MembershipRequest,
    timeout: Duration,
) -> Result<AdminAnswer, String> {
    let body = serde_json::to_string(req).expect("request serializes");
    let (code, text) = post(addr, "/membership", &body, timeout)
        .map_err(|e| format!("POST http://{addr}/membership: {e}"))?;
    serde_json::from_str(&text).map_err(|e| {
        format!("POST http://{addr}/membership answered {code} without JSON ({e}): {text}")
    })
}

/// Asks the admin server at `addr` to hand leadership to `id`.
pub fn request_transfer(
    addr: SocketAddr,
    id: u64,
    timeout: Duration,
) -> Result<AdminAnswer, String> {
    let body = serde_json::to_string(&TransferRequest { id }).expect("request serializes");
    let (code, text) = post(addr, "/transfer-leader", &body, timeout)
        .map_err(|e| format!("POST http://{addr}/transfer-leader: {e}"))?;
    serde_json::from_str(&text).map_err(|e| {
        format!("POST http://{addr}/transfer-leader answered {code} without JSON ({e}): {text}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_requests_parse_into_commands() {
        let r = |j: &str| {
            serde_json::from_str::<MembershipRequest>(j)
                .map_err(|e| e.to_string())
                .and_then(|r| membership_cmd(&r))
        };
        assert_eq!(
            r(r#"{"op":"add_learner","id":4,"raft":"127.0.0.1:7004","client":"127.0.0.1:7104"}"#),
            Ok(AdminCmd::AddLearner {
                id: 4,
                raft: "127.0.0.1:7004".parse().unwrap(),
                client: Some("127.0.0.1:7104".parse().unwrap()),
            })
        );
        assert_eq!(
            r(r#"{"op":"add_voter","id":4}"#),
            Ok(AdminCmd::AddVoter {
                id: 4,
                raft: None,
                client: None
            })
        );
        assert_eq!(
            r(r#"{"op":"remove","id":2}"#),
            Ok(AdminCmd::Remove { id: 2 })
        );
        for (bad, says) in [
            (r#"{"op":"add_learner","id":4}"#, "needs \"raft\""),
            (r#"{"op":"add_learner","id":4,"raft":"x"}"#, "not ip:port"),
            (r#"{"op":"remove","id":0}"#, "non-zero"),
            (r#"{"op":"promote","id":3}"#, "unknown \"op\""),
            (r#"{"op":"remove","id":3,"extra":1}"#, "unknown field"),
            (r#"{"op":"remove"}"#, "missing field"),
        ] {
            let e = r(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn answers_say_why_and_where_to_retry() {
        let (code, a) = answer_of(Err(AdminError::NotLeader { leader: 3 }));
        assert!(code.starts_with("409"));
        assert_eq!(a.error.as_deref(), Some("not leader"));
        assert_eq!(a.leader, Some(3));
        assert!(a.retriable());
        let json = serde_json::to_string(&a).unwrap();
        assert!(
            json.starts_with(r#"{"ok":false,"error":"not leader","leader":3"#),
            "{json}"
        );
        let (code, a) = answer_of(Ok(17));
        assert!(code.starts_with("200"));
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"ok":true,"index":17}"#
        );
        for (e, reason, retriable) in [
            (AdminError::ChangePending, "change pending", true),
            (
                AdminError::NotCommittedInTerm,
                "not committed in term",
                true,
            ),
            (AdminError::WouldLoseQuorum, "would lose quorum", false),
            (AdminError::Invalid("x".into()), "invalid", false),
            (AdminError::Timeout, "timeout", true),
            (AdminError::Lost, "lost", true),
        ] {
            let (_, a) = answer_of(Err(e));
            assert_eq!(a.error.as_deref(), Some(reason));
            assert_eq!(a.retriable(), retriable, "{reason}");
        }
    }
}
