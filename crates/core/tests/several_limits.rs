//! `rate_limits`: several limits on one descriptor (10 a second and 1000 a day).

use sluice_core::config::parse_config;
use sluice_core::rules::Match;
use sluice_core::{Entry, Unit};

fn domain(limits: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n{limits}")
}

#[test]
fn every_limit_is_a_rule_of_its_own_and_the_first_leads() {
    let config = parse_config(&domain(
        "    rate_limits:\n      - {unit: second, requests_per_unit: 10}\n      - {unit: day, requests_per_unit: 1000, name: daily}\n      - {unit: hour, requests_per_unit: 100}\n",
    ))
    .expect("loads");
    let Match::Rule(first) = config.rules.match_descriptor("d", &[Entry::new("k", "v")]) else {
        panic!("a rule");
    };
    let limits = config.rules.limits_of(first);
    assert_eq!(limits.len(), 3);
    assert_eq!(limits[0].id, first.id);
    let labels: Vec<&str> = limits.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(
        labels,
        ["d:k", "daily", "d:k#3"],
        "unnamed limits get labels of their own"
    );
    let units: Vec<Unit> = limits
        .iter()
        .map(|r| match r.limit {
            sluice_core::rules::Limit::Limited { rate, .. } => rate.unit,
            sluice_core::rules::Limit::Unlimited => panic!("limited"),
        })
        .collect();
    assert_eq!(units, [Unit::Second, Unit::Day, Unit::Hour]);
    assert!(limits.iter().all(|r| r.limits == first.limits));
}

/// The first of `rate_limits` keeps the identity (and so the buckets) the same limit had as a
/// single `rate_limit`: adding a daily limit to a per-second one keeps its state.
#[test]
fn adding_a_limit_keeps_the_first_ones_buckets() {
    let fingerprint =
        |yaml: &str| parse_config(&domain(yaml)).expect("loads").rules.rules()[0].fingerprint;
    assert_eq!(
        fingerprint("    rate_limit: {unit: second, requests_per_unit: 10}\n"),
        fingerprint(
            "    rate_limits:\n      - {unit: second, requests_per_unit: 10}\n      - {unit: day, requests_per_unit: 1000}\n"
        )
    );
}

#[test]
fn malformed_lists_are_refused_where_they_are_written() {
    let refused = |limits: &str| {
        parse_config(&domain(limits))
            .expect_err("refused")
            .to_string()
    };
    let both = refused(
        "    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: day, requests_per_unit: 5}]\n",
    );
    assert!(
        both.contains("config.yaml:3: give either `rate_limit` or `rate_limits`"),
        "{both}"
    );
    let empty = refused("    rate_limits: []\n");
    assert!(
        empty.contains("rate_limits needs at least one limit"),
        "{empty}"
    );
    let twice = refused(
        "    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: second, requests_per_unit: 1}\n",
    );
    assert!(twice.contains("holds the same limit twice"), "{twice}");
    let unlimited = refused(
        "    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unlimited: true}\n",
    );
    assert!(
        unlimited.contains("cannot stand with other limits"),
        "{unlimited}"
    );
    let bad_unit = refused(
        "    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: fortnight, requests_per_unit: 1}\n",
    );
    assert!(
        bad_unit.contains("invalid rate limit unit 'fortnight'"),
        "{bad_unit}"
    );
}
