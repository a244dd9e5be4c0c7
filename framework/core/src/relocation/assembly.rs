//! The target's side of a transfer: the chunks of a sealed image collected over the pre-copy it
//! holds (or rebuilt from it by a recipe of the adapters' deltas), and the whole checked against
//! the manifest before anything is decoded.

use super::capture::{Base, Capture, Manifest, TransferError};
use super::precopy::{Deltas, rebuild};

/// Images under this size, sent whole, are restored on a task of the runtime, as the source's
/// lane captured them: checking and decoding one takes some µs, less than waking a blocking
/// thread to do it and hearing back from it, which a drain would otherwise pay for every small
/// room inside its pause. A larger image takes a while to check, and one rebuilt over a copy
/// the target holds (a pre-copy, or a standby's checkpoint) runs the adapters' `apply_delta`
/// besides: those go to a blocking thread.
pub const IN_TASK: u64 = 64 * 1024;

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

    /// Whether the image is small enough to check, decode and restore on a task of the runtime
    /// ([`IN_TASK`]) rather than on a blocking thread.
    pub fn restores_in_task(&self) -> bool {
        self.manifest.base.is_none() && self.manifest.len < IN_TASK
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::ids::{ActorId, SpotId, UnitId};
    use crate::relocation::capture::{CHUNK, CellCapture, MembershipData, QueuedOp};
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
    fn only_a_small_image_sent_whole_is_restored_in_a_task() {
        let small = pack(&capture(1024));
        assert!(
            Assembly::new(small.manifest, None)
                .unwrap()
                .restores_in_task()
        );
        // The bound itself: an image of exactly IN_TASK bytes has its thread.
        let at = |len: u64| Manifest {
            len,
            chunks: 1,
            ..small.manifest
        };
        assert!(
            Assembly::new(at(IN_TASK - 1), None)
                .unwrap()
                .restores_in_task()
        );
        assert!(!Assembly::new(at(IN_TASK), None).unwrap().restores_in_task());
        let large = pack(&capture(IN_TASK as usize));
        assert!(
            !Assembly::new(large.manifest, None)
                .unwrap()
                .restores_in_task()
        );
        // Sealed over a copy the target holds: rebuilt from it on a blocking thread, however small.
        let held = capture(1024).into_image().unwrap();
        let over = Precopy::from_standby(Bytes::from(held.clone()))
            .seal(Bytes::from(capture(1000).into_image().unwrap()), &NoDeltas);
        assert!(over.manifest.base.is_some());
        assert!(
            !Assembly::new(over.manifest, Some(held))
                .unwrap()
                .restores_in_task()
        );
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
}
