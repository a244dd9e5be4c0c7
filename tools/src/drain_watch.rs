//! Drains one in-process node and watches it happen: a progress bar from the node's status stream
//! (only when stderr is a terminal), and the report of every move from its relocation events, so
//! the demo and the bench can tell how long each unit paused, where that time went and how many
//! bytes moved.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use ferry::{Node, NodeId, RelocateOptions, RelocateOutcome, RelocationEvent};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;

use crate::move_reports::MoveRecord;
use crate::percentiles::Percentiles;

/// What one drain did.
#[derive(Debug, Clone)]
pub struct Drained {
    /// The node drained.
    pub node: NodeId,
    /// How the drain ended.
    pub outcome: RelocateOutcome,
    /// Units that run on another node now, a room's members each counted, as `ferry status`
    /// counts units.
    pub moved: u64,
    /// Units that did not move (a room's members counted with it), as `moved` counts.
    pub not_moved: u64,
    /// The reports of the units that moved: pauses, phases and bytes.
    pub moves: MoveRecord,
    /// Move reports the event stream dropped because this watcher fell behind (then `moved`
    /// still counts every unit, but `moves` misses some).
    pub reports_missed: u64,
    /// From the call until the outcome.
    pub elapsed: Duration,
}

impl Drained {
    /// Whether every unit moved.
    pub fn relocated(&self) -> bool {
        matches!(self.outcome, RelocateOutcome::Relocated { .. })
    }
}

/// Drains `node` with `options`, showing progress on stderr when it is a terminal.
pub async fn drain(node: &Node, options: RelocateOptions) -> Drained {
    // Subscribed before the drain starts, so no event of it is missed.
    let mut events = node.relocation_events();
    let mut status = node.watch_status();
    let bar = progress_bar();
    let started = Instant::now();
    let mut drained = Drained {
        node: node.id().clone(),
        outcome: RelocateOutcome::Relocated { moved: 0 },
        moved: 0,
        not_moved: 0,
        moves: MoveRecord::default(),
        reports_missed: 0,
        elapsed: Duration::ZERO,
    };
    let relocate = node.relocate(options);
    tokio::pin!(relocate);
    let mut events_open = true;
    let mut status_open = bar.is_some();
    drained.outcome = loop {
        tokio::select! {
            outcome = &mut relocate => break outcome,
            event = events.recv(), if events_open => match event {
                Ok(event) => drained.take(event),
                Err(RecvError::Lagged(missed)) => drained.reports_missed += missed,
                Err(RecvError::Closed) => events_open = false,
            },
            changed = status.changed(), if status_open => {
                status_open = changed.is_ok();
                if status_open
                    && let Some(bar) = &bar
                {
                    let now = status.borrow_and_update().clone();
                    bar.set_length(now.total as u64);
                    bar.set_position((now.moved + now.failed) as u64);
                }
            }
        }
    };
    // Events sent before the outcome are already queued here; take them all.
    while let Ok(event) = events.try_recv() {
        drained.take(event);
    }
    let counts = node.watch_status().borrow().clone();
    (drained.moved, drained.not_moved) = (counts.moved as u64, counts.failed as u64);
    drained.elapsed = started.elapsed();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    drained
}

impl Drained {
    fn take(&mut self, event: RelocationEvent) {
        match event {
            // Only moves that ended on the target are reported as moved; others come as failed.
            RelocationEvent::UnitMoved(report) => self.moves.record(&report),
            // Failures are counted by the node's status; their reasons are in its log.
            RelocationEvent::UnitFailed { .. }
            | RelocationEvent::Started { .. }
            | RelocationEvent::Completed(_) => {}
        }
    }
}

/// A bar on stderr for a person watching, or nothing when stderr is a file or a pipe.
fn progress_bar() -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template("draining {bar:40} {pos}/{len} units ({elapsed})")
        .map(|style| style.progress_chars("=> "));
    if let Ok(style) = style {
        bar.set_style(style);
    }
    Some(bar)
}

/// A drain as the reports print and write it.
#[derive(Debug, Clone, Serialize)]
pub struct DrainSummary {
    /// The node drained.
    pub node: String,
    /// `relocated` when every unit moved; otherwise the outcome and its reason.
    pub outcome: String,
    /// Units that moved.
    pub units_moved: u64,
    /// The moves they took: a room moves in one step with the players in it, so this counts
    /// the rooms (and any player in none) among them.
    pub moves: u64,
    /// Units that did not move.
    pub units_failed: u64,
    /// Bytes of state the moved units shipped.
    pub bytes_moved: u64,
    /// From the call until the outcome, in milliseconds.
    pub elapsed_ms: f64,
    /// Each moved unit's pause: from its seal until its target opened it.
    pub pause: Percentiles,
    /// Move reports the watcher missed (then `pause` misses them too).
    pub reports_missed: u64,
}

impl Drained {
    /// The summary of this drain.
    pub fn summary(&self) -> DrainSummary {
        DrainSummary {
            node: self.node.to_string(),
            outcome: outcome_text(&self.outcome),
            units_moved: self.moved,
            moves: self.moves.moves,
            units_failed: self.not_moved,
            bytes_moved: self.moves.bytes,
            elapsed_ms: crate::percentiles::ms(self.elapsed),
            pause: self.moves.pauses.summary(),
            reports_missed: self.reports_missed,
        }
    }
}

/// An outcome in a word or three: `relocated`, `blocked: TargetUnavailable`, `undecided`.
fn outcome_text(outcome: &RelocateOutcome) -> String {
    match outcome {
        RelocateOutcome::Relocated { .. } => "relocated".to_owned(),
        RelocateOutcome::Blocked { reason, .. } => format!("blocked: {reason:?}"),
        RelocateOutcome::Undecided { .. } => "undecided".to_owned(),
    }
}
