//! A unit instance behind a type-erased face, as its lane runs it: the factory that builds it, its
//! membership, and one turn. The typed side (a [`crate::Behavior`] in a cell) is the registry's.
//! `N` is the node that runs the turns, handed to each.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use ferry_core::errors::MessageError;
use ferry_core::relocation::ReadyOutcome;
use ferry_core::session::SessionBinding;
use tokio::time::Instant;

use super::envelope::Payload;
use super::factory::{AdapterError, FactoryInfo};
use crate::ids::{ActorId, SpotId, UnitId};
use crate::timer::{Tick, TimerSet, TimerSnapshot};

/// Membership as a unit sees it.
#[derive(Debug, Clone)]
pub(crate) enum Membership {
    /// A Spot and the Actors that are its members.
    Spot { members: BTreeSet<ActorId> },
    /// An Actor and the User Spot it is in (`None`: its node's Entry Spot).
    Actor { spot: Option<SpotId> },
}

/// What a turn asked of the framework, applied when the turn ends.
#[derive(Debug, Default)]
pub(crate) struct TurnEffects {
    pub stop: bool,
    pub deferred: bool,
    pub can_defer: bool,
    /// Whether pushes wait for the room's standby to hold the turn (confirmed mode) rather than
    /// go at once.
    pub hold_pushes: bool,
    /// The pushes the turn made, numbered, when they wait.
    pub pushes: Vec<ferry_core::session::binding::Notice>,
}

/// A factory without its type: builds cells.
pub(crate) trait AnyFactory<N>: Send + Sync + 'static {
    fn info(&self) -> &FactoryInfo;
    /// A fresh cell for `id`, or `None` if the id is of the wrong kind for this factory.
    fn build_cell(self: Arc<Self>, id: &UnitId) -> Option<Box<dyn UnitCell<N>>>;
    /// Whether `bytes` are one whole message of this factory's type (a gateway checks client
    /// input with it before sending it on).
    fn check_message(&self, bytes: &[u8]) -> Result<(), String>;
    /// The JSON form of one message of this factory's type, as postcard (a WebSocket client's
    /// input, made what the Actor takes).
    fn message_from_json(&self, json: &[u8]) -> Result<Vec<u8>, String>;
    /// The state adapter's own delta between two of its captures (`None`: compare blocks).
    fn delta(&self, base: &[u8], now: &[u8]) -> Option<Vec<u8>>;
    /// A state rebuilt from a base and a delta this factory's adapter made.
    fn apply_delta(&self, base: &[u8], delta: &[u8]) -> Result<Vec<u8>, AdapterError>;
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
pub(crate) trait UnitCell<N>: Send {
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
    fn turn(&mut self, node: &N, turn: Turn<'_>, effects: &mut TurnEffects) -> TurnReply;
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
