//! What a move is made of: the unit in transit, what the two sides say, where its time goes, and
//! the two sides' state machines.
//!
//! - [`protocol`]: the source and target of a move as plain state machines (events in, actions out).
//! - [`admission`]: whether a target takes an offered unit.
//! - [`lane`]: what a move means for the lane that runs the unit: seal, hold, hand over, resume,
//!   and which changes of membership it takes meanwhile.
//! - [`capture`]: what moves (state, timers, saved work, pending ticks), as an image checked with
//!   CRC-32C.
//! - [`precopy`]: the image shipped while the unit runs, so the seal ships only what changed (its
//!   blocks, or the state adapters' own deltas).
//! - [`assembly`]: the target's side of a transfer: chunks collected over the pre-copy it holds,
//!   and the whole checked before anything is decoded.
//! - [`frames`]: what source and target say to each other on the mesh.
//! - [`phases`]: where the time of one move goes.

pub mod admission;
pub mod assembly;
pub mod capture;
pub mod frames;
pub mod lane;
pub mod phases;
pub mod precopy;
pub mod protocol;

pub use crate::ids::RelocationId;

/// How a prepared move ended, told to an ApplicationSignaled spot before its next application turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyOutcome {
    /// No move took place (none was prepared, or it was cancelled before relay-ready): carry on here.
    Continued,
    /// The spot now runs on another node; this is its first turn there.
    Relocated,
}
