//! A unit's own data, below the node that runs it: what travels on its queue, the factory that
//! builds it, the cell its lane turns, its lane's handle and its route on the node. The types that
//! name the node take it as a parameter `N`, so that this module does not depend on `node`.
//!
//! Layout:
//! - `envelope`: the [`Message`](envelope::Message) trait, [`Target`](envelope::Target), and what
//!   travels on a queue.
//! - `replies`: requests waiting for their terminal.
//! - `factory`: what the runtime knows of a factory without its type.
//! - `cell`: one unit instance behind a type-erased face.
//! - `lane`: the sending side of a lane, and the work a node asks of it.
//! - `directory`: which lane hosts each unit of a node.
//! - `standby`: the rooms a node checkpoints to their standbys, and the copies it keeps.

pub(crate) mod cell;
pub(crate) mod directory;
pub(crate) mod envelope;
pub(crate) mod factory;
pub(crate) mod lane;
pub(crate) mod replies;
pub(crate) mod standby;
