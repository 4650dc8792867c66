//! gRPC types for sluice.
//!
//! # Layout
//! - [`sluice::v1`]: sluice's own operator API, compiled from `proto/sluice/v1/*.proto`.
//! - [`envoy`]: Envoy's ext_authz v3 and rate limit service v3 types, re-exported from `envoy-types`.
//! - [`SLUICE_DESCRIPTOR_SET`], [`ENVOY_DESCRIPTOR_SET`]: encoded descriptor sets for gRPC reflection.
#![allow(missing_docs)]

/// sluice's own API.
pub mod sluice {
    /// Version 1 of sluice's API.
    pub mod v1 {
        tonic::include_proto!("sluice.v1");
    }
}

/// Envoy's types used by sluice (auth v3, ratelimit v3, rate limit quota v3, and what they depend
/// on).
pub mod envoy {
    pub use envoy_types::pb::envoy::config::core::v3 as core;
    pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3 as common_ratelimit;
    pub use envoy_types::pb::envoy::service::auth::v3 as auth;
    pub use envoy_types::pb::envoy::service::rate_limit_quota::v3 as rlqs;
    pub use envoy_types::pb::envoy::service::ratelimit::v3 as ratelimit;
    pub use envoy_types::pb::envoy::r#type::v3 as types;
    pub use envoy_types::pb::google::protobuf;
    pub use envoy_types::pb::google::rpc;
}

/// Encoded `FileDescriptorSet` of sluice's own protos.
pub const SLUICE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/sluice_descriptor.bin"));

/// Encoded `FileDescriptorSet` of Envoy's auth v3 and ratelimit v3 services and their imports.
pub const ENVOY_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptor.bin"));
