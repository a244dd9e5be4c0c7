//! Two Ferry nodes in one process on a shared in-process store, over real QUIC on loopback with
//! throwaway certificates: a counter spot lives on node B, node A sends to it.

use std::sync::Arc;
use std::time::Duration;

use ferry::mesh::ClusterCa;
use ferry::store::{LocationStore, MemoryStore};
use ferry::{MeshSettings, Node, NodeConfig, NodeId, SpotId};

use crate::{COUNTER_SPOT, registry};

/// The sending node's id (also the `origin` and reply node the baseline's frames carry).
pub const NODE_A: &str = "a";
/// The hosting node's id.
pub const NODE_B: &str = "b";
/// The counter spot's id (also the `to` the baseline's frames carry).
pub const SPOT: &str = "c0";

/// How long a bench request may take before the bench fails.
const T: Duration = Duration::from_secs(10);

/// Node A, node B and the counter spot hosted on B.
pub struct NodePair {
    /// The node that sends to [`NodePair::spot`], across the mesh.
    pub a: Node,
    /// The host of [`NodePair::spot`].
    pub b: Node,
    /// The counter spot, on B.
    pub spot: SpotId,
}

/// A node config: loopback mesh with a certificate from `ca`, on `store`.
pub(crate) fn config(id: &str, store: Arc<dyn LocationStore>, ca: &ClusterCa) -> NodeConfig {
    let node = NodeId::new(id).expect("a valid node id");
    let tls = ca.node_tls(&node).expect("a node certificate");
    let mut mesh = MeshSettings::new("127.0.0.1:0".parse().expect("an address"), tls);
    mesh.initial_rtt = Duration::from_millis(10);
    NodeConfig::new(node).store(store).mesh(mesh)
}

impl NodePair {
    /// Starts both nodes, links them, creates the spot on B and warms A's route to it.
    pub async fn start() -> NodePair {
        let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
        let ca = ClusterCa::generate().expect("a cluster CA");
        let a = Node::start(config(NODE_A, store.clone(), &ca), registry())
            .await
            .expect("node A starts");
        let b = Node::start(config(NODE_B, store, &ca), registry())
            .await
            .expect("node B starts");
        // Twice: the first pass publishes each node, the second reads the other.
        for _ in 0..2 {
            a.refresh_membership()
                .await
                .expect("A reads the membership");
            b.refresh_membership()
                .await
                .expect("B reads the membership");
        }
        a.wait_peer_ready(b.id()).await.expect("A links to B");
        b.wait_peer_ready(a.id()).await.expect("B links to A");
        let spot = SpotId::new(SPOT).expect("a valid spot id");
        a.create_spot_on(b.id(), COUNTER_SPOT, &spot)
            .await
            .expect("the counter spot is created on B");
        let pair = NodePair { a, b, spot };
        // The first message looks the route up in the store; benches measure the cached route.
        pair.request(0).await;
        pair
    }

    /// Tells the spot `n` from A.
    pub fn tell(&self, n: u64) {
        self.a.tell(&self.spot, n).expect("told");
    }

    /// Asks the spot from A to add `n`, and returns its count.
    pub async fn request(&self, n: u64) -> u64 {
        self.a
            .request(&self.spot, n, T)
            .await
            .expect("the spot answers")
    }

    /// Shuts both nodes down.
    pub async fn shutdown(self) {
        self.a.shutdown().await;
        self.b.shutdown().await;
    }
}
