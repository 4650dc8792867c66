#!/usr/bin/env bash
# P2: ShouldRateLimit and Check over gRPC with ghz (concurrency 50), against sluice and against a
# no-op handler on the same tonic stack, in the same run. Prints and appends to RESULTS.md.
# Needs ghz: go install github.com/bojand/ghz/cmd/ghz@latest (looked up on PATH and ~/go/bin).
# "errors" are calls in flight when ghz's -z duration ends ("transport is closing"), on both servers.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin"
command -v ghz >/dev/null || { echo "p2: ghz not found (go install github.com/bojand/ghz/cmd/ghz@latest)" >&2; exit 1; }
DURATION=${DURATION:-10s}
. loadtest/lib.sh
cargo build --release -q -p sluice -p sluice-loadtest
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
bench_servers "$work" 18281 18280 18181


# Prints "rps p99_ms errors" for one ghz run.
run() {
  ghz --insecure --call "$1" -d "$2" -c 50 -z "$DURATION" -O json "$3" 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)
p99 = [x["latency"] for x in r["latencyDistribution"] if x["percentage"] == 99][0] / 1e6
errors = sum((r.get("errorDistribution") or {}).values())
print("%.0f %.2f %d" % (r["rps"], p99, errors))'
}

{
  printf '\n### P2, %s, %s (%s cores), ghz -c 50 -z %s%s\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" "$DURATION" "${SLUICE_BIN:+, SLUICE_BIN=$SLUICE_BIN}"
  printf '| scenario | no-op req/s | sluice req/s | ratio | no-op p99 | sluice p99 | p99 ratio | errors no-op / sluice |\n|---|---|---|---|---|---|---|---|\n'
} >> loadtest/RESULTS.md
for scenario in "ShouldRateLimit, 1 hot key|$rls|$hot" "ShouldRateLimit, 100k keys|$rls|$many" "Check, 1 hot key|$authz|$check"; do
  IFS='|' read -r name call data <<<"$scenario"
  read -r noop_rps noop_p99 noop_err <<<"$(run "$call" "$data" 127.0.0.1:18181)"
  read -r s_rps s_p99 s_err <<<"$(run "$call" "$data" 127.0.0.1:18281)"
  line=$(python3 -c 'import sys; n, a, b, pa, pb, e = sys.argv[1:]; print("| %s | %s | %s | %.1f%% | %s ms | %s ms | %.2fx | %s |" % (n, a, b, 100 * float(b) / float(a), pa, pb, float(pb) / float(pa), e))' \
    "$name" "$noop_rps" "$s_rps" "$noop_p99" "$s_p99" "$noop_err / $s_err")
  echo "$line"
  echo "$line" >> loadtest/RESULTS.md
done
