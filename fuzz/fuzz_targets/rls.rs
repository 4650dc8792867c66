//! `ShouldRateLimit` requests as a hostile caller shapes them (keys the rules know and others, any
//! values, hits from 0 to `u64::MAX`, limit overrides, any units), through the server's validation
//! and a real engine on the bounded embedded store: `INVALID_ARGUMENT` or a decision, never a
//! panic; an allowed request's outcomes all say OK; a cost above a burst is denied as such.
//! The body is `sluice_fuzzcases::rls`, shared with the corpus replay in `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzzcases::rls::one(data));
