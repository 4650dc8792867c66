//! The on-call hour (issue 25 items 10 and 11), as an engineer meets it: `sluice quota top`,
//! `TopDenied` and `/quota/top` (who is being limited, most denied first, as a table and as
//! JSON; filters that name nothing fail), and the sampled denial log (a line a second per rule,
//! the values as a digest, never as sent).

mod common;

use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;

const CONFIG: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: api_key
        rate_limit: {name: per_key, unit: hour, requests_per_unit: 2}
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1000}
"#;

fn top(addr: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::bin())
        .args(["quota", "top", "--addr", addr])
        .args(args)
        .output()
        .expect("run sluice quota top")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_top_names_the_most_denied_keys_as_a_table_json_and_over_http() {
    let sluice = common::start(CONFIG);
    let mut rls = RateLimitServiceClient::connect(format!("http://{}", sluice.grpc))
        .await
        .expect("connect");
    // key-a: 2 pass, 10 denied; key-b: 2 pass, 3 denied; key-c passes; /x never denied.
    for (value, n) in [("key-a", 12), ("key-b", 5), ("key-c", 1)] {
        for _ in 0..n {
            rls.should_rate_limit(common::rls_request("api", "api_key", value))
                .await
                .expect("rpc");
        }
    }
    rls.should_rate_limit(common::rls_request("api", "path", "/x"))
        .await
        .expect("rpc");
    let addr = sluice.grpc.to_string();

    let table = top(&addr, &[]);
    assert!(table.status.success(), "{table:?}");
    let text = String::from_utf8_lossy(&table.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("DENIED"), "{text}");
    assert!(
        lines[1].starts_with("10 ")
            && lines[1].contains("per_key")
            && lines[1].ends_with("api_key=key-a"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("3 ") && lines[2].ends_with("api_key=key-b"),
        "{text}"
    );
    assert!(
        lines[3].contains("2 keys") && lines[3].contains("memory"),
        "{text}"
    );

    let json = top(&addr, &["-n", "1", "-o", "json", "--rule", "per_key"]);
    assert!(json.status.success(), "{json:?}");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["rows"][0]["values"], "api_key=key-a");
    assert_eq!(v["rows"][0]["denied"], 10);
    assert_eq!(v["rows"][0]["domain"], "api");

    // The admin endpoint answers the same (on loopback, no token configured).
    let http = common::http_get(sluice.admin.port(), "/quota/top?domain=api&n=5", &[]);
    assert_eq!(http.status, 200, "{}", http.body);
    let v: serde_json::Value = serde_json::from_str(&http.body).expect("json");
    assert_eq!(v["rows"][1]["values"], "api_key=key-b", "{v}");
    assert_eq!(v["rows"][1]["denied"], 3);
    for bad in ["n=many", "n=0", "n=1001", "x=1"] {
        let bad = common::http_get(sluice.admin.port(), &format!("/quota/top?{bad}"), &[]);
        assert_eq!(bad.status, 400, "{}", bad.body);
    }

    // A rule or domain that does not exist is an error, not an empty list.
    for args in [&["--rule", "per_kye"][..], &["--domain", "apii"][..]] {
        let typo = top(&addr, args);
        assert!(!typo.status.success(), "{args:?}: {typo:?}");
        assert!(
            String::from_utf8_lossy(&typo.stderr).contains("in the loaded config"),
            "{typo:?}"
        );
    }
    let http = common::http_get(sluice.admin.port(), "/quota/top?rule=nope", &[]);
    assert_eq!(http.status, 404, "{}", http.body);
    // Out-of-range row counts are refused before anything is asked.
    for n in ["0", "1001", "99999999999999999999"] {
        let out = top(&addr, &["-n", n]);
        assert_eq!(out.status.code(), Some(2), "-n {n}: {out:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_are_logged_a_line_a_second_per_rule_with_a_digest_not_the_values() {
    let sluice = common::start(CONFIG);
    let mut rls = RateLimitServiceClient::connect(format!("http://{}", sluice.grpc))
        .await
        .expect("connect");
    let secret = "sk-live-very-secret-key";
    // 2 pass, then 48 denied within well under a second: one line.
    for _ in 0..50 {
        rls.should_rate_limit(common::rls_request("api", "api_key", secret))
            .await
            .expect("rpc");
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    // A second later, the next denial logs a line saying how many went unlogged.
    rls.should_rate_limit(common::rls_request("api", "api_key", secret))
        .await
        .expect("rpc");
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while lines.len() < 2 && std::time::Instant::now() < deadline {
        if let Ok(line) = sluice
            .stderr
            .recv_timeout(std::time::Duration::from_millis(100))
        {
            assert!(!line.contains(secret), "a log line holds the value: {line}");
            if line.contains("denied (sampled") {
                lines.push(serde_json::from_str::<serde_json::Value>(&line).expect("json log"));
            }
        }
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    // printf 'api_key=sk-live-very-secret-key' | sha256sum | cut -c1-16
    let digest = "85c3ce7dd5856dd2";
    for line in &lines {
        let fields = &line["fields"];
        assert_eq!(fields["rule"], "per_key", "{line}");
        assert_eq!(fields["reason"], "over_limit", "{line}");
        assert_eq!(fields["values_sha256"], digest, "{line}");
    }
    assert_eq!(lines[0]["fields"]["unlogged_since_last_line"], 0);
    assert_eq!(lines[1]["fields"]["unlogged_since_last_line"], 47);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detailed_metric_counts_the_busiest_values_and_the_rest_as_other() {
    let config = "domains:\n  - domain: api\n    descriptors:\n      - key: api_key\n        detailed_metric: true\n        rate_limit: {name: per_key, unit: hour, requests_per_unit: 12}\n      - key: path\n        rate_limit: {unit: hour, requests_per_unit: 12}\n";
    let sluice = common::start(config);
    let mut rls = RateLimitServiceClient::connect(format!("http://{}", sluice.grpc))
        .await
        .expect("connect");
    // `busy`: 15 decisions (12 pass, 3 denied); 20 one-off keys; a rule without the flag.
    for _ in 0..15 {
        rls.should_rate_limit(common::rls_request("api", "api_key", "busy"))
            .await
            .expect("rpc");
    }
    for i in 0..20 {
        rls.should_rate_limit(common::rls_request("api", "api_key", &format!("k{i}")))
            .await
            .expect("rpc");
        rls.should_rate_limit(common::rls_request("api", "path", &format!("/p{i}")))
            .await
            .expect("rpc");
    }
    let metrics = common::http_get(sluice.admin.port(), "/metrics", &[]).body;
    let sample = |labels: &str| -> Option<u64> {
        let line = format!("sluice_detailed_decisions_total{{{labels}}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&line)?.parse().ok())
    };
    // Its own series from its 10th decision: 3 passes and 3 denials; the first 9, and every
    // one-off key, under `other`.
    assert_eq!(
        sample(r#"domain="api",outcome="ok",rule="per_key",values="api_key=busy""#),
        Some(3),
        "{metrics}"
    );
    assert_eq!(
        sample(r#"domain="api",outcome="over_limit",rule="per_key",values="api_key=busy""#),
        Some(3)
    );
    assert_eq!(
        sample(r#"domain="api",outcome="ok",rule="per_key",values="other""#),
        Some(29)
    );
    assert!(
        !metrics.contains("api_key=k1"),
        "one-off values get no series"
    );
    assert!(
        !metrics.contains("/p1"),
        "rules without detailed_metric are not per value"
    );
}
