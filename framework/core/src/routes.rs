//! A node's routes to the units it does not host, and the rules that keep one sender's messages to
//! one unit in order while the unit moves.
//!
//! Messages to one unit travel in order along one path: the mesh keeps the order of frames between
//! two nodes, a lookup queues what is sent meanwhile behind the first, and every node on the path
//! passes them on in the order it got them. What could break the order is a sender switching
//! paths while earlier messages are still on the old one, so a switch waits for a fence sent along
//! the old path to run at the unit ([`Route::Switching`], [`Route::Arriving`]). And a source whose
//! move is not decided yet sends nothing on ([`Route::Handed`]): had it forwarded a message to the
//! target, a reclaim could run later messages here before the target gave that one back.
//!
//! `P` is a message as the caller carries it. The table does no I/O: each call returns what to
//! send, queue or look up, and the caller (the runtime's router, or a simulator) does it.

use foldhash::HashMap;

use crate::ids::{NodeId, UnitId};

/// What a node knows of one unit's owner.
#[derive(Debug)]
pub enum Route<P> {
    /// The unit's owner, as last learned.
    Known(NodeId),
    /// This node handed the unit over to that node, and the move committed: certain, whatever the
    /// store says yet.
    Moved(NodeId),
    /// This node handed the unit over to `target`, and the move is not decided yet. Everything for
    /// the unit that reaches this node from now on (sent here, forwarded here by a peer, or given
    /// back by the target) waits here, in arrival order, until the move ends: it runs here if this
    /// node takes the unit back, and follows it to the target if the target's commit won. So no
    /// message is on its way to the target when this node takes the unit back, to come back later
    /// behind newer ones.
    Handed {
        /// The move's target.
        target: NodeId,
        /// What waits for the move's end, in arrival order.
        returned: Vec<P>,
    },
    /// A lookup is under way; these wait for it, in arrival order.
    Resolving(Vec<P>),
    /// A route hint named `owner`, but earlier messages may still be on the old path: these wait,
    /// in arrival order, until a fence sent along that path has run at the unit.
    Switching {
        /// Where the held messages go once the fence returns.
        owner: NodeId,
        /// What waits, in order.
        held: Vec<P>,
    },
    /// The unit arrived here by a move, but messages this node sent it before may still be on the
    /// old path (through a third node): what this node sends it now waits here, in order, until a
    /// fence sent along that path has run at the unit.
    Arriving(Vec<P>),
}

impl<P> Route<P> {
    /// The owner a learned route leads to (not a lookup, a switch, an arrival or a handover).
    fn learned(&self) -> Option<&NodeId> {
        match self {
            Route::Known(owner) | Route::Moved(owner) => Some(owner),
            _ => None,
        }
    }
}

/// Where a message for a unit not hosted here goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Routed<P> {
    /// To this node, now.
    Send(NodeId, P),
    /// It waits behind earlier messages (a lookup, a switch or an arrival); nothing to do.
    Waits,
    /// Nothing is known: it waits for a lookup of the unit's record, which the caller starts.
    LookUp,
}

/// What the routes say when a moved unit arrives on this node.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<P> {
    /// Nothing this node sent the unit can be behind: its own sends may go straight to the unit.
    Clear,
    /// These waited here for a lookup: they go into the unit's queue first.
    Waiting(Vec<P>),
    /// Earlier sends went through this node: send a fence along it; sends wait until it returns.
    Fence(NodeId),
}

/// What ends a switch or an arrival (its fence returned, or waited too long).
#[derive(Debug, PartialEq, Eq)]
pub enum Switched<P> {
    /// The held messages leave for the hinted owner, in order.
    Send(NodeId, Vec<P>),
    /// The unit is hosted here: the held messages join its queue, in order.
    Enqueue(Vec<P>),
    /// The unit arrived and left again meanwhile: the held messages wait for a lookup, which the
    /// caller starts.
    LookUp,
    /// A handover took the route over, and what was held with it.
    Nothing,
}

/// One node's routes (or one shard of them).
#[derive(Debug)]
pub struct Routes<P> {
    map: HashMap<UnitId, Route<P>>,
    /// How many routes are [`Route::Arriving`]: while none is, a local send can skip the table.
    arriving: usize,
}

impl<P> Default for Routes<P> {
    fn default() -> Self {
        Routes {
            map: HashMap::default(),
            arriving: 0,
        }
    }
}

impl<P> Routes<P> {
    /// How many units that arrived here still wait for their fence.
    pub fn arriving(&self) -> usize {
        self.arriving
    }

    /// The route of a unit, if any.
    pub fn get(&self, id: &UnitId) -> Option<&Route<P>> {
        self.map.get(id)
    }

    /// Where this node believes a unit it does not host lives, if it has a route.
    pub fn cached(&self, id: &UnitId) -> Option<&NodeId> {
        match self.map.get(id) {
            Some(
                Route::Known(owner)
                | Route::Moved(owner)
                | Route::Switching { owner, .. }
                | Route::Handed { target: owner, .. },
            ) => Some(owner),
            _ => None,
        }
    }

    fn take(&mut self, id: &UnitId) -> Option<Route<P>> {
        let route = self.map.remove(id);
        if matches!(route, Some(Route::Arriving(_))) {
            self.arriving -= 1;
        }
        route
    }

    fn put(&mut self, id: UnitId, route: Route<P>) {
        if matches!(route, Route::Arriving(_)) {
            self.arriving += 1;
        }
        if let Some(Route::Arriving(_)) = self.map.insert(id, route) {
            self.arriving -= 1;
        }
    }

    /// A message for a unit this node (`me`) does not host: where it goes.
    pub fn route(&mut self, id: &UnitId, msg: P, me: &NodeId) -> Routed<P> {
        match self.map.get_mut(id) {
            Some(Route::Known(owner) | Route::Moved(owner)) if owner != me => {
                Routed::Send(owner.clone(), msg)
            }
            Some(
                Route::Resolving(waiting)
                | Route::Switching { held: waiting, .. }
                | Route::Arriving(waiting)
                | Route::Handed {
                    returned: waiting, ..
                },
            ) => {
                waiting.push(msg);
                Routed::Waits
            }
            _ => {
                self.put(id.clone(), Route::Resolving(vec![msg]));
                Routed::LookUp
            }
        }
    }

    /// A lookup's answer is in: takes what waited for it. Empty if someone learned the route
    /// meanwhile (it is kept) or nothing waits.
    pub fn resolved(&mut self, id: &UnitId) -> Vec<P> {
        match self.take(id) {
            Some(Route::Resolving(waiting)) => waiting,
            Some(known) => {
                self.put(id.clone(), known);
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// Records `owner` as a unit's route, and gives back what to send it, in order: what waited
    /// for the lookup that found it, then what queued behind a newer lookup of the same id. A
    /// switch or an arrival that began meanwhile knows better: what waited joins, first, what it
    /// holds, and nothing is given back.
    pub fn settle(&mut self, id: UnitId, owner: NodeId, mut waiting: Vec<P>) -> Vec<P> {
        match self.take(&id) {
            Some(Route::Resolving(newer)) => waiting.extend(newer),
            Some(Route::Switching { owner, held }) => {
                waiting.extend(held);
                self.put(
                    id,
                    Route::Switching {
                        owner,
                        held: waiting,
                    },
                );
                return Vec::new();
            }
            Some(Route::Arriving(held)) => {
                waiting.extend(held);
                self.put(id, Route::Arriving(waiting));
                return Vec::new();
            }
            _ => {}
        }
        self.put(id, Route::Known(owner));
        waiting
    }

    /// A unit moved here from `source`; call it as its entry is registered here. This node's
    /// earlier messages to the unit went to the source (which relays them with the unit), or wait
    /// here, or went through another node: then new ones must wait for a fence along that path.
    pub fn arrive(&mut self, id: &UnitId, source: &NodeId) -> Arrival<P> {
        match self.take(id) {
            None => Arrival::Clear,
            // Kept: should the staged copy be given up, what this node sent it meanwhile follows
            // its earlier messages to the source, not a new path that could overtake them.
            Some(route) if route.learned() == Some(source) => {
                self.put(id.clone(), route);
                Arrival::Clear
            }
            Some(Route::Known(old) | Route::Moved(old)) => {
                self.put(id.clone(), Route::Arriving(Vec::new()));
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
                self.put(id.clone(), Route::Arriving(held));
                Arrival::Clear
            }
            Some(arriving @ Route::Arriving(_)) => {
                self.put(id.clone(), arriving);
                Arrival::Clear
            }
        }
    }

    /// A unit is now hosted here by a creation or a rebuild (not a move: see [`Routes::arrive`]):
    /// what this node sent it and still holds (waiting for a lookup, a switch or an arrival) goes
    /// into its queue first, in order, ahead of what is sent to it from now on; what was known of
    /// another owner is void.
    pub fn hosted(&mut self, id: &UnitId) -> Vec<P> {
        match self.take(id) {
            Some(
                Route::Resolving(waiting)
                | Route::Switching { held: waiting, .. }
                | Route::Arriving(waiting)
                | Route::Handed {
                    returned: waiting, ..
                },
            ) => waiting,
            Some(Route::Known(_) | Route::Moved(_)) | None => Vec::new(),
        }
    }

    /// The messages held for a unit that arrived here and waits for its fence, for what this node
    /// sends it now to wait behind; `None` when it does not wait (sends go straight to the unit).
    pub fn hold_if_arriving(&mut self, id: &UnitId) -> Option<&mut Vec<P>> {
        match self.map.get_mut(id) {
            Some(Route::Arriving(held)) => Some(held),
            _ => None,
        }
    }

    /// Forgets what is known of a unit's owner (not a lookup under way, nor a move from here that
    /// has not ended).
    pub fn forget(&mut self, id: &UnitId) {
        if matches!(self.map.get(id), Some(Route::Known(_) | Route::Moved(_))) {
            self.map.remove(id);
        }
    }

    /// Forgets a route that leads back to `node`, learned or set by this node's committed
    /// handover: a message for the unit came from there, so the unit does not run there any more
    /// (it moved on or stopped), and sending it back would bounce it between the two nodes.
    pub fn forget_if_known(&mut self, id: &UnitId, node: &NodeId) {
        if matches!(self.map.get(id), Some(Route::Known(owner) | Route::Moved(owner)) if owner == node)
        {
            self.map.remove(id);
        }
    }

    /// The unit stopped here: the route this node kept while it hosted the unit (to the source it
    /// arrived from) is void, and the id may be created again anywhere. What follows looks the
    /// unit up.
    pub fn stopped(&mut self, id: &UnitId) {
        self.forget(id);
    }

    /// Forgets every route to a node that left the cluster.
    pub fn forget_node(&mut self, node: &NodeId) {
        self.map.retain(
            |_, route| !matches!(route, Route::Known(owner) | Route::Moved(owner) if owner == node),
        );
    }

    /// Marks a unit handed over to the target of its move from here, whatever was known (see
    /// [`Route::Handed`]). Messages that waited here for the unit otherwise (a lookup, a switch)
    /// are given back: they were sent before the handover, so they go ahead of what waits for
    /// the move's end.
    #[must_use]
    pub fn hand_over(&mut self, id: UnitId, target: NodeId) -> Vec<P> {
        let old = self.take(&id);
        self.put(
            id,
            Route::Handed {
                target,
                returned: Vec::new(),
            },
        );
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
    /// whoever sent it or gave it back; gives it back otherwise.
    pub fn hold_for_move(&mut self, id: &UnitId, msg: P) -> Option<P> {
        match self.map.get_mut(id) {
            Some(Route::Handed { returned, .. }) => {
                returned.push(msg);
                None
            }
            _ => Some(msg),
        }
    }

    /// A message for a unit not hosted here arrived from the peer `from`: kept for an undecided
    /// move from here, or given back to be routed on, after forgetting a learned route that would
    /// send it back where it came from.
    pub fn arrived_elsewhere(&mut self, id: &UnitId, msg: P, from: &NodeId) -> Option<P> {
        let msg = self.hold_for_move(id, msg)?;
        self.forget_if_known(id, from);
        Some(msg)
    }

    /// The move from here committed: the unit's route is its target for good. Gives back what
    /// came back meanwhile, to be sent there.
    #[must_use]
    pub fn moved(&mut self, id: &UnitId) -> Vec<P> {
        match self.take(id) {
            Some(Route::Handed { target, returned }) => {
                self.put(id.clone(), Route::Moved(target));
                returned
            }
            Some(other) => {
                self.put(id.clone(), other);
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// This node took the unit back from its move: the route is forgotten (the unit is here), and
    /// what came back meanwhile is given back, in arrival order, to run behind what the unit held.
    #[must_use]
    pub fn taken_back(&mut self, id: &UnitId) -> Vec<P> {
        match self.take(id) {
            Some(Route::Handed { returned, .. }) => returned,
            // What was known of the owner is void: the unit is here.
            Some(Route::Known(_) | Route::Moved(_)) | None => Vec::new(),
            Some(other) => {
                self.put(id.clone(), other);
                Vec::new()
            }
        }
    }

    /// Takes a route hint that `owner` runs a unit. When this node (`me`) sent along another path
    /// before, gives back that path's first node: a fence goes there and new messages wait (see
    /// [`Route::Switching`]). A lookup under way learns the owner itself.
    pub fn hint(&mut self, id: UnitId, owner: NodeId, me: &NodeId) -> Option<NodeId> {
        match self.map.get_mut(&id) {
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
                self.put(
                    id,
                    Route::Switching {
                        owner,
                        held: Vec::new(),
                    },
                );
                Some(old)
            }
            _ => {
                self.put(id, Route::Known(owner));
                None
            }
        }
    }

    /// Ends a switch or an arrival once its fence has run at the unit (or waited too long);
    /// `hosted` says whether the unit is hosted here now.
    pub fn end_switch(&mut self, id: UnitId, hosted: bool) -> Switched<P> {
        match self.take(&id) {
            Some(Route::Switching { owner, held }) => {
                self.put(id, Route::Known(owner.clone()));
                Switched::Send(owner, held)
            }
            Some(Route::Arriving(held)) if hosted => Switched::Enqueue(held),
            Some(Route::Arriving(held)) => {
                self.put(id, Route::Resolving(held));
                Switched::LookUp
            }
            Some(other) => {
                self.put(id, other);
                Switched::Nothing
            }
            None => Switched::Nothing,
        }
    }
}

/// Whether a route lookup's answer must be read again as the store confirms it before it is
/// acted on: the record names this node (`me`), which does not host the unit. Such a record may
/// be a write the store had not confirmed, which a failover loses (a move's commit into this node
/// whose copy was then given up); read as confirmed, it either names another node or truly this one.
pub fn lookup_needs_confirming(owner: &NodeId, me: &NodeId, hosted: bool) -> bool {
    owner == me && !hosted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SpotId;

    fn room(name: &str) -> UnitId {
        UnitId::Spot(SpotId::new(name).expect("id"))
    }

    fn node(name: &str) -> NodeId {
        NodeId::new(name).expect("id")
    }

    #[test]
    fn a_lookup_naming_this_node_for_a_unit_not_here_is_read_again_as_confirmed() {
        let (me, other) = (node("n1"), node("n2"));
        assert!(lookup_needs_confirming(&me, &me, false));
        assert!(!lookup_needs_confirming(&me, &me, true), "it runs here");
        assert!(
            !lookup_needs_confirming(&other, &me, false),
            "another node's"
        );
    }

    #[test]
    fn a_unit_that_stopped_after_moving_back_here_leaves_no_route_behind() {
        let mut routes: Routes<u32> = Routes::default();
        let (id, me, other) = (room("room"), node("n1"), node("n2"));
        // It moved to n2 and back: the arrival kept the route to its source.
        assert!(routes.hand_over(id.clone(), other.clone()).is_empty());
        assert!(routes.moved(&id).is_empty());
        assert_eq!(routes.arrive(&id, &other), Arrival::Clear);
        routes.stopped(&id);
        assert_eq!(
            routes.route(&id, 1, &me),
            Routed::LookUp,
            "looked up, not sent to n2"
        );
    }

    #[test]
    fn a_message_coming_back_from_where_a_unit_was_handed_forgets_that_route() {
        let mut routes: Routes<u32> = Routes::default();
        let (id, me, target) = (room("room"), node("n1"), node("n2"));
        assert!(routes.hand_over(id.clone(), target.clone()).is_empty());
        assert!(routes.moved(&id).is_empty());
        // The target sends a message for it back: it runs there no more.
        assert_eq!(routes.arrived_elsewhere(&id, 7, &target), Some(7));
        assert_eq!(routes.route(&id, 7, &me), Routed::LookUp);
    }

    #[test]
    fn a_lookup_queues_what_follows_and_settles_it_in_order() {
        let mut routes = Routes::default();
        let (id, me, owner) = (room("room"), node("n1"), node("n2"));
        assert_eq!(routes.route(&id, 1, &me), Routed::LookUp);
        assert_eq!(routes.route(&id, 2, &me), Routed::Waits);
        let waiting = routes.resolved(&id);
        // A newer lookup started once the first had taken its queue.
        assert_eq!(routes.route(&id, 3, &me), Routed::LookUp);
        assert_eq!(routes.route(&id, 4, &me), Routed::Waits);
        let queue = routes.settle(id.clone(), owner.clone(), waiting);
        assert_eq!(queue, [1, 2, 3, 4], "nothing dropped, in order");
        assert_eq!(routes.route(&id, 5, &me), Routed::Send(owner, 5));
    }

    #[test]
    fn a_handover_gives_back_the_messages_waiting_for_a_lookup_of_its_unit() {
        let mut routes = Routes::default();
        let (id, me, target) = (room("room"), node("n1"), node("n2"));
        assert_eq!(routes.route(&id, 1, &me), Routed::LookUp);
        assert_eq!(routes.route(&id, 2, &me), Routed::Waits);
        assert_eq!(routes.hand_over(id.clone(), target.clone()), [1, 2]);
        assert!(matches!(routes.get(&id), Some(Route::Handed { target: t, .. }) if *t == target));
        assert!(
            routes.hand_over(id, target).is_empty(),
            "nothing waits any more"
        );
    }

    #[test]
    fn everything_for_a_handed_unit_waits_for_the_moves_end() {
        let mut routes = Routes::default();
        let (id, me, target, other) = (room("room"), node("n1"), node("n2"), node("n3"));
        assert!(routes.hand_over(id.clone(), target.clone()).is_empty());
        // Sent here, forwarded here by another node, given back by the target, or unsendable:
        // all of it waits, in arrival order.
        assert_eq!(routes.route(&id, 1, &me), Routed::Waits);
        assert_eq!(routes.arrived_elsewhere(&id, 2, &other), None);
        assert_eq!(routes.arrived_elsewhere(&id, 3, &target), None);
        assert_eq!(routes.hold_for_move(&id, 4), None);
        assert_eq!(
            routes.hint(id.clone(), other.clone(), &me),
            None,
            "no hint moves it"
        );
        routes.forget(&id);
        routes.forget_node(&target);
        // Taken back here: what waited is given back, and the route is gone.
        assert_eq!(routes.taken_back(&id), [1, 2, 3, 4]);
        assert!(routes.get(&id).is_none());
        // Committed at the target: what waited follows the unit there, and the route stays.
        assert!(routes.hand_over(id.clone(), target.clone()).is_empty());
        assert_eq!(routes.route(&id, 5, &me), Routed::Waits);
        assert_eq!(routes.moved(&id), [5]);
        assert!(matches!(routes.get(&id), Some(Route::Moved(owner)) if *owner == target));
        assert_eq!(routes.route(&id, 6, &me), Routed::Send(target.clone(), 6));
        assert_eq!(
            routes.hold_for_move(&id, 7),
            Some(7),
            "a decided move holds nothing"
        );
    }

    #[test]
    fn a_hint_that_changes_the_path_holds_new_messages_until_the_switch_ends() {
        let mut routes = Routes::default();
        let (id, me, n1, n2) = (room("room"), node("n3"), node("n1"), node("n2"));
        // No route yet, or the same owner again: nothing to fence.
        assert_eq!(routes.hint(id.clone(), n1.clone(), &me), None);
        assert_eq!(routes.hint(id.clone(), n1.clone(), &me), None);
        // Another owner: the fence goes along the old path, and messages wait.
        assert_eq!(routes.hint(id.clone(), n2.clone(), &me), Some(n1.clone()));
        assert_eq!(routes.route(&id, 7, &me), Routed::Waits);
        // A further hint only changes where the held messages go.
        assert_eq!(routes.hint(id.clone(), n1.clone(), &me), None);
        assert_eq!(routes.route(&id, 8, &me), Routed::Waits);
        assert_eq!(
            routes.end_switch(id.clone(), false),
            Switched::Send(n1.clone(), vec![7, 8])
        );
        assert_eq!(routes.route(&id, 9, &me), Routed::Send(n1, 9));
        assert_eq!(
            routes.end_switch(id, false),
            Switched::Nothing,
            "one end per switch"
        );
    }

    #[test]
    fn a_handover_takes_what_a_switch_held() {
        let mut routes = Routes::default();
        let (id, me, n1, n2) = (room("room"), node("n3"), node("n1"), node("n2"));
        routes.hint(id.clone(), n1.clone(), &me);
        assert_eq!(routes.hint(id.clone(), n2.clone(), &me), Some(n1));
        assert_eq!(routes.route(&id, 7, &me), Routed::Waits);
        assert_eq!(routes.hand_over(id.clone(), n2), [7]);
        assert_eq!(
            routes.end_switch(id, false),
            Switched::Nothing,
            "the handover ended it"
        );
    }

    #[test]
    fn an_arrival_fences_only_a_path_that_did_not_lead_through_the_source() {
        let mut routes = Routes::default();
        let (me, source, third) = (node("n3"), node("n1"), node("n2"));
        // Sent to the source, or never sent: the relay carries it, nothing to wait for. The route
        // stays, for what this node sends the unit if its copy here is given up.
        routes.hint(room("a"), source.clone(), &me);
        assert_eq!(routes.arrive(&room("a"), &source), Arrival::Clear);
        assert_eq!(routes.cached(&room("a")), Some(&source));
        assert_eq!(routes.arrive(&room("b"), &source), Arrival::Clear);
        assert_eq!(routes.arriving(), 0);
        // Sent through a third node: fence it, and hold what is sent meanwhile.
        routes.hint(room("c"), third.clone(), &me);
        assert_eq!(
            routes.arrive(&room("c"), &source),
            Arrival::Fence(third.clone())
        );
        assert_eq!(routes.arriving(), 1);
        routes.hold_if_arriving(&room("c")).expect("held").push(5);
        assert!(routes.hold_if_arriving(&room("a")).is_none());
        // Waiting for a lookup: queued at the unit first, in order.
        assert_eq!(routes.route(&room("d"), 1, &me), Routed::LookUp);
        assert_eq!(routes.route(&room("d"), 2, &me), Routed::Waits);
        assert_eq!(
            routes.arrive(&room("d"), &source),
            Arrival::Waiting(vec![1, 2])
        );
        // A hint does not end an arrival; its fence does, into the unit's queue.
        assert_eq!(routes.hint(room("c"), source.clone(), &third), None);
        assert_eq!(
            routes.end_switch(room("c"), true),
            Switched::Enqueue(vec![5])
        );
        assert_eq!(routes.arriving(), 0, "the arrival was counted out");
    }

    #[test]
    fn a_unit_created_here_takes_what_waited_for_its_lookup_first() {
        let mut routes = Routes::default();
        let (id, me, old) = (room("room"), node("n1"), node("n2"));
        assert_eq!(routes.route(&id, 1, &me), Routed::LookUp);
        assert_eq!(routes.route(&id, 2, &me), Routed::Waits);
        assert_eq!(routes.hosted(&id), [1, 2]);
        // The lookup's answer finds nothing left to send.
        assert!(routes.resolved(&id).is_empty());
        routes.hint(id.clone(), old, &me);
        assert!(routes.hosted(&id).is_empty(), "a known owner is forgotten");
        assert!(routes.get(&id).is_none());
    }

    #[test]
    fn an_arrival_whose_unit_left_again_waits_for_a_lookup() {
        let mut routes = Routes::default();
        let (me, source, third) = (node("n3"), node("n1"), node("n2"));
        routes.hint(room("a"), third.clone(), &me);
        assert_eq!(routes.arrive(&room("a"), &source), Arrival::Fence(third));
        routes.hold_if_arriving(&room("a")).expect("held").push(1);
        assert_eq!(routes.end_switch(room("a"), false), Switched::LookUp);
        assert_eq!(routes.arriving(), 0);
        assert_eq!(routes.resolved(&room("a")), [1]);
    }

    #[test]
    fn a_lookup_that_ends_during_a_switch_joins_what_the_switch_holds() {
        let mut routes = Routes::default();
        let (id, me, n1, n2) = (room("room"), node("n3"), node("n1"), node("n2"));
        routes.hint(id.clone(), n1.clone(), &me);
        routes.hint(id.clone(), n2.clone(), &me);
        assert_eq!(routes.route(&id, 3, &me), Routed::Waits);
        assert!(routes.settle(id.clone(), n1, vec![1, 2]).is_empty());
        assert_eq!(
            routes.end_switch(id, false),
            Switched::Send(n2, vec![1, 2, 3])
        );
    }
}
