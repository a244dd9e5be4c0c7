//! What reaches a unit while it moves: membership changes and stops during the move, and state
//! adapters that fail or panic. Real nodes over loopback QUIC on a shared store.

use std::sync::Arc;
use std::time::Duration;

use ferry::relocation::protocol::MoveEnd;
use ferry::{
    ActorId, AdapterError, Behavior, BlockedReason, Ctx, ExecutionMode, Registration, Registry,
    RelocateMode, RelocateOptions, RelocateOutcome, RelocationPolicy, SpotId, StateAdapter,
    UnitError, UnitId,
};
use ferry_tests::cluster::Cluster;
use ferry_tests::faults::{FaultyStore, Gate, Hooked};
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(10);

/// A room or a player: logs what it is told; a room also reports its members.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Unit {
    log: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    Log(String),
    Get,
}

/// What a unit answers: its log, and (for a room) its members, sorted.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Seen {
    log: Vec<String>,
    members: Vec<String>,
}

impl Behavior for Unit {
    type Msg = Cmd;
    type Reply = Seen;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: Cmd) -> Seen {
        if let Cmd::Log(line) = msg {
            self.log.push(line);
        }
        let mut members: Vec<String> = ctx.members().map(ToString::to_string).collect();
        members.sort();
        Seen {
            log: self.log.clone(),
            members,
        }
    }
}

/// An adapter that panics while capturing, or while restoring.
#[derive(Clone, Copy)]
enum Panics {
    OnCapture,
    OnRestore,
}

impl StateAdapter<Unit> for Panics {
    fn capture(&self, unit: &Unit) -> Result<Vec<u8>, AdapterError> {
        match self {
            Panics::OnCapture => panic!("capture adapter bug"),
            Panics::OnRestore => ferry::SerdeAdapter.capture(unit),
        }
    }

    fn restore(&self, unit: &mut Unit, bytes: &[u8]) -> Result<(), AdapterError> {
        match self {
            Panics::OnCapture => ferry::SerdeAdapter.restore(unit, bytes),
            Panics::OnRestore => panic!("restore adapter bug"),
        }
    }
}

/// Rooms restored through `room_adapter` (so a test can hold or fail the restore), players and
/// rooms whose adapters panic.
fn registry_with(room_adapter: Hooked) -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", |_| Unit::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(room_adapter))),
    );
    reg.register(
        Registration::actor("player", |_| Unit::default()).policy(RelocationPolicy::serde()),
    );
    reg.register(Registration::spot("lobby", |_| Unit::default()).mode(ExecutionMode::PerActor));
    reg.register(
        Registration::spot("capture-panics", |_| Unit::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(Panics::OnCapture))),
    );
    reg.register(
        Registration::spot("restore-panics", |_| Unit::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(Panics::OnRestore))),
    );
    reg
}

fn registry() -> Registry {
    registry_with(Hooked::default())
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

fn actor(id: &str) -> ActorId {
    ActorId::new(id).expect("valid id")
}

fn lines(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|s| s.to_string()).collect()
}

async fn seen(node: &ferry::Node, id: impl Into<ferry::Target>) -> Seen {
    node.request(id, Cmd::Get, T).await.expect("unit answers")
}

async fn owner(node: &ferry::Node, id: UnitId) -> String {
    let record = node.read_record(&id).await.expect("store").expect("record");
    record.owner.to_string()
}

/// Room `r` with members p0 and p1 and a player p2 of its own, all on n1; the target n2 restores
/// rooms through a gate. While the move waits in the target's restore (the room is sealed on n1,
/// its capture taken), p0 leaves, p2 joins, p1 is stopped, and p0 is told one more line.
/// Returns the cluster and the move's end.
async fn change_members_during_a_move(fail_restore: bool) -> (Cluster, MoveEnd) {
    let (hooked, gate) = Gate::new(fail_restore);
    let mut cluster = Cluster::start(1, registry).await;
    cluster.add("n2", registry_with(hooked)).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r).await.expect("room");
    for p in ["p0", "p1", "p2"] {
        n1.create_actor("player", &actor(p)).await.expect("player");
    }
    n1.join(&actor("p0"), &r).await.expect("p0 joins");
    n1.join(&actor("p1"), &r).await.expect("p1 joins");
    for line in ["a1", "a2"] {
        let _: Seen = n1
            .request(&actor("p0"), Cmd::Log(line.into()), T)
            .await
            .expect("p0 logs");
    }
    let mover = {
        let (n1, to) = (n1.clone(), n2.id().clone());
        tokio::spawn(async move { n1.move_unit(&UnitId::Spot(spot("r")), Some(to)).await })
    };
    gate.wait_started().await;

    n1.tell(actor("p0"), Cmd::Log("h1".into())).expect("told");
    let left = n1.leave(&actor("p0")).await;
    assert!(
        matches!(left, Err(UnitError::Moving { .. })),
        "a leave during the move is refused, retryably: {left:?}"
    );
    let joined = n1.join(&actor("p2"), &r).await;
    assert!(
        matches!(joined, Err(UnitError::Moving { .. })),
        "a join into the moving room is refused, retryably: {joined:?}"
    );
    let stopped = n1.stop_unit(&UnitId::Actor(actor("p1"))).await;
    assert!(
        matches!(stopped, Err(UnitError::Moving { .. })),
        "a stop of a moving member is refused, retryably: {stopped:?}"
    );
    // The refused join left p2 where it was, running, with what was sent to it.
    for line in ["s1", "s2"] {
        n1.tell(actor("p2"), Cmd::Log(line.into())).expect("told");
    }
    assert_eq!(seen(&n1, &actor("p2")).await.log, lines(&["s1", "s2"]));

    gate.open();
    let report = mover.await.expect("mover ran").expect("move started");
    (cluster, report.end)
}

/// Everything the move carried is where its record says, once: the room with exactly p0 and p1,
/// p0's lines each once and in order, p2 alone on n1.
async fn assert_room_whole_on(cluster: &Cluster, owner_node: &ferry::Node) {
    let r = spot("r");
    for node in &cluster.nodes {
        let here = node.id() == owner_node.id();
        for unit in [
            UnitId::Spot(r.clone()),
            UnitId::Actor(actor("p0")),
            UnitId::Actor(actor("p1")),
        ] {
            assert_eq!(node.hosts(&unit), here, "{unit} on {}", node.id());
            assert_eq!(owner(node, unit).await, owner_node.id().to_string());
        }
    }
    let n1 = &cluster.nodes[0];
    assert!(n1.hosts(&UnitId::Actor(actor("p2"))));
    assert_eq!(owner(n1, UnitId::Actor(actor("p2"))).await, "n1");
    assert_eq!(seen(n1, &r).await.members, lines(&["p0", "p1"]));
    assert_eq!(seen(n1, &actor("p0")).await.log, lines(&["a1", "a2", "h1"]));
    assert_eq!(seen(n1, &actor("p2")).await.log, lines(&["s1", "s2"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn membership_changes_during_a_move_are_refused_and_the_room_moves_whole() {
    let (cluster, end) = change_members_during_a_move(false).await;
    assert_eq!(end, MoveEnd::Moved);
    let n2 = cluster.nodes[1].clone();
    assert_room_whole_on(&cluster, &n2).await;
    // Once the move has ended, the same calls go through on the room's new node.
    n2.leave(&actor("p0")).await.expect("p0 leaves on n2");
    n2.stop_unit(&UnitId::Actor(actor("p1")))
        .await
        .expect("p1 stops on n2");
    let room = seen(&n2, &spot("r")).await;
    assert_eq!(room.members, Vec::<String>::new());
    assert!(n2.hosts(&UnitId::Actor(actor("p0"))));
    assert!(!n2.hosts(&UnitId::Actor(actor("p1"))));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn membership_changes_during_a_failed_move_are_refused_and_the_room_stays_whole() {
    let (cluster, end) = change_members_during_a_move(true).await;
    assert!(matches!(end, MoveEnd::Restored(_)), "{end:?}");
    let n1 = cluster.nodes[0].clone();
    assert_room_whole_on(&cluster, &n1).await;
    n1.leave(&actor("p0")).await.expect("p0 leaves on n1");
    n1.join(&actor("p2"), &spot("r"))
        .await
        .expect("p2 joins on n1");
    assert_eq!(seen(&n1, &spot("r")).await.members, lines(&["p1", "p2"]));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_capture_adapter_that_panics_ends_the_move_and_the_unit_runs_on_with_its_state() {
    let cluster = Cluster::start(2, registry).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("fragile");
    n1.create_spot_on(n1.id(), "capture-panics", &r)
        .await
        .expect("created");
    let _: Seen = n1.request(&r, Cmd::Log("x".into()), T).await.expect("ok");
    let unit = UnitId::Spot(r.clone());
    for attempt in 0..2 {
        let report = n1
            .move_unit(&unit, Some(n2.id().clone()))
            .await
            .expect("move started");
        assert!(
            matches!(&report.end, MoveEnd::NotSealed(why) if why.contains("panicked")),
            "attempt {attempt}: {report:?}"
        );
        assert_eq!(report.blocked, Some(BlockedReason::AdapterFailed));
        // From every node, the room answers with its state.
        for node in [n1, n2] {
            assert_eq!(seen(node, &r).await.log, lines(&["x"]));
        }
    }
    assert!(n1.hosts(&unit));
    assert_eq!(owner(n1, unit.clone()).await, "n1");
    let outcome = n1
        .relocate(RelocateOptions {
            mode: RelocateMode::PlannedMaintenance,
            deadline: T,
        })
        .await;
    assert_eq!(
        outcome,
        RelocateOutcome::Blocked {
            reason: BlockedReason::AdapterFailed,
            stayed: vec![unit.clone()],
        }
    );
    assert_eq!(seen(n2, &r).await.log, lines(&["x"]));
    // It is an ordinary unit still: it stops, and its id can be used again.
    n1.stop_unit(&unit).await.expect("stops");
    n1.create_spot_on(n1.id(), "capture-panics", &r)
        .await
        .expect("created again");
    assert_eq!(seen(n2, &r).await.log, Vec::<String>::new());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_adapter_that_panics_on_the_target_leaves_the_unit_on_its_source() {
    let cluster = Cluster::start(2, registry).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("fragile");
    n1.create_spot_on(n1.id(), "restore-panics", &r)
        .await
        .expect("created");
    let _: Seen = n1.request(&r, Cmd::Log("x".into()), T).await.expect("ok");
    let unit = UnitId::Spot(r.clone());
    let report = n1
        .move_unit(&unit, Some(n2.id().clone()))
        .await
        .expect("move started");
    assert!(
        matches!(&report.end, MoveEnd::Restored(why) if why.contains("panicked")),
        "the target refuses at once, it does not go silent: {report:?}"
    );
    assert!(n1.hosts(&unit) && !n2.hosts(&unit));
    let _: Seen = n2.request(&r, Cmd::Log("y".into()), T).await.expect("ok");
    assert_eq!(seen(n1, &r).await.log, lines(&["x", "y"]));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_leaving_a_per_actor_spot_during_its_move_is_applied_where_the_spot_runs() {
    // n2's commit of the lobby can be held: the lobby then waits, handed over, on n1.
    let mut cluster = Cluster::start(1, registry).await;
    let held = FaultyStore::new(cluster.store.clone());
    let config = cluster.config("n2").store(held.clone());
    cluster.add_with(config, registry()).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    let lobby = spot("lobby");
    n1.create_spot_on(n1.id(), "lobby", &lobby)
        .await
        .expect("lobby");
    for p in ["p0", "p1"] {
        n1.create_actor("player", &actor(p)).await.expect("player");
        n1.join(&actor(p), &lobby).await.expect("joins");
    }
    assert_eq!(seen(&n1, &lobby).await.members, lines(&["p0", "p1"]));
    held.hold_keys("u/s/lobby");
    let mover = {
        let (n1, to) = (n1.clone(), n2.id().clone());
        tokio::spawn(async move { n1.move_unit(&UnitId::Spot(spot("lobby")), Some(to)).await })
    };
    held.wait_held().await;
    // p0 runs in a lane of its own, so it leaves at once; the lobby hears of it after its move.
    n1.leave(&actor("p0")).await.expect("p0 leaves");
    held.release();
    let report = mover.await.expect("mover ran").expect("move started");
    assert_eq!(report.end, MoveEnd::Moved);
    assert!(n2.hosts(&UnitId::Spot(lobby.clone())));
    // The news travels on its own call after the move: wait for it, within a bound.
    let mut members = Vec::new();
    for _ in 0..200 {
        members = seen(&n1, &lobby).await.members;
        if members == lines(&["p1"]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(members, lines(&["p1"]));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_room_that_moves_before_a_joins_record_is_written_records_the_member_it_carried() {
    use ferry::store::{LocationStore, MemoryStore};

    // n1's write of p2's record can be held: the join has taken effect in the lane, and its
    // record write waits while the room moves to n2.
    let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
    let mut cluster = Cluster::start_on(0, store.clone(), registry).await;
    let held = FaultyStore::new(store);
    let n1 = cluster
        .add_with(cluster.config("n1").store(held.clone()), registry())
        .await;
    let n2 = cluster.add("n2", registry()).await;
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r).await.expect("room");
    n1.create_actor("player", &actor("p2"))
        .await
        .expect("player");
    held.hold_keys("u/a/p2");
    let join = {
        let (n1, r) = (n1.clone(), r.clone());
        tokio::spawn(async move { n1.join(&actor("p2"), &r).await })
    };
    held.wait_held().await;
    let report = n1
        .move_unit(&UnitId::Spot(r.clone()), Some(n2.id().clone()))
        .await
        .expect("move started");
    assert_eq!(report.end, MoveEnd::Moved);
    held.release();
    join.await.expect("join ran").expect("the join is recorded");
    let record = n2
        .read_record(&UnitId::Actor(actor("p2")))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(record.owner, *n2.id());
    assert_eq!(
        record.spot,
        Some(r.clone()),
        "the record names the room it moved in"
    );
    assert_eq!(seen(&n2, &r).await.members, lines(&["p2"]));
    cluster.shutdown().await;
}
