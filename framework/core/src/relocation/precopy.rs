//! Pre-copy: a unit's image shipped to its target while the unit still runs, then in rounds what
//! changed since, so that the seal ships only the last difference with the queue and timers.
//!
//! The source keeps the image the target acknowledged holding ([`Precopy`]); the target keeps
//! what arrived for the move ([`Held`]). The manifest at the seal names that base by length and
//! checksum, and the target checks the whole it ends up with against the checksum of the image
//! taken at the seal: a base that is missing or differs is never patched
//! ([`TransferError::BaseLost`]), and the source sends the whole image instead.

use std::ops::Range;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::capture::{Base, CHUNK, Manifest, TransferError};

/// The unit of comparison between two images: a block that differs in any byte is sent whole.
pub const BLOCK: usize = 16 * 1024;

/// Images smaller than this go whole at the seal: a round would cost more than it saves.
pub const MIN_IMAGE: usize = 64 * 1024;

/// At most this many rounds before the seal, however much still changes.
pub const ROUNDS: u32 = 4;

/// A round that would send this little seals instead: the last difference is sent sealed.
pub const SMALL: usize = 2 * BLOCK;

/// Pre-copy bytes a node has sent and not seen acknowledged, across all its moves: a sealed unit's
/// frames share the link with them, and never wait behind more than this.
pub const IN_FLIGHT_BYTES: usize = 1024 * 1024;

/// What a move sent of its unit's image, before and after the seal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Copied {
    /// Pre-copy rounds the target acknowledged.
    pub rounds: u32,
    /// Bytes sent while the unit ran.
    pub before_seal: u64,
    /// Bytes sent once it was sealed: the last difference, or the whole image.
    pub after_seal: u64,
}

/// The byte ranges of `image` that differ from `base`, block by block, adjacent ones joined up to
/// [`CHUNK`]: what the target must be sent to turn `base` into `image`.
pub fn changed(base: &[u8], image: &[u8]) -> Vec<Range<usize>> {
    let mut pieces: Vec<Range<usize>> = Vec::new();
    for start in (0..image.len()).step_by(BLOCK) {
        let end = (start + BLOCK).min(image.len());
        if base.get(start..end) == Some(&image[start..end]) {
            continue;
        }
        match pieces.last_mut() {
            Some(last) if last.end == start && last.len() + (end - start) <= CHUNK => {
                last.end = end;
            }
            _ => pieces.push(start..end),
        }
    }
    pieces
}

/// The whole of an image, cut into chunks.
pub(crate) fn whole(len: usize) -> Vec<Range<usize>> {
    (0..len)
        .step_by(CHUNK)
        .map(|at| at..(at + CHUNK).min(len))
        .collect()
}

/// The pieces of `image` at `ranges`, each with its offset.
pub(crate) fn slices(image: &Bytes, ranges: Vec<Range<usize>>) -> Vec<(u64, Bytes)> {
    ranges
        .into_iter()
        .map(|range| (range.start as u64, image.slice(range)))
        .collect()
}

/// What the source does with a snapshot of the running unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Send these pieces of the snapshot, then ask the target to confirm it holds all of it.
    Send {
        /// The round's number, which the target's answer names.
        round: u32,
        /// The pieces to send, each with its offset in the image.
        pieces: Vec<(u64, Bytes)>,
        /// The snapshot as the target will hold it once every piece is in.
        base: Base,
    },
    /// Pre-copy is over: seal the unit now.
    Seal,
}

/// What the seal sends: the manifest and the pieces of the sealed image, each with its offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// What the target checks the pieces against.
    pub manifest: Manifest,
    /// The pieces, in order: the whole image, or what differs from the base.
    pub pieces: Vec<(u64, Bytes)>,
}

/// The source's side of pre-copy: what the target holds, and whether another round is worth it.
#[derive(Debug, Default)]
pub struct Precopy {
    /// The image the target confirmed it holds.
    held: Option<Bytes>,
    /// The round on its way: its number and snapshot, until the target answers.
    sending: Option<(u32, Bytes)>,
    /// Bytes the last round sent: a round that does not send less is not converging.
    last: Option<usize>,
    /// Rounds sent so far.
    sent: u32,
    /// Pre-copy was cut short: the target may hold nothing.
    over: bool,
    copied: Copied,
}

impl Precopy {
    /// Nothing pre-copied yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A snapshot of the running unit, taken at a turn boundary: what of it to send, or seal.
    /// A small image, few changes, the round limit or a difference that stopped shrinking seal.
    pub fn round(&mut self, image: Bytes) -> Round {
        self.sending = None;
        if self.over {
            return Round::Seal;
        }
        let pieces = match &self.held {
            None if image.len() < MIN_IMAGE => return Round::Seal,
            None => whole(image.len()),
            Some(held) => changed(held, &image),
        };
        let bytes: usize = pieces.iter().map(Range::len).sum();
        let shrinking = self.last.is_none_or(|last| bytes < last);
        if self.held.is_some() && (bytes <= SMALL || self.sent >= ROUNDS || !shrinking) {
            return Round::Seal;
        }
        self.sent += 1;
        self.last = Some(bytes);
        self.copied.before_seal += bytes as u64;
        let base = Base::of(&image);
        let pieces = slices(&image, pieces);
        self.sending = Some((self.sent, image));
        Round::Send {
            round: self.sent,
            pieces,
            base,
        }
    }

    /// The target answered round `round`: it holds its snapshot whole (`true`), or it does not
    /// (a piece went missing or the target dropped it), and the seal sends the whole image.
    pub fn answered(&mut self, round: u32, holds: bool) {
        match self.sending.take() {
            Some((sent, image)) if sent == round && holds => {
                self.held = Some(image);
                self.copied.rounds += 1;
            }
            Some((sent, image)) if sent != round => self.sending = Some((sent, image)),
            _ => self.lost(),
        }
    }

    /// The target may hold nothing of this move (no answer came, or it said so): pre-copy is
    /// over, and the seal sends the whole image.
    pub fn lost(&mut self) {
        self.held = None;
        self.sending = None;
        self.over = true;
    }

    /// What the seal sends of `image`: what differs from the image the target holds, or all of
    /// it if it holds none.
    pub fn seal(&mut self, image: Bytes) -> Sealed {
        let (pieces, base) = match &self.held {
            Some(held) => (changed(held, &image), Some(Base::of(held))),
            None => (whole(image.len()), None),
        };
        self.sealed(image, pieces, base)
    }

    /// The target lost the base the seal's difference was made against: all of `image` goes.
    pub fn whole(&mut self, image: Bytes) -> Sealed {
        self.held = None;
        let pieces = whole(image.len());
        self.sealed(image, pieces, None)
    }

    fn sealed(&mut self, image: Bytes, pieces: Vec<Range<usize>>, base: Option<Base>) -> Sealed {
        let pieces = slices(&image, pieces);
        self.copied.after_seal += pieces.iter().map(|(_, b)| b.len() as u64).sum::<u64>();
        Sealed {
            manifest: Manifest {
                len: image.len() as u64,
                chunks: pieces.len() as u32,
                crc: crc32c::crc32c(&image),
                base,
            },
            pieces,
        }
    }

    /// Whether a move that ends must tell its target to drop what it pre-copied there: it sent
    /// some, and never `offered` the unit, so no offer will take it.
    pub fn left_behind(&self, offered: bool) -> bool {
        !offered && self.copied.before_seal > 0
    }

    /// What the move sent so far.
    pub fn copied(&self) -> Copied {
        self.copied
    }
}

/// The target's side: the image a move pre-copied here, as its pieces arrive.
#[derive(Debug, Default)]
pub struct Held {
    image: Vec<u8>,
}

impl Held {
    /// Nothing held yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes one piece of a round whose image is `len` bytes long, checked against its CRC-32C.
    /// A bad piece, or one past `len`, is an error: what is held is then worth nothing.
    pub fn piece(
        &mut self,
        len: u64,
        offset: u64,
        bytes: &[u8],
        crc: u32,
    ) -> Result<(), TransferError> {
        let got = crc32c::crc32c(bytes);
        if got != crc {
            return Err(TransferError::Checksum { got, want: crc });
        }
        let end = offset.saturating_add(bytes.len() as u64);
        if end > len {
            return Err(TransferError::Length {
                got: end,
                want: len,
            });
        }
        self.image.resize(len as usize, 0);
        self.image[offset as usize..end as usize].copy_from_slice(bytes);
        Ok(())
    }

    /// Whether what is held is the image `base` names: the answer to a round's end.
    pub fn holds(&self, base: Base) -> bool {
        Base::of(&self.image) == base
    }

    /// The bytes held, for the assembly at the seal.
    pub fn into_image(self) -> Vec<u8> {
        self.image
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.image.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.image.is_empty()
    }
}

/// Whether a target takes a round of `len` bytes while it holds `holding` bytes of pre-copies in
/// all: never over the largest state it takes, nor over four of them at once. A round refused is
/// answered as not held, and that move sends its whole image at the seal.
pub fn may_hold(len: u64, holding: u64, max_state: u64) -> bool {
    len <= max_state && holding.saturating_add(len) <= max_state.saturating_mul(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relocation::capture::Assembly;

    fn image(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// Sends a round's pieces to `held` and answers it, as source and target would.
    fn ship(pre: &mut Precopy, held: &mut Held, snapshot: &[u8]) -> Option<u32> {
        match pre.round(Bytes::copy_from_slice(snapshot)) {
            Round::Send {
                round,
                pieces,
                base,
            } => {
                for (offset, bytes) in pieces {
                    held.piece(base.len, offset, &bytes, crc32c::crc32c(&bytes))
                        .expect("piece");
                }
                pre.answered(round, held.holds(base));
                Some(round)
            }
            Round::Seal => None,
        }
    }

    /// Patches the held image with what the seal sends and returns the assembled image.
    fn assemble(sealed: &Sealed, held: Held) -> Result<Vec<u8>, TransferError> {
        let mut assembly = Assembly::new(sealed.manifest, Some(held.into_image()))?;
        for (index, (offset, bytes)) in sealed.pieces.iter().enumerate() {
            assembly.add(index as u32, *offset, bytes)?;
        }
        assembly.image()
    }

    #[test]
    fn a_small_image_is_never_precopied() {
        let mut pre = Precopy::new();
        assert_eq!(pre.round(Bytes::from(image(MIN_IMAGE - 1, 1))), Round::Seal);
        let sealed = pre.seal(Bytes::from(image(MIN_IMAGE - 1, 1)));
        assert_eq!(sealed.manifest.base, None);
        assert_eq!(pre.copied().before_seal, 0);
    }

    #[test]
    fn rounds_ship_what_changed_and_the_seal_ships_the_last_difference() {
        let mut pre = Precopy::new();
        let mut held = Held::new();
        let mut state = image(1 << 20, 7);
        assert_eq!(ship(&mut pre, &mut held, &state), Some(1));
        assert_eq!(pre.copied().before_seal, 1 << 20);
        // A tenth of the state changes: only its blocks go in round 2.
        for b in &mut state[100_000..200_000] {
            *b = b.wrapping_add(1);
        }
        assert_eq!(ship(&mut pre, &mut held, &state), Some(2));
        let second = pre.copied().before_seal - (1 << 20);
        assert!(second < 120_000, "round 2 sent {second} bytes");
        // A few bytes change: that is small, so the next snapshot seals.
        state[5] ^= 0xff;
        assert_eq!(pre.round(Bytes::from(state.clone())), Round::Seal);
        state[6] ^= 0xff;
        let sealed = pre.seal(Bytes::from(state.clone()));
        assert_eq!(sealed.pieces.len(), 1);
        assert_eq!(pre.copied().after_seal, BLOCK as u64);
        assert_eq!(assemble(&sealed, held).expect("assembles"), state);
    }

    #[test]
    fn a_state_rewritten_every_turn_stops_after_the_round_that_did_not_shrink() {
        let mut pre = Precopy::new();
        let mut held = Held::new();
        assert_eq!(ship(&mut pre, &mut held, &image(256 * 1024, 1)), Some(1));
        assert_eq!(ship(&mut pre, &mut held, &image(256 * 1024, 2)), None);
        let last = image(256 * 1024, 3);
        let sealed = pre.seal(Bytes::from(last.clone()));
        assert_eq!(pre.copied().after_seal, 256 * 1024);
        assert_eq!(pre.copied().rounds, 1);
        assert_eq!(assemble(&sealed, held).expect("assembles"), last);
    }

    #[test]
    fn no_more_than_the_round_limit() {
        let mut pre = Precopy::new();
        let mut held = Held::new();
        let mut state = image(4 << 20, 1);
        let mut rounds = 0;
        // Each round changes less than the last, but never little enough.
        for shrink in 0.. {
            let end = (3 << 20) - shrink * 100_000;
            for b in &mut state[..end] {
                *b = b.wrapping_add(1);
            }
            if ship(&mut pre, &mut held, &state).is_none() {
                break;
            }
            rounds += 1;
        }
        assert_eq!(rounds, ROUNDS);
    }

    #[test]
    fn a_lost_base_is_never_patched_and_the_whole_image_goes_instead() {
        let mut pre = Precopy::new();
        let mut held = Held::new();
        let state = image(200_000, 4);
        ship(&mut pre, &mut held, &state);
        let mut changed_state = state.clone();
        changed_state[0] ^= 1;
        let sealed = pre.seal(Bytes::from(changed_state.clone()));
        // The target restarted and holds nothing, or holds another image.
        assert_eq!(
            Assembly::new(sealed.manifest, None).err(),
            Some(TransferError::BaseLost)
        );
        assert_eq!(
            Assembly::new(sealed.manifest, Some(image(200_000, 9))).err(),
            Some(TransferError::BaseLost)
        );
        let whole = pre.whole(Bytes::from(changed_state.clone()));
        assert_eq!(whole.manifest.base, None);
        assert_eq!(
            assemble(&whole, Held::new()).expect("assembles"),
            changed_state
        );
    }

    #[test]
    fn an_unanswered_round_ends_precopy_and_the_seal_sends_everything() {
        let mut pre = Precopy::new();
        let state = image(300_000, 5);
        assert!(matches!(
            pre.round(Bytes::from(state.clone())),
            Round::Send { .. }
        ));
        pre.lost();
        assert_eq!(pre.round(Bytes::from(state.clone())), Round::Seal);
        let sealed = pre.seal(Bytes::from(state));
        assert_eq!(sealed.manifest.base, None);
        assert_eq!(pre.copied().after_seal, 300_000);
    }

    #[test]
    fn only_a_move_that_precopied_and_never_offered_leaves_a_precopy_behind() {
        let mut pre = Precopy::new();
        assert!(!pre.left_behind(false));
        assert!(matches!(
            pre.round(Bytes::from(image(MIN_IMAGE, 1))),
            Round::Send { .. }
        ));
        assert!(pre.left_behind(false));
        assert!(!pre.left_behind(true));
    }

    #[test]
    fn a_corrupted_piece_is_refused() {
        let mut held = Held::new();
        assert!(matches!(
            held.piece(10, 0, b"abc", crc32c::crc32c(b"abd")),
            Err(TransferError::Checksum { .. })
        ));
        assert!(matches!(
            held.piece(2, 0, b"abc", crc32c::crc32c(b"abc")),
            Err(TransferError::Length { .. })
        ));
    }

    #[test]
    fn a_target_holds_at_most_four_largest_states() {
        assert!(may_hold(10, 30, 10));
        assert!(!may_hold(11, 0, 10));
        assert!(!may_hold(10, 31, 10));
    }

    proptest::proptest! {
        /// Whatever the rounds and changes, what the target assembles is the image at the seal.
        #[test]
        fn the_target_assembles_the_image_at_the_seal(
            len in 0usize..(600 * 1024),
            edits in proptest::collection::vec((0usize..(600 * 1024), 0usize..40_000, proptest::prelude::any::<u8>()), 0..8),
            grow in 0usize..100_000,
            lose in proptest::prelude::any::<bool>(),
        ) {
            let mut pre = Precopy::new();
            let mut held = Held::new();
            let mut state = image(len, 3);
            for (at, n, v) in edits {
                ship(&mut pre, &mut held, &state);
                let at = at.min(state.len());
                let end = (at + n).min(state.len());
                for b in &mut state[at..end] {
                    *b ^= v | 1;
                }
            }
            state.extend(image(grow, 8));
            if lose {
                held = Held::new();
            }
            let sealed = pre.seal(Bytes::from(state.clone()));
            let got = match assemble(&sealed, held) {
                Err(TransferError::BaseLost) => assemble(&pre.whole(Bytes::from(state.clone())), Held::new()),
                other => other,
            };
            proptest::prop_assert_eq!(got.expect("assembles"), state);
        }
    }
}
