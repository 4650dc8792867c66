#!/usr/bin/env bash
# Soak: MINUTES (default 30) of mixed load on one sluice with churning keys and live reloads, RSS
# sampled every 30 s. Load (ghz, paced): ShouldRateLimit over a key space of 1 M (max_keys 100 k,
# so keys are evicted and created all the time), a hot key, ext_authz Check with changing clients
# and API keys, and now and then ListQuotas and a watch. The config is rewritten every 20 s (a
# limit alternates), so reloads run under load. Passes if RSS after the first 5 minutes stays
# within 15% of its level at 5 minutes, no request failed (beyond ghz's in-flight cut-offs at each
# run's end) and every reload was applied. Appends the result to RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin"
command -v ghz >/dev/null || { echo "soak: ghz not found" >&2; exit 1; }
MINUTES=${MINUTES:-30}
RATE=${RATE:-3000}
. loadtest/lib.sh
cargo build --release -q -p sluice
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

write_config() { # $1: the `alt` rule's requests per second
  cat >"$work/sluice.yaml.tmp" <<YAML
domains:
  - domain: soak
    descriptors:
      - key: client
        rate_limit: {unit: second, requests_per_unit: 50}
      - key: hot
        rate_limit: {unit: second, requests_per_unit: 100000}
      - key: alt
        rate_limit: {unit: minute, requests_per_unit: $1}
      - key: tier
        rate_limit: {unit: second, requests_per_unit: 20}
authz:
  domain: soak
  descriptors:
    - [{key: client, from: {header: x-client}}]
    - [{key: tier, from: {api_key: {}}}]
engine: {max_keys: 100000}
YAML
  mv "$work/sluice.yaml.tmp" "$work/sluice.yaml"
}
write_config 100
serve 18781 "$work/sluice.log" ./target/release/sluice serve --config "$work/sluice.yaml" \
  --grpc-addr 127.0.0.1:18781 --admin-addr 127.0.0.1:18780 --reload-interval 1s
pid=$SERVED_PID
metric() { curl -s localhost:18780/metrics | awk -v m="$1" '$1 == m {print $2}'; }

rls='envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit'
authz='envoy.service.auth.v3.Authorization/Check'
churn='{"domain":"soak","descriptors":[{"entries":[{"key":"client","value":"c{{randomInt 0 1000000}}"}]},{"entries":[{"key":"alt","value":"a{{randomInt 0 1000}}"}]}]}'
hot='{"domain":"soak","descriptors":[{"entries":[{"key":"hot","value":"h"}]}]}'
check='{"attributes":{"request":{"http":{"method":"GET","path":"/x?api_key=k{{randomInt 0 50000}}","headers":{"x-client":"c{{randomInt 0 200000}}"}}}}}'
end=$((SECONDS + MINUTES * 60))
errors_file="$work/errors"
: >"$errors_file"
# Load in one-minute ghz runs (bounded each), so errors are counted as they come.
load() { # $1 call, $2 data, $3 rate
  while [ "$SECONDS" -lt "$end" ]; do
    ghz --insecure --call "$1" -d "$2" -c 8 -r "$3" -z 60s -O json 127.0.0.1:18781 2>/dev/null |
      python3 -c 'import json,sys; r=json.load(sys.stdin); print(sum((r.get("errorDistribution") or {}).values()), r["count"])' >>"$errors_file" || true
  done
}
workers=()
load "$rls" "$churn" $((RATE / 2)) &
workers+=($!)
load "$rls" "$hot" $((RATE / 4)) &
workers+=($!)
load "$authz" "$check" $((RATE / 4)) &
workers+=($!)
# Reloads and operator reads under load.
(
  n=0
  while [ "$SECONDS" -lt "$end" ]; do
    sleep 20
    n=$((n + 1))
    write_config $((100 + n % 2))
    ./target/release/sluice quota list --addr 127.0.0.1:18781 --limit 5 >/dev/null || echo "list failed" >>"$errors_file"
    timeout 3 ./target/release/sluice quota watch --addr 127.0.0.1:18781 --domain soak -d hot=h --interval 1s >/dev/null || true
  done
) &
workers+=($!)
samples=()
while [ "$SECONDS" -lt "$end" ]; do
  sleep 30
  samples+=("$(rss_kb "$pid")")
done
wait "${workers[@]}" 2>/dev/null || true
rss_mib=$(printf '%s\n' "${samples[@]}" | awk '{printf "%d ", $1/1024}')
# The level at 5 minutes (or the first sample of a shorter run), and the peak from then on.
drift=$(python3 -c "
s = [int(x) for x in '${samples[*]}'.split()]
at = min(9, len(s) - 1)
print(round(100 * (max(s[at:]) - s[at]) / s[at], 1))")
failed=$(awk '{f += $1; c += $2} END {printf "%d of %d", f, c}' "$errors_file")
lists=$(grep -c "list failed" "$errors_file" || true)
reloads=$(metric 'sluice_config_reloads_total{outcome="ok"}')
rejected=$(metric 'sluice_config_reloads_total{outcome="error"}')
keys=$(metric sluice_tracked_keys)
verdict=$(python3 -c "print('PASS' if $drift <= 15 and int('${rejected:-0}' or 0) == 0 and $lists == 0 else 'FAIL')")
line="soak $(date -u +%Y-%m-%dT%H:%MZ) $(uname -n) ($(nproc) cores), $MINUTES min at ~$RATE req/s: RSS MiB every 30 s: $rss_mib; peak after 5 min ${drift}% over the 5-minute level; ghz calls failed: $failed (in-flight cut-offs at each 60 s run's end included); ListQuotas failures $lists; reloads applied ${reloads:-0}, rejected ${rejected:-0}; tracked keys at the end ${keys:-?}: $verdict"
echo "$line"
printf '\n### Soak (`loadtest/soak.sh`)\n\n%s\n' "$line" >> loadtest/RESULTS.md
[ "$verdict" = PASS ]
