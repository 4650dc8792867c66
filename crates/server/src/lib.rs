//! sluice's servers: Envoy's two gRPC APIs, gRPC health and reflection, and the admin HTTP port.
//!
//! # Layout
//! - [`state`]: [`AppState`], what every handler shares (engine, swappable runtime config, metrics).
//! - [`validate`]: request limits and the conversion of Envoy descriptors into the engine's.
//! - [`handler`]: the one path of every deciding API (validate → decide → shadow → record →
//!   answer → observe); [`rls`], [`authz`] and [`usage`] each only say how their wire maps to it.
//! - [`rls`] — the rate limit service, `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//! - [`authz`] — the ext_authz service, `envoy.service.auth.v3.Authorization/Check`.
//! - [`forward`] — the HTTP check for nginx, Caddy and Traefik (forward auth): ext_authz's steps
//!   for a request read from the headers the `check:` section names.
//! - [`rlqs`] — the rate limit quota service,
//!   `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`.
//! - [`quota`] — the operator API, `sluice.v1.Quota` (peek, list, watch, rules).
//! - [`assignments`]: each open RLQS stream's buckets, as `ListAssignments` shows them.
//! - [`headers`]: `RateLimit-Policy` / `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10),
//!   `Retry-After` and the problem+json body.
//! - [`metrics`]: request and decision series; RLQS series in [`metrics::rlqs`].
//! - [`limits`]: bounds on connections, streams, request bytes, long-lived calls and time for
//!   every port.
//! - [`admission`]: what gRPC clients hold while their calls are open (request bytes, long-lived
//!   calls), per connection, per peer address and in all: each call's body and answer charged,
//!   long-lived calls closed when they idle.
//! - [`admin`]: `/metrics`, `/healthz`, `/readyz` on hyper 1.
//! - [`shadow`]: the global dry-run switch and sampled would-deny logs.
//! - [`reload`]: live config reload by polling file contents.
//! - [`grpc`]: the gRPC port's server (accept, TLS, HTTP/2, deadlines, graceful shutdown),
//!   serving each connection with its streams in one task ([`one_task`]).
//! - [`tls`]: the gRPC port's TLS, built again when its files change (certificate rotation).
//! - [`serve`]: wiring: [`serve`](serve::serve) runs everything until a shutdown future resolves.

pub mod admin;
pub mod admission;
pub mod assignments;
pub mod authz;
pub mod denials;
pub mod durations;
pub mod forward;
pub mod grpc;
pub mod handler;
pub mod headers;
pub mod holds;
mod http1;
pub mod incoming;
pub mod limits;
pub mod metrics;
pub mod one_task;
pub mod quota;
pub mod reload;
pub mod rlqs;
pub mod rls;
pub mod serve;
pub mod shadow;
pub mod state;
pub mod tls;
pub mod top;
pub mod usage;
pub mod validate;

pub use serve::{ServeError, ServeOptions, serve, serve_with_check};
pub use state::{AppState, Runtime};
