//! Deterministic randomness for the samples: the same room id gives the same game on every node and
//! in every run, so a room carries on the same game after a move and tests can work outcomes out.

/// A 64-bit FNV-1a hash of some parts, each prefixed by its length so that parts cannot run into
/// each other. Stable across runs, machines and compiler versions (unlike `std`'s hashers).
pub(crate) fn hash(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for part in parts {
        let len = part.len() as u64;
        for byte in len.to_le_bytes().iter().chain(part.iter()) {
            h ^= u64::from(*byte);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// A small seeded generator (SplitMix64): plenty for dealing cards, and the same everywhere.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Shuffles a slice in place (Fisher-Yates).
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_tells_parts_apart_and_never_changes() {
        assert_ne!(hash(&[b"ab", b"c"]), hash(&[b"a", b"bc"]));
        // Pinned: a change here would change every sample game.
        assert_eq!(hash(&[b"room-1"]), 0x2f02_b8df_345c_acfe);
    }

    #[test]
    fn a_shuffle_keeps_every_item_and_repeats_with_its_seed() {
        let mut a: Vec<u32> = (0..75).collect();
        let mut b = a.clone();
        Rng::new(7).shuffle(&mut a);
        Rng::new(7).shuffle(&mut b);
        assert_eq!(a, b);
        assert_ne!(a, (0..75).collect::<Vec<_>>());
        a.sort_unstable();
        assert_eq!(a, (0..75).collect::<Vec<_>>());
    }
}
