//! The admin routes driven directly (no socket): every refusal, one drain at a time, a rolling
//! update that waits for a node of the new version, and a shutdown. The nodes are real: an
//! in-process cluster on real QUIC over loopback.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use ferry::{ActorId, NodeId, NodeState, SpotId, StandbyPolicy, UnitId};
use ferry_samples::chat;
use ferry_samples::ping::{self, PingMsg, PingReport};
use ferry_tests::cluster::Cluster;
use metrics_exporter_prometheus::PrometheusBuilder;
use serde_json::{Value, json};
use std::sync::Arc;
use tower::ServiceExt;

use super::auth::Access;
use super::server::{AdminOptions, router};
use super::wire::{DrainReport, Outcome, ShutdownReport, StatusBody, UnitCreated};
use crate::admin::ops::Operations;
use ferry_tests::cluster::ANOTHER_PROCESS;
use ferry_tests::rooms::ping_registry;

/// How long one request to a unit may take.
const T: std::time::Duration = std::time::Duration::from_secs(10);

struct Admin {
    router: Router,
    ops: Arc<Operations>,
}

fn admin(cluster: &Cluster, node: &str) -> Admin {
    admin_with(cluster, node, Access::open())
}

fn admin_with(cluster: &Cluster, node: &str, access: Access) -> Admin {
    let ops = Operations::new(cluster.node(node).clone());
    let metrics = PrometheusBuilder::new().build_recorder().handle();
    let options = AdminOptions {
        access,
        pages: Router::new(),
        tls: None,
    };
    Admin {
        router: router(ops.clone(), metrics, options),
        ops,
    }
}

/// One request; the status and the body as JSON (`Null` when it is not JSON).
async fn call(
    router: &Router,
    method: &str,
    path: &str,
    body: impl Into<Body>,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(body.into())
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn status(router: &Router) -> StatusBody {
    let (code, body) = call(router, "GET", "/status", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    serde_json::from_value(body).expect("a status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_request_gets_a_4xx_with_a_json_error_and_changes_nothing() {
    let cluster = Cluster::start(1, ping_registry).await;
    let admin = admin(&cluster, "n1");
    let big = format!("{{\"version\": \"{}\"}}", "x".repeat(20_000));
    let cases: Vec<(&str, &str, String, StatusCode, &str)> = vec![
        (
            "GET",
            "/nope",
            String::new(),
            StatusCode::NOT_FOUND,
            "the routes are",
        ),
        (
            "POST",
            "/",
            String::new(),
            StatusCode::NOT_FOUND,
            "there is no POST /",
        ),
        (
            "DELETE",
            "/status",
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "takes GET",
        ),
        (
            "GET",
            "/relocate",
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "takes POST",
        ),
        (
            "PUT",
            "/shutdown",
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "takes POST",
        ),
        (
            "POST",
            "/metrics",
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "takes GET",
        ),
        (
            "POST",
            "/play",
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "takes GET",
        ),
        (
            "GET",
            "/plays",
            String::new(),
            StatusCode::NOT_FOUND,
            "GET /play (the play page) and GET /cluster (the cluster view)",
        ),
        (
            "POST",
            "/relocate",
            "{".into(),
            StatusCode::BAD_REQUEST,
            "not the JSON",
        ),
        (
            "POST",
            "/relocate",
            "[]".into(),
            StatusCode::BAD_REQUEST,
            "such as {\"mode\"",
        ),
        (
            "POST",
            "/relocate",
            r#"{"mode":"sideways"}"#.into(),
            StatusCode::BAD_REQUEST,
            "unknown variant",
        ),
        (
            "POST",
            "/relocate",
            r#"{"colour":1}"#.into(),
            StatusCode::BAD_REQUEST,
            "unknown field",
        ),
        (
            "POST",
            "/relocate",
            r#"{"deadline_ms":-5}"#.into(),
            StatusCode::BAD_REQUEST,
            "integer `-5`",
        ),
        (
            "POST",
            "/relocate",
            r#"{"deadline_ms":0}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "must be above 0",
        ),
        (
            "POST",
            "/relocate",
            r#"{"deadline_ms":86400001}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "at most",
        ),
        (
            "POST",
            "/relocate",
            r#"{"mode":"rolling-update"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "needs a non-empty `version`",
        ),
        (
            "POST",
            "/relocate",
            r#"{"mode":"rolling-update","version":" "}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "needs a non-empty `version`",
        ),
        (
            "POST",
            "/relocate",
            r#"{"version":"2"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "only for mode",
        ),
        (
            "POST",
            "/relocate",
            big,
            StatusCode::PAYLOAD_TOO_LARGE,
            "over 16384 bytes",
        ),
        (
            "POST",
            "/shutdown",
            "{\"deadline_ms\":\"soon\"}".into(),
            StatusCode::BAD_REQUEST,
            "not the JSON",
        ),
        (
            "POST",
            "/shutdown",
            r#"{"deadline_ms":0}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "must be above 0",
        ),
        (
            "POST",
            "/shutdown",
            r#"{"mode":"maintenance"}"#.into(),
            StatusCode::BAD_REQUEST,
            "unknown field",
        ),
        (
            "GET",
            "/units",
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "takes POST",
        ),
        (
            "POST",
            "/units",
            String::new(),
            StatusCode::BAD_REQUEST,
            "the body is empty",
        ),
        (
            "POST",
            "/units",
            r#"{"kind":"room","factory":"ping","id":"a"}"#.into(),
            StatusCode::BAD_REQUEST,
            "unknown variant",
        ),
        (
            "POST",
            "/units",
            r#"{"kind":"spot","id":"a"}"#.into(),
            StatusCode::BAD_REQUEST,
            "missing field `factory`",
        ),
        (
            "POST",
            "/units",
            r#"{"kind":"spot","factory":"ping","id":"a","join":"b"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "`join` is only for an actor",
        ),
        (
            "POST",
            "/units",
            r#"{"kind":"spot","factory":"ping","id":""}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "`id` is not a valid id",
        ),
        (
            "POST",
            "/units",
            r#"{"kind":"actor","factory":"ping","id":"a","join":""}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "`join` is not a valid id",
        ),
        (
            "POST",
            "/units",
            r#"{"kind":"spot","factory":"arena","id":"a"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "no spot factory named \"arena\"",
        ),
        (
            "POST",
            "/units",
            r#"{"kind":"actor","factory":"ping","id":"a"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "no actor factory named \"ping\"",
        ),
    ];
    for (method, path, body, want, says) in cases {
        let (code, answer) = call(&admin.router, method, path, body).await;
        assert_eq!(code, want, "{method} {path}: {answer}");
        let error = answer["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path}: JSON error, got {answer}"));
        assert!(error.contains(says), "{method} {path}: {error}");
    }
    // Nothing ran: the node serves as before, no drain was started, no unit was made.
    let s = status(&admin.router).await;
    assert_eq!(
        (s.state.as_str(), s.running, s.last_drain, s.units),
        ("Serving", None, None, 0)
    );
    assert!(admin.ops.running().is_none());
    let (code, _) = call(&admin.router, "GET", "/metrics", "").await;
    assert_eq!(code, StatusCode::OK);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_are_created_on_the_node_asked_all_or_nothing_and_only_while_it_serves() {
    let cluster = Cluster::start(2, ferry_samples::registry).await;
    let admin = admin(&cluster, "n1");
    let n1 = cluster.node("n1");
    let post = |body: Value| call(&admin.router, "POST", "/units", body.to_string());

    let (code, body) = post(json!({"kind": "spot", "factory": chat::ROOM, "id": "lobby"})).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let created: UnitCreated = serde_json::from_value(body).expect("an answer");
    assert_eq!(
        (created.unit.as_str(), created.node.as_str(), created.joined),
        ("spot:lobby", "n1", None)
    );
    let lobby = SpotId::new("lobby").expect("id");
    assert!(n1.hosts(&UnitId::Spot(lobby.clone())));

    let ann = json!({"kind": "actor", "factory": chat::CHATTER, "id": "ann", "join": "lobby"});
    let (code, body) = post(ann.clone()).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    assert_eq!(body["joined"], "lobby");
    // Ann is a member: she hears what is said in the room.
    let said = chat::RoomMsg::Say {
        from: ActorId::new("bob").expect("id"),
        text: "hello".into(),
    };
    let _: chat::RoomReply = n1.request(&lobby, said, T).await.expect("said");
    let ann_id = ActorId::new("ann").expect("id");
    let heard: chat::Heard = n1
        .request(&ann_id, chat::ChatterMsg::Count, T)
        .await
        .expect("counted");
    assert_eq!(heard.lines, 1);

    let (code, body) = post(ann).await;
    assert_eq!(code, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("already exists")),
        "{body}"
    );
    // A spot on another node cannot be joined here, and the actor does not stay behind.
    cluster
        .node("n2")
        .create_spot_on(
            &NodeId::new("n2").expect("id"),
            chat::ROOM,
            &SpotId::new("far").expect("id"),
        )
        .await
        .expect("spot on n2");
    let cid = json!({"kind": "actor", "factory": chat::CHATTER, "id": "cid", "join": "far"});
    let (code, body) = post(cid.clone()).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("no spot far runs on node n1")),
        "{body}"
    );
    assert!(!n1.hosts(&UnitId::Actor(ActorId::new("cid").expect("id"))));

    // Once drained, the node takes no new units.
    let (code, body) = call(&admin.router, "POST", "/relocate", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let (code, body) = post(json!({"kind": "spot", "factory": chat::ROOM, "id": "late"})).await;
    assert_eq!(code, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("is Relocated, not Serving")),
        "{body}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_with_nowhere_to_go_is_blocked_and_the_units_stay() {
    let cluster = Cluster::start(2, ping_registry).await;
    let admin = admin(&cluster, "n1");
    let n1 = cluster.node("n1");
    // n2 is drained: nothing else serves, and resuming n2 is the way out.
    let drained = cluster.node("n2").relocate(Default::default()).await;
    assert_eq!(drained, ferry::RelocateOutcome::Relocated { moved: 0 });
    n1.refresh_membership().await.expect("membership read");
    let room = SpotId::new("lonely").expect("id");
    n1.create_spot(ping::PING, &room).await.expect("spot");
    let (code, body) = call(
        &admin.router,
        "POST",
        "/relocate",
        r#"{"deadline_ms":60000}"#,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let report: DrainReport = serde_json::from_value(body).expect("a drain report");
    assert_eq!(report.outcome, Outcome::Blocked);
    // No other node serves: the drain says so at once, whatever its deadline.
    assert_eq!(report.reason, Some(ferry::BlockedReason::NoServingPeer));
    assert_eq!((report.moved, report.stayed.len()), (0, 1));
    assert_eq!(report.drained_peers, ["n2"]);
    let s = status(&admin.router).await;
    assert_eq!(
        (s.state.as_str(), s.units, s.safe_to_shutdown),
        ("Serving", 1, false)
    );
    assert_eq!(s.last_drain, Some(report));
    // The unit runs on, where it was.
    let r: PingReport = n1
        .request(&room, PingMsg::Report, std::time::Duration::from_secs(10))
        .await
        .expect("report");
    assert_eq!(r.node, "n1");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_waits_for_the_new_version_one_operation_at_a_time_then_shutdown_stops() {
    let mut cluster = Cluster::start(1, ping_registry).await;
    let admin = admin(&cluster, "n1");
    let n1 = cluster.node("n1").clone();
    let room = SpotId::new("room").expect("id");
    n1.create_spot(ping::PING, &room).await.expect("spot");
    n1.tell(
        &room,
        PingMsg::Ping {
            from: SpotId::new("before").expect("id"),
            n: 7,
        },
    )
    .expect("told");

    let router = admin.router.clone();
    let drain = tokio::spawn(async move {
        let body = json!({"mode": "rolling-update", "version": "2", "deadline_ms": 120_000});
        call(&router, "POST", "/relocate", body.to_string()).await
    });
    // The drain shows on /status as soon as it holds the slot.
    let running = loop {
        if let Some(running) = status(&admin.router).await.running {
            break running;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(running.operation, "drain");
    assert_eq!(running.version.as_deref(), Some("2"));
    for path in ["/relocate", "/shutdown"] {
        let (code, body) = call(&admin.router, "POST", path, "").await;
        assert_eq!(code, StatusCode::CONFLICT, "{path}: {body}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("already running a drain")),
            "{body}"
        );
    }

    // A node of the new version comes up: the drain moves the room there and ends.
    let config = cluster.config("n2").app_version("2");
    cluster.add_with(config, ping_registry()).await;
    let (code, body) = drain.await.expect("drain task");
    assert_eq!(code, StatusCode::OK, "{body}");
    let report: DrainReport = serde_json::from_value(body).expect("a drain report");
    assert_eq!(
        (report.outcome, report.moved, report.reason),
        (Outcome::Relocated, 1, None)
    );
    assert!(report.bytes > 0, "{report:?}");
    let s = status(&admin.router).await;
    assert_eq!(
        (s.state.as_str(), s.units, s.safe_to_shutdown),
        ("Relocated", 0, true)
    );
    assert_eq!(s.progress.moved, 1);
    let r: PingReport = n1
        .request(&room, PingMsg::Report, std::time::Duration::from_secs(10))
        .await
        .expect("report");
    assert_eq!(r.node, "n2");
    assert_eq!(
        r.pings.get("before"),
        Some(&vec![7]),
        "its state moved with it"
    );

    let (code, body) = call(&admin.router, "POST", "/shutdown", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let report: ShutdownReport = serde_json::from_value(body).expect("a shutdown report");
    assert!(report.clean, "{report:?}");
    assert_eq!(n1.state(), NodeState::Stopped);
    assert_eq!(admin.ops.stopped().await, report);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_counts_with_its_members_and_a_drained_node_resumes_taking_units() {
    let cluster = Cluster::start(2, ferry_samples::registry).await;
    let admin = admin(&cluster, "n1");
    let post = |body: Value| call(&admin.router, "POST", "/units", body.to_string());

    // A fresh node hosts nothing and moves nothing: stopping it loses nothing.
    let s = status(&admin.router).await;
    assert_eq!(
        (s.state.as_str(), s.units, s.safe_to_shutdown),
        ("Serving", 0, true)
    );

    // A room with two members is three units, in the status and in the drain.
    let (code, body) = post(json!({"kind": "spot", "factory": chat::ROOM, "id": "lobby"})).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    for who in ["ann", "bob"] {
        let member = json!({"kind": "actor", "factory": chat::CHATTER, "id": who, "join": "lobby"});
        let (code, body) = post(member).await;
        assert_eq!(code, StatusCode::CREATED, "{body}");
    }
    let s = status(&admin.router).await;
    assert_eq!((s.units, s.safe_to_shutdown), (3, false));
    let (code, body) = call(&admin.router, "POST", "/relocate", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let report: DrainReport = serde_json::from_value(body).expect("a drain report");
    assert_eq!((report.outcome, report.moved), (Outcome::Relocated, 3));
    let s = status(&admin.router).await;
    assert_eq!(
        (s.state.as_str(), s.progress.total, s.progress.moved),
        ("Relocated", 3, 3)
    );
    assert_eq!(cluster.node("n2").unit_count(), 3);

    // Drained, it takes no unit; resumed, it serves and takes units again, and the cluster
    // sees it serving.
    let (code, _) = post(json!({"kind": "spot", "factory": chat::ROOM, "id": "early"})).await;
    assert_eq!(code, StatusCode::CONFLICT);
    let (code, body) = call(&admin.router, "POST", "/resume", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["node"], &body["state"], &body["was"]),
        (&json!("n1"), &json!("Serving"), &json!("Relocated"))
    );
    let s = status(&admin.router).await;
    assert_eq!(
        (s.state.as_str(), s.units, s.safe_to_shutdown),
        ("Serving", 0, true)
    );
    let n2 = cluster.node("n2");
    n2.refresh_membership().await.expect("membership read");
    let seen = n2
        .cluster_view()
        .into_iter()
        .find(|d| d.node.as_str() == "n1");
    assert_eq!(seen.map(|d| d.state), Some(NodeState::Serving));
    let (code, body) = post(json!({"kind": "spot", "factory": chat::ROOM, "id": "late"})).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    // Resuming a serving node changes nothing.
    let (code, body) = call(&admin.router, "POST", "/resume", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["was"], "Serving");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_shows_the_standbys_the_node_counts() {
    let cluster = Cluster::start(2, || {
        ferry_samples::registry_with_standby(StandbyPolicy::Confirmed)
    })
    .await;
    let admin = admin(&cluster, "n1");
    let room = json!({"kind": "spot", "factory": chat::ROOM, "id": "lobby"});
    let (code, body) = call(&admin.router, "POST", "/units", room.to_string()).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    // A confirmed room answers once its standby holds the turn: by then its lane is open and
    // its checkpoints counted.
    let lobby = SpotId::new("lobby").expect("an id");
    let n1 = cluster.node("n1");
    let _: chat::RoomReply = n1
        .request(
            &lobby,
            chat::RoomMsg::History,
            std::time::Duration::from_secs(10),
        )
        .await
        .expect("the room answers");
    let (code, body) = call(&admin.router, "GET", "/status", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    for key in [
        "rooms",
        "current",
        "behind",
        "alone",
        "oldest_unheld_ms",
        "copies",
        "checkpoints_sent",
        "bytes_sent",
    ] {
        assert!(body["standby"].get(key).is_some(), "no {key} in {body}");
    }
    let shown: StatusBody = serde_json::from_value(body).expect("a status");
    let counted = n1.standby_status();
    assert_eq!((shown.standby.rooms, shown.standby.copies), (1, 0));
    assert_eq!(
        (shown.standby.rooms, shown.standby.copies),
        (counted.rooms, counted.copies)
    );
    cluster.shutdown().await;
}

/// A probe's status and its text.
async fn probe(router: &Router, path: &str) -> (StatusCode, String) {
    let request = Request::builder()
        .uri(path)
        .body(Body::empty())
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_is_lost_while_drained_and_after_the_lease_is_lost_liveness_stays() {
    let mut cluster = Cluster::start(1, ping_registry).await;
    let mut config = cluster.config("n2");
    config.lease_ttl = std::time::Duration::from_millis(300);
    let n2 = cluster.add_with(config, ping_registry()).await;
    let admin = admin(&cluster, "n2");
    assert_eq!(
        probe(&admin.router, "/readyz").await,
        (StatusCode::OK, "ready\n".to_owned())
    );

    // Drained: not ready until it is resumed.
    let (code, body) = call(&admin.router, "POST", "/relocate", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let (code, text) = probe(&admin.router, "/readyz").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(text.contains("node n2 is Relocated"), "{text}");
    let (code, body) = call(&admin.router, "POST", "/resume", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(probe(&admin.router, "/readyz").await.0, StatusCode::OK);

    // Someone else takes n2's lease: it stops running turns, and is not ready again; the
    // process still serves.
    let mut state = n2.watch_state();
    cluster
        .store
        .acquire_lease(n2.id(), ANOTHER_PROCESS, std::time::Duration::from_secs(30))
        .await
        .expect("lease taken");
    state
        .wait_for(|s| *s == NodeState::Error)
        .await
        .expect("state followed");
    let (code, text) = probe(&admin.router, "/readyz").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(text.contains("node n2 is Error"), "{text}");
    assert_eq!(
        probe(&admin.router, "/healthz").await,
        (StatusCode::OK, "ok\n".to_owned())
    );
    cluster.shutdown().await;
}
