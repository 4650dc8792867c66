#!/usr/bin/env bash
# P6: memory. RSS of an idle sluice, then after 1 M distinct keys (bytes per key), then with
# max_keys 200 k under another 1 M new keys (memory stays bounded), then 100 k keys whose values are
# 1 KiB each (the worst case per key: long values are kept in keys as prefix + digest). Keys arrive
# over gRPC from ghz.
# Prints and appends to RESULTS.md. Needs ghz (go install github.com/bojand/ghz/cmd/ghz@latest).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin"
command -v ghz >/dev/null || { echo "p6: ghz not found" >&2; exit 1; }
KEYS=${KEYS:-1000000}
. loadtest/lib.sh
cargo build --release -q -p sluice
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
tracked() { curl -s "localhost:$1/metrics" | awk '/^sluice_tracked_keys / {print $2}'; }
rls='envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit'
data='{"domain":"mem","descriptors":[{"entries":[{"key":"client","value":"client-{{.RequestNumber}}"}]}]}'

start() { # $1 max_keys, $2 grpc port, $3 admin port
  printf 'domain: mem\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 100}\n' > "$work/limits.yaml"
  printf 'include: [limits.yaml]\nengine: {max_keys: %s}\n' "$1" > "$work/sluice-$1.yaml"
  serve "$2" "$work/sluice-$1.log" ./target/release/sluice serve --config "$work/sluice-$1.yaml" --grpc-addr "127.0.0.1:$2" --admin-addr "127.0.0.1:$3" --reload-interval 0s
  pid=$SERVED_PID
}

start 2000000 18381 18380; sleep 1
idle=$(rss_kb "$pid")
ghz --insecure --call "$rls" -d "$data" -c 50 -n "$KEYS" 127.0.0.1:18381 >/dev/null 2>&1
full=$(rss_kb "$pid"); keys=$(tracked 18380)
per_key=$(( (full - idle) * 1024 / keys ))
kill "$pid"

start 200000 18481 18480; sleep 1
ghz --insecure --call "$rls" -d "$data" -c 50 -n "$KEYS" 127.0.0.1:18481 >/dev/null 2>&1
bounded=$(rss_kb "$pid"); bounded_keys=$(tracked 18480)
kill "$pid"

LONG_KEYS=${LONG_KEYS:-100000}
start 2000000 18581 18580; sleep 1
long_idle=$(rss_kb "$pid")
pad=$(printf 'v%.0s' $(seq 1000))
long_data='{"domain":"mem","descriptors":[{"entries":[{"key":"client","value":"'"$pad"'-{{.RequestNumber}}"}]}]}'
ghz --insecure --call "$rls" -d "$long_data" -c 50 -n "$LONG_KEYS" 127.0.0.1:18581 >/dev/null 2>&1
long_full=$(rss_kb "$pid"); long_keys=$(tracked 18580)
long_per_key=$(( (long_full - long_idle) * 1024 / long_keys ))
kill "$pid"

line="P6 $(date -u +%Y-%m-%dT%H:%MZ) $(uname -n) ($(nproc) cores): RSS idle $((idle / 1024)) MiB; after $keys keys $((full / 1024)) MiB = $per_key bytes/key; with max_keys 200000 after $KEYS new keys: $bounded_keys tracked, RSS $((bounded / 1024)) MiB; $long_keys keys with 1 KiB values: RSS $((long_full / 1024)) MiB = $long_per_key bytes/key"
echo "$line"
printf '\n### P6 (`loadtest/p6.sh`)\n\n%s\n' "$line" >> loadtest/RESULTS.md
