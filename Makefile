# Waverunner: the two commands a newcomer runs are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
# Seeds per (nodes, durability, data plane) configuration that `make test` simulates.
SIM_SEEDS ?= 1..501

.PHONY: run test deps build lint unit sim-test soak bench-scale bench-peers bench-frontend compat

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --release --bin waverunner

## The main job: a local 3-replica cluster serving a workload through the native client and
## redis-cli, its status, then down (scripts/demo.sh).
run: build
	scripts/demo.sh

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	@# The replication library stays an SMR library: no client protocol, no libbpf without `xdp`.
	@if $(CARGO) tree -p waverunner-node -e normal,build | grep -E 'libbpf|waverunner-(kv|client)'; then \
	  echo "lint: waverunner-node must not depend on the crates above" >&2; exit 1; fi

unit: deps
	$(CARGO) test --workspace

## Every configuration: 3 and 5 replicas, memory and fsync, the data plane on and off.
sim-test: build
	for n in 3 5; do for d in memory fsync; do for p in on off; do \
	  target/release/waverunner sim --seeds $(SIM_SEEDS) --nodes $$n --durability $$d --dataplane $$p || exit 1; \
	done; done; done

## Every test: formatting, lints, unit and integration tests, the simulator.
test: lint unit sim-test

## A long soak of the simulator (not part of CI).
soak: build
	for n in 3 5; do for d in memory fsync; do for p in on off; do \
	  target/release/waverunner sim --seeds 1..50000 --nodes $$n --durability $$d --dataplane $$p || exit 1; \
	done; done; done

## Millions of keys in a local cluster against redis-server: load rate, memory per key, idle
## CPU, elections, write latency during a snapshot, snapshot and catch-up speed
## (docs/bench.md). Takes an hour or more at the default sizes; not part of `make test`.
## Choose with BENCH_SCALE_ARGS, e.g. BENCH_SCALE_ARGS="--keys 1M --idle-secs 30".
BENCH_SCALE_ARGS ?=
bench-scale: build
	target/release/waverunner bench scale $(BENCH_SCALE_ARGS)

## Redis 7 (async and SET + WAIT 1), etcd and waverunner off/udp/xdp side by side in network
## namespaces (docs/bench.md); about two minutes; root; installs the peers with apt when
## missing. Not part of `make test`. Writes docs/figures/peers.png and its CSV.
BENCH_PEERS_ARGS ?=
bench-peers: build
	target/release/waverunner bench peers --plot docs/figures/peers.png $(BENCH_PEERS_ARGS)

## The RESP front-end's event mechanism alone, epoll (mio) against io_uring, without
## replication, in a namespace pair (docs/bench.md "bench frontend"); about a minute; root.
BENCH_FRONTEND_ARGS ?=
bench-frontend: build
	target/release/waverunner bench frontend $(BENCH_FRONTEND_ARGS)

## Redis's own suite and memccapable against a leader, a follower, real Redis and memcached;
## writes docs/compatibility.md (not part of `make test`; REDIS_TESTS=dir of the suite's `run`).
compat: build
	scripts/compat.sh
