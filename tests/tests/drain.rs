//! Draining a whole node: ready units first, spread evenly, version-aware, blocked with a reason.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use ferry::store::RedisStore;
use ferry::{
    Behavior, BlockedReason, Ctx, NodeState, ReadinessMode, ReadyOutcome, Registration, Registry,
    RelocateMode, RelocateOptions, RelocateOutcome, RelocationEvent, RelocationPolicy, SpotId,
    UnitId,
};
use ferry_tests::cluster::{Backend, Cluster};
use ferry_tests::redis_server::RedisServer;
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(10);

/// A round: plays until told to settle, and says where it learned it was relocated.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Round {
    inputs: Vec<u32>,
    settled: bool,
    relocated: u32,
    continued: u32,
    blob: Vec<u8>,
    /// In replies: the blob's length and byte sum (the blob itself stays home).
    blob_len: usize,
    blob_sum: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Play {
    Input(u32),
    Settle,
    Grow(usize),
    Get,
}

impl Behavior for Round {
    type Msg = Play;
    type Reply = Round;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: Play) -> Round {
        match msg {
            Play::Input(n) => self.inputs.push(n),
            Play::Settle => {
                self.settled = true;
                // Only where it applies: plain rooms refuse it, and that is fine here.
                let _ = ctx.relocation_ready_defer();
                // A settled round stays safe to move: every tick from now on says so again.
                ctx.set_timer("settled", Duration::from_millis(10), Default::default());
            }
            Play::Grow(n) => self.blob = (0..n).map(|i| (i % 251) as u8).collect(),
            Play::Get => {}
        }
        Round {
            blob: Vec::new(),
            blob_len: self.blob.len(),
            blob_sum: self.blob.iter().map(|b| u64::from(*b)).sum(),
            ..self.clone()
        }
    }

    fn on_tick(&mut self, ctx: &mut Ctx<'_>, _tick: &ferry::Tick) {
        if self.settled {
            let _ = ctx.relocation_ready_defer();
        }
    }

    fn on_relocation_ready_completed(&mut self, _ctx: &mut Ctx<'_>, outcome: ReadyOutcome) {
        match outcome {
            ReadyOutcome::Relocated => self.relocated += 1,
            ReadyOutcome::Continued => self.continued += 1,
        }
    }
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", |_| Round::default()).policy(RelocationPolicy::serde()),
    );
    reg.register(
        Registration::spot("round", |_| Round::default())
            .policy(RelocationPolicy::serde())
            .readiness(ReadinessMode::ApplicationSignaled),
    );
    reg.register(
        Registration::spot("pinned", |_| Round::default()).policy(RelocationPolicy::Disabled),
    );
    reg
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

fn opts(deadline: Duration) -> RelocateOptions {
    RelocateOptions {
        mode: RelocateMode::PlannedMaintenance,
        deadline,
    }
}

async fn get(node: &ferry::Node, id: &SpotId) -> Round {
    node.request(id, Play::Get, T).await.expect("answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_moves_ready_rooms_first_and_slow_ones_when_they_settle() {
    let cluster = Cluster::start(3, registry).await;
    let (n1, n2, n3) = (
        cluster.nodes[0].clone(),
        &cluster.nodes[1],
        &cluster.nodes[2],
    );
    let ready: Vec<SpotId> = (0..70).map(|i| spot(&format!("room-{i}"))).collect();
    let slow: Vec<SpotId> = (0..10).map(|i| spot(&format!("round-{i}"))).collect();
    for r in &ready {
        n1.create_spot_on(n1.id(), "room", r).await.expect("room");
        n1.tell(r, Play::Input(1)).expect("told");
    }
    for r in &slow {
        n1.create_spot_on(n1.id(), "round", r).await.expect("round");
        n1.tell(r, Play::Input(1)).expect("told");
    }
    let mut events = n1.relocation_events();
    let mut status = n1.watch_status();
    let drain = {
        let n1 = n1.clone();
        tokio::spawn(async move { n1.relocate(opts(Duration::from_secs(30))).await })
    };
    // Every ready room moves while the rounds are still playing.
    status.wait_for(|s| s.moved == 70).await.expect("progress");
    for r in &slow {
        assert!(
            n1.hosts(&UnitId::Spot(r.clone())),
            "{r} waits for its round to settle"
        );
    }
    // A round in play keeps taking input, here, while the drain waits for it.
    let _: Round = n1
        .request(&slow[0], Play::Input(2), T)
        .await
        .expect("played");
    for r in &slow {
        n1.tell(r, Play::Settle).expect("told");
    }
    let outcome = drain.await.expect("drain ran");
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: 80 });
    assert_eq!(n1.state(), NodeState::Relocated);
    assert_eq!(n1.unit_count(), 0);
    assert!(n1.watch_status().borrow().safe_to_shutdown);

    let mut order = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let RelocationEvent::UnitMoved(report) = event {
            order.push(report.unit);
        }
    }
    assert_eq!(order.len(), 80);
    assert!(
        order[..70].iter().all(|u| u.as_str().starts_with("room-")),
        "ready rooms first"
    );
    // Spread evenly over the two other nodes.
    let (on2, on3) = (n2.unit_count(), n3.unit_count());
    assert_eq!(on2 + on3, 80);
    assert!(on2.abs_diff(on3) <= 1, "{on2} vs {on3}");
    // State came along, and each round heard it was relocated before its next turn.
    let round = get(n2, &slow[0]).await;
    assert_eq!(round.inputs, vec![1, 2]);
    assert!(round.settled);
    assert_eq!(round.relocated, 1, "exactly one Relocated, on the target");
    assert_eq!(get(n3, &ready[5]).await.inputs, vec![1]);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_settles_with_no_move_prepared_hears_continued() {
    let cluster = Cluster::start(1, registry).await;
    let n1 = &cluster.nodes[0];
    let r = spot("round");
    n1.create_spot_on(n1.id(), "round", &r)
        .await
        .expect("round");
    let _: Round = n1.request(&r, Play::Settle, T).await.expect("settled");
    let round = get(n1, &r).await;
    assert!(round.continued >= 1, "told Continued before its next turn");
    assert_eq!(round.relocated, 0);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_units_block_the_drain_and_keep_running_here() {
    let cluster = Cluster::start(2, registry).await;
    let n1 = &cluster.nodes[0];
    let (room, pinned) = (spot("room"), spot("pinned"));
    n1.create_spot_on(n1.id(), "room", &room)
        .await
        .expect("room");
    n1.create_spot_on(n1.id(), "pinned", &pinned)
        .await
        .expect("pinned");
    let outcome = n1.relocate(opts(Duration::from_secs(10))).await;
    assert_eq!(
        outcome,
        RelocateOutcome::Blocked {
            reason: BlockedReason::RelocationDisabled,
            stayed: vec![UnitId::Spot(pinned.clone())],
        }
    );
    assert_eq!(n1.state(), NodeState::Serving);
    assert!(
        !n1.hosts(&UnitId::Spot(room.clone())),
        "the movable room moved"
    );
    let _: Round = n1
        .request(&pinned, Play::Input(7), T)
        .await
        .expect("still runs here");
    assert_eq!(get(n1, &pinned).await.inputs, vec![7]);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_moves_only_to_nodes_of_the_new_version() {
    let mut cluster = Cluster::start(2, registry).await;
    let v2 = cluster.config("n3").app_version("2");
    cluster.add_with(v2, registry()).await;
    let (n1, n3) = (cluster.nodes[0].clone(), cluster.nodes[2].clone());
    for i in 0..6 {
        n1.create_spot_on(n1.id(), "room", &spot(&format!("r{i}")))
            .await
            .expect("room");
    }
    let outcome = n1
        .relocate(RelocateOptions {
            mode: RelocateMode::RollingUpdate {
                target_version: "2".into(),
            },
            deadline: Duration::from_secs(10),
        })
        .await;
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: 6 });
    assert_eq!(n3.unit_count(), 6, "all on the version-2 node");
    assert_eq!(cluster.nodes[1].unit_count(), 0);
    // Nothing runs version 3: the drain waits for one until its deadline, then says so.
    let r = spot("late");
    n3.create_spot_on(n3.id(), "room", &r).await.expect("room");
    let outcome = n3
        .relocate(RelocateOptions {
            mode: RelocateMode::RollingUpdate {
                target_version: "3".into(),
            },
            deadline: Duration::from_millis(600),
        })
        .await;
    assert!(
        matches!(
            outcome,
            RelocateOutcome::Blocked {
                reason: BlockedReason::TargetUnavailable,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(n3.state(), NodeState::Serving);
    assert!(n3.hosts(&UnitId::Spot(r)));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_drain_joins_the_first_or_is_refused_if_it_differs() {
    let cluster = Cluster::start(2, registry).await;
    let n1 = cluster.nodes[0].clone();
    let r = spot("round");
    n1.create_spot_on(n1.id(), "round", &r)
        .await
        .expect("round");
    let first = {
        let n1 = n1.clone();
        tokio::spawn(async move { n1.relocate(opts(Duration::from_secs(20))).await })
    };
    let mut status = n1.watch_status();
    status
        .wait_for(|s| s.state == NodeState::Relocating && s.total == 1)
        .await
        .expect("started");
    let other = n1.relocate(opts(Duration::from_secs(5))).await;
    assert_eq!(
        other,
        RelocateOutcome::Blocked {
            reason: BlockedReason::OperationInProgress,
            stayed: Vec::new()
        }
    );
    // Polled once, the call joins the drain under way: only then may the drain end.
    let mut joined = Box::pin(n1.relocate(opts(Duration::from_secs(20))));
    let waits = std::future::poll_fn(|cx| Poll::Ready(joined.as_mut().poll(cx).is_pending()));
    assert!(waits.await, "the drain under way is joined, not ended");
    n1.tell(&r, Play::Settle).expect("told");
    let (a, b) = (first.await.expect("ran"), joined.await);
    assert_eq!(a, RelocateOutcome::Relocated { moved: 1 });
    assert_eq!(a, b);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_of_1_mib_and_one_of_64_mib_move_within_the_budget() {
    let cluster = Cluster::start(2, registry).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let mut sizes = BTreeMap::new();
    for i in 0..80 {
        sizes.insert(spot(&format!("m{i}")), 1 << 20);
    }
    sizes.insert(spot("huge"), 64 << 20);
    for (id, size) in &sizes {
        n1.create_spot_on(n1.id(), "room", id).await.expect("room");
        let _: Round = n1.request(id, Play::Grow(*size), T).await.expect("grown");
    }
    let outcome = n1.relocate(opts(Duration::from_secs(120))).await;
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: 81 });
    let status = n1.watch_status().borrow().clone();
    assert!(status.bytes >= (80 << 20) + (64 << 20), "{status:?}");
    // The bytes arrived intact.
    for id in [spot("m3"), spot("huge")] {
        let size = sizes[&id];
        let want: u64 = (0..size).map(|i| (i % 251) as u64).sum();
        let moved: Round = n2.request(&id, Play::Get, T).await.expect("answers");
        assert_eq!((moved.blob_len, moved.blob_sum), (size, want), "{id}");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_whose_store_is_down_is_blocked_store_unavailable() {
    let Some(mut redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let store = RedisStore::connect(&redis.url(), Default::default())
        .await
        .expect("redis store");
    let cluster = Cluster::start_on(2, Arc::new(store), registry).await;
    let n1 = &cluster.nodes[0];
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r).await.expect("room");
    redis.stop();
    let outcome = n1.relocate(opts(Duration::from_secs(3))).await;
    assert_eq!(
        outcome,
        RelocateOutcome::Blocked {
            reason: BlockedReason::StoreUnavailable,
            stayed: vec![UnitId::Spot(r.clone())],
        }
    );
    for node in &cluster.nodes {
        node.abort().await;
    }
}

/// 300 rooms drained off a node on a real redis-server, with messages sent to them all along
/// from another node: the targets' commits share calls to the store, and every room arrives with
/// each message it was sent run exactly once, in the order sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_rooms_drain_on_redis_with_every_message_run_exactly_once() {
    const ROOMS: usize = 300;
    let Some(cluster) = Cluster::start_with(Backend::Redis, 3, registry).await else {
        return;
    };
    let (n1, n2, n3) = (
        cluster.nodes[0].clone(),
        cluster.nodes[1].clone(),
        &cluster.nodes[2],
    );
    let rooms: Vec<SpotId> = (0..ROOMS).map(|i| spot(&format!("room-{i}"))).collect();
    for r in &rooms {
        n1.create_spot_on(n1.id(), "room", r).await.expect("room");
        for k in 0..3 {
            n1.tell(r, Play::Input(k)).expect("told");
        }
    }
    // Messages from n2 while the drain runs, counted per room as each is accepted.
    let draining = Arc::new(AtomicBool::new(true));
    let sender = {
        let (rooms, draining) = (rooms.clone(), draining.clone());
        tokio::spawn(async move {
            let mut sent: Vec<Vec<u32>> = vec![Vec::new(); rooms.len()];
            let mut next = 100;
            while draining.load(Ordering::Relaxed) {
                for (r, sent) in rooms.iter().zip(&mut sent) {
                    if n2.tell(r, Play::Input(next)).is_ok() {
                        sent.push(next);
                    }
                }
                next += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            sent
        })
    };
    let outcome = n1.relocate(opts(Duration::from_secs(60))).await;
    draining.store(false, Ordering::Relaxed);
    let sent = sender.await.expect("sender ran");
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: ROOMS });
    assert_eq!(n1.unit_count(), 0);
    assert_eq!(cluster.nodes[1].unit_count() + n3.unit_count(), ROOMS);
    for (r, sent) in rooms.iter().zip(&sent) {
        let want: Vec<u32> = (0..3).chain(sent.iter().copied()).collect();
        let room = get(n3, r).await;
        assert_eq!(room.inputs, want, "{r}: each message once, in order");
    }
    cluster.shutdown().await;
}

/// The usual factories and "lonely", which only the nodes given this registry have.
fn with_lonely() -> Registry {
    let mut reg = registry();
    reg.register(Registration::spot("lonely", |_| Round::default()));
    reg
}

/// Adds n0, the only node with "lonely" so far, hosting "alone" (a lonely unit no other node can
/// take) and five rooms r0 to r4; it reads the membership every 100 ms.
async fn lonely_node(cluster: &mut Cluster) -> ferry::Node {
    let mut config = cluster.config("n0");
    config.refresh = Duration::from_millis(100);
    let n0 = cluster.add_with(config, with_lonely()).await;
    n0.create_spot_on(n0.id(), "lonely", &spot("alone"))
        .await
        .expect("lonely");
    for i in 0..5 {
        n0.create_spot_on(n0.id(), "room", &spot(&format!("r{i}")))
            .await
            .expect("room");
    }
    n0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_nobody_can_take_does_not_hold_back_the_others() {
    let mut cluster = Cluster::start(1, registry).await;
    let n1 = cluster.nodes[0].clone();
    let n0 = lonely_node(&mut cluster).await;
    let outcome = n0.relocate(opts(Duration::from_millis(800))).await;
    assert_eq!(
        outcome,
        RelocateOutcome::Blocked {
            reason: BlockedReason::TargetUnavailable,
            stayed: vec![UnitId::Spot(spot("alone"))],
        }
    );
    assert_eq!(n1.unit_count(), 5, "the rooms moved");
    let status = n0.watch_status().borrow().clone();
    assert_eq!((status.moved, status.failed), (5, 1));
    // A second drain counts its own units only.
    n1.create_spot_on(n1.id(), "room", &spot("late"))
        .await
        .expect("room");
    let outcome = n1.relocate(opts(Duration::from_secs(5))).await;
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: 6 });
    let again = n0.relocate(opts(Duration::from_millis(300))).await;
    assert!(
        matches!(again, RelocateOutcome::Blocked { .. }),
        "{again:?}"
    );
    assert_eq!(n0.watch_status().borrow().moved, 0);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_a_drain_ends_it_blocked_and_keeps_the_node_stopped() {
    let cluster = Cluster::start(2, registry).await;
    let n1 = cluster.nodes[0].clone();
    for i in 0..3 {
        n1.create_spot_on(n1.id(), "room", &spot(&format!("r{i}")))
            .await
            .expect("room");
    }
    let mut state = n1.watch_state();
    // Nothing runs version 2: the drain waits for such a node while the shutdown begins.
    let drain = tokio::spawn({
        let n1 = n1.clone();
        async move {
            n1.relocate(RelocateOptions {
                mode: RelocateMode::RollingUpdate {
                    target_version: "2".into(),
                },
                deadline: Duration::from_secs(30),
            })
            .await
        }
    });
    tokio::time::timeout(T, state.wait_for(|s| *s == NodeState::Relocating))
        .await
        .expect("drain started in time")
        .expect("node alive");
    n1.shutdown().await;

    let outcome = tokio::time::timeout(T, drain)
        .await
        .expect("the drain ends soon after the shutdown, not at its deadline")
        .expect("drain task");
    assert!(
        matches!(
            outcome,
            RelocateOutcome::Blocked {
                reason: BlockedReason::ShutdownRequested,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(n1.state(), NodeState::Stopped, "the drain did not undo it");
    assert_eq!(n1.unit_count(), 0);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_counts_the_moves_made_while_the_drain_waits_for_a_target() {
    let mut cluster = Cluster::start(1, registry).await;
    let n0 = lonely_node(&mut cluster).await;
    let drain = {
        let n0 = n0.clone();
        tokio::spawn(async move { n0.relocate(opts(Duration::from_secs(60))).await })
    };
    // No node takes "lonely": the drain waits for one, and meanwhile shows what did move.
    let mut status = n0.watch_status();
    let seen = tokio::time::timeout(T, status.wait_for(|s| s.moved == 5))
        .await
        .expect("the five rooms counted while the drain waits")
        .expect("status open")
        .clone();
    assert_eq!(seen.state, NodeState::Relocating, "{seen:?}");
    assert_eq!((seen.total, seen.failed), (6, 0));
    // A node that registers it comes up: the drain moves it and ends.
    let config = cluster.config("n2");
    cluster.add_with(config, with_lonely()).await;
    let outcome = drain.await.expect("ran");
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: 6 });
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_that_met_a_store_error_is_tried_again_while_the_drain_has_time() {
    let mut cluster = Cluster::start(1, registry).await;
    let failing = ferry_tests::faults::FaultyStore::new(cluster.store.clone());
    let config = cluster.config("n2").store(failing.clone());
    let n2 = cluster.add_with(config, registry()).await;
    let n1 = cluster.nodes[0].clone();
    let (a, b) = (spot("a"), spot("b"));
    for (room, inputs) in [(&a, 0..3), (&b, 10..12)] {
        n2.create_spot_on(n2.id(), "room", room)
            .await
            .expect("room");
        for n in inputs {
            n2.tell(room, Play::Input(n)).expect("told");
        }
    }
    // Both reads of a's record in its move fail (the one before the seal, and the one after it
    // that the move cannot do without): that move ends with the room back on n2.
    failing.fail_gets("u/s/a", 2);
    let outcome = n2.relocate(opts(Duration::from_secs(10))).await;
    assert_eq!(failing.failed(), 2, "the move met both failures");
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: 2 });
    assert_eq!(n2.unit_count(), 0);
    assert_eq!(
        get(&n1, &a).await.inputs,
        vec![0, 1, 2],
        "a moved with its state"
    );
    assert_eq!(get(&n1, &b).await.inputs, vec![10, 11]);
    let status = n2.watch_status().borrow().clone();
    assert_eq!((status.moved, status.failed), (2, 0));
    cluster.shutdown().await;
}

/// A target whose state adapter refuses every restore says so in its refusal: the drain is
/// blocked as `StateIncompatible` (not tried again), and the room runs on with its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_cannot_restore_the_state_blocks_the_drain_as_state_incompatible() {
    let mut cluster = Cluster::start(1, registry).await;
    let (refusing, gate) = ferry_tests::faults::Gate::new(true);
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", |_| Round::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(refusing))),
    );
    let config = cluster.config("n2");
    cluster.add_with(config, reg).await;
    let n1 = cluster.nodes[0].clone();
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r).await.expect("room");
    n1.tell(&r, Play::Input(1)).expect("told");
    let draining = ferry_tests::cluster::drain_in_background(&n1, Duration::from_secs(10));
    gate.wait_started().await;
    gate.open();
    let outcome = draining.await.expect("drain");
    assert_eq!(
        outcome,
        RelocateOutcome::Blocked {
            reason: BlockedReason::StateIncompatible,
            stayed: vec![UnitId::Spot(r.clone())],
        }
    );
    assert_eq!(
        get(&n1, &r).await.inputs,
        vec![1],
        "the room runs on n1 with its state"
    );
    cluster.shutdown().await;
}
