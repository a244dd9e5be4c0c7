//! A deterministic simulator of a Ferry cluster, built on the protocol core alone.
//!
//! Nodes run the core's decisions: the move machines and the lane's place in a move
//! (`ferry_core::relocation`), the pre-copy rounds of a unit's image and its assembly on the
//! target (`relocation::precopy`, `relocation::capture`), the drain's seal window
//! (`ferry_core::sealing`), the route table that keeps each sender's order
//! (`ferry_core::routes`), conditional writes settled by reading back (`ferry_core::conditional`),
//! links that number and resend their frames (`ferry_core::delivery`), the witness beside the
//! lease (`ferry_core::witness`), the recovery planner (`ferry_core::recovery`), the session
//! machine and binding rules (`ferry_core::session`), and rooms' warm standbys: checkpoints, their
//! in-order apply, confirmed replies and promotion (`ferry_core::standby`). Around them the
//! simulator keeps a store, links and one clock; rooms that keep a standby tell themselves a
//! follow-up now and then, as a member's turn tells its room, queued for a later turn.
//!
//! Everything that could happen in another order is a pending event, and a seed's [`Plan`] says
//! which happens next, and when a fault or a new operation comes. After every step the world
//! checks the invariants (no unit runs turns on two nodes at once, no unit is lost, no state goes
//! back, a restored unit's state is the one its source sealed, a drain seals no more units at once
//! than its window lets through, a node's pre-copy in flight stays within its budget, each
//! sender's messages run at most once and in order, a standby applies checkpoints in order, a
//! promoted room holds every reply confirmed mode released and every follow-up its turns queued,
//! and never runs while its owner may);
//! once the plan is done, the faults
//! end and the run settles, and then every move has ended, every request has ended exactly once,
//! every unit runs somewhere, and in a graceful run every accepted message ran exactly once, in
//! order.
//!
//! Layout:
//! - [`plan`]: a seed's steps.
//! - [`world`]: the cluster and its invariants.
//! - here: running a plan, and shortening a failing one.
//!
//! The same seed gives the same plan and the same trace, so a failure replays exactly:
//! `FERRY_SIM_SEED=<seed> cargo test -p ferry-sim --test simulation replays -- --nocapture`.

pub mod plan;
pub mod world;

pub use plan::{Plan, Rng, Step};
pub use world::{Recipes, Shape, Waits, World};

/// How long, in simulated time, a run in which a process died or the store lost writes settles
/// after its plan: past the outage limit, so every lease that will lapse has, every dead node is
/// taken for dead and its units are rebuilt. Another run settles once nothing is under way.
const SETTLE_FOR: std::time::Duration = std::time::Duration::from_secs(40);

/// How one run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Every step taken and what it did, in order (empty unless replayed).
    pub trace: Vec<String>,
    /// The first invariant broken, with the step it broke at.
    pub violation: Option<(usize, String)>,
    /// How many moves ended, by their end.
    pub moves_ended: usize,
    /// How often pre-copy rounds and seals waited for their share.
    pub waits: Waits,
    /// How often seals sent a recipe of deltas, and targets found one rebuilt wrong.
    pub recipes: Recipes,
    /// How many units a drain found again after they had left its node.
    pub found_again: usize,
    /// How many tells, requests and inputs ran.
    pub tells_ran: usize,
    /// How many messages promoted standby copies took over from their checkpoints' queues.
    pub requeued: usize,
    /// The nodes whose drain moved everything and reported them safe to shut down, at the end.
    pub drained: Vec<usize>,
}

/// Runs `plan` on a fresh world of `shape`, then lets it settle with no new faults or operations.
/// No trace is kept: see [`replay`].
pub fn run(shape: Shape, plan: &Plan) -> Outcome {
    play(shape, plan, false)
}

/// [`run`], keeping a line for every step in the outcome's trace.
pub fn replay(shape: Shape, plan: &Plan) -> Outcome {
    play(shape, plan, true)
}

fn play(shape: Shape, plan: &Plan, tracing: bool) -> Outcome {
    let mut world = World::new(shape, tracing);
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
        world.calm();
        let until = world.clock() + SETTLE_FOR;
        let mut picks = plan.settle_picks();
        while (world.active() || (world.lossy() && world.clock() < until))
            && world.settling_budget()
        {
            world.step(&Step::Next(picks.next().unwrap_or(0)));
            if let Err(broken) = world.check() {
                violation = Some((settled, broken));
                break;
            }
        }
        if violation.is_none()
            && let Err(broken) = world.check_settled(plan.graceful())
        {
            violation = Some((settled, broken));
        }
    }
    Outcome {
        trace: world.trace().to_vec(),
        violation,
        moves_ended: world.moves_ended(),
        waits: world.waits(),
        recipes: world.recipes(),
        found_again: world.found_again(),
        tells_ran: world.tells_ran(),
        requeued: world.requeued(),
        drained: world.drained(),
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
