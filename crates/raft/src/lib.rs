//! # waverunner-raft
//!
//! The control plane of Waverunner: a sans-I/O, deterministic Raft state machine in the style
//! of etcd-io/raft, plus the hand-off of common-case replication to a data plane (the NSDI'23
//! paper "Waverunner", §5 and Appendix A).
//!
//! The host drives a [`Raft`] with [`Raft::tick`], [`Raft::step`] (messages from peers),
//! [`Raft::propose`], [`Raft::propose_conf_change`], [`Raft::read_index`],
//! [`Raft::transfer_leader`] and [`Raft::compact`], and after each call collects a [`Ready`]:
//!
//! 1. apply `ready.dataplane` (Enable / Disable) to the data plane,
//! 2. persist `snapshot`, `entries` and `hard_state`,
//! 3. send `messages`, push `dataplane_proposals` through the data plane,
//! 4. apply `committed_entries`, serve `read_states`, then call [`Raft::advance`].
//!
//! Features: pre-vote, check-quorum, randomized election timeouts, pipelined and batched
//! replication with fast conflict backtracking, a no-op on election, snapshots and compaction
//! with InstallSnapshot, single-server membership change with learners (`docs/membership.md`),
//! leader transfer, ReadIndex and lease reads, recovery of a replica that lost its log
//! ([`Role::Recovering`]), and the data-plane hand-off (`docs/handoff.md`).
//!
//! Malformed input never panics: [`Raft::step`] returns a [`StepError`] and counts it in
//! [`Counters::messages_rejected`]. Internal beliefs (commit never decreases, committed
//! entries are never truncated, one leader per term) are `assert!`ed.
//!
//! ```
//! use waverunner_raft::*;
//! let boot = Bootstrap { conf: ConfState { voters: vec![1], learners: vec![] }, ..Default::default() };
//! let mut r = Raft::new(Config { id: 1, ..Config::default() }, boot).unwrap();
//! r.campaign();
//! assert_eq!(r.role(), Role::Leader);
//! let rd = r.ready(); // persist the no-op
//! assert_eq!(rd.entries.len(), 1);
//! r.advance();
//! assert_eq!(r.commit_index(), 1);
//! ```

#![warn(missing_docs)]

pub mod config;
pub mod dataplane;
pub mod entries;
pub mod errors;
pub mod log;
pub mod progress;
pub mod quorum;
pub mod raft;
pub mod read_only;
pub mod snapshot;
pub mod types;
pub mod votes;

pub use config::{Bootstrap, Config, ReadMode};
pub use dataplane::DataPlaneState;
pub use errors::{CompactError, ConfigError, ProposeError, ReadError, StepError};
pub use progress::ProgressState;
pub use raft::{Counters, Proposal, Raft, STASH_BOUND};
pub use snapshot::{memory_sink, SinkFactory, SnapshotSink};
pub use types::*;
