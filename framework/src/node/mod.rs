//! A node: one host's runtime. It hosts units in lanes, routes messages by id, and tracks requests.
//!
//! Layout, in the order a message flows:
//! - [`Node`] (here): the handle applications and tools hold; creation, membership, tell and request.
//! - `directory`: which lane hosts each unit of this node.
//! - `lane`: the task that runs one unit's turns from its queue.
//! - `cell`: one unit instance behind a type-erased face.
//! - `envelope`: what travels on a queue; `replies`: requests waiting for their terminal.

pub(crate) mod cell;
mod directory;
mod envelope;
mod lane;
mod replies;

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use self::cell::AnyFactory;
use self::directory::{Directory, Entry};
use self::envelope::{Envelope, Payload, ReplyTo, Terminal};
use self::lane::{Control, Lane};
use self::replies::Replies;
use crate::behavior::Message;
use crate::error::{MessageError, StartError, UnitError};
use crate::ids::{ActorId, NodeId, SpotId, UnitId};
use crate::registry::{FactoryKind, Registry};

/// A node's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum NodeState {
    /// Starting up; not accepting work yet.
    Preparing,
    /// Accepting and running work.
    Serving,
    /// Moving its units to other nodes.
    Relocating,
    /// Every unit has moved away; connections stay until shutdown.
    Relocated,
    /// Closing its units for shutdown.
    Draining,
    /// Shut down.
    Stopped,
    /// Failed; see the log.
    Error,
}

impl NodeState {
    const ALL: [NodeState; 7] = [
        NodeState::Preparing,
        NodeState::Serving,
        NodeState::Relocating,
        NodeState::Relocated,
        NodeState::Draining,
        NodeState::Stopped,
        NodeState::Error,
    ];

    fn from_u8(n: u8) -> NodeState {
        Self::ALL
            .get(usize::from(n))
            .copied()
            .unwrap_or(NodeState::Error)
    }

    /// Whether the node takes new messages in this state.
    pub fn accepts_work(self) -> bool {
        matches!(
            self,
            NodeState::Serving | NodeState::Relocating | NodeState::Relocated
        )
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// How a node is started.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id, unique in the cluster.
    pub id: NodeId,
    /// The application version it runs (rolling updates move units to a newer one).
    pub app_version: String,
}

impl NodeConfig {
    /// A config with the given id and application version "1".
    pub fn new(id: NodeId) -> Self {
        NodeConfig {
            id,
            app_version: "1".to_owned(),
        }
    }
}

/// Who a message is for: a unit by id, optionally with the intent to activate an Instance Spot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    id: UnitId,
    activate: Option<Arc<str>>,
}

impl Target {
    /// An Instance Spot of `type_name`: the first message activates it, exactly once.
    pub fn instance(type_name: &str, spot: SpotId) -> Self {
        Target {
            id: UnitId::Spot(spot),
            activate: Some(Arc::from(type_name)),
        }
    }

    /// The unit addressed.
    pub fn id(&self) -> &UnitId {
        &self.id
    }
}

impl<T: Into<UnitId>> From<T> for Target {
    fn from(id: T) -> Self {
        Target {
            id: id.into(),
            activate: None,
        }
    }
}

/// The handle to a running node. Cloning it is cheap; every clone is the same node.
#[derive(Clone)]
pub struct Node {
    pub(crate) core: Arc<NodeCore>,
}

pub(crate) struct NodeCore {
    config: NodeConfig,
    factories: HashMap<Arc<str>, Arc<dyn AnyFactory>>,
    pub(crate) directory: Directory,
    replies: Replies,
    state: AtomicU8,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.core.config.id)
            .field("state", &self.state())
            .finish()
    }
}

impl Node {
    /// Starts a node with its factories; refuses registrations that make no sense.
    pub async fn start(config: NodeConfig, registry: Registry) -> Result<Node, StartError> {
        if !registry.problems.is_empty() {
            return Err(StartError::Registration(registry.problems));
        }
        let core = NodeCore {
            config,
            factories: registry.factories,
            directory: Directory::new(),
            replies: Replies::new(),
            state: AtomicU8::new(NodeState::Preparing as u8),
        };
        let node = Node {
            core: Arc::new(core),
        };
        node.set_state(NodeState::Serving);
        tracing::info!(node = %node.id(), "node serving");
        Ok(node)
    }

    /// This node's id.
    pub fn id(&self) -> &NodeId {
        &self.core.config.id
    }

    /// This node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.core.config
    }

    /// The lifecycle state now.
    pub fn state(&self) -> NodeState {
        NodeState::from_u8(self.core.state.load(Ordering::Acquire))
    }

    fn set_state(&self, state: NodeState) {
        self.core.state.store(state as u8, Ordering::Release);
    }

    fn serving(&self) -> Result<(), NodeState> {
        let state = self.state();
        if state.accepts_work() {
            Ok(())
        } else {
            Err(state)
        }
    }

    /// Whether this node hosts the unit now.
    pub fn hosts(&self, id: &UnitId) -> bool {
        self.core.directory.get(id).is_some()
    }

    /// How many units (spots and actors) this node hosts.
    pub fn unit_count(&self) -> usize {
        self.core.directory.len()
    }

    /// Creates a User Spot; fails if one with that id exists.
    pub async fn create_spot(&self, type_name: &str, id: &SpotId) -> Result<(), UnitError> {
        self.create(type_name, UnitId::Spot(id.clone()), false)
            .map(|_| ())
    }

    /// Returns the User Spot with that id, creating it if there is none. `Ok(true)` if it was created.
    pub async fn get_or_create_spot(
        &self,
        type_name: &str,
        id: &SpotId,
    ) -> Result<bool, UnitError> {
        self.create(type_name, UnitId::Spot(id.clone()), true)
    }

    /// Creates an Actor in this node's Entry Spot.
    pub async fn create_actor(&self, type_name: &str, id: &ActorId) -> Result<(), UnitError> {
        self.create(type_name, UnitId::Actor(id.clone()), false)
            .map(|_| ())
    }

    fn create(&self, type_name: &str, id: UnitId, or_get: bool) -> Result<bool, UnitError> {
        self.serving().map_err(|state| UnitError::NotServing {
            state: state.to_string(),
        })?;
        let (wanted, kind_name): (fn(FactoryKind) -> bool, _) = match id {
            UnitId::Spot(_) => (|k| matches!(k, FactoryKind::UserSpot(_)), "spot"),
            UnitId::Actor(_) => (|k| k == FactoryKind::Actor, "actor"),
        };
        self.create_with(type_name, id, or_get, wanted, kind_name)
    }

    fn create_with(
        &self,
        type_name: &str,
        id: UnitId,
        or_get: bool,
        wanted: fn(FactoryKind) -> bool,
        kind_name: &'static str,
    ) -> Result<bool, UnitError> {
        let factory = self
            .core
            .factories
            .get(type_name)
            .filter(|f| wanted(f.info().kind))
            .ok_or_else(|| UnitError::UnknownType {
                kind: kind_name,
                type_name: type_name.to_owned(),
            })?;
        let mut shard = self.core.directory.lock(&id);
        if let Some(existing) = shard.get(&id) {
            let existing_type = &existing.factory.info().type_name;
            if !or_get {
                return Err(UnitError::AlreadyExists { id });
            }
            if **existing_type != *type_name {
                return Err(UnitError::TypeMismatch {
                    id,
                    existing: existing_type.to_string(),
                    asked: type_name.to_owned(),
                });
            }
            return Ok(false);
        }
        let cell = Arc::clone(factory)
            .build_cell(&id)
            .ok_or_else(|| UnitError::NotAllowed {
                id: id.clone(),
                reason: format!("factory {type_name:?} does not build this kind of unit"),
            })?;
        let lane = Lane::start(self.clone(), cell);
        shard.insert(
            id,
            Entry {
                lane,
                factory: Arc::clone(factory),
            },
        );
        Ok(true)
    }

    /// Makes an Actor a member of a User Spot (leaving the spot it is in first, if any).
    ///
    /// In a SpotWide spot the Actor's turns then run on the spot's queue; in a PerActor spot it keeps
    /// its own lane. The spot's `on_member_joined` and the Actor's `on_joined` run as turns.
    pub async fn join(&self, actor: &ActorId, spot: &SpotId) -> Result<(), UnitError> {
        let spot_unit = UnitId::Spot(spot.clone());
        let spot_entry = self
            .core
            .directory
            .get(&spot_unit)
            .ok_or(UnitError::UnknownId {
                id: spot_unit.clone(),
            })?;
        if !matches!(spot_entry.factory.info().kind, FactoryKind::UserSpot(_)) {
            return Err(UnitError::NotAllowed {
                id: spot_unit,
                reason: "only User Spots take members".into(),
            });
        }
        let actor_unit = UnitId::Actor(actor.clone());
        let first = self.ask_join(actor, spot, &spot_entry).await;
        match first {
            Err(UnitError::NotAllowed { .. }) => {
                self.leave(actor).await?;
                self.ask_join(actor, spot, &spot_entry).await
            }
            other => other,
        }
        .map_err(|e| match e {
            UnitError::UnknownId { id } if id == actor_unit => UnitError::UnknownId { id },
            e => e,
        })
    }

    async fn ask_join(
        &self,
        actor: &ActorId,
        spot: &SpotId,
        spot_entry: &Entry,
    ) -> Result<(), UnitError> {
        let (done, result) = oneshot::channel();
        let control = Control::Join {
            actor: actor.clone(),
            spot: spot.clone(),
            spot_entry: spot_entry.clone(),
            done,
        };
        self.control(&UnitId::Actor(actor.clone()), control, result)
            .await
    }

    /// Takes an Actor out of its User Spot, back into this node's Entry Spot.
    pub async fn leave(&self, actor: &ActorId) -> Result<(), UnitError> {
        let (done, result) = oneshot::channel();
        let control = Control::Leave {
            actor: actor.clone(),
            done,
        };
        self.control(&UnitId::Actor(actor.clone()), control, result)
            .await
    }

    async fn control(
        &self,
        id: &UnitId,
        control: Control,
        result: oneshot::Receiver<Result<(), UnitError>>,
    ) -> Result<(), UnitError> {
        let unknown = || UnitError::UnknownId { id: id.clone() };
        let entry = self.core.directory.get(id).ok_or_else(unknown)?;
        entry.lane.ctl.send(control).map_err(|_| unknown())?;
        result.await.map_err(|_| unknown())?
    }

    /// Sends a message to a unit by id. Messages from one sender to one unit are handled in the
    /// order sent.
    pub fn tell<M: Message>(&self, to: impl Into<Target>, msg: M) -> Result<(), MessageError> {
        let target = to.into();
        let envelope = Envelope {
            to: target.id,
            payload: Payload::local(msg),
            reply: None,
        };
        self.deliver(
            envelope,
            Some(TypeId::of::<M>()),
            target.activate.as_deref(),
        )
    }

    /// Sends a request and waits for its one terminal: the typed reply, or an error (the timeout
    /// included).
    pub async fn request<M: Message, R: Message>(
        &self,
        to: impl Into<Target>,
        msg: M,
        timeout: Duration,
    ) -> Result<R, MessageError> {
        let target = to.into();
        let id = target.id.clone();
        let (request, answer) = self.core.replies.open();
        let envelope = Envelope {
            to: target.id,
            payload: Payload::local(msg),
            reply: Some(ReplyTo {
                node: self.id().clone(),
                request,
            }),
        };
        if let Err(error) = self.deliver(
            envelope,
            Some(TypeId::of::<M>()),
            target.activate.as_deref(),
        ) {
            self.core.replies.forget(request);
            return Err(error);
        }
        let reply = match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(terminal)) => terminal?,
            Ok(Err(_)) => return Err(MessageError::UnitStopped { id }),
            Err(_) => {
                self.core.replies.forget(request);
                return Err(MessageError::Timeout { id, after: timeout });
            }
        };
        reply.take::<R>().map_err(|_| MessageError::WrongReplyType {
            id,
            expected: std::any::type_name::<R>().to_owned(),
        })
    }

    /// Routes an envelope to the lane hosting its unit, activating an Instance Spot if asked to.
    fn deliver(
        &self,
        envelope: Envelope,
        msg_type: Option<TypeId>,
        activate: Option<&str>,
    ) -> Result<(), MessageError> {
        self.serving().map_err(|state| MessageError::NotServing {
            state: state.to_string(),
        })?;
        let envelope = match self.push(envelope, msg_type)? {
            None => return Ok(()),
            Some(missing) => missing,
        };
        let Some(type_name) = activate else {
            return Err(MessageError::UnknownId { id: envelope.to });
        };
        let created = self.create_with(
            type_name,
            envelope.to.clone(),
            true,
            |k| k == FactoryKind::InstanceSpot,
            "instance spot",
        );
        if let Err(error) = created {
            tracing::debug!(unit = %envelope.to, %error, "activation refused");
            return Err(MessageError::UnknownId { id: envelope.to });
        }
        match self.push(envelope, msg_type)? {
            None => Ok(()),
            Some(missing) => Err(MessageError::UnitStopped { id: missing.to }),
        }
    }

    /// Pushes onto the hosting lane; gives the envelope back if no lane here hosts its unit.
    fn push(
        &self,
        envelope: Envelope,
        msg_type: Option<TypeId>,
    ) -> Result<Option<Envelope>, MessageError> {
        let id = envelope.to.clone();
        self.core.directory.with(&id, |entry| {
            let Some(entry) = entry else {
                return Ok(Some(envelope));
            };
            if let Some(t) = msg_type
                && !entry.accepts(t)
            {
                {
                    let info = entry.factory.info();
                    return Err(MessageError::WrongMessageType {
                        id: id.clone(),
                        sent: sent_type_name(&envelope.payload),
                        expected: info.msg_type_name.to_owned(),
                    });
                }
            }
            entry
                .lane
                .data
                .send(envelope)
                .map(|()| None)
                .map_err(|_| MessageError::UnitStopped { id: id.clone() })
        })
    }

    /// Delivers an envelope whose unit left the lane it was queued on.
    pub(crate) fn redeliver(&self, envelope: Envelope) {
        let id = envelope.to.clone();
        let reply = envelope.reply.clone();
        match self.push(envelope, None) {
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => {
                if let Some(reply_to) = reply {
                    self.complete(reply_to, Err(MessageError::UnitStopped { id }));
                } else {
                    tracing::debug!(unit = %id, "tell dropped: the unit stopped");
                }
            }
        }
    }

    /// Delivers a request's terminal to whoever asked.
    pub(crate) fn complete(&self, reply_to: ReplyTo, terminal: Terminal) {
        if reply_to.node == *self.id() {
            self.core.replies.complete(reply_to.request, terminal);
        } else {
            tracing::warn!(node = %reply_to.node, "reply for another node dropped: no mesh yet");
        }
    }

    /// Tells a PerActor spot's lane that an Actor joined or left it.
    pub(crate) fn notify_member(&self, spot: &SpotId, actor: ActorId, joined: bool) {
        if let Some(entry) = self.core.directory.get(&UnitId::Spot(spot.clone())) {
            let _ = entry.lane.ctl.send(Control::Member { actor, joined });
        }
    }

    /// Closes every unit (each runs `on_closing`), answers what was queued, and stops the node.
    pub async fn shutdown(&self) {
        self.set_state(NodeState::Draining);
        let mut waits = Vec::new();
        let mut seen = Vec::new();
        for (_, entry) in self.core.directory.all() {
            if seen.iter().any(|l| Arc::ptr_eq(l, &entry.lane)) {
                continue;
            }
            seen.push(entry.lane.clone());
            let (done, wait) = oneshot::channel();
            if entry.lane.ctl.send(Control::Close { done }).is_ok() {
                waits.push(wait);
            }
        }
        for wait in waits {
            let _ = wait.await;
        }
        self.set_state(NodeState::Stopped);
        tracing::info!(node = %self.id(), "node stopped");
    }

    /// The kind of factory behind a unit hosted here.
    pub fn factory_kind(&self, id: &UnitId) -> Option<FactoryKind> {
        self.core.directory.get(id).map(|e| e.factory.info().kind)
    }
}

fn sent_type_name(payload: &Payload) -> String {
    match payload {
        Payload::Local { type_name, .. } => (*type_name).to_owned(),
        Payload::Encoded(_) => "encoded bytes".to_owned(),
        Payload::Empty => "nothing".to_owned(),
    }
}
