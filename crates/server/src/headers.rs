//! Rate-limit response headers and the problem+json body of a 429.
//!
//! `RateLimit-Policy` and `RateLimit` follow draft-ietf-httpapi-ratelimit-headers-10: each is a
//! structured-field list with one item per applied policy, named by a quoted string, e.g.
//! `RateLimit-Policy: "per_ip";q=10;w=60` and `RateLimit: "per_ip";r=0;t=60`, where `q` is the
//! quota per window `w` (seconds), `r` what remains and `t` the seconds until the quota is full.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

use sluice_engine::{Code, Decision, Denial};

/// One applied limit, as headers show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyView<'a> {
    /// The rule's label, made a valid structured-field string (borrowed when it already is one).
    pub name: Cow<'a, str>,
    /// Requests per window.
    pub quota: u64,
    /// Window length in seconds.
    pub window_secs: u64,
    /// Requests left now, at most `quota` (a burst above the quota is not announced).
    pub remaining: u64,
    /// Seconds until the quota is full again.
    pub reset_secs: u64,
    /// Why this policy denied the request (`None`: it did not).
    pub denial: Option<Denial>,
    /// When it denied: seconds until the request could pass, if that time is known (`None`
    /// for a cost above the burst, or a limit that never refills: no wait helps).
    pub retry_after_secs: Option<u64>,
    /// The policy's burst (what one request may cost at most).
    pub burst: u64,
}

/// The policies a decision applied (descriptors with no limit are left out).
pub fn policies(decision: &Decision) -> Vec<PolicyView<'_>> {
    decision
        .outcomes
        .iter()
        .filter_map(|o| {
            let limit = o.limit?;
            let label = limit
                .rule
                .and_then(|id| decision.rules.rule(id))
                .map_or("override", |r| r.label.as_str());
            let denial = o.denial.filter(|_| o.code == Code::OverLimit);
            let retry_after_secs = match denial {
                None | Some(Denial::CostAboveBurst) => None,
                Some(Denial::Empty) => o.retry_after.map(|d| ceil_secs(d).max(1)),
                // Room is looked for again within `NO_ROOM_RETRY`.
                Some(Denial::NoRoom) => o.retry_after.map(|d| ceil_secs(d).max(1)),
                // The store may be back any moment: ask again soon.
                Some(Denial::StoreDown) => Some(1),
            };
            // A concurrency limit's quota is N at once (its period is the hold timeout).
            let quota = if limit.rate.algorithm == sluice_core::bucket::Algorithm::Concurrency {
                limit.rate.burst
            } else {
                limit.rate.requests_per_unit
            };
            Some(PolicyView {
                name: sf_string_content(label),
                quota,
                window_secs: limit.rate.period_secs(),
                // Never more than the quota the same answer announces: a burst above the
                // limit is room the headers do not promise (issue 25: `q=200` with `r=207`).
                remaining: o.remaining.min(quota),
                reset_secs: ceil_secs(o.until_full),
                denial,
                retry_after_secs,
                burst: limit.rate.burst,
            })
        })
        .collect()
}

/// `RateLimit-Policy` for `policies`.
pub fn ratelimit_policy(policies: &[PolicyView]) -> String {
    join(policies, |out, p| {
        write!(out, "\"{}\";q={};w={}", p.name, p.quota, p.window_secs)
    })
}

/// `RateLimit` for `policies`.
pub fn ratelimit(policies: &[PolicyView]) -> String {
    join(policies, |out, p| {
        write!(out, "\"{}\";r={};t={}", p.name, p.remaining, p.reset_secs)
    })
}

/// `Retry-After` in seconds: the longest wait among the denying policies; `None` if a denying
/// policy can never pass this request (no wait helps) or none gives a time.
pub fn retry_after(policies: &[PolicyView]) -> Option<u64> {
    let denied = policies.iter().filter(|p| p.denial.is_some());
    if denied.clone().any(|p| p.retry_after_secs.is_none()) {
        return None;
    }
    denied.filter_map(|p| p.retry_after_secs).max()
}

/// The policy with the least left: what the legacy `X-RateLimit-*` headers describe.
pub fn tightest<'p, 'a>(policies: &'p [PolicyView<'a>]) -> Option<&'p PolicyView<'a>> {
    policies
        .iter()
        .min_by_key(|p| (p.denial.is_none(), p.remaining))
}

/// The RFC 9457 problem details body of a 429.
pub fn problem_body(policies: &[PolicyView]) -> String {
    let denied: Vec<&PolicyView> = policies.iter().filter(|p| p.denial.is_some()).collect();
    let retry = retry_after(policies);
    // A policy no wait can satisfy explains the denial best.
    let first = denied
        .iter()
        .find(|p| p.denial == Some(Denial::CostAboveBurst))
        .or(denied.first());
    let detail = match (first, retry) {
        (Some(p), retry) if p.denial == Some(Denial::NoRoom) => format!(
            "sluice tracks as many keys as it may (engine.max_keys) and rate limit \"{}\" already holds its share of them: this new key cannot be tracked now; retry in {} s.",
            p.name,
            retry.unwrap_or(1)
        ),
        (Some(p), _) if p.denial == Some(Denial::CostAboveBurst) => format!(
            "This request costs more than rate limit \"{}\" allows at once ({} requests): it can never pass.",
            p.name, p.burst
        ),
        (Some(p), Some(retry)) => format!(
            "Rate limit \"{}\" of {} requests per {} s exceeded; retry in {} s.",
            p.name, p.quota, p.window_secs, retry
        ),
        (Some(p), None) => format!(
            "Rate limit \"{}\" of {} requests per {} s exceeded.",
            p.name, p.quota, p.window_secs
        ),
        (None, _) => "Rate limit exceeded.".to_string(),
    };
    let violated: Vec<serde_json::Value> = denied
        .iter()
        .map(|p| {
            serde_json::json!({
                "policy": p.name,
                "limit": p.quota,
                "window_seconds": p.window_secs,
                "reason": p.denial.map(Denial::as_str),
                "retry_after_seconds": p.retry_after_secs,
            })
        })
        .collect();
    serde_json::json!({
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": detail,
        "retry_after_seconds": retry,
        "violated_policies": violated,
    })
    .to_string()
}

/// The items, comma-separated, written into one string.
fn join(
    policies: &[PolicyView],
    item: impl Fn(&mut String, &PolicyView) -> std::fmt::Result,
) -> String {
    let mut out = String::with_capacity(policies.len() * 32);
    for (i, p) in policies.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        // Writing into a String cannot fail.
        let _ = item(&mut out, p);
    }
    out
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Keeps printable ASCII other than `"` and `\` (a structured-field string may hold those only
/// escaped; rule labels come from config, so dropping them is enough).
fn sf_string_content(s: &str) -> Cow<'_, str> {
    let allowed = |c: &char| c.is_ascii() && !c.is_ascii_control() && *c != '"' && *c != '\\';
    if s.chars().all(|c| allowed(&c)) {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(s.chars().filter(allowed).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, remaining: u64, retry: Option<u64>) -> PolicyView<'_> {
        PolicyView {
            name: name.into(),
            quota: 10,
            window_secs: 60,
            remaining,
            reset_secs: 42,
            denial: retry.map(|_| Denial::Empty),
            retry_after_secs: retry,
            burst: 10,
        }
    }

    #[test]
    fn formats_draft_10_fields() {
        let p = [view("per_ip", 0, Some(6)), view("per_user", 7, None)];
        assert_eq!(
            ratelimit_policy(&p),
            r#""per_ip";q=10;w=60, "per_user";q=10;w=60"#
        );
        assert_eq!(ratelimit(&p), r#""per_ip";r=0;t=42, "per_user";r=7;t=42"#);
        assert_eq!(retry_after(&p), Some(6));
        assert_eq!(tightest(&p).map(|v| v.name.as_ref()), Some("per_ip"));
    }

    #[test]
    fn problem_body_names_the_policy_and_the_wait() {
        let body: serde_json::Value =
            serde_json::from_str(&problem_body(&[view("per_ip", 0, Some(6))])).expect("json");
        assert_eq!(body["status"], 429);
        assert_eq!(body["retry_after_seconds"], 6);
        assert_eq!(body["violated_policies"][0]["policy"], "per_ip");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("retry in 6 s"))
        );
    }

    #[test]
    fn a_cost_above_the_burst_says_it_never_passes_and_gives_no_retry_time() {
        let never = PolicyView {
            denial: Some(Denial::CostAboveBurst),
            retry_after_secs: None,
            ..view("per_ip", 3, None)
        };
        let p = [view("per_user", 0, Some(6)), never];
        assert_eq!(retry_after(&p), None, "no wait helps");
        let body: serde_json::Value = serde_json::from_str(&problem_body(&p)).expect("json");
        assert_eq!(body["retry_after_seconds"], serde_json::Value::Null);
        assert_eq!(body["violated_policies"][1]["reason"], "cost_above_burst");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("can never pass")),
            "{body}"
        );
    }

    #[test]
    fn names_are_made_safe() {
        assert_eq!(sf_string_content("a\"b\\c\u{e9}\n"), "abc");
        assert_eq!(ceil_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
    }
}
