//! `sluice hold acquire|release` (sluice.v1.Holds) against a running sluice: a service without
//! Envoy takes and gives back concurrency slots and settles reservations.

mod common;

use std::process::{Command, Output};

const CONFIG: &str = r#"
domains:
  - domain: jobs
    descriptors:
      - key: user
        rate_limit: {concurrency: 1, hold_timeout: 60s, name: one_at_a_time}
      - key: tenant
        rate_limit: {unit: hour, requests_per_unit: 1000, charge: post_paid, reserve: {default: 600}, name: budget}
"#;

fn hold(addr: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["hold"])
        .args(args)
        .args(["--addr", addr, "--domain", "jobs", "-o", "json"])
        .output()
        .expect("sluice hold")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn acquire_then_release_over_the_cli() {
    let sluice = common::start(CONFIG);
    let addr = format!("http://{}", sluice.grpc);
    let first = hold(&addr, &["acquire", "-d", "user=ann"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let token = json(&first)["token"].as_str().expect("token").to_string();
    assert_eq!(token.len(), 16);
    // One at a time: the second is denied (exit 1), nothing held.
    let second = hold(&addr, &["acquire", "-d", "user=ann"]);
    assert_eq!(second.status.code(), Some(1));
    assert_eq!(json(&second)["denial"], "over_limit");
    assert!(String::from_utf8_lossy(&second.stderr).contains("denied (over_limit)"));
    // Another user's token, then a malformed one: nothing released, and a clear error.
    let wrong = hold(&addr, &["release", "-d", "user=bob", "--token", &token]);
    assert_eq!(json(&wrong)["released"], 0);
    let bad = hold(&addr, &["release", "-d", "user=ann", "--token", "nope"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("is not one Acquire answers"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let released = hold(&addr, &["release", "-d", "user=ann", "--token", &token]);
    assert_eq!(json(&released)["released"], 1);
    assert!(hold(&addr, &["acquire", "-d", "user=ann"]).status.success());

    // A reservation of 600 of 1 000; a second is denied until the first settles with 100 used.
    let reserved = hold(&addr, &["acquire", "-d", "tenant=acme"]);
    let token = json(&reserved)["token"]
        .as_str()
        .expect("token")
        .to_string();
    assert_eq!(json(&reserved)["remaining"], 400);
    assert_eq!(
        hold(&addr, &["acquire", "-d", "tenant=acme"]).status.code(),
        Some(1)
    );
    let settled = hold(
        &addr,
        &[
            "release",
            "-d",
            "tenant=acme",
            "--token",
            &token,
            "--used",
            "100",
        ],
    );
    assert_eq!(json(&settled)["released"], 1);
    // 400 + the 500 unused: 900 (and what refilled since, under a token a second).
    let again = hold(
        &addr,
        &["acquire", "-d", "tenant=acme", "--estimate", "950"],
    );
    assert_eq!(json(&again)["denial"], "over_limit", "950 asked");
    let fits = hold(
        &addr,
        &["acquire", "-d", "tenant=acme", "--estimate", "900"],
    );
    assert!(
        fits.status.success(),
        "{}",
        String::from_utf8_lossy(&fits.stderr)
    );
}

/// `sluice` run against `addr` with `args`: its stdout (it must succeed).
fn stdout_of(addr: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .args(["--addr", addr])
        .output()
        .expect("sluice");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Found by a security review: `quota get` and `sluice rules` showed a concurrency limit as
/// `limit 0 per 60 seconds (burst 1)`. They say how many may be in flight, the hold timeout,
/// and the slots: free, and held by requests in flight (no rate, no "full again").
#[test]
fn quota_get_and_rules_show_a_concurrency_limit_as_requests_in_flight() {
    let sluice = common::start(CONFIG);
    let addr = format!("http://{}", sluice.grpc);
    assert!(hold(&addr, &["acquire", "-d", "user=ann"]).status.success());
    let get = ["quota", "get", "--domain", "jobs", "-d", "user=ann"];
    let view = stdout_of(&addr, &get);
    let row = |name: &str| {
        view.lines()
            .find_map(|l| l.strip_prefix(name).map(str::trim))
            .unwrap_or_else(|| panic!("no {name} row in {view}"))
            .to_string()
    };
    assert_eq!(row("limit "), "1 in flight (hold timeout 1m)", "{view}");
    assert_eq!(
        row("free slots "),
        "0 in the store, 0 in this instance's lease",
        "{view}"
    );
    assert_eq!(
        row("held here "),
        "1 slot, by 1 request in flight",
        "{view}"
    );
    for rate_words in ["per ", "burst", "full again", "global remaining"] {
        assert!(!view.contains(rate_words), "{rate_words:?} in {view}");
    }
    let json = stdout_of(&addr, &[&get[..], &["-o", "json"]].concat());
    let json: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(
        (&json["algorithm"], &json["burst"], &json["held"]),
        (&"concurrency".into(), &1.into(), &1.into()),
        "{json}"
    );

    let rules = stdout_of(&addr, &["rules"]);
    let line = rules
        .lines()
        .find(|l| l.contains("one_at_a_time"))
        .unwrap_or_else(|| panic!("{rules}"));
    assert!(line.contains("1 in flight, hold 1m"), "{rules}");
    let budget = rules
        .lines()
        .find(|l| l.contains("budget"))
        .expect("budget");
    assert!(budget.contains("1000/hour"), "a rate stays a rate: {rules}");
    let json = stdout_of(&addr, &["rules", "-o", "json"]);
    let json: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(json["rules"][0]["algorithm"], "concurrency", "{json}");
    assert_eq!(json["rules"][1]["algorithm"], "token_bucket", "{json}");
}
