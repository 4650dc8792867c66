//! `sluice.v1.Quota` over a real gRPC connection: peeks consume nothing, lists page, watches stream.

mod common;

use common::{CONFIG, TestServer, entry, request};
use sluice_proto::sluice::v1 as pb;
use sluice_proto::sluice::v1::quota_client::QuotaClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_quota_peeks_without_consuming() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    rls.should_rate_limit(request("edge", &[&[("remote_address", "5.5.5.5")]]))
        .await
        .expect("rpc");
    let mut quota = QuotaClient::new(server.channel().await);
    let get = || pb::GetQuotaRequest {
        domain: "edge".into(),
        entries: vec![entry("remote_address", "5.5.5.5")],
    };
    for _ in 0..5 {
        let s = quota.get_quota(get()).await.expect("rpc").into_inner();
        assert!(s.matched && s.tracked);
        assert_eq!(
            (
                s.rule.as_str(),
                s.requests_per_unit,
                s.unit.as_str(),
                s.burst
            ),
            ("per_client", 3, "minute", 3)
        );
        assert!(
            (s.global_remaining + s.local_lease as f64 - 2.0).abs() < 0.1,
            "{s:?}"
        );
        assert!(s.reason.starts_with("remote_address ("), "{}", s.reason);
    }
    let unknown = quota
        .get_quota(pb::GetQuotaRequest {
            domain: "nope".into(),
            entries: vec![entry("a", "b")],
        })
        .await
        .expect("rpc")
        .into_inner();
    assert!(unknown.unknown_domain && !unknown.matched);
    let err = quota
        .get_quota(pb::GetQuotaRequest {
            domain: "edge".into(),
            entries: vec![],
        })
        .await
        .expect_err("no entries");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_quotas_filters_and_pages() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    for i in 0..25 {
        let v = format!("10.0.0.{i}");
        rls.should_rate_limit(request("edge", &[&[("remote_address", v.as_str())]]))
            .await
            .expect("rpc");
    }
    rls.should_rate_limit(request("edge", &[&[("user", "u1")]]))
        .await
        .expect("rpc");
    let mut quota = QuotaClient::new(server.channel().await);
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = quota
            .list_quotas(pb::ListQuotasRequest {
                rule: "per_client".into(),
                page_size: 10,
                page_token: token.clone(),
                ..pb::ListQuotasRequest::default()
            })
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(page.total, 25);
        seen.extend(page.keys.into_iter().map(|k| k.values));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        (seen.len(), unique.len()),
        (25, 25),
        "every key once, none repeated: {seen:?}"
    );
    let bad = quota
        .list_quotas(pb::ListQuotasRequest {
            page_token: "zz".into(),
            ..pb::ListQuotasRequest::default()
        })
        .await
        .expect_err("a token this server did not issue");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    let prefixed = quota
        .list_quotas(pb::ListQuotasRequest {
            prefix: "remote_address=10.0.0.1".into(),
            ..pb::ListQuotasRequest::default()
        })
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(prefixed.total, 11, "10.0.0.1 and 10.0.0.10-19");
    // A rule or domain the config does not have is said, not listed as nothing.
    for (domain, rule) in [("", "per_clinet"), ("edgy", ""), ("nope", "per_client")] {
        let typo = quota
            .list_quotas(pb::ListQuotasRequest {
                domain: domain.into(),
                rule: rule.into(),
                ..pb::ListQuotasRequest::default()
            })
            .await
            .expect_err("a typo");
        assert_eq!(typo.code(), tonic::Code::NotFound, "{typo:?}");
        assert!(typo.message().contains("in the loaded config"), "{typo:?}");
    }
    // A huge filter is refused by its size, not echoed back in full: by validation, or over
    // the API's 64 KiB message bound by the server before it is decoded.
    for (len, code) in [
        (10_000, tonic::Code::InvalidArgument),
        (100_000, tonic::Code::ResourceExhausted),
    ] {
        let huge = quota
            .list_quotas(pb::ListQuotasRequest {
                rule: "r".repeat(len),
                ..pb::ListQuotasRequest::default()
            })
            .await
            .expect_err("huge");
        assert_eq!(huge.code(), code, "{huge:?}");
        assert!(huge.message().len() < 200, "{}", huge.message().len());
    }
    let in_domain = quota
        .list_quotas(pb::ListQuotasRequest {
            domain: "edge".into(),
            rule: "per_client".into(),
            ..pb::ListQuotasRequest::default()
        })
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(in_domain.total, 25);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_quota_streams_snapshots_and_list_rules_shows_the_config() {
    let server = TestServer::start(CONFIG).await;
    let mut quota = QuotaClient::new(server.channel().await);
    let mut stream = quota
        .watch_quota(pb::WatchQuotaRequest {
            domain: "edge".into(),
            entries: vec![entry("user", "w")],
            interval: Some(prost_types::Duration {
                seconds: 0,
                nanos: 100_000_000,
            }),
        })
        .await
        .expect("rpc")
        .into_inner();
    let first = stream.message().await.expect("stream").expect("a snapshot");
    let mut rls = server.rls().await;
    rls.should_rate_limit(request("edge", &[&[("user", "w")]]))
        .await
        .expect("rpc");
    let mut later = stream.message().await.expect("stream").expect("a snapshot");
    if !later.tracked {
        later = stream.message().await.expect("stream").expect("a snapshot");
    }
    assert!(
        first.matched && !first.tracked && later.tracked,
        "{first:?} then {later:?}"
    );
    let rules = quota
        .list_rules(pb::ListRulesRequest {})
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(rules.rules.len(), 3);
    assert_eq!(rules.config_version.len(), 16);
    assert!(
        rules
            .rules
            .iter()
            .any(|r| r.name == "shadowed" && r.shadow_mode)
    );
}

/// With a read token configured, the Quota read API and admin `/config` and `/quota` need it
/// (listing tracked keys shows their descriptor values, API keys included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_guards_quota_reads() {
    use sluice_core::config::{MemReader, load_from};
    let server = TestServer::start(CONFIG).await;
    let yaml = format!("{CONFIG}admin:\n  read_token_env: READ\n");
    let source = MemReader::new()
        .file("sluice.yaml", yaml)
        .var("READ", "read-token-0123456789");
    let config = load_from(&source, std::path::Path::new("sluice.yaml")).expect("config");
    server
        .state
        .runtime
        .store(std::sync::Arc::new(sluice_server::Runtime::of(&config)));
    let mut quota = QuotaClient::new(server.channel().await);
    let list = || pb::ListQuotasRequest::default();
    let refused = quota.list_quotas(list()).await.expect_err("no token");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    let mut with = tonic::Request::new(list());
    with.metadata_mut().insert(
        "authorization",
        "Bearer read-token-0123456789".parse().expect("ascii"),
    );
    quota.list_quotas(with).await.expect("with the token");
    let rules = quota
        .list_rules(pb::ListRulesRequest {})
        .await
        .expect_err("rules too");
    assert_eq!(rules.code(), tonic::Code::Unauthenticated);
    for path in ["/config", "/quota?domain=edge&user=u"] {
        let (status, _) = server.admin_get(path).await;
        assert_eq!(status, 401, "{path}");
    }
    let (status, _) = server.admin_get("/metrics").await;
    assert_eq!(status, 200, "metrics stay open for Prometheus");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_quota_says_when_and_why_this_instance_last_denied_a_key() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let mut quota = QuotaClient::new(server.channel().await);
    let get = |ip: &str| pb::GetQuotaRequest {
        domain: "edge".into(),
        entries: vec![entry("remote_address", ip)],
    };
    let clock = sluice_core::SystemClock::new();
    let now_micros = || sluice_core::Clock::now_micros(&clock);
    // Passed, never denied: no last denial.
    let ip = request("edge", &[&[("remote_address", "6.6.6.6")]]);
    rls.should_rate_limit(ip.clone()).await.expect("rpc");
    let s = quota
        .get_quota(get("6.6.6.6"))
        .await
        .expect("rpc")
        .into_inner();
    assert!(s.tracked && s.last_denial.is_none(), "{s:?}");
    // per_client: 3 a minute. The fourth is denied: over_limit, now.
    for _ in 0..3 {
        rls.should_rate_limit(ip.clone()).await.expect("rpc");
    }
    let before = now_micros();
    let s = quota
        .get_quota(get("6.6.6.6"))
        .await
        .expect("rpc")
        .into_inner();
    let d = s.last_denial.expect("denied");
    assert_eq!((d.reason.as_str(), d.fallback), ("over_limit", false));
    assert!(
        d.at_unix_micros <= before && d.at_unix_micros + 10_000_000 > before,
        "{d:?}"
    );
    // Asking for more than the burst at once can never pass: cost_above_burst.
    let mut big = request("edge", &[&[("remote_address", "7.7.7.7")]]);
    big.hits_addend = 10;
    rls.should_rate_limit(big).await.expect("rpc");
    let s = quota
        .get_quota(get("7.7.7.7"))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(
        s.last_denial.as_ref().map(|d| d.reason.as_str()),
        Some("cost_above_burst"),
    );
    // JSON (`/quota`, `quota get -o json`) carries it too.
    let json = sluice_server::quota::state_json(&s);
    assert_eq!(json["last_denial"]["reason"], "cost_above_burst", "{json}");
}
