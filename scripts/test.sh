#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, clippy, unit, property, black-box gRPC,
# CLI and end-to-end tests with a real Envoy, 20 s of each fuzz target, then the deployment checks (container image, compose
# demo, Grafana dashboard, Kubernetes manifests). Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
scripts/fuzz.sh 20
scripts/test-deploy.sh
