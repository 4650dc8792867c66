//! Offers HTTP requests at a fixed rate (unlike wrk, which sends as fast as it can and on a small
//! machine takes the CPU the system under test needs), over keep-alive connections, and counts
//! what passed (2xx) and what was denied (429).
//!
//! `http-rate --port 10000 --header x-tenant=acme --rate 4000 --seconds 60 --connections 4`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use sluice_testkit::process::KeepAlive;

/// A fixed-rate HTTP/1.1 load.
#[derive(Debug, Parser)]
struct Args {
    /// Port on 127.0.0.1.
    #[arg(long)]
    port: u16,
    /// A request header `name=value`.
    #[arg(long)]
    header: String,
    /// Requests per second in all.
    #[arg(long)]
    rate: u64,
    /// How long.
    #[arg(long)]
    seconds: u64,
    /// Connections (one thread each).
    #[arg(long, default_value_t = 4)]
    connections: u64,
}

#[allow(clippy::print_stdout)] // the result line is the program's output
fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (name, value) = args
        .header
        .split_once('=')
        .ok_or_else(|| anyhow::anyhow!("--header takes name=value"))?;
    let (ok, denied, other) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let start = Instant::now();
    let end = start + Duration::from_secs(args.seconds);
    let interval = Duration::from_secs_f64(args.connections as f64 / args.rate.max(1) as f64);
    let threads: Vec<_> = (0..args.connections)
        .map(|i| {
            let (ok, denied, other) = (ok.clone(), denied.clone(), other.clone());
            let (name, value, port) = (name.to_string(), value.to_string(), args.port);
            std::thread::spawn(move || {
                let mut client = KeepAlive::new(port);
                // Spread the connections' sends over the interval.
                let mut next = start + interval.mul_f64(i as f64 / args.connections as f64);
                while next < end {
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    match client.get("/", &[(&name, &value)]) {
                        200..=299 => &ok,
                        429 => &denied,
                        _ => &other,
                    }
                    .fetch_add(1, Ordering::Relaxed);
                    next += interval;
                }
            })
        })
        .collect();
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))?;
    }
    let (ok, denied, other) = (
        ok.load(Ordering::Relaxed),
        denied.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
    );
    println!(
        "sent {} ok {ok} denied {denied} other {other} seconds {:.3}",
        ok + denied + other,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
