//! envoyproxy/ratelimit's config test cases (`test/config/config_test.go` and its YAML files),
//! ported: the same files must load, match and be refused as they are there. The cases are
//! upstream's; the test code is ours, and asserts what sluice makes of each case (the rule that
//! applies, its limit and flags, the entries its bucket is keyed by, the error and its line).
//! Where sluice answers differently on purpose, the test says so and docs/configuration.md's "Differences from
//! envoyproxy/ratelimit" explains why.

use std::borrow::Cow;

use sluice_core::config::load::INLINE_CONFIG;
use sluice_core::config::parse_config;
use sluice_core::rules::{Limit, Match, Rule};
use sluice_core::{ConfigError, Entry, RuleSet, Unit};

/// A descriptor's `(key, value)` pairs.
type Pairs = &'static [(&'static str, &'static str)];

fn rules(yaml: &str) -> RuleSet {
    match parse_config(yaml) {
        Ok(config) => config.rules,
        Err(e) => panic!("must load: {e}"),
    }
}

fn refused(yaml: &str) -> ConfigError {
    match parse_config(yaml) {
        Ok(_) => panic!("must be refused:\n{yaml}"),
        Err(e) => {
            assert!(e.file.ends_with(INLINE_CONFIG), "{e}");
            e
        }
    }
}

fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
    pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect()
}

/// The rule a descriptor of `pairs` matches in `test-domain`, if any.
fn limit<'a>(set: &'a RuleSet, pairs: &[(&str, &str)]) -> Option<&'a Rule> {
    match set.match_descriptor("test-domain", &entries(pairs)) {
        Match::Rule(rule) => Some(rule),
        Match::NoRule => None,
        Match::UnknownDomain => panic!("test-domain is configured"),
    }
}

/// `requests_per_unit` and unit of a limited rule.
fn rate(rule: &Rule) -> (u64, Unit) {
    match rule.limit {
        Limit::Limited { rate, .. } => (rate.requests_per_unit, rate.unit),
        Limit::Unlimited => panic!("{} is unlimited", rule.path),
    }
}

/// The values a descriptor's bucket is keyed by (a `share_threshold` pattern stands for the
/// values it matches).
fn key_values(set: &RuleSet, pairs: &[(&str, &str)]) -> Vec<String> {
    let given = entries(pairs);
    let (found, keyed) = set.match_keyed("test-domain", &given);
    assert!(matches!(found, Match::Rule(_)), "{pairs:?} has a rule");
    keyed.iter().map(|e| e.value.clone()).collect()
}

const BASIC: &str = r#"
# Basic configuration for testing.
domain: test-domain
descriptors:
  # Top level key/value with no default rate limit.
  - key: key1
    value: value1
    descriptors:
      # 2nd level key only with default rate limit.
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
      # 2nd level key/value with limit. Specific override at 2nd level.
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
  # Top level key only with default rate limit.
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  # Top level key/value with limit. Specific override at 1st level.
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
  # First level override with no limit. This effectively whitelists the value.
  - key: key2
    value: value3
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1
  - key: key5
    value: value5
    rate_limit:
      unit: day
      requests_per_unit: 15
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit:
          unit: day
          requests_per_unit: 25
  - key: key6
    rate_limit:
      unlimited: true
  - key: key7
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 70
"#;

/// `TestBasicConfig`.
#[test]
fn basic_config() {
    let set = rules(BASIC);
    assert_eq!(
        set.match_descriptor("foo_domain", &[]),
        Match::UnknownDomain
    );
    assert_eq!(set.match_descriptor("test-domain", &[]), Match::NoRule);
    assert!(limit(&set, &[("key1", "something")]).is_none());
    assert!(
        limit(&set, &[("key1", "value1")]).is_none(),
        "a level without a rate_limit"
    );
    assert!(
        limit(&set, &[("key2", "value2"), ("subkey", "subvalue")]).is_none(),
        "longer than the tree"
    );
    assert!(limit(&set, &[("key5", "value5"), ("subkey5", "subvalue")]).is_none());

    let rule = limit(&set, &[("key1", "value1"), ("subkey1", "something")]).expect("rule");
    assert_eq!(rate(rule), (5, Unit::Second));
    let rule = limit(&set, &[("key1", "value1"), ("subkey1", "subvalue1")]).expect("rule");
    assert_eq!(rate(rule), (10, Unit::Second));
    let rule = limit(&set, &[("key2", "something")]).expect("rule");
    assert_eq!(rate(rule), (20, Unit::Minute));
    let rule = limit(&set, &[("key2", "value2")]).expect("rule");
    assert_eq!(rate(rule), (30, Unit::Minute));
    assert!(
        limit(&set, &[("key2", "value3")]).is_none(),
        "a value without a limit exempts it"
    );
    let rule = limit(&set, &[("key3", "foo")]).expect("rule");
    assert_eq!(rate(rule), (1, Unit::Hour));
    assert_eq!(rule.explicit_name, None, "no name provided in config");
    let rule = limit(&set, &[("key4", "foo")]).expect("rule");
    assert_eq!(rate(rule), (1, Unit::Day));
    assert_eq!(rule.explicit_name.as_deref(), Some("key4_rate_limit"));
    let rule = limit(&set, &[("key6", "foo")]).expect("rule");
    assert_eq!(rule.limit, Limit::Unlimited);
    // detailed_metric only names statistics upstream: the limit is the same for every value.
    for value in ["unspecified_value", "another_value"] {
        let rule = limit(&set, &[("key7", value)]).expect("rule");
        assert_eq!(rate(rule), (70, Unit::Minute));
    }
}

/// `TestConfigLimitOverride`: a caller's `limit` applies to a descriptor of a known domain (with
/// `limit_overrides: any`, upstream's behaviour), never in an unknown one.
#[test]
fn limit_overrides_apply_in_known_domains() {
    let config = parse_config(&format!(
        "limit_overrides: any\ndomains:\n{}",
        indent_domain(BASIC)
    ))
    .expect("loads");
    let described = entries(&[("key1", "value1"), ("subkey1", "something")]);
    assert!(config.rules.honours_override("test-domain", &described));
    assert!(!config.rules.has_domain("foo_domain"));
}

/// A domain file as an inline `domains:` entry of a sluice config.
fn indent_domain(domain_file: &str) -> String {
    let mut out = String::new();
    let mut first = true;
    for line in domain_file.lines() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        out.push_str(if first { "  - " } else { "    " });
        first = false;
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every error file of upstream's `test/config/`, with the message it gives (sluice words its
/// own message where upstream's would mislead, always naming the same thing) and the line.
#[test]
fn refuses_what_upstream_refuses() {
    let cases: &[(&str, &str, u64, &str)] = &[
        (
            "empty_domain",
            "descriptors:\n",
            0,
            "config file cannot have empty domain",
        ),
        (
            "empty_domain (written empty)",
            "domain: ''\ndescriptors:\n",
            1,
            "config file cannot have empty domain",
        ),
        (
            "empty_key",
            "domain: test-domain\ndescriptors:\n  - value: value1\n",
            3,
            "descriptor has empty key",
        ),
        (
            "duplicate_key",
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n\n  - key: key1\n    value: value1\n",
            6,
            "duplicate descriptor composite key 'test-domain: key1=value1'",
        ),
        (
            "bad_limit_unit",
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
            6,
            "invalid rate limit unit 'foo'",
        ),
        (
            "replaces_self",
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name: self\n          unit: second\n          requests_per_unit: 5\n",
            6,
            "replaces should not contain name of same descriptor",
        ),
        (
            "replaces_empty",
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name:\n          unit: second\n          requests_per_unit: 5\n",
            6,
            "should not have an empty replaces entry",
        ),
        (
            "misspelled_key",
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    ratelimit:\n      unit: day\n      requests_per_unit: 5\n",
            5,
            "unknown field `ratelimit`",
        ),
        (
            "misspelled_key2",
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
            7,
            "unknown field `requestsperunit`",
        ),
        (
            "unlimited_with_unit",
            "domain: test-domain\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
            3,
            "should not specify rate limit unit when unlimited",
        ),
        (
            "share_threshold without a wildcard",
            "domain: test-domain\ndescriptors:\n  - key: files\n    value: report.pdf\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
            3,
            "share_threshold can only be used with wildcard values (containing '*')",
        ),
        (
            "metadata that is not a mapping",
            "domain: test-domain\ndescriptors:\n  - key: a\n    metadata: [1, 2]\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
            3,
            "error parsing metadata",
        ),
    ];
    for (name, yaml, line, message) in cases {
        let e = refused(yaml);
        assert!(
            e.message.contains(message),
            "{name}: '{}' should say '{message}'",
            e.message
        );
        assert_eq!(e.line, *line, "{name}: {e}");
    }
}

/// `TestBadYaml`, `TestNonStringKey`, `TestNonMapList`: not YAML, or not the schema's shape.
#[test]
fn refuses_malformed_files_with_their_line() {
    let bad_yaml = refused("'''\n");
    assert!(!bad_yaml.message.is_empty(), "{bad_yaml}");
    let non_string_key = refused(
        "0.25: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n",
    );
    assert!(
        non_string_key.message.contains("0.25"),
        "names the key: {non_string_key}"
    );
    let non_map_list = refused("domain: test-domain\ndescriptors:\n  - a\n  - b\n  - c\n");
    assert_eq!(non_map_list.line, 3, "{non_map_list}");
}

/// `TestDuplicateDomain`: the same domain in two files (here: twice in one config).
#[test]
fn refuses_a_domain_written_twice() {
    let e = refused(
        "domains:\n  - domain: test-domain\n    descriptors:\n  - domain: test-domain\n    descriptors:\n",
    );
    assert_eq!(e.line, 4);
    assert!(e.message.contains("duplicate domain 'test-domain'"), "{e}");
}

/// `TestShadowModeConfig`.
#[test]
fn shadow_mode_config() {
    let set = rules(
        r#"
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
        shadow_mode: true
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
    shadow_mode: true
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
"#,
    );
    let cases: &[(Pairs, bool, (u64, Unit))] = &[
        (
            &[("key1", "value1"), ("subkey1", "something")],
            false,
            (5, Unit::Second),
        ),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            true,
            (10, Unit::Second),
        ),
        (&[("key2", "something")], true, (20, Unit::Minute)),
        (&[("key2", "value2")], false, (30, Unit::Minute)),
    ];
    for (pairs, shadow, expected) in cases {
        let rule = limit(&set, pairs).expect("rule");
        assert_eq!(rule.shadow_mode, *shadow, "{pairs:?}");
        assert_eq!(rate(rule), *expected, "{pairs:?}");
    }
}

const WILDCARD: &str = r#"
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noWild
    value: foo
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noVal
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: midWild
    value: bar*b
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: multiWild
    value: foo*bar*baz
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit:
          unit: minute
          requests_per_unit: 20
"#;

/// `TestWildcardConfig`: trailing, middle and multiple wildcards; without `share_threshold`,
/// each value keeps a bucket of its own.
#[test]
fn wildcard_config() {
    let set = rules(WILDCARD);
    let same_rule = |a: &[(&str, &str)], b: &[(&str, &str)]| {
        let (x, y) = (limit(&set, a).expect("rule"), limit(&set, b).expect("rule"));
        assert_eq!(x.id, y.id, "{a:?} and {b:?}");
        x.path.clone()
    };
    assert_eq!(
        same_rule(&[("noVal", "foo1")], &[("noVal", "foo2")]),
        "noVal"
    );
    assert_eq!(
        same_rule(&[("wild", "foo1")], &[("wild", "foo2")]),
        "wild=foo*"
    );
    let nested = limit(&set, &[("nestedWild", "val1"), ("wild", "goo2")]).expect("rule");
    assert_eq!(nested.path, "nestedWild=val1 > wild=goo*");
    assert!(limit(&set, &[("wild", "bar")]).is_none());
    assert!(
        limit(&set, &[("noWild", "foo1")]).is_none(),
        "no eager match"
    );
    assert_eq!(
        same_rule(&[("midWild", "barab")], &[("midWild", "bar123b")]),
        "midWild=bar*b"
    );
    assert!(
        limit(&set, &[("midWild", "barb")]).is_some(),
        "* matches nothing too"
    );
    assert!(limit(&set, &[("midWild", "bara")]).is_none(), "no suffix");
    assert!(limit(&set, &[("midWild", "xbarb")]).is_none(), "no prefix");
    assert_eq!(
        same_rule(
            &[("multiWild", "foo123bar456baz")],
            &[("multiWild", "foobarbaz")]
        ),
        "multiWild=foo*bar*baz"
    );
    assert!(limit(&set, &[("multiWild", "foo123baz")]).is_none());
    assert!(limit(&set, &[("multiWild", "bar456baz")]).is_none());
    // Upstream counts each value apart unless share_threshold: the bucket keeps the value.
    assert_eq!(key_values(&set, &[("wild", "foo1")]), ["foo1"]);
    assert_eq!(key_values(&set, &[("wild", "foo2")]), ["foo2"]);
}

const SHARE_THRESHOLD: &str = r#"
domain: test-domain
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: nested
    value: parent
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 200
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 300
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit:
          unit: minute
          requests_per_unit: 80
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit:
              unit: minute
              requests_per_unit: 120
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - key: action
            rate_limit:
              unit: minute
              requests_per_unit: 150
  - key: file
    value: test1
    rate_limit:
      unit: minute
      requests_per_unit: 50
  - key: file
    value: test*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 50
  - key: midroute
    value: /api*v2
    share_threshold: true
    value_to_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 80
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 60
"#;

/// `TestShareThreshold`: values a `share_threshold` pattern matches share one bucket, keyed by
/// the pattern, at any depth and whatever the metric flags; other entries keep their values.
#[test]
fn share_threshold() {
    let set = rules(SHARE_THRESHOLD);
    let cases: &[(Pairs, &[&str], u64)] = &[
        (&[("files", "files/a.pdf")], &["files/*"], 100),
        (&[("files", "files/b.csv")], &["files/*"], 100),
        (
            &[("route", "api/v1"), ("method", "GET")],
            &["api/*", "GET"],
            60,
        ),
        (
            &[("service", "svc/user"), ("endpoint", "get")],
            &["svc/*", "get"],
            80,
        ),
        (
            &[("nested", "parent"), ("files", "nested/file1.txt")],
            &["parent", "nested/*"],
            200,
        ),
        (
            &[("files", "top/file1.txt"), ("files", "nested/file1.txt")],
            &["top/*", "nested/*"],
            300,
        ),
        // The parent shares; the child is a wildcard without share_threshold: its own value.
        (
            &[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")],
            &["path/*", "file/doc1", "pdf"],
            120,
        ),
        (
            &[
                ("user", "user/alice"),
                ("resource", "res/file1"),
                ("action", "read"),
            ],
            &["user/*", "res/*", "read"],
            150,
        ),
        // An exact value wins over the shared wildcard and keeps its own bucket.
        (&[("file", "test1")], &["test1"], 50),
        (&[("file", "test2")], &["test*"], 100),
        (&[("file", "test123")], &["test*"], 100),
        (&[("midpath", "/api/v1")], &["/api*v1"], 100),
        (&[("midpath", "/apiXYZv1")], &["/api*v1"], 100),
        (&[("multiroute", "svceprpc")], &["svc*ep*rpc"], 50),
        (&[("multiroute", "svcXXXepYYYrpc")], &["svc*ep*rpc"], 50),
        (&[("midroute", "/api-beta-v2")], &["/api*v2"], 80),
        (
            &[("tenant", "t99prod"), ("resource", "resBBBv2")],
            &["t*prod", "res*v2"],
            60,
        ),
    ];
    for (pairs, keyed, rpu) in cases {
        let rule = limit(&set, pairs).expect("rule");
        assert_eq!(rate(rule).0, *rpu, "{pairs:?}");
        assert_eq!(key_values(&set, pairs), *keyed, "{pairs:?}");
    }
    assert!(limit(&set, &[("midpath", "/api/v2")]).is_none());
    assert!(limit(&set, &[("multiroute", "svcABCrpc")]).is_none());
    // Nothing is copied when nothing is shared.
    let plain = entries(&[("file", "test1")]);
    assert!(matches!(
        set.match_keyed("test-domain", &plain).1,
        Cow::Borrowed(_)
    ));
}

/// `TestMetadata`: `metadata` is kept with the rule, nested mappings included.
#[test]
fn metadata() {
    let set = rules(
        r#"
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
        metadata:
          name: service_1
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
    metadata:
      service_with_quota:
        name: service_2
"#,
    );
    let rule = limit(&set, &[("key1", "value1"), ("subkey1", "something")]).expect("rule");
    assert_eq!(rate(rule), (5, Unit::Second));
    let metadata = rule.metadata.as_deref().expect("metadata");
    assert_eq!(metadata["name"], "service_1");
    let rule = limit(&set, &[("key1", "value1"), ("subkey1", "subvalue1")]).expect("rule");
    assert!(rule.metadata.is_none());
    let rule = limit(&set, &[("key2", "something")]).expect("rule");
    let metadata = rule.metadata.as_deref().expect("metadata");
    assert_eq!(metadata["service_with_quota"]["name"], "service_2");
}

/// `quota_mode` (upstream's schema; its semantics are tested in the engine), per descriptor or
/// for every rule at the top level.
#[test]
fn quota_mode() {
    let domain = "domain: test-domain\ndescriptors:\n  - key: a\n    quota_mode: true\n    rate_limit: {unit: day, requests_per_unit: 5}\n  - key: b\n    rate_limit: {unit: day, requests_per_unit: 5}\n";
    let set = rules(domain);
    assert!(limit(&set, &[("a", "x")]).expect("rule").quota_mode);
    assert!(!limit(&set, &[("b", "x")]).expect("rule").quota_mode);
    let all = parse_config(&format!(
        "quota_mode: true\ndomains:\n{}",
        indent_domain(domain)
    ))
    .expect("loads");
    assert!(all.rules.rules().iter().all(|r| r.quota_mode));
}
