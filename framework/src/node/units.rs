//! Units on this node and in the store: creation (here or on a placed node), claims, rebuilds,
//! records, membership of spots, and stopping a unit.

use std::sync::Arc;

use bytes::Bytes;
use ferry_core::conditional::{ConditionalWrite, Settled};
use tokio::sync::oneshot;

use super::handle::Node;
use super::hosted::{Control, Entry};
use super::lane::Lane;
use crate::cluster::authority::{UnitRecord, remembered_key, unit_key};
use crate::cluster::frames::{Call, CreateAnswer, MemberAnswer};
use crate::error::UnitError;
use crate::ids::{ActorId, NodeId, ObjectGeneration, SpotId, UnitId};
use crate::store::{BatchOutcome, Condition, Op, StoreError, Versioned};
use crate::unit::factory::FactoryKind;
use crate::unit::lane::Owned;

/// How a unit is claimed in the store when it is built here.
pub(crate) enum Claim {
    /// A new unit: no record may exist (with `or_get`, an existing one is fine).
    New { or_get: bool },
    /// A recovery: the record must still be the one read from the dead owner, at this version,
    /// and the owner's descriptor as it was when the owner was taken for dead.
    Recover {
        version: u64,
        previous: UnitRecord,
        owner_descriptor: Option<u64>,
    },
    /// A unit an earlier process of this node id left: the record must still be the one read,
    /// at this version (it names this node, under an older lease generation).
    Adopt { version: u64, previous: UnitRecord },
}

impl Claim {
    /// The record a rebuild starts from (`None` for a new unit).
    fn previous(&self) -> Option<&UnitRecord> {
        match self {
            Claim::New { .. } => None,
            Claim::Recover { previous, .. } | Claim::Adopt { previous, .. } => Some(previous),
        }
    }
}

/// How many conditional writes of a record a membership change tries before it reports failure.
const RECORD_TRIES: usize = 8;

/// Which factory kinds a creation of this kind of id may use.
pub(crate) type KindCheck = fn(FactoryKind) -> bool;

impl Node {
    /// Creates a User Spot on a node chosen by placement; fails if one with that id exists.
    pub async fn create_spot(&self, type_name: &str, id: &SpotId) -> Result<(), UnitError> {
        self.create(type_name, UnitId::Spot(id.clone()), false)
            .await
            .map(|_| ())
    }

    /// Returns the User Spot with that id, creating it if there is none anywhere in the cluster.
    /// `Ok(true)` if this call created it. Two nodes asking at once get the same spot.
    pub async fn get_or_create_spot(
        &self,
        type_name: &str,
        id: &SpotId,
    ) -> Result<bool, UnitError> {
        self.create(type_name, UnitId::Spot(id.clone()), true).await
    }

    /// Creates a User Spot on a given node instead of where placement would put it (for locality,
    /// rebalancing tools and tests). Fails if one with that id exists anywhere.
    pub async fn create_spot_on(
        &self,
        node: &NodeId,
        type_name: &str,
        id: &SpotId,
    ) -> Result<(), UnitError> {
        self.create_at(node.clone(), type_name, UnitId::Spot(id.clone()), false)
            .await
            .map(|_| ())
    }

    /// Activates an Instance Spot on a given node (if it is not active anywhere yet) instead of
    /// waiting for a message to activate it where placement would. `Ok(true)` if this call did.
    pub async fn activate_on(
        &self,
        node: &NodeId,
        type_name: &str,
        id: &SpotId,
    ) -> Result<bool, UnitError> {
        let unit = UnitId::Spot(id.clone());
        let wanted: KindCheck = |k| k == FactoryKind::InstanceSpot;
        if node == self.id() {
            return self
                .create_here(type_name, unit, true, wanted, "instance spot")
                .await;
        }
        let call = Call::Activate {
            type_name: type_name.to_owned(),
            id: unit,
        };
        self.call::<CreateAnswer>(node, call).await?
    }

    /// Creates an Actor in this node's Entry Spot.
    pub async fn create_actor(&self, type_name: &str, id: &ActorId) -> Result<(), UnitError> {
        self.create(type_name, UnitId::Actor(id.clone()), false)
            .await
            .map(|_| ())
    }

    async fn create(&self, type_name: &str, id: UnitId, or_get: bool) -> Result<bool, UnitError> {
        self.serving().map_err(|state| UnitError::NotServing {
            state: state.to_string(),
        })?;
        if !self.store_reachable() {
            return Err(UnitError::StoreUnavailable {
                what: format!("creating {id}"),
                reason: "it has not confirmed this node's lease lately".to_owned(),
            });
        }
        let target = match id {
            // Actors start in the Entry Spot of the node that creates them.
            UnitId::Actor(_) => self.id().clone(),
            UnitId::Spot(_) => self.place(type_name)?,
        };
        self.create_at(target, type_name, id, or_get).await
    }

    async fn create_at(
        &self,
        target: NodeId,
        type_name: &str,
        id: UnitId,
        or_get: bool,
    ) -> Result<bool, UnitError> {
        let (wanted, kind) = kind_of(&id);
        if target == *self.id() {
            self.create_here(type_name, id, or_get, wanted, kind).await
        } else {
            let call = Call::Create {
                type_name: type_name.to_owned(),
                id,
                or_get,
            };
            self.call::<CreateAnswer>(&target, call).await?
        }
    }

    /// Picks the node for a new unit of `type_name` among the live nodes of the last membership read.
    fn place(&self, type_name: &str) -> Result<NodeId, UnitError> {
        let mut view = self.core.cluster.view.read().clone();
        if let Some(me) = view.iter_mut().find(|d| d.node == *self.id()) {
            me.units = self.unit_count() as u64;
            me.state = self.state();
        }
        if !view
            .iter()
            .any(|d| d.factories.iter().any(|f| f == type_name))
        {
            return Err(UnitError::UnknownType {
                kind: "spot".into(),
                type_name: type_name.to_owned(),
            });
        }
        crate::cluster::placement::place(&view, type_name, None).ok_or_else(|| {
            UnitError::NoCapacity {
                type_name: type_name.to_owned(),
            }
        })
    }

    /// Creates a unit on this node (or finds it exists); see [`Node::claim_here`].
    pub(crate) async fn create_here(
        &self,
        type_name: &str,
        id: UnitId,
        or_get: bool,
        wanted: KindCheck,
        kind: &'static str,
    ) -> Result<bool, UnitError> {
        self.claim_here(type_name, id, Claim::New { or_get }, wanted, kind)
            .await
    }

    /// Builds a unit on this node and claims it in the store: the lane is set up gated (arrivals
    /// queue, nothing runs), the store is asked to record this node as owner (if no one is, or, for a
    /// recovery, if the record is still the dead owner's), and only then the lane opens.
    /// `Ok(true)` if this call claimed it.
    pub(crate) async fn claim_here(
        &self,
        type_name: &str,
        id: UnitId,
        claim: Claim,
        wanted: KindCheck,
        kind: &'static str,
    ) -> Result<bool, UnitError> {
        let recovering = claim.previous().is_some();
        if recovering {
            self.give_up_staged(&id);
        }
        let or_get = matches!(claim, Claim::New { or_get: true });
        let factory = self
            .core
            .units
            .factories
            .get(type_name)
            .filter(|f| wanted(f.info().kind))
            .ok_or_else(|| UnitError::UnknownType {
                kind: kind.into(),
                type_name: type_name.to_owned(),
            })?;
        let lane = {
            let mut shard = self.core.units.directory.lock(&id);
            if let Some(existing) = shard.get(&id) {
                if recovering {
                    // A copy a move left here, on its way out: not the rebuilt unit.
                    return Err(UnitError::Unavailable {
                        what: format!("rebuilding {id}"),
                        reason: "a copy an unfinished move left on this node is still being \
                                 given up; the next recovery pass retries"
                            .to_owned(),
                    });
                }
                return existing_answer(id, &existing.factory.info().type_name, type_name, or_get);
            }
            // A factory that panics fails this creation, not the node.
            let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Arc::clone(factory).build_cell(&id)
            }));
            let cell = match built {
                Ok(Some(cell)) => cell,
                Ok(None) => {
                    return Err(UnitError::NotAllowed {
                        id: id.clone(),
                        reason: format!("factory {type_name:?} does not build this kind of unit"),
                    });
                }
                Err(_) => {
                    return Err(UnitError::NotAllowed {
                        id: id.clone(),
                        reason: format!("factory {type_name:?} panicked while building it"),
                    });
                }
            };
            let slot = self.core.units.directory.new_slot();
            let lane = Lane::start_gated(self.clone(), cell, slot);
            let entry = Entry::new(Arc::clone(&lane), Arc::clone(factory), slot);
            self.deliver_held(&id, &entry);
            shard.insert(id.clone(), entry);
            lane
        };
        let info = factory.info();
        let lease_generation = self.core.ownership.lease.lock().generation;
        let key = unit_key(&id);
        let (record, mut conditions, mut ops) = match &claim {
            Claim::New { .. } => {
                let record = UnitRecord::created(
                    self.id().clone(),
                    lease_generation,
                    ObjectGeneration(rand::random()),
                    type_name,
                    info.recoverable && self.config().recover_units,
                );
                (record, vec![Condition::absent(key.clone())], Vec::new())
            }
            Claim::Recover {
                version,
                previous,
                owner_descriptor,
            } => {
                let descriptor = crate::cluster::authority::node_key(&previous.owner);
                let owner_condition = Condition::as_read(descriptor, *owner_descriptor);
                (
                    previous.rebuilt(
                        self.id().clone(),
                        lease_generation,
                        ObjectGeneration(rand::random()),
                        type_name,
                    ),
                    vec![Condition::version(key.clone(), *version), owner_condition],
                    Vec::new(),
                )
            }
            Claim::Adopt { version, previous } => (
                previous.rebuilt(
                    self.id().clone(),
                    lease_generation,
                    ObjectGeneration(rand::random()),
                    type_name,
                ),
                vec![Condition::version(key.clone(), *version)],
                Vec::new(),
            ),
        };
        ops.push(Op::put(key.clone(), record.encode()));
        if info.remembered {
            ops.push(Op::put(
                remembered_key(&id),
                Bytes::from(type_name.to_owned()),
            ));
        }
        let owned = Owned::of(&record);
        let write = ConditionalWrite::new(record);
        // Only while this process holds the node's lease: a superseded one writes nothing.
        let lease = self.lease();
        conditions.push(Condition::lease(&lease));
        let written = self.store().batch(conditions, ops).await;
        if written.as_ref().is_ok_and(|w| w.lease_refused(self.id())) {
            let _ = lane.ctl.send(Control::Discard);
            return Err(UnitError::StoreUnavailable {
                what: format!("recording {id} in the location store"),
                reason: format!(
                    "the store does not hold this node's lease (generation {}) any more",
                    lease.generation
                ),
            });
        }
        let committed = self.settle(&id, write, written).await;
        match (committed, claim) {
            (Ok(true), _) => {
                let _ = lane.ctl.send(Control::Open { owned });
                Ok(true)
            }
            // Someone else recovered it first: nothing to do.
            (Ok(false), Claim::Recover { .. } | Claim::Adopt { .. }) => {
                let _ = lane.ctl.send(Control::Discard);
                Ok(false)
            }
            (Ok(false), Claim::New { .. }) => {
                let _ = lane.ctl.send(Control::Discard);
                match self.read_record(&id).await {
                    Ok(Some(existing)) => existing_answer(id, &existing.factory, type_name, or_get),
                    Ok(None) => Err(UnitError::Unavailable {
                        what: format!("creating {id}"),
                        reason: "the store changed under the creation; retry".to_owned(),
                    }),
                    Err(error) => Err(unavailable(&id, &error)),
                }
            }
            (Err(error), _) => {
                let _ = lane.ctl.send(Control::Discard);
                Err(unavailable(&id, &error))
            }
        }
    }

    /// Whether a conditional write of `id`'s record took: `Ok(true)` if the record is now the one
    /// written, read back when the write's answer was lost; an error if neither was answered.
    pub(crate) async fn settle(
        &self,
        id: &UnitId,
        write: ConditionalWrite,
        written: Result<BatchOutcome, StoreError>,
    ) -> Result<bool, StoreError> {
        let mut settled = write.on_write(BatchOutcome::answer(&written));
        if settled == Settled::ReadBack {
            let now = self.read_record_back(id).await;
            settled = write.on_read(now.as_ref().map(Option::as_ref).map_err(|_| ()));
        }
        match settled {
            Settled::Won => Ok(true),
            Settled::Lost => Ok(false),
            Settled::ReadBack | Settled::Unknown => written.map(|_| false),
        }
    }

    /// Rebuilds a dead node's unit here, gated on its record still being `previous` at `version`.
    /// An Actor whose record named a spot hosted here joins it again, its callbacks running as for
    /// any join; one whose spot is not here stays on its own, its record naming no spot.
    /// `Ok(true)` if this call rebuilt it.
    pub(crate) async fn recover_here(
        &self,
        id: UnitId,
        version: u64,
        previous: UnitRecord,
        owner_descriptor: Option<u64>,
    ) -> Result<bool, UnitError> {
        let state = self.state();
        if !ferry_core::recovery::takes_rebuilds(state) {
            return Err(UnitError::NotServing {
                state: state.to_string(),
            });
        }
        let claim = Claim::Recover {
            version,
            previous,
            owner_descriptor,
        };
        self.rebuild_here(id, claim).await
    }

    /// Rebuilds a unit here, fresh, as `claim` (a recovery or an adoption) allows; an Actor joins
    /// its room again if the room runs here. `Ok(true)` if this call rebuilt it.
    pub(crate) async fn rebuild_here(&self, id: UnitId, claim: Claim) -> Result<bool, UnitError> {
        let (wanted, kind) = recover_kind_of(&id);
        let Some(previous) = claim.previous() else {
            return Ok(false);
        };
        let type_name = previous.factory.clone();
        let spot = previous.spot.clone();
        let rebuilt = self
            .claim_here(&type_name, id.clone(), claim, wanted, kind)
            .await?;
        if let (true, UnitId::Actor(actor), Some(spot)) = (rebuilt, &id, spot)
            && self.hosts(&UnitId::Spot(spot.clone()))
            && let Err(error) = self.join(actor, &spot).await
        {
            // Rebuilt all the same: on its own, as its record says, for the application to place.
            tracing::warn!(unit = %id, %spot, %error, "rebuilt member did not join its room again");
        }
        Ok(rebuilt)
    }

    /// Reads a unit's authority record from the store: who owns it, which incarnation it is.
    pub async fn read_record(&self, id: &UnitId) -> Result<Option<UnitRecord>, StoreError> {
        let key = unit_key(id);
        decode_record(&key, self.store().get(&key).await?)
    }

    /// Reads a unit's record back after a write whose answer was lost, as the store confirms it
    /// ([`crate::store::LocationStore::get_confirmed`]): what it shows survives a failover.
    pub(crate) async fn read_record_back(
        &self,
        id: &UnitId,
    ) -> Result<Option<UnitRecord>, StoreError> {
        let key = unit_key(id);
        decode_record(&key, self.store().get_confirmed(&key).await?)
    }

    /// Makes an Actor a member of a User Spot (leaving the spot it is in first, if any). Both must be
    /// hosted on this node.
    ///
    /// In a SpotWide spot the Actor's turns then run on the spot's queue; in a PerActor spot it keeps
    /// its own lane. The spot's `on_member_joined` and the Actor's `on_joined` run as turns.
    ///
    /// The Actor's record then names the spot, so that a crash rebuilds it in its room. If the store
    /// cannot be written, the Actor is a member all the same and the error
    /// ([`UnitError::MembershipNotRecorded`]) says so: the same join again records it.
    pub async fn join(&self, actor: &ActorId, spot: &SpotId) -> Result<(), UnitError> {
        let spot_unit = UnitId::Spot(spot.clone());
        let spot_entry = self
            .core
            .units
            .directory
            .get(&spot_unit)
            .ok_or(UnitError::UnknownId {
                id: spot_unit.clone(),
            })?;
        if !matches!(spot_entry.factory.info().kind, FactoryKind::UserSpot(_)) {
            return Err(UnitError::NotAllowed {
                id: spot_unit,
                reason: "only User Spots take members".into(),
            });
        }
        match self.ask_join(actor, spot, &spot_entry).await {
            Err(UnitError::NotAllowed { .. }) => {
                self.ask_leave(actor).await?;
                if let Err(error) = self.ask_join(actor, spot, &spot_entry).await {
                    // It left its old spot but is in none now: the record must say that much.
                    self.record_spot(actor, None).await?;
                    return Err(error);
                }
            }
            other => other?,
        }
        self.record_spot(actor, Some(spot.clone())).await
    }

    async fn ask_join(
        &self,
        actor: &ActorId,
        spot: &SpotId,
        spot_entry: &Entry,
    ) -> Result<(), UnitError> {
        let (done, result) = oneshot::channel();
        let control = Control::Join {
            actor: actor.clone(),
            spot: spot.clone(),
            spot_entry: spot_entry.clone(),
            done,
        };
        self.control(&UnitId::Actor(actor.clone()), control, result)
            .await
    }

    /// Takes an Actor out of its User Spot, back into this node's Entry Spot, and clears the spot
    /// its record names. Called again after [`UnitError::MembershipNotRecorded`], it records the
    /// leave that already took effect.
    pub async fn leave(&self, actor: &ActorId) -> Result<(), UnitError> {
        match self.ask_leave(actor).await {
            Ok(()) => self.record_spot(actor, None).await,
            Err(not_member @ UnitError::NotAllowed { .. }) => {
                // A leave whose record write failed before: finish it, if the record lags.
                let id = UnitId::Actor(actor.clone());
                match self.read_record(&id).await {
                    Ok(Some(record)) if record.owner == *self.id() && record.spot.is_some() => {
                        self.record_spot(actor, None).await
                    }
                    _ => Err(not_member),
                }
            }
            Err(error) => Err(error),
        }
    }

    async fn ask_leave(&self, actor: &ActorId) -> Result<(), UnitError> {
        let (done, result) = oneshot::channel();
        let control = Control::Leave {
            actor: actor.clone(),
            done,
        };
        self.control(&UnitId::Actor(actor.clone()), control, result)
            .await
    }

    /// Writes the spot an Actor is a member of into its record (after its lane applied the
    /// change), so that recovery rebuilds it in that room. Conditional on the record as read; a
    /// write whose result did not arrive is read back, never guessed.
    async fn record_spot(&self, actor: &ActorId, spot: Option<SpotId>) -> Result<(), UnitError> {
        let id = UnitId::Actor(actor.clone());
        let key = unit_key(&id);
        let not_recorded = |reason: String| UnitError::MembershipNotRecorded {
            id: id.clone(),
            now: match &spot {
                Some(spot) => format!("a member of {spot}"),
                None => "in no room".to_owned(),
            },
            reason,
        };
        for _ in 0..RECORD_TRIES {
            let current = self
                .store()
                .get(&key)
                .await
                .map_err(|e| not_recorded(e.to_string()))?
                .ok_or_else(|| not_recorded("it has no record (it stopped meanwhile)".into()))?;
            let record = UnitRecord::decode(&key, &current.value)
                .map_err(|e| not_recorded(e.to_string()))?;
            // A move that took the Actor since wrote the room it carried: that may be this one.
            if record.spot == spot {
                return Ok(());
            }
            if record.owner != *self.id() {
                return Err(not_recorded(format!(
                    "its record names node {}",
                    record.owner
                )));
            }
            let record = record.in_spot(spot.clone());
            let written = self
                .store()
                .batch(
                    vec![Condition::version(key.clone(), current.version)],
                    vec![Op::put(key.clone(), record.encode())],
                )
                .await;
            if let Ok(BatchOutcome::Committed { .. }) = written {
                return Ok(());
            }
            // Changed meanwhile, or the result is unknown: the next read tells.
        }
        Err(not_recorded(format!(
            "its record changed under {RECORD_TRIES} writes in a row"
        )))
    }

    async fn control(
        &self,
        id: &UnitId,
        control: Control,
        result: oneshot::Receiver<Result<(), UnitError>>,
    ) -> Result<(), UnitError> {
        let unknown = || UnitError::UnknownId { id: id.clone() };
        let entry = self.core.units.directory.get(id).ok_or_else(unknown)?;
        entry.lane.ctl.send(control).map_err(|_| unknown())?;
        result.await.map_err(|_| unknown())?
    }

    /// Tells a PerActor spot's lane that an Actor joined or left it.
    /// A spot that has just been handed over to another node is told there.
    pub(crate) fn notify_member(&self, spot: &SpotId, actor: ActorId, joined: bool) {
        let unit = UnitId::Spot(spot.clone());
        if let Some(entry) = self.core.units.directory.get(&unit) {
            let _ = entry.lane.ctl.send(Control::Member { actor, joined });
        } else if let Some(owner) = self.cached_route(&unit) {
            self.forward_member(owner, spot.clone(), actor, joined);
        }
    }

    /// Tells a PerActor spot that moved to `owner` that an Actor joined or left it during the move.
    pub(crate) fn forward_member(&self, owner: NodeId, spot: SpotId, actor: ActorId, joined: bool) {
        let node = self.clone();
        tokio::spawn(async move {
            let call = Call::Member {
                spot: spot.clone(),
                actor: actor.clone(),
                joined,
            };
            let answer = node.call::<MemberAnswer>(&owner, call).await;
            if let Err(error) = answer.and_then(|a| a) {
                tracing::warn!(%spot, %actor, joined, %owner, %error, "a member change that reached a moving PerActor spot was not applied");
            }
        });
    }

    /// Forgets a stopped unit's authority record, if it still names this node.
    pub(crate) fn release_record(&self, id: UnitId) {
        let node = self.clone();
        tokio::spawn(async move {
            if let Err(error) = node.delete_own_record(&id, true).await {
                tracing::warn!(unit = %id, %error, "record of a stopped unit not released");
            }
        });
    }

    /// Deletes a unit's record if it still names this node. A unit that ended for good is also
    /// forgotten as remembered (`forget`); one that stops with its node (shutdown) stays remembered,
    /// so a cold start of the cluster brings it back.
    pub(crate) async fn delete_own_record(
        &self,
        id: &UnitId,
        forget: bool,
    ) -> Result<(), StoreError> {
        let key = unit_key(id);
        if let Some(v) = self.store().get(&key).await?
            && UnitRecord::decode(&key, &v.value)?.owner == *self.id()
        {
            let mut ops = vec![Op::delete(key.clone())];
            if forget {
                ops.push(Op::delete(remembered_key(id)));
            }
            self.store()
                .batch(vec![Condition::version(key, v.version)], ops)
                .await?;
        }
        Ok(())
    }

    /// Stops a unit hosted here for good (with its members, for a SpotWide spot): `on_closing` runs,
    /// queued requests get `UnitStopped`, and its authority record is released.
    pub async fn stop_unit(&self, id: &UnitId) -> Result<(), UnitError> {
        let (done, result) = oneshot::channel();
        let control = Control::Stop {
            unit: id.clone(),
            done,
        };
        self.control(id, control, result).await?;
        self.delete_own_record(id, true)
            .await
            .map_err(|error| unavailable(id, &error))
    }
}

/// Which factory kinds may rebuild this kind of id after a crash: Instance Spots too.
pub(crate) fn recover_kind_of(id: &UnitId) -> (KindCheck, &'static str) {
    match id {
        UnitId::Spot(_) => (
            |k| matches!(k, FactoryKind::UserSpot(_) | FactoryKind::InstanceSpot),
            "spot",
        ),
        UnitId::Actor(_) => (|k| k == FactoryKind::Actor, "actor"),
    }
}

/// Which factory kinds may create this kind of id, and its name for errors.
pub(crate) fn kind_of(id: &UnitId) -> (KindCheck, &'static str) {
    match id {
        UnitId::Spot(_) => (|k| matches!(k, FactoryKind::UserSpot(_)), "spot"),
        UnitId::Actor(_) => (|k| k == FactoryKind::Actor, "actor"),
    }
}

/// The answer to a creation that found the unit already there.
fn existing_answer(
    id: UnitId,
    existing: &str,
    asked: &str,
    or_get: bool,
) -> Result<bool, UnitError> {
    if existing != asked {
        return Err(UnitError::TypeMismatch {
            id,
            existing: existing.to_owned(),
            asked: asked.to_owned(),
        });
    }
    if or_get {
        Ok(false)
    } else {
        Err(UnitError::AlreadyExists { id })
    }
}

/// A unit's record as read from its key, if it has one.
fn decode_record(key: &str, found: Option<Versioned>) -> Result<Option<UnitRecord>, StoreError> {
    found
        .map(|v| UnitRecord::decode(key, &v.value).map_err(StoreError::from))
        .transpose()
}

fn unavailable(id: &UnitId, error: &StoreError) -> UnitError {
    UnitError::StoreUnavailable {
        what: format!("recording {id} in the location store"),
        reason: error.to_string(),
    }
}
