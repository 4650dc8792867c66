#!/usr/bin/env bash
# The deployment checks: builds the container image and runs it; runs the compose demo (Envoy →
# two sluice → Redis, checking the 429s) and checks the Grafana dashboard's metric names against a
# live sidecar; validates every Kubernetes overlay. Needs Docker (with compose), and the tools
# scripts/setup.sh installs. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
image=${SLUICE_IMAGE:-sluice:local}

# From the release binary README's walkthroughs built (scripts/test.sh runs them first): the
# Dockerfile's builder stage takes that binary instead of compiling the sources a third time
# (8 minutes of a 2-core CI; checking them there instead cost 3). Users' builds compile from
# source; what that needs of the build context is checked below.
[ -z "${CARGO_TARGET_DIR:-}" ] || { echo "test-deploy: CARGO_TARGET_DIR must be unset (the image takes target/release/sluice)" >&2; exit 1; }
cargo build --release -q --locked -p sluice
echo "== image: docker build -f deploy/Dockerfile --build-arg SLUICE_PREBUILT=target/release/sluice -t $image ."
docker build -q -f deploy/Dockerfile --build-arg SLUICE_PREBUILT=target/release/sluice -t "$image" . >/dev/null
# The build context (what .dockerignore lets through) holds every file the release build above
# read (cargo's dep-info for the binary: sources, include_str!'d Lua scripts, the protos the
# build scripts watch), every tracked source, manifest, the lock file, the toolchain pin and
# cargo's config: what `cargo build` in that stage needs.
docker build -q -f deploy/Dockerfile --target build --build-arg SLUICE_PREBUILT=target/release/sluice \
  -t "$image-build" . >/dev/null
root=$(pwd -P)
dep_info=$(tr ' ' '\n' < target/release/sluice.d | grep "^$root/.*[^:]\$" \
  | xargs realpath -m --relative-to="$root" | grep -v '^target/' || true)
# Not vacuous: cargo's list must name the sources and the Lua scripts the binary embeds.
grep -qx 'crates/redis/lua/lease.lua' <<<"$dep_info" && grep -qx 'crates/sluice/src/main.rs' <<<"$dep_info" \
  || { echo "image: target/release/sluice.d does not list the build's sources" >&2; exit 1; }
read_by_build=$( { echo "$dep_info"
  git ls-files '*.rs' '*.lua' '*.proto' '*Cargo.toml' Cargo.lock rust-toolchain.toml .cargo; } | sort -u)
in_context=$(docker run --rm --entrypoint find "$image-build" . -type f | sed 's|^\./||' | sort)
missing=$(comm -23 <(echo "$read_by_build") <(echo "$in_context"))
[ -z "$missing" ] || { echo "image: the build context lacks files the build reads:" $missing >&2; exit 1; }
echo "image: the build context holds the $(echo "$read_by_build" | wc -l) files the build reads"
docker image rm -f "$image-build" >/dev/null
want="sluice $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
got=$(docker run --rm "$image" --version)
[ "$got" = "$want" ] || { echo "image: --version printed '$got', want '$want'" >&2; exit 1; }
user=$(docker image inspect -f '{{.Config.User}}' "$image")
[ "$user" = 65532:65532 ] || { echo "image: runs as '$user', want 65532:65532 (non-root)" >&2; exit 1; }
docker run --rm --read-only "$image" config check /etc/sluice/sluice.yaml
# As envoyproxy/ratelimit: /bin/ratelimit, no arguments, the reference's environment (here a
# config directory that does not exist: exit 64, naming it).
status=0
said=$(docker run --rm --read-only --entrypoint /bin/ratelimit -e RUNTIME_ROOT=/none "$image" 2>&1) || status=$?
[ "$status" = 64 ] && grep -q "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY" <<<"$said" \
  || { echo "image: /bin/ratelimit exited $status: $said" >&2; exit 1; }
echo "image (built and checked by ${SECONDS}s): $got, user $user, $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}')"

echo "== compose demo (deploy/demo.sh)"
export DEMO_PORT=${DEMO_PORT:-19000} DEMO_ADMIN_A=${DEMO_ADMIN_A:-19091} DEMO_ADMIN_B=${DEMO_ADMIN_B:-19092}
trap 'deploy/demo.sh --down >/dev/null 2>&1 || true' EXIT
SLUICE_IMAGE=$image DEMO_BUILT=1 deploy/demo.sh --keep
echo "== Grafana dashboard against the demo's sidecar"
# A temporary file, not target/: CARGO_TARGET_DIR may put cargo's output elsewhere.
metrics=$(mktemp)
curl -fsS "127.0.0.1:$DEMO_ADMIN_A/metrics" > "$metrics"
python3 scripts/check-dashboard.py deploy/grafana/sluice.json docs/metrics.md "$metrics"
rm -f "$metrics"
echo "== descriptor values stay in the container without a read token"
# The host reaches the admin port through Docker's port mapping, so sluice sees a peer beyond
# its loopback: /quota must refuse (401) and say why (over loopback it answers: server tests).
code=$(curl -s -o /tmp/sluice-quota-refused -w '%{http_code}' "127.0.0.1:$DEMO_ADMIN_A/quota?domain=demo&client=alice")
[ "$code" = 401 ] && grep -q "served only on loopback" /tmp/sluice-quota-refused \
  || { echo "/quota from beyond loopback: $code $(cat /tmp/sluice-quota-refused)" >&2; exit 1; }
curl -fsS "127.0.0.1:$DEMO_ADMIN_A/metrics" >/dev/null || { echo "/metrics must stay open" >&2; exit 1; }
echo "/quota from the host: 401 ($(head -c 60 /tmp/sluice-quota-refused)…); /metrics open"
rm -f /tmp/sluice-quota-refused
deploy/demo.sh --down
trap - EXIT

echo "== Kubernetes manifests"
# The same release binary (a debug `cargo build -p sluice` after `cargo test` would compile
# the workspace once more).
.tools/k8s-venv/bin/python scripts/validate-k8s.py .tools/bin/kustomize target/release/sluice .tools/bin/envoy
echo "== Istio EnvoyFilter (docs/migrating.md): its patches on a sidecar-like listener"
.tools/k8s-venv/bin/python scripts/validate-envoyfilter.py .tools/bin/envoy deploy/examples/migrating/istio-envoyfilter.yaml
