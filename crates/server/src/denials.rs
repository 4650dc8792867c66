//! Sampled logs of denials: which rule, why, and a digest of the values, never the values.
//!
//! A denial is what an on-call engineer greps for, and what an attacker can cause at will: each
//! rule logs at most one line a second (with how many denials it did not log since its last
//! line), so a flood of denials costs a line a second per rule, not a line a request. Values may
//! be API keys: a line carries the first 16 hex digits of SHA-256 of the descriptor's
//! `key=value|key=value` as sent (`printf 'api_key=abc' | sha256sum` gives the same digits), so
//! an operator who suspects a value can match it, and nobody reads keys out of the logs. A
//! value with few possibilities (an IP address) can be found from its digest by trying them all.

use dashmap::DashMap;
use sha2::{Digest, Sha256};
use sluice_core::{Descriptor, SampledLine};
use sluice_engine::{Code, Decision};

/// Rules tracked before the map starts over (configs reloaded many times leave old rules).
const MAX_RULES: usize = 10_000;

/// The sampled denial log: a line per rule ([`SampledLine`]).
#[derive(Debug, Default)]
pub struct DenialLog {
    rules: DashMap<u64, SampledLine, foldhash::fast::RandomState>,
}

impl DenialLog {
    /// Logs `decision`'s denials of `descriptors` in `domain`, at most a line a second per rule.
    pub fn record(&self, domain: &str, descriptors: &[Descriptor], decision: &Decision) {
        if decision.overall != Code::OverLimit {
            return;
        }
        for (descriptor, o) in descriptors.iter().zip(&decision.outcomes) {
            let (Code::OverLimit, Some(limit), Some(reason)) = (o.code, o.limit, o.denial) else {
                continue;
            };
            let rule = limit.rule.and_then(|id| decision.rules.rule(id));
            let identity = rule.map_or(0, |r| r.fingerprint);
            // `len` locks every shard: only when a rule is seen for the first time.
            if !self.rules.contains_key(&identity) && self.rules.len() >= MAX_RULES {
                self.rules.clear();
            }
            let Some(unlogged) = self.rules.entry(identity).or_default().sample_now() else {
                continue;
            };
            tracing::info!(
                domain,
                rule = rule.map_or("override", |r| r.label.as_str()),
                reason = reason.as_str(),
                fallback = o.fallback,
                retry_after_ms = o.retry_after.map(|d| d.as_millis() as u64),
                values_sha256 = %digest(descriptor),
                unlogged_since_last_line = unlogged,
                "denied (sampled: at most one line a second per rule)"
            );
        }
    }
}

/// The first 16 hex digits of SHA-256 of `key=value|key=value`.
pub fn digest(descriptor: &Descriptor) -> String {
    let mut h = Sha256::new();
    for (i, e) in descriptor.entries.iter().enumerate() {
        if i > 0 {
            h.update(b"|");
        }
        h.update(e.key.as_bytes());
        h.update(b"=");
        h.update(e.value.as_bytes());
    }
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_what_sha256sum_prints_for_the_values_as_sent() {
        // printf 'api_key=abc|path=/x' | sha256sum
        let d = Descriptor::of([("api_key", "abc"), ("path", "/x")]);
        assert_eq!(digest(&d), "76e96ca8f8a0aadd");
    }
}
