//! Routing by id across the cluster: a route cache, store lookups on a miss, forwarding with a hop
//! bound, activation of Instance Spots, and route fences.
//!
//! What the cache decides (where a message goes, what waits behind a lookup, a switch, an arrival
//! or an undecided move from here, and in which order it leaves) is the core's
//! [`ferry_core::routes`]; this carries it out: store lookups, fences, mesh sends and lane queues.

use std::any::TypeId;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ferry_core::routes::{Arrival, Routed, Switched, lookup_needs_confirming};

use super::handle::Node;
use super::hosted::Entry;
use crate::cluster::frames::{Deliver, Frame, MAX_HOPS};
use crate::error::MessageError;
use crate::ids::{NodeId, UnitId};
use crate::mesh::MeshError;
use crate::unit::envelope::{Envelope, Payload, ReplyTo};
use crate::unit::factory::FactoryKind;

/// How many times a route lookup reads the store before it fails what waits for it: a store error
/// is often a blip (a reconnect, a failover), and what waits would otherwise be lost to it.
const LOOKUP_TRIES: u32 = 4;

/// The wait before the first retry of a failed lookup; it doubles on each retry (25, 50, 100 ms).
const LOOKUP_BACKOFF: Duration = Duration::from_millis(25);

/// How long a route switch waits for its fence before it sends what it held anyway. The fence
/// ends sooner, with an error, when the peer it went to leaves or restarts; this only bounds a
/// path that stays up but never delivers (a partition that outlasts membership's verdict), where
/// giving up forfeits the order of what was held.
const FENCE_WAIT: Duration = Duration::from_secs(60);

/// Where [`Node::route`] left a message.
enum Step {
    /// Handed to the mesh, or queued behind what waits for the unit here.
    Done,
    /// Its unit is hosted here now.
    Here(Deliver),
    /// The mesh gave it back.
    Failed(Deliver, MeshError),
    /// A lookup of its unit's owner is to start.
    LookUp,
}

/// A delivery about to be tried once more: one more hop.
fn forwarded(mut deliver: Deliver) -> Deliver {
    deliver.hops = deliver.hops.saturating_add(1);
    deliver
}

impl Node {
    /// Where this node believes a unit it does not host lives, if it has a route cached.
    pub fn cached_route(&self, id: &UnitId) -> Option<NodeId> {
        self.core
            .links
            .router
            .with(id, |routes| routes.cached(id).cloned())
    }

    /// How many tells this node gave up since it started because the location store kept failing
    /// while it looked up where their unit lives (each is also logged at `warn`).
    pub fn tells_dropped_on_lookup(&self) -> u64 {
        self.core.links.router.lookup_drops.load(Ordering::Relaxed)
    }

    /// Sends a message for a unit this node does not host towards its owner, or queues it behind
    /// what waits for the unit here.
    ///
    /// The path is chosen and the message handed to it in one step: under the unit's directory
    /// shard, so no registration here comes between (a unit that arrived meanwhile takes it in
    /// its queue), and under its route, so no switch comes between.
    pub(crate) fn route(&self, deliver: Deliver) {
        let id = deliver.to.clone();
        let step = self.core.units.directory.with(&id, |entry| {
            if entry.is_some() {
                return Step::Here(deliver);
            }
            self.core
                .links
                .router
                .with(&id, |routes| match routes.route(&id, deliver, self.id()) {
                    Routed::Send(owner, deliver) => match self.try_deliver(&owner, deliver) {
                        None => Step::Done,
                        Some((retry, error)) => Step::Failed(retry, error),
                    },
                    Routed::Waits => Step::Done,
                    Routed::LookUp => Step::LookUp,
                })
        });
        match step {
            Step::Done => {}
            Step::Here(deliver) => {
                if let Some(mut back) = self.push_deliver(deliver) {
                    // Gone again already: one more hop, by its route.
                    back.hops = back.hops.saturating_add(1);
                    if back.hops > MAX_HOPS {
                        self.past_hops(back, |id| MessageError::UnknownId { id });
                    } else {
                        self.route(back);
                    }
                }
            }
            Step::Failed(retry, error) => self.retry_deliver(retry, error),
            Step::LookUp => {
                tokio::spawn(self.clone().resolve(id));
            }
        }
    }

    /// Queues an encoded message at the lane here that hosts its unit; gives it back when none
    /// does.
    fn push_deliver(&self, deliver: Deliver) -> Option<Deliver> {
        let Deliver {
            to,
            payload,
            session,
            reply,
            activate,
            origin,
            hops,
        } = deliver;
        let envelope = Envelope {
            to,
            payload: Payload::from_wire(payload, session.map(|op| *op)),
            reply,
        };
        let envelope = self.push_or_refuse(envelope, "tell refused")?;
        let (payload, session) = match envelope.payload {
            Payload::Encoded(payload) => (payload, None),
            Payload::Session(op) => (bytes::Bytes::new(), Some(Box::new(op))),
            _ => return None,
        };
        Some(Deliver {
            to: envelope.to,
            payload,
            session,
            reply: envelope.reply,
            activate,
            origin,
            hops,
        })
    }

    /// Sends an already-encoded message, or a session change, to a unit: through `via` when the
    /// sender knows which node to hand it to (a gateway sends a bound Actor's inputs to the node
    /// it last heard runs it, never by a route that could change under a stream of inputs), else
    /// by the route cache. A node that does not host the unit any more forwards it by its routes.
    pub(crate) fn send_encoded(
        &self,
        to: UnitId,
        payload: Payload,
        reply: Option<ReplyTo>,
        via: Option<&NodeId>,
    ) {
        let mut envelope = Envelope {
            to,
            payload,
            reply: reply.map(Box::new),
        };
        let here = via.is_none_or(|v| v == self.id());
        if here {
            let Some(not_here) = self.push_or_refuse(envelope, "encoded message refused") else {
                return;
            };
            envelope = not_here;
        }
        let Envelope { to, payload, reply } = envelope;
        let Ok((payload, session)) = payload.into_wire(|p| {
            p.into_encoded()
                .map_err(|other| other.type_name().to_owned())
        }) else {
            return;
        };
        let deliver = Deliver {
            to,
            payload,
            session: session.map(Box::new),
            reply,
            activate: None,
            origin: self.id().clone(),
            hops: 0,
        };
        match via {
            Some(owner) if !here => self.send_deliver(owner, deliver),
            _ => self.route(deliver),
        }
    }

    /// Hands a message to the mesh for `owner`; if the owner is unreachable, looks it up again.
    fn send_deliver(&self, owner: &NodeId, deliver: Deliver) {
        if let Some((retry, error)) = self.try_deliver(owner, deliver) {
            self.retry_deliver(retry, error);
        }
    }

    /// Hands a message to the mesh; on failure gives it back (one hop further) with the error.
    /// Takes no lock, so it may run under a router shard's lock.
    fn try_deliver(&self, owner: &NodeId, deliver: Deliver) -> Option<(Deliver, MeshError)> {
        let request = deliver
            .reply
            .as_ref()
            .filter(|r| r.node == *self.id())
            .map(|r| (r.request, deliver.to.clone()));
        let Some(mesh) = &self.core.links.mesh else {
            let error = MeshError::UnknownPeer(owner.clone());
            return Some((forwarded(deliver), error));
        };
        match mesh.send_or_give_back(owner, Frame::Deliver(deliver)) {
            Ok(()) => {
                if let Some((request, to)) = request {
                    self.core.units.replies.sent(request, owner, &to);
                }
                None
            }
            Err((frame, error)) => {
                let Frame::Deliver(retry) = frame else {
                    return None;
                };
                tracing::debug!(%owner, %error, unit = %retry.to, "owner unreachable; looking it up again");
                Some((forwarded(retry), error))
            }
        }
    }

    /// After a failed hand-over to the mesh: look the owner up again (after learning of new
    /// nodes, if the owner was unknown), or give up past the hop bound. Call it with no lock held.
    fn retry_deliver(&self, retry: Deliver, error: MeshError) {
        // The target of a move from here cannot be reached: the move's end says where it goes.
        let id = retry.to.clone();
        let Some(retry) = self
            .core
            .links
            .router
            .with(&id, |routes| routes.hold_for_move(&id, retry))
        else {
            return;
        };
        if retry.hops > MAX_HOPS {
            let reason = error.to_string();
            self.past_hops(retry, |id| MessageError::Unreachable { id, reason });
            return;
        }
        self.core
            .links
            .router
            .with(&id, |routes| routes.forget(&id));
        if matches!(error, MeshError::UnknownPeer(_)) {
            // A node that joined since the last membership read: learn of it and dial it first.
            let node = self.clone();
            tokio::spawn(async move {
                if let Err(error) = node.refresh_membership().await {
                    tracing::debug!(%error, "membership not refreshed");
                }
                node.route(retry);
            });
        } else {
            self.route(retry);
        }
    }

    /// The move of `id` from here committed: what waited here for its end leaves for the target,
    /// under the route's lock, so that a message reaching this node meanwhile leaves after it.
    /// Their senders on other nodes are told where the unit runs now, as for any message this node
    /// forwards.
    pub(crate) fn moved_away(&self, id: &UnitId) {
        let mut senders = Vec::new();
        let mut target = None;
        let failed: Vec<(Deliver, MeshError)> = self.core.links.router.with(id, |routes| {
            let held = routes.moved(id);
            let Some(owner) = routes.cached(id).cloned() else {
                return Vec::new();
            };
            for deliver in &held {
                if deliver.origin != *self.id() && !senders.contains(&deliver.origin) {
                    senders.push(deliver.origin.clone());
                }
            }
            let failed = held
                .into_iter()
                .filter_map(|d| self.try_deliver(&owner, d))
                .collect();
            target = Some(owner);
            failed
        });
        for (retry, error) in failed {
            self.retry_deliver(retry, error);
        }
        let Some(owner) = target else {
            return;
        };
        for sender in senders.into_iter().filter(|s| *s != owner) {
            let hint = Frame::RouteHint {
                id: id.clone(),
                owner: owner.clone(),
            };
            let _ = self.mesh_send(&sender, hint);
        }
    }

    /// Sends what waited for a lookup to its owner, in order, and records the route, under the
    /// shard's lock (so later messages queue behind); failures are retried after it.
    ///
    /// Messages that queued behind a newer lookup of the same id, started once this one had taken
    /// its queue, leave right after it; that lookup then finds the route known and keeps it.
    fn flush(&self, id: UnitId, owner: NodeId, waiting: Vec<Deliver>) {
        let failed: Vec<(Deliver, MeshError)> =
            self.core.links.router.with(&id.clone(), |routes| {
                routes
                    .settle(id, owner.clone(), waiting)
                    .into_iter()
                    .filter_map(|d| self.try_deliver(&owner, d))
                    .collect()
            });
        for (retry, error) in failed {
            self.retry_deliver(retry, error);
        }
    }

    /// Reads a unit's record for a route lookup, retrying store errors with a short backoff;
    /// gives back the last error and the number of tries when every try failed.
    async fn read_route(
        &self,
        id: &UnitId,
    ) -> Result<Option<crate::cluster::authority::UnitRecord>, (crate::store::StoreError, u32)>
    {
        let mut backoff = LOOKUP_BACKOFF;
        let mut tries = 1;
        loop {
            match self.read_record(id).await {
                Ok(found) => return Ok(found),
                Err(error) if tries >= LOOKUP_TRIES => return Err((error, tries)),
                Err(error) => {
                    tracing::debug!(unit = %id, %error, tries, "route lookup failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    tries += 1;
                }
            }
        }
    }

    /// A peer says who runs a unit. Switching to it at once could let a new message overtake an
    /// earlier one still on the old path (forwarded by a former owner), so when the path changes,
    /// a fence goes along the old one and new messages wait for it to run at the unit.
    pub(crate) fn on_route_hint(&self, id: UnitId, owner: NodeId) {
        if self.core.links.router.is_gone(&owner) {
            return;
        }
        let hinted = self
            .core
            .links
            .router
            .with(&id, |routes| routes.hint(id.clone(), owner, self.id()));
        if let Some(old) = hinted {
            self.send_fence(id, old);
        }
    }

    /// Hands a unit that starts running here (created, rebuilt, promoted) what this node sent it
    /// before and still holds (waiting for a lookup, a switch or an arrival), ahead of what is sent
    /// to it from now on.
    pub(crate) fn deliver_held(&self, id: &UnitId, entry: &Entry) {
        for deliver in self.core.links.router.with(id, |routes| routes.hosted(id)) {
            self.enqueue_deliver(entry, deliver);
        }
    }

    /// A moved unit is being registered here from `source` (its directory shard is locked by the
    /// caller, `entry` is its new route): settles what this node sent it before. Messages that
    /// waited for a lookup are queued at the unit now, first.
    pub(crate) fn arrive(&self, id: &UnitId, source: &NodeId, entry: &Entry) {
        match self
            .core
            .links
            .router
            .with(id, |routes| routes.arrive(id, source))
        {
            Arrival::Clear => {}
            Arrival::Waiting(waiting) => {
                for deliver in waiting {
                    self.enqueue_deliver(entry, deliver);
                }
            }
            Arrival::Fence(via) => self.send_fence(id.clone(), via),
        }
    }

    /// Sends a fence for `id` along `via`, after everything this node sent there; when it has run
    /// at the unit (or after [`FENCE_WAIT`]), the switch or arrival ends.
    fn send_fence(&self, id: UnitId, via: NodeId) {
        let Some(mut waiting) = self.core.units.replies.open() else {
            tracing::debug!(unit = %id, "no request slot for a fence; switching the route at once");
            self.end_switch(id);
            return;
        };
        let fence = Deliver {
            to: id.clone(),
            payload: bytes::Bytes::new(),
            session: Some(Box::new(crate::session::SessionOp::Fence)),
            reply: Some(Box::new(ReplyTo {
                node: self.id().clone(),
                request: waiting.request,
            })),
            activate: None,
            origin: self.id().clone(),
            hops: 0,
        };
        // The same link as the earlier messages, so it comes after them.
        self.send_deliver(&via, fence);
        let node = self.clone();
        tokio::spawn(async move {
            if tokio::time::timeout(FENCE_WAIT, &mut waiting.answer)
                .await
                .is_err()
            {
                tracing::warn!(unit = %id, %via, "a route fence did not return in {FENCE_WAIT:?}; sending what it held");
            }
            node.end_switch(id);
        });
    }

    /// Ends a route switch or an arrival: the held messages leave for the hinted owner, or join
    /// the unit's queue here, in order, under the locks (so later messages queue behind). An
    /// arrived unit that left again meanwhile is looked up, with what was held waiting for it.
    fn end_switch(&self, id: UnitId) {
        let failed: Vec<(Deliver, MeshError)> = {
            // The directory's lock first, as a handover takes them.
            let directory = self.core.units.directory.lock(&id);
            let entry = directory.get(&id);
            self.core.links.router.with(&id, |routes| {
                match routes.end_switch(id.clone(), entry.is_some()) {
                    Switched::Send(owner, held) => held
                        .into_iter()
                        .filter_map(|d| self.try_deliver(&owner, d))
                        .collect(),
                    Switched::Enqueue(held) => {
                        if let Some(entry) = entry {
                            for deliver in held {
                                self.enqueue_deliver(entry, deliver);
                            }
                        }
                        Vec::new()
                    }
                    Switched::LookUp => {
                        tokio::spawn(self.clone().resolve(id.clone()));
                        Vec::new()
                    }
                    Switched::Nothing => Vec::new(),
                }
            })
        };
        for (retry, error) in failed {
            self.retry_deliver(retry, error);
        }
    }

    /// Holds a message this node sends to a unit that arrived here and waits for its fence;
    /// gives it back when the unit does not wait (it goes straight to the unit, or by a route).
    pub(crate) fn hold_if_arriving(
        &self,
        envelope: Envelope,
        msg_type: TypeId,
        encode: impl FnOnce(Payload) -> Result<bytes::Bytes, String>,
    ) -> Result<Option<Envelope>, MessageError> {
        let to = envelope.to.clone();
        self.core.units.directory.with(&to, |entry| {
            self.core.links.router.with(&to, |routes| {
                let Some(held) = routes.hold_if_arriving(&to) else {
                    return Ok(Some(envelope));
                };
                let Envelope { to, payload, reply } = envelope;
                if let Some(entry) = entry {
                    entry.check_type(&to, msg_type, &payload)?;
                }
                let payload = encode(payload).map_err(|reason| MessageError::Codec {
                    id: to.clone(),
                    reason,
                })?;
                held.push(Deliver {
                    to,
                    payload,
                    session: None,
                    reply,
                    activate: None,
                    origin: self.id().clone(),
                    hops: 0,
                });
                Ok(None)
            })
        })
    }

    /// Queues an encoded message at the unit `entry` routes to; a request whose lane has ended
    /// gets its terminal.
    pub(crate) fn enqueue_deliver(&self, entry: &Entry, deliver: Deliver) {
        let queued = Envelope {
            to: entry.slot,
            payload: Payload::from_wire(deliver.payload, deliver.session.map(|op| *op)),
            reply: deliver.reply,
        };
        if let Err(refused) = entry.lane.data.send(queued)
            && let Some(reply_to) = refused.reply
        {
            self.complete(&reply_to, Err(MessageError::UnitStopped { id: deliver.to }));
        }
    }

    /// Looks up a unit's owner in the store and sends what waited for it.
    async fn resolve(self, id: UnitId) {
        let mut found = self.read_route(&id).await;
        if let Ok(Some(record)) = &found
            && lookup_needs_confirming(&record.owner, self.id(), self.hosts(&id))
        {
            found = self.read_record_back(&id).await.map_err(|error| (error, 1));
        }
        if let Ok(Some(record)) = &found
            && record.owner != *self.id()
            && !self.core.links.router.is_gone(&record.owner)
        {
            // What waits is taken and sent under one lock: a newer lookup cannot take what queued
            // meanwhile and send it first.
            self.flush(id, record.owner.clone(), Vec::new());
            return;
        }
        // Empty if someone learned the route meanwhile (it is kept), or a creation here took them.
        let waiting = self
            .core
            .links
            .router
            .with(&id, |routes| routes.resolved(&id));
        match found {
            Ok(Some(record)) if record.owner == *self.id() => {
                for deliver in waiting {
                    self.deliver_here(deliver);
                }
            }
            // Its node left the cluster (the one case left): not rebuilt yet. Nothing waits for a
            // dead node, and the next send looks again.
            Ok(Some(record)) => {
                tracing::debug!(unit = %id, owner = %record.owner, "the unit's node left the cluster; not rebuilt yet");
                for deliver in waiting {
                    let node = record.owner.clone();
                    match deliver.reply {
                        None if deliver.session.is_none() => {
                            self.tell_lost(&node, deliver.to, deliver.payload, deliver.origin);
                        }
                        _ => self.give_up(deliver, |id| MessageError::OwnerLeft { id, node }),
                    }
                }
            }
            Ok(None) => self.activate_or_drop(id, waiting).await,
            Err((error, attempts)) => {
                let (requests, tells): (Vec<Deliver>, Vec<Deliver>) =
                    waiting.into_iter().partition(|d| d.reply.is_some());
                // Counted before any request ends, so whoever hears of the failure sees the count.
                if !tells.is_empty() {
                    let tells = tells.len() as u64;
                    self.core
                        .links
                        .router
                        .lookup_drops
                        .fetch_add(tells, Ordering::Relaxed);
                    metrics::counter!("ferry_route_lookup_tells_dropped_total").increment(tells);
                    tracing::warn!(
                        unit = %id, %error, attempts, tells,
                        "tells dropped: the location store kept failing while their route was looked up"
                    );
                }
                for deliver in requests {
                    self.give_up(deliver, |id| MessageError::RouteLookupFailed {
                        id,
                        attempts,
                        reason: error.to_string(),
                    });
                }
            }
        }
    }

    /// No unit of that id exists: activate it if a message asks to, or answer that it is unknown.
    async fn activate_or_drop(&self, id: UnitId, waiting: Vec<Deliver>) {
        let Some(type_name) = waiting.iter().find_map(|d| d.activate.clone()) else {
            for deliver in waiting {
                self.give_up(deliver, |id| MessageError::UnknownId { id });
            }
            return;
        };
        let target = self
            .place_instance(&type_name)
            .unwrap_or_else(|| self.id().clone());
        if target != *self.id() {
            // That node activates it when the first of these arrives.
            self.flush(id, target, waiting);
            return;
        }
        self.activate_here(&type_name, id, waiting).await;
    }

    /// Activates an Instance Spot on this node (or finds it already exists) and delivers to it.
    async fn activate_here(&self, type_name: &str, id: UnitId, waiting: Vec<Deliver>) {
        let created = self
            .create_here(
                type_name,
                id.clone(),
                true,
                |k| k == FactoryKind::InstanceSpot,
                "instance spot",
            )
            .await;
        match created {
            Ok(_) if self.hosts(&id) => {
                for deliver in waiting {
                    self.deliver_here(deliver);
                }
            }
            // It exists on another node: follow the store.
            Ok(_) => {
                for mut deliver in waiting {
                    deliver.activate = None;
                    deliver.hops = deliver.hops.saturating_add(1);
                    self.route(deliver);
                }
            }
            Err(error) => {
                tracing::debug!(unit = %id, %error, "activation refused");
                for deliver in waiting {
                    self.give_up(deliver, |id| MessageError::UnknownId { id });
                }
            }
        }
    }

    /// Where a new Instance Spot of this type goes.
    fn place_instance(&self, type_name: &str) -> Option<NodeId> {
        let mut view = self.core.cluster.view.read().clone();
        if let Some(me) = view.iter_mut().find(|d| d.node == *self.id()) {
            me.units = self.unit_count() as u64;
        }
        crate::cluster::placement::place(&view, type_name, None)
    }

    /// Pushes a message onto a lane of this node, or answers that the unit is gone.
    fn deliver_here(&self, deliver: Deliver) {
        let reply = deliver.reply.clone();
        let id = deliver.to.clone();
        let envelope = Envelope {
            to: deliver.to,
            payload: Payload::from_wire(deliver.payload, deliver.session.map(|op| *op)),
            reply: deliver.reply,
        };
        match self.push(envelope, None) {
            Ok(None) => {}
            Ok(Some(_)) => {
                if let Some(reply_to) = reply {
                    self.complete(&reply_to, Err(MessageError::UnknownId { id }));
                }
            }
            Err(error) => {
                if let Some(reply_to) = reply {
                    self.complete(&reply_to, Err(error));
                }
            }
        }
    }

    /// Gives up a message that used every hop it was allowed (its unit kept moving, or its
    /// owner's link kept refusing it). A tell has no one to tell of its end: it is counted, and
    /// said where an operator looks.
    fn past_hops(&self, deliver: Deliver, error: impl FnOnce(UnitId) -> MessageError) {
        if deliver.reply.is_none() {
            metrics::counter!("ferry_tells_dropped_unreachable_total").increment(1);
            tracing::warn!(
                unit = %deliver.to, hops = deliver.hops,
                "tell dropped: its unit could not be reached in every hop it was allowed"
            );
        }
        self.give_up(deliver, error);
    }

    /// Ends a message that cannot be delivered: a request gets its terminal, a tell is dropped.
    fn give_up(&self, deliver: Deliver, error: impl FnOnce(UnitId) -> MessageError) {
        let error = error(deliver.to.clone());
        match deliver.reply {
            Some(reply_to) => self.complete(&reply_to, Err(error)),
            None => tracing::debug!(unit = %deliver.to, %error, "tell dropped"),
        }
    }

    /// A message arrived from a peer.
    pub(crate) fn on_deliver(&self, from: NodeId, deliver: Deliver) {
        let Some(mut deliver) = self.push_deliver(deliver) else {
            return;
        };
        deliver.hops = deliver.hops.saturating_add(1);
        if deliver.hops > MAX_HOPS {
            self.past_hops(deliver, |id| MessageError::UnknownId { id });
            return;
        }
        if let Some(type_name) = deliver.activate.clone() {
            // The sender placed the activation here.
            let node = self.clone();
            let id = deliver.to.clone();
            tokio::spawn(async move { node.activate_here(&type_name, id, vec![deliver]).await });
            return;
        }
        // Not here (any more): follow the route this node knows (a move points it), unless it
        // leads back where the message came from; then look the owner up again. For a unit whose
        // move from here has not ended, it waits for that end, whoever sent it.
        let id = deliver.to.clone();
        let Some(deliver) = self
            .core
            .links
            .router
            .with(&id, |routes| routes.arrived_elsewhere(&id, deliver, &from))
        else {
            return;
        };
        let node = self.clone();
        let origin = deliver.origin.clone();
        self.route(deliver);
        tokio::spawn(async move {
            if let Ok(Some(record)) = node.read_record(&id).await
                && record.owner != origin
                && origin != *node.id()
            {
                let _ = node.mesh_send(
                    &origin,
                    Frame::RouteHint {
                        id,
                        owner: record.owner,
                    },
                );
            }
        });
    }
}
