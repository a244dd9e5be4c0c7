//! Sample games for Ferry, each a set of factories to register on a node, and the message types
//! its clients (players, bots) send and receive.
//!
//! - [`chat`]: a chat room that keeps its last 100 lines and broadcasts to its members.
//! - [`fps`]: a 30 Hz FPS room that moves only between rounds (`ApplicationSignaled`).
//! - [`ping`]: the smallest spot that tells and asks others, to check a cluster end to end.
//! - `seed`: deterministic randomness, so a room plays the same game wherever it runs.

pub mod chat;
pub mod fps;
pub mod ping;
mod seed;
