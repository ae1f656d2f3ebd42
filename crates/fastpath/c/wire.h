/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Waverunner fast-path wire format (docs/interfaces.md §1).
 *
 * Every fast-path packet is a UDP payload that starts with one fixed 64-byte
 * header, all integers little-endian, followed by `len` bytes of operation
 * payload. `struct fp_hdr` is the decoded (host-order) form; fp_parse() and
 * fp_write() convert byte by byte, so they are correct on any host byte order
 * and never do an unaligned load.
 */
#ifndef WAVERUNNER_FP_WIRE_H
#define WAVERUNNER_FP_WIRE_H

#include "types.h"

#define FP_MAGIC 0x4E525657U /* bytes 'W' 'V' 'R' 'N' on the wire */
#define FP_VERSION 1
#define FP_HDR_LEN 64
#define FP_MAX_PAYLOAD 1400

/* Message types (byte 5). */
#define FP_CLIENT_REQUEST 1
#define FP_APPEND 2
#define FP_ACK 3
#define FP_REJECT 4
#define FP_RETX_REQ 5
#define FP_CLIENT_REPLY 6
#define FP_TYPE_MIN FP_CLIENT_REQUEST
#define FP_TYPE_MAX FP_CLIENT_REPLY

/* Header flags (bytes 6-7). */
#define FP_F_BLIND_WRITE 1 /* a write whose reply does not read state */
#define FP_F_HEARTBEAT 2   /* empty entry pushed by the leader while idle */
#define FP_F_READ 4        /* a client's read: the leader's host serves it, not the log */

/* fp_parse() errors, checked in this order. */
#define FP_ERR_SHORT (-1)    /* buffer shorter than FP_HDR_LEN */
#define FP_ERR_MAGIC (-2)    /* magic != FP_MAGIC */
#define FP_ERR_VERSION (-3)  /* version != FP_VERSION */
#define FP_ERR_TYPE (-4)     /* type not in FP_TYPE_MIN..FP_TYPE_MAX */
#define FP_ERR_LEN (-5)      /* len > FP_MAX_PAYLOAD or header + len > buffer */
#define FP_ERR_RESERVED (-6) /* reserved != 0 */

struct fp_hdr {
	__u32 magic;
	__u8 version;
	__u8 type;
	__u16 flags;
	__u32 group_id;
	__u16 len;
	__u16 reserved;
	__u64 term;     /* sender's term (0 in CLIENT_REQUEST) */
	__u64 from;     /* sender node id; client id in CLIENT_REQUEST */
	__u64 index;    /* APPEND: prev index; ACK/REJECT/RETX_REQ: last index; CLIENT_REPLY: committed index */
	__u64 log_term; /* APPEND: prev term; REJECT/RETX_REQ: last term */
	__u64 commit;   /* APPEND, CLIENT_REPLY: leader commit index */
	__u64 seq;      /* client sequence number (CLIENT_REQUEST, CLIENT_REPLY) */
};

_Static_assert(sizeof(struct fp_hdr) == FP_HDR_LEN, "fp_hdr is 64 bytes");
_Static_assert(FP_OFFSETOF(struct fp_hdr, magic) == 0, "magic @0");
_Static_assert(FP_OFFSETOF(struct fp_hdr, version) == 4, "version @4");
_Static_assert(FP_OFFSETOF(struct fp_hdr, type) == 5, "type @5");
_Static_assert(FP_OFFSETOF(struct fp_hdr, flags) == 6, "flags @6");
_Static_assert(FP_OFFSETOF(struct fp_hdr, group_id) == 8, "group_id @8");
_Static_assert(FP_OFFSETOF(struct fp_hdr, len) == 12, "len @12");
_Static_assert(FP_OFFSETOF(struct fp_hdr, reserved) == 14, "reserved @14");
_Static_assert(FP_OFFSETOF(struct fp_hdr, term) == 16, "term @16");
_Static_assert(FP_OFFSETOF(struct fp_hdr, from) == 24, "from @24");
_Static_assert(FP_OFFSETOF(struct fp_hdr, index) == 32, "index @32");
_Static_assert(FP_OFFSETOF(struct fp_hdr, log_term) == 40, "log_term @40");
_Static_assert(FP_OFFSETOF(struct fp_hdr, commit) == 48, "commit @48");
_Static_assert(FP_OFFSETOF(struct fp_hdr, seq) == 56, "seq @56");

/* Little-endian loads and stores from a byte pointer (no alignment needed). */
static __always_inline __u16 fp_ld16(const __u8 *p)
{
	return (__u16)((__u16)p[0] | ((__u16)p[1] << 8));
}

static __always_inline __u32 fp_ld32(const __u8 *p)
{
	return (__u32)p[0] | ((__u32)p[1] << 8) | ((__u32)p[2] << 16) |
	       ((__u32)p[3] << 24);
}

static __always_inline __u64 fp_ld64(const __u8 *p)
{
	return (__u64)fp_ld32(p) | ((__u64)fp_ld32(p + 4) << 32);
}

static __always_inline void fp_st16(__u8 *p, __u16 v)
{
	p[0] = (__u8)v;
	p[1] = (__u8)(v >> 8);
}

static __always_inline void fp_st32(__u8 *p, __u32 v)
{
	p[0] = (__u8)v;
	p[1] = (__u8)(v >> 8);
	p[2] = (__u8)(v >> 16);
	p[3] = (__u8)(v >> 24);
}

static __always_inline void fp_st64(__u8 *p, __u64 v)
{
	fp_st32(p, (__u32)v);
	fp_st32(p + 4, (__u32)(v >> 32));
}

/*
 * Parse and validate the header at the start of `buf` (`len` bytes: header
 * plus payload). Returns 0 and fills `*out`, or a negative FP_ERR_* (checked
 * in the order SHORT, MAGIC, VERSION, TYPE, LEN, RESERVED) and leaves `*out`
 * untouched. The payload is buf[FP_HDR_LEN .. FP_HDR_LEN + out->len).
 */
static __always_inline int fp_parse(const void *buf, __u32 len,
				    struct fp_hdr *out)
{
	const __u8 *p = (const __u8 *)buf;
	struct fp_hdr h;

	if (len < FP_HDR_LEN)
		return FP_ERR_SHORT;
	h.magic = fp_ld32(p + 0);
	if (h.magic != FP_MAGIC)
		return FP_ERR_MAGIC;
	h.version = p[4];
	if (h.version != FP_VERSION)
		return FP_ERR_VERSION;
	h.type = p[5];
	if (h.type < FP_TYPE_MIN || h.type > FP_TYPE_MAX)
		return FP_ERR_TYPE;
	h.flags = fp_ld16(p + 6);
	h.group_id = fp_ld32(p + 8);
	h.len = fp_ld16(p + 12);
	if (h.len > FP_MAX_PAYLOAD)
		return FP_ERR_LEN;
	if ((__u32)h.len > len - FP_HDR_LEN) /* len >= FP_HDR_LEN checked above */
		return FP_ERR_LEN;
	h.reserved = fp_ld16(p + 14);
	if (h.reserved != 0)
		return FP_ERR_RESERVED;
	h.term = fp_ld64(p + 16);
	h.from = fp_ld64(p + 24);
	h.index = fp_ld64(p + 32);
	h.log_term = fp_ld64(p + 40);
	h.commit = fp_ld64(p + 48);
	h.seq = fp_ld64(p + 56);
	*out = h;
	return 0;
}

/*
 * Write `h` as the 64-byte little-endian wire header at `buf` (the caller
 * guarantees FP_HDR_LEN writable bytes). Every field is written verbatim, no
 * validation. Returns FP_HDR_LEN.
 */
static __always_inline int fp_write(const struct fp_hdr *h, void *buf)
{
	__u8 *p = (__u8 *)buf;

	fp_st32(p + 0, h->magic);
	p[4] = h->version;
	p[5] = h->type;
	fp_st16(p + 6, h->flags);
	fp_st32(p + 8, h->group_id);
	fp_st16(p + 12, h->len);
	fp_st16(p + 14, h->reserved);
	fp_st64(p + 16, h->term);
	fp_st64(p + 24, h->from);
	fp_st64(p + 32, h->index);
	fp_st64(p + 40, h->log_term);
	fp_st64(p + 48, h->commit);
	fp_st64(p + 56, h->seq);
	return FP_HDR_LEN;
}

#endif /* WAVERUNNER_FP_WIRE_H */
