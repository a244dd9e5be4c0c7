//! The rooms that carry state: opened on one node with a blob of state each, rewritten at the
//! change rate the run asks for, and the count each should answer, so that every step can tell
//! whether a message was lost or run twice.

use std::ops::AddAssign;

use ferry::{Node, SpotId};
use ferry_benches::rooms::{Answer, ChangeRate, ROOM, RoomError, RoomMsg, T};
use serde::Serialize;

use super::BenchError;

/// The highest share of its state a second a room may be asked to rewrite: beyond it, ask for
/// `every-turn`.
const MAX_SHARE: f64 = 10.0;

/// Reads `--change-rate`: a share of the state per second (`0`, `0.1`, `1`), or `every-turn`.
pub fn parse_change_rate(text: &str) -> Result<ChangeRate, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("every-turn") {
        return Ok(ChangeRate::EveryTurn);
    }
    let refused = || {
        format!(
            "{text:?} is not a change rate: give the share of a room's state its turns rewrite \
             each second, from 0 to {MAX_SHARE} (such as 0.1 for a tenth), or every-turn"
        )
    };
    match text.parse::<f64>() {
        // `abs` reads -0 as 0.
        Ok(share) if (0.0..=MAX_SHARE).contains(&share) => Ok(ChangeRate::PerSecond(share.abs())),
        _ => Err(refused()),
    }
}

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
    /// Opens `rooms` rooms on `node`, each with `bytes` of state that its turns rewrite at `rate`.
    pub async fn open(
        node: &Node,
        rooms: usize,
        bytes: usize,
        rate: ChangeRate,
    ) -> Result<StateRooms, BenchError> {
        let mut ids = Vec::with_capacity(rooms);
        for i in 0..rooms {
            let id = SpotId::new(format!("bench-{i}"))?;
            node.create_spot_on(node.id(), ROOM, &id).await?;
            let _: Answer = node
                .request(&id, RoomMsg::Grow(bytes), T)
                .await
                .map_err(RoomError::from)?;
            if !rate.is_none() {
                let _: Answer = node
                    .request(&id, RoomMsg::Churn(rate), T)
                    .await
                    .map_err(RoomError::from)?;
            }
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
    fn a_change_rate_is_a_share_a_second_or_every_turn() {
        assert_eq!(parse_change_rate("0"), Ok(ChangeRate::PerSecond(0.0)));
        assert_eq!(parse_change_rate("0.1"), Ok(ChangeRate::PerSecond(0.1)));
        assert_eq!(parse_change_rate(" 1 "), Ok(ChangeRate::PerSecond(1.0)));
        assert_eq!(parse_change_rate("10"), Ok(ChangeRate::PerSecond(10.0)));
        assert_eq!(parse_change_rate("every-turn"), Ok(ChangeRate::EveryTurn));
        assert_eq!(parse_change_rate("Every-Turn"), Ok(ChangeRate::EveryTurn));
    }

    #[test]
    fn a_change_rate_out_of_range_or_not_a_number_is_refused_with_what_to_give() {
        for bad in [
            "-0.1",
            "10.5",
            "NaN",
            "inf",
            "10%",
            "",
            "every turn",
            "lots",
        ] {
            let error = parse_change_rate(bad).expect_err(bad);
            assert!(error.contains("every-turn"), "{bad}: {error}");
            assert!(error.contains("from 0 to 10"), "{bad}: {error}");
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
