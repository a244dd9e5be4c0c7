//! One unit instance behind a type-erased face: its behaviour, timers and membership.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use super::envelope::Payload;
use crate::behavior::{Behavior, Ctx, Membership, ReadyOutcome, TurnEffects};
use crate::error::MessageError;
use crate::ids::{ActorId, SpotId, UnitId};
use crate::node::Node;
use crate::registry::{
    AdapterError, ExecutionMode, FactoryInfo, FactoryKind, ReadinessMode, RelocationPolicy,
    TypedFactory,
};
use crate::session::SessionBinding;
use crate::timer::TimerSnapshot;
use crate::timer::{Tick, TimerSet};

/// A factory without its type: builds cells.
pub(crate) trait AnyFactory: Send + Sync + 'static {
    fn info(&self) -> &FactoryInfo;
    /// A fresh cell for `id`, or `None` if the id is of the wrong kind for this factory.
    fn build_cell(self: Arc<Self>, id: &UnitId) -> Option<Box<dyn UnitCell>>;
    /// Whether `bytes` are one whole message of this factory's type (a gateway checks client
    /// input with it before sending it on).
    fn check_message(&self, bytes: &[u8]) -> Result<(), String>;
    /// The JSON form of one message of this factory's type, as postcard (a WebSocket client's
    /// input, made what the Actor takes).
    fn message_from_json(&self, json: &[u8]) -> Result<Vec<u8>, String>;
}

impl<B: Behavior> AnyFactory for TypedFactory<B> {
    fn info(&self) -> &FactoryInfo {
        &self.info
    }

    fn build_cell(self: Arc<Self>, id: &UnitId) -> Option<Box<dyn UnitCell>> {
        let behavior = self.build(id)?;
        let membership = match id {
            UnitId::Spot(_) => Membership::Spot {
                members: BTreeSet::new(),
            },
            UnitId::Actor(_) => Membership::Actor { spot: None },
        };
        Some(Box::new(Cell {
            id: id.clone(),
            behavior,
            timers: TimerSet::default(),
            membership,
            binding: None,
            factory: self,
        }))
    }

    fn check_message(&self, bytes: &[u8]) -> Result<(), String> {
        match postcard::take_from_bytes::<B::Msg>(bytes) {
            Ok((_, [])) => Ok(()),
            Ok((_, rest)) => Err(format!("{} bytes are left over after it", rest.len())),
            Err(e) => Err(e.to_string()),
        }
    }

    fn message_from_json(&self, json: &[u8]) -> Result<Vec<u8>, String> {
        let msg: B::Msg = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        postcard::to_allocvec(&msg).map_err(|e| e.to_string())
    }
}

/// What becomes of a message turn's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyMode {
    /// A tell: nobody reads it.
    Drop,
    /// A request from this node: passed by value.
    Local,
    /// A request from another node: encoded for the mesh.
    Encoded,
}

/// What a turn is about.
pub(crate) enum Turn<'a> {
    /// A message, and what becomes of its reply.
    Message(Payload, ReplyMode),
    Tick(&'a Tick),
    Start,
    MemberJoined(&'a ActorId),
    MemberLeft(&'a ActorId),
    Joined(&'a SpotId),
    Left(&'a SpotId),
    Closing,
    ReadyCompleted(ReadyOutcome),
}

/// What a message turn produced: the reply (boxed for its caller) or why there is none.
pub(crate) type TurnReply = Option<Result<Payload, MessageError>>;

/// A unit instance the lane can run without knowing its type.
pub(crate) trait UnitCell: Send {
    fn id(&self) -> &UnitId;
    fn info(&self) -> &FactoryInfo;
    fn membership(&self) -> &Membership;
    fn membership_mut(&mut self) -> &mut Membership;
    /// The client session bound to this unit (an Actor), which moves with it.
    fn binding(&self) -> Option<&SessionBinding>;
    fn binding_mut(&mut self) -> &mut Option<SessionBinding>;
    fn next_due(&self) -> Option<Instant>;
    fn take_due(&mut self, now: Instant) -> Vec<Tick>;
    /// Runs one turn. A message turn returns its reply.
    fn turn(&mut self, node: &Node, turn: Turn<'_>, effects: &mut TurnEffects) -> TurnReply;
    /// Captures the application state for a move: `None` under `Recreate`.
    fn capture_state(&self) -> Result<Option<Vec<u8>>, AdapterError>;
    /// Restores captured state into this fresh instance.
    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), AdapterError>;
    /// The timers with their cursors, relative to `now`.
    fn timer_snapshot(&self, now: Instant) -> Vec<TimerSnapshot>;
    /// Replaces the timers (on the target of a move).
    fn set_timers(&mut self, timers: TimerSet);
    /// Encodes a queued message for the wire (it may still be held by value).
    fn encode(&self, payload: Payload) -> Result<Bytes, String>;
    /// Replaces the instance with a fresh one from the factory, keeping id and membership.
    fn rebuild(&mut self);
}

struct Cell<B: Behavior> {
    id: UnitId,
    behavior: B,
    timers: TimerSet,
    membership: Membership,
    binding: Option<SessionBinding>,
    factory: Arc<TypedFactory<B>>,
}

impl<B: Behavior> UnitCell for Cell<B> {
    fn id(&self) -> &UnitId {
        &self.id
    }

    fn info(&self) -> &FactoryInfo {
        &self.factory.info
    }

    fn membership(&self) -> &Membership {
        &self.membership
    }

    fn membership_mut(&mut self) -> &mut Membership {
        &mut self.membership
    }

    fn binding(&self) -> Option<&SessionBinding> {
        self.binding.as_ref()
    }

    fn binding_mut(&mut self) -> &mut Option<SessionBinding> {
        &mut self.binding
    }

    fn next_due(&self) -> Option<Instant> {
        self.timers.next_due().map(Instant::from_std)
    }

    fn take_due(&mut self, now: Instant) -> Vec<Tick> {
        self.timers.take_due(now.into_std())
    }

    fn turn(&mut self, node: &Node, turn: Turn<'_>, effects: &mut TurnEffects) -> TurnReply {
        let info = &self.factory.info;
        effects.can_defer = matches!(self.id, UnitId::Spot(_))
            && info.kind == FactoryKind::UserSpot(ExecutionMode::SpotWide)
            && info.readiness == ReadinessMode::ApplicationSignaled;
        let mut ctx = Ctx {
            unit: &self.id,
            node,
            now: std::cell::Cell::new(None),
            timers: &mut self.timers,
            membership: &self.membership,
            binding: &mut self.binding,
            effects,
        };
        let b = &mut self.behavior;
        match turn {
            Turn::Message(payload, mode) => {
                return Some(match payload.take::<B::Msg>() {
                    Ok(msg) => {
                        let reply = b.handle(&mut ctx, msg);
                        match mode {
                            // A tell's reply is dropped here, unboxed.
                            ReplyMode::Drop => Ok(Payload::Empty),
                            ReplyMode::Local => Ok(Payload::local(reply)),
                            ReplyMode::Encoded => postcard::to_allocvec(&reply)
                                .map(|b| Payload::Encoded(b.into()))
                                .map_err(|e| MessageError::ReplyLost {
                                    reason: e.to_string(),
                                }),
                        }
                    }
                    Err(sent) => Err(MessageError::WrongMessageType {
                        id: self.id.clone(),
                        sent,
                        expected: info.msg_type_name.to_owned(),
                    }),
                });
            }
            Turn::Tick(tick) => b.on_tick(&mut ctx, tick),
            Turn::Start => b.on_start(&mut ctx),
            Turn::MemberJoined(actor) => b.on_member_joined(&mut ctx, actor),
            Turn::MemberLeft(actor) => b.on_member_left(&mut ctx, actor),
            Turn::Joined(spot) => b.on_joined(&mut ctx, spot),
            Turn::Left(spot) => b.on_left(&mut ctx, spot),
            Turn::Closing => b.on_closing(&mut ctx),
            Turn::ReadyCompleted(outcome) => b.on_relocation_ready_completed(&mut ctx, outcome),
        }
        None
    }

    fn capture_state(&self) -> Result<Option<Vec<u8>>, AdapterError> {
        match &self.factory.policy {
            RelocationPolicy::Disabled => Err(AdapterError("the unit is bound to its node".into())),
            RelocationPolicy::Recreate => Ok(None),
            RelocationPolicy::PreserveState(adapter) => adapter.capture(&self.behavior).map(Some),
        }
    }

    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), AdapterError> {
        match &self.factory.policy {
            RelocationPolicy::PreserveState(adapter) => adapter.restore(&mut self.behavior, bytes),
            _ => Ok(()),
        }
    }

    fn timer_snapshot(&self, now: Instant) -> Vec<TimerSnapshot> {
        self.timers.snapshot(now.into_std())
    }

    fn set_timers(&mut self, timers: TimerSet) {
        self.timers = timers;
    }

    fn encode(&self, payload: Payload) -> Result<Bytes, String> {
        payload.encode::<B::Msg>()
    }

    fn rebuild(&mut self) {
        if let Some(fresh) = self.factory.build(&self.id) {
            self.behavior = fresh;
            self.timers = TimerSet::default();
        }
    }
}
