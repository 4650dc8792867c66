#!/usr/bin/env bash
# Real faults between sluice and Redis, each under load (4 sidecars, one hot key, L = 1000/s,
# offered 4000/s, 30 s; the fault from 10 s to 20 s): Redis paused, Redis restarted (connections
# drop, scripts gone: NOSCRIPT), and through Toxiproxy 50 ms of latency each way, connections reset,
# and links that stall; on a 3-master Redis Cluster, the hot key's slot migrated to another master
# and back (MOVED/ASK), and the hot key's master killed with a replica taking over. Each line:
# errors to callers, time over the global bound, p99 during the fault, time until every sidecar
# enforces the global limit again (or, on the cluster, how long any sidecar was on its fallback).
# Appends to RESULTS.md.
# Needs Docker (the redis:7.0 image) and Toxiproxy
# (go install github.com/Shopify/toxiproxy/v2/cmd/server@latest; SLUICE_TOXIPROXY=path overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice -p sluice-loadtest
printf '\n### Faults (`loadtest/faults.sh`), %s, %s (%s cores)\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" >> loadtest/RESULTS.md
for fault in ${FAULTS:-pause restart latency reset stall reshard failover}; do
  case $fault in
    reshard) where=(--cluster) ;;
    failover) where=(--cluster --replicas 1) ;;
    *) where=() ;;
  esac
  line=$(./target/release/accuracy --sidecars 4 --limit 1000 --offered 4000 --seconds 30 "${where[@]}" \
    --fault "$fault" --fault-at 10 --fault-until 20 | grep '^accuracy:')
  echo "$line"
  printf -- '- `%s`: %s\n' "$fault" "${line#accuracy: }" >> loadtest/RESULTS.md
done
