//! What a lane takes while a move holds it in its quiet spell, before the seal, what the turns
//! of a room waiting for its safe point answer, and ticks due together beside a join.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use super::Control;
use crate::error::UnitError;
use crate::ids::{ActorId, NodeId, SpotId, UnitId};
use crate::mesh::ClusterCa;
use crate::node::{MeshSettings, Node, NodeConfig};
use crate::registry::{AdapterError, Registration, Registry, RelocationPolicy, StateAdapter};
use crate::relocation::RelocationId;
use crate::store::{LocationStore, MemoryStore};
use crate::{Behavior, Ctx, ReadinessMode, StandbyPolicy};

const T: Duration = Duration::from_secs(10);

struct Unit;

impl Behavior for Unit {
    type Msg = ();
    type Reply = ();

    fn handle(&mut self, _ctx: &mut Ctx<'_>, _msg: ()) {}
}

/// A state adapter with a bug: it panics while capturing.
struct Panics;

impl StateAdapter<Unit> for Panics {
    fn capture(&self, _unit: &Unit) -> Result<Vec<u8>, AdapterError> {
        panic!("capture adapter bug")
    }

    fn restore(&self, _unit: &mut Unit, _bytes: &[u8]) -> Result<(), AdapterError> {
        Ok(())
    }
}

async fn node(name: &str) -> Node {
    let mut registry = Registry::new();
    registry.register(Registration::spot("room", |_| Unit));
    registry.register(
        Registration::spot("fragile", |_| Unit)
            .policy(RelocationPolicy::PreserveState(Arc::new(Panics))),
    );
    registry.register(Registration::actor("player", |_| Unit));
    registry.register(Registration::actor("ticker", |_| Ticker::default()));
    let id = NodeId::new(name).expect("id");
    Node::start(NodeConfig::new(id), registry)
        .await
        .expect("node starts")
}

fn send(node: &Node, unit: &UnitId, control: Control) {
    let entry = node.core.units.directory.get(unit).expect("hosted here");
    assert!(entry.lane.ctl.send(control).is_ok(), "the lane runs");
}

/// Asks the lane of `room` for its bound sessions, as a move does before it seals the room.
async fn quiesce(node: &Node, room: &UnitId, rel: RelocationId) {
    let (done, quiet) = oneshot::channel();
    let unit = room.clone();
    send(node, room, Control::Quiesce { rel, unit, done });
    let quiet = tokio::time::timeout(T, quiet).await.expect("in time");
    assert!(quiet.expect("answered").is_ok(), "the room can move");
}

#[tokio::test]
async fn a_room_takes_no_member_and_loses_none_in_its_quiet_spell() {
    let node = node("lane-quiet").await;
    let room = SpotId::new("room-1").expect("id");
    let (alice, bob) = (
        ActorId::new("alice").expect("id"),
        ActorId::new("bob").expect("id"),
    );
    node.create_spot("room", &room).await.expect("room");
    node.create_actor("player", &alice).await.expect("alice");
    node.create_actor("player", &bob).await.expect("bob");
    node.join(&alice, &room).await.expect("alice joins");
    let room_unit = UnitId::Spot(room.clone());
    let rel = RelocationId(7);
    quiesce(&node, &room_unit, rel).await;

    // The gateways were told which bound Actors move with the room: none joins or leaves now.
    let joined = node.join(&bob, &room).await;
    assert!(
        matches!(&joined, Err(UnitError::Moving { id }) if *id == room_unit),
        "a join in the quiet spell is refused: {joined:?}"
    );
    let left = node.leave(&alice).await;
    assert!(
        matches!(&left, Err(UnitError::Moving { id }) if *id == room_unit),
        "a leave in the quiet spell is refused: {left:?}"
    );
    let stopped = node.stop_unit(&UnitId::Actor(alice.clone())).await;
    assert!(
        matches!(&stopped, Err(UnitError::Moving { .. })),
        "a member's stop in the quiet spell is refused: {stopped:?}"
    );

    // The move lets the room go: it takes changes again.
    send(&node, &room_unit, Control::CancelSeal { rel });
    node.join(&bob, &room).await.expect("bob joins");
    node.leave(&alice).await.expect("alice leaves");
    let _ = node.shutdown().await;
}

#[tokio::test]
async fn a_capture_whose_adapter_panics_leaves_the_room_running_and_open_to_changes() {
    let node = node("lane-capture-panics").await;
    let room = SpotId::new("room-2").expect("id");
    let alice = ActorId::new("alice").expect("id");
    node.create_spot("fragile", &room).await.expect("room");
    node.create_actor("player", &alice).await.expect("alice");
    let room_unit = UnitId::Spot(room.clone());
    let rel = RelocationId(8);
    quiesce(&node, &room_unit, rel).await;
    let (done, sealed) = oneshot::channel();
    send(&node, &room_unit, Control::Seal { rel, done });
    let sealed = tokio::time::timeout(T, sealed).await.expect("in time");
    assert!(
        matches!(
            sealed.expect("answered"),
            Err(crate::unit::lane::SealRefused::Adapter(_))
        ),
        "the capture fails"
    );

    // The move ended with it: the room runs turns, and takes members again.
    let () = node
        .request(room_unit.clone(), (), T)
        .await
        .expect("the room answers");
    node.join(&alice, &room).await.expect("alice joins");
    let _ = node.shutdown().await;
}

/// An ApplicationSignaled room with a confirmed standby: it counts the turns it ran, and says its
/// state is whole when asked.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Signaled {
    ran: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
enum Ask {
    Count,
    Defer,
}

impl Behavior for Signaled {
    type Msg = Ask;
    type Reply = u64;

    fn handle(&mut self, ctx: &mut Ctx<'_>, ask: Ask) -> u64 {
        self.ran += 1;
        if matches!(ask, Ask::Defer) {
            ctx.relocation_ready_defer()
                .expect("an ApplicationSignaled spot defers");
        }
        self.ran
    }
}

/// Two nodes on one store, linked: the room's standby goes to the other.
async fn pair(ca: &ClusterCa) -> (Node, Node) {
    let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
    let mut nodes = Vec::new();
    for name in ["lane-n1", "lane-n2"] {
        let id = NodeId::new(name).expect("id");
        let tls = ca.node_tls(&id).expect("certificate");
        let mesh = MeshSettings::new("127.0.0.1:0".parse().expect("addr"), tls);
        let config = NodeConfig::new(id).store(store.clone()).mesh(mesh);
        let mut registry = Registry::new();
        registry.register(
            Registration::spot("signaled", |_| Signaled::default())
                .policy(RelocationPolicy::serde())
                .readiness(ReadinessMode::ApplicationSignaled)
                .standby(StandbyPolicy::Confirmed),
        );
        nodes.push(Node::start(config, registry).await.expect("node starts"));
    }
    for _ in 0..2 {
        for node in &nodes {
            node.refresh_membership().await.expect("membership read");
        }
    }
    let (n1, n2) = (nodes[0].clone(), nodes[1].clone());
    n1.wait_peer_ready(n2.id()).await.expect("link up");
    n2.wait_peer_ready(n1.id()).await.expect("link up");
    (n1, n2)
}

/// Waits until the one room `node` owns has a standby that holds all its turns.
async fn standby_current(node: &Node) {
    let until = tokio::time::Instant::now() + T;
    loop {
        let status = node.standby_status();
        if status.current == 1 && status.oldest_unheld.is_none() {
            return;
        }
        assert!(tokio::time::Instant::now() < until, "{status:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A seal waits for the room's safe point, and the room runs on meanwhile: what its turns
/// answer is sent once its standby holds them, the deferring turn's too, and is not kept
/// until the move ends. (Its turns were taken into no checkpoint while the seal waited, and
/// their answers waited for the move's end, where a move that went through turned them into
/// errors.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_waiting_for_its_safe_point_answers_once_its_standby_holds_each_turn() {
    let ca = ClusterCa::generate().expect("cluster CA");
    let (n1, n2) = pair(&ca).await;
    let room = SpotId::new("signaled-1").expect("id");
    n1.create_spot("signaled", &room).await.expect("room");
    let unit = UnitId::Spot(room.clone());
    standby_current(&n1).await;
    let rel = RelocationId(9);
    quiesce(&n1, &unit, rel).await;
    let (done, sealed) = oneshot::channel();
    send(&n1, &unit, Control::Seal { rel, done });

    let ran: u64 = n1
        .request(unit.clone(), Ask::Count, T)
        .await
        .expect("answered while the seal waits");
    assert_eq!(ran, 1);
    let ran: u64 = n1
        .request(unit.clone(), Ask::Defer, T)
        .await
        .expect("the deferring turn answered");
    assert_eq!(ran, 2);
    let sealed = tokio::time::timeout(T, sealed).await.expect("in time");
    assert!(
        sealed.expect("answered").is_ok(),
        "captured after the defer"
    );

    // No move takes it: the room runs on here, each turn once.
    let me = n1
        .core
        .units
        .directory
        .get(&unit)
        .expect("hosted here")
        .lane
        .clone();
    let (done, resumed) = oneshot::channel();
    send(&n1, &unit, Control::Resume { rel, me, done });
    tokio::time::timeout(T, resumed)
        .await
        .expect("in time")
        .expect("resumed");
    let ran: u64 = n1
        .request(unit.clone(), Ask::Count, T)
        .await
        .expect("answers");
    assert_eq!(ran, 3);
    let _ = n1.shutdown().await;
    let _ = n2.shutdown().await;
}

/// Told once a ticker ran its second tick.
static SECOND_TICK: Notify = Notify::const_new();

/// An Actor whose start sets two timers due at once, and which counts their ticks. Its first
/// tick asks its lane to take it into `room-3`, as a join that arrives while the tick runs.
#[derive(Default)]
struct Ticker {
    fired: u64,
}

impl Behavior for Ticker {
    type Msg = ();
    type Reply = (u64, bool);

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timeout("one", Duration::from_millis(50));
        ctx.set_timeout("two", Duration::from_millis(50));
    }

    fn on_tick(&mut self, ctx: &mut Ctx<'_>, _tick: &crate::Tick) {
        self.fired += 1;
        match self.fired {
            1 => join_room_3(ctx.node(), ctx.id()),
            2 => SECOND_TICK.notify_one(),
            _ => {}
        }
    }

    fn handle(&mut self, ctx: &mut Ctx<'_>, _msg: ()) -> (u64, bool) {
        (self.fired, ctx.spot().is_some())
    }
}

/// Queues the join of Actor `me` into `room-3` on its lane, as a join from elsewhere would.
fn join_room_3(node: &Node, me: &UnitId) {
    let UnitId::Actor(actor) = me.clone() else {
        panic!("{me} is an Actor");
    };
    let spot = SpotId::new("room-3").expect("id");
    let spot_entry = node
        .core
        .units
        .directory
        .get(&UnitId::Spot(spot.clone()))
        .expect("the room runs");
    let (done, _) = oneshot::channel();
    send(
        node,
        me,
        Control::Join {
            actor,
            spot,
            spot_entry,
            done,
        },
    );
}

/// A join arrives between two ticks taken from their timers together: the second still runs,
/// once, before the Actor goes over to the room. (Run after the join, it stayed behind on a
/// lane with no unit left, its one-shot timer spent.)
#[tokio::test]
async fn ticks_due_together_run_before_a_join_that_comes_between_them() {
    let node = node("lane-ticks").await;
    let room = SpotId::new("room-3").expect("id");
    node.create_spot("room", &room).await.expect("room");
    let ticker = ActorId::new("ticker").expect("id");
    node.create_actor("ticker", &ticker).await.expect("ticker");
    tokio::time::timeout(T, SECOND_TICK.notified())
        .await
        .expect("the second tick ran");
    let (fired, joined): (u64, bool) = node
        .request(UnitId::Actor(ticker), (), T)
        .await
        .expect("the ticker answers");
    assert_eq!(
        (fired, joined),
        (2, true),
        "each tick once, then in the room"
    );
    let _ = node.shutdown().await;
}
