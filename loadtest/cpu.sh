#!/usr/bin/env bash
# CPU per decision (issue 14): the server's CPU time (user + system, from /proc/<pid>/stat) for a
# fixed number of requests, sluice against the no-op handler on the same tonic stack, in the same
# run: ShouldRateLimit on one hot key, ShouldRateLimit on 100 k keys, Check on one hot key.
# Prints and appends to RESULTS.md. Needs ghz (go install github.com/bojand/ghz/cmd/ghz@latest).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin"
command -v ghz >/dev/null || { echo "cpu: ghz not found (go install github.com/bojand/ghz/cmd/ghz@latest)" >&2; exit 1; }
REQUESTS=${REQUESTS:-200000}
. loadtest/lib.sh
cargo build --release -q -p sluice -p sluice-loadtest
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
bench_servers "$work" 18291 18290 18191
sluice_pid=${pids[0]} noop_pid=${pids[1]}

# Microseconds of server CPU per request for REQUESTS calls: cpu PID PORT CALL DATA
cpu() {
  local before after
  before=$(ticks "$1")
  ghz --insecure --call "$3" -d "$4" -c 50 -n "$REQUESTS" "127.0.0.1:$2" >/dev/null 2>&1
  after=$(ticks "$1")
  cpu_per_request "$before" "$after" "$REQUESTS"
}

{
  printf '\n### CPU per decision (`loadtest/cpu.sh`), %s, %s (%s cores), ghz -c 50 -n %s\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" "$REQUESTS"
  printf '| scenario | no-op CPU µs/request | sluice CPU µs/request | ratio |\n|---|---|---|---|\n'
} >> loadtest/RESULTS.md
for scenario in "ShouldRateLimit, 1 hot key|$rls|$hot" "ShouldRateLimit, 100k keys|$rls|$many" "Check, 1 hot key|$authz|$check"; do
  IFS='|' read -r name call data <<<"$scenario"
  # Warm-up (connections, the 100 k keys' first leases), not measured.
  ghz --insecure --call "$call" -d "$data" -c 50 -n 20000 127.0.0.1:18191 >/dev/null 2>&1
  ghz --insecure --call "$call" -d "$data" -c 50 -n 20000 127.0.0.1:18291 >/dev/null 2>&1
  noop=$(cpu "$noop_pid" 18191 "$call" "$data")
  s=$(cpu "$sluice_pid" 18291 "$call" "$data")
  line=$(python3 -c 'import sys; n, a, b = sys.argv[1:]; print("| %s | %s | %s | %.2fx |" % (n, a, b, float(b) / float(a)))' "$name" "$noop" "$s")
  echo "$line"
  echo "$line" >> loadtest/RESULTS.md
done
