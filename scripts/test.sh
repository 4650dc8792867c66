#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, clippy, unit, property, black-box gRPC,
# CLI and end-to-end tests with a real Envoy, README's walkthroughs as written, 20 s of each fuzz target, then the deployment checks (container image, compose
# demo, Grafana dashboard, Kubernetes manifests). Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# README's quick start and the Envoy walkthrough, run as written, their output checked.
python3 scripts/doc-run.py deploy/examples/quickstart/README.md README.md
scripts/fuzz.sh 20
scripts/test-deploy.sh
