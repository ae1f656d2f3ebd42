/* SPDX-License-Identifier: Apache-2.0 */
/* IPv4 header checksum for the headers the XDP program rewrites (ihl 5 only). */
#ifndef WAVERUNNER_BPF_CSUM_H
#define WAVERUNNER_BPF_CSUM_H

#include <linux/types.h>
#include <linux/ip.h>

/* Computes iph->check over the 20-byte header (the field itself read as 0). */
static __always_inline void wr_ipv4_csum(struct iphdr *iph)
{
	const __u16 *w = (const __u16 *)iph;
	__u32 sum = 0;
	int i;

	iph->check = 0;
#pragma unroll
	for (i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	iph->check = (__u16)~sum;
}

#endif /* WAVERUNNER_BPF_CSUM_H */
