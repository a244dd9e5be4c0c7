//! A node that dies with what it was sent: every request handed to it ends with a typed error, and
//! every tell it never acknowledged is counted and reported to its sender, one by one.

use std::sync::Arc;
use std::time::Duration;

use ferry::{
    Behavior, Ctx, MessageError, Node, Registration, Registry, RelocationPolicy, SpotId, UnitId,
};
use ferry_tests::cluster::Cluster;
use ferry_tests::cut_socket::CutSockets;
use ferry_tests::faults::TurnGate;
use serde::{Deserialize, Serialize};

/// A room that counts the numbers it is told, and can be held in a turn.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Counter {
    numbers: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Msg {
    Number(u32),
    Hold(String),
    Get,
}

impl Behavior for Counter {
    type Msg = Msg;
    type Reply = Vec<u32>;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, msg: Msg) -> Vec<u32> {
        match msg {
            Msg::Number(n) => self.numbers.push(n),
            Msg::Hold(gate) => TurnGate::pass(&gate),
            Msg::Get => {}
        }
        self.numbers.clone()
    }
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("counter", |_| Counter::default()).policy(RelocationPolicy::serde()),
    );
    reg
}

/// Waits, in bounded steps, until `node` has nothing unacknowledged for `peer`.
async fn wait_acknowledged(node: &Node, peer: &Node) {
    for _ in 0..400 {
        let peers = node.peers();
        let info = peers.iter().find(|p| &p.node == peer.id());
        if info.is_some_and(|p| p.unacked == 0 && p.queued == 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{} never acknowledged what it was sent", peer.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_peer_that_dies_ends_each_request_it_had_and_each_lost_tell_is_reported() {
    let mut cluster = Cluster::start(0, registry).await;
    let cut = CutSockets::default();
    let mut config = cluster.config("n1");
    if let Some(mesh) = config.mesh.as_mut() {
        mesh.sockets = Arc::new(cut.clone());
    }
    let sender = cluster.add_with(config, registry()).await;
    let mut config = cluster.config("n2");
    config.lease_ttl = Duration::from_secs(1);
    let doomed = cluster.add_with(config, registry()).await;
    let room = SpotId::new("counter").expect("id");
    doomed
        .create_spot_on(doomed.id(), "counter", &room)
        .await
        .expect("created");
    let _: Vec<u32> = sender
        .request(&room, Msg::Get, Duration::from_secs(10))
        .await
        .expect("room answers");
    let mut reports = sender.undelivered_events();

    // Three requests the doomed node has (acknowledged) but cannot answer: it is held in a turn.
    let gate = TurnGate::new("lost-peers");
    sender
        .tell(&room, Msg::Hold("lost-peers".into()))
        .expect("told");
    gate.wait_entered().await;
    let ask = |sender: &Node| {
        let (sender, room) = (sender.clone(), room.clone());
        tokio::spawn(async move {
            sender
                .request::<Msg, Vec<u32>>(&room, Msg::Get, Duration::from_secs(60))
                .await
        })
    };
    let mut asked: Vec<_> = (0..3).map(|_| ask(&sender)).collect();
    wait_acknowledged(&sender, &doomed).await;

    // Then the link goes silent: 500 tells and two requests that the doomed node never sees.
    cut.cut(doomed.mesh_addr().expect("mesh"));
    for n in 0..500 {
        sender.tell(&room, Msg::Number(n)).expect("accepted");
    }
    asked.extend((0..2).map(|_| ask(&sender)));
    gate.open();
    doomed.abort().await;

    // Its lease lapses; the sender's membership declares it gone.
    for request in asked {
        let ended = request.await.expect("request task");
        assert!(
            matches!(&ended, Err(MessageError::PeerGone { node, id })
                if node == doomed.id() && *id == UnitId::Spot(room.clone())),
            "a request the dead node had ends as such: {ended:?}"
        );
    }
    let mut reported = vec![0u32; 500];
    let mut seen = 0;
    while seen < 500 {
        let report = tokio::time::timeout(Duration::from_secs(20), reports.recv())
            .await
            .expect("each lost tell is reported")
            .expect("no report missed");
        assert_eq!(report.peer, *doomed.id());
        assert_eq!(report.to, UnitId::Spot(room.clone()));
        match report.message::<Msg>() {
            Ok(Msg::Number(n)) => reported[n as usize] += 1,
            other => panic!("only the numbers were lost: {other:?}"),
        }
        seen += 1;
    }
    assert!(
        reported.iter().all(|&times| times == 1),
        "each tell reported exactly once"
    );
    assert_eq!(sender.tells_lost(), 500);
    cut.heal();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seed_that_dies_is_declared_gone_like_any_peer_and_its_rooms_are_reached_where_rebuilt() {
    let mut cluster = Cluster::start(0, registry).await;
    let mut config = cluster.config("n2");
    config.lease_ttl = Duration::from_secs(1);
    let doomed = cluster.add_with(config, registry()).await;
    let cut = CutSockets::default();
    let mut config = cluster.config("n1");
    if let Some(mesh) = config.mesh.as_mut() {
        mesh.sockets = Arc::new(cut.clone());
        // Configured, as operators list their nodes: not only learned from the store.
        mesh.seeds = vec![(doomed.id().clone(), doomed.mesh_addr().expect("mesh"))];
    }
    let sender = cluster.add_with(config, registry()).await;
    let room = SpotId::new("counter").expect("id");
    doomed
        .create_spot_on(doomed.id(), "counter", &room)
        .await
        .expect("created");
    sender.tell(&room, Msg::Number(7)).expect("told");
    let seen: Vec<u32> = sender
        .request(&room, Msg::Get, Duration::from_secs(10))
        .await
        .expect("room answers");
    assert_eq!(seen, vec![7]);

    // A request the seed has acknowledged but cannot answer, then the seed dies.
    let gate = TurnGate::new("lost-seed");
    sender
        .tell(&room, Msg::Hold("lost-seed".into()))
        .expect("told");
    gate.wait_entered().await;
    let asked = {
        let (sender, room) = (sender.clone(), room.clone());
        tokio::spawn(async move {
            sender
                .request::<Msg, Vec<u32>>(&room, Msg::Get, Duration::from_secs(60))
                .await
        })
    };
    wait_acknowledged(&sender, &doomed).await;
    // As a process killed: nothing more comes from it.
    cut.cut(doomed.mesh_addr().expect("mesh"));
    gate.open();
    doomed.abort().await;
    let ended = asked.await.expect("request task");
    assert!(
        matches!(&ended, Err(MessageError::PeerGone { node, .. }) if node == doomed.id()),
        "a request the dead seed had ends as such: {ended:?}"
    );

    // Its room is rebuilt fresh on the one node left, and messages find it there.
    let mut rebuilt = None;
    for _ in 0..100 {
        match sender
            .request::<Msg, Vec<u32>>(&room, Msg::Get, Duration::from_millis(500))
            .await
        {
            Ok(numbers) => {
                rebuilt = Some(numbers);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert_eq!(rebuilt, Some(Vec::new()), "the rebuilt room answers, fresh");
    cut.heal();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tells_to_a_room_whose_node_died_and_is_not_rebuilt_yet_are_each_reported_lost() {
    let mut cluster = Cluster::start(0, registry).await;
    let mut config = cluster.config("n2");
    config.lease_ttl = Duration::from_secs(1);
    let doomed = cluster.add_with(config, registry()).await;
    // The sender takes no unit: nothing can rebuild the room while the test looks.
    let mut config = cluster.config("n1");
    config.capacity = 0;
    let sender = cluster.add_with(config, registry()).await;
    let room = SpotId::new("counter").expect("id");
    doomed
        .create_spot_on(doomed.id(), "counter", &room)
        .await
        .expect("created");
    let seen: Vec<u32> = sender
        .request(&room, Msg::Get, Duration::from_secs(10))
        .await
        .expect("room answers");
    assert!(seen.is_empty());
    doomed.abort().await;
    // Once the sender declared n2 gone, its record is no route: a request ends at once.
    let mut reports = sender.undelivered_events();
    let ended = loop {
        sender.refresh_membership().await.expect("membership read");
        if sender.peers().iter().any(|p| p.node == *doomed.id()) {
            tokio::task::yield_now().await;
            continue;
        }
        break sender
            .request::<Msg, Vec<u32>>(&room, Msg::Get, Duration::from_secs(10))
            .await;
    };
    assert!(
        matches!(&ended, Err(MessageError::OwnerLeft { node, .. }) if node == doomed.id()),
        "{ended:?}"
    );
    // Tells are accepted, then each is reported lost, once, with its message.
    for n in 0..3 {
        sender.tell(&room, Msg::Number(n)).expect("told");
    }
    let mut lost = Vec::new();
    while lost.len() < 3 {
        let report = tokio::time::timeout(Duration::from_secs(10), reports.recv())
            .await
            .expect("a report")
            .expect("reports");
        assert_eq!(report.peer, *doomed.id());
        match report.message::<Msg>().expect("decodes") {
            Msg::Number(n) => lost.push(n),
            other => panic!("only tells are reported: {other:?}"),
        }
    }
    assert_eq!(lost, [0, 1, 2]);
    assert_eq!(sender.tells_lost(), 3);
    cluster.shutdown().await;
}
