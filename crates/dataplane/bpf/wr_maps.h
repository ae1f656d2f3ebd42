/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Maps and globals of the XDP data plane. Globals live in .bss, which the
 * loader (src/xdp.rs) memory-maps through the libbpf skeleton: the registers
 * (the paper's CSRs), the in-flight counters, and the configuration user space
 * writes before attaching (port, own addresses, multicast group, blind reply
 * body) or every tick (wall clock offset).
 */
#ifndef WAVERUNNER_BPF_MAPS_H
#define WAVERUNNER_BPF_MAPS_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../../fastpath/c/handler.h"
#include "wr_ring.h"
#include "wr_latency.h"

#define WR_MAX_CPUS 256        /* in-flight slots; a CPU id is masked into them */
#define WR_CLIENT_SLOTS 4096   /* = RING_CAPACITY in src/lib.rs */
#define WR_BODY_MAX 256        /* blind reply body bytes at most */

/* ---- globals (.bss, memory-mapped by user space) ------------------------- */

struct fp_registers regs;          /* the handler's registers; mutated under wr_lock */
__u64 inflight[WR_MAX_CPUS];       /* invocations in flight per CPU (atomic add/sub) */
__u64 wall_offset_ns;              /* CLOCK_REALTIME - CLOCK_MONOTONIC, refreshed every tick */
__u32 self_ip;                     /* our IPv4 address (network order) */
__u32 group_ip;                    /* the multicast group appends go to (network order) */
__u16 fp_port;                     /* the fast-path UDP port (network order); 0 = nothing is ours */
__u8 self_mac[6];                  /* our interface's MAC address */
__u32 blind_reply_len;             /* bytes of blind_reply_body; 0 = the host answers */
__u32 reorder_window;              /* follower: appends up to this far ahead go to the host; 0 = off */
__u64 gap_pass_ns;                 /* follower: when an append past the window last reached the gap rule */
__u64 busy_tat_ns;                 /* leader: the busy replies' ration (fp_busy_answer_inline) */
__u64 heard_ns;                    /* follower: when an append of its term last came (fp_leader_heard_inline) */
__u32 ring_waiting;                /* 1: the ring's reader sleeps and wants a wake record (wr_ring.h) */
__u64 shed_inflight;               /* leader: the window of fp_shed_inline (SHED_INFLIGHT_XDP, set at load) */
__u8 blind_reply_body[WR_BODY_MAX];

/*
 * The host's pushes, a batch per syscall (docs/dataplane.md "Pushing a batch"): user space
 * writes up to WR_PUSH_SLOTS whole frames here, sets push_count and push_next = 0, and runs
 * the program once with BPF_F_TEST_XDP_LIVE_FRAMES and `repeat` = the count on a pull frame
 * (metadata WR_PULL_MAGIC). Each repetition takes the next slot and becomes that frame.
 */
#define WR_PUSH_SLOTS 64
#define WR_PUSH_FRAME_MAX 1536
#define WR_PULL_MAGIC 0x4c4c5550525777ULL /* "wwRPULL", little-endian */

_Static_assert(42 + FP_HDR_LEN + FP_MAX_PAYLOAD <= WR_PUSH_FRAME_MAX,
	       "a pushed frame carries a whole fast-path packet");

struct wr_push_slot {
	__u32 len; /* frame bytes */
	__u32 reserved;
	__u8 frame[WR_PUSH_FRAME_MAX];
};

struct wr_push_slot push_q[WR_PUSH_SLOTS];
__u32 push_count; /* slots filled for the pull in progress */
__u32 push_next;  /* the next slot a repetition takes (atomic) */

/* ---- maps ---------------------------------------------------------------- */

/* The lock the handler runs under (bpf_spin_lock must live in a map value). */
struct wr_lock {
	struct bpf_spin_lock l;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wr_lock);
} wr_lock SEC(".maps");

/*
 * The leader's client table: slot = index % WR_CLIENT_SLOTS, tagged with the
 * index and term (the data plane of one term appends each index once).
 */
struct wr_client {
	__u64 index;   /* the entry this slot describes (0 = empty) */
	__u64 term;    /* its term: an index names one entry only within a term */
	__u64 from;    /* client id */
	__u64 seq;     /* client sequence number */
	__u64 t_ns;    /* receipt (bpf_ktime_get_ns) */
	__u32 ip;      /* client IPv4 (network order) */
	__u16 port;    /* client UDP port (network order) */
	__u8 mac[6];   /* client (or last-hop router) MAC */
	__u32 blind;   /* the request carried FP_F_BLIND_WRITE */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WR_CLIENT_SLOTS);
	__type(key, __u32);
	__type(value, struct wr_client);
} wr_clients SEC(".maps");

/* Counters; the order is that of `Counters` in src/lib.rs. */
struct wr_counters {
	__u64 handled;
	__u64 punted;
	__u64 dropped;
	__u64 retx_requests;
	__u64 client_replies;
	__u64 ring_full;
	__u64 halts;
	__u64 malformed;
	__u64 shed; /* client requests refused (overload, fp_shed_inline) */
	__u64 shed_unanswered; /* of those, dropped unanswered (fp_busy_answer_inline) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wr_counters);
} wr_counters SEC(".maps");

/* Replication latency at the leader, per CPU; bucket = wr_bucket_of(ns). */
struct wr_hist {
	__u64 b[WR_HIST_BUCKETS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wr_hist);
} wr_latency SEC(".maps");

/* Per-CPU scratch space: the BPF stack (512 bytes) is too small for these. */
struct wr_scratch {
	struct fp_hdr in;  /* the decoded input header */
	struct fp_out out; /* the handler's output */
	struct fp_hdr msg; /* a CLIENT_REPLY header */
	__u64 self_id;     /* registers read under the lock with the handler's run */
	__u64 term;
	__u64 group_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wr_scratch);
} wr_scratch SEC(".maps");

/* The log ring (records: wr_ring.h). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, WR_RING_BYTES);
} wr_ring SEC(".maps");

/* After this invocation's records are submitted: wakes the reader if it said it sleeps. */
static __always_inline void wr_ring_notify(void)
{
	struct wr_rec_wake w = { .kind = WR_REC_WAKE, .reserved = 0 };

	if (__atomic_exchange_n(&ring_waiting, 0, __ATOMIC_SEQ_CST))
		bpf_ringbuf_output(&wr_ring, &w, sizeof(w), BPF_RB_FORCE_WAKEUP);
}

#endif /* WAVERUNNER_BPF_MAPS_H */
