//! A mesh link that goes silent past its idle timeout, seen from whole nodes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::mesh::PeerState;
use ferry::store::{LocationStore, MemoryStore};
use ferry::{Node, Registry, SHUTDOWN_MARGIN, ShutdownOutcome, ShutdownReason, SpotId};
use ferry_samples::ping::{self, PingMsg, PingReport};
use ferry_tests::cluster::{Cluster, wait_link_lost};
use ferry_tests::cut_socket::CutSockets;
use ferry_tests::faults::FaultyStore;
use ferry_tests::rooms::ping_registry;

/// Waits, in bounded steps, until `node` has been dialling `peer` for a while.
async fn wait_dialling(node: &Node, peer: &Node) {
    let mut seen = 0;
    for _ in 0..400 {
        let dialling = node
            .peers()
            .iter()
            .any(|p| &p.node == peer.id() && p.state == PeerState::Connecting);
        seen += usize::from(dialling);
        if seen >= 80 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never redialled {}", node.id(), peer.id());
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tells_across_a_link_silent_past_its_idle_timeout_each_run_once_in_order() {
    // n1 alone places the room on itself; n2, whose link to n1 can be cut, joins after.
    let mut cluster = Cluster::start(1, ping_registry).await;
    let n1 = cluster.node("n1").clone();
    let room = spot("room");
    n1.create_spot(ping::PING, &room).await.expect("created");
    let cut = CutSockets::default();
    let mut config = cluster.config("n2");
    if let Some(mesh) = config.mesh.as_mut() {
        mesh.sockets = Arc::new(cut.clone());
        mesh.keep_alive = Duration::from_millis(200);
        mesh.idle_timeout = Duration::from_secs(1);
    }
    let n2 = cluster.add_with(config, ping_registry()).await;
    let sender = spot("sender");
    let tell = |n: u64| {
        n2.tell(
            &room,
            PingMsg::Ping {
                from: sender.clone(),
                n,
            },
        )
        .expect("told");
    };
    (0..1000).for_each(tell);
    cut.cut(n1.mesh_addr().expect("n1 has a mesh"));
    (1000..2000).for_each(tell);
    wait_link_lost(&n2, &n1).await;
    (2000..3000).for_each(tell);
    cut.heal();

    let ask = Duration::from_secs(10);
    let mut report = PingReport::default();
    for _ in 0..500 {
        report = n2
            .request(&room, PingMsg::Report, ask)
            .await
            .expect("report");
        if report.pings.get("sender").is_some_and(|p| p.len() >= 3000) {
            break;
        }
        tokio::task::yield_now().await;
    }
    let got = report.pings.get("sender").cloned().unwrap_or_default();
    assert_eq!(got.len(), 3000, "tells that ran");
    assert_eq!(
        got,
        (0..3000).collect::<Vec<u64>>(),
        "each ran once, in order"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn shutdown_keeps_its_deadline_after_a_link_reset() {
    let mut cluster = Cluster::start(1, Registry::new).await;
    let cut = CutSockets::default();
    let mut config = cluster.config("n2");
    if let Some(mesh) = config.mesh.as_mut() {
        mesh.sockets = Arc::new(cut.clone());
        mesh.keep_alive = Duration::from_millis(200);
        mesh.idle_timeout = Duration::from_secs(1);
        // The production guess: a dial to a silent peer then lingers longest.
        mesh.initial_rtt = Duration::from_millis(100);
    }
    let n2 = cluster.add_with(config, Registry::new()).await;
    let n1 = cluster.node("n1").clone();
    let n1_addr = n1.mesh_addr().expect("n1 has a mesh");
    cut.cut(n1_addr);
    wait_link_lost(&n2, &n1).await;
    // Let redials to the silent peer pile up their retransmit backoff.
    wait_dialling(&n2, &n1).await;

    let deadline = Duration::from_secs(3);
    let started = Instant::now();
    n2.shutdown_within(deadline).await;
    let took = started.elapsed();
    assert!(
        took <= deadline + SHUTDOWN_MARGIN,
        "shutdown_within({deadline:?}) took {took:?}"
    );
    n1.shutdown().await;
}

#[tokio::test]
async fn shutdown_keeps_its_deadline_when_the_store_takes_no_writes() {
    let held = FaultyStore::new(Arc::new(MemoryStore::new()));
    let store: Arc<dyn LocationStore> = held.clone();
    let cluster = Cluster::start_on(2, store, Registry::new).await;
    let n1 = cluster.node("n1").clone();
    held.hold();

    let deadline = Duration::from_millis(500);
    let started = Instant::now();
    let outcome = n1.shutdown_within(deadline).await;
    let took = started.elapsed();
    assert!(
        took <= deadline + SHUTDOWN_MARGIN,
        "shutdown_within({deadline:?}) took {took:?}"
    );
    assert_eq!(
        outcome,
        ShutdownOutcome::ForceStopped {
            reason: ShutdownReason::TeardownFailed
        }
    );
    held.release();
    cluster.node("n2").shutdown().await;
}
