//! Until when a node certainly holds its owner lease, as the store last confirmed it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Until when this node certainly holds its owner lease.
pub(crate) struct LeaseClock {
    base: tokio::time::Instant,
    /// Nanoseconds from `base`.
    until: AtomicU64,
}

impl LeaseClock {
    pub fn new(until: tokio::time::Instant) -> Self {
        let base = tokio::time::Instant::now();
        let clock = LeaseClock {
            base,
            until: AtomicU64::new(0),
        };
        clock.renewed(until);
        clock
    }

    /// A renewal sent at `until` minus the TTL was confirmed.
    pub fn renewed(&self, until: tokio::time::Instant) {
        let nanos = until.saturating_duration_since(self.base).as_nanos();
        self.until
            .fetch_max(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::AcqRel);
    }

    pub fn until(&self) -> tokio::time::Instant {
        self.base + Duration::from_nanos(self.until.load(Ordering::Acquire))
    }

    /// Whether the lease is certainly still held now.
    pub fn held(&self) -> bool {
        tokio::time::Instant::now() < self.until()
    }
}
