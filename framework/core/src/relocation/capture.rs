//! What a unit is made of in transit: its cells' state and timers, its saved work and pending
//! ticks, encoded once, cut into checksummed chunks, and put back together on the target.

use std::ops::Range;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::ReadyOutcome;
use super::precopy::{Deltas, rebuild};
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

/// Collects chunks on the target, over the pre-copied base if there is one, and checks the
/// whole against the manifest.
#[derive(Debug)]
pub struct Assembly {
    manifest: Manifest,
    /// The image as it is patched, or the recipe as it arrives.
    bytes: Vec<u8>,
    /// For a recipe: the base it rebuilds the image from.
    base: Option<Vec<u8>>,
    next: u32,
}

impl Assembly {
    /// Starts collecting for a manifest, over `held` (the pre-copy this node holds for the
    /// move) when the manifest names a base. `BaseLost` if it names one that is not held.
    pub fn new(manifest: Manifest, held: Option<Vec<u8>>) -> Result<Self, TransferError> {
        let capacity =
            |len: u64| Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1 << 30));
        let (bytes, base) = match (manifest.base, held) {
            (None, _) if manifest.recipe.is_some() => {
                return Err(TransferError::Decode("a recipe without a base".into()));
            }
            (None, _) => (capacity(manifest.len), None),
            (Some(base), Some(held)) if Base::of(&held) == base => match manifest.recipe {
                Some(len) => (capacity(len), Some(held)),
                None => {
                    let mut held = held;
                    held.resize(
                        usize::try_from(manifest.len).map_err(|_| TransferError::BaseLost)?,
                        0,
                    );
                    (held, None)
                }
            },
            (Some(_), _) => return Err(TransferError::BaseLost),
        };
        Ok(Assembly {
            manifest,
            bytes,
            base,
            next: 0,
        })
    }

    /// Adds a chunk, written at `offset`; `Ok(true)` once every chunk is in. Without a base, and
    /// for a recipe, the chunks follow each other, so each starts where the last ended.
    pub fn add(&mut self, index: u32, offset: u64, chunk: &[u8]) -> Result<bool, TransferError> {
        if index != self.next {
            return Err(TransferError::ChunkOrder {
                index,
                expected: self.next,
            });
        }
        self.next += 1;
        let end = offset.saturating_add(chunk.len() as u64);
        let want = self.manifest.recipe.unwrap_or(self.manifest.len);
        if end > want {
            return Err(TransferError::Length { got: end, want });
        }
        let (offset, end) = (offset as usize, end as usize);
        if self.manifest.base.is_some() && self.base.is_none() {
            self.bytes[offset..end].copy_from_slice(chunk);
        } else if offset == self.bytes.len() {
            self.bytes.extend_from_slice(chunk);
        } else {
            return Err(TransferError::Length {
                got: offset as u64,
                want: self.bytes.len() as u64,
            });
        }
        Ok(self.complete())
    }

    /// Whether every chunk is in.
    pub fn complete(&self) -> bool {
        self.next == self.manifest.chunks
    }

    /// Checks length and checksum of the whole, then decodes. A mismatch is an explicit failure,
    /// never a partial restore: what is restored is the image the source took at the seal.
    pub fn finish(self, deltas: &dyn Deltas) -> Result<Capture, TransferError> {
        Capture::from_image(&self.image(deltas)?)
    }

    /// The assembled image, once its length and checksum are the manifest's. A recipe is
    /// rebuilt first, through `deltas` where it holds an adapter's delta; an image it rebuilds
    /// wrong is [`TransferError::Rebuild`], so that the source sends the whole image instead.
    pub fn image(self, deltas: &dyn Deltas) -> Result<Vec<u8>, TransferError> {
        let Assembly {
            manifest,
            bytes,
            base,
            ..
        } = self;
        match base {
            None => check(&manifest, bytes),
            Some(base) => rebuild(&base, &bytes, manifest.len, deltas)
                .and_then(|image| check(&manifest, image).map_err(|error| error.to_string()))
                .map_err(TransferError::Rebuild),
        }
    }
}

/// `image` if its length and checksum are the manifest's.
fn check(manifest: &Manifest, image: Vec<u8>) -> Result<Vec<u8>, TransferError> {
    let got = image.len() as u64;
    if got != manifest.len {
        return Err(TransferError::Length {
            got,
            want: manifest.len,
        });
    }
    let crc = crc32c::crc32c(&image);
    if crc != manifest.crc {
        return Err(TransferError::Checksum {
            got: crc,
            want: manifest.crc,
        });
    }
    Ok(image)
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
    use crate::relocation::precopy::{NoDeltas, Precopy, Sealed};

    /// The capture as a move with nothing pre-copied sends it.
    fn pack(c: &Capture) -> Sealed {
        Precopy::new().seal(Bytes::from(c.clone().into_image().unwrap()), &NoDeltas)
    }

    fn assemble(sealed: &Sealed) -> Result<Capture, TransferError> {
        let mut a = Assembly::new(sealed.manifest, None)?;
        for (i, (offset, bytes)) in sealed.pieces.iter().enumerate() {
            a.add(i as u32, *offset, bytes)?;
        }
        a.finish(&NoDeltas)
    }

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
        let sealed = pack(&c);
        assert_eq!(sealed.pieces.len(), 3);
        assert!(sealed.pieces.iter().all(|(_, ch)| ch.len() <= CHUNK));
        let mut a = Assembly::new(sealed.manifest, None).unwrap();
        for (i, (offset, ch)) in sealed.pieces.iter().enumerate() {
            let done = a.add(i as u32, *offset, ch).unwrap();
            assert_eq!(done, i == 2);
        }
        assert_eq!(a.finish(&NoDeltas).unwrap(), c);
    }

    #[test]
    fn a_corrupted_chunk_fails_the_checksum_and_restores_nothing() {
        let sealed = pack(&capture(1000));
        let mut bad = sealed.pieces[0].1.to_vec();
        bad[5] ^= 0xff;
        let mut a = Assembly::new(sealed.manifest, None).unwrap();
        a.add(0, 0, &bad).unwrap();
        assert!(matches!(
            a.finish(&NoDeltas),
            Err(TransferError::Checksum { .. })
        ));
    }

    #[test]
    fn chunks_out_of_order_or_too_long_are_refused() {
        let sealed = pack(&capture(CHUNK + 1));
        let (offset, chunk) = &sealed.pieces[1];
        let mut a = Assembly::new(sealed.manifest, None).unwrap();
        assert!(matches!(
            a.add(1, *offset, chunk),
            Err(TransferError::ChunkOrder { .. })
        ));
        let short = Manifest {
            len: 3,
            ..sealed.manifest
        };
        let mut a = Assembly::new(short, None).unwrap();
        assert!(matches!(
            a.add(0, 0, &sealed.pieces[0].1),
            Err(TransferError::Length { .. })
        ));
    }

    proptest::proptest! {
        /// Whatever bytes arrive as a capture, assembling and decoding them ends in a capture or
        /// an error, never a panic or a partial restore.
        #[test]
        fn arbitrary_capture_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
            let manifest = Manifest { len: bytes.len() as u64, chunks: 1, crc: crc32c::crc32c(&bytes), base: None, recipe: None };
            let mut a = Assembly::new(manifest, None).unwrap();
            if a.add(0, 0, &bytes).is_ok() {
                let _ = a.finish(&NoDeltas);
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
            proptest::prop_assert_eq!(assemble(&pack(&c)).unwrap(), c);
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
