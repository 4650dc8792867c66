//! Leases of rate through the engine on a real Redis (issue 42, `engine.rate_lease_ttl`): two
//! sidecars at 80% of a limit, each with its own connection (so its own holder in the bucket),
//! reserve their slices in the bucket and pay from their stocks. None of their requests is
//! denied, each holds a reservation in the bucket's hash, and once the reservations fill Redis
//! sees fewer script calls than with token leases on the same requests.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::{Code, Engine, EngineSettings};

const RULES: &str = r#"
domain: t
descriptors:
  - key: global
    rate_limit: {unit: second, requests_per_unit: 100, burst: 100}
"#;

/// The bucket of `global=v` (its hash tag hides the domain; the golden-keys test pins it).
async fn bucket(c: &mut redis::aio::MultiplexedConnection) -> Option<String> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("sluice:*:global=v")
        .query_async(c)
        .await
        .expect("KEYS");
    keys.into_iter().next()
}

async fn sidecar(url: &str, rate_lease_ttl: Option<Duration>) -> Arc<Engine> {
    let settings = EngineSettings {
        rate_lease_ttl,
        ..EngineSettings::default()
    };
    common::engine::on_redis(url, RULES, settings).await
}

/// What a run of two sidecars showed.
struct Run {
    denied: usize,
    /// Script calls in the run's second half.
    calls_late: u64,
}

/// Two sidecars, each deciding 40 a second (80% of the limit together) for `secs` seconds.
async fn run(url: &str, rate_lease_ttl: Option<Duration>, secs: u64) -> Run {
    let fleet = [
        sidecar(url, rate_lease_ttl).await,
        sidecar(url, rate_lease_ttl).await,
    ];
    let mut tick = tokio::time::interval(Duration::from_millis(25));
    let ticks = secs * 40;
    let (mut denied, mut half) = (0, 0);
    for i in 0..ticks {
        tick.tick().await;
        if i == ticks / 2 {
            half = common::script_calls(url).await;
        }
        for e in &fleet {
            let d = common::engine::decide(e, "global", "v").await;
            denied += usize::from(d.overall != Code::Ok);
        }
    }
    Run {
        denied,
        calls_late: common::script_calls(url).await - half,
    }
}

async fn reservations(url: &str) -> Vec<(String, u64)> {
    let client = redis::Client::open(url).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let Some(key) = bucket(&mut c).await else {
        return Vec::new();
    };
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut c)
        .await
        .expect("HGETALL");
    fields
        .into_iter()
        .filter(|(f, _)| f.starts_with('g') && f[1..].bytes().all(|b| b.is_ascii_digit()))
        .map(|(f, v)| (f, v.parse().unwrap_or(0)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_at_80_percent_pay_from_reserved_rate_with_fewer_calls() {
    let redis = common::Standalone::start().await;
    let url = redis.url();

    let tokens = run(&url, None, 6).await;
    assert_eq!(tokens.denied, 0, "token leases denied under the limit");
    assert!(
        reservations(&url).await.is_empty(),
        "token leases reserve nothing"
    );
    let mut c = redis::Client::open(url.as_str())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let key = bucket(&mut c).await.expect("the token run's bucket");
    redis::cmd("DEL")
        .arg(key)
        .query_async::<()>(&mut c)
        .await
        .expect("DEL");

    let rates = run(&url, Some(Duration::from_secs(10)), 6).await;
    assert_eq!(rates.denied, 0, "leases of rate denied under the limit");
    let held = reservations(&url).await;
    eprintln!(
        "script calls in the second 3 s: tokens {}, rates {}; reservations {held:?}",
        tokens.calls_late, rates.calls_late
    );
    assert_eq!(held.len(), 2, "one reservation per sidecar: {held:?}");
    assert!(held.iter().all(|(_, g)| *g > 0), "{held:?}");
    let total: u64 = held.iter().map(|(_, g)| g).sum();
    assert!(
        total <= 80_000,
        "at most 80% of 100 a second reserved: {held:?}"
    );
    assert!(
        rates.calls_late * 2 <= tokens.calls_late,
        "script calls in the second 3 s: rates {}, tokens {}",
        rates.calls_late,
        tokens.calls_late
    );
}
