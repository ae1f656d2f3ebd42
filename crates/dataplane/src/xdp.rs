//! The XDP data plane (`--dataplane xdp`): see `docs/dataplane.md`. (Being written.)
