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
