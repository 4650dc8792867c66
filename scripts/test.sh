#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, clippy, unit, property, black-box gRPC,
# CLI and end-to-end tests with a real Envoy, nginx, Caddy and Traefik, the Redis suites again on
# Valkey, the walkthroughs (README's and the examples') as written, then the deployment checks
# (container image, compose demo, Grafana dashboard, Kubernetes manifests). Installs what it
# needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's start, in seconds since this script began: where CI's 30 minutes go.
phase() { echo "== test.sh phase at ${SECONDS}s: $*"; }
phase setup
scripts/setup.sh
phase fmt and clippy
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Includes every committed fuzz input, replayed through its target's body (crates/fuzzcases).
# Fuzzing for new inputs (a cargo-fuzz build of its own, ~6 minutes here before the first run)
# is scripts/fuzz.sh and loadtest/fuzz-long.sh.
phase cargo test
cargo test --workspace --locked
# The Redis store's suites again on Valkey 9.1 (the Lua = Rust conformance cases, Redis Cluster,
# holds, faults, ACL rights), all but TLS: the Valkey build this machine can download has none.
# The binaries the run above built, run again (scripts/rerun-tests.sh: no second build).
phase Valkey reruns
scripts/valkey-image.sh
SLUICE_TEST_REDIS_IMAGE=valkey/valkey:9.1 scripts/rerun-tests.sh sluice-redis acl batch \
  conformance conformance_props demand faults global heartbeat holds holds_overrides \
  holds_props outage post_paid prefix pushed_resets top
# README's quick start, the Envoy walkthrough, the concurrency example's (two pods on a Redis in
# Docker, about 15 s) and the nginx, Caddy and Traefik examples, run as written, their output
# checked.
phase walkthroughs
python3 scripts/doc-run.py deploy/examples/quickstart/README.md README.md \
  deploy/examples/concurrency/README.md deploy/examples/nginx/README.md \
  deploy/examples/caddy/README.md deploy/examples/traefik/README.md
phase deployment checks
scripts/test-deploy.sh
phase done
