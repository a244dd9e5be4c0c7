//! The play page every node's admin endpoint serves: a console for any game the node registers.
//! A person (or a test) binds a player Actor through this node's WebSocket gateway with the
//! TypeScript client (`tools/client-ts`), sends it JSON inputs of the game's own message type,
//! sees every push numbered in order, and sees where the player's room runs, so a room can be
//! watched moving while the connection stays.
//!
//! - `GET /play`: the page; its query may fill in the player, the room and the input
//!   (the page's script says how).
//! - `GET /play/ferry-client.js`, `GET /play/play.js`: the client and the page's script.
//! - `GET /play/config`: this node's id and WebSocket listener.
//! - `GET /play/rooms/{room}`: the node a room runs on now, from the location store.
//!
//! These need no admin token ([`super::auth::PUBLIC`]): a player holds none, and they say no
//! more than where a room runs.

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ferry::{Node, SpotId, UnitId};
use serde::Serialize;

/// The page, its script, and the client compiled from `tools/client-ts/src` (`npm run build`
/// there writes it; CI checks the committed file is what the source compiles to).
const PAGE: &str = include_str!("play.html");
const SCRIPT: &str = include_str!("play.js");
const CLIENT: &str = include_str!("../../../../tools/client-ts/dist/index.js");

/// What the page asks of this node first.
#[derive(Debug, Serialize)]
struct PlayConfig {
    node: String,
    /// This node's WebSocket listener, if it has one.
    websocket: Option<WebSocketAt>,
}

/// Where a WebSocket client connects: the page reaches the port on the host it loaded from.
#[derive(Debug, Serialize)]
struct WebSocketAt {
    port: u16,
    /// `wss` with TLS, `ws` for a plain development listener.
    scheme: &'static str,
}

/// Where a room runs.
#[derive(Debug, Serialize)]
struct RoomAt {
    room: String,
    /// Its owner in the location store; `None` while it has no record.
    node: Option<String>,
}

/// The play routes over one node.
pub fn routes(node: Node) -> Router {
    Router::new()
        .route(
            "/play",
            get(|| async { file("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/play/play.js",
            get(|| async { file("text/javascript", SCRIPT) }),
        )
        .route(
            "/play/ferry-client.js",
            get(|| async { file("text/javascript", CLIENT) }),
        )
        .route("/play/config", get(config))
        .route("/play/rooms/{room}", get(room_at))
        .with_state(node)
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn config(State(node): State<Node>) -> Json<PlayConfig> {
    let tls = node
        .config()
        .sessions
        .as_ref()
        .and_then(|s| s.websocket.as_ref())
        .is_some_and(|ws| ws.tls.is_some());
    Json(PlayConfig {
        node: node.id().to_string(),
        websocket: node.websocket_addr().map(|addr| WebSocketAt {
            port: addr.port(),
            scheme: if tls { "wss" } else { "ws" },
        }),
    })
}

async fn room_at(
    State(node): State<Node>,
    Path(room): Path<String>,
) -> Result<Json<RoomAt>, (StatusCode, String)> {
    let id = SpotId::new(&room).map_err(|e| (StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    let record = node.read_record(&UnitId::Spot(id)).await.map_err(|e| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the location store did not answer: {e}; try again"),
        )
    })?;
    Ok(Json(RoomAt {
        room,
        node: record.map(|r| r.owner.to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use ferry::Registry;
    use ferry_samples::chat;
    use ferry_tests::cluster::Cluster;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use super::*;

    fn registry() -> Registry {
        let mut registry = Registry::new();
        chat::register(&mut registry);
        registry
    }

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let request = Request::get(path).body(Body::empty()).expect("request");
        let response = router.clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_page_comes_with_its_client_and_a_room_is_found_on_its_node() {
        let cluster = Cluster::start(1, registry).await;
        let node = cluster.nodes[0].clone();
        let room = SpotId::new("cafe").expect("id");
        node.create_spot_on(node.id(), chat::ROOM, &room)
            .await
            .expect("room");
        let router = routes(node.clone());

        let (status, page) = get(&router, "/play").await;
        assert_eq!(status, StatusCode::OK);
        assert!(page.contains("/play/play.js"), "{page}");
        let (_, script) = get(&router, "/play/play.js").await;
        assert!(script.contains("/play/ferry-client.js"));
        let (_, client) = get(&router, "/play/ferry-client.js").await;
        assert!(client.contains("export class FerryClient"));

        let at = |body: String| serde_json::from_str::<Value>(&body).expect("JSON");
        let (_, config) = get(&router, "/play/config").await;
        assert_eq!(
            at(config),
            json!({"node": node.id().as_str(), "websocket": null})
        );
        let (_, found) = get(&router, "/play/rooms/cafe").await;
        assert_eq!(
            at(found),
            json!({"room": "cafe", "node": node.id().as_str()})
        );
        let (_, missing) = get(&router, "/play/rooms/attic").await;
        assert_eq!(at(missing), json!({"room": "attic", "node": null}));
        cluster.shutdown().await;
    }
}
