//! Crash recovery: a node dies, its units come back on the survivors, evenly, exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferry::cluster::authority::node_key;
use ferry::relocation::protocol::MoveEnd;
use ferry::store::{LocationStore, MemoryStore};
use ferry::{
    ActorId, Behavior, Ctx, MessageError, Node, NodeConfig, NodeId, RecoveryEvent, Registration,
    Registry, RelocationPolicy, SpotId, Target, UnitError, UnitId,
};
use ferry_tests::cluster::Cluster;
use ferry_tests::faults::{FaultyStore, Gate, Hooked, WriteFault};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

const T: Duration = Duration::from_secs(10);

/// A unit that counts what it is told (its state is lost in a crash: it comes back fresh).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Counter(u64);

impl Behavior for Counter {
    type Msg = u64;
    type Reply = u64;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, n: u64) -> u64 {
        self.0 += n;
        self.0
    }
}

fn registry_with(flaky: Arc<AtomicBool>) -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", |_| Counter::default()).policy(RelocationPolicy::serde()),
    );
    reg.register(Registration::actor("player", |_| Counter::default()));
    reg.register(
        Registration::spot("pinned", |_| Counter::default()).policy(RelocationPolicy::Disabled),
    );
    reg.register(Registration::instance("lazy", |_| Counter::default()));
    reg.register(Registration::instance("kept", |_| Counter::default()).remembered(true));
    reg.register(Registration::spot("flaky", move |_| {
        // Fails the first build after the flag is raised, as a start-up that cannot reach its data.
        if flaky.swap(false, Ordering::SeqCst) {
            panic!("cannot load state yet");
        }
        Counter::default()
    }));
    reg
}

fn registry() -> Registry {
    registry_with(Arc::new(AtomicBool::new(false)))
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

fn unit(id: &str) -> UnitId {
    UnitId::Spot(spot(id))
}

/// Waits for a `Completed` event that covers all of `ids`.
async fn completed(events: &mut broadcast::Receiver<RecoveryEvent>, ids: &[UnitId]) {
    let mut missing: Vec<UnitId> = ids.to_vec();
    let until = tokio::time::Instant::now() + T;
    while !missing.is_empty() {
        let event = tokio::time::timeout_at(until, events.recv())
            .await
            .unwrap_or_else(|_| panic!("not recovered in time: {missing:?}"))
            .expect("events open");
        if let RecoveryEvent::Completed { ids, .. } = event {
            missing.retain(|m| !ids.contains(m));
        }
    }
}

fn hosts(cluster: &[&Node], id: &UnitId) -> usize {
    cluster.iter().filter(|n| n.hosts(id)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_units_come_back_on_the_survivors_evenly_and_once() {
    let mut cluster = Cluster::start(2, registry).await;
    let mut config = cluster.config("n3");
    config.lease_ttl = Duration::from_millis(600);
    let n3 = cluster.add_with(config, registry()).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    n1.create_spot_on(n1.id(), "room", &spot("old-1"))
        .await
        .expect("room");
    n1.create_spot_on(n1.id(), "room", &spot("old-2"))
        .await
        .expect("room");
    let rooms: Vec<UnitId> = (0..6).map(|i| unit(&format!("room-{i}"))).collect();
    for r in &rooms {
        let UnitId::Spot(s) = r else { unreachable!() };
        n3.create_spot_on(n3.id(), "room", s).await.expect("room");
        let _: u64 = n1.request(s, 5u64, T).await.expect("counted");
    }
    let players: Vec<ActorId> = (0..2)
        .map(|i| ActorId::new(format!("p{i}")).expect("id"))
        .collect();
    for p in &players {
        n3.create_actor("player", p).await.expect("player");
    }
    n3.create_spot_on(n3.id(), "pinned", &spot("pinned"))
        .await
        .expect("pinned");
    n3.activate_on(n3.id(), "lazy", &spot("lazy"))
        .await
        .expect("lazy");
    n3.activate_on(n3.id(), "kept", &spot("kept"))
        .await
        .expect("kept");
    assert!(n3.hosts(&unit("lazy")) && n3.hosts(&unit("kept")));
    let before = n1
        .read_record(&rooms[0])
        .await
        .expect("store")
        .expect("record");

    let mut events = n1.recovery_events();
    n3.abort().await;
    let mut back: Vec<UnitId> = rooms.clone();
    back.extend(players.iter().map(|p| UnitId::Actor(p.clone())));
    back.push(unit("kept"));
    let mut all = back.clone();
    all.push(unit("pinned"));
    all.push(unit("lazy"));
    completed(&mut events, &all).await;

    let survivors = [&n1, &n2];
    for id in &back {
        assert_eq!(
            hosts(&survivors, id),
            1,
            "{id} runs on exactly one survivor"
        );
    }
    // Evenly: the survivors end within one unit of each other (n1 had two already).
    let (c1, c2) = (n1.unit_count(), n2.unit_count());
    assert_eq!(c1 + c2, 2 + back.len());
    assert!(c1.abs_diff(c2) <= 1, "{c1} vs {c2}");
    // A rebuilt unit is a fresh start under the same id, one owner generation later.
    let after = n1
        .read_record(&rooms[0])
        .await
        .expect("store")
        .expect("record");
    assert_ne!(after.owner, *n3.id());
    assert_eq!(after.owner_generation, before.owner_generation + 1);
    let UnitId::Spot(r0) = &rooms[0] else {
        unreachable!()
    };
    assert_eq!(
        n2.request::<u64, u64>(r0, 0, T).await,
        Ok(0),
        "state after a crash is fresh"
    );
    // The pinned room is gone, its id free; the lazy instance comes back on its next message.
    assert!(
        n1.read_record(&unit("pinned"))
            .await
            .expect("store")
            .is_none()
    );
    assert!(matches!(
        n1.request::<u64, u64>(&spot("pinned"), 0, T).await,
        Err(MessageError::UnknownId { .. })
    ));
    assert_eq!(
        hosts(&survivors, &unit("lazy")),
        0,
        "not brought back eagerly"
    );
    // Once n2 has read that n3 is gone (every refresh period), placement no longer picks it.
    n2.refresh_membership().await.expect("membership read");
    assert_eq!(
        n2.request::<u64, u64>(Target::instance("lazy", spot("lazy")), 1, T)
            .await,
        Ok(1)
    );
    // Another pass (a successor coordinator, say) changes nothing.
    let counts = (n1.unit_count(), n2.unit_count());
    n1.recover_now().await.expect("pass");
    n2.recover_now().await.expect("not the coordinator: no-op");
    assert_eq!((n1.unit_count(), n2.unit_count()), counts);
    n1.shutdown().await;
    n2.shutdown().await;
}

/// A node that crashes and starts again under its id before anyone takes it for dead: its units'
/// records still name it, so no coordinator rebuilds them, and the new process takes them back
/// itself once the earlier one certainly runs no turns.
/// Every node reads membership once a minute here, but a probe period on while a peer is silent:
/// a crashed node's units come back soon after its lease lapsed, not at the next regular read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_node_is_found_without_waiting_for_the_next_regular_read() {
    let mut cluster = Cluster::start(0, registry).await;
    for id in ["n1", "n2", "n3"] {
        let mut config = cluster.config(id);
        config.refresh = Duration::from_secs(60);
        config.lease_ttl = Duration::from_secs(1);
        cluster.add_with(config, registry()).await;
    }
    let (n1, n3) = (cluster.nodes[0].clone(), cluster.nodes[2].clone());
    let room = spot("found-soon");
    n3.create_spot_on(n3.id(), "room", &room)
        .await
        .expect("room");
    let mut events = n1.recovery_events();
    n3.abort().await;
    // Within T (10 s), far less than the minute to the next regular read.
    completed(&mut events, &[UnitId::Spot(room.clone())]).await;
    let _: u64 = n1
        .request(&room, 1u64, T)
        .await
        .expect("the room plays again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_after_a_crash_takes_back_what_its_earlier_process_held() {
    let mut cluster = Cluster::start(1, registry).await;
    let n1 = cluster.nodes[0].clone();
    let config = |cluster: &Cluster| {
        let mut config = cluster.config("n2");
        config.lease_ttl = Duration::from_secs(2);
        config.outage_limit = Duration::from_millis(500);
        config
    };
    let n2 = cluster.add_with(config(&cluster), registry()).await;
    let rooms = [spot("kept-a"), spot("kept-b")];
    for room in &rooms {
        n2.create_spot_on(n2.id(), "room", room)
            .await
            .expect("room");
        let _: u64 = n1.request(room, 5u64, T).await.expect("counted");
    }
    let player = ActorId::new("p").expect("id");
    n2.create_actor("player", &player).await.expect("player");
    n2.create_spot_on(n2.id(), "pinned", &spot("pinned-a"))
        .await
        .expect("pinned");
    let before = n1
        .read_record(&unit("kept-a"))
        .await
        .expect("store")
        .expect("record");

    n2.abort().await;
    cluster.nodes.retain(|n| n.id() != n2.id());
    let n2 = Node::start(config(&cluster), registry())
        .await
        .expect("restarted");
    let mut events = n2.recovery_events();
    cluster.nodes.push(n2.clone());
    cluster.link().await;
    let mut back: Vec<UnitId> = rooms.iter().cloned().map(UnitId::Spot).collect();
    back.push(UnitId::Actor(player.clone()));
    let mut all = back.clone();
    all.push(unit("pinned-a"));
    completed(&mut events, &all).await;

    for id in &back {
        assert!(n2.hosts(id), "{id} runs on the restarted node");
        assert!(!n1.hosts(id), "{id} runs nowhere else");
    }
    for room in &rooms {
        assert_eq!(
            n1.request::<u64, u64>(room, 1, T).await,
            Ok(1),
            "{room} answers again, started fresh"
        );
    }
    let after = n1
        .read_record(&unit("kept-a"))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(after.owner, *n2.id());
    assert_eq!(after.owner_generation, before.owner_generation + 1);
    assert_eq!(after.lease_generation, n2.lease().generation);
    assert_ne!(after.object_generation, before.object_generation);
    // A unit that is not recoverable has its id freed, as after any crash.
    assert!(
        n1.read_record(&unit("pinned-a"))
            .await
            .expect("store")
            .is_none()
    );
    n1.shutdown().await;
    n2.shutdown().await;
}

/// A node taken for dead that starts again while the coordinator's recovery pass runs: the pass
/// works from the membership read before the restart, and must not take the new process's
/// descriptor for the dead one's. Its peers keep it, and their links to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_during_a_recovery_pass_keeps_its_descriptor_and_its_peers() {
    let store = FaultyStore::new(Arc::new(MemoryStore::new()));
    let mut cluster = Cluster::start_on(1, store.clone(), registry).await;
    let config = |cluster: &Cluster| {
        let mut config = cluster.config("n2");
        config.lease_ttl = Duration::from_millis(600);
        config
    };
    let n2 = cluster.add_with(config(&cluster), registry()).await;
    let n3 = cluster.add("n3", registry()).await;
    let n1 = cluster.nodes[0].clone();
    n2.create_spot_on(n2.id(), "room", &spot("r"))
        .await
        .expect("room");
    let mut events = n1.recovery_events();
    n2.abort().await;
    cluster.nodes.retain(|n| n.id() != n2.id());
    completed(&mut events, &[unit("r")]).await;
    // The coordinator reads the membership no more: its view is the one a pass works from.
    store.hold_keys(&node_key(n1.id()));
    store.wait_held().await;

    let mut again = config(&cluster);
    // It writes its descriptor once, as it starts, within this test.
    again.refresh = Duration::from_secs(60);
    let n2 = Node::start(again, registry()).await.expect("restarted");
    n3.refresh_membership().await.expect("membership read");
    n3.wait_peer_ready(n2.id()).await.expect("n3 links to n2");
    n1.recover_now().await.expect("pass");

    n3.refresh_membership().await.expect("membership read");
    assert!(
        n3.cluster_view().iter().any(|d| d.node == *n2.id()),
        "n3 still counts the restarted n2 in"
    );
    n3.wait_peer_ready(n2.id())
        .await
        .expect("n3 still links to n2");
    let descriptor = store.get(&node_key(n2.id())).await.expect("store");
    assert!(descriptor.is_some(), "n2's descriptor is in the store");
    store.release();
    cluster.nodes.push(n2);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_that_fails_is_retried_until_it_lands() {
    let flaky = Arc::new(AtomicBool::new(false));
    let f = flaky.clone();
    let mut cluster = Cluster::start(1, move || registry_with(f.clone())).await;
    let mut config = cluster.config("n2");
    config.lease_ttl = Duration::from_millis(600);
    let n2 = cluster.add_with(config, registry_with(flaky.clone())).await;
    let n1 = cluster.nodes[0].clone();
    n2.create_spot_on(n2.id(), "flaky", &spot("f"))
        .await
        .expect("created");
    let mut events = n1.recovery_events();
    flaky.store(true, Ordering::SeqCst);
    n2.abort().await;
    // The first pass fails to build it and says so; a later pass lands it.
    loop {
        let event = tokio::time::timeout(T, events.recv())
            .await
            .expect("event")
            .expect("open");
        if let RecoveryEvent::Failed { ids, .. } = &event {
            assert_eq!(ids, &vec![unit("f")]);
            break;
        }
    }
    completed(&mut events, &[unit("f")]).await;
    assert!(n1.hosts(&unit("f")));
    n1.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_units_come_back_eagerly_after_a_cold_start() {
    let cluster = Cluster::start(1, registry).await;
    let n1 = cluster.nodes[0].clone();
    let _: u64 = n1
        .request(Target::instance("kept", spot("kept")), 1u64, T)
        .await
        .expect("kept");
    let _: u64 = n1
        .request(Target::instance("lazy", spot("lazy")), 1u64, T)
        .await
        .expect("lazy");
    let store = cluster.store.clone();
    cluster.shutdown().await;
    // The whole cluster was down; a new node comes up on the same store.
    let cold = Cluster::start_on(1, store, registry).await;
    let n = cold.nodes[0].clone();
    let mut events = n.recovery_events();
    if !n.hosts(&unit("kept")) {
        completed(&mut events, &[unit("kept")]).await;
    }
    assert!(n.hosts(&unit("kept")), "brought back without a message");
    assert!(
        !n.hosts(&unit("lazy")),
        "a plain instance waits for its next message"
    );
    cold.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_switched_to_not_recoverable_is_freed_not_rebuilt() {
    let mut cluster = Cluster::start(1, registry).await;
    let mut config = cluster.config("n2");
    config.lease_ttl = Duration::from_millis(600);
    let n2 = cluster.add_with(config, registry()).await;
    let n1 = cluster.nodes[0].clone();
    for id in ["keep", "drop"] {
        n2.create_spot_on(n2.id(), "room", &spot(id))
            .await
            .expect("room");
    }
    n1.set_recoverable(&unit("drop"), false)
        .await
        .expect("switched");
    assert!(matches!(
        n1.set_recoverable(&unit("nobody"), false).await,
        Err(ferry::UnitError::UnknownId { .. })
    ));
    let mut events = n1.recovery_events();
    n2.abort().await;
    completed(&mut events, &[unit("keep"), unit("drop")]).await;
    assert!(n1.hosts(&unit("keep")));
    assert!(!n1.hosts(&unit("drop")));
    assert!(
        n1.read_record(&unit("drop"))
            .await
            .expect("store")
            .is_none()
    );
    n1.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_without_room_gets_no_rebuilt_unit() {
    let mut cluster = Cluster::start(1, registry).await;
    // n0 takes no unit; the lowest id, it coordinates recovery.
    let mut config = cluster.config("n0");
    config.capacity = 0;
    let n0 = cluster.add_with(config, registry()).await;
    let mut config = cluster.config("n9");
    config.lease_ttl = Duration::from_millis(600);
    let n9 = cluster.add_with(config, registry()).await;
    let rooms: Vec<UnitId> = (0..4).map(|i| unit(&format!("room-{i}"))).collect();
    for r in &rooms {
        let UnitId::Spot(s) = r else { unreachable!() };
        n9.create_spot_on(n9.id(), "room", s).await.expect("room");
    }
    let mut events = n0.recovery_events();
    n9.abort().await;
    completed(&mut events, &rooms).await;
    let n1 = &cluster.nodes[0];
    assert_eq!(n0.unit_count(), 0, "capacity 0: none rebuilt there");
    assert_eq!(
        n1.unit_count(),
        rooms.len(),
        "all rebuilt on the node with room"
    );
    n0.shutdown().await;
    n1.shutdown().await;
}

/// Rooms whose restores go through `hooked`.
fn hooked_rooms(hooked: Hooked) -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", |_| Counter::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(hooked))),
    );
    reg
}

/// Moves room "r" (counted up to 5) from n1 to n2 and kills n1 while n2 restores it. Once the
/// returned gate opens, n2 has the unit staged, waiting for a cutover that never comes. n2 takes
/// `n2_capacity` units; `with_n3` adds a third node. Returns n2, n3, n2's recovery events from
/// before n1 died, and the gate.
async fn source_dies_mid_move(
    n2_capacity: u64,
    with_n3: bool,
) -> (Node, Option<Node>, broadcast::Receiver<RecoveryEvent>, Gate) {
    let (hooked, gate) = Gate::new(false);
    let mut cluster = Cluster::start(0, registry).await;
    let mut config = cluster.config("n1");
    config.lease_ttl = Duration::from_millis(600);
    let n1 = cluster
        .add_with(config, hooked_rooms(Hooked::default()))
        .await;
    let mut config = cluster.config("n2");
    config.capacity = n2_capacity;
    let n2 = cluster.add_with(config, hooked_rooms(hooked)).await;
    let n3 = if with_n3 {
        let config = cluster.config("n3");
        Some(
            cluster
                .add_with(config, hooked_rooms(Hooked::default()))
                .await,
        )
    } else {
        None
    };
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r).await.expect("room");
    let _: u64 = n1.request(&r, 5u64, T).await.expect("counted");
    let mover = {
        let (n1, id, to) = (n1.clone(), unit("r"), n2.id().clone());
        tokio::spawn(async move { n1.move_unit(&id, Some(to)).await })
    };
    gate.wait_started().await;
    let events = n2.recovery_events();
    n1.abort().await;
    mover.abort();
    (n2, n3, events, gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_unit_staged_on_a_survivor_when_its_source_died_is_rebuilt_there_at_once() {
    // Recovery does not wait for n2 to give its staged copy up: it rebuilds the unit there now.
    let (n2, _, mut events, gate) = source_dies_mid_move(1_000, false).await;
    gate.open();
    let id = unit("r");
    completed(&mut events, std::slice::from_ref(&id)).await;
    let record = n2.read_record(&id).await.expect("store").expect("record");
    assert_eq!(record.owner, *n2.id(), "rebuilt on n2, not just reported");
    assert!(n2.hosts(&id));
    assert_eq!(
        n2.request::<u64, u64>(&spot("r"), 0, T).await,
        Ok(0),
        "a fresh start"
    );
    n2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_staged_by_a_dead_source_is_given_up_when_the_unit_is_rebuilt_elsewhere() {
    // n2 has no room for a rebuilt unit: recovery puts it on n3.
    let (n2, n3, mut events, gate) = source_dies_mid_move(0, true).await;
    gate.open();
    let n3 = n3.expect("n3 started");
    let id = unit("r");
    completed(&mut events, std::slice::from_ref(&id)).await;
    assert!(n3.hosts(&id), "rebuilt on n3");
    // n2 saw n1 gone: it gives its staged copy up at once, not when its wait for a cutover ends.
    tokio::time::timeout(T, async {
        while n2.hosts(&id) {
            n2.refresh_membership().await.expect("membership read");
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("n2 gave its copy up");
    n2.shutdown().await;
    n3.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_whose_move_was_given_up_during_its_restore_does_not_stay_behind() {
    let (n2, n3, mut events, gate) = source_dies_mid_move(0, true).await;
    let n3 = n3.expect("n3 started");
    let id = unit("r");
    // n2 coordinates: it read n1 gone, and gave the move up, before the pass that rebuilt the
    // unit on n3. Only then does its restore end.
    completed(&mut events, std::slice::from_ref(&id)).await;
    assert!(n3.hosts(&id));
    gate.open();
    // The late copy must not stay on n2, gated, keeping what n2 sends to the unit: every request
    // from n2 reaches the rebuilt unit.
    for i in 1..=20 {
        assert_eq!(n2.request::<u64, u64>(&spot("r"), 1, T).await, Ok(i));
    }
    tokio::time::timeout(T, async {
        while n2.hosts(&id) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("n2 dropped the late copy");
    n2.shutdown().await;
    n3.shutdown().await;
}

/// A SpotWide room that answers with its members and the joins its `on_member_joined` saw.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Club {
    joined: Vec<ActorId>,
}

impl Behavior for Club {
    type Msg = u8;
    type Reply = (Vec<ActorId>, Vec<ActorId>);

    fn handle(&mut self, ctx: &mut Ctx<'_>, _: u8) -> (Vec<ActorId>, Vec<ActorId>) {
        (ctx.members().cloned().collect(), self.joined.clone())
    }

    fn on_member_joined(&mut self, _ctx: &mut Ctx<'_>, actor: &ActorId) {
        self.joined.push(actor.clone());
    }
}

/// A member that answers with the spot it is in and the one its `on_joined` saw.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Member {
    joined: Option<SpotId>,
}

impl Behavior for Member {
    type Msg = u8;
    type Reply = (Option<SpotId>, Option<SpotId>);

    fn handle(&mut self, ctx: &mut Ctx<'_>, _: u8) -> (Option<SpotId>, Option<SpotId>) {
        (ctx.spot().cloned(), self.joined.clone())
    }

    fn on_joined(&mut self, _ctx: &mut Ctx<'_>, spot: &SpotId) {
        self.joined = Some(spot.clone());
    }
}

fn clubs() -> Registry {
    let mut reg = Registry::new();
    reg.register(Registration::spot("club", |_| Club::default()).policy(RelocationPolicy::serde()));
    reg.register(
        Registration::actor("member", |_| Member::default()).policy(RelocationPolicy::serde()),
    );
    reg
}

fn actor(id: &str) -> ActorId {
    ActorId::new(id).expect("valid id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_rebuilt_after_a_crash_has_its_members_and_moves_with_them() {
    let mut cluster = Cluster::start(0, clubs).await;
    let mut config = cluster.config("n1");
    config.lease_ttl = Duration::from_millis(600);
    let n1 = cluster.add_with(config, clubs()).await;
    let n2 = cluster.add("n2", clubs()).await;
    let n3 = cluster.add("n3", clubs()).await;
    let (room, gone) = (spot("club"), spot("gone"));
    let (p0, p1, p2) = (actor("p0"), actor("p1"), actor("p2"));
    n1.create_spot_on(n1.id(), "club", &room)
        .await
        .expect("room");
    n1.create_spot_on(n1.id(), "club", &gone)
        .await
        .expect("room");
    for p in [&p0, &p1, &p2] {
        n1.create_actor("member", p).await.expect("member");
    }
    n1.join(&p0, &room).await.expect("joined");
    n1.join(&p1, &room).await.expect("joined");
    n1.join(&p2, &gone).await.expect("joined");
    let record = n1
        .read_record(&UnitId::Actor(p0.clone()))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(record.spot, Some(room.clone()), "the record names the room");
    // `gone` is not rebuilt after a crash: its member comes back on its own.
    n1.set_recoverable(&unit("gone"), false)
        .await
        .expect("switched");

    let mut events = n2.recovery_events();
    n1.abort().await;
    let ids: Vec<UnitId> = [unit("club"), unit("gone")]
        .into_iter()
        .chain([&p0, &p1, &p2].map(|p| UnitId::Actor(p.clone())))
        .collect();
    completed(&mut events, &ids).await;

    let survivors = [&n2, &n3];
    let Some(host) = survivors.into_iter().find(|n| n.hosts(&unit("club"))) else {
        panic!("the room was rebuilt on a survivor");
    };
    for p in [&p0, &p1] {
        assert!(
            host.hosts(&UnitId::Actor(p.clone())),
            "{p} is next to its room"
        );
        let (now, joined) = n2
            .request::<u8, (Option<SpotId>, Option<SpotId>)>(p, 0, T)
            .await
            .expect("member answers");
        assert_eq!(
            (now, joined),
            (Some(room.clone()), Some(room.clone())),
            "{p}"
        );
    }
    let (members, joined) = n2
        .request::<u8, (Vec<ActorId>, Vec<ActorId>)>(&room, 0, T)
        .await
        .expect("room answers");
    assert_eq!(members, vec![p0.clone(), p1.clone()]);
    let mut joined = joined;
    joined.sort();
    assert_eq!(
        joined,
        vec![p0.clone(), p1.clone()],
        "on_member_joined ran once for each"
    );
    // The member of the room that was not rebuilt is back on its own, its record naming no room.
    let (now, _) = n2
        .request::<u8, (Option<SpotId>, Option<SpotId>)>(&p2, 0, T)
        .await
        .expect("p2 answers");
    assert_eq!(now, None);
    let record = n2
        .read_record(&UnitId::Actor(p2.clone()))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(record.spot, None);

    // A later move takes the members along: they share the room's lane.
    let other = if host.id() == n2.id() { &n3 } else { &n2 };
    let report = host
        .move_unit(&unit("club"), Some(other.id().clone()))
        .await
        .expect("move started");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    for id in [
        unit("club"),
        UnitId::Actor(p0.clone()),
        UnitId::Actor(p1.clone()),
    ] {
        assert!(other.hosts(&id), "{id} moved");
        assert!(!host.hosts(&id), "{id} left");
    }
    let record = n2
        .read_record(&UnitId::Actor(p1.clone()))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(
        (record.owner, record.spot),
        (other.id().clone(), Some(room))
    );
    n2.shutdown().await;
    n3.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_change_the_store_did_not_take_says_so_and_the_same_call_records_it() {
    let store = FaultyStore::new(Arc::new(MemoryStore::new()));
    let config = NodeConfig::new(NodeId::new("solo").expect("valid id")).store(store.clone());
    let node = Node::start(config, clubs()).await.expect("node starts");
    let (room, p0) = (spot("club"), actor("p0"));
    node.create_spot_on(node.id(), "club", &room)
        .await
        .expect("room");
    node.create_actor("member", &p0).await.expect("member");
    let p0_unit = UnitId::Actor(p0.clone());
    let recorded = || async {
        let record = node.read_record(&p0_unit).await.expect("store");
        record.expect("record").spot
    };
    let members = || async {
        let (members, _) = node
            .request::<u8, (Vec<ActorId>, Vec<ActorId>)>(&room, 0, T)
            .await
            .expect("room answers");
        members
    };

    // The write lands but its answer is lost: read back, it counts as written.
    store.fault_writes(WriteFault::Unanswered);
    node.join(&p0, &room).await.expect("joined and recorded");
    assert_eq!(recorded().await, Some(room.clone()));
    store.fault_writes(WriteFault::None);
    node.leave(&p0).await.expect("left");
    assert_eq!(recorded().await, None);

    // The store is away: the join took effect, the error says the record lags, and the same join
    // again records it.
    store.fault_writes(WriteFault::Fails);
    let error = node.join(&p0, &room).await.expect_err("not recorded");
    assert!(
        matches!(&error, UnitError::MembershipNotRecorded { id, .. } if *id == p0_unit),
        "{error}"
    );
    assert_eq!(members().await, vec![p0.clone()], "a member all the same");
    assert_eq!(recorded().await, None);
    store.fault_writes(WriteFault::None);
    node.join(&p0, &room).await.expect("recorded now");
    assert_eq!(recorded().await, Some(room.clone()));

    // The same for a leave.
    store.fault_writes(WriteFault::Fails);
    let error = node.leave(&p0).await.expect_err("not recorded");
    assert!(
        matches!(error, UnitError::MembershipNotRecorded { .. }),
        "{error}"
    );
    assert!(members().await.is_empty(), "it left all the same");
    assert_eq!(recorded().await, Some(room.clone()));
    store.fault_writes(WriteFault::None);
    node.leave(&p0).await.expect("recorded now");
    assert_eq!(recorded().await, None);
    assert!(matches!(
        node.leave(&p0).await,
        Err(UnitError::NotAllowed { .. })
    ));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_with_no_serving_node_says_it_waits_and_a_resumed_node_recovers() {
    let mut cluster = Cluster::start(2, registry).await;
    let mut config = cluster.config("n3");
    config.lease_ttl = Duration::from_millis(600);
    let n3 = cluster.add_with(config, registry()).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    n3.create_spot_on(n3.id(), "room", &spot("r"))
        .await
        .expect("room");
    // Both survivors are drained (they host nothing), then the node with the room dies.
    for node in [&n1, &n2] {
        let outcome = node.relocate(ferry::RelocateOptions::default()).await;
        assert_eq!(outcome, ferry::RelocateOutcome::Relocated { moved: 0 });
    }
    let mut events = n1.recovery_events();
    n3.abort().await;

    // Nobody serves, so nobody rebuilds the room: the survivors say why, once.
    let stall = loop {
        let event = tokio::time::timeout(T, events.recv())
            .await
            .expect("a recovery event")
            .expect("open");
        if let RecoveryEvent::Waiting(stall) = event {
            break stall;
        }
    };
    assert_eq!(stall.dead, vec![n3.id().clone()]);
    assert_eq!(stall.units, None);
    assert!(stall.reason.contains("ferry resume"), "{}", stall.reason);
    assert_eq!(n1.recovery_stall(), Some(stall.clone()));
    assert_eq!(hosts(&[&n1, &n2], &unit("r")), 0);

    // Back into service, n1 coordinates recovery: the room comes back on it, and the wait ends.
    n1.resume().await.expect("n1 resumes");
    assert_eq!(n1.state(), ferry::NodeState::Serving);
    completed(&mut events, &[unit("r")]).await;
    loop {
        let event = tokio::time::timeout(T, events.recv())
            .await
            .expect("a recovery event")
            .expect("open");
        assert!(
            !matches!(event, RecoveryEvent::Waiting(_)),
            "told twice: {event:?}"
        );
        if event == RecoveryEvent::Unblocked {
            break;
        }
    }
    assert!(n1.hosts(&unit("r")));
    assert_eq!(n1.recovery_stall(), None);
    // n2 stays drained; resuming a serving node changes nothing.
    assert_eq!(n2.state(), ferry::NodeState::Relocated);
    n1.resume().await.expect("already serving");
    n1.shutdown().await;
    n2.shutdown().await;
}
