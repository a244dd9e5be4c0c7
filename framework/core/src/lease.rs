//! Keeping the owner lease: what a node does once the store says its lease is gone.
//!
//! A lease lapses when the store could not be reached for a TTL; the node may take it again only
//! if no other process of its id took it meanwhile. An acquisition whose answer was lost may
//! have landed, so a lease found later with a higher generation and this process as holder is
//! this process's own.

/// A node id's lease as the store holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLease {
    /// Grows by one with every acquisition of the node id.
    pub generation: u64,
    /// The random number of the process that acquired it.
    pub holder: u64,
}

/// What a node whose lease the store no longer holds does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retake {
    /// Another process of this node id took the lease: this one stops running turns for good.
    TakenByAnother,
    /// An acquisition of this process whose answer was lost landed: renew it and keep it.
    AlreadyOurs,
    /// Nobody holds it: acquire it again.
    Acquire,
}

/// Decides from the lease found in the store (`None`: none) after this process's lease of
/// `lost_generation` was refused.
pub fn after_lost(holder: u64, lost_generation: u64, found: Option<HeldLease>) -> Retake {
    match found {
        Some(current) if current.holder != holder => Retake::TakenByAnother,
        Some(current) if current.generation > lost_generation => Retake::AlreadyOurs,
        _ => Retake::Acquire,
    }
}

/// Whether a lease this process just acquired follows its lost one with no other process's
/// acquisition between: each of `unanswered` earlier attempts may have used a generation.
pub fn acquired_in_turn(lost_generation: u64, unanswered: u64, acquired: u64) -> bool {
    acquired <= lost_generation + 1 + unanswered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_another_process_holds_is_never_taken_back() {
        let other = HeldLease {
            generation: 9,
            holder: 2,
        };
        assert_eq!(after_lost(1, 4, Some(other)), Retake::TakenByAnother);
    }

    #[test]
    fn a_lost_answer_that_landed_is_this_processs_lease() {
        let landed = HeldLease {
            generation: 5,
            holder: 1,
        };
        assert_eq!(after_lost(1, 4, Some(landed)), Retake::AlreadyOurs);
        let lapsed = HeldLease {
            generation: 4,
            holder: 1,
        };
        assert_eq!(after_lost(1, 4, Some(lapsed)), Retake::Acquire);
        assert_eq!(after_lost(1, 4, None), Retake::Acquire);
    }

    #[test]
    fn a_generation_skipped_by_more_than_our_lost_attempts_was_another_processs() {
        assert!(acquired_in_turn(4, 0, 5));
        assert!(acquired_in_turn(4, 2, 7));
        assert!(!acquired_in_turn(4, 0, 6));
    }
}
