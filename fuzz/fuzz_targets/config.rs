//! Any text given as a config: an error with a location, or a config; never a panic, a hang or an
//! overflow (YAML alias bombs, huge numbers and durations, deep nesting, odd Unicode).
//! The body is `sluice_fuzzcases::config`, shared with the corpus replay in `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzzcases::config::one(data));
