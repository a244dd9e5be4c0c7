//! Redis as studios run it fails over under a cluster at work: a master, a replica that must
//! confirm every write (`wait_replicas=1`) and a sentinel, real redis-servers all, under three
//! nodes whose rooms take tells and requests from clients on other nodes. Once while rooms move
//! round the nodes and once while a node drains, the master is failed over: by `SENTINEL
//! FAILOVER` while it runs, or by killing it (it is then started again, empty, and the sentinel
//! makes it the new master's replica). The store is down meanwhile (the new master has no replica
//! until the old one follows it); rooms run on.
//!
//! After each run: no two nodes ran turns of one room from the same state (every turn is logged
//! with the room's length before it), every acknowledged request ran exactly once and in order,
//! every acknowledged tell (one whose client's next request was answered) ran exactly once and no
//! tell ran twice, the drain moved every room, moves went on after each failover, every room runs
//! on exactly the node its record names, and no node stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use ferry::store::{LocationStore, RedisStore, RedisStoreConfig, StoreUrl};
use ferry::{
    Behavior, Ctx, Node, NodeId, NodeState, Registration, Registry, RelocateOutcome,
    RelocationPolicy, SpotId, UnitId,
};
use ferry_tests::cluster::{Cluster, drain_in_background, move_rooms_round, moves_go_on};
use ferry_tests::invariants::{assert_exactly_once_in_order, assert_runs_where_recorded};
use ferry_tests::redis_sentinel::SentinelGroup;
use serde::{Deserialize, Serialize};

const ROOMS: usize = 6;
/// Moves that must commit after each failover, to show that moves go on.
const MOVES_AFTER: usize = 10;

/// Every turn that grew a room's log, by room and the log's length before it: the node that ran
/// it and the input. Two owners running turns from one state would grow one length twice.
type Turns = BTreeMap<(UnitId, usize), BTreeSet<(NodeId, u64)>>;

/// The turns of every test of this file; each test names its rooms apart.
static TURNS: LazyLock<Mutex<Turns>> = LazyLock::new(Mutex::default);

/// A room that logs the inputs it runs.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Room(Vec<u64>);

impl Behavior for Room {
    type Msg = Option<u64>;
    type Reply = Vec<u64>;

    fn handle(&mut self, ctx: &mut Ctx<'_>, input: Option<u64>) -> Vec<u64> {
        if let Some(n) = input {
            let turn = (ctx.id().clone(), self.0.len());
            let by = (ctx.node().id().clone(), n);
            TURNS
                .lock()
                .expect("turns")
                .entry(turn)
                .or_default()
                .insert(by);
            self.0.push(n);
        }
        self.0.clone()
    }
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(Registration::spot("room", |_| Room::default()).policy(RelocationPolicy::serde()));
    reg
}

/// Panics if two turns grew one of `rooms`' logs from the same length.
fn assert_one_owner_ran_each_turn(rooms: &[SpotId]) {
    let rooms: BTreeSet<UnitId> = rooms.iter().cloned().map(UnitId::Spot).collect();
    for ((unit, len), turns) in TURNS.lock().expect("turns").iter() {
        if rooms.contains(unit) {
            assert!(
                turns.len() == 1,
                "{unit} grew from length {len} by {turns:?}: two owners ran turns"
            );
        }
    }
}

/// What one client had acknowledged: requests answered, and tells accepted.
#[derive(Default)]
struct Seen {
    requests: Vec<u64>,
    tells: Vec<u64>,
}

/// Sends `room` a tell (odd numbers) and then a request (even numbers), over and over from
/// `node`, until `stop`.
async fn client(node: Node, room: SpotId, stop: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 2;
        if node.tell(room.clone(), Some(n - 1)).is_ok() {
            seen.tells.push(n - 1);
        }
        let sent = node
            .request::<Option<u64>, Vec<u64>>(room.clone(), Some(n), Duration::from_secs(5))
            .await;
        if sent.is_ok() {
            seen.requests.push(n);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen
}

/// How the master is failed over.
#[derive(Debug, Clone, Copy)]
enum Failover {
    /// `SENTINEL FAILOVER`, while the master runs.
    Forced,
    /// SIGKILL to the master; once the sentinel promoted the replica, the killed server starts
    /// again, empty.
    Killed,
}

impl Failover {
    /// Starts the failover and returns the master it leaves, once that master serves no more:
    /// killed, or no longer followed by the replica, which took over.
    async fn begin(self, group: &mut SentinelGroup) -> usize {
        match self {
            Failover::Forced => {
                let old = group.begin_failover().await;
                group.await_promoted(old).await;
                old
            }
            Failover::Killed => group.kill_master().await,
        }
    }

    /// Waits until the sentinel promoted the replica and ended the failover (the killed master is
    /// then started again), and until the new master has its replica: the store is up again.
    async fn settle(self, group: &mut SentinelGroup, old: usize) {
        group.await_failover_ended(old).await;
        if let Failover::Killed = self {
            group.restart(old).await;
        }
        group.await_replicas_online(1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_sentinel_failover_during_moves_and_a_drain_keeps_one_owner_and_every_message() {
    let Some(mut group) = SentinelGroup::start_or_skip(1).await else {
        return;
    };
    tokio::time::timeout(
        Duration::from_secs(240),
        failover_under_load(&mut group, Failover::Forced, "forced"),
    )
    .await
    .expect("the failover test ends within 240 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_master_during_moves_and_a_drain_keeps_one_owner_and_every_message() {
    let Some(mut group) = SentinelGroup::start_or_skip(1).await else {
        return;
    };
    tokio::time::timeout(
        Duration::from_secs(240),
        failover_under_load(&mut group, Failover::Killed, "killed"),
    )
    .await
    .expect("the failover test ends within 240 s");
}

async fn failover_under_load(group: &mut SentinelGroup, failover: Failover, name: &str) {
    let url = format!("{}?wait_replicas=1", group.url());
    let Ok(StoreUrl::RedisSentinel { target, wait }) = StoreUrl::parse(&url) else {
        panic!("{url} is a sentinel url");
    };
    let config = RedisStoreConfig {
        wait,
        ..RedisStoreConfig::new(name)
    };
    let store: Arc<dyn LocationStore> = Arc::new(
        RedisStore::connect_sentinel(&target, config)
            .await
            .expect("the store, through the sentinel"),
    );
    let cluster = Cluster::start_on(3, store.clone(), registry).await;
    let nodes = cluster.nodes.clone();
    let rooms: Vec<SpotId> = (0..ROOMS)
        .map(|i| SpotId::new(format!("{name}-room-{i}")).expect("id"))
        .collect();
    for (i, room) in rooms.iter().enumerate() {
        nodes[0]
            .create_spot_on(nodes[i % nodes.len()].id(), "room", room)
            .await
            .expect("room created");
    }
    let mut undelivered: Vec<_> = nodes.iter().map(Node::undelivered_events).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = rooms
        .iter()
        .enumerate()
        .map(|(i, room)| {
            // Each room is played from another node than its own: tells and requests cross the
            // mesh, and follow the room when it moves.
            let from = nodes[(i + 1) % nodes.len()].clone();
            tokio::spawn(client(from, room.clone(), stop.clone()))
        })
        .collect();

    // Rooms move round the nodes; the master fails over; moves go on once the store is back.
    let stop_moving = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicUsize::new(0));
    let moving = tokio::spawn(move_rooms_round(
        nodes.clone(),
        rooms.clone(),
        stop_moving.clone(),
        moved.clone(),
    ));
    moves_go_on(
        &moved,
        MOVES_AFTER,
        Duration::from_secs(60),
        "before the failover",
    )
    .await;
    let old = failover.begin(group).await;
    failover.settle(group, old).await;
    moves_go_on(
        &moved,
        MOVES_AFTER,
        Duration::from_secs(60),
        "after the failover",
    )
    .await;
    stop_moving.store(true, Ordering::Relaxed);
    moving.await.expect("mover");

    // The master fails over again, and a node drains while the store is down.
    let drained = &nodes[0];
    let old = failover.begin(group).await;
    let draining = drain_in_background(drained, Duration::from_secs(90));
    failover.settle(group, old).await;
    let outcome = draining.await.expect("drain");
    assert!(
        matches!(outcome, RelocateOutcome::Relocated { .. }),
        "the drain moved every room: {outcome:?}"
    );
    assert_eq!(drained.unit_count(), 0, "the drained node hosts nothing");

    // Load a while longer on the store as it is now, then stop.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let mut seen = Vec::new();
    for client in clients {
        seen.push(client.await.expect("client"));
    }

    for node in &nodes {
        let state = node.state();
        assert!(
            matches!(state, NodeState::Serving | NodeState::Relocated),
            "{} stopped: {state:?}",
            node.id()
        );
    }
    assert_one_owner_ran_each_turn(&rooms);

    // Tells a node reported lost, by their message.
    let mut reported: BTreeSet<(UnitId, u64)> = BTreeSet::new();
    for events in &mut undelivered {
        while let Ok(lost) = events.try_recv() {
            if let Ok(Some(n)) = lost.message::<Option<u64>>() {
                reported.insert((lost.to.clone(), n));
            }
        }
    }
    let mut unconfirmed_missing = 0;
    for (room, seen) in rooms.iter().zip(&seen) {
        let id = UnitId::Spot(room.clone());
        assert_runs_where_recorded(&nodes, store.as_ref(), &id).await;
        let ran = nodes[1]
            .request::<Option<u64>, Vec<u64>>(room.clone(), None, Duration::from_secs(5))
            .await
            .expect("room answers");
        assert!(!seen.requests.is_empty(), "{room} answered no request");
        assert_exactly_once_in_order(room, &seen.requests, &ran);
        // A tell is acknowledged by the answer to the request its client sent next: the room
        // runs one sender's messages in order, so that answer comes after the tell ran. Each
        // acknowledged tell ran exactly once; none ran twice.
        for tell in &seen.tells {
            let times = ran.iter().filter(|n| *n == tell).count();
            let acknowledged = seen.requests.contains(&(tell + 1));
            if reported.contains(&(id.clone(), *tell)) {
                assert_eq!(times, 0, "{room}: tell {tell} was reported lost, yet ran");
            } else if acknowledged {
                assert_eq!(
                    times, 1,
                    "{room}: acknowledged tell {tell} ran {times} times"
                );
            } else {
                assert!(times <= 1, "{room}: tell {tell} ran {times} times");
                unconfirmed_missing += usize::from(times == 0);
            }
        }
    }
    let dropped: u64 = nodes.iter().map(Node::tells_dropped_on_lookup).sum();
    println!(
        "{name}: {} moves committed; tells reported lost {}, dropped on lookup {dropped}, \
         unacknowledged and never run {unconfirmed_missing}",
        moved.load(Ordering::Relaxed),
        reported.len()
    );
    cluster.shutdown().await;
}
