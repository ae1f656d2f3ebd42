//! A tiny in-memory network of Raft replicas for scenario tests: it persists what each ready
//! asks, applies committed entries, delivers messages (unless blocked), and plays a minimal
//! data plane when asked.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use waverunner_raft::*;

/// One replica with its "disk" and state machine.
pub struct Node {
    pub raft: Raft,
    pub hs: HardState,
    pub stored: Vec<Entry>,
    pub snapshot: Option<Snapshot>,
    pub applied: Vec<Entry>,
    pub read_states: Vec<ReadState>,
    pub read_refusals: Vec<Vec<u8>>,
    pub dp_cmds: Vec<DataPlaneCommand>,
    pub dp_props: Vec<Vec<u8>>,
    pub conf: ConfState,
    pub cfg: Config,
}

/// A predicate on messages: true drops the message.
pub type Filter = Box<dyn Fn(&Message) -> bool>;

pub struct Net {
    pub nodes: BTreeMap<NodeId, Node>,
    /// Directed links that drop everything.
    pub blocked: BTreeSet<(NodeId, NodeId)>,
    /// Every message delivered (for counting).
    pub delivered: Vec<Message>,
    /// Step errors seen while delivering.
    pub errors: Vec<(NodeId, StepError)>,
    /// Drop messages for which this returns true.
    pub filter: Option<Filter>,
    /// Messages sent but held back (when `hold` is on).
    pub held: VecDeque<Message>,
    pub hold: bool,
    /// Fake data plane: leader's view of followers' match.
    pub dp_match: BTreeMap<NodeId, Index>,
}

pub fn cfg(id: NodeId) -> Config {
    Config {
        id,
        seed: 42,
        ..Config::default()
    }
}

pub fn conf(voters: &[NodeId]) -> ConfState {
    ConfState {
        voters: voters.to_vec(),
        learners: vec![],
    }
}

pub fn entry(term: Term, index: Index) -> Entry {
    Entry {
        term,
        index,
        kind: EntryKind::Normal,
        data: vec![].into(),
    }
}

/// Entries with the given terms, indexes from 1.
pub fn log_of(terms: &[Term]) -> Vec<Entry> {
    terms
        .iter()
        .enumerate()
        .map(|(i, t)| entry(*t, i as Index + 1))
        .collect()
}

impl Node {
    pub fn new(cfg: Config, boot: Bootstrap) -> Node {
        let conf = boot.conf.clone();
        let stored = boot.entries.clone();
        let snapshot = boot.snapshot.clone();
        let hs = boot.hard_state;
        Node {
            raft: Raft::new(cfg.clone(), boot).expect("valid config"),
            hs,
            stored,
            snapshot,
            applied: vec![],
            read_states: vec![],
            read_refusals: vec![],
            dp_cmds: vec![],
            dp_props: vec![],
            conf,
            cfg,
        }
    }

    /// Does what a host does with one ready; returns the messages to send.
    pub fn handle_ready(&mut self) -> Vec<Message> {
        if !self.raft.has_ready() {
            return vec![];
        }
        let rd = self.raft.ready();
        if let Some(c) = rd.dataplane {
            self.dp_cmds.push(c);
        }
        if let Some(s) = rd.snapshot {
            // The state machine is replaced by the snapshot's state; the log starts after it.
            self.stored.clear();
            self.applied.clear();
            self.snapshot = Some(s);
        }
        if let Some(first) = rd.entries.first() {
            self.stored.retain(|e| e.index < first.index);
            self.stored.extend(rd.entries.iter().cloned());
        }
        if let Some(h) = rd.hard_state {
            self.hs = h;
        }
        for e in &rd.committed_entries {
            if let Some(last) = self.applied.last() {
                assert_eq!(e.index, last.index + 1, "applied in order, once");
            }
            self.applied.push(e.clone());
        }
        self.read_states.extend(rd.read_states);
        self.read_refusals.extend(rd.read_refusals);
        self.dp_props.extend(rd.dataplane_proposals);
        self.raft.advance();
        rd.messages
    }

    pub fn applied_data(&self) -> Vec<Vec<u8>> {
        self.applied
            .iter()
            .filter(|e| !e.data.is_empty() && e.kind == EntryKind::Normal)
            .map(|e| e.data.to_vec())
            .collect()
    }
}

impl Net {
    pub fn new(ids: &[NodeId]) -> Net {
        Net::with(ids, |_| {})
    }

    pub fn with(ids: &[NodeId], f: impl Fn(&mut Config)) -> Net {
        let mut nodes = BTreeMap::new();
        for id in ids {
            let mut c = cfg(*id);
            f(&mut c);
            let boot = Bootstrap {
                conf: conf(ids),
                ..Default::default()
            };
            nodes.insert(*id, Node::new(c, boot));
        }
        Net::from_nodes(nodes)
    }

    pub fn from_nodes(nodes: BTreeMap<NodeId, Node>) -> Net {
        Net {
            nodes,
            blocked: BTreeSet::new(),
            delivered: vec![],
            errors: vec![],
            filter: None,
            held: VecDeque::new(),
            hold: false,
            dp_match: BTreeMap::new(),
        }
    }

    pub fn add(&mut self, id: NodeId, c: Config, boot: Bootstrap) {
        self.nodes.insert(id, Node::new(c, boot));
    }

    pub fn r(&self, id: NodeId) -> &Raft {
        &self.nodes[&id].raft
    }

    pub fn rm(&mut self, id: NodeId) -> &mut Raft {
        &mut self.nodes.get_mut(&id).unwrap().raft
    }

    pub fn node(&mut self, id: NodeId) -> &mut Node {
        self.nodes.get_mut(&id).unwrap()
    }

    /// Collects the ready of every node; returns the messages they send.
    pub fn collect(&mut self) -> Vec<Message> {
        let mut out = vec![];
        for n in self.nodes.values_mut() {
            out.extend(n.handle_ready());
        }
        out
    }

    fn deliverable(&self, m: &Message) -> bool {
        !self.blocked.contains(&(m.from, m.to))
            && self.nodes.contains_key(&m.to)
            && !self.filter.as_ref().is_some_and(|f| f(m))
    }

    /// Delivers one batch of messages.
    pub fn deliver(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            if !self.deliverable(&m) {
                continue;
            }
            if self.hold {
                self.held.push_back(m);
                continue;
            }
            self.delivered.push(m.clone());
            let to = m.to;
            if let Err(e) = self.rm(to).step(m) {
                self.errors.push((to, e));
            }
        }
    }

    /// Delivers a ReadIndex request from `from` to `to` in `to`'s term, and stabilizes.
    pub fn read_index_to(&mut self, from: NodeId, to: NodeId, context: &[u8]) {
        let term = self.r(to).term();
        self.deliver(vec![Message {
            from,
            to,
            term,
            body: MessageBody::ReadIndex {
                context: context.to_vec(),
            },
        }]);
        self.stabilize();
    }

    /// Asks `id` for a read with `context` and stabilizes: whether the read was answered.
    pub fn read_answered(&mut self, id: NodeId, context: &[u8]) -> bool {
        self.rm(id).read_index(context.to_vec()).unwrap();
        self.stabilize();
        self.nodes[&id]
            .read_states
            .iter()
            .any(|r| r.context == context)
    }

    /// Runs until no node has anything to do.
    pub fn stabilize(&mut self) {
        for _ in 0..10_000 {
            let msgs = self.collect();
            if msgs.is_empty() && !self.nodes.values().any(|n| n.raft.has_ready()) {
                return;
            }
            self.deliver(msgs);
        }
        panic!("network did not stabilize");
    }

    /// Ticks every node `n` times, stabilizing after each tick.
    pub fn tick(&mut self, n: usize) {
        for _ in 0..n {
            for node in self.nodes.values_mut() {
                node.raft.tick();
            }
            self.stabilize();
        }
    }

    pub fn tick_only(&mut self, ids: &[NodeId], n: usize) {
        for _ in 0..n {
            for id in ids {
                self.rm(*id).tick();
            }
            self.stabilize();
        }
    }

    pub fn isolate(&mut self, id: NodeId) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for o in ids {
            if o != id {
                self.blocked.insert((id, o));
                self.blocked.insert((o, id));
            }
        }
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    /// Replicas 1–3, 1 leading with lease reads (lease 20 - 5 = 15 ticks), its lease just
    /// renewed by the heartbeat acks of an entry of its term.
    pub fn lease_leader() -> Net {
        let mut net = Net::with(&[1, 2, 3], |c| {
            c.read_mode = ReadMode::Lease;
            c.election_tick = 20;
        });
        net.elect(1);
        net.propose(1, b"a");
        net.tick(1);
        net
    }

    /// Campaign on `id` and let the election finish.
    pub fn elect(&mut self, id: NodeId) {
        self.rm(id).campaign();
        self.stabilize();
        assert_eq!(self.r(id).role(), Role::Leader, "node {id} should have won");
    }

    pub fn propose(&mut self, id: NodeId, data: &[u8]) -> Proposal {
        let p = self
            .rm(id)
            .propose(data.to_vec())
            .expect("proposal accepted");
        self.stabilize();
        p
    }

    /// The current leader (highest term) if any.
    pub fn leader(&self) -> Option<NodeId> {
        self.nodes
            .values()
            .filter(|n| n.raft.role() == Role::Leader)
            .max_by_key(|n| n.raft.term())
            .map(|n| n.raft.id())
    }

    /// Restart `id` from its disk (or without its log).
    pub fn restart(&mut self, id: NodeId, log_lost: bool) {
        let n = self.nodes.remove(&id).unwrap();
        let boot = Bootstrap {
            hard_state: if log_lost {
                HardState { commit: 0, ..n.hs }
            } else {
                n.hs
            },
            conf: n.conf.clone(),
            snapshot: if log_lost { None } else { n.snapshot.clone() },
            entries: if log_lost { vec![] } else { n.stored.clone() },
            log_lost,
        };
        let mut fresh = Node::new(n.cfg.clone(), boot);
        if !log_lost {
            fresh.applied = vec![];
        }
        self.nodes.insert(id, fresh);
    }

    /// Election safety: at most one leader per term.
    pub fn assert_one_leader_per_term(&self) {
        let mut seen = BTreeMap::new();
        for n in self.nodes.values() {
            if n.raft.role() == Role::Leader {
                assert!(
                    seen.insert(n.raft.term(), n.raft.id()).is_none(),
                    "two leaders in term {}",
                    n.raft.term()
                );
            }
        }
    }

    /// Every node's committed prefix agrees with every other's.
    pub fn assert_logs_agree(&self) {
        let nodes: Vec<&Node> = self.nodes.values().collect();
        for a in &nodes {
            for b in &nodes {
                let c = a.raft.commit_index().min(b.raft.commit_index());
                let lo = a.raft.first_index().max(b.raft.first_index());
                for i in lo..=c {
                    assert_eq!(
                        a.raft.term_of(i),
                        b.raft.term_of(i),
                        "logs differ at committed index {i}"
                    );
                }
            }
        }
    }

    // ------------------------------------------------------------------ fake data plane

    /// Takes the Enable command of `id`, if its last command is one.
    pub fn last_dp_cmd(&self, id: NodeId) -> Option<DataPlaneCommand> {
        self.nodes[&id].dp_cmds.last().cloned()
    }

    /// Pushes the leader's pending data-plane proposals through a perfect data plane: each
    /// becomes an entry on the leader and every follower whose data plane is on (and
    /// reachable); the commit index advances once a majority holds it.
    pub fn dp_push(&mut self, leader: NodeId) {
        let props = std::mem::take(&mut self.node(leader).dp_props);
        for data in props {
            let (term, index, voters) = {
                let r = self.r(leader);
                let DataPlaneState::On { term } = r.dataplane_state() else {
                    return;
                };
                (term, r.last_index() + 1, r.conf_state().voters.clone())
            };
            let e = Entry {
                term,
                index,
                kind: EntryKind::Normal,
                data: data.into(),
            };
            self.rm(leader).dataplane_append(e.clone()).unwrap();
            let mut holders = vec![leader];
            for v in &voters {
                if *v == leader || self.blocked.contains(&(leader, *v)) {
                    continue;
                }
                if self.r(*v).dataplane_state() == (DataPlaneState::On { term })
                    && self.r(*v).last_index() + 1 == index
                {
                    self.rm(*v).dataplane_append(e.clone()).unwrap();
                    holders.push(*v);
                    self.dp_match.insert(*v, index);
                }
            }
            if holders.len() > voters.len() / 2 {
                for h in holders {
                    self.rm(h).dataplane_commit(index);
                }
            }
        }
        self.stabilize();
    }

    /// Completes a requested disable on `id` with registers equal to its core state.
    pub fn dp_finish_disable(&mut self, id: NodeId) {
        let r = self.r(id);
        assert!(
            matches!(r.dataplane_state(), DataPlaneState::Disabling { .. }),
            "{id} is not disabling"
        );
        let is_leader = r.role() == Role::Leader;
        let regs = DataPlaneRegisters {
            self_id: id,
            leader_id: r.leader(),
            is_leader,
            term: r.term(),
            last_index: r.last_index(),
            last_term: r.term_of(r.last_index()).unwrap(),
            commit_index: r.commit_index(),
            term_start_index: 0,
            match_index: r
                .conf_state()
                .voters
                .iter()
                .map(|v| {
                    (
                        *v,
                        if *v == id {
                            r.last_index()
                        } else {
                            *self.dp_match.get(v).unwrap_or(&0)
                        },
                    )
                })
                .collect(),
            defer_ack: false,
        };
        self.rm(id).dataplane_disabled(regs);
        self.stabilize();
    }
}
