//! The store as the type modules' tests drive it: through the log, one command per entry,
//! the invariants checked after each.

use crate::ops::{Cond, Expiry, Op, Reply, Response};
use crate::store::KvStore;

/// A store driven through the log, one command per entry.
pub(super) struct Db {
    pub(super) store: KvStore,
    pub(super) index: u64,
    pub(super) now: u64,
}

impl Db {
    pub(super) fn new() -> Db {
        Db {
            store: KvStore::new(),
            index: 0,
            now: 1_000,
        }
    }

    /// Applies `op` as the next entry, then checks the store's invariants.
    pub(super) fn apply(&mut self, op: &Op) -> Response {
        self.index += 1;
        let r = self.store.apply(self.index, self.now, op);
        self.store.check_invariants();
        r
    }

    pub(super) fn cmdb(&mut self, args: &[&[u8]]) -> Reply {
        let args = args.iter().map(|a| a.to_vec()).collect();
        match self.apply(&Op::Cmd { args, seed: 0 }) {
            Response::Reply(r) => r,
            other => panic!("not a reply: {other:?}"),
        }
    }

    pub(super) fn cmd(&mut self, args: &[&str]) -> Reply {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmdb(&args)
    }

    /// A read answered without the log.
    pub(super) fn read(&self, args: &[&str]) -> Reply {
        let args = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        match self.store.read(self.now, &Op::Cmd { args, seed: 0 }) {
            Response::Reply(r) => r,
            other => panic!("not a reply: {other:?}"),
        }
    }

    /// A plain string value, by `SET`.
    pub(super) fn set_with(&mut self, key: &str, value: &[u8], expiry: Expiry) {
        self.apply(&Op::Set {
            key: key.into(),
            value: value.to_vec(),
            flags: 0,
            expiry,
            cond: Cond::Always,
            get_old: false,
        });
    }

    pub(super) fn set(&mut self, key: &str, value: &(impl AsRef<[u8]> + ?Sized)) {
        self.set_with(key, value.as_ref(), Expiry::None);
    }
}
