#!/usr/bin/env bash
# Issue 41: what hostile gRPC clients can make one sluice hold in memory. Each scenario of
# sluice_testkit::hostile::attack (partial messages, idle long-lived streams, unread answers, RLQS
# bucket floods, 256 connections, every bound at once from four loopback addresses) runs on a
# fresh release build; RSS before, at its peak, after the hold and after the clients left.
# With BASELINE_BIN=path/to/an/older/sluice, the same scenarios on it first, in the same sitting.
# Prints and appends to RESULTS.md. Takes 3-4 minutes (more with a baseline: a build without
# the bounds grows to GiBs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice --bin sluice -p sluice-loadtest --bin pin-memory
out=$(mktemp)
trap 'rm -f "$out"' EXIT
{
  echo
  echo "### Memory hostile clients can pin (pin-memory.sh, $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD))"
  echo
  if [ -n "${BASELINE_BIN:-}" ]; then
    echo "Baseline: \`$BASELINE_BIN\`"
    echo
    ./target/release/pin-memory --sluice "$BASELINE_BIN" "$@"
    echo
    echo "This build:"
    echo
  fi
  ./target/release/pin-memory --sluice ./target/release/sluice "$@"
} | tee "$out"
cat "$out" >> loadtest/RESULTS.md
