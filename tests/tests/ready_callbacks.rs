//! An ApplicationSignaled room hears exactly one `on_relocation_ready_completed` for each defer,
//! whatever became of the move it was for: a game that starts its next round on that callback
//! never stalls.

use std::sync::Arc;
use std::time::Duration;

use ferry::relocation::protocol::MoveEnd;
use ferry::{
    AdapterError, Behavior, BlockedReason, Ctx, ReadinessMode, ReadyOutcome, Registration,
    Registry, RelocationPolicy, SerdeAdapter, SpotId, StateAdapter, UnitId,
};
use ferry_tests::cluster::Cluster;
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(10);

/// A round that says its state is whole at every tick, and counts what it hears back.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Round {
    defers: u32,
    continued: u32,
    relocated: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    Start,
    Get,
}

impl Behavior for Round {
    type Msg = Cmd;
    type Reply = Round;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: Cmd) -> Round {
        if let Cmd::Start = msg {
            ctx.set_timer("safe", Duration::from_millis(5), Default::default());
        }
        self.clone()
    }

    fn on_tick(&mut self, ctx: &mut Ctx<'_>, _tick: &ferry::Tick) {
        if ctx.relocation_ready_defer().is_ok() {
            self.defers += 1;
        }
    }

    fn on_relocation_ready_completed(&mut self, _ctx: &mut Ctx<'_>, outcome: ReadyOutcome) {
        match outcome {
            ReadyOutcome::Continued => self.continued += 1,
            ReadyOutcome::Relocated => self.relocated += 1,
        }
    }
}

/// Captures fail, as an adapter that cannot serialize its state would, or panic.
struct Failing {
    panics: bool,
}

impl StateAdapter<Round> for Failing {
    fn capture(&self, _unit: &Round) -> Result<Vec<u8>, AdapterError> {
        if self.panics {
            panic!("capture panicked on purpose");
        }
        Err(AdapterError("capture refused on purpose".into()))
    }

    fn restore(&self, unit: &mut Round, bytes: &[u8]) -> Result<(), AdapterError> {
        SerdeAdapter.restore(unit, bytes)
    }
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    for (name, panics) in [("refusing", false), ("panicking", true)] {
        reg.register(
            Registration::spot(name, |_| Round::default())
                .policy(RelocationPolicy::PreserveState(Arc::new(Failing {
                    panics,
                })))
                .readiness(ReadinessMode::ApplicationSignaled),
        );
    }
    reg
}

async fn every_defer_hears_once_when_captures_fail(kind: &str) {
    let cluster = Cluster::start(2, registry).await;
    let (n1, n2) = (cluster.nodes[0].clone(), cluster.nodes[1].clone());
    let round = SpotId::new(kind).expect("id");
    n1.create_spot_on(n1.id(), kind, &round)
        .await
        .expect("round");
    let _: Round = n1.request(&round, Cmd::Start, T).await.expect("starts");
    for _ in 0..4 {
        let report = n1
            .move_unit(&UnitId::Spot(round.clone()), Some(n2.id().clone()))
            .await
            .expect("move starts");
        assert!(
            matches!(report.end, MoveEnd::NotSealed(_)),
            "{:?}",
            report.end
        );
        assert_eq!(report.blocked, Some(BlockedReason::AdapterFailed));
    }
    // The callbacks of every defer so far run before this turn.
    let seen: Round = n1.request(&round, Cmd::Get, T).await.expect("answers");
    assert!(seen.defers >= 4, "{seen:?}");
    assert_eq!(seen.relocated, 0, "{seen:?}");
    assert_eq!(
        seen.continued, seen.defers,
        "each defer hears once that the round carries on: {seen:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_whose_capture_fails_hears_it_continued_once_per_defer() {
    every_defer_hears_once_when_captures_fail("refusing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_whose_capture_panics_hears_it_continued_once_per_defer() {
    every_defer_hears_once_when_captures_fail("panicking").await;
}
