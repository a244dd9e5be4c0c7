//! The bench's report: the sizes, the moves one at a time beside the baseline, the two drains, the
//! game rooms' moves and what the bots saw. The JSON shape is documented in docs/benchmarks.md;
//! add fields, never rename them.

use std::fmt::Write;
use std::time::Duration;

use ferry_samples::fps;
use serde::Serialize;

use ferry_benches::rooms::ChangeRate;

use super::rooms::Tells;
use super::{BenchArgs, Measured};
use crate::bots::BotsSummary;
use crate::drain_watch::DrainSummary;
use crate::move_reports::{CopiedSummary, MovesSummary, PhaseSummary};
use crate::percentiles::{Durations, Percentiles, ms, readable_us, secs};

/// Everything the bench prints and writes.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The location store: `memory`, `redis` or `etcd`.
    pub store: &'static str,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// The sizes the run was asked for.
    pub sizes: Sizes,
    /// Rooms with state moved one at a time, each beside the baseline.
    pub moves: MovesReport,
    /// Every room with state taken off one node, by Ferry's drain and by the baseline.
    pub drain: DrainReport,
    /// The game rooms moved while their bots played.
    pub game_rooms: GameRoomsReport,
    /// What the bots saw over the whole run.
    pub clients: ClientsReport,
    /// The whole run, from start to the last node stopped, in milliseconds.
    pub elapsed_ms: f64,
}

/// The sizes of a run, as its flags gave them.
#[derive(Debug, Clone, Serialize)]
pub struct Sizes {
    /// Rooms with state.
    pub rooms: u32,
    /// Bytes of state in each.
    pub state_bytes: u32,
    /// The share of that state each room's turns rewrite a second, or `"every-turn"`.
    pub change_rate: Rate,
    /// Messages queued in a room when it moves.
    pub queued: u32,
    /// FPS rooms, and as many chat rooms.
    pub game_rooms: u16,
    /// Bots in each game room.
    pub players: u16,
    /// Seconds of moves one at a time.
    pub seconds: f64,
}

/// A change rate as the report writes it: a number, or the word.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Rate {
    /// A share of the state a second.
    PerSecond(f64),
    /// `"every-turn"`.
    Every(&'static str),
}

impl From<ChangeRate> for Rate {
    fn from(rate: ChangeRate) -> Rate {
        match rate {
            ChangeRate::PerSecond(share) => Rate::PerSecond(share),
            ChangeRate::EveryTurn => Rate::Every("every-turn"),
        }
    }
}

/// Rooms moved one at a time: Ferry there, the baseline back.
#[derive(Debug, Clone, Serialize)]
pub struct MovesReport {
    /// Ferry's moves.
    pub ferry: FerryMoves,
    /// The baseline's handoffs.
    pub baseline: BaselineMoves,
    /// Ferry's pause over the baseline's handoff, percentile by percentile.
    pub pause_ratio: Ratios,
    /// Ferry's seal to answer over the baseline's handoff, percentile by percentile.
    pub answer_ratio: Ratios,
}

/// Ferry's moves one at a time.
#[derive(Debug, Clone, Serialize)]
pub struct FerryMoves {
    /// Moves, capture bytes, pauses and their phases.
    #[serde(flatten)]
    pub moves: MovesSummary,
    /// From the seal until a question queued behind the messages was answered on the target.
    pub seal_to_answer: Percentiles,
    /// Messages lost or run twice.
    pub tells: Tells,
}

/// The baseline's handoffs one at a time.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineMoves {
    /// Bytes of state saved and read back.
    pub bytes: u64,
    /// From the start of the stop until the room answered on the target.
    pub handoff: Percentiles,
    /// Messages lost or run twice.
    pub tells: Tells,
}

/// Ferry's figure over the baseline's, at each percentile (`null` when the baseline's is zero).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ratios {
    /// At the median.
    pub p50: Option<f64>,
    /// At the 99th percentile.
    pub p99: Option<f64>,
    /// At the 99.9th percentile.
    pub p999: Option<f64>,
    /// Of the longest.
    pub max: Option<f64>,
}

impl Ratios {
    fn of(ferry: &Percentiles, baseline: &Percentiles) -> Ratios {
        Ratios {
            p50: ratio(ferry.p50_us as f64, baseline.p50_us as f64),
            p99: ratio(ferry.p99_us as f64, baseline.p99_us as f64),
            p999: ratio(ferry.p999_us as f64, baseline.p999_us as f64),
            max: ratio(ferry.max_us as f64, baseline.max_us as f64),
        }
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// Both drains of the rooms with state.
#[derive(Debug, Clone, Serialize)]
pub struct DrainReport {
    /// Rooms taken off the node.
    pub rooms: u64,
    /// Ferry's drain.
    pub ferry: FerryDrain,
    /// The baseline's handoffs of the same rooms, as many at a time.
    pub baseline: BaselineDrain,
    /// Ferry's drain time over the baseline's.
    pub elapsed_ratio: Option<f64>,
    /// A room's pause inside Ferry's drain over its pause moved alone (`moves.ferry.pause`),
    /// percentile by percentile: what sealing beside other rooms costs each.
    pub pause_over_alone: Ratios,
}

/// Ferry's drain.
#[derive(Debug, Clone, Serialize)]
pub struct FerryDrain {
    /// How it ended, units, bytes, time and pauses.
    #[serde(flatten)]
    pub drain: DrainSummary,
    /// Units moved per second.
    pub units_per_s: f64,
    /// Capture bytes moved per second, in MiB.
    pub mib_per_s: f64,
    /// Where the pauses went, phase by phase.
    pub phases: Vec<PhaseSummary>,
    /// What pre-copy sent while the rooms ran, and what went after their seals.
    pub copied: CopiedSummary,
    /// Messages lost or run twice.
    pub tells: Tells,
}

/// The baseline's drain.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineDrain {
    /// Rooms handed off.
    pub units_moved: u64,
    /// Bytes of state saved and read back.
    pub bytes_moved: u64,
    /// From the first stop until the last room answered on its target, in milliseconds.
    pub elapsed_ms: f64,
    /// Rooms handed off per second.
    pub units_per_s: f64,
    /// State bytes handed off per second, in MiB.
    pub mib_per_s: f64,
    /// Messages lost or run twice.
    pub tells: Tells,
}

/// The game rooms' moves.
#[derive(Debug, Clone, Serialize)]
pub struct GameRoomsReport {
    /// Rooms moved (FPS, chat and bingo).
    pub rooms: usize,
    /// From the first move asked until the last ended, in milliseconds.
    pub elapsed_ms: f64,
    /// Moves, capture bytes, pauses and their phases.
    #[serde(flatten)]
    pub moves: MovesSummary,
}

/// What the bots saw, beside the goal for the gap between server ticks.
#[derive(Debug, Clone, Serialize)]
pub struct ClientsReport {
    /// Inputs, pushes, tick gaps, reconnects, errors.
    #[serde(flatten)]
    pub bots: BotsSummary,
    /// The FPS rooms' tick interval, in milliseconds.
    pub tick_interval_ms: f64,
    /// The goal: no gap between two ticks longer than this (two intervals), in milliseconds.
    pub gap_goal_ms: f64,
    /// Whether the longest gap any bot saw stayed within the goal.
    pub gap_goal_met: bool,
    /// Gaps longer than the goal, over all bots (`tick_gaps.count` is all of them).
    pub gaps_over_goal: u64,
}

fn per_s(amount: f64, took: Duration) -> f64 {
    let secs = took.as_secs_f64();
    if secs > 0.0 { amount / secs } else { 0.0 }
}

const MIB: f64 = 1024.0 * 1024.0;

impl Report {
    /// The report of one run.
    pub fn new(args: &BenchArgs, m: &Measured, elapsed: Duration) -> Report {
        let o = &m.one_by_one;
        let ferry_moves = o.ferry.summary();
        let baseline_handoff = o.baseline.summary();
        let answered = o.answered.summary();
        let d = &m.drains;
        let drain_moves = d.ferry.moves.summary();
        let drain = d.ferry.summary();
        let pause_over_alone = Ratios::of(&drain.pause, &ferry_moves.pause);
        let b = &d.baseline;
        let bots = BotsSummary::of(&m.tallies);
        let tick_interval_ms = ms(fps::TICK);
        let gap_goal = 2 * fps::TICK;
        let gap_goal_ms = ms(gap_goal);
        let mut gaps = Durations::new();
        for tally in &m.tallies {
            gaps.merge(&tally.ticks.gaps);
        }
        Report {
            store: args.store.kind(),
            nodes: super::NODES,
            sizes: Sizes {
                rooms: args.rooms,
                state_bytes: args.state_bytes,
                change_rate: args.change_rate.into(),
                queued: args.queued,
                game_rooms: args.game_rooms,
                players: args.players,
                seconds: secs(args.duration),
            },
            moves: MovesReport {
                pause_ratio: Ratios::of(&ferry_moves.pause, &baseline_handoff),
                answer_ratio: Ratios::of(&answered, &baseline_handoff),
                ferry: FerryMoves {
                    moves: ferry_moves,
                    seal_to_answer: answered,
                    tells: o.ferry_tells,
                },
                baseline: BaselineMoves {
                    bytes: o.baseline_bytes,
                    handoff: baseline_handoff,
                    tells: o.baseline_tells,
                },
            },
            drain: DrainReport {
                rooms: args.rooms.into(),
                pause_over_alone,
                ferry: FerryDrain {
                    drain,
                    units_per_s: per_s(d.ferry.moved as f64, d.ferry.elapsed),
                    mib_per_s: per_s(d.ferry.moves.bytes as f64 / MIB, d.ferry.elapsed),
                    phases: drain_moves.phases,
                    copied: drain_moves.copied,
                    tells: d.ferry_tells,
                },
                baseline: BaselineDrain {
                    units_moved: b.units,
                    bytes_moved: b.bytes,
                    elapsed_ms: ms(b.elapsed),
                    units_per_s: per_s(b.units as f64, b.elapsed),
                    mib_per_s: per_s(b.bytes as f64 / MIB, b.elapsed),
                    tells: b.tells,
                },
                elapsed_ratio: ratio(ms(d.ferry.elapsed), ms(b.elapsed)),
            },
            game_rooms: GameRoomsReport {
                rooms: m.game_rooms.rooms,
                elapsed_ms: ms(m.game_rooms.elapsed),
                moves: m.game_rooms.moves.summary(),
            },
            clients: ClientsReport {
                gap_goal_met: bots.longest_tick_gap_ms <= gap_goal_ms,
                gaps_over_goal: gaps.count_above(gap_goal.as_micros() as u64),
                bots,
                tick_interval_ms,
                gap_goal_ms,
            },
            elapsed_ms: ms(elapsed),
        }
    }

    /// What Ferry got wrong, in one sentence, if anything: messages lost or run twice, or what
    /// the bots saw. (What the baseline loses is reported, not failed on.)
    pub fn problem(&self) -> Option<String> {
        let mut parts = Vec::new();
        for (step, tells) in [
            ("the moves one at a time", self.moves.ferry.tells),
            ("the drain", self.drain.ferry.tells),
        ] {
            if !tells.is_clean() {
                parts.push(format!(
                    "in {step} Ferry lost {} messages and ran {} twice",
                    tells.lost, tells.duplicated
                ));
            }
        }
        parts.extend(self.clients.bots.problem());
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// How the drain ended, if it did not move every room.
    pub fn unfinished(&self) -> Option<String> {
        let drain = &self.drain.ferry.drain;
        (drain.outcome != "relocated").then(|| {
            format!(
                "the drain of {} ended {} with {} of {} rooms moved",
                drain.node, drain.outcome, drain.units_moved, self.drain.rooms
            )
        })
    }

    /// The title of the pause chart.
    pub fn chart_title(&self) -> String {
        format!(
            "Unit pause, {} B of state{} and {} queued messages, {} store ({} moves each)",
            self.sizes.state_bytes,
            churn_text(self.sizes.change_rate),
            self.sizes.queued,
            self.store,
            self.moves.ferry.moves.moves
        )
    }

    /// The report as a person reads it.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |text: String| {
            let _ = writeln!(out, "{text}");
        };
        let s = &self.sizes;
        line(format!(
            "Ferry bench: {} nodes, {} store; {} rooms of {} B{} with {} messages queued when \
             they move; {} FPS and {} chat rooms with {} bots; took {:.1} s",
            self.nodes,
            self.store,
            s.rooms,
            s.state_bytes,
            churn_text(s.change_rate),
            s.queued,
            s.game_rooms,
            s.game_rooms,
            self.clients.bots.players,
            self.elapsed_ms / 1_000.0
        ));

        let m = &self.moves;
        line(String::new());
        line(format!(
            "Rooms moved one at a time, Ferry there and the baseline back ({} moves each)",
            m.ferry.moves.moves
        ));
        line(header(""));
        line(row("Ferry pause", &m.ferry.moves.pause));
        line(row("Ferry seal to answer", &m.ferry.seal_to_answer));
        line(row("baseline handoff", &m.baseline.handoff));
        line(ratio_row("Ferry pause / baseline", &m.pause_ratio));
        line(ratio_row("Ferry answer / baseline", &m.answer_ratio));
        line("  where Ferry's pause goes:".to_owned());
        for phase_line in phase_rows(&m.ferry.moves.phases) {
            line(phase_line);
        }
        let per_move = |bytes: u64, moves: u64| bytes.checked_div(moves).unwrap_or(0);
        line(format!(
            "  bytes per move: Ferry {} (state, queue, timers), baseline {} (state)",
            per_move(m.ferry.moves.bytes, m.ferry.moves.moves),
            per_move(m.baseline.bytes, m.baseline.handoff.count)
        ));
        for copied_line in copied_rows(&m.ferry.moves.copied) {
            line(copied_line);
        }
        line(tells_line(m.ferry.tells, m.baseline.tells));

        let d = &self.drain;
        line(String::new());
        line(format!(
            "Drain of {} rooms off {}, 128 moving at a time took    rooms/s      MiB/s",
            d.rooms, d.ferry.drain.node
        ));
        line(format!(
            "  {:<38} {:>9} {:>10.0} {:>10.1}",
            format!("Ferry drain ({})", d.ferry.drain.outcome),
            readable_us((d.ferry.drain.elapsed_ms * 1_000.0) as u64),
            d.ferry.units_per_s,
            d.ferry.mib_per_s
        ));
        line(format!(
            "  {:<38} {:>9} {:>10.0} {:>10.1}",
            "baseline handoffs",
            readable_us((d.baseline.elapsed_ms * 1_000.0) as u64),
            d.baseline.units_per_s,
            d.baseline.mib_per_s
        ));
        line(format!(
            "  {:<38} {:>9}",
            "Ferry / baseline (time)",
            times(d.elapsed_ratio)
        ));
        line(header("a room's pause"));
        line(row("Ferry pause in the drain", &d.ferry.drain.pause));
        line(row("Ferry pause moved alone (above)", &m.ferry.moves.pause));
        line(ratio_row("in the drain / alone", &d.pause_over_alone));
        line("  where Ferry's pause in the drain goes:".to_owned());
        for phase_line in phase_rows(&d.ferry.phases) {
            line(phase_line);
        }
        for copied_line in copied_rows(&d.ferry.copied) {
            line(copied_line);
        }
        line(tells_line(d.ferry.tells, d.baseline.tells));

        let g = &self.game_rooms;
        line(String::new());
        line(format!(
            "Game rooms moved while their bots play ({} rooms at once, all moved in {})",
            g.rooms,
            readable_us((g.elapsed_ms * 1_000.0) as u64)
        ));
        line(header(""));
        line(row("pause", &g.moves.pause));
        if let Some(wait) = g.moves.phases.first() {
            line(row("seal_wait (FPS: until round end)", &wait.percentiles));
        }

        let c = &self.clients;
        let bots = &c.bots;
        line(String::new());
        line(format!("What the bots saw ({} bots)", bots.players));
        line(header(""));
        line(row("gap between server ticks", &bots.tick_gaps));
        line(format!(
            "  longest gap {:.1} ms; goal: none over two ticks at 30 Hz ({:.1} ms): {} \
             ({} of {} gaps over it)",
            bots.longest_tick_gap_ms,
            c.gap_goal_ms,
            if c.gap_goal_met { "met" } else { "NOT met" },
            c.gaps_over_goal,
            bots.tick_gaps.count
        ));
        line(format!(
            "  inputs sent {}, applied {}; lost by the server {}, duplicated {}, reordered {}; \
             not delivered by the client {}; answers lost with a dead gateway {}; lost in rebuilt \
             rooms {}; {} reconnected; rooms rebuilt after a crash: {}",
            bots.inputs_sent,
            bots.inputs_applied,
            bots.inputs.lost,
            bots.inputs.duplicated,
            bots.inputs.reordered,
            bots.inputs_undelivered,
            bots.answers_lost_with_gateways,
            bots.inputs_lost_in_rebuilds,
            bots.reconnected,
            bots.rebuilt_text()
        ));
        out
    }
}

fn header(title: &str) -> String {
    format!(
        "  {title:<38} {:>9} {:>9} {:>9} {:>9}",
        "p50", "p99", "p99.9", "max"
    )
}

fn row(name: &str, p: &Percentiles) -> String {
    format!(
        "  {name:<38} {:>9} {:>9} {:>9} {:>9}",
        readable_us(p.p50_us),
        readable_us(p.p99_us),
        readable_us(p.p999_us),
        readable_us(p.max_us)
    )
}

fn ratio_row(name: &str, r: &Ratios) -> String {
    format!(
        "  {name:<38} {:>9} {:>9} {:>9} {:>9}",
        times(r.p50),
        times(r.p99),
        times(r.p999),
        times(r.max)
    )
}

fn times(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x"))
}

/// The phases inside the pause, then the wait for the seal, which comes before it.
fn phase_rows(phases: &[PhaseSummary]) -> Vec<String> {
    let (before, inside): (Vec<_>, Vec<_>) = phases.iter().partition(|p| p.phase == "seal_wait");
    inside
        .iter()
        .map(|p| row(&format!("  {}", p.phase), &p.percentiles))
        .chain(
            before
                .iter()
                .map(|p| row(&format!("  {} (before the pause)", p.phase), &p.percentiles)),
        )
        .collect()
}

/// What pre-copy sent: its rounds per move, and its bytes before and after the seal.
fn copied_rows(c: &CopiedSummary) -> [String; 2] {
    let r = &c.rounds;
    let with = |values: Vec<String>| values.join(", ");
    let counts = r.moves_by_rounds.iter().map(u64::to_string).collect();
    let rounds = (0..r.moves_by_rounds.len())
        .map(|n| n.to_string())
        .collect();
    [
        format!(
            "  pre-copy rounds per move: p50 {}, p99 {}, max {} (moves with {} rounds: {})",
            r.p50,
            r.p99,
            r.max,
            with(rounds),
            with(counts)
        ),
        format!(
            "  sent per move: {} while the room ran, {} after its seal (in all {} and {})",
            readable_bytes(c.before_seal_per_move),
            readable_bytes(c.after_seal_per_move),
            readable_bytes(c.before_seal_bytes),
            readable_bytes(c.after_seal_bytes)
        ),
    ]
}

/// Bytes as a person reads them: `512 B`, `4.0 KiB`, `1.5 MiB`, `2.00 GiB`.
fn readable_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if b < MIB * KIB {
        format!("{:.1} MiB", b / MIB)
    } else {
        format!("{:.2} GiB", b / (MIB * KIB))
    }
}

/// The change rate in the sizes line: nothing when the rooms' state does not change.
fn churn_text(rate: Rate) -> String {
    match rate {
        Rate::PerSecond(0.0) => String::new(),
        Rate::PerSecond(share) => format!(" ({share} of it rewritten a second)"),
        Rate::Every(_) => " (all of it rewritten at every turn)".to_owned(),
    }
}

fn tells_line(ferry: Tells, baseline: Tells) -> String {
    format!(
        "  messages lost / run twice: Ferry {} / {}, baseline {} / {}",
        ferry.lost, ferry.duplicated, baseline.lost, baseline.duplicated
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn percentiles(p50_us: u64, p99_us: u64, p999_us: u64, max_us: u64) -> Percentiles {
        Percentiles {
            count: 10,
            p50_us,
            p99_us,
            p999_us,
            max_us,
        }
    }

    #[test]
    fn ratios_divide_percentile_by_percentile_and_leave_a_zero_divisor_out() {
        let drain = percentiles(600, 2_000, 3_000, 9_000);
        let alone = percentiles(200, 500, 0, 1_000);
        let r = Ratios::of(&drain, &alone);
        assert_eq!(r.p50, Some(3.0));
        assert_eq!(r.p99, Some(4.0));
        assert_eq!(r.p999, None);
        assert_eq!(r.max, Some(9.0));
        assert_eq!(times(r.p50), "3.00x");
        assert_eq!(times(r.p999), "-");
    }

    #[test]
    fn bytes_read_in_fitting_units() {
        assert_eq!(readable_bytes(512), "512 B");
        assert_eq!(readable_bytes(4_096), "4.0 KiB");
        assert_eq!(readable_bytes(1_572_864), "1.5 MiB");
        assert_eq!(readable_bytes(3 << 30), "3.00 GiB");
    }

    #[test]
    fn the_change_rate_is_written_as_a_number_or_the_word() {
        let json = |rate: ChangeRate| serde_json::to_string(&Rate::from(rate)).expect("json");
        assert_eq!(json(ChangeRate::PerSecond(0.1)), "0.1");
        assert_eq!(json(ChangeRate::PerSecond(0.0)), "0.0");
        assert_eq!(json(ChangeRate::EveryTurn), "\"every-turn\"");
        assert_eq!(churn_text(ChangeRate::PerSecond(0.0).into()), "");
        assert_eq!(
            churn_text(ChangeRate::PerSecond(0.1).into()),
            " (0.1 of it rewritten a second)"
        );
    }

    #[test]
    fn pre_copy_rows_name_rounds_and_bytes() {
        let copied = CopiedSummary {
            rounds: crate::move_reports::RoundsSummary {
                p50: 1,
                p99: 2,
                max: 2,
                moves_by_rounds: vec![3, 90, 7],
            },
            before_seal_bytes: 100 << 20,
            after_seal_bytes: 1 << 20,
            before_seal_per_move: 1 << 20,
            after_seal_per_move: 10_486,
        };
        let [rounds, bytes] = copied_rows(&copied);
        assert_eq!(
            rounds,
            "  pre-copy rounds per move: p50 1, p99 2, max 2 (moves with 0, 1, 2 rounds: 3, 90, 7)"
        );
        assert_eq!(
            bytes,
            "  sent per move: 1.0 MiB while the room ran, 10.2 KiB after its seal (in all 100.0 \
             MiB and 1.0 MiB)"
        );
    }
}
