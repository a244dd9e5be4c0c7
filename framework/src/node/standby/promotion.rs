//! Making a dead owner's room out of the copy kept here: restored into a lane that does not run
//! yet, written as the room's owner on the conditions recovery read, then opened.
//!
//! The write is the rebuild's (the room's record still the dead owner's at the version read, the
//! owner's descriptor the one it was taken for dead under, this node's lease) plus the standby
//! record at the version recovery read, so that only the copy the store names becomes the room,
//! once. The room keeps its incarnation: it goes on from its checkpoint, as after a move.

use ferry_core::conditional::ConditionalWrite;
use ferry_core::recovery::takes_rebuilds;
use ferry_core::relocation::capture::{Capture, MembershipData};
use ferry_core::standby::Series;
use ferry_core::standby::promotion::{Fresh, promotable, promoted};

use super::super::handle::Node;
use super::super::hosted::Control;
use super::super::lane::Lane;
use crate::cluster::authority::{UnitRecord, node_key, standby_key, unit_key};
use crate::error::UnitError;
use crate::ids::UnitId;
use crate::store::{Condition, Op, StoreError};
use crate::unit::lane::Owned;

/// A member of the copy whose record still names the dead owner, with the version read.
struct Member {
    id: UnitId,
    version: u64,
    record: UnitRecord,
}

impl Node {
    /// Promotes the copy kept here of `id`, a room of a dead owner, if the room's record is still
    /// `previous` at `version`, the owner's descriptor at `owner_descriptor`, and the standby
    /// record at `standby_version`. `Ok(true)` if this call made the room; `Ok(false)` if another
    /// write took it first; [`UnitError::NoStandbyCopy`] if no copy here may become the room.
    pub(crate) async fn promote_here(
        &self,
        id: UnitId,
        version: u64,
        previous: UnitRecord,
        owner_descriptor: Option<u64>,
        series: Series,
        standby_version: u64,
    ) -> Result<bool, UnitError> {
        let state = self.state();
        if !takes_rebuilds(state) {
            return Err(UnitError::NotServing {
                state: state.to_string(),
            });
        }
        let no_copy = |why| UnitError::NoStandbyCopy {
            id: id.clone(),
            why,
        };
        let image = {
            let held = self.core.standby.copies.held.lock();
            let copy = held.get(&id);
            if copy.is_some_and(|c| c.incarnation != previous.object_generation) {
                return Err(no_copy(Fresh::OtherIncarnation));
            }
            promotable(copy.map(|c| &c.replica), series)
                .map_err(no_copy)?
                .image()
                .clone()
        };
        let capture = Capture::from_image(&image).map_err(|error| {
            tracing::warn!(unit = %id, %error, "standby copy does not decode");
            no_copy(Fresh::Unrestorable)
        })?;
        let members = self.members_to_promote(&capture, &previous).await?;
        let capture = promoted(capture, &previous.owner, |m| {
            members.iter().any(|k| k.id == *m)
        });
        // A copy a move left here, on its way out, is not the room.
        self.give_up_staged(&id);
        let restored = Lane::restore(self, capture).map_err(|refusal| {
            tracing::warn!(unit = %id, %refusal, "standby copy could not be restored");
            no_copy(Fresh::Unrestorable)
        })?;
        let lane = restored
            .register_with(self, |unit, entry| self.deliver_held(unit, entry))
            .map_err(|refusal| UnitError::Unavailable {
                what: format!("promoting {id}"),
                reason: format!("{refusal}; the next recovery pass retries"),
            })?;
        let lease = self.lease();
        let room = previous.moved_to(self.id().clone(), lease.generation, None);
        let mut conditions = vec![
            Condition::version(unit_key(&id), version),
            Condition::as_read(node_key(&previous.owner), owner_descriptor),
            Condition::version(standby_key(&id), standby_version),
            Condition::lease(&lease),
        ];
        let mut ops = vec![
            Op::put(unit_key(&id), room.encode()),
            // The room's new owner names its own standby once one holds a checkpoint.
            Op::delete(standby_key(&id)),
        ];
        for member in &members {
            conditions.push(Condition::version(unit_key(&member.id), member.version));
            let record = member.record.moved_to(
                self.id().clone(),
                lease.generation,
                member.record.spot.clone(),
            );
            ops.push(Op::put(unit_key(&member.id), record.encode()));
        }
        let written = self.store().batch(conditions, ops).await;
        let owned = Owned::of(&room);
        match self.settle(&id, ConditionalWrite::new(room), written).await {
            Ok(true) => {
                self.core.standby.copies.held.lock().remove(&id);
                let _ = lane.ctl.send(Control::Open { owned });
                tracing::info!(unit = %id, members = members.len(), "room promoted from its standby copy");
                Ok(true)
            }
            Ok(false) => {
                let _ = lane.ctl.send(Control::Discard);
                Ok(false)
            }
            Err(error) => {
                let _ = lane.ctl.send(Control::Discard);
                Err(UnitError::StoreUnavailable {
                    what: format!("promoting {id}"),
                    reason: error.to_string(),
                })
            }
        }
    }

    /// The members of the copy's room whose records still name the dead owner of `room`, each
    /// with the version the promotion is conditional on.
    async fn members_to_promote(
        &self,
        capture: &Capture,
        room: &UnitRecord,
    ) -> Result<Vec<Member>, UnitError> {
        let mut members = Vec::new();
        for cell in capture.cells.iter().filter(|c| c.id != capture.unit) {
            let key = unit_key(&cell.id);
            let read = self
                .store()
                .get(&key)
                .await
                .map_err(|e| unavailable(&cell.id, &e))?;
            let Some(read) = read else { continue };
            let Ok(mut record) = UnitRecord::decode(&key, &read.value) else {
                continue;
            };
            if record.owner != room.owner {
                continue;
            }
            // The room it was in at the checkpoint, as a move's commit records it.
            if let MembershipData::Actor(spot) = &cell.membership {
                record = record.in_spot(spot.clone());
            }
            members.push(Member {
                id: cell.id.clone(),
                version: read.version,
                record,
            });
        }
        Ok(members)
    }
}

fn unavailable(id: &UnitId, error: &StoreError) -> UnitError {
    UnitError::StoreUnavailable {
        what: format!("reading {id}'s record for its room's promotion"),
        reason: error.to_string(),
    }
}
