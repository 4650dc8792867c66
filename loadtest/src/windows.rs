//! What the accuracy harness checks for window algorithms: every request's send and answer
//! times on the Unix clock (the one Redis `TIME` and the sidecars align windows to), and per
//! aligned window what was admitted against the limit.
//!
//! A request is known to have been decided somewhere between its send and its answer. Counting
//! only the admissions whose whole interval lies in a window gives a count that is surely in it
//! (never more than the truth): if that is over `L`, the window was over. Counting every
//! admission whose interval touches the window gives the most it can have been (at least the
//! truth). Both are reported; the never-over check uses the sure count, so a request answered
//! just after a window's edge is never blamed on the wrong window.

use std::sync::Mutex;

/// One request: when it was sent and answered (µs since the Unix epoch), its key, and whether it
/// was admitted.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    /// Sent at.
    pub sent: u64,
    /// Answered at.
    pub answered: u64,
    /// The key's index.
    pub key: usize,
    /// Admitted.
    pub admitted: bool,
}

/// Every request of a run.
#[derive(Debug, Default)]
pub struct Log {
    records: Mutex<Vec<Record>>,
}

impl Log {
    /// Adds a request.
    pub fn push(&self, r: Record) {
        if let Ok(mut v) = self.records.lock() {
            v.push(r);
        }
    }

    /// Every request so far.
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Per-window results of one run.
#[derive(Debug, Default)]
pub struct WindowReport {
    /// (key, window) pairs seen.
    pub windows: usize,
    /// Windows whose sure count is over the limit.
    pub over: usize,
    /// The most admitted surely in one window.
    pub worst_sure: u64,
    /// The most admitted that could have been in one window.
    pub worst_possible: u64,
    /// Admitted in the windows wholly inside the run.
    pub admitted: u64,
    /// The ideal for those windows: per window, what was offered up to the limit.
    pub ideal: u64,
}

/// Checks `records` against `limit` per window of `period` µs. Only windows wholly inside the
/// run (from the first send to the last answer) count towards `admitted` and `ideal`.
pub fn check(records: &[Record], limit: u64, period: u64) -> WindowReport {
    use std::collections::BTreeMap;
    let (Some(first), Some(last)) = (
        records.iter().map(|r| r.sent).min(),
        records.iter().map(|r| r.answered).max(),
    ) else {
        return WindowReport::default();
    };
    // (key, window) → (sure admitted, possible admitted, sent)
    let mut by: BTreeMap<(usize, u64), (u64, u64, u64)> = BTreeMap::new();
    for r in records {
        let (from, to) = (r.sent / period, r.answered / period);
        by.entry((r.key, from)).or_default().2 += 1;
        if !r.admitted {
            continue;
        }
        if from == to {
            by.entry((r.key, from)).or_default().0 += 1;
        }
        for w in from..=to {
            by.entry((r.key, w)).or_default().1 += 1;
        }
    }
    let mut report = WindowReport {
        windows: by.len(),
        ..WindowReport::default()
    };
    for (&(_, w), &(sure, possible, sent)) in &by {
        report.worst_sure = report.worst_sure.max(sure);
        report.worst_possible = report.worst_possible.max(possible);
        report.over += usize::from(sure > limit);
        let whole = w * period >= first && (w + 1) * period <= last;
        if whole {
            report.admitted += sure;
            report.ideal += sent.min(limit);
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(sent: u64, answered: u64) -> Record {
        Record {
            sent,
            answered,
            key: 0,
            admitted: true,
        }
    }

    #[test]
    fn a_request_straddling_an_edge_is_surely_in_neither_window() {
        let records = [
            admitted(100, 200),
            admitted(900, 1_100),
            admitted(1_200, 1_300),
            admitted(2_500, 2_600),
        ];
        let r = check(&records, 1, 1_000);
        assert_eq!((r.worst_sure, r.worst_possible, r.over), (1, 2, 0));
        // Only window 1 ([1000, 2000)) lies wholly inside [100, 2600].
        assert_eq!((r.admitted, r.ideal), (1, 1));
    }

    #[test]
    fn more_than_the_limit_surely_in_a_window_is_over() {
        let records = [admitted(10, 20), admitted(30, 40), admitted(50, 60)];
        assert_eq!(check(&records, 2, 1_000).over, 1);
    }
}
