//! Sample games for Ferry, each a set of factories to register on a node.
//!
//! - [`chat`]: a chat room that keeps its last 100 lines and broadcasts to its members.
//! - [`ping`]: the smallest spot that tells and asks others, to check a cluster end to end.

pub mod chat;
pub mod ping;
