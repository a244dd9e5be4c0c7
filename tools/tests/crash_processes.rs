//! A node killed with SIGKILL in the middle of a drain, with real `ferry node` processes on a real
//! redis-server (and, for a receiving node, on a real etcd too): the node being drained, or a node
//! receiving its rooms. What an operator checks
//! afterwards: every orphan lands on a survivor, every room answers from exactly one node (the
//! one its record names), no record names the dead node, the drain ends as documented, rooms that
//! moved kept their state and rebuilt ones start fresh.
//!
//! `alpha` is drained to `bravo` and `charlie`, whose capacity leaves room for only part of its
//! rooms: the drain cannot finish before the test has seen it in progress and killed a node.
//! `delta` is the replacement an operator starts afterwards. The test's driver node joins the
//! cluster to create rooms and talk to them; it takes no unit (capacity 0) and, its id sorting
//! after the others, never coordinates recovery while one of them serves.
//!
//! A third test kills the node that runs an FPS room whose two players are bound through a gateway
//! on the other node: the room comes back there with its members, and the players play on.

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::processes::{
    HANG_GUARD, Processes, closed_without_drain, driver, get, post, raw_http, rebound, run_ferry,
    settle, status_json, text, wait_two_refreshes, within,
};
use common::{TempDir, certs};
use ferry::client::{Client, ClientConfig, ClientEvent};
use ferry::cluster::authority::{Stage, UNIT_PREFIX, UnitRecord, node_key, unit_of_key};
use ferry::store::LocationStore;
use ferry::{ActorId, Node, NodeId, ObjectGeneration, Registry, SpotId, UnitId};
use ferry_samples::fps::{self, RoomMsg, RoomReport, Snapshot};
use ferry_samples::ping::{self, PingMsg, PingReport};
use ferry_tests::redis_server::RedisServer;
use ferry_tests::rooms::ping_registry;
use ferry_tests::store_server::{StoreKind, StoreServer};
use serde_json::Value;
use tokio::process::{Child, Command};

/// How long one request to a room may take.
const T: Duration = Duration::from_secs(10);

/// The redis key prefix of these tests' clusters.
const PREFIX: &str = "tools-crash";

/// The application version every node runs.
const VERSION: &str = "7";

/// Rooms created on the drained node.
const DRAINED: usize = 90;

/// Rooms created on each receiver before the drain.
const RESIDENT: usize = 10;

/// The receivers' capacity: with their own rooms, they take 30 of the drained node's 90 each.
const RECEIVER_CAPACITY: usize = 40;

/// Who sends the ping that gives each room its state.
const PINGER: &str = "driver-ping";

/// How often the store and the nodes are read again while the cluster converges.
const POLL: Duration = Duration::from_millis(50);

fn id(text: &str) -> NodeId {
    NodeId::new(text).expect("valid node id")
}

/// A node's config: a short lease, so that a killed node is soon dead to the others.
fn node_config(name: &str, store_url: &str, capacity: usize) -> String {
    format!(
        r#"id = "{name}"
app_version = "{VERSION}"
certs = "certs"
store = "{store_url}"
store_prefix = "{PREFIX}"
capacity = {capacity}
lease_ttl_ms = 3000
refresh_ms = 200
"#
    )
}

/// A room of the test: where it was created, the number it was pinged with, and the incarnation
/// its record named then (a move keeps it, a rebuild after a crash makes a new one).
struct Room {
    id: SpotId,
    home: &'static str,
    n: u64,
    generation: ObjectGeneration,
}

impl Room {
    fn unit(&self) -> UnitId {
        UnitId::Spot(self.id.clone())
    }
}

/// The cluster of a test. Dropping it (a failed test) kills the node processes first.
struct Cluster {
    processes: Processes,
    driver: Node,
    store: Arc<dyn LocationStore>,
    admin: BTreeMap<&'static str, String>,
    rooms: Vec<Room>,
    tmp: TempDir,
    server: StoreServer,
}

impl Cluster {
    /// Starts the store server, `alpha`, `bravo` and `charlie` and the driver, and creates the
    /// rooms, each with one ping as its state.
    async fn start(name: &str, kind: StoreKind) -> Option<Cluster> {
        let server = StoreServer::start_or_skip(kind).await?;
        let tmp = TempDir::new(name);
        let certs_dir = tmp.path().join("certs");
        certs(&certs_dir, "alpha,bravo,charlie,delta,driver");
        let (driver, store) =
            driver(&server.url(), PREFIX, VERSION, &certs_dir, ping_registry()).await;
        let mut cluster = Cluster {
            processes: Processes::default(),
            driver,
            store,
            admin: BTreeMap::new(),
            rooms: Vec::new(),
            tmp,
            server,
        };
        cluster.start_node("alpha", 1_000_000).await;
        cluster.start_node("bravo", RECEIVER_CAPACITY).await;
        cluster.start_node("charlie", RECEIVER_CAPACITY).await;
        for (home, count) in [
            ("alpha", DRAINED),
            ("bravo", RESIDENT),
            ("charlie", RESIDENT),
        ] {
            for i in 0..count {
                cluster.create_room(home, &format!("{home}-room-{i}")).await;
            }
        }
        // Every node has published its unit count since: placement sees who is full.
        let nodes: Vec<NodeId> = cluster.live().iter().map(|n| id(n)).collect();
        wait_two_refreshes(&cluster.store, &nodes).await;
        Some(cluster)
    }

    /// Starts a node process and waits until the whole cluster knows it.
    async fn start_node(&mut self, name: &'static str, capacity: usize) {
        let config = self.tmp.path().join(format!("{name}.toml"));
        std::fs::write(&config, node_config(name, &self.server.url(), capacity)).expect("config");
        let ready = self.processes.start(name, &config, self.tmp.path()).await;
        self.admin.insert(name, ready.admin());
        let live: Vec<NodeId> = self.live().iter().map(|n| id(n)).collect();
        settle(&self.driver, &self.store, &live).await;
    }

    /// The node processes still running.
    fn live(&self) -> Vec<&'static str> {
        self.admin.keys().copied().collect()
    }

    fn admin(&self, name: &str) -> &str {
        &self.admin[name]
    }

    async fn create_room(&mut self, home: &'static str, name: &str) {
        let room = SpotId::new(name).expect("valid spot id");
        self.driver
            .create_spot_on(&id(home), ping::PING, &room)
            .await
            .expect("room created");
        let n = self.rooms.len() as u64;
        let from = SpotId::new(PINGER).expect("valid spot id");
        self.driver
            .tell(&room, PingMsg::Ping { from, n })
            .expect("ping sent");
        // Asked after the ping, from the same sender: the answer shows it arrived.
        let r = report(&self.driver, &room).await;
        assert_eq!(
            (r.node.as_str(), r.pings.get(PINGER)),
            (home, Some(&vec![n]))
        );
        let record = self
            .driver
            .read_record(&UnitId::Spot(room.clone()))
            .await
            .expect("store read")
            .expect("record written");
        self.rooms.push(Room {
            id: room,
            home,
            n,
            generation: record.object_generation,
        });
    }

    /// Starts `ferry drain` on `node`; it runs while the test goes on.
    fn start_drain(&self, node: &str) -> Child {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["drain", self.admin(node), "--deadline", "60s"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("ferry drain starts")
    }

    /// `GET /status` of `node`, read straight from its admin endpoint: quicker than `ferry
    /// status`, so a drain is caught early, with moves still under way.
    async fn status_now(&self, node: &str) -> Value {
        let (code, body) = raw_http(self.admin(node), &get("/status")).await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("status JSON")
    }

    /// Waits until `node`'s drain has moved some rooms but not all, and returns how many moved.
    async fn drain_in_progress(&self, node: &str) -> u64 {
        within(&format!("{node}'s drain to get going"), async {
            loop {
                let s = self.status_now(node).await;
                let moved = s["progress"]["moved"].as_u64().unwrap_or(0);
                if !s["running"].is_null() && moved > 0 {
                    assert_eq!(s["progress"]["total"], DRAINED, "{s}");
                    assert!(
                        moved < DRAINED as u64,
                        "the receivers' capacity holds it: {s}"
                    );
                    return moved;
                }
            }
        })
        .await
    }

    /// SIGKILLs `node` and checks that it died of it.
    async fn kill(&mut self, node: &str) {
        let index = self
            .processes
            .0
            .iter()
            .position(|p| p.id == node)
            .expect("a node of the test");
        let status = self.processes.kill(index).await;
        assert_eq!(status.signal(), Some(9), "{node} was killed: {status:?}");
        self.admin.remove(node);
    }

    /// Every unit record in the store.
    async fn records(&self) -> BTreeMap<UnitId, UnitRecord> {
        let mut all = BTreeMap::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .store
                .scan(UNIT_PREFIX, after.as_deref(), 1024)
                .await
                .expect("store scan");
            for (key, value) in page.items {
                let unit = unit_of_key(&key).expect("a unit key");
                let record = UnitRecord::decode(&key, &value.value).expect("a unit record");
                all.insert(unit, record);
            }
            match page.next {
                Some(next) => after = Some(next),
                None => return all,
            }
        }
    }

    /// Waits until recovery has landed every orphan: each room's record names a running node
    /// process as its active owner. Returns the records.
    async fn converged(&self) -> BTreeMap<UnitId, UnitRecord> {
        let live = self.live();
        let mut poll = tokio::time::interval(POLL);
        let mut waiting = BTreeMap::new();
        let until = tokio::time::Instant::now() + HANG_GUARD;
        while tokio::time::Instant::now() < until {
            poll.tick().await;
            let records = self.records().await;
            waiting.clear();
            for room in &self.rooms {
                let record = records.get(&room.unit());
                let landed = record
                    .is_some_and(|r| live.contains(&r.owner.as_str()) && r.stage == Stage::Active);
                if !landed {
                    let owner = record.map(|r| format!("{} {:?}", r.owner, r.stage));
                    waiting.insert(room.id.to_string(), owner);
                }
            }
            if waiting.is_empty() {
                assert_eq!(records.len(), self.rooms.len(), "no other unit recorded");
                return records;
            }
        }
        panic!("rooms not recorded on a running node after {HANG_GUARD:?}: {waiting:?}");
    }

    /// Waits until each running node hosts exactly the rooms recorded on it (a copy staged by a
    /// move whose source died is given up after a while), so that no room runs on two nodes.
    async fn hosted_where_recorded(&self, records: &BTreeMap<UnitId, UnitRecord>) {
        let mut recorded: BTreeMap<&str, u64> = self.live().into_iter().map(|n| (n, 0)).collect();
        for record in records.values() {
            *recorded.entry(record.owner.as_str()).or_default() += 1;
        }
        let mut poll = tokio::time::interval(POLL);
        within("each node hosting what its records say", async {
            loop {
                poll.tick().await;
                let mut hosted = BTreeMap::new();
                for node in self.live() {
                    let s = status_json(self.admin(node)).await;
                    hosted.insert(node, s["units"].as_u64().expect("a unit count"));
                }
                if hosted == recorded {
                    return;
                }
            }
        })
        .await;
        assert_eq!(self.driver.unit_count(), 0, "the driver takes no unit");
    }

    /// Asks every room where it runs and what it has seen: it answers from the node its record
    /// names; a room that kept its incarnation (it stayed, or moved) kept its ping, and a rebuilt
    /// one starts fresh. Returns the rebuilt rooms.
    async fn check_rooms(&self, records: &BTreeMap<UnitId, UnitRecord>) -> Vec<&Room> {
        // Routes to the dead node are dropped with it.
        self.driver
            .refresh_membership()
            .await
            .expect("membership read");
        let mut rebuilt = Vec::new();
        for room in &self.rooms {
            let record = &records[&room.unit()];
            let r = report(&self.driver, &room.id).await;
            assert_eq!(
                r.node,
                record.owner.as_str(),
                "{} answers from its owner",
                room.id
            );
            if record.object_generation == room.generation {
                assert_eq!(
                    r.pings.get(PINGER),
                    Some(&vec![room.n]),
                    "{} kept its state",
                    room.id
                );
            } else {
                assert!(r.pings.is_empty(), "{} was rebuilt fresh: {r:?}", room.id);
                rebuilt.push(room);
            }
        }
        rebuilt
    }

    /// Waits until the cluster forgets the dead `node`: its descriptor goes once no record
    /// names it, so nothing waits for it any more.
    async fn forgotten(&self, node: &str) {
        let key = node_key(&id(node));
        let mut poll = tokio::time::interval(POLL);
        within(&format!("{node} forgotten"), async {
            while self.store.get(&key).await.expect("store read").is_some() {
                poll.tick().await;
            }
        })
        .await;
    }

    /// Stops the driver and every node still running, each of which exits 0.
    async fn stop(mut self) {
        self.driver.shutdown().await;
        let live = self.live();
        for (name, status, log) in self.processes.terminate_all().await {
            if live.contains(&name.as_str()) {
                closed_without_drain(&name, status, &log);
                assert!(!log.contains("panicked"), "{name}:\n{log}");
            }
        }
    }
}

async fn report(driver: &Node, room: &SpotId) -> PingReport {
    driver
        .request(room, PingMsg::Report, T)
        .await
        .expect("report")
}

/// Waits for a `ferry` command started earlier to end.
async fn ended(command: Child) -> Output {
    within("a ferry command to end", command.wait_with_output())
        .await
        .expect("its output")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiving_node_killed_mid_drain_loses_only_its_rooms_and_the_drain_completes() {
    receiver_killed_mid_drain("crash-target", StoreKind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_a_receiving_node_killed_mid_drain_loses_only_its_rooms_and_the_drain_completes() {
    receiver_killed_mid_drain("crash-target-etcd", StoreKind::Etcd).await;
}

async fn receiver_killed_mid_drain(name: &str, kind: StoreKind) {
    let Some(mut cluster) = Cluster::start(name, kind).await else {
        return;
    };
    let alpha = cluster.admin("alpha").to_owned();
    let drain = cluster.start_drain("alpha");
    cluster.drain_in_progress("alpha").await;
    cluster.kill("bravo").await;
    // The drain outlived bravo: it still runs, waiting for room for what is left.
    let s = cluster.status_now("alpha").await;
    assert!(!s["running"].is_null(), "{s}");
    assert!(
        s["progress"]["moved"].as_u64() < Some(DRAINED as u64),
        "{s}"
    );
    // The replacement: it takes what bravo had (rebuilt) and what alpha still has to move.
    cluster.start_node("delta", 1_000_000).await;

    // The drain ends: every room moved (some to bravo, which lost them), or the moves bravo
    // never finished went back to alpha and run there again, with their state.
    let out = ended(drain).await;
    let stderr = text(&out.stderr);
    let stayed = match out.status.code() {
        Some(0) => {
            let said = text(&out.stdout);
            assert!(
                said.starts_with(&format!("relocated: {DRAINED} units moved off {alpha} (")),
                "{said}"
            );
            0
        }
        Some(3) => {
            let last = stderr.lines().last().unwrap_or_default();
            assert!(
                last.starts_with(&format!(
                    "error: the drain of {alpha} was blocked (RelocationFailed): "
                )),
                "{stderr}"
            );
            let s = status_json(&alpha).await;
            assert_eq!(s["state"], "Serving", "{s}");
            assert_eq!(s["last_drain"]["reason"], "RelocationFailed", "{s}");
            s["last_drain"]["stayed"].as_array().expect("stayed").len()
        }
        _ => panic!("ferry drain: {:?}\n{stderr}", out.status),
    };

    let records = cluster.converged().await;
    let on = |node: &str| {
        records
            .values()
            .filter(|r| r.owner.as_str() == node)
            .count()
    };
    assert_eq!(on("alpha"), stayed, "what stayed is still on alpha");
    cluster.hosted_where_recorded(&records).await;
    let rebuilt = cluster.check_rooms(&records).await;
    // Bravo's own rooms died with it; charlie's never moved; of alpha's, only what bravo had
    // taken (30 at most) is lost.
    for room in &cluster.rooms {
        let lost = rebuilt.iter().any(|r| r.id == room.id);
        match room.home {
            "bravo" => assert!(lost, "{} was on bravo", room.id),
            "charlie" => {
                assert!(!lost, "{} was on charlie", room.id);
                assert_eq!(records[&room.unit()].owner.as_str(), "charlie");
            }
            _ => {}
        }
    }
    let lost_from_alpha = rebuilt.iter().filter(|r| r.home == "alpha").count();
    assert!(
        lost_from_alpha <= RECEIVER_CAPACITY - RESIDENT,
        "{lost_from_alpha} of alpha's rooms lost"
    );
    cluster.forgotten("bravo").await;

    // An operator drains what stayed; then alpha hosts nothing and stops cleanly.
    if stayed > 0 {
        let out = run_ferry(&["drain", &alpha, "--deadline", "60s"]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let records = cluster.converged().await;
        cluster.hosted_where_recorded(&records).await;
        assert_eq!(cluster.check_rooms(&records).await.len(), rebuilt.len());
    }
    let s = status_json(&alpha).await;
    assert_eq!(
        (&s["state"], &s["units"], &s["safe_to_shutdown"]),
        (&"Relocated".into(), &0.into(), &true.into()),
        "{s}"
    );
    let out = run_ferry(&["shutdown", &alpha]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (_, status, log) = cluster.processes.wait(0).await;
    assert_eq!(status.code(), Some(0), "alpha exits 0:\n{log}");
    cluster.admin.remove("alpha");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_while_it_drains_loses_only_the_rooms_it_still_had() {
    let Some(mut cluster) = Cluster::start("crash-source", StoreKind::Redis).await else {
        return;
    };
    let alpha = cluster.admin("alpha").to_owned();
    let drain = cluster.start_drain("alpha");
    let moved = cluster.drain_in_progress("alpha").await;
    cluster.kill("alpha").await;

    // The command loses its node and says so: one error line, exit 1.
    let out = ended(drain).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "error: the node at {alpha} went away before it answered POST /relocate"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    // bravo and charlie have room for only part of what alpha had: the operator starts a node.
    cluster.start_node("delta", 1_000_000).await;
    let records = cluster.converged().await;
    cluster.hosted_where_recorded(&records).await;
    let rebuilt = cluster.check_rooms(&records).await;
    // Only alpha's rooms are lost: at least the 30 the receivers had no room for, and none of
    // the `moved` it had seen through.
    assert!(rebuilt.iter().all(|r| r.home == "alpha"), "only alpha's");
    let kept_from_alpha = DRAINED - rebuilt.len();
    assert!(
        rebuilt.len() >= DRAINED - 2 * (RECEIVER_CAPACITY - RESIDENT),
        "{} rebuilt",
        rebuilt.len()
    );
    assert!(
        kept_from_alpha as u64 >= moved,
        "{kept_from_alpha} kept, {moved} had moved"
    );
    cluster.forgotten("alpha").await;
    cluster.stop().await;
}

/// Creates a unit on `admin`'s node through `POST /units`.
async fn create_unit(admin: &str, body: &str) {
    let (code, answer) = raw_http(admin, &post("/units", body)).await;
    assert_eq!(code, 201, "{body}: {answer}");
}

/// Reads pushes until each of `players` got a snapshot made on `node`; an unbind or an end of the
/// client fails the test.
async fn snapshots_from(client: &mut Client, players: &[ActorId], node: &str) {
    let mut waiting: Vec<ActorId> = players.to_vec();
    within(&format!("snapshots from {node} for {waiting:?}"), async {
        while !waiting.is_empty() {
            match client.recv::<Snapshot>().await.expect("the client runs") {
                ClientEvent::Push { actor, msg } if msg.node.as_str() == node => {
                    waiting.retain(|p| *p != actor);
                }
                ClientEvent::Push { .. }
                | ClientEvent::Rebound { .. }
                | ClientEvent::Reconnected { .. }
                | ClientEvent::Undelivered { .. } => {}
                ClientEvent::Unbound { actor, reason } => panic!("{actor} unbound: {reason}"),
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_on_a_killed_node_comes_back_with_its_members_and_their_players_play_on() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let tmp = TempDir::new("crash-members");
    let certs_dir = tmp.path().join("certs");
    let out = run_ferry(&[
        "certs",
        "--out",
        &certs_dir.display().to_string(),
        "--nodes",
        "alpha,bravo,driver",
        "--gateway",
        "localhost",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(tmp.path().join("tokens.txt"), "crash-token bots\n").expect("tokens");
    let mut registry = Registry::new();
    fps::register(&mut registry, fps::Rules::default());
    let (driver, store) = driver(&redis.url(), PREFIX, VERSION, &certs_dir, registry).await;
    let mut processes = Processes::default();
    // alpha runs the room; bravo is the gateway the players' client connects to, and survives.
    let alpha_config = tmp.path().join("alpha.toml");
    std::fs::write(&alpha_config, node_config("alpha", &redis.url(), 100)).expect("config");
    let alpha = processes.start("alpha", &alpha_config, tmp.path()).await;
    let bravo_config = tmp.path().join("bravo.toml");
    let gateway = r#"sessions_listen = "127.0.0.1:0"
sessions_cert = "certs/gateway.pem"
sessions_key = "certs/gateway.key"
sessions_tokens = "tokens.txt"
"#;
    std::fs::write(
        &bravo_config,
        node_config("bravo", &redis.url(), 100) + gateway,
    )
    .expect("config");
    let bravo = processes.start("bravo", &bravo_config, tmp.path()).await;
    settle(&driver, &store, &[id("alpha"), id("bravo")]).await;

    let room = SpotId::new("fps-room-crash").expect("valid id");
    let players: Vec<ActorId> = ["p0", "p1"]
        .iter()
        .map(|p| ActorId::new(*p).expect("valid id"))
        .collect();
    create_unit(
        &alpha.admin(),
        &format!(
            r#"{{"kind":"spot","factory":"{}","id":"{room}","join":null}}"#,
            fps::ROOM
        ),
    )
    .await;
    for p in &players {
        let body = format!(
            r#"{{"kind":"actor","factory":"{}","id":"{p}","join":"{room}"}}"#,
            fps::PLAYER
        );
        create_unit(&alpha.admin(), &body).await;
    }
    let ca_pem = std::fs::read_to_string(certs_dir.join("gateway.pem")).expect("gateway CA");
    let servers = vec![bravo.sessions.expect("bravo is a gateway")];
    let config = ClientConfig::new(servers, "localhost", ca_pem, b"crash-token".to_vec());
    let mut client = Client::connect(config).await.expect("client connects");
    for p in &players {
        client.bind(p).await.expect("bound");
    }
    snapshots_from(&mut client, &players, "alpha").await;

    let status = processes.kill(0).await;
    assert_eq!(status.signal(), Some(9), "alpha was killed: {status:?}");
    // The room is rebuilt on bravo with both players as its members, and the gateway binds them
    // again and says so: the client gets snapshots of the rebuilt room, on the same session.
    rebound::<Snapshot>(&mut client, &players).await;
    snapshots_from(&mut client, &players, "bravo").await;
    assert_eq!(client.session().connects, 1, "no reconnect was needed");
    for p in &players {
        let record = driver
            .read_record(&UnitId::Actor(p.clone()))
            .await
            .expect("store read")
            .expect("record");
        assert_eq!(
            (record.owner.as_str(), record.spot.as_ref()),
            ("bravo", Some(&room)),
            "{p}"
        );
    }
    driver.refresh_membership().await.expect("membership read");
    let report: RoomReport = driver
        .request(&room, RoomMsg::Report, T)
        .await
        .expect("the room answers");
    let members: Vec<&ActorId> = report.players.keys().collect();
    assert_eq!(members, players.iter().collect::<Vec<_>>(), "{report:?}");
    let s = status_json(&bravo.admin()).await;
    assert_eq!(s["units"], 3, "the room and its two players: {s}");

    client.close().await;
    driver.shutdown().await;
    for (name, status, log) in processes.terminate_all().await {
        if name == "bravo" {
            closed_without_drain(&name, status, &log);
            assert!(!log.contains("panicked"), "{name}:\n{log}");
        }
    }
}
