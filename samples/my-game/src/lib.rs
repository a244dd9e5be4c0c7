//! A game of one's own on Ferry: a counter room that keeps its count and ticks a timer, and moves
//! between nodes with both; players who add to its count from a game client and hear each new
//! count; and an admin page that shows a counter wherever it runs. `src/main.rs` is the host
//! program that runs it as a production node; docs/production.md walks through both files.

use std::time::Duration;

use ferry::{
    Behavior, Ctx, MessageError, Node, OverrunPolicy, Registration, Registry, RelocationPolicy,
    SpotId, Tick,
};
use ferry_host::admin::wire::ErrorBody;
use ferry_host::axum::extract::{Path, State};
use ferry_host::axum::http::StatusCode;
use ferry_host::axum::response::{IntoResponse, Response};
use ferry_host::axum::routing::{get, post};
use ferry_host::axum::{Json, Router};
use serde::{Deserialize, Serialize};

/// The factory name of counter rooms.
pub const COUNTER: &str = "counter";

/// The factory name of players.
pub const PLAYER: &str = "player";

/// How often a counter's timer ticks.
pub const TICK_EVERY: Duration = Duration::from_millis(100);

/// What a counter takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CounterMsg {
    /// Add to the count.
    Add(u64),
    /// Say where things stand.
    Get,
}

/// What a counter answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterReport {
    /// The sum of every `Add`.
    pub count: u64,
    /// The ticks of its timer so far, wherever it ran.
    pub ticks: u64,
    /// The node it runs on now.
    pub node: String,
}

/// A counter's state: all of it moves with the room.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Counter {
    count: u64,
    ticks: u64,
}

impl Behavior for Counter {
    type Msg = CounterMsg;
    type Reply = CounterReport;

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        // Timers are data: this one moves with the room and keeps its schedule.
        ctx.set_timer("tick", TICK_EVERY, OverrunPolicy::SkipLateTicks);
    }

    fn on_tick(&mut self, _ctx: &mut Ctx<'_>, _tick: &Tick) {
        self.ticks += 1;
    }

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: CounterMsg) -> CounterReport {
        let report = |counter: &Counter| CounterReport {
            count: counter.count,
            ticks: counter.ticks,
            node: ctx.node().id().to_string(),
        };
        if let CounterMsg::Add(n) = msg {
            self.count += n;
            // Every player in the room hears the new count.
            let heard = PlayerMsg::Counted(report(self));
            for member in ctx.members() {
                if let Err(error) = ctx.tell(member, heard.clone()) {
                    tracing::debug!(%member, %error, "count not delivered");
                }
            }
        }
        report(self)
    }
}

/// What a player takes: `Add` from its game client, `Counted` from its room.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PlayerMsg {
    /// Add to the room's count (what the client sends, as `{"Add": 1}`).
    Add(u64),
    /// The room's count changed: pushed to the client.
    Counted(CounterReport),
}

/// A player: a member of a counter room, which a game client binds.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Player;

impl Behavior for Player {
    type Msg = PlayerMsg;
    type Reply = ();

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: PlayerMsg) {
        match msg {
            PlayerMsg::Add(n) => match ctx.spot() {
                Some(room) => {
                    if let Err(error) = ctx.tell(room, CounterMsg::Add(n)) {
                        tracing::debug!(%room, %error, "add not delivered");
                    }
                }
                None => tracing::debug!(player = %ctx.id(), "add dropped: not in a room"),
            },
            PlayerMsg::Counted(report) => {
                if ctx.is_bound()
                    && let Err(error) = ctx.push(report)
                {
                    tracing::debug!(%error, "count not pushed");
                }
            }
        }
    }
}

/// The game's factories: counter rooms and their players, whose state moves whole with the
/// serde adapter.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    registry
        .register(
            Registration::spot(COUNTER, |_| Counter::default()).policy(RelocationPolicy::serde()),
        )
        .register(Registration::actor(PLAYER, |_| Player).policy(RelocationPolicy::serde()));
    registry
}

/// How long the admin page waits for a counter's answer.
const ASK: Duration = Duration::from_secs(5);

/// The game's own pages on each node's admin endpoint, behind its token like every route:
/// `GET /counters/{id}` shows a counter's state and the node it runs on, and
/// `POST /counters/{id}/add/{n}` adds to its count. Any node answers for any counter: the
/// request goes to wherever the room runs now.
pub fn admin_pages(node: &Node) -> Router {
    Router::new()
        .route("/counters/{id}", get(show))
        .route("/counters/{id}/add/{n}", post(add))
        .with_state(node.clone())
}

async fn show(State(node): State<Node>, Path(id): Path<String>) -> Response {
    ask(&node, &id, CounterMsg::Get).await
}

async fn add(State(node): State<Node>, Path((id, n)): Path<(String, u64)>) -> Response {
    ask(&node, &id, CounterMsg::Add(n)).await
}

/// Asks the counter `id` and answers its report as JSON, or a refusal as the host's routes do.
async fn ask(node: &Node, id: &str, msg: CounterMsg) -> Response {
    let refuse = |status: StatusCode, error: String| (status, Json(ErrorBody { error }));
    let room = match SpotId::new(id) {
        Ok(room) => room,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    match node.request::<_, CounterReport>(&room, msg, ASK).await {
        Ok(report) => Json(report).into_response(),
        Err(e @ MessageError::UnknownId { .. }) => {
            let hint = format!("{e}; make it with POST /units first");
            refuse(StatusCode::NOT_FOUND, hint).into_response()
        }
        Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

/// The production guide's code blocks, compiled (and the room's run) as doctests.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../../docs/production.md")]
    pub struct Production;
}
