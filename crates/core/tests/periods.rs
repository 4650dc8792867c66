//! Flexible periods: `unit_multiplier` makes "100 per 10 minutes" a limit of its own.

use sluice_core::bucket::{BucketState, MAX_PERIOD_SECS};
use sluice_core::config::parse_config;
use sluice_core::rules::{Limit, Match};
use sluice_core::{Entry, Unit};

fn domain(rate_limit: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n")
}

#[test]
fn a_multiplied_unit_is_the_period_of_the_bucket() {
    let config = parse_config(&domain(
        "{unit: minute, unit_multiplier: 10, requests_per_unit: 100}",
    ))
    .expect("loads");
    let Match::Rule(rule) = config.rules.match_descriptor("d", &[Entry::new("k", "v")]) else {
        panic!("a rule");
    };
    let Limit::Limited { rate, .. } = rule.limit else {
        panic!("limited");
    };
    assert_eq!((rate.unit, rate.unit_multiplier), (Unit::Minute, 10));
    assert_eq!(rate.period_secs(), 600);
    let mut bucket = BucketState::full(&rate, 0);
    assert_eq!(bucket.take_up_to(&rate, 0, 1_000), 100, "the burst");
    assert_eq!(
        bucket.take_up_to(&rate, 60_000_000, 1_000),
        10,
        "a tenth of the period refills a tenth"
    );
    assert_eq!(rate.micros_until(0.0, 100.0), Some(600_000_000));
}

#[test]
fn periods_are_checked_where_they_are_written() {
    let refused = |rl: &str| parse_config(&domain(rl)).expect_err("refused").to_string();
    let zero = refused("{unit: second, unit_multiplier: 0, requests_per_unit: 1}");
    assert!(
        zero.contains("config.yaml:3: unit_multiplier must be at least 1"),
        "{zero}"
    );
    let long = refused("{unit: year, unit_multiplier: 101, requests_per_unit: 1}");
    assert!(
        long.contains("longer than the longest, 100 years"),
        "{long}"
    );
    let unlimited = refused("{unlimited: true, unit_multiplier: 2}");
    assert!(unlimited.contains("unit_multiplier"), "{unlimited}");
    let longest = MAX_PERIOD_SECS / Unit::Year.seconds();
    parse_config(&domain(&format!(
        "{{unit: year, unit_multiplier: {longest}, requests_per_unit: 1}}"
    )))
    .expect("100 years is the longest period");
}

/// A period of one unit leaves the rule's identity (and so its store keys) as it was; another
/// period is another limit, with buckets of its own.
#[test]
fn the_multiplier_is_part_of_the_identity_only_when_it_is_not_one() {
    let fingerprint =
        |rl: &str| parse_config(&domain(rl)).expect("loads").rules.rules()[0].fingerprint;
    let plain = fingerprint("{unit: minute, requests_per_unit: 100}");
    assert_eq!(
        plain,
        fingerprint("{unit: minute, unit_multiplier: 1, requests_per_unit: 100}")
    );
    assert_ne!(
        plain,
        fingerprint("{unit: minute, unit_multiplier: 10, requests_per_unit: 100}")
    );
}
