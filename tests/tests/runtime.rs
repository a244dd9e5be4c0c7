//! One node: ordering, turn exclusivity, timers, workers, requests, activation, panics, membership.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferry::{
    ActorId, AdapterError, Behavior, Ctx, DeferError, ExecutionMode, MessageError, Node,
    NodeConfig, NodeId, NodeState, OnPanic, OverrunPolicy, ReadinessMode, Registration,
    RegistrationError, Registry, RelocationPolicy, SpotId, StartError, StateAdapter, Target, Tick,
    UnitError, UnitId,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(5);

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

fn actor(id: &str) -> ActorId {
    ActorId::new(id).expect("valid id")
}

async fn node(registry: Registry) -> Node {
    Node::start(NodeConfig::new(NodeId::new("n1").expect("id")), registry)
        .await
        .expect("node starts")
}

/// What the probe records and is asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    Seq {
        sender: u32,
        n: u32,
    },
    Add(i64),
    Get,
    Seqs,
    Ticks,
    Boom,
    Timer {
        period_ms: u64,
        policy: OverrunPolicy,
    },
    Defer,
    DeferTwice,
    Work(u64),
    WorkDone(u64),
    Block,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Answer {
    Ok,
    Value(i64),
    Seqs(BTreeMap<u32, Vec<u32>>),
    Ticks(Vec<Tick>),
    Defer(Result<(), String>),
}

/// Events a probe reports to the test, so tests await them instead of sleeping.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    Started(UnitId),
    Closing(UnitId),
    Joined(UnitId, SpotId),
    Left(UnitId, SpotId),
    MemberJoined(UnitId, ActorId),
    MemberLeft(UnitId, ActorId),
    WorkDone(UnitId, u64),
}

struct Probe {
    events: mpsc::UnboundedSender<Event>,
    value: i64,
    seqs: BTreeMap<u32, Vec<u32>>,
    ticks: Vec<Tick>,
    gate: Option<Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>>,
}

impl Probe {
    fn new(events: &mpsc::UnboundedSender<Event>) -> Self {
        Probe {
            events: events.clone(),
            value: 0,
            seqs: BTreeMap::new(),
            ticks: Vec::new(),
            gate: None,
        }
    }

    fn report(&self, event: Event) {
        let _ = self.events.send(event);
    }
}

impl Behavior for Probe {
    type Msg = Cmd;
    type Reply = Answer;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: Cmd) -> Answer {
        match msg {
            Cmd::Seq { sender, n } => self.seqs.entry(sender).or_default().push(n),
            Cmd::Add(n) => self.value += n,
            Cmd::Get => return Answer::Value(self.value),
            Cmd::Seqs => return Answer::Seqs(self.seqs.clone()),
            Cmd::Ticks => return Answer::Ticks(self.ticks.clone()),
            Cmd::Boom => panic!("boom"),
            Cmd::Timer { period_ms, policy } => {
                ctx.set_timer("t", Duration::from_millis(period_ms), policy)
            }
            Cmd::Defer => {
                return Answer::Defer(ctx.relocation_ready_defer().map_err(|e| e.to_string()));
            }
            Cmd::DeferTwice => {
                let _ = ctx.relocation_ready_defer();
                let second = ctx.relocation_ready_defer();
                return Answer::Defer(match second {
                    Err(DeferError::AlreadyDeferred) => Ok(()),
                    other => Err(format!("{other:?}")),
                });
            }
            Cmd::Work(n) => ctx.spawn_worker(async move {
                tokio::task::yield_now().await;
                Cmd::WorkDone(n * 2)
            }),
            Cmd::WorkDone(n) => {
                self.value = n as i64;
                self.report(Event::WorkDone(ctx.id().clone(), n));
            }
            Cmd::Block => {
                if let Some(gate) = &self.gate {
                    let _ = gate.lock().map(|g| g.recv());
                }
            }
        }
        Answer::Ok
    }

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        self.report(Event::Started(ctx.id().clone()));
    }

    fn on_tick(&mut self, _ctx: &mut Ctx<'_>, tick: &Tick) {
        self.ticks.push(tick.clone());
    }

    fn on_member_joined(&mut self, ctx: &mut Ctx<'_>, actor: &ActorId) {
        self.report(Event::MemberJoined(ctx.id().clone(), actor.clone()));
    }

    fn on_member_left(&mut self, ctx: &mut Ctx<'_>, actor: &ActorId) {
        self.report(Event::MemberLeft(ctx.id().clone(), actor.clone()));
    }

    fn on_joined(&mut self, ctx: &mut Ctx<'_>, spot: &SpotId) {
        self.report(Event::Joined(ctx.id().clone(), spot.clone()));
    }

    fn on_left(&mut self, ctx: &mut Ctx<'_>, spot: &SpotId) {
        self.report(Event::Left(ctx.id().clone(), spot.clone()));
    }

    fn on_closing(&mut self, ctx: &mut Ctx<'_>) {
        self.report(Event::Closing(ctx.id().clone()));
    }
}

/// A registry with a probe for each kind of unit, and the channel their events arrive on.
fn probes() -> (Registry, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut reg = Registry::new();
    let t = tx.clone();
    reg.register(
        Registration::spot("room", move |_| Probe::new(&t)).policy(RelocationPolicy::Recreate),
    );
    let t = tx.clone();
    reg.register(
        Registration::spot("lobby", move |_| Probe::new(&t)).mode(ExecutionMode::PerActor),
    );
    let t = tx.clone();
    reg.register(
        Registration::spot("round", move |_| Probe::new(&t))
            .readiness(ReadinessMode::ApplicationSignaled),
    );
    let t = tx.clone();
    reg.register(Registration::instance("counter", move |_| Probe::new(&t)));
    let t = tx.clone();
    reg.register(Registration::actor("player", move |_| Probe::new(&t)));
    let t = tx.clone();
    reg.register(
        Registration::actor("phoenix", move |_| Probe::new(&t)).on_panic(OnPanic::Restart),
    );
    (reg, rx)
}

async fn next(events: &mut mpsc::UnboundedReceiver<Event>, want: impl Fn(&Event) -> bool) -> Event {
    loop {
        let event = tokio::time::timeout(T, events.recv())
            .await
            .expect("event arrives")
            .expect("channel open");
        if want(&event) {
            return event;
        }
    }
}

/// Waits until every one of `wanted` has happened, in any order.
async fn expect_all<const N: usize>(
    events: &mut mpsc::UnboundedReceiver<Event>,
    wanted: [Event; N],
) {
    let mut missing = wanted.to_vec();
    while !missing.is_empty() {
        let event = next(events, |_| true).await;
        missing.retain(|w| *w != event);
    }
}

async fn get(node: &Node, id: impl Into<Target>) -> i64 {
    match node.request::<Cmd, Answer>(id, Cmd::Get, T).await {
        Ok(Answer::Value(v)) => v,
        other => panic!("unexpected {other:?}"),
    }
}

async fn seqs_of(node: &Node, id: impl Into<Target>) -> BTreeMap<u32, Vec<u32>> {
    match node.request::<Cmd, Answer>(id, Cmd::Seqs, T).await {
        Ok(Answer::Seqs(s)) => s,
        other => panic!("unexpected {other:?}"),
    }
}

fn spray(node: &Node, to: UnitId, senders: u32, count: u32) -> Vec<tokio::task::JoinHandle<()>> {
    (0..senders)
        .map(|sender| {
            let node = node.clone();
            let to = to.clone();
            tokio::spawn(async move {
                for n in 0..count {
                    node.tell(to.clone(), Cmd::Seq { sender, n }).expect("told");
                    if n % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect()
}

fn assert_in_order(seqs: &BTreeMap<u32, Vec<u32>>, senders: u32, count: u32) {
    assert_eq!(seqs.len() as u32, senders);
    let want: Vec<u32> = (0..count).collect();
    for (sender, got) in seqs {
        assert_eq!(
            got, &want,
            "sender {sender}: messages lost, doubled or reordered"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_from_one_sender_run_in_the_order_sent() {
    let (reg, _events) = probes();
    let node = node(reg).await;
    let room = spot("r1");
    node.create_spot("room", &room).await.expect("created");
    for s in spray(&node, UnitId::Spot(room.clone()), 8, 2_000) {
        s.await.expect("sender ran");
    }
    assert_in_order(&seqs_of(&node, &room).await, 8, 2_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_holds_while_an_actor_joins_and_leaves_a_spot_wide_room() {
    let (reg, mut events) = probes();
    let node = node(reg).await;
    let room = spot("r1");
    let p1 = actor("p1");
    node.create_spot("room", &room).await.expect("room");
    node.create_actor("player", &p1).await.expect("player");
    let senders = spray(&node, UnitId::Actor(p1.clone()), 4, 3_000);
    node.join(&p1, &room).await.expect("joined");
    node.leave(&p1).await.expect("left");
    node.join(&p1, &room).await.expect("joined again");
    for s in senders {
        s.await.expect("sender ran");
    }
    assert_in_order(&seqs_of(&node, &p1).await, 4, 3_000);
    next(&mut events, |e| matches!(e, Event::MemberJoined(..))).await;
    next(
        &mut events,
        |e| matches!(e, Event::Left(u, s) if *u == UnitId::Actor(p1.clone()) && *s == room),
    )
    .await;
}

/// Like `spray`, but each sender tells through a `UnitRef` it took once, and every third tell goes
/// by id, so both ways mix within one sender.
fn spray_by_ref(
    node: &Node,
    to: UnitId,
    senders: u32,
    count: u32,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..senders)
        .map(|sender| {
            let node = node.clone();
            let to = to.clone();
            let mut unit = node.unit_ref(to.clone());
            tokio::spawn(async move {
                for n in 0..count {
                    let msg = Cmd::Seq { sender, n };
                    let told = if n % 3 == 0 {
                        node.tell(to.clone(), msg)
                    } else {
                        unit.tell(msg)
                    };
                    told.expect("told");
                    if n % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tells_through_a_unit_ref_keep_their_order_while_the_actor_joins_and_leaves_a_room() {
    let (reg, _events) = probes();
    let node = node(reg).await;
    let room = spot("r1");
    let p1 = actor("p1");
    node.create_spot("room", &room).await.expect("room");
    node.create_actor("player", &p1).await.expect("player");
    let senders = spray_by_ref(&node, UnitId::Actor(p1.clone()), 4, 3_000);
    node.join(&p1, &room).await.expect("joined");
    node.leave(&p1).await.expect("left");
    node.join(&p1, &room).await.expect("joined again");
    for s in senders {
        s.await.expect("sender ran");
    }
    assert_in_order(&seqs_of(&node, &p1).await, 4, 3_000);
}

#[tokio::test]
async fn a_unit_ref_answers_like_a_tell_by_id_and_finds_a_unit_created_again() {
    let (reg, _events) = probes();
    let node = node(reg).await;
    let room = spot("r1");
    node.create_spot("room", &room).await.expect("room");
    let mut unit = node.unit_ref(&room);
    assert_eq!(unit.target().id(), &UnitId::Spot(room.clone()));
    unit.tell(Cmd::Add(2)).expect("told");
    let err = unit.tell("not a command".to_owned()).unwrap_err();
    assert!(
        matches!(err, MessageError::WrongMessageType { .. }),
        "{err}"
    );
    assert_eq!(get(&node, &room).await, 2);
    node.stop_unit(&UnitId::Spot(room.clone()))
        .await
        .expect("stopped");
    // As by id: the unit might live on another node, so the tell is accepted; its lookup finds no
    // unit, and it is dropped, as the request that waited behind it shows.
    unit.tell(Cmd::Add(5))
        .expect("a tell to an unknown id is accepted");
    assert!(matches!(
        node.request::<Cmd, Answer>(&room, Cmd::Get, T).await,
        Err(MessageError::UnknownId { .. })
    ));
    node.create_spot("room", &room).await.expect("room again");
    unit.tell(Cmd::Add(3)).expect("told");
    assert_eq!(get(&node, &room).await, 3);
    node.shutdown().await;
}

/// A behaviour that counts how many of its kind run a turn at the same moment.
struct Overlap {
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Behavior for Overlap {
    type Msg = u32;
    type Reply = ();

    fn handle(&mut self, _ctx: &mut Ctx<'_>, spin: u32) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        // Stay in the turn until another unit of the kind is seen running, or for a bounded spin.
        for _ in 0..spin {
            if self.peak.load(Ordering::SeqCst) > 1 {
                break;
            }
            std::hint::spin_loop();
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn peak_overlap(mode: ExecutionMode) -> usize {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("s", |_| Overlap {
            running: Arc::new(AtomicUsize::new(0)),
            peak: Arc::new(AtomicUsize::new(0)),
        })
        .mode(mode),
    );
    let (r, p) = (running.clone(), peak.clone());
    reg.register(Registration::actor("a", move |_| Overlap {
        running: r.clone(),
        peak: p.clone(),
    }));
    let node = node(reg).await;
    let s = spot("s1");
    node.create_spot("s", &s).await.expect("spot");
    let members: Vec<ActorId> = (0..4).map(|i| actor(&format!("a{i}"))).collect();
    for a in &members {
        node.create_actor("a", a).await.expect("actor");
        node.join(a, &s).await.expect("join");
    }
    // Many long turns on every member at once: a PerActor spot overlaps them on two threads.
    for _ in 0..20 {
        for a in &members {
            node.tell(a, 200_000u32).expect("told");
        }
    }
    for a in &members {
        let () = node.request(a, 0u32, T).await.expect("drained");
    }
    peak.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spot_wide_members_never_run_two_turns_at_once() {
    assert_eq!(peak_overlap(ExecutionMode::SpotWide).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_actor_members_run_in_parallel() {
    assert!(peak_overlap(ExecutionMode::PerActor).await > 1);
}

async fn ticks_after(policy: OverrunPolicy, late_by_ms: u64) -> Vec<Tick> {
    let (reg, _events) = probes();
    let node = node(reg).await;
    let room = spot("r1");
    node.create_spot("room", &room).await.expect("room");
    let Answer::Ok = node
        .request(
            &room,
            Cmd::Timer {
                period_ms: 100,
                policy,
            },
            T,
        )
        .await
        .expect("timer set")
    else {
        panic!("timer not set")
    };
    tokio::time::advance(Duration::from_millis(late_by_ms)).await;
    match node.request(&room, Cmd::Ticks, T).await.expect("ticks") {
        Answer::Ticks(t) => t,
        other => panic!("unexpected {other:?}"),
    }
}

fn slots(ticks: &[Tick]) -> Vec<(u64, u64, u64)> {
    ticks
        .iter()
        .map(|t| (t.scheduled_index, t.delivery_index, t.skipped))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn skip_late_ticks_delivers_the_latest_slot_with_the_skipped_count() {
    let ticks = ticks_after(OverrunPolicy::SkipLateTicks, 450).await;
    assert_eq!(slots(&ticks), vec![(3, 0, 3)]);
}

#[tokio::test(start_paused = true)]
async fn catch_up_bounded_delivers_at_most_its_bound_of_missed_ticks() {
    let ticks = ticks_after(OverrunPolicy::CatchUpBounded { max: 2 }, 450).await;
    assert_eq!(slots(&ticks), vec![(1, 0, 1), (2, 1, 0), (3, 2, 0)]);
}

#[tokio::test(start_paused = true)]
async fn delay_next_tick_delivers_once_and_shifts_the_schedule() {
    let (reg, _events) = probes();
    let node = node(reg).await;
    let room = spot("r1");
    node.create_spot("room", &room).await.expect("room");
    let policy = OverrunPolicy::DelayNextTick;
    let _: Answer = node
        .request(
            &room,
            Cmd::Timer {
                period_ms: 100,
                policy,
            },
            T,
        )
        .await
        .expect("timer set");
    tokio::time::advance(Duration::from_millis(450)).await;
    let _: Answer = node.request(&room, Cmd::Get, T).await.expect("turn");
    // Next tick is due 100 ms after the late one ran (at 450 ms), not at 500 ms.
    tokio::time::advance(Duration::from_millis(60)).await;
    let Answer::Ticks(ticks) = node.request(&room, Cmd::Ticks, T).await.expect("ticks") else {
        panic!("no ticks")
    };
    assert_eq!(slots(&ticks), vec![(0, 0, 0)]);
    tokio::time::advance(Duration::from_millis(40)).await;
    let Answer::Ticks(ticks) = node.request(&room, Cmd::Ticks, T).await.expect("ticks") else {
        panic!("no ticks")
    };
    assert_eq!(slots(&ticks), vec![(0, 0, 0), (1, 1, 0)]);
}

#[tokio::test(start_paused = true)]
async fn on_time_ticks_arrive_once_per_period() {
    let ticks = ticks_after(OverrunPolicy::SkipLateTicks, 0).await;
    assert!(ticks.is_empty());
    let (reg, _events) = probes();
    let node = node(reg).await;
    let room = spot("r2");
    node.create_spot("room", &room).await.expect("room");
    let policy = OverrunPolicy::SkipLateTicks;
    let _: Answer = node
        .request(
            &room,
            Cmd::Timer {
                period_ms: 100,
                policy,
            },
            T,
        )
        .await
        .expect("timer");
    for _ in 0..5 {
        tokio::time::advance(Duration::from_millis(100)).await;
        let _: Answer = node.request(&room, Cmd::Get, T).await.expect("turn");
    }
    let Answer::Ticks(ticks) = node.request(&room, Cmd::Ticks, T).await.expect("ticks") else {
        panic!("no ticks")
    };
    assert_eq!(
        slots(&ticks),
        vec![(0, 0, 0), (1, 1, 0), (2, 2, 0), (3, 3, 0), (4, 4, 0)]
    );
}

#[tokio::test]
async fn worker_results_come_back_as_turns() {
    let (reg, mut events) = probes();
    let node = node(reg).await;
    let p = actor("p1");
    node.create_actor("player", &p).await.expect("player");
    node.tell(&p, Cmd::Work(21)).expect("told");
    let done = next(&mut events, |e| matches!(e, Event::WorkDone(..))).await;
    assert_eq!(done, Event::WorkDone(UnitId::Actor(p.clone()), 42));
    assert_eq!(get(&node, &p).await, 42);
}

#[tokio::test]
async fn unknown_ids_and_wrong_types_are_typed_errors() {
    let (reg, _events) = probes();
    let node = node(reg).await;
    let ghost = spot("ghost");
    let err = node
        .request::<Cmd, Answer>(&ghost, Cmd::Get, T)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        MessageError::UnknownId {
            id: UnitId::Spot(ghost.clone())
        }
    );
    // A tell cannot know at once: the id might live on another node. It is dropped.
    node.tell(&ghost, Cmd::Get)
        .expect("a tell to an unknown id is accepted");
    let room = spot("r1");
    node.create_spot("room", &room).await.expect("room");
    let err = node.tell(&room, "not a command".to_owned()).unwrap_err();
    assert!(
        matches!(err, MessageError::WrongMessageType { .. }),
        "{err}"
    );
    let err = node
        .request::<Cmd, String>(&room, Cmd::Get, T)
        .await
        .unwrap_err();
    assert!(matches!(err, MessageError::WrongReplyType { .. }), "{err}");
    assert!(matches!(
        node.create_spot("room", &room).await,
        Err(UnitError::AlreadyExists { .. })
    ));
    assert!(matches!(
        node.create_spot("nope", &spot("x")).await,
        Err(UnitError::UnknownType { .. })
    ));
    assert!(matches!(
        node.get_or_create_spot("lobby", &room).await,
        Err(UnitError::TypeMismatch { .. })
    ));
    assert_eq!(node.get_or_create_spot("room", &room).await, Ok(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_a_busy_unit_times_out_with_one_terminal() {
    let (tx, _events) = mpsc::unbounded_channel();
    let (release, gate) = std::sync::mpsc::channel();
    let gate = Arc::new(std::sync::Mutex::new(gate));
    let mut reg = Registry::new();
    reg.register(Registration::actor("slow", move |_| Probe {
        gate: Some(gate.clone()),
        ..Probe::new(&tx)
    }));
    let node = node(reg).await;
    let p = actor("p1");
    node.create_actor("slow", &p).await.expect("actor");
    node.tell(&p, Cmd::Block).expect("told");
    let err = node
        .request::<Cmd, Answer>(&p, Cmd::Get, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(err, MessageError::Timeout { .. }), "{err}");
    release.send(()).expect("released");
    // The late reply to the timed-out request is dropped; a new request gets its own.
    assert_eq!(get(&node, &p).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_spot_is_activated_once_by_racing_first_messages() {
    let (reg, mut events) = probes();
    let node = node(reg).await;
    let id = spot("mm");
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let node = node.clone();
            let id = id.clone();
            tokio::spawn(async move {
                node.tell(Target::instance("counter", id), Cmd::Add(1))
                    .expect("told")
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("ran");
    }
    // The tells came from 32 other senders, so nothing orders this request after them: ask until
    // all have run (with activation intent, as a plain id is unknown until the activation is done).
    let counted = tokio::time::timeout(T, async {
        loop {
            let n = get(&node, Target::instance("counter", id.clone())).await;
            if n >= 32 {
                return n;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("every tell ran");
    assert_eq!(counted, 32, "each tell ran once");
    assert_eq!(
        next(&mut events, |_| true).await,
        Event::Started(UnitId::Spot(id.clone()))
    );
    assert!(events.try_recv().is_err(), "started more than once");
    // Without activation intent an absent instance is just unknown.
    let err = node
        .request::<Cmd, Answer>(spot("other"), Cmd::Get, T)
        .await
        .unwrap_err();
    assert!(matches!(err, MessageError::UnknownId { .. }), "{err}");
    // Activation intent does not create a User Spot.
    let err = node
        .request::<Cmd, Answer>(Target::instance("room", spot("x")), Cmd::Get, T)
        .await
        .unwrap_err();
    assert!(matches!(err, MessageError::UnknownId { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_stops_its_unit_and_nothing_else() {
    let (reg, _events) = probes();
    let node = node(reg).await;
    let (a, b) = (actor("a"), actor("b"));
    node.create_actor("player", &a).await.expect("a");
    node.create_actor("player", &b).await.expect("b");
    node.tell(&a, Cmd::Add(5)).expect("told");
    let (boom, queued) = tokio::join!(
        node.request::<Cmd, Answer>(&a, Cmd::Boom, T),
        node.request::<Cmd, Answer>(&a, Cmd::Get, T),
    );
    assert_eq!(
        boom.unwrap_err(),
        MessageError::UnitFailed {
            id: UnitId::Actor(a.clone())
        }
    );
    assert!(
        matches!(
            queued,
            Err(MessageError::UnitStopped { .. }) | Err(MessageError::UnknownId { .. })
        ),
        "{queued:?}"
    );
    assert!(!node.hosts(&UnitId::Actor(a.clone())));
    node.tell(&b, Cmd::Add(7)).expect("b still takes messages");
    assert_eq!(get(&node, &b).await, 7);
    assert_eq!(node.state(), NodeState::Serving);
}

#[tokio::test]
async fn a_restarting_factory_replaces_the_instance_after_a_panic() {
    let (reg, mut events) = probes();
    let node = node(reg).await;
    let p = actor("p");
    node.create_actor("phoenix", &p).await.expect("p");
    next(&mut events, |e| matches!(e, Event::Started(_))).await;
    node.tell(&p, Cmd::Add(5)).expect("told");
    let err = node
        .request::<Cmd, Answer>(&p, Cmd::Boom, T)
        .await
        .unwrap_err();
    assert!(matches!(err, MessageError::UnitFailed { .. }));
    next(&mut events, |e| matches!(e, Event::Started(_))).await;
    assert_eq!(get(&node, &p).await, 0, "fresh state after restart");
}

/// An adapter that keeps nothing, for registrations that only test validation.
struct Nothing;

impl StateAdapter<Probe> for Nothing {
    fn capture(&self, _: &Probe) -> Result<Vec<u8>, AdapterError> {
        Ok(Vec::new())
    }
    fn restore(&self, _: &mut Probe, _: &[u8]) -> Result<(), AdapterError> {
        Ok(())
    }
}

#[tokio::test]
async fn registrations_that_make_no_sense_are_refused_at_start() {
    let (tx, _rx) = mpsc::unbounded_channel::<Event>();
    let mut reg = Registry::new();
    let t = tx.clone();
    reg.register(Registration::spot("room", move |_| Probe::new(&t)));
    let t = tx.clone();
    reg.register(Registration::actor("room", move |_| Probe::new(&t)));
    let t = tx.clone();
    reg.register(
        Registration::spot("lobby", move |_| Probe::new(&t))
            .mode(ExecutionMode::PerActor)
            .policy(RelocationPolicy::PreserveState(Arc::new(Nothing))),
    );
    let t = tx.clone();
    reg.register(
        Registration::actor("p", move |_| Probe::new(&t))
            .readiness(ReadinessMode::ApplicationSignaled),
    );
    let Err(StartError::Registration(problems)) =
        Node::start(NodeConfig::new(NodeId::new("n").expect("id")), reg).await
    else {
        panic!("bad registrations accepted")
    };
    assert_eq!(
        problems,
        vec![
            RegistrationError::Duplicate {
                type_name: "room".into()
            },
            RegistrationError::AdapterOnPerActorSpot {
                type_name: "lobby".into()
            },
            RegistrationError::ReadinessNotSpotWide {
                type_name: "p".into()
            },
        ]
    );
}

#[tokio::test]
async fn relocation_ready_defer_applies_only_to_application_signaled_spots() {
    let (reg, _events) = probes();
    let node = node(reg).await;
    let (round, room) = (spot("round1"), spot("room1"));
    node.create_spot("round", &round).await.expect("round");
    node.create_spot("room", &room).await.expect("room");
    assert_eq!(
        node.request(&round, Cmd::Defer, T).await,
        Ok(Answer::Defer(Ok(())))
    );
    assert_eq!(
        node.request(&round, Cmd::DeferTwice, T).await,
        Ok(Answer::Defer(Ok(())))
    );
    let Ok(Answer::Defer(Err(reason))) = node.request(&room, Cmd::Defer, T).await else {
        panic!("defer allowed on an AnyTurnBoundary spot")
    };
    assert!(reason.contains("ApplicationSignaled"), "{reason}");
}

#[tokio::test]
async fn joining_and_leaving_run_callbacks_on_both_sides() {
    let (reg, mut events) = probes();
    let node = node(reg).await;
    for (kind, id) in [("room", "wide"), ("lobby", "per")] {
        let s = spot(id);
        let p = actor(&format!("p-{id}"));
        node.create_spot(kind, &s).await.expect("spot");
        node.create_actor("player", &p).await.expect("actor");
        node.join(&p, &s).await.expect("join");
        let (pu, su) = (UnitId::Actor(p.clone()), UnitId::Spot(s.clone()));
        let joined = [
            Event::MemberJoined(su.clone(), p.clone()),
            Event::Joined(pu.clone(), s.clone()),
        ];
        expect_all(&mut events, joined).await;
        node.tell(&p, Cmd::Add(3)).expect("member reachable");
        assert_eq!(get(&node, &p).await, 3, "state kept across the join");
        node.leave(&p).await.expect("leave");
        let left = [
            Event::MemberLeft(su.clone(), p.clone()),
            Event::Left(pu.clone(), s.clone()),
        ];
        expect_all(&mut events, left).await;
        assert_eq!(get(&node, &p).await, 3, "state kept across the leave");
        assert!(matches!(
            node.leave(&p).await,
            Err(UnitError::NotAllowed { .. })
        ));
    }
    // Joining another room leaves the first one.
    let (a, b, p) = (spot("a"), spot("b"), actor("p"));
    node.create_spot("room", &a).await.expect("a");
    node.create_spot("room", &b).await.expect("b");
    node.create_actor("player", &p).await.expect("p");
    node.join(&p, &a).await.expect("join a");
    node.join(&p, &b).await.expect("join b");
    next(&mut events, |e| {
        *e == Event::MemberLeft(UnitId::Spot(a.clone()), p.clone())
    })
    .await;
    next(&mut events, |e| {
        *e == Event::MemberJoined(UnitId::Spot(b.clone()), p.clone())
    })
    .await;
    assert!(matches!(
        node.join(&p, &spot("nowhere")).await,
        Err(UnitError::UnknownId { .. })
    ));
}

#[tokio::test]
async fn shutdown_closes_every_unit_and_refuses_new_work() {
    let (reg, mut events) = probes();
    let node = node(reg).await;
    let (room, p) = (spot("r"), actor("p"));
    node.create_spot("room", &room).await.expect("room");
    node.create_actor("player", &p).await.expect("p");
    node.join(&p, &room).await.expect("join");
    node.shutdown().await;
    assert_eq!(node.state(), NodeState::Stopped);
    let mut closed = Vec::new();
    while closed.len() < 2 {
        if let Event::Closing(id) = next(&mut events, |e| matches!(e, Event::Closing(_))).await {
            closed.push(id);
        }
    }
    closed.sort();
    assert_eq!(
        closed,
        vec![UnitId::Spot(room.clone()), UnitId::Actor(p.clone())]
    );
    assert!(matches!(
        node.tell(&room, Cmd::Add(1)),
        Err(MessageError::NotServing { .. })
    ));
    assert_eq!(node.unit_count(), 0);
}

/// Polls a request once, so it is sent (queued on its unit) before the test goes on; a request
/// already answered in that one poll gives its answer.
async fn send_now<F: std::future::Future + Unpin>(request: &mut F) -> Option<F::Output> {
    tokio::time::timeout(Duration::ZERO, request).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_accepted_work_before_closing() {
    let (reg, _events) = probes();
    let node = node(reg).await;
    let p = actor("p");
    node.create_actor("player", &p).await.expect("p");
    for _ in 0..500 {
        node.tell(&p, Cmd::Add(1)).expect("told");
    }
    let mut last = Box::pin(node.request::<Cmd, Answer>(&p, Cmd::Get, T));
    let early = send_now(&mut last).await;
    let outcome = node.shutdown().await;
    assert_eq!(outcome, ferry::ShutdownOutcome::Stopped);
    let answer = match early {
        Some(answer) => answer,
        None => last.await,
    };
    assert_eq!(answer, Ok(Answer::Value(500)), "queued work ran first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_still_busy_at_the_shutdown_deadline_is_closed_and_its_queue_answered() {
    let (tx, _events) = mpsc::unbounded_channel();
    let (release, gate) = std::sync::mpsc::channel();
    let gate = Arc::new(std::sync::Mutex::new(gate));
    let mut reg = Registry::new();
    reg.register(Registration::actor("slow", move |_| Probe {
        gate: Some(gate.clone()),
        ..Probe::new(&tx)
    }));
    let node = node(reg).await;
    let p = actor("p");
    node.create_actor("slow", &p).await.expect("actor");
    let mut blocked = Box::pin(node.request::<Cmd, Answer>(&p, Cmd::Block, T));
    assert!(
        send_now(&mut blocked).await.is_none(),
        "blocked until released"
    );
    let mut queued = Box::pin(node.request::<Cmd, Answer>(&p, Cmd::Get, T));
    assert!(
        send_now(&mut queued).await.is_none(),
        "queued behind the blocked turn"
    );
    // The handler is stuck past the deadline: the shutdown does not wait for it.
    let outcome = node.shutdown_within(Duration::from_millis(200)).await;
    assert_eq!(
        outcome,
        ferry::ShutdownOutcome::ForceStopped {
            reason: ferry::ShutdownReason::DeadlineExceeded
        }
    );
    release.send(()).expect("released");
    assert!(matches!(
        queued.await,
        Err(MessageError::UnitStopped { .. })
    ));
    assert_eq!(blocked.await, Ok(Answer::Ok), "the running turn finished");
}

/// A unit that, told to, holds its turn until the test lets it go: a stuck unit.
struct Stuck {
    started: std::sync::mpsc::Sender<()>,
    release: Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
}

impl Behavior for Stuck {
    type Msg = bool;
    type Reply = ();

    fn handle(&mut self, _ctx: &mut Ctx<'_>, hold: bool) {
        if hold {
            self.started.send(()).expect("test listens");
            self.release
                .lock()
                .expect("lock")
                .recv_timeout(T)
                .expect("released");
        }
    }
}

/// A node allowing `limit` requests in flight, with two stuck units; where their handlers say they
/// started holding, and the sender that lets one go on.
async fn stuck_units(
    limit: usize,
) -> (
    Node,
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
    [SpotId; 2],
) {
    let (started_tx, started) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
    let mut registry = Registry::new();
    registry.register(Registration::spot("stuck", move |_| Stuck {
        started: started_tx.clone(),
        release: release_rx.clone(),
    }));
    let mut config = NodeConfig::new(NodeId::new("n1").expect("id"));
    config.max_requests_in_flight = limit;
    let node = Node::start(config, registry).await.expect("node starts");
    let units = [spot("a"), spot("b")];
    for unit in &units {
        node.create_spot("stuck", unit).await.expect("created");
    }
    (node, started, release, units)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_past_max_requests_in_flight_fails_at_once_and_places_come_back() {
    let (node, started, release, [a, b]) = stuck_units(2).await;

    // Two requests wait on stuck units: each opened its place before its handler started.
    let waiting: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .map(|id| {
            let node = node.clone();
            tokio::spawn(async move { node.request::<bool, ()>(id, true, T).await })
        })
        .collect();
    for _ in 0..2 {
        tokio::task::block_in_place(|| started.recv_timeout(T)).expect("handler started");
    }

    let refused = node.request::<bool, ()>(a.clone(), false, T).await;
    assert!(
        matches!(refused, Err(MessageError::TooManyRequests { limit: 2 })),
        "got {refused:?}"
    );

    release.send(()).expect("release a");
    release.send(()).expect("release b");
    for request in waiting {
        request
            .await
            .expect("task")
            .expect("answered once released");
    }
    node.request::<bool, ()>(a, false, T)
        .await
        .expect("places freed by answered requests");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_that_timed_out_gives_its_place_back() {
    let (node, started, release, [a, b]) = stuck_units(1).await;

    let timed_out = node
        .request::<bool, ()>(a, true, Duration::from_millis(50))
        .await;
    assert!(matches!(timed_out, Err(MessageError::Timeout { .. })));
    tokio::task::block_in_place(|| started.recv_timeout(T)).expect("handler started");

    node.request::<bool, ()>(b, false, T)
        .await
        .expect("the timed-out request no longer holds the only place");
    release.send(()).expect("release a");
    node.shutdown().await;
}
