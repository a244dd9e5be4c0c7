//! A lane's place in a move: what the lane that runs a unit's turns does when a move quiesces,
//! seals, hands over, resumes or releases it, and meanwhile with the messages and the changes of
//! membership that reach it.
//!
//! The source machine ([`super::protocol::SourceMachine`]) decides *when* a move seals, hands over
//! or ends; this decides what that means for the lane, which the runtime's lane and the simulator
//! both carry out. A lane is *open* when it runs turns; a new unit's lane opens once its record is
//! written, and a target's staged copy once its commit is known.

use crate::ids::NodeId;

use super::{ReadyOutcome, RelocationId};

/// Where a lane stands in a move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moving {
    /// Asked to seal; an ApplicationSignaled spot seals after its next deferring turn.
    SealPending {
        /// The move waiting for the spot's deferring turn.
        rel: RelocationId,
    },
    /// Captured: no turn runs, arrivals are held.
    Held {
        /// The move that captured the unit: only its handover or its end lets the lane go.
        rel: RelocationId,
        /// Whether the application signalled its readiness.
        signaled: bool,
    },
    /// Relayed and cut over to `target`: waiting for the verdict.
    Handed {
        /// The move the unit was handed over in: its release or resume settles the lane.
        rel: RelocationId,
        /// Whether the application signalled its readiness.
        signaled: bool,
        /// Where the unit was handed.
        target: NodeId,
    },
}

/// What a seal asks of the lane now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// Capture at this turn boundary; on success call [`LaneMove::captured`].
    Capture,
    /// Wait for the spot's deferring turn ([`LaneMove::deferred`]).
    Wait,
    /// Refused: the unit is not running here, or already moving.
    Refused,
}

/// Why a lane takes no change of which units it holds right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsettled {
    /// Sealed for a move (its capture is taken), or staged on a move's target: applied now, the
    /// change would miss the copy of the unit that runs next. Retry once the move has ended.
    Moving,
    /// Not yet recorded as created here.
    Creating,
}

/// A change to which units a lane holds, or which spot an Actor is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// An Actor of this lane joins a spot, or leaves one; or a unit of this lane stops.
    Own,
    /// An Actor from another lane joins this lane's SpotWide spot.
    Attach,
    /// News that a member joined or left this lane's PerActor spot, which has nobody to refuse
    /// to.
    MemberNews,
}

/// What to do with a [`Change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Apply it now.
    Apply,
    /// Refuse it, with this reason; an Actor that was to attach stays in a lane of its own.
    Refuse(Unsettled),
    /// Keep it until the move ends, and apply it then wherever the unit runs.
    Park,
}

/// Where a message that reaches the lane goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Into the queue: it runs in turn, or, before the seal, is captured as saved work.
    Queue,
    /// Into the hold: relayed at the handover, or run after the saved work if the move is undone.
    Hold,
}

/// How a move ended for the source's lane when it resumes the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resumed {
    /// Whether the unit had been handed over (its ids must point here again, and what the target
    /// sent back runs after what was held).
    pub handed: bool,
    /// Whether the application signalled its readiness (it hears that it continued here).
    pub signaled: bool,
}

/// One lane's part in moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneMove {
    moving: Option<Moving>,
    /// The move about to seal this lane, which holds back new session binds.
    quiescing: Option<RelocationId>,
    open: bool,
    restored: bool,
}

impl LaneMove {
    /// A lane that runs turns.
    pub fn running() -> Self {
        LaneMove {
            moving: None,
            quiescing: None,
            open: true,
            restored: false,
        }
    }

    /// A new unit's lane: it queues, and runs once its record is written ([`LaneMove::open`]).
    pub fn creating() -> Self {
        LaneMove {
            open: false,
            ..LaneMove::running()
        }
    }

    /// A copy restored on a move's target: it queues, and runs once the commit is known.
    pub fn staged() -> Self {
        LaneMove {
            open: false,
            restored: true,
            ..LaneMove::running()
        }
    }

    /// Turns may run (the record is written, or the move's commit is known).
    pub fn open(&mut self) {
        self.open = true;
    }

    /// Whether turns may run, unless a move has suspended them.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Whether this lane was restored from a move's capture: its saved work is the source's too.
    pub fn is_restored(&self) -> bool {
        self.restored
    }

    /// Where the lane stands in a move.
    pub fn moving(&self) -> Option<&Moving> {
        self.moving.as_ref()
    }

    /// Whether an image of the lane's units may be taken now, for a pre-copy round or a standby
    /// checkpoint: turns run here, and no move captured them. A seal that waits for an
    /// ApplicationSignaled spot's safe point lets its turns run, and what they cause must not
    /// wait for the move's end to be held by a standby.
    pub fn imageable(&self) -> bool {
        self.open && !self.suspended()
    }

    /// Whether turns are suspended by a move (captured, or handed over).
    pub fn suspended(&self) -> bool {
        matches!(
            self.moving,
            Some(Moving::Held { .. } | Moving::Handed { .. })
        )
    }

    /// Whether a move is about to seal the lane: new session binds wait and move with the unit.
    pub fn quiet(&self) -> bool {
        self.quiescing.is_some()
    }

    /// A move `rel` is about to seal the lane. `Err` says why it cannot move.
    pub fn quiesce(&mut self, rel: RelocationId) -> Result<(), &'static str> {
        if !self.open || self.moving.is_some() || self.quiescing.is_some() {
            return Err("the unit is not running here, or already moving");
        }
        self.quiescing = Some(rel);
        Ok(())
    }

    /// Ends the quiet spell (binds held back take their place at the head of the queue again).
    pub fn end_quiet(&mut self) {
        self.quiescing = None;
    }

    /// A move `rel` asks to seal the lane; `app_signaled` says whether its spot seals only when the
    /// application says so.
    pub fn seal(&mut self, rel: RelocationId, app_signaled: bool) -> Seal {
        if !self.open || self.moving.is_some() || self.quiescing.is_some_and(|q| q != rel) {
            return Seal::Refused;
        }
        if app_signaled {
            self.moving = Some(Moving::SealPending { rel });
            Seal::Wait
        } else {
            Seal::Capture
        }
    }

    /// After a turn in which an ApplicationSignaled spot deferred: the move to capture for now,
    /// if one waits; `None` if none does (the spot carries on, and hears so before its next turn).
    pub fn deferred(&mut self) -> Option<RelocationId> {
        match self.moving {
            Some(Moving::SealPending { rel }) => {
                self.moving = None;
                Some(rel)
            }
            _ => None,
        }
    }

    /// A move gives up waiting for the seal; the lane runs on as it was. Whether the quiet spell
    /// ended with it.
    pub fn cancel_seal(&mut self, rel: RelocationId) -> bool {
        if self.moving == Some(Moving::SealPending { rel }) {
            self.moving = None;
        }
        if self.quiescing == Some(rel) && self.moving.is_none() {
            self.quiescing = None;
            return true;
        }
        false
    }

    /// The capture was taken at this turn boundary: turns stop, and arrivals are held. A capture
    /// that failed (a state adapter that failed or panicked) leaves the lane running: capture only
    /// reads the state, so the unit runs on here with it. Returns what an application that
    /// signalled this boundary is owed then: every defer hears exactly once how it ended.
    pub fn captured(
        &mut self,
        rel: RelocationId,
        signaled: bool,
        ok: bool,
    ) -> Option<ReadyOutcome> {
        self.quiescing = None;
        self.moving = ok.then_some(Moving::Held { rel, signaled });
        (signaled && !ok).then_some(ReadyOutcome::Continued)
    }

    /// The point of no return for the lane: its unit's ids leave for `target`. Whether the lane
    /// was held by this move (else nothing happens).
    pub fn handover(&mut self, rel: RelocationId, target: NodeId) -> bool {
        let Some(Moving::Held {
            rel: held,
            signaled,
        }) = self.moving
        else {
            return false;
        };
        if held != rel {
            return false;
        }
        self.moving = Some(Moving::Handed {
            rel,
            signaled,
            target,
        });
        true
    }

    /// The unit runs here again: saved work, then what was held, in their original order. `None`
    /// if the lane was not in this move.
    pub fn resume(&mut self, rel: RelocationId) -> Option<Resumed> {
        let resumed = match self.moving {
            Some(Moving::Held { rel: r, signaled }) if r == rel => Resumed {
                handed: false,
                signaled,
            },
            Some(Moving::Handed {
                rel: r, signaled, ..
            }) if r == rel => Resumed {
                handed: true,
                signaled,
            },
            _ => return None,
        };
        self.moving = None;
        Some(resumed)
    }

    /// The target owns the unit now: the lane is dropped without callbacks, and what reaches it
    /// follows the unit. The target, if the lane was handed over in this move.
    pub fn release(&mut self, rel: RelocationId) -> Option<NodeId> {
        match self.moving.take() {
            Some(Moving::Handed { rel: r, target, .. }) if r == rel => Some(target),
            other => {
                self.moving = other;
                None
            }
        }
    }

    /// Where a message that reaches the lane now goes.
    pub fn arrival(&self) -> Arrival {
        if self.suspended() {
            Arrival::Hold
        } else {
            Arrival::Queue
        }
    }

    /// What to do with a change of which units the lane holds or which spot an Actor is in. From
    /// the quiet spell on, the lane takes none: a move has told the gateways which bound Actors
    /// it carries, and will tell them where those run when it ends. A spot that waits for its
    /// application's safe point is the exception until then: its gateways are told only at the
    /// capture, of the Actors it holds by then, and it may wait for the rest of a round.
    pub fn change(&self, change: Change) -> Verdict {
        let told = self.quiet() && !matches!(self.moving, Some(Moving::SealPending { .. }));
        let unsettled = if told || self.suspended() || (!self.open && self.restored) {
            Unsettled::Moving
        } else if !self.open {
            Unsettled::Creating
        } else {
            return Verdict::Apply;
        };
        match change {
            Change::MemberNews => Verdict::Park,
            Change::Own | Change::Attach => Verdict::Refuse(unsettled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeId {
        NodeId::new(name).expect("id")
    }

    #[test]
    fn a_lane_refuses_membership_changes_from_its_capture_until_its_move_ends() {
        let rel = RelocationId(1);
        let mut lane = LaneMove::running();
        assert_eq!(lane.change(Change::Own), Verdict::Apply);
        assert_eq!(lane.quiesce(rel), Ok(()));
        assert!(lane.quiet());
        // The gateways are told which bound Actors move: none may leave or join meanwhile.
        assert_eq!(lane.change(Change::Own), Verdict::Refuse(Unsettled::Moving));
        assert_eq!(lane.seal(rel, false), Seal::Capture);
        assert_eq!(
            lane.change(Change::Attach),
            Verdict::Refuse(Unsettled::Moving)
        );
        lane.captured(rel, false, true);
        assert!(!lane.quiet());
        assert_eq!(lane.arrival(), Arrival::Hold);
        assert_eq!(lane.change(Change::Own), Verdict::Refuse(Unsettled::Moving));
        assert_eq!(
            lane.change(Change::Attach),
            Verdict::Refuse(Unsettled::Moving)
        );
        assert_eq!(lane.change(Change::MemberNews), Verdict::Park);
        assert!(lane.handover(rel, node("n2")));
        assert_eq!(lane.change(Change::Own), Verdict::Refuse(Unsettled::Moving));
        assert_eq!(lane.release(rel), Some(node("n2")));
        assert_eq!(lane.moving(), None);
    }

    #[test]
    fn a_move_undone_after_the_handover_resumes_the_lane_as_handed() {
        let rel = RelocationId(2);
        let mut lane = LaneMove::running();
        assert_eq!(lane.seal(rel, false), Seal::Capture);
        lane.captured(rel, false, true);
        assert_eq!(lane.resume(RelocationId(3)), None, "another move's end");
        assert!(lane.handover(rel, node("n2")));
        assert!(!lane.handover(rel, node("n3")), "one handover");
        assert_eq!(lane.release(RelocationId(3)), None);
        assert_eq!(
            lane.resume(rel),
            Some(Resumed {
                handed: true,
                signaled: false
            })
        );
        assert_eq!(lane.arrival(), Arrival::Queue);
        assert_eq!(lane.change(Change::Own), Verdict::Apply);
    }

    #[test]
    fn a_failed_capture_leaves_the_lane_running() {
        let rel = RelocationId(4);
        let mut lane = LaneMove::running();
        lane.quiesce(rel).expect("quiet");
        assert_eq!(lane.seal(rel, false), Seal::Capture);
        assert_eq!(
            lane.captured(rel, false, false),
            None,
            "nothing was signalled"
        );
        assert!(!lane.suspended() && !lane.quiet());
        assert_eq!(lane.change(Change::Own), Verdict::Apply);
        assert_eq!(
            lane.seal(RelocationId(5), false),
            Seal::Capture,
            "it can move again"
        );
    }

    #[test]
    fn a_signalled_capture_that_fails_owes_the_application_its_continued() {
        let rel = RelocationId(6);
        let mut lane = LaneMove::running();
        lane.quiesce(rel).expect("quiet");
        assert_eq!(lane.seal(rel, true), Seal::Wait);
        assert_eq!(lane.deferred(), Some(rel));
        assert_eq!(
            lane.captured(rel, true, false),
            Some(ReadyOutcome::Continued)
        );
        // A capture that worked owes nothing yet: the move's end says how it went.
        let next = RelocationId(7);
        lane.quiesce(next).expect("quiet");
        assert_eq!(lane.seal(next, true), Seal::Wait);
        assert_eq!(lane.deferred(), Some(next));
        assert_eq!(lane.captured(next, true, true), None);
    }

    #[test]
    fn an_application_signaled_spot_seals_after_its_deferring_turn() {
        let rel = RelocationId(6);
        let mut lane = LaneMove::running();
        lane.quiesce(rel).expect("quiet");
        assert_eq!(lane.seal(rel, true), Seal::Wait);
        assert_eq!(
            lane.change(Change::Own),
            Verdict::Apply,
            "it may wait a round"
        );
        assert_eq!(lane.seal(RelocationId(7), false), Seal::Refused);
        assert_eq!(lane.arrival(), Arrival::Queue, "it still runs turns");
        assert_eq!(lane.deferred(), Some(rel));
        lane.captured(rel, true, true);
        assert_eq!(lane.deferred(), None);
        assert_eq!(
            lane.resume(rel),
            Some(Resumed {
                handed: false,
                signaled: true
            })
        );
        // Cancelled before its turn boundary, the lane runs on and its quiet spell ends.
        let mut lane = LaneMove::running();
        lane.quiesce(rel).expect("quiet");
        assert_eq!(lane.seal(rel, true), Seal::Wait);
        assert!(lane.cancel_seal(rel));
        assert!(lane.moving().is_none() && !lane.quiet());
        assert_eq!(
            lane.change(Change::Own),
            Verdict::Apply,
            "the move let it go"
        );
    }

    #[test]
    fn new_and_staged_lanes_refuse_changes_for_their_own_reasons() {
        let creating = LaneMove::creating();
        assert_eq!(
            creating.change(Change::Own),
            Verdict::Refuse(Unsettled::Creating)
        );
        let mut staged = LaneMove::staged();
        assert_eq!(
            staged.change(Change::Attach),
            Verdict::Refuse(Unsettled::Moving)
        );
        assert_eq!(staged.change(Change::MemberNews), Verdict::Park);
        assert_eq!(
            staged.quiesce(RelocationId(8)),
            Err("the unit is not running here, or already moving")
        );
        staged.open();
        assert!(staged.is_restored());
        assert_eq!(staged.change(Change::Own), Verdict::Apply);
    }
}
