//! What a unit is made of in transit: its cells' state and timers, its saved work and pending
//! ticks, encoded once, cut into checksummed chunks, and put back together on the target.

use std::ops::Range;

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
    /// Timer ticks taken from their timers (due by the seal) and not yet run, in order.
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
    /// The capture was sent as a difference to a pre-copy the target does not hold (it never
    /// arrived whole, or was dropped): the source sends the whole capture instead.
    #[error("the pre-copied base of this capture is not held here")]
    BaseLost,
    /// The bytes did not decode.
    #[error("capture does not decode: {0}")]
    Decode(String),
    /// The cells' own deltas did not rebuild the image the source sealed: an adapter's
    /// `apply_delta` failed, panicked or gave other bytes than its `delta` was made from.
    #[error(
        "the state adapters' deltas did not rebuild the sealed image ({0}); the whole image is \
         sent instead: check that the adapter's apply_delta undoes its delta exactly"
    )]
    Rebuild(String),
}

impl TransferError {
    /// Whether the source should send the whole image in place of what failed: the base it was
    /// sent against is not held here, or the adapters' deltas did not rebuild the image. The
    /// move goes on either way; any other failure ends it.
    pub fn wants_whole(&self) -> bool {
        matches!(self, TransferError::BaseLost | TransferError::Rebuild(_))
    }
}

/// A pre-copied image a capture is sent as a difference to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    /// Its length, in bytes.
    pub len: u64,
    /// CRC-32C of all of it.
    pub crc: u32,
}

impl Base {
    /// The base that `image` is.
    pub fn of(image: &[u8]) -> Self {
        Base {
            len: image.len() as u64,
            crc: crc32c::crc32c(image),
        }
    }
}

/// What a target is told before the chunks: enough to check them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Length of the capture's image, in bytes.
    pub len: u64,
    /// How many chunks are sent, each at most [`CHUNK`] bytes.
    pub chunks: u32,
    /// CRC-32C of the whole image, as the target must end up holding it.
    pub crc: u32,
    /// The pre-copy the chunks patch, if any: then only what changed since is sent.
    pub base: Option<Base>,
    /// With a base: the chunks are not pieces of the image but a recipe of this many bytes that
    /// rebuilds it from the base cell by cell, with the adapters' own deltas where they made one
    /// ([`Precopy::seal`](super::precopy::Precopy::seal)).
    pub recipe: Option<u64>,
}

/// Where one cell's state lies in an image, and the factory whose adapter wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateAt {
    /// The cell.
    pub id: UnitId,
    /// The type name of its factory.
    pub factory: String,
    /// Its state's bytes in the image.
    pub range: Range<usize>,
}

/// The trailer of an image: the capture without its cells' states, and each state's length.
#[derive(Serialize, Deserialize)]
struct Trailer {
    states: Vec<Option<u32>>,
    capture: Capture,
}

impl Capture {
    /// Encodes the capture as an image: every cell's state bytes first, as the adapter gave them,
    /// then the rest, then the rest's length. A state keeps its place from one image of a unit to
    /// the next, so what did not change between two images is the same bytes at the same offsets.
    pub fn into_image(mut self) -> Result<Vec<u8>, TransferError> {
        let states: Vec<Option<Vec<u8>>> = self
            .cells
            .iter_mut()
            .map(|cell| cell.state.take())
            .collect();
        let lengths = states
            .iter()
            .map(|state| state.as_ref().map(|bytes| bytes.len() as u32))
            .collect();
        let trailer = postcard::to_allocvec(&Trailer {
            states: lengths,
            capture: self,
        })
        .map_err(|e| TransferError::Decode(e.to_string()))?;
        let size = states.iter().flatten().map(Vec::len).sum::<usize>() + trailer.len() + 4;
        let mut image = Vec::with_capacity(size);
        for state in states.iter().flatten() {
            image.extend_from_slice(state);
        }
        image.extend_from_slice(&trailer);
        image.extend_from_slice(&(trailer.len() as u32).to_le_bytes());
        Ok(image)
    }

    /// Decodes an image made by [`into_image`](Self::into_image).
    pub fn from_image(image: &[u8]) -> Result<Capture, TransferError> {
        let (mut capture, ranges, _) = split(image)?;
        for (cell, range) in capture.cells.iter_mut().zip(ranges) {
            cell.state = range.map(|range| image[range].to_vec());
        }
        Ok(capture)
    }
}

/// Where the states of an image made by [`Capture::into_image`] lie (cells without state left
/// out), and where the rest of it begins: what a seal compares cell by cell.
pub fn states(image: &[u8]) -> Result<(Vec<StateAt>, usize), TransferError> {
    let (capture, ranges, rest) = split(image)?;
    let states = capture
        .cells
        .into_iter()
        .zip(ranges)
        .filter_map(|(cell, range)| {
            range.map(|range| StateAt {
                id: cell.id,
                factory: cell.factory,
                range,
            })
        })
        .collect();
    Ok((states, rest))
}

/// Each cell's state range in an image, `None` for a cell without state.
type Ranges = Vec<Option<Range<usize>>>;

/// Splits an image into its capture without states, its cells' state ranges, and the offset of
/// its trailer.
fn split(image: &[u8]) -> Result<(Capture, Ranges, usize), TransferError> {
    let bad = |why: &str| TransferError::Decode(why.to_owned());
    let split = image
        .len()
        .checked_sub(4)
        .ok_or_else(|| bad("shorter than its trailer's length"))?;
    let (body, len) = image.split_at(split);
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    let at = body
        .len()
        .checked_sub(len)
        .ok_or_else(|| bad("shorter than its trailer"))?;
    let Trailer {
        states: lengths,
        capture,
    } = postcard::from_bytes(&body[at..]).map_err(|e| TransferError::Decode(e.to_string()))?;
    if lengths.len() != capture.cells.len() {
        return Err(bad("its states do not match its cells"));
    }
    let mut next = 0usize;
    let mut ranges = Vec::with_capacity(lengths.len());
    for len in lengths {
        let Some(len) = len else {
            ranges.push(None);
            continue;
        };
        let end = next.saturating_add(len as usize);
        if end > at {
            return Err(bad("a state runs past the image"));
        }
        ranges.push(Some(next..end));
        next = end;
    }
    if next != at {
        return Err(bad("bytes left over between the states and the trailer"));
    }
    Ok((capture, ranges, at))
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

    fn op(payload: &'static [u8]) -> QueuedOp {
        QueuedOp {
            to: UnitId::Spot(SpotId::new("room").unwrap()),
            payload: Bytes::from_static(payload),
            session: None,
            reply: None,
        }
    }

    #[test]
    fn relay_digests_differ_when_a_record_is_missing_or_changed() {
        let one = relay_digest(&[op(b"q1")]);
        assert_eq!(one.0, 1);
        assert_ne!(relay_digest(&[]), one);
        assert_ne!(relay_digest(&[op(b"q2")]), one);
    }
}
