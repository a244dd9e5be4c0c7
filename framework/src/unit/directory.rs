//! Which lane hosts each unit of a node, sharded so senders rarely contend.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockWriteGuard};

use super::lane::{Entry, LaneTx, Slot};
use crate::ids::UnitId;

const SHARDS: usize = 32;

/// The units of one shard. Replacing or removing an entry retires it, so kept copies of it stop
/// being used.
pub(crate) struct Shard<N>(foldhash::HashMap<UnitId, Entry<N>>);

impl<N> Default for Shard<N> {
    fn default() -> Self {
        Shard(foldhash::HashMap::default())
    }
}

impl<N: 'static> Shard<N> {
    pub fn get(&self, id: &UnitId) -> Option<&Entry<N>> {
        self.0.get(id)
    }

    pub fn contains_key(&self, id: &UnitId) -> bool {
        self.0.contains_key(id)
    }

    pub fn insert(&mut self, id: UnitId, entry: Entry<N>) {
        if let Some(old) = self.0.insert(id, entry) {
            old.retire();
        }
    }

    pub fn remove(&mut self, id: &UnitId) {
        if let Some(old) = self.0.remove(id) {
            old.retire();
        }
    }
}

/// The units of this node, sharded so senders rarely contend.
///
/// Senders hold a shard's read lock while they push onto a lane, and a lane that hands a unit over
/// repoints it under the write lock, which also retires the old entry's kept copies: so once the
/// lane holds the write lock, every message sent along the old route, by id or by a kept copy, is
/// already in its queue, and per-sender order survives the handover.
pub(crate) struct Directory<N> {
    hasher: foldhash::fast::RandomState,
    shards: [RwLock<Shard<N>>; SHARDS],
    next_slot: AtomicU64,
}

impl<N: 'static> Directory<N> {
    pub fn new() -> Self {
        Directory {
            hasher: foldhash::fast::RandomState::default(),
            shards: std::array::from_fn(|_| RwLock::new(Shard::default())),
            next_slot: AtomicU64::new(0),
        }
    }

    /// A slot no unit of this node has had.
    pub fn new_slot(&self) -> Slot {
        Slot(self.next_slot.fetch_add(1, Ordering::Relaxed))
    }

    fn shard(&self, id: &UnitId) -> &RwLock<Shard<N>> {
        &self.shards[(self.hasher.hash_one(id) as usize) % SHARDS]
    }

    /// Runs `f` with the unit's entry under the shard's read lock.
    pub fn with<R>(&self, id: &UnitId, f: impl FnOnce(Option<&Entry<N>>) -> R) -> R {
        let guard = self.shard(id).read();
        f(guard.get(id))
    }

    /// The unit's entry, cloned.
    pub fn get(&self, id: &UnitId) -> Option<Entry<N>> {
        self.shard(id).read().get(id).cloned()
    }

    /// The write lock of the unit's shard, for creation and handover.
    /// Removes `id`'s entry if it still points at `lane` (a lane leaving never unlists a unit
    /// that moved on to another lane).
    pub fn remove_if_on(&self, id: &UnitId, lane: *const LaneTx<N>) {
        let mut shard = self.lock(id);
        if shard
            .get(id)
            .is_some_and(|e| std::ptr::eq(Arc::as_ptr(&e.lane), lane))
        {
            shard.remove(id);
        }
    }

    pub fn lock(&self, id: &UnitId) -> RwLockWriteGuard<'_, Shard<N>> {
        self.shard(id).write()
    }

    /// Every hosted unit, for shutdown and status.
    pub fn all(&self) -> Vec<(UnitId, Entry<N>)> {
        self.shards
            .iter()
            .flat_map(|s| {
                s.read()
                    .0
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The spot whose lane this is, if one is hosted on it (an actor in a SpotWide room).
    pub fn spot_sharing(&self, lane: &Arc<LaneTx<N>>) -> Option<UnitId> {
        self.shards.iter().find_map(|s| {
            s.read()
                .0
                .iter()
                .find(|(id, e)| matches!(id, UnitId::Spot(_)) && Arc::ptr_eq(&e.lane, lane))
                .map(|(id, _)| id.clone())
        })
    }

    /// How many units this node hosts.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().0.len()).sum()
    }
}
