//! How a node is started: its identity, its store, its mesh, and the limits it publishes.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::ids::NodeId;
use crate::mesh::{NodeTls, OsSockets, SocketFactory};
use crate::session::SessionSettings;
use crate::store::{LocationStore, MemoryStore};

/// The default [`NodeConfig::max_state`]: 128 MiB, far above a game room's state and small enough
/// that a hostile offer cannot make a node buffer gigabytes.
pub const DEFAULT_MAX_STATE: u64 = 128 * 1024 * 1024;

/// How a node joins the mesh.
#[derive(Debug, Clone)]
pub struct MeshSettings {
    /// Where the mesh listens (UDP); port 0 picks a free one.
    pub listen: SocketAddr,
    /// The cluster CA and this node's certificate.
    pub tls: NodeTls,
    /// The largest frame in bytes; every node must agree.
    pub max_frame: usize,
    /// The smallest round-trip the mesh assumes before it measured one (see `MeshConfig::initial_rtt`).
    pub initial_rtt: Duration,
    /// How often an idle mesh connection is pinged; must be shorter than `idle_timeout`.
    pub keep_alive: Duration,
    /// How long a mesh connection may hear nothing before it is declared lost and redialled.
    /// Frames not yet acknowledged on it are sent again on the next connection, so this bounds
    /// how long a dead link delays delivery, not what it loses.
    pub idle_timeout: Duration,
    /// Bytes sent to one peer and kept until it acknowledges them, to send again after a link
    /// reset; past it, sends queue, then fail with `MeshError::Backlogged`.
    pub unacked_bytes: usize,
    /// Peers to dial at start, before (and besides) those learned from the store's descriptors.
    pub seeds: Vec<(crate::ids::NodeId, SocketAddr)>,
    /// Where the mesh's UDP socket comes from (see `MeshConfig::sockets`): the operating system
    /// unless a network simulator supplies it.
    pub sockets: Arc<dyn SocketFactory>,
}

impl MeshSettings {
    /// Settings with the mesh's defaults.
    pub fn new(listen: SocketAddr, tls: NodeTls) -> Self {
        MeshSettings {
            listen,
            tls,
            max_frame: crate::mesh::DEFAULT_MAX_FRAME,
            initial_rtt: Duration::from_millis(100),
            keep_alive: crate::mesh::DEFAULT_KEEP_ALIVE,
            idle_timeout: crate::mesh::DEFAULT_IDLE_TIMEOUT,
            unacked_bytes: crate::mesh::DEFAULT_UNACKED_BYTES,
            seeds: Vec::new(),
            sockets: Arc::new(OsSockets),
        }
    }
}

/// How a node is started. [`NodeConfig::new`] gives a one-node cluster on an in-process store.
#[derive(Clone)]
pub struct NodeConfig {
    /// This node's id, unique in the cluster.
    pub id: NodeId,
    /// The application version it runs (rolling updates move units to a newer one).
    pub app_version: String,
    /// How many units it takes at most; placement skips a full node.
    pub capacity: u64,
    /// Preference among equally loaded nodes (higher first).
    pub weight: u32,
    /// The location store shared by the cluster.
    pub store: Arc<dyn LocationStore>,
    /// The mesh, for a cluster of more than one node.
    pub mesh: Option<MeshSettings>,
    /// How long the node's owner lease lasts without renewal. A node that cannot renew it in time
    /// stops running turns: it must never act as an owner it might no longer be.
    pub lease_ttl: Duration,
    /// The longest a node with a mesh runs turns past the end of its lease while the store does not
    /// answer it (as long as every peer still hears it over the mesh). A node that never heard
    /// from it waits this long plus a TTL before rebuilding its units, so it also bounds how long
    /// recovery can wait for such a node.
    pub outage_limit: Duration,
    /// How often the node republishes its descriptor and rereads its peers'.
    pub refresh: Duration,
    /// The system-wide default for recovery: whether units of a node that died are rebuilt on the
    /// survivors (a factory can opt out with `Registration::recoverable(false)`).
    pub recover_units: bool,
    /// How often the recovery coordinator sweeps the store for orphans even when no node is known
    /// to be dead (units force-stopped at a drain's deadline are found this way).
    pub recovery_sweep: Duration,
    /// The listener for game clients, if this node is a gateway.
    pub sessions: Option<SessionSettings>,
    /// The largest capture (a unit's state, queued messages and timers, encoded) this node sends
    /// or takes in a move. A bigger unit stays where it runs, and an offer over it is refused
    /// before any of it is buffered.
    pub max_state: u64,
    /// How many requests this node's callers (and its units' workers) may have waiting for
    /// replies at once; a request past it fails at once with `TooManyRequests`, so a stuck unit
    /// cannot make its callers pile up without bound.
    pub max_requests_in_flight: usize,
}

impl NodeConfig {
    /// A node with the given id, version "1", on its own fresh in-process store, without a mesh.
    pub fn new(id: NodeId) -> Self {
        NodeConfig {
            id,
            app_version: "1".to_owned(),
            capacity: 1_000_000,
            weight: 1,
            store: Arc::new(MemoryStore::new()),
            mesh: None,
            lease_ttl: Duration::from_secs(10),
            outage_limit: Duration::from_secs(60),
            refresh: Duration::from_secs(1),
            recover_units: true,
            recovery_sweep: Duration::from_secs(10),
            max_state: DEFAULT_MAX_STATE,
            max_requests_in_flight: 100_000,
            sessions: None,
        }
    }

    /// Uses a shared location store (a `MemoryStore` clone for nodes of one process, or Redis).
    pub fn store(mut self, store: Arc<dyn LocationStore>) -> Self {
        self.store = store;
        self
    }

    /// Joins the mesh with these settings.
    pub fn mesh(mut self, mesh: MeshSettings) -> Self {
        self.mesh = Some(mesh);
        self
    }

    /// Accepts game clients with these settings.
    pub fn sessions(mut self, sessions: SessionSettings) -> Self {
        self.sessions = Some(sessions);
        self
    }

    /// Sets the application version.
    pub fn app_version(mut self, version: impl Into<String>) -> Self {
        self.app_version = version.into();
        self
    }
}

impl NodeConfig {
    /// How long an answered mesh probe vouches for the node that sent it: half the lease TTL, so
    /// that a crashed node is confirmed dead by the time its lease runs out.
    pub fn peer_grace(&self) -> Duration {
        self.lease_ttl / 2
    }

    /// How often the node probes its peers: four probes within a grace, never slower than the
    /// membership refresh.
    pub(crate) fn probe_every(&self) -> Duration {
        self.refresh
            .min(self.peer_grace() / 4)
            .max(Duration::from_millis(10))
    }

    pub(crate) fn witness_times(&self) -> crate::cluster::witness::Times {
        crate::cluster::witness::Times {
            grace: self.peer_grace(),
            lease_ttl: self.lease_ttl,
            outage_limit: self.outage_limit,
        }
    }
}

impl fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeConfig")
            .field("id", &self.id)
            .field("app_version", &self.app_version)
            .field("capacity", &self.capacity)
            .field("weight", &self.weight)
            .field("mesh", &self.mesh.as_ref().map(|m| m.listen))
            .field("lease_ttl", &self.lease_ttl)
            .field("outage_limit", &self.outage_limit)
            .field("refresh", &self.refresh)
            .field("recover_units", &self.recover_units)
            .field("recovery_sweep", &self.recovery_sweep)
            .field("max_state", &self.max_state)
            .field("max_requests_in_flight", &self.max_requests_in_flight)
            .field("sessions", &self.sessions.as_ref().map(|s| s.listen))
            .finish_non_exhaustive()
    }
}
