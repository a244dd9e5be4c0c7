//! The one host operation (a drain, or a drain and stop) that runs on a node at a time, whoever
//! asked for it: the admin endpoint or a signal. Each runs on a task of its own, so a caller that
//! gives up waiting (a dropped connection, a second signal) never cuts one short.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferry::{Node, RelocateMode, RelocateOptions};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::admin::wire::{DrainReport, Outcome, ShutdownReport};

/// The operations of one node.
pub struct Operations {
    node: Node,
    ops: watch::Sender<Ops>,
    stopped: watch::Sender<Option<ShutdownReport>>,
}

/// The operation running now, and how the last drain ended.
#[derive(Default)]
struct Ops {
    running: Option<Running>,
    last_drain: Option<DrainReport>,
}

/// An operation that runs.
#[derive(Debug, Clone)]
pub struct Running {
    /// `"drain"` or `"shutdown"`.
    pub operation: &'static str,
    /// What it was asked to do.
    pub options: RelocateOptions,
    /// When it started.
    pub started: Instant,
}

/// Another operation holds the node: the one named.
#[derive(Debug, Clone, Copy)]
pub struct Busy(pub &'static str);

/// The operation a task runs, and what it answers.
pub type Task<T> = tokio::task::JoinHandle<T>;

impl Operations {
    /// The operations of `node`; none runs.
    pub fn new(node: Node) -> Arc<Self> {
        Arc::new(Operations {
            node,
            ops: watch::Sender::new(Ops::default()),
            stopped: watch::Sender::new(None),
        })
    }

    /// The node these operations run on, for the admin routes that read it.
    pub(crate) fn node(&self) -> &Node {
        &self.node
    }

    /// The operation running now.
    pub fn running(&self) -> Option<Running> {
        self.ops.borrow().running.clone()
    }

    /// How the last drain ended.
    pub fn last_drain(&self) -> Option<DrainReport> {
        self.ops.borrow().last_drain.clone()
    }

    /// Claims the one slot for an operation, or says which one holds it.
    fn claim(&self, operation: &'static str, options: &RelocateOptions) -> Result<(), Busy> {
        let mut busy = None;
        self.ops.send_if_modified(|ops| match &ops.running {
            Some(running) => {
                busy = Some(running.operation);
                false
            }
            None => {
                ops.running = Some(Running {
                    operation,
                    options: options.clone(),
                    started: Instant::now(),
                });
                true
            }
        });
        match busy {
            None => Ok(()),
            Some(other) => Err(Busy(other)),
        }
    }

    /// Drains the node and remembers the report.
    async fn run_drain(&self, options: RelocateOptions) -> DrainReport {
        let started = Instant::now();
        let outcome = self.node.relocate(options).await;
        let status = self.node.watch_status().borrow().clone();
        let mut report = DrainReport::new(&outcome, &status, started.elapsed());
        if report.reason == Some(ferry::BlockedReason::NoServingPeer) {
            let drained = self.node.drained_peers();
            report.drained_peers = drained.iter().map(ToString::to_string).collect();
        }
        self.ops
            .send_modify(|ops| ops.last_drain = Some(report.clone()));
        report
    }

    /// Starts a drain on its own task.
    pub fn drain(self: &Arc<Self>, options: RelocateOptions) -> Result<Task<DrainReport>, Busy> {
        self.claim("drain", &options)?;
        let task = self.clone();
        Ok(tokio::spawn(async move {
            let report = task.run_drain(options).await;
            task.ops.send_modify(|ops| ops.running = None);
            report
        }))
    }

    /// Starts a drain within `deadline` and then a stop, on its own task; the stop uses what is
    /// left of the deadline. The slot stays taken: a stopped node runs nothing else.
    pub fn shutdown(self: &Arc<Self>, deadline: Duration) -> Result<Task<ShutdownReport>, Busy> {
        let options = RelocateOptions {
            mode: RelocateMode::PlannedMaintenance,
            deadline,
        };
        self.claim("shutdown", &options)?;
        let task = self.clone();
        Ok(tokio::spawn(async move {
            let until = Instant::now() + deadline;
            let drain = task.run_drain(options).await;
            let shutdown = task
                .node
                .shutdown_within(until.saturating_duration_since(Instant::now()))
                .await;
            let clean =
                drain.outcome == Outcome::Relocated && shutdown == ferry::ShutdownOutcome::Stopped;
            let report = ShutdownReport {
                drain,
                shutdown,
                clean,
            };
            task.stopped.send_replace(Some(report.clone()));
            report
        }))
    }

    /// Resolves once no operation runs.
    pub async fn idle(&self) {
        let mut ops = self.ops.subscribe();
        // The sender lives in `self`, so the wait cannot fail.
        let _ = ops.wait_for(|ops| ops.running.is_none()).await;
    }

    /// Resolves once a shutdown has stopped the node, with its report.
    pub fn stopped(&self) -> impl Future<Output = ShutdownReport> + use<> {
        let mut stopped = self.stopped.subscribe();
        async move {
            match stopped.wait_for(Option::is_some).await {
                Ok(report) => match report.clone() {
                    Some(report) => report,
                    None => std::future::pending().await,
                },
                // The operations are gone: no shutdown will be asked for any more.
                Err(_) => std::future::pending().await,
            }
        }
    }
}
