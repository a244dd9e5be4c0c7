//! A lane's part in client sessions: binds and unbinds applied in queue order, and the quiet
//! spell before a move seals the lane, during which new binds wait and move with the unit.

use bytes::Bytes;

use super::{Lane, Quiet};
use crate::error::MessageError;
use crate::ids::{ActorId, UnitId};
use crate::node::directory::Slot;
use crate::node::{Envelope, Payload, ReplyTo};
use crate::relocation::RelocationId;
use crate::session::frames::SessionFrame;
use crate::session::{SessionBinding, SessionOp, SessionRef};

impl Lane {
    /// Applies a bind or unbind to an Actor of this lane, and answers its gateway.
    pub(super) fn session_op(&mut self, slot: Slot, op: SessionOp, reply: Option<Box<ReplyTo>>) {
        let Some(to) = self.cells.id(slot) else {
            let payload = Payload::Session(op);
            self.lost(Envelope {
                to: slot,
                payload,
                reply,
            });
            return;
        };
        if self.quiescing.is_some() && matches!(op, SessionOp::Bind(_)) {
            // Its gateway was not told to hold inputs for this move: it binds after the move.
            self.deferred.push(Envelope {
                to: slot,
                payload: Payload::Session(op),
                reply,
            });
            return;
        }
        let node = self.node.clone();
        // Gateways address Actors only; a Spot of that name is no Actor.
        let outcome = match (op, &to) {
            (SessionOp::Fence, _) => Ok(()),
            (SessionOp::Bind(session), UnitId::Actor(actor)) => self.bind(actor, session),
            (SessionOp::Unbind(session), UnitId::Actor(_)) => {
                if let Some(cell) = self.cells.get_mut(&to) {
                    let binding = cell.binding_mut();
                    if binding.as_ref().is_some_and(|b| b.session == session) {
                        *binding = None;
                    }
                }
                Ok(())
            }
            (_, UnitId::Spot(_)) => Err(MessageError::UnknownId { id: to.clone() }),
        };
        if let Some(reply_to) = reply {
            let terminal = outcome.map(|()| Payload::Encoded(Bytes::new()));
            node.complete(&reply_to, terminal);
        }
    }

    fn bind(&mut self, actor: &ActorId, session: SessionRef) -> Result<(), MessageError> {
        let id = UnitId::Actor(actor.clone());
        let Some(cell) = self.cells.get_mut(&id) else {
            return Err(MessageError::UnknownId { id });
        };
        let type_name = cell.info().type_name.to_string();
        let binding = cell.binding_mut();
        let replaced = match binding.as_ref() {
            Some(old) if old.session == session => None,
            old => {
                let old = old.map(|b| b.session.clone());
                *binding = Some(SessionBinding {
                    session: session.clone(),
                    next_push: 0,
                });
                old
            }
        };
        if let Some(old) = replaced {
            let frame = SessionFrame::Unbound {
                session: old.session,
                actor: actor.clone(),
                epoch: old.epoch,
                reason: "another session bound this Actor (the player connected again)".into(),
            };
            if let Err(error) = self.node.to_gateway(&old.gateway, frame) {
                tracing::debug!(gateway = %old.gateway, %error, "replaced session not told");
            }
        }
        Self::answer(&self.node, &session, actor, Ok(type_name));
        Ok(())
    }

    fn answer(
        node: &crate::node::Node,
        session: &SessionRef,
        actor: &ActorId,
        verdict: Result<String, String>,
    ) {
        let frame = SessionFrame::Bound {
            session: session.session,
            actor: actor.clone(),
            epoch: session.epoch,
            verdict,
        };
        if let Err(error) = node.to_gateway(&session.gateway, frame) {
            tracing::debug!(gateway = %session.gateway, %error, "bind answer not sent");
        }
    }

    /// Tells the gateways of the Actors among `gone` that their binding ended, and why.
    pub(super) fn unbind_gone(&mut self, gone: &[UnitId], reason: &str) {
        for id in gone {
            let (UnitId::Actor(actor), Some(cell)) = (id, self.cells.get_mut(id)) else {
                continue;
            };
            let Some(binding) = cell.binding_mut().take() else {
                continue;
            };
            let frame = SessionFrame::Unbound {
                session: binding.session.session,
                actor: actor.clone(),
                epoch: binding.session.epoch,
                reason: reason.to_owned(),
            };
            let _ = self.node.to_gateway(&binding.session.gateway, frame);
        }
    }

    /// A move is about to seal the lane: the sessions bound to its Actors, or why it cannot move.
    pub(super) fn quiesce(&mut self, rel: RelocationId, unit: &UnitId) -> Result<Quiet, String> {
        if !self.open || self.moving.is_some() || self.quiescing.is_some() {
            return Err("the unit is not running here, or already moving".into());
        }
        match self.primary() {
            Some(primary) if primary == *unit => {}
            Some(primary) => return Err(format!("{unit} moves with {primary}")),
            None => return Err("the lane is empty".into()),
        }
        self.quiescing = Some(rel);
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

    /// The quiet spell ends: binds held back take their place at the head of the queue again
    /// (they were taken from it before anything still in it).
    pub(super) fn end_quiesce(&mut self) {
        self.quiescing = None;
        self.requeue_deferred();
    }

    /// Puts binds held back at the head of the queue again.
    pub(super) fn requeue_deferred(&mut self) {
        for envelope in std::mem::take(&mut self.deferred).into_iter().rev() {
            self.backlog.push_front(envelope);
        }
    }
}
