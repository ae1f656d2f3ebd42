//! The Redis front-end (RESP2, and RESP3 after `HELLO 3`): a connection's commands parsed into what the event loop
//! ([`super::tcp`]) answers or submits (`waverunner_kv::resp` is the codec).

use waverunner_kv::resp;
use waverunner_node::replica::{ClientError, Handle};

use super::tcp::{self, ExecSlot, Item, Parsed};
use super::{stats, with_limits, Limits};
use waverunner_kv::{Op, Reply};

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

/// CPU seconds of `who` (`RUSAGE_SELF`, `RUSAGE_CHILDREN`): (system, user).
fn cpu_seconds(who: libc::c_int) -> (f64, f64) {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_stime), s(ru.ru_utime))
}

/// `INFO`'s sections, with the fields this replica knows (none it would have to make up).
fn info_sections(handle: &Handle) -> Vec<resp::InfoSection> {
    use resp::InfoSection as S;
    let st = handle.status();
    let c = &st.counters;
    let leader = st.role == "leader";
    let (sys, user) = cpu_seconds(libc::RUSAGE_SELF);
    let (csys, cuser) = cpu_seconds(libc::RUSAGE_CHILDREN);
    vec![
        S {
            title: "Server",
            default: true,
            fields: vec![
                ("redis_version", resp::REDIS_VERSION.into()),
                ("redis_mode", "standalone".into()),
                ("waverunner_version", env!("CARGO_PKG_VERSION").into()),
                ("os", std::env::consts::OS.into()),
                ("arch_bits", (usize::BITS).to_string()),
                ("process_id", std::process::id().to_string()),
            ],
        },
        S {
            title: "Memory",
            default: true,
            fields: vec![
                ("used_memory", st.used_memory.to_string()),
                ("used_memory_human", human_bytes(st.used_memory)),
                ("used_memory_rss", st.rss_bytes.to_string()),
                ("used_memory_rss_human", human_bytes(st.rss_bytes)),
                ("maxmemory", st.maxmemory.to_string()),
                ("maxmemory_human", human_bytes(st.maxmemory)),
                ("maxmemory_policy", "noeviction".into()),
            ],
        },
        S {
            title: "Persistence",
            default: true,
            fields: vec![
                ("loading", "0".into()),
                (
                    "rdb_bgsave_in_progress",
                    u8::from(st.snapshot.in_progress).to_string(),
                ),
                ("aof_enabled", "0".into()),
                ("waverunner_durability", st.durability.clone()),
                (
                    "waverunner_snapshot_index",
                    st.snapshot.last_index.to_string(),
                ),
                (
                    "waverunner_snapshot_bytes",
                    st.snapshot.last_bytes.to_string(),
                ),
            ],
        },
        S {
            title: "Clients",
            default: true,
            fields: {
                let (connected, blocked) = handle.admission().clients();
                vec![
                    ("connected_clients", connected.to_string()),
                    ("blocked_clients", blocked.to_string()),
                ]
            },
        },
        S {
            title: "Stats",
            default: true,
            fields: vec![
                ("total_commands_processed", c.answered.to_string()),
                ("rejected_requests_busy", c.busy.to_string()),
                ("rejected_requests_oom", c.oom_refused.to_string()),
                ("client_errors", c.client_errors.to_string()),
            ],
        },
        S {
            title: "Replication",
            default: true,
            fields: vec![
                ("role", if leader { "master" } else { "slave" }.into()),
                (
                    "connected_slaves",
                    if leader {
                        st.voters.len().saturating_sub(1)
                    } else {
                        0
                    }
                    .to_string(),
                ),
                ("master_repl_offset", st.commit_index.to_string()),
            ],
        },
        S {
            title: "Commandstats",
            default: false,
            fields: stats::fields(),
        },
        S {
            title: "CPU",
            default: true,
            fields: vec![
                ("used_cpu_sys", format!("{sys:.6}")),
                ("used_cpu_user", format!("{user:.6}")),
                ("used_cpu_sys_children", format!("{csys:.6}")),
                ("used_cpu_user_children", format!("{cuser:.6}")),
            ],
        },
        S {
            title: "Raft",
            default: true,
            fields: vec![
                ("raft_role", st.role.clone()),
                ("raft_term", st.term.to_string()),
                ("raft_leader", st.leader.to_string()),
                ("raft_commit_index", st.commit_index.to_string()),
                ("raft_applied_index", st.applied_index.to_string()),
                ("raft_voters", format!("{:?}", st.voters)),
                ("dataplane", st.dataplane.clone()),
                ("read_mode", st.read_mode.clone()),
            ],
        },
        S {
            title: "Keyspace",
            default: true,
            fields: if st.keys > 0 {
                vec![("db0", format!("keys={}", st.keys))]
            } else {
                Vec::new()
            },
        },
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

/// What a blocking pop waits on.
type Waits = (
    Vec<Vec<u8>>,
    &'static str,
    Option<std::time::Duration>,
    Reply,
);

/// A blocking pop's keys, the type they must hold to wake it, its timeout (`None`: forever)
/// and its answer on timeout; `None` for any other command, or a timeout the store will
/// refuse (it answers the error at once).
fn blocking(args: &[Vec<u8>]) -> Option<Waits> {
    let name = args.first()?.to_ascii_lowercase();
    let kind = if name.starts_with(b"bz") {
        "zset"
    } else {
        "list"
    };
    let n = args.len();
    let (keys, timeout, empty) = match name.as_slice() {
        b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" if n >= 3 => {
            (args[1..n - 1].to_vec(), &args[n - 1], Reply::NilArray)
        }
        b"blmove" if n == 6 => (vec![args[1].clone()], &args[5], Reply::Nil),
        b"brpoplpush" if n == 4 => (vec![args[1].clone()], &args[3], Reply::Nil),
        b"blmpop" | b"bzmpop" if n >= 5 => {
            let numkeys: usize = std::str::from_utf8(&args[2]).ok()?.parse().ok()?;
            let keys = args.get(3..3usize.checked_add(numkeys)?)?;
            if numkeys == 0 {
                return None;
            }
            (keys.to_vec(), &args[1], Reply::NilArray)
        }
        _ => return None,
    };
    let secs: f64 = std::str::from_utf8(timeout).ok()?.parse().ok()?;
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    let timeout = (secs > 0.0).then(|| std::time::Duration::from_secs_f64(secs.min(1e9)));
    Some((keys, kind, timeout, empty))
}

/// A RESP connection's parser state.
pub(super) struct Conn {
    session: resp::Session,
    rl: resp::Limits,
    limits: Limits,
    /// The transaction being queued, after `MULTI`.
    multi: Option<Multi>,
    /// `WATCH`ed keys and the log index this replica had applied when the first was watched:
    /// the transaction aborts if one changed after it ([`Op::WatchCheck`]). A replica behind
    /// the leader only makes that index earlier: an abort may be spurious, a change is never
    /// missed. At most [`MAX_WATCHED`] keys.
    watch: Option<(u64, Vec<Vec<u8>>)>,
    /// The last command run (`CLIENT LIST`'s `cmd=`).
    last_cmd: &'static str,
    /// `CLIENT REPLY`'s mode.
    reply_mode: resp::ReplyMode,
}

/// Keys one connection may watch at once.
pub const MAX_WATCHED: usize = 1 << 16;

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
            watch: None,
            last_cmd: "NULL",
            reply_mode: resp::ReplyMode::On,
        }
    }

    /// The connection's client id.
    pub(super) fn id(&self) -> u64 {
        self.session.id
    }

    /// Its `CLIENT LIST` line.
    pub(super) fn info_line(&self) -> Vec<u8> {
        self.session.info_line(self.last_cmd)
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
            let t0 = std::time::Instant::now();
            let (named, action) = resp::command_named(&args, proto);
            let timed = match named {
                resp::Named::Ran(name) => Some(tcp::Timed { name, since: t0 }),
                _ => None,
            };
            // CLIENT REPLY OFF|SKIP silence what follows them (not themselves: they answer
            // nothing, and ON answers +OK).
            let quiet = match action {
                resp::Action::Client(resp::ClientCmd::Reply(_)) => false,
                _ => match self.reply_mode {
                    resp::ReplyMode::On => false,
                    resp::ReplyMode::Off => true,
                    resp::ReplyMode::Skip => {
                        self.reply_mode = resp::ReplyMode::On;
                        true
                    }
                },
            };
            let item = match action {
                resp::Action::Reply(r) => {
                    if r.starts_with(b"-") {
                        handle.client_error();
                    }
                    Item::Reply(r)
                }
                resp::Action::Store(op, render) => {
                    let op = with_limits(op, self.limits);
                    match blocking(&args) {
                        Some((keys, kind, timeout, empty)) => {
                            let mut enc = Vec::new();
                            waverunner_kv::codec::encode_op(&op, &mut enc);
                            let mut probe = Vec::new();
                            waverunner_kv::codec::encode_op(
                                &Op::Ready {
                                    keys,
                                    kind: kind.as_bytes().to_vec(),
                                },
                                &mut probe,
                            );
                            let b = tcp::Blocked {
                                how: render,
                                proto,
                                op: enc,
                                probe,
                                deadline: timeout.map(|t| std::time::Instant::now() + t),
                                empty,
                                timed,
                            };
                            Item::Store(op, tcp::Render::Block(Box::new(b)))
                        }
                        None => Item::Store(op, tcp::Render::Redis(render, proto, timed)),
                    }
                }
                resp::Action::Info(args) => Item::Reply(resp::render_info_sections(
                    &info_sections(handle),
                    &args,
                    proto,
                )),
                resp::Action::Client(resp::ClientCmd::List(ids)) => {
                    Item::Ask(tcp::Ask::List { ids, proto, quiet })
                }
                resp::Action::Client(resp::ClientCmd::Unblock { id, error }) => {
                    Item::Ask(tcp::Ask::Unblock { id, error, quiet })
                }
                resp::Action::Client(cmd) => {
                    if let resp::ClientCmd::Reply(mode) = cmd {
                        self.reply_mode = mode;
                    }
                    Item::Reply(self.session.client(&cmd))
                }
                resp::Action::Quit => Item::Close(b"+OK\r\n".to_vec()),
                resp::Action::Tx(tx) => {
                    let r: &[u8] = match tx {
                        resp::TxCmd::Multi => {
                            self.multi = Some(Multi::default());
                            b"+OK\r\n"
                        }
                        resp::TxCmd::Exec => b"-ERR EXEC without MULTI\r\n",
                        resp::TxCmd::Discard => b"-ERR DISCARD without MULTI\r\n",
                        resp::TxCmd::Unwatch => {
                            self.watch = None;
                            b"+OK\r\n"
                        }
                        resp::TxCmd::Watch => self.watch_keys(&args[1..], handle),
                    };
                    if r.starts_with(b"-") {
                        handle.client_error();
                    }
                    Item::Reply(r.to_vec())
                }
            };
            if let resp::Named::Ran(name) = named {
                self.last_cmd = name;
            }
            // Answered here: counted now (a command through the store, when answered).
            if let Item::Reply(r) | Item::Close(r) = &item {
                match named {
                    resp::Named::Ran(name) => {
                        stats::called(name, t0.elapsed(), r.starts_with(b"-"))
                    }
                    resp::Named::Rejected(name) => stats::rejected(name),
                    resp::Named::Unknown => {}
                }
            }
            if quiet {
                match item {
                    Item::Reply(_) => Item::Reply(Vec::new()),
                    Item::Close(_) => Item::Close(Vec::new()),
                    Item::Store(op, render) => {
                        Item::Store(op, tcp::Render::Quiet(Box::new(render)))
                    }
                    ask => ask,
                }
            } else {
                item
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
    /// `WATCH key…`: remembers the keys, and the applied index when the first was watched.
    fn watch_keys(&mut self, keys: &[Vec<u8>], handle: &Handle) -> &'static [u8] {
        let (_, watched) = self
            .watch
            .get_or_insert_with(|| (handle.applied_index(), Vec::new()));
        if watched.len() + keys.len() > MAX_WATCHED {
            return b"-ERR too many watched keys\r\n";
        }
        watched.extend(keys.iter().cloned());
        b"+OK\r\n"
    }

    /// A command inside `MULTI`: queued (`+QUEUED`), or `EXEC`, `DISCARD`, `QUIT`, or refused.
    fn queue(&mut self, args: &[Vec<u8>], handle: &Handle) -> Item {
        let proto = self.session.proto;
        let m = self.multi.as_mut().expect("inside MULTI");
        match resp::lookup(args) {
            Err(e) => {
                // Not queueable (unknown, or a wrong number of arguments): EXEC will refuse.
                handle.client_error();
                m.dirty = true;
                return Item::Reply(e);
            }
            Ok((name, _))
                if resp::NO_MULTI.contains(&name) && !matches!(name, "multi" | "watch") =>
            {
                handle.client_error();
                m.dirty = true;
                return Item::Reply(b"-ERR Command not allowed inside a transaction\r\n".to_vec());
            }
            Ok(_) => {}
        }
        let action = resp::command_proto(args, proto);
        let queued = b"+QUEUED\r\n".to_vec();
        match action {
            resp::Action::Tx(resp::TxCmd::Exec) => {
                let m = self.multi.take().expect("inside MULTI");
                // EXEC ends the watch, whatever happens.
                let watch = self.watch.take();
                if m.dirty {
                    return Item::Reply(
                        b"-EXECABORT Transaction discarded because of previous errors.\r\n"
                            .to_vec(),
                    );
                }
                let mut ops = m.ops;
                if let Some((since, keys)) = watch {
                    ops.insert(0, Op::WatchCheck { since, keys });
                }
                if ops.is_empty() {
                    return Item::Reply(tcp::exec_reply(&m.slots, &[], proto));
                }
                Item::Store(Op::Multi(ops), tcp::Render::Exec(m.slots, proto))
            }
            resp::Action::Tx(resp::TxCmd::Discard) => {
                self.multi = None;
                self.watch = None;
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
                    resp::Action::Info(args) => ExecSlot::Ready(resp::render_info_sections(
                        &info_sections(handle),
                        &args,
                        proto,
                    )),
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
