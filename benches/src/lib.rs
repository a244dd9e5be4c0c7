//! Shared helpers for the Ferry benchmarks.
//!
//! Layout, in the order a bench uses them:
//! - [`Counter`] and [`registry`]: the trivial unit every bench talks to.
//! - [`runtime`]: the tokio runtime every bench runs on, Ferry and baseline alike.
//! - [`cross`]: two Ferry nodes on one store, talking real QUIC on loopback.
//! - [`bare`]: the baseline for [`cross`]: a quinn endpoint pair exchanging the same frames.
//! - [`rooms`]: rooms with state on a cluster, for the relocation benches, and their baseline.
//! - [`standby`]: rooms with and without a confirmed standby on one node of three.
//! - [`timings`]: the histograms benches record round trips and pauses in.

pub mod bare;
pub mod cross;
pub mod rooms;
pub mod standby;
pub mod timings;

use ferry::{Behavior, Ctx, Registration, Registry};
use tokio::runtime::Runtime;

/// The factory name of the counter Actor.
pub const COUNTER: &str = "counter";
/// The factory name of the counter User Spot.
pub const COUNTER_SPOT: &str = "counter_spot";

/// Counts what it is told; answers its count.
pub struct Counter(pub u64);

impl Behavior for Counter {
    type Msg = u64;
    type Reply = u64;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, n: u64) -> u64 {
        self.0 += n;
        self.0
    }
}

/// A registry with the counter as an Actor ([`COUNTER`]) and as a User Spot ([`COUNTER_SPOT`]).
pub fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(Registration::actor(COUNTER, |_| Counter(0)));
    reg.register(Registration::spot(COUNTER_SPOT, |_| Counter(0)));
    reg
}

/// The runtime of every bench: two workers, one per core of the reference machine.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime builds")
}
