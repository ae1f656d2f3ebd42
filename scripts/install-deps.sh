#!/usr/bin/env bash
# Installs what building and testing Waverunner needs. Idempotent: installs only what is missing.
set -euo pipefail

apt_pkgs=(clang llvm libbpf-dev libelf-dev zlib1g-dev pkg-config linux-libc-dev gcc make iproute2 nftables redis-tools libmemcached-tools python3 python3-pymemcache python3-redis python3-prometheus-client)
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
