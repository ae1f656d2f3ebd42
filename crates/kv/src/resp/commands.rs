//! Commands: arguments into an [`Action`], with Redis's arity checks and error wording.

use super::*;

/// What to do with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes; the store is not involved (`PING`, `ECHO`, `COMMAND`, `CONFIG GET`,
    /// `SELECT`, `CLIENT SETINFO`, every error). Empty for an empty request: write nothing.
    Reply(Vec<u8>),
    /// Have the store execute the operation, then write [`render`]`(&render, &response)`.
    Store(Op, Render),
    /// `INFO [section…]`: write [`render_info_sections`] of the server's sections, the
    /// arguments (lowercased) choosing which.
    Info(Vec<Bytes>),
    /// `QUIT`: write `+OK\r\n`, then close the connection.
    Quit,
    /// `CLIENT SETNAME/GETNAME/ID/INFO`, `HELLO`: answered from per-connection state; write
    /// [`Session::client`]`(&cmd)` of the connection's session.
    Client(ClientCmd),
    /// `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH`: the connection's transaction state
    /// (the front-end keeps it; arity is checked here).
    Tx(TxCmd),
}

/// A transaction command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxCmd {
    /// `MULTI`.
    Multi,
    /// `EXEC`.
    Exec,
    /// `DISCARD`.
    Discard,
    /// `WATCH key…`.
    Watch,
    /// `UNWATCH`.
    Unwatch,
}

/// The command `args` names (not empty) and, for a container command given a subcommand, the
/// subcommand, after Redis's lookup and arity checks. `Err` is Redis's reply to an unknown
/// command or subcommand or a wrong number of arguments: the errors that keep a command out of
/// a `MULTI` queue (`EXEC` then answers `EXECABORT`); other errors are the command's result.
pub fn lookup(args: &[Vec<u8>]) -> Result<(&'static str, Option<&'static str>), Vec<u8>> {
    let lname = args[0].to_ascii_lowercase();
    let found = COMMANDS
        .iter()
        .find(|(n, _)| n.as_bytes() == lname)
        .copied()
        .or_else(|| crate::types::spec(&lname).map(|s| (s.name, s.arity)));
    let Some((cmd, arity)) = found else {
        return Err(unknown_command(args));
    };
    if !crate::types::arity_ok(arity, args.len()) {
        return Err(error(&wrong_arity(cmd)));
    }
    if !matches!(cmd, "client" | "command" | "config") || args.len() < 2 {
        return Ok((cmd, None));
    }
    let lsub = args[1].to_ascii_lowercase();
    let Some(&(_, sub, arity)) = SUBCOMMANDS
        .iter()
        .find(|(c, s, _)| *c == cmd && s.as_bytes() == lsub)
    else {
        let mut msg = b"unknown subcommand '".to_vec();
        msg.extend_from_slice(c_str(&args[1], 128));
        msg.extend_from_slice(format!("'. Try {} HELP.", cmd.to_ascii_uppercase()).as_bytes());
        return Err(error_bytes(b"ERR", &msg));
    };
    if !crate::types::arity_ok(arity, args.len()) {
        return Err(error(&wrong_arity(&format!("{cmd}|{sub}"))));
    }
    Ok((cmd, Some(sub)))
}

/// How to turn the store's [`Response`] into the reply of the command that asked.
///
/// Whatever the variant, [`Response::Error`]`(msg)` renders as `-ERR msg`, and a response
/// the command cannot produce renders as an error reply rather than a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Render {
    /// `+OK` (`MSET`, `FLUSHALL`, `FLUSHDB`).
    Ok,
    /// `SET`: `+OK` when stored, a nil bulk (`$-1`) when `NX`/`XX` did not hold.
    Set,
    /// The one item asked for as a bulk string, nil when absent (`GET`, `GETSET`, `SET … GET`).
    Bulk,
    /// An array with a bulk string or nil per key (`MGET`).
    Bulks,
    /// An integer (`DEL`, `UNLINK`, `EXISTS`, `INCR`, `INCRBY`, `DECR`, `DECRBY`, `APPEND`,
    /// `STRLEN`, `DBSIZE`).
    Int,
    /// `:1` if it happened, else `:0` (`SETNX`, `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT`,
    /// `PERSIST`).
    Bool,
    /// `TTL`: seconds rounded to nearest (`(ms + 500) / 1000`), `-1` without expiry, `-2`
    /// for a missing key.
    TtlSeconds,
    /// `PTTL`: milliseconds, `-1` without expiry, `-2` for a missing key.
    TtlMillis,
    /// An array of bulk strings (`KEYS`).
    Keys,
    /// `SCAN`: `[cursor, [keys…]]`, the cursor as described in the [module docs](self).
    Scan,
    /// The [`Reply`] of an [`Op::Cmd`] (the collection commands, `TYPE`, `OBJECT`).
    Reply,
}

/// A `CLIENT` or `HELLO` command, answered from the connection's [`Session`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientCmd {
    /// `CLIENT SETNAME name` (validated; empty clears the name).
    SetName(Bytes),
    /// `CLIENT GETNAME`.
    GetName,
    /// `CLIENT ID`.
    Id,
    /// `CLIENT INFO`.
    Info,
    /// `CLIENT NO-EVICT ON|OFF`: `+OK` (no client is ever evicted here).
    NoEvict,
    /// `CLIENT REPLY ON|OFF|SKIP`: the front-end stops or skips the connection's replies.
    Reply(ReplyMode),
    /// `CLIENT LIST [ID id…]`: every connection's line as `CLIENT INFO` gives it (the
    /// front-end keeps the connections; `None`: all).
    List(Option<Vec<u64>>),
    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]`: the front-end answers a client blocked in a
    /// blocking pop now, as on its timeout or with an error (`error`).
    Unblock {
        /// The client's id.
        id: u64,
        /// `ERROR` rather than `TIMEOUT`.
        error: bool,
    },
    /// `HELLO [2|3 [SETNAME name]]`: switch protocol (if given), then the server
    /// description in it.
    Hello {
        /// The protocol asked for (`None`: keep the connection's).
        proto: Option<Proto>,
        /// The validated `SETNAME` option.
        setname: Option<Bytes>,
    },
}

/// `CLIENT REPLY`'s modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    /// Reply (the default).
    On,
    /// Send no reply until `CLIENT REPLY ON`.
    Off,
    /// Send no reply to the next command.
    Skip,
}

/// Per-connection state for `CLIENT` and `HELLO`; the server keeps one per connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Session {
    /// The connection's unique id (`CLIENT ID`).
    pub id: u64,
    /// The client's name (`CLIENT SETNAME`); empty: none.
    pub name: Bytes,
    /// The client's address, `ip:port` (for `CLIENT INFO`).
    pub addr: String,
    /// The local address of the connection, `ip:port` (for `CLIENT INFO`).
    pub laddr: String,
    /// The protocol the connection speaks (`HELLO 2|3`).
    pub proto: Proto,
}

impl Session {
    /// A session for connection `id` without a name.
    pub fn new(id: u64, addr: String, laddr: String) -> Self {
        Session {
            id,
            name: Vec::new(),
            addr,
            laddr,
            proto: Proto::Resp2,
        }
    }

    /// The connection's line in `CLIENT INFO` and `CLIENT LIST`, `cmd` its last command.
    pub fn info_line(&self, cmd: &str) -> Vec<u8> {
        let mut line = format!(
            "id={} addr={} laddr={} name=",
            self.id,
            one_word(&self.addr),
            one_word(&self.laddr)
        )
        .into_bytes();
        line.extend_from_slice(&self.name);
        line.extend_from_slice(
            format!(
                " db=0 flags=N cmd={} user=default resp={}\n",
                one_word(cmd),
                self.proto.version()
            )
            .as_bytes(),
        );
        line
    }

    /// Executes `cmd` on the session and returns the reply.
    pub fn client(&mut self, cmd: &ClientCmd) -> Vec<u8> {
        let mut out = Vec::new();
        match cmd {
            ClientCmd::SetName(name) => {
                self.name = name.clone();
                out.extend_from_slice(b"+OK\r\n");
            }
            ClientCmd::GetName => {
                if self.name.is_empty() {
                    nil(&mut out, self.proto);
                } else {
                    bulk(&mut out, &self.name);
                }
            }
            ClientCmd::Id => int(&mut out, i64::try_from(self.id).unwrap_or(i64::MAX)),
            ClientCmd::Info => {
                let line = self.info_line("client|info");
                verbatim(&mut out, &line, self.proto);
            }
            ClientCmd::NoEvict => out.extend_from_slice(b"+OK\r\n"),
            // The front-end acts on these (it knows the other connections and the replies).
            ClientCmd::Reply(ReplyMode::On) => out.extend_from_slice(b"+OK\r\n"),
            ClientCmd::Reply(_) => {}
            ClientCmd::List(_) | ClientCmd::Unblock { .. } => {
                out.extend_from_slice(b"-ERR not served by this front-end\r\n")
            }
            ClientCmd::Hello { proto, setname } => {
                if let Some(p) = proto {
                    self.proto = *p;
                }
                if let Some(name) = setname {
                    self.name = name.clone();
                }
                map(&mut out, 7, self.proto);
                for (k, v) in [("server", "redis"), ("version", REDIS_VERSION)] {
                    bulk(&mut out, k.as_bytes());
                    bulk(&mut out, v.as_bytes());
                }
                bulk(&mut out, b"proto");
                int(&mut out, self.proto.version());
                bulk(&mut out, b"id");
                int(&mut out, i64::try_from(self.id).unwrap_or(i64::MAX));
                for (k, v) in [("mode", "standalone"), ("role", "master")] {
                    bulk(&mut out, k.as_bytes());
                    bulk(&mut out, v.as_bytes());
                }
                bulk(&mut out, b"modules");
                array(&mut out, 0);
            }
        }
        out
    }
}

fn one_word(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect()
}

/// The commands known, with Redis's arity (n: exactly n arguments including the name; -n: at
/// least n).
const COMMANDS: &[(&str, i32)] = &[
    ("append", 3),
    ("client", -2),
    ("command", -1),
    ("config", -2),
    ("dbsize", 1),
    ("decr", 2),
    ("decrby", 3),
    ("del", -2),
    ("discard", 1),
    ("echo", 2),
    ("copy", -3),
    ("exec", 1),
    ("exists", -2),
    ("touch", -2),
    ("expire", -3),
    ("expireat", -3),
    ("expiretime", 2),
    ("flushall", -1),
    ("flushdb", -1),
    ("get", 2),
    ("getbit", 3),
    ("getdel", 2),
    ("getex", -2),
    ("getrange", 4),
    ("getset", 3),
    ("hello", -1),
    ("incr", 2),
    ("incrby", 3),
    ("incrbyfloat", 3),
    ("info", -1),
    ("keys", 2),
    ("mget", -2),
    ("mset", -3),
    ("msetnx", -3),
    ("multi", 1),
    ("persist", 2),
    ("pexpire", -3),
    ("pexpireat", -3),
    ("pexpiretime", 2),
    ("ping", -1),
    ("psetex", 4),
    ("pttl", 2),
    ("quit", -1),
    ("randomkey", 1),
    ("rename", 3),
    ("renamenx", 3),
    ("scan", -2),
    ("select", 2),
    ("set", -3),
    ("setbit", 4),
    ("setex", 4),
    ("setnx", 3),
    ("setrange", 4),
    ("strlen", 2),
    ("substr", 4),
    ("time", 1),
    ("ttl", 2),
    ("unlink", -2),
    ("unwatch", 1),
    ("watch", -2),
    ("save", 1),
    ("shutdown", -1),
];

/// Commands a transaction may not queue (Redis's `no-multi` flag): queueing one answers
/// `Command not allowed inside a transaction` and makes `EXEC` abort. (`MULTI` and `WATCH`
/// are refused inside one with their own messages.)
pub const NO_MULTI: &[&str] = &["save", "shutdown"];

/// Subcommands of the container commands, with their arity (counting the command and the
/// subcommand).
const SUBCOMMANDS: &[(&str, &str, i32)] = &[
    ("client", "getname", 2),
    ("client", "id", 2),
    ("client", "info", 2),
    ("client", "list", -2),
    ("client", "no-evict", 3),
    ("client", "reply", 3),
    ("client", "unblock", -3),
    ("client", "setinfo", 4),
    ("client", "setname", 3),
    ("command", "count", 2),
    ("command", "docs", -2),
    ("command", "info", -2),
    ("command", "list", -2),
    ("config", "get", -3),
    ("config", "set", -4),
];

/// What `CONFIG GET` reports: name, value, and whether `CONFIG SET` may change it. The
/// settable ones tune Redis's compact encodings, which this server does not have (every
/// collection has one representation whatever its size): a value set is kept per replica
/// and reported back, and changes nothing else. The others are fixed.
const CONFIG: &[(&str, &str, bool)] = &[
    ("appendonly", "no", false),
    ("databases", "1", false),
    ("save", "", true),
    ("maxmemory", "0", false),
    ("maxmemory-policy", "noeviction", false),
    ("timeout", "0", false),
    ("hash-max-listpack-entries", "128", true),
    ("hash-max-listpack-value", "64", true),
    ("hash-max-ziplist-entries", "128", true),
    ("hash-max-ziplist-value", "64", true),
    ("set-max-intset-entries", "512", true),
    ("set-max-listpack-entries", "128", true),
    ("set-max-listpack-value", "64", true),
    ("zset-max-listpack-entries", "128", true),
    ("zset-max-listpack-value", "64", true),
    ("zset-max-ziplist-entries", "128", true),
    ("zset-max-ziplist-value", "64", true),
    ("list-max-listpack-size", "-2", true),
    ("list-max-ziplist-size", "-2", true),
    ("list-compress-depth", "0", true),
];

/// Values given by `CONFIG SET` (this replica's, not replicated: they change nothing).
static CONFIG_SET: std::sync::Mutex<Vec<(&'static str, String)>> =
    std::sync::Mutex::new(Vec::new());

fn config_value(name: &'static str, default: &'static str) -> String {
    let set = CONFIG_SET.lock().unwrap_or_else(|e| e.into_inner());
    set.iter()
        .rev()
        .find(|(n, _)| *n == name)
        .map_or_else(|| default.to_string(), |(_, v)| v.clone())
}

/// The Redis commands this server knows (the README's list is this, written by
/// `waverunner commands`): upper-case names in alphabetical order, with the container
/// commands' subcommands, wrapped into lines of at most 100 characters.
pub fn commands_list() -> String {
    let mut names: Vec<String> = COMMANDS
        .iter()
        .map(|(n, _)| *n)
        .chain(crate::types::specs().map(|s| s.name))
        .map(|n| {
            let subs: Vec<String> = SUBCOMMANDS
                .iter()
                .filter(|(c, _, _)| *c == n)
                .map(|(_, s, _)| s.to_ascii_uppercase())
                .collect();
            if subs.is_empty() {
                n.to_ascii_uppercase()
            } else {
                format!("{} ({})", n.to_ascii_uppercase(), subs.join(" "))
            }
        })
        .collect();
    names.sort();
    let mut out = String::new();
    let mut line = String::new();
    for n in names {
        if !line.is_empty() && line.len() + 1 + n.len() > 100 {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&n);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// Every command this server knows, with its arity: the front-end's and the store's
/// collection commands ([`crate::types`]).
fn all_commands() -> impl Iterator<Item = (&'static str, i32)> {
    COMMANDS
        .iter()
        .copied()
        .chain(crate::types::specs().map(|s| (s.name, s.arity)))
}

/// Where a command's keys are, as `COMMAND INFO`'s first key, last key and step give them
/// (a negative last counts from the end; 0, 0, 0: no keys, or keys found through a `numkeys`
/// argument, Redis's "movable keys", for which the destination of a `*STORE` is still given).
fn key_positions(name: &str, arity: i32) -> (i64, i64, i64) {
    match name {
        "ping" | "echo" | "info" | "config" | "command" | "dbsize" | "flushall" | "flushdb"
        | "time" | "save" | "shutdown" | "multi" | "exec" | "discard" | "unwatch" | "hello"
        | "client" | "select" | "quit" | "keys" | "scan" | "randomkey" | "memory" | "lmpop"
        | "blmpop" | "zmpop" | "bzmpop" | "zunion" | "zinter" | "zdiff" | "zintercard"
        | "sintercard" => (0, 0, 0),
        "mget" | "del" | "exists" | "unlink" | "touch" | "watch" | "sinter" | "sunion"
        | "sdiff" | "sinterstore" | "sunionstore" | "sdiffstore" => (1, -1, 1),
        "mset" | "msetnx" => (1, -1, 2),
        "rename" | "renamenx" | "copy" | "smove" | "lmove" | "blmove" | "rpoplpush"
        | "brpoplpush" | "lcs" | "zrangestore" => (1, 2, 1),
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" => (1, -2, 1),
        "bitop" => (2, -1, 1),
        "object" => (2, 2, 1),
        _ if arity.unsigned_abs() >= 2 => (1, 1, 1),
        _ => (0, 0, 0),
    }
}

/// The group Redis's `COMMAND DOCS` puts a command in.
fn command_group(name: &str) -> &'static str {
    if let Some((g, _)) = crate::types::grouped().find(|(_, s)| s.name == name) {
        return g;
    }
    match name {
        "ping" | "echo" | "hello" | "client" | "select" | "quit" => "connection",
        "info" | "config" | "command" | "dbsize" | "flushall" | "flushdb" | "time" | "save"
        | "shutdown" => "server",
        "multi" | "exec" | "discard" | "watch" | "unwatch" => "transactions",
        "setbit" | "getbit" => "bitmap",
        "del" | "unlink" | "exists" | "touch" | "expire" | "pexpire" | "expireat" | "pexpireat"
        | "expiretime" | "pexpiretime" | "ttl" | "pttl" | "persist" | "keys" | "scan"
        | "rename" | "renamenx" | "copy" | "randomkey" => "generic",
        _ => "string",
    }
}

/// `readonly` or `write` for a command that goes to the store, as the store classes the
/// operation it becomes (tried with placeholder arguments); `None` for one answered without
/// the store, or whose placeholder arguments it refuses.
fn command_flag(name: &'static str, arity: i32) -> Option<&'static str> {
    let n = arity.unsigned_abs().max(1) as usize;
    let mut args = vec![name.as_bytes().to_vec()];
    args.extend((1..n).map(|_| b"0".to_vec()));
    match command_proto(&args, Proto::Resp2) {
        Action::Store(op, _) => Some(if op.is_read_only() {
            "readonly"
        } else {
            "write"
        }),
        _ => None,
    }
}

/// The header of a set of `n` members: RESP3's `~`, RESP2's array.
fn set_header(out: &mut Vec<u8>, n: usize, proto: Proto) {
    match proto {
        Proto::Resp2 => array(out, n),
        Proto::Resp3 => out.extend_from_slice(format!("~{n}\r\n").as_bytes()),
    }
}

/// A seed for a command that picks at random: drawn here, carried in the log.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// Translates a request's arguments (from [`parse_command`]) into what to do. Command names
/// are case-insensitive. Errors come as [`Action::Reply`] with Redis 7's wording:
///
/// - `-ERR unknown command 'x', with args beginning with: 'a' 'b' `
/// - `-ERR wrong number of arguments for 'x' command` (`'client|setname'` for subcommands)
/// - `-ERR unknown subcommand 'x'. Try CLIENT HELP.`
/// - `-ERR syntax error`, `-ERR value is not an integer or out of range`,
///   `-ERR invalid expire time in 'set' command`, `-ERR invalid cursor`, …
///
/// Supported: `PING [msg]`, `ECHO`, `GET`, `SET key value [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]
/// [NX|XX] [GET]`, `SETNX`, `SETEX`, `PSETEX`, `GETSET`, `MGET`, `MSET`, `DEL`, `UNLINK`,
/// `EXISTS`, `TYPE`, `INCR`, `INCRBY`, `DECR`, `DECRBY`, `APPEND`, `STRLEN`, `EXPIRE`,
/// `PEXPIRE`, `EXPIREAT`, `PEXPIREAT` (without the `NX|XX|GT|LT` options), `TTL`, `PTTL`,
/// `PERSIST`, `DBSIZE`, `FLUSHALL`/`FLUSHDB [ASYNC|SYNC]`, `KEYS`, `SCAN cursor [MATCH p]
/// [COUNT n] [TYPE t]`, `INFO [section…]`, `COMMAND [COUNT|DOCS|INFO|LIST]`, `CLIENT
/// SETNAME|GETNAME|ID|INFO|SETINFO`, `SELECT 0`, `HELLO [2|3 [SETNAME name]]`,
/// `CONFIG GET pattern…`, `QUIT`.
pub fn command(args: &[Vec<u8>]) -> Action {
    command_proto(args, Proto::Resp2)
}

/// [`command`] for a connection speaking `proto`: the replies made without the store are in
/// it (a store reply is rendered with [`render_proto`]).
pub fn command_proto(args: &[Vec<u8>], proto: Proto) -> Action {
    command_named(args, proto).1
}

/// How a command names itself for statistics: the known command `args` runs as, and
/// whether it ran (`Ran`) or was refused before (`Rejected`: a wrong number of arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    /// Not a known command (or no command).
    Unknown,
    /// Refused before running.
    Rejected(&'static str),
    /// Runs.
    Ran(&'static str),
}

/// [`command_proto`], with the command's name for statistics (one lookup for both).
pub fn command_named(args: &[Vec<u8>], proto: Proto) -> (Named, Action) {
    if args.is_empty() {
        return (Named::Unknown, Action::Reply(Vec::new()));
    }
    let (cmd, sub) = match lookup(args) {
        Ok(found) => found,
        Err(e) => {
            let lname = args[0].to_ascii_lowercase();
            let known = COMMANDS
                .iter()
                .map(|(n, _)| *n)
                .chain(crate::types::spec(&lname).map(|s| s.name))
                .find(|n| n.as_bytes() == lname);
            let named = known.map_or(Named::Unknown, Named::Rejected);
            return (named, Action::Reply(e));
        }
    };
    (Named::Ran(cmd), command_found(args, proto, cmd, sub))
}

fn command_found(
    args: &[Vec<u8>],
    proto: Proto,
    cmd: &'static str,
    sub: Option<&'static str>,
) -> Action {
    let key = || args[1].clone();
    match cmd {
        "ping" => match args.len() {
            1 => Action::Reply(b"+PONG\r\n".to_vec()),
            2 => Action::Reply(bulk_reply(&args[1])),
            _ => reply(wrong_arity(cmd)),
        },
        "echo" => Action::Reply(bulk_reply(&args[1])),
        "quit" => Action::Quit,
        "info" => Action::Info(args[1..].iter().map(|a| a.to_ascii_lowercase()).collect()),
        "select" => match parse_int(&args[1]) {
            None => reply(NOT_INTEGER),
            Some(0) => Action::Reply(b"+OK\r\n".to_vec()),
            Some(_) => reply("DB index is out of range"),
        },
        "hello" => hello(args),
        "time" => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let mut out = Vec::new();
            array(&mut out, 2);
            bulk(&mut out, now.as_secs().to_string().as_bytes());
            bulk(&mut out, now.subsec_micros().to_string().as_bytes());
            Action::Reply(out)
        }
        "getdel" => Action::Store(Op::GetDel { key: key() }, Render::Bulk),
        "incrbyfloat" => match crate::store::parse_f64(&args[2]) {
            Some(d) => Action::Store(
                Op::IncrByFloat {
                    key: key(),
                    delta: d.to_bits(),
                },
                Render::Bulk,
            ),
            None => reply(crate::store::ERR_NOT_FLOAT),
        },
        "randomkey" => Action::Store(
            Op::RandomKey {
                seed: random_seed(),
            },
            Render::Bulk,
        ),
        "setbit" | "getbit" => {
            let offset = parse_int(&args[2]).filter(|&n| (0..1 << 32).contains(&n));
            let Some(offset) = offset else {
                return reply("bit offset is not an integer or out of range");
            };
            if cmd == "getbit" {
                return Action::Store(
                    Op::GetBit {
                        key: key(),
                        offset: offset as u64,
                    },
                    Render::Int,
                );
            }
            let bit = match args[3].as_slice() {
                b"0" => false,
                b"1" => true,
                _ => return reply("bit is not an integer or out of range"),
            };
            Action::Store(
                Op::SetBit {
                    key: key(),
                    offset: offset as u64,
                    bit,
                    max_len: u64::MAX,
                },
                Render::Int,
            )
        }
        "getex" => getex(args),
        "rename" | "renamenx" => Action::Store(
            Op::Rename {
                from: key(),
                to: args[2].clone(),
                nx: cmd == "renamenx",
            },
            if cmd == "rename" {
                Render::Ok
            } else {
                Render::Bool
            },
        ),
        "copy" => copy(args),
        "setrange" => match parse_int(&args[2]) {
            None => reply(NOT_INTEGER),
            Some(n) if n < 0 => reply("offset is out of range"),
            Some(n) => Action::Store(
                Op::SetRange {
                    key: key(),
                    offset: n as u64,
                    value: args[3].clone(),
                    max_len: u64::MAX,
                },
                Render::Int,
            ),
        },
        "getrange" | "substr" => match (parse_int(&args[2]), parse_int(&args[3])) {
            (Some(start), Some(end)) => Action::Store(
                Op::GetRange {
                    key: key(),
                    start,
                    end,
                },
                Render::Bulk,
            ),
            _ => reply(NOT_INTEGER),
        },
        "expiretime" | "pexpiretime" => Action::Store(
            Op::ExpireTime { key: key() },
            if cmd == "expiretime" {
                Render::TtlSeconds
            } else {
                Render::TtlMillis
            },
        ),
        _ if crate::types::spec(cmd.as_bytes()).is_some() => {
            let spec = crate::types::spec(cmd.as_bytes()).expect("just found");
            let seed = if spec.random { random_seed() } else { 0 };
            let mut args = args.to_vec();
            args[0] = cmd.as_bytes().to_vec();
            Action::Store(Op::Cmd { args, seed }, Render::Reply)
        }
        // Each replica snapshots on its own schedule (and on `POST /snapshot`); stopping one
        // is its process manager's job, not a client's.
        "save" => reply("SAVE is not supported: each replica takes its snapshots itself (POST /snapshot on its admin port asks for one)"),
        "shutdown" => reply("SHUTDOWN is not supported: stop the replica's process"),
        "multi" => Action::Tx(TxCmd::Multi),
        "exec" => Action::Tx(TxCmd::Exec),
        "discard" => Action::Tx(TxCmd::Discard),
        "watch" => Action::Tx(TxCmd::Watch),
        "unwatch" => Action::Tx(TxCmd::Unwatch),
        "command" if args.len() == 1 => Action::Reply(b"*0\r\n".to_vec()),
        "client" | "command" | "config" => {
            container(cmd, sub.expect("a subcommand, looked up"), args, proto)
        }
        "get" => Action::Store(Op::Get { keys: vec![key()] }, Render::Bulk),
        "set" => set(args),
        "setnx" => Action::Store(
            Op::Set {
                key: key(),
                value: args[2].clone(),
                flags: 0,
                expiry: Expiry::None,
                cond: Cond::IfAbsent,
                get_old: false,
            },
            Render::Bool,
        ),
        "setex" | "psetex" => {
            let unit = if cmd == "setex" { 1000 } else { 1 };
            match relative_expiry(cmd, &args[2], unit) {
                Ok(ms) => Action::Store(
                    Op::Set {
                        key: key(),
                        value: args[3].clone(),
                        flags: 0,
                        expiry: Expiry::AfterMs(ms),
                        cond: Cond::Always,
                        get_old: false,
                    },
                    Render::Set,
                ),
                Err(e) => Action::Reply(e),
            }
        }
        "getset" => Action::Store(
            Op::Set {
                key: key(),
                value: args[2].clone(),
                flags: 0,
                expiry: Expiry::None,
                cond: Cond::Always,
                get_old: true,
            },
            Render::Bulk,
        ),
        "mget" => Action::Store(
            Op::Get {
                keys: args[1..].to_vec(),
            },
            Render::Bulks,
        ),
        "mset" | "msetnx" => {
            if args.len() % 2 != 1 {
                return reply(wrong_arity(cmd));
            }
            let pairs = args[1..]
                .chunks_exact(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect();
            if cmd == "mset" {
                Action::Store(Op::MSet { pairs }, Render::Ok)
            } else {
                Action::Store(Op::MSetNx { pairs }, Render::Int)
            }
        }
        "del" | "unlink" => Action::Store(
            Op::Del {
                keys: args[1..].to_vec(),
            },
            Render::Int,
        ),
        // TOUCH refreshes an access time Redis keeps for eviction; none is kept here, so it
        // only counts the keys that exist, as Redis answers.
        "exists" | "touch" => Action::Store(
            Op::Exists {
                keys: args[1..].to_vec(),
            },
            Render::Int,
        ),
        "incr" | "decr" => Action::Store(
            Op::IncrBy {
                key: key(),
                delta: if cmd == "incr" { 1 } else { -1 },
            },
            Render::Int,
        ),
        "incrby" | "decrby" => {
            let Some(n) = parse_int(&args[2]) else {
                return reply(NOT_INTEGER);
            };
            let delta = if cmd == "incrby" {
                n
            } else if n == i64::MIN {
                return reply("decrement would overflow");
            } else {
                -n
            };
            Action::Store(Op::IncrBy { key: key(), delta }, Render::Int)
        }
        "append" => Action::Store(
            Op::Append {
                key: key(),
                value: args[2].clone(),
                must_exist: false,
                max_len: u64::MAX,
            },
            Render::Int,
        ),
        "strlen" => Action::Store(Op::Strlen { key: key() }, Render::Int),
        "expire" | "pexpire" | "expireat" | "pexpireat" => expire(cmd, args),
        "persist" => Action::Store(
            Op::Touch {
                keys: vec![key()],
                expiry: Expiry::None,
                get: false,
            },
            Render::Bool,
        ),
        "ttl" => Action::Store(Op::Ttl { key: key() }, Render::TtlSeconds),
        "pttl" => Action::Store(Op::Ttl { key: key() }, Render::TtlMillis),
        "dbsize" => Action::Store(Op::DbSize, Render::Int),
        "flushall" | "flushdb" => match args.len() {
            1 => Action::Store(Op::FlushAll, Render::Ok),
            2 if args[1].eq_ignore_ascii_case(b"async")
                || args[1].eq_ignore_ascii_case(b"sync") =>
            {
                Action::Store(Op::FlushAll, Render::Ok)
            }
            _ => reply(SYNTAX),
        },
        "keys" => Action::Store(Op::Keys { pattern: key() }, Render::Keys),
        "scan" => scan(args),
        _ => Action::Reply(unknown_command(args)),
    }
}

const SYNTAX: &str = "syntax error";
const NOT_INTEGER: &str = "value is not an integer or out of range";

fn reply(msg: impl AsRef<str>) -> Action {
    Action::Reply(error(msg.as_ref()))
}

fn wrong_arity(fullname: &str) -> String {
    format!("wrong number of arguments for '{fullname}' command")
}

fn invalid_expire(fullname: &str) -> Vec<u8> {
    error(&format!("invalid expire time in '{fullname}' command"))
}

/// Redis 7's `unknown command '%.128s', with args beginning with: ` then `'%.*s' ` per
/// argument while the list is shorter than 128 bytes.
fn unknown_command(args: &[Vec<u8>]) -> Vec<u8> {
    let mut msg = b"unknown command '".to_vec();
    msg.extend_from_slice(c_str(&args[0], 128));
    msg.extend_from_slice(b"', with args beginning with: ");
    let mut list = Vec::new();
    for arg in &args[1..] {
        if list.len() >= 128 {
            break;
        }
        list.push(b'\'');
        list.extend_from_slice(c_str(arg, 128 - (list.len() - 1)));
        list.extend_from_slice(b"' ");
    }
    msg.extend_from_slice(&list);
    error_bytes(b"ERR", &msg)
}

/// `%.Ns` of a C string: at most `max` bytes, up to the first NUL.
fn c_str(s: &[u8], max: usize) -> &[u8] {
    let s = &s[..s.len().min(max)];
    match s.iter().position(|&b| b == 0) {
        Some(i) => &s[..i],
        None => s,
    }
}

/// A container command's subcommand (found by [`lookup`]).
fn container(cmd: &str, sub: &str, args: &[Vec<u8>], proto: Proto) -> Action {
    match (cmd, sub) {
        ("client", "getname") => Action::Client(ClientCmd::GetName),
        ("client", "id") => Action::Client(ClientCmd::Id),
        ("client", "info") => Action::Client(ClientCmd::Info),
        ("client", "no-evict") => match args[2].to_ascii_lowercase().as_slice() {
            b"on" | b"off" => Action::Client(ClientCmd::NoEvict),
            _ => reply(SYNTAX),
        },
        ("client", "reply") => match args[2].to_ascii_lowercase().as_slice() {
            b"on" => Action::Client(ClientCmd::Reply(ReplyMode::On)),
            b"off" => Action::Client(ClientCmd::Reply(ReplyMode::Off)),
            b"skip" => Action::Client(ClientCmd::Reply(ReplyMode::Skip)),
            _ => reply(SYNTAX),
        },
        ("client", "list") => match args.len() {
            2 => Action::Client(ClientCmd::List(None)),
            n if n >= 4 && args[2].eq_ignore_ascii_case(b"id") => {
                let mut ids = Vec::new();
                for a in &args[3..] {
                    match parse_int(a) {
                        Some(id) if id > 0 => ids.push(id as u64),
                        _ => return reply("Invalid client ID"),
                    }
                }
                Action::Client(ClientCmd::List(Some(ids)))
            }
            n if n == 4 && args[2].eq_ignore_ascii_case(b"type") => {
                match args[3].to_ascii_lowercase().as_slice() {
                    b"normal" => Action::Client(ClientCmd::List(None)),
                    b"master" | b"replica" | b"slave" | b"pubsub" => {
                        Action::Client(ClientCmd::List(Some(Vec::new())))
                    }
                    _ => {
                        let mut msg = b"Unknown client type '".to_vec();
                        msg.extend_from_slice(c_str(&args[3], 128));
                        msg.push(b'\'');
                        Action::Reply(error_bytes(b"ERR", &msg))
                    }
                }
            }
            _ => reply(SYNTAX),
        },
        ("client", "unblock") => {
            let Some(id) = parse_int(&args[2]) else {
                return reply(NOT_INTEGER);
            };
            let error = match args.get(3).map(|a| a.to_ascii_lowercase()) {
                None => false,
                Some(m) if m == b"timeout" => false,
                Some(m) if m == b"error" => true,
                Some(_) => return reply("CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
            };
            if args.len() > 4 {
                return reply(SYNTAX);
            }
            Action::Client(ClientCmd::Unblock {
                id: u64::try_from(id).unwrap_or(0),
                error,
            })
        }
        ("client", "setname") => match valid_client_name(&args[2]) {
            Ok(()) => Action::Client(ClientCmd::SetName(args[2].clone())),
            Err(e) => Action::Reply(e),
        },
        ("client", "setinfo") => {
            let attr = args[2].to_ascii_lowercase();
            if attr != b"lib-name" && attr != b"lib-ver" {
                let mut msg = b"Unrecognized option '".to_vec();
                msg.extend_from_slice(c_str(&args[2], 128));
                msg.push(b'\'');
                return Action::Reply(error_bytes(b"ERR", &msg));
            }
            if args[3].iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
                let what = if attr == b"lib-name" {
                    "lib-name"
                } else {
                    "lib-ver"
                };
                return reply(format!(
                    "{what} cannot contain spaces, newlines or special characters."
                ));
            }
            Action::Reply(b"+OK\r\n".to_vec())
        }
        ("command", "count") => {
            let mut out = Vec::new();
            int(&mut out, all_commands().count() as i64);
            Action::Reply(out)
        }
        ("command", "docs") => {
            // Per command asked (all without a name): Redis's three mandatory fields, of which
            // this server keeps the `group`; `summary` and `since` are empty (no text is kept,
            // none is made up), and the optional ones are absent.
            let asked: Vec<(&'static str, &'static str)> = all_commands()
                .map(|(n, _)| (n, command_group(n)))
                .filter(|(n, _)| {
                    args.len() == 2
                        || args[2..]
                            .iter()
                            .any(|a| a.eq_ignore_ascii_case(n.as_bytes()))
                })
                .collect();
            let mut out = Vec::new();
            map(&mut out, asked.len(), proto);
            for (name, group) in asked {
                bulk(&mut out, name.as_bytes());
                map(&mut out, 3, proto);
                for (k, v) in [("summary", ""), ("since", ""), ("group", group)] {
                    bulk(&mut out, k.as_bytes());
                    bulk(&mut out, v.as_bytes());
                }
            }
            Action::Reply(out)
        }
        ("command", "info") => {
            // Per name asked: Redis 7's ten fields (name, arity, flags, first key, last key,
            // step, ACL categories, tips, key specs, subcommands), the flags `readonly` or
            // `write` as the store sees the command, the key positions as Redis gives them
            // (see `key_positions`); no ACL categories, tips or key specs. A name not known:
            // a nil.
            let names: Vec<&'static str> = if args.len() == 2 {
                all_commands().map(|(n, _)| n).collect()
            } else {
                Vec::new()
            };
            let asked: Vec<Vec<u8>> = if args.len() == 2 {
                names.iter().map(|n| n.as_bytes().to_vec()).collect()
            } else {
                args[2..].iter().map(|a| a.to_ascii_lowercase()).collect()
            };
            let mut out = Vec::new();
            array(&mut out, asked.len());
            for a in &asked {
                let Some((name, arity)) =
                    all_commands().find(|(n, _)| n.as_bytes() == a.as_slice())
                else {
                    nil_array(&mut out, proto);
                    continue;
                };
                array(&mut out, 10);
                bulk(&mut out, name.as_bytes());
                int(&mut out, i64::from(arity));
                match command_flag(name, arity) {
                    Some(flag) => {
                        set_header(&mut out, 1, proto);
                        out.extend_from_slice(format!("+{flag}\r\n").as_bytes());
                    }
                    None => set_header(&mut out, 0, proto),
                }
                let (first, last, step) = key_positions(name, arity);
                for n in [first, last, step] {
                    int(&mut out, n);
                }
                for _ in 0..4 {
                    array(&mut out, 0);
                }
            }
            Action::Reply(out)
        }
        ("command", "list") => {
            let mut out = Vec::new();
            array(&mut out, all_commands().count());
            for (name, _) in all_commands() {
                bulk(&mut out, name.as_bytes());
            }
            Action::Reply(out)
        }
        ("config", "get") => {
            let patterns: Vec<Vec<u8>> = args[2..].iter().map(|p| p.to_ascii_lowercase()).collect();
            let found: Vec<_> = CONFIG
                .iter()
                .filter(|(name, _, _)| patterns.iter().any(|p| glob_match(p, name.as_bytes())))
                .collect();
            let mut out = Vec::new();
            map(&mut out, found.len(), proto);
            for (name, default, _) in found {
                bulk(&mut out, name.as_bytes());
                bulk(&mut out, config_value(name, default).as_bytes());
            }
            Action::Reply(out)
        }
        ("config", "set") => {
            if !args.len().is_multiple_of(2) {
                return reply(wrong_arity("config|set"));
            }
            let mut changes = Vec::new();
            for pair in args[2..].chunks_exact(2) {
                let lname = pair[0].to_ascii_lowercase();
                let Some((name, _, settable)) =
                    CONFIG.iter().find(|(n, _, _)| n.as_bytes() == lname)
                else {
                    let mut msg =
                        b"Unknown option or number of arguments for CONFIG SET - '".to_vec();
                    msg.extend_from_slice(c_str(&pair[0], 128));
                    msg.push(b'\'');
                    return Action::Reply(error_bytes(b"ERR", &msg));
                };
                let value = String::from_utf8_lossy(&pair[1]).into_owned();
                if !settable || (*name != "save" && value.parse::<i64>().is_err()) {
                    return reply(format!(
                        "CONFIG SET failed (possibly related to argument '{name}') - \
                         argument couldn't be parsed into an integer"
                    ));
                }
                changes.push((*name, value));
            }
            CONFIG_SET
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(changes);
            Action::Reply(b"+OK\r\n".to_vec())
        }
        _ => Action::Reply(unknown_command(args)),
    }
}

fn valid_client_name(name: &[u8]) -> Result<(), Vec<u8>> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(error(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`, protover 2 or 3.
fn hello(args: &[Vec<u8>]) -> Action {
    let mut setname = None;
    let mut proto = None;
    if args.len() >= 2 {
        let Some(ver) = parse_int(&args[1]) else {
            return reply("Protocol version is not an integer or out of range");
        };
        proto = match ver {
            2 => Some(Proto::Resp2),
            3 => Some(Proto::Resp3),
            _ => return Action::Reply(error_bytes(b"NOPROTO", b"unsupported protocol version")),
        };
        let mut j = 2;
        while j < args.len() {
            let more = args.len() - j - 1;
            let opt = args[j].to_ascii_lowercase();
            if opt == b"auth" && more >= 2 {
                return reply("AUTH is not supported by this server");
            } else if opt == b"setname" && more >= 1 {
                if let Err(e) = valid_client_name(&args[j + 1]) {
                    return Action::Reply(e);
                }
                setname = Some(args[j + 1].clone());
                j += 2;
            } else {
                let mut msg = b"Syntax error in HELLO option '".to_vec();
                msg.extend_from_slice(c_str(&args[j], 128));
                msg.push(b'\'');
                return Action::Reply(error_bytes(b"ERR", &msg));
            }
        }
    }
    Action::Client(ClientCmd::Hello { proto, setname })
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`, with Redis 7's option
/// rules: options in any order, repeats allowed, conflicting ones a syntax error, and the
/// expire time checked after every option is known.
fn set(args: &[Vec<u8>]) -> Action {
    #[derive(Clone, Copy, PartialEq)]
    enum Unit {
        Ex,
        Px,
        ExAt,
        PxAt,
    }
    let mut cond = Cond::Always;
    let mut get_old = false;
    let mut keepttl = false;
    let mut expire: Option<(Unit, &[u8])> = None;
    let mut j = 3;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        let next = args.get(j + 1);
        let unit = match opt.as_slice() {
            b"ex" => Some(Unit::Ex),
            b"px" => Some(Unit::Px),
            b"exat" => Some(Unit::ExAt),
            b"pxat" => Some(Unit::PxAt),
            _ => None,
        };
        if opt == b"nx" && cond != Cond::IfPresent {
            cond = Cond::IfAbsent;
        } else if opt == b"xx" && cond != Cond::IfAbsent {
            cond = Cond::IfPresent;
        } else if opt == b"get" {
            get_old = true;
        } else if opt == b"keepttl" && expire.is_none() {
            keepttl = true;
        } else if let (Some(unit), Some(next)) = (unit, next) {
            if keepttl || expire.is_some_and(|(u, _)| u != unit) {
                return reply(SYNTAX);
            }
            expire = Some((unit, next.as_slice()));
            j += 1;
        } else {
            return reply(SYNTAX);
        }
        j += 1;
    }
    let expiry = match expire {
        None if keepttl => Expiry::Keep,
        None => Expiry::None,
        Some((unit, value)) => {
            let Some(n) = parse_int(value) else {
                return reply(NOT_INTEGER);
            };
            if n <= 0 {
                return Action::Reply(invalid_expire("set"));
            }
            match unit {
                Unit::Ex | Unit::Px => {
                    match relative_expiry("set", value, if unit == Unit::Ex { 1000 } else { 1 }) {
                        Ok(ms) => Expiry::AfterMs(ms),
                        Err(e) => return Action::Reply(e),
                    }
                }
                Unit::ExAt => match n.checked_mul(1000) {
                    Some(ms) => Expiry::AtMs(ms as u64),
                    None => return Action::Reply(invalid_expire("set")),
                },
                Unit::PxAt => Expiry::AtMs(n as u64),
            }
        }
    };
    Action::Store(
        Op::Set {
            key: args[1].clone(),
            value: args[2].clone(),
            flags: 0,
            expiry,
            cond,
            get_old,
        },
        if get_old { Render::Bulk } else { Render::Set },
    )
}

/// A positive relative expiry of `SET EX/PX`, `SETEX`, `PSETEX` in ms.
fn relative_expiry(cmd: &str, value: &[u8], unit_ms: i64) -> Result<i64, Vec<u8>> {
    let Some(n) = parse_int(value) else {
        return Err(error(NOT_INTEGER));
    };
    match n.checked_mul(unit_ms) {
        Some(ms) if n > 0 && ms <= MAX_RELATIVE_MS => Ok(ms),
        _ => Err(invalid_expire(cmd)),
    }
}

/// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT key time [NX|XX|GT|LT]`. A time in the past
/// deletes the key (if the condition holds).
fn expire(cmd: &str, args: &[Vec<u8>]) -> Action {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &args[3..] {
        match opt.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => {
                let mut msg = b"Unsupported option ".to_vec();
                msg.extend_from_slice(c_str(opt, 128));
                return Action::Reply(error_bytes(b"ERR", &msg));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return reply("NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return reply("GT and LT options at the same time are not compatible");
    }
    let cond = match (nx, xx, gt, lt) {
        (true, ..) => Some(ExpireCond::Nx),
        (_, _, true, _) => Some(ExpireCond::Gt),
        (_, true, _, true) => Some(ExpireCond::XxLt),
        (_, _, _, true) => Some(ExpireCond::Lt),
        (_, true, ..) => Some(ExpireCond::Xx),
        _ => None,
    };
    let Some(n) = parse_int(&args[2]) else {
        return reply(NOT_INTEGER);
    };
    let unit = if cmd == "expire" || cmd == "expireat" {
        1000
    } else {
        1
    };
    let Some(ms) = n.checked_mul(unit) else {
        return Action::Reply(invalid_expire(cmd));
    };
    let expiry = if cmd.ends_with("at") {
        Expiry::AtMs(ms.max(0) as u64)
    } else if ms > MAX_RELATIVE_MS {
        return Action::Reply(invalid_expire(cmd));
    } else {
        Expiry::AfterMs(ms)
    };
    let op = match cond {
        Some(cond) => Op::ExpireIf {
            key: args[1].clone(),
            expiry,
            cond,
        },
        None => Op::Touch {
            keys: vec![args[1].clone()],
            expiry,
            get: false,
        },
    };
    Action::Store(op, Render::Bool)
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`.
fn getex(args: &[Vec<u8>]) -> Action {
    let mut expiry = None;
    let mut j = 2;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        let next = args.get(j + 1);
        let unit: Option<(bool, i64)> = match opt.as_slice() {
            b"ex" => Some((false, 1000)),
            b"px" => Some((false, 1)),
            b"exat" => Some((true, 1000)),
            b"pxat" => Some((true, 1)),
            _ => None,
        };
        if opt == b"persist" && expiry.is_none() {
            expiry = Some(Expiry::None);
        } else if let (Some((abs, unit)), Some(v), None) = (unit, next, &expiry) {
            let Some(n) = parse_int(v) else {
                return reply(NOT_INTEGER);
            };
            let ms = n.checked_mul(unit).filter(|_| n > 0);
            expiry = Some(match ms {
                Some(ms) if abs => Expiry::AtMs(ms as u64),
                Some(ms) if ms <= MAX_RELATIVE_MS => Expiry::AfterMs(ms),
                _ => return Action::Reply(invalid_expire("getex")),
            });
            j += 1;
        } else {
            return reply(SYNTAX);
        }
        j += 1;
    }
    Action::Store(
        Op::GetEx {
            key: args[1].clone(),
            expiry,
        },
        Render::Bulk,
    )
}

/// `COPY source destination [DB 0] [REPLACE]`.
fn copy(args: &[Vec<u8>]) -> Action {
    let mut replace = false;
    let mut j = 3;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        if opt == b"replace" {
            replace = true;
        } else if opt == b"db" && j + 1 < args.len() {
            match parse_int(&args[j + 1]) {
                Some(0) => {}
                Some(_) => return reply("DB index is out of range"),
                None => return reply(NOT_INTEGER),
            }
            j += 1;
        } else {
            return reply(SYNTAX);
        }
        j += 1;
    }
    if args[1] == args[2] {
        return reply("source and destination objects are the same");
    }
    Action::Store(
        Op::Copy {
            from: args[1].clone(),
            to: args[2].clone(),
            replace,
        },
        Render::Int,
    )
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]` (default count 10).
fn scan(args: &[Vec<u8>]) -> Action {
    let Some(cursor) = decode_cursor(&args[1]) else {
        return reply("invalid cursor");
    };
    let mut pattern = None;
    let mut count: u32 = 10;
    let mut kind = None;
    let mut j = 2;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        let Some(value) = args.get(j + 1) else {
            return reply(SYNTAX);
        };
        match opt.as_slice() {
            b"count" => {
                let Some(n) = parse_int(value) else {
                    return reply(NOT_INTEGER);
                };
                if n < 1 {
                    return reply(SYNTAX);
                }
                count = u32::try_from(n).unwrap_or(u32::MAX);
            }
            b"match" => {
                pattern = if value.as_slice() == b"*" {
                    None
                } else {
                    Some(value.clone())
                }
            }
            b"type" => kind = Some(value.to_ascii_lowercase()),
            _ => return reply(SYNTAX),
        }
        j += 2;
    }
    Action::Store(
        Op::Scan {
            cursor,
            pattern,
            count,
            kind,
        },
        Render::Scan,
    )
}

/// The client's token for a scan cursor (see the [module docs](self)): `"0"` for the empty
/// cursor (start, or done), else `"1"` and three decimal digits per byte.
pub fn encode_cursor(key: &[u8]) -> Vec<u8> {
    if key.is_empty() {
        return b"0".to_vec();
    }
    let mut out = Vec::with_capacity(1 + 3 * key.len());
    out.push(b'1');
    for &b in key {
        out.extend_from_slice(&[b'0' + b / 100, b'0' + b / 10 % 10, b'0' + b % 10]);
    }
    out
}

/// The store's cursor for a client's token, `None` for a malformed one; the inverse of
/// [`encode_cursor`] (`"0"` and `"1"` both give the empty cursor).
pub fn decode_cursor(token: &[u8]) -> Option<Bytes> {
    if token == b"0" {
        return Some(Vec::new());
    }
    let digits = token.strip_prefix(b"1")?;
    if digits.len() % 3 != 0 {
        return None;
    }
    digits
        .chunks_exact(3)
        .map(|d| {
            if !d.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n =
                u32::from(d[0] - b'0') * 100 + u32::from(d[1] - b'0') * 10 + u32::from(d[2] - b'0');
            u8::try_from(n).ok()
        })
        .collect()
}
