//! A lane's part in its room's standby: the room's checkpoints start when it opens here, are
//! taken at turn boundaries (and when one falls due while the room is idle), and end when the
//! room leaves the node. In confirmed mode a checkpoint carries what is queued for the room and
//! its members, and what its turns cause (a request's reply, a fence's answer that lets the
//! gateway confirm a client's inputs, a push) waits in an outbox until the core releases their
//! turn. A lane whose room keeps no standby does none of this.

use tokio::time::Instant;

use super::Lane;
use crate::error::MessageError;
use crate::ids::UnitId;
use crate::unit::envelope::{ReplyTo, Terminal};
use crate::unit::lane::Owned;
use ferry_core::session::binding::Notice;

/// What a turn caused, held until the room's standby holds that turn.
pub(super) enum Effect {
    /// A request's answer.
    Answer {
        reply_to: Box<ReplyTo>,
        terminal: Terminal,
    },
    /// A push to a client, numbered when the turn made it.
    Push(Notice),
}

impl Lane {
    /// The room opened here, recorded as `owned`: its checkpoints start if its factory keeps a
    /// standby.
    pub(super) fn standby_open(&mut self, owned: Owned, now: Instant) {
        let Some(unit) = self.primary_spot() else {
            return;
        };
        let Some(cell) = self.cells.get(&unit) else {
            return;
        };
        let room = self
            .node
            .standby_start(unit, cell.info(), owned, self.me.clone());
        if let Some(old) = std::mem::replace(&mut self.standby, room) {
            self.node.standby_end(&old);
        }
        self.standby_checkpoint(now);
    }

    /// A turn ran on the room at `now`: counted (its answers are held under its number), and a
    /// checkpoint taken if one may go.
    pub(super) fn standby_turn(&mut self, now: Instant) {
        let Some(room) = &self.standby else {
            return;
        };
        // A room whose checkpoints stopped (a later owner runs it, as its standby knows it)
        // confirms nothing any more: its answers wait until it leaves, and end as lost.
        self.standby_turns = self.node.standby_turn(room, now).unwrap_or(u64::MAX);
        self.standby_checkpoint(now);
    }

    /// Whether the room's effects wait for its standby (confirmed mode): its turns then hold
    /// their pushes for the outbox.
    pub(super) fn holds_effects(&self) -> bool {
        self.standby.as_ref().is_some_and(|r| r.holds_effects)
    }

    /// Sends a request's answer, or, while the room's standby does not hold the last turn
    /// (confirmed mode), holds it until it does.
    pub(super) fn answer(&mut self, reply_to: Box<ReplyTo>, terminal: Terminal) {
        if self.standby.is_none() {
            self.node.complete(&reply_to, terminal);
            return;
        }
        self.effect(Effect::Answer { reply_to, terminal });
    }

    /// The pushes a turn held: sent in order once the standby holds the turn.
    pub(super) fn held_pushes(&mut self, pushes: Vec<Notice>) {
        for push in pushes {
            self.effect(Effect::Push(push));
        }
    }

    /// An effect of the last turn: sent now if the core releases that turn and nothing waits
    /// before it, else held.
    fn effect(&mut self, effect: Effect) {
        let released = self.standby_released;
        if let Some(effect) = self.outbox.effect(self.standby_turns, effect, released) {
            self.send_effect(effect);
        }
    }

    fn send_effect(&self, effect: Effect) {
        match effect {
            Effect::Answer { reply_to, terminal } => self.node.complete(&reply_to, terminal),
            Effect::Push(Notice { gateway, frame }) => {
                if let Err(error) = self.node.to_gateway(&gateway, frame) {
                    tracing::debug!(%gateway, %error, "held push not sent; its session misses it");
                }
            }
        }
    }

    /// Sends the held effects whose turns the core releases now.
    fn release_effects(&mut self) {
        let Some(room) = &self.standby else {
            return;
        };
        self.standby_released = self.node.standby_released(room);
        for effect in self.outbox.release(self.standby_released) {
            self.send_effect(effect);
        }
    }

    /// Takes a checkpoint if one may go now, with what is queued if the room's policy says so;
    /// and sets when to look again if no turn comes first.
    pub(super) fn standby_checkpoint(&mut self, now: Instant) {
        let Some(room) = self.standby.clone() else {
            return;
        };
        let node = self.node.clone();
        self.standby_due = node.standby_checkpoint(&room, now, || {
            if room.carries_queue {
                self.checkpoint_image()
            } else {
                self.snapshot()
            }
        });
        self.release_effects();
    }

    /// Whether the room's next checkpoint fell due by `now` with no turn since.
    pub(super) fn standby_due_by(&self, now: Instant) -> bool {
        self.standby_due.is_some_and(|due| due <= now)
    }

    /// Unit `unit` left this node: if it is the room, its checkpoints end.
    pub(super) fn standby_left(&mut self, unit: &UnitId) {
        if self.standby.as_ref().is_some_and(|r| r.unit == *unit) {
            self.standby_gone();
        }
    }

    /// The room left this node (moved away, stopped, or the node shuts down): its checkpoints
    /// end, and its holder drops the copy.
    pub(super) fn standby_gone(&mut self) {
        self.standby_due = None;
        if let Some(room) = self.standby.take() {
            self.node.standby_end(&room);
        }
        // Whoever asked cannot be told their turn is held by a standby: it may or may not have
        // run, and they hear so rather than a confirmation (the core's `Outbox::drain`). Pushes
        // were numbered: the client's session would close on the gap, so they go.
        for effect in self.outbox.drain() {
            match effect {
                Effect::Answer { reply_to, .. } => {
                    let reason = "the room left this node before its standby held the turn that answered; it may have run".to_owned();
                    self.node
                        .complete(&reply_to, Err(MessageError::ReplyLost { reason }));
                }
                push @ Effect::Push(_) => self.send_effect(push),
            }
        }
    }
}
