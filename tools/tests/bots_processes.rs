//! `ferry bots` against a cluster of three `ferry node` processes on a real redis-server, each a
//! client gateway: the bots create their chat, FPS and bingo rooms through the admin endpoints,
//! play, and lose nothing while `ferry drain` moves every unit off one node under them; a second
//! run on the rooms the first one played reports nothing wrong. A node stopped with SIGTERM
//! under the bots drains first: its rooms go on elsewhere with their state and their players.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use common::processes::{
    Processes, Ready, closed_without_drain, get, raw_http, run_ferry, wait_two_refreshes, within,
};
use common::{TempDir, gateway_certs};
use ferry::NodeId;
use ferry::store::{LocationStore, RedisStore, RedisStoreConfig};
use ferry_tests::redis_server::RedisServer;
use serde_json::Value;

/// The redis key prefix of this test's cluster.
const PREFIX: &str = "tools-bots";

/// The token the gateways take.
const TOKEN: &str = "bots-token";

const NODES: [&str; 3] = ["p1", "p2", "p3"];

/// A gateway node's config on redis under `prefix`; p2 and p3 dial `seeds` (p1) at start.
fn node_config(id: &str, redis_url: &str, prefix: &str, seeds: &[String]) -> String {
    format!(
        "{}sessions_listen = \"127.0.0.1:0\"\nsessions_cert = \"certs/gateway.pem\"\n\
         sessions_key = \"certs/gateway.key\"\nsessions_tokens = \"tokens.txt\"\n",
        plain_config(id, redis_url, prefix, seeds)
    )
}

/// Three node processes on one redis-server under one prefix, linked and published, as the
/// bots tests start them.
struct Nodes {
    tmp: TempDir,
    processes: Processes,
    admins: Vec<String>,
    /// The client gateways, of the nodes that have one.
    gateways: Vec<String>,
    store: Arc<dyn LocationStore>,
    ids: Vec<NodeId>,
}

/// How one node of [`Nodes`] runs.
struct NodeSetup {
    gateway: bool,
    env: &'static [(&'static str, &'static str)],
}

/// A gateway node that closes its units at once when stopped (the tests' default).
const GATEWAY: NodeSetup = NodeSetup {
    gateway: true,
    env: &[("FERRY_DRAIN_GRACE_MS", "0")],
};

impl Nodes {
    /// Starts p1, p2 and p3 in a fresh directory `dir`, each as `setup` says, p2 and p3 with p1
    /// as their seed.
    async fn start(
        redis: &RedisServer,
        dir: &str,
        prefix: &str,
        setup: impl Fn(&str) -> NodeSetup,
    ) -> Nodes {
        let tmp = TempDir::new(dir);
        gateway_certs(&tmp.path().join("certs"), &NODES.join(","));
        std::fs::write(tmp.path().join("tokens.txt"), format!("{TOKEN} bots\n")).expect("tokens");
        let mut processes = Processes::default();
        let mut nodes: Vec<Ready> = Vec::new();
        let mut seeds = Vec::new();
        for name in NODES {
            let config = tmp.path().join(format!("{name}.toml"));
            let NodeSetup { gateway, env } = setup(name);
            let text = if gateway {
                node_config(name, &redis.url(), prefix, &seeds)
            } else {
                plain_config(name, &redis.url(), prefix, &seeds)
            };
            std::fs::write(&config, text).expect("config");
            let ready = processes.start_with(name, &config, tmp.path(), env).await;
            if seeds.is_empty() {
                seeds.push(format!("{name}@{}", ready.mesh));
            }
            nodes.push(ready);
        }
        let admins: Vec<String> = nodes.iter().map(Ready::admin).collect();
        let gateways = nodes
            .iter()
            .filter_map(|r| r.sessions.map(|s| s.to_string()))
            .collect();
        let store: Arc<dyn LocationStore> = Arc::new(
            RedisStore::connect(&redis.url(), RedisStoreConfig::new(prefix))
                .await
                .expect("redis store"),
        );
        let ids: Vec<NodeId> = NODES
            .iter()
            .map(|n| NodeId::new(*n).expect("valid id"))
            .collect();
        wait_two_refreshes(&store, &ids).await;
        linked(&admins).await;
        Nodes {
            tmp,
            processes,
            admins,
            gateways,
            store,
            ids,
        }
    }

    /// The CA the gateways' certificate chains to.
    fn ca(&self) -> PathBuf {
        self.tmp.path().join("certs/gateway.pem")
    }

    /// Starts `ferry bots` on two rooms of each game with two players each (made through the
    /// admin endpoints), for `duration`, and waits until every bot connected.
    async fn bots(&self, duration: &str) -> tokio::process::Child {
        let bots = tokio::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["bots", "--cluster", &self.gateways.join(","), "--ca"])
            .arg(self.ca())
            .args(["--token", TOKEN, "--admin", &self.admins.join(",")])
            .args(["--game", "chat,fps,bingo", "--rooms", "2", "--players", "2"])
            .args(["--duration", duration, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("ferry bots starts");
        playing(&self.admins, BOTS).await;
        bots
    }
}

/// Waits for a `ferry bots` run to end, checks that it succeeded, and returns its JSON report.
async fn report_of(bots: tokio::process::Child) -> Value {
    let out = within("ferry bots to finish", bots.wait_with_output())
        .await
        .expect("ferry bots ran");
    assert!(
        out.status.success(),
        "ferry bots failed: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("the report is JSON")
}

/// The bots of [`Nodes::bots`]: two rooms of each of three games, two players each.
const BOTS: u64 = 3 * 2 * 2;

/// A node's config on redis under `prefix`, no gateway; it dials `seeds` at start.
fn plain_config(id: &str, redis_url: &str, prefix: &str, seeds: &[String]) -> String {
    let seeds: Vec<String> = seeds.iter().map(|s| format!("{s:?}")).collect();
    format!(
        r#"id = "{id}"
certs = "certs"
store = "{redis_url}"
store_prefix = "{prefix}"
refresh_ms = 200
seeds = [{}]
"#,
        seeds.join(", ")
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `GET /status` of a node, as JSON.
async fn status(admin: &str) -> Value {
    let (code, body) = raw_http(admin, &get("/status")).await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("status JSON")
}

/// Waits until every node lists every other as a ready mesh peer.
async fn linked(admins: &[String]) {
    within("the mesh links between the nodes", async {
        for admin in admins {
            loop {
                let peers = status(admin).await["peers"].clone();
                let ready = peers
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["link"] == "Ready")
                    .count();
                if ready == admins.len() - 1 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
    })
    .await;
}

/// Waits until the gateways hold `bots` client sessions between them: every bot has connected,
/// so every room and player it plays was created before.
async fn playing(admins: &[String], bots: u64) {
    within("every bot connected", async {
        loop {
            let mut sessions = 0;
            for admin in admins {
                sessions += status(admin).await["sessions"].as_u64().unwrap_or(0);
            }
            if sessions >= bots {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_lose_nothing_while_a_node_process_is_drained_under_them() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let mut nodes = Nodes::start(&redis, "bots-drain", PREFIX, |_| GATEWAY).await;
    let bots = nodes.bots("10s").await;
    let (admins, gateways, ca) = (nodes.admins.clone(), nodes.gateways.clone(), nodes.ca());
    let p1 = admins[0].as_str();
    let before = status(p1).await["units"].as_u64().unwrap_or(0);
    assert_eq!(before, 3 * 3, "room 0 of each game and its players on p1");

    let out = run_ferry(&["drain", p1, "--deadline", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.starts_with("relocated: "), "{said}");
    let after = status(p1).await;
    assert_eq!(
        (after["state"].as_str(), after["units"].as_u64()),
        (Some("Relocated"), Some(0))
    );

    let report = report_of(bots).await;
    all_applied(&report, BOTS);
    assert!(
        report["tick_gaps"]["count"].as_u64() > Some(0),
        "{report:#}"
    );

    // A second run on the rooms the first one played, of every game: the bots count from the
    // state they find, so nothing is reported lost, doubled, reordered or rebuilt.
    let out = run_ferry(&[
        "bots",
        "--cluster",
        &gateways.join(","),
        "--ca",
        ca.to_str().expect("utf-8 path"),
        "--token",
        TOKEN,
        "--game",
        "chat,fps,bingo",
        "--rooms",
        "2",
        "--players",
        "2",
        "--duration",
        "2s",
        "--json",
    ])
    .await;
    assert!(
        out.status.success(),
        "the second run: {}",
        text(&out.stderr)
    );
    let again: Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
    clean(&again, BOTS);

    for (name, status, log) in nodes.processes.terminate_all().await {
        closed_without_drain(&name, status, &log);
        assert!(!log.contains("panicked"), "{name}:\n{log}");
    }
    drop(nodes);
    drop(redis);
}

/// The checks of a bots report: every bot played, and nothing was lost, doubled, reordered or
/// found other than the bot worked it out.
fn clean(report: &Value, bots: u64) {
    all_applied(report, bots);
    assert_eq!(report["inputs_lost_in_rebuilds"], 0, "{report:#}");
    assert_eq!(
        report["rooms_rebuilt"].as_array().map(Vec::len),
        Some(0),
        "{report:#}"
    );
}

/// Every bot played and sent, and every input it sent was applied: none lost or doubled.
fn all_applied(report: &Value, bots: u64) {
    no_faults(report, bots);
    assert!(report["inputs_sent"].as_u64() > Some(0), "{report:#}");
    assert_eq!(
        report["inputs_applied"], report["inputs_sent"],
        "{report:#}"
    );
}

/// Every bot played to the end, and saw no input lost, doubled or out of order and no push the
/// game's rules do not explain.
fn no_faults(report: &Value, bots: u64) {
    assert_eq!(report["players"], bots, "{report:#}");
    for fault in ["lost", "duplicated", "reordered"] {
        assert_eq!(report["inputs"][fault], 0, "{fault}: {report:#}");
    }
    assert_eq!(report["mismatches"], 0, "{report:#}");
    assert_eq!(
        report["errors"].as_array().map(Vec::len),
        Some(0),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_with_sigterm_under_bots_drains_and_its_rooms_go_on_elsewhere() {
    const PREFIX: &str = "tools-bots-sigterm";
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    // p1 hosts rooms but no gateway, and a signal drains it (the default drain_grace_ms); p2
    // and p3 are the gateways the bots connect to.
    let mut nodes = Nodes::start(&redis, "bots-sigterm", PREFIX, |name| match name {
        "p1" => NodeSetup {
            gateway: false,
            env: &[],
        },
        _ => GATEWAY,
    })
    .await;
    assert_eq!(nodes.gateways.len(), 2);
    // Room 0 of every game, with its two players, on p1.
    let bots = nodes.bots("10s").await;
    let (admins, processes) = (nodes.admins.clone(), &mut nodes.processes);
    let p1 = admins[0].clone();
    assert_eq!(status(&p1).await["units"].as_u64(), Some(3 * 3));

    // SIGTERM, as Kubernetes or systemd stop a process: p1 drains, then exits 0.
    processes.terminate(0);
    let (_, exit, log) = processes.wait(0).await;
    assert_eq!(exit.code(), Some(0), "p1 lost nothing:\n{log}");
    assert!(log.contains("draining, then stopping"), "{log}");
    let mut hosted = 0;
    for admin in &admins[1..] {
        hosted += status(admin).await["units"].as_u64().unwrap_or(0);
    }
    // Two rooms of each game with two players each: p1's 9 units moved to p2 and p3.
    assert_eq!(hosted, 3 * 2 * 3, "every unit runs on p2 or p3");

    // The bots check every line, tick, card and mark against the state they see: the rooms
    // went on from where they were, with every input applied once.
    clean(&report_of(bots).await, BOTS);

    for (name, status, log) in processes.terminate_all().await {
        if name != "p1" {
            closed_without_drain(&name, status, &log);
        }
        assert!(!log.contains("panicked"), "{name}:\n{log}");
    }
    drop(nodes);
    drop(redis);
}

/// A node killed with SIGKILL under bots, its rooms keeping the confirmed standby `ferry node`
/// gives them: p1 hosts room 0 of every game with its players and no gateway, so the bots stay
/// connected through p2 and p3 while it dies. Its rooms come back from their copies on the
/// survivors, not from nothing, and the bots lose nothing they were told had happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_under_bots_comes_back_from_its_standbys_and_loses_nothing_confirmed() {
    const PREFIX: &str = "tools-bots-kill";
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    // A short lease, so that the survivors take p1 for dead within seconds.
    const ENV: &[(&str, &str)] = &[
        ("FERRY_DRAIN_GRACE_MS", "0"),
        ("FERRY_LEASE_TTL_MS", "2000"),
    ];
    let mut nodes = Nodes::start(&redis, "bots-kill", PREFIX, |name| NodeSetup {
        gateway: name != "p1",
        env: ENV,
    })
    .await;
    let bots = nodes.bots("20s").await;
    let (admins, processes) = (nodes.admins.clone(), &mut nodes.processes);
    // p1's three rooms and their six players, each room's copy current on p2 or p3.
    within("p1's standbys to hold its rooms", async {
        loop {
            let p1 = status(&admins[0]).await;
            let rooms = p1["standby"]["rooms"].as_u64();
            if p1["units"].as_u64() == Some(3 * 3)
                && rooms == Some(3)
                && p1["standby"]["current"].as_u64() == rooms
            {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;

    assert!(!processes.kill(0).await.success());
    within("p1's units to run on p2 and p3", async {
        loop {
            let mut units = 0;
            for admin in &admins[1..] {
                units += status(admin).await["units"].as_u64().unwrap_or(0);
            }
            if units == 3 * 2 * 3 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;

    let report = report_of(bots).await;
    no_faults(&report, BOTS);
    assert_eq!(report["confirmed_inputs_lost"], 0, "{report:#}");
    assert_eq!(report["room_outcomes"]["rebuilt"], 0, "{report:#}");

    for (name, _, log) in processes.terminate_all().await {
        assert!(!log.contains("panicked"), "{name}:\n{log}");
    }
    drop(nodes);
    drop(redis);
}

/// The operator's bad evening, on three gateway nodes under bots: a second start with a running
/// node's id, a drain, a kill -9 of the drained node and its restart, a kill -9 of a node that
/// received rooms (a gateway too), and a drain of the last node while that one is dead. The bots
/// see nothing lost, doubled or out of order: the dead node's rooms are reported rebuilt, with
/// what died with them counted apart, and every other room plays on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_play_on_through_a_duplicate_start_a_drain_two_kills_and_a_drain_beside_a_dead_node() {
    const PREFIX: &str = "tools-bots-evening";
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    // A short lease, so that recovery of the killed node starts within seconds.
    const ENV: &[(&str, &str)] = &[
        ("FERRY_DRAIN_GRACE_MS", "0"),
        ("FERRY_LEASE_TTL_MS", "3000"),
    ];
    let mut nodes = Nodes::start(&redis, "bots-evening", PREFIX, |_| NodeSetup {
        gateway: true,
        env: ENV,
    })
    .await;
    let mut bots = nodes.bots("40s").await;
    let (admins, tmp) = (nodes.admins.clone(), nodes.tmp.path().to_owned());
    let (store, ids) = (nodes.store.clone(), nodes.ids.clone());
    let processes = &mut nodes.processes;

    // A copy of p3's config started again: refused, and p3 serves on.
    let p3_config = tmp.join("p3.toml");
    let out = run_ferry(&["node", "--config", p3_config.to_str().expect("utf-8 path")]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("node id p3 is held by a live node"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(status(&admins[2]).await["state"], "Serving");

    // p1 drained, killed, and restarted by its supervisor at once.
    let out = run_ferry(&["drain", &admins[0], "--deadline", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!processes.kill(0).await.success());
    let logs = tmp.join("restarted");
    std::fs::create_dir_all(&logs).expect("log dir");
    let p1 = processes
        .start_with("p1", &tmp.join("p1.toml"), &logs, ENV)
        .await;
    let p1_admin = p1.admin();

    // p2, which received some of p1's rooms and is a gateway, killed; p3 drained while its
    // lease still runs: p3's rooms move to p1, and p2's are rebuilt there.
    assert!(!processes.kill(1).await.success());
    let out = run_ferry(&["drain", &admins[2], "--deadline", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.starts_with("relocated: "), "{said}");
    assert!(
        matches!(bots.try_wait(), Ok(None)),
        "the bots finished before the evening did: raise their --duration"
    );

    let report = report_of(bots).await;
    no_faults(&report, BOTS);
    assert!(
        report["rooms_rebuilt"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "p2's rooms were rebuilt: {report:#}"
    );
    // Every room and player runs on p1 now.
    within("recovery to place every unit on p1", async {
        while status(&p1_admin).await["units"].as_u64() != Some(3 * 2 * 3) {
            wait_two_refreshes(&store, &ids[..1]).await;
        }
    })
    .await;

    for (name, _, log) in processes.terminate_all().await {
        assert!(!log.contains("panicked"), "{name}:\n{log}");
    }
    drop(nodes);
    drop(redis);
}
