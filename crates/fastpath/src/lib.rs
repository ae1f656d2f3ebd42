//! Waverunner's fast-path protocol handler.
//!
//! Waverunner replicates the common case of Raft — the leader receives a client request and
//! broadcasts it, followers append and acknowledge, the leader counts a majority and commits —
//! in a small data-plane program (the NSDI'23 paper's Figure 4, "Pseudocode of the hardware
//! accelerator"), and leaves everything else to the software Raft core (`waverunner-raft`).
//!
//! That handler is written **once, in C** (`c/` in this crate): pure functions over a registers
//! struct (the paper's control and status registers) and a decoded 64-byte header, with no
//! allocation and loops bounded by [`MAX_NODES`], so that the verifier accepts it. The same C is
//!
//! - included by the XDP program (`clang -target bpf`), which runs it in the NIC driver,
//! - linked into this crate by `build.rs` and called through [`handle`] by the user-space data
//!   plane (hosts without XDP) and by the deterministic simulator.
//!
//! This crate holds the C sources, the Rust mirrors of its structs ([`Header`], [`Registers`],
//! [`Output`], checked field by field against the C layout), a pure-Rust codec for the wire
//! format ([`Header::encode`], [`Header::decode`]) that is proved equal to the C one
//! ([`parse_c`], [`write_c`]), and the byte-level test vectors (`vectors/`, described in
//! `vectors/README.md`) that every implementation of the data plane must pass.
//!
//! The contract is `docs/interfaces.md` §1 (wire format) and §2 (registers and handler).

#![deny(missing_docs)]

mod ffi;
mod handler;
pub mod payload;
mod registers;
mod wire;

pub use ffi::{parse_c, write_c};
pub use handler::{
    ahead, busy_answer, busy_reply, handle, leader_heard, rationed_busy_reply, shed, Actions,
    Ahead, HaltReason, Output, BUSY_BURST, BUSY_EVERY_NS, GAP_PASS_NS, HALT_LOG_MISMATCH,
    HALT_REJECT_RECEIVED, HALT_RETX_EXHAUSTED, HALT_TERM_MISMATCH, HALT_UNKNOWN_PEER,
    REORDER_WINDOW, SHED_INFLIGHT_UDP, SHED_INFLIGHT_XDP, SHED_RING_SHARE,
};
pub use registers::{Registers, MAX_NODES, MAX_RETX_REQUESTS, RETX_EVERY, R_DEFER_ACK};
pub use wire::{
    Header, MsgType, WireError, ACK, APPEND, CLIENT_REPLY, CLIENT_REQUEST, F_BLIND_WRITE,
    F_HEARTBEAT, F_READ, GROUP, HDR_LEN, MAGIC, MAX_PAYLOAD, REJECT, RETX_REQ, VERSION,
};
