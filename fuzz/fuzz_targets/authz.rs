//! An ext_authz request, as a hostile client shapes it (headers, path, query, peer): descriptors
//! or none, never a panic; client addresses that come out are canonical IP addresses; an API key
//! used as the value never comes out raw.
//! The body is `sluice_fuzzcases::authz`, shared with the corpus replay in `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzzcases::authz::one(data));
