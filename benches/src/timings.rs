//! Every timed round trip or pause a bench records, and the percentiles it prints: criterion
//! reports means only.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Durations from 1 µs to 100 s, to three significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// Records one duration.
pub fn record(hist: &mut Histogram<u64>, took: Duration) {
    hist.saturating_record(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
}

/// The duration at quantile `q`, in microseconds.
pub fn micros(hist: &Histogram<u64>, q: f64) -> f64 {
    hist.value_at_quantile(q) as f64 / 1_000.0
}
