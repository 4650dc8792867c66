//! `fleetsim FILE…`: runs every scenario of the files and prints the table (markdown). Exits
//! 1 if any run without an outage admitted beyond `B + L·t`.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use sluice_fleetsim::{report, run, scenario};

/// A deterministic fleet simulator: sluice's engines on one simulated store, against an exact
/// limiter on the same arrivals.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Scenario files (YAML: `scenarios:`, a list of grids; see loadtest/fleetsim/).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Only the grids with this name.
    #[arg(long)]
    only: Option<String>,
    /// Replaces every grid's seed.
    #[arg(long)]
    seed: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", report::HEAD)?;
    let mut over = 0;
    let began = Instant::now();
    for path in &args.files {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file = scenario::parse(&text).with_context(|| format!("in {}", path.display()))?;
        for grid in &file.scenarios {
            if args.only.as_ref().is_some_and(|only| *only != grid.name) {
                continue;
            }
            for mut case in grid.cases() {
                case.seed = args.seed.unwrap_or(case.seed);
                let outcome = run::run(&case);
                over += u32::from(outcome.over > 0.0 && case.outages.is_empty());
                writeln!(out, "{}", report::row(&outcome))?;
                out.flush()?;
            }
        }
    }
    writeln!(
        out,
        "\n(simulated; {:.1} s of real time)",
        began.elapsed().as_secs_f64()
    )?;
    if over > 0 {
        anyhow::bail!("{over} run(s) admitted beyond B + L·t without an outage");
    }
    Ok(())
}
