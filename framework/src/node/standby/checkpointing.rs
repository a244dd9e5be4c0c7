//! The owner's side of a standby: checkpoints taken at turn boundaries, shipped within the node's
//! budget to the node placement names, acknowledged, and the store's record of the series held.
//!
//! Each room that keeps a standby has a [`Room`], shared by its lane (which takes the checkpoints
//! at its turn boundaries, since only it may read the room's state) and this node (which handles
//! the answers, names the series in the store, re-aims on a new cluster view, and looks after
//! checkpoints that went unanswered). Locks are taken in the order: the map of rooms, a room,
//! the node's budget.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::super::handle::Node;
use super::super::hosted::{LaneTx, Room};
use crate::cluster::authority::unit_key;
use crate::ids::{NodeId, UnitId};
use crate::store::{BatchOutcome, Condition, Op, StoreError};
use crate::unit::factory::FactoryInfo;
use crate::unit::lane::Owned;
use crate::unit::standby::RoomState;
use ferry_core::authority::{UnitRecord, standby_key};
use ferry_core::standby::checkpoints::{Checkpoints, Record, Take};
use ferry_core::standby::frames::StandbyFrame;
use ferry_core::standby::promotion::Named;
use ferry_core::standby::{GATHER, Series, drops_copy_at_end, placement};

/// How often the node looks over the rooms on its watch list (the core's
/// [`Checkpoints::watched`]): answers overdue, series the store does not name yet, rooms the
/// budget held back, earlier holders' copies to drop. (The standby metrics are read from the
/// node's status when scraped.)
const KEEP_EVERY: Duration = Duration::from_millis(100);

/// What the owner side counts, for the node's status.
pub(super) struct OwnedCounts {
    pub(super) rooms: usize,
    pub(super) current: usize,
    pub(super) behind: usize,
    pub(super) alone: usize,
    pub(super) oldest_unheld: Option<Duration>,
    pub(super) checkpoints_sent: u64,
    pub(super) bytes_sent: u64,
}

impl Node {
    /// A room of factory `info` opened here, recorded as `owned`: if its factory keeps a
    /// standby, its checkpoints start, in a series of the record's owner generation, aimed at
    /// the node placement names. A copy this node kept of it is dropped: it runs here now.
    pub(crate) fn standby_start(
        &self,
        unit: UnitId,
        info: &FactoryInfo,
        owned: Owned,
        lane: Weak<LaneTx>,
    ) -> Option<Arc<Room>> {
        if !info.standby.keeps_standby() {
            return None;
        }
        self.core.standby.copies.held.lock().remove(&unit);
        let first = Series {
            generation: owned.generation,
            epoch: 1,
        };
        let mut checkpoints = Checkpoints::new(info.standby, first);
        // Aimed under the map's lock: a new cluster view either is read here, or its re-aiming
        // (which takes the lock after the view is written) finds the room in the map.
        let mut rooms = self.core.standby.owning.rooms.lock();
        let holder = self.standby_holder(&unit, &info.type_name);
        checkpoints.aim(holder, &mut self.core.standby.owning.budget.lock());
        let room = Arc::new(Room {
            unit: unit.clone(),
            holds_effects: info.standby.holds_effects(),
            carries_queue: info.standby.carries_queue(),
            gather: info.standby.gather(),
            factory: info.type_name.clone(),
            incarnation: owned.incarnation,
            lane,
            state: Mutex::new(RoomState {
                checkpoints: Some(checkpoints),
                naming: false,
                watched: false,
            }),
        });
        self.watch(&room, &mut room.state.lock());
        let earlier = rooms.insert(unit, room.clone());
        drop(rooms);
        if let Some(earlier) = earlier {
            self.standby_end(&earlier);
        }
        Some(room)
    }

    /// The node that should hold `unit`'s standby, as this node's cluster view says, passing
    /// over holders that left a checkpoint unanswered lately.
    fn standby_holder(&self, unit: &UnitId, factory: &str) -> Option<NodeId> {
        let now = Instant::now().into_std();
        let silent = self.core.standby.owning.silent.lock();
        let view = self.core.cluster.view.read();
        placement::answering_holder(view.iter(), self.id(), unit, factory, (&silent, now))
    }

    /// A turn of `room` ran at `now`: its number, which its effects are held under (`None`
    /// once its checkpoints stopped).
    pub(crate) fn standby_turn(&self, room: &Room, now: Instant) -> Option<u64> {
        let mut state = room.state.lock();
        state.checkpoints.as_mut().map(|c| c.turn(now.into_std()))
    }

    /// The last turn of `room` whose effects may leave the node now (none once its checkpoints
    /// stopped: a later owner runs the room, and nothing this copy did is confirmed).
    pub(crate) fn standby_released(&self, room: &Room) -> u64 {
        let state = room.state.lock();
        state.checkpoints.as_ref().map_or(0, Checkpoints::released)
    }

    /// At a turn boundary of `room`: takes a checkpoint if one may go now, making the room's
    /// image with `image` only then, and ships it. Returns when the lane should try again if no
    /// turn runs before (an idle room's interval, or the first checkpoint of a new series).
    pub(crate) fn standby_checkpoint(
        &self,
        room: &Arc<Room>,
        now: Instant,
        image: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Option<Instant> {
        let now_std = now.into_std();
        {
            let state = room.state.lock();
            let checkpoints = state.checkpoints.as_ref()?;
            if checkpoints.ready(now_std).is_err() {
                return checkpoints.due(now_std).map(Instant::from_std);
            }
        }
        // Made without the room's lock: answers for it need not wait for the encoding.
        let image = image()?;
        let mut guard = room.state.lock();
        let state = &mut *guard;
        let checkpoints = state.checkpoints.as_mut()?;
        let take = {
            let mut budget = self.core.standby.owning.budget.lock();
            checkpoints.take(now_std, image.into(), &mut budget)
        };
        let again = match (take, checkpoints.holder().cloned()) {
            (Take::Ship(checkpoint), Some(holder)) => {
                let bytes: usize = checkpoint.pieces.iter().map(|(_, b)| b.len()).sum();
                let owning = &self.core.standby.owning;
                owning.sent.fetch_add(1, Ordering::Relaxed);
                owning.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                let frame = StandbyFrame::Checkpoint {
                    unit: room.unit.clone(),
                    incarnation: room.incarnation,
                    checkpoint,
                };
                self.ship(&holder, frame, room.gather);
                None
            }
            // The node looks over held-back rooms every KEEP_EVERY and wakes them.
            (Take::OverBudget, _) => None,
            _ => checkpoints.due(now_std).map(Instant::from_std),
        };
        self.watch(room, state);
        again
    }

    /// Puts `room` on the keeper's watch list if the core says something of it is under way
    /// and it is not on the list yet. Called with the room's lock held.
    fn watch(&self, room: &Arc<Room>, state: &mut RoomState) {
        let under_way = state.checkpoints.as_ref().is_some_and(Checkpoints::watched);
        if under_way && !state.watched {
            state.watched = true;
            self.core.standby.owning.watch.lock().push(room.clone());
        }
    }

    /// The room left this node (it moved away, stopped, or the node shuts down): its
    /// checkpoints end, and its holder drops the copy, unless this node is fenced off (it may no
    /// longer own the room, and the copy is what recovery promotes).
    pub(crate) fn standby_end(&self, room: &Arc<Room>) {
        {
            let mut rooms = self.core.standby.owning.rooms.lock();
            if rooms.get(&room.unit).is_some_and(|r| Arc::ptr_eq(r, room)) {
                rooms.remove(&room.unit);
            }
        }
        let Some(checkpoints) = room.state.lock().checkpoints.take() else {
            return;
        };
        let holders = checkpoints.close(&mut self.core.standby.owning.budget.lock());
        if drops_copy_at_end(self.fenced()) {
            for (holder, series) in holders {
                self.send_drop(&holder, &room.unit, series);
            }
        }
    }

    /// The node `unit`'s checkpoints go to now, if the room is owned here and keeps a standby:
    /// a drain prefers it as the room's target.
    pub(crate) fn standby_aimed_at(&self, unit: &UnitId) -> Option<NodeId> {
        let room = self.core.standby.owning.rooms.lock().get(unit).cloned()?;
        let state = room.state.lock();
        state.checkpoints.as_ref()?.holder().cloned()
    }

    /// A move of `unit` to `target` starts: the copy it seals against, if `target` keeps it
    /// (checkpoints then pause until [`standby_stays`](Self::standby_stays) or the room leaves).
    pub(crate) fn standby_move_to(&self, unit: &UnitId, target: &NodeId) -> Option<Bytes> {
        let room = self.core.standby.owning.rooms.lock().get(unit).cloned()?;
        let mut state = room.state.lock();
        state.checkpoints.as_mut()?.move_to(target)
    }

    /// A move of `unit` ended with the room still here: its checkpoints go on.
    pub(crate) fn standby_stays(&self, unit: &UnitId) {
        let Some(room) = self.core.standby.owning.rooms.lock().get(unit).cloned() else {
            return;
        };
        if let Some(checkpoints) = room.state.lock().checkpoints.as_mut() {
            checkpoints.stays();
        }
    }

    /// Tells `holder` to forget its copy of `unit` of `series` or an older one.
    fn send_drop(&self, holder: &NodeId, unit: &UnitId, series: Series) {
        let frame = StandbyFrame::Drop {
            unit: unit.clone(),
            series,
        };
        // Gathered, behind the checkpoints of the series it drops.
        self.ship(holder, frame, GATHER);
    }

    /// The cluster view was read again: if what placement reads of it changed (the core's
    /// [`placement::Candidates`]), each room's checkpoints go to the node placement names now. A
    /// room whose holder changed starts a new series there; its old holder drops its copy once
    /// the store names the new one.
    pub(crate) fn standby_view_changed(&self) {
        let candidates = {
            let now = Instant::now().into_std();
            let silent = self.core.standby.owning.silent.lock();
            let view = self.core.cluster.view.read();
            placement::candidates(view.iter(), self.id(), (&silent, now))
        };
        {
            let mut placed = self.core.standby.owning.placed.lock();
            if *placed == candidates {
                return;
            }
            *placed = candidates;
        }
        let rooms: Vec<Arc<Room>> = self
            .core
            .standby
            .owning
            .rooms
            .lock()
            .values()
            .cloned()
            .collect();
        for room in rooms {
            let holder = self.standby_holder(&room.unit, &room.factory);
            let mut state = room.state.lock();
            let Some(checkpoints) = state.checkpoints.as_mut() else {
                continue;
            };
            if checkpoints.holder() == holder.as_ref() {
                continue;
            }
            checkpoints.aim(holder, &mut self.core.standby.owning.budget.lock());
            self.watch(&room, &mut state);
            drop(state);
            room.wake();
        }
    }

    /// The holder answered a checkpoint.
    pub(super) fn on_checkpoint_answer(&self, from: NodeId, frame: StandbyFrame) {
        let Some(room) = self
            .core
            .standby
            .owning
            .rooms
            .lock()
            .get(frame.unit())
            .cloned()
        else {
            return;
        };
        let mut guard = room.state.lock();
        let state = &mut *guard;
        let Some(checkpoints) = state.checkpoints.as_mut() else {
            return;
        };
        let mut budget = self.core.standby.owning.budget.lock();
        match frame {
            StandbyFrame::Acked { series, number, .. } => {
                let due = checkpoints.acked(series, number, &mut budget);
                drop(budget);
                if let (Some(due), Some(holder)) = (due, checkpoints.holder().cloned())
                    && !state.naming
                {
                    checkpoints.recording();
                    state.naming = true;
                    tokio::spawn(self.clone().record(room.clone(), due, Some(holder)));
                }
            }
            StandbyFrame::Refused {
                stale: true,
                reason,
                ..
            } => {
                tracing::warn!(unit = %room.unit, holder = %from, %reason, "a later owner runs this room as its standby knows it: checkpoints of it stop here");
                if let Some(checkpoints) = state.checkpoints.take() {
                    checkpoints.close(&mut budget);
                }
                return;
            }
            StandbyFrame::Refused {
                series,
                number,
                reason,
                ..
            } => {
                tracing::debug!(unit = %room.unit, holder = %from, %reason, "checkpoint refused; a new series starts");
                checkpoints.refused(series, number, &mut budget);
            }
            StandbyFrame::Checkpoint { .. } | StandbyFrame::Drop { .. } => return,
        }
        self.watch(&room, state);
        let wake = state
            .checkpoints
            .as_ref()
            .is_some_and(Checkpoints::answer_wakes_lane);
        drop(guard);
        if wake {
            room.wake();
        }
    }

    /// Writes the standby record of `room` as `record` says: `holder` keeps its copy in a
    /// series, or no node keeps one. Only while this process holds the node's lease, and only
    /// if the room's record, read just before, still names this node as the owner of this
    /// incarnation: a version condition on that read, so that an owner that lost the room (a
    /// move committed elsewhere, a recovery) writes nothing. The standby record must be as read
    /// too: a write that lands late (its answer was lost, and the next was sent) never undoes a
    /// later one.
    async fn record(self, room: Arc<Room>, record: Record, holder: Option<NodeId>) {
        let written = match self.write_record(&room, record, holder).await {
            Ok(written) => written,
            Err(error) => {
                tracing::debug!(unit = %room.unit, %error, "standby record not written; tried again shortly");
                false
            }
        };
        let mut guard = room.state.lock();
        let state = &mut *guard;
        state.naming = false;
        let Some(checkpoints) = state.checkpoints.as_mut() else {
            return;
        };
        if !written {
            // Still owed: the keeper tries again on its next round.
            self.watch(&room, state);
            return;
        }
        if record == Record::Nothing && checkpoints.alone() {
            tracing::warn!(unit = %room.unit, "no node can hold this room's standby: it plays on unprotected, and a crash now rebuilds it from nothing");
        }
        checkpoints.recorded(record);
        let retired = checkpoints.retired();
        self.watch(&room, state);
        drop(guard);
        for (holder, series) in retired {
            self.send_drop(&holder, &room.unit, series);
        }
        room.wake();
    }

    /// The conditional write behind [`Node::record`]: `Ok(true)` once the store says `record`.
    async fn write_record(
        &self,
        room: &Room,
        record: Record,
        holder: Option<NodeId>,
    ) -> Result<bool, StoreError> {
        let key = unit_key(&room.unit);
        let Some(found) = self.store().get(&key).await? else {
            return Ok(false);
        };
        let unit = UnitRecord::decode(&key, &found.value)?;
        if unit.owner != *self.id() || unit.object_generation != room.incarnation {
            return Ok(false);
        }
        let op = match (record, holder) {
            (Record::Names(series), Some(holder)) => {
                let named = Named {
                    holder,
                    series,
                    incarnation: room.incarnation,
                };
                Op::put(standby_key(&room.unit), named.encode())
            }
            (Record::Names(_), None) => return Ok(false),
            (Record::Nothing, _) => Op::delete(standby_key(&room.unit)),
        };
        let standby = standby_key(&room.unit);
        let standby_read = self.store().get(&standby).await?.map(|v| v.version);
        let conditions = vec![
            Condition::version(key, found.version),
            Condition::as_read(standby, standby_read),
            Condition::lease(&self.lease()),
        ];
        let outcome = self.store().batch(conditions, vec![op]).await?;
        Ok(matches!(outcome, BatchOutcome::Committed { .. }))
    }

    /// Looks over the watched rooms' checkpoints every [`KEEP_EVERY`] until the node stops.
    pub(crate) async fn keep_standbys(self) {
        loop {
            tokio::select! {
                () = self.core.stop.cancelled() => return,
                () = tokio::time::sleep(KEEP_EVERY) => {}
            }
            self.standby_round(Instant::now());
        }
    }

    /// One look over the watched rooms: a checkpoint unanswered for its answer wait starts a new
    /// series on a node that answers, a series the store does not name yet is named again, an
    /// earlier holder's copy is dropped, and a room that may take a checkpoint now (one the
    /// budget held back) is woken. A room with nothing under way any more leaves the list.
    fn standby_round(&self, now: Instant) {
        let now = now.into_std();
        let owning = &self.core.standby.owning;
        // Taken off the list for the round: a room that gets something under way meanwhile is
        // already marked watched, and what the round finds under its lock decides its place.
        let watch = std::mem::take(&mut *owning.watch.lock());
        let mut kept = Vec::with_capacity(watch.len());
        for room in watch {
            let mut guard = room.state.lock();
            let state = &mut *guard;
            let Some(checkpoints) = state.checkpoints.as_mut() else {
                state.watched = false;
                continue;
            };
            let wait = checkpoints.answer_wait();
            let silent = checkpoints.silent(now, wait, &mut owning.budget.lock());
            if let Some(silent) = silent {
                owning.silent.lock().unanswered(silent.clone(), now);
                let holder = self.standby_holder(&room.unit, &room.factory);
                tracing::info!(unit = %room.unit, %silent, ?holder, "checkpoint unanswered; its standby starts again with the whole image");
                checkpoints.aim(holder, &mut owning.budget.lock());
            }
            let wake = checkpoints.ready(now).is_ok();
            let due = checkpoints.record_due();
            let holder = checkpoints.holder().cloned();
            let retired = match due {
                None => checkpoints.retired(),
                Some(_) => Vec::new(),
            };
            if let (Some(due), false) = (due, state.naming) {
                checkpoints.recording();
                state.naming = true;
                tokio::spawn(self.clone().record(room.clone(), due, holder));
            }
            state.watched = checkpoints.watched();
            let keep = state.watched;
            drop(guard);
            for (holder, series) in retired {
                self.send_drop(&holder, &room.unit, series);
            }
            if wake {
                room.wake();
            }
            if keep {
                kept.push(room);
            }
        }
        owning.watch.lock().extend(kept);
    }

    /// The owner side's counts now.
    pub(super) fn owned_counts(&self, now: Instant) -> OwnedCounts {
        let now = now.into_std();
        let owning = &self.core.standby.owning;
        let rooms: Vec<Arc<Room>> = owning.rooms.lock().values().cloned().collect();
        let mut counts = OwnedCounts {
            rooms: 0,
            current: 0,
            behind: 0,
            alone: 0,
            oldest_unheld: None,
            checkpoints_sent: owning.sent.load(Ordering::Relaxed),
            bytes_sent: owning.bytes.load(Ordering::Relaxed),
        };
        for room in rooms {
            let state = room.state.lock();
            let Some(checkpoints) = state.checkpoints.as_ref() else {
                continue;
            };
            counts.rooms += 1;
            counts.current += usize::from(checkpoints.current(now));
            counts.behind += usize::from(checkpoints.behind(now).is_some());
            counts.alone += usize::from(checkpoints.alone());
            counts.oldest_unheld = counts.oldest_unheld.max(checkpoints.unheld_for(now));
        }
        counts
    }
}
