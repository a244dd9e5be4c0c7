//! The route cache of one node: the core's route table ([`ferry_core::routes`]) in shards, each
//! behind its own lock, and which nodes membership declared gone. The routing that reads and fills
//! it (lookups, fences, sends) is the node's (`node::routing`).

use foldhash::HashSet;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ferry_core::routes::Routes;
use parking_lot::Mutex;

use super::frames::Deliver;
use crate::ids::{NodeId, UnitId};

const SHARDS: usize = 16;

/// The route cache of one node: the core's route table, in shards.
pub(crate) struct Router {
    hasher: foldhash::fast::RandomState,
    shards: [Mutex<Routes<Deliver>>; SHARDS],
    /// Tells given up because the store kept failing while their route was looked up.
    pub(crate) lookup_drops: AtomicU64,
    /// How many units wait for an arrival's fence, over all shards: while none does, a local
    /// send skips this cache.
    arriving: AtomicUsize,
    /// Nodes membership declared gone that have not been seen live since: a record that still
    /// names one (recovery has not rebuilt the unit yet) is no route. A seed among them is
    /// dialled again, so a send to it would wait for a node that may never come back.
    gone: Mutex<HashSet<NodeId>>,
}

impl Router {
    pub fn new() -> Self {
        Router {
            hasher: foldhash::fast::RandomState::default(),
            shards: std::array::from_fn(|_| Mutex::new(Routes::default())),
            lookup_drops: AtomicU64::new(0),
            arriving: AtomicUsize::new(0),
            gone: Mutex::new(HashSet::default()),
        }
    }

    /// Whether some unit that arrived here still waits for its fence.
    pub fn any_arriving(&self) -> bool {
        self.arriving.load(Ordering::Acquire) > 0
    }

    /// Runs `f` on the routes of `id`'s shard, under its lock, and keeps the count of arrivals.
    pub fn with<R>(&self, id: &UnitId, f: impl FnOnce(&mut Routes<Deliver>) -> R) -> R {
        let shard = &self.shards[(self.hasher.hash_one(id) as usize) % SHARDS];
        let mut routes = shard.lock();
        let before = routes.arriving();
        let result = f(&mut routes);
        let after = routes.arriving();
        if after > before {
            self.arriving.fetch_add(after - before, Ordering::AcqRel);
        } else if before > after {
            self.arriving.fetch_sub(before - after, Ordering::AcqRel);
        }
        result
    }

    /// Forgets every route to a node that left the cluster, and takes no new one to it until
    /// it is back ([`Router::present`]).
    pub fn forget_node(&self, node: &NodeId) {
        self.gone.lock().insert(node.clone());
        for shard in &self.shards {
            shard.lock().forget_node(node);
        }
    }

    /// Membership found these nodes live (or not yet confirmed dead): routes to them are good.
    pub fn present<'a>(&self, nodes: impl IntoIterator<Item = &'a NodeId>) {
        let mut gone = self.gone.lock();
        if gone.is_empty() {
            return;
        }
        for node in nodes {
            gone.remove(node);
        }
    }

    /// Whether membership declared `node` gone, and it has not been seen live since.
    pub fn is_gone(&self, node: &NodeId) -> bool {
        self.gone.lock().contains(node)
    }

    /// Points a unit at the target of its move from here (see [`ferry_core::routes::Route::Handed`]).
    /// Messages that waited here for it otherwise are given back, to go ahead of the handover.
    #[must_use]
    pub fn hand_over(&self, id: UnitId, target: NodeId) -> Vec<Deliver> {
        self.with(&id.clone(), |routes| routes.hand_over(id, target))
    }

    /// This node took the unit back from its move: gives back what waited for the move's end, in
    /// arrival order, to run behind what the unit held.
    #[must_use]
    pub fn taken_back(&self, id: &UnitId) -> Vec<Deliver> {
        self.with(id, |routes| routes.taken_back(id))
    }
}
