#!/usr/bin/env bash
# ListQuotas on a large table: how long a page takes, and what it does to decisions meanwhile.
# Loads KEYS distinct keys (default 500 000) with ghz, then runs a steady 2 000 req/s of
# ShouldRateLimit for 15 s while `sluice quota list --limit 1` runs back to back; prints the time of
# each listing and the decisions' latency (p99, slowest). Appends the result to RESULTS.md.
# SLUICE_BIN names another build to measure (an A/B in one sitting). Needs ghz.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin"
command -v ghz >/dev/null || { echo "list: ghz not found" >&2; exit 1; }
KEYS=${KEYS:-500000}
BIN=${SLUICE_BIN:-./target/release/sluice}
. loadtest/lib.sh
cargo build --release -q -p sluice
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
printf 'domains:\n  - domain: mem\n    descriptors:\n      - key: client\n        rate_limit: {unit: second, requests_per_unit: 1000000}\nengine: {max_keys: 2000000}\n' > "$work/sluice.yaml"
serve 18681 "$work/sluice.log" "$BIN" serve --config "$work/sluice.yaml" --grpc-addr 127.0.0.1:18681 --admin-addr 127.0.0.1:18680 --reload-interval 0s
rls='envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit'
many='{"domain":"mem","descriptors":[{"entries":[{"key":"client","value":"client-{{.RequestNumber}}"}]}]}'
hot='{"domain":"mem","descriptors":[{"entries":[{"key":"client","value":"hot"}]}]}'
ghz --insecure --call "$rls" -d "$many" -c 50 -n "$KEYS" 127.0.0.1:18681 >/dev/null 2>&1
ghz --insecure --call "$rls" -d "$hot" -c 10 -r 2000 -z 15s -O json 127.0.0.1:18681 > "$work/ghz.json" 2>/dev/null &
load=$!
sleep 1
times=()
end=$((SECONDS + 12))
while [ "$SECONDS" -lt "$end" ]; do
  t0=$(date +%s%N)
  "$BIN" quota list --addr 127.0.0.1:18681 --limit 1 >/dev/null
  times+=($(( ($(date +%s%N) - t0) / 1000000 )))
done
wait "$load"
read -r p99 slowest <<<"$(python3 -c '
import json
r = json.load(open("'"$work/ghz.json"'"))
p99 = [x["latency"] for x in r["latencyDistribution"] if x["percentage"] == 99][0] / 1e6
print("%.2f %.2f" % (p99, r["slowest"] / 1e6))')"
sorted=$(printf '%s\n' "${times[@]}" | sort -n | tr '\n' ' ')
line="list $(date -u +%Y-%m-%dT%H:%MZ) $(uname -n) ($(nproc) cores), $BIN, $KEYS keys: ${#times[@]} listings of one key, ms (sorted): $sorted; ShouldRateLimit at 2 000 req/s meanwhile: p99 $p99 ms, slowest $slowest ms"
echo "$line"
printf '\n### ListQuotas on a large table (`loadtest/list.sh`)\n\n%s\n' "$line" >> loadtest/RESULTS.md
