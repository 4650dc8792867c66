//! Offered load: paced `ShouldRateLimit` calls to one sidecar, with uniform or Zipf keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry;
use sluice_proto::envoy::ratelimit::RateLimitRequest;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use tokio::sync::Semaphore;
use tonic::transport::Channel;

/// Picks keys: one hot key, or Zipf(s = 1) over `n` keys.
#[derive(Clone)]
pub struct KeyPicker {
    cumulative: Arc<Vec<f64>>,
}

impl KeyPicker {
    /// Zipf over `n` keys (n = 1: a single hot key).
    pub fn zipf(n: usize) -> Self {
        let mut acc = 0.0;
        let cumulative = (1..=n.max(1))
            .map(|k| {
                acc += 1.0 / k as f64;
                acc
            })
            .collect();
        Self {
            cumulative: Arc::new(cumulative),
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.cumulative.len()
    }

    /// The key index for a uniform sample `u` in [0, 1).
    pub fn pick(&self, u: f64) -> usize {
        let total = *self.cumulative.last().unwrap_or(&1.0);
        let target = u * total;
        self.cumulative
            .partition_point(|c| *c < target)
            .min(self.len() - 1)
    }
}

/// Per-key admitted counts, sampled over time.
pub struct Tally {
    /// Admitted per key.
    pub admitted: Vec<AtomicU64>,
    /// Requests sent per key.
    pub sent: Vec<AtomicU64>,
    /// gRPC errors.
    pub errors: AtomicU64,
    /// Keys a sidecar was sent for the first time, over all sidecars: each needs a store call
    /// (nothing is known of a key a sidecar never saw), the floor of a key set's store calls
    /// when no call waits for others to share its round trip.
    pub first_sights: AtomicU64,
    /// Latencies in microseconds, with the send time (ms since start).
    pub latencies: std::sync::Mutex<Vec<(u64, u64)>>,
    /// Every request on the Unix clock, for per-window checks.
    pub log: crate::windows::Log,
}

impl Tally {
    /// A tally for `keys` keys.
    pub fn new(keys: usize) -> Arc<Self> {
        Arc::new(Self {
            admitted: (0..keys).map(|_| AtomicU64::new(0)).collect(),
            sent: (0..keys).map(|_| AtomicU64::new(0)).collect(),
            errors: AtomicU64::new(0),
            first_sights: AtomicU64::new(0),
            latencies: std::sync::Mutex::new(Vec::new()),
            log: crate::windows::Log::default(),
        })
    }

    /// Total admitted.
    pub fn total_admitted(&self) -> u64 {
        self.admitted
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum()
    }
}

fn request(key: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "acc".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: format!("key-{key}"),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// Sends `rate` requests per second to `client` until `until`, counting into `tally`. With
/// `in_step`, every driver sends its k-th request at the same moment, `(k - 1/2) / rate`
/// (the worst case for leases: every sidecar asks at once); otherwise each starts at a phase
/// of its own, from `seed`.
#[allow(clippy::too_many_arguments)]
pub async fn drive(
    client: RateLimitServiceClient<Channel>,
    rate: f64,
    keys: KeyPicker,
    tally: Arc<Tally>,
    start: Instant,
    until: Instant,
    seed: u64,
    in_step: bool,
) {
    let inflight = Arc::new(Semaphore::new(256));
    // The Unix clock windows are aligned to (as Redis TIME is).
    let unix = sluice_core::SystemClock::new();
    let mut rng = seed | 1;
    // Each sidecar's requests start at a phase of their own (a fraction of one gap, from the
    // seed): with one start for all, every sidecar sent its k-th request at k/rate, so 128
    // sidecars at 0.6 req/s each sent 128 requests in the same millisecond every 1.6 s, more
    // than the burst, and denials a real token bucket makes too counted as "under the ideal".
    let phase = if in_step {
        0.5
    } else {
        (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut sent = 0u64;
    let mut seen = vec![false; keys.len()];
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while Instant::now() < until {
        tick.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate + phase) as u64;
        while sent < due {
            sent += 1;
            // xorshift64*: a small, fast PRNG is all key picking needs.
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            let u = (rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64;
            let key = keys.pick(u);
            if !std::mem::replace(&mut seen[key], true) {
                tally.first_sights.fetch_add(1, Ordering::Relaxed);
            }
            let Ok(permit) = Arc::clone(&inflight).acquire_owned().await else {
                return;
            };
            let mut client = client.clone();
            let tally = Arc::clone(&tally);
            tokio::spawn(async move {
                use sluice_core::Clock as _;
                let _permit = permit;
                let sent_at = Instant::now();
                let sent_unix = unix.now_micros();
                tally.sent[key].fetch_add(1, Ordering::Relaxed);
                let mut admitted = false;
                match client.should_rate_limit(request(key)).await {
                    Ok(r) => {
                        if r.into_inner().overall_code == Code::Ok as i32 {
                            tally.admitted[key].fetch_add(1, Ordering::Relaxed);
                            admitted = true;
                        }
                    }
                    Err(_) => {
                        tally.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tally.log.push(crate::windows::Record {
                    sent: sent_unix,
                    answered: unix.now_micros(),
                    key,
                    admitted,
                });
                let micros = sent_at.elapsed().as_micros() as u64;
                let at_ms = sent_at.duration_since(start).as_millis() as u64;
                if let Ok(mut l) = tally.latencies.lock() {
                    l.push((at_ms, micros));
                }
            });
        }
    }
    // Let in-flight requests finish.
    let _ = inflight.acquire_many(256).await;
}
