//! Pre-copy: a unit's image shipped to its target while the unit still runs, then in rounds what
//! changed since, so that the seal ships only the last difference with the queue and timers.
//!
//! The source keeps the image the target acknowledged holding ([`Precopy`]); the target keeps
//! what arrived for the move ([`Held`]). The manifest at the seal names that base by length and
//! checksum, and the target checks the whole it ends up with against the checksum of the image
//! taken at the seal: a base that is missing or differs is never patched
//! ([`TransferError::BaseLost`]), and the source sends the whole image instead.
//!
//! Where a byte difference is poor (a log whose new entry shifts every later byte), a state
//! adapter may make a delta of its own ([`Deltas`]): the seal then sends, if it is smaller, a
//! recipe that rebuilds the image from the base cell by cell. The same checksum over the whole
//! guards it: an image a delta rebuilds wrong is never restored ([`TransferError::Rebuild`]),
//! and the whole image goes instead.

use std::ops::Range;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::capture::{Base, CHUNK, Manifest, TransferError, states};

/// The unit of comparison between two images: a block that differs in any byte is sent whole.
pub const BLOCK: usize = 16 * 1024;

/// Images smaller than this go whole at the seal: a round would cost more than it saves.
pub const MIN_IMAGE: usize = 64 * 1024;

/// At most this many rounds before the seal, however much still changes.
pub const ROUNDS: u32 = 4;

/// A round that would send this little seals instead: the last difference is sent sealed.
pub const SMALL: usize = 2 * BLOCK;

/// Pre-copy bytes a node has sent and not seen acknowledged, across all its moves. Sealed units'
/// frames no longer wait behind them (pre-copy travels on the mesh's bulk stream), yet 4 MiB
/// measured no faster a drain of 1 MiB rooms and longer pauses of its sealed ones
/// (docs/benchmarks.md), so the budget stays small.
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

/// The byte ranges of `image` that differ from `base`, [`BLOCK`] by block, adjacent ones joined up
/// to [`CHUNK`]: what the target must be sent to turn `base` into `image`.
pub fn changed(base: &[u8], image: &[u8]) -> Vec<Range<usize>> {
    changed_by(base, image, BLOCK)
}

/// [`changed`], compared `block` bytes at a time.
pub fn changed_by(base: &[u8], image: &[u8], block: usize) -> Vec<Range<usize>> {
    let mut pieces: Vec<Range<usize>> = Vec::new();
    for start in (0..image.len()).step_by(block) {
        let end = (start + block).min(image.len());
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

/// The state adapters' own deltas, reached by the type name of a cell's factory: where a byte
/// difference is poor, an adapter may say what changed in fewer bytes. Whatever they answer, the
/// target checks the image they rebuild against the checksum of the sealed one.
pub trait Deltas {
    /// A delta that turns `base` into `now`, both as the cell's adapter captured them; `None`
    /// to have their blocks compared.
    fn delta(&self, factory: &str, base: &[u8], now: &[u8]) -> Option<Vec<u8>>;
    /// `now` rebuilt from `base` and a delta [`delta`](Self::delta) made; an error (or a panic
    /// the runtime contains) makes the target ask for the whole image.
    fn apply(&self, factory: &str, base: &[u8], delta: &[u8]) -> Result<Vec<u8>, String>;
}

/// No adapter makes deltas of its own: every state is compared block by block.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoDeltas;

impl Deltas for NoDeltas {
    fn delta(&self, _: &str, _: &[u8], _: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn apply(&self, factory: &str, _: &[u8], _: &[u8]) -> Result<Vec<u8>, String> {
        Err(format!("no delta is known for factory {factory:?}"))
    }
}

/// How a target rebuilds a sealed image from the base it holds, cell by cell: what the seal
/// sends in place of a byte difference when it is smaller.
#[derive(Debug, Serialize, Deserialize)]
struct Recipe {
    /// The sealed image's states, in order.
    states: Vec<Part>,
    /// The rest of the image (its trailer), whole: it holds the queue, which changes anyway.
    rest: Bytes,
}

/// One state of a recipe.
#[derive(Debug, Serialize, Deserialize)]
enum Part {
    /// The adapter's own delta to the base's state number `base`.
    Delta {
        /// The base state it applies to.
        base: u32,
        /// The adapter's bytes.
        delta: Bytes,
    },
    /// A state `len` bytes long: the base's state number `base` (or zeros), with the blocks
    /// that differ written over it.
    Blocks {
        /// The base state it patches, if the base holds the cell.
        base: Option<u32>,
        /// The state's length.
        len: u64,
        /// The blocks that differ, each with its offset in the state.
        pieces: Vec<(u64, Bytes)>,
    },
}

/// The recipe for `image` over `held`, encoded, if some adapter made a delta smaller than the
/// blocks of its state that changed; `None` if none did (the byte difference goes then). An
/// adapter is asked only about a state that changed, and the blocks are compared only once one
/// made a delta, so a seal whose adapters make none costs a comparison of the states alone.
fn recipe(held: &[u8], image: &Bytes, deltas: &dyn Deltas) -> Option<Vec<u8>> {
    let (before, _) = states(held).ok()?;
    let (now, rest) = states(image).ok()?;
    let asked: Vec<_> = now
        .into_iter()
        .map(|cell| {
            let at = before
                .iter()
                .position(|b| b.id == cell.id && b.factory == cell.factory);
            let old = at.map(|at| &held[before[at].range.clone()]);
            let state = &image[cell.range.clone()];
            let delta = old
                .filter(|old| *old != state)
                .and_then(|old| deltas.delta(&cell.factory, old, state));
            (cell, at, delta)
        })
        .collect();
    if asked.iter().all(|(_, _, delta)| delta.is_none()) {
        return None;
    }
    let mut used = false;
    let mut parts = Vec::with_capacity(asked.len());
    for (cell, at, delta) in asked {
        let state = image.slice(cell.range);
        let old = at.map_or(&[][..], |at| &held[before[at].range.clone()]);
        let blocks = changed(old, &state);
        let bytes: usize = blocks.iter().map(Range::len).sum();
        let base = at.and_then(|at| u32::try_from(at).ok());
        let part = match (base, delta) {
            (Some(base), Some(delta)) if delta.len() < bytes => Part::Delta {
                base,
                delta: Bytes::from(delta),
            },
            _ => Part::Blocks {
                base,
                len: state.len() as u64,
                pieces: slices(&state, blocks),
            },
        };
        used |= matches!(part, Part::Delta { .. });
        parts.push(part);
    }
    let recipe = Recipe {
        states: parts,
        rest: image.slice(rest..),
    };
    used.then(|| postcard::to_allocvec(&recipe).ok())?
}

/// Rebuilds an image of `len` bytes from `base` by an encoded recipe, never past `len`; why not
/// if it cannot. Its checksum is still to be checked.
pub(crate) fn rebuild(
    base: &[u8],
    recipe: &[u8],
    len: u64,
    deltas: &dyn Deltas,
) -> Result<Vec<u8>, String> {
    let (before, _) = states(base).map_err(|e| format!("the base does not decode: {e}"))?;
    let recipe: Recipe =
        postcard::from_bytes(recipe).map_err(|e| format!("the recipe does not decode: {e}"))?;
    let len = usize::try_from(len).map_err(|_| "the image is too long here".to_owned())?;
    let state = |at: u32| {
        before
            .get(at as usize)
            .ok_or_else(|| format!("the base has no state {at}"))
    };
    let mut image = Vec::with_capacity(len.min(1 << 30));
    for part in recipe.states {
        let rebuilt = match part {
            Part::Delta { base: at, delta } => {
                let cell = state(at)?;
                deltas.apply(&cell.factory, &base[cell.range.clone()], &delta)?
            }
            Part::Blocks {
                base: at,
                len: state_len,
                pieces,
            } => {
                let state_len = usize::try_from(state_len)
                    .ok()
                    .filter(|n| image.len().saturating_add(*n) <= len)
                    .ok_or("a state runs past the image")?;
                let mut rebuilt = match at {
                    Some(at) => base[state(at)?.range.clone()].to_vec(),
                    None => Vec::new(),
                };
                rebuilt.resize(state_len, 0);
                for (offset, bytes) in pieces {
                    let piece = usize::try_from(offset)
                        .ok()
                        .and_then(|at| rebuilt.get_mut(at..at.checked_add(bytes.len())?))
                        .ok_or("a block runs past its state")?;
                    piece.copy_from_slice(&bytes);
                }
                rebuilt
            }
        };
        if image.len().saturating_add(rebuilt.len()) > len {
            return Err("the states run past the image".into());
        }
        image.extend_from_slice(&rebuilt);
    }
    image.extend_from_slice(&recipe.rest);
    Ok(image)
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
    /// The pieces, in order: the whole image, what differs from the base, or the recipe.
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

    /// A move to the node that keeps the unit's standby copy, `copy` being the image of the last
    /// checkpoint that node acknowledged: no rounds, and the seal ships only what changed since
    /// that checkpoint. A target that no longer holds the copy answers `BaseLost`, and the whole
    /// image goes, as for a pre-copy whose base was lost.
    pub fn from_standby(copy: Bytes) -> Self {
        Precopy {
            held: Some(copy),
            over: true,
            ..Self::default()
        }
    }

    /// Whether pre-copy is over before it began or was cut short: a move to the node that keeps
    /// the unit's standby, or one whose target may hold nothing. Its next snapshot seals, so it
    /// needs no leave to copy.
    pub fn is_over(&self) -> bool {
        self.over
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
    /// it if it holds none. Where the states' adapters make deltas of their own (`deltas`), the
    /// recipe that rebuilds the image with them goes instead, if it is smaller.
    pub fn seal(&mut self, image: Bytes, deltas: &dyn Deltas) -> Sealed {
        let Some(held) = &self.held else {
            let pieces = slices(&image, whole(image.len()));
            return self.sealed(&image, pieces, None, None);
        };
        let base = Some(Base::of(held));
        let blocks = changed(held, &image);
        let bytes: usize = blocks.iter().map(Range::len).sum();
        match recipe(held, &image, deltas).filter(|recipe| recipe.len() < bytes) {
            Some(recipe) => {
                let len = recipe.len() as u64;
                let recipe = Bytes::from(recipe);
                let pieces = slices(&recipe, whole(recipe.len()));
                self.sealed(&image, pieces, base, Some(len))
            }
            None => {
                let pieces = slices(&image, blocks);
                self.sealed(&image, pieces, base, None)
            }
        }
    }

    /// The target lost the base the seal's difference was made against, or the deltas did not
    /// rebuild the image: all of `image` goes.
    pub fn whole(&mut self, image: Bytes) -> Sealed {
        self.held = None;
        let pieces = slices(&image, whole(image.len()));
        self.sealed(&image, pieces, None, None)
    }

    fn sealed(
        &mut self,
        image: &Bytes,
        pieces: Vec<(u64, Bytes)>,
        base: Option<Base>,
        recipe: Option<u64>,
    ) -> Sealed {
        self.copied.after_seal += pieces.iter().map(|(_, b)| b.len() as u64).sum::<u64>();
        Sealed {
            manifest: Manifest {
                len: image.len() as u64,
                chunks: pieces.len() as u32,
                crc: crc32c::crc32c(image),
                base,
                recipe,
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

/// Of the images a target holds for an offer (what its pre-copy left, the standby copy it keeps
/// of the unit), the one the offer's seal was made against, if any.
pub fn base_for(base: Option<Base>, held: impl IntoIterator<Item = Vec<u8>>) -> Option<Vec<u8>> {
    let base = base?;
    held.into_iter().find(|image| Base::of(image) == base)
}

/// Whether a target takes a piece of a round of `len` bytes while it holds `holding` bytes of
/// pre-copies in all: never over the largest state it takes, nor over four of them at once, nor
/// for a move it was already `offered` (the piece came late: the offer overtook it on the mesh,
/// or its round was given up, and nothing will take it). A round refused is answered as not held,
/// and that move sends its whole image at the seal.
pub fn may_hold(len: u64, holding: u64, max_state: u64, offered: bool) -> bool {
    !offered && len <= max_state && holding.saturating_add(len) <= max_state.saturating_mul(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relocation::assembly::Assembly;

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
        assembly.image(&NoDeltas)
    }

    #[test]
    fn a_move_to_the_standby_ships_what_changed_since_its_checkpoint_or_the_whole_if_it_lost_it() {
        let checkpoint = image(1 << 18, 3);
        let mut now = checkpoint.clone();
        now[5_000..5_100].fill(0xee);
        let mut pre = Precopy::from_standby(Bytes::from(checkpoint.clone()));
        assert_eq!(
            pre.round(Bytes::from(now.clone())),
            Round::Seal,
            "no rounds"
        );
        let sealed = pre.seal(Bytes::from(now.clone()), &NoDeltas);
        let sent: usize = sealed.pieces.iter().map(|(_, b)| b.len()).sum();
        assert!(sent <= BLOCK, "one block changed, {sent} bytes sent");
        // The standby's copy is the base the offer names; a pre-copy's leftovers are not.
        let leftovers = image(1 << 18, 9);
        let base = base_for(sealed.manifest.base, [leftovers, checkpoint]).expect("base held");
        let mut assembly = Assembly::new(sealed.manifest, Some(base)).expect("base matches");
        for (index, (offset, bytes)) in sealed.pieces.iter().enumerate() {
            assembly.add(index as u32, *offset, bytes).expect("piece");
        }
        assert_eq!(assembly.image(&NoDeltas).expect("whole"), now);
        // A target that lost its copy holds no base: it asks for the whole image.
        assert_eq!(base_for(sealed.manifest.base, [image(1 << 18, 4)]), None);
        let whole = pre.whole(Bytes::from(now.clone()));
        assert_eq!(whole.manifest.base, None);
        assert_eq!(
            whole.pieces.iter().map(|(_, b)| b.len()).sum::<usize>(),
            now.len()
        );
    }

    #[test]
    fn a_move_to_the_standby_or_one_whose_target_lost_its_copy_has_no_precopy_to_do() {
        assert!(!Precopy::new().is_over());
        assert!(Precopy::from_standby(Bytes::from_static(b"copy")).is_over());
        let mut cut = Precopy::new();
        cut.lost();
        assert!(cut.is_over());
    }

    #[test]
    fn a_small_image_is_never_precopied() {
        let mut pre = Precopy::new();
        assert_eq!(pre.round(Bytes::from(image(MIN_IMAGE - 1, 1))), Round::Seal);
        let sealed = pre.seal(Bytes::from(image(MIN_IMAGE - 1, 1)), &NoDeltas);
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
        let sealed = pre.seal(Bytes::from(state.clone()), &NoDeltas);
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
        let sealed = pre.seal(Bytes::from(last.clone()), &NoDeltas);
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
        let sealed = pre.seal(Bytes::from(changed_state.clone()), &NoDeltas);
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
        let sealed = pre.seal(Bytes::from(state), &NoDeltas);
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
        assert!(may_hold(10, 30, 10, false));
        assert!(!may_hold(11, 0, 10, false));
        assert!(!may_hold(10, 31, 10, false));
        assert!(!may_hold(1, 0, 10, true), "a late piece of an offered move");
    }

    /// A log's adapter: its state is its entries, newest first, so a new entry shifts every
    /// byte; its delta is the entries added in front. `wrong` rebuilds one byte wrong.
    struct Log {
        wrong: bool,
    }

    impl Deltas for Log {
        fn delta(&self, factory: &str, base: &[u8], now: &[u8]) -> Option<Vec<u8>> {
            let added = now.len().checked_sub(base.len())?;
            (factory == "log" && now[added..] == *base).then(|| now[..added].to_vec())
        }

        fn apply(&self, factory: &str, base: &[u8], delta: &[u8]) -> Result<Vec<u8>, String> {
            if factory != "log" {
                return Err(format!("no delta for {factory}"));
            }
            let mut now = [delta, base].concat();
            if self.wrong {
                now[0] ^= 1;
            }
            Ok(now)
        }
    }

    /// The image of a room whose cells have these factories and states, with `queued` messages.
    fn room(cells: &[(&str, &str, &[u8])], queued: usize) -> Vec<u8> {
        use crate::ids::SpotId;
        use crate::relocation::capture::{Capture, CellCapture, MembershipData, QueuedOp};
        let id = |name: &str| crate::ids::UnitId::Spot(SpotId::new(name).expect("an id"));
        Capture {
            unit: id(cells[0].0),
            cells: cells
                .iter()
                .map(|(name, factory, state)| CellCapture {
                    id: id(name),
                    factory: (*factory).into(),
                    state: Some(state.to_vec()),
                    timers: Vec::new(),
                    membership: MembershipData::Spot(Vec::new()),
                    binding: None,
                })
                .collect(),
            callbacks: Vec::new(),
            ticks: Vec::new(),
            journal: (0..queued)
                .map(|i| QueuedOp {
                    to: id(cells[0].0),
                    payload: Bytes::from(vec![i as u8; 20]),
                    session: None,
                    reply: None,
                })
                .collect(),
        }
        .into_image()
        .expect("encodes")
    }

    /// Pre-copies `base` and seals `now` with `deltas`; what the seal sends, and what it patches.
    fn sealed_over(base: &[u8], now: &[u8], deltas: &dyn Deltas) -> (Precopy, Sealed, Held) {
        let mut pre = Precopy::new();
        let mut held = Held::new();
        assert_eq!(ship(&mut pre, &mut held, base), Some(1));
        let sealed = pre.seal(Bytes::copy_from_slice(now), deltas);
        (pre, sealed, held)
    }

    fn rebuilt(sealed: &Sealed, held: Held, deltas: &dyn Deltas) -> Result<Vec<u8>, TransferError> {
        let mut assembly = Assembly::new(sealed.manifest, Some(held.into_image()))?;
        for (index, (offset, bytes)) in sealed.pieces.iter().enumerate() {
            assembly.add(index as u32, *offset, bytes)?;
        }
        assembly.image(deltas)
    }

    #[test]
    fn an_adapters_delta_goes_in_place_of_a_state_whose_every_block_shifted() {
        let log = image(400 * 1024, 1);
        let base = room(&[("room", "log", &log)], 0);
        let longer = [&b"a new entry"[..], &log].concat();
        let now = room(&[("room", "log", &longer)], 30);
        // Compared by blocks, every block of the state differs.
        let (plain, _, _) = sealed_over(&base, &now, &NoDeltas);
        assert!(
            plain.copied().after_seal >= log.len() as u64,
            "{:?}",
            plain.copied()
        );
        let (pre, sealed, held) = sealed_over(&base, &now, &Log { wrong: false });
        assert!(sealed.manifest.recipe.is_some());
        assert!(pre.copied().after_seal < 2048, "{:?}", pre.copied());
        assert_eq!(rebuilt(&sealed, held, &Log { wrong: false }), Ok(now));
    }

    #[test]
    fn a_wrong_delta_is_caught_by_the_checksum_and_the_whole_image_goes_instead() {
        let log = image(200 * 1024, 2);
        let base = room(&[("room", "log", &log)], 0);
        let now = room(&[("room", "log", &[&b"entry"[..], &log].concat())], 3);
        let (mut pre, sealed, held) = sealed_over(&base, &now, &Log { wrong: false });
        let error = rebuilt(&sealed, held, &Log { wrong: true }).expect_err("caught");
        assert!(matches!(error, TransferError::Rebuild(_)), "{error}");
        assert!(error.wants_whole());
        // A target that knows no delta for the factory fails the same way.
        let mut held = Held::new();
        held.piece(base.len() as u64, 0, &base, crc32c::crc32c(&base))
            .expect("piece");
        assert!(
            rebuilt(&sealed, held, &NoDeltas)
                .expect_err("no delta")
                .wants_whole()
        );
        let whole = pre.whole(Bytes::from(now.clone()));
        assert_eq!(whole.manifest.recipe, None);
        assert_eq!(assemble(&whole, Held::new()), Ok(now.clone()));
        assert_eq!(
            pre.copied().after_seal,
            sealed
                .pieces
                .iter()
                .map(|(_, b)| b.len() as u64)
                .sum::<u64>()
                + now.len() as u64
        );
    }

    #[test]
    fn each_cell_goes_by_its_delta_its_changed_blocks_or_whole_whichever_is_smallest() {
        let log = image(100 * 1024, 3);
        let mut blob = image(300 * 1024, 4);
        let base = room(&[("room", "log", &log), ("other", "blob", &blob)], 0);
        // The log gains an entry, the blob changes in one block, and a cell joins.
        blob[150_000] ^= 0xff;
        let newcomer = image(20_000, 5);
        let now = room(
            &[
                ("room", "log", &[&b"entry"[..], &log].concat()),
                ("other", "blob", &blob),
                ("joined", "blob", &newcomer),
            ],
            1,
        );
        let (pre, sealed, held) = sealed_over(&base, &now, &Log { wrong: false });
        assert!(sealed.manifest.recipe.is_some());
        let sent = pre.copied().after_seal;
        assert!(
            sent > newcomer.len() as u64 && sent < (newcomer.len() + BLOCK + 2048) as u64,
            "{sent}"
        );
        assert_eq!(rebuilt(&sealed, held, &Log { wrong: false }), Ok(now));
    }

    #[test]
    fn only_states_that_changed_are_asked_for_a_delta() {
        /// The log's deltas, noting each state it is asked about by its length.
        struct Asked(std::cell::RefCell<Vec<usize>>);
        impl Deltas for Asked {
            fn delta(&self, factory: &str, base: &[u8], now: &[u8]) -> Option<Vec<u8>> {
                self.0.borrow_mut().push(now.len());
                Log { wrong: false }.delta(factory, base, now)
            }
            fn apply(&self, factory: &str, base: &[u8], delta: &[u8]) -> Result<Vec<u8>, String> {
                Log { wrong: false }.apply(factory, base, delta)
            }
        }
        let (log, blob) = (image(100 * 1024, 1), image(50 * 1024, 2));
        let base = room(&[("room", "log", &log), ("other", "log", &blob)], 0);
        let longer = [&b"entry"[..], &log].concat();
        let now = room(&[("room", "log", &longer), ("other", "log", &blob)], 0);
        let asked = Asked(std::cell::RefCell::default());
        let (_, sealed, held) = sealed_over(&base, &now, &asked);
        assert_eq!(*asked.0.borrow(), vec![longer.len()]);
        assert_eq!(rebuilt(&sealed, held, &asked), Ok(now));
    }

    #[test]
    fn a_delta_no_smaller_than_the_changed_blocks_is_not_used() {
        /// Offers the whole new state as its delta.
        struct Whole;
        impl Deltas for Whole {
            fn delta(&self, _: &str, _: &[u8], now: &[u8]) -> Option<Vec<u8>> {
                Some(now.to_vec())
            }
            fn apply(&self, _: &str, _: &[u8], delta: &[u8]) -> Result<Vec<u8>, String> {
                Ok(delta.to_vec())
            }
        }
        let mut state = image(300 * 1024, 6);
        let base = room(&[("room", "blob", &state)], 0);
        state[10] ^= 1;
        let now = room(&[("room", "blob", &state)], 0);
        let (pre, sealed, held) = sealed_over(&base, &now, &Whole);
        assert_eq!(sealed.manifest.recipe, None);
        assert!(pre.copied().after_seal <= 2 * BLOCK as u64);
        assert_eq!(assemble(&sealed, held), Ok(now));
    }

    #[test]
    fn a_recipe_that_does_not_decode_or_runs_past_the_image_is_refused() {
        let log = image(100 * 1024, 7);
        let base = room(&[("room", "log", &log)], 0);
        let now = room(&[("room", "log", &[&b"e"[..], &log].concat())], 0);
        let (_, sealed, _) = sealed_over(&base, &now, &Log { wrong: false });
        let recipe: Vec<u8> = sealed.pieces.iter().flat_map(|(_, b)| b.to_vec()).collect();
        let deltas = Log { wrong: false };
        assert!(
            rebuild(
                &base,
                &recipe[..recipe.len() / 2],
                sealed.manifest.len,
                &deltas
            )
            .is_err()
        );
        assert!(rebuild(&base, &recipe, 10, &deltas).is_err());
        assert!(rebuild(&recipe, &recipe, sealed.manifest.len, &deltas).is_err());
        let without_base = Manifest {
            base: None,
            ..sealed.manifest
        };
        assert!(Assembly::new(without_base, None).is_err());
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
            let sealed = pre.seal(Bytes::from(state.clone()), &NoDeltas);
            let got = match assemble(&sealed, held) {
                Err(TransferError::BaseLost) => assemble(&pre.whole(Bytes::from(state.clone())), Held::new()),
                other => other,
            };
            proptest::prop_assert_eq!(got.expect("assembles"), state);
        }

        /// Whatever entries a log gains and whichever cells change, with a delta right or wrong,
        /// the target ends with the image sealed: rebuilt, or sent whole after a wrong delta.
        #[test]
        fn a_delta_right_or_wrong_ends_in_the_image_at_the_seal(
            len in 0usize..(200 * 1024),
            entries in proptest::collection::vec(0usize..3000, 0..4),
            edit in 0usize..(200 * 1024),
            wrong in proptest::prelude::any::<bool>(),
        ) {
            let log = image(len, 9);
            let mut blob = image(MIN_IMAGE, 8);
            let base = room(&[("room", "log", &log), ("other", "blob", &blob)], 0);
            let mut longer = log.clone();
            for (i, n) in entries.into_iter().enumerate() {
                longer.splice(0..0, image(n, i as u8));
            }
            let at = edit % blob.len();
            blob[at] ^= 0x55;
            let now = room(&[("room", "log", &longer), ("other", "blob", &blob)], 2);
            let (mut pre, sealed, held) = sealed_over(&base, &now, &Log { wrong: false });
            let got = match rebuilt(&sealed, held, &Log { wrong }) {
                Err(error) if error.wants_whole() => {
                    assemble(&pre.whole(Bytes::from(now.clone())), Held::new())
                }
                other => other,
            };
            proptest::prop_assert_eq!(got.expect("assembles"), now);
        }
    }
}
