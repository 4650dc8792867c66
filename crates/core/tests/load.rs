//! Loading configuration from files, directories and includes, as `sluice serve --config` does.
//! The files live in a [`MemReader`]; one test reads a real directory through [`FsReader`].

use std::path::Path;

use sluice_core::Entry;
use sluice_core::config::{Config, ConfigError, MemReader, load_config, load_from};
use sluice_core::rules::Match;

const DOMAIN_A: &str =
    "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
const DOMAIN_B: &str =
    "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";

fn knows(config: &Config, domain: &str) -> bool {
    matches!(
        config
            .rules
            .match_descriptor(domain, &[Entry::new("k", "v")]),
        Match::Rule(_)
    )
}

fn load(source: &MemReader, path: &str) -> Result<Config, ConfigError> {
    load_from(source, Path::new(path))
}

#[test]
fn a_directory_of_domain_files_loads_like_envoyproxy_ratelimit_runtime() {
    let source = MemReader::new()
        .file("conf/a.yaml", DOMAIN_A)
        .file("conf/b.yml", DOMAIN_B)
        .file("conf/notes.txt", "not yaml")
        .file("conf/.hidden.yaml", "not: read");
    let config = load(&source, "conf").expect("loads");
    assert!(knows(&config, "a") && knows(&config, "b"));
    assert_eq!(config.files.len(), 2);
}

#[test]
fn include_globs_are_relative_to_the_config_file() {
    let source = MemReader::new()
        .file("etc/limits/a.yaml", DOMAIN_A)
        .file("etc/limits/b.yaml", DOMAIN_B)
        .file("etc/sluice.yaml", "include: [limits/*.yaml]\n");
    let config = load(&source, "etc/sluice.yaml").expect("loads");
    assert!(knows(&config, "a") && knows(&config, "b"));

    let source = source.file(
        "etc/sluice.yaml",
        "include:\n  - limits/*.yaml\n  - missing/*.yaml\n",
    );
    let e = load(&source, "etc/sluice.yaml").expect_err("matches nothing");
    assert_eq!(
        (e.line, e.message.contains("matches no file")),
        (3, true),
        "{e}"
    );
}

#[test]
fn duplicate_domains_across_files_are_rejected() {
    let source = MemReader::new()
        .file("d/a.yaml", DOMAIN_A)
        .file("d/b.yaml", DOMAIN_A);
    let e = load(&source, "d").expect_err("duplicate");
    assert!(
        e.to_string()
            .contains("b.yaml:1: duplicate domain 'a' (also at "),
        "{e}"
    );
}

#[test]
fn version_changes_with_content_only() {
    let source = MemReader::new().file("d/a.yaml", DOMAIN_A);
    let v1 = load(&source, "d").expect("loads").version;
    assert_eq!(load(&source, "d").expect("loads").version, v1);
    let changed = source.file("d/a.yaml", DOMAIN_A.replace("1}", "3}"));
    assert_ne!(load(&changed, "d").expect("loads").version, v1);
}

#[test]
fn bad_files_are_errors_not_silent_passes() {
    let source = MemReader::new()
        .file("empty.yaml", "")
        .file("two.yaml", format!("{DOMAIN_A}---\n{DOMAIN_B}"))
        .file("typo.yaml", "domians: []\n");
    let e = load(&source, "empty.yaml").expect_err("empty");
    assert!(e.message.contains("empty"), "{e}");
    let e = load(&source, "two.yaml").expect_err("two docs");
    assert!(e.message.contains("2 YAML documents"), "{e}");
    let e = load(&source, "typo.yaml").expect_err("unknown field");
    assert_eq!(e.line, 1, "{e}");
    assert!(e.message.contains("domians"), "{e}");
    assert!(load(&source, "absent.yaml").is_err());
}

/// The edge: the same loader over the real file system.
#[test]
fn reads_a_real_directory_with_includes() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("limits")).expect("mkdir");
    std::fs::write(dir.path().join("limits/a.yaml"), DOMAIN_A).expect("write");
    std::fs::write(dir.path().join("limits/b.yaml"), DOMAIN_B).expect("write");
    std::fs::write(dir.path().join("sluice.yaml"), "include: [limits/*.yaml]\n").expect("write");
    let config = load_config(&dir.path().join("sluice.yaml")).expect("loads");
    assert!(knows(&config, "a") && knows(&config, "b"));
    assert_eq!(config.files.len(), 3);
    let dir_config = load_config(&dir.path().join("limits")).expect("loads a directory");
    assert!(knows(&dir_config, "a") && knows(&dir_config, "b"));
}
