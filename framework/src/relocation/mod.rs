//! Moving live units between nodes: one unit at a time, or a whole host drained.
//!
//! The decisions, the capture and the frames of a move are in `ferry_core::relocation` (re-exported
//! here as [`protocol`], [`capture`], `frames` and `phases`); this module drives them.
//!
//! Layout, in the order a move runs:
//! - `reports`: the options a move or a drain takes, how it ended, and the events it sends.
//! - `source`: the async shell of the source side: seal, transfer, handover, fence.
//! - `target`: the async shell of the target side: restore, relay, commit, open.
//! - `host`: draining a whole node within a deadline and budget, with status and events.

#[path = "../node/drain.rs"]
mod host;
mod reports;
#[path = "../node/source.rs"]
mod source;
#[path = "../node/target.rs"]
mod target;

pub use ferry_core::relocation::phases::MovePhases;
pub use ferry_core::relocation::{RelocationId, capture, protocol};
pub(crate) use ferry_core::relocation::{frames, phases};
pub(crate) use host::HostOp;
pub use reports::{
    BlockedReason, HostStatus, MoveError, MoveReport, RelocateMode, RelocateOptions,
    RelocateOutcome, RelocationEvent,
};
pub(crate) use target::Moves;
