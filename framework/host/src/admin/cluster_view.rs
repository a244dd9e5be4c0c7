//! The cluster view each node's admin endpoint serves: a read-only page that shows the nodes it
//! is given, each with its state, its drain's progress and the rooms (spots) it runs, and every
//! move a drain makes as it happens, pushed to the page from each node's relocation events.
//!
//! - `GET /cluster?nodes=<admin>,<admin>,...`: the page (by default it shows this node only).
//! - `GET /cluster/node`: this node's id, state, drain progress, the units it runs, and how many
//!   of its rooms have a current standby.
//! - `GET /cluster/moves`: Server-Sent Events, a `move` for each unit a drain of this node moved
//!   and a `failed` for each it could not; the stream ends when the node starts to shut down.
//!
//! The page asks each node with the scheme it was loaded with (so `admin_tls` serves it whole
//! over HTTPS), and sends the admin token, when a node asks for it, in the `Authorization`
//! header of every request: the token is typed once into the page, kept in the tab's session
//! storage, and never put in a URL. The two data routes allow any origin (and answer the
//! preflight a request with that header needs), so one node's page reads every node's.

use std::convert::Infallible;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ferry::{MoveReport, Node, NodeState, RelocationEvent, UnitId};
use futures_util::Stream;
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;

const PAGE: &str = include_str!("cluster_view.html");
const SCRIPT: &str = include_str!("cluster_view.js");

/// One node as the page shows it.
#[derive(Debug, Serialize)]
struct NodeView {
    node: String,
    state: String,
    /// The units the running (or last) drain counted, moved and failed to move; `None` while the
    /// node starts or serves, since a drain it was resumed from is over.
    drain: Option<DrainView>,
    /// The spots it runs (rooms), sorted.
    spots: Vec<String>,
    /// How many actors it runs.
    actors: usize,
    /// Its rooms' standbys: how many a crash of this node would keep, and the oldest change
    /// their standbys do not hold yet.
    standby: StandbyView,
}

#[derive(Debug, Serialize)]
struct StandbyView {
    /// Rooms whose factory keeps a standby.
    rooms: usize,
    /// Of those, the rooms whose standby holds a recent checkpoint.
    current: usize,
    /// Of those, the rooms no node can hold a copy of now.
    alone: usize,
    /// How long the oldest change not yet held by a standby has waited, in milliseconds.
    oldest_unheld_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
struct DrainView {
    total: usize,
    moved: usize,
    failed: usize,
}

/// One move, as a `move` event says it.
#[derive(Debug, Serialize)]
struct MoveView {
    unit: String,
    from: String,
    to: String,
    /// How long the unit ran nowhere, in milliseconds, if it was measured.
    pause_ms: Option<f64>,
}

impl From<&MoveReport> for MoveView {
    fn from(report: &MoveReport) -> Self {
        MoveView {
            unit: report.unit.to_string(),
            from: report.from.to_string(),
            to: report.to.to_string(),
            pause_ms: report.pause.map(|p| p.as_secs_f64() * 1000.0),
        }
    }
}

/// A unit that did not move, as a `failed` event says it.
#[derive(Debug, Serialize)]
struct FailedView {
    unit: String,
    reason: String,
}

/// The cluster view routes over one node.
pub fn routes(node: Node) -> Router {
    Router::new()
        .route(
            "/cluster",
            get(|| async { file("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/cluster/view.js",
            get(|| async { file("text/javascript", SCRIPT) }),
        )
        .route("/cluster/node", get(node_view).options(preflight))
        .route("/cluster/moves", get(moves).options(preflight))
        .with_state(node)
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Lets a page served by another node read this route.
const ANY_ORIGIN: (header::HeaderName, &str) = (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*");

/// Lets a page served by another node send the admin token to the data routes: the answer to the
/// browser's preflight of a `GET` with an `Authorization` header.
async fn preflight() -> impl IntoResponse {
    (
        StatusCode::NO_CONTENT,
        [
            ANY_ORIGIN,
            (header::ACCESS_CONTROL_ALLOW_METHODS, "GET"),
            (header::ACCESS_CONTROL_ALLOW_HEADERS, "authorization"),
            (header::ACCESS_CONTROL_MAX_AGE, "600"),
        ],
    )
}

async fn node_view(State(node): State<Node>) -> impl IntoResponse {
    let status = node.watch_status().borrow().clone();
    let mut spots = Vec::new();
    let mut actors = 0;
    for unit in node.units() {
        match unit {
            UnitId::Spot(spot) => spots.push(spot.to_string()),
            UnitId::Actor(_) => actors += 1,
        }
    }
    spots.sort();
    let state = node.state();
    let standby = node.standby_status();
    let view = NodeView {
        node: node.id().to_string(),
        state: state.to_string(),
        drain: (!matches!(state, NodeState::Preparing | NodeState::Serving)).then_some(DrainView {
            total: status.total,
            moved: status.moved,
            failed: status.failed,
        }),
        spots,
        actors,
        standby: StandbyView {
            rooms: standby.rooms,
            current: standby.current,
            alone: standby.alone,
            oldest_unheld_ms: standby.oldest_unheld.map(super::wire::millis),
        },
    };
    ([ANY_ORIGIN], Json(view))
}

async fn moves(State(node): State<Node>) -> impl IntoResponse {
    let events = Sse::new(move_events(node)).keep_alive(KeepAlive::default());
    ([ANY_ORIGIN], events)
}

/// The node's moves as events, until it starts to shut down (so the admin endpoint can close).
fn move_events(node: Node) -> impl Stream<Item = Result<Event, Infallible>> {
    let state = node.watch_state();
    let events = node.relocation_events();
    futures_util::stream::unfold((state, events), |(mut state, mut events)| async move {
        loop {
            let stopping = |s: &NodeState| {
                matches!(
                    s,
                    NodeState::Draining | NodeState::Stopped | NodeState::Error
                )
            };
            let event = tokio::select! {
                changed = state.wait_for(stopping) => {
                    drop(changed);
                    return None;
                }
                event = events.recv() => event,
            };
            let (name, data) = match event {
                Ok(RelocationEvent::UnitMoved(report)) => {
                    ("move", serde_json::to_string(&MoveView::from(&*report)))
                }
                Ok(RelocationEvent::UnitFailed { unit, reason }) => {
                    let failed = FailedView {
                        unit: unit.to_string(),
                        reason,
                    };
                    ("failed", serde_json::to_string(&failed))
                }
                Ok(_) => continue,
                // The page fell behind: it reads the rooms from `/cluster/node` anyway.
                Err(RecvError::Lagged(missed)) => ("lagged", Ok(missed.to_string())),
                Err(RecvError::Closed) => return None,
            };
            let Ok(data) = data else { continue };
            return Some((Ok(Event::default().event(name).data(data)), (state, events)));
        }
    })
}
