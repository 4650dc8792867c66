#!/usr/bin/env bash
# The long fuzz run: every target for MINUTES each (default 15, so an hour for the four), from the
# committed corpus (TARGETS="a b" for only some). Appends what ran and what it found to
# RESULTS.md. Crashing inputs stay in fuzz/artifacts/<target>/ (add them to
# fuzz/corpus/<target>/ once fixed, as regression seeds).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-15}
log=$(mktemp)
started=$(date -u +%Y-%m-%dT%H:%MZ)
status=0
scripts/fuzz.sh $((MINUTES * 60)) 2>&1 | tee "$log" || status=$?
runs=$(grep -E '^(fuzz:|stat::number_of_executed_units)' "$log" | paste -sd' ' | sed 's/stat::number_of_executed_units: /runs /g')
found=$([ "$status" -eq 0 ] && echo "no failing input" || grep -E 'found a failing input|panicked' "$log" | head -3 | paste -sd' ')
{
  printf '\n### Fuzzing (`loadtest/fuzz-long.sh`, %s min per target), %s, %s (%s cores)\n\n' "$MINUTES" "$started" "$(uname -n)" "$(nproc)"
  printf '%s\n\nResult: %s.\n' "$runs" "$found"
} >> loadtest/RESULTS.md
exit "$status"
