//! The target side of a move, as an async shell around [`TargetMachine`]: it assembles and
//! restores the unit into a gated lane, keeps the relay records, commits ownership in the store,
//! and opens the unit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use ferry_core::conditional::{ConditionalWrite, Settled, WriteAnswer};

use super::handle::Node;
use super::hosted::{Control, Staging};
use super::lane::Lane;
use crate::cluster::authority::{NodeDescriptor, NodeState, UnitRecord, unit_key};
use crate::cluster::frames::Frame;
use crate::ids::{NodeId, UnitId};
use crate::relocation::RelocationId;
use crate::relocation::admission::{Admission, Offer, Staged, admit};
use crate::relocation::assembly::Assembly;
use crate::relocation::capture::{MembershipData, TransferError, relay_digest};
use crate::relocation::frames::{RecordAt, Refusal, RelocFrame};
use crate::relocation::moves::Precopied;
use crate::relocation::precopy::{Held, base_for, may_hold};
use crate::relocation::protocol::{TargetAction, TargetEvent, TargetMachine};
use crate::store::{BatchOutcome, Condition, Op};
use crate::unit::lane::Owned;

/// How often a target tells its source that the work on an offer goes on (chunks arriving, a
/// restore running): well inside the source's step, so a busy target is never taken for a silent one.
const PROGRESS: Duration = Duration::from_secs(1);

/// How long a pre-copy is kept with no piece arriving and no offer taking it: longer than any
/// move's deadline allows between two rounds, or between its last round and its offer.
const PRECOPY_KEPT: Duration = Duration::from_secs(120);

/// Drops the pre-copies left untouched for [`PRECOPY_KEPT`]: their offer never came (their source
/// failed before it), their withdrawal was lost with its connection, or they are late pieces of a
/// move that has ended.
fn prune(precopied: &mut HashMap<RelocationId, Precopied>) {
    precopied.retain(|_, p| p.touched.elapsed() < PRECOPY_KEPT);
}

impl Node {
    /// A frame from the source of a move into this node arrived from `from`.
    pub(crate) fn on_target_frame(&self, from: NodeId, frame: RelocFrame) {
        match frame {
            RelocFrame::Offer {
                rel,
                unit,
                records,
                manifest,
                within,
            } => {
                let units: Vec<UnitId> = records.iter().map(|at| at.id.clone()).collect();
                let offer = Offer {
                    me: self.id(),
                    state: self.state(),
                    units: &units,
                    len: manifest.len,
                    max_state: self.config().max_state,
                };
                let admission = {
                    let incoming = self.core.moves.incoming.lock();
                    let staged: Vec<(RelocationId, Vec<UnitId>, bool)> = incoming
                        .iter()
                        .map(|(rel, staging)| {
                            let units = staging.records.iter().map(|at| at.id.clone()).collect();
                            (*rel, units, staging.machine.committing())
                        })
                        .collect();
                    admit(
                        offer,
                        staged.iter().map(|(rel, units, committing)| Staged {
                            rel: *rel,
                            units,
                            committing: *committing,
                        }),
                    )
                };
                let precopied = {
                    let mut precopied = self.core.moves.precopied.lock();
                    prune(&mut precopied);
                    precopied.remove(&rel)
                }
                .map(|precopied| precopied.held.into_image());
                // A move to the node that keeps the unit's standby seals against that copy.
                let standby = || {
                    let copies = self.core.standby.copies.held.lock();
                    copies.get(&unit).map(|copy| copy.replica.image().to_vec())
                };
                let held = base_for(
                    manifest.base,
                    precopied
                        .into_iter()
                        .chain(std::iter::once_with(standby).flatten()),
                );
                match admission {
                    Admission::Refuse(reason) => {
                        tracing::warn!(relocation = %rel, %reason, "offer refused");
                        let refused = Frame::Reloc(Box::new(RelocFrame::Refused { rel, reason }));
                        if let Err(error) = self.mesh_send(&from, refused) {
                            tracing::debug!(relocation = %rel, %error, "refusal not sent");
                        }
                        return;
                    }
                    Admission::Take { supersede } => {
                        for earlier in supersede {
                            tracing::info!(relocation = %earlier, %unit, "a staged copy gives way to a newer offer of its unit");
                            self.target_event(earlier, TargetEvent::Withdrawn);
                        }
                    }
                }
                // A difference to a base not held here waits for the whole image instead.
                let assembly = Assembly::new(manifest, held).ok();
                let staging = Staging {
                    source: from.clone(),
                    unit,
                    records,
                    awaiting_whole: assembly.is_none(),
                    assembly,
                    machine: TargetMachine::new(Instant::now().into_std(), within),
                    lane: None,
                    restored_in: Duration::ZERO,
                    committed_in: Duration::ZERO,
                    relay: Vec::new(),
                    arriving: None,
                    reported: Instant::now(),
                };
                {
                    let mut incoming = self.core.moves.incoming.lock();
                    incoming.insert(rel, staging);
                    self.core.moves.arrivals.send_replace(incoming.len());
                }
                // Taken: the source counts silence from here, not from its offer.
                let answer = if self
                    .core
                    .moves
                    .incoming
                    .lock()
                    .get(&rel)
                    .is_some_and(|s| s.awaiting_whole)
                {
                    tracing::info!(relocation = %rel, "the offer's pre-copied base is not held here; asking for the whole image");
                    RelocFrame::BaseLost { rel }
                } else {
                    RelocFrame::Progress { rel }
                };
                if let Err(error) = self.mesh_send(&from, Frame::Reloc(Box::new(answer))) {
                    tracing::debug!(relocation = %rel, %error, "progress not sent");
                }
                tokio::spawn(self.clone().stage_timer(rel));
                // All there already: nothing changed since the pre-copy the target holds.
                self.assembled(rel);
            }
            RelocFrame::Chunk {
                rel,
                index,
                offset,
                bytes,
            } => self.on_chunk(rel, index, offset, &bytes),
            RelocFrame::Precopy {
                rel,
                len,
                offset,
                crc,
                bytes,
            } => self.on_precopy(from, rel, len, offset, crc, &bytes),
            RelocFrame::PrecopyEnd { rel, round, base } => {
                let holds = {
                    let mut precopied = self.core.moves.precopied.lock();
                    let holds = precopied.get(&rel).is_some_and(|p| p.held.holds(base));
                    if !holds {
                        precopied.remove(&rel);
                    }
                    holds
                };
                let answer = RelocFrame::PrecopyHeld { rel, round, holds };
                if let Err(error) = self.mesh_send(&from, Frame::Reloc(Box::new(answer))) {
                    tracing::debug!(relocation = %rel, %error, "pre-copy answer not sent");
                }
            }
            RelocFrame::Resend { rel, manifest } => {
                if let Some(staging) = self.core.moves.incoming.lock().get_mut(&rel)
                    && staging.awaiting_whole
                {
                    staging.awaiting_whole = false;
                    staging.assembly = Assembly::new(manifest, None).ok();
                }
                self.assembled(rel);
            }
            RelocFrame::RelayReset { rel } => self.target_event(rel, TargetEvent::RelayReset),
            RelocFrame::Withdraw { rel } => {
                self.core.moves.precopied.lock().remove(&rel);
                self.target_event(rel, TargetEvent::Withdrawn);
            }
            RelocFrame::Relay { rel, op } => {
                if let Some(staging) = self.core.moves.incoming.lock().get_mut(&rel) {
                    staging.arriving = Some(op);
                }
                self.target_event(rel, TargetEvent::Relay);
            }
            RelocFrame::Cutover { rel, count, crc } => {
                let matches = self
                    .core
                    .moves
                    .incoming
                    .lock()
                    .get(&rel)
                    .is_some_and(|s| relay_digest(&s.relay) == (count, crc));
                let serving = self.state() == NodeState::Serving;
                self.target_event(rel, TargetEvent::Cutover { matches, serving });
            }
            // Answers for a source: `protocol::addressed` gives them to the source's inbox.
            RelocFrame::Progress { .. }
            | RelocFrame::PrecopyHeld { .. }
            | RelocFrame::BaseLost { .. }
            | RelocFrame::RelayReady { .. }
            | RelocFrame::Refused { .. }
            | RelocFrame::Committed { .. }
            | RelocFrame::Aborted { .. } => {}
        }
    }

    /// Gives back every move to this node that has not reached its commit (the node drains or
    /// stops, and takes no unit any more), and says how many may still open here: those whose
    /// commit is in flight.
    pub(crate) fn stop_arrivals(&self) -> usize {
        let staged: Vec<RelocationId> = self.core.moves.incoming.lock().keys().copied().collect();
        for rel in staged {
            self.target_event(rel, TargetEvent::Stopping);
        }
        self.arriving()
    }

    /// How many moves into this node may still open here.
    pub(crate) fn arriving(&self) -> usize {
        self.core.moves.incoming.lock().len()
    }

    /// Gives up every move of `unit` to this node that has not reached its commit: recovery is
    /// rebuilding the unit, so its source died and no cutover will come.
    pub(crate) fn give_up_staged(&self, unit: &UnitId) {
        self.give_up_staging(|staging| staging.unit == *unit);
    }

    /// Gives up every move to this node whose source is not among the `live` nodes any more and
    /// that has not reached its commit: no cutover will come, and recovery rebuilds the unit.
    pub(crate) fn give_up_staged_from_departed(&self, live: &[NodeDescriptor]) {
        self.core
            .moves
            .precopied
            .lock()
            .retain(|_, p| live.iter().any(|d| d.node == p.source));
        self.give_up_staging(|staging| !live.iter().any(|d| d.node == staging.source));
    }

    /// Ends the staged moves `which` picks as if their source fell silent. A move already
    /// committing is left to end on its own (the store decides between it and a rebuild).
    fn give_up_staging(&self, which: impl Fn(&Staging) -> bool) {
        let staged: Vec<RelocationId> = self
            .core
            .moves
            .incoming
            .lock()
            .iter()
            .filter(|(_, staging)| which(staging))
            .map(|(rel, _)| *rel)
            .collect();
        for rel in staged {
            self.target_event(rel, TargetEvent::Silence);
        }
    }

    /// One piece of a pre-copy round: held for the move until its offer, within what this node
    /// holds of pre-copies in all ([`may_hold`]). A piece refused or broken drops what the move
    /// had here, and its round's end is answered as not held.
    fn on_precopy(
        &self,
        from: NodeId,
        rel: RelocationId,
        len: u64,
        offset: u64,
        crc: u32,
        bytes: &[u8],
    ) {
        // Pieces travel on the bulk stream, the offer does not: it may overtake them.
        let offered = self.core.moves.incoming.lock().contains_key(&rel);
        let mut precopied = self.core.moves.precopied.lock();
        prune(&mut precopied);
        let holding: u64 = precopied
            .iter()
            .filter(|(other, _)| **other != rel)
            .map(|(_, p)| p.held.len() as u64)
            .sum();
        if !may_hold(len, holding, self.config().max_state, offered) {
            precopied.remove(&rel);
            return;
        }
        let entry = precopied.entry(rel).or_insert_with(|| Precopied {
            source: from,
            held: Held::new(),
            touched: Instant::now(),
        });
        entry.touched = Instant::now();
        if let Err(error) = entry.held.piece(len, offset, bytes, crc) {
            tracing::warn!(relocation = %rel, %error, "pre-copy piece refused; the seal sends the whole image");
            precopied.remove(&rel);
        }
    }

    fn on_chunk(&self, rel: RelocationId, index: u32, offset: u64, bytes: &[u8]) {
        let failed = {
            let mut incoming = self.core.moves.incoming.lock();
            let Some(staging) = incoming.get_mut(&rel) else {
                return;
            };
            let Some(assembly) = staging.assembly.as_mut() else {
                return;
            };
            match assembly.add(index, offset, bytes) {
                Ok(false) => {
                    if staging.reported.elapsed() >= PROGRESS {
                        staging.reported = Instant::now();
                        let progress = Frame::Reloc(Box::new(RelocFrame::Progress { rel }));
                        if let Err(error) = self.mesh_send(&staging.source, progress) {
                            tracing::debug!(relocation = %rel, %error, "progress not sent");
                        }
                    }
                    return;
                }
                Ok(true) => None,
                Err(error) => Some(error),
            }
        };
        match failed {
            None => self.assembled(rel),
            Some(error) => {
                let refusal = Refusal::other(error.to_string());
                self.target_event(rel, TargetEvent::RestoreFailed(refusal));
            }
        }
    }

    /// Every chunk of a staged move is in (a difference to a pre-copy may have none): checks,
    /// decodes and restores the capture off the mesh's task.
    fn assembled(&self, rel: RelocationId) {
        let (assembly, source) = {
            let mut incoming = self.core.moves.incoming.lock();
            let Some(staging) = incoming.get_mut(&rel) else {
                return;
            };
            if !staging.assembly.as_ref().is_some_and(Assembly::complete) {
                return;
            }
            (staging.assembly.take(), staging.source.clone())
        };
        let Some(assembly) = assembly else {
            return;
        };
        // The source hears of the restore every PROGRESS for as long as it runs; of a large one,
        // which may take a while to check, as soon as its chunks are assembled too.
        let in_task = assembly.restores_in_task();
        let (restoring, restored) = oneshot::channel::<()>();
        if !in_task {
            self.report_progress(rel);
        }
        tokio::spawn(self.clone().progress_until(rel, restored));
        let node = self.clone();
        let restore = move || {
            let event = node.restore_staged(rel, &source, assembly);
            // No progress after the answer (a panic drops it too, and the reports end).
            drop(restoring);
            if let Some(event) = event {
                node.target_event(rel, event);
            }
        };
        // Off the mesh's inbound task, so the peer's other frames do not wait behind application
        // adapters; a large image, long to check, and a rebuild's deltas get a thread of their own.
        if in_task {
            tokio::spawn(async move { restore() });
        } else {
            tokio::task::spawn_blocking(restore);
        }
    }

    /// Checks the assembled image against the manifest (rebuilt first by the adapters' deltas,
    /// if it came as a recipe), decodes it, and restores the unit into a lane that does not run
    /// yet, registered only while the move still wants it. `None` if the whole image is asked
    /// for instead.
    fn restore_staged(
        &self,
        rel: RelocationId,
        source: &NodeId,
        assembly: Assembly,
    ) -> Option<TargetEvent> {
        let started = tokio::time::Instant::now();
        let capture = match assembly.finish(&*self.core) {
            Ok(capture) => capture,
            Err(error) if error.wants_whole() => {
                self.ask_whole(rel, source, &error);
                return None;
            }
            Err(error) => {
                return Some(TargetEvent::RestoreFailed(Refusal::other(
                    error.to_string(),
                )));
            }
        };
        // The capture says which room each Actor is in at the seal; the records the source read
        // may lag a join or leave made just before it, and the commit writes what runs.
        if let Some(staging) = self.core.moves.incoming.lock().get_mut(&rel) {
            for at in &mut staging.records {
                let cell = capture.cells.iter().find(|cell| cell.id == at.id);
                if let Some(MembershipData::Actor(spot)) = cell.map(|cell| &cell.membership) {
                    at.record = at.record.in_spot(spot.clone());
                }
            }
        }
        let restored = match Lane::restore(self, capture) {
            Ok(restored) => restored,
            Err(reason) => return Some(TargetEvent::RestoreFailed(reason)),
        };
        // Registered under the staged moves' lock: a copy withdrawn or given up while it
        // restored is never seen here.
        let mut incoming = self.core.moves.incoming.lock();
        Some(match incoming.get_mut(&rel) {
            Some(staging) => match restored.register(self, source) {
                Ok(lane) => {
                    staging.lane = Some(lane);
                    staging.restored_in = started.elapsed();
                    TargetEvent::Restored
                }
                Err(reason) => TargetEvent::RestoreFailed(reason),
            },
            None => TargetEvent::Restored,
        })
    }

    /// What arrived did not make the sealed image here ([`TransferError::wants_whole`]): the
    /// staged move waits for the whole image, as one whose base was never held.
    fn ask_whole(&self, rel: RelocationId, source: &NodeId, error: &TransferError) {
        match self.core.moves.incoming.lock().get_mut(&rel) {
            Some(staging) => staging.awaiting_whole = true,
            None => return,
        }
        tracing::warn!(relocation = %rel, %error, "asking the source for the whole image");
        let lost = Frame::Reloc(Box::new(RelocFrame::BaseLost { rel }));
        if let Err(error) = self.mesh_send(source, lost) {
            tracing::debug!(relocation = %rel, %error, "request for the whole image not sent");
        }
    }

    /// Tells the source of a staged move that the work on it goes on; false once the move is gone
    /// here or the source cannot be reached.
    fn report_progress(&self, rel: RelocationId) -> bool {
        let source = match self.core.moves.incoming.lock().get_mut(&rel) {
            Some(staging) => {
                staging.reported = Instant::now();
                staging.source.clone()
            }
            None => return false,
        };
        let progress = Frame::Reloc(Box::new(RelocFrame::Progress { rel }));
        match self.mesh_send(&source, progress) {
            Ok(()) => true,
            Err(error) => {
                tracing::debug!(relocation = %rel, %error, "progress not sent");
                false
            }
        }
    }

    /// Reports progress every [`PROGRESS`] until `restored` ends (the restore answered, or its
    /// thread unwound) or the node stops: a node that stops reporting is silent, as it should be.
    async fn progress_until(self, rel: RelocationId, mut restored: oneshot::Receiver<()>) {
        loop {
            tokio::select! {
                _ = &mut restored => return,
                () = self.core.stop.cancelled() => return,
                () = tokio::time::sleep(PROGRESS) => {
                    if !self.report_progress(rel) {
                        return;
                    }
                }
            }
        }
    }

    /// Sleeps until the staged move's machine wants its timeout, and hands it the time then.
    async fn stage_timer(self, rel: RelocationId) {
        loop {
            let wake = match self.core.moves.incoming.lock().get(&rel) {
                Some(staging) => staging.machine.poll_timeout(),
                None => None,
            };
            let Some(wake) = wake else {
                return;
            };
            tokio::time::sleep_until(Instant::from_std(wake)).await;
            self.target_step(rel, |machine| {
                machine.handle_timeout(Instant::now().into_std())
            });
        }
    }

    /// Feeds an event to a staged move and carries out its actions.
    fn target_event(&self, rel: RelocationId, event: TargetEvent) {
        self.target_step(rel, |machine| machine.on(event));
    }

    /// Takes a staged move's machine one step and carries out the actions it returns.
    fn target_step(
        &self,
        rel: RelocationId,
        step: impl FnOnce(&mut TargetMachine) -> Vec<TargetAction>,
    ) {
        let mut incoming = self.core.moves.incoming.lock();
        let Some(staging) = incoming.get_mut(&rel) else {
            return;
        };
        for action in step(&mut staging.machine) {
            let reply = |frame: RelocFrame| {
                if let Err(error) = self.mesh_send(&staging.source, Frame::Reloc(Box::new(frame))) {
                    tracing::warn!(relocation = %rel, %error, "answer to the source not sent");
                }
            };
            match action {
                TargetAction::SendRelayReady => reply(RelocFrame::RelayReady {
                    rel,
                    restore: staging.restored_in,
                }),
                TargetAction::SendRefused(reason) => reply(RelocFrame::Refused { rel, reason }),
                TargetAction::SendCommitted => reply(RelocFrame::Committed {
                    rel,
                    commit: staging.committed_in,
                }),
                TargetAction::SendAborted(reason) => reply(RelocFrame::Aborted { rel, reason }),
                TargetAction::KeepRelay => staging.relay.extend(staging.arriving.take()),
                TargetAction::ClearRelay => staging.relay.clear(),
                TargetAction::Commit => {
                    tokio::spawn(self.clone().commit(rel, staging.records.clone()));
                }
                TargetAction::ReadBack => {
                    tokio::spawn(self.clone().read_back(rel, staging.records.clone()));
                }
                TargetAction::Open => {
                    let relay = std::mem::take(&mut staging.relay);
                    let unit = staging.records.iter().find(|at| at.id == staging.unit);
                    if let (Some(lane), Some(at)) = (&staging.lane, unit) {
                        let committed = tokio::time::Instant::now();
                        // The record's generations as the commit wrote them (its lease
                        // generation, which `Owned` does not keep, is not read again here).
                        let owned = Owned::of(&self.record_here(at, 0));
                        let _ = lane.ctl.send(Control::OpenMoved {
                            relay,
                            committed,
                            owned,
                        });
                    }
                    tracing::info!(relocation = %rel, unit = %staging.unit, "unit opened here");
                }
                TargetAction::Discard => {
                    if let Some(lane) = staging.lane.take() {
                        // Unregistered now, so a newer offer of the unit finds no copy in its way.
                        for at in &staging.records {
                            self.core
                                .units
                                .directory
                                .remove_if_on(&at.id, Arc::as_ptr(&lane));
                        }
                        let _ = lane.ctl.send(Control::Discard);
                    }
                }
            }
        }
        if staging.machine.finished() {
            incoming.remove(&rel);
            self.core.moves.arrivals.send_replace(incoming.len());
        }
    }

    /// The records this node writes when it takes the unit over, only while this process holds
    /// the node's lease.
    fn owned_here(&self, records: &[RecordAt]) -> (Vec<Condition>, Vec<Op>) {
        let lease = self.lease();
        let (mut conditions, ops): (Vec<_>, Vec<_>) = records
            .iter()
            .map(|at| {
                let key = unit_key(&at.id);
                let record = self.record_here(at, lease.generation);
                (
                    Condition::version(key.clone(), at.version),
                    Op::put(key, record.encode()),
                )
            })
            .unzip();
        conditions.push(Condition::lease(&lease));
        (conditions, ops)
    }

    /// The record a commit writes for `at`: owned here, in the room the capture says it is in.
    fn record_here(&self, at: &RecordAt, lease_generation: u64) -> UnitRecord {
        at.record
            .moved_to(self.id().clone(), lease_generation, at.record.spot.clone())
    }

    /// Writes this node as owner of every record, conditional on each being as the source read it,
    /// in a store call it may share with other moves' commits (its own outcome all the same).
    async fn commit(self, rel: RelocationId, records: Vec<RecordAt>) {
        let (conditions, ops) = self.owned_here(&records);
        let started = tokio::time::Instant::now();
        let outcome = self.core.committer.batch(conditions, ops).await;
        if let Some(staging) = self.core.moves.incoming.lock().get_mut(&rel) {
            staging.committed_in = started.elapsed();
        }
        let event = match BatchOutcome::answer(&outcome) {
            WriteAnswer::Committed => TargetEvent::CommitWon,
            WriteAnswer::Conflict => TargetEvent::CommitLost,
            WriteAnswer::NoAnswer => {
                tracing::warn!(relocation = %rel, "commit result unknown; reading back");
                TargetEvent::CommitUnknown
            }
        };
        self.target_event(rel, event);
    }

    /// After a commit whose result did not arrive: is this node recorded as owner?
    async fn read_back(self, rel: RelocationId, records: Vec<RecordAt>) {
        let Some(first) = records.first() else {
            self.target_event(rel, TargetEvent::ReadShowsOther);
            return;
        };
        let lease_generation = self.core.ownership.lease.lock().generation;
        let wrote = self.record_here(first, lease_generation);
        let write = ConditionalWrite::new(wrote);
        let now = self.read_record_back(&first.id).await;
        let event = match write.on_read(now.as_ref().map(Option::as_ref).map_err(|_| ())) {
            Settled::Won => TargetEvent::ReadShowsOwner,
            Settled::Lost => TargetEvent::ReadShowsOther,
            Settled::ReadBack | Settled::Unknown => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                TargetEvent::CommitUnknown
            }
        };
        self.target_event(rel, event);
    }
}
