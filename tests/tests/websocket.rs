//! Game clients over WebSocket (JSON frames, docs/client-protocol.md) on real sockets on
//! loopback, playing the chat sample: a bound player keeps its connection and every line, once
//! and in order, while its room is drained away and moved again; a client whose gateway shuts
//! down is told to go elsewhere and plays on there; a client that misbehaves is closed with the
//! code the spec gives, and a neighbour on the same gateway loses nothing.

use std::time::Duration;

use ferry::{ActorId, Node, Registry, RelocateOutcome, SessionLimits, SpotId, UnitId};
use ferry_samples::chat::{self, ChatterMsg, Heard};
use ferry_tests::cluster::{Cluster, drain_in_background};
use ferry_tests::sessions::Gateways;
use ferry_tests::websocket::WsClient;
use serde_json::{Value, json};
use tokio::sync::watch;

const T: Duration = Duration::from_secs(10);

fn registry() -> Registry {
    let mut registry = Registry::new();
    chat::register(&mut registry);
    registry
}

fn fast() -> SessionLimits {
    SessionLimits {
        rate_per_second: 100_000,
        rate_burst: 100_000,
        ..SessionLimits::default()
    }
}

/// A chat room on `host` with `who` in it.
async fn room_with(host: &Node, room: &str, who: &str) -> (SpotId, ActorId) {
    let (room, who) = (
        SpotId::new(room).expect("id"),
        ActorId::new(who).expect("id"),
    );
    host.create_spot_on(host.id(), chat::ROOM, &room)
        .await
        .expect("room");
    host.create_actor(chat::CHATTER, &who)
        .await
        .expect("chatter");
    host.join(&who, &room).await.expect("joined");
    (room, who)
}

/// One pushed line: the push's number, and the line's number and text.
#[derive(Debug, Clone, PartialEq)]
struct Pushed {
    seq: u64,
    line: u64,
    text: String,
}

fn pushed(frame: &Value, who: &str) -> Pushed {
    assert_eq!(frame["type"], "push", "{frame}");
    assert_eq!(frame["actor"], who, "{frame}");
    assert_eq!(frame["message"]["from"], who, "{frame}");
    Pushed {
        seq: frame["seq"].as_u64().expect("seq"),
        line: frame["message"]["seq"].as_u64().expect("line seq"),
        text: frame["message"]["text"].as_str().expect("text").to_owned(),
    }
}

async fn heard(node: &Node, who: &ActorId) -> Heard {
    node.request(who, ChatterMsg::Count, T)
        .await
        .expect("chatter answers")
}

/// Says lines `from..to` and reads their pushes, a window of them under way at a time; reports
/// on `progress` how many came back.
async fn say_lines(
    client: &mut WsClient,
    who: &str,
    (from, to): (u64, u64),
    progress: &watch::Sender<u64>,
) -> Vec<Pushed> {
    const WINDOW: u64 = 16;
    let (mut sent, mut got) = (from, Vec::new());
    while (got.len() as u64) < to - from {
        while sent < to && sent < from + got.len() as u64 + WINDOW {
            client
                .input(who, json!({"Say": format!("line-{sent}")}))
                .await;
            sent += 1;
        }
        got.push(pushed(&client.frame().await, who));
        progress.send_replace(from + got.len() as u64);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bound_websocket_player_keeps_its_connection_and_every_line_while_its_room_is_drained_and_moved()
 {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    for id in ["n1", "n2", "n3"] {
        gateways
            .add_websocket(&mut cluster, id, registry(), fast(), false)
            .await;
    }
    let (n1, n2, n3) = (
        cluster.nodes[0].clone(),
        cluster.nodes[1].clone(),
        cluster.nodes[2].clone(),
    );
    let (room, who) = room_with(&n2, "lobby", "alice").await;
    let mut client = WsClient::connect(n1.websocket_addr().expect("ws")).await;
    let welcome = client.hello().await;
    assert_eq!(welcome["node"], "n1");
    client.bind("alice").await;

    // The room is drained off n2 once 100 lines came back, then moved on to the node it is not
    // on once 300 did; the client on n1 says lines all along.
    const N: u64 = 600;
    let (progress, mut seen) = watch::channel(0u64);
    let unit = UnitId::Spot(room.clone());
    let mover = {
        let (n1, n2, n3, unit) = (n1.clone(), n2.clone(), n3.clone(), unit.clone());
        tokio::spawn(async move {
            seen.wait_for(|n| *n >= 100).await.expect("playing");
            let drained = drain_in_background(&n2, T).await.expect("drain ran");
            assert!(
                matches!(drained, RelocateOutcome::Relocated { .. }),
                "{drained:?}"
            );
            seen.wait_for(|n| *n >= 300).await.expect("playing");
            let (from, to) = if n1.hosts(&unit) { (n1, n3) } else { (n3, n1) };
            let report = from
                .move_unit(&unit, Some(to.id().clone()))
                .await
                .expect("move");
            assert_eq!(report.end, ferry::relocation::protocol::MoveEnd::Moved);
            to
        })
    };
    let lines = say_lines(&mut client, "alice", (0, N), &progress).await;
    let host = mover.await.expect("mover ran");
    assert!(
        host.hosts(&unit) && !n2.hosts(&unit),
        "the room moved twice"
    );

    // Counted per message: each push once, in order, its number the next one.
    let expected: Vec<Pushed> = (0..N)
        .map(|n| Pushed {
            seq: n,
            line: n,
            text: format!("line-{n}"),
        })
        .collect();
    assert_eq!(lines, expected);
    assert_eq!(
        heard(&host, &who).await,
        Heard {
            lines: N,
            out_of_order: 0
        }
    );
    // Still the first session: it says goodbye, and the gateway closes it as normal.
    client.send(json!({"type": "bye"})).await;
    let ended = client.ended().await;
    assert_eq!(ended.code(), Some("normal"));
    assert_eq!(ended.close.map(|(code, _)| code), Some(4000));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_websocket_client_whose_gateway_shuts_down_is_told_to_go_elsewhere_and_plays_on_there() {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let n1 = gateways
        .add_websocket(&mut cluster, "n1", registry(), fast(), false)
        .await;
    let n2 = gateways
        .add_websocket(&mut cluster, "n2", registry(), fast(), false)
        .await;
    let (_room, who) = room_with(&n2, "lobby", "bob").await;
    let (progress, _) = watch::channel(0);
    let mut client = WsClient::connect(n1.websocket_addr().expect("ws")).await;
    client.hello().await;
    client.bind("bob").await;
    let first = say_lines(&mut client, "bob", (0, 50), &progress).await;

    n1.shutdown().await;
    let ended = client.ended().await;
    let closing = ended.closing.clone().expect("a closing frame");
    assert_eq!(closing["code"], "shutdown");
    assert_eq!(closing["retryable"], true);
    assert!(
        closing["reason"]
            .as_str()
            .is_some_and(|r| r.contains("shutting down")),
        "{closing}"
    );
    assert_eq!(ended.close.map(|(code, _)| code), Some(4001));

    // A new session on the next gateway: bind again, and the pushes count from 0 again.
    let mut client = WsClient::connect(n2.websocket_addr().expect("ws")).await;
    assert_eq!(client.hello().await["node"], "n2");
    client.bind("bob").await;
    let second = say_lines(&mut client, "bob", (50, 100), &progress).await;
    let seqs: Vec<u64> = second.iter().map(|p| p.seq).collect();
    assert_eq!(seqs, (0..50).collect::<Vec<_>>());
    let texts: Vec<String> = first
        .iter()
        .chain(&second)
        .map(|p| p.text.clone())
        .collect();
    assert_eq!(
        texts,
        (0..100).map(|n| format!("line-{n}")).collect::<Vec<_>>()
    );
    assert_eq!(
        heard(&n2, &who).await,
        Heard {
            lines: 100,
            out_of_order: 0
        }
    );
    n2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_misbehaving_websocket_client_is_closed_with_the_specs_code_and_a_neighbour_loses_nothing()
 {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let limits = SessionLimits {
        max_frame: 4096,
        rate_per_second: 1000,
        rate_burst: 50,
        ..SessionLimits::default()
    };
    let n1 = gateways
        .add_websocket(&mut cluster, "n1", registry(), limits, false)
        .await;
    let addr = n1.websocket_addr().expect("ws");
    let (_room, _) = room_with(&n1, "lobby", "carol").await;
    let (_, victim) = room_with(&n1, "den", "dave").await;
    let (progress, _) = watch::channel(0);
    let mut neighbour = WsClient::connect(addr).await;
    neighbour.hello().await;
    neighbour.bind("carol").await;
    say_lines(&mut neighbour, "carol", (0, 10), &progress).await;

    let cases: Vec<(&str, Vec<Value>, &str, u16)> = vec![
        (
            "a bind before hello",
            vec![json!({"type": "bind", "actor": "dave"})],
            "unauthenticated",
            4002,
        ),
        (
            "a refused token",
            vec![json!({"type": "hello", "version": 1, "token": "nope"})],
            "unauthenticated",
            4002,
        ),
        (
            "a wrong version",
            vec![json!({"type": "hello", "version": 9, "token": "good-token"})],
            "protocol",
            4007,
        ),
        (
            "an unknown frame",
            vec![json!({"type": "teleport"})],
            "unknown_frame",
            4005,
        ),
        (
            "a frame without its actor",
            vec![json!({"type": "bind"})],
            "malformed",
            4003,
        ),
        (
            "an input the chatter does not take",
            vec![json!({"type": "input", "actor": "dave", "message": {"Shout": 3}})],
            "bad_input",
            4006,
        ),
        (
            "a message over the frame limit",
            vec![json!({"type": "bind", "actor": "x".repeat(5000)})],
            "too_large",
            4004,
        ),
        (
            "a flood over the rate",
            (0..60)
                .map(|_| json!({"type": "unbind", "actor": "nobody"}))
                .collect(),
            "rate_limited",
            4008,
        ),
    ];
    for (what, frames, code, ws_code) in cases {
        let mut client = WsClient::connect(addr).await;
        if !what.contains("before hello") && !what.contains("token") && !what.contains("version") {
            client.hello().await;
            client.bind("dave").await;
        }
        for frame in frames {
            client.send(frame).await;
        }
        let ended = client.ended().await;
        assert_eq!(ended.code(), Some(code), "{what}: {ended:?}");
        assert_eq!(
            ended.closing.as_ref().map(|c| &c["retryable"]),
            Some(&json!(false)),
            "{what}"
        );
        assert_eq!(ended.close.map(|(c, _)| c), Some(ws_code), "{what}");
    }
    // Binary messages are no frames.
    let mut client = WsClient::connect(addr).await;
    client.hello().await;
    client.binary(vec![1, 2, 3]).await;
    assert_eq!(client.ended().await.code(), Some("malformed"));

    // The neighbour played on; the chatter of the closed sessions took nothing it was sent.
    say_lines(&mut neighbour, "carol", (10, 20), &progress).await;
    assert_eq!(heard(&n1, &victim).await.lines, 0);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_websocket_client_connects_over_tls_with_the_gateways_certificate() {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let n1 = gateways
        .add_websocket(&mut cluster, "n1", registry(), fast(), true)
        .await;
    let (_room, _) = room_with(&n1, "lobby", "erin").await;
    let mut client =
        WsClient::connect_tls(n1.websocket_addr().expect("wss"), &gateways.ca_pem).await;
    let welcome = client.hello().await;
    assert_eq!(welcome["limits"]["max_frame"], 64 * 1024);
    client.bind("erin").await;
    let (progress, _) = watch::channel(0);
    let lines = say_lines(&mut client, "erin", (0, 5), &progress).await;
    assert_eq!(lines.len(), 5);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn binds_are_refused_with_a_reason_and_a_second_session_binding_a_player_takes_it_over() {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let limits = SessionLimits {
        max_bindings: 1,
        ..fast()
    };
    let n1 = gateways
        .add_websocket(&mut cluster, "n1", registry(), limits, false)
        .await;
    let addr = n1.websocket_addr().expect("ws");
    let (_room, who) = room_with(&n1, "lobby", "frank").await;
    let (progress, _) = watch::channel(0);
    let mut first = WsClient::connect(addr).await;
    first.hello().await;
    // An Actor nobody made, and one more than the session may bind: refused, the session stays.
    first.send(json!({"type": "bind", "actor": "ghost"})).await;
    let refused = first.frame().await;
    assert_eq!(
        (&refused["type"], &refused["actor"]),
        (&json!("bind_refused"), &json!("ghost"))
    );
    first.bind("frank").await;
    first.send(json!({"type": "bind", "actor": "grace"})).await;
    let refused = first.frame().await;
    assert_eq!(refused["type"], "bind_refused");
    assert!(
        refused["reason"]
            .as_str()
            .is_some_and(|r| r.contains("unbind one first")),
        "{refused}"
    );
    say_lines(&mut first, "frank", (0, 5), &progress).await;

    // The player connects again: the new session has it, the old one is told why.
    let mut second = WsClient::connect(addr).await;
    second.hello().await;
    second.bind("frank").await;
    let unbound = first.frame().await;
    assert_eq!(unbound["type"], "unbound", "{unbound}");
    assert!(
        unbound["reason"]
            .as_str()
            .is_some_and(|r| r.contains("another session")),
        "{unbound}"
    );
    say_lines(&mut second, "frank", (5, 10), &progress).await;
    // An input for it on the old session is dropped with a word, and that session stays open.
    first.input("frank", json!({"Say": "late"})).await;
    assert_eq!(first.frame().await["type"], "unbound");
    assert_eq!(
        heard(&n1, &who).await,
        Heard {
            lines: 10,
            out_of_order: 0
        }
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_websocket_client_that_answers_no_ping_is_dropped_after_the_idle_timeout_and_one_that_does_stays()
 {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let limits = SessionLimits {
        idle_timeout: Duration::from_millis(300),
        ..fast()
    };
    let n1 = gateways
        .add_websocket(&mut cluster, "n1", registry(), limits, false)
        .await;
    let addr = n1.websocket_addr().expect("ws");
    // This one reads, so it answers the gateway's pings (as a browser does), and sends nothing.
    let mut reading = WsClient::connect(addr).await;
    reading.hello().await;
    let reader = tokio::spawn(async move { reading.ended().await });

    // Two silent ones after each other, each read only once the gateway dropped it: the reading
    // client outlives both, more than twice the idle timeout.
    for _ in 0..2 {
        let mut silent = WsClient::connect(addr).await;
        silent.hello().await;
        let dropped = async {
            let mut every = tokio::time::interval(Duration::from_millis(20));
            while n1.session_count() != 1 {
                every.tick().await;
            }
        };
        tokio::time::timeout(T, dropped)
            .await
            .expect("dropped within the hang guard");
        let ended = silent.ended().await;
        assert_eq!(ended.code(), Some("normal"));
        assert!(
            ended
                .closing
                .as_ref()
                .and_then(|c| c["reason"].as_str())
                .is_some_and(|r| r.contains("nothing heard")),
            "{ended:?}"
        );
    }
    assert_eq!(n1.session_count(), 1, "the client answering pings stays");
    assert!(!reader.is_finished());
    reader.abort();
    cluster.shutdown().await;
}
