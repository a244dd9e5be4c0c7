//! Moving live units between nodes: one unit at a time, or a whole host drained.
//!
//! The decisions, the capture and the frames of a move are in `ferry_core::relocation` (re-exported
//! here as [`protocol`], [`capture`], [`precopy`], `frames` and `phases`); the node drives them.
//!
//! Layout:
//! - `reports`: the options a move or a drain takes, how it ended, and the events it sends.
//! - `moves`: the moves a node takes part in: the source's channel to its target's answers, and
//!   the target's staged units.
//! - `host`: a node's host operation (a drain): whether one runs, its status and events.
//!
//! This module is data only: the node runs moves and drains (`node::source`, `node::target`,
//! `node::drain`).

pub(crate) mod host;
pub(crate) mod moves;
pub(crate) mod reports;

pub use ferry_core::relocation::phases::MovePhases;
pub use ferry_core::relocation::{RelocationId, capture, precopy, protocol};
pub(crate) use ferry_core::relocation::{admission, assembly, frames, phases};
pub use reports::{
    BlockedReason, HostStatus, MoveError, MoveReport, RelocateMode, RelocateOptions,
    RelocateOutcome, RelocationEvent,
};
