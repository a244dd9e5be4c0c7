//! Where the time of one move goes, phase by phase, so a slow pause can be traced to its cause.
//!
//! The source measures its own phases and the round trips; the target measures its restore and
//! its store commit and reports them in its answers, as durations (the two clocks are never
//! compared). A phase the move did not reach stays zero.

use std::time::Duration;

/// The phases of one move. The pause (the unit runs nowhere) spans `capture` to `commit_wait`;
/// `precopy` and `seal_wait` come before it, while the unit still runs turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MovePhases {
    /// Shipping the unit's image to the target while it runs: each round from its send until the
    /// target said it held it (the snapshots between the rounds not counted).
    pub precopy: Duration,
    /// From the seal request until the lane reached a turn boundary and sealed.
    pub seal_wait: Duration,
    /// From the seal until the source had the capture (state, journal, timers).
    pub capture: Duration,
    /// Reading the unit's authority records from the store, for the conditional commit.
    pub store_read: Duration,
    /// Encoding the capture and cutting it into chunks.
    pub encode: Duration,
    /// From the offer sent until the target was ready for the relay, less its restore: the
    /// transfer of the chunks and their assembly.
    pub transfer: Duration,
    /// The target rebuilding the unit from the capture (as the target measured it).
    pub restore: Duration,
    /// From relay-ready until the cutover was sent: relaying what arrived after the seal.
    pub handover: Duration,
    /// The target's conditional write of ownership to the store (as the target measured it).
    pub commit: Duration,
    /// From the cutover until the source heard of the commit, less the commit itself.
    pub commit_wait: Duration,
}

impl MovePhases {
    /// The phases with their names, in order: for tables and metrics.
    pub fn named(&self) -> [(&'static str, Duration); 10] {
        [
            ("precopy", self.precopy),
            ("seal_wait", self.seal_wait),
            ("capture", self.capture),
            ("store_read", self.store_read),
            ("encode", self.encode),
            ("transfer", self.transfer),
            ("restore", self.restore),
            ("handover", self.handover),
            ("commit", self.commit),
            ("commit_wait", self.commit_wait),
        ]
    }
}

/// What the target reports of its own phases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetPhases {
    /// How long the restore took.
    pub restore: Duration,
    /// How long the store commit took.
    pub commit: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_named_in_the_order_a_move_runs_them() {
        let phases = MovePhases {
            precopy: Duration::from_micros(1),
            commit_wait: Duration::from_micros(9),
            ..MovePhases::default()
        };
        let named = phases.named();
        assert_eq!(named[0], ("precopy", Duration::from_micros(1)));
        assert_eq!(named[9], ("commit_wait", Duration::from_micros(9)));
    }
}
