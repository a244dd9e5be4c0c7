//! Where each unit hosted on this node runs: its lane, and the message type it takes.

use std::any::TypeId;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockWriteGuard};

use ferry_core::errors::MessageError;

use super::cell::AnyFactory;
use super::envelope::{Envelope, Payload};
use super::lane::LaneTx;
use crate::ids::UnitId;

const SHARDS: usize = 32;

/// A unit's number on this node, given when it is built or restored here and never reused.
///
/// Messages on a lane's queue carry it instead of the unit's id: the id is shared, and a sender
/// cloning it while the lane drops it would bounce its reference count between cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Slot(u64);

/// A unit's local route. A sender may keep a copy (a [`crate::UnitRef`]) and push along it
/// without the directory for as long as it stays the unit's route.
pub(crate) struct Entry<N> {
    pub lane: Arc<LaneTx<N>>,
    pub factory: Arc<dyn AnyFactory<N>>,
    /// How its lane knows it; it stays the same when the unit changes lanes on this node.
    pub slot: Slot,
    /// Whether this is still the unit's route. A kept copy pushes under its read lock, and the
    /// shard clears it under its write lock when the entry is replaced or removed: so once a
    /// lane has repointed or removed a unit, every message sent along a kept copy is queued.
    current: Arc<RwLock<bool>>,
}

impl<N> Clone for Entry<N> {
    fn clone(&self) -> Self {
        Entry {
            lane: self.lane.clone(),
            factory: self.factory.clone(),
            slot: self.slot,
            current: self.current.clone(),
        }
    }
}

impl<N: 'static> Entry<N> {
    pub fn new(lane: Arc<LaneTx<N>>, factory: Arc<dyn AnyFactory<N>>, slot: Slot) -> Self {
        Entry {
            lane,
            factory,
            slot,
            current: Arc::new(RwLock::new(true)),
        }
    }

    /// Refuses a message of another type than the unit takes.
    pub fn check_type(
        &self,
        id: &UnitId,
        msg_type: TypeId,
        payload: &Payload,
    ) -> Result<(), MessageError> {
        let info = self.factory.info();
        if info.msg_type == msg_type {
            return Ok(());
        }
        Err(MessageError::WrongMessageType {
            id: id.clone(),
            sent: payload.type_name().to_owned(),
            expected: info.msg_type_name.to_owned(),
        })
    }

    /// Pushes along a kept copy of the route: `Err` gives the envelope back if this is not the
    /// unit's route any more; `Ok(false)` if the lane has ended.
    pub fn push_kept(&self, envelope: Envelope<Slot>) -> Result<bool, Envelope<Slot>> {
        let current = self.current.read();
        if !*current {
            return Err(envelope);
        }
        Ok(self.lane.data.send(envelope).is_ok())
    }

    fn retire(&self) {
        *self.current.write() = false;
    }
}

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
