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
    pub use envoy_types::pb::envoy::service::discovery::v3 as discovery;
    pub use envoy_types::pb::envoy::service::rate_limit_quota::v3 as rlqs;
    pub use envoy_types::pb::envoy::service::ratelimit::v3 as ratelimit;
    pub use envoy_types::pb::envoy::r#type::v3 as types;
    pub use envoy_types::pb::google::protobuf;
    pub use envoy_types::pb::google::rpc;
}

/// envoyproxy/ratelimit's `ratelimit.config.ratelimit.v3`: the limits a management server
/// (Envoy Gateway's) pushes over xDS. Its messages written out here with prost's derive, field
/// for field as the reference's `rls_conf.proto` numbers them (as go-control-plane's
/// `ratelimit` module v0.1.0 serves them): envoy-types does not carry this API.
pub mod ratelimit_config {
    /// The resource type a client subscribes to.
    pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

    /// One domain's limits.
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RateLimitConfig {
        /// Unique per configuration (the resource's name).
        #[prost(string, tag = "1")]
        pub name: String,
        /// The domain.
        #[prost(string, tag = "2")]
        pub domain: String,
        /// Its descriptors.
        #[prost(message, repeated, tag = "3")]
        pub descriptors: Vec<RateLimitDescriptor>,
    }

    /// A descriptor: as a domain file's.
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RateLimitDescriptor {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, tag = "2")]
        pub value: String,
        #[prost(message, optional, tag = "3")]
        pub rate_limit: Option<RateLimitPolicy>,
        #[prost(message, repeated, tag = "4")]
        pub descriptors: Vec<RateLimitDescriptor>,
        #[prost(bool, tag = "5")]
        pub shadow_mode: bool,
        #[prost(bool, tag = "6")]
        pub detailed_metric: bool,
    }

    /// A limit.
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RateLimitPolicy {
        /// `RateLimitUnit`: 0 unknown, 1 second, 2 minute, 3 hour, 4 day, 5 month, 6 year,
        /// 7 week (the reference's numbering).
        #[prost(int32, tag = "1")]
        pub unit: i32,
        #[prost(uint32, tag = "2")]
        pub requests_per_unit: u32,
        #[prost(bool, tag = "3")]
        pub unlimited: bool,
        #[prost(string, tag = "4")]
        pub name: String,
        #[prost(message, repeated, tag = "5")]
        pub replaces: Vec<RateLimitReplace>,
    }

    /// A limit this one replaces, by name.
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RateLimitReplace {
        #[prost(string, tag = "1")]
        pub name: String,
    }
}

/// Encoded `FileDescriptorSet` of sluice's own protos.
pub const SLUICE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/sluice_descriptor.bin"));

/// Encoded `FileDescriptorSet` of Envoy's auth v3 and ratelimit v3 services and their imports.
pub const ENVOY_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptor.bin"));
