//! Rooms moved one at a time, each with a queue, beside the stop-the-room handoff on the same
//! room: a room goes from the first node to the second with Ferry, and comes back with the
//! baseline carrying as many buffered messages, round after round until the time is up.

use std::time::{Duration, Instant};

use ferry_benches::rooms::{RoomMsg, move_with_queue, spawn_handoff};

use super::BenchError;
use super::rooms::{StateRooms, Tells};
use crate::local_cluster::LocalCluster;
use crate::move_reports::MoveRecord;
use crate::percentiles::Durations;

/// What the moves one at a time measured.
#[derive(Debug, Default)]
pub struct OneByOne {
    /// Ferry's moves: pauses, phases, bytes.
    pub ferry: MoveRecord,
    /// For each Ferry move, from the seal until a question queued behind the messages was answered
    /// on the target.
    pub answered: Durations,
    /// Messages Ferry lost or ran twice.
    pub ferry_tells: Tells,
    /// Each baseline handoff, from the start of the stop until the room answered on the target.
    pub baseline: Durations,
    /// Bytes of state the baseline saved and read back.
    pub baseline_bytes: u64,
    /// Messages the baseline lost or ran twice.
    pub baseline_tells: Tells,
}

/// Moves the rooms one at a time for `seconds` (one round at least), each with `queued` messages.
///
/// Runs the held moves of [`move_with_queue`], so it must run on the task of `block_on`.
pub async fn run(
    cluster: &LocalCluster,
    rooms: &mut StateRooms,
    queued: usize,
    seconds: Duration,
) -> Result<OneByOne, BenchError> {
    let (home, away) = (&cluster.nodes[0], &cluster.nodes[1]);
    let store = home.store().clone();
    let buffered = vec![RoomMsg::Add(1); queued];
    let until = Instant::now() + seconds;
    let mut out = OneByOne::default();
    for i in (0..rooms.ids.len()).cycle() {
        let id = rooms.ids[i].clone();
        let moved = move_with_queue(home, away.id(), &id, queued).await?;
        rooms.sent(i, queued);
        out.ferry_tells += rooms.check(i, moved.count);
        out.ferry.record(&moved.report);
        out.answered.record(moved.answered);

        let (handoff, took) = spawn_handoff(
            store.clone(),
            away.clone(),
            home.clone(),
            id,
            buffered.clone(),
        )
        .await?;
        out.baseline.record(took);
        out.baseline_bytes += handoff.bytes as u64;
        rooms.sent(i, queued);
        out.baseline_tells += rooms.check(i, handoff.count);
        if Instant::now() >= until {
            break;
        }
    }
    Ok(out)
}
