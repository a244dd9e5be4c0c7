//! Sample games for Ferry, each a set of factories to register on a node.
//!
//! - [`chat`]: a chat room that keeps its last 100 lines and broadcasts to its members.

pub mod chat;
