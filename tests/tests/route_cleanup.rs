//! Routes a node kept for a unit that moved through it do not outlive the unit: after a room
//! moved back and forth, stopped, and its id was created again elsewhere, every node reaches the
//! new room at once.

use std::time::Duration;

use ferry::relocation::protocol::MoveEnd;
use ferry::{Behavior, Ctx, Registration, Registry, RelocationPolicy, SpotId, UnitId};
use ferry_tests::cluster::Cluster;
use serde::{Deserialize, Serialize};

/// Well inside the route fence's 60 s: a message that bounces, or waits behind a fence that goes
/// round in a circle, does not make it.
const T: Duration = Duration::from_secs(5);

/// A room that says which incarnation it is and counts what it ran.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Room {
    incarnation: u32,
    ran: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    Born(u32),
    Run(u32),
    Get,
}

impl Behavior for Room {
    type Msg = Cmd;
    type Reply = Room;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, msg: Cmd) -> Room {
        match msg {
            Cmd::Born(n) => self.incarnation = n,
            Cmd::Run(n) => self.ran.push(n),
            Cmd::Get => {}
        }
        self.clone()
    }
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(Registration::spot("room", |_| Room::default()).policy(RelocationPolicy::serde()));
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_room_stopped_after_moves_and_created_again_elsewhere_is_reached_from_every_node() {
    let cluster = Cluster::start(3, registry).await;
    let (n1, n2, n3) = (
        cluster.nodes[0].clone(),
        cluster.nodes[1].clone(),
        cluster.nodes[2].clone(),
    );
    let room = SpotId::new("again").expect("id");
    let id = UnitId::Spot(room.clone());
    n1.create_spot_on(n1.id(), "room", &room)
        .await
        .expect("room");
    for (from, to) in [(&n1, &n2), (&n2, &n1)] {
        let report = from
            .move_unit(&id, Some(to.id().clone()))
            .await
            .expect("move starts");
        assert_eq!(report.end, MoveEnd::Moved);
    }
    // Every node has talked to it where it ran.
    for node in [&n1, &n2, &n3] {
        let _: Room = node.request(&room, Cmd::Get, T).await.expect("answers");
    }
    n1.stop_unit(&id).await.expect("stops");
    n3.create_spot_on(n3.id(), "room", &room)
        .await
        .expect("created again");
    let _: Room = n3.request(&room, Cmd::Born(2), T).await.expect("born");

    // Two requests from each of the nodes the room moved between, each answered by the new room.
    let mut sent = 0;
    for node in [&n1, &n2, &n1, &n2] {
        sent += 1;
        let seen: Room = node
            .request(&room, Cmd::Run(sent), T)
            .await
            .unwrap_or_else(|e| panic!("request {sent} from {} failed: {e}", node.id()));
        assert_eq!(seen.incarnation, 2, "answered by the new room");
    }
    let seen: Room = n3.request(&room, Cmd::Get, T).await.expect("answers");
    assert_eq!(seen.ran, vec![1, 2, 3, 4], "each ran once, in order");
    cluster.shutdown().await;
}
