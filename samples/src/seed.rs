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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_tells_parts_apart_and_never_changes() {
        assert_ne!(hash(&[b"ab", b"c"]), hash(&[b"a", b"bc"]));
        // Pinned: a change here would change every sample game.
        assert_eq!(hash(&[b"room-1"]), 0x2f02_b8df_345c_acfe);
    }
}
