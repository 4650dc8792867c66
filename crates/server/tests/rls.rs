//! `ShouldRateLimit` over a real gRPC connection.

mod common;

use common::{CONFIG, TestServer, request};
use sluice_proto::envoy::protobuf::UInt64Value;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use tonic::Code as Grpc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_until_the_burst_then_over_limit_with_every_status_field() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let req = request("edge", &[&[("remote_address", "10.0.0.1")]]);
    for expected_remaining in [2u32, 1, 0] {
        let resp = rls
            .should_rate_limit(req.clone())
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(resp.overall_code, Code::Ok as i32);
        let s = &resp.statuses[0];
        assert_eq!(s.code, Code::Ok as i32);
        assert_eq!(s.limit_remaining, expected_remaining);
        let limit = s.current_limit.as_ref().expect("current_limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("per_client", 3, 2)
        );
        let reset = s
            .duration_until_reset
            .as_ref()
            .expect("duration_until_reset");
        assert!(reset.seconds >= 1 && reset.seconds <= 60, "{reset:?}");
    }
    let over = rls.should_rate_limit(req).await.expect("rpc").into_inner();
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert_eq!(over.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(over.statuses[0].limit_remaining, 0);

    let other = rls
        .should_rate_limit(request("edge", &[&[("remote_address", "10.0.0.2")]]))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(
        other.overall_code,
        Code::Ok as i32,
        "other keys are unaffected"
    );
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_domains_unmatched_descriptors_and_shadow_rules_answer_ok() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let unknown = rls
        .should_rate_limit(request("nope", &[&[("remote_address", "1")]]))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(unknown.overall_code, Code::Ok as i32);
    assert!(unknown.statuses[0].current_limit.is_none());
    for _ in 0..3 {
        let shadow = rls
            .should_rate_limit(request("edge", &[&[("shadowed", "x")]]))
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(shadow.overall_code, Code::Ok as i32);
    }
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains(
            r#"sluice_decisions_total{domain="edge",outcome="shadow_over_limit",rule="shadowed"} 2"#
        ),
        "{metrics}"
    );
    assert!(metrics.contains(r#"sluice_requests_total{api="rls",code="unknown_domain"} 1"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_invalid_argument_with_a_message() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let long = "v".repeat(1025);
    let many: Vec<[(&str, &str); 1]> = (0..65).map(|_| [("user", "u")]).collect();
    let many_refs: Vec<&[(&str, &str)]> = many.iter().map(|d| d.as_slice()).collect();
    let cases = [
        (request("", &[&[("user", "u")]]), "domain must not be empty"),
        (request("edge", &[]), "descriptor list must not be empty"),
        (request("edge", &[&[]]), "descriptor 0 has no entries"),
        (request("edge", &[&[(long.as_str(), "v")]]), "1025 bytes"),
        (request("edge", &[&[("", "v")]]), "empty key"),
        (request("edge", &many_refs), "65 descriptors"),
    ];
    for (req, message) in cases {
        let err = rls
            .should_rate_limit(req)
            .await
            .expect_err("must be rejected");
        assert_eq!(err.code(), Grpc::InvalidArgument, "{err:?}");
        assert!(
            err.message().contains(message),
            "{:?} lacks {message:?}",
            err.message()
        );
    }
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains(r#"sluice_requests_total{api="rls",code="invalid"} 6"#),
        "{metrics}"
    );
}

/// A value over 1 KiB was INVALID_ARGUMENT, which Envoy with `failure_mode_deny: false` turns into
/// "no limit" for that request. Long values are limited like any other, each on its own bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_values_are_limited_not_rejected() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let long = "x".repeat(64 * 1024);
    let other = format!("{}y", &long[1..]);
    for (value, admitted_of_five) in [(&long, 3), (&long, 0), (&other, 3)] {
        let req = request("edge", &[&[("remote_address", value.as_str())]]);
        let mut ok = 0;
        for _ in 0..5 {
            let resp = rls
                .should_rate_limit(req.clone())
                .await
                .expect("rpc")
                .into_inner();
            ok += usize::from(resp.overall_code == Code::Ok as i32);
        }
        assert_eq!(ok, admitted_of_five, "3 per minute per client");
    }
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_descriptor_hits_addend_and_limit_override() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let mut req = request("edge", &[&[("remote_address", "9.9.9.9")]]);
    req.descriptors[0].hits_addend = Some(sluice_proto::envoy::protobuf::UInt64Value { value: 0 });
    let peek = rls
        .should_rate_limit(req.clone())
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(
        (peek.overall_code, peek.statuses[0].limit_remaining),
        (Code::Ok as i32, 3)
    );
    req.descriptors[0].hits_addend = Some(sluice_proto::envoy::protobuf::UInt64Value { value: 3 });
    let all = rls
        .should_rate_limit(req.clone())
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(
        (all.overall_code, all.statuses[0].limit_remaining),
        (Code::Ok as i32, 0)
    );

    let mut over = request("edge", &[&[("remote_address", "override-me")]]);
    over.descriptors[0].limit = Some(
        sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::RateLimitOverride {
            requests_per_unit: 1,
            unit: 4,
        },
    );
    let first = rls
        .should_rate_limit(over.clone())
        .await
        .expect("rpc")
        .into_inner();
    let second = rls.should_rate_limit(over).await.expect("rpc").into_inner();
    assert_eq!(
        (first.overall_code, second.overall_code),
        (Code::Ok as i32, Code::OverLimit as i32)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_series_stay_flat_under_100k_distinct_values() {
    let server = TestServer::start(CONFIG).await;
    let rls = server.rls().await;
    let series = |m: &str| m.lines().filter(|l| l.starts_with("sluice_")).count();
    // Values `from..to`, 50 descriptors (50 distinct values) a request: 100 000 values in 2 000
    // calls (one a value took 74 s of a debug CI run).
    let send = |from: usize, to: usize| {
        let rls = rls.clone();
        async move {
            let mut tasks = Vec::new();
            for worker in 0..8 {
                let mut rls = rls.clone();
                tasks.push(tokio::spawn(async move {
                    let starts = (from..to).step_by(50).skip(worker).step_by(8);
                    for start in starts {
                        let values: Vec<String> = (start..(start + 50).min(to))
                            .map(|i| format!("10.{}.{}.{}", i / 65_536, (i / 256) % 256, i % 256))
                            .collect();
                        let descriptors: Vec<[(&str, &str); 1]> = values
                            .iter()
                            .map(|v| [("remote_address", v.as_str())])
                            .collect();
                        let descriptors: Vec<&[(&str, &str)]> =
                            descriptors.iter().map(|d| d.as_slice()).collect();
                        rls.should_rate_limit(request("edge", &descriptors))
                            .await
                            .expect("rpc");
                    }
                }));
            }
            for t in tasks {
                t.await.expect("worker");
            }
        }
    };
    send(0, 100).await;
    let before = series(&server.admin_get("/metrics").await.1);
    send(100, 100_000).await;
    let (_, after) = server.admin_get("/metrics").await;
    assert_eq!(
        series(&after),
        before,
        "series must not grow with descriptor values"
    );
    assert!(after.contains("sluice_tracked_keys 100000"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_shadow_switch_answers_ok_and_counts_would_deny() {
    let server = TestServer::start(&format!("shadow_mode: true\n{CONFIG}")).await;
    let mut rls = server.rls().await;
    for _ in 0..5 {
        let resp = rls
            .should_rate_limit(request("edge", &[&[("remote_address", "1.1.1.1")]]))
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(resp.overall_code, Code::Ok as i32);
        assert_eq!(resp.statuses[0].code, Code::Ok as i32);
    }
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains(r#"sluice_decisions_total{domain="edge",outcome="shadow_over_limit",rule="per_client"} 2"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decision_counters_follow_a_reload_to_the_new_rule_names() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let req = request("edge", &[&[("remote_address", "10.0.0.9")]]);
    rls.should_rate_limit(req.clone()).await.expect("rpc");

    let config = sluice_core::parse_config(
        "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: renamed, unit: minute, requests_per_unit: 1}\n",
    )
    .expect("valid config");
    server.state.engine.swap_rules(config.rules);
    for _ in 0..2 {
        rls.should_rate_limit(req.clone()).await.expect("rpc");
    }

    let (_, metrics) = server.admin_get("/metrics").await;
    for line in [
        r#"sluice_decisions_total{domain="edge",outcome="ok",rule="per_client"} 1"#,
        r#"sluice_decisions_total{domain="edge",outcome="ok",rule="renamed"} 1"#,
        r#"sluice_decisions_total{domain="edge",outcome="over_limit",rule="renamed"} 1"#,
        r#"sluice_requests_total{api="rls",code="ok"} 2"#,
        r#"sluice_requests_total{api="rls",code="over_limit"} 1"#,
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
}

/// Costs the ledger can never pay (above the burst, or summing past `u64::MAX`) are denied
/// without touching the key, over the wire as Envoy sends them; the key keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_above_the_burst_are_denied_and_lock_nothing_out() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let mut big = request("edge", &[&[("remote_address", "10.9.9.9")]]);
    big.hits_addend = 7;
    let mut wrap = request(
        "edge",
        &[
            &[("remote_address", "10.9.9.9")],
            &[("remote_address", "10.9.9.9")],
        ],
    );
    wrap.descriptors[0].hits_addend = Some(UInt64Value { value: u64::MAX });
    wrap.descriptors[1].hits_addend = Some(UInt64Value { value: 1 });
    for req in [big, wrap] {
        for _ in 0..3 {
            let resp = rls
                .should_rate_limit(req.clone())
                .await
                .expect("rpc")
                .into_inner();
            assert_eq!(resp.overall_code, Code::OverLimit as i32);
            assert_eq!(resp.statuses[0].limit_remaining, 3, "nothing was charged");
        }
    }
    let one = request("edge", &[&[("remote_address", "10.9.9.9")]]);
    for left in [2u32, 1, 0] {
        let resp = rls
            .should_rate_limit(one.clone())
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(
            resp.overall_code,
            Code::Ok as i32,
            "the key still admits its burst"
        );
        assert_eq!(resp.statuses[0].limit_remaining, left);
    }
    server.stop().await.expect("clean stop");
}

/// `duration_until_reset` stays within protobuf Duration's range (±10 000 years): a bucket of
/// 4 billion tokens refilling once a year was reported as 100 000 years, which strict protobuf
/// decoders reject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_until_reset_stays_a_valid_protobuf_duration() {
    let server = TestServer::start(
        "domains:\n  - domain: edge\n    descriptors:\n      - key: slow\n        rate_limit: {unit: year, requests_per_unit: 1, burst: 4294967295}\n",
    )
    .await;
    let mut rls = server.rls().await;
    let mut req = request("edge", &[&[("slow", "x")]]);
    req.hits_addend = 100_000;
    let resp = rls.should_rate_limit(req).await.expect("rpc").into_inner();
    assert_eq!(resp.overall_code, Code::Ok as i32);
    let reset = resp.statuses[0]
        .duration_until_reset
        .as_ref()
        .expect("duration_until_reset");
    assert_eq!(
        (reset.seconds, reset.nanos),
        (315_576_000_000, 0),
        "capped at 10 000 years"
    );
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rls_headers_show_the_limit_that_denied_or_the_tightest() {
    let config = format!("{CONFIG}response:\n  rls_headers: {{remaining: X-Left}}\n");
    let server = TestServer::start(&config).await;
    let mut rls = server.rls().await;
    let headers = |resp: &sluice_proto::envoy::ratelimit::RateLimitResponse| {
        (resp.response_headers_to_add.iter())
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect::<Vec<_>>()
    };
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    // Two limits: 3 a minute for the client, 100 a second for the user; the client's is tighter.
    let both = request(
        "edge",
        &[&[("remote_address", "10.0.0.9")], &[("user", "u")]],
    );
    for left in ["2", "1", "0"] {
        let resp = rls
            .should_rate_limit(both.clone())
            .await
            .expect("rpc")
            .into_inner();
        let got = headers(&resp);
        assert_eq!(
            got[..2],
            [pair("RateLimit-Limit", "3"), pair("X-Left", left)],
            "{got:?}"
        );
        assert_eq!(got[2].0, "RateLimit-Reset");
        let reset: u64 = got[2].1.parse().expect("seconds");
        assert!((1..=60).contains(&reset), "{got:?}");
    }
    let over = rls.should_rate_limit(both).await.expect("rpc").into_inner();
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert_eq!(
        headers(&over)[..2],
        [pair("RateLimit-Limit", "3"), pair("X-Left", "0")]
    );
    // No descriptor with a limit: no headers, as upstream.
    let none = rls
        .should_rate_limit(request("edge", &[&[("unknown", "x")]]))
        .await
        .expect("rpc")
        .into_inner();
    assert!(none.response_headers_to_add.is_empty(), "{none:?}");
    server.stop().await.expect("clean stop");
}
