//! What a hostile client can try through each shipped proxy example (issue 41): name another
//! path, host, method or API key in a forwarded header sluice might read, spell the path another
//! way, or ask for its denial with another status. Each stack is the example as shipped, with
//! more limits (on `/login`, and a bucket per path, host and method, so `sluice quota list` shows
//! what sluice decided on).

mod common;
mod proxies;

use common::{Envoy, free_port, http_get};
use proxies::{Proxy, Stack, replace_all, start_sluice, tracked};

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
    let started = std::time::Instant::now();
    let passed = (0..8)
        .filter(|_| s.get("/v1/items?api_key=k-hostile", &headers).status == 200)
        .count();
    // Five, and one more per 200 ms the requests took (the bucket refills); premium's 100 a
    // second would pass all 8.
    let refilled = (started.elapsed().as_millis() / 200) as usize;
    assert!(
        passed >= 5 && passed <= 5 + refilled && passed < 8,
        "{name}: {passed} of 8 passed"
    );
    assert_eq!(
        s.tracked("path"),
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

/// Envoy's ext_authz filter asking the HTTP check (`http_service`, `check: {proxy: envoy}`):
/// the check request is the request (its method, path and host), so no header a client sends
/// names another, and the path is decided on in one spelling.
#[test]
fn through_envoy_http_ext_authz_a_client_cannot_pick_the_path() {
    let yaml = with_more_limits(Proxy::Nginx).replace("proxy: nginx", "proxy: envoy");
    let dir = tempfile::tempdir().expect("tempdir");
    let (sluice, check) = start_sluice(dir.path(), &yaml);
    let (http, api) = (free_port(), free_port());
    let _envoy = Envoy::start(&envoy_http_ext_authz(http, check, api), &[http, api]);
    for i in 0..3 {
        let ok = http_get(http, "/login", &[]);
        assert_eq!(ok.status, 200, "request {i}: {ok:?}");
    }
    let denied = http_get(
        http,
        "/login",
        &[
            ("x-forwarded-uri", "/elsewhere"),
            ("x-original-uri", "/elsewhere"),
        ],
    );
    assert_eq!(denied.status, 429, "{denied:?}");
    assert!(denied.body.contains("\"policy\":\"login\""), "{denied:?}");
    for path in [
        "//login",
        "/./login",
        "/%6cogin",
        "/x/../login",
        "/%2e/login",
    ] {
        let r = http_get(http, path, &[("x-forwarded-method", "DELETE")]);
        assert!(r.status == 429 || r.status == 400, "{path} passed: {r:?}");
    }
    assert_eq!(tracked(&sluice, "path"), ["path=/login"]);
    assert_eq!(tracked(&sluice, "method"), ["method=GET"]);
    assert_eq!(tracked(&sluice, "host"), ["host=test.local"]);
}

/// Envoy on `http` with ext_authz asking sluice's HTTP check at `check` (`http_service`), in
/// front of a stand-in API on `api` (a second listener answering 200).
fn envoy_http_ext_authz(http: u16, check: u16, api: u16) -> String {
    let listener = |name: &str, port: u16, filters: &str, route: &str| {
        format!(
            r#"
  - name: {name}
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{match: {{prefix: "/"}}, {route}}}]
          http_filters:{filters}
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}"#
        )
    };
    let ext_authz = r#"
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              http_service:
                server_uri: {uri: "http://127.0.0.1", cluster: sluice_check, timeout: 1s}"#;
    let cluster = |name: &str, port: u16| {
        format!(
            r#"
  - name: {name}
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: {name}
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]"#
        )
    };
    format!(
        "static_resources:\n  listeners:{}{}\n  clusters:{}{}\n",
        listener("front", http, ext_authz, "route: {cluster: api}"),
        listener(
            "api",
            api,
            "",
            "direct_response: {status: 200, body: {inline_string: ok}}"
        ),
        cluster("sluice_check", check),
        cluster("api", api),
    )
}
