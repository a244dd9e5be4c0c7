//! The test rooms several test files share, and the registries that hold them.

use ferry::{Behavior, Ctx, Registration, Registry, RelocationPolicy};
use ferry_samples::ping;
use serde::{Deserialize, Serialize};

/// A room that logs the inputs it runs, so a test can check that each acknowledged input ran
/// exactly once and in order: `Some(n)` appends `n`, `None` only reads, and every turn answers
/// with the whole log.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Room(Vec<u64>);

impl Behavior for Room {
    type Msg = Option<u64>;
    type Reply = Vec<u64>;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, input: Option<u64>) -> Vec<u64> {
        if let Some(n) = input {
            self.0.push(n);
        }
        self.0.clone()
    }
}

/// [`Room`] as the kind `"room"`, moving with its log (serde).
pub fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(Registration::spot("room", |_| Room::default()).policy(RelocationPolicy::serde()));
    reg
}

/// The ping sample's room alone.
pub fn ping_registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(ping::ping());
    reg
}
