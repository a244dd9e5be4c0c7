//! Three nodes in one process on a shared store, over real QUIC: placement, routing, races, fencing.

use std::collections::BTreeMap;
use std::time::Duration;

use ferry::{MessageError, NodeState, SpotId, UnitError, UnitId};
use ferry_samples::ping::{self, PingMsg, PingReport};
use ferry_tests::cluster::{ANOTHER_PROCESS, Cluster};
use ferry_tests::rooms::ping_registry;

const T: Duration = Duration::from_secs(10);

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

async fn report(node: &ferry::Node, id: &SpotId) -> PingReport {
    node.request(id, PingMsg::Report, T).await.expect("report")
}

/// Asks `id` for its report until `done` holds (each ask is a real round trip), at most 500 times.
async fn report_until(
    node: &ferry::Node,
    id: &SpotId,
    done: impl Fn(&PingReport) -> bool,
) -> PingReport {
    for _ in 0..500 {
        let r = report(node, id).await;
        if done(&r) {
            return r;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "{id} never reached the expected state: {:?}",
        report(node, id).await
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_spreads_spots_and_every_pair_of_nodes_exchanges_tells_and_requests() {
    let cluster = Cluster::start(3, ping_registry).await;
    let ids: Vec<SpotId> = (1..=3).map(|i| spot(&format!("p{i}"))).collect();
    for id in &ids {
        cluster.nodes[0]
            .create_spot(ping::PING, id)
            .await
            .expect("created");
        // Let every node see the new load before the next placement.
        cluster.link().await;
    }
    let mut hosts = Vec::new();
    for id in &ids {
        hosts.push(report(&cluster.nodes[0], id).await.node);
    }
    hosts.sort();
    assert_eq!(hosts, vec!["n1", "n2", "n3"], "one spot per node");

    const PINGS: u64 = 200;
    for (i, id) in ids.iter().enumerate() {
        let others: Vec<SpotId> = ids.iter().filter(|o| *o != id).cloned().collect();
        // Each command is sent from a different node than the spot's own.
        let from = &cluster.nodes[(i + 1) % 3];
        from.tell(
            id,
            PingMsg::PingOthers {
                to: others,
                count: PINGS,
            },
        )
        .expect("told");
    }
    let in_order: Vec<u64> = (0..PINGS).collect();
    for id in &ids {
        let r = report_until(&cluster.nodes[2], id, |r| {
            r.pings.len() == 2 && r.pings.values().all(|v| v.len() as u64 == PINGS)
        })
        .await;
        for (from, got) in &r.pings {
            assert_eq!(got, &in_order, "{from} -> {id}: lost, doubled or reordered");
        }
    }
    for id in &ids {
        let others: Vec<SpotId> = ids.iter().filter(|o| *o != id).cloned().collect();
        cluster.nodes[0]
            .tell(id, PingMsg::AskOthers { to: others })
            .expect("told");
    }
    for id in &ids {
        let r = report_until(&cluster.nodes[1], id, |r| r.answers.len() == 2).await;
        let want: BTreeMap<String, Result<u64, String>> = ids
            .iter()
            .filter(|o| *o != id)
            .map(|o| (o.to_string(), Ok(2 * PINGS)))
            .collect();
        assert_eq!(r.answers, want, "requests between spots on different nodes");
    }
    // Every node reaches every spot by request.
    for node in &cluster.nodes {
        for id in &ids {
            assert_eq!(report(node, id).await.me, id.as_str());
        }
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_or_create_from_several_nodes_at_once_makes_one_spot() {
    let cluster = Cluster::start(3, ping_registry).await;
    let lobby = spot("lobby");
    let (a, b, c) = tokio::join!(
        cluster.nodes[0].get_or_create_spot(ping::PING, &lobby),
        cluster.nodes[1].get_or_create_spot(ping::PING, &lobby),
        cluster.nodes[2].get_or_create_spot(ping::PING, &lobby),
    );
    let created: Vec<bool> = [a, b, c].into_iter().map(|r| r.expect("ok")).collect();
    assert_eq!(created.iter().filter(|c| **c).count(), 1, "{created:?}");
    let hosts: Vec<usize> = cluster
        .nodes
        .iter()
        .map(|n| usize::from(n.hosts(&UnitId::Spot(lobby.clone()))))
        .collect();
    assert_eq!(hosts.iter().sum::<usize>(), 1, "exactly one node hosts it");
    // All three reach the same one.
    let mut seen = Vec::new();
    for node in &cluster.nodes {
        seen.push(report(node, &lobby).await.node);
    }
    seen.dedup();
    assert_eq!(seen.len(), 1);
    assert!(matches!(
        cluster.nodes[1].create_spot(ping::PING, &lobby).await,
        Err(UnitError::AlreadyExists { .. })
    ));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_are_unknown_everywhere() {
    let cluster = Cluster::start(2, ping_registry).await;
    let err = cluster.nodes[0]
        .request::<PingMsg, PingReport>(&spot("nobody"), PingMsg::Report, T)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        MessageError::UnknownId {
            id: UnitId::Spot(spot("nobody"))
        }
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_to_a_node_that_left_are_dropped_and_looked_up_again() {
    let cluster = Cluster::start(3, ping_registry).await;
    let (n1, n2, n3) = (&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]);
    let x = spot("x");
    n1.create_spot_on(n2.id(), ping::PING, &x)
        .await
        .expect("on n2");
    assert_eq!(report(n1, &x).await.node, "n2");
    assert_eq!(
        n1.cached_route(&UnitId::Spot(x.clone())),
        Some(n2.id().clone())
    );
    // The spot goes away on n2 and comes back on n3 behind n1's back.
    n2.shutdown().await;
    n3.create_spot_on(n3.id(), ping::PING, &x)
        .await
        .expect("on n3");
    // n1 learns that n2 left (this runs on its own every refresh period) and drops its routes.
    n1.refresh_membership().await.expect("membership read");
    assert_eq!(n1.cached_route(&UnitId::Spot(x.clone())), None);
    assert_eq!(report(n1, &x).await.node, "n3", "n1 still reaches it");
    assert_eq!(
        n1.cached_route(&UnitId::Spot(x.clone())),
        Some(n3.id().clone())
    );
    n1.shutdown().await;
    n3.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tells_sent_while_their_route_is_looked_up_all_arrive_in_order() {
    let cluster = Cluster::start(2, ping_registry).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    // 60,000 tells: under the mesh's default send queue of 65,536 frames.
    const ROOMS: usize = 600;
    const PINGS: u64 = 100;
    let ids: Vec<SpotId> = (0..ROOMS).map(|i| spot(&format!("r{i}"))).collect();
    for id in &ids {
        n2.create_spot_on(n2.id(), ping::PING, id)
            .await
            .expect("created");
    }
    // n1 has no route to any of them: each room's first ping starts a lookup on a worker thread,
    // later ones queue behind it from this thread, and some are sent just as the lookup ends and
    // hands its queue to the mesh.
    let from = spot("sender");
    for id in &ids {
        for n in 0..PINGS {
            let ping = PingMsg::Ping {
                from: from.clone(),
                n,
            };
            n1.tell(id, ping).expect("told");
        }
    }
    let in_order: Vec<u64> = (0..PINGS).collect();
    for id in &ids {
        let r = report_until(n1, id, |r| {
            r.pings.get("sender").map_or(0, Vec::len) as u64 >= PINGS
        })
        .await;
        assert_eq!(r.pings["sender"], in_order, "{id}: every ping, in order");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_owner_forwards_and_tells_the_sender_the_new_route() {
    let mut cluster = Cluster::start(2, ping_registry).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    let n3 = cluster.add("n3", ping_registry()).await;
    let x = spot("x");
    n1.create_spot_on(n2.id(), ping::PING, &x)
        .await
        .expect("on n2");
    assert_eq!(report(&n1, &x).await.node, "n2");
    // Move it by hand: stop on n2 (record released), recreate on n3; n2 keeps serving.
    n2.stop_unit(&UnitId::Spot(x.clone()))
        .await
        .expect("stopped");
    n3.create_spot_on(n3.id(), ping::PING, &x)
        .await
        .expect("on n3");
    // n1 still believes n2; n2 forwards to n3 and hints n1.
    assert_eq!(
        n1.cached_route(&UnitId::Spot(x.clone())),
        Some(n2.id().clone())
    );
    assert_eq!(report(&n1, &x).await.node, "n3");
    let n3_id = n3.id().clone();
    for _ in 0..500 {
        if n1.cached_route(&UnitId::Spot(x.clone())) == Some(n3_id.clone()) {
            break;
        }
        let _ = report(&n1, &x).await;
    }
    assert_eq!(n1.cached_route(&UnitId::Spot(x.clone())), Some(n3_id));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_loses_its_lease_stops_running_turns() {
    let mut cluster = Cluster::start(1, ping_registry).await;
    let mut config = cluster.config("n2");
    config.lease_ttl = Duration::from_millis(300);
    let n2 = cluster.add_with(config, ping_registry()).await;
    let x = spot("x");
    n2.create_spot_on(n2.id(), ping::PING, &x)
        .await
        .expect("created");
    let mut state = n2.watch_state();
    // Someone else takes n2's lease (a restarted n2, say): the old one is superseded.
    cluster
        .store
        .acquire_lease(n2.id(), ANOTHER_PROCESS, Duration::from_secs(30))
        .await
        .expect("lease taken");
    state
        .wait_for(|s| *s == NodeState::Error)
        .await
        .expect("state followed");
    let err = n2
        .request::<PingMsg, PingReport>(&x, PingMsg::Report, T)
        .await
        .unwrap_err();
    assert!(matches!(err, MessageError::NotServing { .. }), "{err}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_lease_another_process_took_writes_no_record_before_it_notices() {
    let mut cluster = Cluster::start(1, ping_registry).await;
    let mut config = cluster.config("n2");
    // Renewed every 20 s: n2 cannot notice the lease was taken before the creations below.
    config.lease_ttl = Duration::from_secs(60);
    let n2 = cluster.add_with(config, ping_registry()).await;
    cluster
        .store
        .acquire_lease(n2.id(), ANOTHER_PROCESS, Duration::from_secs(60))
        .await
        .expect("lease taken");
    assert_eq!(n2.state(), NodeState::Serving, "n2 has not noticed yet");
    for name in ["a", "b"] {
        let room = spot(name);
        let err = n2
            .create_spot_on(n2.id(), ping::PING, &room)
            .await
            .expect_err("a superseded process records no unit");
        assert!(matches!(err, UnitError::StoreUnavailable { .. }), "{err}");
        let key = ferry::cluster::authority::unit_key(&UnitId::Spot(room.clone()));
        let record = cluster.store.get(&key).await.expect("read");
        assert!(record.is_none(), "{room} was recorded: {record:?}");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_by_its_seed_list_and_reports_its_peers() {
    let cluster = Cluster::start(1, ping_registry).await;
    let n1 = &cluster.nodes[0];
    // n2 shares no store with n1: only its seed list can lead it there.
    let own_store: std::sync::Arc<dyn ferry::store::LocationStore> =
        std::sync::Arc::new(ferry::store::MemoryStore::new());
    let mut config = cluster.config("n2").store(own_store);
    if let Some(mesh) = config.mesh.as_mut() {
        mesh.seeds = vec![(n1.id().clone(), n1.mesh_addr().expect("n1 listens"))];
    }
    let n2 = ferry::Node::start(config, ping_registry())
        .await
        .expect("n2 starts");
    n2.wait_peer_ready(n1.id())
        .await
        .expect("linked through the seed");
    let peers = n2.peers();
    assert_eq!(peers.len(), 1);
    assert_eq!(peers[0].node, *n1.id());
    assert_eq!(peers[0].state, ferry::mesh::PeerState::Ready);
    n2.shutdown().await;
    cluster.shutdown().await;
}
