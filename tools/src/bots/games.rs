//! The sample games as bots play them: the ids of their rooms and players, the factories to
//! register, and for each game what a bot sends and checks.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use ferry::client::ClientConfig;
use ferry::{ActorId, InvalidId, Registry, SpotId, StandbyPolicy};
use ferry_samples::bingo::{self, Card, Marks};
use ferry_samples::{chat, fps};
use serde::Serialize;
use tokio::sync::watch;

use super::checks::{Faults, Incarnations, Sequence};
use super::player::{self, Game, Pace, Tally};

/// A sample game bots can play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GameKind {
    /// The chat room: each line said is pushed to every member, numbered by the room.
    Chat,
    /// The FPS round: inputs forwarded to the room, a snapshot pushed every 30 Hz tick.
    Fps,
    /// Bingo: the room draws a number every 250 ms and each player pushes it with its mark; the
    /// bot asks for its player's whole state now and then and checks it against the draws.
    Bingo,
}

impl GameKind {
    /// Every game, in the order the demo opens them.
    pub const ALL: [GameKind; 3] = [GameKind::Chat, GameKind::Fps, GameKind::Bingo];

    /// The game's name in ids and reports.
    pub fn name(self) -> &'static str {
        match self {
            GameKind::Chat => "chat",
            GameKind::Fps => "fps",
            GameKind::Bingo => "bingo",
        }
    }

    /// The factory of its rooms.
    pub fn room_factory(self) -> &'static str {
        match self {
            GameKind::Chat => chat::ROOM,
            GameKind::Fps => fps::ROOM,
            GameKind::Bingo => bingo::ROOM,
        }
    }

    /// The factory of its player Actors.
    pub fn player_factory(self) -> &'static str {
        match self {
            GameKind::Chat => chat::CHATTER,
            GameKind::Fps => fps::PLAYER,
            GameKind::Bingo => bingo::PLAYER,
        }
    }

    /// Room number `r`: `fps-0`, `fps-1`, ...
    pub fn room(self, r: usize) -> Result<SpotId, InvalidId> {
        SpotId::new(format!("{}-{r}", self.name()))
    }

    /// Player number `p` of room number `r`: `fps-0-p0`, `fps-0-p1`, ... (the room's id, then
    /// `-p` and the number, so [`room_of`] reads the room back).
    pub fn player(self, r: usize, p: usize) -> Result<ActorId, InvalidId> {
        ActorId::new(format!("{}-p{p}", self.room(r)?))
    }

    /// How often a bot of this game sends an input, and how long it waits for the last ones.
    fn pace(self) -> Pace {
        let every = match self {
            GameKind::Chat => Duration::from_millis(100),
            GameKind::Fps => Duration::from_millis(50),
            GameKind::Bingo => Duration::from_millis(200),
        };
        Pace {
            every,
            settle: Duration::from_secs(5),
        }
    }

    /// Plays as Actor `me`, whose past is `past`, until `stop` turns true; see [`player::play`].
    pub async fn play(
        self,
        config: ClientConfig,
        me: ActorId,
        past: Past,
        stop: watch::Receiver<bool>,
    ) -> Tally {
        let pace = self.pace();
        let named = room_of(&me).map_or_else(|| me.to_string(), |r| r.to_string());
        match self {
            GameKind::Chat => {
                let bot = ChatBot::new(me.clone());
                player::play(config, me, named, bot, pace, stop).await
            }
            GameKind::Fps => player::play(config, me, named, FpsBot::default(), pace, stop).await,
            GameKind::Bingo => match room_of(&me) {
                Some(room) => {
                    let bot = BingoBot::new(me.clone(), room, past);
                    player::play(config, me, named, bot, pace, stop).await
                }
                None => Tally {
                    error: Some(format!(
                        "{me} does not name its room: bingo players are named <room>-p<number>"
                    )),
                    ..Tally::default()
                },
            },
        }
    }
}

/// What a bot may assume about its player Actor's past: its counts of the bot's inputs start
/// from nothing only if it was made for this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Past {
    /// Made for this run: whatever it counts is this bot's.
    New,
    /// It may have played before, with another client: its counts start where that one left them.
    Unknown,
}

/// The room of a player named as [`GameKind::player`] names them, if it is.
pub fn room_of(player: &ActorId) -> Option<SpotId> {
    let (room, number) = player.as_str().rsplit_once("-p")?;
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    SpotId::new(room).ok()
}

/// A room to open and the player Actors to create in it.
#[derive(Debug, Clone)]
pub struct RoomPlan {
    /// The game the room plays, which picks its factory and its bots.
    pub game: GameKind,
    /// Its number among the rooms of its game.
    pub number: usize,
    /// The room's id, made from its game and number.
    pub room: SpotId,
    /// The player Actors to create in the room, one for each bot.
    pub players: Vec<ActorId>,
}

/// The rooms numbered `rooms` of each game in `games`, each with `players` players: what the demo
/// opens, and what `ferry bots` plays.
pub fn lineup(
    games: &[GameKind],
    rooms: Range<usize>,
    players: usize,
) -> Result<Vec<RoomPlan>, InvalidId> {
    let mut plans = Vec::new();
    for &game in games {
        for number in rooms.clone() {
            plans.push(RoomPlan {
                game,
                number,
                room: game.room(number)?,
                players: (0..players)
                    .map(|p| game.player(number, p))
                    .collect::<Result<_, _>>()?,
            });
        }
    }
    Ok(plans)
}

/// The factories every sample game needs: all of `ferry_samples`, as the demo's nodes and every
/// `ferry node` register them, their rooms keeping the standby `standby` names (`ferry node
/// --standby`, confirmed unless asked otherwise).
pub fn registry(standby: StandbyChoice) -> Registry {
    ferry_samples::registry_with_standby(standby.policy())
}

/// A standby policy as `--standby` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StandbyChoice {
    /// No standby: a crash rebuilds the rooms from nothing.
    None,
    /// A checkpoint at most every 100 ms.
    Periodic,
    /// A checkpoint at every turn that changed the room; effects wait for it.
    Confirmed,
}

impl StandbyChoice {
    /// The policy it names.
    pub fn policy(self) -> StandbyPolicy {
        match self {
            StandbyChoice::None => StandbyPolicy::None,
            StandbyChoice::Periodic => StandbyPolicy::periodic(),
            StandbyChoice::Confirmed => StandbyPolicy::Confirmed,
        }
    }
}

/// An FPS player: aims somewhere new each input, and checks the snapshots with the sample's own
/// [`fps::Watch`]. It counts from the state it finds: a room an earlier client played already
/// has inputs applied, and only what this bot sent is checked. A snapshot of another life of the
/// room is the room rebuilt after a crash (its state restarted); one of the same life whose
/// state went back, after the bot had to bind its player again, is the room promoted from its
/// standby's checkpoint. Either way the bot notes when, counts the inputs that were lost or
/// rolled back with the old incarnation apart, and checks on from the new one.
#[derive(Default)]
struct FpsBot {
    watch: fps::Watch,
    /// The room's log of this player's inputs when the bot first saw it (an earlier client's).
    base: Option<fps::InputLog>,
    /// Inputs out of order the room counts through no fault: one when this bot's first input
    /// follows an earlier client's, one for each first input after a rebuild.
    expected_out_of_order: u64,
    /// Inputs this bot handed to its client so far.
    sent: u64,
    /// Times the client reported inputs it could not deliver, in this incarnation: the first
    /// input the room applies after those that never arrived follows a gap, which the room
    /// counts out of order.
    gaps: u64,
    /// The room's incarnations before the current one.
    incarnations: Incarnations,
    /// Whether the bot bound its player again since the last snapshot: a room whose node died
    /// unbinds its players, so only then may a state that went back be a checkpoint.
    rebound: bool,
}

impl FpsBot {
    /// What the current incarnation applied of this bot's inputs.
    fn applied_now(&self) -> u64 {
        let log = self
            .watch
            .last
            .as_ref()
            .map(|s| s.inputs)
            .unwrap_or_default();
        let base = self.base.unwrap_or_default().applied;
        log.applied.saturating_sub(base)
    }

    /// Whether `snapshot`, of the same life as `last`, shows the room's state back at an earlier
    /// point: fewer of this player's inputs applied, an earlier round or an earlier tick.
    fn went_back(last: &fps::Snapshot, snapshot: &fps::Snapshot) -> bool {
        snapshot.inputs.applied < last.inputs.applied
            || snapshot.round < last.round
            || snapshot.tick < last.tick
    }

    /// The current incarnation's snapshot checks, by the latest snapshot.
    fn checked(&self, sent: u64) -> Faults {
        let check = self.watch.inputs(0);
        // What the log counted out of order before this incarnation began is not this one's.
        let before = self.base.unwrap_or_default().out_of_order;
        let applied = self.incarnations.before() + self.applied_now();
        let lost = sent.saturating_sub(applied);
        // A gap the client reported is out of turn only if some input in it was lost.
        let gaps = self.gaps.min(lost);
        Faults {
            lost,
            duplicated: applied.saturating_sub(sent),
            // A snapshot that went back means the room's view of this player went back.
            reordered: check
                .reordered
                .saturating_sub(before + self.expected_out_of_order + gaps)
                + self.watch.went_back,
        }
    }
}

impl Game for FpsBot {
    type Input = fps::PlayerMsg;
    type Push = fps::Snapshot;

    fn input(&mut self, seq: u64) -> fps::PlayerMsg {
        self.sent = seq + 1;
        let aim = (seq.wrapping_mul(37) % 360) as u16;
        fps::PlayerMsg::Input(fps::Input { seq, aim })
    }

    fn read(&mut self, snapshot: fps::Snapshot) -> Option<u64> {
        let tick = snapshot.tick;
        match &self.watch.last {
            None if self.base.is_none() => {
                // The log may hold an earlier client's inputs, and already some of ours: if the
                // last one applied is a number this bot sent, the inputs up to it are ours.
                let mut base = snapshot.inputs;
                if let Some(last) = base.last_seq
                    && last < self.sent
                {
                    base.applied = base.applied.saturating_sub(last + 1);
                    base.last_seq = None;
                }
                // The first of ours follows an earlier client's out of turn.
                if base.applied > 0 {
                    self.expected_out_of_order = 1;
                }
                self.base = Some(base);
            }
            // A new life of the room: rebuilt fresh after a crash. Its tick and log may have
            // passed the old ones' by the time a client that was away sees it.
            Some(last) if snapshot.life != last.life => {
                // What the old incarnation lost of the inputs sent is counted with it; a gap the
                // client reported still explains an input the old room ran out of turn.
                let faults = Faults {
                    lost: 0,
                    duplicated: 0,
                    ..self.checked(self.sent)
                };
                let node = Some(snapshot.node.to_string());
                let applied = self.applied_now();
                self.incarnations.rebuilt(node, self.sent, applied, faults);
                self.watch = fps::Watch::default();
                // The rebuilt player's log starts empty: every input in it is this bot's.
                self.base = Some(fps::InputLog::default());
                self.expected_out_of_order = u64::from(self.sent > 0);
                self.gaps = 0;
            }
            // The same life, back at an earlier point after its node died: promoted from the
            // checkpoint its standby held, which keeps the inputs its log shows.
            Some(last) if self.rebound && Self::went_back(last, &snapshot) => {
                let faults = Faults {
                    lost: 0,
                    duplicated: 0,
                    ..self.checked(self.sent)
                };
                let node = Some(snapshot.node.to_string());
                let base = self.base.unwrap_or_default();
                let kept = snapshot.inputs.applied.saturating_sub(base.applied);
                self.incarnations.restored(node, self.sent, kept, faults);
                self.watch = fps::Watch::default();
                // The restored log goes on from what the checkpoint held.
                self.base = Some(snapshot.inputs);
                self.expected_out_of_order = u64::from(self.sent > 0);
                self.gaps = 0;
            }
            _ => {}
        }
        self.rebound = false;
        // The first input a rebuilt or restored room applied, by its log: the ones before it
        // died with the old room, those after it (held by the gateway meanwhile) ran in the new
        // one.
        let base = self.base.unwrap_or_default().applied;
        if let Some(last) = snapshot.inputs.last_seq
            && snapshot.inputs.applied > base
        {
            let first = (last + 1).saturating_sub(snapshot.inputs.applied - base);
            self.incarnations.first_input(first);
        }
        self.watch.see(snapshot);
        Some(tick)
    }

    fn caught_up(&self, sent: u64) -> bool {
        self.incarnations.before() + self.applied_now() >= sent
    }

    fn faults(&self, sent: u64) -> Faults {
        self.incarnations.faults(self.checked(sent))
    }

    fn incarnations(&self) -> &Incarnations {
        &self.incarnations
    }

    fn undelivered(&mut self, inputs: u64) {
        if inputs > 0 {
            self.gaps += 1;
        }
    }

    fn rebound(&mut self) {
        self.rebound = true;
    }
}

/// A chatter: says its input numbers as lines, and checks that its own lines come back from the
/// room once each and in order, among everyone else's. It counts from the state it finds: its
/// lines are numbered from 0 each run, and other clients' lines are not checked. The room numbers
/// every line it says; a line numbered below the last one heard, other than one of the bot's own
/// already due, is the room back after a crash: promoted from its standby's checkpoint when the
/// line is of the same life and the bot had to bind its chatter again (the numbering went back to
/// the checkpoint's), rebuilt otherwise (its numbering restarted). The bot counts its lines the
/// old room never said, or said and forgot, apart, and checks on from the new one.
struct ChatBot {
    me: ActorId,
    /// This bot's lines in the room's current incarnation.
    mine: Sequence,
    /// The room's number of the last line heard.
    last_line: Option<u64>,
    /// Inputs this bot handed to its client so far.
    sent: u64,
    /// Whether the chatter was bound again and none of its lines came since: the first that
    /// does is the first said after the rebind.
    rebound: bool,
    /// Lines said before a rebind that never came back: their pushes went to the session that
    /// ended (or the client could not deliver them).
    unseen: u64,
    incarnations: Incarnations,
    /// The life of the room the last line came from.
    life: Option<u64>,
    /// Whether the chatter was bound again since the last line heard: a room whose node died
    /// unbinds its members, so only then may numbering that went back be a checkpoint.
    crashed: bool,
    /// The room's number of each line of this bot's heard in the current incarnation, with its
    /// input number: what a checkpoint below a line's number cannot hold.
    said: BTreeMap<u64, u64>,
}

impl ChatBot {
    fn new(me: ActorId) -> Self {
        ChatBot {
            me,
            mine: Sequence::starting_at(0),
            last_line: None,
            sent: 0,
            rebound: false,
            unseen: 0,
            incarnations: Incarnations::default(),
            life: None,
            crashed: false,
            said: BTreeMap::new(),
        }
    }

    /// How many of the inputs the current incarnation answers for a room whose numbering went
    /// back to `seq` still holds: those up to its last line of this bot's numbered below `seq`.
    fn kept_below(&self, seq: u64) -> u64 {
        self.said.range(..seq).next_back().map_or(0, |(_, input)| {
            (input + 1).saturating_sub(self.incarnations.before())
        })
    }
}

impl Game for ChatBot {
    type Input = chat::ChatterMsg;
    type Push = chat::Line;

    fn input(&mut self, seq: u64) -> chat::ChatterMsg {
        self.sent = seq + 1;
        chat::ChatterMsg::Say(seq.to_string())
    }

    fn read(&mut self, line: chat::Line) -> Option<u64> {
        let mine = if line.from == self.me {
            line.text.parse::<u64>().ok()
        } else {
            None
        };
        let due = mine.is_some_and(|seq| seq < self.mine.next());
        let new_life = self.life.is_some_and(|life| life != line.life);
        let crashed = std::mem::take(&mut self.crashed);
        if new_life || (self.last_line.is_some_and(|last| line.seq < last) && !due) {
            // The old incarnation's check covers the lines up to the last it said; what it
            // skipped is the server's loss, what it never came to died with it.
            let next = self.mine.next();
            let faults = self.mine.faults_upto(next);
            if crashed && !new_life {
                let kept = self.kept_below(line.seq);
                self.incarnations.restored(None, self.sent, kept, faults);
            } else {
                let checked = next.saturating_sub(self.incarnations.before());
                self.incarnations.rebuilt(None, self.sent, checked, faults);
            }
            self.mine = Sequence::starting_at(self.incarnations.before());
            self.said.clear();
        }
        self.last_line = Some(line.seq);
        self.life = Some(line.life);
        if let Some(seq) = mine {
            self.said.insert(line.seq, seq);
            // The first line of ours in a rebuilt room: what it says from here on is its own.
            if let Some(start) = self.incarnations.first_input(seq) {
                self.mine = Sequence::starting_at(start);
            }
            // The first line of ours on the new binding: those before it that did not come were
            // pushed to the binding that ended (they never come on this one).
            if std::mem::take(&mut self.rebound) {
                self.unseen += self.mine.excuse_below(seq);
            }
            self.mine.observe(seq);
        }
        None
    }

    fn caught_up(&self, sent: u64) -> bool {
        self.mine.next() >= sent
    }

    fn faults(&self, sent: u64) -> Faults {
        self.incarnations.faults(self.mine.faults_upto(sent))
    }

    fn incarnations(&self) -> &Incarnations {
        &self.incarnations
    }

    fn rebound(&mut self) {
        self.rebound = true;
        self.crashed = true;
    }

    fn unseen(&self) -> u64 {
        self.unseen
    }
}

/// A bingo player: asks for its player's whole state (`Sync`) as its input, and works out from the
/// sample's own rules ([`bingo::card`], [`bingo::draw_order`], [`Card::marks`], [`Card::wins`])
/// what every push must say. Draws must come numbered 1, 2, 3, ... in each round, each once; each
/// `Sync` must run once, as the count each `State` shows says (an answer pushed to a binding that
/// ended is not needed); cards, marks, wins and rewards must follow from the draws. It checks
/// from the state it finds: the round and draw the room is at, the rewards it shows first.
/// A push of a round before the one followed, or a second deal of the round followed, is the
/// room back after a crash: the bot counts the syncs the old room never answered apart, and
/// checks on from the new one. It is the room promoted from its standby's checkpoint when the bot
/// had to bind its player again and the next `State` shows the same life of the player (the same
/// number for its first `Sync` ever answered), rebuilt from nothing otherwise.
struct BingoBot {
    me: ActorId,
    room: SpotId,
    /// Whether the player's count of `Sync`s answered starts with this bot's.
    history: Past,
    /// Syncs this bot handed to its client so far.
    sent: u64,
    /// The room's incarnations before the current one.
    incarnations: Incarnations,
    /// The round the bot follows, from the first push that named one.
    round: Option<RoundSeen>,
    /// The player's rewards, once a state told them.
    rewards: Option<u64>,
    /// The draw faults of the rounds the bot followed before this one, in this incarnation.
    past: Faults,
    /// The player's count of `Sync`s answered, in the first and the latest `State` of this
    /// incarnation: one per `Sync` sent to it, also when some `State`s went to a session that
    /// ended.
    syncs: Option<(u64, u64)>,
    /// `State`s that repeated the latest count: one answer pushed twice.
    repeated: u64,
    mismatches: u64,
    /// The player's life, by the number of the first `Sync` it ever answered, from the latest
    /// `State`.
    origin: Option<u64>,
    /// Whether the bot bound its player again since the last push: a room whose node died
    /// unbinds its players, so only then may a restart be a checkpoint.
    crashed: bool,
    /// A restart seen after the bot bound its player again, until a `State` says whether the
    /// player is of the same life (a checkpoint): its life then, and the count of the first
    /// `State` the bot saw in it.
    pending: Option<(u64, Option<u64>)>,
    /// Whether a binding of the player ended before the bot saw any `State`: the answers to its
    /// `Sync`s until then may have gone with it.
    answers_lost: bool,
    /// `Sync`s whose fate the bot could not see: see [`BingoBot::first_counted`].
    unseen: u64,
}

/// One round as the bot saw it.
struct RoundSeen {
    round: u32,
    /// The player's card for it, once a push showed it.
    card: Option<Card>,
    /// The draw positions seen; `None` until the first when the bot came in after the deal.
    draws: Option<Sequence>,
    /// Whether the round ended.
    over: bool,
}

impl RoundSeen {
    fn new(round: u32, card: Option<Card>, draws: Option<Sequence>) -> Self {
        RoundSeen {
            round,
            card,
            draws,
            over: false,
        }
    }

    /// How many numbers have been drawn, if the bot knows.
    fn drawn(&self) -> Option<usize> {
        let next = self.draws.as_ref()?.next();
        usize::try_from(next.saturating_sub(1)).ok()
    }
}

impl BingoBot {
    fn new(me: ActorId, room: SpotId, history: Past) -> Self {
        BingoBot {
            me,
            room,
            history,
            sent: 0,
            incarnations: Incarnations::default(),
            round: None,
            rewards: None,
            past: Faults::default(),
            syncs: None,
            repeated: 0,
            mismatches: 0,
            origin: None,
            crashed: false,
            pending: None,
            answers_lost: false,
            unseen: 0,
        }
    }

    /// Starts following `next`, keeping the draw faults of the round before.
    fn follow(&mut self, next: RoundSeen) {
        if let Some(draws) = self.round.take().and_then(|seen| seen.draws) {
            self.past.add(draws.faults_upto(draws.next()));
        }
        self.round = Some(next);
    }

    /// Whether `push` shows the room's state restarted: a round before the one followed, a draw
    /// of the round followed at a position drawn before the latest (a rebuilt room draws its
    /// first round from 1 again, and one of its draws may come before the answer to a `Sync`
    /// that would show its count started again), a deal of the round followed once its card is
    /// known (rewards that went down are a mismatch).
    fn restarted(&self, push: &bingo::Push) -> bool {
        // Every `State` answers one more `Sync`: a count that went back started again.
        if let (bingo::Push::State(view), Some((_, latest))) = (push, self.syncs)
            && view.syncs < latest
        {
            return true;
        }
        let Some(seen) = &self.round else {
            return false;
        };
        match push {
            bingo::Push::Drawn {
                round, position, ..
            } => {
                *round < seen.round
                    || (*round == seen.round
                        && seen
                            .draws
                            .as_ref()
                            .is_some_and(|draws| draws.went_back_to(*position as u64)))
            }
            bingo::Push::RoundOver { round, .. } => *round < seen.round,
            bingo::Push::Dealt { round, .. } => {
                *round < seen.round || (*round == seen.round && seen.card.is_some())
            }
            bingo::Push::State(view) => view.round < seen.round,
            bingo::Push::Seated { .. } => false,
        }
    }

    /// Starts checking a new incarnation of the room, from the state its next push shows.
    fn rebuilt(&mut self) {
        let due = self.sent.saturating_sub(self.incarnations.before());
        let mut faults = self.draw_faults();
        faults.duplicated += self.answered().saturating_sub(due) + self.repeated;
        let answered = self.answered().min(due);
        self.incarnations.rebuilt(None, self.sent, answered, faults);
        // Until a `State` tells: a player of the same life came back from its checkpoint.
        if std::mem::take(&mut self.crashed) {
            self.pending = self
                .origin
                .map(|origin| (origin, self.syncs.map(|(first, _)| first)));
        }
        self.round = None;
        self.rewards = None;
        self.past = Faults::default();
        self.syncs = None;
        self.repeated = 0;
    }

    /// The draw faults of this incarnation.
    fn draw_faults(&self) -> Faults {
        let mut faults = self.past;
        if let Some(draws) = self.round.as_ref().and_then(|seen| seen.draws.as_ref()) {
            faults.add(draws.faults_upto(draws.next()));
        }
        faults
    }

    /// The count, in the first `State` the bot saw of this incarnation (`view`), from which the
    /// player's `Sync`s are this bot's. A player made for this run counts only this bot's: all
    /// it answered, those whose answers went with a binding that ended too. Any other may count
    /// an earlier client's, so this `State` is the first counted, and the bot's `Sync`s before it
    /// whose answers may have gone with a binding are unseen: it cannot tell whether they ran.
    fn first_counted(&mut self, view: &bingo::PlayerView) -> u64 {
        if !self.incarnations.rebuilds().is_empty() {
            return view.syncs;
        }
        if self.history == Past::New {
            return 1;
        }
        if std::mem::take(&mut self.answers_lost)
            && let Some(last) = view.last_sync
        {
            self.unseen += self.incarnations.unseen_below(last);
        }
        view.syncs
    }

    /// The `Sync`s this incarnation answered since the first count that is this bot's (see
    /// [`BingoBot::first_counted`]).
    fn answered(&self) -> u64 {
        self.syncs
            .map_or(0, |(first, latest)| (latest + 1).saturating_sub(first))
    }

    fn mismatch(&mut self, matches: bool) {
        if !matches {
            self.mismatches += 1;
        }
    }

    /// Whether `marks` are what the card shows after the draws seen (or after some number of
    /// draws, when the bot does not know how many there were).
    fn marks_explained(&self, marks: &Marks) -> bool {
        let Some(seen) = &self.round else {
            return true;
        };
        let Some(card) = seen.card else {
            return true;
        };
        let order = bingo::draw_order(&self.room, seen.round);
        match seen.drawn() {
            Some(drawn) => order.get(..drawn).is_some_and(|d| card.marks(d) == *marks),
            None => (0..=order.len()).any(|k| card.marks(&order[..k]) == *marks),
        }
    }

    fn drawn(&mut self, round: u32, position: usize, number: u8, marked: bool) {
        let order = bingo::draw_order(&self.room, round);
        let right_number = position
            .checked_sub(1)
            .and_then(|i| order.get(i))
            .is_some_and(|&n| n == number);
        self.mismatch(right_number);
        let at = position as u64;
        match &mut self.round {
            Some(seen) if seen.round == round => {
                let card_has_it = seen.card.map(|card| card.cell(number).is_some());
                seen.draws
                    .get_or_insert_with(|| Sequence::starting_at(at))
                    .observe(at);
                if let Some(has) = card_has_it {
                    self.mismatch(has == marked);
                }
            }
            followed => {
                // Only the first push may start a round the bot was not dealt into.
                let first = followed.is_none();
                self.mismatch(first);
                let mut draws = Sequence::starting_at(at);
                draws.observe(at);
                self.follow(RoundSeen::new(round, None, Some(draws)));
            }
        }
    }

    fn round_over(&mut self, round: u32, winners: &[ActorId], prize: u64) {
        let won = winners.contains(&self.me);
        if let Some(rewards) = &mut self.rewards
            && won
        {
            *rewards += prize;
        }
        let Some(seen) = &mut self.round else {
            return;
        };
        if seen.round != round || seen.over {
            self.mismatches += 1;
            return;
        }
        seen.over = true;
        let should_win = match (seen.card, seen.drawn()) {
            (Some(card), Some(drawn)) => bingo::draw_order(&self.room, round)
                .get(..drawn)
                .map(|d| Card::wins(&card.marks(d))),
            _ => None,
        };
        if let Some(should_win) = should_win {
            self.mismatch(should_win == won);
        }
    }

    fn dealt(&mut self, round: u32, card: Card, marks: &Marks) {
        self.mismatch(card == bingo::card(&self.room, round, &self.me));
        // A new round deals before its first draw; a deal on joining may come at any draw.
        let after_the_last = match &self.round {
            Some(seen) => seen.over && seen.round + 1 == round,
            None => false,
        };
        let expected = after_the_last || self.round.as_ref().is_none_or(|s| s.card.is_none());
        self.mismatch(expected);
        let draws = after_the_last.then(|| Sequence::starting_at(1));
        self.follow(RoundSeen::new(round, Some(card), draws));
        self.mismatch(self.marks_explained(marks));
    }

    fn state(&mut self, view: &bingo::PlayerView) {
        let origin = view
            .last_sync
            .map(|last| (last + 1).saturating_sub(view.syncs));
        let restored = match self.pending.take() {
            Some((before, first)) if origin == Some(before) => {
                // The checkpoint holds the `Sync`s answered before this one, from the first the
                // bot saw in the incarnation that died.
                let held = view.syncs.saturating_sub(1);
                let kept = first.map_or(0, |first| (held + 1).saturating_sub(first));
                self.incarnations.was_restored(kept);
                true
            }
            _ => false,
        };
        self.origin = origin;
        self.syncs = match self.syncs {
            None => Some((self.first_counted(view), view.syncs)),
            Some((first, latest)) => {
                // The same count again is the same answer twice.
                if view.syncs == latest {
                    self.repeated += 1;
                }
                Some((first, latest.max(view.syncs)))
            }
        };
        // The first `Sync` a rebuilt player ran, by its count and the last one's number: those
        // the gateway held while it bound the player again ran in the new incarnation. Every
        // `Sync` a rebuilt player answered is this bot's, counted from the first.
        // A restored player answered only this `Sync` since its checkpoint.
        if restored && let Some(last) = view.last_sync {
            self.incarnations.first_input(last);
        } else if let Some(last) = view.last_sync
            && self
                .incarnations
                .first_input((last + 1).saturating_sub(view.syncs))
                .is_some()
        {
            self.syncs = Some((1, view.syncs));
        }
        if let Some(card) = view.card {
            self.mismatch(card == bingo::card(&self.room, view.round, &self.me));
        }
        match &mut self.round {
            Some(seen) if seen.round == view.round => {
                if seen.card.is_none() {
                    seen.card = view.card;
                } else if seen.card != view.card {
                    self.mismatches += 1;
                }
            }
            Some(_) => self.mismatches += 1,
            None => self.follow(RoundSeen::new(view.round, view.card, None)),
        }
        self.mismatch(self.marks_explained(&view.marks));
        if let Some(rewards) = self.rewards {
            self.mismatch(rewards == view.rewards);
        }
        self.rewards = Some(view.rewards);
    }
}

impl Game for BingoBot {
    type Input = bingo::PlayerMsg;
    type Push = bingo::Push;

    fn input(&mut self, seq: u64) -> bingo::PlayerMsg {
        self.sent = seq + 1;
        bingo::PlayerMsg::Sync { seq }
    }

    fn read(&mut self, push: bingo::Push) -> Option<u64> {
        if self.restarted(&push) {
            self.rebuilt();
        }
        // After a rebind the bot follows the room afresh, so only a `State`'s count shows
        // whether it went back.
        if matches!(push, bingo::Push::State(_)) {
            self.crashed = false;
        }
        match push {
            bingo::Push::Drawn {
                round,
                position,
                number,
                marked,
            } => self.drawn(round, position, number, marked),
            bingo::Push::RoundOver {
                round,
                winners,
                prize,
            } => self.round_over(round, &winners, prize),
            bingo::Push::Dealt { round, card, marks } => self.dealt(round, card, &marks),
            bingo::Push::State(view) => self.state(&view),
            // Only a player that asked for a seat is seated; this bot never asks.
            bingo::Push::Seated { .. } => self.mismatches += 1,
        }
        None
    }

    fn caught_up(&self, sent: u64) -> bool {
        self.incarnations.before() + self.answered() >= sent
    }

    fn faults(&self, sent: u64) -> Faults {
        let due = sent.saturating_sub(self.incarnations.before());
        let mut faults = self.draw_faults();
        faults.lost += due.saturating_sub(self.answered());
        faults.duplicated += self.answered().saturating_sub(due) + self.repeated;
        self.incarnations.faults(faults)
    }

    fn mismatches(&self) -> u64 {
        self.mismatches
    }

    fn incarnations(&self) -> &Incarnations {
        &self.incarnations
    }

    fn unseen(&self) -> u64 {
        self.unseen
    }

    /// Draws, round ends and deals pushed meanwhile went to the binding that ended: follow the
    /// room again from the next push, as on joining, and take the rewards the next state shows.
    fn rebound(&mut self) {
        self.crashed = true;
        if self.origin.is_none() {
            self.answers_lost = true;
        }
        if let Some(draws) = self.round.take().and_then(|seen| seen.draws) {
            self.past.add(draws.faults_upto(draws.next()));
        }
        self.rewards = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bots::checks::Outcome;
    use bingo::{PlayerView, Push};

    fn actor(id: &str) -> ActorId {
        ActorId::new(id).expect("valid id")
    }

    fn spot(id: &str) -> SpotId {
        SpotId::new(id).expect("valid id")
    }

    #[test]
    fn every_game_room_can_keep_a_confirmed_standby_its_players_with_it() {
        let registry = ferry_samples::registry_with_standby(StandbyPolicy::Confirmed);
        for game in GameKind::ALL {
            let room = registry.info(game.room_factory()).expect("registered");
            assert_eq!(room.standby, StandbyPolicy::Confirmed, "{}", game.name());
            // A standby is kept per room: a player in one is kept with it.
            let player = registry.info(game.player_factory()).expect("registered");
            assert_eq!(player.standby, StandbyPolicy::None, "{}", game.name());
        }
        let matchmaker = registry.info(bingo::MATCHMAKER).expect("registered");
        assert_eq!(matchmaker.standby, StandbyPolicy::None);
    }

    /// An FPS snapshot made on `node` at `tick`, with this player's input log.
    fn snapshot(node: &str, tick: u64, applied: u64, last: Option<u64>, out: u64) -> fps::Snapshot {
        fps::Snapshot {
            tick,
            round: 1,
            phase: fps::Phase::Play,
            node: ferry::NodeId::new(node).expect("valid id"),
            inputs: fps::InputLog {
                applied,
                last_seq: last,
                out_of_order: out,
            },
            scores: Default::default(),
            // In these tests a room lives its first life on n1 and, rebuilt, its next on n2.
            life: if node == "n1" { 1 } else { 2 },
        }
    }

    #[test]
    fn an_fps_bot_counts_from_the_state_it_finds_so_a_second_run_is_clean() {
        let mut bot = FpsBot::default();
        // An earlier run applied 100 inputs of this player, numbered 0 to 99.
        bot.read(snapshot("n1", 500, 100, Some(99), 0));
        for seq in 0..3 {
            bot.input(seq);
        }
        assert!(!bot.caught_up(3));
        // Ours are applied after them: the room counts our first one out of turn.
        bot.read(snapshot("n1", 501, 103, Some(2), 1));
        assert!(bot.caught_up(3));
        assert_eq!(bot.faults(3), Faults::default());
        // A real loss still shows.
        bot.input(3);
        assert_eq!(bot.faults(4).lost, 1);
    }

    #[test]
    fn a_gap_the_client_reported_before_a_rebuild_is_not_counted_out_of_order() {
        let mut bot = FpsBot::default();
        bot.read(snapshot("n1", 10, 0, None, 0));
        for seq in 0..6 {
            bot.input(seq);
        }
        // Its gateway died with inputs 2 and 3 unconfirmed; 4 and 5 went through another one.
        bot.undelivered(2);
        bot.read(snapshot("n1", 11, 4, Some(5), 1));
        bot.input(6);
        // The room's node crashed with input 6; the room came back fresh on n2.
        bot.read(snapshot("n2", 1, 0, None, 0));
        bot.input(7);
        bot.read(snapshot("n2", 2, 1, Some(7), 1));
        assert_eq!(
            bot.incarnations().lost(),
            3,
            "2, 3 and 6 died with the old room"
        );
        assert_eq!(bot.faults(8), Faults::default());
    }

    #[test]
    fn an_fps_bot_names_a_rebuilt_room_and_counts_what_died_with_it_apart() {
        let mut bot = FpsBot::default();
        bot.read(snapshot("n1", 10, 0, None, 0));
        bot.input(0);
        bot.input(1);
        bot.read(snapshot("n1", 11, 2, Some(1), 0));
        bot.input(2);
        // The room's node crashed; the room came back fresh on n2, tick and inputs from zero.
        bot.read(snapshot("n2", 1, 0, None, 0));
        let rooms = bot.incarnations();
        assert_eq!(rooms.rebuilds().len(), 1);
        assert_eq!(rooms.rebuilds()[0].node.as_deref(), Some("n2"));
        assert_eq!(rooms.lost(), 1, "input 2 died with the old incarnation");
        // Play goes on in the new incarnation: nothing lost, doubled or out of order there.
        bot.input(3);
        bot.read(snapshot("n2", 2, 1, Some(3), 1));
        assert!(bot.caught_up(4));
        assert_eq!(bot.faults(4), Faults::default());
    }

    #[test]
    fn a_rebuild_seen_after_the_new_rooms_tick_and_log_passed_the_old_ones_is_a_rebuild() {
        let mut bot = FpsBot::default();
        bot.read(snapshot("n1", 10, 0, None, 0));
        for seq in 0..3 {
            bot.input(seq);
        }
        bot.read(snapshot("n1", 11, 2, Some(1), 0));
        // The bot's gateway died: inputs 2 to 4 never arrived. By the time it is bound again the
        // room was rebuilt and ran longer than the old one had, with inputs 5 to 9.
        for seq in 3..10 {
            bot.input(seq);
        }
        bot.undelivered(3);
        bot.read(snapshot("n2", 40, 5, Some(9), 1));
        assert_eq!(bot.incarnations().rebuilds().len(), 1);
        assert_eq!(bot.incarnations().lost(), 3, "2 to 4 never ran");
        assert!(bot.caught_up(10));
        assert_eq!(bot.faults(10), Faults::default());
    }

    #[test]
    fn an_fps_bot_tells_a_room_back_at_its_checkpoint_and_counts_what_it_rolled_back() {
        let mut bot = FpsBot::default();
        for seq in 0..10 {
            bot.input(seq);
        }
        bot.read(snapshot("n1", 10, 10, Some(9), 0));
        bot.input(10);
        bot.input(11);
        // n1 dies; the player is bound again; the room's standby on n2 held 7 of the inputs.
        bot.rebound();
        bot.read(fps::Snapshot {
            life: 1,
            ..snapshot("n2", 8, 7, Some(6), 0)
        });
        let rooms = bot.incarnations();
        assert_eq!(rooms.outcome(), Outcome::Checkpoint);
        assert_eq!(rooms.rebuilds()[0].node.as_deref(), Some("n2"));
        assert_eq!(rooms.rolled_back(), 5, "inputs 7 to 11 are not in the room");
        // Input 11, held by the gateway meanwhile, runs in the restored room.
        bot.read(fps::Snapshot {
            life: 1,
            ..snapshot("n2", 9, 8, Some(11), 1)
        });
        let rooms = bot.incarnations();
        assert_eq!((rooms.rolled_back(), rooms.lost()), (4, 4));
        assert!(bot.caught_up(12));
        assert_eq!(bot.faults(12), Faults::default());
    }

    #[test]
    fn an_fps_snapshot_that_went_back_with_no_crash_is_a_fault_not_a_checkpoint() {
        let mut bot = FpsBot::default();
        for seq in 0..10 {
            bot.input(seq);
        }
        bot.read(snapshot("n1", 10, 10, Some(9), 0));
        bot.read(snapshot("n1", 11, 7, Some(6), 0));
        assert_eq!(bot.incarnations().outcome(), Outcome::Kept);
        assert!(bot.faults(10).reordered > 0);
    }

    #[test]
    fn an_fps_bot_whose_first_snapshot_shows_its_own_inputs_counts_them() {
        let mut bot = FpsBot::default();
        bot.input(0);
        bot.input(1);
        bot.read(snapshot("n1", 7, 2, Some(1), 0));
        assert!(bot.caught_up(2));
        assert_eq!(bot.faults(2), Faults::default());
    }

    /// A chat line numbered `seq` by the room, from `from`, saying `text`.
    fn line(seq: u64, from: &str, text: &str) -> chat::Line {
        chat::Line {
            seq,
            from: actor(from),
            text: text.to_owned(),
            life: 1,
        }
    }

    /// A chatter whose inputs 0 and 1 came back as the room's lines 40 and 41.
    fn chatter_heard_twice() -> ChatBot {
        let mut bot = ChatBot::new(actor("chat-0-p0"));
        for seq in 0..2 {
            bot.input(seq);
            bot.read(line(40 + seq, "chat-0-p0", &seq.to_string()));
        }
        bot
    }

    #[test]
    fn a_chat_bot_counts_from_the_state_it_finds_so_a_second_run_is_clean() {
        let mut bot = ChatBot::new(actor("chat-0-p0"));
        // An earlier run said 300 lines in the room; this run's lines are numbered from 0 again.
        bot.read(line(300, "chat-0-p1", "7"));
        for seq in 0..3 {
            bot.input(seq);
            bot.read(line(301 + seq, "chat-0-p0", &seq.to_string()));
        }
        assert!(bot.caught_up(3));
        assert_eq!(bot.faults(3), Faults::default());
        assert!(bot.incarnations().rebuilds().is_empty());
        // A real loss still shows.
        bot.input(3);
        assert_eq!(bot.faults(4).lost, 1);
    }

    #[test]
    fn a_chat_bot_names_a_rebuilt_room_and_counts_what_died_with_it_apart() {
        let mut bot = chatter_heard_twice();
        bot.input(2);
        // The room's node crashed with line 2 unsaid; the room came back numbering from 0.
        bot.read(line(0, "chat-0-p1", "9"));
        bot.input(3);
        bot.read(line(1, "chat-0-p0", "3"));
        let rooms = bot.incarnations();
        assert_eq!(rooms.rebuilds().len(), 1);
        assert_eq!(
            rooms.rebuilds()[0].node,
            None,
            "chat lines do not name a node"
        );
        assert_eq!(rooms.lost(), 1, "line 2 died with the old incarnation");
        assert!(bot.caught_up(4));
        assert_eq!(bot.faults(4), Faults::default());
    }

    #[test]
    fn a_chat_bot_counts_lines_held_for_a_rebuilt_room_with_the_new_room() {
        let mut bot = chatter_heard_twice();
        // Line 2 dies with the room's node; line 3 is held by the gateway while it binds the
        // chatter again, and said by the rebuilt room, after another member's first line.
        bot.input(2);
        bot.input(3);
        bot.read(line(0, "chat-0-p1", "9"));
        bot.input(4);
        bot.read(line(1, "chat-0-p0", "3"));
        bot.read(line(2, "chat-0-p0", "4"));
        assert_eq!(
            bot.incarnations().lost(),
            1,
            "only line 2 died with the old room"
        );
        assert!(bot.caught_up(5));
        assert_eq!(bot.faults(5), Faults::default());
        // A line the new room says twice is still a duplicate.
        bot.read(line(3, "chat-0-p0", "3"));
        assert_eq!(bot.faults(5).duplicated, 1);
    }

    #[test]
    fn an_fps_bot_counts_inputs_held_for_a_rebuilt_room_with_the_new_room() {
        let mut bot = FpsBot::default();
        bot.read(snapshot("n1", 10, 0, None, 0));
        bot.input(0);
        bot.input(1);
        bot.read(snapshot("n1", 11, 2, Some(1), 0));
        // Input 2 dies with n1; input 3 is held by the gateway and applied by the rebuilt room
        // after its first snapshot.
        bot.input(2);
        bot.input(3);
        bot.read(snapshot("n2", 1, 0, None, 0));
        bot.input(4);
        bot.read(snapshot("n2", 2, 2, Some(4), 1));
        assert_eq!(bot.incarnations().lost(), 1, "only input 2 died with n1");
        assert!(bot.caught_up(5));
        assert_eq!(bot.faults(5), Faults::default());
        // An input the rebuilt room applies twice is still a duplicate.
        bot.read(snapshot("n2", 3, 3, Some(4), 2));
        assert_eq!(bot.faults(5).duplicated, 1);
    }

    /// The node running the room left, and the gateway bound the chatter again in its same
    /// session: the client hears of it only as inputs it cannot vouch for. Line 2 was said and
    /// pushed to the binding that ended; input 3 was in doubt and never ran; the room, promoted
    /// from its checkpoint, says line 4 next. Neither is the server's loss: the client's report
    /// explains input 3, and line 2 is an answer that went with its binding.
    #[test]
    fn a_line_pushed_to_a_binding_its_node_ended_is_not_lost() {
        let mut bot = chatter_heard_twice();
        bot.input(2);
        bot.input(3);
        bot.undelivered(1);
        bot.input(4);
        bot.read(line(43, "chat-0-p0", "4"));
        assert!(bot.caught_up(5));
        assert_eq!(bot.faults(5), Faults::default());
        assert_eq!(bot.unseen(), 2);
        assert!(bot.incarnations().rebuilds().is_empty());
    }

    #[test]
    fn a_chat_line_of_its_own_heard_again_is_a_duplicate_not_a_rebuild() {
        let mut bot = ChatBot::new(actor("chat-0-p0"));
        for seq in 0..2 {
            bot.input(seq);
            bot.read(line(seq, "chat-0-p0", &seq.to_string()));
        }
        bot.read(line(0, "chat-0-p0", "0"));
        assert!(bot.incarnations().rebuilds().is_empty());
        assert_eq!(bot.faults(2).duplicated, 1);
    }

    #[test]
    fn players_are_named_after_their_room_and_read_back() {
        let player = GameKind::Bingo.player(12, 3).expect("valid id");
        assert_eq!(player.as_str(), "bingo-12-p3");
        assert_eq!(room_of(&player), Some(spot("bingo-12")));
        assert_eq!(room_of(&actor("bingo-12-px")), None);
        assert_eq!(room_of(&actor("alice")), None);
    }

    #[test]
    fn a_lineup_numbers_rooms_of_every_game() {
        let plans = lineup(&[GameKind::Chat, GameKind::Bingo], 2..4, 2).expect("valid ids");
        let rooms: Vec<&str> = plans.iter().map(|p| p.room.as_str()).collect();
        assert_eq!(rooms, ["chat-2", "chat-3", "bingo-2", "bingo-3"]);
        assert_eq!(plans[3].number, 3);
        let players: Vec<&str> = plans[3].players.iter().map(ActorId::as_str).collect();
        assert_eq!(players, ["bingo-3-p0", "bingo-3-p1"]);
    }

    /// Plays a room with `me` and `other` from its first draw as the sample does, and returns what
    /// `me`'s player pushes: a state asked for before the first draw, every draw, the end of the
    /// round, the deal of the next one and a state after its first draw.
    fn two_rounds(room: &SpotId, me: &ActorId, other: &ActorId) -> Vec<Push> {
        let mine = bingo::card(room, 1, me);
        let theirs = bingo::card(room, 1, other);
        let state = |round, card: Card, drawn: &[u8], rewards, syncs| PlayerView {
            seat: None,
            round,
            card: Some(card),
            marks: card.marks(drawn),
            rewards,
            syncs,
            last_sync: syncs.checked_sub(1),
        };
        let mut pushes = vec![Push::State(state(1, mine, &[], 0, 1))];
        let order = bingo::draw_order(room, 1);
        let mut winners = Vec::new();
        for (i, &number) in order.iter().enumerate() {
            pushes.push(Push::Drawn {
                round: 1,
                position: i + 1,
                number,
                marked: mine.cell(number).is_some(),
            });
            let drawn = &order[..=i];
            for (player, card) in [(me, mine), (other, theirs)] {
                if Card::wins(&card.marks(drawn)) {
                    winners.push(player.clone());
                }
            }
            if !winners.is_empty() {
                break;
            }
        }
        let prize = 100 / winners.len() as u64;
        let rewards = if winners.contains(me) { prize } else { 0 };
        pushes.push(Push::RoundOver {
            round: 1,
            winners,
            prize,
        });
        let next = bingo::card(room, 2, me);
        pushes.push(Push::Dealt {
            round: 2,
            card: next,
            marks: next.marks(&[]),
        });
        let first = bingo::draw_order(room, 2)[0];
        pushes.push(Push::Drawn {
            round: 2,
            position: 1,
            number: first,
            marked: next.cell(first).is_some(),
        });
        pushes.push(Push::State(state(2, next, &[first], rewards, 2)));
        pushes
    }

    /// Feeds `pushes` to a bot that sent `sent` syncs and checks from the state it finds;
    /// returns its faults and mismatches.
    fn check(pushes: Vec<Push>, sent: u64) -> (Faults, u64) {
        let (room, me) = (spot("bingo-0"), actor("bingo-0-p0"));
        let mut bot = BingoBot::new(me, room, Past::Unknown);
        for push in pushes {
            assert_eq!(bot.read(push), None, "bingo has no server tick");
        }
        (bot.faults(sent), bot.mismatches())
    }

    fn game() -> Vec<Push> {
        two_rounds(&spot("bingo-0"), &actor("bingo-0-p0"), &actor("bingo-0-p1"))
    }

    fn draws(pushes: &[Push]) -> Vec<usize> {
        pushes
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p, Push::Drawn { .. }))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn a_game_pushed_as_the_rules_say_is_clean() {
        let (faults, mismatches) = check(game(), 2);
        assert!(faults.is_clean(), "{faults:?}");
        assert_eq!(mismatches, 0);
    }

    #[test]
    fn a_bot_that_comes_in_mid_round_checks_from_there() {
        let pushes = game();
        let third = draws(&pushes)[2];
        let (faults, mismatches) = check(pushes[third..].to_vec(), 1);
        assert!(faults.is_clean(), "{faults:?}");
        assert_eq!(mismatches, 0);
    }

    #[test]
    fn draws_lost_repeated_or_late_are_counted() {
        let pushes = game();
        let at = draws(&pushes);
        let mut lost = pushes.clone();
        lost.remove(at[1]);
        assert_eq!(check(lost, 2).0.lost, 1);
        let mut repeated = pushes.clone();
        repeated.insert(at[2], pushes[at[1]].clone());
        assert_eq!(check(repeated, 2).0.duplicated, 1);
        let mut swapped = pushes.clone();
        swapped.swap(at[1], at[2]);
        assert_eq!(check(swapped, 2).0.reordered, 1);
    }

    /// The node running the player left mid-round: two syncs died with it, the gateway bound
    /// the player again in the same session, and the draw pushed in between went to the binding
    /// that ended. Only the two syncs are lost, and the client's report explains them.
    #[test]
    fn a_draw_pushed_to_a_binding_its_node_ended_is_not_lost() {
        let pushes = game();
        let third = draws(&pushes)[2];
        let mut bot = BingoBot::new(actor("bingo-0-p0"), spot("bingo-0"), Past::New);
        for (i, push) in pushes.into_iter().enumerate() {
            if i == third {
                bot.undelivered(2);
                continue;
            }
            assert_eq!(bot.read(push), None);
        }
        assert_eq!(bot.mismatches(), 0);
        let faults = bot.faults(4);
        assert_eq!(faults.lost, 2, "{faults:?}");
        assert_eq!((faults.duplicated, faults.reordered), (0, 0));
    }

    /// A bingo bot of `history` whose player's node died just after it ran the bot's first
    /// `Sync`, whose answer went with the binding that ended; the next seven died with the node,
    /// and the client reported them. The bot then sees the answer to its ninth, counting `syncs`.
    fn crashed_before_its_first_state(history: Past, syncs: u64) -> BingoBot {
        let (room, me) = (spot("bingo-0"), actor("bingo-0-p1"));
        let mut bot = BingoBot::new(me.clone(), room.clone(), history);
        for seq in 0..8 {
            bot.input(seq);
        }
        bot.undelivered(7);
        bot.input(8);
        bot.read(unmarked_state(bingo::card(&room, 1, &me), syncs, 8));
        bot
    }

    /// A player's state in round 1 before any draw, on `card`, with `syncs` answered, the last
    /// numbered `last_sync`.
    fn unmarked_state(card: Card, syncs: u64, last_sync: u64) -> Push {
        Push::State(PlayerView {
            seat: None,
            round: 1,
            card: Some(card),
            marks: card.marks(&[]),
            rewards: 0,
            syncs,
            last_sync: Some(last_sync),
        })
    }

    /// A player made for this run counts two `Sync`s: the first one ran, and only the seven the
    /// client reported are missing.
    #[test]
    fn a_new_players_first_sync_whose_answer_went_with_its_node_is_counted_by_the_next_state() {
        let bot = crashed_before_its_first_state(Past::New, 2);
        let faults = bot.faults(9);
        assert_eq!(faults.lost, 7, "{faults:?}");
        assert_eq!((faults.duplicated, faults.reordered), (0, 0));
        assert_eq!(bot.unseen(), 0);
        assert_eq!(bot.mismatches(), 0);
    }

    /// A player an earlier client played counts that client's 40 too: the bot cannot tell its
    /// own `Sync`s from the earlier client's, so those before the first `State` it saw are
    /// unseen, neither applied nor lost.
    #[test]
    fn answers_lost_before_the_first_state_of_a_player_that_played_before_are_unseen() {
        let mut bot = crashed_before_its_first_state(Past::Unknown, 42);
        assert!(bot.caught_up(9));
        assert_eq!(bot.faults(9), Faults::default());
        assert_eq!(bot.unseen(), 8);
        // A real loss still shows.
        bot.input(9);
        assert_eq!(bot.faults(10).lost, 1);
    }

    #[test]
    fn unanswered_or_doubled_syncs_are_lost_or_duplicated() {
        assert_eq!(check(game(), 3).0.lost, 1);
        let mut doubled = game();
        doubled.push(doubled[doubled.len() - 1].clone());
        assert_eq!(check(doubled, 2).0.duplicated, 1);
    }

    #[test]
    fn a_second_bingo_run_on_a_room_an_earlier_one_played_is_clean() {
        // The earlier run played round 1 and the start of round 2; this bot comes in at the
        // second draw of round 2, and asks for its state after it.
        let (room, me) = (spot("bingo-0"), actor("bingo-0-p0"));
        let mut bot = BingoBot::new(me.clone(), room.clone(), Past::Unknown);
        let card = bingo::card(&room, 2, &me);
        let order = bingo::draw_order(&room, 2);
        for (i, &number) in order.iter().take(3).enumerate().skip(1) {
            bot.read(Push::Drawn {
                round: 2,
                position: i + 1,
                number,
                marked: card.cell(number).is_some(),
            });
        }
        bot.input(0);
        bot.read(Push::State(PlayerView {
            seat: None,
            round: 2,
            card: Some(card),
            marks: card.marks(&order[..3]),
            rewards: 100,
            syncs: 8,
            last_sync: Some(0),
        }));
        assert!(bot.caught_up(1));
        assert_eq!(bot.faults(1), Faults::default());
        assert_eq!(bot.mismatches(), 0);
        assert!(bot.incarnations().rebuilds().is_empty());
    }

    /// A bingo bot that saw round 1 and the start of round 2 with two syncs answered, sent a
    /// third, and then saw the room come back in round 1 (its node crashed) and deal it again.
    fn bingo_bot_in_a_rebuilt_room() -> (BingoBot, SpotId, Card) {
        let (room, me) = (spot("bingo-0"), actor("bingo-0-p0"));
        let mut bot = BingoBot::new(me.clone(), room.clone(), Past::New);
        bot.input(0);
        bot.input(1);
        for push in game() {
            bot.read(push);
        }
        bot.input(2);
        let card = bingo::card(&room, 1, &me);
        bot.read(Push::Dealt {
            round: 1,
            card,
            marks: card.marks(&[]),
        });
        (bot, room, card)
    }

    #[test]
    fn a_bingo_bot_names_a_rebuilt_room_and_counts_what_died_with_it_apart() {
        let (mut bot, room, card) = bingo_bot_in_a_rebuilt_room();
        let first = bingo::draw_order(&room, 1)[0];
        bot.read(Push::Drawn {
            round: 1,
            position: 1,
            number: first,
            marked: card.cell(first).is_some(),
        });
        bot.input(3);
        bot.read(Push::State(PlayerView {
            seat: None,
            round: 1,
            card: Some(card),
            marks: card.marks(&[first]),
            rewards: 0,
            syncs: 1,
            last_sync: Some(3),
        }));
        let rooms = bot.incarnations();
        assert_eq!(rooms.rebuilds().len(), 1);
        assert_eq!(
            rooms.lost(),
            1,
            "the third sync died with the old incarnation"
        );
        assert!(bot.caught_up(4));
        assert_eq!(bot.faults(4), Faults::default());
        assert_eq!(bot.mismatches(), 0);
    }

    #[test]
    fn a_sync_the_gateway_held_through_a_rebuild_runs_in_the_new_room_once_and_is_not_lost() {
        // The third sync was sent while the room's node died: the gateway held it until the
        // player was rebuilt.
        let (mut bot, _, card) = bingo_bot_in_a_rebuilt_room();
        let view = |syncs, last_sync| unmarked_state(card, syncs, last_sync);
        // The rebuilt player answers the held sync first, then the next one.
        bot.read(view(1, 2));
        bot.input(3);
        bot.read(view(2, 3));
        assert_eq!(bot.incarnations().rebuilds().len(), 1);
        assert_eq!(
            bot.incarnations().lost(),
            0,
            "the held sync ran in the new room"
        );
        assert!(bot.caught_up(4));
        assert_eq!(bot.faults(4), Faults::default());
        assert_eq!(bot.mismatches(), 0);
    }

    #[test]
    fn a_rebuilt_rooms_first_draw_seen_before_its_first_state_is_a_rebuild_not_a_duplicate() {
        // The bot follows round 1 of the room's first life: five syncs answered, five draws.
        let (room, me) = (spot("bingo-0"), actor("bingo-0-p0"));
        let mut bot = BingoBot::new(me.clone(), room.clone(), Past::New);
        let card = bingo::card(&room, 1, &me);
        let order = bingo::draw_order(&room, 1);
        let drawn = |position: usize| Push::Drawn {
            round: 1,
            position,
            number: order[position - 1],
            marked: card.cell(order[position - 1]).is_some(),
        };
        let state = |syncs, last_sync, draws: usize| {
            Push::State(PlayerView {
                seat: None,
                round: 1,
                card: Some(card),
                marks: card.marks(&order[..draws]),
                rewards: 0,
                syncs,
                last_sync: Some(last_sync),
            })
        };
        bot.read(Push::Dealt {
            round: 1,
            card,
            marks: card.marks(&[]),
        });
        for seq in 0..5 {
            bot.input(seq);
            let position = seq as usize + 1;
            bot.read(drawn(position));
            bot.read(state(seq + 1, seq, position));
        }
        // The node is cut off: sync 5 goes to it and dies there. The gateway binds the player
        // again once it is rebuilt, the bot sends sync 6, and the rebuilt room's first draw
        // arrives before the answer.
        bot.input(5);
        bot.input(6);
        bot.read(drawn(1));
        bot.read(state(1, 6, 1));
        let rooms = bot.incarnations();
        assert_eq!(rooms.rebuilds().len(), 1);
        assert_eq!(rooms.lost(), 1, "sync 5 died with the old room");
        assert!(bot.caught_up(7));
        assert_eq!(bot.faults(7), Faults::default());
        assert_eq!(bot.mismatches(), 0);
    }

    #[test]
    fn marks_cards_wins_and_rewards_the_draws_do_not_explain_are_mismatches() {
        let pushes = game();
        let last = pushes.len() - 1;
        let first_draw = draws(&pushes)[0];
        let change = |i: usize, edit: &dyn Fn(&mut Push)| {
            let mut changed = pushes.clone();
            edit(&mut changed[i]);
            check(changed, 2).1
        };
        let flip_mark = |p: &mut Push| {
            if let Push::Drawn { marked, .. } = p {
                *marked = !*marked;
            }
        };
        assert_eq!(change(first_draw, &flip_mark), 1);
        let more_rewards = |p: &mut Push| {
            if let Push::State(view) = p {
                view.rewards += 1;
            }
        };
        assert_eq!(change(last, &more_rewards), 1);
        // No number of draws leaves the free centre unmarked.
        let unmark_centre = |p: &mut Push| {
            if let Push::State(view) = p {
                view.marks[12] = false;
            }
        };
        assert_eq!(change(0, &unmark_centre), 1);
        // After the first draw of round 2, exactly that draw is marked.
        let mark_all = |p: &mut Push| {
            if let Push::State(view) = p {
                view.marks = [true; 25];
            }
        };
        assert_eq!(change(last, &mark_all), 1);
        let other_card = |p: &mut Push| {
            if let Push::Dealt { card, .. } = p {
                card.cells.swap(0, 1);
            }
        };
        // The deal, and the state that shows the right card after it.
        assert_eq!(change(last - 2, &other_card), 2);
        let claim_the_win = |p: &mut Push| {
            if let Push::RoundOver { winners, .. } = p {
                let me = actor("bingo-0-p0");
                if winners.contains(&me) {
                    winners.retain(|w| *w != me);
                } else {
                    winners.push(me);
                }
            }
        };
        // The win itself, and the rewards the state shows after it.
        assert_eq!(change(last - 3, &claim_the_win), 2);
    }
}
