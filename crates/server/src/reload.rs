//! Live reload: the config (every file it read) is polled; a changed, valid config is swapped in
//! atomically; an invalid one is logged and counted, and the old config keeps working.
//!
//! Polling a content hash (rather than inotify) survives Kubernetes ConfigMap updates, which swap a
//! `..data` symlink instead of writing the files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use sluice_core::ConfigError;
use sluice_core::config::fs::read_regular_file;
use sluice_core::config::reader::MAX_FILE_BYTES;
use sluice_core::config::{Config, load_config};
use sluice_core::hash::{FNV_OFFSET, fnv1a};
use tokio_util::sync::CancellationToken;

use crate::state::{AppState, Runtime};

/// Reload series.
#[derive(Debug, Clone)]
pub struct ReloadMetrics {
    /// `sluice_config_reloads_total{outcome}`: reload attempts of changed files (ok, error).
    pub reloads: IntCounterVec,
    /// `sluice_config_rules`: rules in force.
    pub rules: IntGauge,
    /// `sluice_config_info{version}`: 1 for the config in force (its version as `sluice rules`
    /// shows it; the one series there is).
    pub info: IntGaugeVec,
    /// The `version` label of the series `info` has now.
    shown: Arc<std::sync::Mutex<String>>,
}

impl ReloadMetrics {
    /// Creates and registers the series.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self {
            reloads: IntCounterVec::new(
                Opts::new(
                    "sluice_config_reloads_total",
                    "Config reloads of changed files, by outcome",
                ),
                &["outcome"],
            )?,
            rules: IntGauge::new("sluice_config_rules", "Rate-limit rules in force")?,
            info: IntGaugeVec::new(
                Opts::new(
                    "sluice_config_info",
                    "The config in force, by version (always 1)",
                ),
                &["version"],
            )?,
            shown: Arc::default(),
        };
        registry.register(Box::new(m.reloads.clone()))?;
        registry.register(Box::new(m.rules.clone()))?;
        registry.register(Box::new(m.info.clone()))?;
        Ok(m)
    }

    /// Shows the config of `state` as the one in force: the new series is there before the old
    /// one goes, so a scrape never sees none.
    pub fn in_force(&self, state: &AppState) {
        self.rules.set(state.engine.rules().rules().len() as i64);
        let version = label(&state.runtime.load().version);
        let mut shown = self
            .shown
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.info.with_label_values(&[version.as_str()]).set(1);
        if *shown != version {
            let _ = self.info.remove_label_values(&[shown.as_str()]);
            *shown = version;
        }
    }
}

/// The most bytes of a version shown as a label: a management server's version string can be
/// long (up to the 4 MiB message), and a Prometheus with a label length limit refuses the
/// whole scrape.
const MOST_LABEL_BYTES: usize = 128;

/// `version` as a label: itself when short; else its first bytes, `…` and a hash of the whole.
fn label(version: &str) -> String {
    if version.len() <= MOST_LABEL_BYTES {
        return version.to_string();
    }
    let mut cut = MOST_LABEL_BYTES - 20;
    while !version.is_char_boundary(cut) {
        cut -= 1;
    }
    let hash = fnv1a(FNV_OFFSET, version.as_bytes());
    format!("{}…{hash:016x}", &version[..cut])
}

/// What to watch.
#[derive(Debug, Clone)]
pub struct ReloadOptions {
    /// The path given to `--config`.
    pub path: PathBuf,
    /// How often to look for changes.
    pub interval: Duration,
    /// The files the running config was read from.
    pub files: Vec<PathBuf>,
    /// Settings that need a restart to change (engine, redis, tls), as loaded at start: compared,
    /// never printed (they hold URLs and key material).
    pub restart_only: String,
    /// How a changed config is loaded and checked (the binary adds the checks only its
    /// dependencies can make).
    pub load: fn(&Path) -> Result<Config, ConfigError>,
}

impl ReloadOptions {
    /// Options for the config loaded at start.
    pub fn for_config(path: &Path, config: &Config, interval: Duration) -> Self {
        Self {
            path: path.to_path_buf(),
            interval,
            files: config.files.clone(),
            restart_only: restart_only(config),
            load: load_config,
        }
    }

    /// The same, loading changes with `load`.
    pub fn loading_with(self, load: fn(&Path) -> Result<Config, ConfigError>) -> Self {
        Self { load, ..self }
    }
}

fn restart_only(config: &Config) -> String {
    // Which files `tls:` names (their contents are followed as they rotate: crate::tls).
    let tls = config.tls.as_ref().map(|t| &t.files);
    format!("{:?}{:?}{tls:?}", config.engine, config.redis)
}

/// Polls until `stop` is cancelled.
pub async fn watch(
    state: Arc<AppState>,
    mut options: ReloadOptions,
    metrics: ReloadMetrics,
    stop: CancellationToken,
) {
    metrics.in_force(&state);
    let mut seen = match off_the_workers(&stop, {
        let (path, files) = (options.path.clone(), options.files.clone());
        move || fingerprint(&path, &files)
    })
    .await
    {
        Ran::Done(seen) => seen,
        Ran::Failed => 0,
        Ran::Stopped => return,
    };
    let mut last_error: Option<String> = None;
    let mut tick = tokio::time::interval(options.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut polls = 0u64;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        polls += 1;
        let (path, files) = (options.path.clone(), options.files.clone());
        let now = match off_the_workers(&stop, move || fingerprint(&path, &files)).await {
            Ran::Done(now) => now,
            Ran::Failed => continue,
            Ran::Stopped => return,
        };
        // Every 10th poll loads anyway, to notice new files matching an include glob.
        if now == seen && !polls.is_multiple_of(10) {
            continue;
        }
        seen = now;
        let (path, load) = (options.path.clone(), options.load);
        let loaded = match off_the_workers(&stop, move || load(&path)).await {
            Ran::Done(loaded) => loaded,
            Ran::Failed => continue,
            Ran::Stopped => return,
        };
        match loaded {
            Ok(config) => {
                last_error = None;
                if config.version == state.runtime.load().version {
                    continue;
                }
                if restart_only(&config) != options.restart_only {
                    tracing::warn!(
                        "engine, redis or tls settings changed: they apply after a restart; rules and authz apply now"
                    );
                }
                options.files = config.files.clone();
                apply(&state, config, &metrics);
            }
            Err(e) => {
                let message = e.to_string();
                if last_error.as_deref() != Some(message.as_str()) {
                    metrics.reloads.with_label_values(&["error"]).inc();
                    tracing::error!(error = %message, "configuration change rejected; the previous configuration stays in force");
                    last_error = Some(message);
                }
            }
        }
    }
}

/// Swaps `config` in, atomically: its rules and the settings that apply live (what every
/// reload does, whether the config came from files or was pushed over xDS); counted and logged.
pub fn apply(state: &AppState, config: Config, metrics: &ReloadMetrics) {
    let rules = config.rules.rules().len();
    let version = config.version.clone();
    state.runtime.store(Arc::new(Runtime::of(&config)));
    state.engine.swap_rules(config.rules);
    metrics.in_force(state);
    metrics.reloads.with_label_values(&["ok"]).inc();
    tracing::info!(version = %version, rules, "configuration reloaded");
}

/// What a read of the config off the async workers came to.
enum Ran<T> {
    Done(T),
    /// The task panicked (logged).
    Failed,
    /// Shutdown began first: it never waits for a read of the config.
    Stopped,
}

/// Runs `f` on a blocking thread, so a slow file system never holds an async worker, and stops
/// waiting for it at shutdown.
async fn off_the_workers<T: Send + 'static>(
    stop: &CancellationToken,
    f: impl FnOnce() -> T + Send + 'static,
) -> Ran<T> {
    tokio::select! {
        _ = stop.cancelled() => Ran::Stopped,
        r = tokio::task::spawn_blocking(f) => match r {
            Ok(done) => Ran::Done(done),
            Err(e) => {
                tracing::error!(error = %e, "config reload task failed");
                Ran::Failed
            }
        },
    }
}

/// A hash of the files' paths and contents (and of the directory listing, for a directory).
fn fingerprint(path: &Path, files: &[PathBuf]) -> u64 {
    let mut h = FNV_OFFSET;
    let mut eat = |bytes: &[u8]| h = fnv1a(h, bytes);
    if let Ok(entries) = std::fs::read_dir(path) {
        let mut names: Vec<_> = entries
            .take(sluice_core::config::reader::MAX_DIR_ENTRIES + 1)
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for n in names {
            eat(n.as_encoded_bytes());
        }
    }
    for f in files {
        eat(f.as_os_str().as_encoded_bytes());
        match read_regular_file(f, MAX_FILE_BYTES) {
            Ok(content) => eat(&content),
            Err(_) => eat(b"\0missing"),
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use sluice_core::config::parse_config;

    use super::{MOST_LABEL_BYTES, label, restart_only};

    #[test]
    fn a_long_version_is_a_bounded_label_that_still_tells_versions_apart() {
        assert_eq!(label("0123abcd/xds:7"), "0123abcd/xds:7");
        let (a, b) = ("é".repeat(3_000), format!("{}x", "é".repeat(2_999)));
        let (la, lb) = (label(&a), label(&b));
        assert!(
            la.len() <= MOST_LABEL_BYTES && lb.len() <= MOST_LABEL_BYTES,
            "{la}"
        );
        assert_ne!(la, lb, "same first bytes, other versions");
        assert_eq!(la, label(&a));
    }

    #[test]
    fn any_redis_or_engine_field_is_a_change_that_needs_a_restart() {
        let base = "domains: []\nredis:\n  url: redis://127.0.0.1:6379\n";
        let same = parse_config(base).expect("config");
        for changed in [
            "domains: []\nredis:\n  url: redis://127.0.0.1:6379\n  push_resets: false\n",
            "domains: []\nredis:\n  url: redis://127.0.0.1:6379\n  timeout: 50ms\n",
            "domains: []\nredis:\n  url: redis://127.0.0.1:6379\nengine:\n  lease_ttl: 2s\n",
        ] {
            let other = parse_config(changed).expect("config");
            assert_ne!(restart_only(&same), restart_only(&other), "{changed}");
        }
        let again = parse_config(base).expect("config");
        assert_eq!(restart_only(&same), restart_only(&again));
    }
}
