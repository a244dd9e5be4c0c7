//! What the standby tests wait for and read: every room's standby holding all its turns, and the
//! store's record of which node keeps a room's copy.

use std::time::Duration;

use ferry::cluster::authority::standby_key;
use ferry::store::LocationStore;
use ferry::{Node, NodeId, UnitId};
use ferry_core::standby::promotion::Named;

/// How long a standby may take to catch up before the test fails.
const T: Duration = Duration::from_secs(10);

/// Waits until `node` owns `rooms` rooms with a standby, each holding all its turns. (The node
/// tells no event for this: its status is polled.)
pub async fn standbys_hold_everything(node: &Node, rooms: usize) {
    let until = tokio::time::Instant::now() + T;
    loop {
        let status = node.standby_status();
        if status.rooms == rooms && status.current == rooms && status.oldest_unheld.is_none() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "standbys not current in time: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The node the store names as the holder of `id`'s standby, once it names one (its holder
/// acknowledged a checkpoint).
pub async fn holder_of(store: &dyn LocationStore, id: &UnitId) -> NodeId {
    let key = standby_key(id);
    let until = tokio::time::Instant::now() + T;
    loop {
        if let Some(value) = store.get(&key).await.expect("store") {
            return Named::decode(&key, &value.value).expect("decodes").holder;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "no standby named for {id}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
