//! Every committed fuzz input (`fuzz/corpus/<target>/`) through its target's body: what libFuzzer
//! found interesting once, and every crash it found and we fixed, is checked on each
//! `cargo test`, with overflow checks and debug assertions on. New inputs are explored by
//! `scripts/fuzz.sh` and `loadtest/fuzz-long.sh`.

use std::path::PathBuf;

fn replay(target: &str, one: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .collect();
    files.sort();
    // A corpus that went missing would make this test pass without checking anything.
    assert!(
        files.len() >= 50,
        "{target}: only {} inputs in {}",
        files.len(),
        dir.display()
    );
    for file in &files {
        let data = std::fs::read(file).expect("corpus file");
        let outcome = std::panic::catch_unwind(|| one(&data));
        assert!(outcome.is_ok(), "{target}: {} fails", file.display());
    }
}

#[test]
fn the_config_corpus_passes() {
    replay("config", sluice_fuzzcases::config::one);
}

#[test]
fn the_matching_corpus_passes() {
    replay("matching", sluice_fuzzcases::matching::one);
}

#[test]
fn the_authz_corpus_passes() {
    replay("authz", sluice_fuzzcases::authz::one);
}

#[test]
fn the_rls_corpus_passes() {
    replay("rls", sluice_fuzzcases::rls::one);
}
