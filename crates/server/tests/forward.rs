//! The HTTP check port (forward auth for nginx, Caddy, Traefik) over real HTTP/1.1: the same
//! `authz:` descriptors and answers as ext_authz, from the request a proxy forwards.

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
authz:
  domain: edge
  trusted_hops: 1
  descriptors:
    - [{key: remote_address, from: client_ip}]
"#;

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

async fn start() -> (TestServer, SocketAddr, CancellationToken) {
    let server = TestServer::start(CONFIG).await;
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
    let (server, check, stop) = start().await;
    // nginx's `$proxy_add_x_forwarded_for`: what the client sent, then the client nginx saw.
    let from = |client: &'static str| [("x-forwarded-for", client), ("x-original-uri", "/v1/x")];
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
    // A client spoofing its address in X-Forwarded-For: the proxy appends the one it saw, and
    // with one trusted hop that is the one counted.
    let spoofed = get(check, &from("198.51.100.1, 203.0.113.7")).await;
    assert_eq!(spoofed.status, 429, "still the same client");
    assert_eq!(
        get(check, &from("203.0.113.8")).await.status,
        200,
        "another client"
    );
    // nginx asks for 403 (its auth_request makes any other denial a 500).
    let mut nginx = from("203.0.113.7").to_vec();
    nginx.push(("x-sluice-deny-status", "403"));
    assert_eq!(get(check, &nginx).await.status, 403);
    nginx.pop();
    nginx.push(("x-sluice-deny-status", "500"));
    assert_eq!(get(check, &nginx).await.status, 429, "only 401, 403 or 429");
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains(r#"sluice_requests_total{api="http",code="over_limit"} 4"#),
        "{metrics}"
    );
    stop.cancel();
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_heads_and_slow_clients_are_bounded() {
    let (server, check, stop) = start().await;
    // A head over 64 KiB: refused, and the port goes on serving.
    let huge = "a".repeat(100 * 1024);
    let refused = get(
        check,
        &[("x-forwarded-for", "203.0.113.9"), ("x-big", &huge)],
    )
    .await;
    assert_eq!(refused.status, 431);
    // A client that sends half a request and goes quiet holds nothing for long: the others are
    // answered meanwhile, and it is closed after the header timeout.
    let mut slow = tokio::net::TcpStream::connect(check)
        .await
        .expect("connect");
    slow.write_all(b"GET /check HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    assert_eq!(
        get(check, &[("x-forwarded-for", "203.0.113.9")])
            .await
            .status,
        200
    );
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
