//! Waverunner's benchmarks.
//!
//! `waverunner bench replication` (crates/cli/src/bench.rs) drives a namespace cluster per data
//! plane; this crate holds what does not need a cluster:
//!
//! - [`floor`]: the round trip of a 50-byte UDP datagram between two network namespaces joined
//!   by a bridge, answered by an XDP echo (`bpf/echo.bpf.c`, `XDP_TX`) and by a user-space
//!   echo socket — the floors replication latency is compared against (DESIGN §5, §6);
//! - [`fanout`]: three ways for an XDP leader to copy a request to every follower behind its
//!   one interface (multicast, devmap broadcast, TC clone), measured side by side
//!   (`bpf/fanout.bpf.c`, `waverunner bench fanout`, docs/fanout.md);
//! - [`stats`]: quantiles of raw samples and of log-linear latency histograms;
//! - [`cpu`]: CPU time from `/proc/stat` and `/proc/<pid>/stat`;
//! - [`sweep`]: the offered rates and the rule that ends the sweep;
//! - [`report`]: the rows, the tables and the verdict against DESIGN §6;
//! - [`peers`]: `waverunner bench peers` without the namespaces and processes: redis-benchmark
//!   output, closed loops of majority-acknowledged writes (RESP, RESP + WAIT, etcd), the table
//!   and its verdicts;
//! - [`native`]: a closed loop of native writes (UDP, the protocol a data plane answers), for
//!   `waverunner bench peers`;
//! - [`frontend`]: two bare RESP servers, epoll (mio) and io_uring, for `waverunner bench
//!   frontend`;
//! - [`scale`]: `waverunner bench scale` without the cluster: the RESP loader and writer,
//!   memory from procfs and Redis, the table and its targets.

pub mod cpu;
pub mod fanout;
pub mod floor;
pub mod frontend;
pub mod native;
pub mod peers;
pub mod report;
pub mod scale;
pub mod stats;
pub mod sweep;
