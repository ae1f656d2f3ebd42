//! The handler's output (`struct fp_out`, `c/handler.h`) and the safe entry point [`handle`].

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

use crate::registers::Registers;
use crate::wire::Header;

/// The set of actions the caller must take after [`handle`] (`fp_out.actions`, `FP_ACT_*`).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Actions(pub u32);

impl Actions {
    /// No action.
    pub const NONE: Actions = Actions(0);
    /// Put an entry (`entry_index`, `entry_term`, input flags, from, seq, payload) on the
    /// user-space log ring (`FP_ACT_RING_ENTRY`).
    pub const RING_ENTRY: Actions = Actions(1);
    /// Put a commit record `commit_index` on the ring (`FP_ACT_RING_COMMIT`).
    pub const RING_COMMIT: Actions = Actions(2);
    /// Send `msg` plus the input payload to every voter except self (`FP_ACT_BROADCAST`).
    pub const BROADCAST: Actions = Actions(4);
    /// Send `msg` (no payload) back to the input's sender (`FP_ACT_REPLY`).
    pub const REPLY: Actions = Actions(8);
    /// The entry at `reply_index` just committed: reply to its client if it was a blind write
    /// (`FP_ACT_CLIENT_REPLY`).
    pub const CLIENT_REPLY: Actions = Actions(16);
    /// Pass the input packet to the host software untouched (`FP_ACT_TO_HOST`).
    pub const TO_HOST: Actions = Actions(32);
    /// Drop the input (`FP_ACT_DROP`).
    pub const DROP: Actions = Actions(64);
    /// The handler cleared `enabled` and set `halt_reason`: notify the host (`FP_ACT_HALT`).
    pub const HALT: Actions = Actions(128);
    /// An acknowledgement moved its follower's match index and committed nothing: the input
    /// was taken, not dropped, and nothing is sent (`FP_ACT_MATCHED`).
    pub const MATCHED: Actions = Actions(256);

    /// Every named action with its name, in bit order.
    pub const NAMED: [(Actions, &'static str); 9] = [
        (Actions::RING_ENTRY, "RING_ENTRY"),
        (Actions::RING_COMMIT, "RING_COMMIT"),
        (Actions::BROADCAST, "BROADCAST"),
        (Actions::REPLY, "REPLY"),
        (Actions::CLIENT_REPLY, "CLIENT_REPLY"),
        (Actions::TO_HOST, "TO_HOST"),
        (Actions::DROP, "DROP"),
        (Actions::HALT, "HALT"),
        (Actions::MATCHED, "MATCHED"),
    ];

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// True if every bit of `other` is set.
    pub const fn contains(self, other: Actions) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any bit of `other` is set.
    pub const fn intersects(self, other: Actions) -> bool {
        self.0 & other.0 != 0
    }

    /// True if no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The action called `name` (as printed by `Debug`), if any.
    pub fn from_name(name: &str) -> Option<Actions> {
        Actions::NAMED
            .into_iter()
            .find(|(_, n)| *n == name)
            .map(|(a, _)| a)
    }

    /// The names of the set bits, in bit order (unknown bits are not named).
    pub fn names(self) -> Vec<&'static str> {
        Actions::NAMED
            .into_iter()
            .filter(|(a, _)| self.contains(*a))
            .map(|(_, n)| n)
            .collect()
    }
}

impl BitOr for Actions {
    type Output = Actions;
    fn bitor(self, rhs: Actions) -> Actions {
        Actions(self.0 | rhs.0)
    }
}

impl BitOrAssign for Actions {
    fn bitor_assign(&mut self, rhs: Actions) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Actions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("NONE");
        }
        let mut first = true;
        let mut known = 0;
        for (a, n) in Actions::NAMED {
            if self.contains(a) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(n)?;
                first = false;
                known |= a.0;
            }
        }
        let unknown = self.0 & !known;
        if unknown != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{unknown:#x}")?;
        }
        Ok(())
    }
}

/// Halt reason code: a message of another term (`FP_HALT_TERM_MISMATCH`).
pub const HALT_TERM_MISMATCH: u32 = HaltReason::TermMismatch as u32;
/// Halt reason code: logs disagree (`FP_HALT_LOG_MISMATCH`).
pub const HALT_LOG_MISMATCH: u32 = HaltReason::LogMismatch as u32;
/// Halt reason code: the leader received a REJECT (`FP_HALT_REJECT_RECEIVED`).
pub const HALT_REJECT_RECEIVED: u32 = HaltReason::RejectReceived as u32;
/// Halt reason code: retransmission requests exhausted (`FP_HALT_RETX_EXHAUSTED`).
pub const HALT_RETX_EXHAUSTED: u32 = HaltReason::RetxExhausted as u32;
/// Halt reason code: unknown peer, reserved for the host (`FP_HALT_UNKNOWN_PEER`).
pub const HALT_UNKNOWN_PEER: u32 = HaltReason::UnknownPeer as u32;

/// Why the handler halted (cleared `enabled`): `FP_HALT_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum HaltReason {
    /// A message of another term, or an APPEND at the leader (`FP_HALT_TERM_MISMATCH = 1`).
    TermMismatch = 1,
    /// Logs disagree: an APPEND whose prev term differs at the tail, or an ACK beyond the
    /// leader's log (`FP_HALT_LOG_MISMATCH = 2`).
    LogMismatch = 2,
    /// The leader received a REJECT (`FP_HALT_REJECT_RECEIVED = 3`).
    RejectReceived = 3,
    /// A follower's retransmission requests did not fill a gap (`FP_HALT_RETX_EXHAUSTED = 4`).
    RetxExhausted = 4,
    /// A peer not in the voter set; reserved for the host (the handler passes such packets to
    /// the host without halting) (`FP_HALT_UNKNOWN_PEER = 5`).
    UnknownPeer = 5,
}

impl HaltReason {
    /// Every reason, in code order.
    pub const ALL: [HaltReason; 5] = [
        HaltReason::TermMismatch,
        HaltReason::LogMismatch,
        HaltReason::RejectReceived,
        HaltReason::RetxExhausted,
        HaltReason::UnknownPeer,
    ];

    /// The reason with C code `v` (`None` for 0 and unknown codes).
    pub fn from_u32(v: u32) -> Option<HaltReason> {
        HaltReason::ALL.into_iter().find(|r| *r as u32 == v)
    }

    /// The C name without the `FP_HALT_` prefix, e.g. `"TERM_MISMATCH"`.
    pub fn name(self) -> &'static str {
        match self {
            HaltReason::TermMismatch => "TERM_MISMATCH",
            HaltReason::LogMismatch => "LOG_MISMATCH",
            HaltReason::RejectReceived => "REJECT_RECEIVED",
            HaltReason::RetxExhausted => "RETX_EXHAUSTED",
            HaltReason::UnknownPeer => "UNKNOWN_PEER",
        }
    }

    /// The reason called `name` (as returned by [`HaltReason::name`]).
    pub fn from_name(name: &str) -> Option<HaltReason> {
        HaltReason::ALL.into_iter().find(|r| r.name() == name)
    }
}

impl fmt::Display for HaltReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HaltReason::TermMismatch => "term mismatch",
            HaltReason::LogMismatch => "log mismatch",
            HaltReason::RejectReceived => "reject received",
            HaltReason::RetxExhausted => "retransmission requests exhausted",
            HaltReason::UnknownPeer => "unknown peer",
        })
    }
}

/// `#[repr(C)]` mirror of the C `struct fp_out`: what one handler invocation decided.
///
/// Fields other than `actions` are meaningful only with their action and zero otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Output {
    /// What the caller must do.
    pub actions: Actions,
    /// With [`Actions::HALT`]: the [`HaltReason`] code; 0 otherwise.
    pub halt_reason: u32,
    /// With [`Actions::RING_ENTRY`]: the new entry's index.
    pub entry_index: u64,
    /// With [`Actions::RING_ENTRY`]: the new entry's term.
    pub entry_term: u64,
    /// With [`Actions::RING_COMMIT`]: the new commit index.
    pub commit_index: u64,
    /// With [`Actions::CLIENT_REPLY`]: the index whose client may be answered.
    pub reply_index: u64,
    /// With [`Actions::REPLY`] or [`Actions::BROADCAST`]: the header to send.
    pub msg: Header,
}

const _: () = assert!(std::mem::size_of::<Output>() == 104);

impl Output {
    /// The halt reason, if the handler halted.
    pub fn halt(&self) -> Option<HaltReason> {
        HaltReason::from_u32(self.halt_reason)
    }
}

/// Runs the C fast-path handler (`fp_handle`, the paper's Figure 4) on one decoded header.
///
/// Updates `regs` in place and returns what the caller must do. Pure: no allocation, no I/O,
/// bounded work; the header's payload is never read (carry it along as the actions say).
pub fn handle(regs: &mut Registers, hdr: &Header) -> Output {
    let mut out = Output::default();
    // SAFETY: the three pointers come from live, properly aligned Rust values whose layout is
    // `#[repr(C)]` and checked against the C structs (sizes at compile time, every field
    // offset in `ffi::tests`); `fp_handle` writes only `*r` and `*out`, reads only `*in`, keeps
    // no pointer and always returns.
    let rc = unsafe { crate::ffi::fp_handle(regs, hdr, &mut out) };
    debug_assert_eq!(rc, 0);
    out
}

/// Entries ordered but not committed at which an `xdp` leader sheds clients' requests (the
/// XDP program's `shed_inflight`, set at load) and refuses its host's proposals
/// (`dataplane_max_inflight`). Throughput needs a few dozen (60 000 appends a second, a round
/// under 1 ms); 1 024 let bursts overflow the followers' veth queues at twice the peak
/// (docs/dataplane.md "The window's size").
pub const SHED_INFLIGHT_XDP: u64 = 128;
/// The same for the `udp` data plane, whose round through a user-space thread under load is
/// longer: 128 bound its peak (35 k against 39–43 k requests a second).
pub const SHED_INFLIGHT_UDP: u64 = 1024;
/// A leader sheds clients' requests once its ring is more than 1/this full
/// (`FP_SHED_RING_SHARE`).
pub const SHED_RING_SHARE: u64 = 4;

/// Whether a leader refuses `hdr` with a busy reply before the handler runs (overload): the C
/// `fp_shed`, the rule the XDP program applies. `from_self`: the host pushed it;
/// `ring_used`/`ring_size`: the log ring's unread share, in any one unit; `max_inflight`: the
/// data plane's window ([`SHED_INFLIGHT_XDP`], [`SHED_INFLIGHT_UDP`]).
pub fn shed(
    regs: &Registers,
    hdr: &Header,
    from_self: bool,
    ring_used: u64,
    ring_size: u64,
    max_inflight: u64,
) -> bool {
    // `struct fp_shed_load`: three u64 in this order.
    let load = [ring_used, ring_size, max_inflight];
    // SAFETY: the pointers come from live `#[repr(C)]` mirrors checked against the C structs
    // and an array laid out as `struct fp_shed_load`; `fp_shed` only reads them and keeps no
    // pointer.
    unsafe { crate::ffi::fp_shed(regs, hdr, i32::from(from_self), &load) != 0 }
}

/// How far ahead of its log a follower's data plane passes an append to the host to be held
/// (about 300 ms of appends at 50 000 a second: a leader's host starved that long still
/// retransmits a lost one in time, `docs/dataplane.md` "Reordering").
pub const REORDER_WINDOW: u32 = 16_384;

/// The handler's gap rule sees at most one append past the hold window per this many
/// nanoseconds (`FP_GAP_PASS_NS`).
pub const GAP_PASS_NS: u64 = 10_000_000;

/// What a follower's data plane does with an input before the handler runs (`FP_AHEAD_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ahead {
    /// The handler runs.
    Handler,
    /// An append of its term at most `window` ahead of the log: to the host, to be held.
    Hold,
    /// An append past the window, while the gap rule saw another less than [`GAP_PASS_NS`]
    /// ago: dropped.
    Drop,
}

/// The C `fp_ahead`, the rule the XDP program applies: whether a follower's data plane holds
/// `hdr` in the host, drops it, or runs the handler. `from_self`: the host pushed it;
/// `window`: appends ahead of the log held at most (0: never, and nothing is dropped);
/// `last_pass_ns` is the caller's, updated when an append past the window passes; `now_ns`
/// any monotonic clock.
pub fn ahead(
    regs: &Registers,
    hdr: &Header,
    from_self: bool,
    window: u32,
    now_ns: u64,
    last_pass_ns: &mut u64,
) -> Ahead {
    // `struct fp_gap_clock`: two u64, the clock and the last pass.
    let mut clock = [now_ns, *last_pass_ns];
    // SAFETY: the pointers come from live `#[repr(C)]` mirrors checked against the C structs
    // and a live pair of u64 laid out as the C struct; `fp_ahead` keeps none of them.
    let a = unsafe { crate::ffi::fp_ahead(regs, hdr, i32::from(from_self), window, &mut clock) };
    *last_pass_ns = clock[1];
    match a {
        0 => Ahead::Handler,
        1 => Ahead::Hold,
        2 => Ahead::Drop,
        other => unreachable!("fp_ahead returned {other}"),
    }
}

/// A client's busy replies are rationed: [`BUSY_BURST`] at once, one more every this many
/// nanoseconds (`FP_BUSY_EVERY_NS`).
pub const BUSY_EVERY_NS: u64 = 500_000;
/// Busy replies to clients sent at once at most (`FP_BUSY_BURST`).
pub const BUSY_BURST: u64 = 64;

/// After [`shed`]: whether the busy reply goes out (the ration lasts) or the request is dropped
/// unanswered. The C `fp_busy_answer`, the rule the XDP program applies. `tat_ns` is the
/// caller's ration state, updated when a reply is granted; `now_ns` any monotonic clock.
pub fn busy_answer(now_ns: u64, tat_ns: &mut u64) -> bool {
    // `struct fp_busy_clock`: two u64, the clock and the ration's state.
    let mut clock = [now_ns, *tat_ns];
    // SAFETY: a live pair of u64 laid out as the C struct; `fp_busy_answer` keeps no pointer.
    let a = unsafe { crate::ffi::fp_busy_answer(&mut clock) };
    *tat_ns = clock[1];
    a != 0
}

/// Follower: whether `hdr` is an append of the enabled term from the leader, which proves the
/// leader alive when it came whatever becomes of it (taken, a duplicate, held, dropped); the
/// data plane records when, before the hold and gap rules (the C `fp_leader_heard`, the rule
/// the XDP program applies).
pub fn leader_heard(regs: &Registers, hdr: &Header, from_self: bool) -> bool {
    // SAFETY: live `#[repr(C)]` mirrors checked against the C structs; only read.
    unsafe { crate::ffi::fp_leader_heard(regs, hdr, i32::from(from_self)) != 0 }
}

/// After [`shed`]: the busy reply to `hdr` ([`busy_reply`]) if the ration lets it out
/// ([`busy_answer`]), else `None` (the request is dropped unanswered). What the XDP program
/// does with a request it sheds.
pub fn rationed_busy_reply(
    regs: &Registers,
    hdr: &Header,
    payload: &[u8],
    now_ns: u64,
    tat_ns: &mut u64,
) -> Option<(Header, Vec<u8>)> {
    busy_answer(now_ns, tat_ns).then(|| busy_reply(regs, hdr, payload))
}

/// The busy reply a leader sends for client request `hdr` (with `payload`) it sheds: a
/// `CLIENT_REPLY` with status RETRY and body `busy`, its `seq`, and as `index` the request id
/// of its envelope (0 if it is not one), so that a replica that forwarded it can tell which.
/// The XDP program writes the same bytes (`wr_busy`).
pub fn busy_reply(regs: &Registers, hdr: &Header, payload: &[u8]) -> (Header, Vec<u8>) {
    use crate::payload::{reply_payload, EnvelopeRef, STATUS_RETRY};
    let req = EnvelopeRef::parse(payload, usize::MAX).map_or(0, |e| e.req);
    let body = reply_payload(STATUS_RETRY, regs.self_id, b"busy");
    let reply = Header {
        kind: crate::wire::CLIENT_REPLY,
        group_id: hdr.group_id,
        len: body.len() as u16,
        term: regs.term,
        from: regs.self_id,
        index: req,
        commit: regs.commit_index,
        seq: hdr.seq,
        ..Header::new(0)
    };
    (reply, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A follower's registers in term 3 of group 1, its log ending at 100.
    fn follower_at_100() -> Registers {
        Registers {
            enabled: 1,
            term: 3,
            group_id: 1,
            last_index: 100,
            ..Registers::default()
        }
    }

    #[test]
    fn a_follower_holds_appends_of_its_term_within_the_window_ahead_of_its_log() {
        use crate::wire::{Header, APPEND, CLIENT_REQUEST};
        let hold = |r: &Registers, h: &Header, from_self, window| {
            ahead(r, h, from_self, window, 5 * GAP_PASS_NS, &mut 0) == Ahead::Hold
        };
        let regs = follower_at_100();
        let app = |index| Header {
            kind: APPEND,
            term: 3,
            index,
            ..Header::new(1)
        };
        assert!(
            !hold(&regs, &app(100), false, 8),
            "at the tail: the handler's"
        );
        assert!(hold(&regs, &app(101), false, 8), "one ahead");
        assert!(hold(&regs, &app(108), false, 8), "the window's end");
        assert!(!hold(&regs, &app(109), false, 8), "past it: the gap rule");
        assert!(!hold(&regs, &app(99), false, 8), "behind: a duplicate");
        // Never: window 0, the host's own pushes, a leader, another term or group, requests.
        assert!(!hold(&regs, &app(101), false, 0));
        assert!(!hold(&regs, &app(101), true, 8));
        let leader = Registers {
            is_leader: 1,
            ..regs
        };
        assert!(!hold(&leader, &app(101), false, 8));
        assert!(!hold(
            &regs,
            &Header {
                term: 4,
                ..app(101)
            },
            false,
            8
        ));
        assert!(!hold(
            &regs,
            &Header {
                group_id: 2,
                ..app(101)
            },
            false,
            8
        ));
        let req = Header {
            kind: CLIENT_REQUEST,
            ..app(101)
        };
        assert!(!hold(&regs, &req, false, 8));
    }

    #[test]
    fn past_the_window_one_append_a_while_reaches_the_gap_rule() {
        use crate::wire::{Header, APPEND};
        let gap_throttled = |r: &Registers, h: &Header, from_self, window, now, last: &mut u64| {
            ahead(r, h, from_self, window, now, last) == Ahead::Drop
        };
        let regs = follower_at_100();
        let far = Header {
            kind: APPEND,
            term: 3,
            index: 109,
            ..Header::new(1)
        };
        let mut last = 0;
        let t = 5 * GAP_PASS_NS;
        assert!(
            !gap_throttled(&regs, &far, false, 8, t, &mut last),
            "the first passes"
        );
        assert_eq!(last, t);
        assert!(gap_throttled(
            &regs,
            &far,
            false,
            8,
            t + GAP_PASS_NS - 1,
            &mut last
        ));
        assert!(!gap_throttled(
            &regs,
            &far,
            false,
            8,
            t + GAP_PASS_NS,
            &mut last
        ));
        assert_eq!(last, t + GAP_PASS_NS);
        // Never: within the window, window 0, pushed, a leader, another term.
        let near = Header { index: 108, ..far };
        assert!(!gap_throttled(&regs, &near, false, 8, t, &mut last));
        assert!(!gap_throttled(&regs, &far, false, 0, t, &mut last));
        assert!(!gap_throttled(&regs, &far, true, 8, t, &mut last));
        let leader = Registers {
            is_leader: 1,
            ..regs
        };
        assert!(!gap_throttled(&leader, &far, false, 8, t, &mut last));
        assert!(!gap_throttled(
            &regs,
            &Header { term: 4, ..far },
            false,
            8,
            t,
            &mut last
        ));
        assert_eq!(last, t + GAP_PASS_NS, "none of those counts as a pass");
    }

    #[test]
    fn a_leader_sheds_clients_requests_past_its_window_or_a_quarter_ring() {
        use crate::wire::{Header, APPEND, CLIENT_REQUEST, F_HEARTBEAT};
        const W: u64 = 37; // any window: the caller's
        let regs = Registers {
            enabled: 1,
            is_leader: 1,
            last_index: 100 + W - 1,
            commit_index: 100,
            ..Registers::default()
        };
        let req = Header {
            kind: CLIENT_REQUEST,
            ..Header::new(1)
        };
        assert!(
            !shed(&regs, &req, false, 0, 4096, W),
            "one short of the window"
        );
        let full = Registers {
            last_index: 100 + W,
            ..regs
        };
        assert!(shed(&full, &req, false, 0, 4096, W), "the window reached");
        assert!(
            !shed(&regs, &req, false, 1024, 4096, W),
            "a quarter of the ring"
        );
        assert!(shed(&regs, &req, false, 1025, 4096, W), "past a quarter");
        assert_eq!(4096 / SHED_RING_SHARE, 1024);
        // Never: the host's own pushes, heartbeats, other types, followers, disabled.
        assert!(!shed(&full, &req, true, 4096, 4096, W));
        let hb = Header {
            flags: F_HEARTBEAT,
            ..req
        };
        assert!(!shed(&full, &hb, false, 4096, 4096, W));
        let app = Header {
            kind: APPEND,
            ..req
        };
        assert!(!shed(&full, &app, false, 4096, 4096, W));
        let follower = Registers {
            is_leader: 0,
            ..full
        };
        assert!(!shed(&follower, &req, false, 4096, 4096, W));
        let off = Registers { enabled: 0, ..full };
        assert!(!shed(&off, &req, false, 4096, 4096, W));
    }

    #[test]
    fn a_follower_hears_its_leader_in_every_append_of_the_enabled_term() {
        use crate::wire::{ACK, APPEND};
        let regs = Registers {
            enabled: 1,
            is_leader: 0,
            term: 3,
            group_id: 1,
            last_index: 10,
            ..Registers::default()
        };
        let app = Header {
            kind: APPEND,
            term: 3,
            index: 11,
            ..Header::new(1)
        };
        assert!(leader_heard(&regs, &app, false), "the next entry");
        for index in [5, 12, 10_000] {
            let a = Header { index, ..app };
            assert!(
                leader_heard(&regs, &a, false),
                "index {index}: not taken, heard"
            );
        }
        assert!(!leader_heard(&regs, &app, true), "the host's push");
        let stale = Header { term: 2, ..app };
        assert!(!leader_heard(&regs, &stale, false), "another term");
        let other = Header { group_id: 2, ..app };
        assert!(!leader_heard(&regs, &other, false), "another group");
        let ack = Header { kind: ACK, ..app };
        assert!(!leader_heard(&regs, &ack, false), "not an append");
        let leader = Registers {
            is_leader: 1,
            ..regs
        };
        assert!(
            !leader_heard(&leader, &app, false),
            "a leader hears no leader"
        );
        let off = Registers { enabled: 0, ..regs };
        assert!(
            !leader_heard(&off, &app, false),
            "the host steps what it gets"
        );
    }

    #[test]
    fn busy_replies_are_rationed() {
        let t = 7 * BUSY_EVERY_NS;
        let mut tat = 0;
        for i in 0..BUSY_BURST {
            assert!(busy_answer(t, &mut tat), "reply {i} of the burst");
        }
        assert!(!busy_answer(t, &mut tat), "the burst is spent");
        assert!(
            !busy_answer(t + BUSY_EVERY_NS - 1, &mut tat),
            "one interval has not passed"
        );
        assert!(busy_answer(t + BUSY_EVERY_NS, &mut tat), "one more");
        assert!(!busy_answer(t + BUSY_EVERY_NS, &mut tat));
        // Idle for long: the whole burst again, not more.
        let later = t + 1_000 * BUSY_EVERY_NS;
        let granted = (0..10 * BUSY_BURST)
            .filter(|_| busy_answer(later, &mut tat))
            .count() as u64;
        assert_eq!(granted, BUSY_BURST);
        // A steady flood gets one reply per interval.
        let mut granted = 0;
        for k in 1..=1_000 {
            let now = later + k * BUSY_EVERY_NS / 10;
            granted += u64::from(busy_answer(now, &mut tat));
        }
        assert_eq!(granted, 100, "one per interval over 100 intervals");
    }

    #[test]
    fn actions_debug_prints_names() {
        let a = Actions::RING_ENTRY | Actions::BROADCAST;
        assert_eq!(format!("{a:?}"), "RING_ENTRY | BROADCAST");
        assert_eq!(format!("{:?}", Actions::NONE), "NONE");
        assert_eq!(format!("{:?}", Actions(0x200 | 64)), "DROP | 0x200");
        assert_eq!(Actions::from_name("HALT"), Some(Actions::HALT));
        assert_eq!(a.names(), vec!["RING_ENTRY", "BROADCAST"]);
    }

    #[test]
    fn halt_reason_names() {
        for r in HaltReason::ALL {
            assert_eq!(HaltReason::from_name(r.name()), Some(r));
            assert_eq!(HaltReason::from_u32(r as u32), Some(r));
        }
        assert_eq!(HaltReason::from_u32(0), None);
    }

    #[test]
    fn disabled_goes_to_host() {
        let mut r = Registers::default();
        let out = handle(&mut r, &Header::of(crate::MsgType::ClientRequest));
        assert_eq!(out.actions, Actions::TO_HOST);
        assert_eq!(r, Registers::default());
    }
}
