//! The [`Node`] handle and the state behind it: its configuration, factories, hosted units, pending
//! requests, cluster state, moves (and the committer their commits share) and client sessions; its
//! lifecycle state and the owner lease's fence. What a node does is in the other files of `node`,
//! each an `impl Node` block.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use super::config::NodeConfig;
use crate::cluster::authority::{NodeDescriptor, NodeState};
use crate::cluster::frames::Frame;
use crate::cluster::lease::LeaseClock;
use crate::cluster::losses::Losses;
use crate::cluster::recovery::{RecoveryEvent, RecoveryStall};
use crate::cluster::routes::Router;
use crate::cluster::witness::Witness;
use crate::ids::{NodeId, UnitId};
use crate::mesh::Mesh;
use crate::relocation::host::HostOp;
use crate::relocation::moves::Moves;
use crate::session::hub::Hub;
use crate::store::{Committer, Lease, LocationStore};
use crate::unit::cell::AnyFactory;
use crate::unit::directory::Directory;
use crate::unit::factory::FactoryKind;
use crate::unit::replies::Replies;

/// The handle to a running node. Cloning it is cheap; every clone is the same node.
#[derive(Clone)]
pub struct Node {
    pub(crate) core: Arc<NodeCore>,
}

/// What a node holds, by role: each part is what one side of the node works with.
pub(crate) struct NodeCore {
    pub(crate) config: NodeConfig,
    /// The units it hosts.
    pub(crate) units: Units,
    /// Its right to run turns.
    pub(crate) ownership: Ownership,
    /// The rest of the cluster, as it sees it.
    pub(crate) cluster: ClusterView,
    /// How its messages reach other nodes.
    pub(crate) links: Links,
    /// The moves this node takes part in, either side.
    pub(crate) moves: Moves<Node>,
    /// Its host operation (a drain), status and events.
    pub(crate) host: HostOp,
    /// The client listener and its sessions, if this node accepts game clients.
    pub(crate) sessions: Option<Hub>,
    /// Sends the commits of moves into this node to the store together.
    pub(crate) committer: Committer,
    /// Standby copies: of the rooms owned here, and kept here for other nodes.
    pub(crate) standby: crate::unit::standby::Standbys<Node>,
    pub(crate) stop: CancellationToken,
}

/// The units a node hosts: the factories that build them, the directory of their lanes, and
/// the requests waiting for their answers.
pub(crate) struct Units {
    pub(crate) factories: HashMap<Arc<str>, Arc<dyn AnyFactory<Node>>>,
    pub(crate) directory: Directory<Node>,
    pub(crate) replies: Arc<Replies>,
}

/// A node's right to run turns: its lifecycle state, its owner lease and the fence that stops
/// its turns once the lease may have lapsed.
pub(crate) struct Ownership {
    pub(crate) state: AtomicU8,
    pub(crate) state_tx: tokio::sync::watch::Sender<NodeState>,
    pub(crate) lease: Mutex<Lease>,
    /// Until when the owner lease is certainly held, counted from the send of the request that
    /// took or last renewed it: past it no turn starts, whether or not the renewal task noticed.
    pub(crate) lease_clock: LeaseClock,
    /// Set when the owner lease may have lapsed: no turn starts any more.
    pub(crate) fenced: AtomicBool,
    /// Units an earlier process of this node id left may still be taken back here: until they
    /// are, a drain counts them as arriving, and the node is not safe to shut down.
    pub(crate) adopting: AtomicBool,
}

/// The rest of the cluster as a node last read it, and its recovery of dead nodes' units.
pub(crate) struct ClusterView {
    /// The live nodes of the cluster as last read from the store, this one included.
    pub(crate) view: RwLock<Vec<NodeDescriptor>>,
    /// Nodes whose descriptor is in the store, whose lease has lapsed, and whom the mesh confirms
    /// dead, as last read: their units may be rebuilt.
    pub(crate) dead: RwLock<Vec<NodeId>>,
    /// Nodes whose lease has lapsed but whom the mesh does not confirm dead, as last read: their
    /// units are left alone, since they may still run them.
    pub(crate) suspected: RwLock<Vec<NodeId>>,
    /// What the mesh says about who is alive.
    pub(crate) witness: Witness,
    /// Recovery events, for whoever follows them.
    pub(crate) recovery: tokio::sync::broadcast::Sender<RecoveryEvent>,
    /// Why recovery waits, as this node last saw it.
    pub(crate) recovery_stall: Mutex<Option<RecoveryStall>>,
    /// Held while this node writes its descriptor, and by the shutdown that withdraws it: a
    /// write under way finishes first, and none starts once the node stops.
    pub(crate) publishing: tokio::sync::Mutex<()>,
}

/// How a node's messages reach units elsewhere: the mesh, the routes it keeps, and the tells
/// the mesh lost.
pub(crate) struct Links {
    pub(crate) mesh: Option<Mesh<Frame>>,
    pub(crate) router: Router,
    pub(crate) losses: Losses,
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
        self.units.factories.keys().map(|k| &**k)
    }

    /// The factory registered under a type name.
    pub(crate) fn factory(&self, type_name: &str) -> Option<Arc<dyn AnyFactory<Node>>> {
        self.units.factories.get(type_name).cloned()
    }
}

impl Node {
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

    /// How long ago this node last heard from `peer` over the mesh (a probe, or an answer to
    /// one), if it ever did. A peer not heard from is taken for dead only once its lease lapsed
    /// and the grace (half the lease) has passed since; one never heard from, only after the
    /// outage limit.
    pub fn heard_from(&self, peer: &NodeId) -> Option<std::time::Duration> {
        self.core.cluster.witness.heard_from(peer)
    }

    /// The mesh peers and where each link stands (admitted and ready, connecting, backing off).
    pub fn peers(&self) -> Vec<crate::mesh::PeerInfo> {
        self.core
            .links
            .mesh
            .as_ref()
            .map(Mesh::peers)
            .unwrap_or_default()
    }

    /// Where this node's mesh listens, if it has one.
    pub fn mesh_addr(&self) -> Option<std::net::SocketAddr> {
        self.core.links.mesh.as_ref().map(Mesh::local_addr)
    }

    /// The owner lease this node holds (or held, once it lost it): its generation tells this
    /// process's lease from one a later process of the same id took.
    pub fn lease(&self) -> Lease {
        self.core.ownership.lease.lock().clone()
    }

    /// The lifecycle state now.
    pub fn state(&self) -> NodeState {
        NodeState::from_u8(self.core.ownership.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, state: NodeState) {
        self.core
            .ownership
            .state
            .store(state as u8, Ordering::Release);
        self.core.ownership.state_tx.send_replace(state);
        self.core.host.status.send_modify(|s| s.state = state);
    }

    /// Follows the lifecycle state: the receiver sees every change from now on.
    pub fn watch_state(&self) -> tokio::sync::watch::Receiver<NodeState> {
        self.core.ownership.state_tx.subscribe()
    }

    pub(crate) fn serving(&self) -> Result<(), NodeState> {
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
        if self.core.ownership.fenced.load(Ordering::Acquire) {
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
        let config = self.config();
        crate::cluster::witness::may_run(
            now.into_std(),
            self.core.ownership.lease_clock.until().into_std(),
            self.core.links.mesh.is_some(),
            &config.witness_times(),
            || self.core.cluster.witness.vouch(config.peer_grace()),
        )
    }

    /// Whether the store confirmed this node's lease recently enough that it is certainly held:
    /// what moves, creations and recovery need before they write to the store.
    pub(crate) fn store_reachable(&self) -> bool {
        self.core.ownership.lease_clock.held()
    }

    /// Stops every turn for good: this node can no longer prove it owns its units. Nor does
    /// its mesh send again what it held when a link comes back: others may have done that work.
    pub(crate) fn fence(&self, why: &str) {
        if !self.core.ownership.fenced.swap(true, Ordering::AcqRel) {
            tracing::error!(node = %self.id(), why, "owner lease lost: no turn runs on this node any more");
            if let Some(mesh) = &self.core.links.mesh {
                mesh.fence();
            }
            self.set_state(NodeState::Error);
        }
    }

    /// Whether this node hosts the unit now.
    pub fn hosts(&self, id: &UnitId) -> bool {
        self.core.units.directory.get(id).is_some()
    }

    /// How many units (spots and actors) this node hosts.
    pub fn unit_count(&self) -> usize {
        self.core.units.directory.len()
    }

    /// The units (spots and actors) this node hosts now, in no particular order.
    pub fn units(&self) -> Vec<UnitId> {
        self.core
            .units
            .directory
            .all()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    /// The kind of factory behind a unit hosted here.
    pub fn factory_kind(&self, id: &UnitId) -> Option<FactoryKind> {
        self.core
            .units
            .directory
            .get(id)
            .map(|e| e.factory.info().kind)
    }
}
