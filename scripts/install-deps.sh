#!/usr/bin/env bash
# Installs what building and testing Waverunner needs. Idempotent: installs only what is missing.
set -euo pipefail

apt_pkgs=(clang llvm libbpf-dev libelf-dev zlib1g-dev pkg-config linux-libc-dev gcc make iproute2 nftables redis-tools libmemcached-tools python3 python3-pip python3-pymemcache python3-redis python3-prometheus-client)
# Go builds the linearizability checker (tools/lincheck); the machine's own Go is fine.
command -v go >/dev/null 2>&1 || apt_pkgs+=(golang-go)
apt_pkgs+=(python3-matplotlib)  # scripts/plot_timeline.py: the `waverunner timeline` plots
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: cargo not found; install Rust with rustup (stable)" >&2
  exit 1
fi
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done

# redis-py 8 (Debian ships 4.3, which predates RESP3): the tests check that its default
# settings (HELLO 3) work. Installed beside the build, not into the system's Python.
REDIS_PY=8.0.0
REDIS_PY_DIR="$(cd "$(dirname "$0")/.." && pwd)/target/py/redis-py-$REDIS_PY"
if [ ! -f "$REDIS_PY_DIR/redis/__init__.py" ]; then
  echo "install-deps: installing redis-py $REDIS_PY into $REDIS_PY_DIR"
  rm -rf "$REDIS_PY_DIR.tmp"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$REDIS_PY_DIR.tmp" "redis==$REDIS_PY"
  mv "$REDIS_PY_DIR.tmp" "$REDIS_PY_DIR"
fi
