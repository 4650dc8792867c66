# Shared by the load-test scripts (sourced).

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

# Resident memory of process PID, in KiB: rss_kb PID
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

# Starts the benchmark pair on the same stack: sluice on a config whose one rule (`client`, from
# the descriptor or ext_authz's x-client header) is never reached, and the no-op handler.
# bench_servers WORK SLUICE_GRPC_PORT SLUICE_ADMIN_PORT NOOP_PORT; appends both pids to `pids`.
# SLUICE_BIN names another sluice binary to measure (an older build, for an A/B in one sitting).
bench_servers() {
  local work=$1
  cat >"$work/sluice.yaml" <<'YAML'
domains:
  - domain: bench
    descriptors:
      - key: client
        rate_limit: {unit: second, requests_per_unit: 1000000000}
authz:
  domain: bench
  descriptors:
    - [{key: client, from: {header: x-client}}]
engine: {max_keys: 2000000}
YAML
  serve "$2" "$work/sluice.log" "${SLUICE_BIN:-./target/release/sluice}" serve --config "$work/sluice.yaml" \
    --grpc-addr "127.0.0.1:$2" --admin-addr "127.0.0.1:$3" --reload-interval 0s
  pids+=("$SERVED_PID")
  serve "$4" "$work/noop.log" ./target/release/noop-rls --addr "127.0.0.1:$4"
  pids+=("$SERVED_PID")
}
