//! The route cache of one node: where each unit it does not host lives, as last learned, and what
//! waits for a lookup, a move or a route switch. The routing that reads and fills it is the node's
//! (`node::routing`).

use foldhash::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::frames::Deliver;
use crate::ids::{NodeId, UnitId};

const SHARDS: usize = 16;

pub(crate) enum Route {
    /// The unit's owner, as last learned.
    Known(NodeId),
    /// This node handed the unit over to that node, and the move committed: certain, whatever
    /// the store says yet.
    Moved(NodeId),
    /// This node handed the unit over to `target`, and the move is not decided yet: messages go
    /// there. What comes back (the target gave its copy up, or cannot be reached) waits here, in
    /// arrival order, until the move ends: it runs here if this node takes the unit back, and
    /// follows it to the target if the target's commit won.
    Handed {
        target: NodeId,
        returned: Vec<Deliver>,
    },
    /// A lookup is under way; these wait for it, in arrival order.
    Resolving(Vec<Deliver>),
    /// A route hint named `owner`, but earlier messages may still be on the old path: these wait,
    /// in arrival order, until a fence sent along that path has run at the unit.
    Switching { owner: NodeId, held: Vec<Deliver> },
    /// The unit arrived here by a move, but messages this node sent it before may still be on the
    /// old path (through a third node): what this node sends it now waits here, in order, until a
    /// fence sent along that path has run at the unit.
    Arriving(Vec<Deliver>),
}

/// What the route cache says when a moved unit arrives on this node.
pub(crate) enum Arrival {
    /// Nothing this node sent the unit can be behind: its own sends may go straight to the unit.
    Clear,
    /// These waited here for a lookup: they go into the unit's queue first.
    Waiting(Vec<Deliver>),
    /// Earlier sends went through this node: send a fence along it; sends wait until it returns.
    Fence(NodeId),
}

/// The route cache of one node.
pub(crate) struct Router {
    hasher: foldhash::fast::RandomState,
    shards: [Mutex<HashMap<UnitId, Route>>; SHARDS],
    /// Tells given up because the store kept failing while their route was looked up.
    pub(crate) lookup_drops: AtomicU64,
    /// How many units are [`Route::Arriving`]: while none is, a local send skips this cache.
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
            shards: std::array::from_fn(|_| Mutex::new(HashMap::default())),
            lookup_drops: AtomicU64::new(0),
            arriving: AtomicUsize::new(0),
            gone: Mutex::new(HashSet::default()),
        }
    }

    /// Whether some unit that arrived here still waits for its fence.
    pub fn any_arriving(&self) -> bool {
        self.arriving.load(Ordering::Acquire) > 0
    }

    /// Counts a [`Route::Arriving`] taken out of the cache.
    pub(crate) fn took(&self, route: &Option<Route>) {
        if matches!(route, Some(Route::Arriving(_))) {
            self.arriving.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A unit moved here from `source`; call it under the unit's directory lock, as its entry is
    /// registered. This node's earlier messages to the unit went to the source (which relays them
    /// with the unit), or wait here, or went through another node: then new ones must wait for a
    /// fence along that path (see [`Route::Arriving`]).
    pub fn arrive(&self, id: &UnitId, source: &NodeId) -> Arrival {
        let mut shard = self.shard(id).lock();
        let arrival = match shard.remove(id) {
            None => Arrival::Clear,
            Some(Route::Known(old) | Route::Moved(old)) if old == *source => Arrival::Clear,
            Some(Route::Known(old) | Route::Moved(old)) => {
                shard.insert(id.clone(), Route::Arriving(Vec::new()));
                Arrival::Fence(old)
            }
            Some(
                Route::Resolving(waiting)
                | Route::Handed {
                    returned: waiting, ..
                },
            ) => Arrival::Waiting(waiting),
            // Its fence is out already, along the old path: its return ends the arrival.
            Some(Route::Switching { held, .. }) => {
                shard.insert(id.clone(), Route::Arriving(held));
                Arrival::Clear
            }
            Some(arriving @ Route::Arriving(_)) => {
                shard.insert(id.clone(), arriving);
                return Arrival::Clear;
            }
        };
        if matches!(shard.get(id), Some(Route::Arriving(_))) {
            self.arriving.fetch_add(1, Ordering::AcqRel);
        }
        arrival
    }

    pub(crate) fn shard(&self, id: &UnitId) -> &Mutex<HashMap<UnitId, Route>> {
        &self.shards[(self.hasher.hash_one(id) as usize) % SHARDS]
    }

    /// Forgets what is known of a unit's owner (not a lookup under way, nor a move from here that
    /// has not ended).
    pub fn forget(&self, id: &UnitId) {
        let mut shard = self.shard(id).lock();
        if matches!(shard.get(id), Some(Route::Known(_) | Route::Moved(_))) {
            shard.remove(id);
        }
    }

    /// Forgets a learned route that leads back to `node` (a message bouncing between two nodes);
    /// a route this node's own handover set stays.
    pub(crate) fn forget_if_known(&self, id: &UnitId, node: &NodeId) {
        let mut shard = self.shard(id).lock();
        if matches!(shard.get(id), Some(Route::Known(owner)) if owner == node) {
            shard.remove(id);
        }
    }

    /// Forgets every route to a node that left the cluster, and takes no new one to it until
    /// it is back ([`Router::present`]).
    pub fn forget_node(&self, node: &NodeId) {
        self.gone.lock().insert(node.clone());
        for shard in &self.shards {
            shard
                .lock()
                .retain(|_, route| {
                    !matches!(route, Route::Known(owner) | Route::Moved(owner) if owner == node)
                });
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
    pub(crate) fn is_gone(&self, node: &NodeId) -> bool {
        self.gone.lock().contains(node)
    }

    /// Points a unit at the target of its move from here, whatever was known (see
    /// [`Route::Handed`]). Messages waiting for a lookup of it are given back, to be sent along
    /// the new route.
    #[must_use]
    pub fn hand_over(&self, id: UnitId, target: NodeId) -> Vec<Deliver> {
        let handed = Route::Handed {
            target,
            returned: Vec::new(),
        };
        let old = self.shard(&id).lock().insert(id, handed);
        self.took(&old);
        match old {
            Some(
                Route::Resolving(waiting)
                | Route::Switching { held: waiting, .. }
                | Route::Arriving(waiting)
                | Route::Handed {
                    returned: waiting, ..
                },
            ) => waiting,
            _ => Vec::new(),
        }
    }

    /// Keeps a message for a unit whose move from here has not ended (see [`Route::Handed`]),
    /// if it came back `from` the move's target (`None`: it could not be handed to the target);
    /// gives it back otherwise.
    pub(crate) fn hold_for_move(&self, deliver: Deliver, from: Option<&NodeId>) -> Option<Deliver> {
        let mut shard = self.shard(&deliver.to).lock();
        match shard.get_mut(&deliver.to) {
            Some(Route::Handed { target, returned }) if from.is_none_or(|from| from == target) => {
                returned.push(deliver);
                None
            }
            _ => Some(deliver),
        }
    }

    /// The move from here committed: the unit's route is its target for good. Gives back what
    /// came back meanwhile, to be sent there.
    #[must_use]
    pub fn moved(&self, id: &UnitId) -> Vec<Deliver> {
        let mut shard = self.shard(id).lock();
        match shard.remove(id) {
            Some(Route::Handed { target, returned }) => {
                shard.insert(id.clone(), Route::Moved(target));
                returned
            }
            Some(other) => {
                shard.insert(id.clone(), other);
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// This node took the unit back from its move: the route is forgotten (the unit is here), and
    /// what came back meanwhile is given back, in arrival order, to run behind what the unit held.
    #[must_use]
    pub fn taken_back(&self, id: &UnitId) -> Vec<Deliver> {
        let mut shard = self.shard(id).lock();
        match shard.remove(id) {
            Some(Route::Handed { returned, .. }) => returned,
            // What was known of the owner is void: the unit is here.
            Some(Route::Known(_) | Route::Moved(_)) | None => Vec::new(),
            Some(other) => {
                shard.insert(id.clone(), other);
                Vec::new()
            }
        }
    }

    /// Takes a route hint that `owner` runs a unit. When this node sent along another path
    /// before, gives back that path's first node: a fence goes there and new messages wait (see
    /// [`Route::Switching`]). A lookup under way learns the owner itself.
    pub(crate) fn hint(&self, id: UnitId, owner: NodeId, me: &NodeId) -> Option<NodeId> {
        let mut shard = self.shard(&id).lock();
        match shard.get_mut(&id) {
            // The unit runs here, or its move from here has not ended: no hint can say better.
            Some(Route::Resolving(_) | Route::Arriving(_) | Route::Handed { .. }) => None,
            Some(Route::Switching { owner: next, .. }) => {
                *next = owner;
                None
            }
            Some(Route::Known(old) | Route::Moved(old))
                if *old != owner && old != me && owner != *me =>
            {
                let old = old.clone();
                shard.insert(
                    id,
                    Route::Switching {
                        owner,
                        held: Vec::new(),
                    },
                );
                Some(old)
            }
            _ => {
                shard.insert(id, Route::Known(owner));
                None
            }
        }
    }
}
