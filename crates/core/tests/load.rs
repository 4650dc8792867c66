//! Loading configuration from files, directories and includes, as `sluice serve --config` does.

use std::path::Path;

use sluice_core::Entry;
use sluice_core::config::load_config;
use sluice_core::rules::Match;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write");
}

const DOMAIN_A: &str =
    "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
const DOMAIN_B: &str =
    "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";

fn knows(config: &sluice_core::config::Config, domain: &str) -> bool {
    matches!(
        config
            .rules
            .match_descriptor(domain, &[Entry::new("k", "v")]),
        Match::Rule(_)
    )
}

#[test]
fn a_directory_of_domain_files_loads_like_envoyproxy_ratelimit_runtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "a.yaml", DOMAIN_A);
    write(dir.path(), "b.yml", DOMAIN_B);
    write(dir.path(), "notes.txt", "not yaml");
    let config = load_config(dir.path()).expect("loads");
    assert!(knows(&config, "a") && knows(&config, "b"));
    assert_eq!(config.files.len(), 2);
}

#[test]
fn include_globs_are_relative_to_the_config_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("limits")).expect("mkdir");
    write(&dir.path().join("limits"), "a.yaml", DOMAIN_A);
    write(&dir.path().join("limits"), "b.yaml", DOMAIN_B);
    write(dir.path(), "sluice.yaml", "include: [limits/*.yaml]\n");
    let config = load_config(&dir.path().join("sluice.yaml")).expect("loads");
    assert!(knows(&config, "a") && knows(&config, "b"));

    write(
        dir.path(),
        "sluice.yaml",
        "include:\n  - limits/*.yaml\n  - missing/*.yaml\n",
    );
    let e = load_config(&dir.path().join("sluice.yaml")).expect_err("matches nothing");
    assert_eq!(
        (e.line, e.message.contains("matches no file")),
        (3, true),
        "{e}"
    );
}

#[test]
fn duplicate_domains_across_files_are_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "a.yaml", DOMAIN_A);
    write(dir.path(), "b.yaml", DOMAIN_A);
    let e = load_config(dir.path()).expect_err("duplicate");
    assert!(
        e.to_string()
            .contains("b.yaml:1: duplicate domain 'a' (also at "),
        "{e}"
    );
}

#[test]
fn version_changes_with_content_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "a.yaml", DOMAIN_A);
    let v1 = load_config(dir.path()).expect("loads").version;
    assert_eq!(load_config(dir.path()).expect("loads").version, v1);
    write(dir.path(), "a.yaml", &DOMAIN_A.replace("1}", "3}"));
    assert_ne!(load_config(dir.path()).expect("loads").version, v1);
}

#[test]
fn bad_files_are_errors_not_silent_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "empty.yaml", "");
    assert!(
        load_config(&dir.path().join("empty.yaml"))
            .expect_err("empty")
            .message
            .contains("empty")
    );
    write(
        dir.path(),
        "two.yaml",
        &format!("{DOMAIN_A}---\n{DOMAIN_B}"),
    );
    assert!(
        load_config(&dir.path().join("two.yaml"))
            .expect_err("two docs")
            .message
            .contains("2 YAML documents")
    );
    write(dir.path(), "typo.yaml", "domians: []\n");
    let e = load_config(&dir.path().join("typo.yaml")).expect_err("unknown field");
    assert_eq!(e.line, 1, "{e}");
    assert!(e.message.contains("domians"), "{e}");
    write(
        dir.path(),
        "engine.yaml",
        "engine: {max_lease_fraction: 2.0}\n",
    );
    assert!(
        load_config(&dir.path().join("engine.yaml"))
            .expect_err("fraction")
            .message
            .contains("max_lease_fraction")
    );
    assert!(load_config(&dir.path().join("absent.yaml")).is_err());
}
