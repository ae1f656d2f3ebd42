// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0)
//
// The fan-out measurement of `waverunner bench fanout` (waverunner_bench::fanout): three ways
// for an XDP leader to send one request to every follower behind its single interface
// (DESIGN §5, docs/fanout.md).
//
// wrf_leader (XDP, the leader's eth0) takes a UDP datagram to wrf_lcfg.port addressed to the
// leader, writes where it came from (MAC, IPv4 address, UDP port) into payload bytes 8..20,
// makes the leader its source (MAC, address, port), zeroes the UDP checksum, and then, by
// wrf_lcfg.mode:
//   MODE_MCAST   (a) rewrites the destination to the multicast group and sends it back out
//                    (XDP_TX); the bridge (multicast snooping off) floods it to every port;
//   MODE_DEVMAP  (b) the same rewrite, then bpf_redirect_map(BPF_F_BROADCAST) over wrf_devmap
//                    (the leader's own ifindex in several entries): one identical copy per
//                    entry, each flooded by the bridge;
//   MODE_CLONE   (c) XDP_PASS; wrf_clone (TC ingress, same interface) then rewrites the
//                    destination MAC and address once per follower and bpf_clone_redirect()s
//                    each copy to the interface's egress, in a flat loop, and drops the original.
// wrf_follower (XDP, each follower's eth0) answers every datagram to wrf_fcfg.port, whatever
// its destination address, straight to the origin in payload bytes 8..20, from the follower's
// own MAC/address (XDP_TX). wrf_pass passes everything (the bridge-side veth ends: a veth drops
// XDP_TX and redirected frames unless its peer has an XDP program, DESIGN §5).
//
// The configuration structs are mirrored byte for byte in src/fanout.rs.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MODE_PASS 0
#define MODE_MCAST 1
#define MODE_DEVMAP 2
#define MODE_CLONE 3

#define MAX_FOLLOWERS 8
// seq (8) + origin MAC (6) + origin address (4) + origin port (2)
#define MIN_PAYLOAD 20
#define ORIGIN_OFF 8

struct wrf_peer {
    __u8 mac[ETH_ALEN];
    __u8 pad[2];
    __be32 ip;
};

// 36 + 12 * MAX_FOLLOWERS = 132 bytes.
struct wrf_leader_cfg {
    __u32 mode;
    __u32 port; // host order
    __u8 own_mac[ETH_ALEN];
    __u8 group_mac[ETH_ALEN];
    __be32 own_ip;
    __be32 group_ip;
    __u32 ifindex; // the leader's interface (egress of the clones)
    __u32 n_followers;
    struct wrf_peer followers[MAX_FOLLOWERS];
};

// 16 bytes.
struct wrf_follower_cfg {
    __u32 port; // host order
    __u8 own_mac[ETH_ALEN];
    __u8 pad[2];
    __be32 own_ip;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct wrf_leader_cfg);
} wrf_lcfg SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct wrf_follower_cfg);
} wrf_fcfg SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_DEVMAP);
    __uint(max_entries, MAX_FOLLOWERS);
    __type(key, __u32);
    __type(value, __u32);
} wrf_devmap SEC(".maps");

#define ST_LEADER 0    // requests the leader fanned out (XDP)
#define ST_ANSWERED 1  // answers a follower sent
#define ST_CLONED 2    // clones sent by wrf_clone
#define ST_CLONE_ERR 3 // bpf_clone_redirect / rewrite failures
#define ST_N 4

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, ST_N);
    __type(key, __u32);
    __type(value, __u64);
} wrf_stats SEC(".maps");

static __always_inline void count(__u32 k)
{
    __u64 *c = bpf_map_lookup_elem(&wrf_stats, &k);
    if (c)
        *c += 1;
}

static __always_inline void ip_csum(struct iphdr *ip)
{
    __u16 *w = (__u16 *)ip;
    __u32 sum = 0;
    ip->check = 0;
#pragma unroll
    for (int i = 0; i < 10; i++)
        sum += w[i];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    ip->check = (__u16)~sum;
}

// The UDP header of an IPv4 datagram to `port` with at least MIN_PAYLOAD bytes, or NULL.
static __always_inline struct udphdr *parse(void *data, void *end, __u32 port,
                                            struct ethhdr **eth_out, struct iphdr **ip_out)
{
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
        return 0;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
        return 0;
    if (ip->frag_off & bpf_htons(0x3fff))
        return 0;
    struct udphdr *udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > end || (void *)(udp + 1) + MIN_PAYLOAD > end)
        return 0;
    if (port == 0 || udp->dest != bpf_htons((__u16)port))
        return 0;
    *eth_out = eth;
    *ip_out = ip;
    return udp;
}

SEC("xdp")
int wrf_leader(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    __u32 key = 0;
    struct wrf_leader_cfg *cfg = bpf_map_lookup_elem(&wrf_lcfg, &key);
    if (!cfg || cfg->mode == MODE_PASS)
        return XDP_PASS;
    struct ethhdr *eth;
    struct iphdr *ip;
    struct udphdr *udp = parse(data, end, cfg->port, &eth, &ip);
    if (!udp || ip->daddr != cfg->own_ip)
        return XDP_PASS;
    __u8 *origin = (__u8 *)(udp + 1) + ORIGIN_OFF;
    __builtin_memcpy(origin, eth->h_source, ETH_ALEN);
    __builtin_memcpy(origin + 6, &ip->saddr, 4);
    __builtin_memcpy(origin + 10, &udp->source, 2);
    __builtin_memcpy(eth->h_source, cfg->own_mac, ETH_ALEN);
    ip->saddr = cfg->own_ip;
    udp->source = udp->dest;
    udp->check = 0;
    count(ST_LEADER);
    if (cfg->mode == MODE_CLONE) {
        ip_csum(ip);
        return XDP_PASS; // wrf_clone takes it at TC ingress
    }
    __builtin_memcpy(eth->h_dest, cfg->group_mac, ETH_ALEN);
    ip->daddr = cfg->group_ip;
    ip->ttl = 64;
    ip_csum(ip);
    if (cfg->mode == MODE_DEVMAP)
        return bpf_redirect_map(&wrf_devmap, 0, BPF_F_BROADCAST);
    return XDP_TX;
}

#define IP_DST_OFF (ETH_HLEN + 16)
#define IP_CSUM_OFF (ETH_HLEN + 10)

SEC("tc")
int wrf_clone(struct __sk_buff *skb)
{
    __u32 key = 0;
    struct wrf_leader_cfg *cfg = bpf_map_lookup_elem(&wrf_lcfg, &key);
    if (!cfg || cfg->mode != MODE_CLONE)
        return TC_ACT_OK;
    void *data = (void *)(long)skb->data;
    void *end = (void *)(long)skb->data_end;
    struct ethhdr *eth;
    struct iphdr *ip;
    struct udphdr *udp = parse(data, end, cfg->port, &eth, &ip);
    if (!udp || ip->daddr != cfg->own_ip)
        return TC_ACT_OK;
    __be32 prev = ip->daddr;
    __u32 n = cfg->n_followers;
    __u32 ifindex = cfg->ifindex;
    // A flat loop: every clone is made from the (rewritten) original, none from a clone, so the
    // kernel's redirect recursion limit never applies.
    for (__u32 i = 0; i < MAX_FOLLOWERS; i++) {
        if (i >= n)
            break;
        struct wrf_peer *f = &cfg->followers[i];
        __be32 dst = f->ip;
        if (bpf_skb_store_bytes(skb, 0, f->mac, ETH_ALEN, 0) ||
            bpf_l3_csum_replace(skb, IP_CSUM_OFF, prev, dst, 4) ||
            bpf_skb_store_bytes(skb, IP_DST_OFF, &dst, 4, 0)) {
            count(ST_CLONE_ERR);
            return TC_ACT_SHOT;
        }
        prev = dst;
        if (bpf_clone_redirect(skb, ifindex, 0))
            count(ST_CLONE_ERR);
        else
            count(ST_CLONED);
    }
    return TC_ACT_SHOT;
}

SEC("xdp")
int wrf_follower(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    __u32 key = 0;
    struct wrf_follower_cfg *cfg = bpf_map_lookup_elem(&wrf_fcfg, &key);
    if (!cfg)
        return XDP_PASS;
    struct ethhdr *eth;
    struct iphdr *ip;
    struct udphdr *udp = parse(data, end, cfg->port, &eth, &ip);
    if (!udp)
        return XDP_PASS;
    __u8 *origin = (__u8 *)(udp + 1) + ORIGIN_OFF;
    __builtin_memcpy(eth->h_dest, origin, ETH_ALEN);
    __builtin_memcpy(eth->h_source, cfg->own_mac, ETH_ALEN);
    __builtin_memcpy(&ip->daddr, origin + 6, 4);
    ip->saddr = cfg->own_ip;
    ip->ttl = 64;
    ip_csum(ip);
    udp->source = udp->dest;
    __builtin_memcpy(&udp->dest, origin + 10, 2);
    udp->check = 0;
    count(ST_ANSWERED);
    return XDP_TX;
}

SEC("xdp")
int wrf_pass(struct xdp_md *ctx)
{
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
