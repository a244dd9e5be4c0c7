//! A deterministic simulator of a Ferry cluster, built on the protocol core.
//!
//! Many nodes run the core's move machines ([`SourceMachine`](ferry_core::relocation::protocol::SourceMachine),
//! [`TargetMachine`](ferry_core::relocation::protocol::TargetMachine)) against a simulated store and
//! simulated links. Links number their frames with the core's
//! [`Outbox`](ferry_core::delivery::Outbox) and [`Inbox`](ferry_core::delivery::Inbox), so a reset
//! that loses what was in flight is repaired the way the mesh repairs it. Senders route tells the way
//! the runtime does: by the store's record, with route hints and a fence before they switch paths.
//!
//! Everything that could happen in another order is a pending event, and a seed's [`Plan`] says
//! which one happens next, and when a fault or a new operation comes: a frame, a store answer, a
//! turn boundary, a restore, a timer, a move, a tell, a crash, a link reset, a store write whose
//! answer is lost. After every step the [`world`] checks the invariants: no unit runs on two nodes,
//! no full copy is destroyed while it is the only one, every move ends once, and every tell runs at
//! most once and in per-sender order (exactly once, once the run has settled, for units that
//! moved gracefully).
//!
//! The same seed gives the same plan and the same trace, so a failure replays exactly:
//! `FERRY_SIM_SEED=<seed> cargo test -p ferry-sim --test simulation replay`.

mod plan;
mod world;

pub use plan::{Plan, Rng, Step};
pub use world::{Shape, World};

/// How one run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Every step taken and what it did, in order.
    pub trace: Vec<String>,
    /// The first invariant broken, with the step it broke at.
    pub violation: Option<(usize, String)>,
    /// How many moves ended, by their end.
    pub moves_ended: usize,
    /// How many tells ran.
    pub tells_ran: usize,
}

/// Runs `plan` on a fresh world of `shape`, then lets it settle (no new faults or operations).
pub fn run(shape: Shape, plan: &Plan) -> Outcome {
    let mut world = World::new(shape);
    let mut violation = None;
    for (at, step) in plan.steps.iter().enumerate() {
        world.step(step);
        if let Err(broken) = world.check() {
            violation = Some((at, broken));
            break;
        }
    }
    if violation.is_none() {
        let settled = plan.steps.len();
        let mut picks = plan.settle_picks();
        while world.pending() > 0 && world.settling_budget() {
            world.step(&Step::Next(picks.next().unwrap_or(0)));
            if let Err(broken) = world.check() {
                violation = Some((settled, broken));
                break;
            }
        }
        if violation.is_none()
            && let Err(broken) = world.check_settled()
        {
            violation = Some((settled, broken));
        }
    }
    Outcome {
        trace: world.trace().to_vec(),
        violation,
        moves_ended: world.moves_ended(),
        tells_ran: world.tells_ran(),
    }
}

/// The shortest plan found that still breaks the same invariant, by dropping steps (halves first,
/// then smaller pieces down to single steps) while the failure stays.
pub fn shrink(shape: Shape, plan: &Plan) -> Plan {
    let kind = |outcome: &Outcome| {
        outcome.violation.as_ref().map(|(_, broken)| {
            broken
                .chars()
                .filter(|c| !c.is_ascii_digit())
                .collect::<String>()
        })
    };
    let wanted = kind(&run(shape, plan));
    let mut best = plan.clone();
    let mut chunk = best.steps.len() / 2;
    while chunk >= 1 {
        let mut start = 0;
        while start < best.steps.len() {
            let mut shorter = best.clone();
            let end = (start + chunk).min(shorter.steps.len());
            shorter.steps.drain(start..end);
            if wanted.is_some() && kind(&run(shape, &shorter)) == wanted {
                best = shorter;
            } else {
                start += chunk;
            }
        }
        chunk /= 2;
    }
    best
}
