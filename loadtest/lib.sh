# Shared by the load-test scripts (sourced).

# Server CPU per request from /proc (cpu.sh, p15.sh, connections.sh): the CPU time (utime +
# stime) of process PID in clock ticks, and the microseconds per request between two readings.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
cpu_per_request() { # BEFORE AFTER REQUESTS → µs
  python3 -c "import sys; b, a, t, n = map(int, sys.argv[1:]); print('%.2f' % ((a - b) * 1e6 / t / n))" "$1" "$2" "$(getconf CLK_TCK)" "$3"
}

# Starts a server in the background and waits until it listens: serve PORT LOG CMD...
# Sets SERVED_PID. Fails if PORT is already taken (a stale server there would be measured instead)
# or the server exits or does not listen within 10 s.
serve() {
  local port=$1 log=$2
  shift 2
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "${0##*/}: port $port is already in use; stop whatever listens there first" >&2
    exit 1
  fi
  "$@" >"$log" 2>&1 &
  SERVED_PID=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    kill -0 "$SERVED_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "${0##*/}: $1 did not start listening on $port:" >&2
  cat "$log" >&2
  exit 1
}

# Waits until each of PORTS answers 200 to `GET /` with x-client: hot (10 s each); else prints
# LOGS and exits: wait_200 "PORTS" LOGS...
wait_200() {
  local port ok
  for port in $1; do
    ok=""
    for _ in $(seq 100); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'x-client: hot' "127.0.0.1:$port/")" = 200 ] && { ok=1; break; }
      sleep 0.1
    done
    [ -n "$ok" ] || { echo "${0##*/}: port $port does not answer 200" >&2; shift; cat "$@" >&2; exit 1; }
  done
}

# Resident memory of process PID, in KiB: rss_kb PID
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

# Starts the benchmark pair on the same stack: sluice on a config whose one rule (`client`, from
# the descriptor or ext_authz's x-client header) is never reached, and the no-op handler.
# bench_servers WORK SLUICE_GRPC_PORT SLUICE_ADMIN_PORT NOOP_PORT; appends both pids to `pids`.
# SLUICE_BIN names another sluice binary to measure (an older build, for an A/B in one sitting);
# SLUICE_ARGS and NOOP_ARGS add arguments to each server's command line; BENCH_CHECK= (empty)
# leaves out the `check:` section, which builds before issue 41 do not know.
bench_servers() {
  local work=$1
  # The HTTP check's headers (p15.sh: --check-addr behind nginx).
  local check='check: {proxy: nginx}'
  cat >"$work/sluice.yaml" <<YAML
domains:
  - domain: bench
    descriptors:
      - key: client
        rate_limit: {unit: second, requests_per_unit: 1000000000}
authz:
  domain: bench
  descriptors:
    - [{key: client, from: {header: x-client}}]
${BENCH_CHECK-$check}
engine: {max_keys: 2000000}
YAML
  serve "$2" "$work/sluice.log" "${SLUICE_BIN:-./target/release/sluice}" serve --config "$work/sluice.yaml" \
    --grpc-addr "127.0.0.1:$2" --admin-addr "127.0.0.1:$3" --reload-interval 0s ${SLUICE_ARGS:-}
  pids+=("$SERVED_PID")
  serve "$4" "$work/noop.log" ./target/release/noop-rls --addr "127.0.0.1:$4" ${NOOP_ARGS:-}
  pids+=("$SERVED_PID")
}

# The calls and requests of bench_servers' scenarios (p2.sh, cpu.sh): ShouldRateLimit on one hot
# key and on 100 k keys, and Check on one hot key.
rls='envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit'
authz='envoy.service.auth.v3.Authorization/Check'
hot='{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":"hot"}]}]}'
many='{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":"k{{randomInt 0 100000}}"}]}]}'
check='{"attributes":{"request":{"http":{"method":"GET","path":"/","headers":{"x-client":"hot"}}}}}'

# Envoy config pieces shared by p4.sh and rlqs.sh (YAML at the indentation of
# static_resources.listeners / clusters).

# The http filter that calls sluice (or the no-op) at CLUSTER: envoy_filter authz|ratelimit CLUSTER
envoy_filter() {
  case $1 in
    authz) cat <<YAML
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              transport_api_version: V3
              grpc_service: {envoy_grpc: {cluster_name: $2}, timeout: 1s}
YAML
    ;;
    ratelimit) cat <<YAML
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: bench
              timeout: 1s
              failure_mode_deny: true
              rate_limit_service: {transport_api_version: V3, grpc_service: {envoy_grpc: {cluster_name: $2}}}
YAML
    ;;
  esac
}

# A listener routing to the cluster `upstream`, with the http filters FILTERS (YAML, may be empty)
# before the router; descriptors from x-client: envoy_listener NAME PORT FILTERS
envoy_listener() {
  cat <<YAML
  - name: $1
    address: {socket_address: {address: 127.0.0.1, port_value: $2}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: $1
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              rate_limits: [{actions: [{request_headers: {header_name: x-client, descriptor_key: client}}]}]
              routes: [{match: {prefix: "/"}, route: {cluster: upstream}}]
          http_filters:
YAML
  [ -n "$3" ] && printf '%s\n' "$3"
  cat <<YAML
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
YAML
}

# A static cluster on 127.0.0.1: envoy_cluster NAME PORT [h2]
envoy_cluster() {
  cat <<YAML
  - name: $1
    type: STATIC
    connect_timeout: 1s
    load_assignment: {cluster_name: $1, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $2}}}}]}]}
YAML
  [ "${3:-}" = h2 ] && cat <<YAML
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
YAML
  return 0
}

# The upstream: a listener answering 200 to everything: envoy_upstream PORT
envoy_upstream() {
  cat <<YAML
  - name: upstream
    address: {socket_address: {address: 127.0.0.1, port_value: $1}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: upstream
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{match: {prefix: "/"}, direct_response: {status: 200, body: {inline_string: "ok"}}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
YAML
}

# One wrk run with x-client: hot; prints "rps p50_ms p99_ms non2xx requests":
# wrk_run PORT CONNECTIONS [DURATION (default $DURATION)]
wrk_run() {
  wrk -t "$(( $2 < 2 ? 1 : 2 ))" -c "$2" -d "${3:-$DURATION}" --latency -H 'x-client: hot' "http://127.0.0.1:$1/" | python3 -c '
import re, sys
t = sys.stdin.read()
def ms(v, u): return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[u]
p = {k: ms(v, u) for k, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)$", t, re.M)}
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
n = int(re.search(r"(\d+) requests in", t).group(1))
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
print("%.0f %.3f %.3f %s %d" % (rps, p["50"], p["99"], bad.group(1) if bad else 0, n))'
}

# Runs the accuracy harness with ARGS, prints its result line and appends it to RESULTS.md under
# the command that gave it: accuracy_run ARGS...
accuracy_run() {
  local line
  line=$(./target/release/accuracy "$@" | grep '^accuracy:')
  echo "$line"
  printf -- '- `accuracy %s`\n  %s\n' "$*" "${line#accuracy: }" >> loadtest/RESULTS.md
}
