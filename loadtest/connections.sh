#!/usr/bin/env bash
# Issue 29: saturated req/s, p99 and server CPU per request with several client connections (ghz
# -c 50 over --connections 4 and 16), this build against an older one (OLD_SLUICE_BIN, e.g. built
# with `git worktree add ../old <commit> && cargo build --release -p sluice` there), in one
# sitting: for each load the two alternate, three rounds. ShouldRateLimit on one hot key and on
# 100 k keys (lib.sh's bench config). Prints and appends to RESULTS.md. Needs ghz.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin"
command -v ghz >/dev/null || { echo "connections: ghz not found" >&2; exit 1; }
old_bin=${OLD_SLUICE_BIN:?set OLD_SLUICE_BIN to an older sluice binary}
old_name=${OLD_SLUICE_NAME:-$old_bin}
REQUESTS=${REQUESTS:-100000}
. loadtest/lib.sh
cargo build --release -q -p sluice -p sluice-loadtest
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
bench_servers "$work" 18291 18290 18191
new=${pids[0]}
kill "${pids[1]}"
mkdir "$work/old"
SLUICE_BIN=$old_bin BENCH_CHECK= bench_servers "$work/old" 18391 18390 18192
old=${pids[2]}
kill "${pids[3]}"

# One measured run after a warm-up: "req/s p99-ms cpu-µs/request". run PID PORT DATA CONNECTIONS
run() {
  ghz --insecure --call "$rls" -d "$3" -c 50 --connections "$4" -n 20000 "127.0.0.1:$2" >/dev/null 2>&1
  local before after out
  before=$(ticks "$1")
  out=$(ghz --insecure --call "$rls" -d "$3" -c 50 --connections "$4" -n "$REQUESTS" "127.0.0.1:$2" 2>&1)
  after=$(ticks "$1")
  echo "$(echo "$out" | awk '/Requests\/sec/ {printf "%d", $2}') $(echo "$out" | awk '/99 % in/ {print $4}') $(cpu_per_request "$before" "$after" "$REQUESTS")"
}

# The range over the rounds of field F (1 req/s, 2 p99, 3 CPU) of the runs given: range F RUN...
range() {
  local f=$1
  shift
  printf '%s\n' "$@" | awk -v f="$f" 'NR == 1 || $f + 0 < lo + 0 {lo = $f} NR == 1 || $f + 0 > hi + 0 {hi = $f} END {print (lo == hi) ? lo : lo "–" hi}'
}

rows=""
for conns in 4 16; do
  for load in "one hot key|$hot" "100 000 keys|$many"; do
    IFS='|' read -r name data <<<"$load"
    o=() n=()
    for _ in 1 2 3; do
      o+=("$(run "$old" 18391 "$data" "$conns")")
      n+=("$(run "$new" 18291 "$data" "$conns")")
    done
    line="| $name | $conns"
    for field in 1 2 3; do line="$line | $(range "$field" "${o[@]}") | $(range "$field" "${n[@]}")"; done
    rows="$rows$line |"$'\n'
    echo "$line |"
  done
done
{
  printf '\n### Several client connections (`OLD_SLUICE_BIN=… loadtest/connections.sh`), %s, %s (%s cores)\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)"
  printf 'Old: %s; new: %s. ghz -c 50 over N connections, a warm-up of 20 000, then %s requests; three rounds, the two alternating.\n\n' "$old_name" "$(git rev-parse --short HEAD)" "$REQUESTS"
  printf '| load | connections | req/s old | req/s new | p99 ms old | p99 ms new | CPU µs/request old | CPU µs/request new |\n|---|---|---|---|---|---|---|---|\n'
  printf '%s' "$rows"
} >> loadtest/RESULTS.md
