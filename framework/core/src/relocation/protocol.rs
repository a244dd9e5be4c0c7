//! The relocation protocol as two plain state machines, one per side: events in, actions out.
//!
//! Nothing here touches a lane, the mesh, the store or the clock; the async shells do, and feed
//! back what happened. So every interleaving that matters (a lost cutover, a late relay record,
//! a target that dies after relay-ready, a store write whose result never arrives) is driven by
//! a unit test below.
//!
//! The point of no return is the source's handover (relay and cutover). Before it, any failure
//! restores the unit on the source. After it, the source may only take the unit back by a
//! conditional write that wins against a target that never committed; whichever write wins owns it.
//!
//! The source gives up on a target that has gone silent, not on one that works long: the target
//! reports progress while it assembles and restores the unit, and each report is no silence. The
//! move's deadline bounds the whole. The source machine keeps its own time: every event comes with
//! the time it was heard, [`SourceMachine::poll_timeout`] says when it next wants to be woken, and
//! [`SourceMachine::handle_timeout`] turns a passed time into silence, the deadline, a look for
//! gone gateways or another try of the fence.
//!
//! Client sessions bound to the unit's Actors are part of the move: before the lane is sealed,
//! their gateways are told to hold those Actors' inputs, and the seal waits for every
//! acknowledgement; Actors found bound only at the capture have their gateways told then, and
//! the handover waits for those. Whichever way the move ends, the gateways are told where the
//! Actors run now (target, source, or nowhere), and release what they held there.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::RelocationId;
use super::frames::{Refusal, RelocFrame};
use crate::authority::UnitRecord;
use crate::ids::NodeId;

/// What happened, as the source sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceEvent {
    /// The lane answered which gateways hold sessions bound to the unit's Actors (none, often);
    /// from now on it holds back new binds until the move ends.
    Quiesced {
        /// The nodes whose gateways hold those sessions: each is told to seal the Actors' inputs.
        gateways: BTreeSet<NodeId>,
    },
    /// A gateway holds the inputs of the unit's Actors it was told about; every input it sent
    /// before is queued here.
    GatewaySealed(NodeId),
    /// The lane reached a turn boundary and captured the unit.
    Captured {
        /// Gateways of sessions bound since the lane was asked, not told to hold inputs yet.
        late: BTreeSet<NodeId>,
    },
    /// The unit cannot be sealed (it stopped, or it is not relocatable).
    SealRefused(String),
    /// The target is still working on the offer (assembling, restoring): not silence.
    Progress,
    /// The target answered a pre-copy round: whether it holds its image whole.
    PrecopyHeld {
        /// The round answered.
        round: u32,
        /// Whether it holds it.
        holds: bool,
    },
    /// The target does not hold the pre-copy the capture was sent as a difference to.
    BaseLost,
    /// The target restored the unit into a queue that does not run yet.
    RelayReady,
    /// The target refused the unit (restore failed, checksum, unknown factory...).
    Refused(Refusal),
    /// The target recorded itself as owner and opened the unit.
    Committed,
    /// The target gave up before committing.
    Aborted(String),
    /// Nothing (no answer, no progress) was heard for the step time, or the link to the target
    /// dropped.
    Silence,
    /// The operation's deadline passed.
    Deadline,
    /// The source's conditional write (reclaim or force-stop) won.
    FenceWon,
    /// The source's conditional write lost: the target committed.
    FenceLost,
    /// The store could not be asked; whether the write landed is unknown, so ask again soon.
    FenceUnknown,
    /// The fence's conditions failed, but the records read again still name this node and the
    /// unit's incarnation (an earlier fence landed unseen, or recovery switched a field): the
    /// fence is tried again at once on what the store holds now.
    FenceStale,
}

/// A move's frame, by the side of the move it is for: a node is the source of some moves and the
/// target of others, and each side has its own inbox.
#[derive(Debug)]
pub enum Addressed {
    /// An answer of the target for the move's source: the event it is, and what it says of the
    /// target's phases (for the move's report).
    ToSource {
        /// The move the answer is for: it picks the source machine that is fed.
        rel: RelocationId,
        /// What the source machine is fed.
        event: SourceEvent,
        /// How long the target's restore or commit took, when the answer says so.
        phase: Option<ReportedPhase>,
    },
    /// A frame from the source, for the move's target.
    ToTarget(RelocFrame),
}

/// One of the target's phases, as its answer reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportedPhase {
    /// How long the restore took.
    Restore(Duration),
    /// How long the store commit took.
    Commit(Duration),
}

/// Says which side of a move a frame is for.
pub fn addressed(frame: RelocFrame) -> Addressed {
    let to_source = |rel, event, phase| Addressed::ToSource { rel, event, phase };
    match frame {
        RelocFrame::Progress { rel } => to_source(rel, SourceEvent::Progress, None),
        RelocFrame::RelayReady { rel, restore } => to_source(
            rel,
            SourceEvent::RelayReady,
            Some(ReportedPhase::Restore(restore)),
        ),
        RelocFrame::Refused { rel, reason } => to_source(rel, SourceEvent::Refused(reason), None),
        RelocFrame::Committed { rel, commit } => to_source(
            rel,
            SourceEvent::Committed,
            Some(ReportedPhase::Commit(commit)),
        ),
        RelocFrame::Aborted { rel, reason } => to_source(rel, SourceEvent::Aborted(reason), None),
        RelocFrame::PrecopyHeld { rel, round, holds } => {
            to_source(rel, SourceEvent::PrecopyHeld { round, holds }, None)
        }
        RelocFrame::BaseLost { rel } => to_source(rel, SourceEvent::BaseLost, None),
        to_target @ (RelocFrame::Offer { .. }
        | RelocFrame::Chunk { .. }
        | RelocFrame::Precopy { .. }
        | RelocFrame::PrecopyEnd { .. }
        | RelocFrame::Resend { .. }
        | RelocFrame::RelayReset { .. }
        | RelocFrame::Withdraw { .. }
        | RelocFrame::Relay { .. }
        | RelocFrame::Cutover { .. }) => Addressed::ToTarget(to_target),
    }
}

/// Where the gateways of a move's bound Actors send what they held, and inputs from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionsTo {
    /// The target: the move committed.
    Target,
    /// The source: the move was abandoned, and the unit runs there again.
    Source,
}

/// What the source shell must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceAction {
    /// Tell these gateways to hold the inputs of the unit's Actors, and acknowledge.
    SealGateways(BTreeSet<NodeId>),
    /// Say which of these gateways, told to seal and not heard from, are gone (no mesh link up to
    /// them, or counted dead), as [`SourceEvent::GatewaySealed`]: their sessions went with them.
    CheckGateways(BTreeSet<NodeId>),
    /// Seal the lane at its next turn boundary and capture the unit.
    SealUnit,
    /// Tell every gateway told to seal where the unit's Actors run now.
    ReleaseSessions(SessionsTo),
    /// Send the manifest and the chunks of the capture.
    SendCapture,
    /// Send the whole image of the capture: the target lost the pre-copy it was a difference to.
    SendWhole,
    /// Stop waiting for a seal that has not happened.
    CancelSeal,
    /// Relay what arrived since the seal, then the cutover (the point of no return).
    Handover,
    /// Tell the target to drop what it staged: the move was given up before the handover, and
    /// an offer still on its way must not keep the unit staged there.
    Withdraw,
    /// Send the relay records and the cutover again (the first ones may be lost).
    ResendHandover,
    /// Run the unit on the source again: saved work, then what was held, in order.
    Resume,
    /// Write the authority record back to the source, conditional on it being unchanged, waiting
    /// at most `wait` for the store's answer.
    FenceReclaim {
        /// How long to wait for the store.
        wait: Duration,
    },
    /// The target owns the unit: drop the source's copy.
    Release,
}

/// How a move ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveEnd {
    /// The unit runs on the target.
    Moved,
    /// The unit runs on the source again, nothing lost (the reason why it did not move).
    Restored(String),
    /// The unit was never sealed; it runs on as before.
    NotSealed(String),
    /// Past the point of no return, the target never committed; the source took the unit back,
    /// with its state and queue, in order.
    Reclaimed,
    /// Past the point of no return, the store has not answered by the deadline whether the
    /// target's commit or the source's reclaim won. The unit is held (it runs nowhere) until the
    /// store answers; then it opens wherever the winning write says, nothing lost.
    Undecided,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SourcePhase {
    /// Asking the lane for the gateways of its bound sessions.
    Quiescing,
    /// Waiting for these gateways to hold inputs.
    SealingSessions {
        pending: BTreeSet<NodeId>,
    },
    Sealing,
    /// Shipping the capture; the handover waits for relay-ready and for late gateways.
    Transferring {
        pending: BTreeSet<NodeId>,
        relay_ready: bool,
    },
    HandedOver {
        resent: bool,
    },
    /// Asking the store to take the unit back; whichever of this and the target's commit wins
    /// owns it.
    Fencing,
    Done(MoveEnd),
}

/// How long a move's source waits for what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceTiming {
    /// Nothing heard from the target this long is silence; also the longest one fence write is
    /// waited for.
    pub step: Duration,
    /// How often the source looks for gone gateways while some told to seal have not answered.
    pub gateway_check: Duration,
    /// How long the mesh takes at most to notice a dead link: a gateway that stays linked but
    /// silent is waited for that long (and a check more) before the move calls it silence.
    pub link_timeout: Duration,
    /// How soon the fence is asked again when the store's answer was unknown.
    pub fence_retry: Duration,
    /// How long a fence write is waited for at the least, even past the deadline.
    pub fence_grace: Duration,
    /// How many times in a row a stale fence is tried again at once before the source waits
    /// [`fence_retry`](Self::fence_retry) (a record that keeps changing under it).
    pub stale_tries: u8,
}

impl Default for SourceTiming {
    fn default() -> Self {
        SourceTiming {
            step: Duration::from_secs(5),
            gateway_check: Duration::from_millis(100),
            link_timeout: Duration::from_secs(5),
            fence_retry: Duration::from_millis(100),
            fence_grace: Duration::from_millis(500),
            stale_tries: 4,
        }
    }
}

/// The source side of one move.
#[derive(Debug, Clone)]
pub struct SourceMachine {
    phase: SourcePhase,
    /// Whether any gateway was told to seal (it must then hear how the move ended).
    sessions: bool,
    timing: SourceTiming,
    deadline: Instant,
    deadline_passed: bool,
    /// When anything was last heard: silence counts from here.
    heard: Instant,
    /// When gone gateways were last looked for (or anything heard).
    checked: Instant,
    /// When the fence is asked again, after an unknown answer.
    retry_at: Option<Instant>,
    /// Stale fences in a row.
    stale: u8,
    /// The fence's answer was unknown at the deadline: the move reports as undecided, and the
    /// fence goes on being asked until the store says.
    undecided: bool,
    /// The whole image was sent again once: the target lost its pre-copied base.
    resent_whole: bool,
}

impl SourceMachine {
    /// A move that just (at `now`) asked its lane for the gateways of its bound sessions, to end
    /// by `deadline` one way or another.
    pub fn new(now: Instant, deadline: Instant, timing: SourceTiming) -> Self {
        SourceMachine {
            phase: SourcePhase::Quiescing,
            sessions: false,
            timing,
            deadline,
            deadline_passed: false,
            heard: now,
            checked: now,
            retry_at: None,
            stale: 0,
            undecided: false,
            resent_whole: false,
        }
    }

    /// The move's deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the deadline passed while the move ran.
    pub fn deadline_passed(&self) -> bool {
        self.deadline_passed
    }

    /// Whether the move is past its deadline with the store not having said who owns the unit:
    /// it reports as [`MoveEnd::Undecided`] while the fence goes on being asked.
    pub fn undecided(&self) -> bool {
        self.undecided && self.end().is_none()
    }

    /// How long the move waits for an answer before it takes silence for one.
    pub fn step(&self) -> Duration {
        self.timing.step
    }

    /// The gateways told to seal that have not acknowledged yet.
    fn pending_gateways(&self) -> Option<&BTreeSet<NodeId>> {
        match &self.phase {
            SourcePhase::SealingSessions { pending }
            | SourcePhase::Transferring { pending, .. }
                if !pending.is_empty() =>
            {
                Some(pending)
            }
            _ => None,
        }
    }

    /// How long nothing heard is silence: while gateways may still answer, as long as the mesh
    /// takes to notice that one of them is gone.
    fn silence(&self) -> Duration {
        if self.pending_gateways().is_some() {
            self.timing
                .step
                .max(self.timing.link_timeout + self.timing.gateway_check)
        } else {
            self.timing.step
        }
    }

    /// When the machine next wants [`handle_timeout`](Self::handle_timeout), if it waits at all.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.end().is_some() {
            return None;
        }
        if self.fencing() {
            return self.retry_at;
        }
        let mut next = self.heard + self.silence();
        if !self.deadline_passed {
            next = next.min(self.deadline);
        }
        if self.pending_gateways().is_some() {
            next = next.min(self.checked + self.timing.gateway_check);
        }
        Some(next)
    }

    /// What the time `now` brings: the deadline, a look for gone gateways, silence, or another
    /// try of a fence whose answer was unknown.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<SourceAction> {
        if self.end().is_some() {
            return Vec::new();
        }
        if self.fencing() {
            return match self.retry_at {
                Some(at) if at <= now => {
                    self.retry_at = None;
                    vec![self.fence(now)]
                }
                _ => Vec::new(),
            };
        }
        if !self.deadline_passed && now >= self.deadline {
            return self.on(SourceEvent::Deadline, now);
        }
        if let Some(pending) = self.pending_gateways()
            && now >= self.checked + self.timing.gateway_check
        {
            let pending = pending.clone();
            self.checked = now;
            return vec![SourceAction::CheckGateways(pending)];
        }
        if now >= self.heard + self.silence() {
            return self.on(SourceEvent::Silence, now);
        }
        Vec::new()
    }

    /// One try of the fence, waiting for the store at most what is left of the deadline (but the
    /// grace at the least); once undecided, a whole step.
    fn fence(&self, now: Instant) -> SourceAction {
        let wait = if self.undecided {
            self.timing.step
        } else {
            self.deadline
                .saturating_duration_since(now)
                .clamp(self.timing.fence_grace, self.timing.step)
        };
        SourceAction::FenceReclaim { wait }
    }

    /// Asks the fence again after the retry time; past the deadline, the move is undecided.
    fn fence_later(&mut self, now: Instant) {
        self.stale = 0;
        self.undecided |= now >= self.deadline;
        self.retry_at = Some(now + self.timing.fence_retry);
    }

    /// The actions that end a move: `then`, and news for the gateways if any was sealed.
    fn ending(&self, then: Option<SourceAction>, to: SessionsTo) -> Vec<SourceAction> {
        let mut actions: Vec<SourceAction> = then.into_iter().collect();
        if self.sessions {
            actions.push(SourceAction::ReleaseSessions(to));
        }
        actions
    }

    /// The ending of a move given up while the target may still be staging the unit: tell it to
    /// drop it, then run the unit here again.
    fn withdrawing(&self, to: SessionsTo) -> Vec<SourceAction> {
        let mut actions = vec![SourceAction::Withdraw];
        actions.extend(self.ending(Some(SourceAction::Resume), to));
        actions
    }

    /// How the move ended, once it has.
    pub fn end(&self) -> Option<&MoveEnd> {
        match &self.phase {
            SourcePhase::Done(end) => Some(end),
            _ => None,
        }
    }

    /// Whether the point of no return is behind.
    pub fn handed_over(&self) -> bool {
        matches!(
            self.phase,
            SourcePhase::HandedOver { .. } | SourcePhase::Fencing
        ) || matches!(
            self.phase,
            SourcePhase::Done(MoveEnd::Moved | MoveEnd::Reclaimed)
        )
    }

    /// Whether the move waits for the store to say who owns the unit.
    pub fn fencing(&self) -> bool {
        self.phase == SourcePhase::Fencing
    }

    /// Feeds one event, heard at `now`; returns what to do, in order.
    pub fn on(&mut self, event: SourceEvent, now: Instant) -> Vec<SourceAction> {
        use SourceAction as A;
        use SourceEvent as E;
        use SourcePhase as P;
        self.heard = now;
        self.checked = now;
        if event == E::Deadline {
            self.deadline_passed = true;
        }
        let (next, actions) = match (&self.phase, event) {
            (P::Done(_), _) => return Vec::new(),
            // Honest work that takes long: the shell waits on, the phase stays as it is.
            (_, E::Progress) => return Vec::new(),

            (P::Quiescing, E::Quiesced { gateways }) if gateways.is_empty() => {
                (P::Sealing, vec![A::SealUnit])
            }
            (P::Quiescing, E::Quiesced { gateways }) => {
                self.sessions = true;
                (
                    P::SealingSessions {
                        pending: gateways.clone(),
                    },
                    vec![A::SealGateways(gateways)],
                )
            }
            (P::Quiescing, E::SealRefused(why)) => (P::Done(MoveEnd::NotSealed(why)), vec![]),
            (P::Quiescing, E::Deadline) => (
                P::Done(MoveEnd::NotSealed(
                    "the deadline passed before the unit answered".into(),
                )),
                vec![A::CancelSeal],
            ),
            (P::Quiescing, _) => return Vec::new(),

            (P::SealingSessions { pending }, E::GatewaySealed(gateway)) => {
                let mut pending = pending.clone();
                pending.remove(&gateway);
                if pending.is_empty() {
                    (P::Sealing, vec![A::SealUnit])
                } else {
                    (P::SealingSessions { pending }, vec![])
                }
            }
            (P::SealingSessions { pending }, E::Silence | E::Deadline) => {
                let why = format!(
                    "session gateways {} did not acknowledge the seal",
                    names(pending)
                );
                let mut actions = vec![A::CancelSeal];
                actions.extend(self.ending(None, SessionsTo::Source));
                (P::Done(MoveEnd::NotSealed(why)), actions)
            }
            (P::SealingSessions { .. }, _) => return Vec::new(),

            (P::Sealing, E::Captured { late }) if late.is_empty() => (
                P::Transferring {
                    pending: late,
                    relay_ready: false,
                },
                vec![A::SendCapture],
            ),
            (P::Sealing, E::Captured { late }) => {
                self.sessions = true;
                (
                    P::Transferring {
                        pending: late.clone(),
                        relay_ready: false,
                    },
                    vec![A::SealGateways(late), A::SendCapture],
                )
            }
            (P::Sealing, E::SealRefused(why)) => (
                P::Done(MoveEnd::NotSealed(why)),
                self.ending(None, SessionsTo::Source),
            ),
            (P::Sealing, E::Deadline) => (
                P::Done(MoveEnd::NotSealed(
                    "the deadline passed before a turn boundary".into(),
                )),
                self.ending(Some(A::CancelSeal), SessionsTo::Source),
            ),
            (P::Sealing, _) => return Vec::new(),

            (P::Transferring { pending, .. }, E::RelayReady) if pending.is_empty() => {
                (P::HandedOver { resent: false }, vec![A::Handover])
            }
            (P::Transferring { pending, .. }, E::RelayReady) => (
                P::Transferring {
                    pending: pending.clone(),
                    relay_ready: true,
                },
                vec![],
            ),
            (
                P::Transferring {
                    pending,
                    relay_ready,
                },
                E::GatewaySealed(gateway),
            ) => {
                let mut pending = pending.clone();
                pending.remove(&gateway);
                if pending.is_empty() && *relay_ready {
                    (P::HandedOver { resent: false }, vec![A::Handover])
                } else {
                    (
                        P::Transferring {
                            pending,
                            relay_ready: *relay_ready,
                        },
                        vec![],
                    )
                }
            }
            (P::Transferring { .. }, E::BaseLost) if !self.resent_whole => {
                self.resent_whole = true;
                return vec![A::SendWhole];
            }
            (P::Transferring { .. }, E::BaseLost) => (
                P::Done(MoveEnd::Restored(
                    "the target lost the pre-copied image twice".into(),
                )),
                self.withdrawing(SessionsTo::Source),
            ),
            (P::Transferring { .. }, E::Refused(Refusal { why, .. }) | E::Aborted(why)) => (
                P::Done(MoveEnd::Restored(why)),
                self.ending(Some(A::Resume), SessionsTo::Source),
            ),
            (P::Transferring { pending, .. }, E::Silence) => {
                let why = if pending.is_empty() {
                    "the target did not answer".to_owned()
                } else {
                    format!(
                        "session gateways {} did not acknowledge the seal",
                        names(pending)
                    )
                };
                (
                    P::Done(MoveEnd::Restored(why)),
                    self.withdrawing(SessionsTo::Source),
                )
            }
            (P::Transferring { .. }, E::Deadline) => (
                P::Done(MoveEnd::Restored(
                    "the deadline passed before relay-ready".into(),
                )),
                self.withdrawing(SessionsTo::Source),
            ),
            (P::Transferring { .. }, _) => return Vec::new(),

            (P::HandedOver { .. }, E::Committed) => (
                P::Done(MoveEnd::Moved),
                self.ending(Some(A::Release), SessionsTo::Target),
            ),
            (P::HandedOver { resent: false }, E::Silence) => {
                (P::HandedOver { resent: true }, vec![A::ResendHandover])
            }
            // The target restored the unit whole: at the deadline it is not thrown away, but goes
            // to whichever conditional write wins, the target's commit or the source's reclaim.
            (P::HandedOver { resent: true }, E::Silence)
            | (P::HandedOver { .. }, E::Aborted(_) | E::Deadline) => {
                (P::Fencing, vec![self.fence(now)])
            }
            (P::HandedOver { .. }, _) => return Vec::new(),

            // A commit may still arrive while the fence is asked; the store decides either way.
            (P::Fencing, E::FenceWon) => (
                P::Done(MoveEnd::Reclaimed),
                self.ending(Some(A::Resume), SessionsTo::Source),
            ),
            (P::Fencing, E::FenceLost) => (
                P::Done(MoveEnd::Moved),
                self.ending(Some(A::Release), SessionsTo::Target),
            ),
            // Unknown is never taken as won: ask again soon, until the store says. Past the
            // deadline the move is reported undecided meanwhile.
            (P::Fencing, E::FenceUnknown) => {
                self.fence_later(now);
                return Vec::new();
            }
            (P::Fencing, E::FenceStale) if self.stale + 1 < self.timing.stale_tries => {
                self.stale += 1;
                (P::Fencing, vec![self.fence(now)])
            }
            (P::Fencing, E::FenceStale) => {
                self.fence_later(now);
                return Vec::new();
            }
            (P::Fencing, _) => return Vec::new(),
        };
        self.phase = next;
        actions
    }
}

/// The gateways a move tells to hold inputs as it quiesces its unit: those of the Actors bound
/// now, unless the unit seals only at its application's safe point (an ApplicationSignaled spot,
/// which may run on for the rest of a round); then its gateways are told at the capture, of the
/// Actors it holds by then ([`SourceEvent::Captured`]'s `late`), so players are not held up.
pub fn told_at_quiesce(bound: BTreeSet<NodeId>, waits_for_the_app: bool) -> BTreeSet<NodeId> {
    if waits_for_the_app {
        BTreeSet::new()
    } else {
        bound
    }
}

/// What a record read again after the source's reclaim met a conflict says, record by record:
/// the unit is still this node's, and its reclaim may be tried again on the record as it stands
/// ([`SourceEvent::FenceStale`]: an earlier reclaim landed unseen, or a field changed that names
/// no new owner); or it changed hands since it was read ([`SourceEvent::FenceLost`]). A record
/// that names this node again after passing through another owner (the unit moved away and came
/// back) is lost too: the copy that runs it here now is another, and this one is stale.
pub fn fence_conflict<'a>(
    me: &NodeId,
    read: impl IntoIterator<Item = (&'a UnitRecord, Option<&'a UnitRecord>)>,
) -> SourceEvent {
    let still_mine = |(read, now): (&UnitRecord, Option<&UnitRecord>)| {
        now.is_some_and(|now| {
            now.owner == *me
                && now.object_generation == read.object_generation
                && now.owner_generation <= read.owner_generation + 1
        })
    };
    if read.into_iter().all(still_mine) {
        SourceEvent::FenceStale
    } else {
        SourceEvent::FenceLost
    }
}

fn names(nodes: &BTreeSet<NodeId>) -> String {
    nodes
        .iter()
        .map(NodeId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What happened, as the target sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetEvent {
    /// Every chunk arrived and checked out, and the unit was restored into a gated queue.
    Restored,
    /// The transfer or the restore failed.
    RestoreFailed(Refusal),
    /// A relay record arrived.
    Relay,
    /// The source starts resending its relay records: they replace what came before.
    RelayReset,
    /// The cutover arrived with the source's count and checksum of relay records.
    Cutover {
        /// Whether the records received match it.
        matches: bool,
        /// Whether this node still takes units. One that began to drain or stop since it took
        /// the offer gives the unit back here, as at [`TargetEvent::Stopping`]: the node says it
        /// drains before it stops what is staged, and no move may commit into it in between.
        serving: bool,
    },
    /// The conditional write of the new owner won.
    CommitWon,
    /// It lost: the source took the unit back (or it changed otherwise).
    CommitLost,
    /// The store did not answer; whether the write landed is unknown.
    CommitUnknown,
    /// A re-read after an unknown write found this node recorded as owner.
    ReadShowsOwner,
    /// A re-read found someone else (or nothing) recorded.
    ReadShowsOther,
    /// The source went silent before the cutover.
    Silence,
    /// The source gave the move up before the handover.
    Withdrawn,
    /// This node began to drain or shut down: a unit not yet committing is given back to its
    /// source (which restores it, or reclaims it by its fenced write); a commit in flight is
    /// waited for, since its write cannot be called back.
    Stopping,
}

/// What the target shell must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetAction {
    /// Tell the source the unit is restored and may be relayed.
    SendRelayReady,
    /// Tell the source the unit was refused, with the reason.
    SendRefused(Refusal),
    /// Keep the relay record.
    KeepRelay,
    /// Drop the relay records kept so far (a resent batch replaces them).
    ClearRelay,
    /// Write this node as the owner, conditional on the record as the source last read it.
    Commit,
    /// Read the record back after a write whose result did not arrive.
    ReadBack,
    /// Open the unit: saved work, relay records, then later arrivals.
    Open,
    /// Tell the source the unit is committed here.
    SendCommitted,
    /// Drop the staged unit; what reached its queue follows the real owner.
    Discard,
    /// Tell the source this node gave up.
    SendAborted(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TargetPhase {
    Staging,
    Ready,
    Committing,
    ReadingBack,
    Open,
    Gone,
}

/// How long a staged unit waits past its move's deadline before the target gives it up: the
/// source decides first (it reclaims at the deadline), and the target lets that decision arrive.
pub const PAST_DEADLINE: Duration = Duration::from_secs(5);

/// The longest a source may ask a unit to stay staged, whatever its offer says.
pub const MAX_STAGED: Duration = Duration::from_secs(24 * 60 * 60);

/// The target side of one move.
#[derive(Debug, Clone)]
pub struct TargetMachine {
    phase: TargetPhase,
    /// Until the cutover, the source is taken for silent from here on.
    staged_until: Instant,
}

impl TargetMachine {
    /// A move whose manifest arrived at `now`, to be decided `within` this long (the source's
    /// deadline, as its offer says).
    pub fn new(now: Instant, within: Duration) -> Self {
        TargetMachine {
            phase: TargetPhase::Staging,
            staged_until: now + within.min(MAX_STAGED) + PAST_DEADLINE,
        }
    }

    /// When the machine next wants [`handle_timeout`](Self::handle_timeout): while the unit is
    /// staged and no cutover came, when the source is taken for silent.
    pub fn poll_timeout(&self) -> Option<Instant> {
        matches!(self.phase, TargetPhase::Staging | TargetPhase::Ready).then_some(self.staged_until)
    }

    /// What the time `now` brings: the source's silence, once the staged time is over.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<TargetAction> {
        match self.poll_timeout() {
            Some(until) if now >= until => self.on(TargetEvent::Silence),
            _ => Vec::new(),
        }
    }

    /// Whether the move is over on this side (opened or given up).
    pub fn finished(&self) -> bool {
        matches!(self.phase, TargetPhase::Open | TargetPhase::Gone)
    }

    /// Whether the unit opened here.
    pub fn opened(&self) -> bool {
        self.phase == TargetPhase::Open
    }

    /// Whether the unit may still open here: the move is not over on this side.
    pub fn may_open(&self) -> bool {
        !self.finished()
    }

    /// Whether this node's commit is in flight or being read back: the move can no longer be
    /// given up here, only decided by the store.
    pub fn committing(&self) -> bool {
        matches!(
            self.phase,
            TargetPhase::Committing | TargetPhase::ReadingBack
        )
    }

    /// Feeds one event; returns what to do, in order.
    pub fn on(&mut self, event: TargetEvent) -> Vec<TargetAction> {
        use TargetAction as A;
        use TargetEvent as E;
        use TargetPhase as P;
        let (next, actions) = match (&self.phase, event) {
            (P::Open | P::Gone, _) => return Vec::new(),
            (P::Staging, E::Restored) => (P::Ready, vec![A::SendRelayReady]),
            (P::Staging, E::RestoreFailed(why)) => (P::Gone, vec![A::Discard, A::SendRefused(why)]),
            (P::Staging, E::Silence | E::Withdrawn) => (P::Gone, vec![A::Discard]),
            (P::Staging, E::Stopping) => (
                P::Gone,
                vec![
                    A::Discard,
                    A::SendRefused(Refusal::not_serving(
                        "the target began to drain or stop; pick a serving node",
                    )),
                ],
            ),
            (P::Staging, _) => return Vec::new(),

            (P::Ready, E::RelayReset) => (P::Ready, vec![A::ClearRelay]),
            (P::Ready, E::Relay) => (P::Ready, vec![A::KeepRelay]),
            (
                P::Ready,
                E::Cutover {
                    matches: true,
                    serving: true,
                },
            ) => (P::Committing, vec![A::Commit]),
            // Records are missing (the link dropped some): wait for the source to resend them all.
            (
                P::Ready,
                E::Cutover {
                    matches: false,
                    serving: true,
                },
            ) => (P::Ready, vec![]),
            (P::Ready, E::Withdrawn) => (P::Gone, vec![A::Discard]),
            (P::Ready, E::Silence) => (
                P::Gone,
                vec![A::Discard, A::SendAborted("no cutover came".into())],
            ),
            (P::Ready, E::Stopping | E::Cutover { serving: false, .. }) => (
                P::Gone,
                vec![
                    A::Discard,
                    A::SendAborted("the target began to drain or stop".into()),
                ],
            ),
            (P::Ready, _) => return Vec::new(),

            (P::Committing, E::CommitWon) => (P::Open, vec![A::Open, A::SendCommitted]),
            (P::Committing, E::CommitLost) => (
                P::Gone,
                vec![
                    A::Discard,
                    A::SendAborted("the authority record changed".into()),
                ],
            ),
            (P::Committing, E::CommitUnknown) => (P::ReadingBack, vec![A::ReadBack]),
            (P::Committing, _) => return Vec::new(),

            (P::ReadingBack, E::ReadShowsOwner) => (P::Open, vec![A::Open, A::SendCommitted]),
            (P::ReadingBack, E::ReadShowsOther) => (
                P::Gone,
                vec![
                    A::Discard,
                    A::SendAborted("the authority record changed".into()),
                ],
            ),
            (P::ReadingBack, E::CommitUnknown) => (P::ReadingBack, vec![A::ReadBack]),
            (P::ReadingBack, _) => return Vec::new(),
        };
        self.phase = next;
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SourceAction as SA;
    use SourceEvent as SE;
    use TargetAction as TA;
    use TargetEvent as TE;

    #[test]
    fn a_spot_that_seals_at_its_applications_safe_point_tells_its_gateways_at_the_capture() {
        let bound = BTreeSet::from([NodeId::new("g1").unwrap()]);
        assert_eq!(told_at_quiesce(bound.clone(), false), bound);
        assert!(told_at_quiesce(bound, true).is_empty());
    }

    #[test]
    fn a_targets_answers_go_to_the_source_with_their_phase_and_the_rest_to_the_target() {
        let rel = RelocationId(7);
        let took = Duration::from_millis(3);
        let answer = addressed(RelocFrame::Committed { rel, commit: took });
        let Addressed::ToSource { event, phase, .. } = answer else {
            panic!("a commit is the source's");
        };
        assert_eq!(event, SE::Committed);
        assert_eq!(phase, Some(ReportedPhase::Commit(took)));
        let progress = addressed(RelocFrame::Progress { rel });
        assert!(matches!(
            progress,
            Addressed::ToSource {
                event: SE::Progress,
                phase: None,
                ..
            }
        ));
        let cutover = addressed(RelocFrame::Cutover {
            rel,
            count: 2,
            crc: 9,
        });
        assert!(matches!(
            cutover,
            Addressed::ToTarget(RelocFrame::Cutover { count: 2, .. })
        ));
    }

    fn none() -> BTreeSet<NodeId> {
        BTreeSet::new()
    }

    fn gateways(ids: &[&str]) -> BTreeSet<NodeId> {
        ids.iter().map(|id| NodeId::new(*id).unwrap()).collect()
    }

    fn node(id: &str) -> NodeId {
        NodeId::new(id).unwrap()
    }

    /// The time the tests' events are heard at, unless a test says otherwise.
    fn at() -> Instant {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *START.get_or_init(Instant::now)
    }

    const DEADLINE: Duration = Duration::from_secs(30);

    /// A move asked at [`at`], with a deadline 30 s later and the default timing.
    fn source() -> SourceMachine {
        SourceMachine::new(at(), at() + DEADLINE, SourceTiming::default())
    }

    /// A move offered at [`at`] with the source's deadline 30 s later.
    fn target() -> TargetMachine {
        TargetMachine::new(at(), DEADLINE)
    }

    #[test]
    fn a_staged_unit_is_given_up_only_past_the_sources_deadline_and_never_after_the_cutover() {
        let until = at() + DEADLINE + PAST_DEADLINE;
        let mut t = target();
        assert_eq!(t.poll_timeout(), Some(until));
        assert!(t.handle_timeout(at() + DEADLINE).is_empty());
        t.on(TE::Restored);
        assert_eq!(
            t.handle_timeout(until),
            vec![TA::Discard, TA::SendAborted("no cutover came".into())]
        );
        assert!(t.finished() && !t.opened());
        // Once the cutover came, the store decides: no timer is left to give the unit up.
        let mut t = target();
        t.on(TE::Restored);
        t.on(TE::Cutover {
            matches: true,
            serving: true,
        });
        assert_eq!(t.poll_timeout(), None);
        assert!(t.handle_timeout(until).is_empty());
        assert_eq!(t.on(TE::CommitWon), vec![TA::Open, TA::SendCommitted]);
        // An offer asking for more than a day is held a day.
        let t = TargetMachine::new(at(), Duration::from_secs(u32::MAX.into()));
        assert_eq!(t.poll_timeout(), Some(at() + MAX_STAGED + PAST_DEADLINE));
    }

    /// The fence as asked well before the deadline: the store is waited for a whole step.
    fn fence() -> SourceAction {
        SourceAction::FenceReclaim {
            wait: SourceTiming::default().step,
        }
    }

    /// A move of a unit with no session bound, sealed and captured.
    fn source_captured() -> SourceMachine {
        let mut s = source();
        assert_eq!(
            s.on(SE::Quiesced { gateways: none() }, at()),
            vec![SA::SealUnit]
        );
        assert_eq!(
            s.on(SE::Captured { late: none() }, at()),
            vec![SA::SendCapture]
        );
        s
    }

    fn source_at_handover() -> SourceMachine {
        let mut s = source_captured();
        assert_eq!(s.on(SE::RelayReady, at()), vec![SA::Handover]);
        assert!(s.handed_over());
        s
    }

    #[test]
    fn a_reclaim_is_tried_again_only_on_a_record_that_never_left_this_node() {
        let read = UnitRecord {
            owner: node("n1"),
            lease_generation: 1,
            object_generation: crate::ids::ObjectGeneration(7),
            owner_generation: 4,
            factory: "room".into(),
            stage: crate::authority::Stage::Active,
            spot: None,
            recoverable: true,
        };
        let me = node("n1");
        let with = |owner: &str, generation: u64| UnitRecord {
            owner: node(owner),
            owner_generation: generation,
            ..read.clone()
        };
        // Its own reclaim landed unseen, or only a field changed: tried again.
        for now in [with("n1", 5), with("n1", 4)] {
            assert_eq!(fence_conflict(&me, [(&read, Some(&now))]), SE::FenceStale);
        }
        // The target committed; or the unit moved away and back; or it was rebuilt; or it is gone.
        let rebuilt = UnitRecord {
            object_generation: crate::ids::ObjectGeneration(8),
            ..with("n1", 5)
        };
        for now in [
            Some(with("n2", 5)),
            Some(with("n1", 6)),
            Some(rebuilt),
            None,
        ] {
            assert_eq!(fence_conflict(&me, [(&read, now.as_ref())]), SE::FenceLost);
        }
    }

    #[test]
    fn the_happy_path_moves_the_unit() {
        let mut s = source_at_handover();
        let mut t = target();
        assert_eq!(t.on(TE::Restored), vec![TA::SendRelayReady]);
        assert_eq!(t.on(TE::Relay), vec![TA::KeepRelay]);
        assert_eq!(
            t.on(TE::Cutover {
                matches: true,
                serving: true
            }),
            vec![TA::Commit]
        );
        assert_eq!(t.on(TE::CommitWon), vec![TA::Open, TA::SendCommitted]);
        assert!(t.opened());
        assert_eq!(s.on(SE::Committed, at()), vec![SA::Release]);
        assert_eq!(s.end(), Some(&MoveEnd::Moved));
    }

    #[test]
    fn any_failure_before_relay_ready_restores_on_the_source() {
        // A target that refused has dropped the unit; one that went quiet may still stage it.
        let cases = [
            (SE::Refused(Refusal::other("checksum")), vec![SA::Resume]),
            (SE::Silence, vec![SA::Withdraw, SA::Resume]),
            (SE::Deadline, vec![SA::Withdraw, SA::Resume]),
        ];
        for (event, actions) in cases {
            let mut s = source_captured();
            assert_eq!(s.on(event, at()), actions);
            assert!(matches!(s.end(), Some(MoveEnd::Restored(_))));
            assert!(!s.handed_over());
        }
        let mut t = target();
        assert_eq!(
            t.on(TE::RestoreFailed(Refusal::incompatible("no factory"))),
            vec![
                TA::Discard,
                TA::SendRefused(Refusal::incompatible("no factory"))
            ]
        );
    }

    #[test]
    fn a_withdrawn_move_is_dropped_by_the_target_until_the_cutover_but_not_after() {
        let mut staging = target();
        assert_eq!(staging.on(TE::Withdrawn), vec![TA::Discard]);
        assert!(staging.finished() && !staging.opened());
        let mut ready = target();
        ready.on(TE::Restored);
        assert_eq!(ready.on(TE::Withdrawn), vec![TA::Discard]);
        assert!(ready.finished());
        // Past the cutover the source never withdraws; a stray one changes nothing.
        let mut committing = target();
        committing.on(TE::Restored);
        committing.on(TE::Cutover {
            matches: true,
            serving: true,
        });
        assert!(committing.on(TE::Withdrawn).is_empty());
        assert_eq!(
            committing.on(TE::CommitWon),
            vec![TA::Open, TA::SendCommitted]
        );
    }

    #[test]
    fn a_seal_that_never_comes_is_cancelled_at_the_deadline() {
        let mut s = source();
        assert_eq!(s.on(SE::Deadline, at()), vec![SA::CancelSeal]);
        assert!(matches!(s.end(), Some(MoveEnd::NotSealed(_))));
        // A capture racing the cancel changes nothing.
        assert!(s.on(SE::Captured { late: none() }, at()).is_empty());
        let mut s = source();
        s.on(SE::Quiesced { gateways: none() }, at());
        assert_eq!(s.on(SE::Deadline, at()), vec![SA::CancelSeal]);
        assert!(matches!(s.end(), Some(MoveEnd::NotSealed(_))));
    }

    #[test]
    fn the_lane_is_sealed_only_once_every_gateway_holds_its_inputs() {
        let mut s = source();
        let gs = gateways(&["g1", "g2"]);
        assert_eq!(
            s.on(
                SE::Quiesced {
                    gateways: gs.clone()
                },
                at()
            ),
            vec![SA::SealGateways(gs)]
        );
        assert!(s.on(SE::GatewaySealed(node("g2")), at()).is_empty());
        // A target's early word changes nothing before the capture.
        assert!(s.on(SE::RelayReady, at()).is_empty());
        assert_eq!(
            s.on(SE::GatewaySealed(node("g1")), at()),
            vec![SA::SealUnit]
        );
        assert_eq!(
            s.on(SE::Captured { late: none() }, at()),
            vec![SA::SendCapture]
        );
        assert_eq!(s.on(SE::RelayReady, at()), vec![SA::Handover]);
        assert_eq!(
            s.on(SE::Committed, at()),
            vec![SA::Release, SA::ReleaseSessions(SessionsTo::Target)]
        );
        assert_eq!(s.end(), Some(&MoveEnd::Moved));
    }

    #[test]
    fn a_gateway_that_never_acknowledges_leaves_the_unit_unsealed_and_releases_the_others() {
        let mut s = source();
        s.on(
            SE::Quiesced {
                gateways: gateways(&["g1", "g2"]),
            },
            at(),
        );
        s.on(SE::GatewaySealed(node("g1")), at());
        assert_eq!(
            s.on(SE::Silence, at()),
            vec![SA::CancelSeal, SA::ReleaseSessions(SessionsTo::Source)]
        );
        match s.end() {
            Some(MoveEnd::NotSealed(why)) => assert!(why.contains("g2"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_session_bound_just_before_the_capture_is_sealed_before_the_handover() {
        let mut s = source();
        s.on(SE::Quiesced { gateways: none() }, at());
        let late = gateways(&["g"]);
        assert_eq!(
            s.on(SE::Captured { late: late.clone() }, at()),
            vec![SA::SealGateways(late), SA::SendCapture]
        );
        // Relay-ready alone does not hand over: the gateway may still have inputs on the way.
        assert!(s.on(SE::RelayReady, at()).is_empty());
        assert_eq!(s.on(SE::GatewaySealed(node("g")), at()), vec![SA::Handover]);
        assert_eq!(
            s.on(SE::Committed, at()),
            vec![SA::Release, SA::ReleaseSessions(SessionsTo::Target)]
        );
    }

    #[test]
    fn an_abandoned_move_releases_the_gateways_to_the_source() {
        // Gateway g holds the inputs of the unit's Actors.
        let gateway_sealed = || {
            let mut s = source();
            s.on(
                SE::Quiesced {
                    gateways: gateways(&["g"]),
                },
                at(),
            );
            assert_eq!(s.on(SE::GatewaySealed(node("g")), at()), vec![SA::SealUnit]);
            s
        };
        let sealed = || {
            let mut s = gateway_sealed();
            s.on(SE::Captured { late: none() }, at());
            s
        };
        let mut s = sealed();
        assert_eq!(
            s.on(SE::Refused(Refusal::incompatible("no factory")), at()),
            vec![SA::Resume, SA::ReleaseSessions(SessionsTo::Source)]
        );
        let mut s = sealed();
        s.on(SE::RelayReady, at());
        s.on(SE::Silence, at());
        s.on(SE::Silence, at());
        assert_eq!(
            s.on(SE::FenceWon, at()),
            vec![SA::Resume, SA::ReleaseSessions(SessionsTo::Source)]
        );
        let mut s = sealed();
        s.on(SE::RelayReady, at());
        s.on(SE::Deadline, at());
        assert_eq!(
            s.on(SE::FenceWon, at()),
            vec![SA::Resume, SA::ReleaseSessions(SessionsTo::Source)]
        );
        // A lane that refuses the seal after the gateways held their inputs lets them go too.
        let mut s = gateway_sealed();
        assert_eq!(
            s.on(SE::SealRefused("stopped".into()), at()),
            vec![SA::ReleaseSessions(SessionsTo::Source)]
        );
    }

    #[test]
    fn a_lost_cutover_is_resent_whole_and_the_target_replaces_its_span() {
        let mut s = source_at_handover();
        let mut t = target();
        t.on(TE::Restored);
        // The first record got through, the second and the cutover were lost with the link.
        t.on(TE::Relay);
        assert_eq!(s.on(SE::Silence, at()), vec![SA::ResendHandover]);
        assert_eq!(t.on(TE::RelayReset), vec![TA::ClearRelay]);
        t.on(TE::Relay);
        t.on(TE::Relay);
        assert_eq!(
            t.on(TE::Cutover {
                matches: true,
                serving: true
            }),
            vec![TA::Commit]
        );
        t.on(TE::CommitWon);
        assert_eq!(s.on(SE::Committed, at()), vec![SA::Release]);
    }

    #[test]
    fn a_cutover_whose_records_do_not_match_waits_for_the_resend() {
        let mut t = target();
        t.on(TE::Restored);
        assert!(
            t.on(TE::Cutover {
                matches: false,
                serving: true
            })
            .is_empty()
        );
        // A late record of the first batch is kept, but only the resent batch can match.
        assert_eq!(t.on(TE::Relay), vec![TA::KeepRelay]);
        assert_eq!(t.on(TE::RelayReset), vec![TA::ClearRelay]);
        assert_eq!(t.on(TE::Relay), vec![TA::KeepRelay]);
        assert_eq!(
            t.on(TE::Cutover {
                matches: true,
                serving: true
            }),
            vec![TA::Commit]
        );
    }

    /// A node that began to drain after it took the offer commits nothing at the cutover, even
    /// if its drain has not yet stopped the moves staged on it: the unit goes back to its source.
    #[test]
    fn a_cutover_reaching_a_node_that_no_longer_serves_gives_the_unit_back() {
        for matches in [true, false] {
            let mut t = target();
            t.on(TE::Restored);
            let actions = t.on(TE::Cutover {
                matches,
                serving: false,
            });
            assert_eq!(
                actions,
                vec![
                    TA::Discard,
                    TA::SendAborted("the target began to drain or stop".into())
                ]
            );
            assert!(t.finished() && !t.opened() && !t.committing());
            // The drain's own stop comes after, and finds nothing left to give back.
            assert!(t.on(TE::Stopping).is_empty());
        }
    }

    #[test]
    fn a_target_that_dies_after_relay_ready_is_fenced_out_and_never_two_own_it() {
        let mut s = source_at_handover();
        assert_eq!(s.on(SE::Silence, at()), vec![SA::ResendHandover]);
        assert_eq!(s.on(SE::Silence, at()), vec![fence()]);
        assert_eq!(s.on(SE::FenceWon, at()), vec![SA::Resume]);
        assert_eq!(s.end(), Some(&MoveEnd::Reclaimed));
        // The target, had it come back, loses its own conditional write.
        let mut t = target();
        t.on(TE::Restored);
        t.on(TE::Cutover {
            matches: true,
            serving: true,
        });
        assert_eq!(
            t.on(TE::CommitLost),
            vec![
                TA::Discard,
                TA::SendAborted("the authority record changed".into())
            ]
        );
    }

    #[test]
    fn a_commit_that_wins_the_race_with_the_fence_keeps_the_unit_moved() {
        let mut s = source_at_handover();
        s.on(SE::Silence, at());
        s.on(SE::Silence, at());
        assert_eq!(s.on(SE::FenceLost, at()), vec![SA::Release]);
        assert_eq!(s.end(), Some(&MoveEnd::Moved));
    }

    #[test]
    fn a_store_write_whose_result_is_lost_is_read_back_not_guessed() {
        let mut t = target();
        t.on(TE::Restored);
        t.on(TE::Cutover {
            matches: true,
            serving: true,
        });
        assert_eq!(t.on(TE::CommitUnknown), vec![TA::ReadBack]);
        assert_eq!(t.on(TE::CommitUnknown), vec![TA::ReadBack]);
        assert_eq!(t.on(TE::ReadShowsOwner), vec![TA::Open, TA::SendCommitted]);
        let mut s = source_at_handover();
        s.on(SE::Silence, at());
        s.on(SE::Silence, at());
        assert!(s.on(SE::FenceUnknown, at()).is_empty());
        assert_eq!(
            s.handle_timeout(at() + Duration::from_secs(1)),
            vec![fence()]
        );
        assert_eq!(s.on(SE::FenceLost, at()), vec![SA::Release]);
    }

    #[test]
    fn the_deadline_past_the_point_of_no_return_reclaims_unless_the_target_committed() {
        let mut s = source_at_handover();
        assert_eq!(s.on(SE::Deadline, at()), vec![fence()]);
        assert_eq!(s.on(SE::FenceWon, at()), vec![SA::Resume]);
        assert_eq!(s.end(), Some(&MoveEnd::Reclaimed));
        let mut s = source_at_handover();
        s.on(SE::Deadline, at());
        assert_eq!(s.on(SE::FenceLost, at()), vec![SA::Release]);
        assert_eq!(s.end(), Some(&MoveEnd::Moved));
    }

    #[test]
    fn progress_keeps_every_phase_and_only_silence_or_the_deadline_gives_up() {
        // Progress while the target restores changes nothing: the handover still follows.
        let mut s = source_captured();
        for _ in 0..10 {
            assert!(s.on(SE::Progress, at()).is_empty());
        }
        assert_eq!(s.end(), None);
        assert!(!s.handed_over());
        assert_eq!(s.on(SE::RelayReady, at()), vec![SA::Handover]);
        // After progress, silence is still silence, and the deadline still the deadline.
        let mut s = source_captured();
        s.on(SE::Progress, at());
        assert_eq!(s.on(SE::Silence, at()), vec![SA::Withdraw, SA::Resume]);
        assert_eq!(
            s.end(),
            Some(&MoveEnd::Restored("the target did not answer".into()))
        );
        let mut s = source_captured();
        s.on(SE::Progress, at());
        assert_eq!(s.on(SE::Deadline, at()), vec![SA::Withdraw, SA::Resume]);
        assert_eq!(
            s.end(),
            Some(&MoveEnd::Restored(
                "the deadline passed before relay-ready".into()
            ))
        );
        // A late one after the handover neither counts as an answer nor resets the resend.
        let mut s = source_at_handover();
        assert!(s.on(SE::Progress, at()).is_empty());
        assert_eq!(s.on(SE::Silence, at()), vec![SA::ResendHandover]);
        assert!(s.on(SE::Progress, at()).is_empty());
        assert_eq!(s.on(SE::Silence, at()), vec![fence()]);
        assert_eq!(s.on(SE::FenceLost, at()), vec![SA::Release]);
        assert!(s.on(SE::Progress, at()).is_empty());
        assert_eq!(s.end(), Some(&MoveEnd::Moved));
        // While gateways are asked to seal, it changes nothing either.
        let mut s = source();
        assert_eq!(
            s.on(
                SE::Quiesced {
                    gateways: gateways(&["g"])
                },
                at()
            ),
            vec![SA::SealGateways(gateways(&["g"]))]
        );
        assert!(s.on(SE::Progress, at()).is_empty());
        assert_eq!(s.on(SE::GatewaySealed(node("g")), at()), vec![SA::SealUnit]);
    }

    #[test]
    fn an_unknown_fence_result_is_asked_again_after_a_pause_never_taken_as_won() {
        let timing = SourceTiming::default();
        let mut s = source_at_handover();
        let mut now = at() + Duration::from_secs(1);
        assert_eq!(s.on(SE::Silence, now), vec![SA::ResendHandover]);
        assert_eq!(s.on(SE::Silence, now), vec![fence()]);
        for _ in 0..3 {
            // Not asked again at once: the store is given the retry time.
            assert!(s.on(SE::FenceUnknown, now).is_empty());
            assert_eq!(s.poll_timeout(), Some(now + timing.fence_retry));
            assert!(s.handle_timeout(now).is_empty());
            // A late commit frame changes nothing: the store decides.
            assert!(s.on(SE::Committed, now).is_empty());
            now += timing.fence_retry;
            assert_eq!(s.handle_timeout(now), vec![fence()]);
            assert!(s.fencing() && s.end().is_none() && !s.undecided());
        }
        assert_eq!(s.on(SE::FenceLost, now), vec![SA::Release]);
        assert_eq!(s.end(), Some(&MoveEnd::Moved));
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn a_fence_unknown_at_the_deadline_leaves_the_move_undecided_and_asking() {
        let timing = SourceTiming::default();
        let mut s = source_at_handover();
        // Close to the deadline the store is waited for what is left, but the grace at least.
        let late = at() + DEADLINE - Duration::from_secs(2);
        assert_eq!(
            s.on(SE::Aborted("gave up".into()), late),
            vec![SA::FenceReclaim {
                wait: Duration::from_secs(2)
            }]
        );
        assert!(s.on(SE::FenceUnknown, late).is_empty());
        let last = at() + DEADLINE - Duration::from_millis(10);
        assert_eq!(
            s.handle_timeout(last),
            vec![SA::FenceReclaim {
                wait: timing.fence_grace
            }]
        );
        assert!(!s.undecided());
        // Unknown once the deadline passed: undecided, and asked again with whole steps.
        let past = at() + DEADLINE;
        assert!(s.on(SE::FenceUnknown, past).is_empty());
        assert!(s.undecided() && s.end().is_none());
        let again = past + timing.fence_retry;
        assert_eq!(s.poll_timeout(), Some(again));
        assert_eq!(
            s.handle_timeout(again),
            vec![SA::FenceReclaim { wait: timing.step }]
        );
        assert_eq!(s.on(SE::FenceWon, again), vec![SA::Resume]);
        assert_eq!(s.end(), Some(&MoveEnd::Reclaimed));
        assert!(!s.undecided());
    }

    #[test]
    fn a_stale_fence_is_tried_again_at_once_a_few_times_then_after_a_pause() {
        let timing = SourceTiming::default();
        let mut s = source_at_handover();
        assert_eq!(s.on(SE::Deadline, at()), vec![fence()]);
        for _ in 1..timing.stale_tries {
            assert_eq!(s.on(SE::FenceStale, at()), vec![fence()]);
        }
        assert!(s.on(SE::FenceStale, at()).is_empty());
        assert_eq!(s.poll_timeout(), Some(at() + timing.fence_retry));
        // After the pause, the count starts again.
        assert_eq!(s.handle_timeout(at() + timing.fence_retry), vec![fence()]);
        assert_eq!(s.on(SE::FenceStale, at()), vec![fence()]);
    }

    #[test]
    fn silence_counts_from_the_last_thing_heard_and_the_deadline_from_the_start() {
        let step = SourceTiming::default().step;
        let mut s = source_captured();
        assert_eq!(s.poll_timeout(), Some(at() + step));
        // Progress a second before the step starts it again.
        let heard = at() + step - Duration::from_secs(1);
        assert!(s.on(SE::Progress, heard).is_empty());
        assert_eq!(s.poll_timeout(), Some(heard + step));
        assert!(s.handle_timeout(at() + step).is_empty());
        assert_eq!(
            s.handle_timeout(heard + step),
            vec![SA::Withdraw, SA::Resume]
        );
        assert_eq!(
            s.end(),
            Some(&MoveEnd::Restored("the target did not answer".into()))
        );
        assert!(!s.deadline_passed());
        // Progress every second does not hold the deadline off.
        let mut s = source_captured();
        let mut now = at();
        while now < at() + DEADLINE {
            now += Duration::from_secs(1);
            s.on(SE::Progress, now - Duration::from_millis(1));
            assert_eq!(s.poll_timeout().map(|t| t <= at() + DEADLINE), Some(true));
            if now >= at() + DEADLINE {
                assert_eq!(s.handle_timeout(now), vec![SA::Withdraw, SA::Resume]);
            } else {
                assert!(s.handle_timeout(now).is_empty());
            }
        }
        assert!(s.deadline_passed());
        assert_eq!(
            s.end(),
            Some(&MoveEnd::Restored(
                "the deadline passed before relay-ready".into()
            ))
        );
    }

    #[test]
    fn gateways_not_heard_from_are_looked_for_and_waited_for_as_long_as_a_link_takes_to_die() {
        let timing = SourceTiming {
            link_timeout: Duration::from_secs(10),
            ..SourceTiming::default()
        };
        let mut s = SourceMachine::new(at(), at() + DEADLINE, timing);
        let gs = gateways(&["g1", "g2"]);
        s.on(
            SE::Quiesced {
                gateways: gs.clone(),
            },
            at(),
        );
        let check = at() + timing.gateway_check;
        assert_eq!(s.poll_timeout(), Some(check));
        assert_eq!(s.handle_timeout(check), vec![SA::CheckGateways(gs)]);
        // g1 answers; g2 is still linked: only g2 is looked for from now on.
        s.on(SE::GatewaySealed(node("g1")), check);
        let mut now;
        let silence = check + timing.link_timeout + timing.gateway_check;
        loop {
            now = s.poll_timeout().expect("the move waits");
            if now >= silence {
                break;
            }
            assert_eq!(
                s.handle_timeout(now),
                vec![SA::CheckGateways(gateways(&["g2"]))]
            );
        }
        // Longer than the step: a live link is given the time the mesh takes to call it dead.
        assert!(silence - at() > timing.step);
        assert_eq!(now, silence);
        // A last look comes first: a gateway found gone then saves the move.
        assert_eq!(
            s.handle_timeout(now),
            vec![SA::CheckGateways(gateways(&["g2"]))]
        );
        assert_eq!(s.poll_timeout(), Some(now));
        assert_eq!(
            s.handle_timeout(now),
            vec![SA::CancelSeal, SA::ReleaseSessions(SessionsTo::Source)]
        );
        // A gateway found gone counts as sealed: the move goes on without it.
        let mut s = SourceMachine::new(at(), at() + DEADLINE, timing);
        s.on(
            SE::Quiesced {
                gateways: gateways(&["g"]),
            },
            at(),
        );
        assert_eq!(
            s.handle_timeout(check),
            vec![SA::CheckGateways(gateways(&["g"]))]
        );
        assert_eq!(
            s.on(SE::GatewaySealed(node("g")), check),
            vec![SA::SealUnit]
        );
        assert_eq!(s.poll_timeout(), Some(check + timing.step));
    }

    #[test]
    fn a_target_abort_after_handover_is_fenced_then_resumed() {
        let mut s = source_at_handover();
        assert_eq!(
            s.on(SE::Aborted("record changed".into()), at()),
            vec![fence()]
        );
        assert_eq!(s.on(SE::FenceWon, at()), vec![SA::Resume]);
    }
}
