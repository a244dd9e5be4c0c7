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
//! [`registry`] registers every sample with its default rules.

pub mod bingo;
pub mod chat;
pub mod fps;
pub mod ping;
mod seed;

use ferry::Registry;

/// Registers every sample's factories with their default rules.
pub fn register_all(registry: &mut Registry) {
    chat::register(registry);
    fps::register(registry, fps::Rules::default());
    bingo::register(registry, bingo::Rules::default());
    registry.register(ping::ping());
}

/// A registry with every sample's factories, for a node that hosts them all.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    register_all(&mut registry);
    registry
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
