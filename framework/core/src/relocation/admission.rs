//! Whether a target takes an offered unit: it must serve, the capture must fit, and an earlier
//! move of any unit it carries (the unit or one of its members) still staged there must not stand
//! in the way.
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
    /// The units offered: the unit first, then the members that move with it.
    pub units: &'a [UnitId],
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
    /// The units it stages; a staged copy of any unit offered stands in the way (a member may
    /// have moved alone before it joined the room offered).
    pub units: &'a [UnitId],
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
    let unit = offer
        .units
        .first()
        .map_or_else(String::new, ToString::to_string);
    if offer.state != NodeState::Serving {
        // The source's view of this node was older than its last state change.
        return Admission::Refuse(Refusal::not_serving(format!(
            "{} is {} and takes no units; pick a serving node",
            offer.me, offer.state
        )));
    }
    if offer.len > offer.max_state {
        return Admission::Refuse(Refusal::other(format!(
            "{unit}'s capture is {} bytes, over {}'s max_state of {}; keep less state in the unit or \
             raise max_state on every node",
            offer.len, offer.me, offer.max_state
        )));
    }
    let mut supersede = Vec::new();
    for earlier in staged {
        if !earlier.units.iter().any(|u| offer.units.contains(u)) {
            continue;
        }
        if earlier.committing {
            return Admission::Refuse(Refusal {
                because: RefusedBecause::Busy,
                why: format!(
                    "an earlier move of {unit} to {} is still committing; offer it again once the \
                     store has decided it",
                    offer.me
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

    fn offer<'a>(me: &'a NodeId, units: &'a [UnitId], state: NodeState) -> Offer<'a> {
        Offer {
            me,
            state,
            units,
            len: 10,
            max_state: 100,
        }
    }

    #[test]
    fn a_stale_staged_copy_of_the_unit_gives_way_to_its_new_offer() {
        let me = NodeId::new("p3").unwrap();
        let (a, b) = ([unit("fps-0")], [unit("fps-1")]);
        let staged = [
            Staged {
                rel: RelocationId(1),
                units: &a,
                committing: false,
            },
            Staged {
                rel: RelocationId(2),
                units: &b,
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
    fn a_stale_staged_copy_of_a_member_gives_way_to_its_rooms_offer() {
        let me = NodeId::new("p3").unwrap();
        let member = [unit("p8")];
        let room = [unit("r0"), unit("p8")];
        let staged = [Staged {
            rel: RelocationId(20),
            units: &member,
            committing: false,
        }];
        assert_eq!(
            admit(offer(&me, &room, NodeState::Serving), staged),
            Admission::Take {
                supersede: vec![RelocationId(20)]
            }
        );
    }

    #[test]
    fn an_earlier_move_still_committing_makes_the_offer_wait() {
        let me = NodeId::new("p3").unwrap();
        let a = [unit("fps-0")];
        let staged = [Staged {
            rel: RelocationId(1),
            units: &a,
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
        let a = [unit("fps-0")];
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
