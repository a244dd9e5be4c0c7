//! The promises fault tests check after the dust settles.

use std::collections::BTreeSet;
use std::fmt::Display;

use ferry::cluster::authority::{UnitRecord, unit_key};
use ferry::store::LocationStore;
use ferry::{Node, UnitId};

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

/// Panics unless exactly one of `nodes` hosts `id`, and its authority record in `store` names
/// that node.
pub async fn assert_runs_where_recorded(nodes: &[Node], store: &dyn LocationStore, id: &UnitId) {
    let hosts: Vec<&Node> = nodes.iter().filter(|n| n.hosts(id)).collect();
    assert_eq!(hosts.len(), 1, "{id} runs on exactly one node");
    let key = unit_key(id);
    let record = store.get(&key).await.expect("record read").expect("record");
    let record = UnitRecord::decode(&key, &record.value).expect("record decodes");
    assert_eq!(
        record.owner,
        *hosts[0].id(),
        "{id} runs where its record says"
    );
}
