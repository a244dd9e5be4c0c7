//! One session as a plain state machine: events in, actions out, time passed in as a value.
//!
//! It knows nothing of sockets, the mesh or the clock; the runtime's hub (or a simulator) feeds it what the client sent and
//! what the nodes running its Actors said, and carries out what it asks. So the orders that
//! matter (an input held while its Actor moves, releases that arrive out of order after two
//! quick moves, a push overtaken by a later one from another node) are unit tests below.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::limits::TokenBucket;
use super::wire::{
    AnnouncedLimits, ClientFrame, CloseCode, OLDEST_VERSION, PROTOCOL_VERSION, ServerFrame,
};
use super::{Identity, SessionId, SessionLimits};
use crate::ids::RelocationId;
use crate::ids::{ActorId, NodeId};

/// What happened to the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A frame from the client, decoded.
    Client(ClientFrame),
    /// A frame from the client that could not be used (it did not decode, was too large, or
    /// is not a message its Actor takes).
    BadFrame {
        /// How the session ends.
        code: CloseCode,
        /// What the client is told.
        reason: String,
    },
    /// The authenticator's verdict on the Hello's token.
    Authenticated(Result<Identity, String>),
    /// The authenticator's verdict on a bind.
    Authorized {
        /// The Actor the client asked to bind.
        actor: ActorId,
        /// Allowed, or why not.
        verdict: Result<(), String>,
    },
    /// The node running the Actor applied the bind (with the Actor's factory), or could not.
    Bound {
        /// The Actor the bind was for.
        actor: ActorId,
        /// The bind it answers.
        epoch: u32,
        /// The node that applied it, where the Actor runs.
        owner: NodeId,
        /// The Actor's factory, or why the bind failed.
        verdict: Result<String, String>,
    },
    /// The Actor let the binding go: another session bound it, or it stopped.
    Unbound {
        /// The Actor whose binding ended.
        actor: ActorId,
        /// The bind that ended.
        epoch: u32,
        /// Why, for the client.
        reason: String,
    },
    /// The Actor pushed a message.
    Push {
        /// The Actor that pushed it.
        actor: ActorId,
        /// The bind it was pushed under.
        epoch: u32,
        /// Its number among the Actor's pushes in that bind.
        seq: u64,
        /// The message, as the client reads it.
        payload: Bytes,
    },
    /// A move of the Actor is about to seal it: hold its inputs. `hold` is the time left to
    /// the move's deadline, as its source said.
    Seal {
        /// The move that seals the Actor; the matching [`Event::Release`] names it again.
        rel: RelocationId,
        /// The Actor being moved, whose inputs are held.
        actor: ActorId,
        /// The bind the source saw.
        epoch: u32,
        /// The time left to the move's deadline.
        hold: Duration,
    },
    /// That move ended: the Actor runs on `owner` (`None`: it was stopped).
    Release {
        /// The move that ended, as its [`Event::Seal`] named it.
        rel: RelocationId,
        /// The Actor that was moved.
        actor: ActorId,
        /// The bind the source saw.
        epoch: u32,
        /// Where the Actor runs now, if anywhere.
        owner: Option<NodeId>,
    },
    /// The fence sent after the first `upto` inputs to the Actor ran there (`reached`), or its
    /// answer did not come.
    Fenced {
        /// The Actor the fence was sent to.
        actor: ActorId,
        /// The bind the fence was sent under.
        epoch: u32,
        /// How many of the bind's inputs it followed.
        upto: u64,
        /// Whether it ran at the Actor.
        reached: bool,
    },
    /// A node left the cluster (it crashed, or its lease lapsed): the Actors it ran are rebuilt
    /// elsewhere by recovery, and bindings to them are made again.
    OwnerLeft {
        /// The node that left.
        node: NodeId,
    },
    /// The wait of a [`Action::RequestRebind`] is over (recovery rebuilt the Actor, or the wait
    /// ran out): its bind goes if the session still waits for it.
    RebindDue {
        /// The Actor to bind again.
        actor: ActorId,
        /// The bind the rebind was asked for.
        epoch: u32,
    },
    /// The client's outbound queue is full.
    SlowReader,
    /// Time passed: check the deadlines.
    Tick,
    /// The gateway node is shutting down.
    Shutdown {
        /// What the client is told.
        reason: String,
    },
    /// The gateway node may have lost its owner lease: another node may run its Actors by now,
    /// and anything it forwarded late could overtake what the client sends through another
    /// gateway. The session ends as for a shutdown, and sends nothing more: not even the inputs
    /// it holds, which its client counts undelivered.
    LeaseLost {
        /// What the client is told.
        reason: String,
    },
    /// The connection is gone.
    ClientGone {
        /// Why, for the logs.
        reason: String,
    },
}

/// How long a gateway waits, after an Actor's node left the cluster, for recovery to record the
/// Actor elsewhere before it sends the bind anyway (its answer then tells the client).
pub const REBIND_WAIT: Duration = Duration::from_secs(30);

/// Whether a [`Action::RequestRebind`]'s bind may go: the Actor's record (its `owner`, `None` when
/// it has none) no longer names the node that left.
pub fn rebind_may_go(owner: Option<&NodeId>, gone: &NodeId) -> bool {
    owner != Some(gone)
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write a frame to the client.
    Send(ServerFrame),
    /// Ask the authenticator about this token, and feed back [`Event::Authenticated`].
    Authenticate {
        /// The Hello's token.
        token: Bytes,
    },
    /// Ask the authenticator about this bind, and feed back [`Event::Authorized`].
    Authorize {
        /// The Actor the client asked to bind.
        actor: ActorId,
    },
    /// Deliver an input to the Actor through `owner`.
    Forward {
        /// The Actor the input is for.
        actor: ActorId,
        /// The node to send it to.
        owner: NodeId,
        /// The input as the client sent it.
        payload: Bytes,
    },
    /// Send a fence to the Actor through `owner`, behind the inputs forwarded so far (the first
    /// `upto`), and feed back [`Event::Fenced`] once it ran there.
    Fence {
        /// The Actor to fence.
        actor: ActorId,
        /// The node the inputs before it went to.
        owner: NodeId,
        /// The bind it is sent under.
        epoch: u32,
        /// How many of the bind's inputs it follows.
        upto: u64,
    },
    /// Send a bind to the Actor, wherever it lives.
    RequestBind {
        /// The Actor to bind to this session.
        actor: ActorId,
        /// The new bind.
        epoch: u32,
    },
    /// Wait until the Actor's record no longer names `gone` (recovery rebuilt it), then feed
    /// back [`Event::RebindDue`].
    RequestRebind {
        /// The Actor to bind again, once recovery rebuilt it.
        actor: ActorId,
        /// The new bind.
        epoch: u32,
        /// The node that ran it and left.
        gone: NodeId,
    },
    /// Send an unbind to the Actor, through `via` if known.
    RequestUnbind {
        /// The Actor to let go.
        actor: ActorId,
        /// The bind to undo.
        epoch: u32,
        /// Where inputs went last, so the unbind follows them.
        via: Option<NodeId>,
    },
    /// End the session: tell the client why, then close the connection. Always the last action.
    Close {
        /// How it ends.
        code: CloseCode,
        /// What the client is told.
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting for the Hello.
    Greeting,
    /// The authenticator is asked.
    Authenticating,
    Open(Identity),
    Closed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// The bind is on its way to the Actor: inputs are held.
    Binding,
    /// Inputs go to `owner`.
    Open { owner: NodeId },
    /// The Actor is moving: inputs are held until every seal is released. `last_owner` is where
    /// inputs went before, the one place they may still go without overtaking older ones.
    Sealed {
        last_owner: NodeId,
        seals: Vec<Seal>,
    },
}

/// The longest hold a seal may ask for, so that no source's word can overflow the clock.
const MAX_HOLD: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seal {
    rel: RelocationId,
    /// `Some` once released: the owner it was released to.
    released: Option<Option<NodeId>>,
    /// When the session gives up on this move's release: its deadline, then the seal timeout
    /// for the release to travel.
    until: Instant,
}

#[derive(Debug, Clone)]
struct Binding {
    epoch: u32,
    phase: Phase,
    /// Inputs held while binding or sealed, in the order the client sent them.
    inputs: VecDeque<Bytes>,
    /// The number of the next push to deliver.
    next_push: u64,
    /// Pushes that arrived ahead of a missing one.
    early: BTreeMap<u64, Bytes>,
    /// Since when a push is missing.
    gap_since: Option<Instant>,
    /// The Actor's factory, once bound: the hub checks inputs against its message type.
    type_name: Option<String>,
    /// Inputs the client sent to the Actor since it bound it in this session.
    taken: u64,
    /// How many of them the client was told ran at the Actor.
    confirmed: u64,
    /// The count a fence on its way covers, if one is.
    fence: Option<u64>,
}

impl Binding {
    fn held(&self) -> usize {
        self.inputs.len() + self.early.len()
    }

    /// How many of the client's inputs left this gateway for the Actor.
    fn forwarded(&self) -> u64 {
        self.taken - self.inputs.len() as u64
    }

    /// Until when inputs may stay held for the moves under way, if any is.
    fn sealed_until(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Sealed { seals, .. } => seals
                .iter()
                .filter(|s| s.released.is_none())
                .map(|s| s.until)
                .max(),
            _ => None,
        }
    }

    /// Where inputs may be sent now without overtaking older ones (none while binding).
    fn safe_owner(&self) -> Option<&NodeId> {
        match &self.phase {
            Phase::Binding => None,
            Phase::Open { owner } => Some(owner),
            Phase::Sealed { last_owner, .. } => Some(last_owner),
        }
    }
}

/// One client session.
#[derive(Debug)]
pub struct SessionMachine {
    id: SessionId,
    node: NodeId,
    limits: SessionLimits,
    opened: Instant,
    state: State,
    bucket: TokenBucket,
    bindings: BTreeMap<ActorId, Binding>,
    next_epoch: u32,
    /// Whether the client speaks a version that is told which inputs ran (`Delivered`).
    confirms: bool,
    /// Whether it is told which inputs a crash left unconfirmed (`Undelivered`).
    reports_undelivered: bool,
}

impl SessionMachine {
    /// A session whose connection was just accepted.
    pub fn new(id: SessionId, node: NodeId, limits: SessionLimits, now: Instant) -> Self {
        SessionMachine {
            id,
            node,
            limits,
            opened: now,
            state: State::Greeting,
            bucket: TokenBucket::new(limits.rate_per_second, limits.rate_burst, now),
            bindings: BTreeMap::new(),
            next_epoch: 1,
            confirms: false,
            reports_undelivered: false,
        }
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// The client's identity, once authenticated.
    pub fn identity(&self) -> Option<&Identity> {
        match &self.state {
            State::Open(identity) => Some(identity),
            _ => None,
        }
    }

    /// The factory of a bound Actor, if the bind told it.
    pub fn type_of(&self, actor: &ActorId) -> Option<&str> {
        self.bindings.get(actor)?.type_name.as_deref()
    }

    /// The Actors bound (or being bound) now.
    pub fn bound(&self) -> Vec<ActorId> {
        self.bindings.keys().cloned().collect()
    }

    /// When [`Event::Tick`] must be fed next, if ever.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            State::Closed => None,
            State::Greeting | State::Authenticating => Some(self.opened + self.limits.auth_timeout),
            State::Open(_) => self
                .bindings
                .values()
                .flat_map(|b| {
                    let gap = b.gap_since.map(|t| t + self.limits.seal_timeout);
                    [b.sealed_until(), gap]
                })
                .flatten()
                .min(),
        }
    }

    fn held(&self) -> usize {
        self.bindings.values().map(Binding::held).sum()
    }

    /// Feeds one event; returns what to do, in order.
    pub fn on(&mut self, event: Event, now: Instant) -> Vec<Action> {
        if self.state == State::Closed {
            return Vec::new();
        }
        match event {
            Event::Client(frame) => self.client(frame, now),
            Event::BadFrame { code, reason } => self.close(code, reason),
            Event::Authenticated(verdict) => self.authenticated(verdict),
            Event::Authorized { actor, verdict } => self.authorized(actor, verdict),
            Event::Bound {
                actor,
                epoch,
                owner,
                verdict,
            } => self.bound_answer(actor, epoch, owner, verdict),
            Event::Unbound {
                actor,
                epoch,
                reason,
            } => self.unbound(actor, epoch, reason),
            Event::Push {
                actor,
                epoch,
                seq,
                payload,
            } => self.push(actor, epoch, seq, payload, now),
            Event::Seal {
                rel,
                actor,
                epoch,
                hold,
            } => {
                self.seal(rel, &actor, epoch, hold, now);
                Vec::new()
            }
            Event::Release {
                rel,
                actor,
                epoch,
                owner,
            } => self.release(rel, actor, epoch, owner),
            Event::Fenced {
                actor,
                epoch,
                upto,
                reached,
            } => self.fenced(actor, epoch, upto, reached),
            Event::OwnerLeft { node } => self.owner_left(&node),
            Event::RebindDue { actor, epoch } => {
                // A bind sent for a binding the client let go, or made again since, would take
                // the Actor from whichever session holds it now.
                let waits = self.bindings.get(&actor).is_some_and(|binding| {
                    binding.epoch == epoch && binding.phase == Phase::Binding
                });
                if waits {
                    vec![Action::RequestBind { actor, epoch }]
                } else {
                    Vec::new()
                }
            }
            Event::SlowReader => self.close(
                CloseCode::SlowReader,
                format!(
                    "more than {} frames waited for the client to read them; read pushes as they \
                     come, or raise max_outbound",
                    self.limits.max_outbound
                ),
            ),
            Event::Tick => self.tick(now),
            Event::Shutdown { reason } => self.close(CloseCode::Shutdown, reason),
            Event::LeaseLost { reason } => {
                self.state = State::Closed;
                self.bindings.clear();
                vec![Action::Close {
                    code: CloseCode::Shutdown,
                    reason,
                }]
            }
            Event::ClientGone { reason } => self.close(CloseCode::Normal, reason),
        }
    }

    fn client(&mut self, frame: ClientFrame, now: Instant) -> Vec<Action> {
        match (&self.state, frame) {
            (State::Greeting, ClientFrame::Hello { version, token }) => {
                if !(OLDEST_VERSION..=PROTOCOL_VERSION).contains(&version) {
                    return self.close(
                        CloseCode::Protocol,
                        format!(
                            "protocol version {version} is not supported; this gateway speaks \
                             versions {OLDEST_VERSION} to {PROTOCOL_VERSION}: update the client"
                        ),
                    );
                }
                self.confirms = version >= 2;
                self.reports_undelivered = version >= 3;
                self.state = State::Authenticating;
                vec![Action::Authenticate { token }]
            }
            (State::Greeting | State::Authenticating, frame) => self.close(
                CloseCode::Unauthenticated,
                format!(
                    "the first frame must be Hello with a token, not {}; authenticate first",
                    frame.kind()
                ),
            ),
            (State::Closed, _) => Vec::new(),
            (State::Open(_), frame) => {
                if !self.bucket.take(now) {
                    return self.close(
                        CloseCode::RateLimited,
                        format!(
                            "the client sent faster than {} frames per second (bursts of {}); \
                             send less often",
                            self.limits.rate_per_second, self.limits.rate_burst
                        ),
                    );
                }
                match frame {
                    ClientFrame::Hello { .. } => self.close(
                        CloseCode::Protocol,
                        "Hello was sent twice; send it once, as the first frame".to_owned(),
                    ),
                    ClientFrame::Bind { actor } => self.bind(actor),
                    ClientFrame::Unbind { actor } => self.unbind(actor),
                    ClientFrame::Input { actor, payload } => self.input(actor, payload),
                    ClientFrame::Bye => {
                        self.close(CloseCode::Normal, "the client said goodbye".to_owned())
                    }
                }
            }
        }
    }

    fn authenticated(&mut self, verdict: Result<Identity, String>) -> Vec<Action> {
        if self.state != State::Authenticating {
            return Vec::new();
        }
        match verdict {
            Ok(identity) => {
                self.state = State::Open(identity);
                vec![Action::Send(ServerFrame::Welcome {
                    session: self.id,
                    node: self.node.clone(),
                    limits: AnnouncedLimits {
                        max_frame: u32::try_from(self.limits.max_frame).unwrap_or(u32::MAX),
                        rate_per_second: self.limits.rate_per_second,
                        rate_burst: self.limits.rate_burst,
                    },
                })]
            }
            Err(reason) => self.close(
                CloseCode::Unauthenticated,
                format!("the token was refused: {reason}"),
            ),
        }
    }

    fn bind(&mut self, actor: ActorId) -> Vec<Action> {
        if let Some(binding) = self.bindings.get(&actor) {
            // Bound already (or on its way): say so once more, nothing changes.
            return match binding.phase {
                Phase::Binding => Vec::new(),
                _ => vec![Action::Send(ServerFrame::Bound { actor })],
            };
        }
        if self.bindings.len() >= self.limits.max_bindings {
            let reason = format!(
                "this session has {} Actors bound, the most it may; unbind one first",
                self.limits.max_bindings
            );
            return vec![Action::Send(ServerFrame::BindRefused { actor, reason })];
        }
        vec![Action::Authorize { actor }]
    }

    fn authorized(&mut self, actor: ActorId, verdict: Result<(), String>) -> Vec<Action> {
        if let Err(reason) = verdict {
            return vec![Action::Send(ServerFrame::BindRefused { actor, reason })];
        }
        if self.bindings.contains_key(&actor) {
            return Vec::new();
        }
        let epoch = self.next_epoch;
        self.next_epoch = self.next_epoch.wrapping_add(1);
        self.bindings.insert(
            actor.clone(),
            Binding {
                epoch,
                phase: Phase::Binding,
                inputs: VecDeque::new(),
                next_push: 0,
                early: BTreeMap::new(),
                gap_since: None,
                type_name: None,
                taken: 0,
                confirmed: 0,
                fence: None,
            },
        );
        vec![Action::RequestBind { actor, epoch }]
    }

    fn unbind(&mut self, actor: ActorId) -> Vec<Action> {
        let mut actions = match self.bindings.remove(&actor) {
            Some(binding) => Self::let_go(&actor, binding),
            None => Vec::new(),
        };
        actions.push(Action::Send(ServerFrame::Unbound {
            actor,
            reason: "unbound at the client's request".to_owned(),
        }));
        actions
    }

    /// Lets a binding go: what it held goes where inputs went last (nothing newer follows it),
    /// and the Actor is told to unbind.
    fn let_go(actor: &ActorId, binding: Binding) -> Vec<Action> {
        let via = binding.safe_owner().cloned();
        let mut actions = Vec::new();
        if let Some(owner) = &via {
            actions.extend(binding.inputs.into_iter().map(|payload| Action::Forward {
                actor: actor.clone(),
                owner: owner.clone(),
                payload,
            }));
        }
        actions.push(Action::RequestUnbind {
            actor: actor.clone(),
            epoch: binding.epoch,
            via,
        });
        actions
    }

    fn input(&mut self, actor: ActorId, payload: Bytes) -> Vec<Action> {
        let Some(binding) = self.bindings.get_mut(&actor) else {
            let reason =
                format!("input dropped: this session has not bound {actor}; bind it first");
            return vec![Action::Send(ServerFrame::Unbound { actor, reason })];
        };
        binding.taken += 1;
        match &binding.phase {
            Phase::Open { owner } => {
                let forward = Action::Forward {
                    owner: owner.clone(),
                    actor: actor.clone(),
                    payload,
                };
                let mut actions = vec![forward];
                actions.extend(self.confirm(&actor));
                actions
            }
            Phase::Binding | Phase::Sealed { .. } => {
                binding.inputs.push_back(payload);
                self.check_held(&actor)
            }
        }
    }

    fn check_held(&mut self, actor: &ActorId) -> Vec<Action> {
        if self.held() <= self.limits.max_held {
            return Vec::new();
        }
        self.close(
            CloseCode::TooManyHeld,
            format!(
                "more than {} messages were held while {actor} was moving or being bound; send \
                 less while a move is under way, or raise max_held",
                self.limits.max_held
            ),
        )
    }

    fn bound_answer(
        &mut self,
        actor: ActorId,
        epoch: u32,
        owner: NodeId,
        verdict: Result<String, String>,
    ) -> Vec<Action> {
        let current = self
            .bindings
            .get(&actor)
            .filter(|b| b.epoch == epoch && b.phase == Phase::Binding)
            .is_some();
        if !current {
            // A bind this session gave up on (or replaced) took effect late: undo it.
            return match verdict {
                Ok(_) => vec![Action::RequestUnbind {
                    actor,
                    epoch,
                    via: Some(owner),
                }],
                Err(_) => Vec::new(),
            };
        }
        match verdict {
            Ok(type_name) => {
                let Some(binding) = self.bindings.get_mut(&actor) else {
                    return Vec::new();
                };
                binding.type_name = Some(type_name);
                binding.phase = Phase::Open {
                    owner: owner.clone(),
                };
                let mut actions = vec![Action::Send(ServerFrame::Bound {
                    actor: actor.clone(),
                })];
                actions.extend(binding.inputs.drain(..).map(|payload| Action::Forward {
                    actor: actor.clone(),
                    owner: owner.clone(),
                    payload,
                }));
                actions.extend(self.confirm(&actor));
                actions
            }
            Err(reason) => {
                self.bindings.remove(&actor);
                vec![Action::Send(ServerFrame::BindRefused { actor, reason })]
            }
        }
    }

    fn unbound(&mut self, actor: ActorId, epoch: u32, reason: String) -> Vec<Action> {
        if self.bindings.get(&actor).is_none_or(|b| b.epoch != epoch) {
            return Vec::new();
        }
        let Some(binding) = self.bindings.remove(&actor) else {
            return Vec::new();
        };
        // The Actor has its new binding already: only what this session held still goes to it.
        let mut actions: Vec<Action> = Self::let_go(&actor, binding)
            .into_iter()
            .filter(|a| matches!(a, Action::Forward { .. }))
            .collect();
        actions.push(Action::Send(ServerFrame::Unbound { actor, reason }));
        actions
    }

    fn push(
        &mut self,
        actor: ActorId,
        epoch: u32,
        seq: u64,
        payload: Bytes,
        now: Instant,
    ) -> Vec<Action> {
        let Some(binding) = self.bindings.get_mut(&actor).filter(|b| b.epoch == epoch) else {
            return Vec::new();
        };
        if seq < binding.next_push {
            return Vec::new();
        }
        if seq > binding.next_push {
            binding.early.insert(seq, payload);
            binding.gap_since.get_or_insert(now);
            return self.check_held(&actor);
        }
        let mut actions = vec![Action::Send(ServerFrame::Push {
            actor: actor.clone(),
            seq,
            payload,
        })];
        binding.next_push += 1;
        while let Some(payload) = binding.early.remove(&binding.next_push) {
            actions.push(Action::Send(ServerFrame::Push {
                actor: actor.clone(),
                seq: binding.next_push,
                payload,
            }));
            binding.next_push += 1;
        }
        binding.gap_since = if binding.early.is_empty() {
            None
        } else {
            Some(now)
        };
        actions
    }

    /// Holds the Actor's inputs for as long as the move may take (`hold`, the time to its
    /// deadline) and the seal timeout after it, never less than the seal timeout.
    fn seal(
        &mut self,
        rel: RelocationId,
        actor: &ActorId,
        epoch: u32,
        hold: Duration,
        now: Instant,
    ) {
        let Some(binding) = self.bindings.get_mut(actor).filter(|b| b.epoch == epoch) else {
            return;
        };
        let seal = Seal {
            rel,
            released: None,
            until: now + hold.min(MAX_HOLD) + self.limits.seal_timeout,
        };
        match &mut binding.phase {
            // The bind's answer comes from whoever runs the Actor; nothing was sent yet.
            Phase::Binding => {}
            Phase::Open { owner } => {
                binding.phase = Phase::Sealed {
                    last_owner: owner.clone(),
                    seals: vec![seal],
                };
            }
            // The next move started before this gateway heard the last one end.
            Phase::Sealed { seals, .. } => seals.push(seal),
        }
    }

    fn release(
        &mut self,
        rel: RelocationId,
        actor: ActorId,
        epoch: u32,
        owner: Option<NodeId>,
    ) -> Vec<Action> {
        let Some(binding) = self.bindings.get_mut(&actor).filter(|b| b.epoch == epoch) else {
            return Vec::new();
        };
        let Phase::Sealed { seals, .. } = &mut binding.phase else {
            return Vec::new();
        };
        let Some(seal) = seals.iter_mut().find(|s| s.rel == rel) else {
            return Vec::new();
        };
        seal.released = Some(owner);
        if seals.iter().any(|s| s.released.is_none()) {
            return Vec::new();
        }
        // Seals arrive in the order of the moves, releases in any order: the last move decides.
        let Some(Some(last)) = seals.last().map(|s| s.released.clone()) else {
            return Vec::new();
        };
        match last {
            Some(owner) => {
                binding.phase = Phase::Open {
                    owner: owner.clone(),
                };
                let mut actions: Vec<Action> = binding
                    .inputs
                    .drain(..)
                    .map(|payload| Action::Forward {
                        actor: actor.clone(),
                        owner: owner.clone(),
                        payload,
                    })
                    .collect();
                actions.extend(self.confirm(&actor));
                actions
            }
            None => {
                self.bindings.remove(&actor);
                vec![Action::Send(ServerFrame::Unbound {
                    actor,
                    reason: "the Actor was stopped while it moved; what it had not handled is lost"
                        .to_owned(),
                })]
            }
        }
    }

    /// A fence behind the inputs forwarded to the Actor so far, if the client is told which ran,
    /// none is on its way already, and some went since the last: when it has run at the Actor,
    /// so have they, and the client hears it ([`ServerFrame::Delivered`]). One fence at a time
    /// per Actor, so confirmations cost one mesh round trip per batch of inputs.
    fn confirm(&mut self, actor: &ActorId) -> Option<Action> {
        if !self.confirms {
            return None;
        }
        let binding = self.bindings.get_mut(actor)?;
        let Phase::Open { owner } = &binding.phase else {
            return None;
        };
        let upto = binding.forwarded();
        if binding.fence.is_some() || upto <= binding.confirmed {
            return None;
        }
        binding.fence = Some(upto);
        Some(Action::Fence {
            actor: actor.clone(),
            owner: owner.clone(),
            epoch: binding.epoch,
            upto,
        })
    }

    /// A fence came back: the inputs it covers ran. One that did not come back is not sent
    /// again until more inputs go (the Actor's node may be gone; its rebind sends the next).
    fn fenced(&mut self, actor: ActorId, epoch: u32, upto: u64, reached: bool) -> Vec<Action> {
        let Some(binding) = self
            .bindings
            .get_mut(&actor)
            .filter(|b| b.epoch == epoch && b.fence == Some(upto))
        else {
            return Vec::new();
        };
        binding.fence = None;
        if !reached {
            return Vec::new();
        }
        let mut actions = Vec::new();
        if upto > binding.confirmed {
            binding.confirmed = upto;
            actions.push(Action::Send(ServerFrame::Delivered {
                actor: actor.clone(),
                inputs: upto,
            }));
        }
        actions.extend(self.confirm(&actor));
        actions
    }

    /// The node running some bound Actors is gone: each is bound again, under a new epoch, once
    /// recovery has rebuilt it. The rebuilt Actor starts fresh, its pushes numbered from 0; what
    /// the dead node had not handled is lost with it, and inputs sent meanwhile are held. The
    /// inputs passed to the dead node that no fence confirmed are settled as undelivered (the
    /// client is told, if its version knows the frame): a fence behind later inputs must not
    /// confirm them, for they may have died there.
    fn owner_left(&mut self, node: &NodeId) -> Vec<Action> {
        let mut actions = Vec::new();
        for (actor, binding) in &mut self.bindings {
            if binding.safe_owner() != Some(node) {
                continue;
            }
            let forwarded = binding.forwarded();
            if self.reports_undelivered && forwarded > binding.confirmed {
                binding.confirmed = forwarded;
                actions.push(Action::Send(ServerFrame::Undelivered {
                    actor: actor.clone(),
                    inputs: forwarded,
                }));
            }
            binding.epoch = self.next_epoch;
            self.next_epoch = self.next_epoch.wrapping_add(1);
            binding.phase = Phase::Binding;
            binding.fence = None;
            binding.next_push = 0;
            binding.early.clear();
            binding.gap_since = None;
            actions.push(Action::RequestRebind {
                actor: actor.clone(),
                epoch: binding.epoch,
                gone: node.clone(),
            });
        }
        actions
    }

    fn tick(&mut self, now: Instant) -> Vec<Action> {
        match self.state {
            State::Greeting | State::Authenticating => {
                if now >= self.opened + self.limits.auth_timeout {
                    return self.close(
                        CloseCode::Unauthenticated,
                        format!(
                            "no Hello within {:?}; send Hello with a token as the first frame",
                            self.limits.auth_timeout
                        ),
                    );
                }
                Vec::new()
            }
            State::Open(_) => {
                let timeout = self.limits.seal_timeout;
                for (actor, binding) in &self.bindings {
                    if binding.sealed_until().is_some_and(|until| now >= until) {
                        let reason = format!(
                            "{actor} was still moving between nodes past its move's deadline and \
                             the seal timeout of {timeout:?} after it; connect again and bind it"
                        );
                        return self.close(CloseCode::SealTimeout, reason);
                    }
                    if let Some(since) = binding.gap_since
                        && now >= since + timeout
                    {
                        let reason = format!(
                            "push {} of {actor} never arrived within {timeout:?}; connect again \
                             and bind it",
                            binding.next_push
                        );
                        return self.close(CloseCode::SealTimeout, reason);
                    }
                }
                Vec::new()
            }
            State::Closed => Vec::new(),
        }
    }

    /// Ends the session: every binding is let go (held inputs still reach their Actor), then the
    /// client is told why.
    fn close(&mut self, code: CloseCode, reason: String) -> Vec<Action> {
        self.state = State::Closed;
        let mut actions = Vec::new();
        for (actor, binding) in std::mem::take(&mut self.bindings) {
            actions.extend(Self::let_go(&actor, binding));
        }
        actions.push(Action::Close { code, reason });
        actions
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_rebind_goes_once_the_record_no_longer_names_the_node_that_left() {
        let (gone, other) = (NodeId::new("n1").unwrap(), NodeId::new("n2").unwrap());
        assert!(
            !rebind_may_go(Some(&gone), &gone),
            "recovery has not rebuilt it yet"
        );
        assert!(rebind_may_go(Some(&other), &gone), "rebuilt elsewhere");
        assert!(
            rebind_may_go(None, &gone),
            "not rebuilt: the bind's answer says so"
        );
    }

    fn actor(id: &str) -> ActorId {
        ActorId::new(id).unwrap()
    }

    fn node(id: &str) -> NodeId {
        NodeId::new(id).unwrap()
    }

    /// A seal of Actor `a` under bind 1, with no hold.
    fn seal(rel: RelocationId) -> Event {
        Event::Seal {
            rel,
            actor: actor("a"),
            epoch: 1,
            hold: Duration::ZERO,
        }
    }

    fn input(a: &str, n: u8) -> Event {
        Event::Client(ClientFrame::Input {
            actor: actor(a),
            payload: Bytes::from(vec![n]),
        })
    }

    fn forwards(actions: &[Action]) -> Vec<(String, u8)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Forward { owner, payload, .. } => Some((owner.to_string(), payload[0])),
                _ => None,
            })
            .collect()
    }

    fn closed(actions: &[Action]) -> Option<CloseCode> {
        actions.iter().find_map(|a| match a {
            Action::Close { code, .. } => Some(*code),
            _ => None,
        })
    }

    /// An authenticated session with `a` bound on node `s`.
    fn open_with(limits: SessionLimits, t: Instant) -> SessionMachine {
        open_version(PROTOCOL_VERSION, limits, t)
    }

    /// An authenticated session of a client speaking `version`, binding `a`.
    fn open_version(version: u16, limits: SessionLimits, t: Instant) -> SessionMachine {
        let mut m = SessionMachine::new(SessionId(7), node("g"), limits, t);
        let token = Bytes::from_static(b"t");
        let hello = ClientFrame::Hello {
            version,
            token: token.clone(),
        };
        assert_eq!(
            m.on(Event::Client(hello), t),
            vec![Action::Authenticate { token }]
        );
        let welcome = m.on(Event::Authenticated(Ok(Identity::new("p"))), t);
        assert!(matches!(
            welcome[..],
            [Action::Send(ServerFrame::Welcome { .. })]
        ));
        let bind = m.on(Event::Client(ClientFrame::Bind { actor: actor("a") }), t);
        assert_eq!(bind, vec![Action::Authorize { actor: actor("a") }]);
        let request = m.on(
            Event::Authorized {
                actor: actor("a"),
                verdict: Ok(()),
            },
            t,
        );
        assert_eq!(
            request,
            vec![Action::RequestBind {
                actor: actor("a"),
                epoch: 1
            }]
        );
        m
    }

    fn bound(m: &mut SessionMachine, owner: &str, t: Instant) -> Vec<Action> {
        bound_in(m, 1, owner, t)
    }

    /// `a`'s bind of `epoch` answered from `owner`.
    fn bound_in(m: &mut SessionMachine, epoch: u32, owner: &str, t: Instant) -> Vec<Action> {
        m.on(
            Event::Bound {
                actor: actor("a"),
                epoch,
                owner: node(owner),
                verdict: Ok("player".into()),
            },
            t,
        )
    }

    /// The counts the fences among `actions` cover.
    fn fences(actions: &[Action]) -> Vec<u64> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Fence { upto, .. } => Some(*upto),
                _ => None,
            })
            .collect()
    }

    /// The counts the client is told ran.
    fn delivered(actions: &[Action]) -> Vec<u64> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Send(ServerFrame::Delivered { inputs, .. }) => Some(*inputs),
                _ => None,
            })
            .collect()
    }

    fn fenced(upto: u64, reached: bool) -> Event {
        fenced_in(1, upto, reached)
    }

    /// A fence of `a`'s bind `epoch` came back.
    fn fenced_in(epoch: u32, upto: u64, reached: bool) -> Event {
        Event::Fenced {
            actor: actor("a"),
            epoch,
            upto,
            reached,
        }
    }

    #[test]
    fn inputs_are_confirmed_once_a_fence_behind_them_ran_one_fence_at_a_time() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        // Held while binding: not on their way yet, so nothing to confirm.
        let held = m.on(input("a", 1), t);
        assert_eq!(fences(&held), Vec::<u64>::new());
        let answer = bound(&mut m, "s", t);
        assert_eq!(forwards(&answer), vec![("s".into(), 1)]);
        assert_eq!(fences(&answer), vec![1], "a fence follows the held input");
        // Two more go while that fence is on its way: no second fence yet.
        let more = [m.on(input("a", 2), t), m.on(input("a", 3), t)].concat();
        assert_eq!(forwards(&more).len(), 2);
        assert_eq!(fences(&more), Vec::<u64>::new());
        // The fence ran: the client hears of the first input, and a fence follows the others.
        let ran = m.on(fenced(1, true), t);
        assert_eq!((delivered(&ran), fences(&ran)), (vec![1], vec![3]));
        // A fence that did not come back confirms nothing, and waits for the next input.
        assert!(m.on(fenced(3, false), t).is_empty());
        let next = m.on(input("a", 4), t);
        assert_eq!(fences(&next), vec![4]);
        // A stale answer (of the fence given up on) changes nothing.
        assert!(m.on(fenced(3, true), t).is_empty());
        let ran = m.on(fenced(4, true), t);
        assert_eq!((delivered(&ran), fences(&ran)), (vec![4], vec![]));
    }

    /// The counts the client is told may not have run.
    fn undelivered(actions: &[Action]) -> Vec<u64> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Send(ServerFrame::Undelivered { inputs, .. }) => Some(*inputs),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn inputs_passed_to_a_node_that_crashed_are_reported_undelivered_and_never_confirmed() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        bound(&mut m, "s", t);
        m.on(input("a", 1), t);
        assert_eq!(delivered(&m.on(fenced(1, true), t)), vec![1]);
        // Two more go to s, and s crashes before a fence behind them comes back.
        let sent = [m.on(input("a", 2), t), m.on(input("a", 3), t)].concat();
        assert_eq!(forwards(&sent).len(), 2);
        let left = m.on(Event::OwnerLeft { node: node("s") }, t);
        assert_eq!(undelivered(&left), vec![3], "{left:?}");
        // The Actor is bound again where recovery put it; the input held meanwhile goes there,
        // and the fence behind it confirms it alone: 2 and 3 stay reported, not confirmed.
        assert!(m.on(input("a", 4), t).is_empty());
        let answer = bound_in(&mut m, 2, "r", t);
        assert_eq!(forwards(&answer), vec![("r".into(), 4)]);
        assert_eq!(fences(&answer), vec![4]);
        let ran = m.on(fenced_in(2, 4, true), t);
        assert_eq!(delivered(&ran), vec![4]);
        // A node leaving with nothing unconfirmed on it reports nothing.
        let left = m.on(Event::OwnerLeft { node: node("r") }, t);
        assert_eq!(undelivered(&left), Vec::<u64>::new());
    }

    #[test]
    fn a_version_2_client_is_not_told_what_a_crash_left_unconfirmed() {
        let t = Instant::now();
        let mut m = open_version(2, SessionLimits::default(), t);
        bound(&mut m, "s", t);
        m.on(input("a", 1), t);
        let left = m.on(Event::OwnerLeft { node: node("s") }, t);
        assert_eq!(undelivered(&left), Vec::<u64>::new());
    }

    #[test]
    fn a_version_1_client_is_never_sent_a_confirmation() {
        let t = Instant::now();
        let mut m = open_version(1, SessionLimits::default(), t);
        let mut actions = bound(&mut m, "s", t);
        actions.extend(m.on(input("a", 1), t));
        assert_eq!(forwards(&actions), vec![("s".into(), 1)]);
        assert_eq!(fences(&actions), Vec::<u64>::new());
        // A version newer than this gateway speaks is refused.
        let mut newer = SessionMachine::new(SessionId(2), node("g"), SessionLimits::default(), t);
        let hello = Event::Client(ClientFrame::Hello {
            version: PROTOCOL_VERSION + 1,
            token: Bytes::new(),
        });
        assert_eq!(closed(&newer.on(hello, t)), Some(CloseCode::Protocol));
    }

    #[test]
    fn an_actor_whose_node_left_is_bound_again_and_its_pushes_count_from_zero() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        bound(&mut m, "s", t);
        let push = |seq| Event::Push {
            actor: actor("a"),
            epoch: 1,
            seq,
            payload: Bytes::from_static(b"x"),
        };
        assert_eq!(m.on(push(0), t).len(), 1);
        // A node other than the owner leaving changes nothing.
        assert!(m.on(Event::OwnerLeft { node: node("z") }, t).is_empty());
        let rebind = m.on(Event::OwnerLeft { node: node("s") }, t);
        assert_eq!(
            rebind,
            vec![Action::RequestRebind {
                actor: actor("a"),
                epoch: 2,
                gone: node("s"),
            }]
        );
        // The wait over, the bind goes, once.
        let due = || Event::RebindDue {
            actor: actor("a"),
            epoch: 2,
        };
        assert_eq!(
            m.on(due(), t),
            vec![Action::RequestBind {
                actor: actor("a"),
                epoch: 2
            }]
        );
        // Held until the rebuilt Actor answers, then sent to it first.
        assert!(m.on(input("a", 1), t).is_empty());
        let answer = bound_in(&mut m, 2, "r", t);
        assert!(m.on(due(), t).is_empty(), "bound already: no second bind");
        assert_eq!(forwards(&answer), vec![("r".into(), 1)]);
        // The old incarnation's pushes are dropped; the new one's start at 0.
        assert!(m.on(push(1), t).is_empty());
        let fresh = Event::Push {
            actor: actor("a"),
            epoch: 2,
            seq: 0,
            payload: Bytes::from_static(b"y"),
        };
        assert_eq!(m.on(fresh, t).len(), 1);
    }

    /// A rebind whose wait ends after the client let the Actor go, or after the session ended,
    /// sends no bind: it would take the Actor from the session that holds it now.
    #[test]
    fn a_rebind_due_after_the_binding_ended_sends_nothing() {
        let t = Instant::now();
        let due = Event::RebindDue {
            actor: actor("a"),
            epoch: 2,
        };
        let mut m = open_with(SessionLimits::default(), t);
        bound(&mut m, "s", t);
        assert_eq!(m.on(Event::OwnerLeft { node: node("s") }, t).len(), 1);
        m.on(Event::Client(ClientFrame::Unbind { actor: actor("a") }), t);
        assert!(m.on(due.clone(), t).is_empty());

        let mut m = open_with(SessionLimits::default(), t);
        bound(&mut m, "s", t);
        assert_eq!(m.on(Event::OwnerLeft { node: node("s") }, t).len(), 1);
        m.on(
            Event::ClientGone {
                reason: "gone".into(),
            },
            t,
        );
        assert!(m.on(due, t).is_empty());
    }

    #[test]
    fn inputs_sent_while_binding_are_held_then_go_first_to_the_owner() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        assert!(m.on(input("a", 1), t).is_empty());
        assert!(m.on(input("a", 2), t).is_empty());
        let actions = bound(&mut m, "s", t);
        assert_eq!(
            actions[0],
            Action::Send(ServerFrame::Bound { actor: actor("a") })
        );
        assert_eq!(forwards(&actions), vec![("s".into(), 1), ("s".into(), 2)]);
        assert_eq!(forwards(&m.on(input("a", 3), t)), vec![("s".into(), 3)]);
        assert_eq!(m.type_of(&actor("a")), Some("player"));
    }

    #[test]
    fn a_sealed_actor_holds_inputs_and_the_release_sends_them_to_the_new_owner_first() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        bound(&mut m, "s", t);
        let rel = RelocationId(1);
        m.on(seal(rel), t);
        assert!(m.on(input("a", 1), t).is_empty());
        assert!(m.on(input("a", 2), t).is_empty());
        let released = m.on(
            Event::Release {
                rel,
                actor: actor("a"),
                epoch: 1,
                owner: Some(node("t")),
            },
            t,
        );
        assert_eq!(forwards(&released), vec![("t".into(), 1), ("t".into(), 2)]);
        assert_eq!(forwards(&m.on(input("a", 3), t)), vec![("t".into(), 3)]);
    }

    /// A shutdown lets held inputs go to where they may still run; a gateway that may have lost
    /// its lease sends nothing, since they could run after what its client sends elsewhere.
    #[test]
    fn a_gateway_that_lost_its_lease_closes_without_forwarding_what_it_held() {
        let t = Instant::now();
        let sealed_with_two = || {
            let mut m = open_with(SessionLimits::default(), t);
            bound(&mut m, "s", t);
            m.on(seal(RelocationId(1)), t);
            assert!(m.on(input("a", 1), t).is_empty());
            assert!(m.on(input("a", 2), t).is_empty());
            m
        };
        let shutdown = sealed_with_two().on(
            Event::Shutdown {
                reason: "bye".into(),
            },
            t,
        );
        assert_eq!(forwards(&shutdown), vec![("s".into(), 1), ("s".into(), 2)]);

        let mut m = sealed_with_two();
        let lost = m.on(
            Event::LeaseLost {
                reason: "lease".into(),
            },
            t,
        );
        assert_eq!(
            lost,
            vec![Action::Close {
                code: CloseCode::Shutdown,
                reason: "lease".into()
            }]
        );
        let release = Event::Release {
            rel: RelocationId(1),
            actor: actor("a"),
            epoch: 1,
            owner: Some(node("t")),
        };
        assert!(m.on(release, t).is_empty(), "nothing after the close");
        assert!(m.on(input("a", 3), t).is_empty());
    }

    #[test]
    fn an_abandoned_move_releases_held_inputs_to_the_source() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        bound(&mut m, "s", t);
        let rel = RelocationId(1);
        m.on(seal(rel), t);
        m.on(input("a", 1), t);
        let released = m.on(
            Event::Release {
                rel,
                actor: actor("a"),
                epoch: 1,
                owner: Some(node("s")),
            },
            t,
        );
        assert_eq!(forwards(&released), vec![("s".into(), 1)]);
    }

    #[test]
    fn two_quick_moves_whose_releases_cross_hold_until_both_and_follow_the_last() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        bound(&mut m, "x", t);
        let (r1, r2) = (RelocationId(1), RelocationId(2));
        let release = |rel, owner: &str| Event::Release {
            rel,
            actor: actor("a"),
            epoch: 1,
            owner: Some(node(owner)),
        };
        m.on(seal(r1), t);
        m.on(input("a", 1), t);
        // y opened the Actor and started the next move before x's release got here.
        m.on(seal(r2), t);
        m.on(input("a", 2), t);
        assert!(forwards(&m.on(release(r2, "z"), t)).is_empty());
        let out = m.on(release(r1, "y"), t);
        assert_eq!(forwards(&out), vec![("z".into(), 1), ("z".into(), 2)]);
    }

    #[test]
    fn pushes_from_two_nodes_are_delivered_by_their_numbers() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        bound(&mut m, "s", t);
        let push = |seq: u64| Event::Push {
            actor: actor("a"),
            epoch: 1,
            seq,
            payload: Bytes::from(vec![seq as u8]),
        };
        let pushed = |actions: Vec<Action>| -> Vec<u8> {
            actions
                .into_iter()
                .filter_map(|a| match a {
                    Action::Send(ServerFrame::Push { seq, payload, .. }) => {
                        assert_eq!(seq, u64::from(payload[0]), "numbered as sent");
                        Some(payload[0])
                    }
                    _ => None,
                })
                .collect()
        };
        assert_eq!(pushed(m.on(push(0), t)), vec![0]);
        // The target's first pushes overtake the source's last one.
        assert!(pushed(m.on(push(2), t)).is_empty());
        assert!(pushed(m.on(push(3), t)).is_empty());
        assert!(m.next_deadline().is_some());
        assert_eq!(pushed(m.on(push(1), t)), vec![1, 2, 3]);
        assert_eq!(m.next_deadline(), None);
        // A duplicate is dropped.
        assert!(pushed(m.on(push(1), t)).is_empty());
        // A push of an older bind of the same Actor does not pass for this one.
        let stale = Event::Push {
            actor: actor("a"),
            epoch: 0,
            seq: 4,
            payload: Bytes::new(),
        };
        assert!(m.on(stale, t).is_empty());
    }

    #[test]
    fn a_missing_push_closes_the_session_after_the_seal_timeout() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        bound(&mut m, "s", t);
        m.on(
            Event::Push {
                actor: actor("a"),
                epoch: 1,
                seq: 1,
                payload: Bytes::new(),
            },
            t,
        );
        let later = t + SessionLimits::default().seal_timeout;
        assert_eq!(m.next_deadline(), Some(later));
        assert_eq!(
            closed(&m.on(Event::Tick, later)),
            Some(CloseCode::SealTimeout)
        );
    }

    #[test]
    fn a_seal_that_outlives_its_timeout_closes_the_session_and_held_inputs_still_follow() {
        let t = Instant::now();
        let limits = SessionLimits {
            seal_timeout: Duration::from_millis(300),
            ..SessionLimits::default()
        };
        let mut m = open_with(limits, t);
        bound(&mut m, "s", t);
        m.on(seal(RelocationId(1)), t);
        m.on(input("a", 1), t);
        assert!(m.on(Event::Tick, t + Duration::from_millis(299)).is_empty());
        let actions = m.on(Event::Tick, t + Duration::from_millis(300));
        assert_eq!(closed(&actions), Some(CloseCode::SealTimeout));
        // The input goes where inputs went last: it cannot overtake anything there.
        assert_eq!(forwards(&actions), vec![("s".into(), 1)]);
        assert!(actions.contains(&Action::RequestUnbind {
            actor: actor("a"),
            epoch: 1,
            via: Some(node("s"))
        }));
        assert!(m.is_closed());
        assert!(m.on(input("a", 2), t).is_empty());
    }

    #[test]
    fn a_move_that_works_long_keeps_the_session_until_its_deadline_and_the_seal_timeout() {
        let t = Instant::now();
        let limits = SessionLimits {
            seal_timeout: Duration::from_millis(300),
            ..SessionLimits::default()
        };
        let ms = Duration::from_millis;
        let seal = |rel, hold| Event::Seal {
            rel,
            actor: actor("a"),
            epoch: 1,
            hold,
        };
        let release = |rel, owner: &str| Event::Release {
            rel,
            actor: actor("a"),
            epoch: 1,
            owner: Some(node(owner)),
        };
        // A move with 6 s left to its deadline: held past the seal timeout, released in time.
        let mut m = open_with(limits, t);
        bound(&mut m, "s", t);
        m.on(seal(RelocationId(1), ms(6000)), t);
        assert_eq!(m.next_deadline(), Some(t + ms(6300)));
        m.on(input("a", 1), t + ms(400));
        assert!(m.on(Event::Tick, t + ms(6299)).is_empty());
        let out = m.on(release(RelocationId(1), "t"), t + ms(6299));
        assert_eq!(forwards(&out), vec![("t".into(), 1)]);
        assert!(!m.is_closed());
        assert_eq!(m.next_deadline(), None);

        // Its release never comes: closed once the deadline and the seal timeout have passed.
        let mut m = open_with(limits, t);
        bound(&mut m, "s", t);
        m.on(seal(RelocationId(1), ms(6000)), t);
        assert!(m.on(Event::Tick, t + ms(6299)).is_empty());
        let out = m.on(Event::Tick, t + ms(6300));
        assert_eq!(closed(&out), Some(CloseCode::SealTimeout));

        // A seal with no time left still gets the seal timeout.
        let mut m = open_with(limits, t);
        bound(&mut m, "s", t);
        m.on(seal(RelocationId(1), Duration::ZERO), t);
        assert_eq!(m.next_deadline(), Some(t + ms(300)));

        // Two moves under way: the one not released yet says how long to hold.
        let mut m = open_with(limits, t);
        bound(&mut m, "x", t);
        m.on(seal(RelocationId(1), ms(6000)), t);
        m.on(seal(RelocationId(2), ms(1000)), t + ms(100));
        assert_eq!(m.next_deadline(), Some(t + ms(6300)));
        assert!(forwards(&m.on(release(RelocationId(1), "y"), t + ms(200))).is_empty());
        assert_eq!(m.next_deadline(), Some(t + ms(1400)));
        assert!(m.on(Event::Tick, t + ms(1399)).is_empty());
        assert!(!m.is_closed());

        // A hold no move could need is capped rather than trusted.
        let mut m = open_with(limits, t);
        bound(&mut m, "s", t);
        m.on(seal(RelocationId(1), Duration::MAX), t);
        assert_eq!(m.next_deadline(), Some(t + MAX_HOLD + ms(300)));
    }

    #[test]
    fn too_many_held_inputs_close_the_session() {
        let t = Instant::now();
        let limits = SessionLimits {
            max_held: 2,
            ..SessionLimits::default()
        };
        let mut m = open_with(limits, t);
        m.on(input("a", 1), t);
        m.on(input("a", 2), t);
        assert_eq!(
            closed(&m.on(input("a", 3), t)),
            Some(CloseCode::TooManyHeld)
        );
    }

    #[test]
    fn frames_before_the_hello_and_a_late_hello_are_refused() {
        let t = Instant::now();
        let mut m = SessionMachine::new(SessionId(1), node("g"), SessionLimits::default(), t);
        let bind = Event::Client(ClientFrame::Bind { actor: actor("a") });
        assert_eq!(closed(&m.on(bind, t)), Some(CloseCode::Unauthenticated));

        let mut m = SessionMachine::new(SessionId(1), node("g"), SessionLimits::default(), t);
        let late = t + SessionLimits::default().auth_timeout;
        assert_eq!(m.next_deadline(), Some(late));
        assert_eq!(
            closed(&m.on(Event::Tick, late)),
            Some(CloseCode::Unauthenticated)
        );

        let mut m = open_with(SessionLimits::default(), t);
        let again = Event::Client(ClientFrame::Hello {
            version: PROTOCOL_VERSION,
            token: Bytes::new(),
        });
        assert_eq!(closed(&m.on(again, t)), Some(CloseCode::Protocol));
    }

    #[test]
    fn a_client_over_its_rate_is_closed() {
        let t = Instant::now();
        let limits = SessionLimits {
            rate_per_second: 10,
            rate_burst: 5,
            ..SessionLimits::default()
        };
        let mut m = open_with(limits, t);
        bound(&mut m, "s", t);
        // The bind took one token.
        for n in 0..4 {
            assert_eq!(closed(&m.on(input("a", n), t)), None);
        }
        assert_eq!(
            closed(&m.on(input("a", 9), t)),
            Some(CloseCode::RateLimited)
        );
    }

    #[test]
    fn binds_over_the_limit_are_refused_and_a_replaced_binding_is_reported() {
        let t = Instant::now();
        let limits = SessionLimits {
            max_bindings: 1,
            ..SessionLimits::default()
        };
        let mut m = open_with(limits, t);
        bound(&mut m, "s", t);
        let refused = m.on(Event::Client(ClientFrame::Bind { actor: actor("b") }), t);
        assert!(matches!(
            refused[..],
            [Action::Send(ServerFrame::BindRefused { .. })]
        ));
        let out = m.on(
            Event::Unbound {
                actor: actor("a"),
                epoch: 1,
                reason: "another session bound it".into(),
            },
            t,
        );
        assert!(matches!(
            out[..],
            [Action::Send(ServerFrame::Unbound { .. })]
        ));
        assert!(m.bound().is_empty());
        // An input for it now is dropped with a word, not a close.
        let dropped = m.on(input("a", 1), t);
        assert!(matches!(
            dropped[..],
            [Action::Send(ServerFrame::Unbound { .. })]
        ));
    }

    #[test]
    fn a_bind_answered_after_the_session_gave_up_on_it_is_undone() {
        let t = Instant::now();
        let mut m = open_with(SessionLimits::default(), t);
        m.on(Event::Client(ClientFrame::Unbind { actor: actor("a") }), t);
        assert_eq!(
            bound(&mut m, "s", t),
            vec![Action::RequestUnbind {
                actor: actor("a"),
                epoch: 1,
                via: Some(node("s"))
            }]
        );
    }
}
