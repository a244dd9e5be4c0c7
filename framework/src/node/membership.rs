//! Who is in the cluster: each node keeps its owner lease alive, publishes its descriptor, and
//! learns its peers (and dials them) from the descriptors of nodes whose lease is live.

use std::time::Duration;

use super::handle::Node;
use crate::cluster::authority::{NODE_PREFIX, NodeDescriptor, node_key};
use crate::cluster::frames::Frame;
use crate::cluster::witness::{Lapsed, Verdict};
use crate::ids::NodeId;
use crate::store::{Condition, Lease, Op, StoreError};
use ferry_core::lease::{self, HeldLease, Retake};

/// The most descriptors read per page when learning peers.
const PAGE: usize = 256;

impl Node {
    /// This node's descriptor as it stands now.
    fn descriptor(&self) -> NodeDescriptor {
        let config = self.config();
        let mut factories: Vec<String> = self
            .core
            .factories_names()
            .map(ToString::to_string)
            .collect();
        factories.sort();
        NodeDescriptor {
            node: config.id.clone(),
            mesh_addr: self.mesh_addr(),
            app_version: config.app_version.clone(),
            state: self.state(),
            capacity: config.capacity,
            units: self.unit_count() as u64,
            weight: config.weight,
            factories,
            lease_generation: self.core.ownership.lease.lock().generation,
            peers: self.core.cluster.witness.peers(),
        }
    }

    /// Publishes this node's descriptor, rereads every node's, and dials new peers.
    ///
    /// A node whose lease has lapsed is taken for dead only if the mesh confirms it (see
    /// `cluster::witness`); until then it is suspected: it stays a mesh peer, and its units are
    /// left alone. Runs on its own every `refresh`; call it to learn of a new node at once.
    pub async fn refresh_membership(&self) -> Result<(), StoreError> {
        let read_at = tokio::time::Instant::now();
        self.publish().await?;
        let mut live = Vec::new();
        let mut lapsed = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .store()
                .scan(NODE_PREFIX, after.as_deref(), PAGE)
                .await?;
            for (key, value) in page.items {
                let Ok(descriptor) = NodeDescriptor::decode(&key, &value.value) else {
                    tracing::warn!(%key, "undecodable node descriptor skipped");
                    continue;
                };
                let lease = self.store().lease_of(&descriptor.node).await?;
                if lease.is_some_and(|l| l.generation == descriptor.lease_generation) {
                    live.push(descriptor);
                } else if descriptor.node != *self.id() {
                    lapsed.push((descriptor, value.version));
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let peers: Vec<NodeId> = live
            .iter()
            .map(|d| d.node.clone())
            .chain(lapsed.iter().map(|(d, _)| d.node.clone()))
            .filter(|n| n != self.id())
            .collect();
        let versions: Vec<Lapsed> = lapsed
            .iter()
            .map(|(d, version)| Lapsed {
                node: d.node.clone(),
                version: *version,
                generation: d.lease_generation,
                counts_on_me: d.peers.contains(self.id()),
            })
            .collect();
        let verdicts = self.core.cluster.witness.read(
            read_at,
            &peers,
            &versions,
            &self.config().witness_times(),
            self.core.links.mesh.is_some(),
        );
        let mut dead = Vec::new();
        let mut suspected = Vec::new();
        // The nodes still here: live, or lapsed without the mesh's confirmation.
        let mut present = live.clone();
        for ((descriptor, _), (_, verdict)) in lapsed.into_iter().zip(verdicts) {
            match verdict {
                Verdict::Dead => dead.push(descriptor.node),
                Verdict::Suspected => {
                    tracing::warn!(node = %descriptor.node, "lease lapsed but the mesh does not confirm the node stopped: its units are left alone");
                    suspected.push(descriptor.node.clone());
                    present.push(descriptor);
                }
            }
        }
        // Nodes present at the last read (live or suspected) that are not any more.
        let departed: Vec<NodeId> = {
            let view = self.core.cluster.view.read();
            let suspected = self.core.cluster.suspected.read();
            view.iter()
                .map(|d| &d.node)
                .chain(suspected.iter())
                .filter(|n| *n != self.id() && !present.iter().any(|l| l.node == **n))
                .cloned()
                .collect()
        };
        if let Some(mesh) = &self.core.links.mesh {
            let known: Vec<_> = mesh.peers();
            let seeds = self
                .config()
                .mesh
                .as_ref()
                .map_or(&[][..], |m| &m.seeds[..]);
            let seed_addr =
                |node: &NodeId| seeds.iter().find(|(n, _)| n == node).map(|(_, addr)| *addr);
            // A peer learned from the store goes once it is taken for dead. A seed was configured:
            // it is declared gone like any peer once it was seen and is gone, then dialled afresh at
            // its configured address, for when it comes back.
            let gone = known.iter().filter(|p| {
                !present.iter().any(|d| d.node == p.node)
                    && (seed_addr(&p.node).is_none() || departed.contains(&p.node))
            });
            for gone in gone {
                tracing::info!(peer = %gone.node, "peer left the cluster");
                // One that was here and left, or was taken for dead, never links again under
                // this incarnation; one the store never showed may be joining yet.
                if departed.contains(&gone.node) {
                    mesh.forget_peer(&gone.node);
                } else {
                    mesh.remove_peer(&gone.node);
                }
                self.core.links.router.forget_node(&gone.node);
                self.peer_gone(&gone.node);
                if let Some(addr) = seed_addr(&gone.node)
                    && let Err(error) = mesh.add_peer(gone.node.clone(), addr)
                {
                    tracing::warn!(peer = %gone.node, %error, "seed not dialled again");
                }
            }
            for peer in &present {
                let (Some(addr), true) = (peer.mesh_addr, peer.node != *self.id()) else {
                    continue;
                };
                let current = known.iter().find(|p| p.node == peer.node);
                if current.is_none_or(|p| p.addr != Some(addr))
                    && let Err(error) = mesh.add_peer(peer.node.clone(), addr)
                {
                    tracing::warn!(peer = %peer.node, %error, "peer not added");
                }
            }
        }
        // A node declared gone that is back (restarted under its id) may be routed to again.
        self.core
            .links
            .router
            .present(present.iter().map(|d| &d.node));
        // Moves from a node that is gone will never get their cutover: give their copies up now.
        self.give_up_staged_from_departed(&present);
        *self.core.cluster.view.write() = live;
        self.standby_view_changed();
        // Sessions bound to Actors of a departed node bind them again once they are rebuilt.
        if let Some(hub) = &self.core.sessions {
            for gone in &departed {
                hub.owner_left(self, gone);
            }
        }
        *self.core.cluster.suspected.write() = suspected;
        *self.core.cluster.dead.write() = dead;
        Ok(())
    }

    /// The live nodes as last read, this one included.
    pub fn cluster_view(&self) -> Vec<NodeDescriptor> {
        self.core.cluster.view.read().clone()
    }

    /// Waits until the mesh link to `peer` is up.
    pub async fn wait_peer_ready(
        &self,
        peer: &crate::ids::NodeId,
    ) -> Result<(), crate::mesh::MeshError> {
        match &self.core.links.mesh {
            Some(mesh) => mesh.wait_ready(peer).await,
            None => Err(crate::mesh::MeshError::UnknownPeer(peer.clone())),
        }
    }

    /// Starts the tasks that renew the lease, probe the peers and refresh membership until
    /// shutdown.
    pub(crate) fn spawn_keepers(&self) {
        let node = self.clone();
        tokio::spawn(async move { node.keep_lease().await });
        let node = self.clone();
        tokio::spawn(async move { node.keep_membership().await });
        if self.core.links.mesh.is_some() {
            let node = self.clone();
            tokio::spawn(async move { node.keep_probing().await });
        }
        // Only a node whose rooms may keep a standby (or hold one) pays for looking after them.
        let factories = &self.core.units.factories;
        if factories.values().any(|f| f.info().standby.keeps_standby()) {
            tokio::spawn(self.clone().keep_standbys());
            tokio::spawn(self.clone().send_gathered());
        }
    }

    /// Renews the owner lease every third of its TTL. The store counts a renewal from when it
    /// arrives, which is after it was sent: so the lease is certainly held until the send plus the
    /// TTL. Past that, turns run only while the mesh vouches for this node (`Node::fenced`).
    ///
    /// A lease the store let lapse while it could not be reached is taken again, as long as no
    /// other process took it meanwhile and no node may have taken this node for dead.
    async fn keep_lease(self) {
        let ttl = self.config().lease_ttl;
        let every = ttl / 3;
        let clock = &self.core.ownership.lease_clock;
        // Acquisitions since the lease was lost whose answer did not come: each may have landed.
        let mut unanswered = 0;
        loop {
            tokio::select! {
                () = self.core.stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            if self.fenced() {
                return;
            }
            let lease = self.core.ownership.lease.lock().clone();
            let sent = tokio::time::Instant::now();
            let renewed = tokio::select! {
                () = self.core.stop.cancelled() => return,
                renewed = self.store().renew_lease(&lease) => renewed,
            };
            match renewed {
                Ok(()) => {
                    clock.renewed(sent + ttl);
                    unanswered = 0;
                }
                Err(StoreError::LeaseLost { .. }) => {
                    if let Err(why) = self.take_lease_again(&lease, &mut unanswered).await {
                        self.fence(&why);
                        return;
                    }
                }
                // Tried again in a third of the TTL; the lease clock still runs meanwhile.
                Err(error) => tracing::warn!(%error, "owner lease not renewed"),
            }
        }
    }

    /// After the store said the lease is gone: takes a new one if nobody else holds this node id
    /// and this node may still run. The new lease counts only once the descriptor that names it
    /// is written: a recovery of this node's units is gated on the descriptor it read, so it
    /// cannot win after that write. `Err` says why this node must stop instead.
    ///
    /// An acquisition whose answer was lost may have landed: the lease found next is this
    /// process's own if it names this process as holder, and `unanswered` counts such attempts so
    /// that the generation each may have used is not taken for another process's.
    async fn take_lease_again(&self, lost: &Lease, unanswered: &mut u64) -> Result<(), String> {
        let taken = || format!("another process took the lease of node {}", self.id());
        let ttl = self.config().lease_ttl;
        let found = match self.store().lease_of(self.id()).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, "owner lease lost; whether it was taken is not known yet");
                return Ok(());
            }
        };
        let sent = tokio::time::Instant::now();
        let held = found.as_ref().map(|current| HeldLease {
            generation: current.generation,
            holder: current.holder,
        });
        let lease = match (lease::after_lost(lost.holder, lost.generation, held), found) {
            (Retake::TakenByAnother, _) => return Err(taken()),
            // Renewed first, so that the lease clock counts from a call whose send time is known.
            (Retake::AlreadyOurs, Some(current)) => {
                if let Err(error) = self.store().renew_lease(&current).await {
                    tracing::warn!(%error, "owner lease not taken again yet");
                    return Ok(());
                }
                current
            }
            _ => match self
                .store()
                .acquire_lease(self.id(), lost.holder, ttl)
                .await
            {
                Ok(lease)
                    if lease::acquired_in_turn(lost.generation, *unanswered, lease.generation) =>
                {
                    lease
                }
                Ok(_) => return Err(taken()),
                Err(error) => {
                    *unanswered += 1;
                    tracing::warn!(%error, "owner lease not taken again yet");
                    return Ok(());
                }
            },
        };
        *unanswered = 0;
        *self.core.ownership.lease.lock() = lease;
        let published = self.publish().await;
        if self.fenced() {
            return Err("the lease was taken again too late".to_owned());
        }
        match published {
            Ok(_) => {
                self.core.ownership.lease_clock.renewed(sent + ttl);
                tracing::warn!(node = %self.id(), "owner lease lapsed while the store could not be reached; taken again");
            }
            Err(error) => tracing::warn!(%error, "descriptor not written with the new lease yet"),
        }
        Ok(())
    }

    /// Probes every peer, every probe period, so that each can vouch for this node (and this
    /// node for them); stops running turns once no longer vouched for.
    async fn keep_probing(self) {
        let every = self.config().probe_every();
        loop {
            tokio::select! {
                () = self.core.stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            let stamp = self.core.cluster.witness.stamp();
            let generation = self.core.ownership.lease.lock().generation;
            for peer in self.core.cluster.witness.peers() {
                // A peer that cannot be sent to does not answer: that is what the witness counts.
                let _ = self.mesh_send(&peer, Frame::Probe { stamp, generation });
            }
            // Checked here too, so that the node stops (and says so) on time even with no turn due.
            if self.fenced() {
                return;
            }
        }
    }

    /// Answers a peer's probe, after counting it among the peers that must vouch for this node.
    /// A peer this node has taken for dead is told so, and not vouched for.
    pub(crate) fn answer_probe(&self, from: &NodeId, stamp: u64, generation: u64) {
        let vouched = self.core.cluster.witness.probed_by(from, generation);
        let running = !self.fenced();
        let answer = Frame::ProbeAnswer {
            stamp,
            running,
            vouched,
        };
        let _ = self.mesh_send(from, answer);
    }

    /// Takes in a peer's answer to a probe; stops at once if the peer took this node for dead.
    pub(crate) fn probe_answered(&self, from: &NodeId, stamp: u64, running: bool, vouched: bool) {
        if vouched {
            self.core.cluster.witness.answered(from, stamp, running);
        } else {
            self.fence(&format!("node {from} has taken this node for dead"));
        }
    }

    async fn keep_membership(self) {
        let every = self.config().refresh.max(Duration::from_millis(10));
        let probe_every = self.config().probe_every();
        let meshed = self.core.links.mesh.is_some();
        let mut first = true;
        let mut last_sweep = tokio::time::Instant::now();
        // After a failed read, the next waits the regular pace: a store in trouble is not pressed.
        let mut retry_at = last_sweep;
        loop {
            // Woken every probe period: the witness says when a read is due (sooner while a peer
            // is silent, so that a crashed one is found soon after it can be).
            tokio::select! {
                () = self.core.stop.cancelled() => return,
                () = tokio::time::sleep(probe_every.min(every)) => {}
            }
            let now = tokio::time::Instant::now();
            if now < retry_at
                || !self
                    .core
                    .cluster
                    .witness
                    .read_due(every, probe_every, meshed)
            {
                continue;
            }
            if let Err(error) = self.refresh_membership().await {
                tracing::warn!(%error, "membership not refreshed");
                retry_at = now + every;
                continue;
            }
            // The coordinator recovers dead nodes' units (while any record names one), once after
            // it starts (the whole cluster may have cold-started with remembered units), and on a
            // slower sweep for orphans no dead node points at (force-stopped units).
            let pending = !self.core.cluster.dead.read().is_empty();
            let sweep = last_sweep.elapsed() >= self.config().recovery_sweep;
            if (pending || first || sweep) && self.is_coordinator() {
                first = false;
                last_sweep = tokio::time::Instant::now();
                if let Err(error) = self.recover_now().await {
                    tracing::warn!(%error, "recovery pass incomplete; the next one retries");
                }
            }
            if !self.is_coordinator() {
                self.check_recovery_can_run();
            }
        }
    }

    /// Writes this node's descriptor as it is now; nothing once the node has stopped, so that a
    /// write cannot put back a descriptor the shutdown withdrew.
    async fn publish(&self) -> Result<(), StoreError> {
        let _publishing = self.core.cluster.publishing.lock().await;
        if self.core.stop.is_cancelled() {
            return Ok(());
        }
        let me = self.descriptor();
        self.store()
            .batch(Vec::new(), vec![Op::put(node_key(self.id()), me.encode())])
            .await?;
        Ok(())
    }

    /// Removes this node's descriptor and releases its lease (at shutdown, once the node has
    /// stopped: a descriptor write under way is waited for, and no later one starts).
    pub(crate) async fn withdraw(&self) {
        let _publishing = self.core.cluster.publishing.lock().await;
        let key = node_key(self.id());
        if let Ok(Some(v)) = self.store().get(&key).await {
            let _ = self
                .store()
                .batch(
                    vec![Condition::version(key.clone(), v.version)],
                    vec![Op::delete(key)],
                )
                .await;
        }
        let lease = self.core.ownership.lease.lock().clone();
        if let Err(error) = self.store().release_lease(&lease).await {
            tracing::warn!(%error, "lease not released; it expires on its own");
        }
    }
}
