//! A store outage ends no game. With the store killed for 20 s (twice the lease TTL) and started
//! again with its data, under client load: every room keeps running its turns on the node that
//! had it, no node stops, no room is rebuilt (so none ran on two nodes), and every acknowledged
//! input ran exactly once, in order. Moves and creations asked during the outage are refused with
//! `StoreUnavailable`, and work again once the store is back. The store is a persistent
//! redis-server in one run and a one-member etcd in the other.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferry::store::{EtcdStore, EtcdStoreConfig, LocationStore, RedisStore, RedisStoreConfig};
use ferry::{
    MoveError, Node, NodeState, Registration, Registry, RelocationPolicy, SpotId, UnitError, UnitId,
};
use ferry_tests::cluster::Cluster;
use ferry_tests::etcd_server::EtcdServer;
use ferry_tests::invariants::assert_exactly_once_in_order;
use ferry_tests::redis_server::RedisServer;
use ferry_tests::rooms::Room;
use std::sync::Mutex as StdMutex;
use tokio::time::Instant;

const ROOMS: usize = 6;
const OUTAGE: Duration = Duration::from_secs(20);

/// How many times each room was built: once at its creation, again for each rebuild.
type Builds = Arc<StdMutex<BTreeMap<SpotId, usize>>>;

fn registry(builds: &Builds) -> Registry {
    let builds = builds.clone();
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", move |id: &SpotId| {
            *builds
                .lock()
                .expect("builds")
                .entry(id.clone())
                .or_default() += 1;
            Room::default()
        })
        .policy(RelocationPolicy::serde()),
    );
    reg
}

/// What one client saw: the inputs acknowledged, and when each was.
#[derive(Default)]
struct Client {
    acked: Vec<u64>,
    acked_at: Vec<Instant>,
}

/// Sends numbered inputs to `room` from `node`, one at a time, until `stop`.
async fn client(node: Node, room: SpotId, stop: Arc<AtomicBool>) -> Client {
    let mut seen = Client::default();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let sent = node
            .request::<Option<u64>, Vec<u64>>(room.clone(), Some(n), Duration::from_secs(5))
            .await;
        if sent.is_ok() {
            seen.acked.push(n);
            seen.acked_at.push(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

/// Panics if any room runs on two nodes now.
fn assert_one_owner(nodes: &[Node], rooms: &[SpotId]) {
    for room in rooms {
        let id = UnitId::Spot(room.clone());
        let hosts = nodes.iter().filter(|n| n.hosts(&id)).count();
        assert!(hosts <= 1, "{room} runs on {hosts} nodes");
    }
}

/// The store's server, which the test stops and starts again.
enum Server {
    Redis(RedisServer),
    Etcd(EtcdServer),
}

impl Server {
    async fn store(&self) -> Arc<dyn LocationStore> {
        match self {
            Server::Redis(server) => Arc::new(
                RedisStore::connect(&server.url(), RedisStoreConfig::new("outage"))
                    .await
                    .expect("redis store"),
            ),
            Server::Etcd(server) => Arc::new(
                EtcdStore::connect(&[server.endpoint()], EtcdStoreConfig::new("outage"))
                    .await
                    .expect("etcd store"),
            ),
        }
    }

    fn stop(&mut self) {
        match self {
            Server::Redis(server) => server.stop(),
            Server::Etcd(server) => server.stop(),
        }
    }

    /// Starts it again with what it had acknowledged.
    async fn start_again(&mut self) {
        match self {
            Server::Redis(server) => server
                .restart_keeping_data()
                .await
                .expect("redis-server starts again with its data"),
            Server::Etcd(server) => server.restart().await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_run_on_through_a_20_s_redis_outage_and_no_node_stops() {
    let Some(server) = RedisServer::start_persistent_or_skip().await else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(150), outage(Server::Redis(server)))
        .await
        .expect("the outage test ends within 150 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_run_on_through_a_20_s_etcd_outage_and_no_node_stops() {
    let Some(server) = EtcdServer::start_or_skip().await else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(150), outage(Server::Etcd(server)))
        .await
        .expect("the outage test ends within 150 s");
}

async fn outage(mut server: Server) {
    let store = server.store().await;
    let builds = Builds::default();
    let cluster = Cluster::start_on(3, store, || registry(&builds)).await;
    let nodes = cluster.nodes.clone();
    let rooms: Vec<SpotId> = (0..ROOMS)
        .map(|i| SpotId::new(format!("room-{i}")).expect("id"))
        .collect();
    for (i, room) in rooms.iter().enumerate() {
        let on = &nodes[i % nodes.len()];
        cluster.nodes[0]
            .create_spot_on(on.id(), "room", room)
            .await
            .expect("room created");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = rooms
        .iter()
        .enumerate()
        .map(|(i, room)| {
            // Each room is played from another node than its own: its inputs cross the mesh.
            let from = nodes[(i + 1) % nodes.len()].clone();
            tokio::spawn(client(from, room.clone(), stop.clone()))
        })
        .collect();
    // No move runs until the store is back, so until then a room is in one directory only.
    let watching = Arc::new(AtomicBool::new(true));
    let watch = {
        let (nodes, rooms, watching) = (nodes.clone(), rooms.clone(), watching.clone());
        tokio::spawn(async move {
            while watching.load(Ordering::Relaxed) {
                assert_one_owner(&nodes, &rooms);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    server.stop();
    let down = Instant::now();
    // Past the lease TTL (10 s) no lease is confirmed any more: moves and creations are refused.
    tokio::time::sleep_until(down + Duration::from_secs(13)).await;
    let here = nodes[0].units();
    let moved = nodes[0]
        .move_unit(&here[0], Some(nodes[1].id().clone()))
        .await;
    assert!(
        matches!(moved, Err(MoveError::StoreUnavailable { .. })),
        "a move during the outage is refused: {moved:?}"
    );
    let created = nodes[0]
        .create_spot("room", &SpotId::new("late").expect("id"))
        .await;
    assert!(
        matches!(created, Err(UnitError::StoreUnavailable { .. })),
        "a creation during the outage is refused: {created:?}"
    );
    tokio::time::sleep_until(down + OUTAGE).await;
    server.start_again().await;
    let up = Instant::now();
    watching.store(false, Ordering::Relaxed);
    watch.await.expect("one owner throughout the outage");

    // Once the store is back, every node holds a lease again and moves work: one is made.
    let deadline = up + Duration::from_secs(30);
    let moved = loop {
        let here = nodes[0].units();
        match nodes[0]
            .move_unit(&here[0], Some(nodes[1].id().clone()))
            .await
        {
            Ok(report) if report.end == ferry::relocation::protocol::MoveEnd::Moved => {
                break report.unit;
            }
            other => {
                assert!(
                    Instant::now() < deadline,
                    "no move after the outage: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut seen = Vec::new();
    for client in clients {
        seen.push(client.await.expect("client"));
    }

    for node in &nodes {
        assert_eq!(node.state(), NodeState::Serving, "{} stopped", node.id());
    }
    // Built once each at creation, and the moved room once more on its target: none rebuilt.
    let expected: BTreeMap<SpotId, usize> = rooms
        .iter()
        .map(|r| (r.clone(), 1 + usize::from(UnitId::Spot(r.clone()) == moved)))
        .collect();
    assert_eq!(
        *builds.lock().expect("builds"),
        expected,
        "a room was rebuilt: it ended and ran again"
    );
    for (room, client) in rooms.iter().zip(&seen) {
        // Inputs acknowledged while no lease could be confirmed: the room ran its turns then.
        let lapsed = client
            .acked_at
            .iter()
            .filter(|at| **at > down + Duration::from_secs(11) && **at < up)
            .count();
        assert!(
            lapsed > 0,
            "{room} ran no input between the end of the lease and the store's return"
        );
        let ran = nodes[0]
            .request::<Option<u64>, Vec<u64>>(room.clone(), None, Duration::from_secs(5))
            .await
            .expect("room answers");
        assert_exactly_once_in_order(room, &client.acked, &ran);
    }
    assert_one_owner(&nodes, &rooms);
    cluster.shutdown().await;
}
