/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The latency histogram's bucket function: a mirror of `bucket_of` in
 * src/lib.rs (4 sub-buckets per power of two; values below 8 go to bucket v;
 * the last bucket is open). BPF has no count-leading-zeros instruction, so
 * floor(log2 v) is a binary search over constant shifts.
 */
#ifndef WAVERUNNER_BPF_LATENCY_H
#define WAVERUNNER_BPF_LATENCY_H

#include <linux/types.h>

#define WR_HIST_BUCKETS 160

static __always_inline __u32 wr_log2(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

static __always_inline __u32 wr_bucket_of(__u64 ns)
{
	__u32 log, sub, b;

	if (ns < 8)
		return (__u32)ns;
	log = wr_log2(ns); /* >= 3 */
	sub = (__u32)(ns >> (log - 2)) & 3;
	b = 4 * (log - 1) + sub;
	return b < WR_HIST_BUCKETS - 1 ? b : WR_HIST_BUCKETS - 1;
}

#endif /* WAVERUNNER_BPF_LATENCY_H */
