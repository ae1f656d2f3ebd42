//! The Redis RESP2 front-end: one connection, parsed, run and answered in order
//! (`waverunner_kv::resp` is the codec).

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::Ordering;

use waverunner_kv::resp;
use waverunner_node::replica::{ClientError, Handle};
use waverunner_node::stop::Stop;

use super::{fill, max_request, native, with_limits, Limits};

fn info_fields(handle: &Handle) -> Vec<(&'static str, String)> {
    let st = handle.status();
    vec![
        ("waverunner_version", env!("CARGO_PKG_VERSION").into()),
        ("process_id", std::process::id().to_string()),
        (
            "role",
            if st.role == "leader" {
                "master"
            } else {
                "slave"
            }
            .into(),
        ),
        ("raft_role", st.role.clone()),
        ("raft_term", st.term.to_string()),
        ("raft_leader", st.leader.to_string()),
        ("raft_commit_index", st.commit_index.to_string()),
        ("raft_applied_index", st.applied_index.to_string()),
        ("db0_keys", st.keys.to_string()),
        ("dataplane", st.dataplane.clone()),
        ("# Memory", String::new()),
        ("used_memory", st.used_memory.to_string()),
        ("used_memory_human", human_bytes(st.used_memory)),
        ("used_memory_rss", st.rss_bytes.to_string()),
        ("maxmemory", st.maxmemory.to_string()),
        ("maxmemory_human", human_bytes(st.maxmemory)),
        ("maxmemory_policy", "noeviction".into()),
    ]
}

/// Bytes as Redis's `*_human` fields write them (`1.50M`).
fn human_bytes(n: u64) -> String {
    let units = [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (u, size) in units {
        if n >= size {
            return format!("{:.2}{u}", n as f64 / size as f64);
        }
    }
    format!("{n}B")
}

pub(super) fn redis_conn(
    s: &mut TcpStream,
    handle: &Handle,
    limits: Limits,
    stop: &Stop,
) -> std::io::Result<()> {
    let rl = resp::Limits {
        max_bulk: limits.max_value,
        ..resp::Limits::default()
    };
    static CONN_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let addr =
        |a: std::io::Result<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    let mut session = resp::Session::new(
        CONN_IDS.fetch_add(1, Ordering::Relaxed),
        addr(s.peer_addr()),
        addr(s.local_addr()),
    );
    let mut buf = Vec::new();
    let mut out = Vec::new();
    loop {
        let mut used = 0;
        loop {
            match resp::parse_command(&buf[used..], &rl) {
                Ok(Some((args, n))) => {
                    used += n;
                    if args.is_empty() {
                        continue;
                    }
                    match resp::command(&args) {
                        resp::Action::Reply(r) => {
                            if r.starts_with(b"-") {
                                handle.client_error();
                            }
                            out.extend_from_slice(&r);
                        }
                        resp::Action::Store(op, render) => {
                            match native::exec(handle, &with_limits(op, limits)) {
                                Ok(r) => out.extend_from_slice(&resp::render(&render, &r)),
                                Err(e) => out.extend_from_slice(&resp_error(&e)),
                            }
                        }
                        resp::Action::Info => {
                            out.extend_from_slice(&resp::render_info(&info_fields(handle)))
                        }
                        resp::Action::Client(cmd) => out.extend_from_slice(&session.client(&cmd)),
                        resp::Action::Quit => {
                            out.extend_from_slice(b"+OK\r\n");
                            s.write_all(&out)?;
                            return Ok(());
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    handle.client_error();
                    out.extend_from_slice(format!("-ERR {e}\r\n").as_bytes());
                    s.write_all(&out)?;
                    return Ok(());
                }
            }
        }
        buf.drain(..used);
        if !out.is_empty() {
            s.write_all(&out)?;
            out.clear();
        }
        if buf.len() > max_request(limits) {
            // One request larger than any sensible one: refuse it rather than buffer it.
            handle.client_error();
            s.write_all(b"-ERR Protocol error: request too large\r\n")?;
            return Ok(());
        }
        if !fill(s, &mut buf, stop)? {
            return Ok(());
        }
    }
}

/// A failed request as Redis answers it: `-OOM …` as Redis words it past `maxmemory`,
/// `-ERR …` otherwise.
fn resp_error(e: &ClientError) -> Vec<u8> {
    match e {
        ClientError::OutOfMemory => {
            b"-OOM command not allowed when used memory > 'maxmemory'.\r\n".to_vec()
        }
        e => format!("-ERR {e}\r\n").into_bytes(),
    }
}
