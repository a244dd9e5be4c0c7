//! Warm standby over real QUIC: a room that keeps a standby has its copy on the node placement
//! names, and the store's standby record names that node; checkpoints ship only what changed; a
//! holder that leaves is replaced in a new series; a room that moves is checkpointed by its new
//! owner and its old copy dropped; a room without a standby ships nothing; and in confirmed mode a
//! reply leaves its room's node only once the store names a series that holds its turn.

use std::sync::OnceLock;
use std::time::Duration;

use ferry::client::{Client, ClientEvent};
use ferry::{
    ActorId, Behavior, Ctx, ExecutionMode, Node, NodeId, Registration, RegistrationError, Registry,
    RelocationPolicy, SessionLimits, SpotId, StandbyPolicy, StandbyStatus, StartError, UnitId,
};
use ferry_core::authority::standby_key;
use ferry_core::standby::placement;
use ferry_core::standby::promotion::Named;
use ferry_tests::cluster::{Backend, Cluster};
use ferry_tests::player::{PlayerMsg, PlayerPush, Room};
use ferry_tests::sessions::Gateways;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

const T: Duration = Duration::from_secs(10);

/// The checkpoint block: what one changed byte costs a checkpoint.
const BLOCK: usize = ferry_core::standby::checkpoints::BLOCK;

const MIB: usize = 1 << 20;

/// A room with a blob of state.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Blob {
    blob: Vec<u8>,
    count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    /// Makes the blob `len` bytes.
    Fill { len: usize },
    /// Changes one byte in block `block` of the blob.
    Touch { block: usize },
    /// Counts one message.
    Add,
    /// Answers the count, changing nothing.
    Get,
    /// Counts one message, and tells the test it ran ([`marked`]).
    Mark,
}

impl Behavior for Blob {
    type Msg = Cmd;
    type Reply = u64;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, msg: Cmd) -> u64 {
        match msg {
            Cmd::Fill { len } => self.blob = (0..len).map(|i| (i % 251) as u8).collect(),
            Cmd::Touch { block } => {
                if let Some(byte) = self.blob.get_mut(block * BLOCK + 7) {
                    *byte = byte.wrapping_add(1);
                }
            }
            Cmd::Add => self.count += 1,
            Cmd::Mark => {
                self.count += 1;
                marked().notify_one();
            }
            Cmd::Get => {}
        }
        self.count
    }
}

const PERIODIC: &str = "periodic";
const CONFIRMED: &str = "confirmed";
const PLAIN: &str = "plain";

fn registry() -> Registry {
    let mut reg = Registry::new();
    let periodic = StandbyPolicy::Periodic {
        interval: Duration::from_millis(20),
    };
    for (kind, standby) in [
        (PERIODIC, periodic),
        (CONFIRMED, StandbyPolicy::Confirmed),
        (PLAIN, StandbyPolicy::None),
    ] {
        reg.register(
            Registration::spot(kind, |_| Blob::default())
                .policy(RelocationPolicy::serde())
                .standby(standby),
        );
    }
    reg
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

/// Waits, in bounded steps, until `ok` holds (the standby exposes its progress as status only).
async fn wait_until(what: &str, mut ok: impl AsyncFnMut() -> bool) {
    for _ in 0..1000 {
        if ok().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}

/// The store's standby record of `room`, if there is one.
async fn named(cluster: &Cluster, room: &UnitId) -> Option<Named> {
    let key = standby_key(room);
    let found = cluster.store.get(&key).await.expect("store answers")?;
    Some(Named::decode(&key, &found.value).expect("a standby record"))
}

/// The node placement names for `room`'s standby while `owner` runs it, as `owner` sees it.
fn holder_of(owner: &Node, room: &UnitId, factory: &str) -> NodeId {
    let view = owner.cluster_view();
    placement::holder(&view, owner.id(), room, factory).expect("a holder")
}

/// The node of a three-node `cluster` that is neither `a` nor `b`.
fn third(cluster: &Cluster, a: &NodeId, b: &NodeId) -> Node {
    cluster
        .nodes
        .iter()
        .find(|n| n.id() != a && n.id() != b)
        .expect("a third node")
        .clone()
}

fn status(cluster: &Cluster, id: &NodeId) -> StandbyStatus {
    cluster.node(id.as_str()).standby_status()
}

/// Whether every turn of every room `owner` runs is held by a standby the store names.
fn all_held(owner: &Node) -> bool {
    let s = owner.standby_status();
    s.rooms > 0 && s.current == s.rooms && s.oldest_unheld.is_none()
}

/// Creates a room of `kind` on `node` with a blob of `len` bytes.
async fn open(node: &Node, kind: &str, id: &SpotId, len: usize) {
    node.create_spot_on(node.id(), kind, id)
        .await
        .expect("room created");
    let _: u64 = node
        .request(id, Cmd::Fill { len }, T)
        .await
        .expect("filled");
}

/// Waits until the store names `holder` as the standby of `room`, in a series of the room's
/// owner generation now.
async fn wait_named(cluster: &Cluster, owner: &Node, room: &UnitId, holder: &NodeId) -> Named {
    let record = owner
        .read_record(room)
        .await
        .expect("store answers")
        .expect("a record");
    wait_until("the store names the standby", async || {
        named(cluster, room)
            .await
            .is_some_and(|n| n.holder == *holder && n.series.generation == record.owner_generation)
    })
    .await;
    let named = named(cluster, room).await.expect("named");
    assert_eq!(named.incarnation, record.object_generation);
    named
}

/// A three-node cluster whose node `n1` runs room `r1` of `kind` with a blob of `len` bytes, once
/// the store names the standby placement chose for it.
struct Held {
    cluster: Cluster,
    owner: Node,
    id: SpotId,
    room: UnitId,
    holder: NodeId,
    named: Named,
}

async fn held_room(kind: &str, len: usize) -> Held {
    let cluster = Cluster::start(3, registry).await;
    let owner = cluster.node("n1").clone();
    let id = spot("r1");
    let room = UnitId::Spot(id.clone());
    open(&owner, kind, &id, len).await;
    let holder = holder_of(&owner, &room, kind);
    let named = wait_named(&cluster, &owner, &room, &holder).await;
    Held {
        cluster,
        owner,
        id,
        room,
        holder,
        named,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_periodic_room_keeps_its_copy_on_the_node_placement_names() {
    let Held {
        cluster,
        owner,
        holder,
        ..
    } = held_room(PERIODIC, 4096).await;
    wait_until("the standby holds every turn", async || all_held(&owner)).await;
    for node in &cluster.nodes {
        let copies = node.standby_status().copies;
        let expected = usize::from(node.id() == &holder);
        assert_eq!(copies, expected, "copies on {}", node.id());
    }
    let s = owner.standby_status();
    assert_eq!((s.rooms, s.current, s.behind), (1, 1, 0));
    assert!(s.checkpoints_sent >= 1 && s.bytes_sent >= 4096);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkpoints_ship_what_changed_and_an_unchanged_room_ships_nothing() {
    let cluster = Cluster::start(3, registry).await;
    let owner = cluster.node("n1").clone();
    let (busy, idle) = (spot("busy"), spot("idle"));
    open(&owner, PERIODIC, &busy, MIB).await;
    open(&owner, PERIODIC, &idle, MIB).await;
    wait_until("both rooms are held whole", async || {
        all_held(&owner) && owner.standby_status().rooms == 2
    })
    .await;
    let before = owner.standby_status();
    assert!(before.bytes_sent >= 2 * MIB as u64);
    const CHANGES: usize = 5;
    for block in 0..CHANGES {
        let sent = owner.standby_status().checkpoints_sent;
        let _: u64 = owner
            .request(&busy, Cmd::Touch { block: block * 3 }, T)
            .await
            .expect("touched");
        // Turns that change nothing: the idle room's checkpoints find nothing to ship.
        let _: u64 = owner.request(&idle, Cmd::Get, T).await.expect("answers");
        wait_until("the change is checkpointed", async || {
            let s = owner.standby_status();
            s.checkpoints_sent > sent && s.oldest_unheld.is_none()
        })
        .await;
    }
    let after = owner.standby_status();
    let shipped = after.bytes_sent - before.bytes_sent;
    assert!(
        shipped >= CHANGES as u64 && shipped <= (CHANGES * 2 * BLOCK) as u64,
        "{CHANGES} one-block changes shipped {shipped} bytes"
    );
    assert!(
        after.checkpoints_sent - before.checkpoints_sent <= CHANGES as u64,
        "the idle room shipped checkpoints"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_that_leaves_is_replaced_in_a_new_series() {
    let Held {
        cluster,
        owner,
        id,
        room,
        holder: first,
        named: was,
    } = held_room(PERIODIC, 64 * 1024).await;
    let other = third(&cluster, owner.id(), &first);
    cluster.node(first.as_str()).shutdown().await;
    let now = wait_named(&cluster, &owner, &room, other.id()).await;
    assert!(now.series > was.series, "{now:?} after {was:?}");
    wait_until("the new holder keeps the copy", async || {
        other.standby_status().copies == 1 && all_held(&owner)
    })
    .await;
    assert_eq!(status(&cluster, &first).copies, 0);
    // The room's turns go on being checkpointed to the new holder.
    let sent = owner.standby_status().checkpoints_sent;
    let _: u64 = owner.request(&id, Cmd::Add, T).await.expect("added");
    wait_until("the turn is held", async || {
        owner.standby_status().checkpoints_sent > sent && all_held(&owner)
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_moved_room_drops_its_old_copy_and_its_new_owner_checkpoints_it() {
    let Held {
        cluster,
        owner,
        id,
        room,
        holder: first,
        named: was,
    } = held_room(PERIODIC, 64 * 1024).await;
    let target = third(&cluster, owner.id(), &first);
    owner
        .move_unit(&room, Some(target.id().clone()))
        .await
        .expect("moved");
    assert!(target.hosts(&room));
    wait_until("the old owner's checkpoints end", async || {
        owner.standby_status().rooms == 0
    })
    .await;
    let holder = holder_of(&target, &room, PERIODIC);
    let now = wait_named(&cluster, &target, &room, &holder).await;
    assert!(now.series.generation > was.series.generation);
    wait_until("one copy, on the new owner's holder", async || {
        let copies: Vec<usize> = cluster
            .nodes
            .iter()
            .map(|n| n.standby_status().copies)
            .collect();
        copies.iter().sum::<usize>() == 1 && status(&cluster, &holder).copies == 1
    })
    .await;
    let _: u64 = target.request(&id, Cmd::Add, T).await.expect("added");
    wait_until("the new owner's turns are held", async || all_held(&target)).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_shut_down_in_order_leaves_no_copy_on_its_holder() {
    let Held {
        cluster,
        owner,
        holder,
        ..
    } = held_room(PERIODIC, 4096).await;
    assert_eq!(status(&cluster, &holder).copies, 1);
    owner.shutdown().await;
    wait_until(
        "the holder drops the copy of a room that ended",
        async || status(&cluster, &holder).copies == 0,
    )
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_room_without_a_standby_ships_nothing() {
    let cluster = Cluster::start(3, registry).await;
    let owner = cluster.node("n1").clone();
    let id = spot("plain");
    open(&owner, PLAIN, &id, 64 * 1024).await;
    for _ in 0..20 {
        let _: u64 = owner.request(&id, Cmd::Add, T).await.expect("added");
    }
    // A checkpoint would have been taken at the boundary of the turn that answered.
    for node in &cluster.nodes {
        assert_eq!(
            node.standby_status(),
            StandbyStatus::default(),
            "{}",
            node.id()
        );
    }
    assert!(named(&cluster, &UnitId::Spot(id)).await.is_none());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_standby_record_is_written_on_redis() {
    let Some(cluster) = Cluster::start_with(Backend::Redis, 2, registry).await else {
        return;
    };
    let owner = cluster.node("n1").clone();
    let id = spot("r1");
    let room = UnitId::Spot(id.clone());
    open(&owner, PERIODIC, &id, 4096).await;
    let holder = holder_of(&owner, &room, PERIODIC);
    assert_eq!(holder.as_str(), "n2");
    wait_named(&cluster, &owner, &room, &holder).await;
    wait_until("the copy is held", async || {
        all_held(&owner) && status(&cluster, &holder).copies == 1
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_standby_without_state_is_refused_at_start() {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("recreated", |_| Blob::default())
            .policy(RelocationPolicy::Recreate)
            .standby(StandbyPolicy::periodic()),
    );
    let config = ferry::NodeConfig::new(NodeId::new("n1").expect("id"));
    let Err(StartError::Registration(problems)) = Node::start(config, reg).await else {
        panic!("the registration was not refused");
    };
    assert!(matches!(
        problems.as_slice(),
        [RegistrationError::StandbyWithoutState { type_name, .. }] if type_name == "recreated"
    ));
}

/// Told when a room ran a [`Cmd::Mark`].
fn marked() -> &'static Notify {
    static MARKED: OnceLock<Notify> = OnceLock::new();
    MARKED.get_or_init(Notify::new)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_confirmed_reply_arrives_only_once_the_store_names_a_standby_holding_its_turn() {
    let Held {
        cluster,
        owner,
        id,
        room,
        holder: first,
        named: was,
    } = held_room(CONFIRMED, 64).await;
    let next = third(&cluster, owner.id(), &first).id().clone();
    // The holder crashes: the turn below runs, and its checkpoint goes unanswered. Its lease
    // runs on (it is still in n1's view when the reply arrives): n1 hears nothing for a moment
    // and moves the standby to the third node. What the store says is read the moment the
    // reply arrives.
    cluster.node(first.as_str()).abort().await;
    let (asking, store, key) = (owner.clone(), cluster.store.clone(), standby_key(&room));
    let target = id.clone();
    let reply = tokio::spawn(async move {
        let count: u64 = asking
            .request(&target, Cmd::Mark, T)
            .await
            .expect("replied");
        let found = store.get(&key).await.expect("store answers");
        let named = found.map(|v| Named::decode(&key, &v.value).expect("a standby record"));
        (count, named)
    });
    marked().notified().await;
    let (count, named) = reply.await.expect("joined");
    assert!(
        owner.cluster_view().iter().any(|d| d.node == first),
        "the crashed holder's lease lapsed before the reply: this tested the lease, not silence"
    );
    assert_eq!(count, 1);
    let named = named.expect("the reply arrived while the store named no standby");
    assert_eq!(
        named.holder, next,
        "the reply arrived before the new holder was named"
    );
    assert!(named.series > was.series, "{named:?} after {was:?}");
    assert_eq!(cluster.node(next.as_str()).standby_status().copies, 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_confirmed_room_no_node_can_hold_a_copy_of_replies_once_the_store_names_none() {
    let cluster = Cluster::start(2, registry).await;
    let owner = cluster.node("n1").clone();
    let id = spot("r1");
    let room = UnitId::Spot(id.clone());
    open(&owner, CONFIRMED, &id, 64).await;
    wait_named(&cluster, &owner, &room, cluster.node("n2").id()).await;
    // The only other node leaves: the room plays on alone, unprotected. Its reply goes out once
    // the store no longer names the copy that left (a crash now rebuilds it from nothing rather
    // than promote a copy older than what it told).
    cluster.node("n2").shutdown().await;
    let (asking, store, key) = (owner.clone(), cluster.store.clone(), standby_key(&room));
    let target = id.clone();
    let reply = tokio::spawn(async move {
        let count: u64 = asking
            .request(&target, Cmd::Mark, T)
            .await
            .expect("replied alone");
        (count, store.get(&key).await.expect("store answers"))
    });
    marked().notified().await;
    let (count, named) = reply.await.expect("joined");
    assert_eq!(count, 1);
    assert!(
        named.is_none(),
        "the reply went out while the store named a copy"
    );
    let status = owner.standby_status();
    assert_eq!((status.rooms, status.current), (1, 0), "{status:?}");
    // Every later turn replies at once.
    let count: u64 = owner.request(&id, Cmd::Add, T).await.expect("replied");
    assert_eq!(count, 2);
    cluster.shutdown().await;
}

const CONFIRMED_ROOM: &str = "confirmed-room";

/// The session tests' player and room, and a room of theirs with a confirmed standby.
fn players() -> Registry {
    let mut reg = ferry_tests::player::registry();
    reg.register(
        Registration::spot(CONFIRMED_ROOM, |_| Room)
            .mode(ExecutionMode::SpotWide)
            .policy(RelocationPolicy::serde())
            .standby(StandbyPolicy::Confirmed),
    );
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_confirmed_push_reaches_its_client_only_once_the_store_names_a_standby() {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, players).await;
    let n1 = gateways
        .add(&mut cluster, "n1", players(), SessionLimits::default())
        .await;
    // The nodes that may hold the room's standby have a short lease: a crash of one is soon
    // known to n1.
    for id in ["n2", "n3"] {
        let mut config = cluster.config(id);
        config.lease_ttl = Duration::from_millis(600);
        cluster.add_with(config, players()).await;
    }
    let (id, me) = (spot("cr"), ActorId::new("p").expect("valid id"));
    let room = UnitId::Spot(id.clone());
    n1.create_spot_on(n1.id(), CONFIRMED_ROOM, &id)
        .await
        .expect("room created");
    n1.create_actor("player", &me)
        .await
        .expect("player created");
    n1.join(&me, &id).await.expect("joined");
    let first = holder_of(&n1, &room, CONFIRMED_ROOM);
    let was = wait_named(&cluster, &n1, &room, &first).await;
    let next = ["n2", "n3"]
        .into_iter()
        .find(|n| *n != first.as_str())
        .expect("a third node");
    // The holder crashes: the echo's turn finds no one to hold it until n1 knows.
    cluster.node(first.as_str()).abort().await;
    let mut client = Client::connect(gateways.client(&[&n1]))
        .await
        .expect("connected");
    client.bind(&me).await.expect("bound");
    client.send(&me, &PlayerMsg::Input(0)).expect("sent");
    let echo = client.recv::<PlayerPush>().await.expect("session open");
    // What the store says the moment the push arrived.
    let named = named(&cluster, &room).await;
    let ClientEvent::Push { msg, .. } = echo else {
        panic!("expected the echo, got {echo:?}");
    };
    assert_eq!(msg, PlayerPush::Echo(0));
    let named = named.expect("the push arrived while the store named no standby");
    assert_eq!(
        named.holder.as_str(),
        next,
        "the push arrived before the new holder was named"
    );
    assert!(named.series > was.series, "{named:?} after {was:?}");
    cluster.shutdown().await;
}
