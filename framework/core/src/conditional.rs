//! A conditional write whose answer may be lost, decided only by what the store says.
//!
//! A store that does not answer a write may have applied it or not. Taking that as won could give
//! a unit two owners; taking it as lost could leave a record that names a node which dropped its
//! copy. So the writer reads the record back: it won only if the record is its own claim (the
//! same owner, owner generation and incarnation it wrote), and while the store cannot be read
//! either, it does not know.

use crate::authority::UnitRecord;

/// What the store answered to a conditional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteAnswer {
    /// It was applied.
    Committed,
    /// A condition failed: nothing was written.
    Conflict,
    /// No answer came: it may or may not have been applied.
    NoAnswer,
}

/// What the writer knows, and what it does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The record is the writer's claim.
    Won,
    /// Someone else's write (or none) stands.
    Lost,
    /// Read the record back to find out.
    ReadBack,
    /// The store answered neither the write nor the read: ask again later, or give up the claim.
    Unknown,
}

/// One conditional write of a unit's authority record.
#[derive(Debug, Clone)]
pub struct ConditionalWrite {
    wrote: UnitRecord,
}

impl ConditionalWrite {
    /// A write of `wrote`.
    pub fn new(wrote: UnitRecord) -> Self {
        ConditionalWrite { wrote }
    }

    /// The record written.
    pub fn wrote(&self) -> &UnitRecord {
        &self.wrote
    }

    /// What the write's answer says.
    pub fn on_write(&self, answer: WriteAnswer) -> Settled {
        match answer {
            WriteAnswer::Committed => Settled::Won,
            WriteAnswer::Conflict => Settled::Lost,
            WriteAnswer::NoAnswer => Settled::ReadBack,
        }
    }

    /// What the read back says: `Ok(record)` as the store holds it now (`None`: absent), or
    /// `Err(())` if the store did not answer.
    pub fn on_read(&self, read: Result<Option<&UnitRecord>, ()>) -> Settled {
        match read {
            Ok(Some(now)) if now.same_claim(&self.wrote) => Settled::Won,
            Ok(_) => Settled::Lost,
            Err(()) => Settled::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::Stage;
    use crate::ids::{NodeId, ObjectGeneration};

    fn record(owner: &str, owner_generation: u64, incarnation: u64) -> UnitRecord {
        UnitRecord {
            owner: NodeId::new(owner).unwrap(),
            lease_generation: 1,
            object_generation: ObjectGeneration(incarnation),
            owner_generation,
            factory: "room".into(),
            stage: Stage::Active,
            spot: None,
            recoverable: true,
        }
    }

    #[test]
    fn a_lost_answer_is_never_taken_as_won_or_lost_before_a_read() {
        let write = ConditionalWrite::new(record("n2", 3, 9));
        assert_eq!(write.on_write(WriteAnswer::Committed), Settled::Won);
        assert_eq!(write.on_write(WriteAnswer::Conflict), Settled::Lost);
        assert_eq!(write.on_write(WriteAnswer::NoAnswer), Settled::ReadBack);
    }

    #[test]
    fn the_read_back_decides_by_the_claim_written() {
        let write = ConditionalWrite::new(record("n2", 3, 9));
        // The write landed; a later change of another field (a join's spot) keeps it ours.
        let mut joined = record("n2", 3, 9);
        joined.spot = Some(crate::ids::SpotId::new("lobby").unwrap());
        assert_eq!(write.on_read(Ok(Some(&joined))), Settled::Won);
        // The record as it was before: the write did not land.
        assert_eq!(write.on_read(Ok(Some(&record("n1", 2, 9)))), Settled::Lost);
        // Another node's claim of the same generation, or a rebuilt incarnation here.
        assert_eq!(write.on_read(Ok(Some(&record("n3", 3, 9)))), Settled::Lost);
        assert_eq!(write.on_read(Ok(Some(&record("n2", 3, 10)))), Settled::Lost);
        assert_eq!(write.on_read(Ok(None)), Settled::Lost);
        assert_eq!(write.on_read(Err(())), Settled::Unknown);
    }
}
