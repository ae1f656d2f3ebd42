/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Out-of-line wrappers around the inline fast-path code, for callers that
 * link it (the Rust crate `waverunner-fastpath`, hence the user-space data
 * plane and the simulator). The XDP program includes handler.h instead.
 * Also compiles with `clang -O2 -target bpf -c handler.c`.
 */
#include "handler.h"
#include "payload.h"

int fp_handle(struct fp_registers *r, const struct fp_hdr *in,
	      struct fp_out *out)
{
	return fp_handle_inline(r, in, out);
}

int fp_shed(const struct fp_registers *r, const struct fp_hdr *in, int from_self,
	    const struct fp_shed_load *l)
{
	return fp_shed_inline(r, in, from_self, l);
}

int fp_ahead(const struct fp_registers *r, const struct fp_hdr *in, int from_self,
	     __u32 window, struct fp_gap_clock *c)
{
	return fp_ahead_inline(r, in, from_self, window, c);
}

int fp_busy_answer(struct fp_busy_clock *c)
{
	return fp_busy_answer_inline(c);
}

int fp_leader_heard(const struct fp_registers *r, const struct fp_hdr *in,
		    int from_self)
{
	return fp_leader_heard_inline(r, in, from_self);
}

int fp_parse_ffi(const void *buf, __u32 len, struct fp_hdr *out)
{
	return fp_parse(buf, len, out);
}

int fp_write_ffi(const struct fp_hdr *h, void *buf)
{
	return fp_write(h, buf);
}

#define FP_HDR_FIELD(f) FP_OFFSETOF(struct fp_hdr, f)
#define FP_REG_FIELD(f) FP_OFFSETOF(struct fp_registers, f)
#define FP_OUT_FIELD(f) FP_OFFSETOF(struct fp_out, f)

/*
 * Sizes and field offsets as this compiler laid the structs out, so that the
 * Rust mirrors can be checked against them (see src/ffi.rs). Order:
 * fp_hdr (size + 13 fields), fp_registers (size + 18 fields),
 * fp_out (size + 7 fields).
 */
const __u32 fp_layout_table[] = {
	sizeof(struct fp_hdr),
	FP_HDR_FIELD(magic), FP_HDR_FIELD(version), FP_HDR_FIELD(type),
	FP_HDR_FIELD(flags), FP_HDR_FIELD(group_id), FP_HDR_FIELD(len),
	FP_HDR_FIELD(reserved), FP_HDR_FIELD(term), FP_HDR_FIELD(from),
	FP_HDR_FIELD(index), FP_HDR_FIELD(log_term), FP_HDR_FIELD(commit),
	FP_HDR_FIELD(seq),
	sizeof(struct fp_registers),
	FP_REG_FIELD(self_id), FP_REG_FIELD(leader_id), FP_REG_FIELD(group_id),
	FP_REG_FIELD(term), FP_REG_FIELD(last_index), FP_REG_FIELD(last_term),
	FP_REG_FIELD(commit_index), FP_REG_FIELD(term_start_index),
	FP_REG_FIELD(ids), FP_REG_FIELD(match_index), FP_REG_FIELD(n_nodes),
	FP_REG_FIELD(quorum), FP_REG_FIELD(enabled), FP_REG_FIELD(is_leader),
	FP_REG_FIELD(flags), FP_REG_FIELD(halt_reason), FP_REG_FIELD(gap_count),
	FP_REG_FIELD(retx_requests),
	sizeof(struct fp_out),
	FP_OUT_FIELD(actions), FP_OUT_FIELD(halt_reason),
	FP_OUT_FIELD(entry_index), FP_OUT_FIELD(entry_term),
	FP_OUT_FIELD(commit_index), FP_OUT_FIELD(reply_index),
	FP_OUT_FIELD(msg),
};

/*
 * The payload layout (payload.h), in this order, for the Rust mirror's test:
 * tags, envelope offsets and prefix, reply offsets and prefix, statuses.
 */
const __u32 fp_payload_table[] = {
	FP_ENV_TAG, FP_ENTRY_MEMBER_RECORD,
	FP_ENV_OFF_ORIGIN, FP_ENV_OFF_REQ, FP_ENV_OFF_CLIENT, FP_ENV_OFF_SEQ,
	FP_ENV_OFF_NOW_MS, FP_ENV_OFF_LEN, FP_ENV_PREFIX,
	FP_REPLY_OFF_STATUS, FP_REPLY_OFF_LEADER, FP_REPLY_PREFIX,
	FP_STATUS_OK, FP_STATUS_ERROR, FP_STATUS_RETRY, FP_STATUS_UNKNOWN,
};

/* Number of entries in fp_payload_table. */
const __u32 fp_payload_len = sizeof(fp_payload_table) / sizeof(fp_payload_table[0]);

/* Number of entries in fp_layout_table. */
const __u32 fp_layout_len = sizeof(fp_layout_table) / sizeof(fp_layout_table[0]);
