#!/usr/bin/env bash
# Cold keys (issue 14): Zipf(1) traffic over 10 000 and 1 000 000 keys of 50/s each, 4 sidecars,
# 4000 req/s for 30 s, standalone Redis and a 3-master cluster, with sluice's default batching
# ("none": a batch waits only for one on its way) and each `redis.batch_min_wait` in WAITS.
# Reports the per-key ideal, keys over B + L·t, Redis script calls (commands) and round trips (a
# batch of calls is one) per 100 decisions, and the harness's p99.
# Needs Docker and the redis:7.0 image (../shared/scripts/local-images.sh redis).
# Takes about 40 s per run: WAITS=none TARGETS=standalone KEYSETS=10000 for a quick one.
set -euo pipefail
cd "$(dirname "$0")/.."
. loadtest/lib.sh
WAITS=${WAITS:-"none 2ms 5ms 10ms"}
TARGETS=${TARGETS:-"standalone cluster"}
KEYSETS=${KEYSETS:-"10000 1000000"}
cargo build --release -q -p sluice -p sluice-loadtest
printf '\n### Cold keys (`loadtest/cold.sh`), %s, %s (%s cores)\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" >> loadtest/RESULTS.md
for target in $TARGETS; do
  for keys in $KEYSETS; do
    for wait in $WAITS; do
      args=(--sidecars 4 --limit 50 --offered 4000 --seconds 30 --keys "$keys")
      [ "$wait" != none ] && args+=(--batch-min-wait "$wait")
      [ "$target" = cluster ] && args+=(--cluster)
      echo "batch_min_wait $wait:"
      accuracy_run "${args[@]}"
    done
  done
done
