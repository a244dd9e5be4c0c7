//! Stopping a node: at once (as a crash would), or within a deadline, letting units finish.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::handle::Node;
use super::hosted::{Control, LaneTx};
use crate::cluster::authority::NodeState;
use crate::ids::UnitId;

impl Node {
    /// Stops the node at once, as a crash would: no turn or callback runs any more, nothing is
    /// released (records keep naming it, its lease runs out on its own), and it leaves the mesh.
    /// For tests and fault drills; `shutdown` is the orderly way.
    pub async fn abort(&self) {
        self.fence("aborted");
        self.core.stop.cancel();
        if let Some(hub) = &self.core.sessions {
            hub.abort().await;
        }
        self.close_lanes(Duration::ZERO).await;
        if let Some(mesh) = &self.core.links.mesh {
            mesh.close().await;
        }
        self.drop_copies();
        self.set_state(NodeState::Stopped);
    }

    /// Closes every lane, letting each finish its queued work for up to `grace`; what is left then
    /// is closed at once. Returns the units that were hosted, and whether all finished in time.
    async fn close_lanes(&self, grace: Duration) -> (Vec<UnitId>, bool) {
        let mut waits = Vec::new();
        let mut seen: Vec<Arc<LaneTx>> = Vec::new();
        let mut ids = Vec::new();
        for (id, entry) in self.core.units.directory.all() {
            ids.push(id);
            if seen.iter().any(|l| Arc::ptr_eq(l, &entry.lane)) {
                continue;
            }
            seen.push(entry.lane.clone());
            let (done, wait) = oneshot::channel();
            let now = grace.is_zero();
            if entry.lane.ctl.send(Control::Close { done, now }).is_ok() {
                waits.push((entry.lane, wait));
            }
        }
        let until = tokio::time::Instant::now() + grace;
        let mut in_time = true;
        for (lane, wait) in waits {
            let mut wait = wait;
            if tokio::time::timeout_at(until, &mut wait).await.is_err() {
                // Closed as soon as its turn returns; a handler stuck for good is not waited for.
                in_time = false;
                let (done, _) = oneshot::channel();
                let _ = lane.ctl.send(Control::Close { done, now: true });
            }
        }
        (ids, in_time)
    }

    /// Shuts down within 30 seconds; see [`Node::shutdown_within`].
    pub async fn shutdown(&self) -> ShutdownOutcome {
        self.shutdown_within(Duration::from_secs(30)).await
    }

    /// Stops taking new work, lets every unit finish what it had accepted, closes them (each runs
    /// `on_closing`), releases their records and the lease, and leaves the mesh. Units still busy at
    /// the deadline are closed at once, their queued requests ending with `UnitStopped`.
    ///
    /// Client sessions are closed first, each with a reason its client reads (and reconnects on).
    ///
    /// Returns within `deadline` plus [`SHUTDOWN_MARGIN`], whatever the store and the links do:
    /// releasing records and the lease gets up to [`TEARDOWN_GRACE`] past the deadline (what is
    /// not released by then is `TeardownFailed`, and recovery clears it), and leaving the mesh
    /// up to [`crate::mesh::CLOSE_LINGER`].
    pub async fn shutdown_within(&self, deadline: Duration) -> ShutdownOutcome {
        let until = tokio::time::Instant::now() + deadline;
        self.set_state(NodeState::Draining);
        if let Some(hub) = &self.core.sessions {
            let reason = format!(
                "node {} is shutting down; connect to another node",
                self.id()
            );
            hub.shutdown(self, &reason).await;
        }
        // Moves into this node go back to their sources, but a commit in flight cannot be called
        // back: it is waited for, so that a unit it opens here is closed and released with the
        // others, never left recorded on a stopped node.
        if self.stop_arrivals() > 0 {
            let mut arrivals = self.core.moves.arrivals.subscribe();
            if tokio::time::timeout_at(until, arrivals.wait_for(|n| *n == 0))
                .await
                .is_err()
            {
                tracing::warn!("a move into this node was still committing at the deadline");
            }
        }
        let grace = until.saturating_duration_since(tokio::time::Instant::now());
        let (ids, in_time) = self.close_lanes(grace.max(Duration::from_millis(1))).await;
        self.standby_stopping();
        self.core.stop.cancel();
        let teardown = async {
            let mut released = true;
            for chunk in ids.chunks(64) {
                let deletes = chunk.iter().map(|id| self.delete_own_record(id, false));
                for (id, result) in chunk
                    .iter()
                    .zip(futures_util::future::join_all(deletes).await)
                {
                    if let Err(error) = result {
                        released = false;
                        tracing::warn!(unit = %id, %error, "record not released at shutdown");
                    }
                }
            }
            self.withdraw().await;
            released
        };
        let teardown_until = until.max(tokio::time::Instant::now()) + TEARDOWN_GRACE;
        let released = match tokio::time::timeout_at(teardown_until, teardown).await {
            Ok(released) => released,
            Err(_) => {
                tracing::warn!(grace = ?TEARDOWN_GRACE,
                    "the store did not take the shutdown's releases in time; recovery clears \
                     what is left once the lease runs out");
                false
            }
        };
        if let Some(mesh) = &self.core.links.mesh {
            mesh.close().await;
        }
        self.drop_copies();
        self.set_state(NodeState::Stopped);
        self.core
            .host
            .status
            .send_modify(|s| s.safe_to_shutdown = true);
        let outcome = match (in_time, released) {
            (true, true) => ShutdownOutcome::Stopped,
            (false, _) => ShutdownOutcome::ForceStopped {
                reason: ShutdownReason::DeadlineExceeded,
            },
            (true, false) => ShutdownOutcome::ForceStopped {
                reason: ShutdownReason::TeardownFailed,
            },
        };
        tracing::info!(node = %self.id(), ?outcome, "node stopped");
        outcome
    }
}

/// How long past its deadline a shutdown may spend releasing records and its lease.
pub const TEARDOWN_GRACE: Duration = Duration::from_secs(1);

/// How long past its deadline [`Node::shutdown_within`] may return: the store's teardown, then
/// leaving the mesh.
pub const SHUTDOWN_MARGIN: Duration = TEARDOWN_GRACE.saturating_add(crate::mesh::CLOSE_LINGER);

/// How a shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ShutdownOutcome {
    /// Every unit finished its accepted work and closed; records and lease were released.
    Stopped,
    /// Not everything ended cleanly.
    ForceStopped {
        /// What was left undone: a unit still busy at the deadline, or a record not released.
        reason: ShutdownReason,
    },
}

/// Why a shutdown was forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ShutdownReason {
    /// Some unit was still busy at the deadline; its queued requests ended with `UnitStopped`.
    DeadlineExceeded,
    /// Some record could not be released (the store was unreachable); recovery will clear it.
    TeardownFailed,
}
