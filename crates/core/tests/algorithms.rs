//! `rate_limit.algorithm`: token_bucket (default), fixed_window, sliding_window.

use sluice_core::bucket::Algorithm;
use sluice_core::config::parse_config;
use sluice_core::rules::Limit;

fn domain(rate_limit: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n")
}

fn algorithm(rate_limit: &str) -> Algorithm {
    let config = parse_config(&domain(rate_limit)).expect("loads");
    match config.rules.rules()[0].limit {
        Limit::Limited { rate, .. } => rate.algorithm,
        Limit::Unlimited => panic!("limited"),
    }
}

#[test]
fn each_algorithm_is_chosen_per_rate_limit() {
    assert_eq!(
        algorithm("{unit: minute, requests_per_unit: 5}"),
        Algorithm::TokenBucket
    );
    assert_eq!(
        algorithm("{unit: minute, requests_per_unit: 5, algorithm: fixed_window}"),
        Algorithm::FixedWindow
    );
    assert_eq!(
        algorithm("{unit: minute, requests_per_unit: 5, algorithm: sliding_window}"),
        Algorithm::SlidingWindow
    );
}

#[test]
fn what_an_algorithm_cannot_take_is_refused_with_its_line() {
    let refused = |rl: &str| parse_config(&domain(rl)).expect_err("refused").to_string();
    let burst = refused("{unit: minute, requests_per_unit: 5, burst: 9, algorithm: fixed_window}");
    assert!(
        burst.contains("config.yaml:3: burst applies to algorithm: token_bucket"),
        "{burst}"
    );
    let unknown = refused("{unit: minute, requests_per_unit: 5, algorithm: leaky_bucket}");
    assert!(unknown.contains("leaky_bucket"), "{unknown}");
    let unlimited = refused("{unlimited: true, algorithm: sliding_window}");
    assert!(unlimited.contains("algorithm"), "{unlimited}");
}

/// `algorithm: token_bucket` written out keeps the identity of a rule that never named it; a
/// window is another limit, with buckets of its own.
#[test]
fn only_windows_change_a_rules_identity() {
    let fingerprint =
        |rl: &str| parse_config(&domain(rl)).expect("loads").rules.rules()[0].fingerprint;
    let plain = fingerprint("{unit: minute, requests_per_unit: 5}");
    assert_eq!(
        plain,
        fingerprint("{unit: minute, requests_per_unit: 5, algorithm: token_bucket}")
    );
    let fixed = fingerprint("{unit: minute, requests_per_unit: 5, algorithm: fixed_window}");
    let sliding = fingerprint("{unit: minute, requests_per_unit: 5, algorithm: sliding_window}");
    assert!(plain != fixed && fixed != sliding && plain != sliding);
}

#[test]
fn count_denied_belongs_to_fixed_windows() {
    let rules = |rl: &str| parse_config(&domain(rl)).map(|c| c.rules.rules()[0].count_denied);
    assert_eq!(
        rules("{unit: minute, requests_per_unit: 5, algorithm: fixed_window}"),
        Ok(false),
        "off by default (see docs/configuration.md, Algorithms)"
    );
    assert_eq!(
        rules("{unit: minute, requests_per_unit: 5, algorithm: fixed_window, count_denied: true}"),
        Ok(true)
    );
    let e = rules("{unit: minute, requests_per_unit: 5, count_denied: true}").expect_err("refused");
    assert!(
        e.message
            .contains("count_denied applies to algorithm: fixed_window"),
        "{e}"
    );
}
