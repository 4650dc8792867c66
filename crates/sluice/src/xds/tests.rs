use sluice_proto::ratelimit_config::{RateLimitPolicy, RateLimitReplace};

use super::*;

fn limit(unit: i32, n: u32) -> Option<RateLimitPolicy> {
    Some(RateLimitPolicy {
        unit,
        requests_per_unit: n,
        ..RateLimitPolicy::default()
    })
}

#[test]
fn a_pushed_config_is_the_domain_file_it_stands_for() {
    let pushed = RateLimitConfig {
        name: "gateway/ns/route".into(),
        domain: "gw".into(),
        descriptors: vec![RateLimitDescriptor {
            key: "header".into(),
            value: "premium".into(),
            rate_limit: Some(RateLimitPolicy {
                name: "premium".into(),
                replaces: vec![RateLimitReplace {
                    name: "basic".into(),
                }],
                ..limit(2, 100).expect("a limit")
            }),
            descriptors: vec![
                RateLimitDescriptor {
                    key: "user".into(),
                    rate_limit: limit(1, 5),
                    shadow_mode: true,
                    detailed_metric: true,
                    ..RateLimitDescriptor::default()
                },
                RateLimitDescriptor {
                    key: "admin".into(),
                    rate_limit: Some(RateLimitPolicy {
                        unlimited: true,
                        ..RateLimitPolicy::default()
                    }),
                    ..RateLimitDescriptor::default()
                },
            ],
            ..RateLimitDescriptor::default()
        }],
    };
    let yaml = domains_yaml(&[pushed]).expect("converts");
    let pushed = sluice_core::parse_config(&yaml).expect("a valid sluice config");
    let written = sluice_core::parse_config(
        "domain: gw\n\
         descriptors:\n\
         - key: header\n  value: premium\n  \
           rate_limit: {unit: minute, requests_per_unit: 100, name: premium, replaces: [{name: basic}]}\n  \
           descriptors:\n  \
           - {key: user, rate_limit: {unit: second, requests_per_unit: 5}, shadow_mode: true, detailed_metric: true}\n  \
           - {key: admin, rate_limit: {unlimited: true}}\n",
    )
    .expect("the domain file");
    // The same rules, but for where each is written.
    let rules = |c: &sluice_core::config::Config| {
        let text = format!("{:?}", c.rules.rules());
        text.split(", line: ")
            .map(|part| part.trim_start_matches(|ch: char| ch.is_ascii_digit()))
            .collect::<String>()
    };
    assert_eq!(rules(&pushed), rules(&written));
    assert_eq!(domains_yaml(&[]).expect("none"), "domains: []\n");
}

#[test]
fn what_cannot_be_read_is_refused_with_the_resource_named() {
    let pushed = RateLimitConfig {
        name: "r1".into(),
        domain: "gw".into(),
        descriptors: vec![RateLimitDescriptor {
            key: "user".into(),
            rate_limit: limit(9, 5),
            ..RateLimitDescriptor::default()
        }],
    };
    assert_eq!(
        domains_yaml(&[pushed]).expect_err("unit 9"),
        "gw (resource \"r1\"): key \"user\": unit 9 is not a unit"
    );
    let response = DiscoveryResponse {
        type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
        ..DiscoveryResponse::default()
    };
    assert!(
        configs(&response)
            .expect_err("another type")
            .contains("Cluster")
    );
    let response = DiscoveryResponse {
        type_url: TYPE_URL.into(),
        resources: vec![sluice_proto::envoy::protobuf::Any {
            type_url: TYPE_URL.into(),
            value: vec![0xff, 0xff, 0xff],
        }],
        ..DiscoveryResponse::default()
    };
    assert!(
        configs(&response)
            .expect_err("garbage")
            .contains("does not decode")
    );
}

#[test]
fn every_unit_is_the_references() {
    // envoyproxy/ratelimit's RateLimitUnit: MONTH and YEAR were numbered before WEEK.
    for (code, unit) in [
        (1, "second"),
        (2, "minute"),
        (3, "hour"),
        (4, "day"),
        (5, "month"),
        (6, "year"),
        (7, "week"),
    ] {
        let pushed = RateLimitConfig {
            name: "r".into(),
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "k".into(),
                rate_limit: limit(code, 3),
                ..RateLimitDescriptor::default()
            }],
        };
        let yaml = domains_yaml(&[pushed]).expect("converts");
        assert!(
            yaml.contains(&format!("\"unit\":\"{unit}\"")),
            "{code}: {yaml}"
        );
        sluice_core::parse_config(&yaml).expect("loads");
    }
}

#[test]
fn a_value_yaml_refuses_raw_is_escaped_not_a_refused_push() {
    let value = "a\u{7f}b\u{85}c\u{9f}\u{fffe}\u{2028}é";
    let pushed = RateLimitConfig {
        name: "r".into(),
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            key: "k".into(),
            value: value.into(),
            rate_limit: limit(1, 3),
            ..RateLimitDescriptor::default()
        }],
    };
    let yaml = domains_yaml(&[pushed]).expect("converts");
    let config = sluice_core::parse_config(&yaml).expect("loads");
    assert_eq!(config.rules.rules()[0].path, format!("k={value}"));
}

#[test]
fn the_wait_between_streams_never_spins_and_never_starts_above_its_maximum() {
    let ms = Duration::from_millis;
    // Upstream's defaults.
    assert_eq!(
        backoff((Duration::from_secs(10), Duration::from_secs(60))),
        (Duration::from_secs(10), Duration::from_secs(60))
    );
    // Zero would reopen a failing stream in a busy loop.
    assert_eq!(backoff((ms(0), ms(0))), (LEAST_WAIT, LEAST_WAIT));
    // An initial interval above the maximum starts at the maximum.
    assert_eq!(backoff((ms(5_000), ms(1_000))), (ms(1_000), ms(1_000)));
    for _ in 0..1_000 {
        let wait = jittered(ms(1_000));
        assert!((ms(500)..=ms(1_000)).contains(&wait), "{wait:?}");
    }
    let waits: std::collections::HashSet<Duration> =
        (0..100).map(|_| jittered(ms(1_000))).collect();
    assert!(
        waits.len() > 50,
        "the waits differ: {} distinct of 100",
        waits.len()
    );
}
