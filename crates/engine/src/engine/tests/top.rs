//! `quota top` (issue 25 item 10): the keys with the most denied hits, summed over the engines
//! sharing a store, are within 10% of the truth for the top keys, under any skew and past the
//! bounded count's capacity; filters and unknown rules behave.

use proptest::prelude::{ProptestConfig, prop_assert, proptest};

use super::*;
use crate::quota::KeyFilter;

/// Zipf(`s`) over `n` values by inverse CDF, from a seeded xorshift.
struct Zipf {
    cdf: Vec<f64>,
    state: u64,
}

impl Zipf {
    fn new(n: usize, s: f64, seed: u64) -> Self {
        let weights: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cdf = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Self {
            cdf,
            state: seed | 1,
        }
    }

    fn next(&mut self) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]
    #[test]
    fn the_top_keys_fleet_wide_are_within_ten_percent(
        seed in proptest::prelude::any::<u64>(),
        distinct in proptest::sample::select(vec![50usize, 2_000, 20_000]),
        skew in proptest::sample::select(vec![0.8f64, 1.0, 1.3]),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(async {
            let clock = ManualClock::at(1_000_000_000);
            let store = Forwarding::new(&clock, Mode::Up, 2);
            let engines: Vec<Engine> = (0..2)
                .map(|_| engine_on(store.clone(), &clock, EngineSettings::default()))
                .collect();
            let mut zipf = Zipf::new(distinct, skew, seed);
            let mut truth = std::collections::HashMap::<String, u64>::new();
            for i in 0..30_000u64 {
                let value = format!("v{}", zipf.next());
                let e = &engines[(i % 2) as usize];
                // per_user: 2 a minute; 30 000 requests over 15 s.
                if ask(e, &[d(&[("user", &value)])]).await.overall == Code::OverLimit {
                    *truth.entry(format!("user={value}")).or_default() += 1;
                }
                clock.advance_micros(500);
                // Each engine counts 7 500 requests between flushes: with 20 000 values, more
                // distinct keys than its count holds (the bounded path).
                if i % 15_000 == 14_999 {
                    for e in &engines {
                        e.flush_denied().await;
                    }
                }
            }
            let filter = KeyFilter { rule: "per_user".into(), ..KeyFilter::default() };
            let top = engines[1].top_denied(&filter, 20).await.expect("top");
            let mut want: Vec<(&String, &u64)> = truth.iter().collect();
            want.sort_by(|a, b| b.1.cmp(a.1));
            for &(values, &n) in want.iter().take(10) {
                let got = top.iter().find(|r| &r.values == values).map(|r| r.denied);
                let got = got.unwrap_or(0);
                prop_assert!(
                    (got as f64 - n as f64).abs() <= 0.1 * n as f64,
                    "{values}: {got} reported, {n} denied (top: {top:?})"
                );
            }
            prop_assert!(top.windows(2).all(|w| w[0].denied >= w[1].denied), "most first");
            prop_assert!(top.iter().all(|r| r.rule == "per_user" && r.domain == "d"));
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn filters_select_rules_and_old_counts_leave_the_window() {
    let clock = ManualClock::at(1_000_000_000);
    let (e, _store) = engine(&clock);
    for _ in 0..5 {
        ask(&e, &[d(&[("user", "u")])]).await;
        ask(&e, &[d(&[("exact", "x")])]).await;
    }
    // per_user (2 a minute) denied 3; exact (3 a second) denied 2.
    let all = e.top_denied(&KeyFilter::default(), 10).await.expect("top");
    let seen: Vec<(&str, &str, u64)> = all
        .iter()
        .map(|r| (r.rule.as_str(), r.values.as_str(), r.denied))
        .collect();
    assert_eq!(seen, [("per_user", "user=u", 3), ("exact", "exact=x", 2)]);
    let only = KeyFilter {
        rule: "exact".into(),
        ..KeyFilter::default()
    };
    assert_eq!(e.top_denied(&only, 10).await.expect("top").len(), 1);
    let other_domain = KeyFilter {
        domain: "nope".into(),
        ..KeyFilter::default()
    };
    assert!(
        e.top_denied(&other_domain, 10)
            .await
            .expect("top")
            .is_empty()
    );
    assert_eq!(
        e.top_denied(&KeyFilter::default(), 1)
            .await
            .expect("top")
            .len(),
        1
    );
    // A minute later the counts have left the window.
    clock.advance_micros(61_000_000);
    assert!(
        e.top_denied(&KeyFilter::default(), 10)
            .await
            .expect("top")
            .is_empty()
    );
}
