#!/usr/bin/env bash
# The sluice demo: Envoy → two sluice sidecars → one Redis (deploy/compose.yaml). Builds the image,
# starts the stack, sends requests through Envoy and shows the global limits holding across both
# sidecars: client "alice" gets exactly 10 requests (ext_authz, 10/hour), /expensive exactly 5
# (rate-limit filter, 5/hour), whichever sidecar Envoy asks. Exits non-zero if anything differs.
#   deploy/demo.sh          run, then stop and remove the stack
#   deploy/demo.sh --keep   leave it running: Envoy on 127.0.0.1:10000, sluice admin on :9091 and :9092
#   deploy/demo.sh --down   stop and remove it
# DEMO_BUILT=1 runs the image $SLUICE_IMAGE as it is, without building it (scripts/test-deploy.sh,
# which has just built it). Needs Docker with `docker compose` or docker-compose, and curl.
set -euo pipefail
cd "$(dirname "$0")"
port=${DEMO_PORT:-10000} admin_a=${DEMO_ADMIN_A:-9091} admin_b=${DEMO_ADMIN_B:-9092}
export DEMO_PORT=$port DEMO_ADMIN_A=$admin_a DEMO_ADMIN_B=$admin_b
if docker compose version >/dev/null 2>&1; then dc=(docker compose); else dc=(docker-compose); fi
compose() { "${dc[@]}" -p sluice-demo -f compose.yaml "$@"; }
fail() { echo "demo: FAILED: $*" >&2; compose logs --tail 30 >&2 || true; exit 1; }
case "${1:-}" in
  --down) compose down -v -t 2; exit ;;
  --keep) ;;
  "") trap 'compose down -v -t 2 >/dev/null 2>&1 || true' EXIT ;;
  *) echo "usage: deploy/demo.sh [--keep | --down]" >&2; exit 64 ;;
esac

compose down -v -t 2 >/dev/null 2>&1 || true   # a fresh Redis: the limits start full
image=${SLUICE_IMAGE:-sluice:local}
export SLUICE_IMAGE=$image
if [ "${DEMO_BUILT:-}" = 1 ]; then
  echo "== using $image as built (DEMO_BUILT=1)"
else
  echo "== building $image from deploy/Dockerfile (the first build takes a few minutes)"
  docker build -q -f Dockerfile -t "$image" .. >/dev/null
fi
echo "== starting Envoy, sluice-a, sluice-b, Redis and the upstream"
compose up -d --no-build
metric() { curl -fsS "127.0.0.1:$1/metrics" 2>/dev/null | awk -v m="$2" '$1 == m {print $2}'; }
# Ready when both sidecars see each other through Redis (heartbeats) and Envoy answers.
for _ in $(seq 150); do
  a=$(metric "$admin_a" sluice_live_instances || true) b=$(metric "$admin_b" sluice_live_instances || true)
  code=$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$port/ready" -H 'x-client: readiness-probe' || true)
  [ "${a:-0}" = 2 ] && [ "${b:-0}" = 2 ] && [ "$code" = 200 ] && break
  sleep 0.2
done
[ "${a:-0}" = 2 ] && [ "${b:-0}" = 2 ] && [ "$code" = 200 ] || fail "stack not ready (live instances: ${a:-?}/${b:-?}, envoy: $code)"

# Sends $1 requests to path $2 as client $3; prints the status codes on one line.
burst() { for _ in $(seq "$1"); do curl -s -o /dev/null -w '%{http_code} ' -H "x-client: $3" "127.0.0.1:$port$2"; done; }
# $1 codes, $2 how many must pass. Exactly that many 200s, the rest 429s, the last one a 429. (The
# order of the middle ones may interleave: a sidecar can still hold a leased token when the other
# one already found the global bucket empty; the total never exceeds the limit.)
expect() {
  local ok denied
  ok=$(grep -o 200 <<<"$1" | wc -l) denied=$(grep -o 429 <<<"$1" | wc -l)
  [ "$ok" -eq "$2" ] && [ $((ok + denied)) -eq "$(wc -w <<<"$1")" ] && [ "$(awk '{print $NF}' <<<"$1")" = 429 ] ||
    fail "got [$1]: want exactly $2 × 200, the rest 429, ending with a 429"
  echo "   $ok passed, $denied got 429"
}

echo "== ext_authz: 20 requests as client alice (limit: 10 per hour per client, global)"
codes=$(burst 20 / alice); echo "   $codes"; expect "$codes" 10
echo "== rate-limit filter: 8 requests to /expensive as client bob (limit: 5 per hour for the path, global)"
codes=$(burst 8 /expensive bob); echo "   $codes"; expect "$codes" 5

echo "== a denied request, as the client sees it"
curl -s -i -H 'x-client: alice' "127.0.0.1:$port/" | sed 's/^/   /'; echo

served() { curl -fsS "127.0.0.1:$1/metrics" | awk '/^sluice_requests_total/ {n += $2} END {print n + 0}'; }
sa=$(served "$admin_a") sb=$(served "$admin_b")
echo "== requests each sidecar decided: sluice-a $sa, sluice-b $sb"
[ "$sa" -gt 0 ] && [ "$sb" -gt 0 ] || fail "Envoy did not use both sidecars"
echo "== the same global quota, seen from each sidecar (sluice quota get)"
for s in sluice-a sluice-b; do
  echo "-- $s"
  compose exec -T "$s" sluice quota get --domain demo -d client=alice | sed 's/^/   /'
done
echo "demo: OK (429s after exactly 10 and 5 admitted requests, across both sidecars)"
