//! Moving live units between nodes: one unit at a time, or a whole host drained.
//!
//! Layout, in the order a move runs:
//! - [`protocol`]: the two sides of a move as plain state machines (events in, actions out).
//! - [`capture`]: what moves (state, timers, saved work, pending ticks), chunked with CRC-32C.
//! - `frames`: what source and target say to each other on the mesh.
//! - `source`: the async shell of the source side: seal, transfer, handover, fence.
//! - `target`: the async shell of the target side: restore, relay, commit, open.
//! - `host`: draining a whole node within a deadline and budget, with status and events.

mod host;
mod source;
mod target;

pub use ferry_core::relocation::phases::MovePhases;
pub use ferry_core::relocation::{RelocationId, capture, protocol};
pub(crate) use ferry_core::relocation::{frames, phases};
pub(crate) use host::HostOp;
pub use host::{
    BlockedReason, HostStatus, RelocateMode, RelocateOptions, RelocateOutcome, RelocationEvent,
};
pub use source::{MoveError, MoveReport};
pub(crate) use target::Moves;
