//! The memcached text front-end: one connection, parsed, run and answered in order
//! (`waverunner_kv::memcache` is the codec).

use std::io::Write;
use std::net::TcpStream;

use waverunner_kv::memcache;
use waverunner_node::replica::{ClientError, Handle};
use waverunner_node::stop::Stop;

use super::{fill, native, with_limits, Limits};

pub(super) fn memcache_conn(
    s: &mut TcpStream,
    handle: &Handle,
    limits: Limits,
    stop: &Stop,
) -> std::io::Result<()> {
    let ml = memcache::Limits {
        max_value: limits.max_value,
        ..memcache::Limits::default()
    };
    let mut buf = Vec::new();
    let mut out = Vec::new();
    loop {
        let mut used = 0;
        loop {
            match memcache::parse_command(&buf[used..], &ml) {
                Ok(Some((cmd, n))) => {
                    used += n;
                    match memcache::command(cmd) {
                        memcache::McAction::Reply(r) => {
                            if r.starts_with(b"ERROR") || r.starts_with(b"CLIENT_ERROR") {
                                handle.client_error();
                            }
                            out.extend_from_slice(&r);
                        }
                        memcache::McAction::Store {
                            op,
                            render,
                            noreply,
                        } => {
                            let r = match native::exec(handle, &with_limits(op, limits)) {
                                Ok(r) => memcache::render(&render, &r),
                                Err(e) => memcache_error(&e),
                            };
                            if !noreply {
                                out.extend_from_slice(&r);
                            }
                        }
                        memcache::McAction::Stats => {
                            let st = handle.status();
                            let fields = vec![
                                ("pid", std::process::id().to_string()),
                                (
                                    "version",
                                    format!("waverunner-{}", env!("CARGO_PKG_VERSION")),
                                ),
                                ("curr_items", st.keys.to_string()),
                                ("raft_role", st.role.clone()),
                                ("raft_term", st.term.to_string()),
                                ("raft_commit_index", st.commit_index.to_string()),
                            ];
                            out.extend_from_slice(&memcache::render_stats(&fields));
                        }
                        memcache::McAction::Quit => {
                            s.write_all(&out)?;
                            return Ok(());
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    handle.client_error();
                    out.extend_from_slice(&e.reply());
                    if e.close {
                        s.write_all(&out)?;
                        return Ok(());
                    }
                    used += e.skip;
                    if used > buf.len() {
                        // The rest of an oversize value is still to come: swallow it as it arrives.
                        let mut left = used - buf.len();
                        buf.clear();
                        used = 0;
                        s.write_all(&out)?;
                        out.clear();
                        while left > 0 {
                            if !fill(s, &mut buf, stop)? {
                                return Ok(());
                            }
                            let k = left.min(buf.len());
                            buf.drain(..k);
                            left -= k;
                        }
                    }
                }
            }
        }
        buf.drain(..used);
        if !out.is_empty() {
            s.write_all(&out)?;
            out.clear();
        }
        if !fill(s, &mut buf, stop)? {
            return Ok(());
        }
    }
}

/// A failed request as memcached answers it.
fn memcache_error(e: &ClientError) -> Vec<u8> {
    match e {
        ClientError::OutOfMemory => b"SERVER_ERROR out of memory storing object\r\n".to_vec(),
        e => format!("SERVER_ERROR {e}\r\n").into_bytes(),
    }
}
