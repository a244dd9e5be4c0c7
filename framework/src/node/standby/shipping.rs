//! Frames from an owner to its rooms' standbys, sent at once or gathered: a periodic room's
//! checkpoint may wait the short while its policy allows ([`Policy::gather`]) to leave with the
//! others the node took meanwhile, so that a node at rest writes its checkpoints a few times a
//! second rather than once per room, and its holders answer them in as few writes. Drops of a
//! copy go the gathered way too, behind the checkpoints they follow.

use std::time::Duration;

use tokio::time::Instant;

use super::super::handle::Node;
use crate::cluster::frames::Frame;
use crate::ids::NodeId;
use ferry_core::standby::drops_copy_at_end;
use ferry_core::standby::frames::StandbyFrame;

#[cfg(doc)]
use ferry_core::standby::Policy;

impl Node {
    /// Sends `frame` to `holder` now if `gather` is zero, else within `gather`, together with
    /// what else waits. Frames to one holder leave in the order given either way, as long as a
    /// room's frames are all sent at once or all gathered. Once the node stopped in order
    /// ([`Node::standby_stopping`]), nothing waits.
    pub(super) fn ship(&self, holder: &NodeId, frame: StandbyFrame, gather: Duration) {
        if gather.is_zero() {
            self.send_standby(holder, frame);
            return;
        }
        let due = Instant::now() + gather;
        let mut gathered = self.core.standby.owning.gathered.lock();
        if gathered.stopped {
            drop(gathered);
            self.send_standby(holder, frame);
            return;
        }
        gathered.frames.push((holder.clone(), frame));
        if gathered.due.is_none_or(|d| due < d) {
            gathered.due = Some(due);
            drop(gathered);
            self.core.standby.owning.gathering.notify_one();
        }
    }

    /// The node stops in order, its rooms closed: what waits goes now, while the mesh is up
    /// (their holders drop their copies), and what comes later goes at once. Unless the node is
    /// fenced off: then it may no longer own its rooms, and nothing more goes.
    pub(crate) fn standby_stopping(&self) {
        let frames = self.take_gathered(true);
        if drops_copy_at_end(self.fenced()) {
            self.send_all(frames);
        }
    }

    /// Sends the gathered frames when the first of them is due, until the node stops.
    pub(crate) async fn send_gathered(self) {
        let owning = &self.core.standby.owning;
        loop {
            let due = owning.gathered.lock().due;
            let wait = async {
                match due {
                    Some(due) => tokio::time::sleep_until(due).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.core.stop.cancelled() => return,
                // An earlier deadline, or the first frame: look again.
                () = owning.gathering.notified() => continue,
                () = wait => self.send_all(self.take_gathered(false)),
            }
        }
    }

    /// Takes every gathered frame; `stop`: from now on nothing waits.
    fn take_gathered(&self, stop: bool) -> Vec<(NodeId, StandbyFrame)> {
        let mut gathered = self.core.standby.owning.gathered.lock();
        gathered.stopped |= stop;
        gathered.due = None;
        std::mem::take(&mut gathered.frames)
    }

    fn send_all(&self, frames: Vec<(NodeId, StandbyFrame)>) {
        for (holder, frame) in frames {
            self.send_standby(&holder, frame);
        }
    }

    /// Sends a standby frame over the mesh. One that fails leaves a checkpoint unanswered
    /// (a new series starts after its answer wait) or a copy kept until a later series
    /// replaces it.
    fn send_standby(&self, holder: &NodeId, frame: StandbyFrame) {
        if let Err(error) = self.mesh_send(holder, Frame::Standby(Box::new(frame))) {
            tracing::debug!(%holder, %error, "standby frame not sent");
        }
    }
}
