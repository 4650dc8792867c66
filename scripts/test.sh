#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, clippy, unit, property, black-box gRPC,
# CLI and end-to-end tests with a real Envoy, nginx, Caddy and Traefik, the Redis suites again on
# Valkey, the walkthroughs (README's and the examples') as written, 20 s of each fuzz target,
# then the deployment checks (container image, compose demo, Grafana dashboard, Kubernetes
# manifests). Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The Redis store's suites again on Valkey 9.1 (the Lua = Rust conformance cases, Redis Cluster,
# holds, faults, ACL rights), all but TLS: the Valkey build this machine can download has none.
# (`--workspace` reuses the build above; `-p sluice-redis` would rebuild with other features.
# It also reruns crates/server/tests/holds.rs, which shares a name and needs no Redis.)
scripts/valkey-image.sh
SLUICE_TEST_REDIS_IMAGE=valkey/valkey:9.1 cargo test --workspace --locked --test acl --test batch \
  --test conformance --test conformance_props --test demand --test faults --test global \
  --test heartbeat --test holds --test holds_overrides --test holds_props --test outage \
  --test post_paid --test pushed_resets --test top
# README's quick start, the Envoy walkthrough, the concurrency example's (two pods on a Redis in
# Docker, about 15 s) and the nginx, Caddy and Traefik examples, run as written, their output
# checked.
python3 scripts/doc-run.py deploy/examples/quickstart/README.md README.md \
  deploy/examples/concurrency/README.md deploy/examples/nginx/README.md \
  deploy/examples/caddy/README.md deploy/examples/traefik/README.md
scripts/fuzz.sh 20
scripts/test-deploy.sh
