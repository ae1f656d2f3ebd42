//! The user-space data plane (`--dataplane udp`): see `docs/dataplane.md`. (Being written.)
