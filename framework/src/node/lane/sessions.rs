//! A lane's part in client sessions: it carries out what the core's binding rules
//! (`ferry_core::session::binding`) decide for binds, unbinds and fences in queue order, and
//! keeps the quiet spell before a move seals the lane, during which new binds wait and move
//! with the unit.

use bytes::Bytes;
use ferry_core::session::binding::{self, Addressee, Notice, Step};

use super::Lane;
use crate::ids::{ActorId, UnitId};
use crate::relocation::RelocationId;
use crate::session::{SessionBinding, SessionOp};
use crate::unit::envelope::{Envelope, Payload, ReplyTo};
use crate::unit::lane::Quiet;
use crate::unit::lane::Slot;

impl Lane {
    /// Applies a bind, an unbind or a fence to a unit of this lane as the core's binding rules
    /// say, tells the gateways concerned, and answers the op's request.
    pub(super) fn session_op(&mut self, slot: Slot, op: SessionOp, reply: Option<Box<ReplyTo>>) {
        let quiet = self.stance.quiet();
        let fence = matches!(op, SessionOp::Fence);
        let step = match self.cells.at_mut(slot) {
            Some(cell) => {
                let id = cell.id().clone();
                let type_name = cell.info().type_name.to_string();
                let unit = Addressee {
                    id: &id,
                    type_name: &type_name,
                    binding: cell.binding_mut(),
                };
                binding::apply(op, quiet, unit)
            }
            None => {
                let payload = Payload::Session(op);
                self.lost(Envelope {
                    to: slot,
                    payload,
                    reply,
                });
                return;
            }
        };
        match step {
            Step::Wait(op) => self.deferred.push(Envelope {
                to: slot,
                payload: Payload::Session(op),
                reply,
            }),
            Step::Done { notices, answer } => {
                for notice in notices {
                    self.tell_gateway(notice);
                }
                if let Some(reply_to) = reply {
                    let terminal = answer.map(|()| Payload::Encoded(Bytes::new()));
                    if fence {
                        // A fence's answer confirms the inputs before it to the client: in
                        // confirmed mode it waits, like a reply, until the standby holds them.
                        self.answer(reply_to, terminal);
                    } else {
                        self.node.complete(&reply_to, terminal);
                    }
                }
            }
        }
    }

    fn tell_gateway(&self, Notice { gateway, frame }: Notice) {
        if let Err(error) = self.node.to_gateway(&gateway, frame) {
            tracing::debug!(%gateway, %error, "session frame for a gateway not sent");
        }
    }

    /// Tells the gateways of the Actors among `gone` that their binding ended, and why.
    pub(super) fn unbind_gone(&mut self, gone: &[UnitId], reason: &str) {
        for id in gone {
            let (UnitId::Actor(actor), Some(cell)) = (id, self.cells.get_mut(id)) else {
                continue;
            };
            if let Some(old) = cell.binding_mut().take() {
                self.tell_gateway(binding::ended(actor, old, reason));
            }
        }
    }

    /// A move is about to seal the lane: the sessions bound to its Actors, or why it cannot move.
    pub(super) fn quiesce(&mut self, rel: RelocationId, unit: &UnitId) -> Result<Quiet, String> {
        match self.primary() {
            Some(primary) if primary == *unit => {}
            Some(primary) => return Err(format!("{unit} moves with {primary}")),
            None => return Err("the lane is empty".into()),
        }
        self.stance.quiesce(rel)?;
        Ok(Quiet {
            bindings: self.bindings(),
            units: self.cells.ids().cloned().collect(),
        })
    }

    /// Every Actor of this lane with a session bound, and its binding.
    pub(super) fn bindings(&self) -> Vec<(ActorId, SessionBinding)> {
        self.cells
            .iter()
            .filter_map(|(_, cell)| match (cell.id(), cell.binding()) {
                (UnitId::Actor(actor), Some(binding)) => Some((actor.clone(), binding.clone())),
                _ => None,
            })
            .collect()
    }

    /// Puts binds held back at the head of the queue again.
    pub(super) fn requeue_deferred(&mut self) {
        for envelope in std::mem::take(&mut self.deferred).into_iter().rev() {
            self.backlog.push_front(envelope);
        }
    }
}
