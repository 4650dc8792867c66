#!/usr/bin/env bash
# Issue 13: every algorithm (token_bucket, fixed_window, sliding_window) in the accuracy harness,
# 4 sidecars on a standalone Redis and on a 3-master Redis Cluster, L = 1000 per second, offered
# 4000 per second, 30 s each. Windows are checked per epoch-aligned window (never over L counting
# only what surely fell in the window; admitted against min(offered, L) per whole window); token
# buckets against B + L·t. Appends the lines to loadtest/RESULTS.md. Needs Docker and the redis
# image (../shared/scripts/local-images.sh redis). Takes about 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice -p sluice-loadtest
printf '\n### Algorithms in the accuracy harness, %s, %s (%s cores)\n\n' \
  "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" >> loadtest/RESULTS.md
for target in "" "--cluster"; do
  for algorithm in token_bucket fixed_window sliding_window; do
    args="--sidecars 4 --limit 1000 --offered 4000 --seconds 30 --algorithm $algorithm $target"
    # shellcheck disable=SC2086
    line=$(./target/release/accuracy $args | grep '^accuracy:')
    echo "$line"
    printf -- '- `accuracy %s`\n  %s\n' "$args" "${line#accuracy: }" >> loadtest/RESULTS.md
  done
done
