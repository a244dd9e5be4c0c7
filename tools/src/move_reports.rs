//! Move reports gathered for percentiles: how long each unit paused and where that time went,
//! phase by phase, so a run can say which step of a move costs what.

use ferry::MoveReport;
use ferry::relocation::MovePhases;
use serde::Serialize;

use crate::percentiles::{Durations, Percentiles};

/// How many phases a move has.
const PHASES: usize = 10;

/// The pauses, phases and bytes of moves that ended with their unit on the target.
#[derive(Debug, Clone, Default)]
pub struct MoveRecord {
    /// Moves recorded.
    pub moves: u64,
    /// Bytes of their captures.
    pub bytes: u64,
    /// Each move's pause, from its seal until its target opened it.
    pub pauses: Durations,
    /// Each phase of each move, in the order of [`MovePhases::named`].
    phases: [Durations; PHASES],
}

impl MoveRecord {
    /// Records a move that ended with its unit on the target.
    pub fn record(&mut self, report: &MoveReport) {
        self.moves += 1;
        self.bytes += report.bytes;
        if let Some(pause) = report.pause {
            self.pauses.record(pause);
        }
        for (record, (_, took)) in self.phases.iter_mut().zip(report.phases.named()) {
            record.record(took);
        }
    }

    /// The summary printed and written to JSON.
    pub fn summary(&self) -> MovesSummary {
        let names = MovePhases::default().named().map(|(name, _)| name);
        MovesSummary {
            moves: self.moves,
            bytes: self.bytes,
            pause: self.pauses.summary(),
            phases: names
                .iter()
                .zip(&self.phases)
                .map(|(phase, record)| PhaseSummary {
                    phase,
                    percentiles: record.summary(),
                })
                .collect(),
        }
    }
}

/// Moves as the reports print and write them.
#[derive(Debug, Clone, Serialize)]
pub struct MovesSummary {
    /// Moves that ended with their unit on the target.
    pub moves: u64,
    /// Bytes of their captures.
    pub bytes: u64,
    /// Each move's pause, from its seal until its target opened it.
    pub pause: Percentiles,
    /// Each phase, in the order a move runs them; `seal_wait` comes before the pause, the others
    /// are disjoint parts of it.
    pub phases: Vec<PhaseSummary>,
}

/// One phase of the moves.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseSummary {
    /// Its name, as `MovePhases::named` gives it.
    pub phase: &'static str,
    /// The phase's durations over the moves, in microseconds.
    #[serde(flatten)]
    pub percentiles: Percentiles,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ferry::relocation::precopy::Copied;
    use ferry::relocation::protocol::MoveEnd;
    use ferry::{NodeId, RelocationId, SpotId, UnitId};

    use super::*;

    fn report(pause_us: u64, transfer_us: u64) -> MoveReport {
        let node = |name: &str| NodeId::new(name).expect("a valid node id");
        MoveReport {
            relocation: RelocationId(7),
            unit: UnitId::Spot(SpotId::new("room").expect("a valid spot id")),
            from: node("a"),
            to: node("b"),
            end: MoveEnd::Moved,
            bytes: 100,
            copied: Copied::default(),
            interruption: None,
            pause: Some(Duration::from_micros(pause_us)),
            phases: MovePhases {
                transfer: Duration::from_micros(transfer_us),
                ..MovePhases::default()
            },
            blocked: None,
            after_deadline: false,
        }
    }

    #[test]
    fn every_phase_is_summarised_in_the_order_moves_run_them() {
        let mut record = MoveRecord::default();
        record.record(&report(300, 120));
        record.record(&report(500, 200));
        let summary = record.summary();
        assert_eq!(summary.moves, 2);
        assert_eq!(summary.bytes, 200);
        assert_eq!(summary.pause.max_us, 500);
        let names: Vec<&str> = summary.phases.iter().map(|p| p.phase).collect();
        assert_eq!(names.first(), Some(&"seal_wait"));
        assert_eq!(names.len(), PHASES);
        let transfer = summary
            .phases
            .iter()
            .find(|p| p.phase == "transfer")
            .expect("a transfer phase");
        assert_eq!(transfer.percentiles.count, 2);
        assert_eq!(transfer.percentiles.max_us, 200);
    }
}
