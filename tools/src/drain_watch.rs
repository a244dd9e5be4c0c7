//! Drains one in-process node and watches it happen: a progress bar from the node's status stream
//! (only when stderr is a terminal), and the report of every move from its relocation events, so
//! the demo and the bench can tell how long each unit paused, where that time went and how many
//! bytes moved.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use ferry::{Node, NodeId, RelocateOptions, RelocateOutcome, RelocationEvent};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

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
    let (stop, taken) = take_reports(node.relocation_events());
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
    let mut status_open = bar.is_some();
    drained.outcome = loop {
        tokio::select! {
            outcome = &mut relocate => break outcome,
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
    let _ = stop.send(());
    let counts = node.watch_status().borrow().clone();
    (drained.moved, drained.not_moved) = (counts.moved as u64, counts.failed as u64);
    (drained.moves, drained.reports_missed) = match taken.await {
        Ok(taken) => taken,
        // The task that took them is gone: every report is missed.
        Err(_) => (MoveRecord::default(), drained.moved),
    };
    drained.elapsed = started.elapsed();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    drained
}

/// Takes the reports of the moves from `events` in a task of its own, so that a drain of many
/// units does not outrun a watcher that shares a thread with the drain; once `stop` is sent, it
/// takes what is queued and ends with the moves recorded and the reports it missed.
fn take_reports(
    mut events: broadcast::Receiver<RelocationEvent>,
) -> (oneshot::Sender<()>, JoinHandle<(MoveRecord, u64)>) {
    let (stop, mut stopped) = oneshot::channel();
    let taken = tokio::spawn(async move {
        let mut moves = MoveRecord::default();
        let mut missed = 0;
        let mut take = |event| match event {
            // Only moves that ended on the target are reported as moved; others come as failed.
            RelocationEvent::UnitMoved(report) => moves.record(&report),
            // Failures are counted by the node's status; their reasons are in its log.
            RelocationEvent::UnitFailed { .. }
            | RelocationEvent::Started { .. }
            | RelocationEvent::Completed(_) => {}
        };
        loop {
            tokio::select! {
                biased;
                event = events.recv() => match event {
                    Ok(event) => take(event),
                    Err(RecvError::Lagged(n)) => missed += n,
                    Err(RecvError::Closed) => break,
                },
                // Events sent before the outcome are queued by now; take them all.
                _ = &mut stopped => {
                    loop {
                        match events.try_recv() {
                            Ok(event) => take(event),
                            Err(TryRecvError::Lagged(n)) => missed += n,
                            Err(_) => break,
                        }
                    }
                    break;
                }
            }
        }
        (moves, missed)
    });
    (stop, taken)
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
