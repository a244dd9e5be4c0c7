//! Planned moves use the standby: a move to the node that keeps a room's copy ships only what
//! changed since the checkpoint that node acknowledged, and a drain sends each room to the node
//! that keeps its copy.

use std::time::Duration;

use ferry::relocation::protocol::MoveEnd;
use ferry::{
    Behavior, Ctx, NodeId, Registration, Registry, RelocateMode, RelocateOptions, RelocateOutcome,
    RelocationPolicy, SpotId, StandbyPolicy, UnitId,
};
use ferry_tests::cluster::Cluster;
use ferry_tests::standby::{holder_of, standbys_hold_everything};
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(10);

/// A room's state: 1 MiB, far more than what one turn changes.
const STATE: usize = 1 << 20;

/// A room whose state is a large block of bytes, one of which each turn rewrites.
#[derive(Debug, Serialize, Deserialize)]
struct Block(Vec<u8>);

impl Behavior for Block {
    type Msg = (u32, u8);
    type Reply = u64;

    /// Writes `value` at `at` (past the end: nothing) and answers the sum of every byte.
    fn handle(&mut self, _ctx: &mut Ctx<'_>, (at, value): (u32, u8)) -> u64 {
        if let Some(byte) = self.0.get_mut(at as usize) {
            *byte = value;
        }
        self.0.iter().map(|&b| u64::from(b)).sum()
    }
}

/// Rooms checkpointed at most every `interval`.
fn registry(interval: Duration) -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::spot("block", |_| Block(vec![1; STATE]))
            .policy(RelocationPolicy::serde())
            .standby(StandbyPolicy::Periodic { interval }),
    );
    reg
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_to_the_node_that_keeps_the_copy_ships_only_what_changed_since_its_checkpoint() {
    // One checkpoint, when the room opens: the change below is not in any.
    let cluster = Cluster::start(3, || registry(Duration::from_secs(3600))).await;
    let n1 = cluster.node("n1").clone();
    let rooms = [spot("a"), spot("b")];
    for room in &rooms {
        n1.create_spot_on(n1.id(), "block", room)
            .await
            .expect("room");
    }
    let others = [
        NodeId::new("n2").expect("id"),
        NodeId::new("n3").expect("id"),
    ];
    for (i, room) in rooms.iter().enumerate() {
        let id = UnitId::Spot(room.clone());
        let holder = holder_of(&*cluster.store, &id).await;
        // One byte changes after the checkpoint; the room then moves at once.
        let sum: u64 = n1
            .request(room, (4096 * i as u32, 9u8), T)
            .await
            .expect("written");
        assert_eq!(sum, STATE as u64 + 8);
        // `a` goes to the node that keeps its copy, `b` to the other one.
        let target = if i == 0 {
            holder.clone()
        } else {
            others
                .iter()
                .find(|n| **n != holder)
                .expect("another node")
                .clone()
        };
        let report = n1
            .move_unit(&id, Some(target.clone()))
            .await
            .expect("moved");
        assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
        let sent = report.copied.before_seal + report.copied.after_seal;
        if target == holder {
            assert_eq!(
                report.copied.before_seal, 0,
                "no pre-copy round: {report:?}"
            );
            assert!(
                sent <= 64 * 1024,
                "only the changed block and the rest: {report:?}"
            );
        } else {
            assert!(
                sent >= STATE as u64,
                "the whole state, as always: {report:?}"
            );
        }
        let sum: u64 = n1.request(room, (u32::MAX, 0u8), T).await.expect("read");
        assert_eq!(sum, STATE as u64 + 8, "{room} arrived whole on {target}");
        assert!(cluster.node(target.as_str()).hosts(&id));
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_sends_each_room_to_the_node_that_keeps_its_copy() {
    let cluster = Cluster::start(3, || registry(Duration::from_millis(20))).await;
    let n1 = cluster.node("n1").clone();
    let rooms: Vec<SpotId> = (0..6).map(|i| spot(&format!("r{i}"))).collect();
    for room in &rooms {
        n1.create_spot_on(n1.id(), "block", room)
            .await
            .expect("room");
    }
    standbys_hold_everything(&n1, rooms.len()).await;
    let mut holders = Vec::new();
    for room in &rooms {
        holders.push(holder_of(&*cluster.store, &UnitId::Spot(room.clone())).await);
    }
    let outcome = n1
        .relocate(RelocateOptions {
            mode: RelocateMode::PlannedMaintenance,
            deadline: T,
        })
        .await;
    assert_eq!(outcome, RelocateOutcome::Relocated { moved: rooms.len() });
    for (room, holder) in rooms.iter().zip(&holders) {
        let id = UnitId::Spot(room.clone());
        let record = n1.read_record(&id).await.expect("store").expect("record");
        assert_eq!(record.owner, *holder, "{room} went where its copy was");
    }
    cluster.shutdown().await;
}
