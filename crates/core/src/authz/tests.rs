use super::*;
use crate::config::parse_config;
use std::collections::HashMap;

#[derive(Default)]
struct Req {
    headers: HashMap<String, String>,
    path: String,
    peer: Option<String>,
    ext: HashMap<String, String>,
}

impl RequestView for Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn method(&self) -> &str {
        "GET"
    }
    fn host(&self) -> &str {
        "example.com"
    }
    fn peer_ip(&self) -> Option<&str> {
        self.peer.as_deref()
    }
    fn context_extension(&self, name: &str) -> Option<&str> {
        self.ext.get(name).map(String::as_str)
    }
}

const CONFIG: &str = r#"
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {unit: second, requests_per_unit: 5}
authz:
  domain: edge
  trusted_hops: 1
  descriptors:
    - [{key: remote_address, from: client_ip}]
    - [{key: tier, from: {api_key: {}}, map: tiers}, {key: path, from: path}]
    - [{key: tenant, from: {header: X-Tenant}}, {key: route, from: {context_extension: route}}]
    - [{key: method, from: method}, {key: host, from: host}, {key: fixed, from: {value: v}}]
maps:
  tiers:
    entries: {k1: gold}
    default: free
"#;

fn plan(text: &str) -> AuthzPlan {
    parse_config(text).expect("loads").authz.expect("authz")
}

fn pairs(d: &Descriptor) -> Vec<(String, String)> {
    d.entries
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect()
}

#[test]
fn builds_every_descriptor_whose_sources_are_present() {
    let plan = plan(CONFIG);
    let mut req = Req {
        path: "/v1/x?api_key=k1&y=2".into(),
        peer: Some("192.0.2.9".into()),
        ..Req::default()
    };
    req.headers
        .insert("x-forwarded-for".into(), "203.0.113.1, 198.51.100.7".into());
    req.headers.insert("x-tenant".into(), "acme".into());
    req.ext.insert("route".into(), "r1".into());
    let got: Vec<_> = plan.descriptors(&req).iter().map(pairs).collect();
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        got,
        vec![
            vec![s("remote_address", "198.51.100.7")],
            vec![s("tier", "gold"), s("path", "/v1/x")],
            vec![s("tenant", "acme"), s("route", "r1")],
            vec![
                s("method", "GET"),
                s("host", "example.com"),
                s("fixed", "v")
            ],
        ]
    );
}

#[test]
fn missing_sources_skip_the_descriptor_and_maps_fall_back_to_default() {
    let plan = plan(CONFIG);
    let mut req = Req {
        path: "/p".into(),
        peer: Some("192.0.2.9".into()),
        ..Req::default()
    };
    req.headers
        .insert("authorization".into(), "Bearer other".into());
    let got: Vec<_> = plan.descriptors(&req).iter().map(pairs).collect();
    assert_eq!(got.len(), 3, "the tenant descriptor has no header: {got:?}");
    assert_eq!(got[0][0].1, "192.0.2.9", "no XFF: the peer address");
    assert_eq!(got[1][0].1, "free", "unknown key maps to the default");
}

#[test]
fn a_map_without_default_skips_unknown_values() {
    let plan = plan(&CONFIG.replace("    default: free\n", ""));
    let mut req = Req::default();
    req.headers.insert("x-api-key".into(), "unknown".into());
    let got: Vec<_> = plan.descriptors(&req).iter().map(pairs).collect();
    assert!(got.iter().all(|d| d[0].0 != "tier"), "{got:?}");
}

#[test]
fn authz_errors_name_the_line() {
    let e = parse_config(&CONFIG.replace("map: tiers", "map: tears")).expect_err("unknown map");
    assert!(e.message.contains("map 'tears'") && e.line == 12, "{e}");
    let e = parse_config(&CONFIG.replace("domain: edge\n  trusted", "domain: nowhere\n  trusted"))
        .expect_err("unknown domain");
    assert!(e.message.contains("nowhere") && e.line == 8, "{e}");
    let e = parse_config(&CONFIG.replace("from: path", "from: paht")).expect_err("unknown source");
    assert_eq!(e.line, 12, "{e}");
}

/// The client address as a descriptor value, for a request with `xff` and `peer`.
fn client(plan: &AuthzPlan, xff: Option<&str>, peer: &str) -> String {
    let mut req = Req {
        path: "/".into(),
        peer: Some(peer.into()),
        ..Req::default()
    };
    if let Some(x) = xff {
        req.headers.insert("x-forwarded-for".into(), x.into());
    }
    plan.descriptors(&req)[0].entries[0].value.clone()
}

/// X-Forwarded-For hops must be addresses: a forged word at the trusted position gets no bucket of
/// its own (the peer's is used), and spellings of one address share a bucket.
#[test]
fn client_addresses_are_parsed_and_canonical() {
    let plan = plan(CONFIG);
    assert_eq!(
        client(&plan, Some("evil, not-an-ip"), "192.0.2.9"),
        "192.0.2.9"
    );
    assert_eq!(
        client(&plan, Some("1.2.3.4, 198.51.100.7:443"), "192.0.2.9"),
        "192.0.2.9"
    );
    assert_eq!(
        client(&plan, Some("2001:DB8:0:0::1"), "192.0.2.9"),
        "2001:db8::1"
    );
    assert_eq!(
        client(&plan, Some("::ffff:198.51.100.7"), "192.0.2.9"),
        "198.51.100.7"
    );
    assert_eq!(client(&plan, None, "2001:0db8::0001"), "2001:db8::1");
}

/// A request for `path` with `headers`.
fn request(headers: &[(&str, &str)], path: &str) -> Req {
    let mut req = Req {
        path: path.into(),
        ..Req::default()
    };
    for (k, v) in headers {
        req.headers.insert((*k).into(), (*v).into());
    }
    req
}

/// The tier descriptor's API key, for a request with `headers` and `path`.
fn key_of(plan: &AuthzPlan, headers: &[(&str, &str)], path: &str) -> Option<String> {
    plan.descriptors(&request(headers, path))
        .iter()
        .find(|d| d.entries[0].key == "tier")
        .map(|d| d.entries[0].value.clone())
}

/// Spellings of one API key share one bucket (`api_key=%6b1` and `Authorization: BEARER k1` each
/// got a fresh bucket); the header wins over `Authorization`, which wins over the query.
#[test]
fn api_keys_are_normalised_and_their_sources_ordered() {
    let plan = plan(&CONFIG.replace(
        "    entries: {k1: gold}\n    default: free\n",
        "    entries: {k1: gold, k2: silver, k3: bronze, \"a b\": spaced}\n",
    ));
    for (headers, path) in [
        (&[("x-api-key", "k1")][..], "/"),
        (&[("x-api-key", " k1 ")][..], "/"),
        (&[("authorization", "Bearer k1")][..], "/"),
        (&[("authorization", "BEARER k1")][..], "/"),
        (&[("authorization", "bearer   k1")][..], "/"),
        (&[][..], "/x?api_key=k1"),
        (&[][..], "/x?api_key=%6b1"),
        (&[][..], "/x?api_key=%6B%31"),
        // The parameter's name escaped (the application decodes it), a fragment after it.
        (&[][..], "/x?api%5Fkey=k1"),
        (&[][..], "/x?%61pi_key=k1&api_key=k2"),
        (&[][..], "/x?api_key=k1#k2"),
    ] {
        assert_eq!(
            key_of(&plan, headers, path).as_deref(),
            Some("gold"),
            "{headers:?} {path}"
        );
    }
    let all = [("x-api-key", "k1"), ("authorization", "Bearer k2")];
    assert_eq!(
        key_of(&plan, &all, "/?api_key=k3").as_deref(),
        Some("gold"),
        "header first"
    );
    assert_eq!(
        key_of(&plan, &all[1..], "/?api_key=k3").as_deref(),
        Some("silver"),
        "then Authorization"
    );
    assert_eq!(
        key_of(&plan, &[("authorization", "Basic k2")], "/?api_key=k3").as_deref(),
        Some("bronze")
    );
    assert_eq!(
        key_of(&plan, &[], "/?api_key=a+b").as_deref(),
        Some("spaced")
    );
    assert_eq!(
        key_of(&plan, &[], "/?api_key=%zz1").as_deref(),
        None,
        "malformed escapes stay raw"
    );
    assert_eq!(
        key_of(&plan, &[("x-api-key", "  ")], "/").as_deref(),
        None,
        "blank is absent"
    );
}

/// The `path` source is the path in one spelling: a client cannot make a fresh bucket, or miss
/// a rule, by spelling it otherwise (issue 41).
#[test]
fn the_path_is_decided_on_in_one_spelling() {
    let plan = plan(CONFIG);
    let path_of = |target: &str| {
        let mut req = request(&[("x-api-key", "k1")], target);
        req.peer = Some("192.0.2.9".into());
        let got = plan.descriptors(&req);
        got[1].entries[1].value.clone()
    };
    for target in [
        "/login",
        "//login",
        "/./login",
        "/x/../login",
        "/%6cogin",
        "/login?a=b",
        "/login#x",
    ] {
        assert_eq!(path_of(target), "/login", "{target}");
    }
    assert_eq!(
        path_of("/a%2fb"),
        "/a%2Fb",
        "an escaped slash is no separator"
    );
}

/// An API key used as the value itself (no map) is kept only as a digest: it never shows in
/// bucket keys, the Quota API or Redis. Spellings of one key still share it.
#[test]
fn raw_api_keys_are_kept_as_digests() {
    let config = r#"
domains:
  - domain: edge
    descriptors:
      - key: key
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: token
        rate_limit: {unit: second, requests_per_unit: 5}
authz:
  domain: edge
  descriptors:
    - [{key: key, from: {api_key: {}}}]
    - [{key: key, from: {api_key: {}}, hash: false}]
    - [{key: token, from: {header: x-token}, hash: true}]
"#;
    let plan = plan(config);
    let mut req = Req::default();
    req.headers.insert("x-api-key".into(), "s3cr3t-key".into());
    req.headers.insert("x-token".into(), "t0ken".into());
    let got: Vec<_> = plan.descriptors(&req).iter().map(pairs).collect();
    assert_eq!(got[0][0].1, digest("s3cr3t-key"));
    assert!(got[0][0].1.starts_with("sha256:") && got[0][0].1.len() == 39);
    assert_eq!(got[1][0].1, "s3cr3t-key", "hash: false keeps it");
    assert_eq!(got[2][0].1, digest("t0ken"), "hash: true on any source");
    let mut bearer = Req::default();
    bearer
        .headers
        .insert("authorization".into(), "bearer s3cr3t-key".into());
    assert_eq!(
        pairs(&plan.descriptors(&bearer)[0])[0].1,
        digest("s3cr3t-key")
    );
    // Part of store keys shared by sidecars of different versions: the format is fixed.
    assert_eq!(
        digest("s3cr3t-key"),
        "sha256:99ab9660c4e55f77fd420904b4618043"
    );
}

/// A second copy of an identity header (Envoy joins them: `victim,junk1`) never makes another
/// identity: every `api_key` and `header` source counts a header's first value, so the copy
/// cannot buy a fresh bucket.
#[test]
fn a_repeated_identity_header_counts_its_first_value() {
    let config = r#"
domains:
  - domain: edge
    descriptors:
      - key: key
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 5}
authz:
  domain: edge
  descriptors:
    - [{key: key, from: {api_key: {}}}]
    - [{key: tenant, from: {header: x-tenant}}]
"#;
    let plan = plan(config);
    let values = |headers: &[(&str, &str)], path: &str| -> Vec<(String, String)> {
        let req = request(headers, path);
        plan.descriptors(&req).iter().flat_map(pairs).collect()
    };
    let victim = values(&[("x-api-key", "victim"), ("x-tenant", "acme")], "/");
    assert_eq!(victim[0].1, digest("victim"));
    for (headers, path) in [
        (
            &[("x-api-key", "victim,junk1"), ("x-tenant", "acme,junk1")][..],
            "/",
        ),
        (
            &[("x-api-key", "victim, junk2"), ("x-tenant", "acme , junk2")][..],
            "/",
        ),
        (
            &[
                ("authorization", "Bearer victim,Bearer junk3"),
                ("x-tenant", "acme"),
            ][..],
            "/",
        ),
        (&[("x-tenant", "acme")][..], "/?api_key=victim%2Cjunk4"),
        (
            &[("x-tenant", "acme")][..],
            "/?api_key=victim&api_key=junk5",
        ),
    ] {
        assert_eq!(values(headers, path), victim, "{headers:?} {path}");
    }
}
