//! The key-value state machine (work in progress).
