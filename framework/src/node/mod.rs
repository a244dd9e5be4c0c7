//! A node: one host's runtime. It hosts units in lanes, routes messages by id, and tracks requests.
//!
//! Layout, in the order a message flows:
//! - [`Node`] (here): the handle applications and tools hold; creation, membership, tell and request.
//! - `directory`: which lane hosts each unit of this node.
//! - `lane`: the task that runs one unit's turns from its queue.
//! - `cell`: one unit instance behind a type-erased face.
//! - `envelope`: what travels on a queue; `replies`: requests waiting for their terminal.
//! - `unit_ref`: a sender's kept route to one unit, for tells without the lookup by id.

#[path = "../unit/cell.rs"]
pub(crate) mod cell;
mod config;
#[path = "../unit/directory.rs"]
pub(crate) mod directory;
#[path = "../unit/envelope.rs"]
mod envelope;
mod lane;
#[path = "../unit/replies.rs"]
mod replies;
mod unit_ref;

pub use config::{DEFAULT_MAX_STATE, MeshSettings, NodeConfig};
pub use envelope::ReplyTo;
pub(crate) use envelope::{Envelope, Payload};
pub use ferry_core::authority::NodeState;
pub use unit_ref::UnitRef;

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use self::cell::AnyFactory;
use self::directory::{Directory, Entry};
use self::envelope::Terminal;
pub(crate) use self::lane::{Control, Lane, LaneTx, SealRefused};
use self::replies::Replies;
use ferry_core::conditional::{ConditionalWrite, Settled};

use crate::behavior::Message;
use crate::cluster::authority::{NodeDescriptor, Stage, UnitRecord, remembered_key, unit_key};
use crate::cluster::frames::{Call, CreateAnswer, Deliver, Frame, MemberAnswer};
use crate::cluster::routing::Router;
use crate::error::{MessageError, StartError, UnitError};
use crate::ids::{ActorId, NodeId, ObjectGeneration, SpotId, UnitId};
use crate::mesh::{Mesh, MeshConfig};
use crate::registry::{FactoryKind, Registry};
use crate::store::{BatchOutcome, Condition, Lease, LocationStore, Op, StoreError};

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
    pub(crate) replies: Arc<Replies>,
    state: AtomicU8,
    state_tx: tokio::sync::watch::Sender<NodeState>,
    /// Recovery events, for whoever follows them.
    pub(crate) recovery: tokio::sync::broadcast::Sender<crate::cluster::recovery::RecoveryEvent>,
    /// Why recovery waits, as this node last saw it.
    pub(crate) recovery_stall: Mutex<Option<crate::cluster::recovery::RecoveryStall>>,
    /// Nodes whose descriptor is in the store, whose lease has lapsed, and whom the mesh confirms
    /// dead, as last read: their units may be rebuilt.
    pub(crate) dead: RwLock<Vec<NodeId>>,
    /// Nodes whose lease has lapsed but whom the mesh does not confirm dead, as last read: their
    /// units are left alone, since they may still run them.
    pub(crate) suspected: RwLock<Vec<NodeId>>,
    /// What the mesh says about who is alive.
    pub(crate) witness: crate::cluster::witness::Witness,
    /// Set when the owner lease may have lapsed: no turn starts any more.
    fenced: AtomicBool,
    /// Until when the owner lease is certainly held, counted from the send of the request that
    /// took or last renewed it: past it no turn starts, whether or not the renewal task noticed.
    pub(crate) lease_clock: crate::cluster::membership::LeaseClock,
    pub(crate) mesh: Option<Mesh<Frame>>,
    pub(crate) router: Router,
    pub(crate) lease: Mutex<Lease>,
    /// The live nodes of the cluster as last read from the store, this one included.
    pub(crate) view: RwLock<Vec<NodeDescriptor>>,
    pub(crate) stop: CancellationToken,
    /// The moves this node takes part in.
    pub(crate) moves: crate::relocation::Moves,
    /// Its host operation (a drain), status and events.
    pub(crate) host: crate::relocation::HostOp,
    /// The client listener and its sessions, if this node accepts game clients.
    pub(crate) sessions: Option<crate::session::hub::Hub>,
    /// Tells the mesh lost, counted and reported.
    pub(crate) losses: crate::cluster::losses::Losses,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.core.config.id)
            .field("state", &self.state())
            .finish()
    }
}

impl NodeCore {
    /// The type names of the factories registered here.
    pub(crate) fn factories_names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(|k| &**k)
    }

    /// The factory registered under a type name.
    pub(crate) fn factory(&self, type_name: &str) -> Option<Arc<dyn AnyFactory>> {
        self.factories.get(type_name).cloned()
    }
}

/// How a unit is claimed in the store when it is built here.
pub(crate) enum Claim {
    /// A new unit: no record may exist (with `or_get`, an existing one is fine).
    New { or_get: bool },
    /// A recovery: the record must still be the one read from the dead owner, at this version,
    /// and the owner's descriptor as it was when the owner was taken for dead.
    Recover {
        version: u64,
        previous: UnitRecord,
        owner_descriptor: Option<u64>,
    },
}

/// How long a node waits for another node to answer a call (a remote creation).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How many conditional writes of a record a membership change tries before it reports failure.
const RECORD_TRIES: usize = 8;

/// Which factory kinds a creation of this kind of id may use.
type KindCheck = fn(FactoryKind) -> bool;

impl Node {
    /// Starts a node with its factories: checks the registrations, takes an owner lease, joins the
    /// mesh and publishes itself in the store. A live node holding the same id is asked first,
    /// at its mesh address: if it answers, the start is refused (`StartError::IdInUse`) and the
    /// live node is untouched; if it does not within `HOLDER_PROBE` (it crashed), its lease is
    /// taken over.
    pub async fn start(config: NodeConfig, registry: Registry) -> Result<Node, StartError> {
        if !registry.problems.is_empty() {
            return Err(StartError::Registration(registry.problems));
        }
        crate::cluster::holder::check_id_free(&config).await?;
        let asked = tokio::time::Instant::now();
        let lease = config
            .store
            .acquire_lease(&config.id, rand::random(), config.lease_ttl)
            .await?;
        let lease_clock = crate::cluster::membership::LeaseClock::new(asked + config.lease_ttl);
        let (mesh, inbound) = match &config.mesh {
            Some(settings) => {
                let mut mesh_config =
                    MeshConfig::new(config.id.clone(), settings.listen, settings.tls.clone());
                mesh_config.max_frame = settings.max_frame;
                mesh_config.initial_rtt = settings.initial_rtt;
                mesh_config.keep_alive = settings.keep_alive;
                mesh_config.idle_timeout = settings.idle_timeout;
                mesh_config.unacked_bytes = settings.unacked_bytes;
                mesh_config.sockets = settings.sockets.clone();
                let (mesh, inbound) = Mesh::bind(mesh_config).await?;
                for (peer, addr) in &settings.seeds {
                    mesh.add_peer(peer.clone(), *addr)?;
                }
                (Some(mesh), Some(inbound))
            }
            None => (None, None),
        };
        let sessions = match &config.sessions {
            Some(settings) => Some(crate::session::hub::Hub::bind(settings).await?),
            None => None,
        };
        let replies = Arc::new(Replies::new(config.max_requests_in_flight));
        let core = NodeCore {
            config,
            factories: registry.factories,
            directory: Directory::new(),
            replies,
            state: AtomicU8::new(NodeState::Preparing as u8),
            state_tx: tokio::sync::watch::Sender::new(NodeState::Preparing),
            recovery: tokio::sync::broadcast::Sender::new(1024),
            recovery_stall: Mutex::new(None),
            dead: RwLock::new(Vec::new()),
            suspected: RwLock::new(Vec::new()),
            witness: crate::cluster::witness::Witness::new(),
            fenced: AtomicBool::new(false),
            lease_clock,
            mesh,
            router: Router::new(),
            lease: Mutex::new(lease),
            view: RwLock::new(Vec::new()),
            stop: CancellationToken::new(),
            moves: crate::relocation::Moves::default(),
            host: crate::relocation::HostOp::new(),
            sessions,
            losses: crate::cluster::losses::Losses::new(),
        };
        let node = Node {
            core: Arc::new(core),
        };
        if let Some(inbound) = inbound {
            tokio::spawn(node.clone().serve_mesh(inbound));
        }
        if let Some(mesh) = &node.core.mesh {
            tokio::spawn(node.clone().serve_losses(mesh.losses()));
        }
        node.set_state(NodeState::Serving);
        node.refresh_membership().await?;
        node.spawn_keepers();
        if let Some(hub) = &node.core.sessions {
            hub.start(&node);
        }
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

    /// The location store this node uses.
    pub fn store(&self) -> &Arc<dyn LocationStore> {
        &self.core.config.store
    }

    /// The mesh peers and where each link stands (admitted and ready, connecting, backing off).
    pub fn peers(&self) -> Vec<crate::mesh::PeerInfo> {
        self.core.mesh.as_ref().map(Mesh::peers).unwrap_or_default()
    }

    /// Where this node's mesh listens, if it has one.
    pub fn mesh_addr(&self) -> Option<std::net::SocketAddr> {
        self.core.mesh.as_ref().map(Mesh::local_addr)
    }

    /// The owner lease this node holds (or held, once it lost it): its generation tells this
    /// process's lease from one a later process of the same id took.
    pub fn lease(&self) -> Lease {
        self.core.lease.lock().clone()
    }

    /// The lifecycle state now.
    pub fn state(&self) -> NodeState {
        NodeState::from_u8(self.core.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, state: NodeState) {
        self.core.state.store(state as u8, Ordering::Release);
        self.core.state_tx.send_replace(state);
        self.core.host.status.send_modify(|s| s.state = state);
    }

    /// Follows the lifecycle state: the receiver sees every change from now on.
    pub fn watch_state(&self) -> tokio::sync::watch::Receiver<NodeState> {
        self.core.state_tx.subscribe()
    }

    fn serving(&self) -> Result<(), NodeState> {
        let state = self.state();
        if state.accepts_work() {
            Ok(())
        } else {
            Err(state)
        }
    }

    /// Whether turns may no longer run. Once true it stays true: from then on another node may
    /// take this node's units over.
    pub(crate) fn fenced(&self) -> bool {
        self.fenced_at(tokio::time::Instant::now())
    }

    /// [`Node::fenced`] as of `now`, a clock reading the caller just took (a lane reads the clock
    /// once per turn, not once more for this).
    pub(crate) fn fenced_at(&self, now: tokio::time::Instant) -> bool {
        if self.core.fenced.load(Ordering::Acquire) {
            return true;
        }
        if self.may_run(now) {
            return false;
        }
        self.fence("the owner lease ran out, and the mesh no longer vouches for this node");
        true
    }

    /// Whether no other node can take this node's units over yet at `now`: its lease is certainly
    /// held, or it lapsed less than the outage limit ago and every peer still answers this node's
    /// probes.
    fn may_run(&self, now: tokio::time::Instant) -> bool {
        let until = self.core.lease_clock.until();
        if now < until {
            return true;
        }
        // Without a mesh no peer can vouch, and peers take a lapsed lease for death.
        if self.core.mesh.is_none() {
            return false;
        }
        let config = self.config();
        if now >= until + config.outage_limit {
            return false;
        }
        match self.core.witness.vouch(config.peer_grace()) {
            crate::cluster::witness::Vouch::Alone => true,
            crate::cluster::witness::Vouch::Until(end) => now < end,
        }
    }

    /// Whether the store confirmed this node's lease recently enough that it is certainly held:
    /// what moves, creations and recovery need before they write to the store.
    pub(crate) fn store_reachable(&self) -> bool {
        self.core.lease_clock.held()
    }

    /// Stops every turn for good: this node can no longer prove it owns its units.
    pub(crate) fn fence(&self, why: &str) {
        if !self.core.fenced.swap(true, Ordering::AcqRel) {
            tracing::error!(node = %self.id(), why, "owner lease lost: no turn runs on this node any more");
            self.set_state(NodeState::Error);
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

    /// The units (spots and actors) this node hosts now, in no particular order.
    pub fn units(&self) -> Vec<UnitId> {
        self.core
            .directory
            .all()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    /// The kind of factory behind a unit hosted here.
    pub fn factory_kind(&self, id: &UnitId) -> Option<FactoryKind> {
        self.core.directory.get(id).map(|e| e.factory.info().kind)
    }

    /// Creates a User Spot on a node chosen by placement; fails if one with that id exists.
    pub async fn create_spot(&self, type_name: &str, id: &SpotId) -> Result<(), UnitError> {
        self.create(type_name, UnitId::Spot(id.clone()), false)
            .await
            .map(|_| ())
    }

    /// Returns the User Spot with that id, creating it if there is none anywhere in the cluster.
    /// `Ok(true)` if this call created it. Two nodes asking at once get the same spot.
    pub async fn get_or_create_spot(
        &self,
        type_name: &str,
        id: &SpotId,
    ) -> Result<bool, UnitError> {
        self.create(type_name, UnitId::Spot(id.clone()), true).await
    }

    /// Creates a User Spot on a given node instead of where placement would put it (for locality,
    /// rebalancing tools and tests). Fails if one with that id exists anywhere.
    pub async fn create_spot_on(
        &self,
        node: &NodeId,
        type_name: &str,
        id: &SpotId,
    ) -> Result<(), UnitError> {
        self.create_at(node.clone(), type_name, UnitId::Spot(id.clone()), false)
            .await
            .map(|_| ())
    }

    /// Activates an Instance Spot on a given node (if it is not active anywhere yet) instead of
    /// waiting for a message to activate it where placement would. `Ok(true)` if this call did.
    pub async fn activate_on(
        &self,
        node: &NodeId,
        type_name: &str,
        id: &SpotId,
    ) -> Result<bool, UnitError> {
        let unit = UnitId::Spot(id.clone());
        let wanted: KindCheck = |k| k == FactoryKind::InstanceSpot;
        if node == self.id() {
            return self
                .create_here(type_name, unit, true, wanted, "instance spot")
                .await;
        }
        let call = Call::Activate {
            type_name: type_name.to_owned(),
            id: unit,
        };
        self.call::<CreateAnswer>(node, call).await?
    }

    /// Creates an Actor in this node's Entry Spot.
    pub async fn create_actor(&self, type_name: &str, id: &ActorId) -> Result<(), UnitError> {
        self.create(type_name, UnitId::Actor(id.clone()), false)
            .await
            .map(|_| ())
    }

    async fn create(&self, type_name: &str, id: UnitId, or_get: bool) -> Result<bool, UnitError> {
        self.serving().map_err(|state| UnitError::NotServing {
            state: state.to_string(),
        })?;
        if !self.store_reachable() {
            return Err(UnitError::StoreUnavailable {
                what: format!("creating {id}"),
                reason: "it has not confirmed this node's lease lately".to_owned(),
            });
        }
        let target = match id {
            // Actors start in the Entry Spot of the node that creates them.
            UnitId::Actor(_) => self.id().clone(),
            UnitId::Spot(_) => self.place(type_name)?,
        };
        self.create_at(target, type_name, id, or_get).await
    }

    async fn create_at(
        &self,
        target: NodeId,
        type_name: &str,
        id: UnitId,
        or_get: bool,
    ) -> Result<bool, UnitError> {
        let (wanted, kind) = kind_of(&id);
        if target == *self.id() {
            self.create_here(type_name, id, or_get, wanted, kind).await
        } else {
            let call = Call::Create {
                type_name: type_name.to_owned(),
                id,
                or_get,
            };
            self.call::<CreateAnswer>(&target, call).await?
        }
    }

    /// Picks the node for a new unit of `type_name` among the live nodes of the last membership read.
    fn place(&self, type_name: &str) -> Result<NodeId, UnitError> {
        let mut view = self.core.view.read().clone();
        if let Some(me) = view.iter_mut().find(|d| d.node == *self.id()) {
            me.units = self.unit_count() as u64;
            me.state = self.state();
        }
        if !view
            .iter()
            .any(|d| d.factories.iter().any(|f| f == type_name))
        {
            return Err(UnitError::UnknownType {
                kind: "spot".into(),
                type_name: type_name.to_owned(),
            });
        }
        crate::cluster::placement::place(&view, type_name, None).ok_or_else(|| {
            UnitError::NoCapacity {
                type_name: type_name.to_owned(),
            }
        })
    }

    /// Creates a unit on this node (or finds it exists); see [`Node::claim_here`].
    pub(crate) async fn create_here(
        &self,
        type_name: &str,
        id: UnitId,
        or_get: bool,
        wanted: KindCheck,
        kind: &'static str,
    ) -> Result<bool, UnitError> {
        self.claim_here(type_name, id, Claim::New { or_get }, wanted, kind)
            .await
    }

    /// Builds a unit on this node and claims it in the store: the lane is set up gated (arrivals
    /// queue, nothing runs), the store is asked to record this node as owner (if no one is, or, for a
    /// recovery, if the record is still the dead owner's), and only then the lane opens.
    /// `Ok(true)` if this call claimed it.
    pub(crate) async fn claim_here(
        &self,
        type_name: &str,
        id: UnitId,
        claim: Claim,
        wanted: KindCheck,
        kind: &'static str,
    ) -> Result<bool, UnitError> {
        let recovering = matches!(claim, Claim::Recover { .. });
        if recovering {
            self.give_up_staged(&id);
        }
        let or_get = matches!(claim, Claim::New { or_get: true });
        let factory = self
            .core
            .factories
            .get(type_name)
            .filter(|f| wanted(f.info().kind))
            .ok_or_else(|| UnitError::UnknownType {
                kind: kind.into(),
                type_name: type_name.to_owned(),
            })?;
        let lane = {
            let mut shard = self.core.directory.lock(&id);
            if let Some(existing) = shard.get(&id) {
                if recovering {
                    // A copy a move left here, on its way out: not the rebuilt unit.
                    return Err(UnitError::Unavailable {
                        what: format!("rebuilding {id}"),
                        reason: "a copy an unfinished move left on this node is still being \
                                 given up; the next recovery pass retries"
                            .to_owned(),
                    });
                }
                return existing_answer(id, &existing.factory.info().type_name, type_name, or_get);
            }
            // A factory that panics fails this creation, not the node.
            let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Arc::clone(factory).build_cell(&id)
            }));
            let cell = match built {
                Ok(Some(cell)) => cell,
                Ok(None) => {
                    return Err(UnitError::NotAllowed {
                        id: id.clone(),
                        reason: format!("factory {type_name:?} does not build this kind of unit"),
                    });
                }
                Err(_) => {
                    return Err(UnitError::NotAllowed {
                        id: id.clone(),
                        reason: format!("factory {type_name:?} panicked while building it"),
                    });
                }
            };
            let slot = self.core.directory.new_slot();
            let lane = Lane::start_gated(self.clone(), cell, slot);
            shard.insert(
                id.clone(),
                Entry::new(Arc::clone(&lane), Arc::clone(factory), slot),
            );
            lane
        };
        let info = factory.info();
        let lease_generation = self.core.lease.lock().generation;
        let key = unit_key(&id);
        let (record, mut conditions, mut ops) = match &claim {
            Claim::New { .. } => {
                let record = UnitRecord {
                    owner: self.id().clone(),
                    lease_generation,
                    object_generation: ObjectGeneration(rand::random()),
                    owner_generation: 1,
                    factory: type_name.to_owned(),
                    stage: Stage::Active,
                    spot: None,
                    recoverable: info.recoverable && self.config().recover_units,
                };
                (record, vec![Condition::absent(key.clone())], Vec::new())
            }
            Claim::Recover {
                version,
                previous,
                owner_descriptor,
            } => {
                let descriptor = crate::cluster::authority::node_key(&previous.owner);
                let owner_condition = match owner_descriptor {
                    Some(at) => Condition::version(descriptor, *at),
                    None => Condition::absent(descriptor),
                };
                let record = UnitRecord {
                    owner: self.id().clone(),
                    lease_generation,
                    // A recreated unit is a fresh start: a new incarnation.
                    object_generation: ObjectGeneration(rand::random()),
                    owner_generation: previous.owner_generation + 1,
                    factory: type_name.to_owned(),
                    stage: Stage::Active,
                    spot: None,
                    recoverable: previous.recoverable,
                };
                (
                    record,
                    vec![Condition::version(key.clone(), *version), owner_condition],
                    Vec::new(),
                )
            }
        };
        ops.push(Op::put(key.clone(), record.encode()));
        if info.remembered {
            ops.push(Op::put(
                remembered_key(&id),
                Bytes::from(type_name.to_owned()),
            ));
        }
        let write = ConditionalWrite::new(record);
        // Only while this process holds the node's lease: a superseded one writes nothing.
        let lease = self.lease();
        conditions.push(Condition::lease(&lease));
        let written = self.store().batch(conditions, ops).await;
        if written.as_ref().is_ok_and(|w| w.lease_refused(self.id())) {
            let _ = lane.ctl.send(Control::Discard);
            return Err(UnitError::StoreUnavailable {
                what: format!("recording {id} in the location store"),
                reason: format!(
                    "the store does not hold this node's lease (generation {}) any more",
                    lease.generation
                ),
            });
        }
        let mut settled = write.on_write(BatchOutcome::answer(&written));
        if settled == Settled::ReadBack {
            let now = self.read_record(&id).await;
            settled = write.on_read(now.as_ref().map(Option::as_ref).map_err(|_| ()));
        }
        let committed = match settled {
            Settled::Won => Ok(true),
            Settled::Lost => Ok(false),
            // Neither the write nor the read was answered: the creation fails, and says why.
            Settled::ReadBack | Settled::Unknown => written.map(|_| false),
        };
        match (committed, claim) {
            (Ok(true), _) => {
                let _ = lane.ctl.send(Control::Open);
                Ok(true)
            }
            // Someone else recovered it first: nothing to do.
            (Ok(false), Claim::Recover { .. }) => {
                let _ = lane.ctl.send(Control::Discard);
                Ok(false)
            }
            (Ok(false), Claim::New { .. }) => {
                let _ = lane.ctl.send(Control::Discard);
                match self.read_record(&id).await {
                    Ok(Some(existing)) => existing_answer(id, &existing.factory, type_name, or_get),
                    Ok(None) => Err(UnitError::Unavailable {
                        what: format!("creating {id}"),
                        reason: "the store changed under the creation; retry".to_owned(),
                    }),
                    Err(error) => Err(unavailable(&id, &error)),
                }
            }
            (Err(error), _) => {
                let _ = lane.ctl.send(Control::Discard);
                Err(unavailable(&id, &error))
            }
        }
    }

    /// Rebuilds a dead node's unit here, gated on its record still being `previous` at `version`.
    /// An Actor whose record named a spot hosted here joins it again, its callbacks running as for
    /// any join; one whose spot is not here stays on its own, its record naming no spot.
    /// `Ok(true)` if this call rebuilt it.
    pub(crate) async fn recover_here(
        &self,
        id: UnitId,
        version: u64,
        previous: UnitRecord,
        owner_descriptor: Option<u64>,
    ) -> Result<bool, UnitError> {
        let (wanted, kind) = recover_kind_of(&id);
        let type_name = previous.factory.clone();
        let spot = previous.spot.clone();
        let claim = Claim::Recover {
            version,
            previous,
            owner_descriptor,
        };
        let rebuilt = self
            .claim_here(&type_name, id.clone(), claim, wanted, kind)
            .await?;
        if let (true, UnitId::Actor(actor), Some(spot)) = (rebuilt, &id, spot)
            && self.hosts(&UnitId::Spot(spot.clone()))
            && let Err(error) = self.join(actor, &spot).await
        {
            // Rebuilt all the same: on its own, as its record says, for the application to place.
            tracing::warn!(unit = %id, %spot, %error, "rebuilt member did not join its room again");
        }
        Ok(rebuilt)
    }

    /// Whether `config`'s node id is free to start with: refused (`StartError::IdInUse`) if a live
    /// process holds it, as [`Node::start`] checks first. For a host that binds its own ports
    /// before the start: a port taken by a copy of a running node's config is that node's, and
    /// this says so instead of the port.
    pub async fn check_id_free(config: &NodeConfig) -> Result<(), StartError> {
        crate::cluster::holder::check_id_free(config).await
    }

    /// Reads a unit's authority record from the store: who owns it, which incarnation it is.
    pub async fn read_record(&self, id: &UnitId) -> Result<Option<UnitRecord>, StoreError> {
        let key = unit_key(id);
        match self.store().get(&key).await? {
            Some(v) => Ok(Some(UnitRecord::decode(&key, &v.value)?)),
            None => Ok(None),
        }
    }

    /// Makes an Actor a member of a User Spot (leaving the spot it is in first, if any). Both must be
    /// hosted on this node.
    ///
    /// In a SpotWide spot the Actor's turns then run on the spot's queue; in a PerActor spot it keeps
    /// its own lane. The spot's `on_member_joined` and the Actor's `on_joined` run as turns.
    ///
    /// The Actor's record then names the spot, so that a crash rebuilds it in its room. If the store
    /// cannot be written, the Actor is a member all the same and the error
    /// ([`UnitError::MembershipNotRecorded`]) says so: the same join again records it.
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
        match self.ask_join(actor, spot, &spot_entry).await {
            Err(UnitError::NotAllowed { .. }) => {
                self.ask_leave(actor).await?;
                if let Err(error) = self.ask_join(actor, spot, &spot_entry).await {
                    // It left its old spot but is in none now: the record must say that much.
                    self.record_spot(actor, None).await?;
                    return Err(error);
                }
            }
            other => other?,
        }
        self.record_spot(actor, Some(spot.clone())).await
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

    /// Takes an Actor out of its User Spot, back into this node's Entry Spot, and clears the spot
    /// its record names. Called again after [`UnitError::MembershipNotRecorded`], it records the
    /// leave that already took effect.
    pub async fn leave(&self, actor: &ActorId) -> Result<(), UnitError> {
        match self.ask_leave(actor).await {
            Ok(()) => self.record_spot(actor, None).await,
            Err(not_member @ UnitError::NotAllowed { .. }) => {
                // A leave whose record write failed before: finish it, if the record lags.
                let id = UnitId::Actor(actor.clone());
                match self.read_record(&id).await {
                    Ok(Some(record)) if record.owner == *self.id() && record.spot.is_some() => {
                        self.record_spot(actor, None).await
                    }
                    _ => Err(not_member),
                }
            }
            Err(error) => Err(error),
        }
    }

    async fn ask_leave(&self, actor: &ActorId) -> Result<(), UnitError> {
        let (done, result) = oneshot::channel();
        let control = Control::Leave {
            actor: actor.clone(),
            done,
        };
        self.control(&UnitId::Actor(actor.clone()), control, result)
            .await
    }

    /// Writes the spot an Actor is a member of into its record (after its lane applied the
    /// change), so that recovery rebuilds it in that room. Conditional on the record as read; a
    /// write whose result did not arrive is read back, never guessed.
    async fn record_spot(&self, actor: &ActorId, spot: Option<SpotId>) -> Result<(), UnitError> {
        let id = UnitId::Actor(actor.clone());
        let key = unit_key(&id);
        let not_recorded = |reason: String| UnitError::MembershipNotRecorded {
            id: id.clone(),
            now: match &spot {
                Some(spot) => format!("a member of {spot}"),
                None => "in no room".to_owned(),
            },
            reason,
        };
        for _ in 0..RECORD_TRIES {
            let current = self
                .store()
                .get(&key)
                .await
                .map_err(|e| not_recorded(e.to_string()))?
                .ok_or_else(|| not_recorded("it has no record (it stopped meanwhile)".into()))?;
            let mut record = UnitRecord::decode(&key, &current.value)
                .map_err(|e| not_recorded(e.to_string()))?;
            // A move that took the Actor since wrote the room it carried: that may be this one.
            if record.spot == spot {
                return Ok(());
            }
            if record.owner != *self.id() {
                return Err(not_recorded(format!(
                    "its record names node {}",
                    record.owner
                )));
            }
            record.spot = spot.clone();
            let written = self
                .store()
                .batch(
                    vec![Condition::version(key.clone(), current.version)],
                    vec![Op::put(key.clone(), record.encode())],
                )
                .await;
            if let Ok(BatchOutcome::Committed { .. }) = written {
                return Ok(());
            }
            // Changed meanwhile, or the result is unknown: the next read tells.
        }
        Err(not_recorded(format!(
            "its record changed under {RECORD_TRIES} writes in a row"
        )))
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

    /// Sends a message to a unit by id, wherever it lives in the cluster. Messages from one sender
    /// to one unit are handled in the order sent.
    ///
    /// An error here is certain (an unknown id, a wrong type for a unit hosted here); a tell to a
    /// unit on another node that turns out not to exist is dropped there.
    pub fn tell<M: Message>(&self, to: impl Into<Target>, msg: M) -> Result<(), MessageError> {
        self.send::<M>(to.into(), msg, None)
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
        let mut waiting =
            self.core
                .replies
                .open()
                .ok_or_else(|| MessageError::TooManyRequests {
                    limit: self.core.replies.limit(),
                })?;
        let reply = ReplyTo {
            node: self.id().clone(),
            request: waiting.request,
        };
        self.send::<M>(target, msg, Some(reply))?;
        let reply = match tokio::time::timeout(timeout, &mut waiting.answer).await {
            Ok(Ok(terminal)) => terminal?,
            Ok(Err(_)) => return Err(MessageError::UnitStopped { id }),
            Err(_) => return Err(MessageError::Timeout { id, after: timeout }),
        };
        reply.take::<R>().map_err(|_| MessageError::WrongReplyType {
            id,
            expected: std::any::type_name::<R>().to_owned(),
        })
    }

    fn send<M: Message>(
        &self,
        target: Target,
        msg: M,
        reply: Option<ReplyTo>,
    ) -> Result<(), MessageError> {
        self.accepting()?;
        self.deliver::<M>(target, Payload::local(msg), reply)
    }

    /// Refuses new messages unless the node is serving.
    fn accepting(&self) -> Result<(), MessageError> {
        self.serving().map_err(|state| MessageError::NotServing {
            state: state.to_string(),
        })
    }

    /// Pushes a message held by value (an `M`) onto the lane of its unit here, or encodes it for
    /// the cluster to route.
    fn deliver<M: Message>(
        &self,
        target: Target,
        payload: Payload,
        reply: Option<ReplyTo>,
    ) -> Result<(), MessageError> {
        let mut envelope = Envelope {
            to: target.id,
            payload,
            reply: reply.map(Box::new),
        };
        if self.core.router.any_arriving() {
            let held = self.hold_if_arriving(envelope, TypeId::of::<M>(), |p| p.encode::<M>())?;
            let Some(sent) = held else {
                return Ok(());
            };
            envelope = sent;
        }
        let Some(envelope) = self.push(envelope, Some(TypeId::of::<M>()))? else {
            return Ok(());
        };
        // Not hosted here: encode once and let the cluster route it.
        let Envelope { to, payload, reply } = envelope;
        let bytes = payload
            .encode::<M>()
            .map_err(|reason| MessageError::Codec {
                id: to.clone(),
                reason,
            })?;
        self.route(Deliver {
            to,
            payload: bytes,
            session: None,
            reply,
            activate: target.activate.map(|a| Box::from(&*a)),
            origin: self.id().clone(),
            hops: 0,
        });
        Ok(())
    }

    /// Pushes onto the hosting lane; gives the envelope back if no lane here hosts its unit.
    ///
    /// The id stays with the sender: the lane's queue gets the unit's slot.
    pub(crate) fn push(
        &self,
        envelope: Envelope,
        msg_type: Option<TypeId>,
    ) -> Result<Option<Envelope>, MessageError> {
        let Envelope { to, payload, reply } = envelope;
        let not_hosted = self.core.directory.with(&to, |entry| {
            let Some(entry) = entry else {
                return Ok(Some((payload, reply)));
            };
            if let Some(t) = msg_type {
                entry.check_type(&to, t, &payload)?;
            }
            let queued = Envelope {
                to: entry.slot,
                payload,
                reply,
            };
            entry
                .lane
                .data
                .send(queued)
                .map(|()| None)
                .map_err(|_| MessageError::UnitStopped { id: to.clone() })
        })?;
        Ok(not_hosted.map(|(payload, reply)| Envelope { to, payload, reply }))
    }

    /// Delivers a request's terminal to whoever asked, here or across the mesh.
    pub(crate) fn complete(&self, reply_to: &ReplyTo, terminal: Terminal) {
        if reply_to.node == *self.id() {
            self.core.replies.complete(reply_to.request, terminal);
            return;
        }
        let terminal = terminal.and_then(|payload| {
            payload
                .into_encoded()
                .map_err(|other| MessageError::ReplyLost {
                    reason: format!("a reply of type {} was not encoded", other.type_name()),
                })
        });
        let frame = Frame::Reply {
            request: reply_to.request,
            terminal,
        };
        if let Err(error) = self.mesh_send(&reply_to.node, frame) {
            tracing::warn!(node = %reply_to.node, %error, "reply lost: the asking node is unreachable");
        }
    }

    /// Sends a frame to a peer.
    pub(crate) fn mesh_send(
        &self,
        to: &NodeId,
        frame: Frame,
    ) -> Result<(), crate::mesh::MeshError> {
        match &self.core.mesh {
            Some(mesh) => mesh.send(to, frame),
            None => Err(crate::mesh::MeshError::UnknownPeer(to.clone())),
        }
    }

    /// Asks another node to do something and waits for its typed answer.
    pub(crate) async fn call<A: Message>(&self, to: &NodeId, call: Call) -> Result<A, UnitError> {
        let failed = |reason: String| UnitError::Unavailable {
            what: format!("asking node {to}"),
            reason,
        };
        let Some(mut waiting) = self.core.replies.open() else {
            return Err(failed(format!(
                "{} requests are already waiting for replies on this node",
                self.core.replies.limit()
            )));
        };
        let request = waiting.request;
        self.mesh_send(
            to,
            Frame::Call {
                request,
                call: Box::new(call),
            },
        )
        .map_err(|error| failed(error.to_string()))?;
        match tokio::time::timeout(CALL_TIMEOUT, &mut waiting.answer).await {
            Ok(Ok(Ok(payload))) => payload.take::<A>().map_err(failed),
            Ok(Ok(Err(error))) => Err(failed(error.to_string())),
            Ok(Err(_)) => Err(failed("the call was dropped".to_owned())),
            Err(_) => Err(failed(format!("no answer within {CALL_TIMEOUT:?}"))),
        }
    }

    /// Runs a call another node asked of this one, and answers it.
    pub(crate) async fn answer_call(self, from: NodeId, request: u64, call: Call) {
        let answer = match call {
            Call::Create {
                type_name,
                id,
                or_get,
            } => {
                let (wanted, kind) = kind_of(&id);
                let answer: CreateAnswer =
                    self.create_here(&type_name, id, or_get, wanted, kind).await;
                postcard::to_allocvec(&answer)
            }
            Call::Recover {
                id,
                version,
                previous,
                owner_descriptor,
            } => {
                let answer: CreateAnswer = self
                    .recover_here(id, version, previous, owner_descriptor)
                    .await;
                postcard::to_allocvec(&answer)
            }
            Call::Member {
                spot,
                actor,
                joined,
            } => {
                let unit = UnitId::Spot(spot.clone());
                let answer: MemberAnswer = if self.core.directory.get(&unit).is_some() {
                    self.notify_member(&spot, actor, joined);
                    Ok(())
                } else {
                    Err(UnitError::UnknownId { id: unit })
                };
                postcard::to_allocvec(&answer)
            }
            Call::Activate { type_name, id } => {
                let wanted: KindCheck = |k| k == FactoryKind::InstanceSpot;
                let answer: CreateAnswer = self
                    .create_here(&type_name, id, true, wanted, "instance spot")
                    .await;
                postcard::to_allocvec(&answer)
            }
        };
        let terminal = answer.map(Into::into).map_err(|e| MessageError::ReplyLost {
            reason: e.to_string(),
        });
        let _ = self.mesh_send(&from, Frame::Reply { request, terminal });
    }

    /// Tells a PerActor spot's lane that an Actor joined or left it.
    /// A spot that has just been handed over to another node is told there.
    pub(crate) fn notify_member(&self, spot: &SpotId, actor: ActorId, joined: bool) {
        let unit = UnitId::Spot(spot.clone());
        if let Some(entry) = self.core.directory.get(&unit) {
            let _ = entry.lane.ctl.send(Control::Member { actor, joined });
        } else if let Some(owner) = self.cached_route(&unit) {
            self.forward_member(owner, spot.clone(), actor, joined);
        }
    }

    /// Tells a PerActor spot that moved to `owner` that an Actor joined or left it during the move.
    pub(crate) fn forward_member(&self, owner: NodeId, spot: SpotId, actor: ActorId, joined: bool) {
        let node = self.clone();
        tokio::spawn(async move {
            let call = Call::Member {
                spot: spot.clone(),
                actor: actor.clone(),
                joined,
            };
            let answer = node.call::<MemberAnswer>(&owner, call).await;
            if let Err(error) = answer.and_then(|a| a) {
                tracing::warn!(%spot, %actor, joined, %owner, %error, "a member change that reached a moving PerActor spot was not applied");
            }
        });
    }

    /// Forgets a stopped unit's authority record, if it still names this node.
    pub(crate) fn release_record(&self, id: UnitId) {
        let node = self.clone();
        tokio::spawn(async move {
            if let Err(error) = node.delete_own_record(&id, true).await {
                tracing::warn!(unit = %id, %error, "record of a stopped unit not released");
            }
        });
    }

    /// Deletes a unit's record if it still names this node. A unit that ended for good is also
    /// forgotten as remembered (`forget`); one that stops with its node (shutdown) stays remembered,
    /// so a cold start of the cluster brings it back.
    async fn delete_own_record(&self, id: &UnitId, forget: bool) -> Result<(), StoreError> {
        let key = unit_key(id);
        if let Some(v) = self.store().get(&key).await?
            && UnitRecord::decode(&key, &v.value)?.owner == *self.id()
        {
            let mut ops = vec![Op::delete(key.clone())];
            if forget {
                ops.push(Op::delete(remembered_key(id)));
            }
            self.store()
                .batch(vec![Condition::version(key, v.version)], ops)
                .await?;
        }
        Ok(())
    }

    /// Stops a unit hosted here for good (with its members, for a SpotWide spot): `on_closing` runs,
    /// queued requests get `UnitStopped`, and its authority record is released.
    pub async fn stop_unit(&self, id: &UnitId) -> Result<(), UnitError> {
        let (done, result) = oneshot::channel();
        let control = Control::Stop {
            unit: id.clone(),
            done,
        };
        self.control(id, control, result).await?;
        self.delete_own_record(id, true)
            .await
            .map_err(|error| unavailable(id, &error))
    }

    /// Stops the node at once, as a crash would: no turn or callback runs any more, nothing is
    /// released (records keep naming it, its lease runs out on its own), and it leaves the mesh.
    /// For tests and fault drills; `shutdown` is the orderly way.
    pub async fn abort(&self) {
        self.fence("aborted");
        self.core.stop.cancel();
        if let Some(hub) = &self.core.sessions {
            hub.abort().await;
        }
        self.close_lanes(Duration::ZERO).await;
        if let Some(mesh) = &self.core.mesh {
            mesh.close().await;
        }
        self.set_state(NodeState::Stopped);
    }

    /// Closes every lane, letting each finish its queued work for up to `grace`; what is left then
    /// is closed at once. Returns the units that were hosted, and whether all finished in time.
    async fn close_lanes(&self, grace: Duration) -> (Vec<UnitId>, bool) {
        let mut waits = Vec::new();
        let mut seen: Vec<Arc<lane::LaneTx>> = Vec::new();
        let mut ids = Vec::new();
        for (id, entry) in self.core.directory.all() {
            ids.push(id);
            if seen.iter().any(|l| Arc::ptr_eq(l, &entry.lane)) {
                continue;
            }
            seen.push(entry.lane.clone());
            let (done, wait) = oneshot::channel();
            let now = grace.is_zero();
            if entry.lane.ctl.send(Control::Close { done, now }).is_ok() {
                waits.push((entry.lane, wait));
            }
        }
        let until = tokio::time::Instant::now() + grace;
        let mut in_time = true;
        for (lane, wait) in waits {
            let mut wait = wait;
            if tokio::time::timeout_at(until, &mut wait).await.is_err() {
                // Closed as soon as its turn returns; a handler stuck for good is not waited for.
                in_time = false;
                let (done, _) = oneshot::channel();
                let _ = lane.ctl.send(Control::Close { done, now: true });
            }
        }
        (ids, in_time)
    }

    /// Shuts down within 30 seconds; see [`Node::shutdown_within`].
    pub async fn shutdown(&self) -> ShutdownOutcome {
        self.shutdown_within(Duration::from_secs(30)).await
    }

    /// Stops taking new work, lets every unit finish what it had accepted, closes them (each runs
    /// `on_closing`), releases their records and the lease, and leaves the mesh. Units still busy at
    /// the deadline are closed at once, their queued requests ending with `UnitStopped`.
    ///
    /// Client sessions are closed first, each with a reason its client reads (and reconnects on).
    ///
    /// Returns within `deadline` plus [`SHUTDOWN_MARGIN`], whatever the store and the links do:
    /// releasing records and the lease gets up to [`TEARDOWN_GRACE`] past the deadline (what is
    /// not released by then is `TeardownFailed`, and recovery clears it), and leaving the mesh
    /// up to [`crate::mesh::CLOSE_LINGER`].
    pub async fn shutdown_within(&self, deadline: Duration) -> ShutdownOutcome {
        let until = tokio::time::Instant::now() + deadline;
        self.set_state(NodeState::Draining);
        if let Some(hub) = &self.core.sessions {
            let reason = format!(
                "node {} is shutting down; connect to another node",
                self.id()
            );
            hub.shutdown(self, &reason).await;
        }
        let grace = until.saturating_duration_since(tokio::time::Instant::now());
        let (ids, in_time) = self.close_lanes(grace.max(Duration::from_millis(1))).await;
        self.core.stop.cancel();
        let teardown = async {
            let mut released = true;
            for chunk in ids.chunks(64) {
                let deletes = chunk.iter().map(|id| self.delete_own_record(id, false));
                for (id, result) in chunk
                    .iter()
                    .zip(futures_util::future::join_all(deletes).await)
                {
                    if let Err(error) = result {
                        released = false;
                        tracing::warn!(unit = %id, %error, "record not released at shutdown");
                    }
                }
            }
            self.withdraw().await;
            released
        };
        let teardown_until = until.max(tokio::time::Instant::now()) + TEARDOWN_GRACE;
        let released = match tokio::time::timeout_at(teardown_until, teardown).await {
            Ok(released) => released,
            Err(_) => {
                tracing::warn!(grace = ?TEARDOWN_GRACE,
                    "the store did not take the shutdown's releases in time; recovery clears \
                     what is left once the lease runs out");
                false
            }
        };
        if let Some(mesh) = &self.core.mesh {
            mesh.close().await;
        }
        self.set_state(NodeState::Stopped);
        self.core
            .host
            .status
            .send_modify(|s| s.safe_to_shutdown = true);
        let outcome = match (in_time, released) {
            (true, true) => ShutdownOutcome::Stopped,
            (false, _) => ShutdownOutcome::ForceStopped {
                reason: ShutdownReason::DeadlineExceeded,
            },
            (true, false) => ShutdownOutcome::ForceStopped {
                reason: ShutdownReason::TeardownFailed,
            },
        };
        tracing::info!(node = %self.id(), ?outcome, "node stopped");
        outcome
    }
}

/// How long past its deadline a shutdown may spend releasing records and its lease.
pub const TEARDOWN_GRACE: Duration = Duration::from_secs(1);

/// How long past its deadline [`Node::shutdown_within`] may return: the store's teardown, then
/// leaving the mesh.
pub const SHUTDOWN_MARGIN: Duration = TEARDOWN_GRACE.saturating_add(crate::mesh::CLOSE_LINGER);

/// How a shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ShutdownOutcome {
    /// Every unit finished its accepted work and closed; records and lease were released.
    Stopped,
    /// Not everything ended cleanly.
    ForceStopped {
        /// Why.
        reason: ShutdownReason,
    },
}

/// Why a shutdown was forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ShutdownReason {
    /// Some unit was still busy at the deadline; its queued requests ended with `UnitStopped`.
    DeadlineExceeded,
    /// Some record could not be released (the store was unreachable); recovery will clear it.
    TeardownFailed,
}

/// Which factory kinds may rebuild this kind of id after a crash: Instance Spots too.
pub(crate) fn recover_kind_of(id: &UnitId) -> (KindCheck, &'static str) {
    match id {
        UnitId::Spot(_) => (
            |k| matches!(k, FactoryKind::UserSpot(_) | FactoryKind::InstanceSpot),
            "spot",
        ),
        UnitId::Actor(_) => (|k| k == FactoryKind::Actor, "actor"),
    }
}

/// Which factory kinds may create this kind of id, and its name for errors.
pub(crate) fn kind_of(id: &UnitId) -> (KindCheck, &'static str) {
    match id {
        UnitId::Spot(_) => (|k| matches!(k, FactoryKind::UserSpot(_)), "spot"),
        UnitId::Actor(_) => (|k| k == FactoryKind::Actor, "actor"),
    }
}

/// The answer to a creation that found the unit already there.
fn existing_answer(
    id: UnitId,
    existing: &str,
    asked: &str,
    or_get: bool,
) -> Result<bool, UnitError> {
    if existing != asked {
        return Err(UnitError::TypeMismatch {
            id,
            existing: existing.to_owned(),
            asked: asked.to_owned(),
        });
    }
    if or_get {
        Ok(false)
    } else {
        Err(UnitError::AlreadyExists { id })
    }
}

fn unavailable(id: &UnitId, error: &StoreError) -> UnitError {
    UnitError::StoreUnavailable {
        what: format!("recording {id} in the location store"),
        reason: error.to_string(),
    }
}
