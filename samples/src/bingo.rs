//! Bingo: rooms that draw numbers on a timer, players that mark their cards, and a matchmaker that
//! hands out seats.
//!
//! - A room ([`BingoRoom`], SpotWide, serde adapter) deals each member a card, draws a number every
//!   [`Rules::draw_every`], and ends a round at the first draw that completes a line on any card:
//!   those players share the prize, and a new round deals new cards. One draw is one turn, so the
//!   room may move at any turn boundary; its cards, draw position, winners and round move with it.
//! - A player ([`BingoPlayer`], serde adapter) marks the numbers drawn on its card, keeps its
//!   rewards, and pushes all of it to its client. Players move with their room.
//! - The matchmaker ([`Matchmaker`], an Instance Spot with the `Recreate` policy) seats players in
//!   rooms named `bingo-1`, `bingo-2`, ... Its state does not move: wherever it starts afresh, it
//!   asks the rooms by name, in order, how many seats they have taken, until one does not exist,
//!   and seats the players who asked meanwhile once it knows.
//!
//! Cards and draws are seeded from the room id and the round, so a room plays the same game on any
//! node, and [`card`], [`draw_order`] and [`Card::wins`] let a test work out every outcome.

use std::collections::BTreeMap;
use std::time::Duration;

use ferry::{
    ActorId, Behavior, Ctx, InvalidId, MessageError, OverrunPolicy, Registration, Registry,
    RelocationPolicy, SpotId, StandbyPolicy, Target, Tick, UnitId,
};
use serde::{Deserialize, Serialize};

use crate::seed::{self, Rng};

/// The factory name of bingo rooms.
pub const ROOM: &str = "bingo-room";
/// The factory name of bingo players.
pub const PLAYER: &str = "bingo-player";
/// The factory name of the matchmaker.
pub const MATCHMAKER: &str = "bingo-matchmaker";
/// The id of the one matchmaker of a cluster.
pub const MATCHMAKER_ID: &str = "bingo-matchmaker";

/// The highest number drawn.
pub const NUMBERS: u8 = 75;

/// The name of the draw timer.
const DRAW: &str = "draw";
/// How long the matchmaker waits for a room to answer.
const ASK: Duration = Duration::from_secs(5);

/// How bingo plays; a room keeps the rules it was created with when it moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// Players the matchmaker seats in one room.
    pub seats: u32,
    /// Time between two draws.
    pub draw_every: Duration,
    /// What the winners of a round share.
    pub prize: u64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            seats: 4,
            draw_every: Duration::from_millis(250),
            prize: 100,
        }
    }
}

/// The id of the `n`th room (from 1), as the matchmaker names them.
pub fn room_id(n: u32) -> Result<SpotId, InvalidId> {
    SpotId::new(format!("bingo-{n}"))
}

/// A 5x5 card, row by row. Column `c` holds numbers from `15c + 1` to `15c + 15`; the centre is free
/// (0) and counts as marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Card {
    /// The 25 cells, row by row.
    pub cells: [u8; 25],
}

/// Which cells of a card are marked, row by row.
pub type Marks = [bool; 25];

/// The cell in the middle of a card.
const CENTRE: usize = 12;

impl Card {
    /// The cell holding `number`, if the card has it.
    pub fn cell(&self, number: u8) -> Option<usize> {
        if number == 0 {
            return None;
        }
        self.cells.iter().position(|&n| n == number)
    }

    /// The marks of this card once `drawn` have been drawn (the centre always).
    pub fn marks(&self, drawn: &[u8]) -> Marks {
        let mut marks = [false; 25];
        marks[CENTRE] = true;
        for &number in drawn {
            if let Some(cell) = self.cell(number) {
                marks[cell] = true;
            }
        }
        marks
    }

    /// Whether the marks complete a row, a column or a diagonal.
    pub fn wins(marks: &Marks) -> bool {
        let line = |start: usize, step: usize| (0..5).all(|i| marks[start + i * step]);
        (0..5).any(|i| line(i * 5, 1) || line(i, 5)) || line(0, 6) || line(4, 4)
    }
}

/// The card a player gets in a round of a room.
pub fn card(room: &SpotId, round: u32, player: &ActorId) -> Card {
    let seed = seed::hash(&[
        room.as_str().as_bytes(),
        &round.to_le_bytes(),
        player.as_str().as_bytes(),
    ]);
    let mut rng = Rng::new(seed);
    let mut cells = [0u8; 25];
    for column in 0..5u8 {
        let mut numbers: Vec<u8> = (1..=15).map(|n| column * 15 + n).collect();
        rng.shuffle(&mut numbers);
        for (row, number) in numbers.into_iter().take(5).enumerate() {
            cells[row * 5 + usize::from(column)] = number;
        }
    }
    cells[CENTRE] = 0;
    Card { cells }
}

/// The order in which a room draws the numbers of a round.
pub fn draw_order(room: &SpotId, round: u32) -> Vec<u8> {
    let mut numbers: Vec<u8> = (1..=NUMBERS).collect();
    Rng::new(seed::hash(&[
        room.as_str().as_bytes(),
        &round.to_le_bytes(),
    ]))
    .shuffle(&mut numbers);
    numbers
}

/// How a round ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundResult {
    /// The round's number in its room, counting from 1.
    pub round: u32,
    /// How many numbers were drawn.
    pub draws: usize,
    /// Who completed a line at the last draw.
    pub winners: Vec<ActorId>,
}

/// What a room takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RoomMsg {
    /// Ask for the room's report.
    Report,
}

/// A room's state as a whole, for servers, tests and the matchmaker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomReport {
    /// The round being played.
    pub round: u32,
    /// Numbers drawn in it so far, in order.
    pub drawn: Vec<u8>,
    /// Each member's card for it.
    pub cards: BTreeMap<ActorId, Card>,
    /// The rounds played to the end.
    pub results: Vec<RoundResult>,
}

/// A bingo room's state; all of it moves with the room. The draw order is worked out again from the
/// room id and round, not kept.
#[derive(Debug, Serialize, Deserialize)]
pub struct BingoRoom {
    rules: Rules,
    round: u32,
    /// Numbers drawn in this round.
    position: usize,
    cards: BTreeMap<ActorId, Card>,
    results: Vec<RoundResult>,
}

impl BingoRoom {
    /// A room before its first draw.
    pub fn new(rules: Rules) -> BingoRoom {
        BingoRoom {
            rules,
            round: 1,
            position: 0,
            cards: BTreeMap::new(),
            results: Vec::new(),
        }
    }

    fn deal(&mut self, ctx: &Ctx<'_>, room: &SpotId, player: &ActorId, drawn: &[u8]) {
        let card = card(room, self.round, player);
        self.cards.insert(player.clone(), card);
        let dealt = PlayerMsg::Dealt {
            round: self.round,
            card,
            drawn: drawn.to_vec(),
        };
        tell(ctx, player, dealt);
    }

    fn draw(&mut self, ctx: &Ctx<'_>, room: &SpotId) {
        let order = draw_order(room, self.round);
        let Some(&number) = order.get(self.position) else {
            return;
        };
        self.position += 1;
        for member in ctx.members() {
            let drawn = PlayerMsg::Drawn {
                round: self.round,
                position: self.position,
                number,
            };
            tell(ctx, member, drawn);
        }
        let drawn = &order[..self.position];
        let winners: Vec<ActorId> = self
            .cards
            .iter()
            .filter(|(_, card)| Card::wins(&card.marks(drawn)))
            .map(|(player, _)| player.clone())
            .collect();
        if winners.is_empty() {
            return;
        }
        let prize = self.rules.prize / winners.len() as u64;
        for member in ctx.members() {
            let over = PlayerMsg::RoundOver {
                round: self.round,
                winners: winners.clone(),
                prize,
            };
            tell(ctx, member, over);
        }
        self.results.push(RoundResult {
            round: self.round,
            draws: self.position,
            winners,
        });
        self.round += 1;
        self.position = 0;
        let members: Vec<ActorId> = ctx.members().cloned().collect();
        for member in &members {
            self.deal(ctx, room, member, &[]);
        }
    }
}

/// Tells a unit something, logging what could not be sent.
fn tell<M: ferry::Message>(ctx: &Ctx<'_>, to: impl Into<Target>, msg: M) {
    if let Err(error) = ctx.tell(to, msg) {
        tracing::debug!(%error, "not delivered");
    }
}

impl Behavior for BingoRoom {
    type Msg = RoomMsg;
    type Reply = RoomReport;

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timer(DRAW, self.rules.draw_every, OverrunPolicy::SkipLateTicks);
    }

    fn handle(&mut self, ctx: &mut Ctx<'_>, _report: RoomMsg) -> RoomReport {
        let drawn = match ctx.id() {
            UnitId::Spot(room) => draw_order(room, self.round)[..self.position].to_vec(),
            UnitId::Actor(_) => Vec::new(),
        };
        RoomReport {
            round: self.round,
            drawn,
            cards: self.cards.clone(),
            results: self.results.clone(),
        }
    }

    fn on_tick(&mut self, ctx: &mut Ctx<'_>, _tick: &Tick) {
        if let UnitId::Spot(room) = ctx.id().clone()
            && !self.cards.is_empty()
        {
            self.draw(ctx, &room);
        }
    }

    fn on_member_joined(&mut self, ctx: &mut Ctx<'_>, actor: &ActorId) {
        if let UnitId::Spot(room) = ctx.id().clone() {
            let drawn = draw_order(&room, self.round)[..self.position].to_vec();
            self.deal(ctx, &room, actor, &drawn);
        }
    }

    fn on_member_left(&mut self, _ctx: &mut Ctx<'_>, actor: &ActorId) {
        self.cards.remove(actor);
    }
}

/// What a player Actor takes: requests from its client, news from its room and the matchmaker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PlayerMsg {
    /// From the client: ask the matchmaker for a seat; the answer comes as [`Push::Seated`].
    FindRoom,
    /// From the client: push the player's whole state as [`Push::State`] (after a reconnect, say).
    Sync {
        /// The client's number for this ask, echoed as [`PlayerView::last_sync`]: after a crash
        /// rebuilt the player, its client tells from it which of its asks the new one ran.
        seq: u64,
    },
    /// From a server: answer with the player's state, pushing nothing.
    Report,
    /// From the matchmaker: the room the player is seated in.
    Seated {
        /// The room the player now plays in.
        room: SpotId,
    },
    /// From the room: a card for a round, and the numbers drawn in it before the player joined.
    Dealt {
        /// The round the card is for, counting from 1 in its room.
        round: u32,
        /// The player's card for that round.
        card: Card,
        /// Numbers drawn already.
        drawn: Vec<u8>,
    },
    /// From the room: a number drawn.
    Drawn {
        /// The round it was drawn in.
        round: u32,
        /// How many numbers have been drawn in the round, this one included.
        position: usize,
        /// The number drawn, 1 to [`NUMBERS`].
        number: u8,
    },
    /// From the room: the round ended.
    RoundOver {
        /// The round that ended.
        round: u32,
        /// Who won it.
        winners: Vec<ActorId>,
        /// What each winner gets.
        prize: u64,
    },
}

/// A player's state, as its client and servers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerView {
    /// The room the matchmaker seated it in, if it asked.
    pub seat: Option<SpotId>,
    /// The round of its card.
    pub round: u32,
    /// Its card, once dealt one.
    pub card: Option<Card>,
    /// The cells of its card marked so far.
    pub marks: Marks,
    /// Prizes won, over all rounds.
    pub rewards: u64,
    /// The `Sync`s this player answered, this one included: a client that lost some answers
    /// (its gateway died) tells from it how many of its `Sync`s ran.
    #[serde(default)]
    pub syncs: u64,
    /// The number of the last `Sync` answered, this one's.
    #[serde(default)]
    pub last_sync: Option<u64>,
}

/// What a player pushes to its client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Push {
    /// The matchmaker seated the player in this room.
    Seated {
        /// The room the player now plays in.
        room: SpotId,
    },
    /// A new card, with the cells marked already.
    Dealt {
        /// The round the card is for, counting from 1 in its room.
        round: u32,
        /// The player's card for that round.
        card: Card,
        /// The cells of the card marked by the numbers drawn before the player joined.
        marks: Marks,
    },
    /// A number drawn, and whether the player's card has it.
    Drawn {
        /// The round it was drawn in.
        round: u32,
        /// How many numbers have been drawn in the round, this one included.
        position: usize,
        /// The number drawn, 1 to [`NUMBERS`].
        number: u8,
        /// Whether it marked a cell of the player's card.
        marked: bool,
    },
    /// The round ended.
    RoundOver {
        /// The round that ended.
        round: u32,
        /// Who won it.
        winners: Vec<ActorId>,
        /// What each winner got.
        prize: u64,
    },
    /// The player's whole state, asked for with [`PlayerMsg::Sync`].
    State(PlayerView),
}

/// A bingo player's state; all of it moves with the player.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BingoPlayer {
    seat: Option<SpotId>,
    round: u32,
    card: Option<Card>,
    marks: Marks,
    rewards: u64,
    #[serde(default)]
    syncs: u64,
    #[serde(default)]
    last_sync: Option<u64>,
}

impl BingoPlayer {
    fn view(&self) -> PlayerView {
        PlayerView {
            seat: self.seat.clone(),
            round: self.round,
            card: self.card,
            marks: self.marks,
            rewards: self.rewards,
            syncs: self.syncs,
            last_sync: self.last_sync,
        }
    }

    fn find_room(ctx: &Ctx<'_>) {
        let UnitId::Actor(me) = ctx.id() else {
            return;
        };
        match SpotId::new(MATCHMAKER_ID) {
            Ok(id) => tell(
                ctx,
                Target::instance(MATCHMAKER, id),
                MatchMsg::Seat { player: me.clone() },
            ),
            Err(error) => tracing::warn!(%error, "the matchmaker's id is not valid"),
        }
    }

    /// Applies a message; returns what to push to the client, if anything.
    fn apply(&mut self, ctx: &Ctx<'_>, msg: PlayerMsg) -> Option<Push> {
        match msg {
            PlayerMsg::FindRoom => {
                Self::find_room(ctx);
                None
            }
            PlayerMsg::Sync { seq } => {
                self.syncs += 1;
                self.last_sync = Some(seq);
                Some(Push::State(self.view()))
            }
            PlayerMsg::Report => None,
            PlayerMsg::Seated { room } => {
                self.seat = Some(room.clone());
                Some(Push::Seated { room })
            }
            PlayerMsg::Dealt { round, card, drawn } => {
                self.round = round;
                self.card = Some(card);
                self.marks = card.marks(&drawn);
                Some(Push::Dealt {
                    round,
                    card,
                    marks: self.marks,
                })
            }
            PlayerMsg::Drawn {
                round,
                position,
                number,
            } => {
                let cell = self
                    .card
                    .filter(|_| round == self.round)
                    .and_then(|card| card.cell(number));
                if let Some(cell) = cell {
                    self.marks[cell] = true;
                }
                Some(Push::Drawn {
                    round,
                    position,
                    number,
                    marked: cell.is_some(),
                })
            }
            PlayerMsg::RoundOver {
                round,
                winners,
                prize,
            } => {
                if winners
                    .iter()
                    .any(|w| UnitId::Actor(w.clone()) == *ctx.id())
                {
                    self.rewards += prize;
                }
                Some(Push::RoundOver {
                    round,
                    winners,
                    prize,
                })
            }
        }
    }
}

impl Behavior for BingoPlayer {
    type Msg = PlayerMsg;
    type Reply = PlayerView;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: PlayerMsg) -> PlayerView {
        if let Some(push) = self.apply(ctx, msg)
            && ctx.is_bound()
            && let Err(error) = ctx.push(push)
        {
            tracing::debug!(%error, "not pushed");
        }
        self.view()
    }
}

/// What the matchmaker takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MatchMsg {
    /// Seat a player; the answer goes to the player as [`PlayerMsg::Seated`].
    Seat {
        /// The player to seat; the matchmaker tells it its room.
        player: ActorId,
    },
    /// Ask for the matchmaker's report.
    Report,
    /// A room's answer while the matchmaker rebuilds: its members, or why there is none.
    Probed {
        /// Which room (`bingo-{index}`).
        index: u32,
        /// Its members, or the error the request ended with.
        members: Result<u32, MessageError>,
    },
}

/// What the matchmaker knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchReport {
    /// Whether it has rebuilt its view of the rooms since it started.
    pub known: bool,
    /// Seats taken in `bingo-1`, `bingo-2`, ...
    pub rooms: Vec<u32>,
    /// Players waiting for the rebuild to end.
    pub waiting: usize,
}

/// Where the matchmaker is with its view of the rooms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    /// Just built: it has not asked yet.
    Unknown,
    /// Waiting for `bingo-{0}` to answer.
    Probing(u32),
    /// Asked every room.
    Known,
}

/// The matchmaker: seats players in numbered rooms. Its state is rebuilt, not moved.
#[derive(Debug)]
pub struct Matchmaker {
    seats: u32,
    view: View,
    /// Seats taken per room, from `bingo-1` on.
    rooms: Vec<u32>,
    waiting: Vec<ActorId>,
}

impl Matchmaker {
    /// A matchmaker that knows nothing yet; it asks the rooms on its first turn.
    pub fn new(seats: u32) -> Matchmaker {
        Matchmaker {
            seats,
            view: View::Unknown,
            rooms: Vec::new(),
            waiting: Vec::new(),
        }
    }

    fn probe(&mut self, ctx: &Ctx<'_>, index: u32) {
        let room = match room_id(index) {
            Ok(room) => room,
            Err(error) => {
                tracing::warn!(%error, index, "room id not valid; taking the rooms known as all");
                self.known(ctx);
                return;
            }
        };
        self.view = View::Probing(index);
        ctx.request(
            room,
            RoomMsg::Report,
            ASK,
            move |report: Result<RoomReport, MessageError>| MatchMsg::Probed {
                index,
                members: report.map(|r| r.cards.len() as u32),
            },
        );
    }

    fn probed(&mut self, ctx: &Ctx<'_>, index: u32, members: Result<u32, MessageError>) {
        if self.view != View::Probing(index) {
            return;
        }
        match members {
            Ok(members) => self.rooms.push(members),
            Err(MessageError::UnknownId { .. }) => return self.known(ctx),
            Err(error) => {
                // It exists but cannot say: seat no one there.
                tracing::warn!(%error, index, "a room did not answer; counting it as full");
                self.rooms.push(self.seats);
            }
        }
        self.probe(ctx, index + 1);
    }

    fn known(&mut self, ctx: &Ctx<'_>) {
        self.view = View::Known;
        for player in std::mem::take(&mut self.waiting) {
            self.seat(ctx, player);
        }
    }

    fn seat(&mut self, ctx: &Ctx<'_>, player: ActorId) {
        let index = match self.rooms.iter().position(|&taken| taken < self.seats) {
            Some(i) => i,
            None => {
                self.rooms.push(0);
                self.rooms.len() - 1
            }
        };
        self.rooms[index] += 1;
        match room_id(index as u32 + 1) {
            Ok(room) => tell(ctx, &player, PlayerMsg::Seated { room }),
            Err(error) => tracing::warn!(%error, "room id not valid"),
        }
    }
}

impl Behavior for Matchmaker {
    type Msg = MatchMsg;
    type Reply = MatchReport;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: MatchMsg) -> MatchReport {
        if self.view == View::Unknown {
            self.probe(ctx, 1);
        }
        match msg {
            MatchMsg::Seat { player } if self.view == View::Known => self.seat(ctx, player),
            MatchMsg::Seat { player } => self.waiting.push(player),
            MatchMsg::Probed { index, members } => self.probed(ctx, index, members),
            MatchMsg::Report => {}
        }
        MatchReport {
            known: self.view == View::Known,
            rooms: self.rooms.clone(),
            waiting: self.waiting.len(),
        }
    }
}

/// The room factory: SpotWide, any turn boundary, state kept by the serde adapter.
pub fn room(rules: Rules) -> Registration<BingoRoom> {
    Registration::spot(ROOM, move |_| BingoRoom::new(rules)).policy(RelocationPolicy::serde())
}

/// The player factory, state kept by the serde adapter.
pub fn player() -> Registration<BingoPlayer> {
    Registration::actor(PLAYER, |_| BingoPlayer::default()).policy(RelocationPolicy::serde())
}

/// The matchmaker factory: an Instance Spot rebuilt, not moved (`Recreate`).
pub fn matchmaker(rules: Rules) -> Registration<Matchmaker> {
    Registration::instance(MATCHMAKER, move |_| Matchmaker::new(rules.seats))
        .policy(RelocationPolicy::Recreate)
}

/// Registers the room, player and matchmaker factories, with no standby.
pub fn register(registry: &mut Registry, rules: Rules) {
    register_standby(registry, rules, StandbyPolicy::None);
}

/// Registers the room, player and matchmaker factories, rooms keeping a standby of `standby` so
/// that a crash keeps their draws and their players' cards and marks (a player in a room is kept
/// with it). The matchmaker keeps none: it is rebuilt from what its rooms tell it (`Recreate`),
/// so it has no state of its own to keep.
pub fn register_standby(registry: &mut Registry, rules: Rules, standby: StandbyPolicy) {
    registry
        .register(room(rules).standby(standby))
        .register(player())
        .register(matchmaker(rules));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spot(id: &str) -> SpotId {
        SpotId::new(id).expect("valid id")
    }

    #[test]
    fn a_card_has_five_distinct_numbers_per_column_from_its_range_and_a_free_centre() {
        let card = card(&spot("bingo-1"), 1, &ActorId::new("p").expect("valid id"));
        for column in 0..5 {
            let mut numbers: Vec<u8> = (0..5)
                .map(|row| card.cells[row * 5 + column])
                .filter(|&n| n != 0)
                .collect();
            let low = column as u8 * 15 + 1;
            assert!(numbers.iter().all(|n| (low..low + 15).contains(n)));
            numbers.dedup();
            assert_eq!(numbers.len(), if column == 2 { 4 } else { 5 });
        }
        assert_eq!(card.cells[CENTRE], 0);
    }

    #[test]
    fn the_draw_order_holds_every_number_once() {
        let mut order = draw_order(&spot("bingo-1"), 3);
        assert_ne!(order, draw_order(&spot("bingo-1"), 4));
        order.sort_unstable();
        assert_eq!(order, (1..=NUMBERS).collect::<Vec<_>>());
    }

    #[test]
    fn rows_columns_and_both_diagonals_win_and_nothing_less() {
        let lines: [[usize; 5]; 4] = [
            [5, 6, 7, 8, 9],
            [2, 7, 12, 17, 22],
            [0, 6, 12, 18, 24],
            [4, 8, 12, 16, 20],
        ];
        for line in lines {
            let mut marks = [false; 25];
            for cell in line {
                marks[cell] = true;
            }
            assert!(Card::wins(&marks), "{line:?}");
            marks[line[0]] = false;
            assert!(!Card::wins(&marks), "{line:?} less one");
        }
    }

    #[test]
    fn marks_are_the_centre_and_the_drawn_numbers_on_the_card() {
        let card = card(&spot("bingo-1"), 1, &ActorId::new("p").expect("valid id"));
        let on_card = card.cells[0];
        let marks = card.marks(&[on_card, 0]);
        let marked: Vec<usize> = (0..25).filter(|&c| marks[c]).collect();
        assert_eq!(marked, vec![0, CENTRE]);
    }
}
