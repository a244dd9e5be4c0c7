//! Three Ferry nodes in one process on a shared in-process store, over real QUIC on loopback:
//! node A asks two counter rooms on node B, one that keeps no standby and one that keeps a
//! confirmed standby (on A or C, as placement chooses), so that what confirmed mode adds to a
//! request's reply is measured beside the same request without it.

use std::sync::Arc;
use std::time::Duration;

use ferry::mesh::ClusterCa;
use ferry::store::{LocationStore, MemoryStore};
use ferry::{Behavior, Ctx, Node, Registration, Registry, RelocationPolicy, SpotId, StandbyPolicy};
use serde::{Deserialize, Serialize};

use crate::cross::config;

/// How long a bench request may take before the bench fails.
const T: Duration = Duration::from_secs(10);

/// Counts what it is told and answers its count; its count is its state.
#[derive(Default, Serialize, Deserialize)]
struct Count(u64);

impl Behavior for Count {
    type Msg = u64;
    type Reply = u64;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, n: u64) -> u64 {
        self.0 += n;
        self.0
    }
}

/// The same room without a standby, and with a confirmed one.
fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("plain", |_| Count::default()).policy(RelocationPolicy::serde()),
    );
    reg.register(
        Registration::spot("confirmed", |_| Count::default())
            .policy(RelocationPolicy::serde())
            .standby(StandbyPolicy::Confirmed),
    );
    reg
}

/// Nodes A, B and C, and the two rooms on B.
pub struct Trio {
    nodes: Vec<Node>,
    /// The room without a standby.
    pub plain: SpotId,
    /// The room with a confirmed standby.
    pub confirmed: SpotId,
}

impl Trio {
    /// Starts the nodes, links them, creates both rooms on B, and waits until the confirmed
    /// room's standby is named (its first reply is released then).
    pub async fn start() -> Trio {
        let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
        let ca = ClusterCa::generate().expect("a cluster CA");
        let mut nodes = Vec::new();
        for id in ["a", "b", "c"] {
            let node = Node::start(config(id, store.clone(), &ca), registry())
                .await
                .expect("a node starts");
            nodes.push(node);
        }
        for _ in 0..2 {
            for node in &nodes {
                node.refresh_membership().await.expect("membership read");
            }
        }
        for a in &nodes {
            for b in &nodes {
                if a.id() != b.id() {
                    a.wait_peer_ready(b.id()).await.expect("linked");
                }
            }
        }
        let plain = SpotId::new("plain-0").expect("a valid spot id");
        let confirmed = SpotId::new("confirmed-0").expect("a valid spot id");
        let b = nodes[1].id().clone();
        nodes[0]
            .create_spot_on(&b, "plain", &plain)
            .await
            .expect("the plain room is created on B");
        nodes[0]
            .create_spot_on(&b, "confirmed", &confirmed)
            .await
            .expect("the confirmed room is created on B");
        let trio = Trio {
            nodes,
            plain,
            confirmed,
        };
        // The first messages look the routes up, and the first confirmed reply waits for the
        // standby to be named: benches measure what follows.
        trio.request(&trio.plain.clone()).await;
        trio.request(&trio.confirmed.clone()).await;
        trio
    }

    /// Asks `room` from A to add 1, and returns its count.
    pub async fn request(&self, room: &SpotId) -> u64 {
        self.nodes[0]
            .request(room, 1u64, T)
            .await
            .expect("the room answers")
    }

    /// Shuts the nodes down.
    pub async fn shutdown(self) {
        for node in &self.nodes {
            node.shutdown().await;
        }
    }
}
