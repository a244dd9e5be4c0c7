//! Bot players: real game clients that play the sample games through the client gateways and
//! check what they see. The demo runs them against its in-process cluster; `ferry bots` runs them
//! against the gateways of running `ferry node` processes.
//!
//! Layout:
//! - [`checks`]: numbered streams and tick gaps, checked one observation at a time.
//! - [`player`]: one bot: connect, bind, send numbered inputs, read pushes, settle, tally.
//! - [`games`]: how a bot plays each sample game, and the ids of its rooms and players.
//! - [`provision`]: creating the rooms and players on `ferry node` processes.
//! - [`cmd`]: the `ferry bots` command.

pub mod checks;
pub mod cmd;
pub mod games;
pub mod player;
pub mod provision;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use ferry::ActorId;
use ferry::client::{ClientConfig, Reconnect};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::checks::{Faults, Outcome};
use self::games::{GameKind, Past};
use self::player::{RoomRebuilt, Tally};
use crate::percentiles::{Durations, Percentiles};

/// What a client needs to reach a cluster's gateways.
#[derive(Debug, Clone)]
pub struct GatewayAccess {
    /// The gateway addresses.
    pub servers: Vec<SocketAddr>,
    /// The DNS name the gateways' certificate carries.
    pub server_name: String,
    /// The CA (or self-signed certificate) the gateways' certificate chains to, as PEM.
    pub ca_pem: String,
    /// The token the gateways' authenticator accepts.
    pub token: Vec<u8>,
}

impl GatewayAccess {
    /// A client config for bot number `n`: bots start on different gateways, so the load spreads,
    /// and move on to the next one if theirs goes away.
    pub fn client(&self, n: usize) -> ClientConfig {
        let mut servers = self.servers.clone();
        if !servers.is_empty() {
            let first = n % servers.len();
            servers.rotate_left(first);
        }
        let mut config = ClientConfig::new(
            servers,
            self.server_name.clone(),
            self.ca_pem.clone(),
            self.token.clone(),
        );
        config.reconnect = Some(Reconnect {
            min_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(500),
            attempts: 10,
        });
        config
    }
}

/// What all the bots saw, as the reports print and write it.
#[derive(Debug, Clone, Serialize)]
pub struct BotsSummary {
    /// Bots that played.
    pub players: u64,
    /// Inputs they sent.
    pub inputs_sent: u64,
    /// Inputs the server reported applied.
    pub inputs_applied: u64,
    /// Inputs the server lost, applied twice, or applied out of order (all must be zero).
    pub inputs: Faults,
    /// Inputs the clients could not deliver: their gateway died before it confirmed them. They
    /// were never applied; that is the dead gateway's doing, not a fault of the server.
    pub inputs_undelivered: u64,
    /// Inputs that ran, whose answers went to a session that died with its gateway while the
    /// client failed over: the bots could not check them (chat lines; never counted lost).
    pub answers_lost_with_gateways: u64,
    /// Inputs lost with rooms that crashed and were rebuilt (their state restarted) or went back
    /// to a checkpoint: no incarnation of the room applied them.
    pub inputs_lost_in_rebuilds: u64,
    /// Inputs the gateway confirmed (or whose answer a bot received) whose effect their room no
    /// longer shows after a crash: 0 in rooms that keep a confirmed standby, unless the standby
    /// died too and the room was rebuilt from nothing.
    pub confirmed_inputs_lost: u64,
    /// Inputs sent but never confirmed that their room does not show after a crash: what a crash
    /// may take under any policy.
    pub unconfirmed_inputs_rolled_back: u64,
    /// How the rooms came through crashes, each counted once by the worst any of its bots saw.
    pub room_outcomes: RoomOutcomes,
    /// The rooms back after a crash while the bots played (rebuilt, or from a checkpoint): each
    /// comeback once, with the node it came back on and when (the first bot to see it).
    pub rooms_rebuilt: Vec<RoomRebuilt>,
    /// The bots that saw inputs lost, applied twice or out of order, each with its room, so an
    /// operator can look that room up in the nodes' logs.
    pub faulty_players: Vec<PlayerFaults>,
    /// Pushes whose content the game's rules do not explain, such as a bingo mark no draw made
    /// (must be zero).
    pub mismatches: u64,
    /// Pushes received.
    pub pushes: u64,
    /// Server ticks received, and the time between consecutive ones each bot saw.
    pub tick_gaps: Percentiles,
    /// The longest time between two server ticks any bot saw, in milliseconds.
    pub longest_tick_gap_ms: f64,
    /// Bots whose client reconnected during the run.
    pub reconnected: u64,
    /// Times a bot's Actor was unbound and the bot bound it again.
    pub rebound: u64,
    /// Bots that stopped early, and why.
    pub errors: Vec<String>,
}

impl BotsSummary {
    /// Sums the tallies of every bot.
    pub fn of(tallies: &[Tally]) -> BotsSummary {
        let mut inputs = Faults::default();
        let mut gaps = Durations::new();
        let mut longest = Duration::ZERO;
        for tally in tallies {
            inputs.add(tally.faults);
            gaps.merge(&tally.ticks.gaps);
            longest = longest.max(tally.ticks.longest);
        }
        BotsSummary {
            players: tallies.len() as u64,
            inputs_sent: tallies.iter().map(|t| t.sent).sum(),
            inputs_applied: tallies.iter().map(|t| t.applied).sum(),
            inputs,
            inputs_undelivered: tallies.iter().map(|t| t.undelivered).sum(),
            answers_lost_with_gateways: tallies.iter().map(|t| t.answers_lost).sum(),
            inputs_lost_in_rebuilds: tallies.iter().map(|t| t.lost_in_rebuilds).sum(),
            confirmed_inputs_lost: tallies.iter().map(|t| t.rollback.confirmed_lost).sum(),
            unconfirmed_inputs_rolled_back: tallies
                .iter()
                .map(|t| t.rollback.unconfirmed_rolled_back)
                .sum(),
            room_outcomes: RoomOutcomes::of(tallies),
            rooms_rebuilt: rebuilt_rooms(tallies),
            faulty_players: tallies
                .iter()
                .filter(|t| !t.faults.is_clean())
                .map(|t| PlayerFaults {
                    player: t.player.clone(),
                    room: t.room.clone(),
                    faults: t.faults,
                    room_rebuilt: !t.rebuilds.is_empty(),
                })
                .collect(),
            mismatches: tallies.iter().map(|t| t.mismatches).sum(),
            pushes: tallies.iter().map(|t| t.pushes).sum(),
            tick_gaps: gaps.summary(),
            longest_tick_gap_ms: crate::percentiles::ms(longest),
            reconnected: tallies.iter().filter(|t| t.connects > 1).count() as u64,
            rebound: tallies.iter().map(|t| t.rebinds).sum(),
            errors: tallies.iter().filter_map(|t| t.error.clone()).collect(),
        }
    }

    /// Whether every input arrived once and in order, every push made sense, and every bot
    /// played to the end.
    pub fn is_clean(&self) -> bool {
        self.inputs.is_clean() && self.mismatches == 0 && self.errors.is_empty()
    }

    /// What crashes took, for a person: `0 confirmed inputs lost, 3 unconfirmed rolled back;
    /// rooms: 40 kept, 4 back to a checkpoint, 1 rebuilt from nothing`.
    pub fn crash_text(&self) -> String {
        let r = self.room_outcomes;
        format!(
            "{} confirmed inputs lost, {} unconfirmed rolled back; rooms: {} kept, {} back to a \
             checkpoint, {} rebuilt from nothing",
            self.confirmed_inputs_lost,
            self.unconfirmed_inputs_rolled_back,
            r.kept,
            r.checkpoint,
            r.rebuilt
        )
    }

    /// The rooms back after a crash, for a person: `none`, or `fps-0 on bravo after 12.3 s,
    /// chat-1 after 14.0 s from a checkpoint` (the node where the game's pushes name it).
    pub fn rebuilt_text(&self) -> String {
        if self.rooms_rebuilt.is_empty() {
            return "none".to_owned();
        }
        self.rooms_rebuilt
            .iter()
            .map(|r| {
                let on = r
                    .node
                    .as_ref()
                    .map(|node| format!(" on {node}"))
                    .unwrap_or_default();
                let from = if r.outcome == Outcome::Checkpoint {
                    " from a checkpoint"
                } else {
                    ""
                };
                format!("{}{on} after {:.1} s{from}", r.room, r.after_s)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What went wrong, in one sentence, if anything did.
    pub fn problem(&self) -> Option<String> {
        if self.is_clean() {
            return None;
        }
        let mut parts = Vec::new();
        let Faults {
            lost,
            duplicated,
            reordered,
        } = self.inputs;
        if !self.inputs.is_clean() {
            let rooms: BTreeSet<&str> = self
                .faulty_players
                .iter()
                .map(|p| p.room.as_str())
                .collect();
            parts.push(format!(
                "the server lost {lost} inputs, applied {duplicated} twice and {reordered} out of order; rooms with a fault: {} (first: {})",
                rooms.len(),
                rooms.first().copied().unwrap_or("none"),
            ));
        }
        if self.mismatches > 0 {
            parts.push(format!(
                "{} pushes disagreed with the game's rules",
                self.mismatches
            ));
        }
        if let Some(first) = self.errors.first() {
            parts.push(format!(
                "{} bots stopped early (first: {first})",
                self.errors.len()
            ));
        }
        Some(parts.join("; "))
    }
}

/// How many rooms came through crashes in each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RoomOutcomes {
    /// Rooms whose state nothing took back.
    pub kept: u64,
    /// Rooms that went back to their standby's checkpoint.
    pub checkpoint: u64,
    /// Rooms rebuilt from nothing.
    pub rebuilt: u64,
}

impl RoomOutcomes {
    /// Each room once, by the worst outcome any of its bots saw (a bot that came in late may
    /// have missed a comeback the others saw).
    pub fn of(tallies: &[Tally]) -> RoomOutcomes {
        let mut rooms: BTreeMap<&str, Outcome> = BTreeMap::new();
        for tally in tallies {
            let worst = rooms.entry(&tally.room).or_default();
            *worst = (*worst).max(tally.outcome);
        }
        let mut counts = RoomOutcomes::default();
        for outcome in rooms.into_values() {
            match outcome {
                Outcome::Kept => counts.kept += 1,
                Outcome::Checkpoint => counts.checkpoint += 1,
                Outcome::Rebuilt => counts.rebuilt += 1,
            }
        }
        counts
    }
}

/// One bot's faults, as the report lists them.
#[derive(Debug, Clone, Serialize)]
pub struct PlayerFaults {
    /// The bot's Actor.
    pub player: String,
    /// The id of the room the bot played in.
    pub room: String,
    /// What it saw lost, doubled or out of order.
    pub faults: Faults,
    /// Whether its room was rebuilt after a crash while it played.
    pub room_rebuilt: bool,
}

/// Every room rebuild the bots saw, each once, the earliest sighting first. The bots of a room
/// all see its rebuilds, in the same order: its first rebuild is each one's first.
fn rebuilt_rooms(tallies: &[Tally]) -> Vec<RoomRebuilt> {
    let mut earliest: BTreeMap<(&str, usize), &RoomRebuilt> = BTreeMap::new();
    for tally in tallies {
        for (nth, rebuilt) in tally.rebuilds.iter().enumerate() {
            let seen = earliest.entry((&rebuilt.room, nth)).or_insert(rebuilt);
            if rebuilt.after_s < seen.after_s {
                *seen = rebuilt;
            }
        }
    }
    let mut rooms: Vec<RoomRebuilt> = earliest.into_values().cloned().collect();
    rooms.sort_by(|a, b| a.after_s.total_cmp(&b.after_s));
    rooms
}

/// Bots playing together until they are told to stop.
pub struct Team {
    stop: watch::Sender<bool>,
    bots: Vec<JoinHandle<Tally>>,
}

impl Default for Team {
    fn default() -> Self {
        Self::new()
    }
}

impl Team {
    /// A team with no bot yet.
    pub fn new() -> Self {
        Team {
            stop: watch::Sender::new(false),
            bots: Vec::new(),
        }
    }

    /// Starts a bot playing `game` as Actor `me`, whose past is `past`, connecting with `config`.
    pub fn add(&mut self, game: GameKind, config: ClientConfig, me: ActorId, past: Past) {
        let stopped = self.stop.subscribe();
        self.bots
            .push(tokio::spawn(game.play(config, me, past, stopped)));
    }

    /// How many bots play.
    pub fn size(&self) -> usize {
        self.bots.len()
    }

    /// Tells every bot to stop sending, and returns each one's tally once it settled.
    pub async fn finish(self) -> Vec<Tally> {
        self.stop.send_replace(true);
        let mut tallies = Vec::with_capacity(self.bots.len());
        for bot in self.bots {
            tallies.push(bot.await.unwrap_or_else(|error| Tally {
                error: Some(format!("a bot task failed: {error}")),
                ..Tally::default()
            }));
        }
        tallies
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(player: &str, room: &str, lost: u64) -> Tally {
        Tally {
            player: player.to_owned(),
            room: room.to_owned(),
            sent: 10,
            faults: Faults {
                lost,
                ..Faults::default()
            },
            ..Tally::default()
        }
    }

    #[test]
    fn the_summary_counts_each_room_once_by_its_worst_comeback_and_splits_what_crashes_took() {
        let with = |player: &str, room: &str, outcome, confirmed_lost, unconfirmed| Tally {
            outcome,
            rollback: checks::Rollback {
                confirmed_lost,
                unconfirmed_rolled_back: unconfirmed,
            },
            ..tally(player, room, 0)
        };
        let tallies = [
            with("fps-0-p0", "fps-0", Outcome::Kept, 0, 0),
            with("fps-0-p1", "fps-0", Outcome::Checkpoint, 0, 2),
            with("chat-0-p0", "chat-0", Outcome::Kept, 0, 0),
            with("bingo-0-p0", "bingo-0", Outcome::Rebuilt, 7, 1),
            with("bingo-0-p1", "bingo-0", Outcome::Checkpoint, 0, 0),
        ];
        let summary = BotsSummary::of(&tallies);
        assert_eq!(
            summary.room_outcomes,
            RoomOutcomes {
                kept: 1,
                checkpoint: 1,
                rebuilt: 1
            }
        );
        assert_eq!(
            (
                summary.confirmed_inputs_lost,
                summary.unconfirmed_inputs_rolled_back
            ),
            (7, 3)
        );
        assert_eq!(
            summary.crash_text(),
            "7 confirmed inputs lost, 3 unconfirmed rolled back; rooms: 1 kept, 1 back to a \
             checkpoint, 1 rebuilt from nothing"
        );
    }

    #[test]
    fn the_summary_names_each_bot_that_saw_a_fault_and_its_room() {
        let tallies = [
            tally("chat-0-p0", "chat-0", 0),
            tally("chat-1-p0", "chat-1", 2),
            tally("chat-1-p1", "chat-1", 1),
            tally("fps-2-p0", "fps-2", 0),
        ];
        let summary = BotsSummary::of(&tallies);
        assert_eq!(summary.inputs.lost, 3);
        let named: Vec<(&str, &str, u64)> = summary
            .faulty_players
            .iter()
            .map(|p| (p.player.as_str(), p.room.as_str(), p.faults.lost))
            .collect();
        assert_eq!(
            named,
            [("chat-1-p0", "chat-1", 2), ("chat-1-p1", "chat-1", 1)]
        );
        let problem = summary.problem().expect("a fault");
        assert!(
            problem.contains("the server lost 3 inputs")
                && problem.contains("rooms with a fault: 1 (first: chat-1)"),
            "{problem}"
        );
    }
}
