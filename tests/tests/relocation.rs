//! Moving live units between nodes over real QUIC: order, terminals, rooms, timers, failures.

use std::sync::Arc;
use std::time::Duration;

use ferry::relocation::protocol::MoveEnd;
use ferry::{
    ActorId, Behavior, Ctx, MessageError, OverrunPolicy, ReadinessMode, ReadyOutcome, Registration,
    Registry, RelocationPolicy, SpotId, Tick, UnitId,
};
use ferry_tests::cluster::{Backend, Cluster, drain_in_background};
use ferry_tests::faults::{Gate, Hooked, TurnGate};
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(10);

/// A room (or player) that logs what it is told, counts callbacks, and records its ticks.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Room {
    log: Vec<String>,
    joined: u32,
    left: u32,
    ticks: Vec<Tick>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    Log(String),
    Get,
    Every {
        name: String,
        ms: u64,
    },
    After {
        name: String,
        ms: u64,
    },
    /// Log the line, wait at the named turn gate, then say the state is whole (for a spot that
    /// seals only where the application says).
    HoldThenDefer {
        line: String,
        gate: String,
    },
}

impl Behavior for Room {
    type Msg = Cmd;
    type Reply = Room;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: Cmd) -> Room {
        match msg {
            Cmd::Log(line) => self.log.push(line),
            Cmd::Get => {}
            Cmd::Every { name, ms } => ctx.set_timer(
                &name,
                Duration::from_millis(ms),
                OverrunPolicy::SkipLateTicks,
            ),
            Cmd::After { name, ms } => ctx.set_timeout(&name, Duration::from_millis(ms)),
            Cmd::HoldThenDefer { line, gate } => {
                self.log.push(line);
                TurnGate::pass(&gate);
                let _ = ctx.relocation_ready_defer();
            }
        }
        self.clone()
    }

    fn on_relocation_ready_completed(&mut self, _ctx: &mut Ctx<'_>, outcome: ReadyOutcome) {
        let line = match outcome {
            ReadyOutcome::Continued => "continued",
            ReadyOutcome::Relocated => "relocated",
        };
        self.log.push(line.to_owned());
    }

    fn on_tick(&mut self, _ctx: &mut Ctx<'_>, tick: &Tick) {
        self.ticks.push(tick.clone());
    }

    fn on_member_joined(&mut self, _ctx: &mut Ctx<'_>, _actor: &ActorId) {
        self.joined += 1;
    }

    fn on_member_left(&mut self, _ctx: &mut Ctx<'_>, _actor: &ActorId) {
        self.left += 1;
    }

    fn on_joined(&mut self, _ctx: &mut Ctx<'_>, _spot: &SpotId) {
        self.joined += 1;
    }

    fn on_left(&mut self, _ctx: &mut Ctx<'_>, _spot: &SpotId) {
        self.left += 1;
    }
}

fn registry_with(adapter: Hooked) -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", |_| Room::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(adapter.clone()))),
    );
    // A room that seals only after a turn that says so, restored through the same hooks.
    reg.register(
        Registration::spot("signaled", |_| Room::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(adapter.clone())))
            .readiness(ReadinessMode::ApplicationSignaled),
    );
    reg.register(
        Registration::actor("player", |_| Room::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(adapter))),
    );
    // A room restored through the plain serde adapter, whatever the hooks.
    reg.register(
        Registration::spot("player-room", |_| Room::default()).policy(RelocationPolicy::serde()),
    );
    reg.register(
        Registration::spot("fresh", |_| Room::default()).policy(RelocationPolicy::Recreate),
    );
    reg.register(
        Registration::spot("pinned", |_| Room::default()).policy(RelocationPolicy::Disabled),
    );
    reg
}

fn registry() -> Registry {
    registry_with(Hooked::default())
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

async fn get(node: &ferry::Node, id: impl Into<ferry::Target>) -> Room {
    node.request(id, Cmd::Get, T).await.expect("room answers")
}

fn log(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|s| s.to_string()).collect()
}

async fn a_room_moves_with_its_state_and_keeps_answering(backend: Backend) {
    let Some(cluster) = Cluster::start_with(backend, 2, registry).await else {
        return;
    };
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    n1.tell(&r, Cmd::Log("a".into())).expect("told");
    // From another node (a request, so the next read comes after it).
    let _: Room = n2
        .request(&r, Cmd::Log("b".into()), T)
        .await
        .expect("logged");
    assert_eq!(get(n1, &r).await.log, log(&["a", "b"]));
    let before = n1
        .read_record(&UnitId::Spot(r.clone()))
        .await
        .expect("store")
        .expect("record");

    let report = n1
        .move_unit(&UnitId::Spot(r.clone()), Some(n2.id().clone()))
        .await
        .expect("moved");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    assert!(report.interruption.is_some() && report.pause.is_some());
    assert!(n2.hosts(&UnitId::Spot(r.clone())));
    assert!(!n1.hosts(&UnitId::Spot(r.clone())));

    let _: Room = n1
        .request(&r, Cmd::Log("c".into()), T)
        .await
        .expect("logged");
    assert_eq!(get(n2, &r).await.log, log(&["a", "b", "c"]));
    let after = n1
        .read_record(&UnitId::Spot(r.clone()))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(after.owner, *n2.id());
    assert_eq!(after.object_generation, before.object_generation);
    assert_eq!(after.owner_generation, before.owner_generation + 1);
    cluster.shutdown().await;
}

/// Starts n1 (plain) and n2 whose restores go through `hooked`.
async fn source_and_hooked_target(backend: Backend, hooked: Hooked) -> Option<Cluster> {
    let mut cluster = Cluster::start_with(backend, 1, registry).await?;
    cluster.add("n2", registry_with(hooked)).await;
    Some(cluster)
}

/// Q1, Q2 queued before the seal and H1, H2 held during it: where do they run, and in what order?
///
/// To be sure Q1 and Q2 are queued work at the seal (not run before it, nor held after it), the
/// room seals only after a turn that says so, and the test holds that turn at a gate while it
/// queues them. Whether the move's seal request reached the room before such a turn is not
/// visible from outside, so the test tries a turn at a time: one that finds no move waiting is
/// answered at once ("continued"), and the first that finds one seals the room, which the
/// target's restore starting shows. Returns the log lines the test queued before the sealing
/// turn, so the caller can check them once each.
async fn queued_and_held(
    backend: Backend,
    fail_restore: bool,
) -> Option<(Cluster, SpotId, ferry::MoveReport, Vec<String>)> {
    let (hooked, gate) = Gate::new(fail_restore);
    let cluster = source_and_hooked_target(backend, hooked).await?;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    let r = spot(&format!("r-{fail_restore}"));
    n1.create_spot_on(n1.id(), "signaled", &r)
        .await
        .expect("created");
    let _: Room = n1
        .request(&r, Cmd::Log("before".into()), T)
        .await
        .expect("logged");
    let mover = {
        let n1 = n1.clone();
        let id = UnitId::Spot(r.clone());
        let to = n2.id().clone();
        tokio::spawn(async move { n1.move_unit(&id, Some(to)).await })
    };
    let mut earlier = Vec::new();
    for round in 0..50 {
        let name = format!("{r}-{round}");
        let turn = TurnGate::new(&name);
        let line = format!("ready {round}");
        n1.tell(
            &r,
            Cmd::HoldThenDefer {
                line: line.clone(),
                gate: name,
            },
        )
        .expect("told");
        turn.wait_entered().await;
        // Q1 and Q2 queue behind the held turn.
        n1.tell(&r, Cmd::Log(format!("Q1 {round}"))).expect("told");
        n1.tell(&r, Cmd::Log(format!("Q2 {round}"))).expect("told");
        turn.open();
        let probe = {
            let (n1, r) = (n1.clone(), r.clone());
            tokio::spawn(async move { n1.request::<Cmd, Room>(&r, Cmd::Get, T).await })
        };
        tokio::select! {
            // Sealed after this turn: the capture is on the target, and the probe is held.
            () = gate.wait_started() => {
                // H1 and H2 arrive after the seal: they are held on the source.
                n1.tell(&r, Cmd::Log("H1".into())).expect("told");
                n1.tell(&r, Cmd::Log("H2".into())).expect("told");
                gate.open();
                let report = mover.await.expect("mover ran").expect("move started");
                earlier.push(line);
                return Some((cluster, r, report, earlier));
            }
            answer = probe => {
                // No move was waiting yet: the turn and Q1, Q2 ran here.
                answer.expect("probe ran").expect("the room answers while it is not sealed");
                earlier.extend([line, "continued".to_owned(), format!("Q1 {round}"), format!("Q2 {round}")]);
            }
        }
    }
    panic!("the move never sealed the room");
}

async fn queued_and_held_messages_run_on_the_target_in_order_and_none_during_restore(
    backend: Backend,
) {
    let Some((cluster, r, report, earlier)) = queued_and_held(backend, false).await else {
        return;
    };
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    let n2 = &cluster.nodes[1];
    assert!(n2.hosts(&UnitId::Spot(r.clone())));
    // The sealing turn's Q1 and Q2 ran on the target as saved work (after its first turn there),
    // then the held H1 and H2: each once, in order.
    let sealing = earlier.last().expect("the sealing turn").clone();
    let mut expected = vec!["before".to_owned()];
    expected.extend(earlier);
    expected.push("relocated".to_owned());
    let n = sealing.trim_start_matches("ready ");
    expected.extend([
        format!("Q1 {n}"),
        format!("Q2 {n}"),
        "H1".into(),
        "H2".into(),
    ]);
    assert_eq!(get(n2, &r).await.log, expected);
    cluster.shutdown().await;
}

async fn a_failure_before_relay_ready_restores_everything_on_the_source_in_order(backend: Backend) {
    let Some((cluster, r, report, earlier)) = queued_and_held(backend, true).await else {
        return;
    };
    assert!(matches!(report.end, MoveEnd::Restored(_)), "{report:?}");
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    assert!(n1.hosts(&UnitId::Spot(r.clone())));
    assert!(!n2.hosts(&UnitId::Spot(r.clone())));
    // The saved work (Q1, Q2 of the sealing turn) runs on the source, then what was held: each
    // once, in order, after the spot hears that it carries on here.
    let sealing = earlier.last().expect("the sealing turn").clone();
    let n = sealing.trim_start_matches("ready ");
    let mut expected = vec!["before".to_owned()];
    expected.extend(earlier.clone());
    expected.extend([
        "continued".into(),
        format!("Q1 {n}"),
        format!("Q2 {n}"),
        "H1".into(),
        "H2".into(),
    ]);
    assert_eq!(get(n1, &r).await.log, expected);
    let record = n1
        .read_record(&UnitId::Spot(r.clone()))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(record.owner, *n1.id());
    cluster.shutdown().await;
}

async fn every_request_in_flight_during_a_move_gets_exactly_one_terminal(backend: Backend) {
    let Some(cluster) = Cluster::start_with(backend, 3, registry).await else {
        return;
    };
    let (n1, n2, n3) = (&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]);
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    let mut asks = Vec::new();
    for i in 0..300 {
        let node = [n1, n2, n3][i % 3].clone();
        let to = r.clone();
        asks.push(tokio::spawn(async move {
            node.request::<Cmd, Room>(&to, Cmd::Log(format!("{i}")), T)
                .await
        }));
        if i == 100 {
            let (n1, id, to) = (n1.clone(), UnitId::Spot(r.clone()), n2.id().clone());
            asks.push(tokio::spawn(async move {
                let report = n1.move_unit(&id, Some(to)).await.expect("move started");
                assert_eq!(report.end, MoveEnd::Moved);
                Err(MessageError::NotServing {
                    state: "mover".into(),
                })
            }));
        }
    }
    let mut ok = 0;
    for ask in asks {
        match ask.await.expect("task ran") {
            Ok(_) => ok += 1,
            Err(MessageError::NotServing { state }) if state == "mover" => {}
            Err(e) => panic!("a request ended with {e}"),
        }
    }
    assert_eq!(ok, 300);
    // Each request ran exactly once: counted per request, not as a set.
    let room = get(n3, &r).await;
    let mut runs = std::collections::BTreeMap::new();
    for line in &room.log {
        *runs.entry(line.clone()).or_insert(0u32) += 1;
    }
    for i in 0..300 {
        assert_eq!(runs.get(&format!("{i}")), Some(&1), "request {i} ran once");
    }
    assert_eq!(room.log.len(), 300, "nothing else ran");
    assert!(n2.hosts(&UnitId::Spot(r.clone())));
    cluster.shutdown().await;
}

async fn a_spot_wide_room_moves_with_its_members_and_no_join_or_leave_callbacks(backend: Backend) {
    let Some(cluster) = Cluster::start_with(backend, 2, registry).await else {
        return;
    };
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    let players: Vec<ActorId> = (0..3)
        .map(|i| ActorId::new(format!("p{i}")).expect("id"))
        .collect();
    for p in &players {
        n1.create_actor("player", p).await.expect("player");
        n1.join(p, &r).await.expect("joined");
        let _: Room = n1
            .request(p, Cmd::Log(format!("hello from {p}")), T)
            .await
            .expect("ok");
    }
    let before = get(n1, &r).await;
    assert_eq!(before.joined, 3);
    let generation =
        |id: UnitId| async move { n1.read_record(&id).await.expect("store").expect("record") };
    let p0_before = generation(UnitId::Actor(players[0].clone())).await;

    // An actor of the room moves with the room, not alone: refused before anything is sealed.
    let alone = n1
        .move_unit(&UnitId::Actor(players[0].clone()), Some(n2.id().clone()))
        .await;
    assert!(
        matches!(alone, Err(ferry::MoveError::MovesWithSpot { .. })),
        "{alone:?}"
    );

    let report = n1
        .move_unit(&UnitId::Spot(r.clone()), Some(n2.id().clone()))
        .await
        .expect("started");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    for p in &players {
        assert!(
            n2.hosts(&UnitId::Actor(p.clone())),
            "{p} moved with its room"
        );
        let state = get(n1, p).await;
        assert_eq!((state.joined, state.left), (1, 0), "no callbacks for {p}");
        assert_eq!(state.log, vec![format!("hello from {p}")]);
    }
    let after = get(n2, &r).await;
    assert_eq!((after.joined, after.left), (3, 0));
    let p0_after = generation(UnitId::Actor(players[0].clone())).await;
    assert_eq!(p0_after.owner, *n2.id());
    assert_eq!(p0_after.object_generation, p0_before.object_generation);
    assert_eq!(p0_after.owner_generation, p0_before.owner_generation + 1);
    // Membership is intact on the target: a member can leave there.
    n2.leave(&players[0]).await.expect("left on the target");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_resume_on_the_target_without_being_registered_again() {
    let cluster = Cluster::start(2, registry).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    let _: Room = n1
        .request(
            &r,
            Cmd::Every {
                name: "beat".into(),
                ms: 10,
            },
            T,
        )
        .await
        .expect("set");
    let _: Room = n1
        .request(
            &r,
            Cmd::After {
                name: "end".into(),
                ms: 400,
            },
            T,
        )
        .await
        .expect("set");
    // Let a few beats happen here.
    for _ in 0..1000 {
        if get(n1, &r).await.ticks.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let report = n1
        .move_unit(&UnitId::Spot(r.clone()), Some(n2.id().clone()))
        .await
        .expect("started");
    assert_eq!(report.end, MoveEnd::Moved);
    let moved_at = get(n2, &r).await.ticks.len();
    // Wait for the one-shot to fire on the target, and more beats with it.
    let mut room = get(n2, &r).await;
    for _ in 0..1000 {
        if room.ticks.iter().any(|t| t.name == "end") && room.ticks.len() > moved_at + 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        room = get(n2, &r).await;
    }
    let ends: Vec<&Tick> = room.ticks.iter().filter(|t| t.name == "end").collect();
    assert_eq!(ends.len(), 1, "the one-shot fired once");
    let beats: Vec<&Tick> = room.ticks.iter().filter(|t| t.name == "beat").collect();
    assert!(beats.len() > moved_at, "beats went on after the move");
    for pair in beats.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert_eq!(
            b.delivery_index,
            a.delivery_index + 1,
            "no beat doubled or lost"
        );
        assert_eq!(
            b.scheduled_index,
            a.scheduled_index + 1 + b.skipped,
            "every slot is accounted for"
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_moves_queue_and_timers_but_not_state_and_disabled_never_moves() {
    let cluster = Cluster::start(2, registry).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let (fresh, pinned) = (spot("fresh"), spot("pinned"));
    n1.create_spot_on(n1.id(), "fresh", &fresh)
        .await
        .expect("created");
    n1.create_spot_on(n1.id(), "pinned", &pinned)
        .await
        .expect("created");
    let _: Room = n1
        .request(&fresh, Cmd::Log("gone".into()), T)
        .await
        .expect("ok");
    let _: Room = n1
        .request(
            &fresh,
            Cmd::Every {
                name: "beat".into(),
                ms: 50,
            },
            T,
        )
        .await
        .expect("ok");
    let report = n1
        .move_unit(&UnitId::Spot(fresh.clone()), Some(n2.id().clone()))
        .await
        .expect("started");
    assert_eq!(report.end, MoveEnd::Moved);
    let room = get(n2, &fresh).await;
    assert!(room.log.is_empty(), "Recreate rebuilds the state");
    // The timer came along: it ticks on the target without being set again.
    let mut room = room;
    for _ in 0..1000 {
        if !room.ticks.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        room = get(n2, &fresh).await;
    }
    assert!(!room.ticks.is_empty());
    let err = n1
        .move_unit(&UnitId::Spot(pinned.clone()), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ferry::MoveError::RelocationDisabled { .. }),
        "{err}"
    );
    assert!(n1.hosts(&UnitId::Spot(pinned.clone())));
    cluster.shutdown().await;
}

async fn a_sender_with_a_stale_route_reaches_the_moved_unit_and_learns_the_new_route(
    backend: Backend,
) {
    let Some(cluster) = Cluster::start_with(backend, 3, registry).await else {
        return;
    };
    let (n1, n2, n3) = (&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]);
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    let id = UnitId::Spot(r.clone());
    let _ = get(n3, &r).await;
    assert_eq!(n3.cached_route(&id), Some(n1.id().clone()));
    let report = n1
        .move_unit(&id, Some(n2.id().clone()))
        .await
        .expect("started");
    assert_eq!(report.end, MoveEnd::Moved);
    assert_eq!(
        n3.cached_route(&id),
        Some(n1.id().clone()),
        "n3 has not heard yet"
    );
    let _: Room = n3
        .request(&r, Cmd::Log("via n1".into()), T)
        .await
        .expect("followed");
    assert_eq!(get(n2, &r).await.log, log(&["via n1"]));
    for _ in 0..500 {
        if n3.cached_route(&id) == Some(n2.id().clone()) {
            break;
        }
        let _ = get(n3, &r).await;
    }
    assert_eq!(n3.cached_route(&id), Some(n2.id().clone()));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tells_through_a_unit_ref_keep_their_order_while_the_room_moves_away_and_back() {
    let cluster = Cluster::start_with(Backend::Memory, 2, registry)
        .await
        .expect("memory backend");
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    let id = UnitId::Spot(r.clone());
    let mut room = n1.unit_ref(&r);
    let sender = tokio::spawn(async move {
        for n in 0..2_000 {
            room.tell(Cmd::Log(n.to_string())).expect("told");
            if n % 64 == 0 {
                tokio::task::yield_now().await;
            }
        }
    });
    for (from, to) in [(n1, n2), (n2, n1)] {
        let report = from
            .move_unit(&id, Some(to.id().clone()))
            .await
            .expect("started");
        assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    }
    sender.await.expect("sender ran");
    let want: Vec<String> = (0..2_000).map(|n: u32| n.to_string()).collect();
    assert_eq!(get(n1, &r).await.log, want);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_that_dies_after_relay_ready_never_leaves_two_owners() {
    let (hooked, gate) = Gate::new(false);
    let cluster = source_and_hooked_target(Backend::Memory, hooked)
        .await
        .expect("memory backend");
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    let r = spot("r");
    let id = UnitId::Spot(r.clone());
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    let _: Room = n1
        .request(&r, Cmd::Log("before".into()), T)
        .await
        .expect("ok");
    let mover = {
        let (n1, id, to) = (n1.clone(), id.clone(), n2.id().clone());
        tokio::spawn(async move { n1.move_unit(&id, Some(to)).await })
    };
    gate.wait_started().await;
    // A source that hears nothing back after the handover waits two steps of 5 s before it
    // reclaims the unit: the held request may wait that long.
    let held = {
        let n1 = n1.clone();
        let r = r.clone();
        tokio::spawn(async move {
            n1.request::<Cmd, Room>(&r, Cmd::Log("held".into()), 3 * T)
                .await
        })
    };
    gate.open();
    // The target dies right after it restored the unit (relay-ready is on its way).
    n2.abort().await;
    let report = mover.await.expect("mover ran").expect("started");
    let record = n1.read_record(&id).await.expect("store").expect("record");
    // Read before the held request's answer: while it waits, recovery may rebuild the unit.
    let hosted = n1.hosts(&id);
    let held = held.await.expect("task ran");
    match report.end {
        // The target committed before it died: it is the one owner (recovery takes it from there),
        // and the request held on the way ends with an error, since its owner is gone.
        MoveEnd::Moved => {
            assert_eq!(record.owner, *n2.id(), "{report:?}");
            assert!(!hosted);
            assert!(held.is_err(), "{held:?}");
        }
        // The unit runs on the source again, and the request held meanwhile ran there, once.
        MoveEnd::Restored(_) | MoveEnd::Reclaimed => {
            assert_eq!(record.owner, *n1.id(), "{report:?}");
            assert!(hosted, "the unit runs on the source again: {report:?}");
            let answer = held.expect("the held request is answered on the source");
            assert_eq!(answer.log, log(&["before", "held"]));
            assert_eq!(get(&n1, &r).await.log, log(&["before", "held"]));
        }
        _ => panic!("unexpected end: {report:?}"),
    }
    n1.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deadline_mid_drain_sends_unready_units_back_and_reclaims_those_past_no_return_whole() {
    use ferry::RelocateOutcome;
    use ferry_tests::faults::FaultyStore;

    // n2 restores "room" through a gate, and its writes can be held: its commits then hang.
    let (hooked, gate) = Gate::new(false);
    let mut cluster = Cluster::start(1, registry).await;
    let held = FaultyStore::new(cluster.store.clone());
    let config = cluster.config("n2").store(held.clone());
    cluster.add_with(config, registry_with(hooked)).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    // "a" moves up to its commit and is restored whole on n2; "b" waits in its restore past the
    // deadline.
    let (a, b) = (spot("a"), spot("b"));
    n1.create_spot_on(n1.id(), "player-room", &a)
        .await
        .expect("a");
    n1.create_spot_on(n1.id(), "room", &b).await.expect("b");
    let _: Room = n1.request(&a, Cmd::Log("a0".into()), T).await.expect("ok");
    let _: Room = n1.request(&b, Cmd::Log("b0".into()), T).await.expect("ok");
    let a_before = n1
        .read_record(&UnitId::Spot(a.clone()))
        .await
        .expect("store")
        .expect("record");
    held.hold_keys("u/s/a");
    let drain = drain_in_background(&n1, Duration::from_millis(1500));
    gate.wait_started().await;
    // "b" is sealed: these are held on n1. "a" is handed over and its commit waits on n2.
    held.wait_held().await;
    n1.tell(&b, Cmd::Log("b1".into())).expect("told");
    n1.tell(&b, Cmd::Log("b2".into())).expect("told");
    let ask_a = {
        let n1 = n1.clone();
        let a = a.clone();
        tokio::spawn(async move { n1.request::<Cmd, Room>(&a, Cmd::Log("a1".into()), T).await })
    };
    let outcome = drain.await.expect("drain ran");
    let RelocateOutcome::Blocked { reason, mut stayed } = outcome else {
        panic!("the drain was blocked: {outcome:?}");
    };
    stayed.sort_by_key(ToString::to_string);
    assert_eq!(reason, ferry::BlockedReason::DeadlineExceeded);
    assert_eq!(
        stayed,
        vec![UnitId::Spot(a.clone()), UnitId::Spot(b.clone())]
    );
    gate.open();
    held.release();
    // "a" was taken back by the fenced write, with its state and the request held meanwhile.
    let answer = ask_a.await.expect("asked").expect("a answers");
    assert_eq!(answer.log, log(&["a0", "a1"]));
    assert!(n1.hosts(&UnitId::Spot(a.clone())));
    let a_after = n1
        .read_record(&UnitId::Spot(a.clone()))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(a_after.owner, *n1.id());
    assert_eq!(a_after.stage, ferry::cluster::authority::Stage::Active);
    assert_eq!(a_after.object_generation, a_before.object_generation);
    assert_eq!(a_after.owner_generation, a_before.owner_generation + 1);
    // "b" went back to n1 with its messages in order.
    assert!(n1.hosts(&UnitId::Spot(b.clone())));
    assert_eq!(get(&n1, &b).await.log, log(&["b0", "b1", "b2"]));
    assert_eq!(get(&n2, &a).await.log, log(&["a0", "a1"]));
    // n2 lost its commit race for "a" and let it go.
    for _ in 0..500 {
        if !n2.hosts(&UnitId::Spot(a.clone())) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!n2.hosts(&UnitId::Spot(a.clone())));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_the_store_has_not_decided_at_the_deadline_is_held_until_it_has_never_guessed() {
    use ferry::RelocateOutcome;
    use ferry::relocation::RelocationEvent;
    use ferry::store::{LocationStore, MemoryStore};
    use ferry_tests::faults::FaultyStore;

    // Both nodes' writes of "a" can be held: n2's commit and n1's reclaim then both wait.
    let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
    let mut cluster = Cluster::start_on(0, store.clone(), registry).await;
    let (held1, held2) = (FaultyStore::new(store.clone()), FaultyStore::new(store));
    let n1 = cluster
        .add_with(cluster.config("n1").store(held1.clone()), registry())
        .await;
    let n2 = cluster
        .add_with(cluster.config("n2").store(held2.clone()), registry())
        .await;
    let a = spot("a");
    n1.create_spot_on(n1.id(), "player-room", &a)
        .await
        .expect("a");
    let _: Room = n1.request(&a, Cmd::Log("a0".into()), T).await.expect("ok");
    held1.hold_keys("u/s/a");
    held2.hold_keys("u/s/a");
    let mut events = n1.relocation_events();
    let drain = drain_in_background(&n1, Duration::from_millis(1000));
    held2.wait_held().await;
    let ask_a = {
        let n1 = n1.clone();
        let a = a.clone();
        tokio::spawn(async move { n1.request::<Cmd, Room>(&a, Cmd::Log("a1".into()), T).await })
    };
    // At the deadline n1's reclaim cannot be written either: the drain says so, and guesses
    // nothing.
    held1.wait_held().await;
    let outcome = drain.await.expect("drain ran");
    assert_eq!(
        outcome,
        RelocateOutcome::Undecided {
            units: vec![UnitId::Spot(a.clone())],
            stayed: Vec::new(),
        }
    );
    assert!(!n1.hosts(&UnitId::Spot(a.clone())));
    // The target's commit lands first, then the source's reclaim, which loses: "a" moved. What
    // n1 sent "a" since the handover waited at n1 until then, and follows it.
    held2.release();
    assert_eq!(
        get(&n2, &a).await.log,
        log(&["a0"]),
        "the target runs the room, without what waits at n1"
    );
    assert!(!ask_a.is_finished(), "held until the move is decided");
    held1.release();
    let answer = ask_a.await.expect("asked").expect("a answers");
    assert_eq!(answer.log, log(&["a0", "a1"]));
    let moved = loop {
        match events.recv().await.expect("events") {
            RelocationEvent::UnitMoved(report) if report.unit == UnitId::Spot(a.clone()) => {
                break report;
            }
            _ => {}
        }
    };
    assert_eq!(moved.end, MoveEnd::Moved);
    assert!(moved.after_deadline, "{moved:?}");
    assert!(n2.hosts(&UnitId::Spot(a.clone())));
    assert!(!n1.hosts(&UnitId::Spot(a.clone())));
    let record = n1
        .read_record(&UnitId::Spot(a.clone()))
        .await
        .expect("store")
        .expect("record");
    assert_eq!(record.owner, *n2.id());
    assert_eq!(get(&n1, &a).await.log, log(&["a0", "a1"]));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_source_never_takes_back_a_unit_recorded_on_a_third_node_meanwhile() {
    use ferry::ObjectGeneration;
    use ferry::cluster::authority::{UnitRecord, unit_key};
    use ferry::store::{BatchOutcome, Condition, Op};
    use ferry_tests::faults::FaultyStore;

    // n2's writes can be held: its commit then hangs, and the source hears nothing back.
    let mut cluster = Cluster::start(1, registry).await;
    let held = FaultyStore::new(cluster.store.clone());
    let config = cluster.config("n2").store(held.clone());
    cluster.add_with(config, registry()).await;
    let n3 = cluster.add("n3", registry()).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    let r = spot("r");
    let id = UnitId::Spot(r.clone());
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    held.hold();
    let mover = {
        let (n1, id, to) = (n1.clone(), id.clone(), n2.id().clone());
        tokio::spawn(async move { n1.move_unit(&id, Some(to)).await })
    };
    // Past the point of no return, the source gives the unit up from its directory.
    tokio::time::timeout(T, async {
        while n1.hosts(&id) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("handed over");
    // Meanwhile, as when n2 committed and died and recovery rebuilt the unit on n3: the record
    // names n3, a new incarnation.
    let key = unit_key(&id);
    let current = cluster
        .store
        .get(&key)
        .await
        .expect("store")
        .expect("record");
    let mut record = UnitRecord::decode(&key, &current.value).expect("a record");
    record.owner = n3.id().clone();
    record.owner_generation += 2;
    record.object_generation = ObjectGeneration(record.object_generation.0.wrapping_add(1));
    let written = cluster
        .store
        .batch(
            vec![Condition::version(key.clone(), current.version)],
            vec![Op::put(key, record.encode())],
        )
        .await
        .expect("store");
    assert!(matches!(written, BatchOutcome::Committed { .. }));
    // The source hears nothing, fences, and finds the unit is another node's: it does not run it
    // again, and the record stays as recovery left it.
    let report = mover.await.expect("mover ran").expect("started");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    assert!(!n1.hosts(&id), "never two copies running");
    assert_eq!(n1.read_record(&id).await.expect("store"), Some(record));
    held.release();
    cluster.shutdown().await;
}

/// Runs each scenario twice: on the in-process store and on a real redis-server.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::Backend;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn memory() {
                super::$name(Backend::Memory).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn redis() {
                super::$name(Backend::Redis).await
            }
        }
    )*};
}

on_both_stores!(
    a_room_moves_with_its_state_and_keeps_answering,
    queued_and_held_messages_run_on_the_target_in_order_and_none_during_restore,
    a_failure_before_relay_ready_restores_everything_on_the_source_in_order,
    every_request_in_flight_during_a_move_gets_exactly_one_terminal,
    a_spot_wide_room_moves_with_its_members_and_no_join_or_leave_callbacks,
    a_sender_with_a_stale_route_reaches_the_moved_unit_and_learns_the_new_route,
);

/// Fills a room's log with `bytes` of text, so its capture is at least that big.
async fn fill(node: &ferry::Node, room: &SpotId, bytes: usize) {
    let _: Room = node
        .request(room, Cmd::Log("x".repeat(bytes)), T)
        .await
        .expect("room answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn small_and_large_states_arrive_whole() {
    let cluster = Cluster::start(2, registry).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    // One chunk, and several.
    for (name, bytes) in [("small", 4096), ("large", 256 * 1024)] {
        let r = spot(name);
        n1.create_spot_on(n1.id(), "room", &r)
            .await
            .expect("created");
        fill(n1, &r, bytes).await;
        n1.tell(&r, Cmd::Log("last".into())).expect("told");
        let report = n1
            .move_unit(&UnitId::Spot(r.clone()), Some(n2.id().clone()))
            .await
            .expect("move ran");
        assert_eq!(report.end, MoveEnd::Moved, "{name}: {report:?}");
        assert!(report.bytes > bytes as u64, "{name}: {report:?}");
        assert!(n2.hosts(&UnitId::Spot(r.clone())), "{name}");
        let room = get(n2, &r).await;
        assert_eq!(room.log.len(), 2, "{name}");
        assert_eq!(room.log[0].len(), bytes, "{name}");
        assert_eq!(room.log[1], "last", "{name}");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_unit_over_the_sources_max_state_stays_and_keeps_answering() {
    let store: Arc<dyn ferry::store::LocationStore> = Arc::new(ferry::store::MemoryStore::new());
    let mut cluster = Cluster::start_on(0, store, registry).await;
    let mut small = cluster.config("n1");
    small.max_state = 1024;
    let n1 = cluster.add_with(small, registry()).await;
    let n2 = cluster.add("n2", registry()).await;
    let r = spot("big");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    fill(&n1, &r, 4096).await;

    let report = n1
        .move_unit(&UnitId::Spot(r.clone()), Some(n2.id().clone()))
        .await
        .expect("move ran");

    let (MoveEnd::Restored(reason) | MoveEnd::NotSealed(reason)) = &report.end else {
        panic!("the move should have been refused, got {:?}", report.end);
    };
    assert!(reason.contains("max_state"), "reason: {reason}");
    assert!(n1.hosts(&UnitId::Spot(r.clone())));
    assert_eq!(
        get(&n2, r.clone()).await.log.len(),
        1,
        "still answers from n1"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_offer_over_the_targets_max_state_is_refused_and_the_unit_stays() {
    let store: Arc<dyn ferry::store::LocationStore> = Arc::new(ferry::store::MemoryStore::new());
    let mut cluster = Cluster::start_on(0, store, registry).await;
    let n1 = cluster.add("n1", registry()).await;
    let mut small = cluster.config("n2");
    small.max_state = 1024;
    let n2 = cluster.add_with(small, registry()).await;
    let r = spot("big");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    fill(&n1, &r, 4096).await;

    let report = n1
        .move_unit(&UnitId::Spot(r.clone()), Some(n2.id().clone()))
        .await
        .expect("move ran");

    let MoveEnd::Restored(reason) = &report.end else {
        panic!("the target should have refused, got {:?}", report.end);
    };
    assert!(reason.contains("n2's max_state"), "reason: {reason}");
    assert!(n1.hosts(&UnitId::Spot(r.clone())));
    fill(&n2, &r, 10).await;
    assert_eq!(get(&n1, r).await.log.len(), 2, "keeps running on n1");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_moves_report_accounts_for_its_pause_phase_by_phase() {
    let cluster = Cluster::start(2, registry).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("timed");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    fill(n1, &r, 4096).await;

    let report = n1
        .move_unit(&UnitId::Spot(r.clone()), Some(n2.id().clone()))
        .await
        .expect("move ran");

    assert_eq!(report.end, MoveEnd::Moved);
    let pause = report.pause.expect("a moved unit has a pause");
    let p = report.phases;
    // What the target measured reached the source's report.
    assert!(p.restore > Duration::ZERO, "{p:?}");
    assert!(p.commit > Duration::ZERO, "{p:?}");
    assert!(
        p.capture > Duration::ZERO && p.encode > Duration::ZERO,
        "{p:?}"
    );
    // The pause phases are disjoint parts of the pause.
    let within: Duration = p.named()[2..].iter().map(|(_, d)| *d).sum();
    assert!(
        within <= pause,
        "phases {within:?} exceed the pause {pause:?}: {p:?}"
    );
    cluster.shutdown().await;
}

/// A node whose reads of unit records fail on command (n2), beside a room's owner (n1).
async fn owner_and_failing_reader() -> (Cluster, Arc<ferry_tests::faults::FaultyStore>) {
    let mut cluster = Cluster::start(1, registry).await;
    let failing = ferry_tests::faults::FaultyStore::new(cluster.store.clone());
    let config = cluster.config("n2").store(failing.clone());
    cluster.add_with(config, registry()).await;
    (cluster, failing)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_lookup_retries_a_store_error_and_then_delivers_in_order() {
    let (cluster, failing) = owner_and_failing_reader().await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    // Two reads fail, then the store answers: nothing is lost.
    failing.fail_gets("u/s/r", 2);
    for n in 0..5 {
        n2.tell(&r, Cmd::Log(n.to_string())).expect("told");
    }
    let room: Room = n2
        .request(&r, Cmd::Log("5".into()), T)
        .await
        .expect("delivered after the retries");
    assert_eq!(room.log, log(&["0", "1", "2", "3", "4", "5"]));
    assert_eq!(failing.failed(), 2, "the lookup met both failures");
    assert_eq!(n2.tells_dropped_on_lookup(), 0);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_lookup_that_keeps_failing_ends_its_requests_with_a_typed_error_and_counts_tells() {
    let (cluster, failing) = owner_and_failing_reader().await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    failing.fail_gets("u/s/r", usize::MAX);
    for n in 0..3 {
        n2.tell(&r, Cmd::Log(n.to_string())).expect("told");
    }
    let answer = n2.request::<Cmd, Room>(&r, Cmd::Get, T).await;
    match answer {
        Err(MessageError::RouteLookupFailed { id, attempts, .. }) => {
            assert_eq!(id, UnitId::Spot(r.clone()));
            assert!(attempts > 1, "retried");
        }
        other => panic!("a typed lookup failure: {other:?}"),
    }
    assert_eq!(n2.tells_dropped_on_lookup(), 3, "each tell is counted");
    failing.heal();
    // The store is back: the next message is looked up and delivered; the failed ones never ran.
    let room: Room = n2
        .request(&r, Cmd::Log("after".into()), T)
        .await
        .expect("delivered");
    assert_eq!(room.log, log(&["after"]));
    cluster.shutdown().await;
}

/// The source of a move that the store could not decide by its deadline (its fence landed, but
/// its answer and every read since were lost) holds what reaches it for the handed room, and runs
/// it once the store says the room is its own again: nothing bounces between the two nodes until
/// it is dropped, and nothing reaches the target's copy, which loses the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_for_a_handed_unit_wait_at_an_undecided_source_and_run_there_in_order() {
    // n1 only sends: it has no room factory, so the drain can only pick `t`.
    let mut cluster = Cluster::start(1, Registry::new).await;
    let source_store = ferry_tests::faults::FaultyStore::new(cluster.store.clone());
    let target_store = ferry_tests::faults::FaultyStore::new(cluster.store.clone());
    let config = cluster.config("s").store(source_store.clone());
    let s = cluster.add_with(config, registry()).await;
    let config = cluster.config("t").store(target_store.clone());
    let t = cluster.add_with(config, registry()).await;
    let n1 = cluster.nodes[0].clone();
    let r = spot("r");
    s.create_spot_on(s.id(), "room", &r).await.expect("room");
    let first: Room = n1
        .request(&r, Cmd::Log("before".into()), T)
        .await
        .expect("n1 learns the route to s");
    assert_eq!(first.log, log(&["before"]));

    // The target's commit waits; the source hands the room over and, at its deadline, fences
    // it back: the fence lands, but the source hears no answer and can read nothing.
    target_store.hold_keys("u/");
    let draining = drain_in_background(&s, Duration::from_secs(2));
    target_store.wait_held().await;
    source_store.fault_writes(ferry_tests::faults::WriteFault::Unanswered);
    source_store.fail_gets("u/s/r", usize::MAX);
    // Sent after the handover: they wait at s until its move is decided.
    for n in 0..50 {
        n1.tell(&r, Cmd::Log(n.to_string())).expect("told");
    }
    let asking = {
        let n1 = n1.clone();
        let r = r.clone();
        tokio::spawn(async move {
            n1.request::<Cmd, Room>(&r, Cmd::Log("last".into()), Duration::from_secs(30))
                .await
        })
    };
    let outcome = draining.await.expect("drain");
    assert!(
        matches!(outcome, ferry::RelocateOutcome::Undecided { .. }),
        "the store did not answer the source's fence: {outcome:?}"
    );

    // The target's commit meets the fence and loses: its copy is given up. The source still
    // cannot read the store, so what it holds for the room waits.
    target_store.release();
    assert!(!asking.is_finished(), "the request waits at the source");

    // The source hears the store again: the room runs there, with everything in order.
    source_store.fault_writes(ferry_tests::faults::WriteFault::None);
    source_store.heal();
    let room = asking
        .await
        .expect("request task")
        .expect("the last request runs where the room is");
    let mut want = vec!["before".to_owned()];
    want.extend((0..50).map(|n| n.to_string()));
    want.push("last".into());
    assert_eq!(room.log, want, "every message once, in order");
    assert!(
        s.hosts(&UnitId::Spot(r.clone())),
        "the fence won: the room runs on s"
    );
    assert!(!t.hosts(&UnitId::Spot(r.clone())));
    assert_eq!(n1.tells_lost(), 0);
    cluster.shutdown().await;
}
