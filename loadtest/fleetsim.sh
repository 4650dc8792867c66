#!/usr/bin/env bash
# The fleet simulator (crates/fleetsim, issue 42): sluice's engines, N per run, on one
# simulated store, against an exact limiter on the same arrivals; every scenario grid of
# loadtest/fleetsim/*.yaml (or the files given), release build, the table appended to
# RESULTS.md. Simulated numbers: what 2 cores cannot run as processes (1 000 sidecars).
# Deterministic: the same commit and seeds print the same table (only the real time differs).
#   loadtest/fleetsim.sh [FILE...] [-- fleetsim options, e.g. --only fleet]
set -euo pipefail
cd "$(dirname "$0")/.."
files=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do files+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
[ ${#files[@]} -gt 0 ] || files=(loadtest/fleetsim/*.yaml)
cargo build --release -q --locked -p sluice-fleetsim
out=$(mktemp)
target/release/fleetsim "${files[@]}" "$@" | tee "$out"
{
  printf '\n### Fleet simulator (`loadtest/fleetsim.sh %s`), %s, %s (%s cores), %s\n\n' \
    "${files[*]}" "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" "$(git rev-parse --short HEAD)"
  cat "$out"
} >> loadtest/RESULTS.md
rm -f "$out"
