//! The holder's side of a standby: the copies kept here for rooms other nodes own, each changed
//! only by the next checkpoint of its series ([`ferry_core::standby::replica::apply`]). A copy's
//! image is decoded only when it is promoted, never when a checkpoint is applied.

use super::super::handle::Node;
use crate::cluster::frames::Frame;
use crate::ids::{NodeId, ObjectGeneration, UnitId};
use crate::unit::standby::Held;
use ferry_core::standby::checkpoints::Checkpoint;
use ferry_core::standby::frames::StandbyFrame;
use ferry_core::standby::replica::{self, Applied, Refusal};

impl Node {
    /// A checkpoint or a drop from a room's owner.
    pub(super) fn on_copy_frame(&self, from: NodeId, frame: StandbyFrame) {
        match frame {
            StandbyFrame::Checkpoint {
                unit,
                incarnation,
                checkpoint,
            } => {
                let applied = self.apply_checkpoint(&from, &unit, incarnation, &checkpoint);
                let (series, number) = (checkpoint.series, checkpoint.number);
                let answer = match applied {
                    Ok(_) => StandbyFrame::Acked {
                        unit,
                        series,
                        number,
                    },
                    Err(refusal) => StandbyFrame::Refused {
                        unit,
                        series,
                        number,
                        stale: matches!(refusal, Refusal::Stale { .. }),
                        reason: refusal.to_string(),
                    },
                };
                if let Err(error) = self.mesh_send(&from, Frame::Standby(Box::new(answer))) {
                    tracing::debug!(owner = %from, %error, "checkpoint answer not sent; the owner starts a new series when it is overdue");
                }
            }
            StandbyFrame::Drop { unit, series } => {
                let mut held = self.core.standby.copies.held.lock();
                if held
                    .get(&unit)
                    .is_some_and(|h| h.replica.dropped_by(series))
                {
                    held.remove(&unit);
                }
            }
            StandbyFrame::Acked { .. } | StandbyFrame::Refused { .. } => {}
        }
    }

    /// The node stopped: the copies it kept go with it (recovery promotes only a copy on a
    /// serving node, and their owners choose other holders once this one left their view).
    pub(crate) fn drop_copies(&self) {
        self.core.standby.copies.held.lock().clear();
    }

    /// Applies `checkpoint` from `from` to the copy of `unit` kept here. A refused checkpoint
    /// leaves the copy as it was; a stale one is answered too, so that its sender stops.
    fn apply_checkpoint(
        &self,
        from: &NodeId,
        unit: &UnitId,
        incarnation: ObjectGeneration,
        checkpoint: &Checkpoint,
    ) -> Result<Applied, Refusal> {
        let runs_room = self.hosts(unit);
        let mut copies = self.core.standby.copies.held.lock();
        let before = copies.remove(unit);
        let (mut replica, kept) = match before {
            Some(held) => (Some(held.replica), Some((held.owner, held.incarnation))),
            None => (None, None),
        };
        let applied = replica::apply(&mut replica, checkpoint, runs_room);
        let owner = match (&applied, kept) {
            (Ok(Applied::New), _) | (_, None) => (from.clone(), incarnation),
            (_, Some(kept)) => kept,
        };
        if let Some(replica) = replica {
            let (owner, incarnation) = owner;
            copies.insert(
                unit.clone(),
                Held {
                    owner,
                    incarnation,
                    replica,
                },
            );
        }
        applied
    }
}
