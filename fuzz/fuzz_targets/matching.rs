//! Descriptor matching and `*` wildcards on any entries: a rule or none, never a panic; a pattern
//! without `*` matches only itself, and a value always matches its own wildcarded forms.
//! The body is `sluice_fuzzcases::matching`, shared with the corpus replay in `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzzcases::matching::one(data));
