//! Helpers for the tests that run sluice beside envoyproxy/ratelimit on limits pushed over xDS
//! (`xds_reference.rs`, `envoy_gateway.rs`): the reference's binary, the limits both get, and
//! the comparison of their answers.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluice_proto::envoy::ratelimit::RateLimitResponse;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

/// The reference's binary (`SLUICE_RATELIMIT_REFERENCE` overrides where it is).
pub fn reference_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("SLUICE_RATELIMIT_REFERENCE") {
        return bin.into();
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/bin/ratelimit-reference");
    assert!(
        local.exists(),
        "no {}: run scripts/setup.sh (it installs envoyproxy/ratelimit)",
        local.display()
    );
    local
}

/// Resources in protojson: domain `rl` with `user` at `user` a minute and, under `route=search`,
/// `user` at `search` an hour; `tenant` at 1 a minute when `tenant`.
pub fn limits(user: u32, search: u32, tenant: bool) -> String {
    let tenant = if tenant {
        r#", {"key": "tenant", "rate_limit": {"unit": "MINUTE", "requests_per_unit": 1}}"#
    } else {
        ""
    };
    format!(
        r#"[{{"name": "rl", "domain": "rl", "descriptors": [
            {{"key": "user", "rate_limit": {{"unit": "MINUTE", "requests_per_unit": {user}}}}},
            {{"key": "route", "value": "search", "descriptors": [
                {{"key": "user", "rate_limit": {{"unit": "HOUR", "requests_per_unit": {search}}}}}]}}{tenant}]}}]"#
    )
}

/// Waits until `port` accepts connections (the reference opens its ports once configured).
pub fn until_listening(port: u16) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "nothing listens on {port} after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A code, and a status's limit and unit if it has one.
pub type Status = (i32, Option<(u32, i32)>);

/// `request` as the code, and each status's code, limit and unit: what a client of either sees;
/// and the headers to add to the response (`LIMIT_RESPONSE_HEADERS_ENABLED`), by name, with the
/// limit's value. (`limit_remaining` and the remaining and reset headers are left out: sluice
/// decides from leases and reports what the global bucket held at its last store call, and its
/// bucket is whole again sooner than a fixed window, docs/migrating.md.)
pub fn seen(answer: &RateLimitResponse) -> (Vec<Status>, Vec<String>) {
    let mut out = vec![(answer.overall_code, None)];
    out.extend(answer.statuses.iter().map(|s| {
        (
            s.code,
            s.current_limit
                .as_ref()
                .map(|l| (l.requests_per_unit, l.unit)),
        )
    }));
    let headers = (answer.response_headers_to_add.iter())
        .map(|h| match h.key.as_str() {
            "RateLimit-Limit" => format!("{}: {}", h.key, h.value),
            _ => h.key.clone(),
        })
        .collect();
    (out, headers)
}

/// The minute of the wall clock (minutes since the Unix epoch): the reference's window.
pub fn minute_now() -> u64 {
    use sluice_core::Clock as _;
    sluice_core::SystemClock::new().now_micros() / 60_000_000
}

/// Waits until the next minute is at least `room` away, and returns the minute it is then:
/// the reference counts in fixed windows (a minute's count starts again at the minute), sluice
/// in a token bucket, so calls on either side of a minute's edge may be answered otherwise by
/// design (docs/migrating.md). A test whose later calls depend on the counts of its earlier
/// ones needs them all in one minute: room for all of them, then [`minute_now`] checked equal
/// before the last (an update between them once pushed the second half into the next minute,
/// where the reference had forgotten a user sluice still denied).
pub fn clear_of_a_minute_edge(room: Duration) -> u64 {
    use sluice_core::Clock as _;
    let clock = sluice_core::SystemClock::new();
    let into_minute = || Duration::from_micros(clock.now_micros() % 60_000_000);
    while into_minute() + room > Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
    }
    minute_now()
}

/// Sends each of `calls` (a descriptor's entries) to both, asserts they answer alike, and
/// returns the overall codes.
pub async fn alike(
    sluice: &mut RateLimitServiceClient<Channel>,
    reference: &mut RateLimitServiceClient<Channel>,
    calls: &[&[(&str, &str)]],
) -> Vec<Code> {
    let mut codes = Vec::new();
    use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
    use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry;
    use sluice_proto::envoy::ratelimit::RateLimitRequest;
    for (i, entries) in calls.iter().enumerate() {
        let request = RateLimitRequest {
            domain: "rl".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| Entry {
                        key: (*k).into(),
                        value: (*v).into(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        };
        let ours = sluice
            .should_rate_limit(request.clone())
            .await
            .expect("sluice");
        let theirs = reference
            .should_rate_limit(request)
            .await
            .expect("reference");
        assert_eq!(
            seen(ours.get_ref()),
            seen(theirs.get_ref()),
            "call {i} {entries:?}: sluice answered otherwise than envoyproxy/ratelimit"
        );
        codes.push(Code::try_from(ours.get_ref().overall_code).expect("a code"));
    }
    codes
}
