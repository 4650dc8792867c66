//! The sluice binary and real Envoy, from sluice-testkit.
#![allow(dead_code, unused_imports)]

use std::path::Path;

pub use sluice_testkit::process::{Envoy, HttpResponse, free_port, http_get};

/// The `sluice` binary under test.
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sluice"))
}

/// Starts the binary under test on `yaml`.
pub fn start(yaml: &str) -> sluice_testkit::process::Sluice {
    sluice_testkit::process::Sluice::start(bin(), yaml)
}
