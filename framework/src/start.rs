//! Starting a node: [`Node::start`] checks the registrations, takes the owner lease, joins the mesh,
//! opens the client listener and publishes the node in the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use crate::cluster::authority::NodeState;
use crate::cluster::lease::LeaseClock;
use crate::cluster::losses::Losses;
use crate::cluster::routes::Router;
use crate::cluster::witness::Witness;
use crate::error::StartError;
use crate::mesh::{Mesh, MeshConfig};
use crate::node::handle::{ClusterView, Links, Ownership, Units};
use crate::node::{Node, NodeConfig, NodeCore};
use crate::registry::Registry;
use crate::relocation::host::HostOp;
use crate::relocation::moves::Moves;
use crate::session::hub::Hub;
use crate::store::Committer;
use crate::unit::directory::Directory;
use crate::unit::replies::Replies;

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
        crate::node::holder::check_id_free(&config).await?;
        let asked = tokio::time::Instant::now();
        let lease = config
            .store
            .acquire_lease(&config.id, rand::random(), config.lease_ttl)
            .await?;
        // Superseded by now: an earlier process of this id renewed for the last time before.
        let took_over = tokio::time::Instant::now();
        let lease_clock = LeaseClock::new(asked + config.lease_ttl);
        let mesh = match &config.mesh {
            Some(settings) => {
                let mut mesh_config =
                    MeshConfig::new(config.id.clone(), settings.listen, settings.tls.clone());
                mesh_config.max_frame = settings.max_frame;
                mesh_config.initial_rtt = settings.initial_rtt;
                mesh_config.keep_alive = settings.keep_alive;
                mesh_config.idle_timeout = settings.idle_timeout;
                mesh_config.unacked_bytes = settings.unacked_bytes;
                mesh_config.sockets = settings.sockets.clone();
                let mesh = Mesh::bind_unserved(mesh_config).await?;
                for (peer, addr) in &settings.seeds {
                    mesh.add_peer(peer.clone(), *addr)?;
                }
                Some(mesh)
            }
            None => None,
        };
        let sessions = match &config.sessions {
            Some(settings) => Some(Hub::bind(settings).await?),
            None => None,
        };
        let replies = Arc::new(Replies::new(config.max_requests_in_flight));
        let committer = Committer::new(config.store.clone());
        let core = NodeCore {
            config,
            units: Units {
                factories: registry.factories,
                directory: Directory::new(),
                replies,
            },
            ownership: Ownership {
                state: AtomicU8::new(NodeState::Preparing as u8),
                state_tx: tokio::sync::watch::Sender::new(NodeState::Preparing),
                lease: Mutex::new(lease),
                lease_clock,
                fenced: AtomicBool::new(false),
                adopting: AtomicBool::new(false),
            },
            cluster: ClusterView {
                view: RwLock::new(Vec::new()),
                dead: RwLock::new(Vec::new()),
                suspected: RwLock::new(Vec::new()),
                witness: Witness::new(),
                recovery: tokio::sync::broadcast::Sender::new(1024),
                recovery_stall: Mutex::new(None),
                publishing: tokio::sync::Mutex::new(()),
            },
            links: Links {
                mesh,
                router: Router::new(),
                losses: Losses::new(),
            },
            stop: CancellationToken::new(),
            moves: Moves::default(),
            host: HostOp::new(),
            sessions,
            committer,
            standby: Default::default(),
        };
        let node = Node {
            core: Arc::new(core),
        };
        if let Some(mesh) = &node.core.links.mesh {
            // Frames from peers are served on the tasks that read them, until the mesh closes.
            let server = node.clone();
            mesh.serve(move |inbound| server.serve_frame(inbound));
            tokio::spawn(node.clone().serve_losses(mesh.losses()));
        }
        node.set_state(NodeState::Serving);
        node.refresh_membership().await?;
        node.spawn_keepers();
        let generation = node.lease().generation;
        if generation > 1 {
            // An earlier process of this id may have left units that only this one takes back.
            node.core.ownership.adopting.store(true, Ordering::Release);
            tokio::spawn(node.clone().adopt_left_units(took_over, generation));
        }
        if let Some(hub) = &node.core.sessions {
            hub.start(&node);
        }
        tracing::info!(node = %node.id(), "node serving");
        Ok(node)
    }
}
