/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Waverunner fast-path protocol handler: the paper's Figure 4 ("Pseudocode
 * of the hardware accelerator"), refined as docs/interfaces.md §2 specifies.
 *
 * fp_handle() is a pure function of (registers, decoded header): it writes
 * only `*r` and `*out`, allocates nothing and loops at most FP_MAX_NODES times
 * (twice nested in fp_try_commit), so the very same code is included by the
 * XDP program, and, through the out-of-line wrapper in handler.c, called by
 * the user-space data plane and the simulator via Rust FFI.
 *
 * The handler never reads the payload; the caller carries it along as the
 * actions say (RING_ENTRY, BROADCAST).
 */
#ifndef WAVERUNNER_FP_HANDLER_H
#define WAVERUNNER_FP_HANDLER_H

#include "types.h"
#include "wire.h"
#include "registers.h"

/* fp_out.actions bits. */
#define FP_ACT_RING_ENTRY 1    /* put (entry_index, entry_term, in.flags, in.from, in.seq, payload) on the log ring */
#define FP_ACT_RING_COMMIT 2   /* put a commit record commit_index on the ring */
#define FP_ACT_BROADCAST 4     /* send msg (+ input payload) to every voter but self */
#define FP_ACT_REPLY 8         /* send msg (no payload) back to the input's sender */
#define FP_ACT_CLIENT_REPLY 16 /* entry reply_index just committed: reply to its client if a blind write */
#define FP_ACT_TO_HOST 32      /* pass the input to host software untouched */
#define FP_ACT_DROP 64         /* drop the input */
#define FP_ACT_HALT 128        /* handler cleared `enabled`, set halt_reason: notify the host */
#define FP_ACT_MATCHED 256     /* an ack moved a match index, committed nothing: taken, nothing to send */

struct fp_out {
	__u32 actions;
	__u32 halt_reason;
	__u64 entry_index, entry_term; /* FP_ACT_RING_ENTRY */
	__u64 commit_index;            /* FP_ACT_RING_COMMIT */
	__u64 reply_index;             /* FP_ACT_CLIENT_REPLY */
	struct fp_hdr msg;             /* FP_ACT_REPLY / FP_ACT_BROADCAST */
};

_Static_assert(sizeof(struct fp_out) == 104, "fp_out is 104 bytes");
_Static_assert(FP_OFFSETOF(struct fp_out, actions) == 0, "actions");
_Static_assert(FP_OFFSETOF(struct fp_out, halt_reason) == 4, "halt_reason");
_Static_assert(FP_OFFSETOF(struct fp_out, entry_index) == 8, "entry_index");
_Static_assert(FP_OFFSETOF(struct fp_out, entry_term) == 16, "entry_term");
_Static_assert(FP_OFFSETOF(struct fp_out, commit_index) == 24, "commit_index");
_Static_assert(FP_OFFSETOF(struct fp_out, reply_index) == 32, "reply_index");
_Static_assert(FP_OFFSETOF(struct fp_out, msg) == 40, "msg");

/* ---- small helpers ------------------------------------------------------ */

static __always_inline void fp_out_zero(struct fp_out *out)
{
	__builtin_memset(out, 0, sizeof(*out));
}

/* A deviation: clear ACC_ENABLE, record why, tell the host. */
static __always_inline void fp_halt(struct fp_registers *r, struct fp_out *out,
				    __u32 reason)
{
	r->enabled = 0;
	r->halt_reason = reason;
	out->halt_reason = reason;
	out->actions |= FP_ACT_HALT;
}

/* A header of `type` from this node: magic, version, group, term, from = self. */
static __always_inline void fp_msg_init(const struct fp_registers *r,
					struct fp_hdr *m, __u8 type)
{
	__builtin_memset(m, 0, sizeof(*m));
	m->magic = FP_MAGIC;
	m->version = FP_VERSION;
	m->type = type;
	m->group_id = (__u32)r->group_id;
	m->term = r->term;
	m->from = r->self_id;
}

/*
 * Leader commit rule (Fig. 4 l.37-41, Raft §5.3/§5.4.2): c = the largest
 * match_index value m such that at least `quorum` voters have match >= m.
 * Commit it if it advances commit_index, lies in the enabled term
 * (c >= term_start_index) and does not exceed last_index. O(n^2), n <= 8.
 * Returns 1 if it committed.
 */
static __always_inline int fp_try_commit(struct fp_registers *r,
					 struct fp_out *out)
{
	__u32 n = fp_n_slots(r);
	__u64 best = 0;
	int found = 0;
	__u32 i, j;

	if (r->quorum == 0 || r->quorum > n)
		return 0; /* misconfigured: never commit */
	for (i = 0; i < FP_MAX_NODES; i++) {
		__u64 m;
		__u32 count = 0;

		if (i >= n)
			break;
		m = r->match_index[i];
		for (j = 0; j < FP_MAX_NODES; j++) {
			if (j >= n)
				break;
			if (r->match_index[j] >= m)
				count++;
		}
		if (count >= r->quorum && (!found || m > best)) {
			best = m;
			found = 1;
		}
	}
	if (!found || best <= r->commit_index)
		return 0;
	if (best < r->term_start_index || best > r->last_index)
		return 0;
	r->commit_index = best;
	out->actions |= FP_ACT_RING_COMMIT | FP_ACT_CLIENT_REPLY;
	out->commit_index = best;
	out->reply_index = best;
	return 1;
}

/* ---- per-message handlers ------------------------------------------------ */

/* Leader receives a client request (Fig. 4 l.2-12). */
static __always_inline void fp_on_client_request(struct fp_registers *r,
						 const struct fp_hdr *in,
						 struct fp_out *out)
{
	__u64 prev_index, prev_term;
	int self;

	if (!r->is_leader || (in->flags & FP_F_READ)) {
		/* l.11-12: not ours to order. A read is not ordered either: the host serves it,
		 * reads batched behind one entry (issue 13: never an entry per read). */
		out->actions = FP_ACT_TO_HOST;
		return;
	}
	prev_index = r->last_index; /* l.4 */
	prev_term = r->last_term;   /* l.5 */
	r->last_index++;            /* l.8 */
	r->last_term = r->term;     /* l.9 */
	if (!(r->flags & FP_R_DEFER_ACK)) {
		/* memory durability: the leader's own copy counts at once */
		self = fp_slot_of(r, r->self_id);
		if (self >= 0 && self < FP_MAX_NODES)
			r->match_index[self] = r->last_index;
	}
	/* l.6-7: entry to the host's log; l.10: append to all but self */
	out->actions = FP_ACT_RING_ENTRY | FP_ACT_BROADCAST;
	out->entry_index = r->last_index;
	out->entry_term = r->term;
	fp_msg_init(r, &out->msg, FP_APPEND);
	out->msg.flags = in->flags;
	out->msg.len = in->len;
	out->msg.seq = in->seq;
	out->msg.index = prev_index;
	out->msg.log_term = prev_term;
	out->msg.commit = r->commit_index;
	fp_try_commit(r, out); /* a 1-voter group commits at once */
}

/* Follower receives an append whose prev index is beyond its log: a gap (l.19-20). */
static __always_inline void fp_on_gap(struct fp_registers *r,
				      struct fp_out *out)
{
	if (r->gap_count != 0xffffffffU)
		r->gap_count++;
	if (r->retx_requests >= FP_MAX_RETX_REQUESTS) {
		out->actions = FP_ACT_DROP;
		fp_halt(r, out, FP_HALT_RETX_EXHAUSTED);
		return;
	}
	if (r->gap_count == 1 || r->gap_count % FP_RETX_EVERY == 0) {
		r->retx_requests++;
		out->actions = FP_ACT_REPLY | FP_ACT_DROP;
		fp_msg_init(r, &out->msg, FP_RETX_REQ);
		out->msg.index = r->last_index;
		out->msg.log_term = r->last_term;
		return;
	}
	out->actions = FP_ACT_DROP; /* rate limited */
}

/* Follower receives an append (Fig. 4 l.15-30). */
static __always_inline void fp_on_append(struct fp_registers *r,
					 const struct fp_hdr *in,
					 struct fp_out *out)
{
	__u64 c;

	/* l.16-17: only a follower of the same term; anything else is software's */
	if (r->is_leader || in->term != r->term) {
		out->actions = FP_ACT_TO_HOST;
		fp_halt(r, out, FP_HALT_TERM_MISMATCH);
		return;
	}
	if (in->index > r->last_index) { /* l.19-20 */
		fp_on_gap(r, out);
		return;
	}
	if (in->index < r->last_index) { /* l.21-22: duplicate */
		out->actions = FP_ACT_DROP;
		return;
	}
	if (in->log_term != r->last_term) { /* l.18 fails at the tail */
		out->actions = FP_ACT_TO_HOST;
		fp_halt(r, out, FP_HALT_LOG_MISMATCH);
		return;
	}
	/* l.24-27: append exactly at the tail */
	r->last_index++;
	r->last_term = r->term;
	r->gap_count = 0;
	r->retx_requests = 0;
	out->actions = FP_ACT_RING_ENTRY;
	out->entry_index = r->last_index;
	out->entry_term = r->term;
	/* l.23: commit index from the leader, never past our own log (Raft) */
	c = in->commit < r->last_index ? in->commit : r->last_index;
	if (c > r->commit_index) {
		r->commit_index = c;
		out->actions |= FP_ACT_RING_COMMIT;
		out->commit_index = c;
	}
	/* l.28: appendOK, unless the host acks after persisting */
	if (!(r->flags & FP_R_DEFER_ACK)) {
		out->actions |= FP_ACT_REPLY;
		fp_msg_init(r, &out->msg, FP_ACK);
		out->msg.index = r->last_index;
	}
}

/* Leader receives an acknowledgement (Fig. 4 l.33-43). */
static __always_inline void fp_on_ack(struct fp_registers *r,
				      const struct fp_hdr *in,
				      struct fp_out *out)
{
	int slot;

	if (!r->is_leader) {
		out->actions = FP_ACT_TO_HOST;
		return;
	}
	if (in->term < r->term) { /* stale: from an earlier term */
		out->actions = FP_ACT_DROP;
		return;
	}
	if (in->term > r->term) { /* l.48-49 */
		out->actions = FP_ACT_TO_HOST;
		fp_halt(r, out, FP_HALT_TERM_MISMATCH);
		return;
	}
	slot = fp_slot_of(r, in->from);
	if (slot < 0 || slot >= FP_MAX_NODES) { /* not a voter: software's */
		out->actions = FP_ACT_TO_HOST;
		return;
	}
	if (in->index > r->last_index) { /* acks what we never sent */
		out->actions = FP_ACT_TO_HOST;
		fp_halt(r, out, FP_HALT_LOG_MISMATCH);
		return;
	}
	if (in->index <= r->match_index[slot]) { /* l.35: duplicate or reordered */
		out->actions = FP_ACT_DROP;
		return;
	}
	r->match_index[slot] = in->index; /* l.36 */
	if (!fp_try_commit(r, out))       /* l.37-47 */
		out->actions = FP_ACT_MATCHED; /* taken (not a drop): a majority still to come */
}

/*
 * Handle one decoded fast-path message. Always returns 0; what to do with
 * the input and what to send is in out->actions.
 */
static __always_inline int fp_handle_inline(struct fp_registers *r,
					    const struct fp_hdr *in,
					    struct fp_out *out)
{
	fp_out_zero(out);
	if (!r->enabled || (__u64)in->group_id != r->group_id) {
		out->actions = FP_ACT_TO_HOST;
		return 0;
	}
	switch (in->type) {
	case FP_CLIENT_REQUEST:
		fp_on_client_request(r, in, out);
		break;
	case FP_APPEND:
		fp_on_append(r, in, out);
		break;
	case FP_ACK:
		fp_on_ack(r, in, out);
		break;
	case FP_REJECT:
		out->actions = FP_ACT_TO_HOST;
		if (r->is_leader) /* l.48-49: a follower refused */
			fp_halt(r, out, FP_HALT_REJECT_RECEIVED);
		break;
	default: /* RETX_REQ (host retransmits from its log), CLIENT_REPLY, unknown */
		out->actions = FP_ACT_TO_HOST;
		break;
	}
	return 0;
}

/*
 * Overload (docs/dataplane.md "Shedding"): whether a leader refuses this input
 * before the handler runs, with a busy reply (the client may retry; a replica
 * that forwarded it routes it again). A client request that is not the host's
 * own push (`from_self`: bounded by the host's admission) nor a heartbeat is
 * shed once the entries ordered but not committed reach `max_inflight` (the
 * data plane's window, set by user space: waverunner_fastpath::SHED_INFLIGHT_XDP,
 * SHED_INFLIGHT_UDP), or the log ring holds more than 1/FP_SHED_RING_SHARE of
 * its `ring_size` unread (`ring_used`, in the caller's unit): taking it would
 * end in a full ring, dropped appends and acks, then a hand-off. Reads the
 * registers only; a racy view sheds one request more or less.
 */
#define FP_SHED_RING_SHARE 4

/* What a leader's shedding weighs (three words: the BPF calling convention passes five). */
struct fp_shed_load {
	__u64 ring_used;    /* the log ring's unread share, in the caller's unit */
	__u64 ring_size;    /* its size in that unit */
	__u64 max_inflight; /* the data plane's window of entries ordered, not committed */
};

_Static_assert(sizeof(struct fp_shed_load) == 24, "fp_shed_load is three u64 (Rust: [u64; 3])");

static __always_inline int fp_shed_inline(const struct fp_registers *r,
					  const struct fp_hdr *in, int from_self,
					  const struct fp_shed_load *l)
{
	if (in->type != FP_CLIENT_REQUEST || from_self || !r->enabled ||
	    !r->is_leader || (in->flags & FP_F_HEARTBEAT))
		return 0;
	if (r->last_index >= r->commit_index &&
	    r->last_index - r->commit_index >= l->max_inflight)
		return 1;
	return l->ring_used > l->ring_size / FP_SHED_RING_SHARE;
}

/*
 * Overload, after fp_shed_inline said shed: whether the busy reply goes out.
 * Busy replies are rationed, FP_BUSY_BURST at once and one more every
 * FP_BUSY_EVERY_NS; past the ration the request is dropped unanswered, as a
 * full socket buffer drops it, and the client's timeout answers it (replicas
 * do not forward over the fast path: every request shed is a client's). Why ration: on a veth a reply costs the sender
 * the receiver's kernel path too, so a busy reply costs a leader about what
 * serving costs; answering every request of a flood at twice the peak halved
 * the goodput (`udp`, docs/chaos.md "Overload"). A generic cell rate rule:
 * `c->tat_ns` is the caller's (when the ration is next whole), advanced by one
 * interval per reply granted. A racy view grants one reply more or less.
 */
#define FP_BUSY_EVERY_NS 500000ULL /* 2 000 busy replies a second */
#define FP_BUSY_BURST 64ULL

struct fp_busy_clock {
	__u64 now_ns; /* the caller's monotonic clock */
	__u64 tat_ns; /* the ration's theoretical arrival time */
};

static __always_inline int fp_busy_answer_inline(struct fp_busy_clock *c)
{
	__u64 tat = c->tat_ns > c->now_ns ? c->tat_ns : c->now_ns;

	if (tat - c->now_ns > (FP_BUSY_BURST - 1) * FP_BUSY_EVERY_NS)
		return 0;
	c->tat_ns = tat + FP_BUSY_EVERY_NS;
	return 1;
}

/*
 * Follower (docs/dataplane.md "A starved host"): whether `in` is an append of the
 * enabled term from the leader. It proves the leader alive when it came, whatever
 * becomes of it (taken, a duplicate, held, dropped past the window or on a full
 * ring): Raft's election timer restarts at every append of the term. The data
 * plane records when, for a host that was stopped or starved meanwhile.
 */
static __always_inline int fp_leader_heard_inline(const struct fp_registers *r,
						  const struct fp_hdr *in,
						  int from_self)
{
	return r->enabled && !r->is_leader && in->type == FP_APPEND &&
	       !from_self && in->term == r->term &&
	       (__u64)in->group_id == r->group_id;
}

/*
 * Follower (docs/dataplane.md "Reordering"): whether an append goes to the host
 * to be held instead of through the handler's gap rule. The leader's handler
 * runs on several CPUs, so its appends may leave out of order, and one may be
 * lost; an append of this term at most `window` entries ahead of the log is
 * held by the host, which asks for the missing one and pushes the held ones
 * back once the gap fills. `window` 0: never (the handler's vectors, `udp`).
 * Reads the registers only; a racy view passes one append either way.
 */
static __always_inline int fp_hold_inline(const struct fp_registers *r,
					  const struct fp_hdr *in, int from_self,
					  __u32 window)
{
	return window && in->type == FP_APPEND && !from_self && !r->is_leader &&
	       in->term == r->term && (__u64)in->group_id == r->group_id &&
	       in->index > r->last_index && in->index <= r->last_index + window;
}

/*
 * Follower, an append of its term past the hold window (docs/dataplane.md
 * "Reordering"): the handler's gap rule asks for a retransmission every
 * FP_RETX_EVERY such appends and halts after FP_MAX_RETX_REQUESTS without
 * progress. Counted in appends, that budget lasted about 3 ms at 40 000
 * appends/s, less than a busy leader's host takes to retransmit. Letting the
 * rule see at most one such append per FP_GAP_PASS_NS (the rest are dropped:
 * the host's own requests go on asking) makes it about 1.3 s, whatever the
 * rate. Whether to drop this one; `c` is the caller's clock, its last pass
 * updated when one passes. `window` 0: never throttled (the handler's vectors).
 */
#define FP_GAP_PASS_NS 10000000ULL

struct fp_gap_clock {
	__u64 now_ns;       /* the caller's monotonic clock */
	__u64 last_pass_ns; /* when an append past the window last reached the gap rule */
};

static __always_inline int fp_gap_throttled_inline(const struct fp_registers *r,
						   const struct fp_hdr *in,
						   int from_self, __u32 window,
						   struct fp_gap_clock *c)
{
	if (!window || in->type != FP_APPEND || from_self || r->is_leader ||
	    in->term != r->term || (__u64)in->group_id != r->group_id ||
	    in->index <= r->last_index + window)
		return 0;
	if (c->now_ns - c->last_pass_ns < FP_GAP_PASS_NS)
		return 1;
	c->last_pass_ns = c->now_ns;
	return 0;
}

/*
 * What a follower's data plane does with an input before the handler runs: the
 * one call of the hold rule and the gap throttle above, for XDP, `udp` and the
 * simulator alike.
 */
#define FP_AHEAD_HANDLER 0 /* the handler runs */
#define FP_AHEAD_HOLD 1    /* to the host, to be held (fp_hold_inline) */
#define FP_AHEAD_DROP 2    /* past the window, dropped (fp_gap_throttled_inline) */

static __always_inline int fp_ahead_inline(const struct fp_registers *r,
					   const struct fp_hdr *in, int from_self,
					   __u32 window, struct fp_gap_clock *c)
{
	if (fp_hold_inline(r, in, from_self, window))
		return FP_AHEAD_HOLD;
	if (fp_gap_throttled_inline(r, in, from_self, window, c))
		return FP_AHEAD_DROP;
	return FP_AHEAD_HANDLER;
}

/* Out-of-line entry points (handler.c) for user space: the Rust FFI. */
int fp_handle(struct fp_registers *r, const struct fp_hdr *in,
	      struct fp_out *out);
int fp_shed(const struct fp_registers *r, const struct fp_hdr *in, int from_self,
	    const struct fp_shed_load *l);
int fp_ahead(const struct fp_registers *r, const struct fp_hdr *in, int from_self,
	     __u32 window, struct fp_gap_clock *c);
int fp_busy_answer(struct fp_busy_clock *c);
int fp_leader_heard(const struct fp_registers *r, const struct fp_hdr *in,
		    int from_self);
int fp_parse_ffi(const void *buf, __u32 len, struct fp_hdr *out);
int fp_write_ffi(const struct fp_hdr *h, void *buf);

#endif /* WAVERUNNER_FP_HANDLER_H */
