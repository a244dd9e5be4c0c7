//! A dead gateway is a gone session, not a failed move, with real `ferry node` processes on a real
//! redis-server. An FPS room runs on `alpha`; one player plays through the gateway on `bravo`, the
//! other through the gateway on `charlie`. `charlie` is killed with SIGKILL, and `alpha` is drained
//! right after: the drain moves the room (to `bravo`) without waiting for the dead gateway, and
//! the player on the healthy gateway plays on, on the same session, through the move. A client
//! whose own gateway is killed fails over to the next one it was given, within its idle timeout,
//! binds again, and is told which of its inputs could not be delivered. A player who binds through
//! a gateway while its Actor's node is dead and not rebuilt yet is refused at once, with a reason
//! to retry, and binds once recovery has rebuilt the Actor, also when the dead node was a seed the
//! gateway dials again.

mod common;

use std::time::Duration;

use common::TempDir;
use common::processes::{
    Processes, Ready, closed_without_drain, driver, get, post, promtool_problems, raw_http,
    rebound, run_ferry, settle, text, within,
};
use ferry::client::{Client, ClientConfig, ClientEvent};
use ferry::{ActorId, Node, NodeId, Registry, SpotId};
use ferry_samples::fps::{self, Snapshot};
use ferry_tests::redis_server::RedisServer;

/// The redis key prefix of this test's cluster.
const PREFIX: &str = "tools-gateways";

/// The application version every node runs.
const VERSION: &str = "7";

fn id(text: &str) -> NodeId {
    NodeId::new(text).expect("valid node id")
}

/// A node's config; `gateway` adds a client gateway.
fn node_config(name: &str, redis_url: &str, capacity: u64, gateway: bool) -> String {
    let mut config = format!(
        r#"id = "{name}"
app_version = "{VERSION}"
certs = "certs"
store = "{redis_url}"
store_prefix = "{PREFIX}"
capacity = {capacity}
lease_ttl_ms = 3000
refresh_ms = 200
"#
    );
    if gateway {
        config.push_str(
            r#"sessions_listen = "127.0.0.1:0"
sessions_cert = "certs/gateway.pem"
sessions_key = "certs/gateway.key"
sessions_tokens = "tokens.txt"
"#,
        );
    }
    config
}

/// alpha, bravo and charlie as `ferry node` processes on a real redis-server, each with the
/// capacity and gateway `nodes` gives it, beside a driver node that knows the FPS rooms; the
/// certificates and a `bots` token are written first. `edit` may change a node's config, given
/// the nodes started before it.
struct Trio {
    _redis: RedisServer,
    tmp: TempDir,
    driver: Node,
    processes: Processes,
    ready: Vec<Ready>,
}

impl Trio {
    async fn start(
        name: &str,
        nodes: [(&str, u64, bool); 3],
        edit: impl Fn(String, &[Ready]) -> String,
    ) -> Option<Trio> {
        let redis = RedisServer::start_or_skip().await?;
        let tmp = TempDir::new(name);
        let certs_dir = tmp.path().join("certs");
        let out = run_ferry(&[
            "certs",
            "--out",
            &certs_dir.display().to_string(),
            "--nodes",
            "alpha,bravo,charlie,driver",
            "--gateway",
            "localhost",
        ])
        .await;
        assert!(out.status.success(), "{}", text(&out.stderr));
        std::fs::write(tmp.path().join("tokens.txt"), "gw-token bots\n").expect("tokens");
        let mut registry = Registry::new();
        fps::register(&mut registry, fps::Rules::default());
        let (driver, store) = driver(&redis.url(), PREFIX, VERSION, &certs_dir, registry).await;
        let mut processes = Processes::default();
        let mut ready = Vec::new();
        for (name, capacity, gateway) in nodes {
            let config = tmp.path().join(format!("{name}.toml"));
            let text = edit(node_config(name, &redis.url(), capacity, gateway), &ready);
            std::fs::write(&config, text).expect("config");
            ready.push(processes.start(name, &config, tmp.path()).await);
        }
        settle(&driver, &store, &[id("alpha"), id("bravo"), id("charlie")]).await;
        Some(Trio {
            _redis: redis,
            tmp,
            driver,
            processes,
            ready,
        })
    }
}

/// Creates a unit on `admin`'s node through `POST /units`.
async fn create_unit(admin: &str, body: &str) {
    let (code, answer) = raw_http(admin, &post("/units", body)).await;
    assert_eq!(code, 201, "{body}: {answer}");
}

/// Reads pushes until `player` got a snapshot made on `node`; an unbind, a reconnect or an end of
/// the client fails the test.
async fn snapshot_from(client: &mut Client, player: &ActorId, node: &str) {
    within(&format!("a snapshot from {node} for {player}"), async {
        loop {
            match client.recv::<Snapshot>().await.expect("the client runs") {
                ClientEvent::Push { actor, msg }
                    if actor == *player && msg.node.as_str() == node =>
                {
                    return;
                }
                ClientEvent::Push { .. } => {}
                ClientEvent::Rebound { .. }
                | ClientEvent::Reconnected { .. }
                | ClientEvent::Undelivered { .. } => panic!("{player} had to reconnect"),
                ClientEvent::Unbound { actor, reason } => panic!("{actor} unbound: {reason}"),
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_right_after_a_gateway_died_moves_the_room_and_healthy_players_play_on() {
    // charlie takes no unit: the drain's only target is bravo.
    let Some(Trio {
        _redis,
        tmp,
        driver,
        mut processes,
        ready,
    }) = Trio::start(
        "dead-gateway",
        [
            ("alpha", 100, false),
            ("bravo", 100, true),
            ("charlie", 0, true),
        ],
        |text, _| text,
    )
    .await
    else {
        return;
    };
    let certs_dir = tmp.path().join("certs");
    let alpha_admin = ready[0].admin();

    let room = SpotId::new("fps-room-gateways").expect("valid id");
    create_unit(
        &alpha_admin,
        &format!(
            r#"{{"kind":"spot","factory":"{}","id":"{room}","join":null}}"#,
            fps::ROOM
        ),
    )
    .await;
    let (healthy, doomed) = (
        ActorId::new("p-bravo").expect("valid id"),
        ActorId::new("p-charlie").expect("valid id"),
    );
    for p in [&healthy, &doomed] {
        let body = format!(
            r#"{{"kind":"actor","factory":"{}","id":"{p}","join":"{room}"}}"#,
            fps::PLAYER
        );
        create_unit(&alpha_admin, &body).await;
    }
    let ca_pem = std::fs::read_to_string(certs_dir.join("gateway.pem")).expect("gateway CA");
    let client = |gateway: usize| {
        let servers = vec![ready[gateway].sessions.expect("a gateway")];
        let mut config =
            ClientConfig::new(servers, "localhost", ca_pem.clone(), b"gw-token".to_vec());
        config.reconnect = None;
        Client::connect(config)
    };
    let mut on_bravo = client(1).await.expect("client connects to bravo");
    let mut on_charlie = client(2).await.expect("client connects to charlie");
    on_bravo.bind(&healthy).await.expect("bound");
    on_charlie.bind(&doomed).await.expect("bound");
    snapshot_from(&mut on_bravo, &healthy, "alpha").await;
    snapshot_from(&mut on_charlie, &doomed, "alpha").await;

    // charlie dies; alpha is drained at once, while charlie's lease is still current.
    processes.kill(2).await;
    let out = run_ferry(&["drain", &alpha_admin, "--deadline", "60s"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "the drain moves the room without the dead gateway: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).starts_with("relocated: 3 units moved off"),
        "{}",
        text(&out.stdout)
    );
    // The player on the healthy gateway plays on, on the same session, from the room's new node.
    snapshot_from(&mut on_bravo, &healthy, "bravo").await;
    assert_eq!(on_bravo.session().connects, 1, "no reconnect was needed");

    on_bravo.close().await;
    drop(on_charlie);
    driver.shutdown().await;
    for (name, status, log) in processes.terminate_all().await {
        if name == "alpha" {
            assert!(
                log.contains("session gateway gone"),
                "alpha's log says it moved without charlie:\n{log}"
            );
        }
        if name != "charlie" {
            closed_without_drain(&name, status, &log);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_gateway_is_killed_fails_over_rebinds_and_is_told_what_it_could_not_deliver()
{
    let Some(Trio {
        _redis,
        tmp,
        driver,
        mut processes,
        ready,
    }) = Trio::start(
        "failover",
        [
            ("alpha", 100, false),
            ("bravo", 0, true),
            ("charlie", 0, true),
        ],
        |text, _| text,
    )
    .await
    else {
        return;
    };
    let certs_dir = tmp.path().join("certs");
    let room = SpotId::new("fps-room-failover").expect("valid id");
    let player = ActorId::new("p-failover").expect("valid id");
    create_unit(
        &ready[0].admin(),
        &format!(
            r#"{{"kind":"spot","factory":"{}","id":"{room}","join":null}}"#,
            fps::ROOM
        ),
    )
    .await;
    create_unit(
        &ready[0].admin(),
        &format!(
            r#"{{"kind":"actor","factory":"{}","id":"{player}","join":"{room}"}}"#,
            fps::PLAYER
        ),
    )
    .await;

    // The client is given charlie first, then bravo; it notices a dead gateway within a second.
    let ca_pem = std::fs::read_to_string(certs_dir.join("gateway.pem")).expect("gateway CA");
    let servers = vec![
        ready[2].sessions.expect("charlie is a gateway"),
        ready[1].sessions.expect("bravo is a gateway"),
    ];
    let mut config = ClientConfig::new(servers, "localhost", ca_pem, b"gw-token".to_vec());
    config.keep_alive = Duration::from_millis(200);
    config.idle_timeout = Duration::from_secs(1);
    let mut client = Client::connect(config).await.expect("client connects");
    assert_eq!(client.session().node.as_str(), "charlie");
    client.bind(&player).await.expect("bound");
    snapshot_from(&mut client, &player, "alpha").await;

    // charlie dies; the inputs sent after it died cannot arrive, and the client says so.
    processes.kill(2).await;
    const INTO_THE_DEAD: u64 = 5;
    for n in 0..INTO_THE_DEAD {
        client
            .send(
                &player,
                &fps::PlayerMsg::Input(fps::Input { seq: n, aim: 0 }),
            )
            .expect("queued");
    }
    // Bounded by the client's idle timeout: far less than this guard, however loaded the host.
    let failover = tokio::time::timeout(Duration::from_secs(30), async {
        let mut undelivered = 0;
        loop {
            match client.recv::<Snapshot>().await.expect("the client runs") {
                ClientEvent::Undelivered { actor, inputs, .. } => {
                    assert_eq!(actor, player);
                    undelivered += inputs;
                }
                ClientEvent::Reconnected { session, reason } => {
                    return (undelivered, session, reason);
                }
                ClientEvent::Push { .. } => {}
                ClientEvent::Rebound { actor } => panic!("{actor} bound again, not reconnected"),
                ClientEvent::Unbound { actor, reason } => panic!("{actor} unbound: {reason}"),
            }
        }
    });
    let (undelivered, session, reason) = failover.await.expect("the client fails over in time");
    assert!(
        undelivered >= INTO_THE_DEAD,
        "{undelivered} inputs reported"
    );
    assert_eq!(session.node.as_str(), "bravo", "{reason}");
    assert_eq!(session.connects, 2);
    // Bound again through bravo, the player plays on.
    snapshot_from(&mut client, &player, "alpha").await;

    client.close().await;
    driver.shutdown().await;
    for (name, status, log) in processes.terminate_all().await {
        if name != "charlie" {
            closed_without_drain(&name, status, &log);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_a_killed_gateway_had_not_handed_on_are_reported_though_it_spoke_after_them() {
    // One room on alpha, one on bravo; charlie is only a gateway. Leases outlast alpha's pause.
    let Some(Trio {
        _redis,
        tmp,
        driver,
        mut processes,
        ready,
    }) = Trio::start(
        "gateway-held",
        [
            ("alpha", 100, false),
            ("bravo", 100, true),
            ("charlie", 0, true),
        ],
        |text, _| text.replace("lease_ttl_ms = 3000", "lease_ttl_ms = 20000"),
    )
    .await
    else {
        return;
    };
    let certs_dir = tmp.path().join("certs");
    let (held, heard) = (
        ActorId::new("p-held").expect("valid id"),
        ActorId::new("p-heard").expect("valid id"),
    );
    for (node, room, player) in [(0, "fps-held", &held), (1, "fps-heard", &heard)] {
        let admin = ready[node].admin();
        let body = format!(
            r#"{{"kind":"spot","factory":"{}","id":"{room}","join":null}}"#,
            fps::ROOM
        );
        create_unit(&admin, &body).await;
        let body = format!(
            r#"{{"kind":"actor","factory":"{}","id":"{player}","join":"{room}"}}"#,
            fps::PLAYER
        );
        create_unit(&admin, &body).await;
    }

    // The client plays both players through charlie, bravo its second gateway.
    let ca_pem = std::fs::read_to_string(certs_dir.join("gateway.pem")).expect("gateway CA");
    let servers = vec![
        ready[2].sessions.expect("charlie is a gateway"),
        ready[1].sessions.expect("bravo is a gateway"),
    ];
    let mut config = ClientConfig::new(servers, "localhost", ca_pem, b"gw-token".to_vec());
    config.keep_alive = Duration::from_millis(200);
    config.idle_timeout = Duration::from_secs(1);
    let mut client = Client::connect(config).await.expect("client connects");
    assert_eq!(client.session().node.as_str(), "charlie");
    client.bind(&heard).await.expect("bound");
    snapshot_from(&mut client, &heard, "bravo").await;

    // alpha is paused: charlie holds the bind of `held` and every input sent to it, while
    // bravo's room keeps pushing to the client through charlie.
    processes.signal(0, "STOP");
    let binding = tokio::time::timeout(Duration::from_millis(200), client.bind(&held)).await;
    assert!(binding.is_err(), "alpha is paused: the bind waits");
    const HELD: u64 = 10;
    for seq in 0..HELD {
        let input = fps::PlayerMsg::Input(fps::Input { seq, aim: 0 });
        client.send(&held, &input).expect("queued");
    }
    // One input to the other player, after them on the same stream: once a snapshot shows it
    // applied, charlie had read every input before it, and spoke after.
    let after = fps::PlayerMsg::Input(fps::Input { seq: 0, aim: 0 });
    client.send(&heard, &after).expect("queued");
    within("the input after them applied", async {
        loop {
            match client.recv::<Snapshot>().await.expect("the client runs") {
                ClientEvent::Push { actor, msg } if actor == heard && msg.inputs.applied > 0 => {
                    return;
                }
                ClientEvent::Push { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    })
    .await;

    // charlie dies with the inputs it held; the client is told of each of them.
    processes.kill(2).await;
    let mut undelivered = std::collections::BTreeMap::new();
    within("the failover", async {
        loop {
            match client.recv::<Snapshot>().await.expect("the client runs") {
                ClientEvent::Undelivered { actor, inputs, .. } => {
                    *undelivered.entry(actor).or_insert(0) += inputs;
                }
                ClientEvent::Reconnected { session, .. } => {
                    assert_eq!(session.node.as_str(), "bravo");
                    return;
                }
                ClientEvent::Push { .. } => {}
                ClientEvent::Rebound { actor } => panic!("{actor} bound again, not reconnected"),
                ClientEvent::Unbound { actor, reason } => panic!("{actor} unbound: {reason}"),
            }
        }
    })
    .await;
    processes.signal(0, "CONT");
    assert_eq!(
        undelivered.get(&held).copied(),
        Some(HELD),
        "every input charlie held is reported once: {undelivered:?}"
    );
    // The input to `heard` ran; only its confirmation may have been on its way still.
    let heard_reported = undelivered.get(&heard).copied().unwrap_or(0);
    assert!(heard_reported <= 1, "{undelivered:?}");
    // Bound again through bravo: none of them ran, so each was lost exactly as reported. (Both
    // gateways' binds reached alpha as it went on, in either order: the later one holds.)
    let log = within("a snapshot of the held player", async {
        loop {
            match client.recv::<Snapshot>().await.expect("the client runs") {
                ClientEvent::Push { actor, msg } if actor == held => return msg.inputs,
                ClientEvent::Unbound { actor, .. } if actor == held => {
                    client.bind(&held).await.expect("bound again");
                }
                ClientEvent::Unbound { actor, reason } => panic!("{actor} unbound: {reason}"),
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(log.applied, 0, "{log:?}");

    client.close().await;
    driver.shutdown().await;
    for (name, status, log) in processes.terminate_all().await {
        if name != "charlie" {
            closed_without_drain(&name, status, &log);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_with_bind_patterns_binds_only_its_own_actors() {
    let tmp = TempDir::new("gateway-binds");
    let certs_dir = tmp.path().join("certs");
    let out = run_ferry(&[
        "certs",
        "--out",
        certs_dir.to_str().expect("utf-8 path"),
        "--nodes",
        "solo",
        "--gateway",
        "localhost",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(
        tmp.path().join("tokens.txt"),
        "t-ann ann bind=ann,fps-*-ann\nt-bots bots\n",
    )
    .expect("tokens");
    let config = tmp.path().join("solo.toml");
    std::fs::write(
        &config,
        "id = \"solo\"\ncerts = \"certs\"\nsessions_listen = \"127.0.0.1:0\"\n\
         sessions_cert = \"certs/gateway.pem\"\nsessions_key = \"certs/gateway.key\"\n\
         sessions_tokens = \"tokens.txt\"\n",
    )
    .expect("config");
    let mut processes = Processes::default();
    let ready = processes.start("solo", &config, tmp.path()).await;
    let admin = ready.admin();
    create_unit(
        &admin,
        &format!(
            r#"{{"kind":"spot","factory":"{}","id":"fps-1"}}"#,
            fps::ROOM
        ),
    )
    .await;
    for player in ["ann", "bob", "fps-1-ann"] {
        let body = format!(
            r#"{{"kind":"actor","factory":"{}","id":"{player}","join":"fps-1"}}"#,
            fps::PLAYER
        );
        create_unit(&admin, &body).await;
    }
    let ca_pem = std::fs::read_to_string(certs_dir.join("gateway.pem")).expect("gateway CA");
    let connect = |token: &str| {
        let servers = vec![ready.sessions.expect("a gateway")];
        let mut config = ClientConfig::new(
            servers,
            "localhost",
            ca_pem.clone(),
            token.as_bytes().to_vec(),
        );
        config.reconnect = None;
        Client::connect(config)
    };
    let actor = |id: &str| ActorId::new(id).expect("valid id");

    // ann's token binds ann and the ids its pattern names, and is refused bob; the session
    // stays open and bound to what it may bind.
    let mut ann = connect("t-ann").await.expect("ann connects");
    ann.bind(&actor("ann")).await.expect("ann may bind ann");
    ann.bind(&actor("fps-1-ann"))
        .await
        .expect("the pattern matches");
    let refused = ann.bind(&actor("bob")).await.expect_err("bob is not ann's");
    assert!(
        refused.to_string().contains("may not bind bob"),
        "{refused}"
    );
    snapshot_from(&mut ann, &actor("ann"), "solo").await;
    // A token without bind= binds any Actor, as before.
    let bots = connect("t-bots").await.expect("bots connect");
    bots.bind(&actor("bob")).await.expect("any actor");

    // A gateway's scrape: its two sessions, the messages and turns its room and players ran,
    // and the process, each with the node's label; promtool takes it as it is.
    let (code, metrics) = raw_http(&admin, &get("/metrics")).await;
    assert_eq!(code, 200, "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|l| l == "ferry_node_sessions{node=\"solo\"} 2"),
        "{metrics}"
    );
    let value = |prefix: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {prefix} in:\n{metrics}"))
    };
    assert!(value("ferry_messages_total{node=\"solo\"} ") > 0.0);
    assert!(value("ferry_turn_seconds_count{node=\"solo\"} ") > 0.0);
    assert!(value("process_resident_memory_bytes{node=\"solo\"} ") > 0.0);
    if let Some(problems) = promtool_problems(&metrics) {
        assert_eq!(problems, "", "promtool check metrics on:\n{metrics}");
    }
    ann.close().await;
    bots.close().await;
    for (name, status, log) in processes.terminate_all().await {
        closed_without_drain(&name, status, &log);
    }
}

/// Binds `player` once a second until a bind works; returns why the others were refused.
async fn bind_until_bound(client: &Client, player: &ActorId) -> Vec<String> {
    let mut refused = Vec::new();
    within(&format!("a bind of {player}"), async {
        while let Err(error) = client.bind(player).await {
            refused.push(error.to_string());
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
    refused
}

/// Waits until `node`'s log (in `dir`) has a line with each of `parts`.
async fn logged(dir: &std::path::Path, node: &str, parts: &[&str]) {
    let log = dir.join(format!("{node}.log"));
    within(&format!("{node} to log {parts:?}"), async {
        loop {
            let text = common::processes::read_log(&log);
            if text.lines().any(|l| parts.iter().all(|p| l.contains(p))) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_to_an_actor_of_a_killed_node_works_through_a_gateway_once_recovery_rebuilt_it() {
    // alpha runs the room; bravo is the players' gateway; charlie is where the room is rebuilt.
    // bravo and charlie dial alpha as their seed, as the documented config does.
    let Some(Trio {
        _redis,
        tmp,
        driver,
        mut processes,
        ready,
    }) = Trio::start(
        "rebuilt-binds",
        [
            ("alpha", 100, false),
            ("bravo", 0, true),
            ("charlie", 100, false),
        ],
        |text, started| match started.first() {
            Some(alpha) => text + &format!("seeds = [\"alpha@{}\"]\n", alpha.mesh),
            None => text,
        },
    )
    .await
    else {
        return;
    };
    let certs_dir = tmp.path().join("certs");
    let room = SpotId::new("fps-room-rebuilt").expect("valid id");
    create_unit(
        &ready[0].admin(),
        &format!(
            r#"{{"kind":"spot","factory":"{}","id":"{room}","join":null}}"#,
            fps::ROOM
        ),
    )
    .await;
    let (stayed, late) = (
        ActorId::new("p-stayed").expect("valid id"),
        ActorId::new("p-late").expect("valid id"),
    );
    for p in [&stayed, &late] {
        let body = format!(
            r#"{{"kind":"actor","factory":"{}","id":"{p}","join":"{room}"}}"#,
            fps::PLAYER
        );
        create_unit(&ready[0].admin(), &body).await;
    }
    // charlie is drained (of nothing): until it is resumed, no node can rebuild alpha's room.
    let charlie_admin = ready[2].admin();
    let out = run_ferry(&["drain", &charlie_admin, "--deadline", "10s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ca_pem = std::fs::read_to_string(certs_dir.join("gateway.pem")).expect("gateway CA");
    let client = || {
        let servers = vec![ready[1].sessions.expect("a gateway")];
        let mut config =
            ClientConfig::new(servers, "localhost", ca_pem.clone(), b"gw-token".to_vec());
        config.reconnect = None;
        Client::connect(config)
    };
    let mut on_bravo = client().await.expect("client connects");
    on_bravo.bind(&stayed).await.expect("bound");
    snapshot_from(&mut on_bravo, &stayed, "alpha").await;

    // alpha dies; bravo takes it for gone (and dials its seed address again).
    processes.kill(0).await;
    logged(tmp.path(), "bravo", &["peer left the cluster", "alpha"]).await;
    // A player binds while no node has rebuilt the room: refused, with a reason to retry.
    let mut late_client = client().await.expect("client connects");
    let refused = late_client
        .bind(&late)
        .await
        .expect_err("no node runs the Actor");
    let not_yet = "which left the cluster, and no other node runs it yet";
    assert!(refused.to_string().contains(not_yet), "{refused}");

    // charlie serves again: recovery rebuilds the room there, and both players play on.
    let out = run_ferry(&["resume", &charlie_admin]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Until the room is rebuilt, a bind is refused at once for the same reason; then it works.
    let refusals = bind_until_bound(&late_client, &late).await;
    assert!(refusals.iter().all(|r| r.contains(not_yet)), "{refusals:?}");
    snapshot_from(&mut late_client, &late, "charlie").await;
    // The gateway bound the player of the session that stayed again by itself, and said so.
    rebound::<Snapshot>(&mut on_bravo, std::slice::from_ref(&stayed)).await;
    snapshot_from(&mut on_bravo, &stayed, "charlie").await;
    assert_eq!(on_bravo.session().connects, 1, "no reconnect was needed");

    on_bravo.close().await;
    late_client.close().await;
    driver.shutdown().await;
    for (name, status, log) in processes.terminate_all().await {
        if name != "alpha" {
            closed_without_drain(&name, status, &log);
        }
    }
}
