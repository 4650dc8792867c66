//! `sluice_request_bytes_held` and `sluice_long_streams{kind}`.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, IntGaugeVec, Opts};

use super::{Admission, LongKind};

/// `sluice_request_bytes_held` and `sluice_long_streams{kind}`, read from an [`Admission`] when
/// scraped (nothing on the request path updates a gauge).
pub struct Gauges {
    admission: Arc<Admission>,
    bytes: IntGauge,
    long: IntGaugeVec,
}

impl Gauges {
    /// The gauges of `admission`, to register.
    pub fn new(admission: Arc<Admission>) -> prometheus::Result<Self> {
        Ok(Self {
            admission,
            bytes: IntGauge::new(
                "sluice_request_bytes_held",
                "Request bytes gRPC clients hold open now (docs/security.md)",
            )?,
            long: IntGaugeVec::new(
                Opts::new(
                    "sluice_long_streams",
                    "Long-lived gRPC calls open now, by kind",
                ),
                &["kind"],
            )?,
        })
    }
}

impl Collector for Gauges {
    fn desc(&self) -> Vec<&Desc> {
        let mut desc = self.bytes.desc();
        desc.extend(self.long.desc());
        desc
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let usage = self.admission.usage();
        self.bytes
            .set(i64::try_from(usage.bytes()).unwrap_or(i64::MAX));
        for kind in LongKind::ALL {
            self.long
                .with_label_values(&[kind.label()])
                .set(i64::try_from(usage.long(kind)).unwrap_or(i64::MAX));
        }
        let mut families = self.bytes.collect();
        families.extend(self.long.collect());
        families
    }
}
