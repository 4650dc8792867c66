//! The request a proxy forwards to the HTTP check, and the one it stands for.
//!
//! The check request carries the original request's method, target and host in headers, next
//! to every header of the client's, which the proxy passes on too. Which header carries which
//! part is the `check:` section's [`CheckPlan`]; [`Forwarded::view`] reads each part from that
//! one header only, and refuses a request where it is missing or came twice, rather than pick
//! one copy: a client can add any header, so neither "the first" nor "the last" is safe to
//! assume is the proxy's.

use std::collections::HashMap;
use std::net::SocketAddr;

use http::{HeaderMap, Request};
use sluice_core::authz::RequestView;
use sluice_core::check::{CheckPlan, Part};

/// A forward-auth request, as it came: the check request's own method, target and host, its
/// headers and the proxy's address.
#[derive(Debug)]
pub struct Forwarded {
    method: String,
    target: String,
    host: String,
    /// Every header by lower-case name; a name sent several times joined with `,`, as Envoy
    /// joins it for ext_authz.
    headers: HashMap<String, String>,
    /// The names sent more than once, with how many times.
    repeated: Vec<(String, usize)>,
    /// The proxy's address: with `authz.trusted_hops`, the client is the address it appended
    /// to `X-Forwarded-For`.
    peer: Option<String>,
}

impl Forwarded {
    /// The check request `req`, from `peer`.
    pub fn of<B>(req: &Request<B>, peer: Option<SocketAddr>) -> Self {
        let (headers, repeated) = joined(req.headers());
        let host = headers
            .get("host")
            .cloned()
            .or_else(|| req.uri().authority().map(ToString::to_string))
            .unwrap_or_default();
        Self {
            method: req.method().to_string(),
            target: req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string(),
            host,
            headers,
            repeated,
            peer: peer.map(|p| p.ip().to_string()),
        }
    }

    /// The request this one stands for, read as `plan` says; an error (for a 400) when a part's
    /// header is missing or came more than once.
    pub fn view<'a>(&'a self, plan: &'a CheckPlan) -> Result<ForwardedView<'a>, String> {
        Ok(ForwardedView {
            method: self.part(plan, &plan.method, &self.method, "method")?,
            target: self.part(plan, &plan.uri, &self.target, "URI")?,
            host: self.part(plan, &plan.host, &self.host, "host")?,
            request: self,
        })
    }

    fn part<'a>(
        &'a self,
        plan: &CheckPlan,
        part: &Part,
        own: &'a str,
        what: &str,
    ) -> Result<&'a str, String> {
        let Part::Header(name) = part else {
            return Ok(own);
        };
        let proxy = plan
            .proxy
            .map_or(String::new(), |p| format!(" (check.proxy: {})", p.as_str()));
        if let Some((_, times)) = self.repeated.iter().find(|(r, _)| r == name) {
            return Err(format!(
                "{name} came {times} times: the proxy must set it to the request's {what}, replacing any the client sent{proxy}"
            ));
        }
        self.headers.get(name).map(String::as_str).ok_or_else(|| {
            format!("no {name}: the proxy must set it to the request's {what}{proxy}")
        })
    }
}

/// A [`Forwarded`] request as the request it stands for: the [`RequestView`] ext_authz's
/// `authz:` descriptors are built from.
#[derive(Debug)]
pub struct ForwardedView<'a> {
    request: &'a Forwarded,
    method: &'a str,
    target: &'a str,
    host: &'a str,
}

impl RequestView for ForwardedView<'_> {
    fn header(&self, lower_name: &str) -> Option<&str> {
        self.request.headers.get(lower_name).map(String::as_str)
    }
    fn path(&self) -> &str {
        self.target
    }
    fn method(&self) -> &str {
        self.method
    }
    fn host(&self) -> &str {
        self.host
    }
    fn peer_ip(&self) -> Option<&str> {
        self.request.peer.as_deref()
    }
    fn context_extension(&self, _: &str) -> Option<&str> {
        None
    }
}

/// The headers by lower-case name, repeated names joined with `,` (values not valid UTF-8 are
/// read lossily), and the names sent more than once with their counts.
fn joined(headers: &HeaderMap) -> (HashMap<String, String>, Vec<(String, usize)>) {
    let mut out: HashMap<String, String> = HashMap::with_capacity(headers.len());
    let mut repeated = Vec::new();
    for name in headers.keys() {
        let mut values = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()));
        let mut value = values.next().map(|v| v.into_owned()).unwrap_or_default();
        let mut times = 1;
        for more in values {
            value.push(',');
            value.push_str(&more);
            times += 1;
        }
        if times > 1 {
            repeated.push((name.as_str().to_string(), times));
        }
        out.insert(name.as_str().to_string(), value);
    }
    (out, repeated)
}

#[cfg(test)]
mod tests {
    use sluice_core::check::CheckProxy;

    use super::*;

    fn request(headers: &[(&str, &str)]) -> Forwarded {
        let mut req = Request::builder().method("GET").uri("/check?x=1");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let peer = "127.0.0.1:5000".parse().ok();
        Forwarded::of(&req.body(()).expect("request"), peer)
    }

    fn parts(view: &ForwardedView<'_>) -> (String, String, String) {
        (view.method().into(), view.path().into(), view.host().into())
    }

    const NGINX: &[(&str, &str)] = &[
        ("host", "sluice:8082"),
        ("x-forwarded-method", "POST"),
        ("x-original-uri", "/v1/orders?id=7"),
        ("x-forwarded-host", "api.example.com"),
    ];

    #[test]
    fn each_part_comes_from_the_one_header_the_proxy_sets() {
        let nginx = CheckPlan::preset(CheckProxy::Nginx);
        let mut sent = NGINX.to_vec();
        // What a client added, which nginx passes on: never read.
        sent.extend([("x-forwarded-uri", "/elsewhere"), ("x-api-key", "k1")]);
        sent.push(("x-api-key", "junk"));
        let req = request(&sent);
        let view = req.view(&nginx).expect("view");
        let s = |a: &str| a.to_string();
        assert_eq!(
            parts(&view),
            (s("POST"), s("/v1/orders?id=7"), s("api.example.com"))
        );
        assert_eq!(
            view.header("x-api-key"),
            Some("k1,junk"),
            "joined as Envoy joins"
        );
        assert_eq!(view.peer_ip(), Some("127.0.0.1"));
        // Caddy's and Traefik's header for the URI is another.
        let caddy = CheckPlan::preset(CheckProxy::Caddy);
        assert_eq!(
            req.view(&caddy).map(|v| v.path().to_string()),
            Ok(s("/elsewhere"))
        );
        // Envoy's http_service: the check request is the request.
        let envoy = CheckPlan::preset(CheckProxy::Envoy);
        let view = req.view(&envoy).expect("view");
        assert_eq!(parts(&view), (s("GET"), s("/check?x=1"), s("sluice:8082")));
    }

    #[test]
    fn a_part_missing_or_sent_twice_is_refused() {
        let nginx = CheckPlan::preset(CheckProxy::Nginx);
        let missing = request(&NGINX[..3]);
        assert_eq!(
            missing.view(&nginx).map(|_| ()),
            Err("no x-forwarded-host: the proxy must set it to the request's host (check.proxy: nginx)".into())
        );
        let mut twice = NGINX.to_vec();
        twice.push(("x-original-uri", "/elsewhere"));
        assert_eq!(
            request(&twice).view(&nginx).map(|_| ()),
            Err("x-original-uri came 2 times: the proxy must set it to the request's URI, replacing any the client sent (check.proxy: nginx)".into())
        );
        // A header no part is read from may come any number of times.
        let mut other = NGINX.to_vec();
        other.extend([("x-forwarded-uri", "/a"), ("x-forwarded-uri", "/b")]);
        assert!(request(&other).view(&nginx).is_ok());
    }
}
