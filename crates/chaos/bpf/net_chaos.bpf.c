// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0)
//
// Packet loss and delay for a replica's network namespace (waverunner_chaos::net).
//
// Attached with TC (clsact) on the replica's `eth0` inside its namespace:
//   wrc_egress   on eth0 egress   (packets the replica sends)
//   wrc_ingress  on eth0 ingress  (packets the replica receives)
// Each looks up the parameters of its direction in `wrc_cfg` (an array written by user space at
// run time) and, for IPv4/IPv6 packets (ARP always passes):
//   * drops the packet with probability loss_ppm / 1e6 (bpf_get_prandom_u32);
//   * else, if a delay is set and the delay pump's lease in `wrc_lease` has not expired,
//     redirects it to the direction's tap device, whose reader (a user-space thread, see
//     net.rs) holds it for the delay (plus jitter) and writes it back into the tap; the tap's
//     ingress program (wrc_reinj_out / wrc_reinj_in) marks it and redirects it to eth0's egress
//     or ingress, where wrc_egress / wrc_ingress let marked packets pass untouched.
//
// Why not EDT (skb->tstamp + the fq qdisc): this kernel is built without sch_fq, sch_etf,
// sch_netem and the BPF qdisc, so no qdisc honours a departure time. See net.rs.
//
// Counters per direction are in the per-CPU array `wrc_stats`.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define DIR_EGRESS 0
#define DIR_INGRESS 1

// skb->mark of a packet the delay pump re-injected: it has had its delay (and its loss draw).
#define WRC_REINJECT_MARK 0x57524331 // "WRC1"

// Must match DirCfg in crates/chaos/src/net.rs.
struct wrc_dir_cfg {
	__u32 loss_ppm;    // drop probability in parts per million
	__u32 delay_us;    // added delay (the pump applies it; nonzero: redirect to the tap)
	__u32 jitter_us;   // +- jitter (applied by the pump)
	__u32 tap_ifindex; // the tap delayed packets go to (0: no delay)
	__u32 dev_ifindex; // eth0: where re-injected packets go
	__u32 _pad;
};

// Must match DirStats in crates/chaos/src/net.rs.
struct wrc_dir_stats {
	__u64 packets;    // IP packets seen (re-injected ones not counted twice)
	__u64 dropped;    // dropped by the loss draw
	__u64 delayed;    // sent to the delay pump
	__u64 undelayed;  // a delay was set but the pump's lease had expired: passed at once
	__u64 reinjected; // came back from the pump
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct wrc_dir_cfg);
} wrc_cfg SEC(".maps");

// Key 0: CLOCK_MONOTONIC ns until which the delay pump is known to be alive.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} wrc_lease SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct wrc_dir_stats);
} wrc_stats SEC(".maps");

static __always_inline int handle(struct __sk_buff *skb, __u32 dir)
{
	__u32 key = dir;
	struct wrc_dir_stats *st = bpf_map_lookup_elem(&wrc_stats, &key);
	struct wrc_dir_cfg *cfg = bpf_map_lookup_elem(&wrc_cfg, &key);

	if (!st || !cfg)
		return TC_ACT_OK;
	if (skb->mark == WRC_REINJECT_MARK) {
		skb->mark = 0;
		st->reinjected++;
		return TC_ACT_OK;
	}
	if (skb->protocol != bpf_htons(ETH_P_IP) && skb->protocol != bpf_htons(ETH_P_IPV6))
		return TC_ACT_OK;
	st->packets++;

	__u32 loss = cfg->loss_ppm;
	if (loss && ((__u64)bpf_get_prandom_u32() * 1000000ULL) >> 32 < loss) {
		st->dropped++;
		return TC_ACT_SHOT;
	}

	__u32 tap = cfg->tap_ifindex;
	if (tap && (cfg->delay_us || cfg->jitter_us)) {
		__u32 zero = 0;
		__u64 *lease = bpf_map_lookup_elem(&wrc_lease, &zero);
		if (lease && bpf_ktime_get_ns() < *lease) {
			st->delayed++;
			return bpf_redirect(tap, 0);
		}
		st->undelayed++;
	}
	return TC_ACT_OK;
}

SEC("tc")
int wrc_egress(struct __sk_buff *skb)
{
	return handle(skb, DIR_EGRESS);
}

SEC("tc")
int wrc_ingress(struct __sk_buff *skb)
{
	return handle(skb, DIR_INGRESS);
}

static __always_inline int reinject(struct __sk_buff *skb, __u32 dir, __u64 flags)
{
	__u32 key = dir;
	struct wrc_dir_cfg *cfg = bpf_map_lookup_elem(&wrc_cfg, &key);

	if (!cfg || !cfg->dev_ifindex)
		return TC_ACT_SHOT;
	skb->mark = WRC_REINJECT_MARK;
	return bpf_redirect(cfg->dev_ifindex, flags);
}

// On the egress tap's ingress: the pump wrote back a packet eth0 was sending.
SEC("tc")
int wrc_reinj_out(struct __sk_buff *skb)
{
	return reinject(skb, DIR_EGRESS, 0);
}

// On the ingress tap's ingress: the pump wrote back a packet eth0 had received.
SEC("tc")
int wrc_reinj_in(struct __sk_buff *skb)
{
	return reinject(skb, DIR_INGRESS, BPF_F_INGRESS);
}

char LICENSE[] SEC("license") = "Dual Apache-2.0/GPL";
