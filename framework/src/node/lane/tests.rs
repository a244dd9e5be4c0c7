//! What a lane takes while a move holds it in its quiet spell, before the seal.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::Control;
use crate::error::UnitError;
use crate::ids::{ActorId, NodeId, SpotId, UnitId};
use crate::node::{Node, NodeConfig};
use crate::registry::{AdapterError, Registration, Registry, RelocationPolicy, StateAdapter};
use crate::relocation::RelocationId;
use crate::{Behavior, Ctx};

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
