#!/usr/bin/env bash
# The main job (`make run`): a local 3-replica cluster, a mixed workload through the native
# client library and through redis-cli / redis-benchmark, the cluster's status, then `down`.
# As root the replicas run in network namespaces on a bridge with the XDP data plane, and the
# clients in their own namespace; otherwise everything runs on loopback ports with the
# user-space (udp) data plane.
set -euo pipefail
cd "$(dirname "$0")/.."
W="${WAVERUNNER:-$PWD/target/release/waverunner}"
DIR="$(mktemp -d)/cluster"
trap '"$W" down --dir "$DIR" >/dev/null 2>&1 || true; rmdir "$(dirname "$DIR")" 2>/dev/null || true' EXIT

if [ "$(id -u)" = 0 ]; then DP=xdp; else DP=udp; fi
"$W" up --nodes 3 --durability memory --dataplane "$DP" --dir "$DIR"
# The leader enables acceleration once every replica is in sync (a second election round).
for _ in $(seq 50); do
  "$W" status --dir "$DIR" --json | python3 -c '
import json, sys
s = [x for x in json.load(sys.stdin) if x]
sys.exit(0 if s and all(x["dataplane_enabled"] for x in s) else 1)' && break
  sleep 0.1
done

# Clients run in the clients' namespace when the cluster has one.
IN_CLIENT=()
CLIENT_NS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["client_netns"] or "")' "$DIR/cluster.json")
[ -n "$CLIENT_NS" ] && IN_CLIENT=(ip netns exec "$CLIENT_NS")
read -r RHOST RPORT < <(python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["nodes"][0]["addresses"]["redis"]
h, p = a.rsplit(":", 1)
print(h, p)' "$DIR/cluster.json")

echo
echo "== native client library: 8 closed-loop clients, 50% SET / 50% GET, 5 s"
"${IN_CLIENT[@]}" "$W" load --dir "$DIR" --clients 8 --duration-ms 5000

echo
echo "== redis-benchmark through replica 1 ($RHOST:$RPORT; a follower forwards writes to the leader)"
"${IN_CLIENT[@]}" redis-benchmark -h "$RHOST" -p "$RPORT" -t set,get,incr -n 20000 -c 8 -q \
  | tr '\r' '\n' | grep 'requests per second'

echo
echo "== redis-cli"
for cmd in "set greeting hello" "get greeting" "incrby visits 3" "set session:1 x px 2000" "pttl session:1" "dbsize"; do
  # shellcheck disable=SC2086
  printf '%-28s -> %s\n' "$cmd" "$("${IN_CLIENT[@]}" redis-cli -h "$RHOST" -p "$RPORT" $cmd)"
done

echo
"$W" status --dir "$DIR"
echo
"$W" down --dir "$DIR"
