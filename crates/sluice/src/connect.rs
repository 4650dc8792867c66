//! Reaching a running sluice: the gRPC channel (TLS when the target asks for it), the Quota
//! client that sends the read token, the entries of a descriptor given on the command line, and
//! a gRPC status as an error. Every client command starts here.

use std::time::Duration;

use anyhow::Context;
use sluice_proto::sluice::v1 as pb;
use sluice_proto::sluice::v1::quota_client::QuotaClient;
use tonic::codegen::InterceptedService;
use tonic::transport::Channel;

use crate::cli::{DescriptorArgs, Target};

/// A Quota client for reads: sends `authorization: Bearer $SLUICE_READ_TOKEN` when that is set
/// (a server with `admin.read_token_*` needs it; the token never appears on the command line).
pub(crate) async fn reader(
    target: &Target,
) -> anyhow::Result<QuotaClient<InterceptedService<Channel, ReadToken>>> {
    Ok(QuotaClient::with_interceptor(
        channel(target).await?,
        with_read_token as ReadToken,
    ))
}

type ReadToken = fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>;

fn with_read_token(mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    if let Ok(token) = std::env::var("SLUICE_READ_TOKEN") {
        let bearer = format!("Bearer {}", token.trim()).parse().map_err(|_| {
            tonic::Status::invalid_argument("SLUICE_READ_TOKEN is not a valid header value")
        })?;
        request.metadata_mut().insert("authorization", bearer);
    }
    Ok(request)
}

pub(crate) async fn channel(target: &Target) -> anyhow::Result<Channel> {
    let tls = target.addr.starts_with("https://")
        || target.ca_file.is_some()
        || target.cert_file.is_some();
    let addr = match (target.addr.contains("://"), tls) {
        (true, _) => target.addr.clone(),
        (false, true) => format!("https://{}", target.addr),
        (false, false) => format!("http://{}", target.addr),
    };
    let mut endpoint = Channel::from_shared(addr.clone())
        .with_context(|| format!("bad address {addr}"))?
        .connect_timeout(Duration::from_secs(3));
    if tls {
        let read = |p: &std::path::Path| {
            std::fs::read(p).with_context(|| format!("reading {}", p.display()))
        };
        let mut config = tonic::transport::ClientTlsConfig::new();
        if let Some(ca) = &target.ca_file {
            config = config.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?));
        }
        if let (Some(cert), Some(key)) = (&target.cert_file, &target.key_file) {
            config = config.identity(tonic::transport::Identity::from_pem(
                read(cert)?,
                read(key)?,
            ));
        }
        endpoint = endpoint.tls_config(config).context("TLS settings")?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach sluice at {addr}: {}", root_cause(&e)))
}

/// The innermost error of `e`'s chain: transport errors repeat their source's words at each
/// level (`tcp connect error: tcp connect error: Connection refused`); the root says it once.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut root = e;
    while let Some(next) = root.source() {
        root = next;
    }
    root.to_string()
}

pub(crate) fn entries(d: &DescriptorArgs) -> Vec<pb::Entry> {
    d.entries
        .iter()
        .map(|(k, v)| pb::Entry {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

pub(crate) fn status_error(s: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", s.code(), s.message())
}
