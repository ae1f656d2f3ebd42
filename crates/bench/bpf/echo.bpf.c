// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0)
//
// The floor of `waverunner bench replication`: an XDP echo (waverunner_bench::floor).
//
// wrb_echo answers every IPv4 UDP datagram to the port in wrb_cfg[0] from the driver: it swaps
// the Ethernet, IPv4 and UDP source and destination and sends the frame back out of the
// interface it came in on (XDP_TX). Swapping does not change the IPv4 header checksum (a sum
// over the swapped fields); the UDP checksum is zeroed (see below). Everything else passes to
// the stack (XDP_PASS), ARP included.
//
// wrb_pass passes everything. It goes on the peer end of a veth whose other end sends with
// XDP_TX: a veth drops XDP_TX frames unless its peer has an XDP program (DESIGN §5).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// [0]: the UDP port to echo (host order; 0: echo nothing).
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u32);
} wrb_cfg SEC(".maps");

// [0]: frames echoed, [1]: frames passed (per CPU).
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} wrb_stats SEC(".maps");

static __always_inline void count(__u32 k)
{
    __u64 *c = bpf_map_lookup_elem(&wrb_stats, &k);
    if (c)
        *c += 1;
}

static __always_inline int pass(void)
{
    count(1);
    return XDP_PASS;
}

SEC("xdp")
int wrb_echo(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;

    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
        return pass();
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
        return pass();
    if (ip->frag_off & bpf_htons(0x3fff)) // a fragment
        return pass();
    struct udphdr *udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > end)
        return pass();
    __u32 key = 0;
    __u32 *port = bpf_map_lookup_elem(&wrb_cfg, &key);
    if (!port || *port == 0 || udp->dest != bpf_htons((__u16)*port))
        return pass();

    unsigned char mac[ETH_ALEN];
    __builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_source, mac, ETH_ALEN);
    __be32 addr = ip->saddr;
    ip->saddr = ip->daddr;
    ip->daddr = addr;
    __be16 p = udp->source;
    udp->source = udp->dest;
    udp->dest = p;
    // A datagram a local socket sent over a veth may carry only a partial checksum (the
    // offload was never done); zero (no checksum, allowed over IPv4) is always valid.
    udp->check = 0;
    count(0);
    return XDP_TX;
}

SEC("xdp")
int wrb_pass(struct xdp_md *ctx)
{
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
