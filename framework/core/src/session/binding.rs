//! The Actor's side of a session binding: what a bind, an unbind or a fence does once it reaches
//! the head of the Actor's queue, and how its pushes are numbered.
//!
//! Session ops travel to an Actor like messages, so they are applied in queue order with its
//! messages, and they are captured and relayed with it when it moves. The lane decides nothing
//! itself: it hands each op here with its binding and whether a move's quiet spell is on, and
//! carries out the answer (keep the op queued, tell these gateways, answer the request).

use bytes::Bytes;

use super::frames::SessionFrame;
use super::{SessionBinding, SessionOp, SessionRef};
use crate::errors::MessageError;
use crate::ids::{ActorId, NodeId, UnitId};

/// Why the Actor's binding was replaced, as its old session's client reads it.
pub const REPLACED: &str = "another session bound this Actor (the player connected again)";

/// The unit a session op reached, as its lane holds it.
#[derive(Debug)]
pub struct Addressee<'a> {
    /// The unit's id (gateways address Actors; a Spot of that name is no Actor).
    pub id: &'a UnitId,
    /// Its factory, which the bind's answer names so the gateway can check inputs.
    pub type_name: &'a str,
    /// Its binding, which moves with it.
    pub binding: &'a mut Option<SessionBinding>,
}

/// A frame for a gateway.
#[derive(Debug)]
pub struct Notice {
    /// The gateway node.
    pub gateway: NodeId,
    /// What it is told.
    pub frame: SessionFrame,
}

/// What the lane does with a session op at the head of the queue.
#[derive(Debug)]
pub enum Step {
    /// Keep it back, in arrival order, until the move's quiet spell ends: it is queued work that
    /// moves with the unit if the move goes ahead.
    Wait(SessionOp),
    /// It took effect: send these, in order, then answer the op's request (if it has one).
    Done {
        /// Frames for gateways.
        notices: Vec<Notice>,
        /// The request's terminal.
        answer: Result<(), MessageError>,
    },
}

/// Applies `op` to the unit. `quiet`: a move is about to seal the unit and has asked the gateways
/// of the sessions bound now to hold inputs; a new bind would be a session it did not tell, so the
/// bind waits and takes effect wherever the unit runs once the move has ended.
pub fn apply(op: SessionOp, quiet: bool, unit: Addressee<'_>) -> Step {
    if quiet && matches!(op, SessionOp::Bind(_)) {
        return Step::Wait(op);
    }
    let not_an_actor = || MessageError::UnknownId {
        id: unit.id.clone(),
    };
    match (op, unit.id) {
        // Its place in the queue is the answer: everything queued before it has run.
        (SessionOp::Fence, _) => done(Vec::new()),
        (SessionOp::Bind(session), UnitId::Actor(actor)) => {
            done(bind(actor, unit.type_name, unit.binding, session))
        }
        (SessionOp::Unbind(session), UnitId::Actor(_)) => {
            // Only the very bind it names: an unbind of an older session or bind is stale.
            if unit.binding.as_ref().is_some_and(|b| b.session == session) {
                *unit.binding = None;
            }
            done(Vec::new())
        }
        (SessionOp::Bind(_) | SessionOp::Unbind(_), UnitId::Spot(_)) => Step::Done {
            notices: Vec::new(),
            answer: Err(not_an_actor()),
        },
    }
}

fn done(notices: Vec<Notice>) -> Step {
    Step::Done {
        notices,
        answer: Ok(()),
    }
}

/// Binds `session`, replacing any other (whose gateway hears so first). The same bind again
/// changes nothing: push numbering goes on.
fn bind(
    actor: &ActorId,
    type_name: &str,
    binding: &mut Option<SessionBinding>,
    session: SessionRef,
) -> Vec<Notice> {
    let mut notices = Vec::new();
    if binding.as_ref().is_none_or(|b| b.session != session) {
        let old = binding.replace(SessionBinding {
            session: session.clone(),
            next_push: 0,
        });
        if let Some(old) = old {
            notices.push(ended(actor, old, REPLACED));
        }
    }
    notices.push(Notice {
        gateway: session.gateway.clone(),
        frame: SessionFrame::Bound {
            session: session.session,
            actor: actor.clone(),
            epoch: session.epoch,
            verdict: Ok(type_name.to_owned()),
        },
    });
    notices
}

/// What the gateway of a binding that ended (its Actor stopped, or was replaced) is told.
pub fn ended(actor: &ActorId, binding: SessionBinding, reason: &str) -> Notice {
    Notice {
        gateway: binding.session.gateway,
        frame: SessionFrame::Unbound {
            session: binding.session.session,
            actor: actor.clone(),
            epoch: binding.session.epoch,
            reason: reason.to_owned(),
        },
    }
}

impl SessionBinding {
    /// The Actor's next push under this binding, numbered so the gateway delivers pushes in order
    /// whichever node sent them. Count it with [`SessionBinding::pushed`] once it was sent.
    pub fn push(&self, actor: &ActorId, payload: Bytes) -> Notice {
        Notice {
            gateway: self.session.gateway.clone(),
            frame: SessionFrame::Push {
                session: self.session.session,
                actor: actor.clone(),
                epoch: self.session.epoch,
                seq: self.next_push,
                payload,
            },
        }
    }

    /// The push was sent: the next one takes the next number.
    pub fn pushed(&mut self) {
        self.next_push += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SpotId;
    use crate::session::SessionId;
    use crate::session::wire::Encoding;

    fn actor() -> (ActorId, UnitId) {
        let a = ActorId::new("player").expect("a valid id");
        (a.clone(), UnitId::Actor(a))
    }

    fn session(gateway: &str, id: u64, epoch: u32) -> SessionRef {
        SessionRef {
            gateway: NodeId::new(gateway).expect("a valid id"),
            session: SessionId(id),
            epoch,
            encoding: Encoding::Postcard,
        }
    }

    fn on(id: &UnitId, binding: &mut Option<SessionBinding>, op: SessionOp, quiet: bool) -> Step {
        let unit = Addressee {
            id,
            type_name: "player",
            binding,
        };
        apply(op, quiet, unit)
    }

    /// The frames of a step that took effect, as (gateway, kind, epoch) per frame; panics on a
    /// refused or waiting op.
    fn told(step: Step) -> Vec<(String, &'static str, u32)> {
        let Step::Done { notices, answer } = step else {
            panic!("the op waited: {step:?}");
        };
        assert_eq!(answer, Ok(()));
        notices
            .into_iter()
            .map(|n| {
                let (kind, epoch) = match n.frame {
                    SessionFrame::Bound { epoch, verdict, .. } => {
                        assert_eq!(verdict, Ok("player".to_owned()));
                        ("bound", epoch)
                    }
                    SessionFrame::Unbound { epoch, .. } => ("unbound", epoch),
                    other => panic!("not a binding frame: {other:?}"),
                };
                (n.gateway.to_string(), kind, epoch)
            })
            .collect()
    }

    #[test]
    fn a_bind_during_the_quiet_spell_waits_and_takes_effect_where_the_unit_runs_next() {
        let (_, id) = actor();
        let mut binding = None;
        let op = SessionOp::Bind(session("g", 1, 1));
        let Step::Wait(waiting) = on(&id, &mut binding, op.clone(), true) else {
            panic!("a bind in the quiet spell was applied");
        };
        assert_eq!(waiting, op, "the op waits as it came");
        assert_eq!(binding, None, "nothing bound during the quiet spell");
        // Unbinds and fences of sessions the move knows go on during it.
        assert!(matches!(
            on(&id, &mut binding, SessionOp::Fence, true),
            Step::Done { .. }
        ));
        // The move went ahead: the op was captured with the unit and applies on the target.
        let moved: SessionOp =
            postcard::from_bytes(&postcard::to_allocvec(&waiting).expect("encodes"))
                .expect("decodes");
        let mut restored = None;
        assert_eq!(
            told(on(&id, &mut restored, moved, false)),
            vec![("g".to_owned(), "bound", 1)]
        );
        assert_eq!(restored.map(|b| b.session), Some(session("g", 1, 1)));
    }

    #[test]
    fn an_unbind_of_an_older_session_or_bind_leaves_a_newer_binding() {
        let (_, id) = actor();
        let mut binding = None;
        told(on(
            &id,
            &mut binding,
            SessionOp::Bind(session("g", 1, 1)),
            false,
        ));
        // The same session bound again (epoch 2), then the unbind of epoch 1 arrives.
        told(on(
            &id,
            &mut binding,
            SessionOp::Bind(session("g", 1, 2)),
            false,
        ));
        let stale = on(
            &id,
            &mut binding,
            SessionOp::Unbind(session("g", 1, 1)),
            false,
        );
        assert_eq!(told(stale), vec![]);
        assert_eq!(binding.as_ref().map(|b| b.session.epoch), Some(2));
        // Another session's unbind (an older connection of the player) leaves it too.
        let other = on(
            &id,
            &mut binding,
            SessionOp::Unbind(session("h", 9, 2)),
            false,
        );
        assert_eq!(told(other), vec![]);
        assert!(binding.is_some());
        // The unbind of the very bind removes it, and tells no one (its gateway asked).
        let own = on(
            &id,
            &mut binding,
            SessionOp::Unbind(session("g", 1, 2)),
            false,
        );
        assert_eq!(told(own), vec![]);
        assert_eq!(binding, None);
    }

    #[test]
    fn a_new_session_replaces_the_old_whose_gateway_hears_it_first() {
        let (_, id) = actor();
        let mut binding = None;
        told(on(
            &id,
            &mut binding,
            SessionOp::Bind(session("g", 1, 1)),
            false,
        ));
        let replaced = on(
            &id,
            &mut binding,
            SessionOp::Bind(session("h", 2, 7)),
            false,
        );
        assert_eq!(
            told(replaced),
            vec![("g".to_owned(), "unbound", 1), ("h".to_owned(), "bound", 7)]
        );
        assert_eq!(binding.map(|b| b.session), Some(session("h", 2, 7)));
    }

    #[test]
    fn a_fence_never_waits_so_it_is_answered_in_its_place_in_the_queue() {
        let (_, id) = actor();
        let spot = UnitId::Spot(SpotId::new("room").expect("a valid id"));
        for (unit, bound) in [(&id, false), (&id, true), (&spot, false)] {
            let mut binding = bound.then(|| SessionBinding {
                session: session("g", 1, 1),
                next_push: 3,
            });
            let before = binding.clone();
            for quiet in [false, true] {
                // Answered at once wherever it stands: after everything queued before it ran,
                // and before anything queued after it.
                assert_eq!(
                    told(on(unit, &mut binding, SessionOp::Fence, quiet)),
                    vec![]
                );
                assert_eq!(binding, before, "a fence changes no binding");
            }
        }
    }

    #[test]
    fn a_spot_cannot_be_bound_or_unbound() {
        let spot = UnitId::Spot(SpotId::new("room").expect("a valid id"));
        let mut binding = None;
        for op in [
            SessionOp::Bind(session("g", 1, 1)),
            SessionOp::Unbind(session("g", 1, 1)),
        ] {
            let Step::Done { notices, answer } = on(&spot, &mut binding, op, false) else {
                panic!("refused at once");
            };
            assert!(notices.is_empty());
            assert_eq!(answer, Err(MessageError::UnknownId { id: spot.clone() }));
        }
        assert_eq!(binding, None);
    }

    #[test]
    fn push_numbers_go_on_across_a_move_and_start_again_with_a_new_bind() {
        let (a, id) = actor();
        let mut binding = None;
        told(on(
            &id,
            &mut binding,
            SessionOp::Bind(session("g", 1, 1)),
            false,
        ));
        let seq = |b: &SessionBinding| match b.push(&a, Bytes::new()).frame {
            SessionFrame::Push { seq, .. } => seq,
            other => panic!("not a push: {other:?}"),
        };
        let mut source = binding.expect("bound");
        for expect in 0..3 {
            assert_eq!(seq(&source), expect);
            source.pushed();
        }
        // A push not sent (its gateway could not be reached) takes no number.
        assert_eq!(seq(&source), 3);
        // The binding is captured with the Actor and restored on the target.
        let mut target: Option<SessionBinding> =
            postcard::from_bytes(&postcard::to_allocvec(&Some(source)).expect("encodes"))
                .expect("decodes");
        assert_eq!(target.as_ref().map(seq), Some(3));
        // The same bind arriving again there (relayed) does not start the numbers over.
        told(on(
            &id,
            &mut target,
            SessionOp::Bind(session("g", 1, 1)),
            false,
        ));
        assert_eq!(target.as_ref().map(seq), Some(3));
        // A new bind of the session does: the gateway counts it from 0.
        told(on(
            &id,
            &mut target,
            SessionOp::Bind(session("g", 1, 2)),
            false,
        ));
        assert_eq!(target.as_ref().map(seq), Some(0));
    }
}
