//! FPS round: a SpotWide room that simulates at 30 Hz and moves only between rounds.
//!
//! A round is a start tick, the players' inputs, and a settlement tick. Between those the room holds
//! a half-played round, so it is registered `ApplicationSignaled`: it calls `relocation_ready_defer`
//! in the settlement tick only, and starts the next round in `on_relocation_ready_completed`, on
//! whichever node it runs by then. Scores and the round number move with the serde adapter.
//!
//! A client binds its player Actor, sends [`PlayerMsg::Input`] with numbered inputs, and receives a
//! [`Snapshot`] every tick; [`Watch`] holds the checks a bot makes on them.

use std::collections::BTreeMap;
use std::time::Duration;

use ferry::{
    ActorId, Behavior, Ctx, NodeId, OverrunPolicy, ReadinessMode, ReadyOutcome, Registration,
    Registry, RelocationPolicy, SpotId, StandbyPolicy, Tick, UnitId,
};
use serde::{Deserialize, Serialize};

use crate::seed;

/// The factory name of FPS rooms.
pub const ROOM: &str = "fps-room";
/// The factory name of FPS players.
pub const PLAYER: &str = "fps-player";

/// The simulation period: 30 ticks a second.
pub const TICK: Duration = Duration::from_nanos(1_000_000_000 / 30);

/// The name of the simulation timer.
const SIM: &str = "sim";

/// How a room plays; fixed when the room is created and kept across moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// Ticks from a round's start tick to its settlement tick.
    pub round_ticks: u64,
}

impl Default for Rules {
    /// Two-second rounds: a move waits at most that long for the round to settle, while the
    /// room plays on and the players' inputs keep flowing.
    fn default() -> Self {
        Rules { round_ticks: 60 }
    }
}

/// One input of a player, numbered by its client from 0 up, one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Input {
    /// The input's number: 0 for a player's first, then one more each time.
    pub seq: u64,
    /// Where the shot aims, in degrees.
    pub aim: u16,
}

/// Which tick of its round a snapshot was made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// The round's first tick.
    Start,
    /// A tick in the middle of the round.
    Play,
    /// The round's last tick: it is settled, and the room may move before the next one starts.
    Settle,
}

/// What the room applied of one player's inputs: enough for a bot to prove none was lost,
/// applied twice or applied out of order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputLog {
    /// Inputs applied.
    pub applied: u64,
    /// The number of the last input applied.
    pub last_seq: Option<u64>,
    /// Inputs whose number was not one more than the one applied before (the first must be 0).
    pub out_of_order: u64,
}

/// A player's score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Score {
    /// Points from hits, over all rounds.
    pub points: u64,
    /// Rounds won (most points in the round; ties all win).
    pub wins: u32,
}

/// What a player's client receives every tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The server tick: the slot of the room's 30 Hz timer, counting on across moves. A gap of more
    /// than one between two snapshots means the room missed ticks.
    pub tick: u64,
    /// The round, from 1.
    pub round: u32,
    /// Which tick of the round this is.
    pub phase: Phase,
    /// The node the room ran on when it made this snapshot.
    pub node: NodeId,
    /// What the room applied of this player's inputs.
    pub inputs: InputLog,
    /// Every player's score.
    pub scores: BTreeMap<ActorId, Score>,
    /// Which life of the room made it: the same across moves, new when a crash rebuilt the room
    /// fresh. A client that sees it change knows the state started again.
    #[serde(default)]
    pub life: u64,
}

/// What a room takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RoomMsg {
    /// A player's input, forwarded by its Actor.
    Input {
        /// The player whose input it is.
        from: ActorId,
        /// The player's input, as its client sent it.
        input: Input,
    },
    /// Ask for the room's report.
    Report,
}

/// A room's state as a whole, for servers and tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomReport {
    /// The round being played (or just settled).
    pub round: u32,
    /// Each player's inputs and score.
    pub players: BTreeMap<ActorId, (InputLog, Score)>,
    /// The rounds after whose settlement the room arrived on another node, in order.
    pub moved_after: Vec<u32>,
}

/// One player as the room keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Player {
    inputs: InputLog,
    score: Score,
    round_points: u64,
}

/// An FPS room's state; all of it moves with the room.
#[derive(Debug, Serialize, Deserialize)]
pub struct FpsRoom {
    rules: Rules,
    round: u32,
    /// The tick the current round started at; `None` until its start tick ran.
    started_at: Option<u64>,
    players: BTreeMap<ActorId, Player>,
    moved_after: Vec<u32>,
    /// When this life of the room began, in nanoseconds since the Unix epoch: it moves with the
    /// state, and a room built fresh (created, or rebuilt after a crash) gets a new one.
    #[serde(default)]
    life: u64,
}

impl FpsRoom {
    /// A room that has not started its first round.
    pub fn new(rules: Rules) -> FpsRoom {
        let life = crate::new_life();
        FpsRoom {
            rules,
            round: 1,
            started_at: None,
            players: BTreeMap::new(),
            moved_after: Vec::new(),
            life,
        }
    }

    fn apply(&mut self, room: &SpotId, from: ActorId, input: Input) {
        let gained = points(room, &from, &input);
        let player = self.players.entry(from).or_default();
        let log = &mut player.inputs;
        if input.seq != log.last_seq.map_or(0, |last| last + 1) {
            log.out_of_order += 1;
        }
        log.applied += 1;
        log.last_seq = Some(input.seq);
        player.score.points += gained;
        player.round_points += gained;
    }

    /// Gives the round to the players with the most points in it, if anyone scored.
    fn settle(&mut self) {
        let best = self.players.values().map(|p| p.round_points).max();
        for player in self.players.values_mut() {
            if best.is_some_and(|best| best > 0 && player.round_points == best) {
                player.score.wins += 1;
            }
            player.round_points = 0;
        }
    }

    fn broadcast(&self, ctx: &Ctx<'_>, tick: u64, phase: Phase) {
        let scores: BTreeMap<ActorId, Score> = self
            .players
            .iter()
            .map(|(id, p)| (id.clone(), p.score))
            .collect();
        for member in ctx.members() {
            let snapshot = Snapshot {
                tick,
                round: self.round,
                phase,
                node: ctx.node().id().clone(),
                inputs: self
                    .players
                    .get(member)
                    .map(|p| p.inputs)
                    .unwrap_or_default(),
                scores: scores.clone(),
                life: self.life,
            };
            if let Err(error) = ctx.tell(member, PlayerMsg::Snapshot(snapshot)) {
                tracing::debug!(%member, %error, "snapshot not delivered");
            }
        }
    }
}

/// The points an input scores in a room: decided by a hash of the room, the player and the input,
/// so that it does not depend on when the input arrives and a bot can work out its own score.
pub fn points(room: &SpotId, player: &ActorId, input: &Input) -> u64 {
    let h = seed::hash(&[
        room.as_str().as_bytes(),
        player.as_str().as_bytes(),
        &input.seq.to_le_bytes(),
        &input.aim.to_le_bytes(),
    ]);
    match h % 10 {
        0 => 3,
        1..=3 => 1,
        _ => 0,
    }
}

impl Behavior for FpsRoom {
    type Msg = RoomMsg;
    type Reply = RoomReport;

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timer(SIM, TICK, OverrunPolicy::SkipLateTicks);
    }

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: RoomMsg) -> RoomReport {
        if let (RoomMsg::Input { from, input }, UnitId::Spot(room)) = (msg, ctx.id()) {
            self.apply(room, from, input);
        }
        RoomReport {
            round: self.round,
            players: self
                .players
                .iter()
                .map(|(id, p)| (id.clone(), (p.inputs, p.score)))
                .collect(),
            moved_after: self.moved_after.clone(),
        }
    }

    fn on_tick(&mut self, ctx: &mut Ctx<'_>, tick: &Tick) {
        let now = tick.scheduled_index;
        let phase = match self.started_at {
            None => {
                self.started_at = Some(now);
                Phase::Start
            }
            Some(start) if now >= start + self.rules.round_ticks => {
                self.settle();
                Phase::Settle
            }
            Some(_) => Phase::Play,
        };
        self.broadcast(ctx, now, phase);
        if phase == Phase::Settle
            && let Err(error) = ctx.relocation_ready_defer()
        {
            tracing::warn!(%error, "an FPS room must be registered ApplicationSignaled");
        }
    }

    fn on_member_joined(&mut self, _ctx: &mut Ctx<'_>, actor: &ActorId) {
        self.players.entry(actor.clone()).or_default();
    }

    fn on_relocation_ready_completed(&mut self, _ctx: &mut Ctx<'_>, outcome: ReadyOutcome) {
        if outcome == ReadyOutcome::Relocated {
            self.moved_after.push(self.round);
        }
        self.round += 1;
        self.started_at = None;
    }
}

/// What a player Actor takes: inputs from its client, snapshots from its room.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PlayerMsg {
    /// An input from the player's client, passed on to its room.
    Input(Input),
    /// A snapshot from the room, pushed to the player's client.
    Snapshot(Snapshot),
}

/// A player: the link between a client and its room. It keeps no state of its own.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FpsPlayer;

impl Behavior for FpsPlayer {
    type Msg = PlayerMsg;
    type Reply = ();

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: PlayerMsg) {
        match msg {
            PlayerMsg::Input(input) => {
                let (Some(room), UnitId::Actor(me)) = (ctx.spot(), ctx.id()) else {
                    tracing::debug!(player = %ctx.id(), "input dropped: not in a room");
                    return;
                };
                let input = RoomMsg::Input {
                    from: me.clone(),
                    input,
                };
                if let Err(error) = ctx.tell(room, input) {
                    tracing::debug!(%room, %error, "input not delivered");
                }
            }
            PlayerMsg::Snapshot(snapshot) => {
                if let Err(error) = ctx.push(snapshot) {
                    tracing::debug!(%error, "snapshot not pushed");
                }
            }
        }
    }
}

/// The room factory: SpotWide, `ApplicationSignaled`, state kept by the serde adapter.
pub fn room(rules: Rules) -> Registration<FpsRoom> {
    Registration::spot(ROOM, move |_| FpsRoom::new(rules))
        .readiness(ReadinessMode::ApplicationSignaled)
        .policy(RelocationPolicy::serde())
}

/// The player factory; players move with their room.
pub fn player() -> Registration<FpsPlayer> {
    Registration::actor(PLAYER, |_| FpsPlayer).policy(RelocationPolicy::serde())
}

/// Registers the room and the player factories, with no standby.
pub fn register(registry: &mut Registry, rules: Rules) {
    register_standby(registry, rules, StandbyPolicy::None);
}

/// Registers the room and the player factories, rooms keeping a standby of `standby` (with their
/// players), so that a crash of a room's node keeps its round.
pub fn register_standby(registry: &mut Registry, rules: Rules, standby: StandbyPolicy) {
    registry
        .register(room(rules).standby(standby))
        .register(player());
}

/// Where a client saw its room move: the node changed between two snapshots in a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenMove {
    /// The node of the snapshot before.
    pub from: NodeId,
    /// The node of the snapshot after.
    pub to: NodeId,
    /// The round and phase of the snapshot before.
    pub before: (u32, Phase),
    /// The round and phase of the snapshot after.
    pub after: (u32, Phase),
}

/// How a player's inputs fared, from the room's log and what its client sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputCheck {
    /// Inputs sent and never applied.
    pub lost: u64,
    /// Inputs applied more often than sent.
    pub duplicated: u64,
    /// Inputs applied out of order.
    pub reordered: u64,
}

/// The checks a client makes on the snapshots of its player, one snapshot at a time.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    /// Snapshots seen.
    pub snapshots: u64,
    /// The latest one.
    pub last: Option<Snapshot>,
    /// The longest step between the ticks of two snapshots in a row (1 when no tick was missed).
    pub longest_gap: u64,
    /// Snapshots that went back: a tick not above the one before, a lower round, fewer inputs
    /// applied, or a player with fewer points or wins.
    pub went_back: u64,
    /// Every change of node seen.
    pub moves: Vec<SeenMove>,
}

impl Watch {
    /// Takes the next snapshot.
    pub fn see(&mut self, snapshot: Snapshot) {
        self.snapshots += 1;
        if let Some(last) = &self.last {
            let lower_score = last.scores.iter().any(|(player, before)| {
                snapshot
                    .scores
                    .get(player)
                    .is_none_or(|now| now.points < before.points || now.wins < before.wins)
            });
            if snapshot.tick <= last.tick
                || snapshot.round < last.round
                || snapshot.inputs.applied < last.inputs.applied
                || lower_score
            {
                self.went_back += 1;
            }
            self.longest_gap = self
                .longest_gap
                .max(snapshot.tick.saturating_sub(last.tick));
            if snapshot.node != last.node {
                self.moves.push(SeenMove {
                    from: last.node.clone(),
                    to: snapshot.node.clone(),
                    before: (last.round, last.phase),
                    after: (snapshot.round, snapshot.phase),
                });
            }
        }
        self.last = Some(snapshot);
    }

    /// Whether the room has applied the inputs numbered below `sent`, by the latest snapshot.
    pub fn caught_up(&self, sent: u64) -> bool {
        let applied = self.last.as_ref().and_then(|s| s.inputs.last_seq);
        sent == 0 || applied.is_some_and(|seq| seq + 1 >= sent)
    }

    /// How the `sent` inputs fared, by the latest snapshot: all zero when the room applied each of
    /// them once, in order. Ask once [`Watch::caught_up`] says so.
    pub fn inputs(&self, sent: u64) -> InputCheck {
        let log = self.last.as_ref().map(|s| s.inputs).unwrap_or_default();
        InputCheck {
            lost: sent.saturating_sub(log.applied),
            duplicated: log.applied.saturating_sub(sent),
            reordered: log.out_of_order,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(id: &str) -> ActorId {
        ActorId::new(id).expect("valid id")
    }

    fn input(seq: u64) -> Input {
        Input { seq, aim: 90 }
    }

    #[test]
    fn inputs_out_of_order_are_counted_and_scores_follow_the_points() {
        let room = SpotId::new("arena").expect("valid id");
        let mut fps = FpsRoom::new(Rules::default());
        let p = actor("p");
        for seq in [0, 1, 3, 2, 2] {
            fps.apply(&room, p.clone(), input(seq));
        }
        let player = &fps.players[&p];
        assert_eq!(player.inputs.applied, 5);
        assert_eq!(player.inputs.last_seq, Some(2));
        // 3 after 1, 2 after 3, 2 after 2.
        assert_eq!(player.inputs.out_of_order, 3);
        let expected: u64 = [0, 1, 3, 2, 2]
            .into_iter()
            .map(|seq| points(&room, &p, &input(seq)))
            .sum();
        assert_eq!(player.score.points, expected);
    }

    #[test]
    fn a_round_goes_to_its_top_scorers_and_no_one_wins_a_round_without_points() {
        let mut fps = FpsRoom::new(Rules::default());
        for (id, round_points) in [("a", 3), ("b", 3), ("c", 1)] {
            let player = fps.players.entry(actor(id)).or_default();
            player.round_points = round_points;
        }
        fps.settle();
        let wins: Vec<u32> = fps.players.values().map(|p| p.score.wins).collect();
        assert_eq!(wins, vec![1, 1, 0]);
        fps.settle();
        let wins: Vec<u32> = fps.players.values().map(|p| p.score.wins).collect();
        assert_eq!(wins, vec![1, 1, 0]);
    }

    fn snapshot(tick: u64, round: u32, phase: Phase, node: &str, points: u64) -> Snapshot {
        Snapshot {
            tick,
            round,
            phase,
            node: NodeId::new(node).expect("valid id"),
            inputs: InputLog::default(),
            scores: [(actor("p"), Score { points, wins: 0 })].into(),
            life: 1,
        }
    }

    #[test]
    fn a_watch_sees_gaps_moves_and_anything_that_goes_back() {
        let mut watch = Watch::default();
        watch.see(snapshot(7, 1, Phase::Settle, "a", 5));
        watch.see(snapshot(9, 2, Phase::Start, "b", 5));
        assert_eq!((watch.longest_gap, watch.went_back), (2, 0));
        let seen = SeenMove {
            from: NodeId::new("a").expect("valid id"),
            to: NodeId::new("b").expect("valid id"),
            before: (1, Phase::Settle),
            after: (2, Phase::Start),
        };
        assert_eq!(watch.moves, vec![seen]);
        watch.see(snapshot(10, 2, Phase::Play, "b", 4));
        watch.see(snapshot(10, 2, Phase::Play, "b", 4));
        watch.see(snapshot(11, 1, Phase::Play, "b", 4));
        assert_eq!((watch.snapshots, watch.went_back), (5, 3));
    }

    #[test]
    fn points_do_not_depend_on_anything_but_the_room_the_player_and_the_input() {
        let room = SpotId::new("arena").expect("valid id");
        let all: Vec<u64> = (0..1000)
            .map(|seq| points(&room, &actor("p"), &input(seq)))
            .collect();
        let again: Vec<u64> = (0..1000)
            .map(|seq| points(&room, &actor("p"), &input(seq)))
            .collect();
        assert_eq!(all, again);
        assert!(all.contains(&0) && all.contains(&1) && all.contains(&3));
    }
}
