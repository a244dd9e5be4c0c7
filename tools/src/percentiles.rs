//! Percentiles of durations (unit pauses, gaps between server ticks), kept in an HDR histogram so
//! that p99.9 and the maximum stay exact enough however many samples a run records.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The largest duration a histogram records exactly; longer ones are clamped to it (an hour).
const HIGHEST_US: u64 = 3_600_000_000;

/// A duration in milliseconds, to the microsecond: whole microseconds divided once, so a report
/// prints `31128.676`, not the noise of a float product such as `31128.676000000002`.
pub fn ms(duration: Duration) -> f64 {
    duration.as_micros() as f64 / 1_000.0
}

/// A duration in seconds, to the microsecond, divided once for the same reason.
pub fn secs(duration: Duration) -> f64 {
    duration.as_micros() as f64 / 1_000_000.0
}

/// Durations recorded in microseconds with three significant digits.
#[derive(Debug, Clone)]
pub struct Durations {
    histogram: Histogram<u64>,
}

impl Default for Durations {
    fn default() -> Self {
        Self::new()
    }
}

impl Durations {
    /// An empty record.
    pub fn new() -> Self {
        let histogram = Histogram::new_with_bounds(1, HIGHEST_US, 3)
            .expect("constant bounds: 1 us to an hour at three significant digits");
        Durations { histogram }
    }

    /// Records one duration.
    pub fn record(&mut self, duration: Duration) {
        let us = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(us.clamp(1, HIGHEST_US));
    }

    /// Adds every duration another record holds.
    pub fn merge(&mut self, other: &Durations) {
        for value in other.histogram.iter_recorded() {
            self.histogram
                .saturating_record_n(value.value_iterated_to(), value.count_at_value());
        }
    }

    /// The duration in microseconds that a share `q` (0 to 1) of the durations do not exceed;
    /// 0 when nothing was recorded.
    pub fn at(&self, q: f64) -> u64 {
        if self.histogram.is_empty() {
            0
        } else if q >= 1.0 {
            self.histogram.max()
        } else {
            self.histogram.value_at_quantile(q)
        }
    }

    /// How many durations were longer than `us` microseconds (to the histogram's three
    /// significant digits).
    pub fn count_above(&self, us: u64) -> u64 {
        self.histogram.len() - self.histogram.count_between(0, us)
    }

    /// The summary printed and written to JSON.
    pub fn summary(&self) -> Percentiles {
        Percentiles {
            count: self.histogram.len(),
            p50_us: self.at(0.5),
            p99_us: self.at(0.99),
            p999_us: self.at(0.999),
            max_us: self.at(1.0),
        }
    }
}

/// A distribution of durations in microseconds (all zero when nothing was recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    /// How many durations.
    pub count: u64,
    /// The median (50th percentile).
    pub p50_us: u64,
    /// The 99th percentile.
    pub p99_us: u64,
    /// The 99.9th percentile.
    pub p999_us: u64,
    /// The longest duration recorded.
    pub max_us: u64,
}

/// A duration in microseconds as a person reads it: `850 us`, `12.3 ms`, `1.20 s`.
pub fn readable_us(us: u64) -> String {
    if us < 1_000 {
        format!("{us} us")
    } else if us < 1_000_000 {
        format!("{:.1} ms", us as f64 / 1_000.0)
    } else {
        format!("{:.2} s", us as f64 / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_record_summarises_to_zeros() {
        let summary = Durations::new().summary();
        assert_eq!(summary.count, 0);
        assert_eq!(summary.max_us, 0);
        assert_eq!(summary.p50_us, 0);
    }

    #[test]
    fn percentiles_and_maximum_follow_the_samples() {
        let mut record = Durations::new();
        for ms in 1..=100 {
            record.record(Duration::from_millis(ms));
        }
        let summary = record.summary();
        assert_eq!(summary.count, 100);
        // Three significant digits: within 0.1% of the true values.
        assert!((49_950..=50_050).contains(&summary.p50_us), "{summary:?}");
        assert!((98_900..=99_100).contains(&summary.p99_us), "{summary:?}");
        assert!((99_900..=100_100).contains(&summary.max_us), "{summary:?}");
    }

    #[test]
    fn durations_above_a_bound_are_counted() {
        let mut record = Durations::new();
        for ms in [33, 34, 40, 70, 100] {
            record.record(Duration::from_millis(ms));
        }
        assert_eq!(record.count_above(66_667), 2);
        assert_eq!(record.count_above(200_000), 0);
    }

    #[test]
    fn merged_records_hold_both() {
        let mut a = Durations::new();
        a.record(Duration::from_micros(10));
        let mut b = Durations::new();
        b.record(Duration::from_secs(2));
        a.merge(&b);
        assert_eq!(a.summary().count, 2);
        assert!(a.summary().max_us >= 1_999_000);
    }

    #[test]
    fn durations_read_in_fitting_units() {
        assert_eq!(readable_us(850), "850 us");
        assert_eq!(readable_us(12_345), "12.3 ms");
        assert_eq!(readable_us(1_200_000), "1.20 s");
    }
}
