//! How a node sends to units: onto a lane here, or by the core's route table ([`Routes`]) to the
//! owner it knows, after a lookup of the unit's record, with route hints from nodes that forward,
//! and a fence along the old path before a switch; a message a backlogged link refuses is looked
//! up again, up to the hop bound. Requests (asks and fences) wait for exactly one terminal here.
//!
//! [`Routes`]: ferry_core::routes::Routes

use ferry_core::ids::UnitId;
use ferry_core::routes::{Arrival, Route, Routed, Switched, lookup_needs_confirming};

use super::lanes::{FOLLOW_UP, Parcel, Work};
use super::links::{Backlogged, Msg};
use super::store::{Op, Purpose, Reply};
use super::{
    FENCE_WAIT, REQUEST_TIMEOUT, Terminal, Timer, World, node_id, node_index, sender_id, sender_of,
};

/// How many times a lookup reads the store before it fails what waits for it.
const LOOKUP_TRIES: u8 = 4;
/// The most times a message is forwarded before it is given up.
const MAX_HOPS: u8 = 8;

/// A request waiting for its terminal on the node that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// A sender's ask.
    Ask {
        sender: usize,
        seq: u64,
        unit: usize,
    },
    /// A route fence: its return ends a switch or an arrival.
    Fence { unit: usize },
    /// A session's fence behind the inputs it sent an Actor so far.
    SessionFence {
        client: usize,
        unit: usize,
        epoch: u32,
        upto: u64,
    },
    /// A session's bind: success comes as a notice from the Actor; a failure ends it here.
    Bind {
        client: usize,
        unit: usize,
        epoch: u32,
    },
}

impl World {
    /// A sender on its node tells (or asks) a unit its next number.
    pub(crate) fn tell(&mut self, s: usize, unit: usize, ask: bool) {
        let node = s % self.shape.nodes;
        if !self.nodes[node].up {
            return;
        }
        let sender = &mut self.senders[s];
        sender.next += 1;
        let seq = sender.next;
        sender.sent.entry(unit).or_default().push(seq);
        let work = if ask {
            let id = self.open_request(
                node,
                Request::Ask {
                    sender: s,
                    seq,
                    unit,
                },
            );
            let process = self.nodes[node].process;
            self.senders[s]
                .asked
                .insert((unit, seq), (process, Vec::new()));
            Work::Ask {
                sender: sender_id(s, self.nodes[node].process),
                seq,
                id,
            }
        } else {
            Work::Tell {
                sender: sender_id(s, self.nodes[node].process),
                seq,
            }
        };
        trace!(
            self,
            "s{s} on n{node} {} u{unit} #{seq}",
            if ask { "asks" } else { "tells" }
        );
        let parcel = Parcel {
            to: unit,
            work,
            origin: node,
            hops: 0,
        };
        self.send_local(node, parcel);
    }

    /// Opens a request on `node`; it times out unless its terminal comes first.
    pub(crate) fn open_request(&mut self, node: usize, request: Request) -> u64 {
        let id = self.fresh();
        self.nodes[node].requests.insert(id, request);
        let process = self.nodes[node].process;
        let wait = match request {
            Request::Ask { .. } | Request::SessionFence { .. } | Request::Bind { .. } => {
                REQUEST_TIMEOUT
            }
            Request::Fence { .. } => FENCE_WAIT,
        };
        let timer = match request {
            Request::Ask { .. } | Request::SessionFence { .. } | Request::Bind { .. } => {
                Timer::Request { node, process, id }
            }
            Request::Fence { .. } => Timer::Fence {
                node,
                process,
                token: id,
            },
        };
        self.arm(self.now + wait, timer);
        id
    }

    /// A request's terminal reaches the node that made it: the first one counts.
    pub(crate) fn terminal(&mut self, node: usize, id: u64, end: Terminal) {
        self.nodes[node].handed.remove(&id);
        let Some(request) = self.nodes[node].requests.remove(&id) else {
            return;
        };
        match request {
            Request::Ask { sender, seq, unit } => {
                trace!(
                    self,
                    "n{node}: s{sender}'s ask #{seq} of u{unit} ends: {end:?}"
                );
                if let Some((_, ends)) = self.senders[sender].asked.get_mut(&(unit, seq)) {
                    ends.push(end);
                }
            }
            Request::Fence { unit } => self.end_switch(node, unit),
            Request::SessionFence {
                client,
                unit,
                epoch,
                upto,
            } => self.session_fenced(client, unit, epoch, upto, end == Terminal::Reply),
            Request::Bind {
                client,
                unit,
                epoch,
            } => {
                if end != Terminal::Reply {
                    self.bind_failed(client, unit, epoch);
                }
            }
        }
    }

    pub(crate) fn request_timed_out(&mut self, node: usize, id: u64) {
        self.terminal(node, id, Terminal::Timeout);
    }

    pub(crate) fn fence_waited(&mut self, node: usize, token: u64) {
        let Some(&Request::Fence { unit }) = self.nodes[node].requests.get(&token) else {
            return;
        };
        trace!(
            self,
            "n{node}: a route fence did not return; sending what it held"
        );
        // The node's senders give their order up for this unit: what they sent before may
        // still come, from the path cut off, after what they send now.
        for s in (0..self.senders.len()).filter(|s| s % self.shape.nodes == node) {
            let id = sender_id(s, self.nodes[node].process);
            let next = self.senders[s].next;
            self.lives[unit].floors.insert(id, next);
        }
        self.terminal(node, token, Terminal::Timeout);
    }

    /// A node's own send: held for a unit that arrived here and waits for its fence, else onto
    /// its lane here, else routed.
    pub(crate) fn send_local(&mut self, node: usize, parcel: Parcel) {
        let id = self.unit_id(parcel.to);
        if let Some(held) = self.nodes[node].routes.hold_if_arriving(&id) {
            held.push(parcel);
            return;
        }
        self.send_parcel(node, parcel);
    }

    /// Onto the unit's lane here, or routed towards its owner.
    pub(crate) fn send_parcel(&mut self, node: usize, parcel: Parcel) {
        match self.lane_of(node, parcel.to) {
            Some(lane) => self.enqueue(node, lane, parcel),
            None => self.route(node, parcel),
        }
    }

    /// Sends a message for a unit this node does not host towards its owner.
    pub(crate) fn route(&mut self, node: usize, parcel: Parcel) {
        let unit = parcel.to;
        let id = self.unit_id(unit);
        let me = node_id(node);
        match self.nodes[node].routes.route(&id, parcel, &me) {
            Routed::Send(owner, parcel) => self.deliver_to(node, node_index(&owner), parcel),
            Routed::Waits => {}
            Routed::LookUp => self.call(
                node,
                Op::Get(vec![unit]),
                Purpose::Lookup {
                    unit,
                    tries: 1,
                    confirmed: false,
                },
            ),
        }
    }

    /// Sends a message through the node that the sender knows runs its unit (a gateway's input to
    /// the node it last heard runs the Actor), never by a route that could change under a stream.
    pub(crate) fn deliver_via(&mut self, node: usize, via: usize, parcel: Parcel) {
        if via == node {
            self.send_parcel(node, parcel);
        } else {
            self.hand(node, via, parcel);
        }
    }

    /// Hands a message to the link to `owner`.
    fn deliver_to(&mut self, node: usize, owner: usize, parcel: Parcel) {
        if owner == node {
            self.send_parcel(node, parcel);
        } else {
            self.hand(node, owner, parcel);
        }
    }

    /// Hands a message to the link to `peer`, noting which peer's process a request of this
    /// node's went to; one the link refuses is tried again.
    fn hand(&mut self, node: usize, peer: usize, parcel: Parcel) {
        let request = match parcel.work {
            Work::Ask { id, .. } | Work::Fence { id } | Work::Bind { id, .. } => {
                (parcel.origin == node).then_some(id)
            }
            _ => None,
        };
        match self.send(node, peer, Msg::Deliver(parcel)) {
            Ok(()) => {
                let process = self.nodes[peer].process;
                let n = &mut self.nodes[node];
                if let Some(id) = request.filter(|id| n.requests.contains_key(id)) {
                    n.handed.insert(id, (peer, process));
                }
            }
            Err(Backlogged(Msg::Deliver(parcel))) => {
                // Looked up again, it may overtake what still waits on that link, as in the
                // runtime: what was sent to the unit so far keeps no order with what follows.
                let sent = self.sent_so_far();
                let life = &mut self.lives[parcel.to];
                life.floors.extend(sent);
                life.disordered = true;
                self.retry_deliver(node, parcel);
            }
            Err(_) => {}
        }
    }

    /// A message the link refused, one hop further: kept for the end of a move of its unit from
    /// here, or looked up again; past the hop bound a tell is dropped and counted, a request ends
    /// with an error.
    fn retry_deliver(&mut self, node: usize, mut parcel: Parcel) {
        parcel.hops += 1;
        let id = self.unit_id(parcel.to);
        let Some(parcel) = self.nodes[node].routes.hold_for_move(&id, parcel) else {
            return;
        };
        if parcel.hops > MAX_HOPS {
            self.drop_counted(node, parcel, "its node could not be reached");
            return;
        }
        self.nodes[node].routes.forget(&id);
        self.route(node, parcel);
    }

    /// The process of `peer` that `node` handed requests to is gone (it left the cluster, or
    /// another process of its id started): those requests end with an error.
    pub(crate) fn requests_lost_with(&mut self, node: usize, peer: usize) {
        let live = self.nodes[peer].up.then_some(self.nodes[peer].process);
        let lost: Vec<u64> = self.nodes[node]
            .handed
            .iter()
            .filter(|(_, (p, process))| *p == peer && Some(*process) != live)
            .map(|(&id, _)| id)
            .collect();
        for id in lost {
            trace!(self, "n{node}: request {id} ends: its peer n{peer} is gone");
            self.terminal(node, id, Terminal::Error);
        }
    }

    /// A route lookup's answer: what waited for it is sent, delivered here, or given up.
    pub(crate) fn looked_up(
        &mut self,
        node: usize,
        unit: usize,
        (tries, confirmed): (u8, bool),
        reply: Reply,
    ) {
        let id = self.unit_id(unit);
        let found = match reply {
            Reply::Got(mut found) => found.pop().flatten(),
            _ if tries < LOOKUP_TRIES => {
                let op = if confirmed {
                    Op::ReadBack(vec![unit])
                } else {
                    Op::Get(vec![unit])
                };
                let purpose = Purpose::Lookup {
                    unit,
                    tries: tries + 1,
                    confirmed,
                };
                self.call(node, op, purpose);
                return;
            }
            failed => {
                let waiting = self.nodes[node].routes.resolved(&id);
                for parcel in waiting {
                    let why = self.line(|| format!("its lookup failed ({failed:?})"));
                    self.drop_counted(node, parcel, &why);
                }
                return;
            }
        };
        let hosted = self.lane_of(node, unit).is_some();
        if let Some((_, record)) = &found
            && !confirmed
            && lookup_needs_confirming(&record.owner, &node_id(node), hosted)
        {
            let purpose = Purpose::Lookup {
                unit,
                tries: 1,
                confirmed: true,
            };
            self.call(node, Op::ReadBack(vec![unit]), purpose);
            return;
        }
        let waiting = self.nodes[node].routes.resolved(&id);
        match found {
            Some((_, record)) if record.owner == node_id(node) => {
                for parcel in waiting {
                    match self.lane_of(node, unit) {
                        Some(lane) => self.enqueue(node, lane, parcel),
                        None => {
                            self.give_up(node, parcel, "unknown id: its record names this node")
                        }
                    }
                }
            }
            Some((_, record)) if self.nodes[node].gone.contains(&node_index(&record.owner)) => {
                for parcel in waiting {
                    self.give_up(node, parcel, "its owner left the cluster, not rebuilt yet");
                }
            }
            Some((_, record)) => {
                let owner = record.owner.clone();
                let send = self.nodes[node].routes.settle(id, owner.clone(), waiting);
                for parcel in send {
                    self.deliver_to(node, node_index(&owner), parcel);
                }
            }
            None => {
                for parcel in waiting {
                    self.give_up(node, parcel, "unknown id");
                }
            }
        }
    }

    /// A message given up on this node for a reason it reports (a lookup that kept failing, a
    /// node that could not be reached): requests end with an error; tells and inputs are dropped
    /// and counted here, so they are not owed.
    fn drop_counted(&mut self, node: usize, parcel: Parcel, why: &str) {
        trace!(self, "n{node}: gives up {parcel:?}: {why}");
        match parcel.work {
            // A unit's follow-up to itself has no sender waiting on it.
            Work::Tell { sender, .. } if sender == FOLLOW_UP => {}
            Work::Tell { sender, seq } => {
                self.senders[sender_of(sender)]
                    .dropped
                    .insert((parcel.to, seq));
            }
            Work::Input { client, seq } => self.input_dropped(client, parcel.to, seq),
            Work::Ask { id, .. } | Work::Fence { id } | Work::Bind { id, .. } => {
                self.post(node, parcel.origin, Msg::Reply { id, ok: false });
            }
            Work::Unbind { .. } => {}
        }
    }

    /// A message arrived from a peer.
    pub(crate) fn on_deliver(&mut self, node: usize, from: usize, mut parcel: Parcel) {
        if let Some(lane) = self.lane_of(node, parcel.to) {
            self.enqueue(node, lane, parcel);
            return;
        }
        parcel.hops += 1;
        if parcel.hops > MAX_HOPS {
            // Hops a backlog's refusals used up are the runtime's counted drop; any other
            // message that runs out of hops was lost.
            if self.lives[parcel.to].disordered {
                self.drop_counted(node, parcel, "too many hops");
            } else {
                self.give_up(node, parcel, "too many hops");
            }
            return;
        }
        let unit = parcel.to;
        let origin = parcel.origin;
        let id = self.unit_id(unit);
        // Sent back by the target of a move from here that has not ended: it waits for that end.
        let Some(parcel) = self.nodes[node]
            .routes
            .arrived_elsewhere(&id, parcel, &node_id(from))
        else {
            return;
        };
        // It came from there, so the unit does not run there: sent back, it would bounce between
        // the two nodes (as it does on routes a stopped unit left behind).
        if let Some(Route::Known(owner) | Route::Moved(owner)) = self.nodes[node].routes.get(&id)
            && *owner == node_id(from)
        {
            self.broken.get_or_insert(format!(
                "n{node} sends {:?} for u{unit} back to n{from}, where it came from",
                parcel.work
            ));
        }
        self.route(node, parcel);
        if origin != node {
            self.call(node, Op::Get(vec![unit]), Purpose::Hint { unit, origin });
        }
    }

    /// The record read for a route hint: the origin learns where the unit is.
    pub(crate) fn hint_read(&mut self, node: usize, unit: usize, origin: usize, reply: Reply) {
        if let Reply::Got(found) = reply
            && let Some(Some((_, record))) = found.first()
        {
            let owner = node_index(&record.owner);
            if owner != origin {
                self.post(node, origin, Msg::Hint { unit, owner });
            }
        }
    }

    /// A peer says who runs a unit: switch to it, after a fence along the old path.
    pub(crate) fn on_hint(&mut self, node: usize, unit: usize, owner: usize) {
        if self.nodes[node].gone.contains(&owner) {
            return;
        }
        let id = self.unit_id(unit);
        let me = node_id(node);
        if let Some(old) = self.nodes[node].routes.hint(id, node_id(owner), &me) {
            self.send_fence(node, unit, node_index(&old));
        }
    }

    /// Sends a fence for `unit` along `via`, after everything this node sent there.
    pub(crate) fn send_fence(&mut self, node: usize, unit: usize, via: usize) {
        let id = self.open_request(node, Request::Fence { unit });
        trace!(self, "n{node}: fence for u{unit} via n{via}");
        let fence = Parcel {
            to: unit,
            work: Work::Fence { id },
            origin: node,
            hops: 0,
        };
        self.deliver_to(node, via, fence);
    }

    /// A switch or an arrival ends: what it held leaves, in order.
    fn end_switch(&mut self, node: usize, unit: usize) {
        let id = self.unit_id(unit);
        let hosted = self.lane_of(node, unit);
        match self.nodes[node].routes.end_switch(id, hosted.is_some()) {
            Switched::Send(owner, held) => {
                for parcel in held {
                    self.deliver_to(node, node_index(&owner), parcel);
                }
            }
            Switched::Enqueue(held) => {
                for parcel in held {
                    if let Some(lane) = hosted {
                        self.enqueue(node, lane, parcel);
                    }
                }
            }
            Switched::LookUp => self.call(
                node,
                Op::Get(vec![unit]),
                Purpose::Lookup {
                    unit,
                    tries: 1,
                    confirmed: false,
                },
            ),
            Switched::Nothing => {}
        }
    }

    /// A moved unit is registered on `node` from `source`: settles what this node sent it before.
    pub(crate) fn arrived(&mut self, node: usize, unit: usize, source: usize, lane: u64) {
        let id: UnitId = self.unit_id(unit);
        match self.nodes[node].routes.arrive(&id, &node_id(source)) {
            Arrival::Clear => {}
            Arrival::Waiting(waiting) => {
                for parcel in waiting {
                    self.enqueue(node, lane, parcel);
                }
            }
            Arrival::Fence(via) => self.send_fence(node, unit, node_index(&via)),
        }
    }

    /// A frame `from` kept for `to` can never be acknowledged: the peer's process is gone, or
    /// membership removed it. A request in it ends with `PeerGone`; a tell is reported lost.
    pub(crate) fn frame_lost(&mut self, from: usize, to: usize, msg: Msg) {
        if let Msg::Deliver(parcel) = msg {
            trace!(self, "n{from}: frame to n{to} lost: {parcel:?}");
            match parcel.work {
                Work::Ask { id, .. } | Work::Fence { id } | Work::Bind { id, .. } => {
                    self.post(from, parcel.origin, Msg::Reply { id, ok: false })
                }
                Work::Tell { .. } | Work::Input { .. } => {
                    if !self.lossy {
                        self.lost += 1;
                    }
                }
                Work::Unbind { .. } => {}
            }
        }
    }
}
