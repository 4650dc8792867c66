//! What a Redis error means: the engine's kind of error ([`classify`]), whether it counts toward
//! opening the circuit breaker ([`trips_breaker`]), whether a batched call is sent again alone
//! ([`retry_alone`]), and what of it may be printed ([`safe`]).

use redis::RedisError;
use sluice_engine::StoreError;

/// Whether a call a batch could not run is sent again alone: the script is not loaded yet
/// (NOSCRIPT), or the key's slot is elsewhere or moving (MOVED, ASK, TRYAGAIN).
pub(super) fn retry_alone(code: &str) -> bool {
    matches!(code, "NOSCRIPT" | "MOVED" | "ASK" | "TRYAGAIN")
}

/// Error codes of a Redis (or cluster) state that passes and concerns every key: a cluster down
/// or resharding, a node loading, busy or read-only.
const STORE_WIDE: &[&str] = &[
    "CLUSTERDOWN",
    "TRYAGAIN",
    "MASTERDOWN",
    "LOADING",
    "BUSY",
    "READONLY",
    "MOVED",
    "ASK",
];

/// Maps a Redis error to the engine's kinds. Cluster states that pass (CLUSTERDOWN during
/// failover, TRYAGAIN and ASK/MOVED storms during resharding, LOADING after a restart) are
/// `Unavailable`, so rules fall back and the breaker can open; anything else is a protocol error.
pub(super) fn classify(e: &RedisError) -> StoreError {
    if e.is_timeout() {
        StoreError::Timeout
    } else if store_wide(e) || e.code() == Some("NOSCRIPT") {
        StoreError::Unavailable(safe(e))
    } else {
        StoreError::Protocol(safe(e))
    }
}

/// Whether an error says Redis may be down (and counts toward opening the breaker): no answer in
/// time, a connection that failed, or a store-wide state (a cluster down or resharding, a node
/// loading, busy or read-only). Any other error is Redis answering for one call: a key whose
/// data is not a bucket (WRONGTYPE: `SET` by hand, or by another program), a script failing on
/// that key's data, a script Redis no longer knows (NOSCRIPT: the next call loads it again).
/// That call fails alone (its key gets its rule's fallback, counted and logged); one corrupt
/// key must not take every key off Redis, again after every probe.
pub(super) fn trips_breaker(e: &RedisError) -> bool {
    e.is_timeout() || store_wide(e)
}

/// A failed connection, or a store-wide state ([`STORE_WIDE`]).
fn store_wide(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.code().is_some_and(|c| STORE_WIDE.contains(&c))
}

/// An error's text without anything that could carry credentials.
pub(super) fn safe(e: &RedisError) -> String {
    e.code()
        .map_or_else(|| format!("{:?}", e.kind()), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ErrorKind, ServerErrorKind};

    #[test]
    fn noscript_is_transient_and_never_opens_the_breaker() {
        let noscript = RedisError::from((
            ErrorKind::Server(ServerErrorKind::NoScript),
            "NOSCRIPT",
            "No matching script".to_string(),
        ));
        assert!(!trips_breaker(&noscript), "{noscript:?}");
        assert!(matches!(classify(&noscript), StoreError::Unavailable(_)));
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(trips_breaker(&io));
    }

    #[test]
    fn errors_of_one_key_never_open_the_breaker_and_store_wide_ones_do() {
        let server = |kind, code: &'static str| {
            RedisError::from((ErrorKind::Server(kind), code, format!("{code} detail")))
        };
        let wrongtype = server(ServerErrorKind::ResponseError, "WRONGTYPE");
        assert!(!trips_breaker(&wrongtype), "{wrongtype:?}");
        assert!(matches!(classify(&wrongtype), StoreError::Protocol(_)));
        let script = server(ServerErrorKind::ResponseError, "ERR");
        assert!(!trips_breaker(&script), "{script:?}");
        let down = server(ServerErrorKind::ClusterDown, "CLUSTERDOWN");
        assert!(trips_breaker(&down), "{down:?}");
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(trips_breaker(&timeout));
    }
}
