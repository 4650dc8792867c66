//! An ext_authz request, as a hostile client shapes it (headers, path, query, peer): descriptors
//! or none, never a panic; client addresses that come out are canonical IP addresses; an API key
//! used as the value never comes out raw.

use std::collections::HashMap;
use std::sync::LazyLock;

use arbitrary::{Arbitrary, Unstructured};
use sluice_core::authz::{AuthzPlan, RequestView};

static PLAN: LazyLock<AuthzPlan> = LazyLock::new(|| {
    sluice_core::parse_config(
        r#"
domains:
  - domain: edge
    descriptors:
      - key: ip
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: key
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: tier
        rate_limit: {unit: second, requests_per_unit: 5}
authz:
  domain: edge
  trusted_hops: 2
  descriptors:
    - [{key: ip, from: client_ip}]
    - [{key: key, from: {api_key: {}}}]
    - [{key: tier, from: {api_key: {}}, map: tiers}, {key: path, from: path}]
    - [{key: h, from: {header: X-Thing}}, {key: m, from: method}, {key: host, from: host}]
maps:
  tiers: {entries: {k1: gold}, default: free}
"#,
    )
    .expect("fuzz config")
    .authz
    .expect("authz")
});

#[derive(Debug, Arbitrary)]
struct Req {
    headers: HashMap<String, String>,
    path: String,
    method: String,
    host: String,
    peer: Option<String>,
}

impl RequestView for Req {
    fn header(&self, lower_name: &str) -> Option<&str> {
        self.headers.get(lower_name).map(String::as_str)
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn method(&self) -> &str {
        &self.method
    }
    fn host(&self) -> &str {
        &self.host
    }
    fn peer_ip(&self) -> Option<&str> {
        self.peer.as_deref()
    }
    fn context_extension(&self, _: &str) -> Option<&str> {
        None
    }
}

/// One input: `data` read as a [`Req`] the way libFuzzer's typed targets read it (the rest
/// of the bytes feed the last field); bytes too short for one, or that do not make one, are
/// skipped.
pub fn one(data: &[u8]) {
    if data.len() < Req::size_hint(0).0 {
        return;
    }
    let Ok(req) = Req::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    for d in PLAN.descriptors(&req) {
        let e = &d.entries[0];
        match e.key.as_str() {
            "ip" => {
                let from_peer = req.peer.as_deref() == Some(e.value.as_str());
                let canonical = e
                    .value
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.to_canonical().to_string() == e.value);
                assert!(canonical || from_peer, "{:?}", e.value);
            }
            "key" => assert!(
                e.value.starts_with("sha256:") && e.value.len() == 39,
                "{:?}",
                e.value
            ),
            _ => {}
        }
    }
}
