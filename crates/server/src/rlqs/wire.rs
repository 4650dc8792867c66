//! RLQS messages: bucket ids in, assignments and abandons out.

use std::time::Duration;

use sluice_core::Entry;
use sluice_engine::assignment::{Strategy, TokenBucket};
use sluice_proto::envoy::protobuf;
use sluice_proto::envoy::rlqs::BucketId;
use sluice_proto::envoy::rlqs::rate_limit_quota_response::BucketAction;
use sluice_proto::envoy::rlqs::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use sluice_proto::envoy::types::RateLimitStrategy;
use sluice_proto::envoy::types::rate_limit_strategy::{BlanketRule, Strategy as WireStrategy};
use tonic::Status;

/// A bucket id's entries sorted by key (one spelling per bucket, whatever order Envoy used),
/// checked like descriptor entries (`validate::check_entries`): bounded in number and key length.
pub fn entries(id: Option<&BucketId>) -> Result<Vec<Entry>, Status> {
    let Some(id) = id.filter(|id| !id.bucket.is_empty()) else {
        return Err(Status::invalid_argument("a usage report has no bucket_id"));
    };
    let mut entries: Vec<Entry> = id
        .bucket
        .iter()
        .map(|(k, v)| Entry::new(k.as_str(), v.as_str()))
        .collect();
    crate::validate::check_entries(&"bucket_id", &entries)?;
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(entries)
}

/// The bucket id for `entries`, as Envoy sent it.
pub fn bucket_id(entries: &[Entry]) -> BucketId {
    BucketId {
        bucket: entries
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect(),
    }
}

/// An assignment of `strategy` for `ttl_secs`.
pub fn assign(entries: &[Entry], strategy: Strategy, ttl_secs: u32) -> BucketAction {
    let strategy = match strategy {
        Strategy::DenyAll => WireStrategy::BlanketRule(BlanketRule::DenyAll as i32),
        Strategy::AllowAll => WireStrategy::BlanketRule(BlanketRule::AllowAll as i32),
        Strategy::Bucket(TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_secs,
        }) => WireStrategy::TokenBucket(sluice_proto::envoy::types::TokenBucket {
            max_tokens,
            tokens_per_fill: Some(protobuf::UInt32Value {
                value: tokens_per_fill,
            }),
            fill_interval: Some(crate::durations::envoy(Duration::from_secs(
                fill_interval_secs.into(),
            ))),
        }),
    };
    BucketAction {
        bucket_id: Some(bucket_id(entries)),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(crate::durations::envoy(Duration::from_secs(
                ttl_secs.into(),
            ))),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}

/// Tells Envoy to forget the bucket.
pub fn abandon(entries: &[Entry]) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket_id(entries)),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}
