// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0)
//
// Waverunner's XDP data plane (docs/dataplane.md): the fast-path handler of
// crates/fastpath/c/handler.h (the paper's Figure 4) on every fast-path frame
// that reaches the replica's interface.
//
//   filter      Ethernet / IPv4 (ihl 5) / UDP to `fp_port` (wr_parse.h); anything
//               else passes untouched. A frame to our port that is not a valid
//               fast-path packet passes too and counts `malformed`.
//   in flight   inflight[cpu] is incremented (atomically) before `enabled` is read and
//               decremented after the ring records are submitted: user space clears
//               `enabled` and waits for the sum to reach 0 (disable).
//   shedding    a leader refuses a client's request with a busy CLIENT_REPLY
//               (XDP_TX) before anything else when fp_shed_inline says so: its
//               uncommitted window or its ring is past the overload threshold.
//   ring        one entry record and one commit record are reserved before the
//               handler runs; no space = drop (ring_full) before it runs. Submitted
//               without the kernel's wake-up; a reader that sleeps is woken by a
//               wake record (wr_ring.h).
//   handler     under the spin lock of `wr_lock`, on the memory-mapped `regs`.
//   actions     TO_HOST   -> XDP_PASS
//               BROADCAST -> the request is rewritten into the APPEND, sent to the
//                            multicast group (XDP_TX); stamped and put on the ring
//               REPLY     -> ACK / RETX_REQ back to the sender (XDP_TX)
//               CLIENT_REPLY -> the quorum-completing ACK becomes the client's
//                            CLIENT_REPLY if its entry was a blind write (XDP_TX)
//               otherwise -> XDP_DROP

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "wr_parse.h"
#include "wr_csum.h"
#include "wr_ring.h"
#include "wr_latency.h"
#include "wr_maps.h"
#include "../../fastpath/c/handler.h"
#include "../../fastpath/c/payload.h"

#define WR_REPLY_PREFIX 9 /* CLIENT_REPLY payload: status u8 | leader id u64 LE */

/* Where a rewritten frame goes. Copied to the stack: packet pointers die in adjust_tail. */
struct wr_dst {
	__u8 mac[6];
	__u16 port; /* network order */
	__u32 ip;   /* network order */
};

/*
 * Turns the frame into an Ethernet/IPv4/UDP datagram from our MAC/IP/port to
 * `dst` whose UDP payload is `msg` followed by `extra` bytes already in place
 * at WR_PAYLOAD_OFF (the input payload for an APPEND; reserved space the caller
 * fills for a CLIENT_REPLY). Grows or shrinks the frame as needed. 0 or -1.
 */
static __always_inline int wr_emit(struct xdp_md *ctx, const struct fp_hdr *msg,
				   __u32 extra, const struct wr_dst *dst)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int cur = (int)(data_end - data);
	int want;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;

	if (extra > FP_MAX_PAYLOAD)
		return -1;
	want = WR_PAYLOAD_OFF + (int)extra;
	if (want != cur && bpf_xdp_adjust_tail(ctx, want - cur))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + WR_PAYLOAD_OFF > data_end)
		return -1;
	eth = data;
	ip = data + WR_IP_OFF;
	udp = data + WR_UDP_OFF;

	__builtin_memcpy(eth->h_dest, dst->mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, self_mac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);

	ip->version = 4;
	ip->ihl = 5;
	ip->tos = 0;
	ip->tot_len = bpf_htons((__u16)(sizeof(*ip) + sizeof(*udp) + FP_HDR_LEN + extra));
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = 64;
	ip->protocol = IPPROTO_UDP;
	ip->saddr = self_ip;
	ip->daddr = dst->ip;
	wr_ipv4_csum(ip);

	udp->source = fp_port;
	udp->dest = dst->port;
	udp->len = bpf_htons((__u16)(sizeof(*udp) + FP_HDR_LEN + extra));
	udp->check = 0; /* optional over IPv4 */

	fp_write(msg, data + WR_FP_OFF);
	return 0;
}

/*
 * A frame for the host. A fast-path datagram to another destination (an APPEND
 * to the multicast group) is re-addressed to us so that the socket bound to
 * our fast-path address receives it; its UDP checksum is 0 (we sent it) or the
 * frame is left alone.
 */
static __always_inline int wr_to_host(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + WR_IP_OFF;
	struct udphdr *udp = data + WR_UDP_OFF;

	if (data + WR_FP_OFF > data_end)
		return XDP_PASS;
	if (self_ip == 0 || ip->daddr == self_ip || udp->check != 0)
		return XDP_PASS;
	ip->daddr = self_ip;
	wr_ipv4_csum(ip);
	__builtin_memcpy(eth->h_dest, self_mac, ETH_ALEN);
	return XDP_PASS;
}

/* Writes now_ms into an entry envelope's payload (FP_ENV_OFF_NOW_MS), if it is one. */
static __always_inline void wr_stamp(struct xdp_md *ctx, __u16 len, __u64 now_ns)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data + WR_PAYLOAD_OFF;

	if (len < FP_ENV_OFF_NOW_MS + 8)
		return;
	if ((void *)(p + FP_ENV_OFF_NOW_MS + 8) > data_end)
		return;
	if (p[0] != FP_ENV_TAG)
		return;
	fp_st64(p + FP_ENV_OFF_NOW_MS, (now_ns + wall_offset_ns) / 1000000);
}

/* The handler's lock, counters: one lookup each. */
static __always_inline void *wr_first(void *map)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(map, &k);
}

/*
 * The leader's reply for a committed entry c: if the client table remembers
 * c as a blind write from a client, the ACK becomes its CLIENT_REPLY. Records
 * the replication latency of c either way. 1 if the frame was rewritten.
 */
static __always_inline int wr_client_reply(struct xdp_md *ctx, __u64 c, __u64 commit,
					   __u64 self_id, __u64 term, __u32 group,
					   __u64 now, struct fp_hdr *mp)
{
	__u32 slot = (__u32)(c % WR_CLIENT_SLOTS);
	struct wr_client *cl = bpf_map_lookup_elem(&wr_clients, &slot);
	struct wr_hist *hist;
	struct wr_dst dst;
	__u64 blen = blind_reply_len;
	__u64 seq;
	void *data, *data_end;
	__u8 *p;

	if (!cl || cl->index != c || cl->term != term || c == 0)
		return 0;
	hist = wr_first(&wr_latency);
	if (hist && now > cl->t_ns) {
		__u32 b = wr_bucket_of(now - cl->t_ns);

		if (b < WR_HIST_BUCKETS)
			hist->b[b]++;
	}
	if (!cl->blind || blen == 0 || blen > WR_BODY_MAX)
		return 0;
	__builtin_memcpy(dst.mac, cl->mac, ETH_ALEN);
	dst.ip = cl->ip;
	dst.port = cl->port;
	seq = cl->seq;
	cl->index = 0; /* one reply per entry, even if a later ack committed c again */

	__builtin_memset(mp, 0, sizeof(*mp));
	mp->magic = FP_MAGIC;
	mp->version = FP_VERSION;
	mp->type = FP_CLIENT_REPLY;
	mp->group_id = group;
	mp->len = (__u16)(WR_REPLY_PREFIX + blen);
	mp->term = term;
	mp->from = self_id;
	mp->index = c;
	mp->commit = commit;
	mp->seq = seq;
	if (wr_emit(ctx, mp, WR_REPLY_PREFIX + blen, &dst))
		return 0;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	p = data + WR_PAYLOAD_OFF;
	if ((void *)(p + WR_REPLY_PREFIX) > data_end)
		return 0;
	p[0] = 0; /* status OK */
	fp_st64(p + 1, self_id);
	if (blen == 0)
		return 0;
	WR_BARRIER_VAR(blen);
	if (blen > WR_BODY_MAX)
		return 0;
	if (bpf_xdp_store_bytes(ctx, WR_PAYLOAD_OFF + WR_REPLY_PREFIX, blind_reply_body, blen))
		return 0;
	return 1;
}

#define WR_BUSY_BODY_LEN 4 /* "busy" */

/*
 * Overload: the client request in the frame becomes a CLIENT_REPLY with status
 * RETRY and body "busy" back to its sender (`dst`). `index` carries the
 * request's envelope id (FP_ENV_OFF_REQ; 0 if it is not an envelope): a
 * replica that forwarded the request routes it again. 0 or -1.
 */
static __always_inline int wr_busy(struct xdp_md *ctx, const struct fp_hdr *in,
				   const struct wr_dst *dst, __u64 self_id, __u64 term,
				   __u64 commit, struct fp_hdr *mp)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data + WR_PAYLOAD_OFF;
	__u64 req = 0;

	if (in->len >= FP_ENV_PREFIX && (void *)(p + FP_ENV_OFF_REQ + 8) <= data_end &&
	    p[0] == FP_ENV_TAG)
		req = fp_ld64(p + FP_ENV_OFF_REQ);
	__builtin_memset(mp, 0, sizeof(*mp));
	mp->magic = FP_MAGIC;
	mp->version = FP_VERSION;
	mp->type = FP_CLIENT_REPLY;
	mp->group_id = in->group_id;
	mp->len = WR_REPLY_PREFIX + WR_BUSY_BODY_LEN;
	mp->term = term;
	mp->from = self_id;
	mp->index = req;
	mp->commit = commit;
	mp->seq = in->seq;
	if (wr_emit(ctx, mp, WR_REPLY_PREFIX + WR_BUSY_BODY_LEN, dst))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	p = data + WR_PAYLOAD_OFF;
	if ((void *)(p + WR_REPLY_PREFIX + WR_BUSY_BODY_LEN) > data_end)
		return -1;
	p[0] = FP_STATUS_RETRY;
	fp_st64(p + 1, self_id);
	p[WR_REPLY_PREFIX + 0] = 'b';
	p[WR_REPLY_PREFIX + 1] = 'u';
	p[WR_REPLY_PREFIX + 2] = 's';
	p[WR_REPLY_PREFIX + 3] = 'y';
	return 0;
}

/*
 * Remembers the client of entry (index, term) (leader, a request from a
 * client); for a request the host pushed (`client` 0) only forgets the slot.
 */
static __always_inline void wr_remember(struct xdp_md *ctx, __u64 index, __u64 term,
					const struct fp_hdr *in, __u64 now, int client)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + WR_IP_OFF;
	struct udphdr *udp = data + WR_UDP_OFF;
	__u32 slot = (__u32)(index % WR_CLIENT_SLOTS);
	struct wr_client *cl;

	if (data + WR_FP_OFF > data_end)
		return;
	cl = bpf_map_lookup_elem(&wr_clients, &slot);
	if (!cl)
		return;
	cl->index = 0; /* invalid while being written */
	if (!client)
		return;
	cl->term = term;
	cl->from = in->from;
	cl->seq = in->seq;
	cl->t_ns = now;
	cl->ip = ip->saddr;
	cl->port = udp->source;
	__builtin_memcpy(cl->mac, eth->h_source, ETH_ALEN);
	cl->blind = (in->flags & FP_F_BLIND_WRITE) ? 1 : 0;
	cl->index = index;
}

/*
 * The handler under the lock, on the registers. A global (non-inlined)
 * function, so the verifier checks the handler's loops once, on their own,
 * and not once per path of the caller. On failure the input goes to the host.
 */
__attribute__((noinline)) int wr_handle(struct wr_scratch *sc)
{
	struct wr_lock *lk;
	__u32 k = 0;

	if (!sc)
		return -1;
	lk = bpf_map_lookup_elem(&wr_lock, &k);
	if (!lk) {
		sc->out.actions = FP_ACT_TO_HOST;
		return -1;
	}
	bpf_spin_lock(&lk->l);
	fp_handle_inline(&regs, &sc->in, &sc->out);
	sc->self_id = regs.self_id;
	sc->term = regs.term;
	sc->group_id = regs.group_id;
	bpf_spin_unlock(&lk->l);
	return 0;
}

/* Everything after the filter, with the in-flight counter held. */
static __always_inline int wr_process(struct xdp_md *ctx, struct wr_pkt *pk,
				      struct wr_counters *cnt, struct wr_scratch *sc, int pulled)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *ent; /* an entry record: struct wr_rec_small if `small`, else wr_rec_entry */
	struct wr_rec_hdr *eh, *com;
	int small = 0;
	struct fp_hdr *in = &sc->in;
	struct fp_out *out = &sc->out;
	struct wr_dst dst;
	__u64 now, self_id, term, group;
	__u32 src_ip, verdict, replied = 0;
	__u64 n;
	__u16 src_port;
	int from_self;
	struct fp_gap_clock gap_clock;

	if (pk->plen < FP_HDR_LEN || data + WR_PAYLOAD_OFF > data_end ||
	    fp_parse(data + WR_FP_OFF, pk->plen, in) != 0) {
		cnt->malformed++;
		return XDP_PASS;
	}
	if (!regs.enabled) {
		cnt->punted++;
		return wr_to_host(ctx);
	}

	/* Addresses of the sender, before the frame is rewritten. */
	{
		struct ethhdr *eth = data;
		struct iphdr *ip = data + WR_IP_OFF;
		struct udphdr *udp = data + WR_UDP_OFF;

		__builtin_memcpy(dst.mac, eth->h_source, ETH_ALEN);
		dst.ip = ip->saddr;
		dst.port = udp->source;
	}
	src_ip = dst.ip;
	src_port = dst.port;
	from_self = src_ip == self_ip && src_port == fp_port;
	/*
	 * The host's own packets come only through pulls. One from our own address otherwise
	 * is a test run's recycled frame that lost its pull metadata, or forged: never the
	 * host's, and taking it would order an entry twice.
	 */
	if (from_self && !pulled) {
		cnt->dropped++;
		return XDP_DROP;
	}

	/*
	 * An append ahead of the log: the host holds it; past the window, one a while reaches
	 * the gap rule (fp_ahead_inline).
	 */
	gap_clock.now_ns = bpf_ktime_get_ns();
	gap_clock.last_pass_ns = gap_pass_ns;
	/* The leader was alive then, whenever the host gets to it (a starved host's ticks). */
	if (fp_leader_heard_inline(&regs, in, from_self))
		heard_ns = gap_clock.now_ns;
	switch (fp_ahead_inline(&regs, in, from_self, reorder_window, &gap_clock)) {
	case FP_AHEAD_HOLD:
		cnt->punted++;
		return wr_to_host(ctx);
	case FP_AHEAD_DROP:
		cnt->dropped++;
		return XDP_DROP;
	}
	gap_pass_ns = gap_clock.last_pass_ns;

	/*
	 * Overload: shed a client's request with a busy reply rather than take it and drop
	 * appends and acks later (a full ring), while the busy replies' ration lasts
	 * (fp_busy_answer_inline). Racy reads of the registers and the ration, as above.
	 */
	struct fp_shed_load load = {
		.ring_used = bpf_ringbuf_query(&wr_ring, BPF_RB_AVAIL_DATA),
		.ring_size = WR_RING_ADMIT_BYTES,
		.max_inflight = shed_inflight,
	};
	if (fp_shed_inline(&regs, in, from_self, &load)) {
		struct fp_busy_clock busy = { .now_ns = gap_clock.now_ns, .tat_ns = busy_tat_ns };

		cnt->shed++;
		if (!fp_busy_answer_inline(&busy)) {
			cnt->shed_unanswered++;
			return XDP_DROP;
		}
		busy_tat_ns = busy.tat_ns;
		if (wr_busy(ctx, in, &dst, regs.self_id, regs.term, regs.commit_index, &sc->msg)) {
			cnt->dropped++;
			return XDP_DROP;
		}
		return XDP_TX;
	}

	/*
	 * Ring space first: a full ring drops the input before the handler sees it. Only the
	 * types whose handling can ring a record reserve one: an entry comes only of a client
	 * request or an append, a commit also of an ack (Figure 4).
	 */
	ent = NULL;
	com = NULL;
	if (in->type == FP_CLIENT_REQUEST || in->type == FP_APPEND) {
		if (in->len <= WR_SMALL_PAYLOAD) {
			small = 1;
			ent = bpf_ringbuf_reserve(&wr_ring, WR_RING_SMALL_SIZE, 0);
		} else {
			ent = bpf_ringbuf_reserve(&wr_ring, WR_RING_ENTRY_SIZE, 0);
		}
		if (!ent) {
			cnt->ring_full++;
			return XDP_DROP;
		}
	}
	if (ent || in->type == FP_ACK) {
		com = bpf_ringbuf_reserve(&wr_ring, sizeof(struct wr_rec_hdr), 0);
		if (!com) {
			if (ent)
				bpf_ringbuf_discard(ent, 0);
			cnt->ring_full++;
			return XDP_DROP;
		}
	}

	now = bpf_ktime_get_ns();
	if (wr_handle(sc))
		out->actions = FP_ACT_TO_HOST;
	self_id = sc->self_id;
	term = sc->term;
	group = sc->group_id;

	if (out->actions & FP_ACT_HALT)
		cnt->halts++;
	if (out->actions & FP_ACT_TO_HOST)
		cnt->punted++;
	else
		cnt->handled++;

	/* The entry record, with the (stamped) payload. */
	if (ent && (out->actions & FP_ACT_RING_ENTRY)) {
		if ((out->actions & FP_ACT_BROADCAST) && in->type == FP_CLIENT_REQUEST)
			wr_stamp(ctx, in->len, now);
		eh = ent;
		eh->kind = WR_REC_ENTRY;
		eh->flags = in->flags;
		eh->len = in->len;
		eh->index = out->entry_index;
		eh->term = out->entry_term;
		eh->from = in->from;
		eh->seq = in->seq;
		eh->src_ip = 0;
		eh->src_port = 0;
		eh->reserved = 0;
		if (in->type == FP_CLIENT_REQUEST) {
			if (!from_self) {
				eh->src_ip = src_ip;
				eh->src_port = src_port;
			}
			wr_remember(ctx, out->entry_index, out->entry_term, in, now, !from_self);
		}
		/* Both bounds after the barrier, as 64-bit compares: the verifier must see
		 * n in [1, the record's payload size] on the register it is passed in. A
		 * payload that does not fit (never: the size was chosen by it) is left out. */
		n = in->len;
		WR_BARRIER_VAR(n);
		if (small) {
			if (n > 0 && (n > WR_SMALL_PAYLOAD ||
				      bpf_xdp_load_bytes(ctx, WR_PAYLOAD_OFF,
							 ((struct wr_rec_small *)ent)->payload, n)))
				eh->len = 0;
		} else if (n > 0 && (n > FP_MAX_PAYLOAD ||
				     bpf_xdp_load_bytes(ctx, WR_PAYLOAD_OFF,
							((struct wr_rec_entry *)ent)->payload, n))) {
			eh->len = 0;
		}
	}

	/* The verdict. */
	if (out->actions & FP_ACT_TO_HOST) {
		verdict = wr_to_host(ctx);
	} else if (out->actions & FP_ACT_BROADCAST) {
		struct wr_dst g;
		__u8 *o = (__u8 *)&group_ip;

		g.mac[0] = 0x01;
		g.mac[1] = 0x00;
		g.mac[2] = 0x5e;
		g.mac[3] = o[1] & 0x7f;
		g.mac[4] = o[2];
		g.mac[5] = o[3];
		g.ip = group_ip;
		g.port = fp_port;
		verdict = wr_emit(ctx, &out->msg, in->len, &g) ? XDP_DROP : XDP_TX;
	} else if (out->actions & FP_ACT_REPLY) {
		verdict = wr_emit(ctx, &out->msg, 0, &dst) ? XDP_DROP : XDP_TX;
		if (verdict == XDP_TX && out->msg.type == FP_RETX_REQ)
			cnt->retx_requests++;
	} else if ((out->actions & FP_ACT_CLIENT_REPLY) &&
		   wr_client_reply(ctx, out->reply_index, out->commit_index, self_id, term,
				   (__u32)group, now, &sc->msg)) {
		replied = 1;
		cnt->client_replies++;
		verdict = XDP_TX;
	} else {
		/* Nothing to send: the frame ends here, taken (an entry, a commit, a match) or not. */
		verdict = XDP_DROP;
	}
	/*
	 * `dropped` counts inputs the handler refused, and replies that could not be emitted;
	 * an ack taken into a match index or a commit is not one (FP_ACT_MATCHED, RING_COMMIT).
	 */
	if ((out->actions & FP_ACT_DROP) ||
	    (verdict == XDP_DROP && (out->actions & (FP_ACT_BROADCAST | FP_ACT_REPLY))))
		cnt->dropped++;

	/* Records, in the order the handler produced them: entry, then commit. */
	if (ent) {
		if (out->actions & FP_ACT_RING_ENTRY) {
			bpf_ringbuf_submit(ent, BPF_RB_NO_WAKEUP);
		} else {
			bpf_ringbuf_discard(ent, BPF_RB_NO_WAKEUP);
		}
	}
	if (com) {
		if (out->actions & FP_ACT_RING_COMMIT) {
			com->kind = WR_REC_COMMIT;
			com->flags = replied ? WR_COMMIT_REPLIED : 0;
			com->len = 0;
			com->index = out->commit_index;
			com->term = 0;
			com->from = 0;
			com->seq = 0;
			com->src_ip = 0;
			com->src_port = 0;
			com->reserved = 0;
			bpf_ringbuf_submit(com, BPF_RB_NO_WAKEUP);
		} else {
			bpf_ringbuf_discard(com, BPF_RB_NO_WAKEUP);
		}
	}
	/*
	 * A discard too: the reader stops at a reserved record until it is submitted or
	 * discarded, so records after it (other CPUs') may wait on this one.
	 */
	if (ent || com)
		wr_ring_notify();
	return verdict;
}

/*
 * A host pull (wr_maps.h "push_q"): 1 if this frame is one and now holds the next pushed
 * frame, 0 if it is not one, -1 if it is one with nothing left to take. Only the host's
 * test runs carry metadata with the magic: frames from the wire have none. A page the test
 * run recycles keeps its metadata bytes (only the frame is rewritten), so every repetition
 * is recognised, whatever the previous one left in the frame.
 */
static __always_inline int wr_pull(struct xdp_md *ctx)
{
	void *meta = (void *)(long)ctx->data_meta;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct wr_push_slot *slot;
	__u32 i;
	__u64 len;

	if (meta + sizeof(__u64) > data)
		return 0;
	if (*(__u64 *)meta != WR_PULL_MAGIC)
		return 0;
	i = __sync_fetch_and_add(&push_next, 1);
	if (i >= push_count || i >= WR_PUSH_SLOTS)
		return -1;
	slot = &push_q[i];
	len = slot->len;
	WR_BARRIER_VAR(len);
	if (len < WR_PAYLOAD_OFF || len > WR_PUSH_FRAME_MAX)
		return -1;
	if (bpf_xdp_adjust_tail(ctx, (int)len - (int)(data_end - data)))
		return -1;
	if (bpf_xdp_store_bytes(ctx, 0, slot->frame, len))
		return -1;
	return 1;
}

SEC("xdp")
int waverunner_xdp(struct xdp_md *ctx)
{
	struct wr_counters *cnt;
	struct wr_scratch *sc;
	struct wr_pkt pk;
	__u32 cpu;
	int rc, verdict, pulled;

	pulled = wr_pull(ctx);
	if (pulled < 0)
		return XDP_DROP;
	rc = wr_parse(ctx, fp_port, &pk);
	if (rc == WR_NOT_OURS)
		return XDP_PASS;
	cnt = wr_first(&wr_counters);
	sc = wr_first(&wr_scratch);
	if (!cnt || !sc)
		return XDP_PASS;
	if (rc != 0) {
		cnt->malformed++;
		return XDP_PASS;
	}
	cpu = bpf_get_smp_processor_id() & (WR_MAX_CPUS - 1);
	__sync_fetch_and_add(&inflight[cpu], 1);
	verdict = wr_process(ctx, &pk, cnt, sc, pulled);
	__sync_fetch_and_sub(&inflight[cpu], 1);
	return verdict;
}

/* A pass-through for the far ends of veth pairs (XDP_TX needs a program on the peer). */
SEC("xdp")
int waverunner_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual Apache-2.0/GPL";
