//! The Redis front-end (RESP2, and RESP3 after `HELLO 3`): a connection's commands parsed into what the event loop
//! ([`super::tcp`]) answers or submits (`waverunner_kv::resp` is the codec).

use waverunner_kv::resp;
use waverunner_node::replica::{ClientError, Handle};

use super::tcp::{self, ExecSlot, Item, Parsed};
use super::{with_limits, Limits};
use waverunner_kv::Op;

/// Bytes of the commands one transaction may queue (counted as their arguments' lengths);
/// past it the transaction is discarded at `EXEC`, as Redis does after a queueing error.
pub const MAX_MULTI_BYTES: usize = 64 << 20;

/// A transaction being queued (`MULTI` … `EXEC`).
#[derive(Default)]
struct Multi {
    /// Each queued command's place in the answer.
    slots: Vec<ExecSlot>,
    /// The store operations, in order: one log entry at `EXEC` ([`Op::Multi`]).
    ops: Vec<Op>,
    /// Arguments' bytes queued (bounded by [`MAX_MULTI_BYTES`]).
    bytes: usize,
    /// A command could not be queued: `EXEC` discards the transaction.
    dirty: bool,
}

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
    /// The transaction being queued, after `MULTI`.
    multi: Option<Multi>,
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
            multi: None,
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
        } else if self.multi.is_some() {
            self.queue(&args, handle)
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
                resp::Action::Tx(tx) => {
                    let r: &[u8] = match tx {
                        resp::TxCmd::Multi => {
                            self.multi = Some(Multi::default());
                            b"+OK\r\n"
                        }
                        resp::TxCmd::Exec => b"-ERR EXEC without MULTI\r\n",
                        resp::TxCmd::Discard => b"-ERR DISCARD without MULTI\r\n",
                        // Nothing is ever watched (WATCH is refused), so there is nothing to
                        // forget.
                        resp::TxCmd::Unwatch => b"+OK\r\n",
                        resp::TxCmd::Watch => b"-ERR WATCH is not supported by this server yet\r\n",
                    };
                    if r.starts_with(b"-") {
                        handle.client_error();
                    }
                    Item::Reply(r.to_vec())
                }
            }
        };
        Some(Parsed {
            item,
            used,
            skip_more: 0,
        })
    }
}

impl Conn {
    /// A command inside `MULTI`: queued (`+QUEUED`), or `EXEC`, `DISCARD`, `QUIT`, or refused.
    fn queue(&mut self, args: &[Vec<u8>], handle: &Handle) -> Item {
        let proto = self.session.proto;
        let m = self.multi.as_mut().expect("inside MULTI");
        let action = resp::command_proto(args, proto);
        let queued = b"+QUEUED\r\n".to_vec();
        match action {
            resp::Action::Tx(resp::TxCmd::Exec) => {
                let m = self.multi.take().expect("inside MULTI");
                if m.dirty {
                    return Item::Reply(
                        b"-EXECABORT Transaction discarded because of previous errors.\r\n"
                            .to_vec(),
                    );
                }
                if m.ops.is_empty() {
                    return Item::Reply(tcp::exec_reply(&m.slots, &[], proto));
                }
                Item::Store(Op::Multi(m.ops), tcp::Render::Exec(m.slots, proto))
            }
            resp::Action::Tx(resp::TxCmd::Discard) => {
                self.multi = None;
                Item::Reply(b"+OK\r\n".to_vec())
            }
            resp::Action::Tx(resp::TxCmd::Multi) => {
                handle.client_error();
                Item::Reply(b"-ERR MULTI calls can not be nested\r\n".to_vec())
            }
            resp::Action::Tx(resp::TxCmd::Watch) => {
                handle.client_error();
                Item::Reply(b"-ERR WATCH inside MULTI is not allowed\r\n".to_vec())
            }
            resp::Action::Quit => Item::Close(b"+OK\r\n".to_vec()),
            resp::Action::Reply(r) if resp::is_queue_error(&r) => {
                handle.client_error();
                m.dirty = true;
                Item::Reply(r)
            }
            action => {
                let bytes: usize = args.iter().map(Vec::len).sum();
                if m.bytes + bytes > MAX_MULTI_BYTES {
                    handle.client_error();
                    m.dirty = true;
                    return Item::Reply(b"-ERR transaction too large\r\n".to_vec());
                }
                m.bytes += bytes;
                let slot = match action {
                    resp::Action::Store(op, render) => {
                        m.ops.push(with_limits(op, self.limits));
                        ExecSlot::Store(render)
                    }
                    resp::Action::Reply(r) => ExecSlot::Ready(r),
                    resp::Action::Tx(resp::TxCmd::Unwatch) => ExecSlot::Ready(b"+OK\r\n".to_vec()),
                    resp::Action::Info => {
                        ExecSlot::Ready(resp::render_info_proto(&info_fields(handle), proto))
                    }
                    resp::Action::Client(cmd) => ExecSlot::Ready(self.session.client(&cmd)),
                    resp::Action::Quit | resp::Action::Tx(_) => unreachable!("handled above"),
                };
                m.slots.push(slot);
                Item::Reply(queued)
            }
        }
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
