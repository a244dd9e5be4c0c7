//! A cluster of nodes inside one process, as the demo and the bench run it: a real QUIC mesh on
//! loopback with ephemeral certificates, one shared location store, and a client gateway on every
//! node, so bots connect to it exactly as game clients connect to a cluster of machines.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry::mesh::{ClusterCa, TlsError};
use ferry::session::tls::SessionTlsError;
use ferry::store::{LocationStore, StoreError};
use ferry::{
    MeshSettings, Node, NodeConfig, NodeId, Registry, SessionSettings, SessionTls, StartError,
    StaticTokens,
};

use crate::bots::GatewayAccess;

/// The name the gateways' ephemeral certificate carries.
const SERVER_NAME: &str = "localhost";

/// The token the bots of an in-process cluster present.
const TOKEN: &[u8] = b"ferry-demo-bot";

/// How long a node may take to link to another before the cluster gives up.
const LINK_WITHIN: Duration = Duration::from_secs(10);

/// Which location store the nodes share: `memory`, a `redis://` URL or an `etcd://` list, as the
/// `--store` flag takes it.
pub use ferry::store::StoreUrl as StoreChoice;

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The ephemeral certificates could not be made.
    #[error("could not make the cluster's ephemeral certificates: {0}")]
    Certificates(#[from] TlsError),
    /// The gateways' ephemeral certificate could not be made.
    #[error("could not make the gateways' ephemeral certificate: {0}")]
    GatewayCertificate(#[from] SessionTlsError),
    /// The shared store could not be reached or used.
    #[error(
        "cannot use the store at {url}: {source}; or leave out --store to use the \
         in-process store"
    )]
    Store {
        /// The URL, without any password.
        url: String,
        /// The store's refusal.
        source: StoreError,
    },
    /// A node did not start.
    #[error("node {node} did not start: {source}")]
    Start {
        /// The node that did not start.
        node: NodeId,
        /// The node's refusal.
        source: StartError,
    },
    /// A node could not read the cluster's membership from the store.
    #[error("node {node} could not read the cluster membership: {source}")]
    Membership {
        /// The node whose read failed.
        node: NodeId,
        /// What the store said.
        source: StoreError,
    },
    /// Two nodes could not link over the mesh.
    #[error("node {from} could not link to node {to} over loopback QUIC: {reason}")]
    Link {
        /// The node dialling.
        from: NodeId,
        /// The node it dialled.
        to: NodeId,
        /// What the dial or the handshake met.
        reason: String,
    },
    /// A node id could not be made.
    #[error(transparent)]
    Id(#[from] ferry::InvalidId),
}

/// Nodes of one process that know each other. Shut it down at the end.
pub struct LocalCluster {
    /// The nodes, in the order of their ids (`demo-1`, `demo-2`, ...).
    pub nodes: Vec<Node>,
    /// How clients reach the gateways of every node.
    pub access: GatewayAccess,
}

impl LocalCluster {
    /// Starts `n` nodes on `store`, each with the factories `registry` gives and a client
    /// gateway on a free loopback port, and returns once every mesh link is up.
    pub async fn start(
        n: usize,
        store: &StoreChoice,
        registry: impl Fn() -> Registry,
    ) -> Result<LocalCluster, ClusterError> {
        Self::start_wrapped(n, store, registry, |store| store).await
    }

    /// [`LocalCluster::start`], with the shared store passed through `wrap` before any node uses
    /// it, so that a caller can watch what the nodes ask of it.
    pub async fn start_wrapped(
        n: usize,
        store: &StoreChoice,
        registry: impl Fn() -> Registry,
        wrap: impl FnOnce(Arc<dyn LocationStore>) -> Arc<dyn LocationStore>,
    ) -> Result<LocalCluster, ClusterError> {
        Self::start_with(n, store, registry, wrap, None).await
    }

    /// [`LocalCluster::start`] with owner leases of `lease_ttl`: how soon a node that stopped
    /// renewing its lease is declared dead and its rooms recovered.
    pub async fn start_leased(
        n: usize,
        store: &StoreChoice,
        registry: impl Fn() -> Registry,
        lease_ttl: Duration,
    ) -> Result<LocalCluster, ClusterError> {
        Self::start_with(n, store, registry, |store| store, Some(lease_ttl)).await
    }

    async fn start_with(
        n: usize,
        store: &StoreChoice,
        registry: impl Fn() -> Registry,
        wrap: impl FnOnce(Arc<dyn LocationStore>) -> Arc<dyn LocationStore>,
        lease_ttl: Option<Duration>,
    ) -> Result<LocalCluster, ClusterError> {
        let store = wrap(open_store(store).await?);
        let ca = ClusterCa::generate()?;
        let (gateway_tls, ca_pem) = SessionTls::self_signed(&[SERVER_NAME])?;
        let mut nodes: Vec<Node> = Vec::with_capacity(n);
        for i in 1..=n {
            let id = NodeId::new(format!("demo-{i}"))?;
            let mut config = node_config(&id, &store, &ca, &gateway_tls)?;
            if let Some(ttl) = lease_ttl {
                config.lease_ttl = ttl;
            }
            match Node::start(config, registry()).await {
                Ok(node) => nodes.push(node),
                Err(source) => {
                    shutdown_all(&nodes).await;
                    return Err(ClusterError::Start { node: id, source });
                }
            }
        }
        if let Err(error) = link(&nodes).await {
            shutdown_all(&nodes).await;
            return Err(error);
        }
        let servers = nodes.iter().filter_map(Node::session_addr).collect();
        Ok(LocalCluster {
            nodes,
            access: GatewayAccess {
                servers,
                server_name: SERVER_NAME.to_owned(),
                ca_pem,
                token: TOKEN.to_vec(),
            },
        })
    }

    /// Shuts every node down (its units close, its records and lease are released).
    pub async fn shutdown(self) {
        shutdown_all(&self.nodes).await;
    }
}

async fn open_store(choice: &StoreChoice) -> Result<Arc<dyn LocationStore>, ClusterError> {
    // A namespace of this run's own, so runs sharing a store never meet.
    let prefix = format!("ferry-demo-{}-{}", std::process::id(), run_suffix());
    choice
        .open(&prefix)
        .await
        .map_err(|source| ClusterError::Store {
            url: choice.to_string(),
            source,
        })
}

/// A suffix that differs between runs started in the same process id (a reused pid).
fn run_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn node_config(
    id: &NodeId,
    store: &Arc<dyn LocationStore>,
    ca: &ClusterCa,
    gateway_tls: &SessionTls,
) -> Result<NodeConfig, ClusterError> {
    let loopback: SocketAddr = (std::net::Ipv4Addr::LOCALHOST, 0).into();
    let mut mesh = MeshSettings::new(loopback, ca.node_tls(id)?);
    // Loopback answers in microseconds; the default assumes a data-centre network.
    mesh.initial_rtt = Duration::from_millis(10);
    let tokens = StaticTokens::new().with(TOKEN, "bot");
    let sessions = SessionSettings::new(loopback, gateway_tls.clone(), tokens);
    Ok(NodeConfig::new(id.clone())
        .store(store.clone())
        .mesh(mesh)
        .sessions(sessions))
}

/// Makes every node read the membership, then waits until every node links to every other.
async fn link(nodes: &[Node]) -> Result<(), ClusterError> {
    // Twice: the first pass publishes every node's descriptor, the second reads all of them.
    for _ in 0..2 {
        for node in nodes {
            node.refresh_membership()
                .await
                .map_err(|source| ClusterError::Membership {
                    node: node.id().clone(),
                    source,
                })?;
        }
    }
    for a in nodes {
        for b in nodes.iter().filter(|b| b.id() != a.id()) {
            let failed = |reason: String| ClusterError::Link {
                from: a.id().clone(),
                to: b.id().clone(),
                reason,
            };
            match tokio::time::timeout(LINK_WITHIN, a.wait_peer_ready(b.id())).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(failed(error.to_string())),
                Err(_) => return Err(failed(format!("no link within {LINK_WITHIN:?}"))),
            }
        }
    }
    Ok(())
}

async fn shutdown_all(nodes: &[Node]) {
    for node in nodes {
        node.shutdown().await;
    }
}
