#!/usr/bin/env bash
# Fleet scale (issue 28): one key (L=100/s, B=100) and the same total load spread over N sidecar
# processes on one Redis (and a 3-master cluster), 60 s per run, release build. Each run is the
# accuracy harness (`target/release/accuracy`); each sidecar is its own sluice process, as it is
# deployed (128 processes fit on 2 cores at this load: ~30 MiB each).
# Reports Redis script calls per 100 decisions and per key-second (all of them, and those on
# the keys: without heartbeats, at most 20 a second fleet-wide), of them lease returns, admitted
# against B + L·t, denials (and those under the ideal: a key under its limit denied), decisions
# by fallback, the harness's p99, and the second half of the run alone (calls on the keys a
# second, admitted): a starved key's queue of turns takes about N/10 s to form (12.8 s at 128).
# ARRIVALS="spread step": each sidecar's requests start at a phase of their own (spread), or
# every sidecar sends its k-th request at the same moment (step: issue 42's table). Each row
# counts the decisions made by fallback (a CPU-starved sidecar or Redis too slow: on 2 cores
# with 128 sidecars these must not pass for the algorithm's).
#   NS="2 8 32 128"        sidecar counts
#   LOADS="400 80"         offered req/s: 4x the limit (starved) and 80% of it (under the limit)
#   TARGETS="standalone cluster"
#   KEYS=1                 1: one key; more: Zipf(1) over that many keys of the same limit
#   RATE_LEASE_TTL=off     engine.rate_lease_ttl of the sidecars: off leases tokens only (default:
#                          sluice's, leases of rate with a 10 s ttl)
#   COLD_COUNT=1           traffic from the moment each sidecar reaches Redis, while the fleet may
#                          still be counting itself (default: once every sidecar counts all N)
# Needs Docker and the redis:7.0 image (../shared/scripts/local-images.sh redis).
# Takes about 75 s per run (start-up of 128 sidecars included): 40 min for the whole table.
set -euo pipefail
cd "$(dirname "$0")/.."
. loadtest/lib.sh
NS=${NS:-"2 8 32 128"}
LOADS=${LOADS:-"400 80"}
TARGETS=${TARGETS:-"standalone cluster"}
KEYS=${KEYS:-1}
ARRIVALS=${ARRIVALS:-"spread step"}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-60}
cargo build --release -q -p sluice -p sluice-loadtest
SLUICE_BIN=${SLUICE_BIN:-target/release/sluice}
printf '\n### Fleet (`loadtest/fleet.sh`), %s, %s (%s cores), %s\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" \
  "$(uname -n)" "$(nproc)" "$(git rev-parse --short HEAD)" >> loadtest/RESULTS.md
for target in $TARGETS; do
  for load in $LOADS; do
    for n in $NS; do
      for arrivals in $ARRIVALS; do
        args=(--sluice "$SLUICE_BIN" --sidecars "$n" --limit 100 --burst 100 --offered "$load"
          --seconds "$SECONDS_PER_RUN" --keys "$KEYS")
        [ "$target" = cluster ] && args+=(--cluster)
        [ "$arrivals" = step ] && args+=(--in-step)
        [ -n "${RATE_LEASE_TTL:-}" ] && args+=(--rate-lease-ttl "$RATE_LEASE_TTL")
        [ -n "${COLD_COUNT:-}" ] && args+=(--cold-count)
        accuracy_run "${args[@]}"
      done
    done
  done
done
