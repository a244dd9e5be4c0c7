//! Moving live units between nodes: one unit at a time, or a whole host drained.
//!
//! Layout, in the order a move runs:
//! - [`protocol`]: the two sides of a move as plain state machines (events in, actions out).
//! - [`capture`]: what moves (state, timers, saved work, pending ticks), chunked with CRC-32C.
//! - `frames`: what source and target say to each other on the mesh.
//! - `source`: the async shell of the source side: seal, transfer, handover, fence.
//! - `target`: the async shell of the target side: restore, relay, commit, open.
//! - `host`: draining a whole node within a deadline and budget, with status and events.

pub mod capture;
pub(crate) mod frames;
mod host;
mod phases;
pub mod protocol;
mod source;
mod target;

pub(crate) use host::HostOp;
pub use host::{
    BlockedReason, HostStatus, RelocateMode, RelocateOptions, RelocateOutcome, RelocationEvent,
};
pub use phases::MovePhases;
pub use source::{MoveError, MoveReport};
pub(crate) use target::Moves;

use std::fmt;

use serde::{Deserialize, Serialize};

/// The identity of one move: random, so two moves never share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RelocationId(pub u128);

impl RelocationId {
    /// A fresh random id.
    pub fn random() -> Self {
        RelocationId(rand::random())
    }
}

impl fmt::Display for RelocationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}
