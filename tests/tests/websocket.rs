//! Game clients over WebSocket (JSON frames, docs/client-protocol.md) on real sockets on
//! loopback, playing the chat sample: a bound player keeps its connection and every line, once
//! and in order, while its room is drained away and moved again; a client whose gateway shuts
//! down is told to go elsewhere and plays on there; a client that misbehaves is closed with the
//! code the spec gives, and a neighbour on the same gateway loses nothing.

use std::time::Duration;

use ferry::relocation::protocol::MoveEnd;
use ferry::{ActorId, Node, Registry, RelocateOutcome, SessionLimits, SpotId, UnitId};
use ferry_samples::chat::{self, ChatterMsg, Heard};
use ferry_tests::cluster::{Cluster, drain_in_background, move_in_background};
use ferry_tests::faults::Gate;
use ferry_tests::player::{self, HookedPair, PlayerMsg};
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
            assert_eq!(report.end, MoveEnd::Moved);
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

/// The player of the session tests over WebSocket: each push is checked to be the next of its
/// binding, as the spec lets a client check.
struct WsPlayer {
    client: WsClient,
    who: String,
    next_seq: u64,
}

impl WsPlayer {
    /// A client on `gateway`, said hello, with `who` bound.
    async fn bind(gateway: &Node, who: &str) -> WsPlayer {
        let mut client = WsClient::connect(gateway.websocket_addr().expect("ws")).await;
        client.hello().await;
        client.bind(who).await;
        WsPlayer {
            client,
            who: who.to_owned(),
            next_seq: 0,
        }
    }

    async fn send(&mut self, n: u64) {
        self.client.input(&self.who, json!({"Input": n})).await;
    }

    /// The next echo's number; ticks and blobs are counted past.
    async fn next_echo(&mut self) -> u64 {
        loop {
            let frame = self.client.frame().await;
            assert_eq!(frame["type"], "push", "{frame}");
            assert_eq!(frame["actor"], self.who.as_str(), "{frame}");
            assert_eq!(frame["seq"], self.next_seq, "each push the next: {frame}");
            self.next_seq += 1;
            if let Some(n) = frame["message"]["Echo"].as_u64() {
                return n;
            }
        }
    }

    /// Sends inputs `from..to` and checks their echoes come back once each, in order.
    async fn round_trip(&mut self, from: u64, to: u64) {
        for n in from..to {
            self.send(n).await;
        }
        for n in from..to {
            assert_eq!(self.next_echo().await, n);
        }
    }

    /// Says goodbye: the session was never closed, and is closed as normal now.
    async fn bye(mut self) {
        self.client.send(json!({"type": "bye"})).await;
        assert_eq!(self.client.ended().await.code(), Some("normal"));
    }
}

/// A player with a WebSocket client of its own, to show a neighbour's trouble changes nothing
/// for it.
struct WsBystander {
    player: WsPlayer,
    sent: u64,
}

impl WsBystander {
    async fn start(node: &Node) -> WsBystander {
        node.create_actor("player", &ActorId::new("bystander").expect("id"))
            .await
            .expect("created");
        let mut player = WsPlayer::bind(node, "bystander").await;
        player.round_trip(0, 20).await;
        WsBystander { player, sent: 20 }
    }

    /// Plays on, then checks the player got every input once, in order, on its one session.
    async fn check(mut self, node: &Node) {
        self.player.round_trip(self.sent, self.sent + 20).await;
        let who = ActorId::new("bystander").expect("id");
        assert_eq!(player_inputs(node, &who).await, (0..40).collect::<Vec<_>>());
        self.player.bye().await;
    }
}

async fn player_inputs(node: &Node, who: &ActorId) -> Vec<u64> {
    node.request(who, PlayerMsg::Get, T)
        .await
        .expect("player answers")
}

/// One node of players that accepts WebSocket clients with `limits`.
async fn player_node(limits: SessionLimits) -> (Cluster, Node) {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, player::registry).await;
    let node = gateways
        .add_websocket(&mut cluster, "n1", player::registry(), limits, false)
        .await;
    (cluster, node)
}

/// Waits (event by event, within the hang guard) until `node` holds `n` sessions.
async fn sessions_down_to(node: &Node, n: usize) {
    let down = async {
        let mut every = tokio::time::interval(Duration::from_millis(20));
        while node.session_count() != n {
            every.tick().await;
        }
    };
    tokio::time::timeout(T, down)
        .await
        .expect("within the hang guard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_websocket_client_that_does_not_read_its_pushes_is_closed_and_others_lose_nothing() {
    let limits = SessionLimits {
        max_outbound: 64,
        ..SessionLimits::default()
    };
    let (cluster, n1) = player_node(limits).await;
    let bystander = WsBystander::start(&n1).await;
    let me = ActorId::new("sleepy").expect("id");
    n1.create_actor("player", &me).await.expect("created");
    let mut client = WsClient::connect_with_window(n1.websocket_addr().expect("ws"), 4096).await;
    client.hello().await;
    client.bind("sleepy").await;
    // The client stops reading; its player pushes far more than its window, the gateway's
    // socket and its queue hold (each blob's JSON is about 60 KB).
    n1.tell(
        &me,
        PlayerMsg::Flood {
            count: 200,
            size: 30_000,
        },
    )
    .expect("told");
    sessions_down_to(&n1, 1).await;
    // Read only now: what was written, then why the session ended.
    let ended = client.ended().await;
    assert_eq!(ended.code(), Some("slow_reader"), "{ended:?}");
    let closing = ended.closing.as_ref().expect("a closing frame");
    assert_eq!(closing["retryable"], true);
    assert!(
        closing["reason"]
            .as_str()
            .is_some_and(|r| r.contains("read pushes")),
        "{closing}"
    );
    assert_eq!(ended.close.map(|(code, _)| code), Some(4011));
    bystander.check(&n1).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn too_many_inputs_held_during_a_move_close_that_websocket_session_only() {
    let gateways = Gateways::new();
    let (hooked, gate) = Gate::new(false);
    let limits = SessionLimits {
        max_held: 5,
        ..fast()
    };
    let pair = HookedPair::start(&gateways, hooked, limits, true).await;
    let (n1, room) = (&pair.n1, UnitId::Spot(pair.room.clone()));
    // The bystander plays on n1 in a room that does not move.
    let bystander = WsBystander::start(n1).await;
    let mut client = WsPlayer::bind(n1, "p").await;
    let mover = move_in_background(n1, room, pair.n2.id());
    gate.wait_started().await;
    for n in 0..6 {
        client.send(n).await;
    }
    let ended = client.client.ended().await;
    assert_eq!(ended.code(), Some("too_many_held"), "{ended:?}");
    let closing = ended.closing.as_ref().expect("a closing frame");
    assert_eq!(closing["retryable"], false);
    assert!(
        closing["reason"]
            .as_str()
            .is_some_and(|r| r.contains("more than 5")),
        "{closing}"
    );
    assert_eq!(ended.close.map(|(code, _)| code), Some(4009));
    gate.open();
    let report = mover.await.expect("mover ran").expect("move starts");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    bystander.check(n1).await;
    pair.cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inputs_a_websocket_client_sent_during_an_abandoned_move_reach_the_source_in_order() {
    let gateways = Gateways::new();
    let (hooked, gate) = Gate::new(true);
    let pair = HookedPair::start(&gateways, hooked, fast(), true).await;
    let (n1, n2) = (&pair.n1, &pair.n2);
    // The gateway is the target, whose restore fails.
    let mut client = WsPlayer::bind(n2, "p").await;
    client.round_trip(0, 10).await;
    let mover = move_in_background(n1, UnitId::Spot(pair.room.clone()), n2.id());
    gate.wait_started().await;
    // The room is sealed, its capture on the target: these are held at the gateway.
    for n in 10..30 {
        client.send(n).await;
    }
    gate.open();
    let report = mover.await.expect("mover ran").expect("move starts");
    assert!(matches!(report.end, MoveEnd::Restored(_)), "{report:?}");
    for n in 10..30 {
        assert_eq!(client.next_echo().await, n);
    }
    client.round_trip(30, 40).await;
    assert!(n1.hosts(&UnitId::Actor(pair.player.clone())));
    assert_eq!(
        player_inputs(n2, &pair.player).await,
        (0..40).collect::<Vec<_>>()
    );
    client.bye().await;
    pair.cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bound_websocket_player_keeps_its_session_and_every_input_while_its_room_takes_6s_to_move()
 {
    let gateways = Gateways::new();
    // Longer than the gateway's seal timeout (3 s) and the source's step (5 s), well inside the
    // move's deadline.
    let (hooked, gate) = Gate::slow(Duration::from_secs(6));
    let pair = HookedPair::start(&gateways, hooked, fast(), true).await;
    let (n1, n2) = (&pair.n1, &pair.n2);
    let mut client = WsPlayer::bind(n1, "p").await;
    client.round_trip(0, 10).await;
    let mover = move_in_background(n1, UnitId::Spot(pair.room.clone()), n2.id());
    gate.wait_started().await;
    // The room is sealed and being restored on n2: these are held at the gateway.
    for n in 10..30 {
        client.send(n).await;
    }
    let report = mover.await.expect("mover ran").expect("move starts");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    for n in 10..30 {
        assert_eq!(client.next_echo().await, n);
    }
    client.round_trip(30, 40).await;
    assert!(n2.hosts(&UnitId::Actor(pair.player.clone())));
    assert_eq!(
        player_inputs(n2, &pair.player).await,
        (0..40).collect::<Vec<_>>(),
        "every input ran once, in order"
    );
    client.bye().await;
    pair.cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_over_the_frame_limit_ends_the_websocket_session_with_internal() {
    let limits = SessionLimits {
        max_frame: 4096,
        ..fast()
    };
    let (cluster, n1) = player_node(limits).await;
    let me = ActorId::new("p").expect("id");
    n1.create_actor("player", &me).await.expect("created");
    let mut client = WsPlayer::bind(&n1, "p").await;
    client.round_trip(0, 3).await;
    // Its JSON is "7," a byte: about 6000 bytes, over the 4096 the gateway sends.
    n1.tell(
        &me,
        PlayerMsg::Flood {
            count: 1,
            size: 3000,
        },
    )
    .expect("told");
    let ended = client.client.ended().await;
    assert_eq!(ended.code(), Some("internal"), "{ended:?}");
    let closing = ended.closing.as_ref().expect("a closing frame");
    assert_eq!(closing["retryable"], true);
    assert!(
        closing["reason"]
            .as_str()
            .is_some_and(|r| r.contains("4096-byte frame limit")),
        "{closing}"
    );
    assert_eq!(ended.close.map(|(code, _)| code), Some(4012));
    cluster.shutdown().await;
}
