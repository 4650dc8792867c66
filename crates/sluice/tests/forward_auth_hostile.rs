//! What a hostile client can try through each shipped proxy example (issue 41): name another
//! path, host, method or API key in a forwarded header sluice might read, spell the path another
//! way, or ask for its denial with another status. Each stack is the example as shipped, with
//! more limits (on `/login`, and a bucket per path, host and method, so `sluice quota list` shows
//! what sluice decided on).

mod common;
mod proxies;

use proxies::{Proxy, Stack, replace_all};

/// The example's sluice.yaml with `/login` limited to 3 a minute for everyone, and a bucket per
/// path, host and method (generous: they only record what sluice saw).
fn with_more_limits(proxy: Proxy) -> String {
    let yaml = common::example(proxy.dir(), "sluice.yaml");
    let descriptor = "    - [{key: remote_address, from: client_ip}]\n";
    let rule = "        rate_limit: {unit: second, requests_per_unit: 200, name: per_address}\n";
    let seen = |key: &str| {
        format!(
            "      - key: {key}\n        rate_limit: {{unit: second, requests_per_unit: 1000, name: per_{key}}}\n"
        )
    };
    replace_all(
        &yaml,
        &[
            (
                descriptor,
                format!(
                    "{descriptor}    - [{{key: path, from: path}}]\n    - [{{key: host, from: host}}]\n    - [{{key: method, from: method}}]\n"
                ),
            ),
            (
                rule,
                format!(
                    "{rule}      - key: path\n        value: /login\n        rate_limit: {{unit: minute, requests_per_unit: 3, name: login}}\n{}{}{}",
                    seen("path"),
                    seen("host"),
                    seen("method")
                ),
            ),
        ],
    )
}

/// `/login` spent, then every way a client might reach it again: denied by sluice (or refused
/// by the proxy), never passed; sluice saw only the path, host and method the proxy set; a key
/// named in a forwarded header is not the one counted.
fn a_client_cannot_pick_what_is_decided(proxy: Proxy) {
    let s = Stack::start_with(proxy, &with_more_limits(proxy));
    let name = proxy.dir();
    for i in 0..3 {
        let ok = s.get("/login", &[]);
        assert_eq!(ok.status, 200, "{name}: request {i}: {ok:?}");
    }
    assert_eq!(s.get("/login", &[]).status, 429, "{name}: /login spent");
    // Another path, host or method in every forwarded header a proxy may carry one in.
    let forged: &[(&str, &str)] = &[
        ("x-forwarded-uri", "/elsewhere-1"),
        ("x-original-uri", "/elsewhere-2"),
        ("x-forwarded-host", "elsewhere.example"),
        ("x-forwarded-method", "DELETE"),
        ("x-forwarded-proto", "gopher"),
    ];
    for header in forged {
        let r = s.get("/login", &[*header]);
        assert_eq!(r.status, 429, "{name}: a client's {header:?}: {r:?}");
    }
    let r = s.get("/login", forged);
    assert_eq!(r.status, 429, "{name}: all of them at once: {r:?}");
    // The same path, spelt otherwise (RFC 3986 dot segments, escaped unreserved characters,
    // repeated slashes): one bucket. A proxy may refuse a spelling itself (400).
    let mut spellings = vec![
        "//login",
        "///login?x=1",
        "/./login",
        "/%6cogin",
        "/%6C%6F%67%69%6E",
        "/x/../login",
        "/%2e/login",
        "/x/%2E%2E/login",
        "/login?x=1",
    ];
    if proxy == Proxy::Nginx {
        // nginx passes a fragment on as it came (Caddy escapes it: another path; Traefik
        // refuses it).
        spellings.push("/login#x");
    }
    for path in spellings {
        let r = s.get(path, &[]);
        assert!(
            r.status == 429 || r.status == 400,
            "{name}: {path} passed: {r:?}"
        );
    }
    // A client asking for its denial with another status (the header nginx's recipe once set).
    let r = s.get("/login", &[("x-sluice-deny-status", "401")]);
    assert_eq!(r.status, 429, "{name}: {r:?}");
    // A basic key in the URL, a premium key in the forwarded headers: basic limits, 5 a second.
    common::next_second();
    let premium = "/v1/items?api_key=key-premium-0001";
    let headers = [("x-forwarded-uri", premium), ("x-original-uri", premium)];
    let passed = (0..8)
        .filter(|_| s.get("/v1/items?api_key=k-hostile", &headers).status == 200)
        .count();
    // (6: the bucket refilled one token while the 8 requests went.)
    assert!((5..=6).contains(&passed), "{name}: {passed} of 8 passed");
    let mut paths = s.tracked("path");
    paths.sort();
    assert_eq!(
        paths,
        ["path=/health-of-the-route", "path=/login", "path=/v1/items"],
        "{name}: the paths sluice decided on"
    );
    assert_eq!(s.tracked("host"), ["host=test.local"], "{name}");
    assert_eq!(s.tracked("method"), ["method=GET"], "{name}");
    drop(s.dir);
}

#[test]
fn through_nginx_a_client_cannot_pick_the_path_host_method_or_key() {
    a_client_cannot_pick_what_is_decided(Proxy::Nginx);
}

#[test]
fn through_caddy_a_client_cannot_pick_the_path_host_method_or_key() {
    a_client_cannot_pick_what_is_decided(Proxy::Caddy);
}

#[test]
fn through_traefik_a_client_cannot_pick_the_path_host_method_or_key() {
    a_client_cannot_pick_what_is_decided(Proxy::Traefik);
}
