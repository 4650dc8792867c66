//! The HTTP check port (forward auth for nginx, Caddy, Traefik) over real HTTP/1.1: the same
//! `authz:` descriptors and answers as ext_authz, from the request a proxy forwards, each part
//! read from the one header `check:` names.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const CONFIG: &str = r#"
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {name: per_client, unit: minute, requests_per_unit: 2}
      - key: path
        value: /login
        rate_limit: {name: login, unit: minute, requests_per_unit: 1}
authz:
  domain: edge
  trusted_hops: 1
  descriptors:
    - [{key: remote_address, from: client_ip}]
    - [{key: path, from: path}]
check:
  proxy: caddy
"#;

/// What Caddy sends for a client at `client` asking for `uri`: the request in its headers, the
/// client appended to X-Forwarded-For.
fn caddy<'a>(client: &'a str, uri: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("x-forwarded-method", "GET"),
        ("x-forwarded-uri", uri),
        ("x-forwarded-host", "api.example.com"),
        ("x-forwarded-for", client),
    ]
}

struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// One request on its own connection: `GET /check` with `headers`.
async fn get(addr: SocketAddr, headers: &[(&str, &str)]) -> Answer {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut req = String::from("GET /check HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad answer: {out}"));
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

/// Asserts `/metrics` counts `n` HTTP checks under `code`.
async fn assert_counted(server: &TestServer, code: &str, n: u32) {
    let (_, metrics) = server.admin_get("/metrics").await;
    let series = format!(r#"sluice_requests_total{{api="http",code="{code}"}} {n}"#);
    assert!(metrics.contains(&series), "{metrics}");
}

async fn start(config: &str) -> (TestServer, SocketAddr, CancellationToken) {
    let server = TestServer::start(config).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    tokio::spawn(sluice_server::forward::run(
        listener,
        Arc::clone(&server.state),
        stop.clone(),
    ));
    (server, addr, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_gets_ext_authz_answers_as_http() {
    let (server, check, stop) = start(CONFIG).await;
    // Caddy's X-Forwarded-For: the client it saw (a client's own entries would be to its left).
    let from = |client: &'static str| caddy(client, "/v1/x");
    for left in ["1", "0"] {
        let ok = get(check, &from("203.0.113.7")).await;
        assert_eq!(ok.status, 200, "{}", ok.head);
        assert!(
            ok.head
                .contains("ratelimit-policy: \"per_client\";q=2;w=60"),
            "{}",
            ok.head
        );
        assert!(
            ok.head
                .contains(&format!("ratelimit: \"per_client\";r={left}")),
            "{}",
            ok.head
        );
    }
    let denied = get(check, &from("203.0.113.7")).await;
    assert_eq!(denied.status, 429);
    assert!(denied.head.contains("retry-after: "), "{}", denied.head);
    assert!(
        denied
            .head
            .contains("content-type: application/problem+json")
    );
    assert!(denied.body.contains("per_client"), "{}", denied.body);
    assert!(
        !denied.head.contains("x-sluice-problem"),
        "a 429 carries its body as the body"
    );
    // A client spoofing its address in X-Forwarded-For: the proxy appends the one it saw, and
    // with one trusted hop that is the one counted.
    let spoofed = get(check, &from("198.51.100.1, 203.0.113.7")).await;
    assert_eq!(spoofed.status, 429, "still the same client");
    assert_eq!(
        get(check, &from("203.0.113.8")).await.status,
        200,
        "another client"
    );
    // A client asking for another status of its denial (a header nginx's recipe once set, and
    // Caddy passes on): the status is the config's.
    let mut asking = from("203.0.113.7");
    asking.push(("x-sluice-deny-status", "401"));
    assert_eq!(get(check, &asking).await.status, 429);
    assert_counted(&server, "over_limit", 3).await;
    stop.cancel();
    server.stop().await.expect("clean stop");
}

/// nginx's `auth_request` passes on only 2xx, 401 and 403: its preset denies with 403, and the
/// problem+json body in a header, for nginx to answer the client a 429 with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_gets_a_403_with_the_problem_in_a_header() {
    let (server, check, stop) = start(&CONFIG.replace("proxy: caddy", "proxy: nginx")).await;
    let nginx = [
        ("x-forwarded-method", "GET"),
        ("x-original-uri", "/login"),
        ("x-forwarded-host", "api.example.com"),
        ("x-forwarded-for", "203.0.113.7"),
    ];
    assert_eq!(get(check, &nginx).await.status, 200);
    let denied = get(check, &nginx).await;
    assert_eq!(denied.status, 403, "{}", denied.head);
    let problem = denied
        .head
        .lines()
        .find_map(|l| l.strip_prefix("x-sluice-problem: "))
        .unwrap_or_else(|| panic!("no problem header: {}", denied.head));
    assert_eq!(
        problem,
        denied.body.to_ascii_lowercase(),
        "the body, as a header"
    );
    let problem: serde_json::Value = serde_json::from_str(&denied.body).expect("json");
    assert_eq!(problem["violated_policies"][0]["policy"], "login");
    assert!(denied.head.contains("retry-after: "), "{}", denied.head);
    stop.cancel();
    server.stop().await.expect("clean stop");
}

/// Each part is read from the one header `check:` names: another a client sends is never read,
/// and the named one sent twice (the proxy added to the client's instead of replacing it) or
/// not at all is refused, counted as invalid, rather than guessed at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_named_header_is_read_and_only_once() {
    let (server, check, stop) = start(CONFIG).await;
    let login = caddy("203.0.113.7", "/login");
    assert_eq!(get(check, &login).await.status, 200);
    assert_eq!(get(check, &login).await.status, 429, "/login spent");
    // nginx's header, sent by a client through Caddy: not Caddy's, not read.
    let mut forged = login.clone();
    forged.push(("x-original-uri", "/elsewhere"));
    assert_eq!(get(check, &forged).await.status, 429);
    // The named header twice: which copy is the proxy's cannot be told.
    let mut twice = login.clone();
    twice.push(("x-forwarded-uri", "/elsewhere"));
    let refused = get(check, &twice).await;
    assert_eq!(refused.status, 400, "{}", refused.head);
    assert_eq!(
        refused.body,
        "x-forwarded-uri came 2 times: the proxy must set it to the request's URI, replacing any the client sent (check.proxy: caddy)\n"
    );
    let missing = get(check, &login[1..]).await;
    assert_eq!(missing.status, 400);
    assert!(
        missing.body.starts_with("no x-forwarded-method"),
        "{}",
        missing.body
    );
    assert_counted(&server, "invalid", 2).await;
    stop.cancel();
    server.stop().await.expect("clean stop");
}

/// Without `check:` (the binary refuses `--check-addr` then; a server built otherwise), nothing
/// says which headers to trust: every check is refused, none decided from a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_check_section_nothing_is_decided() {
    let (server, check, stop) = start(&CONFIG.replace("check:\n  proxy: caddy\n", "")).await;
    let refused = get(check, &caddy("203.0.113.7", "/login")).await;
    assert_eq!(refused.status, 400, "{}", refused.head);
    assert!(
        refused.body.contains("no `check:` section"),
        "{}",
        refused.body
    );
    assert_counted(&server, "invalid", 1).await;
    stop.cancel();
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_heads_and_slow_clients_are_bounded() {
    let (server, check, stop) = start(CONFIG).await;
    // A head over 64 KiB: refused, and the port goes on serving.
    let huge = "a".repeat(100 * 1024);
    let mut big = caddy("203.0.113.9", "/");
    big.push(("x-big", &huge));
    let refused = get(check, &big).await;
    assert_eq!(refused.status, 431);
    // A client that sends half a request and goes quiet holds nothing for long: the others are
    // answered meanwhile, and it is closed after the header timeout.
    let mut slow = tokio::net::TcpStream::connect(check)
        .await
        .expect("connect");
    slow.write_all(b"GET /check HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    assert_eq!(get(check, &caddy("203.0.113.9", "/")).await.status, 200);
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        slow.read_to_end(&mut rest),
    )
    .await;
    assert!(
        closed.is_ok(),
        "the slow client was closed within the header timeout"
    );
    stop.cancel();
    server.stop().await.expect("clean stop");
}
