//! Errors returned by the Raft core. None of them leave the core in a broken state.

use crate::types::NodeId;
use std::fmt;

/// Why [`crate::Raft::new`] refused a configuration or a bootstrap state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `id` is 0.
    InvalidId,
    /// Tick settings are inconsistent.
    InvalidTicks(&'static str),
    /// Message size or window limits are 0.
    InvalidLimits(&'static str),
    /// Bootstrap entries are not consecutive after the snapshot or carry bad terms.
    InvalidLog(&'static str),
    /// The bootstrap hard state is inconsistent with the log.
    InvalidHardState(&'static str),
    /// The bootstrap configuration is malformed.
    InvalidConf(&'static str),
}

/// Why [`crate::Raft::step`] (or a data-plane call) rejected its input. The input was not
/// applied; `Counters::messages_rejected` counts these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepError {
    /// The message is addressed to another replica.
    WrongRecipient {
        /// The recipient named in the message.
        to: NodeId,
    },
    /// The sender is 0, this replica, or not a member of the configuration.
    UnknownSender {
        /// The sender named in the message.
        from: NodeId,
    },
    /// The message has term 0.
    MissingTerm,
    /// The message is internally inconsistent (the string says how).
    Malformed(&'static str),
    /// The message contradicts this replica's state in a way no correct peer can produce
    /// (e.g. an append that conflicts with a committed entry, a second leader in a term).
    Inconsistent(&'static str),
    /// A data-plane record or call that does not fit the data-plane state.
    DataPlane(&'static str),
}

/// Why a proposal, conf change or leader transfer was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposeError {
    /// This replica is not the leader; `leader` is the known leader or 0.
    NotLeader {
        /// The known leader, 0 if none.
        leader: NodeId,
    },
    /// The data plane is being enabled or disabled (or a disable was just started because of
    /// this call): retry after the hand-off completes.
    Retry,
    /// A leader transfer is in progress: proposals are refused until it ends.
    TransferInProgress,
    /// The leader holds `max_uncommitted_entries` entries it has not committed: retry once
    /// some commit.
    Busy,
    /// Another membership change is not yet committed (one change at a time).
    ConfChangePending,
    /// The leader has not yet committed an entry of its term (dissertation fix, §4.1).
    NotCommittedInTerm,
    /// The change does not apply to the current configuration.
    InvalidConfChange,
    /// After the change, fewer voters than a quorum would be up and able to vote (recently
    /// heard from and not recovering a lost log): the group would stall. Bring replicas back
    /// first (etcd calls this check strict reconfiguration).
    WouldLoseQuorum,
    /// The transfer target is not a voter or cannot become leader.
    InvalidTransferTarget,
}

/// Why a read could not be started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// No leader is known to forward the read to.
    NoLeader,
    /// The leader has not committed an entry of its term yet; its commit index may be stale.
    NotCommittedInTerm,
    /// The data plane is enabled: the host serves reads through the data plane (the paper's
    /// read-through-the-log), not through the core.
    DataPlaneEnabled,
    /// A hand-off is in progress; retry.
    Retry,
    /// The read context must be non-empty (it identifies the read in heartbeats).
    EmptyContext,
    /// This replica cannot serve reads (recovering, or removed).
    Unavailable,
}

/// Why [`crate::Raft::compact`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompactError {
    /// The index is already covered by the current snapshot.
    AlreadyCompacted,
    /// The index is beyond the applied index.
    NotApplied,
    /// The leader is sending its current snapshot to `to`, and the transfer is progressing:
    /// compact once it is done (or stalls).
    InTransfer {
        /// The follower receiving it.
        to: NodeId,
    },
}

macro_rules! display_via_debug {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
        impl std::error::Error for $t {}
    )*};
}
display_via_debug!(
    ConfigError,
    StepError,
    ProposeError,
    ReadError,
    CompactError
);
