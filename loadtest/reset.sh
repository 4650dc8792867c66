#!/usr/bin/env bash
# Reset → enforced on another sidecar (issue 25 item 12): two sidecars on standalone Redis and on
# a 3-master cluster; each round B is denied a key, A resets it (Quota API), and B is asked until
# it admits the key. p50/p90/p99 with `redis.push_resets` on and off, in the same run.
# Needs Docker and the redis:7.0 image (../shared/scripts/local-images.sh redis).
# Takes about 3 minutes with ROUNDS=200 (most of it the 1 s rounds without the bus).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-200}
TARGETS=${TARGETS:-"standalone cluster"}
cargo build --release -q -p sluice -p sluice-loadtest
printf '\n### Reset → enforced (`loadtest/reset.sh`), %s, %s (%s cores), %s\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" "$(git rev-parse --short HEAD)" >> loadtest/RESULTS.md
for target in $TARGETS; do
  args=(--rounds "$ROUNDS")
  [ "$target" = cluster ] && args+=(--cluster)
  { echo "$target:"; echo; ./target/release/reset-latency "${args[@]}"; echo; } | tee -a loadtest/RESULTS.md
done
