//! A crash keeps the room: a node dies, and each of its rooms that keeps a standby comes back on
//! the node holding its copy, with the state, timers, members and queued messages of its last
//! checkpoint; a room whose copy died too starts from nothing, and recovery says so per room.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use ferry::cluster::recovery::Fresh;
use ferry::{
    ActorId, Behavior, Ctx, Node, NodeState, RecoveryEvent, Registration, Registry,
    RelocationPolicy, SpotId, StandbyPolicy, Tick, UnitId,
};
use ferry_tests::cluster::{Backend, Cluster};
use ferry_tests::standby::{holder_of, standbys_hold_everything};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

const T: Duration = Duration::from_secs(10);

/// How long after its start a room's one timer fires: well after the crash and the promotion,
/// so that only a timer the copy kept can fire it.
const LATE: Duration = Duration::from_secs(6);

/// A room that adds what it is told and counts the firings of the timer it set at its start.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    sum: u64,
    fired: u64,
}

#[derive(Debug, Serialize, Deserialize)]
enum TallyMsg {
    Add(u64),
    Read,
}

/// What a room reports: its sum, its timer's firings, and how many members it has.
type Report = (u64, u64, usize);

impl Behavior for Tally {
    type Msg = TallyMsg;
    type Reply = Report;

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timeout("late", LATE);
    }

    fn on_tick(&mut self, _ctx: &mut Ctx<'_>, _tick: &Tick) {
        self.fired += 1;
    }

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: TallyMsg) -> Report {
        if let TallyMsg::Add(n) = msg {
            if n == HELD {
                TELL_GATE.hold();
            }
            self.sum += n;
        }
        (self.sum, self.fired, ctx.members().count())
    }
}

/// A player: it only has to be a member.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Player;

impl Behavior for Player {
    type Msg = ();
    type Reply = ();

    fn handle(&mut self, _ctx: &mut Ctx<'_>, _msg: ()) {}
}

/// The one number whose first `Add` holds its room in the turn until the test lets it go.
const HELD: u64 = 41;

/// Where a room's turn is held: whether a turn entered it, and whether the test opened it.
struct Gate {
    state: Mutex<(bool, bool)>,
    moved: Condvar,
}

/// The gate of the test of a queued tell, and that of the test of a batch of ticks.
static TELL_GATE: Gate = Gate::new();
static TICK_GATE: Gate = Gate::new();

impl Gate {
    const fn new() -> Gate {
        Gate {
            state: Mutex::new((false, false)),
            moved: Condvar::new(),
        }
    }

    /// The first turn to call this waits in it until [`Gate::open`]; later ones pass. It hands
    /// its worker's other tasks to another thread while it waits, as a handler that blocks must.
    fn hold(&'static self) {
        tokio::task::block_in_place(|| {
            let mut gate = self.state.lock().expect("gate");
            if gate.0 {
                return;
            }
            gate.0 = true;
            self.moved.notify_all();
            while !gate.1 {
                gate = self.moved.wait(gate).expect("gate");
            }
        });
    }

    /// Waits until a turn is held at the gate.
    async fn entered(&'static self) {
        tokio::task::spawn_blocking(|| {
            let mut gate = self.state.lock().expect("gate");
            while !gate.0 {
                gate = self.moved.wait(gate).expect("gate");
            }
        })
        .await
        .expect("waited");
    }

    fn open(&self) {
        self.state.lock().expect("gate").1 = true;
        self.moved.notify_all();
    }
}

/// How long after its start a room's two timers fire together: after its first checkpoints.
const SOON: Duration = Duration::from_millis(500);

/// A room whose start sets two timers due at once, and which counts their ticks; the second
/// tick it runs is held at [`TICK_GATE`].
#[derive(Debug, Default, Serialize, Deserialize)]
struct Twice {
    fired: u64,
}

impl Behavior for Twice {
    type Msg = ();
    type Reply = u64;

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timeout("one", SOON);
        ctx.set_timeout("two", SOON);
    }

    fn on_tick(&mut self, _ctx: &mut Ctx<'_>, _tick: &Tick) {
        if self.fired == 1 {
            TICK_GATE.hold();
        }
        self.fired += 1;
    }

    fn handle(&mut self, _ctx: &mut Ctx<'_>, _msg: ()) -> u64 {
        self.fired
    }
}

/// A member that passes each number it is told on to its room.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Speaker;

impl Behavior for Speaker {
    type Msg = u64;
    type Reply = ();

    fn handle(&mut self, ctx: &mut Ctx<'_>, n: u64) {
        let room = ctx.spot().expect("a speaker is in a room");
        ctx.tell(room, TallyMsg::Add(n)).expect("told its room");
    }
}

/// Rooms that keep a periodic standby, rooms that keep a confirmed one (and rooms of two timers
/// that do), rooms that keep none, players and speakers.
fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("kept", |_| Tally::default())
            .policy(RelocationPolicy::serde())
            .standby(StandbyPolicy::Periodic {
                interval: Duration::from_millis(20),
            }),
    );
    reg.register(
        Registration::spot("plain", |_| Tally::default()).policy(RelocationPolicy::serde()),
    );
    reg.register(
        Registration::spot("confirmed", |_| Tally::default())
            .policy(RelocationPolicy::serde())
            .standby(StandbyPolicy::Confirmed),
    );
    reg.register(
        Registration::spot("twice", |_| Twice::default())
            .policy(RelocationPolicy::serde())
            .standby(StandbyPolicy::Confirmed),
    );
    reg.register(Registration::actor("player", |_| Player).policy(RelocationPolicy::serde()));
    reg.register(Registration::actor("speaker", |_| Speaker).policy(RelocationPolicy::serde()));
    reg
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

fn unit(id: &str) -> UnitId {
    UnitId::Spot(spot(id))
}

/// Starts a cluster of n1..n3 whose `short` nodes have a short lease, so that their crash is
/// noticed within a second.
async fn cluster(backend: Backend, short: &[&str]) -> Option<Cluster> {
    let mut cluster = Cluster::start_with(backend, 1, registry).await?;
    for id in ["n2", "n3"] {
        let mut config = cluster.config(id);
        if short.contains(&id) {
            config.lease_ttl = Duration::from_millis(600);
        }
        cluster.add_with(config, registry()).await;
    }
    if short.contains(&"n1") {
        panic!("n1 coordinates recovery in these tests: keep its lease");
    }
    Some(cluster)
}

/// Collects recovery's events until every room in `promoted` was promoted and every room in
/// `fresh` reported as starting from nothing; returns the reasons, room by room, as told.
async fn outcomes(
    events: &mut broadcast::Receiver<RecoveryEvent>,
    promoted: &[UnitId],
    fresh: &[UnitId],
) -> (Vec<UnitId>, Vec<(UnitId, Fresh)>) {
    let (mut got_promoted, mut got_fresh) = (Vec::new(), Vec::new());
    let until = tokio::time::Instant::now() + T;
    while !promoted.iter().all(|p| got_promoted.contains(p))
        || !fresh
            .iter()
            .all(|f| got_fresh.iter().any(|(id, _)| id == f))
    {
        let event = tokio::time::timeout_at(until, events.recv())
            .await
            .unwrap_or_else(|_| panic!("not recovered in time: {got_promoted:?} {got_fresh:?}"))
            .expect("events open");
        match event {
            RecoveryEvent::Promoted { ids, .. } => got_promoted.extend(ids),
            RecoveryEvent::FromNothing { id, why, .. } => got_fresh.push((id, why)),
            _ => {}
        }
    }
    (got_promoted, got_fresh)
}

async fn a_crashed_nodes_rooms_go_on_from_their_standby(backend: Backend) {
    let Some(cluster) = cluster(backend, &["n3"]).await else {
        return;
    };
    let (n1, n3) = (cluster.node("n1").clone(), cluster.node("n3").clone());
    let rooms: Vec<SpotId> = (0..6).map(|i| spot(&format!("kept-{i}"))).collect();
    for (i, room) in rooms.iter().enumerate() {
        n3.create_spot_on(n3.id(), "kept", room)
            .await
            .expect("room");
        let added = i as u64 + 1;
        let report: Report = n1
            .request(room, TallyMsg::Add(added), T)
            .await
            .expect("added");
        assert_eq!(report, (added, 0, 0));
    }
    n3.create_spot_on(n3.id(), "plain", &spot("plain"))
        .await
        .expect("plain room");
    let _: Report = n1
        .request(&spot("plain"), TallyMsg::Add(7), T)
        .await
        .expect("added");
    let player = ActorId::new("p0").expect("id");
    n3.create_actor("player", &player).await.expect("player");
    n3.join(&player, &rooms[0]).await.expect("joined");
    standbys_hold_everything(&n3, rooms.len()).await;
    let mut holders = Vec::new();
    for room in &rooms {
        let holder = holder_of(&*cluster.store, &UnitId::Spot(room.clone())).await;
        assert_ne!(holder, *n3.id(), "never on its owner's node");
        holders.push(holder);
    }
    let before = n1
        .read_record(&unit("kept-0"))
        .await
        .expect("store")
        .expect("record");

    let mut events = n1.recovery_events();
    n3.abort().await;
    let ids: Vec<UnitId> = rooms.iter().cloned().map(UnitId::Spot).collect();
    let (promoted, fresh) = outcomes(&mut events, &ids, &[]).await;
    assert_eq!(
        promoted.len(),
        rooms.len(),
        "each room promoted once: {promoted:?}"
    );
    assert!(
        fresh.is_empty(),
        "a room without standby is not reported: {fresh:?}"
    );

    for (i, (room, holder)) in rooms.iter().zip(&holders).enumerate() {
        let id = UnitId::Spot(room.clone());
        let record = n1.read_record(&id).await.expect("store").expect("record");
        assert_eq!(record.owner, *holder, "{room} runs where its copy was");
        assert!(cluster.node(holder.as_str()).hosts(&id));
        let report: Report = n1.request(room, TallyMsg::Read, T).await.expect("read");
        let members = usize::from(i == 0);
        assert_eq!(
            report,
            (i as u64 + 1, 0, members),
            "{room} kept its state and members"
        );
    }
    // The same room, one owner on: the incarnation goes on, as after a move.
    let after = n1
        .read_record(&unit("kept-0"))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(after.object_generation, before.object_generation);
    assert_eq!(after.owner_generation, before.owner_generation + 1);
    // Its member came with it, and its record says so.
    let member = n1
        .read_record(&UnitId::Actor(player.clone()))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(member.owner, holders[0]);
    assert_eq!(member.spot.as_ref(), Some(&rooms[0]));
    // The room without a standby starts from nothing.
    let plain: Report = n1
        .request(&spot("plain"), TallyMsg::Read, T)
        .await
        .expect("read");
    assert_eq!(plain.0, 0);
    // The timer each room set at its start, pending at the crash, fires on the promoted room.
    for room in &rooms {
        let until = tokio::time::Instant::now() + LATE + T;
        loop {
            let (_, fired, _): Report = n1.request(room, TallyMsg::Read, T).await.expect("read");
            if fired > 0 {
                assert_eq!(fired, 1, "{room}'s timer fires once");
                break;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "{room}'s timer never fired"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    n1.shutdown().await;
    cluster.node("n2").shutdown().await;
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_nodes_rooms_go_on_from_their_standby_on_the_memory_store() {
    a_crashed_nodes_rooms_go_on_from_their_standby(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_nodes_rooms_go_on_from_their_standby_on_redis() {
    a_crashed_nodes_rooms_go_on_from_their_standby(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_whose_standby_died_with_its_owner_starts_from_nothing_and_says_why() {
    let Some(cluster) = cluster(Backend::Memory, &["n2", "n3"]).await else {
        return;
    };
    let (n1, n2, n3) = (
        cluster.node("n1").clone(),
        cluster.node("n2").clone(),
        cluster.node("n3").clone(),
    );
    let rooms: Vec<SpotId> = (0..8).map(|i| spot(&format!("kept-{i}"))).collect();
    for room in &rooms {
        n3.create_spot_on(n3.id(), "kept", room)
            .await
            .expect("room");
        let _: Report = n1.request(room, TallyMsg::Add(3), T).await.expect("added");
    }
    standbys_hold_everything(&n3, rooms.len()).await;
    let (mut on_n1, mut on_n2) = (Vec::new(), Vec::new());
    for room in &rooms {
        let id = UnitId::Spot(room.clone());
        if holder_of(&*cluster.store, &id).await == *n1.id() {
            on_n1.push(id);
        } else {
            on_n2.push(id);
        }
    }
    assert!(
        !on_n1.is_empty() && !on_n2.is_empty(),
        "placement spreads standbys over both nodes: {on_n1:?} {on_n2:?}"
    );

    let mut events = n1.recovery_events();
    n2.abort().await;
    n3.abort().await;
    let (promoted, fresh) = outcomes(&mut events, &on_n1, &on_n2).await;
    assert_eq!(promoted.len(), on_n1.len(), "{promoted:?}");
    let mut reported: Vec<&UnitId> = fresh.iter().map(|(id, _)| id).collect();
    reported.sort();
    let mut lost: Vec<&UnitId> = on_n2.iter().collect();
    lost.sort();
    assert_eq!(reported, lost, "each room whose copy died is reported once");
    assert!(
        fresh.iter().all(|(_, why)| *why == Fresh::HolderGone),
        "{fresh:?}"
    );
    for id in &on_n1 {
        let UnitId::Spot(room) = id else {
            unreachable!()
        };
        let report: Report = n1.request(room, TallyMsg::Read, T).await.expect("read");
        assert_eq!(report.0, 3, "{room} kept its state");
    }
    for id in &on_n2 {
        let UnitId::Spot(room) = id else {
            unreachable!()
        };
        let report: Report = n1.request(room, TallyMsg::Read, T).await.expect("read");
        assert_eq!(report.0, 0, "{room} starts from nothing");
    }
    n1.shutdown().await;
    drop(cluster);
}

/// Once the standby of `owner`'s one room holds every turn but the one held at `gate`, aborts
/// `owner` and lets that turn end only once it is fenced, where no standby hears of it; returns
/// once `watcher` saw the room promoted.
async fn crash_in_the_held_turn(watcher: &Node, owner: &Node, gate: &'static Gate, room: &SpotId) {
    standbys_hold_everything(owner, 1).await;
    let mut events = watcher.recovery_events();
    let mut state = owner.watch_state();
    let abort = tokio::spawn({
        let owner = owner.clone();
        async move { owner.abort().await }
    });
    tokio::time::timeout(T, state.wait_for(|s| *s == NodeState::Error))
        .await
        .expect("the owner fenced in time")
        .expect("the owner's state");
    gate.open();
    tokio::time::timeout(T, abort)
        .await
        .expect("the owner aborted in time")
        .expect("the owner aborted");
    let id = UnitId::Spot(room.clone());
    outcomes(&mut events, std::slice::from_ref(&id), &[]).await;
}

/// A member's turn tells its room; the room's standby holds that turn, with the tell still
/// queued, and the owner dies while the room's own turn on it runs: the promoted copy runs the
/// tell, once. (Without the queue in the checkpoint the copy had the member's turn and never the
/// room's: what the member's client was told had happened was lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tell_queued_at_the_last_checkpoint_runs_once_on_the_promoted_room() {
    let Some(cluster) = cluster(Backend::Memory, &["n3"]).await else {
        return;
    };
    let (n1, n3) = (cluster.node("n1").clone(), cluster.node("n3").clone());
    let room = spot("confirmed-0");
    n3.create_spot_on(n3.id(), "confirmed", &room)
        .await
        .expect("room");
    let speaker = ActorId::new("speaker").expect("id");
    n3.create_actor("speaker", &speaker).await.expect("speaker");
    n3.join(&speaker, &room).await.expect("joined");
    standbys_hold_everything(&n3, 1).await;

    n1.tell(&speaker, HELD).expect("told");
    // The room runs the tell and is held in that turn: the speaker's turn is the last its
    // standby can hold.
    tokio::time::timeout(T, TELL_GATE.entered())
        .await
        .expect("the room runs the speaker's tell");
    crash_in_the_held_turn(&n1, &n3, &TELL_GATE, &room).await;
    let report: Report = n1.request(&room, TallyMsg::Read, T).await.expect("read");
    assert_eq!(
        report,
        (HELD, 0, 1),
        "the tell ran once, and the speaker came along"
    );
    n1.shutdown().await;
    cluster.node("n2").shutdown().await;
    drop(cluster);
}

/// Two timers come due at once: the first tick's turn is checkpointed, and the owner dies while
/// the second's runs. The promoted copy runs the second tick, once. (Run from a list of their
/// own, the ticks after a checkpoint were in no image, and the copy never ran the second: its
/// timer was spent and its tick lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tick_due_with_another_at_the_last_checkpoint_runs_once_on_the_promoted_room() {
    let Some(cluster) = cluster(Backend::Memory, &["n3"]).await else {
        return;
    };
    let (n1, n3) = (cluster.node("n1").clone(), cluster.node("n3").clone());
    let room = spot("twice-0");
    n3.create_spot_on(n3.id(), "twice", &room)
        .await
        .expect("room");
    standbys_hold_everything(&n3, 1).await;
    // The first tick ran and the room is held in the second's turn: the first is the last turn
    // its standby can hold.
    tokio::time::timeout(T, TICK_GATE.entered())
        .await
        .expect("the room runs its second tick");
    crash_in_the_held_turn(&n1, &n3, &TICK_GATE, &room).await;
    let fired: u64 = n1.request(&room, (), T).await.expect("read");
    assert_eq!(
        fired, 2,
        "each timer fired once, the second on the promoted room"
    );
    n1.shutdown().await;
    cluster.node("n2").shutdown().await;
    drop(cluster);
}
