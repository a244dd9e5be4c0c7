//! Order per sender and unit across many moves: numbered tells from one node run exactly once and
//! in the order they were sent, while the unit moves back and forth.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferry::cluster::authority::unit_key;
use ferry::relocation::protocol::MoveEnd;
use ferry::store::MemoryStore;
use ferry::{Behavior, Ctx, Node, Registration, Registry, RelocationPolicy, SpotId, UnitId};
use ferry_tests::cluster::Cluster;
use ferry_tests::cut_socket::CutSockets;
use ferry_tests::faults::FaultyStore;
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(10);

/// A room that records the number of every tell it runs, in the order it runs them.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Seen {
    numbers: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Msg {
    Number(u32),
    Get,
}

impl Behavior for Seen {
    type Msg = Msg;
    type Reply = Vec<u32>;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, msg: Msg) -> Vec<u32> {
        match msg {
            Msg::Number(n) => {
                self.numbers.push(n);
                Vec::new()
            }
            Msg::Get => self.numbers.clone(),
        }
    }
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(Registration::spot("seen", |_| Seen::default()).policy(RelocationPolicy::serde()));
    reg
}

/// Tells `room` numbers from `sender` until `stop` is set (and at least `min` of them, at most
/// `max`), pacing itself a little so the stream spans the moves; gives back how many it told.
fn stream(
    sender: Node,
    room: SpotId,
    stop: Arc<AtomicBool>,
    min: u32,
    max: u32,
) -> tokio::task::JoinHandle<u32> {
    tokio::spawn(async move {
        let mut n = 0;
        while n < max && (n < min || !stop.load(Ordering::Acquire)) {
            sender.tell(&room, Msg::Number(n)).expect("told");
            n += 1;
            if n % 32 == 0 {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        }
        n
    })
}

/// Moves the room `moves` times between n1 and n2, starting on n1.
async fn bounce(cluster: &Cluster, id: &UnitId, moves: usize) {
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    for i in 0..moves {
        let (from, to) = if i % 2 == 0 { (n1, n2) } else { (n2, n1) };
        let report = from
            .move_unit(id, Some(to.id().clone()))
            .await
            .expect("move started");
        assert_eq!(report.end, MoveEnd::Moved, "move {i}: {report:?}");
        // Let some of the stream reach the room where it is now.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Asks the room (from `reader`, after everything it sent) until it has run `sent` tells.
async fn numbers_run(reader: &Node, room: &SpotId, sent: u32) -> Vec<u32> {
    let mut seen: Vec<u32> = Vec::new();
    for _ in 0..200 {
        seen = reader
            .request(room, Msg::Get, T)
            .await
            .expect("room answers");
        if seen.len() >= sent as usize {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

/// Checks that each number in `0..sent` ran exactly once and in order, saying where it did not.
fn assert_in_order(seen: &[u32], sent: u32) {
    let descents = seen.windows(2).filter(|w| w[1] < w[0]).count();
    let first_wrong = seen
        .iter()
        .enumerate()
        .find(|(i, n)| **n != *i as u32)
        .map(|(i, n)| format!("position {i} ran #{n}"));
    assert!(
        descents == 0 && seen.len() == sent as usize && first_wrong.is_none(),
        "{} of {sent} tells ran, {descents} descents; first out of place: {first_wrong:?}",
        seen.len()
    );
}

async fn a_sender_keeps_its_order_across_ten_moves(sender_index: usize) {
    let cluster = Cluster::start(3, registry).await;
    let n1 = &cluster.nodes[0];
    let room = SpotId::new("seen").expect("id");
    n1.create_spot_on(n1.id(), "seen", &room)
        .await
        .expect("created");
    let id = UnitId::Spot(room.clone());
    let sender = cluster.nodes[sender_index].clone();
    // The sender learns the route before the stream starts.
    let _: Vec<u32> = sender
        .request(&room, Msg::Get, T)
        .await
        .expect("room answers");
    let stop = Arc::new(AtomicBool::new(false));
    let told = stream(sender.clone(), room.clone(), stop.clone(), 5_000, 200_000);
    tokio::time::timeout(Duration::from_secs(15), bounce(&cluster, &id, 10))
        .await
        .expect("ten moves within 15 s");
    stop.store(true, Ordering::Release);
    let sent = told.await.expect("sender ran");
    let seen = numbers_run(&sender, &room, sent).await;
    assert_in_order(&seen, sent);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_third_node_sender_keeps_its_order_across_ten_moves() {
    a_sender_keeps_its_order_across_ten_moves(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sender_on_the_target_keeps_its_order_across_ten_moves() {
    // n2 is the target of every other move, and the source of the rest.
    a_sender_keeps_its_order_across_ten_moves(1).await;
}

/// The target of a move sent tells to the unit through a third node before the unit arrived; they
/// are still on their way (the third node's link to the source is silent) when the target starts to
/// tell the unit, now its own, directly. The earlier tells run first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_runs_what_it_sent_through_a_third_node_before_what_it_sends_after_the_move() {
    let mut cluster = Cluster::start(0, registry).await;
    let cut = CutSockets::default();
    let mut config = cluster.config("n1");
    if let Some(mesh) = config.mesh.as_mut() {
        mesh.sockets = Arc::new(cut.clone());
    }
    let third = cluster.add_with(config, registry()).await;
    let source = cluster.add("n2", registry()).await;
    let target = cluster.add("n3", registry()).await;
    let room = SpotId::new("seen").expect("id");
    let id = UnitId::Spot(room.clone());
    third
        .create_spot_on(third.id(), "seen", &room)
        .await
        .expect("created");
    // The target learns the route through the third node; then the room moves to the source.
    let _: Vec<u32> = target.request(&room, Msg::Get, T).await.expect("answers");
    let moved = third
        .move_unit(&id, Some(source.id().clone()))
        .await
        .expect("move started");
    assert_eq!(moved.end, MoveEnd::Moved);

    // What the target tells now goes through the third node, whose link to the source is silent.
    cut.cut(source.mesh_addr().expect("mesh"));
    for n in 0..100 {
        target.tell(&room, Msg::Number(n)).expect("told");
    }
    // The third node hints the target to the source; the target switches its path and holds what it
    // sends next behind a fence that the silent link holds too.
    for _ in 0..400 {
        if target.cached_route(&id).as_ref() == Some(source.id()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(target.cached_route(&id).as_ref(), Some(source.id()));
    for n in 100..200 {
        target.tell(&room, Msg::Number(n)).expect("told");
    }
    let moved = source
        .move_unit(&id, Some(target.id().clone()))
        .await
        .expect("move started");
    assert_eq!(moved.end, MoveEnd::Moved);
    // The room runs on the target now, which tells it directly.
    for n in 200..300 {
        target.tell(&room, Msg::Number(n)).expect("told");
    }
    cut.heal();
    let seen = numbers_run(&target, &room, 300).await;
    assert_in_order(&seen, 300);
    cluster.shutdown().await;
}

/// A node tells a room whose route it is still looking up (the store is slow to answer), and the
/// room is created on this very node meanwhile: what waited for the lookup runs first, before what
/// is told to the room once it exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_waited_for_a_lookup_runs_before_what_is_told_once_the_unit_is_created_here() {
    let store = FaultyStore::new(Arc::new(MemoryStore::new()));
    let cluster = Cluster::start_on(1, store.clone(), registry).await;
    let n1 = &cluster.nodes[0];
    let room = SpotId::new("late").expect("id");
    let key = unit_key(&UnitId::Spot(room.clone()));
    store.hold_reads(&key);
    for n in 0..3 {
        n1.tell(&room, Msg::Number(n)).expect("told");
    }
    store.wait_reads(&key, 1).await;
    n1.create_spot_on(n1.id(), "seen", &room)
        .await
        .expect("room");
    for n in 3..6 {
        n1.tell(&room, Msg::Number(n)).expect("told");
    }
    store.release_reads();
    let seen = numbers_run(n1, &room, 6).await;
    assert_in_order(&seen, 6);
    cluster.shutdown().await;
}
