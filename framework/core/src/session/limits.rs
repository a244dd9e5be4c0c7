//! The token bucket that paces a client: `burst` frames at once, then `rate` frames per second.
//! Time is passed in, so it is tested without a clock.

use std::time::Instant;

/// A token bucket.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate_per_second: u32, burst: u32, now: Instant) -> Self {
        TokenBucket {
            rate: f64::from(rate_per_second),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: now,
        }
    }

    /// Takes one token; false when the bucket is empty.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now.max(self.last);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(10, 3, t0);
        assert!((0..3).all(|_| bucket.take(t0)));
        assert!(!bucket.take(t0));
        // A tenth of a second buys one more frame, and only one.
        let t1 = t0 + Duration::from_millis(100);
        assert!(bucket.take(t1));
        assert!(!bucket.take(t1));
        // A long pause refills to the burst, not beyond.
        let t2 = t1 + Duration::from_secs(60);
        assert!((0..3).all(|_| bucket.take(t2)));
        assert!(!bucket.take(t2));
    }
}
