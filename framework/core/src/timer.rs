//! Timers as plain data: registrations, cursors and due ticks, with time passed in as a value.
//!
//! Nothing here reads a clock or sleeps. The unit's execution lane asks [`TimerSet::next_due`] when to
//! wake and [`TimerSet::take_due`] which ticks to run, so every overrun policy can be driven by a test
//! with made-up instants, and the whole set can be captured and shipped with its unit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// What a periodic timer does when its unit could not run a tick on time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OverrunPolicy {
    /// Run one tick for the latest missed slot and skip the older ones (the default: a game
    /// simulation wants the present, not a burst of the past).
    #[default]
    SkipLateTicks,
    /// Run missed ticks back to back, at most `max` beyond the current one; older ones are skipped.
    CatchUpBounded {
        /// How many missed ticks may be caught up at most.
        max: u32,
    },
    /// Run the late tick once and start the next period from the moment it ran (the schedule drifts).
    DelayNextTick,
}

/// One delivery of a timer to its unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    /// The timer's name, as registered.
    pub name: String,
    /// Which slot of the schedule this tick stands for (0 = the first due time).
    pub scheduled_index: u64,
    /// How many ticks of this timer were delivered before this one.
    pub delivery_index: u64,
    /// How many slots were skipped right before this tick because the unit ran late.
    pub skipped: u64,
}

/// A registration with its cursor: everything needed to carry on the schedule elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Registration {
    period: Duration,
    one_shot: bool,
    policy: OverrunPolicy,
    next_due: Instant,
    next_slot: u64,
    delivered: u64,
}

/// A timer registration in transit: due times are relative to the moment of capture, because
/// another host's clock has its own origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerSnapshot {
    /// The timer's name.
    pub name: String,
    /// Its period (for a one-shot timer, its delay).
    pub period: Duration,
    /// Whether it fires once.
    pub one_shot: bool,
    /// Its overrun policy.
    pub policy: OverrunPolicy,
    /// Time left until its next due slot at capture; zero when already due.
    pub due_in: Duration,
    /// How far past due it was at capture (so lateness is kept across a move).
    pub overdue_by: Duration,
    /// The index of its next slot.
    pub next_slot: u64,
    /// How many ticks it has delivered.
    pub delivered: u64,
}

/// The timers of one unit.
#[derive(Debug, Clone, Default)]
pub struct TimerSet {
    timers: BTreeMap<String, Registration>,
}

impl TimerSet {
    /// Registers (or replaces) a periodic timer whose first tick is one period from `now`.
    pub fn set_periodic(
        &mut self,
        name: &str,
        period: Duration,
        policy: OverrunPolicy,
        now: Instant,
    ) {
        // A zero period would spin the lane; one microsecond is the floor.
        let period = period.max(Duration::from_micros(1));
        self.insert(name, period, false, policy, now);
    }

    /// Registers (or replaces) a timer that fires once after `delay`.
    pub fn set_one_shot(&mut self, name: &str, delay: Duration, now: Instant) {
        self.insert(name, delay, true, OverrunPolicy::SkipLateTicks, now);
    }

    fn insert(
        &mut self,
        name: &str,
        period: Duration,
        one_shot: bool,
        policy: OverrunPolicy,
        now: Instant,
    ) {
        self.timers.insert(
            name.to_owned(),
            Registration {
                period,
                one_shot,
                policy,
                next_due: now + period,
                next_slot: 0,
                delivered: 0,
            },
        );
    }

    /// Removes a timer; returns whether it existed.
    pub fn cancel(&mut self, name: &str) -> bool {
        self.timers.remove(name).is_some()
    }

    /// Whether a timer of that name is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.timers.contains_key(name)
    }

    /// Whether no timer is registered.
    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }

    /// The earliest instant at which some timer is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.timers.values().map(|r| r.next_due).min()
    }

    /// Advances every timer due at `now` by its policy and returns the ticks to run, in due order.
    pub fn take_due(&mut self, now: Instant) -> Vec<Tick> {
        let mut due: Vec<(Instant, Tick)> = Vec::new();
        let mut finished = Vec::new();
        for (name, reg) in &mut self.timers {
            if reg.next_due > now {
                continue;
            }
            if reg.one_shot {
                due.push((reg.next_due, tick(name, reg.next_slot, reg.delivered, 0)));
                finished.push(name.clone());
                continue;
            }
            let late = late_slots(now - reg.next_due, reg.period);
            let first_due = reg.next_due;
            match reg.policy {
                OverrunPolicy::SkipLateTicks => {
                    let slot = reg.next_slot + late;
                    due.push((first_due, tick(name, slot, reg.delivered, late)));
                    reg.delivered += 1;
                    reg.next_slot = slot + 1;
                    reg.next_due = first_due + reg.period * to_u32(late + 1);
                }
                OverrunPolicy::CatchUpBounded { max } => {
                    let skipped = late.saturating_sub(u64::from(max));
                    let first = reg.next_slot + skipped;
                    for (i, slot) in (first..=reg.next_slot + late).enumerate() {
                        let skipped_here = if i == 0 { skipped } else { 0 };
                        let at = first_due + reg.period * to_u32(slot - reg.next_slot);
                        due.push((at, tick(name, slot, reg.delivered, skipped_here)));
                        reg.delivered += 1;
                    }
                    reg.next_slot += late + 1;
                    reg.next_due = first_due + reg.period * to_u32(late + 1);
                }
                OverrunPolicy::DelayNextTick => {
                    due.push((first_due, tick(name, reg.next_slot, reg.delivered, 0)));
                    reg.delivered += 1;
                    reg.next_slot += 1;
                    reg.next_due = now + reg.period;
                }
            }
        }
        for name in finished {
            self.timers.remove(&name);
        }
        // Stable sort keeps each timer's own ticks in slot order.
        due.sort_by_key(|(at, _)| *at);
        due.into_iter().map(|(_, t)| t).collect()
    }

    /// Captures every registration with its cursor, relative to `now`.
    pub fn snapshot(&self, now: Instant) -> Vec<TimerSnapshot> {
        self.timers
            .iter()
            .map(|(name, r)| TimerSnapshot {
                name: name.clone(),
                period: r.period,
                one_shot: r.one_shot,
                policy: r.policy,
                due_in: r.next_due.saturating_duration_since(now),
                overdue_by: now.saturating_duration_since(r.next_due),
                next_slot: r.next_slot,
                delivered: r.delivered,
            })
            .collect()
    }

    /// Rebuilds a timer set from a snapshot, anchoring its due times at `now`.
    pub fn restore(snapshots: Vec<TimerSnapshot>, now: Instant) -> Self {
        let timers = snapshots
            .into_iter()
            .map(|s| {
                let next_due = (now + s.due_in).checked_sub(s.overdue_by).unwrap_or(now);
                let reg = Registration {
                    period: s.period,
                    one_shot: s.one_shot,
                    policy: s.policy,
                    next_due,
                    next_slot: s.next_slot,
                    delivered: s.delivered,
                };
                (s.name, reg)
            })
            .collect();
        Self { timers }
    }
}

fn tick(name: &str, scheduled_index: u64, delivery_index: u64, skipped: u64) -> Tick {
    Tick {
        name: name.to_owned(),
        scheduled_index,
        delivery_index,
        skipped,
    }
}

/// How many whole periods fit in `lateness`: the slots that also passed after the due one.
fn late_slots(lateness: Duration, period: Duration) -> u64 {
    u64::try_from(lateness.as_nanos() / period.as_nanos().max(1)).unwrap_or(u64::MAX)
}

fn to_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Duration = Duration::from_millis(100);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn on_time_periodic_ticks_count_up() {
        let t0 = Instant::now();
        let mut set = TimerSet::default();
        set.set_periodic("sim", P, OverrunPolicy::SkipLateTicks, t0);
        assert!(set.take_due(t0 + ms(99)).is_empty());
        let first = set.take_due(t0 + ms(100));
        assert_eq!(first, vec![tick("sim", 0, 0, 0)]);
        assert_eq!(set.next_due(), Some(t0 + ms(200)));
        assert_eq!(set.take_due(t0 + ms(200)), vec![tick("sim", 1, 1, 0)]);
    }

    #[test]
    fn skip_late_ticks_runs_the_latest_slot_once() {
        let t0 = Instant::now();
        let mut set = TimerSet::default();
        set.set_periodic("sim", P, OverrunPolicy::SkipLateTicks, t0);
        // Slots 0..=3 are due at 100..=400 ms; at 450 ms three of them were missed.
        let ticks = set.take_due(t0 + ms(450));
        assert_eq!(ticks, vec![tick("sim", 3, 0, 3)]);
        assert_eq!(set.next_due(), Some(t0 + ms(500)));
        assert_eq!(set.take_due(t0 + ms(500)), vec![tick("sim", 4, 1, 0)]);
    }

    #[test]
    fn catch_up_bounded_runs_at_most_max_extra_ticks() {
        let t0 = Instant::now();
        let mut set = TimerSet::default();
        set.set_periodic("sim", P, OverrunPolicy::CatchUpBounded { max: 1 }, t0);
        let ticks = set.take_due(t0 + ms(450));
        assert_eq!(ticks, vec![tick("sim", 2, 0, 2), tick("sim", 3, 1, 0)]);
        assert_eq!(set.next_due(), Some(t0 + ms(500)));
    }

    #[test]
    fn catch_up_bounded_within_its_bound_skips_nothing() {
        let t0 = Instant::now();
        let mut set = TimerSet::default();
        set.set_periodic("sim", P, OverrunPolicy::CatchUpBounded { max: 5 }, t0);
        let slots: Vec<u64> = set
            .take_due(t0 + ms(350))
            .iter()
            .map(|t| t.scheduled_index)
            .collect();
        assert_eq!(slots, vec![0, 1, 2]);
    }

    #[test]
    fn delay_next_tick_restarts_the_period_from_the_late_run() {
        let t0 = Instant::now();
        let mut set = TimerSet::default();
        set.set_periodic("sim", P, OverrunPolicy::DelayNextTick, t0);
        assert_eq!(set.take_due(t0 + ms(450)), vec![tick("sim", 0, 0, 0)]);
        assert_eq!(set.next_due(), Some(t0 + ms(550)));
        assert_eq!(set.take_due(t0 + ms(550)), vec![tick("sim", 1, 1, 0)]);
    }

    #[test]
    fn one_shot_fires_once_and_is_gone() {
        let t0 = Instant::now();
        let mut set = TimerSet::default();
        set.set_one_shot("end", ms(250), t0);
        assert!(set.take_due(t0 + ms(200)).is_empty());
        assert_eq!(set.take_due(t0 + ms(900)), vec![tick("end", 0, 0, 0)]);
        assert!(set.is_empty());
        assert!(set.take_due(t0 + ms(2000)).is_empty());
    }

    #[test]
    fn ticks_of_several_timers_come_in_due_order() {
        let t0 = Instant::now();
        let mut set = TimerSet::default();
        set.set_periodic("b", ms(30), OverrunPolicy::CatchUpBounded { max: 10 }, t0);
        set.set_one_shot("a", ms(40), t0);
        let names: Vec<String> = set
            .take_due(t0 + ms(70))
            .into_iter()
            .map(|t| format!("{}{}", t.name, t.scheduled_index))
            .collect();
        assert_eq!(names, vec!["b0", "a0", "b1"]);
    }

    #[test]
    fn snapshot_and_restore_keep_the_cursor_and_the_lateness() {
        let t0 = Instant::now();
        let mut set = TimerSet::default();
        set.set_periodic("sim", P, OverrunPolicy::SkipLateTicks, t0);
        set.set_one_shot("end", ms(1000), t0);
        set.take_due(t0 + ms(250));
        let snap = set.snapshot(t0 + ms(260));
        // Somewhere else, with another clock origin.
        let t1 = t0 + ms(5000);
        let mut moved = TimerSet::restore(snap, t1);
        assert_eq!(moved.next_due(), Some(t1 + ms(40)));
        assert_eq!(moved.take_due(t1 + ms(40)), vec![tick("sim", 2, 1, 0)]);
        assert!(moved.contains("end"));
        let end = moved.take_due(t1 + ms(740));
        assert!(end.contains(&tick("end", 0, 0, 0)));
    }

    #[test]
    fn a_snapshot_taken_while_overdue_stays_overdue() {
        let t0 = Instant::now();
        let mut set = TimerSet::default();
        set.set_one_shot("end", ms(100), t0);
        let snap = set.snapshot(t0 + ms(130));
        let t1 = t0 + ms(1000);
        let moved = TimerSet::restore(snap, t1);
        assert_eq!(moved.next_due(), Some(t1 - ms(30)));
    }
}
