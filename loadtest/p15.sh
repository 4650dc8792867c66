#!/usr/bin/env bash
# P15: HTTP through a real nginx (wrk → nginx → API) with `auth_request` asking sluice's HTTP
# check (`--check-addr`), against the same nginx asking a no-op check on the same HTTP stack
# (noop-rls --http-addr), and against nginx alone with the same upstream, in the same run. Light
# load (1 connection): added p50 over nginx alone. Saturated (64 connections): req/s as a share
# of nginx alone (DESIGN's target: ≥ 90%) and of nginx with the no-op check. Then the server's
# CPU per decision of the HTTP check against ext_authz's gRPC Check, each against its no-op on
# the same stack: a fixed number of requests, CPU time from /proc/<pid>/stat.
# Prints and appends to RESULTS.md. Needs wrk and nginx (apt-get install wrk nginx-light) and ghz
# (go install github.com/bojand/ghz/cmd/ghz@latest).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin"
for tool in wrk nginx ghz; do
  command -v "$tool" >/dev/null || { echo "p15: $tool not found (see the script's header)" >&2; exit 1; }
done
DURATION=${DURATION:-10s} CONNECTIONS=${CONNECTIONS:-64} REQUESTS=${REQUESTS:-100000}
. loadtest/lib.sh
cargo build --release -q -p sluice -p sluice-loadtest
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; rm -rf "$work"' EXIT

# sluice on bench_servers' config (the rule on x-client is never reached), with its HTTP check on
# 18782; the no-op's gRPC on 18783, its HTTP check on 18784.
SLUICE_ARGS="--check-addr 127.0.0.1:18782" NOOP_ARGS="--http-addr 127.0.0.1:18784" \
  bench_servers "$work" 18781 18780 18783
sluice_pid=${pids[0]} noop_pid=${pids[1]}

# nginx, one worker (as Envoy runs with --concurrency 1 in P4): 18700 alone; 18701 asks sluice;
# 18702 asks the no-op; 18710 the API (a direct 200), proxied to by all three alike.
auth_server() { # PORT CHECK_PORT (none: no auth_request)
  echo "  server {"
  echo "    listen 127.0.0.1:$1;"
  echo "    location / {"
  [ "$2" = none ] || echo "      auth_request /_check;"
  echo "      proxy_pass http://api;"
  echo "      proxy_http_version 1.1;"
  echo "      proxy_set_header Connection \"\";"
  echo "    }"
  [ "$2" = none ] || cat <<NGINX
    location = /_check {
      internal;
      proxy_pass http://check_$2/check;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Original-URI \$request_uri;
      proxy_set_header X-Forwarded-Method \$request_method;
      proxy_set_header X-Forwarded-Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
NGINX
  echo "  }"
}
cat >"$work/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
error_log $work/nginx-error.log warn;
pid $work/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  upstream api { server 127.0.0.1:18710; keepalive 64; }
  upstream check_18782 { server 127.0.0.1:18782; keepalive 64; }
  upstream check_18784 { server 127.0.0.1:18784; keepalive 64; }
$(auth_server 18700 none)
$(auth_server 18701 18782)
$(auth_server 18702 18784)
  server { listen 127.0.0.1:18710; location / { return 200 "ok"; } }
}
NGINX
serve 18700 "$work/nginx.log" nginx -p "$work" -c "$work/nginx.conf"
pids+=("$SERVED_PID")
wait_200 "18700 18701 18702" "$work/nginx-error.log" "$work/sluice.log"

stamp="$(date -u +%Y-%m-%dT%H:%MZ) $(uname -n) ($(nproc) cores), nginx $(nginx -v 2>&1 | sed 's|.*/||'), 1 worker, wrk -d $DURATION"
{
  printf '\n### P15 (`loadtest/p15.sh`), %s\n\n' "$stamp"
  printf '| load | nginx alone | nginx + no-op check | nginx + sluice | result |\n|---|---|---|---|---|\n'
} >> loadtest/RESULTS.md
read -r _ l_plain_p50 _ _ _ <<<"$(wrk_run 18700 1)"
read -r _ l_noop_p50 _ l_noop_bad _ <<<"$(wrk_run 18702 1)"
read -r _ l_s_p50 _ l_s_bad _ <<<"$(wrk_run 18701 1)"
read -r s_plain_rps _ s_plain_p99 _ _ <<<"$(wrk_run 18700 "$CONNECTIONS")"
read -r s_noop_rps _ s_noop_p99 s_noop_bad _ <<<"$(wrk_run 18702 "$CONNECTIONS")"
read -r s_s_rps _ s_s_p99 s_s_bad _ <<<"$(wrk_run 18701 "$CONNECTIONS")"
[ "$l_noop_bad$l_s_bad$s_noop_bad$s_s_bad" = 0000 ] || echo "p15: non-2xx answers: $l_noop_bad $l_s_bad $s_noop_bad $s_s_bad" >&2
light=$(python3 -c 'import sys; p, o, s = map(float, sys.argv[1:]); print("| light (1 conn.) | p50 %.3f ms | p50 %.3f ms | p50 %.3f ms | sluice adds **%.3f ms** p50 over nginx alone (the no-op check adds %.3f ms) |" % (p, o, s, s - p, o - p))' \
  "$l_plain_p50" "$l_noop_p50" "$l_s_p50")
sat=$(python3 -c 'import sys; c = sys.argv[1]; p, pp99, o, op99, s, sp99 = map(float, sys.argv[2:]); print("| saturated (%s conn.) | %.0f req/s (p99 %.2f ms) | %.0f req/s (p99 %.2f ms) | %.0f req/s (p99 %.2f ms) | **%.1f%%** of nginx alone, %.1f%% of nginx + no-op check |" % (c, p, pp99, o, op99, s, sp99, 100 * s / p, 100 * s / o))' \
  "$CONNECTIONS" "$s_plain_rps" "$s_plain_p99" "$s_noop_rps" "$s_noop_p99" "$s_s_rps" "$s_s_p99")
echo "$light"; echo "$sat"
printf '%s\n%s\n' "$light" "$sat" >> loadtest/RESULTS.md

# CPU per decision: REQUESTS requests on one hot key, as the HTTP check (wrk straight at the
# port, 50 connections, a Lua script stopping each connection after its share) and as gRPC
# Check (ghz -c 50), each beside its no-op.
cat >"$work/fixed.lua" <<LUA
-- Each of wrk's 2 threads (its own Lua state) sends half of $REQUESTS requests, then stops.
local share, sent = math.floor($REQUESTS / 2), 0
request = function() sent = sent + 1; return wrk.format("GET", "/check", {["x-client"] = "hot", ["x-forwarded-method"] = "GET", ["x-original-uri"] = "/v1/items", ["x-forwarded-host"] = "api"}) end
response = function() if sent >= share then wrk.thread:stop() end end
LUA
http_cpu() { # PID PORT → "µs requests"
  wrk -t 2 -c 50 -d 10s -s "$work/fixed.lua" "http://127.0.0.1:$2/" >/dev/null 2>&1 # warm-up
  local before after n
  before=$(ticks "$1")
  n=$(wrk -t 2 -c 50 -d 60s -s "$work/fixed.lua" "http://127.0.0.1:$2/" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
  after=$(ticks "$1")
  echo "$(cpu_per_request "$before" "$after" "$n") $n"
}
grpc_cpu() { # PID PORT → µs
  ghz --insecure --call "$authz" -d "$check" -c 50 -n 20000 "127.0.0.1:$2" >/dev/null 2>&1 # warm-up
  local before after
  before=$(ticks "$1")
  ghz --insecure --call "$authz" -d "$check" -c 50 -n "$REQUESTS" "127.0.0.1:$2" >/dev/null 2>&1
  after=$(ticks "$1")
  cpu_per_request "$before" "$after" "$REQUESTS"
}
read -r h_noop h_noop_n <<<"$(http_cpu "$noop_pid" 18784)"
read -r h_s h_s_n <<<"$(http_cpu "$sluice_pid" 18782)"
g_noop=$(grpc_cpu "$noop_pid" 18783)
g_s=$(grpc_cpu "$sluice_pid" 18781)
{
  printf '\n| CPU per decision, 1 hot key | no-op µs/request | sluice µs/request | ratio |\n|---|---|---|---|\n'
  python3 -c 'import sys; a, b, n, m = sys.argv[1:]; print("| HTTP check (wrk -c 50, %s and %s requests) | %s | %s | %.2fx |" % (n, m, a, b, float(b) / float(a)))' "$h_noop" "$h_s" "$h_noop_n" "$h_s_n"
  python3 -c 'import sys; a, b, n = sys.argv[1:]; print("| gRPC Check (ghz -c 50 -n %s) | %s | %s | %.2fx |" % (n, a, b, float(b) / float(a)))' "$g_noop" "$g_s" "$REQUESTS"
} | tee -a loadtest/RESULTS.md
