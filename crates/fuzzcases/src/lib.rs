//! The bodies of sluice's fuzz targets, one module per target, each a `one(data: &[u8])` that
//! panics on a broken property and returns otherwise.
//!
//! They live here, in the workspace, so that two runners share them: cargo-fuzz's targets in
//! `fuzz/fuzz_targets/` (each one line around `one`; `scripts/fuzz.sh`, `loadtest/fuzz-long.sh`)
//! explore new inputs with libFuzzer, and this crate's `tests/corpus.rs` replays every committed
//! input of `fuzz/corpus/` as an ordinary test on each `cargo test`, with overflow checks on.
//! A crash fuzzing finds is fixed and its input added to the corpus, so it stays a test.
//!
//! Typed targets read their bytes with `Arbitrary::arbitrary_take_rest`, exactly as libfuzzer-sys's
//! `fuzz_target!(|input: T| …)` does, so a corpus file means the same input to both runners.

pub mod authz;
pub mod config;
pub mod matching;
pub mod rls;
