//! Factories registered per type name, each with exactly one relocation policy, fixed at start-up.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::behavior::Behavior;
use crate::error::RegistrationError;
use crate::ids::{ActorId, SpotId, UnitId};

/// Why an adapter could not capture or restore a unit's state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("state adapter failed: {0}")]
pub struct AdapterError(pub String);

/// Captures a unit's application state to bytes and restores it into a fresh instance elsewhere.
///
/// Both may run more than once for one move, so they must give the same result when repeated.
/// Empty bytes are valid state.
pub trait StateAdapter<B>: Send + Sync + 'static {
    /// Captures the state worth keeping (leave out caches and derived values).
    fn capture(&self, unit: &B) -> Result<Vec<u8>, AdapterError>;
    /// Restores captured bytes into an instance the factory just built.
    fn restore(&self, unit: &mut B, bytes: &[u8]) -> Result<(), AdapterError>;
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

/// The kind of a relocation policy, without its adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// See [`RelocationPolicy::Disabled`].
    Disabled,
    /// See [`RelocationPolicy::Recreate`].
    Recreate,
    /// See [`RelocationPolicy::PreserveState`].
    PreserveState,
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

/// How a User Spot runs its turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecutionMode {
    /// One queue for the Spot and all its members: never two of their turns at once, and they move
    /// together as one unit (a room).
    #[default]
    SpotWide,
    /// A lane for the Spot and one per member Actor: members run in parallel and move one by one.
    PerActor,
}

/// When a SpotWide spot may be captured for a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadinessMode {
    /// After whichever turn is running when the move is asked for.
    #[default]
    AnyTurnBoundary,
    /// Only after a turn that called `ctx.relocation_ready_defer()` (a settled round).
    ApplicationSignaled,
}

/// What a handler panic does to its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnPanic {
    /// Stop the unit; its queued requests get an error.
    #[default]
    Stop,
    /// Replace the instance with a fresh one from the factory and carry on with the queue.
    Restart,
}

/// The kind of unit a factory makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactoryKind {
    /// Actors: created into the Entry Spot, they join and leave User Spots.
    Actor,
    /// User Spots, created by the application.
    UserSpot(ExecutionMode),
    /// Instance Spots, activated by the first message that carries activation intent.
    InstanceSpot,
}

/// Everything about a factory except how it builds: what the runtime needs to decide.
#[derive(Debug, Clone)]
pub struct FactoryInfo {
    /// The type name it is registered under.
    pub type_name: Arc<str>,
    /// What it makes.
    pub kind: FactoryKind,
    /// Its relocation policy's kind.
    pub policy: PolicyKind,
    /// Its readiness mode.
    pub readiness: ReadinessMode,
    /// What a panic does.
    pub on_panic: OnPanic,
    /// Whether its units are brought back eagerly after a crash or cold start.
    pub remembered: bool,
    /// Whether recovery rebuilds its units on a survivor when their node dies.
    pub recoverable: bool,
    pub(crate) msg_type: TypeId,
    pub(crate) msg_type_name: &'static str,
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
    pub(crate) factories: HashMap<Arc<str>, Arc<dyn crate::node::cell::AnyFactory>>,
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
