//! Sample games for Ferry, each a set of factories to register on a node, and the message types
//! its clients (players, bots) send and receive.
//!
//! - [`chat`]: a chat room that keeps its last 100 lines and pushes each one to its members' clients.
//! - [`fps`]: a 30 Hz FPS room that moves only between rounds (`ApplicationSignaled`).
//! - [`bingo`]: bingo rooms and players that keep their state through moves, and a matchmaker that
//!   is rebuilt, not moved (`Recreate`).
//! - [`ping`]: the smallest spot that tells and asks others, to check a cluster end to end.
//! - `seed`: deterministic randomness, so a room plays the same game wherever it runs.
//!
//! [`registry`] registers every sample with its default rules; [`registry_with_standby`] the same,
//! its game rooms keeping a warm standby.

pub mod bingo;
pub mod chat;
pub mod fps;
pub mod ping;
mod seed;

use ferry::{Registry, StandbyPolicy};

/// Registers every sample's factories with their default rules, with no standby.
pub fn register_all(registry: &mut Registry) {
    register_all_standby(registry, StandbyPolicy::None);
}

/// Registers every sample's factories with their default rules, the games' rooms keeping a
/// standby of `standby`, with their members (the bingo matchmaker is rebuilt from its rooms, and
/// `ping` is a check, so neither keeps one).
pub fn register_all_standby(registry: &mut Registry, standby: StandbyPolicy) {
    chat::register_standby(registry, standby);
    fps::register_standby(registry, fps::Rules::default(), standby);
    bingo::register_standby(registry, bingo::Rules::default(), standby);
    registry.register(ping::ping());
}

/// A registry with every sample's factories, for a node that hosts them all.
pub fn registry() -> Registry {
    registry_with_standby(StandbyPolicy::None)
}

/// A registry with every sample's factories, the games' rooms keeping a standby of `standby`.
pub fn registry_with_standby(standby: StandbyPolicy) -> Registry {
    let mut registry = Registry::new();
    register_all_standby(&mut registry, standby);
    registry
}

/// A new life of a room: the time it was built fresh (created, or rebuilt after a crash), in
/// nanoseconds since the Unix epoch. It is state, so it moves with the room and comes back with a
/// checkpoint; a client that sees it change knows the room started over.
pub(crate) fn new_life() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// The sample pages' code blocks, compiled and run as doctests so they stay true to the code.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../docs/samples/README.md")]
    pub struct Samples;

    #[doc = include_str!("../../docs/samples/chat.md")]
    pub struct Chat;

    #[doc = include_str!("../../docs/samples/fps.md")]
    pub struct Fps;

    #[doc = include_str!("../../docs/samples/bingo.md")]
    pub struct Bingo;
}
