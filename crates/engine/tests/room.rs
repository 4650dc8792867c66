//! A full key table never locks out every rule: one rule's keys cannot take the room of every
//! other rule, and a key that finds no room is told so, with a true retry time, and counted.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sluice_core::{Descriptor, ManualClock};
use sluice_engine::{
    Code, Decision, Denial, Engine, EngineMetrics, EngineSettings, MemoryStore, RateLimitRequest,
};

/// Two domains: a cheap monthly rule a client fills with values of its choosing, and an
/// unrelated per-second rule; and their local-mode twins (held in the engine's own table).
const RULES: &str = r#"
domains:
  - domain: junk
    descriptors:
      - key: v
        rate_limit: {unit: month, requests_per_unit: 3}
      - key: lv
        rate_limit: {unit: month, requests_per_unit: 3, mode: local}
      - key: w
        rate_limit: {unit: month, requests_per_unit: 3}
  - domain: api
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 100}
      - key: luser
        rate_limit: {unit: month, requests_per_unit: 2, mode: local}
      - key: muser
        rate_limit: {unit: month, requests_per_unit: 2}
"#;

fn engine(clock: &ManualClock, max_keys: usize) -> (Engine, EngineMetrics) {
    let metrics = EngineMetrics::unregistered();
    let e = Engine::new(
        sluice_core::parse_config(RULES).expect("rules").rules,
        MemoryStore::with_max_keys(clock.clone(), max_keys),
        Arc::new(clock.clone()),
        EngineSettings {
            max_keys,
            ..EngineSettings::default()
        },
        metrics.clone(),
    );
    (e, metrics)
}

async fn ask(e: &Engine, domain: &str, key: &str, value: &str) -> Decision {
    e.decide(&RateLimitRequest {
        domain,
        descriptors: &[Descriptor::of([(key, value)])],
        hits_addend: 0,
    })
    .await
}

/// Found by a hostile client: `max_keys: 1000` filled by 1 100 values of a monthly rule in
/// another domain made every new user of an unrelated 100/s rule OVER_LIMIT (for days), while
/// the answer said `limit_remaining: 100`, `duration_until_reset: 0`, and nothing was counted.
#[tokio::test]
async fn a_flood_of_one_rule_never_locks_out_another() {
    for key in ["v", "lv"] {
        let clock = ManualClock::at(1);
        let (e, metrics) = engine(&clock, 1000);
        let mut refused = None;
        for i in 0..1100 {
            clock.advance_micros(1);
            let d = ask(&e, "junk", key, &format!("junk{i}")).await;
            if d.overall != Code::Ok && refused.is_none() {
                refused = Some(d);
            }
        }
        // The flood's own excess is refused, and says so.
        let refused = refused.expect("the flood outgrows the table");
        let o = refused.outcomes[0];
        assert_eq!(o.denial, Some(Denial::NoRoom), "{key}");
        assert_eq!(
            (o.remaining, o.until_full),
            (0, Duration::from_secs(1)),
            "{key}"
        );
        assert_eq!(o.retry_after, Some(Duration::from_secs(1)), "{key}");
        assert!(metrics.keys_refused.get() > 0, "{key}: counted");
        // Every new user of the other rules passes.
        for u in 0..200 {
            clock.advance_micros(1);
            for (domain, rule) in [("api", "user"), ("api", "luser"), ("api", "muser")] {
                let d = ask(&e, domain, rule, &format!("u{u}")).await;
                assert_eq!(
                    d.overall,
                    Code::Ok,
                    "{key}: {rule} u{u}: {:?}",
                    d.outcomes[0]
                );
            }
        }
        // The flood's values that lost their room start no fuller than they were: no value
        // passes more than its burst of 3 in all.
        for i in (0..1100).step_by(7) {
            let value = format!("junk{i}");
            let mut passed = 1;
            for _ in 0..4 {
                clock.advance_micros(1);
                passed += u32::from(ask(&e, "junk", key, &value).await.overall == Code::Ok);
            }
            assert!(passed <= 3, "{key}: {value} passed {passed} times");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random floods over three rules (one local) with a small table: no key of any rule is
    /// ever admitted more than its burst (evicting for room never resets a limit), and a rule
    /// holding fewer keys than its share is never refused for room.
    #[test]
    fn floods_never_reset_a_limit_nor_lock_out_a_small_rule(
        ops in prop::collection::vec((0usize..4, 0u32..60, 1u64..3), 1..400),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let clock = ManualClock::at(1);
            let (e, _) = engine(&clock, 24);
            let mut admitted = std::collections::HashMap::<(usize, u32), u64>::new();
            for (rule, value, step) in ops {
                // A key used at this very microsecond is never evicted (a request may be
                // spending from it): time moves between requests, as it does.
                clock.advance_micros(step);
                // The small rule uses 3 values: under any share of 24 keys among 4 rules.
                let (domain, key, value, burst) = match rule {
                    0 => ("junk", "v", value, 3),
                    1 => ("junk", "lv", value, 3),
                    2 => ("junk", "w", value, 3),
                    _ => ("api", "muser", value % 3, 2),
                };
                let d = ask(&e, domain, key, &format!("x{value}")).await;
                if rule == 3 {
                    prop_assert_ne!(d.outcomes[0].denial, Some(Denial::NoRoom), "the small rule");
                }
                if d.overall == Code::Ok {
                    let n = admitted.entry((rule, value)).or_default();
                    *n += 1;
                    prop_assert!(*n <= burst, "{key}={value} admitted {n} times (burst {burst})");
                }
            }
            Ok(())
        })?;
    }
}
