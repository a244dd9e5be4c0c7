//! Group commit: which of a node's conditional store writes go to the store together, and when.
//!
//! A drain moves thousands of units, and each move's target commits its records with one
//! conditional write. Sent one by one, every write pays its own round trip to the store (and,
//! on Redis with replicas, its own `WAIT`). A [`Batcher`] lets writes that are ready at about the
//! same time share one call, without holding any of them back for long:
//!
//! - a write that finds nothing pending and no call in flight goes at once: an idle node adds
//!   no latency;
//! - writes that come while a call is in flight join a pending batch, which goes as soon as any
//!   call in flight is answered (the store is free again), as soon as it holds [`MAX`] writes,
//!   or once its oldest write has waited [`WINDOW`], whichever comes first.
//!
//! So no write waits longer than [`WINDOW`] for its call to be sent. The batcher counts writes;
//! the runtime keeps the writes themselves, in the order they came, and sends the oldest
//! [`Flush::count`] of them when told. Time comes in as a value.

use std::time::{Duration, Instant};

/// The longest a write waits for others to share its call.
///
/// It applies only while another call is in flight, and a pending batch goes as soon as any call
/// is answered, so it bounds the wait only when the store is slow. A commit on loopback Redis
/// answers in 100 to 300 µs; 500 µs lets the writes that arrive during one such call wait for it,
/// while costing a move at most a sixth of its 3 ms pause budget on Redis: past that, a second
/// call in flight costs less than waiting longer.
pub const WINDOW: Duration = Duration::from_micros(500);

/// The most writes one call carries.
///
/// Every write of a call hears its answer when the whole call is answered, after the store has
/// applied the writes before it: on Redis each is a script run of some tens of µs. 32 writes keep
/// that under a millisecond while sharing one round trip 32 ways; a drain moves 128 units at once
/// over its targets, so a busy target fills a batch in one round trip's time.
pub const MAX: usize = 32;

/// Send the oldest `count` pending writes to the store as one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the writes wait until they are sent"]
pub struct Flush {
    /// How many writes the call carries: every write pending, at most [`MAX`].
    pub count: usize,
}

/// Decides when a node's pending writes go to the store; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Batcher {
    /// Writes waiting to be sent.
    pending: usize,
    /// When the oldest pending write came.
    oldest: Option<Instant>,
    /// Calls sent and not answered yet.
    in_flight: usize,
}

impl Batcher {
    /// A batcher with nothing pending and nothing in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// A write is ready at `now`: it goes at once, or joins the pending batch.
    pub fn push(&mut self, now: Instant) -> Option<Flush> {
        self.pending += 1;
        let oldest = *self.oldest.get_or_insert(now);
        let idle = self.pending == 1 && self.in_flight == 0;
        if idle || self.pending >= MAX || now >= oldest + WINDOW {
            self.flush()
        } else {
            None
        }
    }

    /// When the pending batch must go, if anything is pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.oldest.map(|oldest| oldest + WINDOW)
    }

    /// Time has come to `now`: the pending batch goes if its oldest write waited [`WINDOW`].
    pub fn handle_timeout(&mut self, now: Instant) -> Option<Flush> {
        match self.oldest {
            Some(oldest) if now >= oldest + WINDOW => self.flush(),
            _ => None,
        }
    }

    /// A call was answered: the store is free again, so what is pending goes now.
    pub fn flushed(&mut self) -> Option<Flush> {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.flush()
    }

    /// Writes waiting to be sent.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Calls sent and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn flush(&mut self) -> Option<Flush> {
        if self.pending == 0 {
            return None;
        }
        let count = std::mem::take(&mut self.pending);
        self.oldest = None;
        self.in_flight += 1;
        Some(Flush { count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at() -> Instant {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *START.get_or_init(Instant::now)
    }

    fn us(micros: u64) -> Instant {
        at() + Duration::from_micros(micros)
    }

    #[test]
    fn a_lone_write_on_an_idle_node_goes_at_once() {
        let mut batcher = Batcher::new();
        assert_eq!(batcher.push(us(0)), Some(Flush { count: 1 }));
        assert_eq!(batcher.poll_timeout(), None);
        assert_eq!(batcher.flushed(), None);
        // Idle again: the next lone write goes at once too.
        assert_eq!(batcher.push(us(10_000)), Some(Flush { count: 1 }));
    }

    #[test]
    fn writes_behind_a_call_in_flight_wait_and_go_together_when_it_is_answered() {
        let mut batcher = Batcher::new();
        assert!(batcher.push(us(0)).is_some());
        assert_eq!(batcher.push(us(10)), None);
        assert_eq!(batcher.push(us(20)), None);
        assert_eq!(batcher.push(us(30)), None);
        assert_eq!(batcher.poll_timeout(), Some(us(10) + WINDOW));
        assert_eq!(batcher.flushed(), Some(Flush { count: 3 }));
        assert_eq!((batcher.pending(), batcher.in_flight()), (0, 1));
        assert_eq!(batcher.poll_timeout(), None);
    }

    #[test]
    fn a_full_batch_goes_without_waiting_for_the_window() {
        let mut batcher = Batcher::new();
        assert!(batcher.push(us(0)).is_some());
        for i in 1..MAX {
            assert_eq!(batcher.push(us(i as u64)), None, "write {i}");
        }
        assert_eq!(batcher.push(us(MAX as u64)), Some(Flush { count: MAX }));
        assert_eq!((batcher.pending(), batcher.in_flight()), (0, 2));
    }

    #[test]
    fn a_batch_goes_once_its_oldest_write_waited_the_window_even_with_a_call_in_flight() {
        let mut batcher = Batcher::new();
        assert!(batcher.push(us(0)).is_some());
        assert_eq!(batcher.push(us(100)), None);
        assert_eq!(batcher.push(us(300)), None);
        let due = batcher.poll_timeout().expect("pending");
        assert_eq!(due, us(100) + WINDOW);
        assert_eq!(batcher.handle_timeout(due - Duration::from_micros(1)), None);
        assert_eq!(batcher.handle_timeout(due), Some(Flush { count: 2 }));
        assert_eq!(batcher.in_flight(), 2);
        // A driver that woke late still sends a write past its window when the next one comes.
        assert_eq!(batcher.push(us(1_000)), None);
        assert_eq!(batcher.push(us(2_000)), Some(Flush { count: 2 }));
    }

    #[test]
    fn an_answer_with_nothing_pending_sends_nothing() {
        let mut batcher = Batcher::new();
        assert!(batcher.push(us(0)).is_some());
        assert!(batcher.push(us(0)).is_none());
        assert!(batcher.handle_timeout(us(0) + WINDOW).is_some());
        assert_eq!(batcher.flushed(), None);
        assert_eq!(batcher.flushed(), None);
        assert_eq!(batcher.in_flight(), 0);
        assert_eq!(batcher.push(us(5_000)), Some(Flush { count: 1 }));
    }

    /// What a driver may do next: a write comes some µs later, or the oldest call in flight is
    /// answered some µs later, or some writes come at once.
    #[derive(Debug, Clone)]
    enum Step {
        Write(u16),
        Answer(u16),
        Burst(u8),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            3 => (0u16..800).prop_map(Step::Write),
            // Enough at once to fill a batch before its window ends.
            1 => (2u8..80).prop_map(Step::Burst),
            1 => (0u16..2_000).prop_map(Step::Answer),
        ];
        proptest::collection::vec(step, 1..300)
    }

    /// A driver's account of the writes it handed the batcher.
    #[derive(Default)]
    struct Driver {
        /// When each write not sent yet came, oldest first.
        waiting: std::collections::VecDeque<Instant>,
        /// Calls sent and not answered.
        calls: usize,
        wrote: usize,
        sent: usize,
    }

    impl Driver {
        fn write(&mut self, batcher: &mut Batcher, now: Instant) -> Result<(), TestCaseError> {
            let idle = batcher.pending() == 0 && batcher.in_flight() == 0;
            self.waiting.push_back(now);
            self.wrote += 1;
            let flush = batcher.push(now);
            if idle {
                prop_assert_eq!(flush, Some(Flush { count: 1 }));
            }
            self.send(flush, now)
        }

        fn send(&mut self, flush: Option<Flush>, now: Instant) -> Result<(), TestCaseError> {
            let Some(Flush { count }) = flush else {
                return Ok(());
            };
            prop_assert!((1..=MAX).contains(&count));
            prop_assert_eq!(
                count,
                self.waiting.len(),
                "a flush sends every pending write"
            );
            for came in self.waiting.drain(..) {
                prop_assert!(now - came <= WINDOW, "a write waited {:?}", now - came);
            }
            self.calls += 1;
            self.sent += count;
            Ok(())
        }
    }

    proptest! {
        /// Driven as the runtime drives it (woken at `poll_timeout`), every write is sent exactly
        /// once, in order, within the window, in calls of at most MAX; and a write that finds the
        /// batcher idle goes at once.
        #[test]
        fn no_write_waits_longer_than_the_window(steps in steps()) {
            let mut batcher = Batcher::new();
            let mut driver = Driver::default();
            let mut now = at();
            for step in steps {
                let after = match step {
                    Step::Write(after) | Step::Answer(after) => after,
                    Step::Burst(_) => 0,
                };
                let later = now + Duration::from_micros(after.into());
                // The runtime's timer fires first if it is due before the next event.
                while let Some(due) = batcher.poll_timeout().filter(|due| *due <= later) {
                    now = due;
                    let flush = batcher.handle_timeout(now);
                    prop_assert!(flush.is_some(), "a due timeout sends the batch");
                    driver.send(flush, now)?;
                }
                now = later;
                match step {
                    Step::Write(_) => driver.write(&mut batcher, now)?,
                    Step::Burst(writes) => {
                        for _ in 0..writes {
                            driver.write(&mut batcher, now)?;
                        }
                    }
                    Step::Answer(_) if driver.calls > 0 => {
                        prop_assert_eq!(batcher.in_flight(), driver.calls);
                        driver.calls -= 1;
                        driver.send(batcher.flushed(), now)?;
                    }
                    Step::Answer(_) => {}
                }
                prop_assert_eq!(batcher.pending(), driver.waiting.len());
                prop_assert!(batcher.pending() < MAX);
            }
            // Whatever is left goes at its timeout.
            if let Some(due) = batcher.poll_timeout() {
                driver.send(batcher.handle_timeout(due), due)?;
            }
            prop_assert!(driver.waiting.is_empty());
            prop_assert_eq!(driver.sent, driver.wrote);
        }
    }
}
