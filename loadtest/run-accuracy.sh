#!/usr/bin/env bash
# P3, P5, P7: the accuracy harness in the scenarios of DESIGN §7, against real Redis containers.
# Prints each result line and appends them to loadtest/RESULTS.md with the date and machine.
# Needs Docker and the redis:7.0 image (../shared/scripts/local-images.sh redis on a machine
# without a registry). Takes about 4 minutes. Against Valkey: scripts/valkey-image.sh, then
# SLUICE_TEST_REDIS_IMAGE=valkey/valkey:9.1 loadtest/run-accuracy.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice -p sluice-loadtest
. loadtest/lib.sh
run() { accuracy_run "$@"; }
printf '\n### Accuracy harness, %s, %s (%s cores), %s\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n)" "$(nproc)" \
  "${SLUICE_TEST_REDIS_IMAGE:-redis:7.0}" >> loadtest/RESULTS.md
run --sidecars 4 --limit 1000 --offered 4000 --seconds 30
run --sidecars 4 --limit 1000 --offered 4000 --seconds 30 --cluster
run --sidecars 4 --limit 100 --offered 4000 --seconds 30 --keys 10000
run --sidecars 4 --limit 100000 --offered 4000 --seconds 20
run --sidecars 4 --limit 1000 --offered 4000 --seconds 30 --fault pause --fault-at 10 --fault-until 20
