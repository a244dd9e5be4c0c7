//! A game of one's own on Ferry: a counter room that keeps its count and ticks a timer, and moves
//! between nodes with both. `src/main.rs` is the host program that runs it as a production node;
//! docs/production.md walks through both files.

use std::time::Duration;

use ferry::{Behavior, Ctx, OverrunPolicy, Registration, Registry, RelocationPolicy, Tick};
use serde::{Deserialize, Serialize};

/// The factory name of counter rooms.
pub const COUNTER: &str = "counter";

/// How often a counter's timer ticks.
pub const TICK_EVERY: Duration = Duration::from_millis(100);

/// What a counter takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CounterMsg {
    /// Add to the count.
    Add(u64),
    /// Say where things stand.
    Get,
}

/// What a counter answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterReport {
    /// The sum of every `Add`.
    pub count: u64,
    /// The ticks of its timer so far, wherever it ran.
    pub ticks: u64,
    /// The node it runs on now.
    pub node: String,
}

/// A counter's state: all of it moves with the room.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Counter {
    count: u64,
    ticks: u64,
}

impl Behavior for Counter {
    type Msg = CounterMsg;
    type Reply = CounterReport;

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        // Timers are data: this one moves with the room and keeps its schedule.
        ctx.set_timer("tick", TICK_EVERY, OverrunPolicy::SkipLateTicks);
    }

    fn on_tick(&mut self, _ctx: &mut Ctx<'_>, _tick: &Tick) {
        self.ticks += 1;
    }

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: CounterMsg) -> CounterReport {
        if let CounterMsg::Add(n) = msg {
            self.count += n;
        }
        CounterReport {
            count: self.count,
            ticks: self.ticks,
            node: ctx.node().id().to_string(),
        }
    }
}

/// The game's factories: counter rooms, whose state moves whole with the serde adapter.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register(
        Registration::spot(COUNTER, |_| Counter::default()).policy(RelocationPolicy::serde()),
    );
    registry
}

/// The production guide's code blocks, compiled (and the room's run) as doctests.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../../docs/production.md")]
    pub struct Production;
}
