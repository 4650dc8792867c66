#!/usr/bin/env bash
# The post-paid accuracy harness (issue 11): 4 sidecars on one Redis share a budget of tokens;
# clients check before each request and report a random usage after it. Prints each result line
# and appends them to loadtest/RESULTS.md with the date and machine. Needs Docker and the
# redis:7.0 image (../shared/scripts/local-images.sh redis). Takes about 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice -p sluice-loadtest
run() {
  local line
  line=$(./target/release/post-paid "$@" | grep '^post-paid:')
  echo "$line"
  printf -- '- `post-paid %s`\n  %s\n' "$*" "${line#post-paid: }" >> loadtest/RESULTS.md
}
printf '\n### Post-paid harness, %s, %s (%s cores)\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" >> loadtest/RESULTS.md
# LLM-like: few large reports, one request in flight per sidecar.
run --sidecars 4 --in-flight 1 --limit 1000 --max-usage 200 --seconds 30
# Four in flight per sidecar: up to 16 x 200 tokens can be reported at once, beyond the default
# debt bound (the burst, 1 000): what goes past it is clamped (counted), as a fixed window forgets
# usage past its limit at the window's end. With max_debt above what can be in flight, none is.
run --sidecars 4 --in-flight 4 --limit 1000 --max-usage 200 --seconds 30
run --sidecars 4 --in-flight 4 --limit 1000 --max-usage 200 --seconds 30 --max-debt 4000
# The same on a 3-master Redis Cluster.
run --sidecars 4 --in-flight 1 --limit 1000 --max-usage 200 --seconds 30 --cluster
# Many small reports (1..10 tokens, 2 ms each): batching keeps Redis calls far below the rate.
run --sidecars 4 --in-flight 4 --limit 2000 --max-usage 10 --serve-ms 2 --seconds 30
