//! Every room with state taken off the first node at once, two ways on the same rooms: the
//! baseline hands them off to the two other nodes, then (untimed) back; then Ferry drains the node.
//! Both move up to [`IN_FLIGHT`] rooms at a time (Ferry's drain seals only as many as its window lets
//! through) and carry as many messages per room.

use std::time::{Duration, Instant};

use ferry::{Node, RelocateMode, RelocateOptions};
use ferry_benches::rooms::{Answer, Handoff, RoomError, RoomMsg, T, spawn_handoff};
use futures_util::StreamExt;

use super::BenchError;
use super::rooms::{StateRooms, Tells};
use crate::drain_watch::{self, Drained};
use crate::local_cluster::LocalCluster;

/// Rooms handed off at once by the baseline: as many as a Ferry drain moves at once.
const IN_FLIGHT: usize = 128;

/// How long the Ferry drain may take.
pub(super) const DEADLINE: Duration = Duration::from_secs(120);

/// What the two drains measured.
pub struct Drains {
    /// Ferry's drain.
    pub ferry: Drained,
    /// Messages Ferry lost or ran twice.
    pub ferry_tells: Tells,
    /// The baseline's handoffs of every room.
    pub baseline: BaselineDrain,
}

/// The baseline's drain.
pub struct BaselineDrain {
    /// Rooms handed off.
    pub units: u64,
    /// Bytes of state saved and read back.
    pub bytes: u64,
    /// From the first stop until the last room answered on its target.
    pub elapsed: Duration,
    /// Messages lost or run twice.
    pub tells: Tells,
}

/// Takes every room off the first node with the baseline, brings them back, and drains the node
/// with Ferry; each room is sent `queued` messages on the way.
pub async fn run(
    cluster: &LocalCluster,
    rooms: &mut StateRooms,
    queued: usize,
) -> Result<Drains, BenchError> {
    let nodes = &cluster.nodes;
    let buffered = vec![RoomMsg::Add(1); queued];
    let started = Instant::now();
    let handoffs = hand_off(rooms, |i| (&nodes[0], &nodes[1 + i % 2]), &buffered).await;
    let elapsed = started.elapsed();
    let mut baseline = BaselineDrain {
        units: 0,
        bytes: 0,
        elapsed,
        tells: Tells::default(),
    };
    for (i, handoff) in handoffs {
        let handoff = handoff?;
        baseline.units += 1;
        baseline.bytes += handoff.bytes as u64;
        rooms.sent(i, queued);
        baseline.tells += rooms.check(i, handoff.count);
    }
    // Back home, untimed, so that Ferry drains the same rooms from the same node.
    for (i, handoff) in hand_off(rooms, |i| (&nodes[1 + i % 2], &nodes[0]), &[]).await {
        baseline.tells += rooms.check(i, handoff?.count);
    }

    for id in &rooms.ids {
        for _ in 0..queued {
            nodes[0]
                .tell(id, RoomMsg::Add(1))
                .map_err(RoomError::from)?;
        }
    }
    for i in 0..rooms.ids.len() {
        rooms.sent(i, queued);
    }
    let options = RelocateOptions {
        mode: RelocateMode::PlannedMaintenance,
        deadline: DEADLINE,
    };
    // A drain that did not move every room is reported, with what it measured, and fails the
    // run at its end (`Report::unfinished`); the rooms it left answer from where they are.
    let ferry = drain_watch::drain(&nodes[0], options).await;
    let mut ferry_tells = Tells::default();
    for (i, count) in counts(&nodes[1], rooms).await {
        ferry_tells += rooms.check(i, count?);
    }
    Ok(Drains {
        ferry,
        ferry_tells,
        baseline,
    })
}

/// Hands every room off from and to the nodes `route` gives for its index, [`IN_FLIGHT`] at a
/// time, each in a task of its own followed by `buffered`; returns each room's index with its
/// outcome.
async fn hand_off<'a>(
    rooms: &StateRooms,
    route: impl Fn(usize) -> (&'a Node, &'a Node),
    buffered: &[RoomMsg],
) -> Vec<(usize, Result<Handoff, RoomError>)> {
    futures_util::stream::iter(rooms.ids.iter().enumerate())
        .map(|(i, id)| {
            let (from, to) = route(i);
            let handoff = spawn_handoff(
                from.store().clone(),
                from.clone(),
                to.clone(),
                id.clone(),
                buffered.to_vec(),
            );
            async move { (i, handoff.await.map(|(handoff, _)| handoff)) }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await
}

/// Asks every room its count from `node`, [`IN_FLIGHT`] at a time.
async fn counts(node: &Node, rooms: &StateRooms) -> Vec<(usize, Result<u64, RoomError>)> {
    futures_util::stream::iter(rooms.ids.iter().enumerate())
        .map(|(i, id)| async move {
            let answer = node.request::<_, Answer>(id, RoomMsg::Get, T).await;
            (i, answer.map_err(RoomError::from).and_then(Answer::count))
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await
}
