//! An in-process cluster for tests: nodes on one shared store, talking real QUIC on loopback with
//! throwaway certificates.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ferry::mesh::ClusterCa;
use ferry::relocation::protocol::MoveEnd;
use ferry::store::{LocationStore, MemoryStore, RedisStore, RedisStoreConfig};
use ferry::{
    MeshSettings, MoveError, MoveReport, Node, NodeConfig, NodeId, Registry, RelocateMode,
    RelocateOptions, RelocateOutcome, SpotId, UnitId,
};
use tokio::task::JoinHandle;

use crate::redis_server::RedisServer;

/// Nodes that know each other. Shut it down at the end of the test.
pub struct Cluster {
    /// The nodes, in the order of their ids (`n1`, `n2`, ...).
    pub nodes: Vec<Node>,
    /// The store they share.
    pub store: Arc<dyn LocationStore>,
    ca: ClusterCa,
    /// The redis-server behind the store, if it is Redis; it lives as long as the cluster.
    redis: Option<RedisServer>,
}

/// Waits, in bounded steps, until `node` holds no working link to `peer` (the mesh exposes no
/// event for a lost link above its own tests).
pub async fn wait_link_lost(node: &Node, peer: &Node) {
    for _ in 0..400 {
        let ready = node
            .peers()
            .iter()
            .any(|p| &p.node == peer.id() && p.state == ferry::mesh::PeerState::Ready);
        if !ready {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "{} never noticed its link to {} was dead",
        node.id(),
        peer.id()
    );
}

/// Which location store a test cluster runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The in-process `MemoryStore`.
    Memory,
    /// A `RedisStore` on a real redis-server that the cluster starts and stops.
    Redis,
}

/// A node config for tests: loopback mesh, a short initial round-trip, fast refresh.
pub fn test_config(id: &str, store: Arc<dyn LocationStore>, ca: &ClusterCa) -> NodeConfig {
    let node = NodeId::new(id).expect("valid node id");
    let tls = ca.node_tls(&node).expect("certificate");
    let mut mesh = MeshSettings::new("127.0.0.1:0".parse().expect("addr"), tls);
    mesh.initial_rtt = Duration::from_millis(10);
    let mut config = NodeConfig::new(node).store(store).mesh(mesh);
    config.refresh = Duration::from_millis(200);
    config
}

/// The lease holder number of another process of the same node id (one a test starts by hand).
pub const ANOTHER_PROCESS: u64 = 2;

/// Shows the nodes' logs at the level `RUST_LOG` asks for (none without it), captured per test.
pub fn show_logs() {
    let _already = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

impl Cluster {
    /// Starts `n` nodes on a fresh in-process store, each with the factories `registry` gives, and
    /// waits until every node's mesh links to every other are up.
    pub async fn start(n: usize, registry: impl Fn() -> Registry) -> Cluster {
        let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
        Self::start_on(n, store, registry).await
    }

    /// Starts `n` nodes on the given backend; `None` (after one line saying why) when Redis is
    /// asked for and redis-server is not installed.
    pub async fn start_with(
        backend: Backend,
        n: usize,
        registry: impl Fn() -> Registry,
    ) -> Option<Cluster> {
        match backend {
            Backend::Memory => Some(Self::start(n, registry).await),
            Backend::Redis => {
                let redis = RedisServer::start_or_skip().await?;
                let store = RedisStore::connect(&redis.url(), RedisStoreConfig::default())
                    .await
                    .expect("redis store");
                let mut cluster = Self::start_on(n, Arc::new(store), registry).await;
                cluster.redis = Some(redis);
                Some(cluster)
            }
        }
    }

    /// Like [`Cluster::start`], on a given store.
    pub async fn start_on(
        n: usize,
        store: Arc<dyn LocationStore>,
        registry: impl Fn() -> Registry,
    ) -> Cluster {
        let ca = ClusterCa::generate().expect("cluster CA");
        let mut cluster = Cluster {
            nodes: Vec::new(),
            store,
            ca,
            redis: None,
        };
        for i in 1..=n {
            cluster.add(&format!("n{i}"), registry()).await;
        }
        cluster
    }

    /// Starts one more node and links it with every node already up.
    pub async fn add(&mut self, id: &str, registry: Registry) -> Node {
        self.add_with(test_config(id, self.store.clone(), &self.ca), registry)
            .await
    }

    /// Starts one more node from a config and links it with every node already up.
    pub async fn add_with(&mut self, config: NodeConfig, registry: Registry) -> Node {
        show_logs();
        let node = Node::start(config, registry).await.expect("node starts");
        self.nodes.push(node.clone());
        self.link().await;
        node
    }

    /// A config for a node of this cluster (same store and CA), to change before [`Cluster::add_with`].
    pub fn config(&self, id: &str) -> NodeConfig {
        test_config(id, self.store.clone(), &self.ca)
    }

    /// Makes every node read the membership now and waits for all links.
    pub async fn link(&self) {
        // Twice: the first pass publishes every node's load, the second reads all of it.
        for _ in 0..2 {
            for node in &self.nodes {
                node.refresh_membership().await.expect("membership read");
            }
        }
        for a in &self.nodes {
            for b in &self.nodes {
                if a.id() != b.id() {
                    a.wait_peer_ready(b.id()).await.expect("peer link up");
                }
            }
        }
    }

    /// The node with that id.
    pub fn node(&self, id: &str) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id().as_str() == id)
            .expect("node in cluster")
    }

    /// Shuts every node down, then the redis-server if there is one: every server the test
    /// started is stopped.
    pub async fn shutdown(self) {
        for node in &self.nodes {
            node.shutdown().await;
        }
        drop(self.redis);
    }
}

/// Starts a maintenance drain of `node` with `deadline` on a task of its own, so the test can act
/// while it runs.
pub fn drain_in_background(node: &Node, deadline: Duration) -> JoinHandle<RelocateOutcome> {
    let node = node.clone();
    tokio::spawn(async move {
        node.relocate(RelocateOptions {
            mode: RelocateMode::PlannedMaintenance,
            deadline,
        })
        .await
    })
}

/// Starts `node.move_unit(id, to)` on a task of its own, so the test can act while it runs.
pub fn move_in_background(
    node: &Node,
    id: UnitId,
    to: &NodeId,
) -> JoinHandle<Result<MoveReport, MoveError>> {
    let (node, to) = (node.clone(), to.clone());
    tokio::spawn(async move { node.move_unit(&id, Some(to)).await })
}

/// Moves rooms round the nodes, one at a time, until `stop`, and counts in `moved` the moves that
/// committed. A move refused (the store down) or restored on its source is tried again soon.
pub async fn move_rooms_round(
    nodes: Vec<Node>,
    rooms: Vec<SpotId>,
    stop: Arc<AtomicBool>,
    moved: Arc<AtomicUsize>,
) {
    let mut turn = 0;
    while !stop.load(Ordering::Relaxed) {
        turn += 1;
        let room = UnitId::Spot(rooms[turn % rooms.len()].clone());
        let Some(from) = nodes.iter().position(|n| n.hosts(&room)) else {
            // On its way between two nodes: try another.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let to = nodes[(from + 1) % nodes.len()].id().clone();
        match nodes[from].move_unit(&room, Some(to)).await {
            Ok(report) if report.end == MoveEnd::Moved => {
                moved.fetch_add(1, Ordering::Relaxed);
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Waits up to `within` until `moved` has grown by `more`, so that moves commit in the state the
/// cluster is in now; panics naming `what` otherwise.
pub async fn moves_go_on(moved: &AtomicUsize, more: usize, within: Duration, what: &str) {
    let before = moved.load(Ordering::Relaxed);
    tokio::time::timeout(within, async {
        while moved.load(Ordering::Relaxed) < before + more {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("moves stopped committing {what}"));
}
