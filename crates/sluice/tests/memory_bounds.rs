//! What hostile gRPC clients can make one sluice hold, measured in its RSS against the bounds
//! docs/security.md ("Memory a client can hold") gives (issue 41). Each attack is the one the
//! review measured on the build before those bounds; its numbers there are in each test's doc.

mod common;

use std::time::Duration;

use sluice_testkit::hostile::attack::{self, Attack, Outcome, Scenario};

const CONFIG: &str = "domains:\n- domain: edge\n  descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n";

/// Runs `scenario` on a fresh sluice, holding it for `hold` (its outcome printed, for a failure's
/// diagnosis).
#[allow(clippy::print_stderr)]
async fn attack(scenario: &Scenario, hold: Duration) -> Outcome {
    let sluice = common::start(CONFIG);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let outcome = attack::run(sluice.grpc, sluice.child.id(), scenario, hold).await;
    eprintln!("{}: {outcome:?}", scenario.name);
    outcome
}

fn one(name: &'static str, connections: usize, calls: Vec<(Attack, usize)>) -> Scenario {
    Scenario {
        name,
        addresses: 1,
        connections,
        calls,
    }
}

/// Messages whose prefix promises 4 MiB and never finish are refused at their prefix, on RLS
/// and RLQS alike (before: 64 of them on one connection took RSS from 14 to 274 MiB in 0.4 s,
/// and RLQS's were held until the client left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_messages_are_refused_at_their_prefix() {
    let scenario = one(
        "partial",
        1,
        vec![(Attack::PartialRls, 64), (Attack::PartialRlqs, 64)],
    );
    let o = attack(&scenario, Duration::from_secs(2)).await;
    assert_eq!(
        o.ends.get("status 8"),
        Some(&128),
        "every one RESOURCE_EXHAUSTED"
    );
    assert!(o.growth_mib() < 16.0, "RSS grew {:.0} MiB", o.growth_mib());
}

/// Idle RLQS and Health/Watch streams are capped per address like WatchQuota's (before: 16
/// connections with 500 of each took RSS from 14 to 186 MiB, all held past the deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_long_lived_streams_are_capped_per_address() {
    let scenario = one(
        "idle-streams",
        16,
        vec![(Attack::IdleRlqs, 500), (Attack::HealthWatch, 500)],
    );
    // Long enough for every refusal to arrive on a loaded machine.
    let o = attack(&scenario, Duration::from_secs(6)).await;
    // 32 RLQS streams and 16 watches from one address (docs/security.md).
    assert_eq!(o.still_open, 48, "{o:?}");
    assert_eq!(o.ends.get("status 8"), Some(&(o.opened - 48)));
    // 16 000 refusals in flight at once: 21 MiB in RESULTS.md, 24 and 29 MiB here on
    // 2026-11-30, 32.3 in one CI run, which failed a bound of 32. The leak it guards against
    // grew 172 MiB.
    assert!(o.growth_mib() < 48.0, "RSS grew {:.0} MiB", o.growth_mib());
}

/// Answers a client never reads keep their calls charged, so they are bounded like unfinished
/// requests (before: 8 connections that never read held 8 192 answers, +86 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_answers_are_bounded() {
    let scenario = one("unread-answers", 8, vec![(Attack::UnreadRls, 1024)]);
    let o = attack(&scenario, Duration::from_secs(2)).await;
    // One address holds 24 MiB of calls at 24 KiB each.
    assert!(o.still_open <= 1024, "{o:?}");
    assert!(o.ends.get("status 8").is_some_and(|&n| n >= 7_000), "{o:?}");
    assert!(o.growth_mib() < 48.0, "RSS grew {:.0} MiB", o.growth_mib());
}

/// Every bound at its limit at once from four addresses (the server's 256 connections, each
/// with partial and unfinished messages and idle streams of every long-lived kind past their
/// caps): RSS stays within what docs/security.md gives the gRPC port, 128 MiB over its resting
/// RSS, and so within the pod's limit (before: 3.4 GiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bound_at_once_stays_within_the_documented_memory() {
    let o = attack(&attack::everything(), Duration::from_secs(3)).await;
    assert_eq!(o.connections_lost, 0, "{o:?}");
    // What stays open is what the bounds admit: 32 MiB of calls at 24 KiB (1 365), and the
    // long-lived kinds' caps in all (64 RLQS, 64 watches, 16 reflection).
    assert!(o.still_open <= 1_365 + 144, "{o:?}");
    assert!(o.ends.get("status 8").is_some_and(|&n| n > 15_000), "{o:?}");
    assert!(o.growth_mib() < 128.0, "RSS grew {:.0} MiB", o.growth_mib());
}
