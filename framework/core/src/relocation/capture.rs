//! What a unit is made of in transit: its cells' state and timers, its saved work and pending
//! ticks, encoded once, cut into checksummed chunks, and put back together on the target.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::ReadyOutcome;
use crate::ids::{ActorId, SpotId, UnitId};
use crate::reply::ReplyTo;
use crate::session::{SessionBinding, SessionOp};
use crate::timer::{Tick, TimerSnapshot};

/// The largest chunk of a capture on the wire.
pub const CHUNK: usize = 256 * 1024;

/// One queued operation: a message with where its reply goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedOp {
    /// The unit it is for (the spot or one of its members).
    pub to: UnitId,
    /// The message, encoded (empty for a session change).
    pub payload: Bytes,
    /// A change to the Actor's session binding, applied in its place in the queue.
    pub session: Option<SessionOp>,
    /// Where its terminal goes, for a request.
    pub reply: Option<ReplyTo>,
}

/// Membership as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipData {
    /// A spot and its members.
    Spot(Vec<ActorId>),
    /// An actor and the spot it is in.
    Actor(Option<SpotId>),
}

/// A framework callback not yet run at the seal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PendingCallback {
    /// `on_start`.
    Start,
    /// `on_member_joined`.
    MemberJoined(ActorId),
    /// `on_member_left`.
    MemberLeft(ActorId),
    /// `on_joined`.
    Joined(SpotId),
    /// `on_left`.
    Left(SpotId),
    /// `on_relocation_ready_completed`.
    ReadyCompleted(ReadyOutcomeData),
}

/// [`ReadyOutcome`] as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadyOutcomeData {
    /// See [`ReadyOutcome::Continued`].
    Continued,
    /// See [`ReadyOutcome::Relocated`].
    Relocated,
}

impl From<ReadyOutcome> for ReadyOutcomeData {
    fn from(o: ReadyOutcome) -> Self {
        match o {
            ReadyOutcome::Continued => ReadyOutcomeData::Continued,
            ReadyOutcome::Relocated => ReadyOutcomeData::Relocated,
        }
    }
}

impl From<ReadyOutcomeData> for ReadyOutcome {
    fn from(o: ReadyOutcomeData) -> Self {
        match o {
            ReadyOutcomeData::Continued => ReadyOutcome::Continued,
            ReadyOutcomeData::Relocated => ReadyOutcome::Relocated,
        }
    }
}

/// One cell of the unit: a spot or an actor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellCapture {
    /// The cell's own id: the capture's `unit` for the primary, else a member's.
    pub id: UnitId,
    /// The type name of the factory that rebuilds the cell on the target.
    pub factory: String,
    /// The adapter's bytes (`None` under `Recreate`: the factory rebuilds it fresh).
    pub state: Option<Vec<u8>>,
    /// Its timers with their cursors.
    pub timers: Vec<TimerSnapshot>,
    /// A spot's members, or the spot an Actor is in, as the target restores them.
    pub membership: MembershipData,
    /// The client session bound to it (an Actor's), with the number of its next push.
    pub binding: Option<SessionBinding>,
}

/// Everything that moves with a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capture {
    /// The unit (its primary id: the spot of a SpotWide room, or the actor).
    pub unit: UnitId,
    /// Its cells, primary first.
    pub cells: Vec<CellCapture>,
    /// Callbacks due before any other turn, in order.
    pub callbacks: Vec<(UnitId, PendingCallback)>,
    /// Timer ticks that were due at the seal and not yet run, in order.
    pub ticks: Vec<(UnitId, Tick)>,
    /// The accepted journal: operations queued before the seal, in order.
    pub journal: Vec<QueuedOp>,
}

/// Why bytes in transit could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// The bytes did not add up to what the manifest said.
    #[error("transfer of {got} bytes does not match the manifest's {want} bytes")]
    Length {
        /// The bytes collected: in all, or up to the chunk that went past the manifest.
        got: u64,
        /// The length the manifest announced, in bytes.
        want: u64,
    },
    /// The checksum did not match.
    #[error("transfer checksum {got:08x} does not match the manifest's {want:08x}")]
    Checksum {
        /// The CRC-32C of the bytes that came.
        got: u32,
        /// The CRC-32C the manifest announced.
        want: u32,
    },
    /// A chunk arrived out of place.
    #[error("chunk {index} arrived where chunk {expected} was due")]
    ChunkOrder {
        /// The chunk's index.
        index: u32,
        /// The index that was due.
        expected: u32,
    },
    /// The bytes did not decode.
    #[error("capture does not decode: {0}")]
    Decode(String),
}

/// What a target is told before the chunks: enough to check them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Length of the encoded capture, in bytes.
    pub len: u64,
    /// How many chunks it is cut into, each at most [`CHUNK`] bytes.
    pub chunks: u32,
    /// CRC-32C of all bytes.
    pub crc: u32,
}

impl Capture {
    /// Encodes the capture and cuts it into chunks with their manifest.
    pub fn pack(&self) -> Result<(Manifest, Vec<Bytes>), TransferError> {
        let bytes = Bytes::from(
            postcard::to_allocvec(self).map_err(|e| TransferError::Decode(e.to_string()))?,
        );
        let chunks: Vec<Bytes> = if bytes.is_empty() {
            Vec::new()
        } else {
            (0..bytes.len())
                .step_by(CHUNK)
                .map(|at| bytes.slice(at..(at + CHUNK).min(bytes.len())))
                .collect()
        };
        let manifest = Manifest {
            len: bytes.len() as u64,
            chunks: chunks.len() as u32,
            crc: crc32c::crc32c(&bytes),
        };
        Ok((manifest, chunks))
    }
}

/// Collects chunks on the target and checks them against the manifest.
#[derive(Debug)]
pub struct Assembly {
    manifest: Manifest,
    bytes: Vec<u8>,
    next: u32,
}

impl Assembly {
    /// Starts collecting for a manifest.
    pub fn new(manifest: Manifest) -> Self {
        Assembly {
            manifest,
            bytes: Vec::with_capacity(usize::try_from(manifest.len).unwrap_or(0).min(1 << 30)),
            next: 0,
        }
    }

    /// Adds a chunk; `Ok(true)` once every chunk is in.
    pub fn add(&mut self, index: u32, chunk: &[u8]) -> Result<bool, TransferError> {
        if index != self.next {
            return Err(TransferError::ChunkOrder {
                index,
                expected: self.next,
            });
        }
        self.next += 1;
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() as u64 > self.manifest.len {
            return Err(TransferError::Length {
                got: self.bytes.len() as u64,
                want: self.manifest.len,
            });
        }
        Ok(self.complete())
    }

    /// Whether every chunk is in.
    pub fn complete(&self) -> bool {
        self.next == self.manifest.chunks
    }

    /// Checks length and checksum, then decodes. A mismatch is an explicit failure, never a
    /// partial restore.
    pub fn finish(self) -> Result<Capture, TransferError> {
        let got = self.bytes.len() as u64;
        if got != self.manifest.len {
            return Err(TransferError::Length {
                got,
                want: self.manifest.len,
            });
        }
        let crc = crc32c::crc32c(&self.bytes);
        if crc != self.manifest.crc {
            return Err(TransferError::Checksum {
                got: crc,
                want: self.manifest.crc,
            });
        }
        postcard::from_bytes(&self.bytes).map_err(|e| TransferError::Decode(e.to_string()))
    }
}

/// The count and checksum of relay records, so the target can tell it has them all.
pub fn relay_digest(records: &[QueuedOp]) -> (u32, u32) {
    let mut crc = 0u32;
    for r in records {
        let bytes = postcard::to_allocvec(r).unwrap_or_default();
        crc = crc32c::crc32c_append(crc, &bytes);
    }
    (records.len() as u32, crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(state_len: usize) -> Capture {
        Capture {
            unit: UnitId::Spot(SpotId::new("room").unwrap()),
            cells: vec![CellCapture {
                id: UnitId::Spot(SpotId::new("room").unwrap()),
                factory: "room".into(),
                state: Some(vec![7u8; state_len]),
                timers: Vec::new(),
                membership: MembershipData::Spot(vec![ActorId::new("p1").unwrap()]),
                binding: None,
            }],
            callbacks: Vec::new(),
            ticks: Vec::new(),
            journal: vec![QueuedOp {
                to: UnitId::Spot(SpotId::new("room").unwrap()),
                payload: Bytes::from_static(b"q1"),
                session: None,
                reply: None,
            }],
        }
    }

    #[test]
    fn a_large_capture_is_chunked_and_reassembled_exactly() {
        let c = capture(CHUNK * 2 + 10);
        let (manifest, chunks) = c.pack().unwrap();
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|ch| ch.len() <= CHUNK));
        let mut a = Assembly::new(manifest);
        for (i, ch) in chunks.iter().enumerate() {
            let done = a.add(i as u32, ch).unwrap();
            assert_eq!(done, i == 2);
        }
        assert_eq!(a.finish().unwrap(), c);
    }

    #[test]
    fn a_corrupted_chunk_fails_the_checksum_and_restores_nothing() {
        let (manifest, chunks) = capture(1000).pack().unwrap();
        let mut bad = chunks[0].to_vec();
        bad[5] ^= 0xff;
        let mut a = Assembly::new(manifest);
        a.add(0, &bad).unwrap();
        assert!(matches!(a.finish(), Err(TransferError::Checksum { .. })));
    }

    #[test]
    fn chunks_out_of_order_or_too_long_are_refused() {
        let (manifest, chunks) = capture(CHUNK + 1).pack().unwrap();
        let mut a = Assembly::new(manifest);
        assert!(matches!(
            a.add(1, &chunks[1]),
            Err(TransferError::ChunkOrder { .. })
        ));
        let mut a = Assembly::new(Manifest { len: 3, ..manifest });
        assert!(matches!(
            a.add(0, &chunks[0]),
            Err(TransferError::Length { .. })
        ));
    }

    proptest::proptest! {
        /// Whatever bytes arrive as a capture, assembling and decoding them ends in a capture or
        /// an error, never a panic or a partial restore.
        #[test]
        fn arbitrary_capture_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
            let manifest = Manifest { len: bytes.len() as u64, chunks: 1, crc: crc32c::crc32c(&bytes) };
            let mut a = Assembly::new(manifest);
            if a.add(0, &bytes).is_ok() {
                let _ = a.finish();
            }
        }

        /// Captures of any state size and journal round-trip through chunks exactly.
        #[test]
        fn captures_round_trip_through_chunks(state_len in 0usize..(3 * CHUNK), ops in 0usize..20) {
            let mut c = capture(state_len);
            c.journal = (0..ops)
                .map(|i| QueuedOp {
                    to: c.unit.clone(),
                    payload: Bytes::from(vec![i as u8; i]),
                    reply: None,
                    session: None,
                })
                .collect();
            let (manifest, chunks) = c.pack().unwrap();
            let mut a = Assembly::new(manifest);
            for (i, ch) in chunks.iter().enumerate() {
                a.add(i as u32, ch).unwrap();
            }
            proptest::prop_assert_eq!(a.finish().unwrap(), c);
        }
    }

    #[test]
    fn relay_digests_differ_when_a_record_is_missing_or_changed() {
        let c = capture(1);
        let one = relay_digest(&c.journal);
        assert_eq!(one.0, 1);
        assert_ne!(relay_digest(&[]), one);
        let mut changed = c.journal.clone();
        changed[0].payload = Bytes::from_static(b"q2");
        assert_ne!(relay_digest(&changed), one);
    }
}
