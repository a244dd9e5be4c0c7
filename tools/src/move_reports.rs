//! Move reports gathered for percentiles: how long each unit paused and where that time went,
//! phase by phase, and what pre-copy sent before and after each seal, so a run can say which step
//! of a move costs what.

use ferry::MoveReport;
use ferry::relocation::MovePhases;
use ferry::relocation::precopy::Copied;
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
    /// What pre-copy sent of them.
    copied: CopiedRecord,
}

/// Pre-copy over many moves: how many had each number of rounds, and the bytes sent.
#[derive(Debug, Clone, Default)]
struct CopiedRecord {
    /// `by_rounds[r]`: the moves with `r` pre-copy rounds acknowledged.
    by_rounds: Vec<u64>,
    before_seal: u64,
    after_seal: u64,
}

impl CopiedRecord {
    fn record(&mut self, copied: &Copied) {
        let rounds = copied.rounds as usize;
        if self.by_rounds.len() <= rounds {
            self.by_rounds.resize(rounds + 1, 0);
        }
        self.by_rounds[rounds] += 1;
        self.before_seal += copied.before_seal;
        self.after_seal += copied.after_seal;
    }

    /// The fewest rounds that a share `q` (0 to 1) of the moves did not exceed; 0 when none.
    fn rounds_at(&self, q: f64) -> u32 {
        let moves: u64 = self.by_rounds.iter().sum();
        // The rank of the move at `q`, counting from 1: at least the first.
        let rank = ((q * moves as f64).ceil() as u64).clamp(1, moves.max(1));
        let mut seen = 0;
        for (rounds, n) in self.by_rounds.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return rounds as u32;
            }
        }
        0
    }

    fn summary(&self, moves: u64) -> CopiedSummary {
        let mean = |bytes: u64| bytes.checked_div(moves).unwrap_or(0);
        CopiedSummary {
            rounds: RoundsSummary {
                p50: self.rounds_at(0.5),
                p99: self.rounds_at(0.99),
                max: self.rounds_at(1.0),
                moves_by_rounds: self.by_rounds.clone(),
            },
            before_seal_bytes: self.before_seal,
            after_seal_bytes: self.after_seal,
            before_seal_per_move: mean(self.before_seal),
            after_seal_per_move: mean(self.after_seal),
        }
    }
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
        self.copied.record(&report.copied);
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
            copied: self.copied.summary(self.moves),
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
    /// What pre-copy sent while the units ran, and what went after their seals.
    pub copied: CopiedSummary,
}

/// Pre-copy over the moves: its rounds, and the bytes sent before and after the seals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CopiedSummary {
    /// Pre-copy rounds the target acknowledged, per move.
    pub rounds: RoundsSummary,
    /// Bytes sent while the units ran, over all the moves.
    pub before_seal_bytes: u64,
    /// Bytes sent once they were sealed (the last difference, or the whole image), over all.
    pub after_seal_bytes: u64,
    /// `before_seal_bytes` per move, rounded down.
    pub before_seal_per_move: u64,
    /// `after_seal_bytes` per move, rounded down.
    pub after_seal_per_move: u64,
}

/// How many pre-copy rounds the moves took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoundsSummary {
    /// The median move's.
    pub p50: u32,
    /// The 99th percentile's.
    pub p99: u32,
    /// The most any move took.
    pub max: u32,
    /// `moves_by_rounds[r]`: how many moves took `r` rounds (0 when none was worth it).
    pub moves_by_rounds: Vec<u64>,
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
        copied_report(pause_us, transfer_us, Copied::default())
    }

    fn copied_report(pause_us: u64, transfer_us: u64, copied: Copied) -> MoveReport {
        let node = |name: &str| NodeId::new(name).expect("a valid node id");
        MoveReport {
            relocation: RelocationId(7),
            unit: UnitId::Spot(SpotId::new("room").expect("a valid spot id")),
            from: node("a"),
            to: node("b"),
            end: MoveEnd::Moved,
            bytes: 100,
            copied,
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
        assert_eq!(names.first(), Some(&"precopy"));
        assert_eq!(names.len(), PHASES);
        let transfer = summary
            .phases
            .iter()
            .find(|p| p.phase == "transfer")
            .expect("a transfer phase");
        assert_eq!(transfer.percentiles.count, 2);
        assert_eq!(transfer.percentiles.max_us, 200);
    }

    fn copied(rounds: u32, before_seal: u64, after_seal: u64) -> Copied {
        Copied {
            rounds,
            before_seal,
            after_seal,
        }
    }

    #[test]
    fn pre_copy_rounds_and_bytes_add_up_over_the_moves() {
        let mut record = MoveRecord::default();
        for c in [
            copied(1, 1_000, 50),
            copied(1, 1_000, 30),
            copied(2, 1_500, 10),
            copied(0, 0, 4_000),
        ] {
            record.record(&copied_report(300, 100, c));
        }
        let summary = record.summary().copied;
        assert_eq!(summary.before_seal_bytes, 3_500);
        assert_eq!(summary.after_seal_bytes, 4_090);
        assert_eq!(summary.before_seal_per_move, 875);
        assert_eq!(summary.after_seal_per_move, 1_022);
        assert_eq!(summary.rounds.moves_by_rounds, [1, 2, 1]);
        assert_eq!(
            (summary.rounds.p50, summary.rounds.p99, summary.rounds.max),
            (1, 2, 2)
        );
    }

    #[test]
    fn rounds_percentiles_take_the_move_at_their_rank() {
        let mut record = CopiedRecord::default();
        // 99 moves of one round and one of four: p99 is still one, the maximum four.
        for _ in 0..99 {
            record.record(&copied(1, 10, 1));
        }
        record.record(&copied(4, 10, 1));
        assert_eq!(record.by_rounds, [0, 99, 0, 0, 1]);
        assert_eq!(record.rounds_at(0.5), 1);
        assert_eq!(record.rounds_at(0.99), 1);
        assert_eq!(record.rounds_at(0.999), 4);
        assert_eq!(record.rounds_at(1.0), 4);
        assert_eq!(record.rounds_at(0.0), 1);
    }

    #[test]
    fn no_moves_summarise_to_zeros() {
        let summary = MoveRecord::default().summary().copied;
        assert_eq!(summary.rounds.moves_by_rounds, Vec::<u64>::new());
        assert_eq!((summary.rounds.p50, summary.rounds.max), (0, 0));
        assert_eq!(summary.before_seal_per_move, 0);
    }
}
