//! Warm standby: a copy of a room's image kept on another node, checkpointed at turn boundaries
//! as differences, so that a crash of its owner promotes that copy instead of rebuilding the
//! room from nothing.
//!
//! - [`placement`]: which node holds a room's standby copy.
//! - [`frames`]: what an owner and its standby say to each other.
//! - [`checkpoints`]: the owner's side: numbering, what a checkpoint ships, the node's budget,
//!   and which turns' effects confirmed mode may release.
//! - [`replica`]: the standby's side: applying checkpoints in order, refusing what it cannot apply.
//! - [`promotion`]: which copy recovery promotes when the owner died, and on what condition.

pub mod checkpoints;
pub mod frames;
pub mod placement;
pub mod promotion;
pub mod replica;

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often a periodic standby is checkpointed unless its factory says otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// The longest a frame to a standby's node waits to go with others (see [`Policy::gather`]):
/// a node's checkpoints then leave in a few writes a second, not one write and the wake-ups on
/// both nodes for each.
pub const GATHER: Duration = Duration::from_millis(20);

/// A factory's standby policy, chosen at registration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Policy {
    /// No standby: a crash rebuilds the room from nothing.
    #[default]
    None,
    /// A checkpoint at the first turn boundary after each interval: a crash loses at most what
    /// changed since the last one the standby acknowledged.
    Periodic {
        /// The least time between two checkpoints.
        interval: Duration,
    },
    /// A checkpoint at every turn boundary that follows a change, and a turn's effects (a
    /// confirmation, a reply, a push) leave the node only once the standby holds them: a crash
    /// loses nothing anyone was told had happened.
    Confirmed,
}

impl Policy {
    /// Periodic checkpoints at the default interval.
    pub fn periodic() -> Self {
        Policy::Periodic {
            interval: DEFAULT_INTERVAL,
        }
    }

    /// Whether rooms of this policy keep a standby at all.
    pub fn keeps_standby(self) -> bool {
        self != Policy::None
    }

    /// Whether a room's effects (confirmations, replies, pushes) wait for its standby to hold
    /// their turn before they leave the node.
    pub fn holds_effects(self) -> bool {
        self == Policy::Confirmed
    }

    /// Whether a checkpoint carries what is queued for the room and its members beside their
    /// state, so that a promoted copy runs it: in confirmed mode, where a member's turn that was
    /// confirmed may have told its room something the room had not run yet. Its cost: a message
    /// that also ran on the dead owner after the checkpoint runs again, and what it sent outside
    /// the room's lane at once (a tell to another unit) is sent twice. A periodic copy goes back
    /// to its checkpoint, queue and all, as the policy says.
    pub fn carries_queue(self) -> bool {
        self == Policy::Confirmed
    }

    /// How long a checkpoint of this policy may wait on its owner to go to its standby together
    /// with others: a fifth of a periodic interval, at most [`GATHER`], which the copy's age
    /// allows; none in confirmed mode, where replies wait for the checkpoint.
    pub fn gather(self) -> Duration {
        match self {
            Policy::Periodic { interval } => (interval / 5).min(GATHER),
            Policy::None | Policy::Confirmed => Duration::ZERO,
        }
    }

    /// The least time between two checkpoints.
    fn interval(self) -> Duration {
        match self {
            Policy::Periodic { interval } => interval,
            Policy::None | Policy::Confirmed => Duration::ZERO,
        }
    }
}

/// Whether a room that ends on its owner has its standby drop the copy: only when the owner
/// ends it while it certainly owns it (the room moved, stopped, or its node shut down in
/// order). An owner fenced off (its lease may have lapsed, or it crashed) may no longer own the
/// room, and its standby's copy is what recovery promotes.
pub fn drops_copy_at_end(owner_fenced: bool) -> bool {
    !owner_fenced
}

/// Which run of checkpoints a checkpoint belongs to. An owner starts a new series whenever it
/// cannot know what its standby holds (a new standby, a refusal, an answer that never came); the
/// first checkpoint of a series is the whole image. Series compare by the owner generation of the
/// record their owner runs the room under, then by the owner's own count: a standby never goes
/// back to an older series, so an owner that lost the room cannot overwrite its successor's copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Series {
    /// The owner generation of the room's record under its owner (grows on every owner change).
    pub generation: u64,
    /// The owner's count of series under that generation, from 1.
    pub epoch: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_periodic_checkpoints_wait_to_go_together_and_never_long() {
        assert_eq!(Policy::Confirmed.gather(), Duration::ZERO);
        assert_eq!(Policy::periodic().gather(), GATHER);
        let fast = Policy::Periodic {
            interval: Duration::from_millis(10),
        };
        assert_eq!(fast.gather(), Duration::from_millis(2));
    }

    #[test]
    fn only_confirmed_mode_holds_effects() {
        assert!(Policy::Confirmed.holds_effects());
        assert!(!Policy::periodic().holds_effects());
        assert!(!Policy::None.holds_effects());
    }
}
