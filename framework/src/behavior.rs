//! What application code implements: a [`Behavior`] runs one synchronous turn at a time with a [`Ctx`].
//!
//! Handlers are plain functions on `&mut self`, not futures: between two turns the state is whole,
//! so it can be captured at any boundary and nothing borrowed is left in flight.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{DeferError, MessageError};
use crate::ids::{ActorId, SpotId, UnitId};
use crate::node::{Node, Target};
use crate::session::wire::Encoding;
use crate::session::{PushError, SessionBinding};
use crate::timer::{OverrunPolicy, Tick, TimerSet};
use crate::unit::cell::{Membership, TurnEffects};
pub use crate::unit::envelope::Message;
use ferry_core::session::binding::Notice;

pub use ferry_core::relocation::ReadyOutcome;

/// The behaviour of a Spot or an Actor. One message, timer tick or lifecycle callback is one turn.
///
/// Only [`Behavior::handle`] is required; the callbacks default to doing nothing.
pub trait Behavior: Send + 'static {
    /// The messages this unit takes.
    type Msg: Message;
    /// What it answers to a request. Tells discard it.
    type Reply: Message;

    /// Handles one message.
    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: Self::Msg) -> Self::Reply;

    /// Runs once when the unit is created on a node, before any message (not after a move).
    fn on_start(&mut self, _ctx: &mut Ctx<'_>) {}

    /// Runs for each timer tick.
    fn on_tick(&mut self, _ctx: &mut Ctx<'_>, _tick: &Tick) {}

    /// A Spot learns that an Actor joined it.
    fn on_member_joined(&mut self, _ctx: &mut Ctx<'_>, _actor: &ActorId) {}

    /// A Spot learns that an Actor left it.
    fn on_member_left(&mut self, _ctx: &mut Ctx<'_>, _actor: &ActorId) {}

    /// An Actor learns that it joined a Spot.
    fn on_joined(&mut self, _ctx: &mut Ctx<'_>, _spot: &SpotId) {}

    /// An Actor learns that it left a Spot (and is back in its node's Entry Spot).
    fn on_left(&mut self, _ctx: &mut Ctx<'_>, _spot: &SpotId) {}

    /// Runs when the unit is closed for good (stopped or its node shut down).
    fn on_closing(&mut self, _ctx: &mut Ctx<'_>) {}

    /// An ApplicationSignaled spot learns how a prepared move ended, before its next application turn.
    fn on_relocation_ready_completed(&mut self, _ctx: &mut Ctx<'_>, _outcome: ReadyOutcome) {}
}

/// The context of one turn: the unit's identity, its timers, messaging and workers.
pub struct Ctx<'a> {
    pub(crate) unit: &'a UnitId,
    pub(crate) node: &'a Node,
    /// Read from the clock on first use only: most turns never ask.
    pub(crate) now: std::cell::Cell<Option<Instant>>,
    pub(crate) timers: &'a mut TimerSet,
    pub(crate) membership: &'a Membership,
    /// The client session bound to this unit, if any: pushes go there, numbered.
    pub(crate) binding: &'a mut Option<SessionBinding>,
    pub(crate) effects: &'a mut TurnEffects,
}

impl Ctx<'_> {
    /// This unit's id.
    pub fn id(&self) -> &UnitId {
        self.unit
    }

    /// The node this turn runs on (it changes when the unit moves).
    pub fn node(&self) -> &Node {
        self.node
    }

    /// The time at which this turn started.
    pub fn now(&self) -> Instant {
        match self.now.get() {
            Some(now) => now,
            None => {
                let now = Instant::now();
                self.now.set(Some(now));
                now
            }
        }
    }

    /// Registers (or replaces) a periodic timer, first due one period from now.
    pub fn set_timer(&mut self, name: &str, period: Duration, policy: OverrunPolicy) {
        let now = self.now();
        self.timers
            .set_periodic(name, period, policy, now.into_std());
    }

    /// Registers (or replaces) a timer that fires once after `delay`.
    pub fn set_timeout(&mut self, name: &str, delay: Duration) {
        let now = self.now();
        self.timers.set_one_shot(name, delay, now.into_std());
    }

    /// Cancels a timer; returns whether it was registered.
    pub fn cancel_timer(&mut self, name: &str) -> bool {
        self.timers.cancel(name)
    }

    /// Whether a timer of that name is registered.
    pub fn has_timer(&self, name: &str) -> bool {
        self.timers.contains(name)
    }

    /// Sends a message to a unit by id, wherever it lives.
    pub fn tell<M: Message>(&self, to: impl Into<Target>, msg: M) -> Result<(), MessageError> {
        self.node.tell(to, msg)
    }

    /// Runs a future off-turn; its output comes back to this unit as a message, wherever the unit
    /// lives by then.
    pub fn spawn_worker<M, F>(&self, work: F)
    where
        M: Message,
        F: Future<Output = M> + Send + 'static,
    {
        let node = self.node.clone();
        let me = self.unit.clone();
        tokio::spawn(async move {
            let result = work.await;
            if let Err(error) = node.tell(me.clone(), result) {
                tracing::debug!(unit = %me, %error, "worker result not delivered");
            }
        });
    }

    /// Sends a request off-turn and delivers `then(reply)` back to this unit as a message.
    pub fn request<M, R, T>(
        &self,
        to: impl Into<Target>,
        msg: M,
        timeout: Duration,
        then: impl FnOnce(Result<R, MessageError>) -> T + Send + 'static,
    ) where
        M: Message,
        R: Message,
        T: Message,
    {
        let node = self.node.clone();
        let to: Target = to.into();
        self.spawn_worker(async move { then(node.request(to, msg, timeout).await) });
    }

    /// The Actors that are members of this Spot (empty for an Actor).
    pub fn members(&self) -> impl Iterator<Item = &ActorId> {
        match self.membership {
            Membership::Spot { members } => Some(members.iter()),
            Membership::Actor { .. } => None,
        }
        .into_iter()
        .flatten()
    }

    /// The User Spot this Actor is in (`None` for the Entry Spot, or for a Spot).
    pub fn spot(&self) -> Option<&SpotId> {
        match self.membership {
            Membership::Actor { spot } => spot.as_ref(),
            Membership::Spot { .. } => None,
        }
    }

    /// Pushes a message to the client session bound to this Actor, wherever the session's
    /// connection lives and wherever this Actor runs: pushes reach the client in the order they
    /// were made, also across a move.
    ///
    /// Sent at once (not when the turn ends). Fails when no session is bound, and when the
    /// gateway cannot be reached now; then nothing was sent and the order is kept. In a room
    /// with a confirmed standby it is sent once the standby holds this turn instead: it fails
    /// only when no session is bound.
    pub fn push<M: Message>(&mut self, msg: M) -> Result<(), PushError> {
        let Some(binding) = self.binding.as_mut() else {
            return Err(PushError::NotBound {
                id: self.unit.clone(),
            });
        };
        let UnitId::Actor(actor) = self.unit else {
            return Err(PushError::NotBound {
                id: self.unit.clone(),
            });
        };
        let payload = match binding.session.encoding {
            Encoding::Postcard => postcard::to_allocvec(&msg).map_err(|e| e.to_string()),
            Encoding::Json => serde_json::to_vec(&msg).map_err(|e| e.to_string()),
        }
        .map_err(|reason| PushError::Encode { reason })?;
        let notice = binding.push(actor, payload.into());
        if self.effects.hold_pushes {
            // Numbered now, sent once the room's standby holds this turn.
            self.effects.pushes.push(notice);
            binding.pushed();
            return Ok(());
        }
        let Notice { gateway, frame } = notice;
        self.node
            .to_gateway(&gateway, frame)
            .map_err(|e| PushError::Unreachable {
                gateway,
                reason: e.to_string(),
            })?;
        binding.pushed();
        Ok(())
    }

    /// Whether a client session is bound to this Actor now.
    pub fn is_bound(&self) -> bool {
        self.binding.is_some()
    }

    /// Stops this unit when the turn ends; its queued requests get `UnitStopped`.
    pub fn stop(&mut self) {
        self.effects.stop = true;
    }

    /// Marks the end of this turn as a safe point to capture an ApplicationSignaled spot.
    ///
    /// Refused, changing nothing, for any other unit or when called twice in one turn.
    pub fn relocation_ready_defer(&mut self) -> Result<(), DeferError> {
        if !self.effects.can_defer {
            return Err(DeferError::NotApplicationSignaled);
        }
        if self.effects.deferred {
            return Err(DeferError::AlreadyDeferred);
        }
        self.effects.deferred = true;
        Ok(())
    }
}
