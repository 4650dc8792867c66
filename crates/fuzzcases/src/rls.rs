//! `ShouldRateLimit` requests as a hostile caller shapes them (keys the rules know and others, any
//! values, hits from 0 to `u64::MAX`, limit overrides, any units), through the server's validation
//! and a real engine on the bounded embedded store: `INVALID_ARGUMENT` or a decision, never a
//! panic; an allowed request's outcomes all say OK; a cost above a burst is denied as such.

use std::sync::{Arc, LazyLock};

use arbitrary::{Arbitrary, Unstructured};
use sluice_core::ManualClock;
use sluice_engine::{
    Code, Denial, Engine, EngineMetrics, EngineSettings, MemoryStore, RateLimitRequest,
};
use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice_proto::envoy::protobuf::UInt64Value;
use sluice_proto::envoy::ratelimit::RateLimitRequest as Envoy;

struct World {
    runtime: tokio::runtime::Runtime,
    clock: ManualClock,
    engine: Engine,
}

static WORLD: LazyLock<World> = LazyLock::new(|| {
    let rules = sluice_core::parse_config(
        r#"
limit_overrides: any
domains:
  - domain: d
    descriptors:
      - key: a
        rate_limit: {unit: second, requests_per_unit: 10, burst: 5}
      - key: l
        rate_limit: {unit: minute, requests_per_unit: 3, mode: local}
      - key: x
        rate_limit: {unit: second, requests_per_unit: 0, burst: 2, mode: exact}
      - key: s
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: p
        rate_limit: {unit: second, requests_per_unit: 100, charge: post_paid}
      - key: q
        rate_limit: {unit: second, requests_per_unit: 4, mode: local, charge: post_paid, max_debt: 9}
      - key: fw
        rate_limit: {unit: second, requests_per_unit: 5, algorithm: fixed_window}
      - key: sw
        rate_limit: {unit: second, unit_multiplier: 3, requests_per_unit: 5, algorithm: sliding_window, mode: local}
      - key: m
        rate_limits:
          - {unit: second, requests_per_unit: 5}
          - {unit: minute, requests_per_unit: 20, algorithm: fixed_window}
      - key: qm
        quota_mode: true
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: f
        value: "f*"
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 3}
"#,
    )
    .expect("fuzz rules")
    .rules;
    let clock = ManualClock::at(1);
    let settings = EngineSettings {
        max_keys: 64,
        ..EngineSettings::default()
    };
    World {
        runtime: tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime"),
        engine: Engine::new(
            rules,
            MemoryStore::with_max_keys(clock.clone(), 64),
            Arc::new(clock.clone()),
            settings,
            EngineMetrics::unregistered(),
        ),
        clock,
    }
});

#[derive(Debug, Arbitrary)]
struct Descriptor {
    /// 0..12: a rule key (a, l, x, s, post-paid p and q, windows fw and sw, several limits m,
    /// a quota qm, a shared pattern f) or none; else `raw_key` itself.
    key: u8,
    raw_key: String,
    value: String,
    more: Vec<(String, String)>,
    hits: Option<u64>,
    over: Option<(u32, i32)>,
}

#[derive(Debug, Arbitrary)]
struct Input {
    unknown_domain: bool,
    hits_addend: u32,
    step_ms: u16,
    descriptors: Vec<Descriptor>,
}

fn request(input: &Input) -> Envoy {
    Envoy {
        domain: if input.unknown_domain { "zz" } else { "d" }.into(),
        descriptors: input
            .descriptors
            .iter()
            .map(|d| {
                let key = match d.key % 13 {
                    0 => "a",
                    1 => "l",
                    2 => "x",
                    3 => "s",
                    4 => "o",
                    5 => "p",
                    6 => "q",
                    7 => "fw",
                    8 => "sw",
                    9 => "m",
                    10 => "qm",
                    11 => "f",
                    _ => d.raw_key.as_str(),
                };
                let mut entries = vec![Entry {
                    key: key.into(),
                    value: d.value.clone(),
                }];
                entries.extend(d.more.iter().map(|(k, v)| Entry {
                    key: k.clone(),
                    value: v.clone(),
                }));
                RateLimitDescriptor {
                    entries,
                    limit: d.over.map(|(requests_per_unit, unit)| RateLimitOverride {
                        requests_per_unit,
                        unit,
                    }),
                    hits_addend: d.hits.map(|value| UInt64Value { value }),
                    ..RateLimitDescriptor::default()
                }
            })
            .collect(),
        hits_addend: input.hits_addend,
    }
}

/// One input: `data` read as a [`Input`] the way libFuzzer's typed targets read it (the rest
/// of the bytes feed the last field); bytes too short for one, or that do not make one, are
/// skipped.
pub fn one(data: &[u8]) {
    if data.len() < Input::size_hint(0).0 {
        return;
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let req = request(&input);
    let w = &*WORLD;
    w.clock.advance_micros(u64::from(input.step_ms) * 1_000);
    let Ok(descriptors) = sluice_server::validate::domain(&req.domain)
        .and_then(|()| sluice_server::validate::descriptors(&req.descriptors))
    else {
        return;
    };
    let decision = w.runtime.block_on(w.engine.decide(&RateLimitRequest {
        domain: &req.domain,
        descriptors: &descriptors,
        hits_addend: u64::from(req.hits_addend),
    }));
    assert_eq!(decision.outcomes.len(), descriptors.len());
    if decision.overall == Code::Ok {
        // Only a quota may say OVER_LIMIT in a request that passes (another quota let it pass).
        assert!(
            decision
                .outcomes
                .iter()
                .all(|o| o.code == Code::Ok || o.limit.is_some_and(|l| l.quota))
        );
    }
    for o in &decision.outcomes {
        // Debt never passes a post-paid rule's bound, whatever was reported.
        if let Some(max_debt) = o.limit.and_then(|l| l.payment.max_debt()) {
            assert!(
                o.debt <= max_debt,
                "debt {} over the bound {max_debt}",
                o.debt
            );
        }
        if o.denial == Some(Denial::CostAboveBurst) {
            assert!(o.retry_after.is_none());
            // Unless a shadow rule, or a quota another quota let pass.
            assert!(
                decision.overall == Code::OverLimit || o.limit.is_some_and(|l| l.shadow || l.quota)
            );
        }
    }
    let _ = sluice_server::rls::to_response(&decision);
}
