use super::*;
use crate::Unit;
use crate::config::load::INLINE_CONFIG;
use crate::config::parse_config;
use crate::descriptor::Entry;
use crate::error::ConfigError;
use crate::rate::Rate;
use crate::schema::{Fallback, Mode};
use proptest::prelude::*;

/// Loads `text` as a config file.
fn load(text: &str) -> Result<crate::config::Config, ConfigError> {
    parse_config(text)
}

fn rule_of<'a>(set: &'a RuleSet, domain: &str, pairs: &[(&str, &str)]) -> Match<'a> {
    let entries: Vec<Entry> = pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect();
    set.match_descriptor(domain, &entries)
}

fn name_of(m: Match<'_>) -> Option<String> {
    match m {
        Match::Rule(r) => Some(r.label.clone()),
        _ => None,
    }
}

/// The example from envoyproxy/ratelimit's README, unchanged.
const RATELIMIT_README: &str = r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
---
"#;

const EXAMPLE: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      name: per_ip
      unit: minute
      requests_per_unit: 10
  - key: remote_address
    value: 10.0.0.1
  - key: path
    value: /api/*/upload
    rate_limit:
      name: uploads
      unit: hour
      requests_per_unit: 5
  - key: path
    value: /api/v1/upload
    rate_limit:
      name: v1_uploads
      unit: hour
      requests_per_unit: 50
  - key: tenant
    descriptors:
      - key: tier
        value: free
        rate_limit: {unit: second, requests_per_unit: 1, name: free}
      - key: tier
        rate_limit: {unit: second, requests_per_unit: 100, burst: 200, mode: local, name: paid}
"#;

#[test]
fn loads_envoyproxy_ratelimit_files_unchanged() {
    let config = load(RATELIMIT_README).expect("loads");
    let m = rule_of(&config.rules, "mongo_cps", &[("database", "users")]);
    let Match::Rule(rule) = m else {
        panic!("no rule: {m:?}")
    };
    assert_eq!(
        rule.limit,
        Limit::Limited {
            rate: Rate::per_unit(500, Unit::Second),
            mode: Mode::Strict,
            fallback: Fallback::LocalShare,
            payment: Payment::Prepaid,
        }
    );
    assert_eq!(
        rule_of(&config.rules, "mongo_cps", &[("database", "other")]),
        Match::NoRule
    );
    assert_eq!(
        rule_of(&config.rules, "nope", &[("database", "users")]),
        Match::UnknownDomain
    );
}

#[test]
fn most_specific_match_wins_and_a_value_without_limit_exempts() {
    let config = load(EXAMPLE).expect("loads");
    let rules = &config.rules;
    assert_eq!(
        name_of(rule_of(rules, "edge", &[("remote_address", "1.2.3.4")])).as_deref(),
        Some("per_ip")
    );
    assert_eq!(
        rule_of(rules, "edge", &[("remote_address", "10.0.0.1")]),
        Match::NoRule,
        "exempt"
    );
    assert_eq!(
        name_of(rule_of(rules, "edge", &[("path", "/api/v1/upload")])).as_deref(),
        Some("v1_uploads"),
        "exact beats wildcard"
    );
    assert_eq!(
        name_of(rule_of(rules, "edge", &[("path", "/api/v2/upload")])).as_deref(),
        Some("uploads"),
        "wildcard in the middle"
    );
    assert_eq!(
        rule_of(rules, "edge", &[("path", "/api/v2/download")]),
        Match::NoRule
    );
}

#[test]
fn nested_rules_apply_only_at_the_last_entry() {
    let config = load(EXAMPLE).expect("loads");
    let rules = &config.rules;
    assert_eq!(
        name_of(rule_of(rules, "edge", &[("tenant", "a"), ("tier", "free")])).as_deref(),
        Some("free")
    );
    let paid = rule_of(rules, "edge", &[("tenant", "a"), ("tier", "gold")]);
    let Match::Rule(rule) = paid else {
        panic!("{paid:?}")
    };
    assert_eq!(
        rule.limit,
        Limit::Limited {
            rate: Rate {
                requests_per_unit: 100,
                unit: Unit::Second,
                unit_multiplier: 1,
                burst: 200,
                algorithm: crate::bucket::Algorithm::TokenBucket,
            },
            mode: Mode::Local,
            fallback: Fallback::LocalShare,
            payment: Payment::Prepaid,
        }
    );
    assert_eq!(
        rule_of(rules, "edge", &[("tenant", "a")]),
        Match::NoRule,
        "tenant alone has no limit"
    );
    assert_eq!(
        rule_of(
            rules,
            "edge",
            &[("remote_address", "1.2.3.4"), ("extra", "x")]
        ),
        Match::NoRule,
        "a descriptor longer than the tree matches nothing"
    );
    assert_eq!(rule_of(rules, "edge", &[]), Match::NoRule);
}

fn load_err(text: &str) -> String {
    let e = load(text).expect_err("must be rejected");
    assert!(e.file.ends_with(INLINE_CONFIG), "{e}");
    format!("{}: {}", e.line, e.message)
}

#[test]
fn rejects_what_envoyproxy_ratelimit_rejects_with_the_line() {
    let dup = "domain: d\ndescriptors:\n  - key: a\n    value: x\n  - key: a\n    value: x\n";
    assert!(
        load_err(dup).starts_with("5: duplicate descriptor composite key"),
        "{}",
        load_err(dup)
    );
    let unlimited_unit =
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n";
    assert!(load_err(unlimited_unit).contains("should not specify rate limit unit when unlimited"));
    let self_replace = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n";
    assert!(load_err(self_replace).contains("replaces should not contain name of same descriptor"));
    let misspelled = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      request_per_unit: 5\n";
    let e = load_err(misspelled);
    assert!(
        e.starts_with("6: ") && e.contains("request_per_unit"),
        "{e}"
    );
    let bad_unit = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n";
    assert!(
        load_err(bad_unit).starts_with("5: invalid rate limit unit 'fortnight'"),
        "{}",
        load_err(bad_unit)
    );
    let no_unit = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 5}\n";
    assert!(load_err(no_unit).contains("invalid rate limit unit"));
    let empty_domain = "domain: ''\ndescriptors: []\n";
    assert!(load_err(empty_domain).contains("empty domain"));
    let empty_key = "domain: d\ndescriptors:\n  - key: ''\n";
    assert!(load_err(empty_key).contains("empty key"));
    let bad_mode = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, mode: eventually}\n";
    assert!(
        load_err(bad_mode).starts_with("4: "),
        "{}",
        load_err(bad_mode)
    );
}

#[test]
fn numeric_values_load_as_strings() {
    let text = "domain: d\ndescriptors:\n  - key: status\n    value: 200\n    rate_limit: {unit: second, requests_per_unit: 3}\n";
    let config = load(text).expect("loads");
    assert!(matches!(
        rule_of(&config.rules, "d", &[("status", "200")]),
        Match::Rule(_)
    ));
}

#[test]
fn fingerprints_are_stable_and_follow_the_limit() {
    let a = load(EXAMPLE).expect("loads");
    let b = load(EXAMPLE).expect("loads");
    let fa: Vec<u64> = a.rules.rules().iter().map(|r| r.fingerprint).collect();
    let fb: Vec<u64> = b.rules.rules().iter().map(|r| r.fingerprint).collect();
    assert_eq!(fa, fb);
    let changed =
        load(&EXAMPLE.replace("requests_per_unit: 10", "requests_per_unit: 11")).expect("loads");
    assert_ne!(changed.rules.rules()[0].fingerprint, fa[0]);
    assert_eq!(changed.rules.rules()[1].fingerprint, fa[1]);
}

/// Store keys carry rule fingerprints, and sidecars of two versions share Redis during a rollout:
/// these values were computed by sluice 0.1.0 and must never change.
#[test]
fn fingerprints_match_the_released_values() {
    const GOLDEN: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: user
    shadow_mode: true
    rate_limit: {unit: Minute, requests_per_unit: 100, burst: 250, mode: exact, fallback: deny}
  - key: tenant
    value: "a*"
    rate_limit: {unit: hour, requests_per_unit: 4294967295, mode: local, fallback: allow}
    descriptors:
      - key: path
        rate_limit: {unit: year, requests_per_unit: 0, burst: 7}
  - key: free
    rate_limit: {unlimited: true}
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 3, name: w}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 3}
  - key: daily
    rate_limit: {unit: day, requests_per_unit: 3}
"#;
    let config = load(GOLDEN).expect("loads");
    let got: Vec<(&str, String)> = config
        .rules
        .rules()
        .iter()
        .map(|r| (r.path.as_str(), format!("{:016x}", r.fingerprint)))
        .collect();
    let want = [
        ("remote_address", "69b91f7c4e85fc42"),
        ("user", "a4e833913d3af293"),
        ("tenant=a*", "8b47ab3b22d7e916"),
        ("tenant=a* > path", "e717958b4544a380"),
        ("free", "442b57c6fc91da87"),
        ("weekly", "f28a20da04f3c7de"),
        ("monthly", "fbeb28d1596408fc"),
        ("daily", "fc31d9d1fcbd4bd0"),
    ];
    let want: Vec<(&str, String)> = want.iter().map(|(p, f)| (*p, f.to_string())).collect();
    assert_eq!(got, want);
}

#[test]
fn wildcards_match_anywhere() {
    assert!(wildcard_match("*", ""));
    assert!(wildcard_match("foo*", "foobar"));
    assert!(wildcard_match("*bar", "foobar"));
    assert!(wildcard_match("f*o*r", "foobar"));
    assert!(wildcard_match("a*a", "aa"));
    assert!(!wildcard_match("a*a", "a"));
    assert!(!wildcard_match("foo*", "fo"));
    assert!(!wildcard_match("*x*", "abc"));
}

proptest! {
    /// Replacing any slice of a value by `*` gives a pattern that matches it.
    #[test]
    fn a_value_matches_its_own_wildcarded_forms(value in "[a-c/]{0,12}", a in 0usize..13, b in 0usize..13) {
        let (lo, hi) = (a.min(b).min(value.len()), a.max(b).min(value.len()));
        let pattern = format!("{}*{}", &value[..lo], &value[hi..]);
        prop_assert!(wildcard_match(&pattern, &value));
    }

    /// A pattern without `*` matches only itself.
    #[test]
    fn literal_patterns_are_exact(p in "[a-c]{0,6}", v in "[a-c]{0,6}") {
        prop_assert_eq!(wildcard_match(&p, &v), p == v);
    }
}

/// `charge: post_paid` with its debt bound (default: the burst); the bound is checked where it is
/// written; switching a rule between prepaid and post-paid keeps its buckets (same identity).
#[test]
fn post_paid_rules_carry_a_bounded_debt() {
    let limit_of = |rate_limit: &str| {
        let text = format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n");
        let config = load(&text).expect("loads");
        let rule = &config.rules.rules()[0];
        (rule.limit, rule.fingerprint)
    };
    let (prepaid, id) = limit_of("{unit: minute, requests_per_unit: 1000}");
    let (default_debt, same_id) =
        limit_of("{unit: minute, requests_per_unit: 1000, burst: 1500, charge: post_paid}");
    let Limit::Limited { payment, .. } = prepaid else {
        panic!("{prepaid:?}")
    };
    assert_eq!(payment, Payment::Prepaid);
    let Limit::Limited { payment, .. } = default_debt else {
        panic!("{default_debt:?}")
    };
    assert_eq!(
        payment,
        Payment::PostPaid {
            max_debt: 1500,
            reserve: None
        }
    );
    let (explicit, _) = limit_of(
        "{unit: minute, requests_per_unit: 1000, charge: post_paid, max_debt: 9007199254740992}",
    );
    let Limit::Limited { payment, .. } = explicit else {
        panic!("{explicit:?}")
    };
    assert_eq!(
        payment,
        Payment::PostPaid {
            max_debt: MAX_DEBT,
            reserve: None
        }
    );
    let (_, post_paid_id) = limit_of("{unit: minute, requests_per_unit: 1000, charge: post_paid}");
    assert_eq!(id, post_paid_id, "the charge is not part of the identity");
    assert_ne!(id, same_id, "the burst is");

    let rejected = |rate_limit: &str| {
        load_err(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n"
        ))
    };
    assert_eq!(
        rejected("{unit: second, requests_per_unit: 1, max_debt: 5}"),
        "3: max_debt applies only with charge: post_paid"
    );
    assert_eq!(
        rejected(
            "{unit: second, requests_per_unit: 1, charge: post_paid, max_debt: 9007199254740993}"
        ),
        "3: max_debt 9007199254740993 is above the largest, 9007199254740992 (2^53)"
    );
    assert!(
        rejected("{unlimited: true, charge: post_paid}").contains("takes no"),
        "unlimited"
    );
    assert!(
        rejected("{unit: second, requests_per_unit: 1, charge: later}").contains("unknown variant"),
        "a misspelt charge"
    );
}

#[test]
fn concurrency_rules_are_slots_with_a_hold_timeout_and_bad_ones_say_why() {
    let limit_of = |rate_limit: &str| {
        let text = format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n");
        let config = load(&text).expect("loads");
        let rule = &config.rules.rules()[0];
        (rule.limit, rule.fingerprint)
    };
    let (limit, id) = limit_of("{concurrency: 4}");
    let Limit::Limited { rate, mode, .. } = limit else {
        panic!("{limit:?}")
    };
    assert_eq!(
        (rate.requests_per_unit, rate.burst, rate.period_secs(), mode),
        (0, 4, 300, Mode::Strict),
        "4 slots, never refilled, a 5-minute hold timeout by default"
    );
    assert_eq!(rate.algorithm, crate::rate::Algorithm::Concurrency);
    let (_, longer) = limit_of("{concurrency: 4, hold_timeout: 10m}");
    assert_ne!(id, longer, "the hold timeout is part of the identity");
    // Not the identity of a rate with the same numbers.
    let (_, rate_id) =
        limit_of("{unit: second, unit_multiplier: 300, requests_per_unit: 0, burst: 4}");
    assert_ne!(id, rate_id);

    let rejected = |rate_limit: &str| {
        load_err(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n"
        ))
    };
    assert!(rejected("{concurrency: 4, unit: second}").contains("takes no unit"));
    assert!(rejected("{concurrency: 4, requests_per_unit: 5}").contains("takes no"));
    assert!(rejected("{concurrency: 0}").contains("between 1 and 1000000"));
    assert!(rejected("{concurrency: 1000001}").contains("between 1 and 1000000"));
    assert!(rejected("{concurrency: 4, mode: exact}").contains("not exact"));
    assert!(rejected("{concurrency: 4, hold_timeout: 1500ms}").contains("whole seconds"));
    assert!(rejected("{concurrency: 4, hold_timeout: 25h}").contains("24h"));
    assert!(
        rejected("{unit: second, requests_per_unit: 1, hold_timeout: 5s}")
            .contains("hold_timeout applies only with concurrency")
    );
    assert!(
        rejected("{unit: second, requests_per_unit: 1, algorithm: concurrency}")
            .contains("unknown variant"),
        "not an algorithm spelling"
    );
    let reserved = load_err(
        "domain: d\ndescriptors:\n  - key: sluice-hold\n    rate_limit: {concurrency: 1}\n",
    );
    assert!(reserved.contains("'sluice-hold' is reserved"), "{reserved}");
}

#[test]
fn reservations_need_a_post_paid_rule_and_estimates_it_can_pay() {
    let rejected = |rate_limit: &str| {
        load_err(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n"
        ))
    };
    let base = "unit: minute, requests_per_unit: 1000";
    assert!(
        rejected(&format!("{{{base}, reserve: {{default: 10}}}}"))
            .contains("reserve applies only with charge: post_paid")
    );
    assert!(
        rejected(&format!(
            "{{{base}, charge: post_paid, reserve: {{default: 10, max: 1001}}}}"
        ))
        .contains("reserve.max must be between 1 and the burst (1000)")
    );
    assert!(
        rejected(&format!(
            "{{{base}, charge: post_paid, reserve: {{default: 0}}}}"
        ))
        .contains("reserve.default must be between 1")
    );
    assert!(
        rejected(&format!(
            "{{{base}, charge: post_paid, reserve: {{default: 20, max: 10}}}}"
        ))
        .contains("reserve.default must be between 1 and reserve.max (10)")
    );
    assert!(rejected("{unlimited: true, reserve: {default: 1}}").contains("takes no"));
    let text = format!(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{{base}, charge: post_paid, reserve: {{default: 10}}, hold_timeout: 1m}}\n"
    );
    let config = load(&text).expect("loads");
    let Limit::Limited { payment, .. } = config.rules.rules()[0].limit else {
        panic!("limited")
    };
    assert_eq!(
        payment.reserve(),
        Some(crate::rules::Reserve {
            default: 10,
            max: 1000,
            hold_micros: 60_000_000
        })
    );
    let reserved = load_err(
        "domain: d\ndescriptors:\n  - key: sluice-estimate\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert!(reserved.contains("is reserved"), "{reserved}");
}
