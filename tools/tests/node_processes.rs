//! A cluster of `ferry node` processes on a real redis-server, as an operator runs one: certificates
//! from `ferry certs`, one config file per node, the `ready` line awaited, SIGTERM to stop. A driver
//! node inside the test joins the same cluster to place spots and talk to them over the mesh.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::processes::{
    Processes, closed_without_drain, driver, get, post, raw_http, read_log, settle,
    wait_two_refreshes, within,
};
use common::{TempDir, certs};
use ferry::cluster::authority::{node_key, unit_key};
use ferry::store::{LocationStore, RedisStore, RedisStoreConfig};
use ferry::{Node, NodeId, SpotId, UnitId};
use ferry_samples::ping::{self, PingMsg, PingReport};
use ferry_tests::cluster::ANOTHER_PROCESS;
use ferry_tests::etcd_server::EtcdServer;
use ferry_tests::redis_server::RedisServer;
use ferry_tests::rooms::ping_registry;

/// How long one request may take.
const T: Duration = Duration::from_secs(10);

/// The redis key prefix of this test's cluster.
const PREFIX: &str = "tools-processes";

/// The application version every node of the test runs.
const VERSION: &str = "7";

fn id(text: &str) -> NodeId {
    NodeId::new(text).expect("valid node id")
}

fn spot(text: &str) -> SpotId {
    SpotId::new(text).expect("valid spot id")
}

async fn report(driver: &Node, id: &SpotId) -> PingReport {
    driver
        .request(id, PingMsg::Report, T)
        .await
        .expect("report")
}

/// Asks `id` for its report until `done` holds; each ask is a real round trip over the mesh.
async fn report_until(
    driver: &Node,
    id: &SpotId,
    done: impl Fn(&PingReport) -> bool,
) -> PingReport {
    for _ in 0..10_000 {
        let r = report(driver, id).await;
        if done(&r) {
            return r;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "{id} never reached the expected state: {:?}",
        report(driver, id).await
    )
}

fn node_config(id: &str, store_url: &str) -> String {
    format!(
        r#"id = "{id}"
app_version = "{VERSION}"
mesh_listen = "127.0.0.1:0"
certs = "certs"
store = "{store_url}"
store_prefix = "{PREFIX}"
capacity = 1000
weight = 2
lease_ttl_ms = 10000
refresh_ms = 200
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_node_processes_on_redis_exchange_tells_and_requests_across_all_pairs() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    three_processes_exchange(&redis.url()).await;
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_node_processes_on_etcd_exchange_tells_and_requests_across_all_pairs() {
    let Some(etcd) = EtcdServer::start_or_skip().await else {
        return;
    };
    three_processes_exchange(&etcd.url()).await;
    drop(etcd);
}

/// Three `ferry node` processes on the store at `store_url` find each other, talk across every
/// pair, and leave the store clean when they stop.
async fn three_processes_exchange(store_url: &str) {
    let tmp = TempDir::new("processes");
    let certs_dir = tmp.path().join("certs");
    certs(&certs_dir, "p1,p2,p3,driver");

    let names = ["p1", "p2", "p3"];
    let mut processes = Processes::default();
    let mut addrs = BTreeMap::new();
    for name in names {
        let config = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&config, node_config(name, store_url)).expect("config written");
        let ready = processes.start(name, &config, tmp.path()).await;
        addrs.insert(name.to_owned(), ready.mesh);
    }

    let (driver, store) = driver(store_url, PREFIX, VERSION, &certs_dir, ping_registry()).await;

    let mut view = Vec::new();
    for _ in 0..1_000 {
        driver.refresh_membership().await.expect("membership read");
        view = driver.cluster_view();
        if view.len() == 4 {
            break;
        }
    }
    let seen: BTreeMap<String, _> = view.iter().map(|d| (d.node.to_string(), d)).collect();
    assert_eq!(
        seen.keys().map(String::as_str).collect::<Vec<_>>(),
        ["driver", "p1", "p2", "p3"],
        "the driver sees every process"
    );
    for name in names {
        let d = seen[name];
        assert_eq!(
            d.mesh_addr,
            Some(addrs[name]),
            "{name} publishes the address it printed"
        );
        assert_eq!(d.app_version, VERSION, "{name}'s app_version");
        assert_eq!(
            (d.capacity, d.weight),
            (1000, 2),
            "{name}'s capacity and weight"
        );
        let mut factories = d.factories.clone();
        factories.sort();
        assert_eq!(
            factories,
            [
                "bingo-matchmaker",
                "bingo-player",
                "bingo-room",
                "chat-room",
                "chatter",
                "fps-player",
                "fps-room",
                "ping"
            ],
            "{name} hosts every sample"
        );
    }
    let nodes: Vec<NodeId> = names.iter().map(|n| id(n)).collect();
    for node in &nodes {
        within(&format!("link to {node}"), driver.wait_peer_ready(node))
            .await
            .expect("peer link up");
    }
    // A process learns of nodes that started after it from their dial or its next refresh; wait
    // for the refresh so that every process knows every other before spots talk.
    wait_two_refreshes(&store, &nodes).await;

    let spots: Vec<SpotId> = (1..=3).map(|i| spot(&format!("p-spot-{i}"))).collect();
    for (node, id) in nodes.iter().zip(&spots) {
        driver
            .create_spot_on(node, ping::PING, id)
            .await
            .expect("spot created");
    }
    for (node, id) in nodes.iter().zip(&spots) {
        assert_eq!(
            report(&driver, id).await.node,
            node.as_str(),
            "{id} lives in {node}"
        );
    }

    const PINGS: u64 = 100;
    let others =
        |id: &SpotId| -> Vec<SpotId> { spots.iter().filter(|o| *o != id).cloned().collect() };
    for id in &spots {
        driver
            .tell(
                id,
                PingMsg::PingOthers {
                    to: others(id),
                    count: PINGS,
                },
            )
            .expect("told");
    }
    let in_order: Vec<u64> = (0..PINGS).collect();
    for id in &spots {
        let r = report_until(&driver, id, |r| {
            r.pings.len() == 2 && r.pings.values().all(|v| v.len() as u64 >= PINGS)
        })
        .await;
        let want: BTreeMap<String, Vec<u64>> = others(id)
            .iter()
            .map(|o| (o.to_string(), in_order.clone()))
            .collect();
        assert_eq!(
            r.pings, want,
            "pings to {id}: each once, in order, from each other process"
        );
    }

    for id in &spots {
        driver
            .tell(id, PingMsg::AskOthers { to: others(id) })
            .expect("told");
    }
    for id in &spots {
        let r = report_until(&driver, id, |r| r.answers.len() == 2).await;
        let want: BTreeMap<String, Result<u64, String>> = others(id)
            .iter()
            .map(|o| (o.to_string(), Ok(2 * PINGS)))
            .collect();
        assert_eq!(
            r.answers, want,
            "requests from {id} to the spots in the other processes"
        );
    }

    driver.shutdown().await;
    for (name, status, log) in processes.terminate_all().await {
        // Each hosted its room, and closed it without a drain, as the test's grace of 0 asks.
        assert_eq!(
            closed_without_drain(&name, status, &log),
            1,
            "{name}:\n{log}"
        );
    }
    // A stopped node leaves the cluster: its descriptor and its spot's record are gone.
    for (node, id) in nodes.iter().zip(&spots) {
        let descriptor = store.get(&node_key(node)).await.expect("store read");
        assert!(descriptor.is_none(), "{node} withdrew its descriptor");
        let record = store
            .get(&unit_key(&UnitId::Spot(id.clone())))
            .await
            .expect("store read");
        assert!(record.is_none(), "{node} released {id}");
    }
    drop(processes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_process_that_loses_its_lease_shuts_down_and_exits_non_zero() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let tmp = TempDir::new("lease");
    certs(&tmp.path().join("certs"), "p1");
    let config = tmp.path().join("p1.toml");
    let text =
        node_config("p1", &redis.url()).replace("lease_ttl_ms = 10000", "lease_ttl_ms = 600");
    std::fs::write(&config, text).expect("config written");
    let mut processes = Processes::default();
    processes.start("p1", &config, tmp.path()).await;

    // Someone else takes p1's lease (a second p1 started by mistake, say): the running one can no
    // longer prove it owns its units, and must stop rather than act as their owner.
    let store = RedisStore::connect(&redis.url(), RedisStoreConfig::new(PREFIX))
        .await
        .expect("redis store");
    store
        .acquire_lease(&id("p1"), ANOTHER_PROCESS, Duration::from_secs(30))
        .await
        .expect("lease taken");
    let (_, status, log) = processes.wait(0).await;
    assert_eq!(
        status.code(),
        Some(1),
        "p1 exits 1 once its lease is gone:\n{log}"
    );
    // It names the cause: another process took the id, not the store's health.
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(
            "error: node p1 stopped: another process started as p1 took over its owner lease"
        ),
        "the last line says why:\n{log}"
    );
    assert!(!last.contains("store's health"), "{last}");
    drop(processes);
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_processes_run_on_through_a_20_s_redis_restart() {
    let Some(mut redis) = RedisServer::start_persistent_or_skip().await else {
        return;
    };
    let tmp = TempDir::new("outage");
    let certs_dir = tmp.path().join("certs");
    certs(&certs_dir, "p1,p2,driver");
    let names = ["p1", "p2"];
    let mut processes = Processes::default();
    for name in names {
        let config = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&config, node_config(name, &redis.url())).expect("config written");
        processes.start(name, &config, tmp.path()).await;
    }
    let (driver, store) = driver(&redis.url(), PREFIX, VERSION, &certs_dir, ping_registry()).await;
    let nodes: Vec<NodeId> = names.iter().map(|n| id(n)).collect();
    settle(&driver, &store, &nodes).await;
    let spots: Vec<SpotId> = names.iter().map(|n| spot(&format!("{n}-room"))).collect();
    for (node, id) in nodes.iter().zip(&spots) {
        driver
            .create_spot_on(node, ping::PING, id)
            .await
            .expect("spot created");
    }

    // Twice the lease TTL without a store: no process ends (they used to exit 1 within 10 s).
    redis.stop();
    let down = tokio::time::Instant::now();
    while down.elapsed() < Duration::from_secs(20) {
        for (i, name) in names.iter().enumerate() {
            assert!(processes.running(i), "{name} ended during the outage");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    redis
        .restart_keeping_data()
        .await
        .expect("redis-server starts again with its data");

    // Each room still answers from the node it was created on, and each node stops cleanly.
    for (node, id) in nodes.iter().zip(&spots) {
        let found = report_until(&driver, id, |r| r.node == node.as_str()).await;
        assert_eq!(found.node, node.as_str(), "{id} still lives in {node}");
    }
    driver.shutdown().await;
    for (name, status, log) in processes.terminate_all().await {
        // Each hosted its room, and closed it without a drain, as the test's grace of 0 asks.
        assert_eq!(
            closed_without_drain(&name, status, &log),
            1,
            "{name}:\n{log}"
        );
    }
    drop(processes);
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_the_json_log_format_writes_one_json_object_a_line() {
    let tmp = TempDir::new("json-log");
    certs(&tmp.path().join("certs"), "j1");
    let config = tmp.path().join("j1.toml");
    std::fs::write(&config, "id = \"j1\"\ncerts = \"certs\"\n").expect("config");
    let mut processes = Processes::default();
    // The format from the environment, as a container sets it.
    processes
        .start_with(
            "j1",
            &config,
            tmp.path(),
            &[("FERRY_LOG_FORMAT", "json"), ("FERRY_DRAIN_GRACE_MS", "0")],
        )
        .await;
    let ended = processes.terminate_all().await;
    let (_, status, log) = &ended[0];
    assert_eq!(
        status.code(),
        Some(0),
        "a node that hosted nothing lost nothing:\n{log}"
    );
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "the node logged its start and stop");
    for line in &lines {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"));
        assert!(
            event["level"].is_string() && event["fields"].is_object(),
            "{line}"
        );
    }
    assert!(lines.iter().any(|l| l.contains("stop requested")), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_drain_that_cannot_move_its_units_exits_non_zero_and_a_second_signal_stops_at_once()
 {
    let tmp = TempDir::new("signals");
    certs(&tmp.path().join("certs"), "s1,s2");
    let mut processes = Processes::default();
    // A node alone, with a room: a drain has nowhere to send it.
    let room = ROOM;

    // The default grace (25 s), but nowhere to go: the drain says so at once, the node stops,
    // and the exit says the room ended with it and its state is lost.
    let config = alone(&tmp, "s1");
    let ready = processes.start_with("s1", &config, tmp.path(), &[]).await;
    let (code, body) = raw_http(&ready.admin(), &post("/units", room)).await;
    assert_eq!(code, 201, "{body}");
    processes.terminate(0);
    let (_, status, log) = processes.wait(0).await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("draining, then stopping"), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.contains("NoServingPeer") && last.contains("their state is lost"),
        "{log}"
    );

    // A second SIGTERM while a drain runs stops the node at once: here an operator's rolling
    // update to a version no node runs, which waits for one.
    let config = alone(&tmp, "s2");
    let ready = processes.start_with("s2", &config, tmp.path(), &[]).await;
    let admin = ready.admin();
    let (code, body) = raw_http(&admin, &post("/units", room)).await;
    assert_eq!(code, 201, "{body}");
    let _drain = waiting_drain(&admin).await;
    processes.terminate(1);
    let log_file = tmp.path().join("s2.log");
    within("the first signal to be taken", async {
        while !read_log(&log_file).contains("draining, then stopping") {
            tokio::task::yield_now().await;
        }
    })
    .await;
    processes.terminate(1);
    let (_, status, log) = processes.wait(1).await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("a second stop signal"), "{log}");
    assert!(
        log.contains("stopped at once on a second stop signal, while it drained; the units it still hosted (1) were closed"),
        "{log}"
    );
}

/// Starts an operator's rolling update of an hour to a version no node runs, which waits for
/// one, and returns once the node drains.
async fn waiting_drain(
    admin: &str,
) -> tokio::task::JoinHandle<
    Result<ferry_host::admin::wire::DrainReport, ferry_host::admin::ClientError>,
> {
    let client = ferry_host::admin::AdminClient::new(admin).expect("admin address");
    let drain = tokio::spawn(async move {
        let request = ferry_host::admin::wire::RelocateRequest {
            mode: ferry_host::admin::wire::Mode::RollingUpdate,
            version: Some("9".into()),
            deadline_ms: Some(3_600_000),
        };
        client.relocate(&request).await
    });
    within("the operator's drain to start", async {
        while raw_http(admin, &get("/readyz")).await.0 == 200 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    drain
}

/// A config for a node alone, with nothing to drain its units to.
fn alone(tmp: &TempDir, name: &str) -> std::path::PathBuf {
    let config = tmp.path().join(format!("{name}.toml"));
    std::fs::write(&config, format!("id = \"{name}\"\ncerts = \"certs\"\n")).expect("config");
    config
}

/// A ping room, as `POST /units` takes it.
const ROOM: &str = r#"{"kind":"spot","factory":"ping","id":"stuck"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_with_no_grace_closes_the_rooms_and_the_exit_code_says_they_were_lost() {
    let tmp = TempDir::new("no-grace");
    certs(&tmp.path().join("certs"), "g1");
    let mut processes = Processes::default();
    // A typo beside the grace: the node names the key it was meant for.
    let ready = processes
        .start_with(
            "g1",
            &alone(&tmp, "g1"),
            tmp.path(),
            &[("FERRY_DRAIN_GRACE_MS", "0"), ("FERRY_ADMN", "0.0.0.0:1")],
        )
        .await;
    let (code, body) = raw_http(&ready.admin(), &post("/units", ROOM)).await;
    assert_eq!(code, 201, "{body}");
    processes.terminate(0);
    let (name, status, log) = processes.wait(0).await;
    assert_eq!(closed_without_drain(&name, status, &log), 1, "{log}");
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("FERRY_ADMN is no config key"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("did you mean FERRY_ADMIN "), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_during_an_operators_long_drain_stops_the_node_when_its_grace_runs_out() {
    let tmp = TempDir::new("grace-cap");
    certs(&tmp.path().join("certs"), "c1");
    let mut processes = Processes::default();
    let ready = processes
        .start_with(
            "c1",
            &alone(&tmp, "c1"),
            tmp.path(),
            &[("FERRY_DRAIN_GRACE_MS", "500")],
        )
        .await;
    let admin = ready.admin();
    let (code, body) = raw_http(&admin, &post("/units", ROOM)).await;
    assert_eq!(code, 201, "{body}");
    // An operator's drain of an hour that waits all of it for a node of its version.
    let drain = waiting_drain(&admin).await;
    // SIGTERM: the stop keeps to its own grace, not to the operator's hour.
    processes.terminate(0);
    let (_, status, log) = processes.wait(0).await;
    assert_eq!(status.code(), Some(1), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(
            "error: node c1 stopped at once when its stop signal's grace (drain_grace_ms = 500) \
             ran out while an operator's drain still ran; the units it still hosted (1) were closed"
        ),
        "{log}"
    );
    // The operator hears that the stop ended the drain, with the room it could not move.
    let answered = within("the drain's request to end", drain)
        .await
        .expect("the request task")
        .expect("the drain's answer");
    assert_eq!(
        (answered.outcome, answered.reason),
        (
            ferry_host::admin::wire::Outcome::Blocked,
            Some(ferry::BlockedReason::ShutdownRequested)
        ),
        "{answered:?}"
    );
    assert_eq!(answered.stayed, ["spot:stuck"]);
}

/// Every line of a JSON log, each parsed; fails on a line that is no JSON object of an event.
fn json_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let event: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"));
            assert!(
                event["level"].is_string() && event["fields"]["message"].is_string(),
                "{line}"
            );
            event
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_logging_node_ends_with_its_error_as_one_more_json_event() {
    let tmp = TempDir::new("json-error");
    certs(&tmp.path().join("certs"), "j2");
    let mut processes = Processes::default();
    let ready = processes
        .start_with(
            "j2",
            &alone(&tmp, "j2"),
            tmp.path(),
            &[("FERRY_LOG_FORMAT", "json"), ("FERRY_DRAIN_GRACE_MS", "0")],
        )
        .await;
    let (code, body) = raw_http(&ready.admin(), &post("/units", ROOM)).await;
    assert_eq!(code, 201, "{body}");
    processes.terminate(0);
    let (_, status, log) = processes.wait(0).await;
    assert_eq!(status.code(), Some(1), "{log}");
    let events = json_lines(&log);
    let last = events.last().expect("a log");
    assert_eq!(last["level"], "ERROR", "{last}");
    let message = last["fields"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("node j2 stopped without a drain") && message.contains("(1)"),
        "{last}"
    );
    assert!(last["timestamp"].is_string(), "{last}");

    // A start that fails once the log is installed (no certificate for this node) ends the same way.
    let config = alone(&tmp, "j3");
    let out = common::ferry()
        .arg("node")
        .arg("--config")
        .arg(&config)
        .env("FERRY_LOG_FORMAT", "json")
        .output()
        .expect("ferry runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let events = json_lines(&stderr);
    let last = events.last().expect("an error");
    assert_eq!(last["level"], "ERROR", "{stderr}");
    let message = last["fields"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("cannot load the mesh certificates of node j3"),
        "{stderr}"
    );
}
