#!/usr/bin/env bash
# P17 / issue 29: CPU per request of sluice against every peer and the no-op, in one sitting
# (loadtest/src/cpu_peers.rs): sluice (embedded store, Redis, Redis with mode: exact), Limitador
# (memory, Redis, Redis cached), envoyproxy/ratelimit (Redis), the no-op on sluice's gRPC server
# and on tonic's; one hot key and 100 000 keys; CPU, writes and context switches per request,
# req/s, p50/p99, RSS, Redis calls and Redis CPU per decision; three rounds by default.
# Needs Docker and the redis:7.0 image, ghz (go install github.com/bojand/ghz/cmd/ghz@latest),
# envoyproxy/ratelimit (go install github.com/envoyproxy/ratelimit/src/service_cmd@<version>) and
# LIMITADOR_BIN, a Limitador server built from its source (no registry here serves one), with
# LIMITADOR_COMMIT naming the commit it was built from. Takes about 12 minutes with three rounds.
# Arguments go to the binary (--rounds, --requests, --only, --rate: a fixed request rate instead
# of saturation, for latency at a load every server sustains). Prints and appends to RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice -p sluice-loadtest
out=$(./target/release/cpu-peers "$@")
echo "$out"
ratelimit=$(go version -m "$HOME/go/bin/service_cmd" 2>/dev/null | awk '$1 == "mod" {print $3}')
{
  printf '\n### CPU per request against the peers (`loadtest/cpu-peers.sh %s`), %s, %s (%s cores)\n\n' \
    "$*" "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)"
  printf 'sluice %s; Limitador %s (LIMITADOR_BIN); envoyproxy/ratelimit %s; ghz -c 50 on one connection, a warm-up of 20 000, then the requests measured; each figure the range over the rounds, the ratio the median against the no-op on sluice'"'"'s server.\n\n' \
    "$(git rev-parse --short HEAD)" "${LIMITADOR_COMMIT:-at an unrecorded commit}" "${ratelimit:-(not installed)}"
  printf '| server | load | CPU µs/request | writes/request | context switches/request | req/s | p50 / p99 ms | RSS MiB | Redis calls/decision | Redis CPU µs/decision | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n'
  echo "$out" | sed -n '/^cpu-peers-table:$/,$p' | tail -n +2
} >> loadtest/RESULTS.md
