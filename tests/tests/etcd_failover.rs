//! A three-member etcd cluster loses a member, then its leader, while rooms move under client
//! load. The store stays linearizable through both (two members keep a quorum), so moves go on
//! committing: every acknowledged input ran exactly once, in order (a room that ran on two nodes
//! would have run some twice or lost some), each room ends on exactly the node its record names,
//! and no node stops.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ferry::store::{EtcdStore, EtcdStoreConfig, LocationStore};
use ferry::{Node, NodeState, SpotId, UnitId};
use ferry_tests::cluster::{Cluster, move_rooms_round, moves_go_on};
use ferry_tests::etcd_server::EtcdCluster;
use ferry_tests::invariants::{assert_exactly_once_in_order, assert_runs_where_recorded};
use ferry_tests::rooms;

const ROOMS: usize = 6;

/// Sends numbered inputs to `room` from `node`, one at a time, until `stop`; returns those
/// acknowledged.
async fn client(node: Node, room: SpotId, stop: Arc<AtomicBool>) -> Vec<u64> {
    let mut acked = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let sent = node
            .request::<Option<u64>, Vec<u64>>(room.clone(), Some(n), Duration::from_secs(5))
            .await;
        if sent.is_ok() {
            acked.push(n);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_go_on_while_the_etcd_cluster_loses_a_member_and_then_its_leader() {
    let Some(mut etcd) = EtcdCluster::start_or_skip(3).await else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(150), failover(&mut etcd))
        .await
        .expect("the failover test ends within 150 s");
}

async fn failover(etcd: &mut EtcdCluster) {
    let store = EtcdStore::connect(&etcd.endpoints(), EtcdStoreConfig::new("failover"))
        .await
        .expect("etcd store");
    let store: Arc<dyn LocationStore> = Arc::new(store);
    let cluster = Cluster::start_on(3, store.clone(), rooms::registry).await;
    let nodes = cluster.nodes.clone();
    let rooms: Vec<SpotId> = (0..ROOMS)
        .map(|i| SpotId::new(format!("room-{i}")).expect("id"))
        .collect();
    for (i, room) in rooms.iter().enumerate() {
        nodes[0]
            .create_spot_on(nodes[i % nodes.len()].id(), "room", room)
            .await
            .expect("room created");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = rooms
        .iter()
        .enumerate()
        .map(|(i, room)| {
            let from = nodes[(i + 1) % nodes.len()].clone();
            tokio::spawn(client(from, room.clone(), stop.clone()))
        })
        .collect();
    let moving = tokio::spawn(move_rooms_round(
        nodes.clone(),
        rooms.clone(),
        stop.clone(),
        moved.clone(),
    ));
    moves_go_on(
        &moved,
        20,
        Duration::from_secs(30),
        "before any member was lost",
    )
    .await;

    // A member that does not lead: the first endpoint, the one the store talks to, if it can be.
    let leader = etcd.leader().await.expect("a leader");
    let follower = if leader == 0 { 1 } else { 0 };
    etcd.kill(follower);
    moves_go_on(
        &moved,
        20,
        Duration::from_secs(30),
        "after a follower was lost",
    )
    .await;
    etcd.restart(follower).await;

    // The leader: the two others elect a new one.
    let leader = etcd.leader().await.expect("a leader");
    etcd.kill(leader);
    moves_go_on(
        &moved,
        20,
        Duration::from_secs(30),
        "after the leader was lost",
    )
    .await;

    stop.store(true, Ordering::Relaxed);
    moving.await.expect("mover");
    let mut acked = Vec::new();
    for client in clients {
        acked.push(client.await.expect("client"));
    }

    for node in &nodes {
        assert_eq!(node.state(), NodeState::Serving, "{} stopped", node.id());
    }
    for (room, acked) in rooms.iter().zip(&acked) {
        let id = UnitId::Spot(room.clone());
        assert_runs_where_recorded(&nodes, store.as_ref(), &id).await;
        let ran = nodes[0]
            .request::<Option<u64>, Vec<u64>>(room.clone(), None, Duration::from_secs(5))
            .await
            .expect("room answers");
        assert_exactly_once_in_order(room, acked, &ran);
    }
    cluster.shutdown().await;
}
