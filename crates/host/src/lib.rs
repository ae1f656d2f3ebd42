//! The replica's host logic, without I/O (issue 12; TigerBeetle's model): the parts of a
//! replica that sit between its Raft core and the outside world, written once, run by the
//! node over real sockets, threads and clocks, and driven by the simulator over simulated ones.
//!
//! Nothing here owns a thread, a socket or a clock. Time is an input ([`Time`]): the caller
//! passes the time of each event, measured from an origin it keeps fixed.
//!
//! - [`dataplane`]: the host side of the hand-off between software Raft and the data plane
//!   (DESIGN §3, `docs/handoff.md`): enabling and disabling, consuming the log ring, appends the
//!   data plane passed up, held and reordered appends, retransmission, deferred acks.
//! - [`ready`]: a ready batch of the Raft core, in the order that makes it safe (persist,
//!   sync, send, apply, reads), over the replica's storage, network and state machine.
//! - [`requests`]: client requests from submission to answer: routing to the log, the
//!   leader or ReadIndex, forwarding, NACKs, retries, deadlines.
//! - [`membership`]: membership changes proposed as leader, answered when they commit.
//! - [`snapshots`]: when to snapshot and how far to compact the log (trailing window).
//! - [`status`]: a replica's protocol state as `/status` shows it.
//! - [`reads`]: reads given a read index, served once the state machine applied it.
//! - [`ticks`]: the ticks a stalled replica missed, replayed in step with the frames that
//!   arrived meanwhile.

#![deny(missing_docs)]

pub mod dataplane;
pub mod membership;
pub mod reads;
pub mod ready;
pub mod requests;
pub mod snapshots;
pub mod status;
pub mod ticks;

#[cfg(test)]
mod testing;

/// The time of an event: how long after the caller's fixed origin it happened. The node uses
/// the time since the replica started; the simulator its simulated clock.
pub type Time = std::time::Duration;
