//! Game clients: each has a session on its gateway node, driven by the core's [`SessionMachine`],
//! binds an Actor and sends it numbered inputs. The bind travels to the Actor like a message and
//! is applied by the core's binding rules ([`binding::apply`]); a move of the Actor seals the
//! gateway, which holds the inputs until the move's release says where the Actor runs, and a node
//! that leaves the cluster has its Actors bound again once they are rebuilt.
//!
//! [`binding::apply`]: ferry_core::session::binding::apply

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_core::authority::UnitRecord;
use ferry_core::ids::{ActorId, NodeId, UnitId};
use ferry_core::relocation::RelocationId;
use ferry_core::relocation::protocol::{SessionsTo, SourceEvent};
use ferry_core::session::binding::{self, Addressee, Step};
use ferry_core::session::frames::SessionFrame;
use ferry_core::session::machine::{Action, Event, REBIND_WAIT, SessionMachine, rebind_may_go};
use ferry_core::session::wire::{ClientFrame, Encoding, PROTOCOL_VERSION, ServerFrame};
use ferry_core::session::{Identity, SessionId, SessionLimits, SessionOp, SessionRef};

use super::lanes::{Cell, Parcel, Work};
use super::links::Msg;
use super::routing::Request;
use super::store::{Op, Purpose, Reply};
use super::{CLIENTS, Timer, World, node_id, node_index};

/// How often a rebind looks again whether recovery has rebuilt its Actor.
const REBIND_EVERY: Duration = Duration::from_millis(500);

/// One client and its session on its gateway.
#[derive(Debug, Default)]
pub(crate) struct Gateway {
    session: Option<SessionMachine>,
    /// The session's number: a client whose gateway went away connects again in a new session.
    number: u64,
    /// The gateway process the session lives in.
    process: u64,
    /// The Actor it binds, once asked.
    actor: Option<usize>,
    /// The next input's number.
    next: u64,
    /// Inputs the gateway took, per session and Actor, in order.
    accepted: BTreeMap<(u64, usize), Vec<u64>>,
    /// Sessions whose binding ended or closed: what they took is not owed any more.
    broken: BTreeSet<u64>,
    /// Whether a timer is pending for the session.
    armed: bool,
}

impl Gateway {
    /// The inputs a session still open, whose binding never ended, took for `unit`, in order;
    /// with the id they run under in the unit's log.
    pub fn accepted(&self, unit: usize) -> Vec<(usize, &Vec<u64>)> {
        self.accepted
            .iter()
            .filter(|((number, actor), _)| *actor == unit && !self.broken.contains(number))
            .map(|((number, _), inputs)| (*number as usize, inputs))
            .collect()
    }
}

impl Gateway {
    /// The log id of this client's current session, and its last input's number.
    pub fn floor(&self, client: usize) -> (usize, u64) {
        (input_id(client, self.number), self.next)
    }
}

/// What gateways and Actors' nodes say to each other.
#[derive(Debug, Clone)]
pub(crate) enum SessionMsg {
    /// The bind was applied where the Actor runs.
    Bound {
        client: usize,
        number: u64,
        actor: usize,
        epoch: u32,
    },
    /// The Actor let the binding go.
    Unbound {
        client: usize,
        number: u64,
        actor: usize,
        epoch: u32,
    },
    /// Hold these Actors' inputs for this move, for `hold` at most, and say so.
    Seal {
        rel: u64,
        actors: Vec<(usize, u64, usize, u32)>,
        hold: Duration,
    },
    /// Every input this gateway sent before is on its way ahead of this.
    SealAck { rel: u64 },
    /// The move ended: these Actors run on `owner`.
    Release {
        rel: u64,
        actors: Vec<(usize, u64, usize, u32)>,
        owner: Option<usize>,
    },
}

/// Which log entries a session's inputs are: one id per client and session.
pub(crate) fn input_id(client: usize, number: u64) -> usize {
    CLIENTS + client * 1_000 + number as usize
}

impl World {
    /// An input (under its log id) that a node dropped, counting it, for its Actor's node could
    /// not be reached: it is not owed.
    pub(crate) fn input_dropped(&mut self, id: usize, actor: usize, seq: u64) {
        let (client, number) = ((id - CLIENTS) / 1_000, (id - CLIENTS) % 1_000);
        if let Some(inputs) = self.gateways[client]
            .accepted
            .get_mut(&(number as u64, actor))
        {
            inputs.retain(|s| *s != seq);
        }
    }

    /// The node a client's gateway runs on.
    pub(crate) fn gateway_node(&self, client: usize) -> usize {
        client % self.shape.nodes
    }

    /// The client connects to its gateway and says hello, if the gateway runs.
    pub(crate) fn open_session(&mut self, client: usize) {
        let node = self.gateway_node(client);
        if !self.nodes[node].up {
            return;
        }
        let gateway = &mut self.gateways[client];
        gateway.number += 1;
        gateway.process = self.nodes[node].process;
        gateway.actor = None;
        let id = SessionId((client as u64) << 32 | gateway.number);
        gateway.session = Some(SessionMachine::new(
            id,
            node_id(node),
            SessionLimits::default(),
            self.now,
        ));
        let hello = ClientFrame::Hello {
            version: PROTOCOL_VERSION,
            token: Bytes::from_static(b"token"),
        };
        self.feed(client, Event::Client(hello));
    }

    /// Feeds the session an event, now, and carries out what it asks.
    fn feed(&mut self, client: usize, event: Event) {
        let now = self.now;
        let line = self.line(|| format!("client {client}: {event:?}"));
        let Some(session) = self.gateways[client].session.as_mut() else {
            return;
        };
        let actions = session.on(event, now);
        trace!(self, "{line} -> {actions:?}");
        for action in actions {
            self.session_action(client, action);
        }
        let Some(session) = self.gateways[client].session.as_ref() else {
            return;
        };
        if session.is_closed() {
            let number = self.gateways[client].number;
            self.gateways[client].broken.insert(number);
            self.gateways[client].session = None;
            return;
        }
        if let Some(at) = session.next_deadline()
            && !self.gateways[client].armed
        {
            self.gateways[client].armed = true;
            self.arm(at.max(now), Timer::Session { client });
        }
    }

    pub(crate) fn session_timer(&mut self, client: usize) {
        self.gateways[client].armed = false;
        self.feed(client, Event::Tick);
    }

    fn session_action(&mut self, client: usize, action: Action) {
        let node = self.gateway_node(client);
        let number = self.gateways[client].number;
        match action {
            Action::Authenticate { .. } => self.feed(
                client,
                Event::Authenticated(Ok(Identity::new(format!("c{client}")))),
            ),
            Action::Authorize { actor } => self.feed(
                client,
                Event::Authorized {
                    actor,
                    verdict: Ok(()),
                },
            ),
            Action::Forward {
                actor,
                owner,
                payload,
            } => {
                let seq = u64::from_be_bytes(payload[..8].try_into().expect("an input number"));
                let parcel = Parcel {
                    to: self.unit_index(&UnitId::Actor(actor)),
                    work: Work::Input {
                        client: input_id(client, number),
                        seq,
                    },
                    origin: node,
                    hops: 0,
                };
                self.deliver_via(node, node_index(&owner), parcel);
            }
            Action::Fence {
                actor,
                owner,
                epoch,
                upto,
            } => {
                let unit = self.unit_index(&UnitId::Actor(actor));
                let id = self.session_request(
                    node,
                    Request::SessionFence {
                        client,
                        unit,
                        epoch,
                        upto,
                    },
                );
                let parcel = Parcel {
                    to: unit,
                    work: Work::Fence { id },
                    origin: node,
                    hops: 0,
                };
                self.deliver_via(node, node_index(&owner), parcel);
            }
            Action::RequestBind { actor, epoch } => {
                let unit = self.unit_index(&UnitId::Actor(actor));
                trace!(self, "client {client}: binds u{unit} (bind {epoch})");
                self.send_bind(client, number, unit, epoch);
            }
            Action::RequestRebind { actor, epoch, gone } => {
                let unit = self.unit_index(&UnitId::Actor(actor));
                self.call(
                    node,
                    Op::Get(vec![unit]),
                    Purpose::Rebind {
                        client,
                        number,
                        unit,
                        epoch,
                        gone: node_index(&gone),
                        until: self.now + REBIND_WAIT,
                    },
                );
            }
            Action::RequestUnbind { actor, epoch, via } => {
                let unit = self.unit_index(&UnitId::Actor(actor));
                let parcel = Parcel {
                    to: unit,
                    work: Work::Unbind {
                        client,
                        number,
                        epoch,
                    },
                    origin: node,
                    hops: 0,
                };
                match via {
                    Some(via) => self.deliver_via(node, node_index(&via), parcel),
                    None => self.send_local(node, parcel),
                }
            }
            // The client hears its binding ended: what it sent under it is not owed any more.
            Action::Send(ServerFrame::BindRefused { .. } | ServerFrame::Unbound { .. }) => {
                self.gateways[client].broken.insert(number);
            }
            Action::Send(_) => {}
            Action::Close { code, reason } => {
                trace!(self, "client {client}: session closed ({code:?}: {reason})");
                self.gateways[client].broken.insert(number);
            }
        }
    }

    /// Sends a bind to the Actor as a request: its failure (the Actor unknown, out of reach, too
    /// slow) is the session's to hear.
    fn send_bind(&mut self, client: usize, number: u64, unit: usize, epoch: u32) {
        let node = self.gateway_node(client);
        let id = self.open_request(
            node,
            Request::Bind {
                client,
                unit,
                epoch,
            },
        );
        let parcel = Parcel {
            to: unit,
            work: Work::Bind {
                client,
                number,
                epoch,
                id,
            },
            origin: node,
            hops: 0,
        };
        self.send_local(node, parcel);
    }

    /// A bind failed: the session hears it (a bind it gave up on changes nothing).
    pub(crate) fn bind_failed(&mut self, client: usize, unit: usize, epoch: u32) {
        let node = self.gateway_node(client);
        let actor = self.actor_id(unit);
        self.feed(
            client,
            Event::Bound {
                actor,
                epoch,
                owner: node_id(node),
                verdict: Err("the bind did not reach the Actor".into()),
            },
        );
    }

    /// Opens a request for a session's fence on the gateway node.
    fn session_request(&mut self, node: usize, request: Request) -> u64 {
        self.open_request(node, request)
    }

    /// A session fence's terminal.
    pub(crate) fn session_fenced(
        &mut self,
        client: usize,
        unit: usize,
        epoch: u32,
        upto: u64,
        reached: bool,
    ) {
        let actor = self.actor_id(unit);
        self.feed(
            client,
            Event::Fenced {
                actor,
                epoch,
                upto,
                reached,
            },
        );
    }

    fn actor_id(&self, unit: usize) -> ActorId {
        match self.unit_id(unit) {
            UnitId::Actor(actor) => actor,
            UnitId::Spot(_) => unreachable!("sessions bind Actors"),
        }
    }

    /// A client binds an Actor (one per client).
    pub(crate) fn bind(&mut self, client: usize, actor: usize) {
        if self.gateways[client].session.is_none() {
            self.open_session(client);
        }
        if self.gateways[client].session.is_none() || self.gateways[client].actor.is_some() {
            return;
        }
        self.gateways[client].actor = Some(actor);
        let actor = self.actor_id(actor);
        self.feed(client, Event::Client(ClientFrame::Bind { actor }));
    }

    /// A client sends its bound Actor its next input.
    pub(crate) fn input(&mut self, client: usize) {
        let gateway = &self.gateways[client];
        let (Some(session), Some(actor)) = (gateway.session.as_ref(), gateway.actor) else {
            return;
        };
        let id = self.actor_id(actor);
        if !session.bound().contains(&id) {
            return;
        }
        let gateway = &mut self.gateways[client];
        gateway.next += 1;
        let seq = gateway.next;
        gateway
            .accepted
            .entry((gateway.number, actor))
            .or_default()
            .push(seq);
        trace!(self, "client {client}: input #{seq} for u{actor}");
        let payload = Bytes::copy_from_slice(&seq.to_be_bytes());
        self.feed(
            client,
            Event::Client(ClientFrame::Input { actor: id, payload }),
        );
    }

    /// A gateway process ended: its sessions are gone with it. The clients connect again.
    pub(crate) fn gateway_down(&mut self, node: usize) {
        for client in 0..self.gateways.len() {
            if self.gateway_node(client) == node && self.gateways[client].session.is_some() {
                let number = self.gateways[client].number;
                let gateway = &mut self.gateways[client];
                gateway.broken.insert(number);
                gateway.session = None;
                gateway.actor = None;
            }
        }
    }

    /// A gateway's membership read found `gone` left the cluster.
    pub(crate) fn owner_left(&mut self, node: usize, gone: usize) {
        for client in 0..self.gateways.len() {
            if self.gateway_node(client) == node {
                self.feed(
                    client,
                    Event::OwnerLeft {
                        node: node_id(gone),
                    },
                );
            }
        }
    }

    /// The record read for a rebind: bind again once recovery rebuilt the Actor elsewhere, or
    /// once the wait is over (the bind's answer then tells the client).
    pub(crate) fn rebind_read(
        &mut self,
        client: usize,
        number: u64,
        unit: usize,
        epoch: u32,
        (gone, until): (usize, Instant),
        reply: Reply,
    ) {
        if self.gateways[client].number != number || self.gateways[client].session.is_none() {
            return;
        }
        let node = self.gateway_node(client);
        let left = node_id(gone);
        let owner = |f: &Option<(u64, UnitRecord)>| f.as_ref().map(|(_, r)| r.owner.clone());
        let moved_on = matches!(&reply, Reply::Got(found) if found.first().is_some_and(|f| rebind_may_go(owner(f).as_ref(), &left)));
        if moved_on || self.now >= until {
            self.send_bind(client, number, unit, epoch);
        } else {
            let process = self.nodes[node].process;
            self.arm(
                self.now + REBIND_EVERY,
                Timer::Rebind {
                    node,
                    process,
                    client,
                    number,
                    unit,
                    epoch,
                    gone,
                    until,
                },
            );
        }
    }

    pub(crate) fn rebind_again(
        &mut self,
        node: usize,
        client: usize,
        number: u64,
        unit: usize,
        epoch: u32,
        (gone, until): (usize, Instant),
    ) {
        self.call(
            node,
            Op::Get(vec![unit]),
            Purpose::Rebind {
                client,
                number,
                unit,
                epoch,
                gone,
                until,
            },
        );
    }

    // ---- the Actor's side ------------------------------------------------------------------------

    /// A bind or an unbind reaches the head of the Actor's queue: the core's binding rules apply
    /// it (a bind waits while a move's quiet spell is on), and the gateway hears the result.
    pub(crate) fn session_op(&mut self, node: usize, lane: u64, parcel: Parcel) {
        let (client, number, epoch, bind) = match parcel.work {
            Work::Bind {
                client,
                number,
                epoch,
                ..
            } => (client, number, epoch, true),
            Work::Unbind {
                client,
                number,
                epoch,
            } => (client, number, epoch, false),
            _ => return,
        };
        let gateway = self.gateway_node(client);
        let session = SessionRef {
            gateway: node_id(gateway),
            session: SessionId((client as u64) << 32 | number),
            epoch,
            encoding: Encoding::Postcard,
        };
        let op = if bind {
            SessionOp::Bind(session)
        } else {
            SessionOp::Unbind(session)
        };
        let id = self.unit_id(parcel.to);
        let type_name = self.factory(parcel.to);
        let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
            return;
        };
        let quiet = l.stance.quiet();
        let Some(cell) = l.cells.get_mut(&parcel.to) else {
            return;
        };
        let step = binding::apply(
            op,
            quiet,
            Addressee {
                id: &id,
                type_name,
                binding: &mut cell.binding,
            },
        );
        match step {
            Step::Wait(_) => l.deferred.push(parcel),
            Step::Done { notices, answer } => {
                for notice in notices {
                    self.notify(node, parcel.to, notice.gateway, notice.frame);
                }
                if let Work::Bind { id, .. } = parcel.work {
                    let ok = answer.is_ok();
                    self.post(node, parcel.origin, Msg::Reply { id, ok });
                }
            }
        }
    }

    /// Tells a gateway what became of a binding.
    pub(crate) fn notify(
        &mut self,
        node: usize,
        unit: usize,
        gateway: NodeId,
        frame: SessionFrame,
    ) {
        let client_of = |session: SessionId| ((session.0 >> 32) as usize, session.0 & 0xFFFF_FFFF);
        let msg = match frame {
            SessionFrame::Bound { session, epoch, .. } => {
                let (client, number) = client_of(session);
                SessionMsg::Bound {
                    client,
                    number,
                    actor: unit,
                    epoch,
                }
            }
            SessionFrame::Unbound { session, epoch, .. } => {
                let (client, number) = client_of(session);
                SessionMsg::Unbound {
                    client,
                    number,
                    actor: unit,
                    epoch,
                }
            }
            _ => return,
        };
        self.post(node, node_index(&gateway), Msg::Session(msg));
    }

    /// A session frame reaches a node.
    pub(crate) fn on_session(&mut self, node: usize, from: usize, msg: SessionMsg) {
        match msg {
            SessionMsg::Bound {
                client,
                number,
                actor,
                epoch,
            } if self.current(client, number) => {
                let actor = self.actor_id(actor);
                self.feed(
                    client,
                    Event::Bound {
                        actor,
                        epoch,
                        owner: node_id(from),
                        verdict: Ok("player".into()),
                    },
                );
            }
            SessionMsg::Unbound {
                client,
                number,
                actor,
                epoch,
            } if self.current(client, number) => {
                self.gateways[client].broken.insert(number);
                let actor = self.actor_id(actor);
                self.feed(
                    client,
                    Event::Unbound {
                        actor,
                        epoch,
                        reason: "unbound".into(),
                    },
                );
            }
            SessionMsg::Seal { rel, actors, hold } => {
                for (client, number, actor, epoch) in actors {
                    if self.current(client, number) {
                        let actor = self.actor_id(actor);
                        self.feed(
                            client,
                            Event::Seal {
                                rel: RelocationId(u128::from(rel)),
                                actor,
                                epoch,
                                hold,
                            },
                        );
                    }
                }
                self.post(node, from, Msg::Session(SessionMsg::SealAck { rel }));
            }
            SessionMsg::SealAck { rel } => {
                self.source_event(rel, SourceEvent::GatewaySealed(node_id(from)))
            }
            SessionMsg::Release { rel, actors, owner } => {
                for (client, number, actor, epoch) in actors {
                    if self.current(client, number) {
                        let actor = self.actor_id(actor);
                        let owner = owner.map(node_id);
                        self.feed(
                            client,
                            Event::Release {
                                rel: RelocationId(u128::from(rel)),
                                actor,
                                epoch,
                                owner,
                            },
                        );
                    }
                }
            }
            _ => {}
        }
    }

    fn current(&self, client: usize, number: u64) -> bool {
        let gateway = &self.gateways[client];
        gateway.number == number && gateway.session.is_some()
    }

    // ---- moves -----------------------------------------------------------------------------------

    /// The bound Actors of `cells` whose gateway is among `gateways`.
    fn bound_on(
        &self,
        cells: &BTreeMap<usize, Cell>,
        gateways: &BTreeSet<NodeId>,
    ) -> Vec<(NodeId, (usize, u64, usize, u32))> {
        cells
            .iter()
            .filter_map(|(&unit, cell)| {
                let b = cell.binding.as_ref()?;
                let id = b.session.session.0;
                gateways.contains(&b.session.gateway).then(|| {
                    (
                        b.session.gateway.clone(),
                        ((id >> 32) as usize, id & 0xFFFF_FFFF, unit, b.session.epoch),
                    )
                })
            })
            .collect()
    }

    /// The gateways of sessions bound to the lane's Actors now.
    pub(crate) fn bound_gateways(&self, node: usize, lane: u64) -> BTreeSet<NodeId> {
        let Some(l) = self.nodes[node].lanes.get(&lane) else {
            return BTreeSet::new();
        };
        l.cells
            .values()
            .filter_map(|c| c.binding.as_ref())
            .map(|b| b.session.gateway.clone())
            .collect()
    }

    /// Tells these gateways to hold the inputs of the unit's bound Actors.
    pub(crate) fn seal_gateways(
        &mut self,
        node: usize,
        rel: u64,
        lane: u64,
        gateways: BTreeSet<NodeId>,
    ) {
        let cells = match self.nodes[node].lanes.get(&lane) {
            Some(l) => l.cells.clone(),
            None => return,
        };
        let hold = self.outgoing.get(&rel).map_or(Duration::ZERO, |(_, s)| {
            s.machine.deadline().saturating_duration_since(self.now)
        });
        let bound = self.bound_on(&cells, &gateways);
        for gateway in &gateways {
            let actors: Vec<_> = bound
                .iter()
                .filter(|(g, _)| g == gateway)
                .map(|(_, a)| *a)
                .collect();
            if let Some((_, s)) = self.outgoing.get_mut(&rel) {
                s.told.insert(gateway.clone());
                s.sealed.extend(actors.iter().copied());
            }
            let seal = Msg::Session(SessionMsg::Seal { rel, actors, hold });
            // A gateway the link does not take a seal for is hopelessly behind: the move goes on
            // without it.
            if self.send(node, node_index(gateway), seal).is_err() {
                self.source_event(rel, SourceEvent::GatewaySealed(gateway.clone()));
            }
        }
    }

    /// Gateways told to seal that are gone (their process ended) count as sealed.
    pub(crate) fn check_gateways(&mut self, rel: u64, pending: BTreeSet<NodeId>) {
        for gateway in pending {
            if !self.nodes[node_index(&gateway)].up {
                self.source_event(rel, SourceEvent::GatewaySealed(gateway));
            }
        }
    }

    /// Tells every gateway told to seal where the Actors run now.
    pub(crate) fn release_sessions(&mut self, node: usize, rel: u64, to: SessionsTo) {
        let Some((_, s)) = self.outgoing.get(&rel) else {
            return;
        };
        let owner = match to {
            SessionsTo::Target => Some(s.to),
            SessionsTo::Source => Some(node),
        };
        let told: Vec<NodeId> = s.told.iter().cloned().collect();
        let sealed = s.sealed.clone();
        for gateway in told {
            let g = node_index(&gateway);
            let actors: Vec<_> = sealed
                .iter()
                .filter(|(client, ..)| self.gateway_node(*client) == g)
                .copied()
                .collect();
            self.post(
                node,
                g,
                Msg::Session(SessionMsg::Release { rel, actors, owner }),
            );
        }
    }

    /// Gateways of Actors bound at the capture that were not told to seal.
    pub(crate) fn late_gateways(
        &self,
        rel: u64,
        cells: &BTreeMap<usize, Cell>,
    ) -> BTreeSet<NodeId> {
        let told = self
            .outgoing
            .get(&rel)
            .map(|(_, s)| s.told.clone())
            .unwrap_or_default();
        cells
            .values()
            .filter_map(|c| c.binding.as_ref())
            .map(|b| b.session.gateway.clone())
            .filter(|g| !told.contains(g))
            .collect()
    }
}
