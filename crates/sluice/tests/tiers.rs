//! `deploy/examples/tiers` end to end, as shipped: Envoy 1.40 with ext_authz in front of a
//! stand-in API, sluice with premium / standard / basic API-key tiers (a per-second and a
//! per-minute limit on every key), the key read from `x-api-key`, `Authorization: Bearer` or the
//! `api_key` query parameter, and the key → tier map reloaded when its file changes.
//!
//! The example files are used unchanged but for their ports.

mod common;

use std::time::{Duration, Instant};

use common::{Envoy, HttpResponse, free_port, http_get, with_ports};
use sluice_testkit::process::Sluice;

struct Stack {
    http: u16,
    dir: tempfile::TempDir,
    _sluice: Sluice,
    _envoy: Envoy,
}

fn stack() -> Stack {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["sluice.yaml", "tiers.yaml"] {
        std::fs::write(dir.path().join(name), common::example("tiers", name)).expect("write");
    }
    let sluice = Sluice::start_path(
        common::bin(),
        &dir.path().join("sluice.yaml"),
        &["--reload-interval", "100ms"],
    );
    let (http, api) = (free_port(), free_port());
    let envoy = with_ports(
        &common::example("tiers", "envoy.yaml"),
        &[(10000, http), (8081, sluice.grpc.port()), (9000, api)],
    );
    Stack {
        http,
        dir,
        _envoy: Envoy::start(&envoy, &[http, api]),
        _sluice: sluice,
    }
}

fn with_key(s: &Stack, key: &str) -> HttpResponse {
    http_get(s.http, "/v1/items", &[("x-api-key", key)])
}

#[test]
fn each_tier_gets_its_limits_whichever_way_the_key_is_sent() {
    let s = stack();
    // basic: 5 a second on the key, however it is sent.
    let statuses: Vec<u16> = (0..5)
        .map(|_| with_key(&s, "key-basic-0001").status)
        .collect();
    assert_eq!(statuses, [200; 5]);
    let bearer = http_get(
        s.http,
        "/v1/items",
        &[("authorization", "Bearer key-basic-0001")],
    );
    let query = http_get(s.http, "/v1/items?api_key=key-basic-0001", &[]);
    assert_eq!(
        (bearer.status, query.status),
        (429, 429),
        "the same key by any route"
    );
    assert!(
        bearer.headers["ratelimit-policy"].contains("basic_per_second"),
        "{:?}",
        bearer.headers
    );
    assert!(bearer.headers.contains_key("retry-after"));
    assert!(bearer.body.contains("basic_per_second"), "{}", bearer.body);
    // premium: 100 a second, so 30 at once pass; standard: 20.
    let premium = (0..30)
        .filter(|_| with_key(&s, "key-premium-0001").status == 200)
        .count();
    let started = Instant::now();
    let standard = (0..30)
        .filter(|_| with_key(&s, "key-standard-0001").status == 200)
        .count();
    // The burst of 20, and what refilled (20 a second) while the 30 were sent one by one.
    let refilled = (20.0 * started.elapsed().as_secs_f64()).ceil() as usize;
    assert_eq!(premium, 30);
    assert!(
        (20..=20 + refilled).contains(&standard) && standard < 30,
        "standard admitted {standard} (refill {refilled})"
    );
    // No key: only the per-address limit applies.
    assert_eq!(http_get(s.http, "/v1/items", &[]).status, 200);
}

#[test]
fn the_per_minute_limit_holds_when_the_per_second_one_allows() {
    let s = stack();
    // A key missing from tiers.yaml gets the map's default: basic (5/s, 20/min).
    let key = "key-not-in-the-file";
    let mut admitted = 0;
    let mut denied_by = Vec::new();
    for _ in 0..5 {
        common::next_second();
        for _ in 0..5 {
            let r = with_key(&s, key);
            if r.status == 200 {
                admitted += 1;
            } else {
                denied_by.push(r.headers["ratelimit-policy"].clone());
            }
        }
    }
    // 20 a minute, plus what refilled in the ~4 s (a third of a token a second).
    assert!((20..=22).contains(&admitted), "admitted {admitted}");
    assert!(
        denied_by.iter().all(|p| p.contains("basic_per_minute")),
        "{denied_by:?}"
    );
}

#[test]
fn a_key_moved_to_another_tier_gets_its_limits_without_a_restart() {
    let s = stack();
    let key = "key-basic-0001";
    let over = (0..10).filter(|_| with_key(&s, key).status == 429).count();
    assert_eq!(over, 5, "basic: 5 of 10 pass");
    let tiers = common::example("tiers", "tiers.yaml")
        .replace("key-basic-0001: basic", "key-basic-0001: premium");
    std::fs::write(s.dir.path().join("tiers.yaml"), tiers).expect("edit tiers.yaml");
    let start = Instant::now();
    loop {
        common::next_second();
        let passed = (0..10).filter(|_| with_key(&s, key).status == 200).count();
        if passed == 10 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "still limited as basic after 5 s ({passed} of 10 passed)"
        );
    }
}
