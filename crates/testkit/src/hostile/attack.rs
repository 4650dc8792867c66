//! The attacks of issue 41 on a running sluice: what each kind of hostile call sends
//! ([`Attack`]), scenarios of many of them from several loopback addresses ([`Scenario`]), and
//! what the server's memory did meanwhile ([`Outcome`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry;
use sluice_proto::envoy::ratelimit::RateLimitRequest;
use sluice_proto::envoy::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluice_proto::envoy::rlqs::{BucketId, RateLimitQuotaUsageReports};

use super::{Client, End, Open, frame, peak_rss, rss_bytes};

const RLS: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const RLQS: &str = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// One kind of hostile call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// A ShouldRateLimit whose message says 4 MiB and stops 100 bytes short, never ended.
    PartialRls,
    /// A ShouldRateLimit whose 100-byte message stops after 50 bytes, never ended.
    SmallPartialRls,
    /// A whole ShouldRateLimit on a connection that never reads an answer.
    UnreadRls,
    /// The 4 MiB partial message on an RLQS stream.
    PartialRlqs,
    /// An RLQS stream that sends nothing.
    IdleRlqs,
    /// An RLQS stream reporting 4 096 buckets (ids of ~60 bytes), never reading an answer.
    RlqsBuckets,
    /// A Health/Watch of the server's overall status.
    HealthWatch,
    /// A reflection stream that sends nothing.
    IdleReflection,
}

impl Attack {
    /// Whether its connection grants the server no window (never reads an answer).
    pub fn unread(self) -> bool {
        matches!(self, Attack::UnreadRls | Attack::RlqsBuckets)
    }

    /// Opens the call on `client`.
    pub async fn open(self, client: &mut Client) -> std::io::Result<Open> {
        // Built once and shared by every stream (a `Bytes` clone is a reference).
        static PARTIAL: LazyLock<Bytes> = LazyLock::new(|| {
            const PROMISED: u32 = 4 << 20;
            frame(PROMISED, &vec![0u8; PROMISED as usize - 100])
        });
        static REQUEST: LazyLock<Bytes> = LazyLock::new(|| message(&rls_request()));
        static BUCKETS: LazyLock<Bytes> = LazyLock::new(|| message(&bucket_reports()));
        let none = Bytes::new;
        match self {
            Attack::PartialRls => client.open(RLS, PARTIAL.clone(), false).await,
            Attack::SmallPartialRls => client.open(RLS, frame(100, &[0; 50]), false).await,
            Attack::UnreadRls => client.open(RLS, REQUEST.clone(), true).await,
            Attack::PartialRlqs => client.open(RLQS, PARTIAL.clone(), false).await,
            Attack::IdleRlqs => client.open(RLQS, none(), false).await,
            Attack::RlqsBuckets => client.open(RLQS, BUCKETS.clone(), false).await,
            Attack::HealthWatch => {
                let path = "/grpc.health.v1.Health/Watch";
                client.open(path, frame(0, &[]), true).await
            }
            Attack::IdleReflection => {
                let path = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
                client.open(path, none(), false).await
            }
        }
    }
}

fn message(m: &impl prost::Message) -> Bytes {
    let bytes = m.encode_to_vec();
    frame(u32::try_from(bytes.len()).expect("small"), &bytes)
}

fn rls_request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "v".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

fn bucket_reports() -> RateLimitQuotaUsageReports {
    let usage = |i: u32| BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: [
                ("name".to_string(), format!("bucket-{i:08}")),
                (
                    "user".to_string(),
                    format!("someone-with-a-longer-name-{i:08}"),
                ),
            ]
            .into(),
        }),
        time_elapsed: Some(Default::default()),
        num_requests_allowed: 1,
        num_requests_denied: 0,
    };
    RateLimitQuotaUsageReports {
        domain: "edge".into(),
        bucket_quota_usages: (0..4096).map(usage).collect(),
    }
}

/// `calls` opened (each as many times as it says) on each of `connections` connections from
/// each of `addresses` loopback addresses (127.0.0.1, .2, …).
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Its name in a report.
    pub name: &'static str,
    /// Client addresses.
    pub addresses: u8,
    /// Connections from each.
    pub connections: usize,
    /// What each connection opens.
    pub calls: Vec<(Attack, usize)>,
}

/// What a scenario did to the server.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// RSS before, at its peak, at the end of the hold, and 2 s after the clients left (bytes).
    pub rss: [u64; 4],
    /// Streams the server let the clients open.
    pub opened: usize,
    /// How the streams the server ended ended, counted.
    pub ends: BTreeMap<String, usize>,
    /// Streams still open at the end of the hold.
    pub still_open: usize,
    /// Connections refused or closed by the server.
    pub connections_lost: usize,
}

impl Outcome {
    /// The peak's growth over the RSS before, in MiB.
    pub fn growth_mib(&self) -> f64 {
        (self.rss[1].saturating_sub(self.rss[0])) as f64 / (1 << 20) as f64
    }
}

/// Runs `scenario` against the server at `server` (process `pid`), holding what it opened for
/// `hold` from its start.
pub async fn run(server: SocketAddr, pid: u32, scenario: &Scenario, hold: Duration) -> Outcome {
    let before = rss_bytes(pid);
    let started = Instant::now();
    let (peak, (clients, open, refused)) = peak_rss(pid, Duration::from_millis(50), async {
        let (mut clients, mut open, mut refused) = (Vec::new(), Vec::new(), 0);
        let unread = scenario.calls.iter().any(|(a, _)| a.unread());
        let window = if unread { 0 } else { u32::MAX >> 1 };
        for a in 0..scenario.addresses {
            let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + a));
            for _ in 0..scenario.connections {
                let Ok(mut client) = Client::connect_with_window(server, from, window).await else {
                    refused += 1;
                    continue;
                };
                for &(attack, n) in &scenario.calls {
                    for _ in 0..n {
                        let opened =
                            tokio::time::timeout(Duration::from_secs(2), attack.open(&mut client));
                        match opened.await {
                            Ok(Ok(stream)) => open.push(stream),
                            _ => break,
                        }
                    }
                }
                clients.push(client);
            }
        }
        tokio::time::sleep(hold.saturating_sub(started.elapsed())).await;
        // Until the server's answers stop arriving (a loaded server may still be refusing).
        let ended = |open: &Vec<Open>| open.iter().filter(|s| s.end().is_some()).count();
        for _ in 0..20 {
            let before = ended(&open);
            tokio::time::sleep(Duration::from_millis(500)).await;
            if ended(&open) == before {
                break;
            }
        }
        (clients, open, refused)
    })
    .await;
    let after = rss_bytes(pid);
    let mut ends: BTreeMap<String, usize> = BTreeMap::new();
    for end in open.iter().filter_map(Open::end) {
        let how = match end {
            End::Status(code) => format!("status {code}"),
            End::Reset(reason) => format!("reset {reason:?}"),
            End::Gone(_) => "connection gone".to_string(),
        };
        *ends.entry(how).or_default() += 1;
    }
    let still_open = open.iter().filter(|s| s.end().is_none()).count();
    let connections_lost = refused + clients.iter().filter(|c| !c.is_open()).count();
    let opened = open.len();
    drop((clients, open));
    tokio::time::sleep(Duration::from_secs(2)).await;
    Outcome {
        rss: [before, peak, after, rss_bytes(pid)],
        opened,
        ends,
        still_open,
        connections_lost,
    }
}

/// Issue 41's attacks, each at the size the review measured, and every bound at once.
pub fn scenarios() -> Vec<Scenario> {
    let s = |name, addresses, connections, calls| Scenario {
        name,
        addresses,
        connections,
        calls,
    };
    use Attack::*;
    vec![
        s("partial-rls", 1, 1, vec![(PartialRls, 64)]),
        s("partial-rlqs", 1, 1, vec![(PartialRlqs, 64)]),
        s(
            "idle-streams",
            1,
            16,
            vec![(IdleRlqs, 500), (HealthWatch, 500)],
        ),
        s("reflection", 1, 16, vec![(IdleReflection, 500)]),
        s("unread-answers", 1, 8, vec![(UnreadRls, 1024)]),
        s("rlqs-buckets", 1, 4, vec![(RlqsBuckets, 8)]),
        s("connections", 4, 64, vec![]),
        s("partial-everywhere", 4, 64, vec![(PartialRls, 32)]),
        everything(),
        everything_heavy(),
    ]
}

/// Every bound at its limit at once, from four addresses: the server's 256 connections, each
/// with partial and unfinished messages (more than request bytes admit), and idle streams of
/// every long-lived kind past their caps.
pub fn everything() -> Scenario {
    use Attack::*;
    Scenario {
        name: "everything",
        addresses: 4,
        connections: 64,
        calls: vec![
            (PartialRls, 8),
            (SmallPartialRls, 24),
            (PartialRlqs, 4),
            (IdleRlqs, 24),
            (HealthWatch, 16),
            (IdleReflection, 8),
        ],
    }
}

/// [`everything`] with three times the calls a connection opens (67 584 in all, almost all
/// refused): what the allocator keeps after a storm of refusals.
pub fn everything_heavy() -> Scenario {
    use Attack::*;
    Scenario {
        name: "everything-heavy",
        calls: vec![
            (PartialRls, 32),
            (SmallPartialRls, 32),
            (PartialRlqs, 8),
            (IdleRlqs, 64),
            (HealthWatch, 64),
            (IdleReflection, 64),
        ],
        ..everything()
    }
}
