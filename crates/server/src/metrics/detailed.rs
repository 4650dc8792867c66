//! `detailed_metric: true` on a descriptor (as envoyproxy/ratelimit's users expect): decisions
//! per descriptor value, `sluice_detailed_decisions_total{domain, rule, values, outcome}`, within
//! a label budget.
//!
//! Values come from requests, so their series must be bounded: a value gets a series of its own
//! once it has been decided [`PROMOTE_AFTER`] times while the budget lasts ([`PER_RULE`] values a
//! rule, [`TOTAL`] in all); every other decision counts under `values="other"`. The values that
//! get series are so the busiest ones, and a flood of one-off values (random keys) costs no
//! series. A value's own series counts from the moment it has one (the decisions before are in
//! `other`); series stay until restart. Long values are shown as keys hold them (a prefix and a
//! digest).

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{IntCounterVec, Opts};
use sluice_core::Descriptor;

/// Decisions of a value before it gets a series of its own.
pub const PROMOTE_AFTER: u64 = 10;

/// Values with series of their own, per rule.
pub const PER_RULE: usize = 100;

/// Values with series of their own, over every rule.
pub const TOTAL: usize = 1_000;

/// Values counted towards [`PROMOTE_AFTER`] per rule before the count starts over.
const CANDIDATES: usize = 4_096;

/// The label of every value without a series of its own.
pub const OTHER: &str = "other";

/// A rule as the budget knows it: its domain and label.
type RuleName = (String, String);

/// One rule's values.
#[derive(Debug, Default)]
struct RuleValues {
    labelled: std::collections::HashSet<String>,
    candidates: HashMap<String, u64>,
}

/// Per-value decision counters of the rules with `detailed_metric: true`.
#[derive(Debug)]
pub struct DetailedMetrics {
    /// `sluice_detailed_decisions_total`.
    pub decisions: IntCounterVec,
    /// By domain and rule label (not the rule's identity, which a changed rate changes: the
    /// values keep their series across reloads), and the values with series in all.
    rules: Mutex<(HashMap<RuleName, RuleValues>, usize)>,
}

impl DetailedMetrics {
    /// The series (register `decisions`).
    pub fn new() -> prometheus::Result<Self> {
        Ok(Self {
            decisions: IntCounterVec::new(
                Opts::new(
                    "sluice_detailed_decisions_total",
                    "Decisions per descriptor value of rules with detailed_metric: true (the busiest values, the rest as values=\"other\")",
                ),
                &["domain", "rule", "values", "outcome"],
            )?,
            rules: Mutex::default(),
        })
    }

    /// Counts one decision of `descriptor` under the rule `label` of `domain`.
    pub fn record(&self, domain: &str, label: &str, descriptor: &Descriptor, outcome: &str) {
        let values = values_label(descriptor);
        let shown = {
            let mut guard = self
                .rules
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (rules, total) = &mut *guard;
            let rule = match rules.get_mut(&(domain.to_string(), label.to_string())) {
                Some(rule) => rule,
                None => rules
                    .entry((domain.to_string(), label.to_string()))
                    .or_default(),
            };
            if rule.labelled.contains(&values) {
                true
            } else {
                if rule.candidates.len() >= CANDIDATES && !rule.candidates.contains_key(&values) {
                    rule.candidates.clear();
                }
                let seen = rule.candidates.entry(values.clone()).or_default();
                *seen += 1;
                let promote =
                    *seen >= PROMOTE_AFTER && rule.labelled.len() < PER_RULE && *total < TOTAL;
                if promote {
                    rule.candidates.remove(&values);
                    rule.labelled.insert(values.clone());
                    *total += 1;
                }
                promote
            }
        };
        let values = if shown { values.as_str() } else { OTHER };
        self.decisions
            .with_label_values(&[domain, label, values, outcome])
            .inc();
    }
}

/// `key=value|key=value`, each value as bucket keys hold it (long ones as a prefix and digest).
fn values_label(descriptor: &Descriptor) -> String {
    let mut out = String::new();
    for (i, e) in descriptor.entries.iter().enumerate() {
        if i > 0 {
            out.push('|');
        }
        out.push_str(&e.key);
        out.push('=');
        out.push_str(&sluice_engine::key::key_value(&e.value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::core::Collector as _;

    fn count(m: &DetailedMetrics, values: &str) -> u64 {
        m.decisions
            .with_label_values(&["d", "r", values, "ok"])
            .get()
    }

    #[test]
    fn busy_values_get_series_within_the_budget_and_the_rest_is_other() {
        let m = DetailedMetrics::new().expect("metrics");
        let d = |v: &str| Descriptor::of([("user", v)]);
        // A busy value: its first PROMOTE_AFTER - 1 decisions are `other`, then its own.
        for _ in 0..25 {
            m.record("d", "r", &d("busy"), "ok");
        }
        assert_eq!(count(&m, "user=busy"), 25 - (PROMOTE_AFTER - 1));
        // A flood of one-off values never gets a series.
        for i in 0..10_000 {
            m.record("d", "r", &d(&format!("once-{i}")), "ok");
        }
        assert_eq!(count(&m, OTHER), PROMOTE_AFTER - 1 + 10_000);
        // Past PER_RULE values, busy ones count as other too.
        for i in 0..PER_RULE + 5 {
            for _ in 0..PROMOTE_AFTER {
                m.record("d", "r", &d(&format!("v{i}")), "ok");
            }
        }
        let series = m.decisions.collect()[0].get_metric().len();
        assert_eq!(series, PER_RULE + 1, "PER_RULE values and other");
        assert_eq!(count(&m, &format!("user=v{}", PER_RULE + 2)), 0);
    }
}
