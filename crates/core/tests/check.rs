//! `check:`: the proxy in front of the HTTP check, its presets and overrides; every mistake is an
//! error at its line.

use sluice_core::check::{CheckPlan, CheckProxy, Part};
use sluice_core::config::parse_config;

fn plan(text: &str) -> CheckPlan {
    parse_config(text)
        .unwrap_or_else(|e| panic!("{text}\n=> {e}"))
        .check
        .expect("check")
}

fn header(name: &str) -> Part {
    Part::Header(name.to_string())
}

/// `(line, message contains)` of the error for `text`.
fn located(text: &str, line: u64, needle: &str) {
    let e = parse_config(text).expect_err(text);
    assert_eq!(e.line, line, "{text}\n=> {e}");
    assert!(e.message.contains(needle), "{text}\n=> {e}");
}

#[test]
fn each_proxy_reads_the_headers_its_recipe_sets() {
    let nginx = plan("check: {proxy: nginx}\n");
    assert_eq!(
        (nginx.method, nginx.uri, nginx.host, nginx.deny_status),
        (
            header("x-forwarded-method"),
            header("x-original-uri"),
            header("x-forwarded-host"),
            403
        )
    );
    for (name, proxy) in [
        ("caddy", CheckProxy::Caddy),
        ("traefik", CheckProxy::Traefik),
    ] {
        let p = plan(&format!("check: {{proxy: {name}}}\n"));
        assert_eq!(p.proxy, Some(proxy));
        assert_eq!(
            (p.method, p.uri, p.host, p.deny_status),
            (
                header("x-forwarded-method"),
                header("x-forwarded-uri"),
                header("x-forwarded-host"),
                429
            ),
            "{name}"
        );
    }
    let envoy = plan("check: {proxy: envoy}\n");
    assert_eq!(
        (envoy.method, envoy.uri, envoy.host, envoy.deny_status),
        (Part::Request, Part::Request, Part::Request, 429)
    );
    assert!(
        parse_config("shadow_mode: false\n")
            .expect("loads")
            .check
            .is_none()
    );
}

#[test]
fn headers_and_status_override_the_preset() {
    let p = plan("check:\n  proxy: nginx\n  headers: {uri: X-Forwarded-Uri}\n  deny_status: 401\n");
    assert_eq!(p.uri, header("x-forwarded-uri"), "lower-cased");
    assert_eq!(p.method, header("x-forwarded-method"), "the preset's");
    assert_eq!(p.deny_status, 401);
    // No proxy: every part named.
    let custom = plan("check:\n  headers: {method: X-M, uri: X-U, host: X-H}\n");
    assert_eq!(
        (
            custom.proxy,
            custom.method,
            custom.uri,
            custom.host,
            custom.deny_status
        ),
        (None, header("x-m"), header("x-u"), header("x-h"), 429)
    );
}

#[test]
fn mistakes_are_errors_at_their_line() {
    located(
        "shadow_mode: false\ncheck: {}\n",
        2,
        "name the proxy in front",
    );
    located(
        "check:\n  headers: {uri: x-u}\n",
        2,
        "`headers.method`, `headers.uri` and `headers.host`",
    );
    located("check:\n  proxy: haproxy\n", 2, "haproxy");
    located("check:\n  proxy: nginx\n  prxy: nginx\n", 3, "prxy");
    located(
        "check:\n  proxy: nginx\n  headers:\n    uri: \"x original uri\"\n",
        4,
        "check.headers.uri: \"x original uri\" is not a header name",
    );
    located(
        "check:\n  proxy: nginx\n  headers:\n    host: \"\"\n",
        4,
        "is not a header name",
    );
    located(
        "check:\n  proxy: nginx\n  headers: {path: x-p}\n",
        3,
        "path",
    );
    for bad in ["200", "500", "0", "70000", "18446744073709551615"] {
        located(
            &format!("check:\n  proxy: caddy\n  deny_status: {bad}\n"),
            3,
            &format!("check.deny_status: {bad} is not 401, 403 or 429"),
        );
    }
    located(
        "check:\n  proxy: caddy\n  deny_status: -1\n",
        3,
        "deny_status",
    );
}
