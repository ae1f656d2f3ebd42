//! Chaos testing for Waverunner: the format of an operation history recorded against a real
//! cluster ([`history`]) and its linearizability check with Porcupine ([`check`], running the
//! Go program `tools/lincheck`). See `crates/chaos/README.md`.

pub mod check;
pub mod history;
pub mod net;
pub mod workload;

pub use check::{build_checker, check, check_with, Verdict};
pub use history::{read_history, HistoryWriter, Input, Operation, Outcome, Output};
