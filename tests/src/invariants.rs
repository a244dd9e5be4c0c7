//! The promises fault tests check after the dust settles.

use std::collections::BTreeSet;
use std::fmt::Display;

/// Panics unless every acknowledged input is in the unit's log once, in the order acknowledged, and
/// nothing in the log ran twice (inputs whose requests failed may have run, once).
pub fn assert_exactly_once_in_order(unit: impl Display, acked: &[u64], ran: &[u64]) {
    let acked_set: BTreeSet<u64> = acked.iter().copied().collect();
    let ran_acked: Vec<u64> = ran
        .iter()
        .copied()
        .filter(|n| acked_set.contains(n))
        .collect();
    assert_eq!(
        ran_acked, acked,
        "{unit}: acknowledged inputs lost, doubled or reordered"
    );
    let distinct: BTreeSet<u64> = ran.iter().copied().collect();
    assert_eq!(distinct.len(), ran.len(), "{unit}: an input ran twice");
}
