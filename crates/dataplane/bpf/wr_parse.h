/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The packet filter: Ethernet + IPv4 (ihl 5, not a fragment) + UDP to the
 * fast-path port. Every fast-path frame therefore has the same layout, and
 * every offset below is a constant:
 *
 *   0  Ethernet (14)   14  IPv4 (20)   34  UDP (8)   42  fast-path header (64)   106  payload
 */
#ifndef WAVERUNNER_BPF_PARSE_H
#define WAVERUNNER_BPF_PARSE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>

#define WR_ETH_OFF 0
#define WR_IP_OFF 14
#define WR_UDP_OFF 34
#define WR_FP_OFF 42                      /* fast-path header */
#define WR_PAYLOAD_OFF (WR_FP_OFF + 64)   /* operation payload */

/* Keeps clang from merging two bound checks of `x` into one the verifier cannot follow. */
#define WR_BARRIER_VAR(x) asm volatile("" : "+r"(x))

struct wr_pkt {
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	__u32 plen; /* UDP payload bytes, by the UDP length field (checked against the frame) */
};

#define WR_NOT_OURS 1 /* not Ethernet/IPv4(ihl 5)/UDP to our port: the host's */
#define WR_BAD_LEN 2  /* to our port, but the UDP length disagrees with the frame */

/* 0 and *p filled for a UDP datagram to `port` (network order); else WR_NOT_OURS or WR_BAD_LEN. */
static __always_inline int wr_parse(struct xdp_md *ctx, __u16 port, struct wr_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;
	__u16 ulen;

	if ((void *)(eth + 1) > data_end)
		return WR_NOT_OURS;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return WR_NOT_OURS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return WR_NOT_OURS;
	if (ip->version != 4 || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return WR_NOT_OURS;
	if (ip->frag_off & bpf_htons(0x3fff)) /* MF or an offset: a fragment */
		return WR_NOT_OURS;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > data_end)
		return WR_NOT_OURS;
	if (udp->dest != port || port == 0)
		return WR_NOT_OURS;
	ulen = bpf_ntohs(udp->len);
	if (ulen < sizeof(*udp))
		return WR_BAD_LEN;
	if ((void *)udp + ulen > data_end)
		return WR_BAD_LEN;
	p->eth = eth;
	p->ip = ip;
	p->udp = udp;
	p->plen = ulen - sizeof(*udp);
	return 0;
}

#endif /* WAVERUNNER_BPF_PARSE_H */
