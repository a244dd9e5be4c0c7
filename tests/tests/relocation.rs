//! Moving live units between nodes over real QUIC: order, terminals, rooms, timers, failures.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry::relocation::protocol::MoveEnd;
use ferry::{
    ActorId, AdapterError, Behavior, Ctx, OverrunPolicy, Registration, Registry,
    RelocationPolicy, SpotId, StateAdapter, Tick, UnitId,
};
use ferry_tests::cluster::Cluster;
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
    Every { name: String, ms: u64 },
    After { name: String, ms: u64 },
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
        }
        self.clone()
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

/// The serde adapter, with hooks a test uses to hold a restore, or to fail it.
#[derive(Clone, Default)]
struct Hooked {
    /// Told when a restore starts; the restore then waits for `release`.
    started: Option<Arc<Mutex<std::sync::mpsc::Sender<()>>>>,
    release: Option<Arc<Mutex<std::sync::mpsc::Receiver<()>>>>,
    fail: bool,
}

impl StateAdapter<Room> for Hooked {
    fn capture(&self, unit: &Room) -> Result<Vec<u8>, AdapterError> {
        ferry::SerdeAdapter.capture(unit)
    }

    fn restore(&self, unit: &mut Room, bytes: &[u8]) -> Result<(), AdapterError> {
        if let Some(started) = &self.started {
            let _ = started.lock().map(|s| s.send(()));
        }
        if let Some(release) = &self.release {
            let _ = release.lock().map(|r| r.recv());
        }
        if self.fail {
            return Err(AdapterError("restore refused on purpose".into()));
        }
        ferry::SerdeAdapter.restore(unit, bytes)
    }
}

fn registry_with(adapter: Hooked) -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", |_| Room::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(adapter.clone()))),
    );
    reg.register(
        Registration::actor("player", |_| Room::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(adapter))),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_moves_with_its_state_and_keeps_answering() {
    let cluster = Cluster::start(2, registry).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let r = spot("r");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    n1.tell(&r, Cmd::Log("a".into())).expect("told");
    // From another node (a request, so the next read comes after it).
    let _: Room = n2.request(&r, Cmd::Log("b".into()), T).await.expect("logged");
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

    n1.tell(&r, Cmd::Log("c".into())).expect("told");
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
