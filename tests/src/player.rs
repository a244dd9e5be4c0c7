//! The player and room the session tests play with, over QUIC and over WebSocket alike: a
//! player records its inputs, echoes each to its session and pushes numbered ticks or blobs; its
//! room can be hooked to stall or fail a move.

use std::sync::Arc;
use std::time::Duration;

use ferry::{
    ActorId, Behavior, Ctx, ExecutionMode, Node, OverrunPolicy, Registration, Registry,
    RelocationPolicy, SessionLimits, SpotId, Tick,
};
use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::faults::Hooked;
use crate::sessions::Gateways;

/// A player: records its inputs, echoes each one to its session, and pushes numbered ticks.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Player {
    inputs: Vec<u64>,
    ticks: u64,
}

/// What a client (or a test) tells a player.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PlayerMsg {
    /// An input: recorded and echoed.
    Input(u64),
    /// Answers the inputs so far.
    Get,
    /// Push a tick every `ms`.
    Ticks {
        /// Milliseconds between two ticks.
        ms: u64,
    },
    /// Push `count` blobs of `size` bytes at once.
    Flood {
        /// How many.
        count: u32,
        /// Bytes in each.
        size: u32,
    },
}

/// What a player pushes to its session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PlayerPush {
    /// An input, echoed.
    Echo(u64),
    /// The next tick.
    Tick(u64),
    /// A blob of a flood.
    Blob(Vec<u8>),
}

impl Behavior for Player {
    type Msg = PlayerMsg;
    type Reply = Vec<u64>;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: PlayerMsg) -> Vec<u64> {
        match msg {
            PlayerMsg::Input(n) => {
                self.inputs.push(n);
                let _ = ctx.push(PlayerPush::Echo(n));
            }
            PlayerMsg::Get => {}
            PlayerMsg::Ticks { ms } => ctx.set_timer(
                "tick",
                Duration::from_millis(ms),
                OverrunPolicy::SkipLateTicks,
            ),
            PlayerMsg::Flood { count, size } => {
                for _ in 0..count {
                    let _ = ctx.push(PlayerPush::Blob(vec![7; size as usize]));
                }
            }
        }
        self.inputs.clone()
    }

    fn on_tick(&mut self, ctx: &mut Ctx<'_>, _tick: &Tick) {
        if ctx.push(PlayerPush::Tick(self.ticks)).is_ok() {
            self.ticks += 1;
        }
    }
}

/// A room that does nothing but hold its players.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Room;

impl Behavior for Room {
    type Msg = ();
    type Reply = ();

    fn handle(&mut self, _ctx: &mut Ctx<'_>, _msg: ()) {}
}

/// The player and room, the room's moves hooked with `room`.
pub fn registry_with(room: Hooked) -> Registry {
    let mut reg = Registry::new();
    reg.register(
        Registration::actor("player", |_| Player::default()).policy(RelocationPolicy::serde()),
    );
    reg.register(
        Registration::spot("room", |_| Room)
            .mode(ExecutionMode::SpotWide)
            .policy(RelocationPolicy::PreserveState(Arc::new(room))),
    );
    reg
}

/// The player and room, unhooked.
pub fn registry() -> Registry {
    registry_with(Hooked::default())
}

/// Two gateways, n1 and n2 (serving WebSocket clients too when `websocket`), the room moves
/// on n2 hooked with `hooked`, and a room `r` on n1 with player `p` in it.
pub struct HookedPair {
    /// The cluster, to shut down.
    pub cluster: Cluster,
    /// Hosts the room.
    pub n1: Node,
    /// Where the room's moves are hooked.
    pub n2: Node,
    /// The room `r`, on n1, that moves to n2.
    pub room: SpotId,
    /// The player in it.
    pub player: ActorId,
}

impl HookedPair {
    /// Starts the pair with these session limits.
    pub async fn start(
        gateways: &Gateways,
        hooked: Hooked,
        limits: SessionLimits,
        websocket: bool,
    ) -> HookedPair {
        let mut cluster = Cluster::start(0, registry).await;
        let (n1, n2) = if websocket {
            (
                gateways
                    .add_websocket(&mut cluster, "n1", registry(), limits, false)
                    .await,
                gateways
                    .add_websocket(&mut cluster, "n2", registry_with(hooked), limits, false)
                    .await,
            )
        } else {
            (
                gateways.add(&mut cluster, "n1", registry(), limits).await,
                gateways
                    .add(&mut cluster, "n2", registry_with(hooked), limits)
                    .await,
            )
        };
        let (room, player) = (
            SpotId::new("r").expect("id"),
            ActorId::new("p").expect("id"),
        );
        n1.create_spot_on(n1.id(), "room", &room)
            .await
            .expect("room");
        n1.create_actor("player", &player).await.expect("player");
        n1.join(&player, &room).await.expect("joined");
        HookedPair {
            cluster,
            n1,
            n2,
            room,
            player,
        }
    }
}
