//! Config loading reads regular files only, bounded in bytes and in entries, on the real file
//! system: a FIFO, a device or a huge directory is an error naming the path, never a hang.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use sluice_core::config::{Config, ConfigError, load_config};

const RULES: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";

/// Loads `path` on another thread, failing the test if it takes more than 5 s (a FIFO used to
/// block the read for good).
fn load_within_5s(path: &Path) -> Result<Config, ConfigError> {
    let (tx, rx) = mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(load_config(&path));
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("loading the config hung")
}

#[test]
fn an_include_naming_a_fifo_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("limits.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let config = dir.path().join("sluice.yaml");
    std::fs::write(&config, "include: [limits.yaml]\n").expect("write");
    let err = load_within_5s(&config).expect_err("a FIFO is no config file");
    let message = err.to_string();
    assert!(
        message.contains("limits.yaml") && message.contains("FIFO"),
        "{message}"
    );
    // Named directly, too.
    let err = load_within_5s(&fifo).expect_err("a FIFO is no config file");
    assert!(err.to_string().contains("FIFO"), "{err}");
    let err = load_within_5s(Path::new("/dev/zero")).expect_err("a device");
    assert!(err.to_string().contains("device"), "{err}");
}

#[test]
fn a_directory_with_too_many_entries_is_refused_with_the_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = dir.path().join("limits");
    std::fs::create_dir(&limits).expect("mkdir");
    for i in 0..4_100 {
        std::fs::write(
            limits.join(format!("r{i}.yaml")),
            RULES.replace("domain: d", &format!("domain: d{i}")),
        )
        .expect("write");
    }
    let err = load_within_5s(&limits).expect_err("beyond the bound");
    let message = err.to_string();
    assert!(message.contains("more than 4096"), "{message}");
    // An include glob matching them is bounded the same way.
    let config = dir.path().join("sluice.yaml");
    std::fs::write(&config, "include: [limits/*.yaml]\n").expect("write");
    let err = load_within_5s(&config).expect_err("beyond the bound");
    assert!(err.to_string().contains("more than 4096"), "{err}");
}

#[test]
fn a_config_file_is_bounded_in_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("sluice.yaml");
    let file = std::fs::File::create(&config).expect("create");
    // Sparse: 65 MiB of size, no data written.
    file.set_len(65 << 20).expect("set_len");
    let err = load_within_5s(&config).expect_err("too large");
    assert!(err.to_string().contains("64 MiB"), "{err}");
}
