//! Whether a target takes an offered unit: it must serve, the capture must fit, and an earlier
//! move of the same unit still staged there must not stand in the way.
//!
//! A source offers a unit again only once its earlier move of it ended on the source's side, so
//! an earlier staged copy of that unit here is stale (its source gave up on it, perhaps while the
//! link was cut and its withdrawal was lost): it is given up, and the new offer taken. An earlier
//! move already committing cannot be called back; the store decides it soon, and the offer is
//! refused as busy, to be tried again.

use super::RelocationId;
use super::frames::{Refusal, RefusedBecause};
use crate::authority::NodeState;
use crate::ids::{NodeId, UnitId};

/// An offer, as the target weighs it.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    /// The target itself.
    pub me: &'a NodeId,
    /// The target's state now: only a serving node takes units.
    pub state: NodeState,
    /// The unit offered.
    pub unit: &'a UnitId,
    /// The capture's size in bytes.
    pub len: u64,
    /// The largest capture the target takes.
    pub max_state: u64,
}

/// A move already staged at the target.
#[derive(Debug, Clone, Copy)]
pub struct Staged<'a> {
    /// The staged move's id: given up (superseded) if the new offer is taken.
    pub rel: RelocationId,
    /// The unit it stages; only a staged copy of the offered unit stands in the way.
    pub unit: &'a UnitId,
    /// Whether its commit is in flight or being read back.
    pub committing: bool,
}

/// The target's answer to an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Take the unit, after giving up these earlier staged moves of it.
    Take {
        /// The stale moves to give up first.
        supersede: Vec<RelocationId>,
    },
    /// Refuse it, with the reason.
    Refuse(Refusal),
}

/// Decides an offer against what is staged at the target now.
pub fn admit<'a>(offer: Offer<'_>, staged: impl IntoIterator<Item = Staged<'a>>) -> Admission {
    if offer.state != NodeState::Serving {
        // The source's view of this node was older than its last state change.
        return Admission::Refuse(Refusal::not_serving(format!(
            "{} is {} and takes no units; pick a serving node",
            offer.me, offer.state
        )));
    }
    if offer.len > offer.max_state {
        return Admission::Refuse(Refusal::other(format!(
            "{}'s capture is {} bytes, over {}'s max_state of {}; keep less state in the unit or \
             raise max_state on every node",
            offer.unit, offer.len, offer.me, offer.max_state
        )));
    }
    let mut supersede = Vec::new();
    for earlier in staged {
        if earlier.unit != offer.unit {
            continue;
        }
        if earlier.committing {
            return Admission::Refuse(Refusal {
                because: RefusedBecause::Busy,
                why: format!(
                    "an earlier move of {} to {} is still committing; offer it again once the \
                     store has decided it",
                    offer.unit, offer.me
                ),
            });
        }
        supersede.push(earlier.rel);
    }
    Admission::Take { supersede }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SpotId;

    fn unit(id: &str) -> UnitId {
        UnitId::Spot(SpotId::new(id).unwrap())
    }

    fn offer<'a>(me: &'a NodeId, unit: &'a UnitId, state: NodeState) -> Offer<'a> {
        Offer {
            me,
            state,
            unit,
            len: 10,
            max_state: 100,
        }
    }

    #[test]
    fn a_stale_staged_copy_of_the_unit_gives_way_to_its_new_offer() {
        let me = NodeId::new("p3").unwrap();
        let (a, b) = (unit("fps-0"), unit("fps-1"));
        let staged = [
            Staged {
                rel: RelocationId(1),
                unit: &a,
                committing: false,
            },
            Staged {
                rel: RelocationId(2),
                unit: &b,
                committing: false,
            },
        ];
        assert_eq!(
            admit(offer(&me, &a, NodeState::Serving), staged),
            Admission::Take {
                supersede: vec![RelocationId(1)]
            }
        );
    }

    #[test]
    fn an_earlier_move_still_committing_makes_the_offer_wait() {
        let me = NodeId::new("p3").unwrap();
        let a = unit("fps-0");
        let staged = [Staged {
            rel: RelocationId(1),
            unit: &a,
            committing: true,
        }];
        match admit(offer(&me, &a, NodeState::Serving), staged) {
            Admission::Refuse(r) => assert_eq!(r.because, RefusedBecause::Busy),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_node_that_does_not_serve_or_a_capture_too_large_is_refused() {
        let me = NodeId::new("p3").unwrap();
        let a = unit("fps-0");
        match admit(offer(&me, &a, NodeState::Relocating), []) {
            Admission::Refuse(r) => assert_eq!(r.because, RefusedBecause::NotServing),
            other => panic!("{other:?}"),
        }
        let big = Offer {
            len: 1000,
            ..offer(&me, &a, NodeState::Serving)
        };
        match admit(big, []) {
            Admission::Refuse(r) => assert_eq!(r.because, RefusedBecause::Other),
            other => panic!("{other:?}"),
        }
    }
}
