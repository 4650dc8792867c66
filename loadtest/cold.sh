#!/usr/bin/env bash
# Cold keys (issue 14): Zipf(1) traffic over 10 000 and 1 000 000 keys of 50/s each, 4 sidecars,
# 4000 req/s for 30 s, standalone Redis and a 3-master cluster, for each `redis.batch_linger` in
# LINGERS. Reports the per-key ideal, keys over B + L·t, Redis script calls (commands) and round
# trips (a batch of calls is one) per 100 decisions, and the harness's p99.
# Needs Docker and the redis:7.0 image (../shared/scripts/local-images.sh redis).
# Takes about 40 s per run: LINGERS="1ms" TARGETS=standalone for a quick one.
set -euo pipefail
cd "$(dirname "$0")/.."
LINGERS=${LINGERS:-"1us 1ms 2ms 5ms 10ms"}
TARGETS=${TARGETS:-"standalone cluster"}
KEYSETS=${KEYSETS:-"10000 1000000"}
cargo build --release -q -p sluice -p sluice-loadtest
printf '\n### Cold keys (`loadtest/cold.sh`), %s, %s (%s cores)\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" >> loadtest/RESULTS.md
for target in $TARGETS; do
  for keys in $KEYSETS; do
    for linger in $LINGERS; do
      args=(--sidecars 4 --limit 50 --offered 4000 --seconds 30 --keys "$keys" --batch-linger "$linger")
      [ "$target" = cluster ] && args+=(--cluster)
      line=$(./target/release/accuracy "${args[@]}" | grep '^accuracy:')
      echo "linger $linger: $line"
      printf -- '- `accuracy %s`\n  %s\n' "${args[*]}" "${line#accuracy: }" >> loadtest/RESULTS.md
    done
  done
done
