//! What kind of call a path is ([`Call::of`]): the largest message it takes, what it costs held
//! open, and whether it is long-lived.

use crate::limits::{Limits, StreamCaps};

/// What kind of call a path is: the largest message it takes, what it costs held open, and
/// whether it is long-lived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// The largest request message the call takes (its API's decode limit).
    pub max_message: usize,
    /// What the call costs held open beyond its headers and messages: the stream's state in
    /// HTTP/2, hyper and tonic and its handler's future (measured by `loadtest/pin-memory.sh`,
    /// rounded up).
    pub cost: usize,
    /// A long-lived call's kind; `None` for a call answered once.
    pub long: Option<LongKind>,
}

const KIB: usize = 1024;

/// What a call's cost covers of its messages and its answer: a unary call is charged for the
/// bytes of each beyond this (Envoy's requests and sluice's answers are mostly smaller, so most
/// calls are charged once, on arrival).
pub const COVERED: usize = 2 * KIB;

impl Call {
    /// The call `path` (`/package.Service/Method`) is.
    pub fn of(path: &str) -> Call {
        let unary = |max_message| Call {
            max_message,
            cost: 24 * KIB,
            long: None,
        };
        let long = |kind, max_message, cost| Call {
            max_message,
            cost,
            long: Some(kind),
        };
        let (service, method) = path
            .strip_prefix('/')
            .and_then(|p| p.split_once('/'))
            .unwrap_or(("", ""));
        match (service, method) {
            // Envoy's descriptors and a request's headers: KiBs (Envoy's own header limit is
            // 60 KiB by default).
            ("envoy.service.ratelimit.v3.RateLimitService", _) => unary(128 * KIB),
            ("envoy.service.auth.v3.Authorization", _) => unary(256 * KIB),
            ("envoy.service.rate_limit_quota.v3.RateLimitQuotaService", _) => {
                long(LongKind::Rlqs, 1024 * KIB, 24 * KIB)
            }
            ("sluice.v1.Quota", "WatchQuota") => long(LongKind::WatchQuota, 64 * KIB, 16 * KIB),
            ("grpc.health.v1.Health", "Watch") => long(LongKind::HealthWatch, 4 * KIB, 16 * KIB),
            ("grpc.health.v1.Health", _) => unary(4 * KIB),
            (
                "grpc.reflection.v1.ServerReflection" | "grpc.reflection.v1alpha.ServerReflection",
                _,
            ) => long(LongKind::Reflection, 16 * KIB, 24 * KIB),
            ("sluice.v1.Quota" | "sluice.v1.Usage" | "sluice.v1.Holds", _) => unary(64 * KIB),
            // Answered UNIMPLEMENTED by tonic.
            _ => unary(4 * KIB),
        }
    }

    /// Whether a completed message stays charged until the call ends (a unary call's message
    /// lives in its handler) or is given back at once (a stream's handler takes one message at a
    /// time).
    pub(crate) fn keeps_messages(self) -> bool {
        self.long.is_none()
    }
}

/// The bytes of a request's header list as HTTP/2 counts them (name, value and 32 bytes each).
pub fn header_bytes(headers: &http::HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum()
}

/// The kinds of call that stay open for as long as their client likes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongKind {
    /// `sluice.v1.Quota/WatchQuota`.
    WatchQuota,
    /// `RateLimitQuotaService/StreamRateLimitQuotas` (RLQS).
    Rlqs,
    /// `grpc.health.v1.Health/Watch`.
    HealthWatch,
    /// `ServerReflection/ServerReflectionInfo` (v1 and v1alpha).
    Reflection,
}

impl LongKind {
    /// Every kind, in index order.
    pub const ALL: [LongKind; 4] = [
        LongKind::WatchQuota,
        LongKind::Rlqs,
        LongKind::HealthWatch,
        LongKind::Reflection,
    ];

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// The `kind` label, and the stem of its `sluice_refused_total` bounds (`watchers` kept
    /// for `WatchQuota`, as it was named before the other kinds were bounded).
    pub fn label(self) -> &'static str {
        match self {
            LongKind::WatchQuota => "watchers",
            LongKind::Rlqs => "rlqs_streams",
            LongKind::HealthWatch => "health_watches",
            LongKind::Reflection => "reflection_streams",
        }
    }

    /// What the calls are, for a client's error message.
    pub(super) fn describe(self) -> &'static str {
        match self {
            LongKind::WatchQuota => "WatchQuota streams",
            LongKind::Rlqs => "RLQS streams",
            LongKind::HealthWatch => "Health/Watch streams",
            LongKind::Reflection => "reflection streams",
        }
    }

    /// Its bounds in `limits`.
    pub fn caps(self, limits: &Limits) -> &StreamCaps {
        match self {
            LongKind::WatchQuota => &limits.watch_quota,
            LongKind::Rlqs => &limits.rlqs_streams,
            LongKind::HealthWatch => &limits.health_watches,
            LongKind::Reflection => &limits.reflection_streams,
        }
    }
}
