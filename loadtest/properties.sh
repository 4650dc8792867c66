#!/usr/bin/env bash
# The property searches: the property tests CI runs from a fixed seed, drawn anew here with many
# more cases (each is an `#[ignore]`d twin of a CI property). Appends what ran and what it found
# (each failing search's minimal input) to RESULTS.md; exits 1 if any search failed.
#   FLEETS=1500 BOUND_FLEETS=1500 HOLDS=512 loadtest/properties.sh
# - the fleet never over B + L·t, both lease kinds (never_over_the_bound_search);
# - no false denial well under the limit while B >= n, token leases
#   (no_false_denial_well_under_the_limit_while_the_burst_covers_the_fleet);
# - never more than N holds in flight, no slot lost (never_more_than_n_in_flight_and_no_slot_lost_search).
# About 2 minutes at the defaults (release build, one core per search). A search's
# proptest-regressions file is deleted (the holds' committed seeds restored) before and after:
# a found case goes into the test file as a named case once fixed, not into a regressions file.
set -uo pipefail
cd "$(dirname "$0")/.."
FLEETS=${FLEETS:-3000}
BOUND_FLEETS=${BOUND_FLEETS:-1500}
HOLDS=${HOLDS:-512}
started=$(date -u +%Y-%m-%dT%H:%MZ)
status=0
rows=()
holds_seeds=crates/engine/proptest-regressions/engine/tests/holds/props.txt
clean() {
  rm -f crates/fleetsim/tests/*.proptest-regressions
  git checkout -q -- "$holds_seeds"
}

# search NAME CASES CARGO-ARGS...: one ignored property with PROPTEST_CASES=CASES.
search() {
  local name=$1 cases=$2
  shift 2
  local log
  log=$(mktemp)
  clean
  local began=$SECONDS
  if PROPTEST_CASES=$cases cargo test --release -q --locked "$@" "$name" -- --ignored --exact >"$log" 2>&1; then
    rows+=("| \`$name\` | $cases | passed | $((SECONDS - began)) s |")
  else
    status=1
    local found
    found=$(grep -m1 -E 'Test failed|panicked' "$log" | cut -c1-300)
    local input
    input=$(sed -n '/minimal failing input/,/successes:/p' "$log" | grep -v 'successes:' | tr -s ' \t\n' ' ' | cut -c1-600)
    rows+=("| \`$name\` | $cases | **failed**: ${found//|/\\|} ${input//|/\\|} | $((SECONDS - began)) s |")
  fi
  rm -f "$log"
}

search never_over_the_bound_search "$BOUND_FLEETS" -p sluice-fleetsim --test properties
search no_false_denial_well_under_the_limit_while_the_burst_covers_the_fleet "$FLEETS" -p sluice-fleetsim --test properties
search engine::tests::holds::props::never_more_than_n_in_flight_and_no_slot_lost_search "$HOLDS" -p sluice-engine --lib
clean
{
  printf '\n### Property searches (`loadtest/properties.sh`), %s, %s (%s cores), %s\n\n' \
    "$started" "$(uname -n)" "$(nproc)" "$(git describe --always --dirty)"
  printf '| search | cases | result | time |\n|---|---|---|---|\n'
  printf '%s\n' "${rows[@]}"
} | tee -a loadtest/RESULTS.md
exit "$status"
