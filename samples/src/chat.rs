//! Chat room: a SpotWide User Spot that keeps its last 100 lines and broadcasts each new one to its members.
//!
//! It moves with the serde adapter (`PreserveState`) at any turn boundary: one message is one whole
//! state change, so the state between turns is always complete.
//!
//! A client binds its chatter Actor and sends [`ChatterMsg::Say`]; the chatter passes the text to its
//! room, and pushes every [`Line`] the room tells it to the client, numbered by the room.

use std::collections::VecDeque;

use ferry::{
    ActorId, Behavior, Ctx, Registration, Registry, RelocationPolicy, StandbyPolicy, UnitId,
};
use serde::{Deserialize, Serialize};

/// How many lines a room keeps.
pub const HISTORY: usize = 100;

/// The factory name of chat rooms.
pub const ROOM: &str = "chat-room";
/// The factory name of chatters.
pub const CHATTER: &str = "chatter";

/// One line said in a room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// Position of the line in the room's whole history.
    pub seq: u64,
    /// Who said it.
    pub from: ActorId,
    /// What was said.
    pub text: String,
    /// Which life of the room said it: the same across moves and after a crash that promoted
    /// the room's standby, new when a crash rebuilt the room from nothing. A client that sees it
    /// change knows the room's history started over.
    #[serde(default)]
    pub life: u64,
}

/// What a room takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RoomMsg {
    /// Say something to everyone in the room.
    Say {
        /// The member who said it.
        from: ActorId,
        /// What they said, as typed.
        text: String,
    },
    /// Ask for the kept history.
    History,
}

/// What a room answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RoomReply {
    /// The line was taken, with its sequence number.
    Said(u64),
    /// The kept history, oldest first.
    History(Vec<Line>),
}

/// A chat room's state: everything in it moves with the room.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChatRoom {
    next_seq: u64,
    history: VecDeque<Line>,
    /// When this life of the room began (see [`Line::life`]).
    #[serde(default)]
    life: u64,
}

impl ChatRoom {
    /// An empty room, in a new life.
    pub fn new() -> ChatRoom {
        ChatRoom {
            next_seq: 0,
            history: VecDeque::new(),
            life: crate::new_life(),
        }
    }
}

impl Default for ChatRoom {
    fn default() -> Self {
        Self::new()
    }
}

impl Behavior for ChatRoom {
    type Msg = RoomMsg;
    type Reply = RoomReply;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: RoomMsg) -> RoomReply {
        match msg {
            RoomMsg::Say { from, text } => {
                let line = Line {
                    seq: self.next_seq,
                    from,
                    text,
                    life: self.life,
                };
                self.next_seq += 1;
                for member in ctx.members() {
                    if let Err(error) = ctx.tell(member, ChatterMsg::Heard(line.clone())) {
                        tracing::debug!(%member, %error, "line not delivered");
                    }
                }
                if self.history.len() == HISTORY {
                    self.history.pop_front();
                }
                self.history.push_back(line);
                RoomReply::Said(self.next_seq - 1)
            }
            RoomMsg::History => RoomReply::History(self.history.iter().cloned().collect()),
        }
    }
}

/// What a chatter takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ChatterMsg {
    /// A line said in the chatter's room: pushed to its client.
    Heard(Line),
    /// Ask how many lines it heard.
    Count,
    /// Say something in the chatter's room (what its client sends).
    Say(String),
}

/// A member of a chat room: it passes its client's lines to the room, pushes what it hears to the
/// client, and counts what it heard and whether it came in order.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Chatter {
    heard: u64,
    last_seq: Option<u64>,
    out_of_order: u64,
}

/// What a chatter reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heard {
    /// Lines heard.
    pub lines: u64,
    /// Lines that came with a sequence number not above the one before.
    pub out_of_order: u64,
}

impl Behavior for Chatter {
    type Msg = ChatterMsg;
    type Reply = Heard;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: ChatterMsg) -> Heard {
        match msg {
            ChatterMsg::Heard(line) => {
                self.heard += 1;
                if self.last_seq.is_some_and(|last| line.seq <= last) {
                    self.out_of_order += 1;
                }
                self.last_seq = Some(line.seq);
                if ctx.is_bound()
                    && let Err(error) = ctx.push(line)
                {
                    tracing::debug!(%error, "line not pushed");
                }
            }
            ChatterMsg::Say(text) => {
                let (Some(room), UnitId::Actor(me)) = (ctx.spot(), ctx.id()) else {
                    tracing::debug!(chatter = %ctx.id(), "line dropped: not in a room");
                    return self.counts();
                };
                let say = RoomMsg::Say {
                    from: me.clone(),
                    text,
                };
                if let Err(error) = ctx.tell(room, say) {
                    tracing::debug!(%room, %error, "line not delivered");
                }
            }
            ChatterMsg::Count => {}
        }
        self.counts()
    }
}

impl Chatter {
    fn counts(&self) -> Heard {
        Heard {
            lines: self.heard,
            out_of_order: self.out_of_order,
        }
    }
}

/// The room factory: SpotWide, any turn boundary, state kept by the serde adapter.
pub fn room() -> Registration<ChatRoom> {
    Registration::spot(ROOM, |_| ChatRoom::default()).policy(RelocationPolicy::serde())
}

/// The chatter factory, state kept by the serde adapter.
pub fn chatter() -> Registration<Chatter> {
    Registration::actor(CHATTER, |_| Chatter::default()).policy(RelocationPolicy::serde())
}

/// Registers the room and the chatter factories, with no standby.
pub fn register(registry: &mut Registry) {
    register_standby(registry, StandbyPolicy::None);
}

/// Registers the room and the chatter factories, rooms keeping a standby of `standby` (with
/// their members), so that a crash of a room's node keeps its lines.
pub fn register_standby(registry: &mut Registry, standby: StandbyPolicy) {
    registry
        .register(room().standby(standby))
        .register(chatter());
}
