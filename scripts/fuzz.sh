#!/usr/bin/env bash
# Fuzzes every cargo-fuzz target in fuzz/ for SECONDS each (default 20), starting from the
# committed corpus (copied, so the run does not change it). Fails on any crash, with the input
# saved under fuzz/artifacts/<target>/ (fix it, then add the input to fuzz/corpus/<target>/:
# `cargo test` replays the corpus, crates/fuzzcases). Run by hand and by loadtest/fuzz-long.sh
# (long runs); CI replays the corpus instead. TARGETS="a b" fuzzes only those targets. Installs
# cargo-fuzz if it is missing.
#
# cargo-fuzz wants a nightly compiler for its sanitizer flags. With `-s none` (no sanitizer:
# Rust code is memory safe, and what we look for are panics, overflows and hangs) the only
# unstable flags left are accepted by the pinned stable compiler under RUSTC_BOOTSTRAP=1.
# Built optimized *with* overflow checks and debug assertions (cargo-fuzz's default; its `-O`
# turns them off, which an earlier version of this script passed: an overflow went unseen).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-20}
CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  cargo install --locked --quiet cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi
export RUSTC_BOOTSTRAP=1
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
(cd fuzz && cargo fuzz build -s none)
for target in ${TARGETS:-$(cd fuzz && cargo fuzz list)}; do
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$target/." "$work/" 2>/dev/null || true
  echo "fuzz: $target for ${SECONDS_EACH}s"
  (cd fuzz && cargo fuzz run -s none "$target" "$work" -- \
    -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 2>&1 |
    grep -E '^(Done|stat::number_of_executed_units|==|thread|SUMMARY)|panicked|crash-' || true)
  rm -rf "$work"
  # Any one kind of failing input fails the run (`ls` of all three globs failed unless all three
  # kinds were there, so a crash alone went unnoticed).
  if compgen -G "fuzz/artifacts/$target/crash-*" >/dev/null \
     || compgen -G "fuzz/artifacts/$target/timeout-*" >/dev/null \
     || compgen -G "fuzz/artifacts/$target/oom-*" >/dev/null; then
    echo "fuzz: $target found a failing input: fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
