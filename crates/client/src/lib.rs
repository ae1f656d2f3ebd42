//! Native-protocol client (work in progress).
