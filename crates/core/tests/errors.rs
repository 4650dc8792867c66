//! What a config with mistakes says: every mistake in one run, each at its file and line with
//! its field, in words a user can act on; and large real configs load while alias bombs do not.

use std::path::Path;

use sluice_core::config::{ConfigError, MemReader, load_from};

fn errors(files: &[(&str, &str)], path: &str) -> Vec<String> {
    let source = files
        .iter()
        .fold(MemReader::new(), |s, (name, text)| s.file(name, *text));
    let e: ConfigError = load_from(&source, Path::new(path)).expect_err("refused");
    e.to_string().lines().map(str::to_string).collect()
}

#[test]
fn three_mistakes_are_three_lines_of_one_run_in_file_order() {
    let file = "\
domain: d
descriptors:
  - key: a
    rate_limit: {unit: secnd, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: ten}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1, brust: 2}
  - key: ok
    rate_limit: {unit: second, requests_per_unit: 1}
";
    assert_eq!(
        errors(&[("d.yaml", file)], "d.yaml"),
        [
            "d.yaml:4: invalid rate limit unit 'secnd' (expected second, minute, hour, day, week, month or year)",
            "d.yaml:6: requests_per_unit: \"ten\" is not a whole number from 0 to 4294967295",
            "d.yaml:8: unknown field `brust`, expected one of unit, requests_per_unit, unit_multiplier, \
             unlimited, name, replaces, algorithm, count_denied, burst, mode, fallback, charge, max_debt, concurrency, hold_timeout, reserve",
        ]
    );
}

#[test]
fn mistakes_in_several_files_and_nested_levels_come_together() {
    let config = "\
include: [limits/*.yaml]
domains:
  - domain: main
    descriptors:
      - key: a
        descriptors:
          - key: b
            rate_limit: {unit: second, requests_per_unit: -1}
      - key: a
        rate_limit: {unit: second, requests_per_unit: 1}
";
    let limits = "\
domain: other
descriptors:
  - key: x
    shadow_mode: maybe
    rate_limit: {unit: second, requests_per_unit: 1}
";
    let got = errors(
        &[("sluice.yaml", config), ("limits/other.yaml", limits)],
        "sluice.yaml",
    );
    assert_eq!(
        got,
        [
            "sluice.yaml:8: requests_per_unit: \"-1\" is not a whole number from 0 to 4294967295",
            "sluice.yaml:9: duplicate descriptor composite key 'main: a' (first at line 5)",
            "limits/other.yaml:4: shadow_mode: \"maybe\" is not true or false",
        ]
    );
}

#[test]
fn parser_messages_are_said_for_users() {
    let dup_key = "domain: d\ndescriptors:\n  - key: a\n    key: b\n";
    assert_eq!(
        errors(&[("d.yaml", dup_key)], "d.yaml"),
        ["d.yaml:4: `key` is given twice in one mapping: write each key once"]
    );
    // A tab in an indentation is named at its own line (the parser named the line before).
    let tabs = "domain: d\ndescriptors:\n  - key: a\n\trate_limit: {}\n  - key: b\n \t value: x\n";
    assert_eq!(
        errors(&[("d.yaml", tabs)], "d.yaml"),
        [
            "d.yaml:4: a tab in the indentation: YAML indents with spaces only",
            "d.yaml:6: a tab in the indentation: YAML indents with spaces only",
        ]
    );
}

#[test]
fn a_file_of_forty_thousand_descriptor_values_loads() {
    // Per-customer entries, as envoyproxy/ratelimit configs have them: refused by the parser's
    // default node budget above about 22 000.
    let mut file = String::from("domain: big\ndescriptors:\n");
    for i in 0..40_000 {
        file.push_str(&format!(
            "  - key: customer\n    value: c{i}\n    rate_limit: {{unit: minute, requests_per_unit: 100}}\n"
        ));
    }
    let source = MemReader::new().file("big.yaml", file.as_str());
    let config = load_from(&source, Path::new("big.yaml")).expect("loads");
    assert_eq!(config.rules.rules().len(), 40_000);
}

#[test]
fn thousands_of_the_same_mistake_print_fifty_lines_and_the_count() {
    let mut file = String::from("domain: d\ndescriptors:\n");
    for i in 0..20_000 {
        file.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: secnd, requests_per_unit: 1}}\n"
        ));
    }
    let got = errors(&[("d.yaml", &file)], "d.yaml");
    assert_eq!(got.len(), 51, "{:?}", &got[..3]);
    assert!(
        got[0].starts_with("d.yaml:4: invalid rate limit unit 'secnd'"),
        "{}",
        got[0]
    );
    assert!(got[49].starts_with("d.yaml:102: "), "{}", got[49]);
    assert_eq!(got[50], "… and 19950 more errors (fix these first)");
}

#[test]
fn an_alias_bomb_is_refused_with_what_to_do() {
    // Ten levels of ten aliases each: 10^10 nodes from a few hundred bytes.
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    bomb.push_str("domain: d\ndescriptors: *a9\n");
    let got = errors(&[("bomb.yaml", &bomb)], "bomb.yaml");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("bomb.yaml:") && got[0].contains("split it into several files"),
        "{got:?}"
    );
}
