//! The sample games as bots play them: the ids of their rooms and players, the factories to
//! register, and for each game what a bot sends and checks.

use std::time::Duration;

use ferry::client::ClientConfig;
use ferry::{ActorId, InvalidId, Registry, SpotId};
use ferry_samples::{chat, fps};
use tokio::sync::watch;

use super::checks::{Faults, Sequence};
use super::player::{self, Game, Pace, Tally};

/// A sample game bots can play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GameKind {
    /// The chat room: each line said is pushed to every member, numbered by the room.
    Chat,
    /// The FPS round: inputs forwarded to the room, a snapshot pushed every 30 Hz tick.
    Fps,
}

impl GameKind {
    /// Every game, in the order the demo opens them.
    pub const ALL: [GameKind; 2] = [GameKind::Chat, GameKind::Fps];

    /// The game's name in ids and reports.
    pub fn name(self) -> &'static str {
        match self {
            GameKind::Chat => "chat",
            GameKind::Fps => "fps",
        }
    }

    /// The factory of its rooms.
    pub fn room_factory(self) -> &'static str {
        match self {
            GameKind::Chat => chat::ROOM,
            GameKind::Fps => fps::ROOM,
        }
    }

    /// The factory of its player Actors.
    pub fn player_factory(self) -> &'static str {
        match self {
            GameKind::Chat => chat::CHATTER,
            GameKind::Fps => fps::PLAYER,
        }
    }

    /// Room number `r`: `fps-0`, `fps-1`, ...
    pub fn room(self, r: usize) -> Result<SpotId, InvalidId> {
        SpotId::new(format!("{}-{r}", self.name()))
    }

    /// Player number `p` of room number `r`: `fps-0-p0`, `fps-0-p1`, ...
    pub fn player(self, r: usize, p: usize) -> Result<ActorId, InvalidId> {
        ActorId::new(format!("{}-{r}-p{p}", self.name()))
    }

    /// How often a bot of this game sends an input, and how long it waits for the last ones.
    fn pace(self) -> Pace {
        let every = match self {
            GameKind::Chat => Duration::from_millis(100),
            GameKind::Fps => Duration::from_millis(50),
        };
        Pace {
            every,
            settle: Duration::from_secs(5),
        }
    }

    /// Plays as Actor `me` until `stop` turns true; see [`player::play`].
    pub async fn play(
        self,
        config: ClientConfig,
        me: ActorId,
        stop: watch::Receiver<bool>,
    ) -> Tally {
        let pace = self.pace();
        match self {
            GameKind::Chat => player::play(config, me.clone(), ChatBot::new(me), pace, stop).await,
            GameKind::Fps => player::play(config, me, FpsBot::default(), pace, stop).await,
        }
    }
}

/// The factories of every sample game, as the demo's nodes register them.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    chat::register(&mut registry);
    fps::register(&mut registry, fps::Rules::default());
    registry
}

/// An FPS player: aims somewhere new each input, and checks the snapshots with the sample's own
/// [`fps::Watch`].
#[derive(Default)]
struct FpsBot {
    watch: fps::Watch,
}

impl Game for FpsBot {
    type Input = fps::PlayerMsg;
    type Push = fps::Snapshot;

    fn input(&mut self, seq: u64) -> fps::PlayerMsg {
        let aim = (seq.wrapping_mul(37) % 360) as u16;
        fps::PlayerMsg::Input(fps::Input { seq, aim })
    }

    fn read(&mut self, snapshot: fps::Snapshot) -> Option<u64> {
        let tick = snapshot.tick;
        self.watch.see(snapshot);
        Some(tick)
    }

    fn caught_up(&self, sent: u64) -> bool {
        self.watch.caught_up(sent)
    }

    fn faults(&self, sent: u64) -> Faults {
        let check = self.watch.inputs(sent);
        Faults {
            lost: check.lost,
            duplicated: check.duplicated,
            // A snapshot that went back means the room's view of this player went back.
            reordered: check.reordered + self.watch.went_back,
        }
    }
}

/// A chatter: says its input numbers as lines, and checks that its own lines come back from the
/// room once each and in order, among everyone else's.
struct ChatBot {
    me: ActorId,
    mine: Sequence,
}

impl ChatBot {
    fn new(me: ActorId) -> Self {
        ChatBot {
            me,
            mine: Sequence::starting_at(0),
        }
    }
}

impl Game for ChatBot {
    type Input = chat::ChatterMsg;
    type Push = chat::Line;

    fn input(&mut self, seq: u64) -> chat::ChatterMsg {
        chat::ChatterMsg::Say(seq.to_string())
    }

    fn read(&mut self, line: chat::Line) -> Option<u64> {
        if line.from == self.me
            && let Ok(seq) = line.text.parse()
        {
            self.mine.observe(seq);
        }
        None
    }

    fn caught_up(&self, sent: u64) -> bool {
        self.mine.next() >= sent
    }

    fn faults(&self, sent: u64) -> Faults {
        self.mine.faults_upto(sent)
    }
}
