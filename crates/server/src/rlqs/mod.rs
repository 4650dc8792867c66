//! Envoy's rate limit quota service (RLQS): `StreamRateLimitQuotas`.
//!
//! Envoy's `envoy.filters.http.rate_limit_quota` filter decides every request itself, in token
//! buckets sluice assigns, and streams usage reports back. Each stream is one task
//! ([`stream::run`]): reports come in (every 5 s in Envoy 1.40, and at once for a new bucket),
//! and every half second (`assignment::TICK`), or at once for a bucket seen for the first time,
//! each bucket's next assignment is decided and paid by the engine
//! ([`Share::next`](sluice_engine::assignment::Share), `crates/engine/src/assignment/`): every
//! token through the engine's door for RLQS (the same
//! global buckets, key table, local buckets and store deadline as RLS and ext_authz). A bucket id
//! maps to the rule whose descriptor uses its keys (`RuleSet::match_bucket_id`), with the store
//! key RLS and ext_authz charge: one limit, whichever API enforces it. This module keeps the
//! stream, the wire and the timers.
//!
//! - [`stream`]: the per-stream loop, matching, bounds on bucket ids, abandoning idle buckets,
//!   returning pools.
//! - `bucket`: what a stream holds per bucket id (a share, or a free bucket) and the rules
//!   about it.
//! - [`wire`]: proto conversions (durations: `crate::durations`).

mod bucket;
pub mod stream;
pub mod wire;

use std::pin::Pin;
use std::sync::Arc;

use sluice_proto::envoy::rlqs::rate_limit_quota_service_server::RateLimitQuotaService;
use sluice_proto::envoy::rlqs::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::admission::Charge;
use crate::state::AppState;

/// Responses waiting to be written to one stream; a stream whose Envoy stops reading stops being
/// ticked (each tick waits for room), so a slow client holds at most this many.
const OUTBOX: usize = 4;

/// The RLQS gRPC service.
pub struct RlqsService {
    state: Arc<AppState>,
}

impl RlqsService {
    /// The service over `state`.
    pub fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsService {
    type StreamRateLimitQuotasStream = ResponseStream;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        if self.state.is_draining() {
            return Err(Status::unavailable("sluice is shutting down"));
        }
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let (tx, rx) = tokio::sync::mpsc::channel(OUTBOX);
        let state = Arc::clone(&self.state);
        let charge = request.extensions().get::<Charge>().cloned();
        let inbound = request.into_inner();
        state
            .background
            .tasks
            .spawn(stream::run(Arc::clone(&state), peer, inbound, tx, charge));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
