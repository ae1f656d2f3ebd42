//! The memcached front-end, text and binary (a request starting with the binary magic byte
//! is binary): a connection's commands parsed into what the event loop ([`super::tcp`])
//! answers or submits (`waverunner_kv::memcache` and `waverunner_kv::mcbin` are the codecs).

use waverunner_kv::{mcbin, memcache};
use waverunner_node::replica::{ClientError, Handle};

use super::tcp::{self, Item, Parsed};
use super::{with_limits, Limits};

/// A memcached connection's parser state.
pub(super) struct Conn {
    ml: memcache::Limits,
    limits: Limits,
}

impl Conn {
    pub(super) fn new(limits: Limits) -> Conn {
        Conn {
            ml: memcache::Limits {
                max_value: limits.max_value,
                ..memcache::Limits::default()
            },
            limits,
        }
    }

    /// The next command in `buf`, if complete; commands that need no store are answered here.
    pub(super) fn next(&mut self, buf: &[u8], handle: &Handle) -> Option<Parsed> {
        if buf.first() == Some(&mcbin::REQ_MAGIC) {
            return self.next_binary(buf, handle);
        }
        let (cmd, used) = match memcache::parse_command(buf, &self.ml) {
            Ok(Some(x)) => x,
            Ok(None) => return None,
            Err(e) => {
                handle.client_error();
                let reply = e.reply();
                if e.close || e.skip == 0 {
                    return Some(Parsed {
                        item: Item::Close(reply),
                        used: buf.len(),
                        skip_more: 0,
                    });
                }
                // The bad command's line and value are skipped; of a value refused for its size,
                // the rest is swallowed as it arrives.
                return Some(Parsed {
                    item: Item::Reply(reply),
                    used: e.skip.min(buf.len()),
                    skip_more: e.skip.saturating_sub(buf.len()),
                });
            }
        };
        let item = match memcache::command(cmd) {
            memcache::McAction::Reply(r) => {
                if r.starts_with(b"ERROR") || r.starts_with(b"CLIENT_ERROR") {
                    handle.client_error();
                }
                Item::Reply(r)
            }
            memcache::McAction::Store {
                op,
                render,
                noreply,
            } => Item::Store(
                with_limits(op, self.limits),
                tcp::Render::Memcache(render, noreply),
            ),
            memcache::McAction::Stats => Item::Reply(memcache::render_stats(&stats(handle))),
            memcache::McAction::Quit => Item::Close(Vec::new()),
        };
        Some(Parsed {
            item,
            used,
            skip_more: 0,
        })
    }
}

impl Conn {
    /// The next binary request in `buf`, if complete.
    fn next_binary(&mut self, buf: &[u8], handle: &Handle) -> Option<Parsed> {
        let (req, used) = match mcbin::parse(buf, self.limits.max_value) {
            Ok(Some(x)) => x,
            Ok(None) => return None,
            Err(e) => {
                handle.client_error();
                let item = if e.close {
                    Item::Close(e.reply)
                } else {
                    Item::Reply(e.reply)
                };
                return Some(Parsed {
                    item,
                    used: e.skip.min(buf.len()),
                    skip_more: e.skip.saturating_sub(buf.len()),
                });
            }
        };
        let item = match mcbin::command(req) {
            mcbin::BinAction::Reply(r) => {
                if r.get(6..8).is_some_and(|st| st != [0, 0]) {
                    handle.client_error();
                }
                Item::Reply(r)
            }
            mcbin::BinAction::Store { op, render } => {
                Item::Store(with_limits(op, self.limits), tcp::Render::McBinary(render))
            }
            mcbin::BinAction::Stats { opaque } => {
                Item::Reply(mcbin::render_stats(opaque, &stats(handle)))
            }
            mcbin::BinAction::Close(r) => Item::Close(r),
        };
        Some(Parsed {
            item,
            used,
            skip_more: 0,
        })
    }
}

/// What `stats` reports.
fn stats(handle: &Handle) -> Vec<(&'static str, String)> {
    let st = handle.status();
    vec![
        ("pid", std::process::id().to_string()),
        (
            "version",
            format!("waverunner-{}", env!("CARGO_PKG_VERSION")),
        ),
        ("curr_items", st.keys.to_string()),
        ("raft_role", st.role.clone()),
        ("raft_term", st.term.to_string()),
        ("raft_commit_index", st.commit_index.to_string()),
    ]
}

/// A failed binary request as memcached answers it.
pub(super) fn binary_error(r: &mcbin::BinRender, e: &ClientError) -> Vec<u8> {
    let st = match e {
        ClientError::OutOfMemory => mcbin::status::NO_MEMORY,
        ClientError::Busy => mcbin::status::BUSY,
        _ => mcbin::status::INTERNAL,
    };
    mcbin::failure(r, st)
}

/// A failed request as memcached answers it.
pub(super) fn error(e: &ClientError) -> Vec<u8> {
    match e {
        ClientError::OutOfMemory => b"SERVER_ERROR out of memory storing object\r\n".to_vec(),
        ClientError::Busy => b"SERVER_ERROR busy\r\n".to_vec(),
        e => format!("SERVER_ERROR {e}\r\n").into_bytes(),
    }
}
