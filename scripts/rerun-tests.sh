#!/usr/bin/env bash
# Runs again integration-test binaries the workspace's `cargo test` built, without building
# anything: PACKAGE TARGET... (that package's tests/TARGET.rs), each from the package's
# directory as cargo runs it, with this environment (scripts/test.sh: the Redis suites on
# Valkey). A second `cargo test` naming only some targets resolves another build plan and
# rebuilds much of the workspace (3.5 min of CI). Fails if a target is missing or a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/rerun-tests.sh PACKAGE TARGET..." >&2; exit 64; }
list=$(cargo test --workspace --locked --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
pkg, wanted = sys.argv[1], sys.argv[2:]
found = {}
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    # package_id: "path+file:///…/crates/redis#sluice-redis@0.1.0"
    if t["kind"] == ["test"] and t["name"] in wanted and m["package_id"].split("#")[-1].split("@")[0] == pkg:
        found[t["name"]] = (os.path.dirname(m["manifest_path"]), m["executable"])
missing = [w for w in wanted if w not in found]
if missing:
    sys.exit("rerun-tests: no test target %s in %s (was it built?)" % (", ".join(missing), pkg))
for w in wanted:
    print("%s\t%s" % found[w])
' "$@")
while IFS=$'\t' read -r dir exe; do
  echo "rerun-tests: $(basename "$exe")"
  (cd "$dir" && "$exe")
done <<< "$list"
