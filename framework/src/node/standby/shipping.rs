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
use ferry_core::standby::GATHER;
use ferry_core::standby::frames::StandbyFrame;

#[cfg(doc)]
use ferry_core::standby::Policy;

impl Node {
    /// Sends `frame` to `holder` now if `gather` is zero, else within `gather`, together with
    /// what else waits. Frames to one holder leave in the order given either way, as long as a
    /// room's frames are all sent at once or all gathered.
    pub(super) fn ship(&self, holder: &NodeId, frame: StandbyFrame, gather: Duration) {
        if gather.is_zero() {
            self.send_standby(holder, frame);
            return;
        }
        let due = Instant::now() + gather;
        let mut gathered = self.core.standby.owning.gathered.lock();
        gathered.frames.push((holder.clone(), frame));
        if gathered.due.is_none_or(|d| due < d) {
            gathered.due = Some(due);
            drop(gathered);
            self.core.standby.owning.gathering.notify_one();
        }
    }

    /// Sends a copy's drop, gathered behind the checkpoints that went before it.
    pub(super) fn ship_drop(&self, holder: &NodeId, frame: StandbyFrame) {
        self.ship(holder, frame, GATHER);
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
                () = wait => {}
            }
            let frames = {
                let mut gathered = owning.gathered.lock();
                gathered.due = None;
                std::mem::take(&mut gathered.frames)
            };
            for (holder, frame) in frames {
                self.send_standby(&holder, frame);
            }
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
