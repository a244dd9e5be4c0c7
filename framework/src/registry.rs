//! Factories registered per type name, each with exactly one relocation policy, fixed at start-up.

use std::any::TypeId;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use bytes::Bytes;
use tokio::time::Instant;

use crate::behavior::{Behavior, Ctx};
use crate::error::{MessageError, RegistrationError};
use crate::ids::{ActorId, SpotId, UnitId};
use crate::node::Node;
use crate::timer::{Tick, TimerSet, TimerSnapshot};
use crate::unit::cell::{
    AnyFactory, Membership, ReplyMode, Turn, TurnEffects, TurnReply, UnitCell,
};
use crate::unit::envelope::Payload;
pub use crate::unit::factory::{
    AdapterError, ExecutionMode, FactoryInfo, FactoryKind, OnPanic, PolicyKind, ReadinessMode,
};
use ferry_core::session::SessionBinding;
use ferry_core::standby::Policy as StandbyPolicy;

/// Captures a unit's application state to bytes and restores it into a fresh instance elsewhere.
///
/// Both may run more than once for one move, so they must give the same result when repeated.
/// Empty bytes are valid state.
///
/// A move pre-copies a large state while the unit runs and, at the seal, sends only the 16 KiB
/// blocks of the capture that changed. Where that is poor (a log whose new entry at the front
/// shifts every later byte, so every block differs), an adapter may make a delta of its own:
/// [`delta`](Self::delta) on the source, [`apply_delta`](Self::apply_delta) on the target. The
/// target checks the whole image it rebuilds against the checksum of the one sealed, so a wrong
/// delta costs the whole state sent again, never a wrong state restored.
pub trait StateAdapter<B>: Send + Sync + 'static {
    /// Captures the state worth keeping (leave out caches and derived values).
    fn capture(&self, unit: &B) -> Result<Vec<u8>, AdapterError>;
    /// Restores captured bytes into an instance the factory just built. For a state under
    /// 64 KiB it runs on a runtime thread, as `capture` and handlers do, so keep it from
    /// blocking long; a larger one has a blocking thread of its own.
    fn restore(&self, unit: &mut B, bytes: &[u8]) -> Result<(), AdapterError>;
    /// A delta that turns `base` into `now`, two different captures of this adapter: the one
    /// the target holds from pre-copy and the one taken at the seal. It is sent in place of the
    /// blocks that differ only if it is smaller. Runs while the unit is paused, so keep it
    /// quick; a panic is contained and counts as `None`. The default, `None`, compares blocks.
    fn delta(&self, base: &[u8], now: &[u8]) -> Option<Vec<u8>> {
        let _ = (base, now);
        None
    }
    /// Rebuilds `now` exactly from `base` and what [`delta`](Self::delta) made of the two.
    /// An error, a panic or other bytes than `now` make the target ask for the whole state.
    fn apply_delta(&self, base: &[u8], delta: &[u8]) -> Result<Vec<u8>, AdapterError> {
        let _ = (base, delta);
        Err(AdapterError(
            "this adapter makes no deltas: implement apply_delta beside delta".into(),
        ))
    }
}

/// The ready adapter for types that derive `Serialize` and `Deserialize`: the whole value moves.
#[derive(Debug, Clone, Copy, Default)]
pub struct SerdeAdapter;

impl<B: Serialize + DeserializeOwned + Send + 'static> StateAdapter<B> for SerdeAdapter {
    fn capture(&self, unit: &B) -> Result<Vec<u8>, AdapterError> {
        postcard::to_allocvec(unit).map_err(|e| AdapterError(e.to_string()))
    }

    fn restore(&self, unit: &mut B, bytes: &[u8]) -> Result<(), AdapterError> {
        *unit = postcard::from_bytes(bytes).map_err(|e| AdapterError(e.to_string()))?;
        Ok(())
    }
}

/// What happens to a unit's application state when it moves. Exactly one per factory.
pub enum RelocationPolicy<B> {
    /// The unit is bound to its node; a drain reports it instead of dropping it.
    Disabled,
    /// The target's factory rebuilds the same id; queue, journal and timers move, state does not.
    Recreate,
    /// The adapter's bytes restore the state into the target's fresh instance.
    PreserveState(Arc<dyn StateAdapter<B>>),
}

impl<B: Serialize + DeserializeOwned + Send + 'static> RelocationPolicy<B> {
    /// `PreserveState` with the [`SerdeAdapter`].
    pub fn serde() -> Self {
        RelocationPolicy::PreserveState(Arc::new(SerdeAdapter))
    }
}

impl<B> Clone for RelocationPolicy<B> {
    fn clone(&self) -> Self {
        match self {
            RelocationPolicy::Disabled => RelocationPolicy::Disabled,
            RelocationPolicy::Recreate => RelocationPolicy::Recreate,
            RelocationPolicy::PreserveState(a) => RelocationPolicy::PreserveState(Arc::clone(a)),
        }
    }
}

impl<B> RelocationPolicy<B> {
    /// The policy's kind.
    pub fn kind(&self) -> PolicyKind {
        match self {
            RelocationPolicy::Disabled => PolicyKind::Disabled,
            RelocationPolicy::Recreate => PolicyKind::Recreate,
            RelocationPolicy::PreserveState(_) => PolicyKind::PreserveState,
        }
    }
}

/// A typed factory: the build function and the policy with its adapter.
pub(crate) struct TypedFactory<B> {
    pub info: FactoryInfo,
    pub policy: RelocationPolicy<B>,
    pub build: Build<B>,
}

/// A factory's build function, by the kind of id it takes.
pub(crate) enum Build<B> {
    Spot(Box<dyn Fn(&SpotId) -> B + Send + Sync>),
    Actor(Box<dyn Fn(&ActorId) -> B + Send + Sync>),
}

impl<B> TypedFactory<B> {
    /// Builds a fresh instance, or `None` if the id is of the other kind.
    pub fn build(&self, id: &UnitId) -> Option<B> {
        match (&self.build, id) {
            (Build::Spot(f), UnitId::Spot(s)) => Some(f(s)),
            (Build::Actor(f), UnitId::Actor(a)) => Some(f(a)),
            _ => None,
        }
    }
}

/// One registration, built fluently and handed to [`Registry::register`].
pub struct Registration<B> {
    factory: TypedFactory<B>,
}

impl<B: Behavior> Registration<B> {
    fn new(type_name: &str, kind: FactoryKind, build: Build<B>) -> Self {
        Registration {
            factory: TypedFactory {
                info: FactoryInfo {
                    type_name: Arc::from(type_name),
                    kind,
                    policy: PolicyKind::Recreate,
                    readiness: ReadinessMode::AnyTurnBoundary,
                    on_panic: OnPanic::Stop,
                    remembered: false,
                    recoverable: true,
                    standby: StandbyPolicy::None,
                    msg_type: TypeId::of::<B::Msg>(),
                    msg_type_name: std::any::type_name::<B::Msg>(),
                },
                policy: RelocationPolicy::Recreate,
                build,
            },
        }
    }

    /// A User Spot factory (SpotWide unless [`Registration::mode`] says otherwise).
    pub fn spot(type_name: &str, build: impl Fn(&SpotId) -> B + Send + Sync + 'static) -> Self {
        Self::new(
            type_name,
            FactoryKind::UserSpot(ExecutionMode::SpotWide),
            Build::Spot(Box::new(build)),
        )
    }

    /// An Instance Spot factory: one spot per id, activated by its first message.
    pub fn instance(type_name: &str, build: impl Fn(&SpotId) -> B + Send + Sync + 'static) -> Self {
        Self::new(
            type_name,
            FactoryKind::InstanceSpot,
            Build::Spot(Box::new(build)),
        )
    }

    /// An Actor factory.
    pub fn actor(type_name: &str, build: impl Fn(&ActorId) -> B + Send + Sync + 'static) -> Self {
        Self::new(type_name, FactoryKind::Actor, Build::Actor(Box::new(build)))
    }

    /// The execution mode of a User Spot.
    pub fn mode(mut self, mode: ExecutionMode) -> Self {
        if let FactoryKind::UserSpot(m) = &mut self.factory.info.kind {
            *m = mode;
        }
        self
    }

    /// The relocation policy (default: `Recreate`).
    pub fn policy(mut self, policy: RelocationPolicy<B>) -> Self {
        if policy.kind() == PolicyKind::Disabled {
            self.factory.info.recoverable = false;
        }
        self.factory.info.policy = policy.kind();
        self.factory.policy = policy;
        self
    }

    /// The readiness mode of a SpotWide spot (default: `AnyTurnBoundary`).
    pub fn readiness(mut self, readiness: ReadinessMode) -> Self {
        self.factory.info.readiness = readiness;
        self
    }

    /// What a handler panic does (default: `Stop`).
    pub fn on_panic(mut self, on_panic: OnPanic) -> Self {
        self.factory.info.on_panic = on_panic;
        self
    }

    /// Brings this factory's units back eagerly after a crash or a cold start of the cluster,
    /// instead of on their next message (for Instance Spots, which otherwise come back lazily).
    pub fn remembered(mut self, remembered: bool) -> Self {
        self.factory.info.remembered = remembered;
        self
    }

    /// Whether this factory's rooms keep a warm standby copy on another node, promoted when
    /// their owner dies (default: none, and a crash rebuilds the room from nothing).
    pub fn standby(mut self, standby: StandbyPolicy) -> Self {
        self.factory.info.standby = standby;
        self
    }

    /// Whether recovery rebuilds this factory's units on a survivor when their node dies
    /// (default: yes, unless the policy is `Disabled`). A unit that is not is stopped with its
    /// node and its id freed.
    pub fn recoverable(mut self, recoverable: bool) -> Self {
        self.factory.info.recoverable = recoverable;
        self
    }
}

/// The factories of a node, checked as a whole when the node starts.
#[derive(Default)]
pub struct Registry {
    pub(crate) factories: HashMap<Arc<str>, Arc<dyn AnyFactory<Node>>>,
    pub(crate) problems: Vec<RegistrationError>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a factory. Problems are collected and refused together when the node starts.
    pub fn register<B: Behavior>(&mut self, registration: Registration<B>) -> &mut Self {
        let factory = registration.factory;
        let info = &factory.info;
        let name = info.type_name.clone();
        if name.is_empty() {
            self.problems.push(RegistrationError::EmptyTypeName);
            return self;
        }
        let spot_wide = info.kind == FactoryKind::UserSpot(ExecutionMode::SpotWide);
        if info.kind == FactoryKind::UserSpot(ExecutionMode::PerActor)
            && info.policy == PolicyKind::PreserveState
        {
            self.problems
                .push(RegistrationError::AdapterOnPerActorSpot {
                    type_name: name.to_string(),
                });
        }
        if info.readiness == ReadinessMode::ApplicationSignaled && !spot_wide {
            self.problems.push(RegistrationError::ReadinessNotSpotWide {
                type_name: name.to_string(),
            });
        }
        if let Some(why) = standby_without_state(info) {
            self.problems.push(RegistrationError::StandbyWithoutState {
                type_name: name.to_string(),
                why,
            });
        }
        if self.factories.contains_key(&name) {
            self.problems.push(RegistrationError::Duplicate {
                type_name: name.to_string(),
            });
            return self;
        }
        self.factories.insert(name, Arc::new(factory));
        self
    }

    /// What is registered under a type name.
    pub fn info(&self, type_name: &str) -> Option<&FactoryInfo> {
        self.factories.get(type_name).map(|f| f.info())
    }
}

/// Why a factory's standby would hold no room's state, if it would not: a copy is the room's
/// capture, which holds the application's state only under PreserveState, and a standby is kept
/// per room (a spot that moves with its members), not per Actor.
fn standby_without_state(info: &FactoryInfo) -> Option<&'static str> {
    if !info.standby.keeps_standby() {
        return None;
    }
    if info.policy != PolicyKind::PreserveState {
        return Some("its relocation policy keeps no state in a capture");
    }
    match info.kind {
        FactoryKind::UserSpot(ExecutionMode::SpotWide) | FactoryKind::InstanceSpot => None,
        FactoryKind::UserSpot(ExecutionMode::PerActor) | FactoryKind::Actor => {
            Some("it is not a room")
        }
    }
}

impl<B: Behavior> AnyFactory<Node> for TypedFactory<B> {
    fn info(&self) -> &FactoryInfo {
        &self.info
    }

    fn build_cell(self: Arc<Self>, id: &UnitId) -> Option<Box<dyn UnitCell<Node>>> {
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

    fn delta(&self, base: &[u8], now: &[u8]) -> Option<Vec<u8>> {
        match &self.policy {
            RelocationPolicy::PreserveState(adapter) => adapter.delta(base, now),
            _ => None,
        }
    }

    fn apply_delta(&self, base: &[u8], delta: &[u8]) -> Result<Vec<u8>, AdapterError> {
        match &self.policy {
            RelocationPolicy::PreserveState(adapter) => adapter.apply_delta(base, delta),
            _ => Err(AdapterError(
                "the factory keeps no state to apply a delta to".into(),
            )),
        }
    }
}

struct Cell<B: Behavior> {
    id: UnitId,
    behavior: B,
    timers: TimerSet,
    membership: Membership,
    binding: Option<SessionBinding>,
    factory: Arc<TypedFactory<B>>,
}

impl<B: Behavior> UnitCell<Node> for Cell<B> {
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
