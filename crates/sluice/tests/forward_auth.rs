//! `deploy/examples/{nginx,caddy,traefik}` end to end, as shipped: a real proxy in front of a
//! stand-in API, asking sluice's HTTP check (`--check-addr`) with the API-key tiers of the Envoy
//! example. The files are used unchanged but for their ports (and nginx's log); every proxy
//! runs the same scenario and answers the client what a user of that proxy can expect. What a
//! hostile client can try through each: `forward_auth_hostile.rs`.

mod common;
mod proxies;

use std::time::Instant;

use proxies::{Proxy, Stack};

/// The tiers through `proxy`: 5 requests a second for an unknown key, then sluice's own 429
/// (`Retry-After`, the RateLimit headers and its problem+json body, naming the limit); a
/// premium key unaffected; the per-minute limit holds; a client's own X-Forwarded-For does not
/// change the address it is counted under.
fn tiers_through(proxy: Proxy) {
    let s = Stack::start(proxy);
    common::next_second();
    // A key not in tiers.yaml is basic: 5 a second (and 20 a minute), whichever way it is sent.
    for i in 0..5 {
        let spoofed = format!("10.9.9.{i}");
        let ok = s.get(
            "/v1/items?api_key=k-new",
            &[("x-forwarded-for", spoofed.as_str())],
        );
        assert_eq!(ok.status, 200, "{}: request {i}: {ok:?}", proxy.dir());
        assert_eq!(ok.body, "ok\n");
        let policy = if s.proxy.headers_on_allowed() {
            assert!(ok.headers.contains_key("ratelimit"), "{ok:?}");
            ok.headers
                .get("ratelimit-policy")
                .expect("RateLimit-Policy")
        } else {
            // The API got them.
            ok.headers
                .get("x-api-saw-ratelimit")
                .expect("the API's echo")
        };
        assert!(
            policy.contains("\"basic_per_second\";"),
            "{}: {policy}",
            proxy.dir()
        );
    }
    let denied = s.get("/v1/items", &[("x-api-key", "k-new")]);
    assert_eq!(denied.status, 429, "{}: {denied:?}", proxy.dir());
    assert_eq!(
        denied.headers.get("retry-after").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        denied.headers.get("content-type").map(String::as_str),
        Some("application/problem+json")
    );
    for h in ["ratelimit-policy", "ratelimit"] {
        assert!(
            denied.headers.contains_key(h),
            "{}: {denied:?}",
            proxy.dir()
        );
    }
    // sluice's body, not one the proxy wrote: it names the limit and the wait.
    let problem: serde_json::Value = serde_json::from_str(&denied.body)
        .unwrap_or_else(|e| panic!("{}: {e}: {denied:?}", proxy.dir()));
    assert_eq!(problem["title"], "Too Many Requests");
    assert_eq!(
        problem["violated_policies"][0]["policy"],
        "basic_per_second",
        "{}: {problem}",
        proxy.dir()
    );
    assert_eq!(
        problem["detail"],
        "Rate limit \"basic_per_second\" of 5 requests per 1 s exceeded; retry in 1 s.",
        "{}",
        proxy.dir()
    );
    // A premium key (tiers.yaml) in the same second: its own limits, 100 a second.
    let premium = s.get("/v1/items", &[("authorization", "Bearer key-premium-0001")]);
    assert_eq!(premium.status, 200, "{premium:?}");
    // Whatever X-Forwarded-For the client sent, it was counted as the address the proxy saw.
    assert_eq!(
        s.tracked("remote_address"),
        ["remote_address=127.0.0.1"],
        "{}",
        proxy.dir()
    );
    // The per-minute limit holds when the per-second one allows: 20 a minute for basic keys
    // (a token bucket: 20, and one more every 3 s since the first request).
    let started = Instant::now();
    let mut passed = 5;
    for _ in 0..4 {
        common::next_second();
        for _ in 0..5 {
            passed += usize::from(s.get("/", &[("x-api-key", "k-new")]).status == 200);
        }
    }
    let most = 20 + (started.elapsed().as_secs_f64() / 3.0).ceil() as usize;
    assert!(
        (20..=most).contains(&passed),
        "{}: {passed} passed, at most {most}",
        proxy.dir()
    );
    assert!(passed < 25, "the per-minute limit denied some");
    drop(s.dir);
}

#[test]
fn nginx_answers_200_with_ratelimit_headers_then_429_with_retry_after() {
    tiers_through(Proxy::Nginx);
}

#[test]
fn caddy_answers_200_with_ratelimit_headers_then_429_with_retry_after() {
    tiers_through(Proxy::Caddy);
}

#[test]
fn traefik_answers_200_then_429_with_retry_after_and_the_api_sees_the_headers() {
    tiers_through(Proxy::Traefik);
}

/// The three examples' sluice configs differ only in their comments and the proxy they name
/// (`check.proxy`): one set of rules.
#[test]
fn the_proxies_examples_share_one_set_of_rules() {
    let rules = |dir: &str| -> Vec<String> {
        let text = common::example(dir, "sluice.yaml");
        let named = format!("  proxy: {dir}");
        assert!(
            text.lines()
                .any(|l| l.split(" #").next() == Some(named.as_str())),
            "{dir}/sluice.yaml names its proxy"
        );
        text.lines()
            .map(|l| l.split(" #").next().unwrap_or("").trim_end().to_string())
            .filter(|l| !l.trim_start().starts_with('#') && !l.is_empty() && *l != named)
            .collect()
    };
    assert_eq!(rules("caddy"), rules("nginx"));
    assert_eq!(rules("traefik"), rules("nginx"));
    for dir in ["caddy", "traefik"] {
        assert_eq!(
            common::example(dir, "tiers.yaml"),
            common::example("nginx", "tiers.yaml")
        );
    }
}

/// The recipes on docs/forward-auth.md are the examples' own lines, so what a reader copies is
/// what CI runs; and nginx's sets every header `check: {proxy: nginx}` reads (nginx passes a
/// client's own on, so one left unset would be the client's to choose).
#[test]
fn the_docs_recipes_are_the_examples_own_lines() {
    use sluice_core::check::{CheckPlan, CheckProxy, Part};
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/forward-auth.md"),
    )
    .expect("docs/forward-auth.md");
    let block = |fence: &str, holding: &str| -> Vec<String> {
        let mut blocks = page.split("\n```").skip(1).step_by(2);
        let block = blocks
            .find(|b| b.starts_with(fence) && b.contains(holding))
            .unwrap_or_else(|| panic!("no ```{fence} block holding {holding}"));
        block
            .lines()
            .skip(1)
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect()
    };
    for (fence, holding, dir, file) in [
        ("nginx", "auth_request", "nginx", "nginx.conf"),
        ("caddyfile", "reverse_proxy", "caddy", "Caddyfile"),
        ("yaml", "forwardAuth", "traefik", "dynamic.yaml"),
    ] {
        let example: Vec<String> = common::example(dir, file)
            .lines()
            .map(|l| l.split(" #").next().unwrap_or("").trim().to_string())
            .collect();
        for line in block(fence, holding) {
            assert!(
                example.contains(&line),
                "docs/forward-auth.md's {dir} recipe has a line {file} does not: {line}"
            );
        }
    }
    let nginx = block("nginx", "auth_request")
        .join("\n")
        .to_ascii_lowercase();
    let preset = CheckPlan::preset(CheckProxy::Nginx);
    for part in [preset.method, preset.uri, preset.host] {
        let Part::Header(name) = part else {
            panic!("nginx's preset reads headers")
        };
        assert!(
            nginx.contains(&format!("proxy_set_header {name} ")),
            "the nginx recipe leaves {name} to the client"
        );
    }
}
