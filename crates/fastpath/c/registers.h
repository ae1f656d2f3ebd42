/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fast path's control and status registers (docs/interfaces.md §2; the
 * paper's CSRs, Appendix C). In XDP they live in an mmapable array map that
 * user space reads and writes; in the user-space data plane and the
 * simulator they are a plain struct owned by the caller.
 */
#ifndef WAVERUNNER_FP_REGISTERS_H
#define WAVERUNNER_FP_REGISTERS_H

#include "types.h"

#define FP_MAX_NODES 8         /* voters per group; bounds every loop */
#define FP_RETX_EVERY 8        /* follower: one RETX_REQ per this many gap packets */
#define FP_MAX_RETX_REQUESTS 16 /* follower: RETX_REQs without progress before halting */

/* Register flags (fp_registers.flags). */
#define FP_R_DEFER_ACK 1 /* ack only after the host persists (fsync) */

/* Halt reasons (fp_registers.halt_reason, fp_out.halt_reason); 0 = none. */
#define FP_HALT_NONE 0
#define FP_HALT_TERM_MISMATCH 1
#define FP_HALT_LOG_MISMATCH 2
#define FP_HALT_REJECT_RECEIVED 3
#define FP_HALT_RETX_EXHAUSTED 4
#define FP_HALT_UNKNOWN_PEER 5

struct fp_registers {
	__u64 self_id, leader_id, group_id;
	__u64 term;                  /* currentTerm */
	__u64 last_index, last_term; /* lastLogIndex, lastLogTerm */
	__u64 commit_index;
	__u64 term_start_index; /* first index of the enabled term (Raft §5.4.2) */
	__u64 ids[FP_MAX_NODES]; /* voter ids; slot i <-> ids[i]; self is one of them */
	__u64 match_index[FP_MAX_NODES];
	__u32 n_nodes, quorum; /* voters in ids[0..n_nodes); majority size */
	__u32 enabled;         /* ACC_ENABLE */
	__u32 is_leader;
	__u32 flags;         /* FP_R_* */
	__u32 halt_reason;   /* why the handler cleared `enabled` (0 = none) */
	__u32 gap_count;     /* follower: gap packets seen since the last progress */
	__u32 retx_requests; /* follower: RETX_REQs sent since the last progress */
};

_Static_assert(sizeof(struct fp_registers) == 224, "fp_registers is 224 bytes");
_Static_assert(FP_OFFSETOF(struct fp_registers, self_id) == 0, "self_id");
_Static_assert(FP_OFFSETOF(struct fp_registers, leader_id) == 8, "leader_id");
_Static_assert(FP_OFFSETOF(struct fp_registers, group_id) == 16, "group_id");
_Static_assert(FP_OFFSETOF(struct fp_registers, term) == 24, "term");
_Static_assert(FP_OFFSETOF(struct fp_registers, last_index) == 32, "last_index");
_Static_assert(FP_OFFSETOF(struct fp_registers, last_term) == 40, "last_term");
_Static_assert(FP_OFFSETOF(struct fp_registers, commit_index) == 48, "commit_index");
_Static_assert(FP_OFFSETOF(struct fp_registers, term_start_index) == 56, "term_start_index");
_Static_assert(FP_OFFSETOF(struct fp_registers, ids) == 64, "ids");
_Static_assert(FP_OFFSETOF(struct fp_registers, match_index) == 128, "match_index");
_Static_assert(FP_OFFSETOF(struct fp_registers, n_nodes) == 192, "n_nodes");
_Static_assert(FP_OFFSETOF(struct fp_registers, quorum) == 196, "quorum");
_Static_assert(FP_OFFSETOF(struct fp_registers, enabled) == 200, "enabled");
_Static_assert(FP_OFFSETOF(struct fp_registers, is_leader) == 204, "is_leader");
_Static_assert(FP_OFFSETOF(struct fp_registers, flags) == 208, "flags");
_Static_assert(FP_OFFSETOF(struct fp_registers, halt_reason) == 212, "halt_reason");
_Static_assert(FP_OFFSETOF(struct fp_registers, gap_count) == 216, "gap_count");
_Static_assert(FP_OFFSETOF(struct fp_registers, retx_requests) == 220, "retx_requests");

/* Number of voter slots to look at: n_nodes clamped to FP_MAX_NODES. */
static __always_inline __u32 fp_n_slots(const struct fp_registers *r)
{
	return r->n_nodes < FP_MAX_NODES ? r->n_nodes : FP_MAX_NODES;
}

/* Slot of voter `id` in ids[0..n_nodes), or -1. */
static __always_inline int fp_slot_of(const struct fp_registers *r, __u64 id)
{
	__u32 n = fp_n_slots(r);
	__u32 i;

	for (i = 0; i < FP_MAX_NODES; i++) {
		if (i >= n)
			break;
		if (r->ids[i] == id)
			return (int)i;
	}
	return -1;
}

#endif /* WAVERUNNER_FP_REGISTERS_H */
