//! The Redis front-end (RESP2, and RESP3 after `HELLO 3`): a connection's commands parsed into what the event loop
//! ([`super::tcp`]) answers or submits (`waverunner_kv::resp` is the codec).

use waverunner_kv::resp;
use waverunner_node::replica::{ClientError, Handle};

use super::tcp::{self, Item, Parsed};
use super::{with_limits, Limits};

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

/// A RESP connection's parser state.
pub(super) struct Conn {
    session: resp::Session,
    rl: resp::Limits,
    limits: Limits,
}

impl Conn {
    pub(super) fn new(id: u64, addr: String, laddr: String, limits: Limits) -> Conn {
        Conn {
            session: resp::Session::new(id, addr, laddr),
            rl: resp::Limits {
                max_bulk: limits.max_value,
                ..resp::Limits::default()
            },
            limits,
        }
    }

    /// The next command in `buf`, if complete; commands that need no store are answered here.
    pub(super) fn next(&mut self, buf: &[u8], handle: &Handle) -> Option<Parsed> {
        let (args, used) = match resp::parse_command(buf, &self.rl) {
            Ok(Some(x)) => x,
            Ok(None) => return None,
            Err(e) => {
                handle.client_error();
                let item = Item::Close(format!("-ERR {e}\r\n").into_bytes());
                return Some(Parsed {
                    item,
                    used: buf.len(),
                    skip_more: 0,
                });
            }
        };
        let item = if args.is_empty() {
            Item::Reply(Vec::new())
        } else {
            let proto = self.session.proto;
            match resp::command_proto(&args, proto) {
                resp::Action::Reply(r) => {
                    if r.starts_with(b"-") {
                        handle.client_error();
                    }
                    Item::Reply(r)
                }
                resp::Action::Store(op, render) => Item::Store(
                    with_limits(op, self.limits),
                    tcp::Render::Redis(render, proto),
                ),
                resp::Action::Info => {
                    Item::Reply(resp::render_info_proto(&info_fields(handle), proto))
                }
                resp::Action::Client(cmd) => Item::Reply(self.session.client(&cmd)),
                resp::Action::Quit => Item::Close(b"+OK\r\n".to_vec()),
            }
        };
        Some(Parsed {
            item,
            used,
            skip_more: 0,
        })
    }
}

/// A failed request as Redis answers it: `-OOM …` as Redis words it past `maxmemory`,
/// `-ERR …` otherwise.
pub(super) fn error(e: &ClientError) -> Vec<u8> {
    match e {
        ClientError::OutOfMemory => {
            b"-OOM command not allowed when used memory > 'maxmemory'.\r\n".to_vec()
        }
        ClientError::Busy => format!("-BUSY {}\r\n", ClientError::Busy).into_bytes(),
        e => format!("-ERR {e}\r\n").into_bytes(),
    }
}
