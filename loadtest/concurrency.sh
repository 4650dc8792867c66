#!/usr/bin/env bash
# P14: a concurrency limit under steady load, through a real Envoy 1.40 (wrk) with the rate-limit
# filter acquiring a slot at each request's start and releasing it when its stream ends (the
# deploy/examples/concurrency convention), sluice on a real Redis. In the same run: Envoy with no
# filter, and the same filter with a plain rate limit on the same sluice. Reports the p50 each adds
# over plain Envoy (1 connection), req/s at 16 connections, and Redis script calls per 100
# decisions (acquires + releases) from INFO commandstats. Prints and appends to RESULTS.md.
# Needs wrk and redis-server (apt-get install wrk redis-server) and Envoy (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "concurrency: $tool not found (apt-get install wrk redis-server)" >&2; exit 1; }
done
envoy=${SLUICE_ENVOY_BIN:-.tools/bin/envoy}
[ -x "$envoy" ] || { echo "concurrency: no Envoy at $envoy (run scripts/setup.sh)" >&2; exit 1; }
DURATION=${DURATION:-10s} CONNECTIONS=${CONNECTIONS:-16}
. loadtest/lib.sh
cargo build --release -q -p sluice
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT

redis_port=16391
serve "$redis_port" "$work/redis.log" redis-server --port "$redis_port" --save '' --appendonly no
pids+=("$SERVED_PID")
cat >"$work/sluice.yaml" <<YAML
domains:
  - domain: bench
    descriptors:
      - key: tenant
        rate_limit: {concurrency: 64, hold_timeout: 60s, name: in_flight}
      - key: client
        rate_limit: {unit: second, requests_per_unit: 1000000000, name: rate}
redis: {url: "redis://127.0.0.1:$redis_port"}
YAML
serve 18781 "$work/sluice.log" ./target/release/sluice serve --config "$work/sluice.yaml" \
  --grpc-addr 127.0.0.1:18781 --admin-addr 127.0.0.1:18780 --reload-interval 0s
pids+=("$SERVED_PID")

# 18700: no filter; 18701: a slot held per request (acquire, release at stream end); 18702: the
# rate limit (x-client → client, the route's rate_limits as in p4.sh).
hold_filter=$(cat <<'YAML'
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: bench
              timeout: 1s
              failure_mode_deny: true
              rate_limit_service: {transport_api_version: V3, grpc_service: {envoy_grpc: {cluster_name: sluice}}}
              rate_limits:
              - actions:
                - request_headers: {header_name: x-client, descriptor_key: tenant}
                - generic_key: {descriptor_key: sluice-hold, descriptor_value: acquire}
              - actions:
                - request_headers: {header_name: x-client, descriptor_key: tenant}
                - request_headers: {header_name: x-sluice-hold, descriptor_key: sluice-release}
                apply_on_stream_done: true
YAML
)
{
  echo "static_resources:"
  echo "  listeners:"
  envoy_listener plain 18700 ""
  envoy_listener hold 18701 "$hold_filter"
  envoy_listener rate 18702 "$(envoy_filter ratelimit sluice)"
  envoy_upstream 18710
  echo "  clusters:"
  envoy_cluster sluice 18781 h2
  envoy_cluster upstream 18710
} >"$work/envoy.yaml"
serve 18700 "$work/envoy.log" "$envoy" -c "$work/envoy.yaml" --concurrency 1 -l warn --disable-hot-restart
pids+=("$SERVED_PID")
for port in 18700 18701 18702; do
  for _ in $(seq 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'x-client: hot' "127.0.0.1:$port/")" = 200 ] && break
    sleep 0.1
  done
done

scripts() { # EVAL/EVALSHA calls Redis has run so far
  redis-cli -p "$redis_port" info commandstats | python3 -c '
import re, sys
print(sum(int(n) for c, n in re.findall(r"^cmdstat_(evalsha|eval):calls=(\d+)", sys.stdin.read(), re.M)))'
}
in_flight() { curl -s 127.0.0.1:18780/metrics | awk '/^sluice_holds_in_flight/ {s += $2} END {print s + 0}'; }

stamp="$(date -u +%Y-%m-%dT%H:%MZ) $(uname -n) ($(nproc) cores), Envoy --concurrency 1, Redis 7, wrk -d $DURATION"
read -r _ plain_p50 _ _ _ <<<"$(wrk_run 18700 1)"
read -r _ hold_p50 _ hold_bad _ <<<"$(wrk_run 18701 1)"
read -r _ rate_p50 _ rate_bad _ <<<"$(wrk_run 18702 1)"
read -r plain_rps _ _ _ _ <<<"$(wrk_run 18700 "$CONNECTIONS")"
before=$(scripts)
read -r hold_rps _ hold_p99 hold_sat_bad hold_n <<<"$(wrk_run 18701 "$CONNECTIONS")"
after=$(scripts)
sleep 1.5
left=$(in_flight)
read -r rate_rps _ rate_p99 rate_sat_bad _ <<<"$(wrk_run 18702 "$CONNECTIONS")"
[ "$hold_bad$rate_bad$hold_sat_bad$rate_sat_bad" = 0000 ] || echo "concurrency: non-2xx answers: $hold_bad $rate_bad $hold_sat_bad $rate_sat_bad" >&2
summary=$(python3 - "$plain_p50" "$hold_p50" "$rate_p50" "$plain_rps" "$hold_rps" "$hold_p99" "$rate_rps" "$rate_p99" "$((after - before))" "$hold_n" "$left" "$CONNECTIONS" <<'PY'
import sys
pp, hp, rp, prps, hrps, hp99, rrps, rp99 = map(float, sys.argv[1:9])
calls, n, left, c = map(int, sys.argv[9:])
print("| added p50 over plain Envoy (1 conn.) | %.3f ms | %.3f ms |" % (hp - pp, rp - pp))
print("| req/s, %d conn. (plain Envoy %.0f) | %.0f (p99 %.2f ms) | %.0f (p99 %.2f ms) |" % (c, prps, hrps, hp99, rrps, rp99))
print("| Redis script calls per 100 decisions | **%.2f** (%d calls, %d requests = %d decisions) | |" % (100.0 * calls / (2 * n), calls, n, 2 * n))
print("| holds left in flight 1.5 s after the load | %d | |" % left)
PY
)
{
  printf '\n### P14 concurrency limit, %s\n\n' "$stamp"
  printf '`loadtest/concurrency.sh`: one tenant, `concurrency: 64`, %s connections (always under the limit).\n\n' "$CONNECTIONS"
  printf '| | slot held per request (acquire + release) | rate limit (one check) |\n|---|---|---|\n'
  printf '%s\n' "$summary"
} | tee -a loadtest/RESULTS.md
