#!/usr/bin/env bash
# P4: HTTP through a real Envoy 1.40 (wrk), with ext_authz or the rate-limit filter calling sluice,
# against the same filter calling the no-op handler (noop-rls), and against Envoy with no filter,
# in the same run. Light load (1 connection): added p50 over plain Envoy. Saturated (64
# connections): req/s as a share of Envoy-with-no-op. Prints and appends to RESULTS.md.
# Needs wrk (apt-get install wrk) and Envoy (scripts/setup.sh puts it in .tools/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "p4: wrk not found (apt-get install wrk)" >&2; exit 1; }
envoy=${SLUICE_ENVOY_BIN:-.tools/bin/envoy}
[ -x "$envoy" ] || { echo "p4: no Envoy at $envoy (run scripts/setup.sh)" >&2; exit 1; }
DURATION=${DURATION:-10s} CONNECTIONS=${CONNECTIONS:-64} ENVOY_CONCURRENCY=${ENVOY_CONCURRENCY:-1}
. loadtest/lib.sh
cargo build --release -q -p sluice -p sluice-loadtest
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT

bench_servers "$work" 18581 18580 18582

# Listeners: 18600 no filter; 18601/18602 ext_authz → sluice/no-op; 18603/18604 rate-limit filter
# → sluice/no-op; 18610 the upstream (direct 200).
listener() { # name port filter(none|authz|ratelimit) cluster
  envoy_listener "$1" "$2" "$(envoy_filter "$3" "$4")"
}
{
  echo "static_resources:"
  echo "  listeners:"
  listener plain 18600 none ""
  listener authz_sluice 18601 authz sluice
  listener authz_noop 18602 authz noop
  listener rl_sluice 18603 ratelimit sluice
  listener rl_noop 18604 ratelimit noop
  envoy_upstream 18610
  echo "  clusters:"
  envoy_cluster sluice 18581 h2
  envoy_cluster noop 18582 h2
  envoy_cluster upstream 18610
} >"$work/envoy.yaml"
serve 18600 "$work/envoy.log" "$envoy" -c "$work/envoy.yaml" --concurrency "$ENVOY_CONCURRENCY" -l warn --disable-hot-restart
pids+=("$SERVED_PID")
wait_200 "18600 18601 18602 18603 18604" "$work/envoy.log" "$work/sluice.log"

stamp="$(date -u +%Y-%m-%dT%H:%MZ) $(uname -n) ($(nproc) cores), Envoy --concurrency $ENVOY_CONCURRENCY, wrk -d $DURATION"
{
  printf '\n### P4, %s\n\n' "$stamp"
  printf '| filter | load | plain Envoy | Envoy + no-op | Envoy + sluice | result |\n|---|---|---|---|---|---|\n'
} >> loadtest/RESULTS.md
read -r l_plain_rps l_plain_p50 _ _ _ <<<"$(wrk_run 18600 1)"
read -r s_plain_rps _ _ _ _ <<<"$(wrk_run 18600 "$CONNECTIONS")"
for f in "ext_authz|18601|18602" "rate-limit filter|18603|18604"; do
  IFS='|' read -r name sport nport <<<"$f"
  read -r _ l_noop_p50 _ l_noop_bad _ <<<"$(wrk_run "$nport" 1)"
  read -r _ l_s_p50 _ l_s_bad _ <<<"$(wrk_run "$sport" 1)"
  read -r s_noop_rps _ s_noop_p99 s_noop_bad _ <<<"$(wrk_run "$nport" "$CONNECTIONS")"
  read -r s_s_rps _ s_s_p99 s_s_bad _ <<<"$(wrk_run "$sport" "$CONNECTIONS")"
  [ "$l_noop_bad$l_s_bad$s_noop_bad$s_s_bad" = 0000 ] || echo "p4: non-2xx answers: $l_noop_bad $l_s_bad $s_noop_bad $s_s_bad" >&2
  light=$(python3 -c 'import sys; n = sys.argv[1]; p, o, s = map(float, sys.argv[2:]); print("| %s | light (1 conn.) | p50 %.3f ms | p50 %.3f ms | p50 %.3f ms | sluice adds **%.3f ms** p50 over plain Envoy (no-op adds %.3f ms) |" % (n, p, o, s, s - p, o - p))' \
    "$name" "$l_plain_p50" "$l_noop_p50" "$l_s_p50")
  sat=$(python3 -c 'import sys; c = sys.argv[1]; p, o, op99, s, sp99 = map(float, sys.argv[2:]); print("| | saturated (%s conn.) | %.0f req/s | %.0f req/s (p99 %.2f ms) | %.0f req/s (p99 %.2f ms) | **%.1f%%** of Envoy + no-op |" % (c, p, o, op99, s, sp99, 100 * s / o))' \
    "$CONNECTIONS" "$s_plain_rps" "$s_noop_rps" "$s_noop_p99" "$s_s_rps" "$s_s_p99")
  echo "$light"; echo "$sat"
  printf '%s\n%s\n' "$light" "$sat" >> loadtest/RESULTS.md
done
