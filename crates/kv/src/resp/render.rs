//! Replies: a store [`Response`] rendered as Redis renders it.

use super::*;

pub(super) const NIL: &[u8] = b"$-1\r\n";

/// A missing value: RESP2's nil bulk string, RESP3's null.
pub(super) fn nil(out: &mut Vec<u8>, proto: Proto) {
    out.extend_from_slice(match proto {
        Proto::Resp2 => NIL,
        Proto::Resp3 => b"_\r\n",
    });
}

/// A missing array (`COMMAND INFO` of an unknown command): RESP2's nil array, RESP3's null.
pub(super) fn nil_array(out: &mut Vec<u8>, proto: Proto) {
    out.extend_from_slice(match proto {
        Proto::Resp2 => b"*-1\r\n",
        Proto::Resp3 => b"_\r\n",
    });
}

/// The header of a map of `pairs` entries: RESP3's `%`, RESP2's flat array of keys and values.
pub(super) fn map(out: &mut Vec<u8>, pairs: usize, proto: Proto) {
    match proto {
        Proto::Resp2 => array(out, pairs * 2),
        Proto::Resp3 => {
            out.push(b'%');
            out.extend_from_slice(pairs.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Text for people (`INFO`, `CLIENT INFO`): a bulk string in RESP2, a verbatim string of
/// format `txt` in RESP3.
pub(super) fn verbatim(out: &mut Vec<u8>, text: &[u8], proto: Proto) {
    match proto {
        Proto::Resp2 => bulk(out, text),
        Proto::Resp3 => {
            out.push(b'=');
            out.extend_from_slice((text.len() + 4).to_string().as_bytes());
            out.extend_from_slice(b"\r\ntxt:");
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
    }
}

pub(super) fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(data.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

pub(super) fn bulk_reply(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 16);
    bulk(&mut out, data);
    out
}

pub(super) fn int(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub(super) fn array(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn item_or_nil(out: &mut Vec<u8>, item: Option<&Item>, proto: Proto) {
    match item {
        Some(item) => bulk(out, &item.value),
        None => nil(out, proto),
    }
}

/// `-ERR msg\r\n`, with CR and LF in `msg` turned into spaces as Redis does.
pub(super) fn error(msg: &str) -> Vec<u8> {
    error_bytes(b"ERR", msg.as_bytes())
}

pub(super) fn error_bytes(code: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(code.len() + msg.len() + 4);
    out.push(b'-');
    out.extend_from_slice(code);
    out.push(b' ');
    out.extend(
        msg.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
    out
}

/// The RESP2 reply to a command from the store's response; see [`Render`] for each command's
/// shape. `Response::Error(msg)` gives `-ERR msg`.
pub fn render(render: &Render, resp: &Response) -> Vec<u8> {
    render_proto(render, resp, Proto::Resp2)
}

/// The reply to a command from the store's response in `proto`.
pub fn render_proto(render: &Render, resp: &Response, proto: Proto) -> Vec<u8> {
    let mut out = Vec::new();
    if let Response::Error(msg) = resp {
        if msg.starts_with("WRONGTYPE ") {
            let mut out = error_bytes(b"", msg.as_bytes());
            out.remove(1);
            return out;
        }
        return error(msg);
    }
    match (render, resp) {
        (Render::Ok | Render::Set, Response::Ok) => out.extend_from_slice(b"+OK\r\n"),
        (Render::Set, Response::NotStored) => nil(&mut out, proto),
        (Render::Bulk, Response::Items(items)) => {
            item_or_nil(&mut out, items.first().and_then(Option::as_ref), proto)
        }
        (Render::Bulk, Response::NotStored | Response::NotFound) => nil(&mut out, proto),
        (Render::Bulks, Response::Items(items)) => {
            array(&mut out, items.len());
            for item in items {
                item_or_nil(&mut out, item.as_ref(), proto);
            }
        }
        (Render::Int, Response::Int(n)) => int(&mut out, *n),
        (Render::Int, Response::UInt(n)) => int(&mut out, i64::try_from(*n).unwrap_or(i64::MAX)),
        (Render::Bool, Response::Ok) => int(&mut out, 1),
        (Render::Bool, Response::NotStored | Response::NotFound) => int(&mut out, 0),
        (Render::Bool, Response::Int(n)) => int(&mut out, i64::from(*n > 0)),
        (Render::TtlSeconds, Response::Int(ms)) => int(
            &mut out,
            if *ms < 0 {
                *ms
            } else {
                ms.saturating_add(500) / 1000
            },
        ),
        (Render::TtlMillis, Response::Int(ms)) => int(&mut out, *ms),
        (Render::TtlSeconds | Render::TtlMillis, Response::NotFound) => int(&mut out, -2),
        (Render::Keys, Response::Keys(keys)) => {
            array(&mut out, keys.len());
            for k in keys {
                bulk(&mut out, k);
            }
        }
        (Render::Scan, Response::ScanPage { next, keys }) => {
            array(&mut out, 2);
            bulk(&mut out, &encode_cursor(next));
            array(&mut out, keys.len());
            for k in keys {
                bulk(&mut out, k);
            }
        }
        (Render::Reply, Response::Reply(r)) => reply(&mut out, r, proto),
        _ => return error("internal error: unexpected response from the store"),
    }
    out
}

/// A [`Reply`] in `proto`.
pub fn reply(out: &mut Vec<u8>, r: &Reply, proto: Proto) {
    let line = |out: &mut Vec<u8>, c: u8, s: &[u8]| {
        out.push(c);
        out.extend(
            s.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        out.extend_from_slice(b"\r\n");
    };
    match r {
        Reply::Nil => nil(out, proto),
        Reply::NilArray => nil_array(out, proto),
        Reply::Status(s) => line(out, b'+', s.as_bytes()),
        Reply::Error(s) => line(out, b'-', s.as_bytes()),
        Reply::Int(n) => int(out, *n),
        Reply::Bulk(b) => bulk(out, b),
        Reply::Double(s) => match proto {
            Proto::Resp2 => bulk(out, s.as_bytes()),
            Proto::Resp3 => line(out, b',', s.as_bytes()),
        },
        Reply::Array(rs) => {
            array(out, rs.len());
            for r in rs {
                reply(out, r, proto);
            }
        }
        Reply::Set(rs) => {
            match proto {
                Proto::Resp2 => array(out, rs.len()),
                Proto::Resp3 => line(out, b'~', rs.len().to_string().as_bytes()),
            }
            for r in rs {
                reply(out, r, proto);
            }
        }
        Reply::Pairs(pairs) => {
            array(out, pairs.len() * if proto == Proto::Resp2 { 2 } else { 1 });
            for (k, v) in pairs {
                if proto == Proto::Resp3 {
                    array(out, 2);
                }
                reply(out, k, proto);
                reply(out, v, proto);
            }
        }
        Reply::Map(pairs) => {
            map(out, pairs.len(), proto);
            for (k, v) in pairs {
                reply(out, k, proto);
                reply(out, v, proto);
            }
        }
    }
}

/// One `INFO` section: its title (`Server`, `CPU`, …) and `name:value` fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoSection {
    /// The title, as printed after `# `; matched case-insensitively against `INFO`'s arguments.
    pub title: &'static str,
    /// Shown by `INFO` and `INFO default` (Redis's default sections), not only by `INFO all`.
    pub default: bool,
    /// The fields, in order.
    pub fields: Vec<(&'static str, String)>,
}

/// The reply to `INFO [section…]` as Redis 7 selects: no argument or `default` gives the
/// default sections, `all` and `everything` every one, other arguments the sections of that
/// name (case-insensitive; unknown ones add nothing); several arguments their union, each
/// section once, in the server's order. Sections are separated by an empty line; CR and LF in
/// values become spaces.
pub fn render_info_sections(sections: &[InfoSection], args: &[Bytes], proto: Proto) -> Vec<u8> {
    let all = args
        .iter()
        .any(|a| a.as_slice() == b"all" || a.as_slice() == b"everything");
    let default = args.is_empty() || args.iter().any(|a| a.as_slice() == b"default");
    let clean = |s: &str| s.replace(['\r', '\n'], " ");
    let mut text = String::new();
    for s in sections {
        let named = args
            .iter()
            .any(|a| a.eq_ignore_ascii_case(s.title.as_bytes()));
        if !(all || named || (default && s.default)) {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        text.push_str("# ");
        text.push_str(s.title);
        text.push_str("\r\n");
        for (name, value) in &s.fields {
            text.push_str(&clean(name));
            text.push(':');
            text.push_str(&clean(value));
            text.push_str("\r\n");
        }
    }
    let mut out = Vec::with_capacity(text.len() + 16);
    verbatim(&mut out, text.as_bytes(), proto);
    out
}
