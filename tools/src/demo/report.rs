//! The demo's report: what moved, how long each unit paused, and what the players saw. The JSON
//! shape is stable and documented in docs/demo.md; add fields, never rename them.

use std::fmt::Write;
use std::time::Duration;

use serde::Serialize;

use super::DemoArgs;
use crate::bots::BotsSummary;
use crate::bots::player::Tally;
use crate::drain_watch::{DrainSummary, Drained};
use crate::percentiles::readable_us;

/// Everything the demo prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// The location store: `memory`, `redis` or `etcd`.
    pub store: &'static str,
    /// Rooms of each sample game.
    pub rooms_per_game: u16,
    /// The sample games played.
    pub games: Vec<&'static str>,
    /// Seconds the bots played.
    pub seconds: f64,
    /// The drain of one node while the bots played.
    pub drain: DrainSummary,
    /// What the bots sent and saw.
    pub bots: BotsSummary,
    /// The whole run, from start to the last node stopped, in milliseconds.
    pub elapsed_ms: f64,
}

impl Report {
    /// The report of one run.
    pub fn new(args: &DemoArgs, drained: &Drained, tallies: &[Tally], elapsed: Duration) -> Self {
        Report {
            nodes: super::NODES,
            store: args.store.kind(),
            rooms_per_game: args.rooms,
            games: crate::bots::games::GameKind::ALL
                .iter()
                .map(|g| g.name())
                .collect(),
            seconds: crate::percentiles::secs(args.duration),
            drain: drained.summary(),
            bots: BotsSummary::of(tallies),
            elapsed_ms: crate::percentiles::ms(elapsed),
        }
    }

    /// The report as a person reads it.
    pub fn text(&self) -> String {
        let d = &self.drain;
        let b = &self.bots;
        let mut out = String::new();
        let mut line = |text: String| {
            let _ = writeln!(out, "{text}");
        };
        line(format!(
            "Ferry demo: {} nodes ({} store), {} rooms each of {}, {} bot players, {} s of play",
            self.nodes,
            self.store,
            self.rooms_per_game,
            self.games.join(", "),
            b.players,
            self.seconds
        ));
        line(String::new());
        line(format!(
            "Drained {} while they played: {} in {:.0} ms (FPS rooms move only between rounds)",
            d.node, d.outcome, d.elapsed_ms
        ));
        // A room moves in one step with its players, and each of them is a unit.
        let players = d.units_moved.saturating_sub(d.moves);
        let rows = [
            (
                "units moved",
                format!(
                    "{} ({} rooms and their {players} players; {} failed)",
                    d.units_moved, d.moves, d.units_failed
                ),
            ),
            ("bytes moved", d.bytes_moved.to_string()),
            (
                "unit pause",
                format!(
                    "p50 {}  p99 {}  max {}",
                    readable_us(d.pause.p50_us),
                    readable_us(d.pause.p99_us),
                    readable_us(d.pause.max_us)
                ),
            ),
        ];
        for (label, value) in rows {
            line(format!("  {label:<WIDTH$}{value}"));
        }
        line(String::new());
        line("What the players saw".to_owned());
        let rows = [
            (
                "inputs sent",
                format!("{} ({} applied)", b.inputs_sent, b.inputs_applied),
            ),
            ("lost by the server", b.inputs.lost.to_string()),
            ("duplicated", b.inputs.duplicated.to_string()),
            ("reordered", b.inputs.reordered.to_string()),
            (
                "not delivered by the client",
                format!(
                    "{} (their gateway died before it confirmed them)",
                    b.inputs_undelivered
                ),
            ),
            (
                "answers lost with a dead gateway",
                format!(
                    "{} (ran; pushed to the session that died)",
                    b.answers_lost_with_gateways
                ),
            ),
            (
                "lost in rebuilt rooms",
                format!(
                    "{} (rooms rebuilt after a crash: {})",
                    b.inputs_lost_in_rebuilds,
                    b.rebuilt_text()
                ),
            ),
            (
                "mismatches",
                format!(
                    "{} (bingo cards, marks and rewards the draws do not explain)",
                    b.mismatches
                ),
            ),
            (
                "tick gap",
                format!(
                    "p50 {}  p99 {}  longest {:.1} ms (ticks every 33.3 ms at 30 Hz)",
                    readable_us(b.tick_gaps.p50_us),
                    readable_us(b.tick_gaps.p99_us),
                    b.longest_tick_gap_ms
                ),
            ),
            (
                "reconnects",
                format!(
                    "{} (players keep their connection while their room moves)",
                    b.reconnected
                ),
            ),
            ("took", format!("{:.1} s", self.elapsed_ms / 1_000.0)),
        ];
        for (label, value) in rows {
            line(format!("  {label:<WIDTH$}{value}"));
        }
        out
    }
}

/// The width of the labels of the report's rows: the longest, and a space.
const WIDTH: usize = 34;
