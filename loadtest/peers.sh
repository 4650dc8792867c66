#!/usr/bin/env bash
# Issue 14, target 4: sluice and envoyproxy/ratelimit in the same run, in the shape of
# envoyproxy/ratelimit's published benchmark: p99 at 500 req/s with 1, 2 and 10 descriptors per
# request on a 3-master Redis Cluster, saturated req/s (ghz -c 50), and Redis commands per decision.
# Needs Docker and the redis:7.0 image, ghz, and envoyproxy/ratelimit:
#   go install github.com/envoyproxy/ratelimit/src/service_cmd@latest
# Takes about 4 minutes. Prints and appends the table to RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice -p sluice-loadtest
out=$(./target/release/peers "$@")
echo "$out"
ratelimit=$(go version -m "$HOME/go/bin/service_cmd" 2>/dev/null | awk '$1 == "mod" {print $3}')
{
  printf '\n### Peers (`loadtest/peers.sh %s`), %s, %s (%s cores), envoyproxy/ratelimit %s\n\n' "$*" "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" "${ratelimit:-unknown}"
  printf '| service | descriptors per request | p99 at 500 req/s | saturated req/s (ghz -c 50) | Redis commands per decision |\n|---|---|---|---|---|\n'
  echo "$out" | sed -n '/^peers-table:$/,$p' | tail -n +2
} >> loadtest/RESULTS.md
