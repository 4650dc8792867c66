//! What hostile clients can make one sluice hold in memory (issue 41): each scenario
//! (`sluice_testkit::hostile::attack`) starts a fresh `sluice serve` on the embedded store, opens
//! what it says from one or more loopback addresses, holds it past the request deadline, and
//! reports the server's RSS before, at its peak, at the end and after the clients left, and how
//! the server answered the streams.
//!
//! `loadtest/pin-memory.sh` runs every scenario against a release build (and, with
//! `BASELINE_BIN`, an older one) and appends the table to `loadtest/RESULTS.md`;
//! `crates/sluice/tests/memory_bounds.rs` runs the same attacks in CI.
#![allow(clippy::print_stdout)] // the table is the program's output

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use sluice_testkit::hostile::attack::{self, Outcome};
use sluice_testkit::process::Sluice;

#[derive(Parser)]
#[command(about = "Memory hostile clients can pin in one sluice")]
struct Args {
    /// The sluice binary.
    #[arg(long, default_value = "target/release/sluice")]
    sluice: PathBuf,
    /// Scenarios to run (all if none): partial-rls, partial-rlqs, idle-streams, reflection,
    /// unread-answers, rlqs-buckets, connections, partial-everywhere, everything,
    /// everything-heavy.
    scenarios: Vec<String>,
    /// How long the streams are held before the third RSS reading.
    #[arg(long, default_value = "12s", value_parser = humantime::parse_duration)]
    hold: Duration,
    /// Rounds of each scenario on the same server (memory kept between rounds shows).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

const CONFIG: &str = "domains:\n- domain: edge\n  descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!(
        "| scenario | RSS before | peak | after {:?} | 2 s after the clients left | streams opened | still open | ended by the server | connections lost |",
        args.hold
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in attack::scenarios() {
        if !args.scenarios.is_empty() && !args.scenarios.iter().any(|n| n == s.name) {
            continue;
        }
        let sluice = Sluice::start(&args.sluice, CONFIG);
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..args.rounds {
            let outcome = attack::run(sluice.grpc, sluice.child.id(), &s, args.hold).await;
            print_row(s.name, &outcome);
        }
    }
    Ok(())
}

fn print_row(name: &str, o: &Outcome) {
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / (1 << 20) as f64);
    let ends: Vec<String> = o.ends.iter().map(|(how, n)| format!("{n} {how}")).collect();
    println!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
        mib(o.rss[0]),
        mib(o.rss[1]),
        mib(o.rss[2]),
        mib(o.rss[3]),
        o.opened,
        o.still_open,
        ends.join(", "),
        o.connections_lost
    );
}
