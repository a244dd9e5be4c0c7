//! The rooms that carry state: opened on one node with a blob of state each, and the count each
//! should answer, so that every step can tell whether a message was lost or run twice.

use std::ops::AddAssign;

use ferry::{Node, SpotId};
use ferry_benches::rooms::{Answer, ROOM, RoomError, RoomMsg, T};
use serde::Serialize;

use super::BenchError;

/// Messages found lost or run twice, by comparing a room's count with what it was sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tells {
    /// Messages sent that the room never ran.
    pub lost: u64,
    /// Messages the room ran more often than they were sent.
    pub duplicated: u64,
}

impl AddAssign for Tells {
    fn add_assign(&mut self, other: Tells) {
        self.lost += other.lost;
        self.duplicated += other.duplicated;
    }
}

impl Tells {
    /// Whether none was lost or doubled.
    pub fn is_clean(&self) -> bool {
        *self == Tells::default()
    }
}

/// The rooms, and the count each should have by what it was sent.
pub struct StateRooms {
    /// The rooms, `bench-0`, `bench-1`, ...
    pub ids: Vec<SpotId>,
    expected: Vec<u64>,
}

impl StateRooms {
    /// Opens `rooms` rooms on `node`, each with `bytes` of state.
    pub async fn open(node: &Node, rooms: usize, bytes: usize) -> Result<StateRooms, BenchError> {
        let mut ids = Vec::with_capacity(rooms);
        for i in 0..rooms {
            let id = SpotId::new(format!("bench-{i}"))?;
            node.create_spot_on(node.id(), ROOM, &id).await?;
            let _: Answer = node
                .request(&id, RoomMsg::Grow(bytes), T)
                .await
                .map_err(RoomError::from)?;
            ids.push(id);
        }
        Ok(StateRooms {
            expected: vec![0; rooms],
            ids,
        })
    }

    /// Notes that room `i` was sent `n` more `Add(1)`s.
    pub fn sent(&mut self, i: usize, n: usize) {
        self.expected[i] += n as u64;
    }

    /// Compares the count room `i` answered with what it was sent, and takes the answer as what
    /// it holds from now on (so one loss is counted once).
    pub fn check(&mut self, i: usize, count: u64) -> Tells {
        let expected = std::mem::replace(&mut self.expected[i], count);
        Tells {
            lost: expected.saturating_sub(count),
            duplicated: count.saturating_sub(expected),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rooms(n: usize) -> StateRooms {
        StateRooms {
            ids: Vec::new(),
            expected: vec![0; n],
        }
    }

    #[test]
    fn a_count_short_of_what_was_sent_is_a_loss_counted_once() {
        let mut r = rooms(1);
        r.sent(0, 10);
        assert_eq!(r.check(0, 7).lost, 3);
        r.sent(0, 5);
        assert!(r.check(0, 12).is_clean());
    }

    #[test]
    fn a_count_beyond_what_was_sent_is_a_duplicate() {
        let mut r = rooms(2);
        r.sent(1, 2);
        assert_eq!(
            r.check(1, 3),
            Tells {
                lost: 0,
                duplicated: 1
            }
        );
    }
}
