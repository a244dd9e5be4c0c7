//! One bot player: a real game client that connects to a gateway, binds its player Actor, sends
//! numbered inputs at a steady rate, reads every push, and checks what it sees.

use std::time::{Duration, Instant};

use ferry::ActorId;
use ferry::client::{Client, ClientConfig, ClientError, ClientEvent};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::checks::{Faults, Incarnations, Outcome, Rollback, TickGaps};

/// A game as a bot plays it: the inputs it sends, and the checks it makes on what comes back.
pub trait Game: Send + 'static {
    /// What the bot sends its player Actor.
    type Input: Serialize;
    /// What the player Actor pushes to the bot.
    type Push: DeserializeOwned;

    /// The input numbered `seq` (0 for the first, then one more each time).
    fn input(&mut self, seq: u64) -> Self::Input;

    /// Takes a push; returns the server tick it was made at, for games that push every tick.
    fn read(&mut self, push: Self::Push) -> Option<u64>;

    /// Whether the server has applied the first `sent` inputs, by what it pushed so far.
    fn caught_up(&self, sent: u64) -> bool;

    /// How the first `sent` inputs fared, by what the server pushed so far.
    fn faults(&self, sent: u64) -> Faults;

    /// Pushes whose content the game's rules do not explain (for games whose state a bot can
    /// work out on its own).
    fn mismatches(&self) -> u64 {
        0
    }

    /// The incarnations of the room seen so far: its rebuilds after a crash (its state
    /// restarted), and the inputs lost with the incarnations that died.
    fn incarnations(&self) -> &Incarnations;

    /// The client reported `inputs` inputs it could not vouch for because their binding ended:
    /// the session died (a `Reconnected` follows), the Actor was unbound (an `Unbound` follows),
    /// or the node running it left (a `Rebound` follows once the gateway bound it again). Either
    /// way the pushes made for the ended binding never come, as after a rebind.
    fn undelivered(&mut self, inputs: u64) {
        if inputs > 0 {
            self.rebound();
        }
    }

    /// The player Actor is bound again, on a new session or binding: what it pushed meanwhile
    /// went to the one that ended, and the bot never sees it.
    fn rebound(&mut self) {}

    /// Inputs whose fate the bot could not see because the pushes that answer them went to a
    /// session that ended (for games whose checks read answers, not a running count).
    fn unseen(&self) -> u64 {
        0
    }
}

/// A room that came back after a crash, as a report names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoomRebuilt {
    /// The room's id.
    pub room: String,
    /// Whether it went back to a checkpoint or was rebuilt from nothing.
    pub outcome: Outcome,
    /// The node it came back on, for games whose pushes name it (FPS snapshots do).
    pub node: Option<String>,
    /// When a bot first saw it back, in seconds from that bot's start.
    pub after_s: f64,
}

/// How a bot plays.
#[derive(Debug, Clone)]
pub struct Pace {
    /// Time between two inputs.
    pub every: Duration,
    /// How long to wait, once the bot stopped sending, for the server to apply its last inputs
    /// before counting the rest as lost.
    pub settle: Duration,
}

/// What one bot saw.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// The bot's Actor.
    pub player: String,
    /// The room it played in, as the report names it.
    pub room: String,
    /// Inputs sent.
    pub sent: u64,
    /// Inputs the server reported applied (first reports only).
    pub applied: u64,
    /// Inputs the server lost, applied twice, or applied out of order (inputs the client could
    /// not deliver are not counted lost here).
    pub faults: Faults,
    /// Inputs the client wrote into a connection that died before they could arrive (its
    /// gateway died): never applied, and not the server's doing.
    pub undelivered: u64,
    /// Inputs lost with a room that crashed and was rebuilt (its state restarted) or went back
    /// to a checkpoint: no incarnation of the room applied them.
    pub lost_in_rebuilds: u64,
    /// Inputs whose effect the room no longer shows after a crash, split by whether the bot had
    /// been told they ran.
    pub rollback: Rollback,
    /// How its room came through crashes, as this bot saw it.
    pub outcome: Outcome,
    /// Inputs the client delivered whose answers were pushed to a session that then died with
    /// its gateway, so the bot could not check them (never counted lost).
    pub answers_lost: u64,
    /// Its room's rebuilds, as it saw them.
    pub rebuilds: Vec<RoomRebuilt>,
    /// Pushes whose content the game's rules do not explain.
    pub mismatches: u64,
    /// Pushes received.
    pub pushes: u64,
    /// Times between server ticks received.
    pub ticks: TickGaps,
    /// Sessions the client held (1 if it never reconnected).
    pub connects: u64,
    /// Times its Actor was unbound and the bot bound it again.
    pub rebinds: u64,
    /// Why the bot stopped early, if it did.
    pub error: Option<String>,
}

/// Plays `game` as Actor `me` in `room` (as the report names it) until `stop` turns true, then
/// waits for the server to apply what it sent. A client error ends the bot early; the tally says why.
pub async fn play<G: Game>(
    config: ClientConfig,
    me: ActorId,
    room: String,
    mut game: G,
    pace: Pace,
    mut stop: watch::Receiver<bool>,
) -> Tally {
    let mut tally = Tally {
        player: me.to_string(),
        room: room.clone(),
        ..Tally::default()
    };
    let started = Instant::now();
    let mut client = match Client::connect(config).await {
        Ok(client) => client,
        Err(error) => {
            tally.error = Some(format!("{me}: {error}"));
            return tally;
        }
    };
    // As a player's client would, it binds until that works: the node running its Actor may
    // crash before it answers.
    if let Err(last) = rebind(&client, &me, &mut stop).await {
        tally.error = Some(format!("{me} could not bind before the end: {last}"));
        client.close().await;
        return tally;
    }
    let mut every = tokio::time::interval(pace.every);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sending = true;
    let mut settle_by: Option<tokio::time::Instant> = None;
    loop {
        // Done once stopped and every input sent came back applied (or the settle time is up).
        if !sending && game.caught_up(tally.sent) {
            break;
        }
        let settle_wait = async {
            match settle_by {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = every.tick(), if sending => {
                match client.send(&me, &game.input(tally.sent)) {
                    Ok(()) => tally.sent += 1,
                    // A bind made again after a reconnect was refused: the `Unbound` that says so
                    // is on its way, and the bot binds again then. Nothing was sent.
                    Err(ClientError::NotBound { .. }) => {}
                    Err(error) => {
                        tally.error = Some(format!("{me}: {error}"));
                        break;
                    }
                }
            }
            changed = stop.changed(), if sending => {
                if changed.is_err() || *stop.borrow() {
                    sending = false;
                    settle_by = Some(tokio::time::Instant::now() + pace.settle);
                }
            }
            () = settle_wait => break,
            event = client.recv::<G::Push>() => match event {
                Ok(ClientEvent::Push { msg, .. }) => {
                    tally.pushes += 1;
                    let rebuilds = game.incarnations().rebuilds().len();
                    let tick = game.read(msg);
                    if game.incarnations().rebuilds().len() > rebuilds {
                        tally.ticks.restarted();
                    }
                    if let Some(tick) = tick {
                        tally.ticks.observe(tick, Instant::now());
                    }
                }
                Ok(ClientEvent::Unbound { reason, .. }) => {
                    // As a player's client would: bind again (its Actor may be rebuilt after a
                    // crash), sending nothing until then.
                    tally.rebinds += 1;
                    if let Err(last) = rebind(&client, &me, &mut stop).await {
                        tally.error = Some(format!(
                            "{me} was unbound ({reason}) and could not bind again before the end: {last}"
                        ));
                        break;
                    }
                    game.rebound();
                }
                Ok(ClientEvent::Undelivered { inputs, .. }) => {
                    tally.undelivered += inputs;
                    game.undelivered(inputs);
                }
                Ok(ClientEvent::Rebound { .. } | ClientEvent::Reconnected { .. }) => game.rebound(),
                Err(error) => {
                    tally.error = Some(format!("{me}: {error}"));
                    break;
                }
            },
        }
    }
    tally.faults = game.faults(tally.sent);
    tally.mismatches = game.mismatches();
    let incarnations = game.incarnations();
    let lost_in_rebuilds = incarnations.lost();
    tally.rebuilds = incarnations
        .rebuilds()
        .iter()
        .map(|r| RoomRebuilt {
            room: room.clone(),
            outcome: r.outcome,
            node: r.node.clone(),
            after_s: crate::percentiles::secs(r.at.saturating_duration_since(started)),
        })
        .collect();
    tally.lost_in_rebuilds = lost_in_rebuilds;
    tally.outcome = incarnations.outcome();
    // The inputs a crash rolled back are the first the client's reports of unconfirmed inputs
    // explain: a crash is what ended those bindings.
    tally.rollback = Rollback::split(incarnations.rolled_back(), tally.undelivered);
    tally.undelivered -= tally.rollback.unconfirmed_rolled_back;
    let unseen = game.unseen();
    let not_applied = tally.faults.lost + lost_in_rebuilds + unseen;
    tally.applied = tally.sent - not_applied.min(tally.sent);
    // What the client could not deliver is not what the server lost, nor an answer lost with a
    // dead session. The client reports every input it had no confirmation of, and some of those
    // ran: only those the checks found missing count.
    let explains_lost = tally.undelivered.min(tally.faults.lost);
    let explains_unseen = (tally.undelivered - explains_lost).min(unseen);
    tally.faults.lost -= explains_lost;
    tally.undelivered = explains_lost + explains_unseen + tally.rollback.unconfirmed_rolled_back;
    tally.answers_lost = unseen - explains_unseen;
    tally.connects = client.session().connects;
    client.close().await;
    tally
}

/// How long a bot waits between two tries to bind its Actor again.
const REBIND_EVERY: Duration = Duration::from_secs(1);

/// Binds `me` until it works, or until the run stops (then the last error).
async fn rebind(
    client: &Client,
    me: &ActorId,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    loop {
        let last = tokio::select! {
            bound = client.bind(me) => match bound {
                Ok(()) => return Ok(()),
                Err(error) => error.to_string(),
            },
            _ = stop.wait_for(|stopped| *stopped) => return Err("the run ended".to_owned()),
        };
        tokio::select! {
            () = tokio::time::sleep(REBIND_EVERY) => {}
            _ = stop.wait_for(|stopped| *stopped) => return Err(last),
        }
    }
}
