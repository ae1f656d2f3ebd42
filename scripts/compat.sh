#!/usr/bin/env bash
# `make compat` (not part of `make test`): Redis 7.0.15's own test suite and memcached's
# `memccapable -a` / `-b` against the leader and a follower of a local 3-replica cluster and
# against real redis-server and memcached (installed through apt when missing), in one run;
# writes the table to docs/compatibility.md.
#
# env: REDIS_TESTS  the suite runner's directory (holds `run`)   [../shared/redis-tests]
#      WAVERUNNER   the binary                                   [target/release/waverunner]
#      BASE_PORT    first of the ports used                      [27000]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
W="${WAVERUNNER:-$ROOT/target/release/waverunner}"
REDIS_TESTS="${REDIS_TESTS:-$ROOT/../shared/redis-tests}"
BASE="${BASE_PORT:-27000}"
[ -x "$REDIS_TESTS/run" ] || {
  echo "compat: Redis's suite runner not found at $REDIS_TESTS/run; set REDIS_TESTS" >&2
  exit 2
}
missing=()
for p in redis-server memcached tcl libmemcached-tools; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "compat: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi

WORK=$(mktemp -d)
DIR=$WORK/cluster
REDIS_PORT=$((BASE + 900))
MC_PORT=$((BASE + 901))
cleanup() {
  "$W" down --dir "$DIR" >/dev/null 2>&1 || true
  [ -f "$WORK/redis.pid" ] && kill "$(cat "$WORK/redis.pid")" 2>/dev/null || true
  [ -f "$WORK/mc.pid" ] && kill "$(cat "$WORK/mc.pid")" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== a 3-replica cluster on loopback (data plane off, memory durability)"
"$W" up --dir "$DIR" --nodes 3 --netns off --dataplane off --durability memory \
  --base-port "$BASE" >/dev/null
read -r LEADER FOLLOWER < <(python3 - "$DIR" "$W" <<'PY'
import json, subprocess, sys
out = subprocess.run([sys.argv[2], "status", "--dir", sys.argv[1], "--json"],
                     capture_output=True, text=True, check=True).stdout
st = [s for s in json.loads(out) if s]
leader = next(s for s in st if s["role"] == "leader")
follower = next(s for s in st if s["role"] == "follower")
print(leader["id"], follower["id"])
PY
)
addr() { # addr ID redis|memcache
  python3 -c 'import json,sys; n=[n for n in json.load(open(sys.argv[1]))["nodes"] if n["id"]==int(sys.argv[2])][0]; print(n["addresses"][sys.argv[3]])' \
    "$DIR/cluster.json" "$1" "$2"
}

echo "== real redis-server and memcached"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
  >"$WORK/redis.log" 2>&1 &
echo $! >"$WORK/redis.pid"
as_user=()
[ "$(id -u)" = 0 ] && as_user=(-u nobody)  # memcached refuses to run as root
memcached "${as_user[@]}" -l 127.0.0.1 -p "$MC_PORT" -U 0 >"$WORK/mc.log" 2>&1 &
echo $! >"$WORK/mc.pid"
sleep 0.5

suite() { # suite NAME HOST:PORT
  local h=${2%:*} p=${2##*:}
  echo "== Redis's suite against $1 ($2)"
  OUT="$WORK/suite-$1" "$REDIS_TESTS/run" "$h" "$p" >"$WORK/suite-$1.log" 2>&1 || true
  tail -1 "$WORK/suite-$1.log"
}
suite redis "127.0.0.1:$REDIS_PORT"
suite leader "$(addr "$LEADER" redis)"
suite follower "$(addr "$FOLLOWER" redis)"

capable() { # capable NAME HOST:PORT
  local h=${2%:*} p=${2##*:}
  for m in a b; do
    echo "== memccapable -$m against $1 ($2)"
    timeout 120 memccapable -h "$h" -p "$p" -"$m" -t 2 >"$WORK/mc-$1-$m.log" 2>&1 || true
    tail -1 "$WORK/mc-$1-$m.log"
  done
}
capable memcached "127.0.0.1:$MC_PORT"
capable leader "$(addr "$LEADER" memcache)"
capable follower "$(addr "$FOLLOWER" memcache)"

python3 scripts/compat_report.py "$WORK" "$(git rev-parse --short HEAD)" >docs/compatibility.md
echo "== wrote docs/compatibility.md"
