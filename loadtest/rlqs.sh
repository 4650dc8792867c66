#!/usr/bin/env bash
# P10: Envoy 1.40's rate limit quota filter (RLQS) with sluice assigning the quota, in one run with
# plain Envoy, the rate-limit filter (RLS) and ext_authz calling the same sluice.
#   Speed: one Envoy (--concurrency 1), wrk. Light load (1 connection): added p50 over plain Envoy.
#   Saturated (64 connections): req/s as a share of plain Envoy's. The rule is never reached, so
#   every request passes and only the cost of each filter is measured.
#   Accuracy: two Envoys, each with its own sluice, one Redis (Docker); `http-rate` offers one
#   tenant OFFERED req/s (default 4000) on each for ACCURACY_SECONDS (default 60); admitted 2xx,
#   B + L·t for the example's limit scaled to L = B = 1000/s. Also Redis script calls per 100
#   requests (INFO commandstats).
# Prints and appends to RESULTS.md. Needs wrk, Envoy (scripts/setup.sh), Docker for the accuracy
# part (SKIP_ACCURACY=1 skips it; ONLY_ACCURACY=1 skips the speed part).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "rlqs: wrk not found (apt-get install wrk)" >&2; exit 1; }
envoy=${SLUICE_ENVOY_BIN:-.tools/bin/envoy}
[ -x "$envoy" ] || { echo "rlqs: no Envoy at $envoy (run scripts/setup.sh)" >&2; exit 1; }
DURATION=${DURATION:-10s} CONNECTIONS=${CONNECTIONS:-64} ENVOY_CONCURRENCY=${ENVOY_CONCURRENCY:-1}
ACCURACY_SECONDS=${ACCURACY_SECONDS:-60}
REDIS_IMAGE=${SLUICE_REDIS_IMAGE:-redis:7.0}
. loadtest/lib.sh
cargo build --release -q -p sluice -p sluice-loadtest
work=$(mktemp -d)
pids=()
redis_ctr=""
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  [ -n "$redis_ctr" ] && docker rm -f "$redis_ctr" >/dev/null 2>&1
  [ -n "${KEEP_LOGS:-}" ] && cp "$work"/*.log "$KEEP_LOGS"/ 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT


# The RLQS filter: one bucket per x-client value; DENY_ALL until sluice's first assignment.
rlqs_filter() { # domain header key cluster
  cat <<YAML
          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              rlqs_server: {envoy_grpc: {cluster_name: $4}}
              domain: $1
              bucket_matchers:
                matcher_list:
                  matchers:
                  - predicate:
                      single_predicate:
                        input:
                          name: h
                          typed_config: {"@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: $2}
                        value_match: {safe_regex: {google_re2: {}, regex: ".+"}}
                    on_match:
                      action:
                        name: bucket
                        typed_config:
                          "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                          bucket_id_builder:
                            bucket_id_builder:
                              $3:
                                custom_value:
                                  name: h
                                  typed_config: {"@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: $2}
                          reporting_interval: 5s
                          no_assignment_behavior: {fallback_rate_limit: {blanket_rule: DENY_ALL}}
                          expired_assignment_behavior: {fallback_rate_limit: {blanket_rule: DENY_ALL}}
YAML
}
listener() { # name port filter(none|rlqs|rlqs_api|ratelimit|authz) cluster
  local filter
  case $3 in
    none) filter="" ;;
    rlqs) filter=$(rlqs_filter bench x-client client "$4") ;;
    rlqs_api) filter=$(rlqs_filter api x-tenant tenant "$4") ;;
    *) filter=$(envoy_filter "$3" "$4") ;;
  esac
  envoy_listener "$1" "$2" "$filter"
}
if [ "${ONLY_ACCURACY:-}" != 1 ]; then
bench_servers "$work" 18781 18780 18782
{
  echo "static_resources:"
  echo "  listeners:"
  listener plain 18700 none ""
  listener rlqs 18701 rlqs sluice
  listener rl 18702 ratelimit sluice
  listener authz 18703 authz sluice
  envoy_upstream 18710
  echo "  clusters:"
  envoy_cluster sluice 18781 h2
  envoy_cluster upstream 18710
} >"$work/envoy.yaml"
serve 18700 "$work/envoy.log" "$envoy" -c "$work/envoy.yaml" --concurrency "$ENVOY_CONCURRENCY" -l warn --disable-hot-restart --base-id 71
pids+=("$SERVED_PID")
# Every listener answers 200 (RLQS: once sluice's first assignment for the bucket arrived).
wait_200 "18700 18701 18702 18703" "$work/envoy.log" "$work/sluice.log"

stamp="$(date -u +%Y-%m-%dT%H:%MZ) $(uname -n) ($(nproc) cores), Envoy --concurrency $ENVOY_CONCURRENCY, wrk -d $DURATION"
{
  printf '\n### P10 (RLQS), %s\n\n' "$stamp"
  printf '| filter | light (1 conn.) p50 | added over plain | saturated (%s conn.) req/s | share of plain | p99 |\n|---|---|---|---|---|---|\n' "$CONNECTIONS"
} >> loadtest/RESULTS.md
read -r _ l_plain_p50 _ _ _ <<<"$(wrk_run 18700 1)"
read -r s_plain_rps _ s_plain_p99 _ _ <<<"$(wrk_run 18700 "$CONNECTIONS")"
row=$(printf '| plain Envoy | %.3f ms | | %.0f | 100%% | %.2f ms |' "$l_plain_p50" "$s_plain_rps" "$s_plain_p99")
echo "$row"; echo "$row" >> loadtest/RESULTS.md
for f in "RLQS (rate_limit_quota)|18701" "RLS (ratelimit)|18702" "ext_authz|18703"; do
  IFS='|' read -r name port <<<"$f"
  read -r _ l_p50 _ l_bad _ <<<"$(wrk_run "$port" 1)"
  read -r s_rps _ s_p99 s_bad _ <<<"$(wrk_run "$port" "$CONNECTIONS")"
  [ "$l_bad$s_bad" = 00 ] || echo "rlqs: non-2xx answers on $name: $l_bad $s_bad" >&2
  row=$(python3 -c 'import sys; n = sys.argv[1]; lp, l, sp, s, p99 = map(float, sys.argv[2:]); print("| %s | %.3f ms | **%+.3f ms** | %.0f | **%.1f%%** | %.2f ms |" % (n, l, l - lp, s, 100 * s / sp, p99))' \
    "$name" "$l_plain_p50" "$l_p50" "$s_plain_rps" "$s_rps" "$s_p99")
  echo "$row"; echo "$row" >> loadtest/RESULTS.md
done
kill "${pids[@]}" 2>/dev/null || true
pids=()
fi
[ "${SKIP_ACCURACY:-}" = 1 ] && exit 0

# Accuracy: two pods (Envoy + sluice) on one Redis, one tenant overloaded on both at a fixed rate
# (wrk would take the CPU Redis and sluice need and measure the store's fallback instead).
redis_ctr=$(docker run -d -p 127.0.0.1:18779:6379 "$REDIS_IMAGE")
for _ in $(seq 50); do docker exec "$redis_ctr" redis-cli ping 2>/dev/null | grep -q PONG && break; sleep 0.2; done
cat >"$work/pods.yaml" <<'YAML'
domains:
  - domain: api
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 1000}
redis:
  url: redis://127.0.0.1:18779
  timeout: 20ms
YAML
for i in 0 1; do
  serve "1879$((i + 1))" "$work/pod$i-sluice.log" "${SLUICE_BIN:-./target/release/sluice}" serve --config "$work/pods.yaml" \
    --grpc-addr "127.0.0.1:1879$((i + 1))" --admin-addr "127.0.0.1:1879$((i + 5))" --reload-interval 0s
  pids+=("$SERVED_PID")
  {
    echo "static_resources:"
    echo "  listeners:"
    listener "pod$i" "1872$i" rlqs_api sluice
    envoy_upstream "1873$i"
    echo "  clusters:"
    envoy_cluster sluice "1879$((i + 1))" h2
    envoy_cluster upstream "1873$i"
  } >"$work/pod$i.yaml"
  serve "1872$i" "$work/pod$i-envoy.log" "$envoy" -c "$work/pod$i.yaml" --concurrency 1 -l warn --disable-hot-restart --base-id "7$((i + 2))"
  pids+=("$SERVED_PID")
done
# A new tenant on a running fleet: both sidecars know of each other (heartbeats) before its
# first request, as they do once a fleet has run for a heartbeat interval.
for _ in $(seq 100); do
  n=0
  for port in 18795 18796; do
    curl -s "127.0.0.1:$port/metrics" | grep -q '^sluice_live_instances 2$' && n=$((n + 1))
  done
  [ "$n" = 2 ] && break
  sleep 0.1
done
before=$(docker exec "$redis_ctr" redis-cli info commandstats | grep -E '^cmdstat_(evalsha|eval):' | sed 's/^[^:]*:calls=\([0-9]*\).*/\1/' | paste -sd+ | bc)
start=$(date +%s.%N)
# 4 000 requests a second offered to each Envoy (8 times the limit in all), at a fixed rate.
./target/release/http-rate --port 18720 --header x-tenant=acme --rate "${OFFERED:-4000}" --seconds "$ACCURACY_SECONDS" >"$work/load-0.txt" & w0=$!
./target/release/http-rate --port 18721 --header x-tenant=acme --rate "${OFFERED:-4000}" --seconds "$ACCURACY_SECONDS" >"$work/load-1.txt" & w1=$!
wait $w0 $w1
end=$(date +%s.%N)
for port in 18795 18796; do
  curl -s "127.0.0.1:$port/metrics" | grep -E '^sluice_(degraded|rlqs_assigned)' | sed "s/^/  sidecar :$port /" >&2
done
after=$(docker exec "$redis_ctr" redis-cli info commandstats | grep -E '^cmdstat_(evalsha|eval):' | sed 's/^[^:]*:calls=\([0-9]*\).*/\1/' | paste -sd+ | bc)
result=$(python3 - "$work/load-0.txt" "$work/load-1.txt" "$start" "$end" "$before" "$after" <<'PY'
import re, sys
admitted, sent, other = [], 0, 0
for f in sys.argv[1:3]:
    m = re.search(r"sent (\d+) ok (\d+) denied (\d+) other (\d+)", open(f).read())
    sent += int(m.group(1)); admitted.append(int(m.group(2))); other += int(m.group(4))
start, end, before, after = map(float, sys.argv[3:])
secs = end - start
bound = 1000 + 1000 * secs
total = sum(admitted)
print("two Envoys, %d requests/s offered to each for %.0f s, L = B = 1000/s: sent %d, admitted %d (%d + %d) of B + L·t = %.0f: **%.1f%%**, %s%s; Redis script calls %d (%.2f per 100 requests sent)" % (
    sent / secs / 2, secs, sent, total, admitted[0], admitted[1], bound, 100 * total / bound,
    "never over" if total <= bound else "OVER THE BOUND", ", %d other answers" % other if other else "",
    after - before, 100 * (after - before) / max(sent, 1)))
PY
)
echo "$result"
printf '\n- Accuracy: %s\n' "$result" >> loadtest/RESULTS.md
