//! Ferry nodes as turmoil hosts: each node runs on its own simulated host, its mesh on turmoil's
//! network, while the test drives it from a turmoil client.
//!
//! A node's tasks must run on its own host, or their traffic would leave from the wrong address
//! and survive the host's crash; so the test hands work to a node with [`SimNode::run`], which
//! runs it there.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use ferry::mesh::ClusterCa;
use ferry::store::LocationStore;
use ferry::{Node, NodeConfig, Registry};
use tokio::sync::{mpsc, oneshot};

use crate::cluster::test_config;
use crate::sim_socket::TurmoilSockets;

type Job = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// A node running on a turmoil host, and the way to run work on that host.
#[derive(Clone)]
pub struct SimNode {
    /// The node; call only what neither spawns nor waits on the mesh from here, use `run` else.
    pub node: Node,
    jobs: mpsc::UnboundedSender<Job>,
}

impl SimNode {
    /// Runs `work` on the node's host and waits for its result.
    pub async fn run<T, Fut>(&self, work: impl FnOnce(Node) -> Fut + Send + 'static) -> T
    where
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let node = self.node.clone();
        let job: Job = Box::new(move || {
            Box::pin(async move {
                let _ = tx.send(work(node).await);
            })
        });
        self.jobs.send(job).expect("the node's host is running");
        rx.await.expect("the node's host ran the work to its end")
    }
}

/// Adds a turmoil host named `name` that starts a node of that id on `store`, with a mesh
/// certificate from `ca`, then sends its [`SimNode`] on `started` and runs the work it is given
/// until every `SimNode` of it is dropped.
pub fn add_node(
    sim: &mut turmoil::Sim<'_>,
    name: &'static str,
    store: Arc<dyn LocationStore>,
    ca: Arc<ClusterCa>,
    registry: fn() -> Registry,
    tune: fn(&mut NodeConfig),
    started: mpsc::UnboundedSender<SimNode>,
) {
    sim.host(name, move || {
        let (store, ca, started) = (store.clone(), ca.clone(), started.clone());
        async move {
            let mut config = test_config(name, store, &ca);
            if let Some(mesh) = config.mesh.as_mut() {
                let ip = turmoil::lookup(name);
                mesh.listen = SocketAddr::new(ip, 0);
                mesh.sockets = Arc::new(TurmoilSockets::new(ip));
            }
            tune(&mut config);
            let node = Node::start(config, registry()).await?;
            let (jobs, mut work) = mpsc::unbounded_channel::<Job>();
            let _ = started.send(SimNode { node, jobs });
            while let Some(job) = work.recv().await {
                tokio::task::spawn_local(job());
            }
            Ok(())
        }
    });
}
