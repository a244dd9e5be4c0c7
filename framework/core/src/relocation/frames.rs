//! What the source and the target of a move say to each other, on the ordered mesh stream.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::RelocationId;
use super::capture::{Base, Manifest, QueuedOp};
use crate::authority::UnitRecord;
use crate::ids::UnitId;

/// Why a target refused a unit: what the source reports as the reason it stayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefusedBecause {
    /// The target takes no units (it is not serving any more): another target may.
    NotServing,
    /// The unit's state cannot be restored there: its adapter failed or panicked, or no factory
    /// of its type is registered there.
    StateIncompatible,
    /// Anything else: the capture did not check out or was too large, or the unit is hosted
    /// there already.
    Other,
    /// An earlier move of the unit to that target is still committing: the store decides it
    /// soon, and the unit may be offered again then.
    Busy,
}

/// A target's refusal of a unit: why, and in words for the logs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// Why, as the source reports it.
    pub because: RefusedBecause,
    /// What happened, in words.
    pub why: String,
}

impl Refusal {
    /// A refusal that is neither of the target's state nor of the unit's state.
    pub fn other(why: impl Into<String>) -> Self {
        Refusal {
            because: RefusedBecause::Other,
            why: why.into(),
        }
    }

    /// The target takes no units (it drains, stops, or is not serving yet).
    pub fn not_serving(why: impl Into<String>) -> Self {
        Refusal {
            because: RefusedBecause::NotServing,
            why: why.into(),
        }
    }

    /// The unit's state cannot be restored on the target.
    pub fn incompatible(why: impl Into<String>) -> Self {
        Refusal {
            because: RefusedBecause::StateIncompatible,
            why: why.into(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// An authority record as the source read it, with the store version a commit is conditional on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordAt {
    /// The unit the record is of.
    pub id: UnitId,
    /// The record as read.
    pub record: UnitRecord,
    /// The store version it was read at.
    pub version: u64,
}

/// One frame of a move.
#[derive(Debug, Serialize, Deserialize)]
pub enum RelocFrame {
    /// Source → target: a unit is coming; its records and the manifest of its capture.
    Offer {
        /// The move's id, new for this move: every later frame of it, either way, carries it.
        rel: RelocationId,
        /// The unit that moves.
        unit: UnitId,
        /// The authority records of the unit and its members, as read.
        records: Vec<RecordAt>,
        /// How the capture is cut into chunks.
        manifest: Manifest,
        /// The time left until the move's deadline: how long the target keeps the unit staged.
        within: Duration,
    },
    /// Source → target: one chunk of the capture's image.
    Chunk {
        /// The move the chunk is of: the target adds it to that move's assembly.
        rel: RelocationId,
        /// The chunk's place in the sequence of chunks.
        index: u32,
        /// Where in the image its bytes go.
        offset: u64,
        /// Up to [`CHUNK`](super::capture::CHUNK) bytes of the image, a slice of the frame
        /// they arrived in (no copy).
        #[serde(deserialize_with = "crate::shared_bytes::shared_bytes")]
        bytes: Bytes,
    },
    /// Source → target: one piece of a pre-copy round, sent while the unit still runs.
    Precopy {
        /// The move the piece is for: the target holds it under this id until the offer.
        rel: RelocationId,
        /// The length of the image the round makes.
        len: u64,
        /// Where in the image the bytes go.
        offset: u64,
        /// CRC-32C of the bytes.
        crc: u32,
        /// Up to [`CHUNK`](super::capture::CHUNK) bytes of the image, a slice of the frame
        /// they arrived in (no copy).
        #[serde(deserialize_with = "crate::shared_bytes::shared_bytes")]
        bytes: Bytes,
    },
    /// Source → target: a pre-copy round is sent whole; the target says whether it holds it.
    PrecopyEnd {
        /// The move pre-copied.
        rel: RelocationId,
        /// The round's number.
        round: u32,
        /// The image the target holds if every piece arrived.
        base: Base,
    },
    /// Target → source: whether the target holds a pre-copy round's image whole.
    PrecopyHeld {
        /// The move pre-copied.
        rel: RelocationId,
        /// The round answered.
        round: u32,
        /// `false`: what it held is dropped, and the seal must send the whole image.
        holds: bool,
    },
    /// Target → source: the offer names a pre-copied base the target does not hold; send the
    /// whole image ([`Resend`](Self::Resend)).
    BaseLost {
        /// The move whose offer is staged, waiting for the whole image.
        rel: RelocationId,
    },
    /// Source → target: the whole image follows in chunks, in place of the difference.
    Resend {
        /// The move the image is for.
        rel: RelocationId,
        /// How the whole image is cut into chunks.
        manifest: Manifest,
    },
    /// Target → source: the offer was taken and the work on it goes on (chunks assembled, a
    /// restore still running): the source counts silence only from the last one of these.
    Progress {
        /// The move still worked on: its source counts silence from this frame on.
        rel: RelocationId,
    },
    /// Target → source: restored into a queue that does not run yet; relay may start. With how
    /// long the restore took there.
    RelayReady {
        /// The move whose unit is staged and waits for its relay records.
        rel: RelocationId,
        /// How long the restore took on the target.
        restore: Duration,
    },
    /// Target → source: the unit was refused.
    Refused {
        /// The move refused: its source resumes the unit and ends the move.
        rel: RelocationId,
        /// What stands in the way: the kind the source reports, and words for the logs.
        reason: Refusal,
    },
    /// Source → target: relay records sent again follow; drop the ones before.
    RelayReset {
        /// The move whose relay records start over: the target drops those it kept for it.
        rel: RelocationId,
    },
    /// Source → target: the move was given up before the handover; drop what was staged.
    Withdraw {
        /// The move given up: the target discards the unit staged under it.
        rel: RelocationId,
    },
    /// Source → target: one operation that arrived after the seal.
    Relay {
        /// The move whose staged unit the record is for.
        rel: RelocationId,
        /// An operation held on the source after the seal; the target runs it after the journal.
        op: QueuedOp,
    },
    /// Source → target: no more relay records; their count and checksum.
    Cutover {
        /// The move handed over: the target commits only if its relay records match these.
        rel: RelocationId,
        /// How many relay records were sent.
        count: u32,
        /// CRC-32C of the relay records' encodings, in order (see `relay_digest`).
        crc: u32,
    },
    /// Target → source: recorded as owner and open. With how long the store commit took there.
    Committed {
        /// The move the target now owns: its source drops its copy and points gateways there.
        rel: RelocationId,
        /// How long the store commit took on the target.
        commit: Duration,
    },
    /// Target → source: gave up before committing.
    Aborted {
        /// The move the target gave up: its source resumes the unit, or fences once handed over.
        rel: RelocationId,
        /// Why, in words for the logs ("no cutover came", "the authority record changed").
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::Stage;
    use crate::ids::{NodeId, ObjectGeneration, SpotId};
    use proptest::prelude::*;

    proptest! {
        /// Every frame of a move decodes to what was encoded (compared by its encoding again,
        /// since the frames carry no equality of their own).
        #[test]
        fn move_frames_round_trip(
            rel in any::<u128>(),
            numbers in any::<(u64, u32, u32)>(),
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
            reason in "\\PC*",
            micros in any::<u32>(),
        ) {
            let (version, index, crc) = numbers;
            let rel = RelocationId(rel);
            let unit = UnitId::Spot(SpotId::new("room").expect("valid id"));
            let record = UnitRecord {
                owner: NodeId::new("n1").expect("valid id"),
                lease_generation: version,
                object_generation: ObjectGeneration(version),
                owner_generation: version / 2,
                factory: reason.clone(),
                stage: Stage::Active,
                spot: None,
                recoverable: index % 2 == 0,
            };
            let op = QueuedOp { to: unit.clone(), payload: bytes.clone().into(), session: None, reply: None };
            let took = Duration::from_micros(u64::from(micros));
            let frames = [
                RelocFrame::Offer {
                    rel,
                    unit: unit.clone(),
                    records: vec![RecordAt { id: unit.clone(), record, version }],
                    manifest: Manifest { len: version, chunks: index, crc, base: Some(Base { len: version, crc }), recipe: Some(version / 3) },
                    within: Duration::from_millis(version),
                },
                RelocFrame::Chunk { rel, index, offset: version, bytes: bytes.clone().into() },
                RelocFrame::Precopy { rel, len: version, offset: version, crc, bytes: bytes.into() },
                RelocFrame::PrecopyEnd { rel, round: index, base: Base { len: version, crc } },
                RelocFrame::PrecopyHeld { rel, round: index, holds: crc % 2 == 0 },
                RelocFrame::BaseLost { rel },
                RelocFrame::Resend { rel, manifest: Manifest { len: version, chunks: index, crc, base: None, recipe: None } },
                RelocFrame::Progress { rel },
                RelocFrame::RelayReady { rel, restore: took },
                RelocFrame::Refused { rel, reason: Refusal::other(reason.clone()) },
                RelocFrame::RelayReset { rel },
                RelocFrame::Withdraw { rel },
                RelocFrame::Relay { rel, op },
                RelocFrame::Cutover { rel, count: index, crc },
                RelocFrame::Committed { rel, commit: took },
                RelocFrame::Aborted { rel, reason },
            ];
            for frame in &frames {
                let bytes = postcard::to_allocvec(frame).expect("encodes");
                let back: RelocFrame = postcard::from_bytes(&bytes).expect("decodes");
                prop_assert_eq!(postcard::to_allocvec(&back).expect("encodes"), bytes);
            }
        }
    }
}
