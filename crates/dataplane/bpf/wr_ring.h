/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The log ring's record layout (docs/dataplane.md "Ring records"), shared by
 * the XDP program and its loader (src/xdp.rs parses the same bytes).
 *
 * Every invocation that may produce records reserves one entry record and
 * one commit record before the handler runs, then submits or discards each.
 * bpf_ringbuf_reserve needs a constant size, so an entry record comes in two
 * sizes: WR_RING_SMALL_SIZE for a payload of at most WR_SMALL_PAYLOAD bytes
 * (a client's request, a small batch), WR_RING_ENTRY_SIZE otherwise. Records reach user space in reservation order, so an entry
 * is always seen before the commit produced by the same packet.
 */
#ifndef WAVERUNNER_BPF_RING_H
#define WAVERUNNER_BPF_RING_H

#include <linux/types.h>
#include "../../fastpath/c/wire.h"

#define WR_REC_ENTRY 1
#define WR_REC_COMMIT 2
#define WR_REC_WAKE 3 /* no content: wakes a reader that said it sleeps (ring_waiting) */
#define WR_COMMIT_REPLIED 1 /* commit flags bit 0: the data plane sent the client reply */

/*
 * One BPF ring buffer (bytes, a power of two, a multiple of the page size).
 * A record costs its size rounded up to 8 plus an 8-byte ring header: an
 * entry 1456 bytes (264 small), a commit 56, so 8 MiB hold at least 5548
 * entries each with its commit record (more than RING_CAPACITY = 4096 in
 * flight), and 26 214 small ones: half a second of a follower's host stalled
 * at 50 000 small writes a second, where the large size held a tenth of it
 * and the followers' rings overflowed under 50 closed-loop native writers.
 */
#define WR_RING_BYTES (8u << 20)

/*
 * The ring a leader's admission control counts against (fp_shed_inline's
 * ring_size): it sheds clients' requests once a quarter of this, 256 KiB or
 * 819 small entries with their commits (173 large ones), waits for its host. The
 * whole ring is for followers, whose hosts may fall behind for longer; a
 * leader that admitted until 2 MiB waited ran its host 150 ms and more behind
 * at twice the peak load, too late to retransmit a lost append in time.
 */
#define WR_RING_ADMIT_BYTES (1u << 20)

struct wr_rec_hdr {
	__u32 kind;  /* WR_REC_ENTRY or WR_REC_COMMIT */
	__u16 flags; /* entry: input header flags; commit: WR_COMMIT_REPLIED */
	__u16 len;   /* entry payload bytes */
	__u64 index;
	__u64 term;
	__u64 from;
	__u64 seq;
	__u32 src_ip;   /* network order; 0 = none */
	__u16 src_port; /* network order */
	__u16 reserved;
};

struct wr_rec_entry {
	struct wr_rec_hdr h;
	__u8 payload[FP_MAX_PAYLOAD];
};

#define WR_RING_ENTRY_SIZE sizeof(struct wr_rec_entry)

/* An entry record whose payload is at most WR_SMALL_PAYLOAD bytes. */
#define WR_SMALL_PAYLOAD 208

struct wr_rec_small {
	struct wr_rec_hdr h;
	__u8 payload[WR_SMALL_PAYLOAD];
};

#define WR_RING_SMALL_SIZE sizeof(struct wr_rec_small)

/*
 * Wake-ups (docs/dataplane.md "Ring wake-ups"). Records are submitted with
 * BPF_RB_NO_WAKEUP: the kernel's own rule wakes the reader for every record
 * it has caught up with, a self-IPI each (on a VM a trapped MSR write: a third
 * of the leader's CPU at 50 clients), even while the reader is awake and
 * working. Instead the reader sets ring_waiting before it sleeps (and looks at
 * the ring once more after setting it); a producer, after submitting or
 * discarding what it reserved, takes the flag with an atomic exchange and, if
 * it was set, submits this record with BPF_RB_FORCE_WAKEUP. Either the
 * reader's second look sees the record or the producer sees the flag. A
 * discard counts: the reader stops at a reserved record, so another CPU's
 * record after it is announced only when that one is settled.
 */
struct wr_rec_wake {
	__u32 kind; /* WR_REC_WAKE */
	__u32 reserved;
};

_Static_assert(sizeof(struct wr_rec_hdr) == 48, "ring record header is 48 bytes");
_Static_assert(sizeof(struct wr_rec_wake) == 8, "wake record is 8 bytes");
_Static_assert(__builtin_offsetof(struct wr_rec_hdr, src_ip) == 40, "src_ip @40");
_Static_assert(__builtin_offsetof(struct wr_rec_entry, payload) == 48, "payload @48");
_Static_assert(__builtin_offsetof(struct wr_rec_small, payload) == 48, "small payload @48");
_Static_assert(sizeof(struct wr_rec_small) == 256, "a small entry record is 256 bytes");

#endif /* WAVERUNNER_BPF_RING_H */
