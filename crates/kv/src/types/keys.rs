//! Commands on keys of every type: `TYPE`, `OBJECT`.

use super::*;

/// `TYPE key`.
fn type_(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    Reply::Status(
        v.store
            .type_of(&a[1], v.now)
            .map_or("none", Type::name)
            .into(),
    )
}

/// The encoding Redis 7.0 reports for a value of this type and size (its default
/// thresholds); the representation here is the same for every size.
fn encoding(v: &View<'_>, key: &[u8]) -> Option<&'static str> {
    let ty = v.store.type_of(key, v.now)?;
    Some(match ty {
        Type::String => {
            let s = v.store.string_value(key, v.now).unwrap_or_default();
            if s.len() <= 20 && crate::store::parse_i64(s).is_some() {
                "int"
            } else if s.len() <= 44 {
                "embstr"
            } else {
                "raw"
            }
        }
        Type::Hash => {
            let c = v.store.coll(key).expect("a typed key's collection");
            let small = c.len() <= 128
                && c.as_hash()
                    .iter()
                    .all(|(f, x)| f.len() <= 64 && x.len() <= 64);
            if small {
                "listpack"
            } else {
                "hashtable"
            }
        }
        Type::List => "quicklist",
        Type::Set => {
            let c = v.store.coll(key).expect("a typed key's collection");
            if c.len() <= 512
                && c.as_set()
                    .iter()
                    .all(|m| crate::store::parse_i64(m).is_some())
            {
                "intset"
            } else if c.len() <= 128 && c.as_set().iter().all(|m| m.len() <= 64) {
                "listpack"
            } else {
                "hashtable"
            }
        }
        Type::ZSet => {
            let c = v.store.coll(key).expect("a typed key's collection");
            if c.len() <= 128 && c.as_zset().iter().all(|(m, _)| m.len() <= 64) {
                "listpack"
            } else {
                "skiplist"
            }
        }
    })
}

/// `OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT|HELP`.
fn object(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let sub = a[1].to_ascii_lowercase();
    if sub == b"help" {
        return Reply::Array(
            [
                "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ENCODING <key>",
                "    Return the kind of internal representation used in order to store the value",
                "    associated with a <key>.",
                "FREQ <key>",
                "IDLETIME <key>",
                "REFCOUNT <key>",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|l| Reply::Status((*l).into()))
            .collect(),
        );
    }
    if a.len() != 3
        || !matches!(
            sub.as_slice(),
            b"encoding" | b"freq" | b"idletime" | b"refcount"
        )
    {
        return err(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(&a[1])
        ));
    }
    let Some(enc) = encoding(v, &a[2]) else {
        return Reply::Nil;
    };
    match sub.as_slice() {
        b"encoding" => bulk(enc.as_bytes()),
        b"refcount" => Reply::Int(1),
        b"idletime" => Reply::Int(0),
        _ => err("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."),
    }
}

/// `MEMORY USAGE key [SAMPLES n]`: the bytes the store accounts for the key (see
/// `KvStore::used_memory`); `MEMORY HELP`.
fn memory(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let sub = a[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"help" if a.len() == 2 => Reply::Array(
            [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value.",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|l| Reply::Status((*l).into()))
            .collect(),
        ),
        b"usage" if a.len() == 3 || a.len() == 5 => {
            if a.len() == 5 {
                if !a[3].eq_ignore_ascii_case(b"samples") {
                    return err(SYNTAX);
                }
                if let Err(e) = int_arg(&a[4]) {
                    return e;
                }
            }
            v.store.key_cost(&a[2], v.now).map_or(Reply::Nil, |n| {
                Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
            })
        }
        _ => err(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(&a[1])
        )),
    }
}

pub(super) const SPECS: &[Spec] = &[
    r("type", 2, type_),
    r("object", -2, object),
    r("memory", -2, memory),
];
