//! Drains and shutdowns of a node that a room is moving into: the room is never reported drained
//! away from a node it then lands on, and never left recorded on a stopped node; and a drain into
//! a node that still holds a copy staged by an earlier failed move of the room.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferry::cluster::authority::{UnitRecord, unit_key};
use ferry::relocation::protocol::MoveEnd;
use ferry::{
    Behavior, Ctx, MessageError, Node, NodeState, Registration, Registry, RelocateOutcome,
    RelocationPolicy, SpotId, UnitId,
};
use ferry_tests::cluster::{Cluster, drain_in_background, move_in_background};
use ferry_tests::cut_socket::CutSockets;
use ferry_tests::faults::{FaultyStore, Gate, Hooked};
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(10);

/// A move started in the background.
type MoveTask = tokio::task::JoinHandle<Result<ferry::MoveReport, ferry::MoveError>>;

/// How many times `on_closing` ran in a room named `closes`, over all its copies (the tests of
/// this file run at once, each with rooms of its own names).
static CLOSINGS: AtomicUsize = AtomicUsize::new(0);

/// A room that keeps a number.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Counter {
    id: String,
    value: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    Set(u64),
    Get,
}

impl Behavior for Counter {
    type Msg = Cmd;
    type Reply = u64;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, msg: Cmd) -> u64 {
        if let Cmd::Set(v) = msg {
            self.value = v;
        }
        self.value
    }

    fn on_closing(&mut self, _ctx: &mut Ctx<'_>) {
        if self.id == "closes" {
            CLOSINGS.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn registry_with(adapter: Hooked) -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", |id: &SpotId| Counter {
            id: id.to_string(),
            value: 0,
        })
        .policy(RelocationPolicy::PreserveState(Arc::new(adapter))),
    );
    reg
}

fn registry() -> Registry {
    registry_with(Hooked::default())
}

fn spot(name: &str) -> SpotId {
    SpotId::new(name).expect("id")
}

async fn value(node: &Node, room: &SpotId) -> Result<u64, MessageError> {
    node.request(room, Cmd::Get, T).await
}

/// Waits until the node has left `Serving` (a drain or a shutdown began).
async fn wait_not_serving(node: &Node) {
    let mut states = node.watch_state();
    tokio::time::timeout(T, states.wait_for(|s| *s != NodeState::Serving))
        .await
        .expect("state reached in time")
        .expect("node alive");
}

/// The owner the store records for the room, if any.
async fn recorded_owner(cluster: &Cluster, room: &SpotId) -> Option<String> {
    let key = unit_key(&UnitId::Spot(room.clone()));
    let current = cluster.store.get(&key).await.expect("store answers")?;
    let record = UnitRecord::decode(&key, &current.value).expect("a record");
    Some(record.owner.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_that_starts_while_a_room_is_restored_on_its_node_gives_the_room_back() {
    let room = spot("r1");
    // n2 restores the room only when the test opens the gate: the move is staged there.
    let mut cluster = Cluster::start(1, registry).await;
    let (hooked, gate) = Gate::new(false);
    cluster.add("n2", registry_with(hooked)).await;
    cluster.add("n3", registry()).await;
    let (n1, n2, n3) = (
        cluster.nodes[0].clone(),
        cluster.nodes[1].clone(),
        cluster.nodes[2].clone(),
    );
    n1.create_spot_on(n1.id(), "room", &room)
        .await
        .expect("room");
    let _: u64 = n1.request(&room, Cmd::Set(42), T).await.expect("set");
    let mover = move_in_background(&n1, UnitId::Spot(room.clone()), n2.id());
    gate.wait_started().await;

    let drain = drain_in_background(&n2, T);
    wait_not_serving(&n2).await;
    gate.open();
    let outcome = drain.await.expect("drain task");
    let report = mover.await.expect("mover").expect("move started");

    assert_eq!(outcome, RelocateOutcome::Relocated { moved: 0 });
    assert_ne!(report.end, MoveEnd::Moved, "a draining node takes no room");
    assert!(
        n1.hosts(&UnitId::Spot(room.clone())),
        "the room runs on its source"
    );
    assert!(!n2.hosts(&UnitId::Spot(room.clone())));
    assert!(n2.watch_status().borrow().safe_to_shutdown);
    n2.shutdown().await;
    assert_eq!(
        value(&n3, &room).await,
        Ok(42),
        "stopping the drained node ended nothing"
    );
    assert_eq!(recorded_owner(&cluster, &room).await.as_deref(), Some("n1"));
    cluster.shutdown().await;
}

/// A cluster of n1 and n2 (and n3 with `third`) where n1 runs `room`, set to 42, and moves it to
/// n2, whose commit of it the store holds: the move is past its point of no return. Gives the
/// cluster, the hold, and the move.
async fn moving_with_its_commit_held(
    room: &SpotId,
    third: bool,
) -> (Cluster, Arc<FaultyStore>, MoveTask) {
    let mut cluster = Cluster::start(1, registry).await;
    let held = FaultyStore::new(cluster.store.clone());
    cluster
        .add_with(cluster.config("n2").store(held.clone()), registry())
        .await;
    if third {
        cluster.add("n3", registry()).await;
    }
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    n1.create_spot_on(n1.id(), "room", room)
        .await
        .expect("room");
    let _: u64 = n1.request(room, Cmd::Set(42), T).await.expect("set");
    held.hold_keys(&format!("u/s/{room}"));
    let mover = move_in_background(n1, UnitId::Spot(room.clone()), n2.id());
    held.wait_held().await;
    (cluster, held, mover)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_room_whose_move_commits_into_a_draining_node_joins_the_drain_and_moves_on() {
    let room = spot("r2");
    let (cluster, held, mover) = moving_with_its_commit_held(&room, true).await;
    let (n1, n2, n3) = (
        cluster.nodes[0].clone(),
        cluster.nodes[1].clone(),
        cluster.nodes[2].clone(),
    );

    let drain = drain_in_background(&n2, T);
    wait_not_serving(&n2).await;
    assert!(
        !n2.watch_status().borrow().safe_to_shutdown,
        "a room may still open on n2"
    );
    held.release();
    let report = mover.await.expect("mover").expect("move started");
    let outcome = drain.await.expect("drain task");

    assert_eq!(report.end, MoveEnd::Moved, "its commit won");
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: 1 });
    let id = UnitId::Spot(room.clone());
    let host = [&n1, &n3].into_iter().find(|n| n.hosts(&id));
    let host = host.expect("the drain moved it on").id().to_string();
    assert!(!n2.hosts(&id));
    assert!(n2.watch_status().borrow().safe_to_shutdown);
    n2.shutdown().await;
    assert_eq!(
        value(&n1, &room).await,
        Ok(42),
        "nothing was lost on the way"
    );
    assert_eq!(recorded_owner(&cluster, &room).await, Some(host));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_shut_down_while_a_move_into_it_commits_never_stays_recorded_as_the_owner() {
    let room = spot("closes");
    let (cluster, held, mover) = moving_with_its_commit_held(&room, false).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    let closings = CLOSINGS.load(Ordering::SeqCst);

    let shutdown = {
        let n2 = n2.clone();
        tokio::spawn(async move { n2.shutdown_within(Duration::from_secs(5)).await })
    };
    wait_not_serving(&n2).await;
    held.release();
    let report = mover.await.expect("mover").expect("move started");
    shutdown.await.expect("shutdown task");

    let closed = CLOSINGS.load(Ordering::SeqCst) - closings;
    let after = value(&n1, &room).await;
    if report.end == MoveEnd::Moved {
        // The commit won, so the room opened on n2 and closed with it, released: it was not
        // left recorded on a stopped node, where recovery would rebuild it empty.
        assert_eq!(recorded_owner(&cluster, &room).await, None);
        assert_eq!(closed, 1, "the copy that opened closed once");
        assert!(
            matches!(
                after,
                Err(MessageError::UnknownId { .. } | MessageError::PeerGone { .. })
            ),
            "{after:?}"
        );
    } else {
        // The source took it back: it runs there with its state, and the copy staged on n2,
        // which never opened, ran no callback.
        assert_eq!(after, Ok(42), "{report:?}");
        assert_eq!(recorded_owner(&cluster, &room).await.as_deref(), Some("n1"));
        assert_eq!(closed, 0, "a copy that never opened closed: {report:?}");
    }
    cluster.shutdown().await;
}

/// A drain whose only target went silent mid-move stays, and its withdrawal of the copy staged
/// on the target is lost (the link to the target is backlogged: the cut lasted). Drained again
/// as soon as the link is back, the new offer takes that stale copy's place instead of being
/// refused as "already hosted".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_retried_right_after_a_heal_moves_the_room_its_failed_move_left_staged() {
    let (room, sink) = (spot("healed"), spot("sink"));
    let quick = |mut config: ferry::NodeConfig, sockets: Option<&CutSockets>| {
        if let Some(mesh) = config.mesh.as_mut() {
            // A cut link is noticed in a second, so the first move goes silent soon; what is sent
            // meanwhile waits in the queue, which fills.
            mesh.idle_timeout = Duration::from_secs(1);
            mesh.keep_alive = Duration::from_millis(250);
            mesh.unacked_bytes = 4096;
            if let Some(sockets) = sockets {
                mesh.sockets = Arc::new(sockets.clone());
            }
        }
        config
    };
    let mut cluster = Cluster::start(0, registry).await;
    let config = quick(cluster.config("n1"), None);
    cluster.add_with(config, registry()).await;
    let cut = CutSockets::default();
    let (hooked, gate) = Gate::new(false);
    let config = quick(cluster.config("n2"), Some(&cut));
    cluster.add_with(config, registry_with(hooked)).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    n1.create_spot_on(n1.id(), "room", &room)
        .await
        .expect("room");
    n1.create_spot_on(n2.id(), "room", &sink)
        .await
        .expect("sink");
    let _: u64 = n1.request(&room, Cmd::Set(42), T).await.expect("set");
    let _: u64 = n1.request(&sink, Cmd::Get, T).await.expect("sink reached");

    // The first drain's move is taken by n2 and restores there; then the link is cut, and tells
    // to the sink fill n1's queue to n2, so the move's withdrawal finds no room in it.
    let first = drain_in_background(&n1, Duration::from_secs(60));
    gate.wait_started().await;
    cut.cut(n1.mesh_addr().expect("n1 has a mesh"));
    // The tells keep the queue to n2 full (65,536 frames) until the move gives up.
    let flooding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flood = {
        let (n1, sink, flooding) = (n1.clone(), sink.clone(), flooding.clone());
        tokio::spawn(async move {
            while flooding.load(Ordering::Relaxed) {
                for _ in 0..1_000 {
                    n1.tell(&sink, Cmd::Set(1)).expect("tell taken");
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let first = first.await.expect("first drain");
    flooding.store(false, Ordering::Relaxed);
    flood.await.expect("flood");
    assert!(
        matches!(first, RelocateOutcome::Blocked { .. }),
        "{first:?}"
    );
    // The restore finishes on n2: a copy staged for a move its source gave up.
    gate.open();
    while !n2.hosts(&UnitId::Spot(room.clone())) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cut.heal();
    n1.wait_peer_ready(n2.id()).await.expect("link back");
    // Answered once every tell queued before it reached the sink: the backlog is gone. Refused
    // while the queue is still full.
    while let Err(MessageError::Unreachable { .. }) = value(&n1, &sink).await {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        n2.hosts(&UnitId::Spot(room.clone())),
        "the stale copy is still staged on n2"
    );
    // The next restore on n2 goes through the gate at once.
    gate.open();

    let second = n1
        .relocate(ferry::RelocateOptions {
            mode: ferry::RelocateMode::PlannedMaintenance,
            deadline: T,
        })
        .await;
    assert!(
        matches!(second, RelocateOutcome::Relocated { moved: 1 }),
        "{second:?}"
    );
    assert_eq!(value(&n1, &room).await, Ok(42), "the room kept its state");
    assert_eq!(recorded_owner(&cluster, &room).await.as_deref(), Some("n2"));
    cluster.shutdown().await;
}
