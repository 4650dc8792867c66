//! An RLQS client standing in for Envoy's filter: streams, reports and the actions they get.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use sluice_proto::envoy::protobuf;
use sluice_proto::envoy::rlqs::rate_limit_quota_response::bucket_action::BucketAction as Action;
use sluice_proto::envoy::rlqs::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use sluice_proto::envoy::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluice_proto::envoy::rlqs::{BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use sluice_proto::envoy::types::rate_limit_strategy::Strategy;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use super::TestServer;

pub fn bucket(pairs: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

pub fn usage(id: BucketId, elapsed: i64, allowed: u64, denied: u64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(id),
        time_elapsed: Some(protobuf::Duration {
            seconds: elapsed,
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

/// An open stream: the sender of reports and the responses.
pub struct Stream {
    pub tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    pub rx: Streaming<RateLimitQuotaResponse>,
}

pub async fn open(server: &TestServer) -> Stream {
    let mut client = RateLimitQuotaServiceClient::new(server.channel().await);
    let (tx, reports) = mpsc::channel(16);
    let rx = client
        .stream_rate_limit_quotas(ReceiverStream::new(reports))
        .await
        .expect("stream")
        .into_inner();
    Stream { tx, rx }
}

impl Stream {
    pub async fn send(&self, domain: &str, usages: Vec<BucketQuotaUsage>) {
        self.tx
            .send(RateLimitQuotaUsageReports {
                domain: domain.to_string(),
                bucket_quota_usages: usages,
            })
            .await
            .expect("send");
    }

    /// The next actions, by bucket id (sorted `k=v` pairs).
    pub async fn next(&mut self) -> HashMap<String, Option<Action>> {
        let msg = tokio::time::timeout(Duration::from_secs(3), self.rx.message())
            .await
            .expect("an answer within 3 s")
            .expect("stream ok")
            .expect("not ended");
        msg.bucket_action
            .into_iter()
            .map(|a| (label(a.bucket_id.as_ref().expect("id")), a.bucket_action))
            .collect()
    }
}

pub fn label(id: &BucketId) -> String {
    let mut pairs: Vec<String> = id.bucket.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join(",")
}

pub fn strategy(action: &Option<Action>) -> (Strategy, i64) {
    match action {
        Some(Action::QuotaAssignmentAction(a)) => (
            a.rate_limit_strategy
                .as_ref()
                .and_then(|s| s.strategy)
                .expect("a strategy"),
            a.assignment_time_to_live.as_ref().expect("a TTL").seconds,
        ),
        other => panic!("not an assignment: {other:?}"),
    }
}
