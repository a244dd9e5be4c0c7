//! Moves whose target works long: a restore of 6 seconds (longer than the step the source waits
//! for a silent target) moves with `move_unit` and in a drain, while a target that falls silent is
//! still given up after that step and one that works past the deadline at the deadline.

use std::sync::Arc;
use std::time::Duration;

use ferry::relocation::protocol::MoveEnd;
use ferry::{
    Behavior, BlockedReason, Ctx, Node, Registration, Registry, RelocateOutcome, RelocationPolicy,
    SpotId, UnitId,
};
use ferry_tests::cluster::{Cluster, drain_in_background, move_in_background};
use ferry_tests::faults::{Gate, Hooked};
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(10);

/// Longer than the 5 s a source waits for a target it hears nothing from.
const SLOW_RESTORE: Duration = Duration::from_secs(6);

/// A room that logs what it is told.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Room {
    log: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    Log(String),
    /// A turn that runs this many milliseconds: what is told meanwhile waits in the queue.
    Busy(u64),
    Get,
}

impl Behavior for Room {
    type Msg = Cmd;
    type Reply = Vec<String>;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, msg: Cmd) -> Vec<String> {
        match msg {
            Cmd::Log(line) => self.log.push(line),
            Cmd::Busy(ms) => std::thread::sleep(Duration::from_millis(ms)),
            Cmd::Get => {}
        }
        self.log.clone()
    }
}

fn registry_with(adapter: Hooked) -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("room", |_| Room::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(adapter))),
    );
    reg
}

fn registry() -> Registry {
    registry_with(Hooked::default())
}

/// n1 (plain) and n2, whose restores go through `hooked`, with room "r" on n1 that has logged
/// "before".
async fn room_on_n1_and_target(hooked: Hooked) -> (Cluster, Node, Node, SpotId) {
    let mut cluster = Cluster::start(1, registry).await;
    cluster.add("n2", registry_with(hooked)).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    let r = SpotId::new("r").expect("valid id");
    n1.create_spot_on(n1.id(), "room", &r)
        .await
        .expect("created");
    let _: Vec<String> = n1
        .request(&r, Cmd::Log("before".into()), T)
        .await
        .expect("logged");
    (cluster, n1, n2, r)
}

/// Holds the room in a turn and queues `q0..q4` behind it, so that they are the saved work of a
/// move that seals it now.
fn queue_behind_a_turn(n1: &Node, r: &SpotId) {
    n1.tell(r, Cmd::Busy(300)).expect("told");
    for i in 0..5 {
        n1.tell(r, Cmd::Log(format!("q{i}"))).expect("told");
    }
}

/// Tells `h0..h4`: sent while the target restores, they are held on the source and relayed.
fn tell_while_restoring(n1: &Node, r: &SpotId) {
    for i in 0..5 {
        n1.tell(r, Cmd::Log(format!("h{i}"))).expect("told");
    }
}

/// Asserts the room ran every message once (counted one by one), in the order it was told.
async fn ran_each_once_in_order(node: &Node, r: &SpotId) {
    let log: Vec<String> = node.request(r, Cmd::Get, T).await.expect("room answers");
    let mut told = vec!["before".to_owned()];
    told.extend((0..5).map(|i| format!("q{i}")));
    told.extend((0..5).map(|i| format!("h{i}")));
    for line in &told {
        let runs = log.iter().filter(|l| *l == line).count();
        assert_eq!(runs, 1, "{line} ran {runs} times: {log:?}");
    }
    assert_eq!(log, told);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_room_whose_restore_takes_6s_moves_with_move_unit_and_runs_each_message_once() {
    let (hooked, gate) = Gate::slow(SLOW_RESTORE);
    let (cluster, n1, n2, r) = room_on_n1_and_target(hooked).await;
    queue_behind_a_turn(&n1, &r);
    let mover = move_in_background(&n1, UnitId::Spot(r.clone()), n2.id());
    gate.wait_started().await;
    tell_while_restoring(&n1, &r);
    let report = mover.await.expect("mover ran").expect("move started");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    assert!(n2.hosts(&UnitId::Spot(r.clone())));
    assert!(!n1.hosts(&UnitId::Spot(r.clone())));
    ran_each_once_in_order(&n2, &r).await;
    cluster.shutdown().await;
}

/// A drain with `deadline` moves a room whose restore takes `restore`, each message once, in order.
async fn a_drain_moves_a_room_whose_restore_takes(restore: Duration, deadline: Duration) {
    let (hooked, gate) = Gate::slow(restore);
    let (cluster, n1, n2, r) = room_on_n1_and_target(hooked).await;
    queue_behind_a_turn(&n1, &r);
    let drain = drain_in_background(&n1, deadline);
    gate.wait_started().await;
    tell_while_restoring(&n1, &r);
    let outcome = drain.await.expect("drain ran");
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: 1 });
    assert!(n2.hosts(&UnitId::Spot(r.clone())));
    ran_each_once_in_order(&n2, &r).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_with_a_25s_deadline_moves_a_room_whose_restore_takes_6s() {
    a_drain_moves_a_room_whose_restore_takes(SLOW_RESTORE, Duration::from_secs(25)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_with_a_long_deadline_moves_a_room_whose_restore_outlasts_move_units_30s() {
    // Longer than move_unit's whole deadline: only the drain's own deadline bounds it, on both
    // sides (the target keeps the unit staged for as long as the offer says the move may take).
    a_drain_moves_a_room_whose_restore_takes(Duration::from_secs(32), Duration::from_secs(60))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_that_falls_silent_mid_restore_is_given_up_and_the_room_runs_on_the_source() {
    let (hooked, gate) = Gate::new(false);
    let (cluster, n1, n2, r) = room_on_n1_and_target(hooked).await;
    queue_behind_a_turn(&n1, &r);
    let mover = move_in_background(&n1, UnitId::Spot(r.clone()), n2.id());
    gate.wait_started().await;
    tell_while_restoring(&n1, &r);
    // The target stops as a crash would, mid-restore: no answer and no progress any more.
    n2.abort().await;
    let report = mover.await.expect("mover ran").expect("move started");
    assert_eq!(
        report.end,
        MoveEnd::Restored("the target did not answer".into()),
        "given up for its silence, long before the move's deadline"
    );
    gate.open();
    assert!(n1.hosts(&UnitId::Spot(r.clone())));
    ran_each_once_in_order(&n1, &r).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_that_works_on_past_the_deadline_is_given_up_at_the_deadline() {
    let (hooked, gate) = Gate::new(false);
    let (cluster, n1, _n2, r) = room_on_n1_and_target(hooked).await;
    queue_behind_a_turn(&n1, &r);
    let drain = drain_in_background(&n1, Duration::from_secs(2));
    gate.wait_started().await;
    tell_while_restoring(&n1, &r);
    // The restore never ends before the deadline, though the target reports it running.
    let outcome = drain.await.expect("drain ran");
    assert_eq!(
        outcome,
        RelocateOutcome::Blocked {
            reason: BlockedReason::DeadlineExceeded,
            stayed: vec![UnitId::Spot(r.clone())],
        }
    );
    gate.open();
    assert!(n1.hosts(&UnitId::Spot(r.clone())));
    ran_each_once_in_order(&n1, &r).await;
    cluster.shutdown().await;
}
