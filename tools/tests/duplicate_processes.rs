//! One process per node id, with real `ferry node` processes on a real redis-server: a second
//! process started with a running node's config refuses to start and leaves the running one
//! alone; a node restarted right after a crash (its lease still current, its process gone) starts
//! at once, without waiting its lease out.

mod common;

use common::processes::{Processes, closed_without_drain, run_ferry, status_json, text};
use common::{TempDir, certs};
use ferry::NodeId;
use ferry::store::{LocationStore, RedisStore, RedisStoreConfig};
use ferry_tests::ports::free_port;
use ferry_tests::redis_server::RedisServer;

/// The redis key prefix of these tests' clusters.
const PREFIX: &str = "tools-duplicates";

/// A lease far longer than the test's hang guard: a start that waited it out would fail the
/// test instead of passing slowly.
const LEASE_TTL_MS: u64 = 600_000;

fn node_config(redis_url: &str) -> String {
    node_config_on(redis_url, 0, 0)
}

/// p1's config with its mesh and admin ports (0: any free one).
fn node_config_on(redis_url: &str, mesh_port: u16, admin_port: u16) -> String {
    format!(
        r#"id = "p1"
mesh_listen = "127.0.0.1:{mesh_port}"
admin = "127.0.0.1:{admin_port}"
certs = "certs"
store = "{redis_url}"
store_prefix = "{PREFIX}"
lease_ttl_ms = {LEASE_TTL_MS}
refresh_ms = 200
"#
    )
}

async fn store(redis: &RedisServer) -> RedisStore {
    RedisStore::connect(&redis.url(), RedisStoreConfig::new(PREFIX))
        .await
        .expect("redis store")
}

fn p1() -> NodeId {
    NodeId::new("p1").expect("valid node id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_a_live_nodes_id_refuses_to_start_and_the_live_one_serves_on() {
    second_start_is_refused(None).await;
}

/// A copy of a config that names its ports: the second process finds the admin port taken, and
/// says whose it is (the live node with its id), not just that the port is in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_a_running_nodes_config_with_its_ports_is_refused_for_the_id_not_the_port() {
    let mesh = free_port().expect("a free port");
    let admin = free_port().expect("a free port");
    second_start_is_refused(Some((mesh, admin))).await;
}

/// Starts p1, then the same config again: refused with one error line that names the id and the
/// live node's mesh address, and the live node keeps its lease and serves on.
async fn second_start_is_refused(ports: Option<(u16, u16)>) {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let tmp = TempDir::new("duplicate");
    certs(&tmp.path().join("certs"), "p1");
    let config = tmp.path().join("p1.toml");
    let (mesh_port, admin_port) = ports.unwrap_or((0, 0));
    std::fs::write(&config, node_config_on(&redis.url(), mesh_port, admin_port))
        .expect("config written");
    let mut processes = Processes::default();
    let ready = processes.start("p1", &config, tmp.path()).await;
    let store = store(&redis).await;
    let lease = store
        .lease_of(&p1())
        .await
        .expect("store read")
        .expect("p1 holds its lease");

    // The same config again, as an operator's copy-paste would.
    let config_arg = config.to_str().expect("utf-8 path");
    let out = run_ferry(&["node", "--config", config_arg]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "no ready line: {}",
        text(&out.stdout)
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("node id p1 is held by a live node at mesh address")
            && errors[0].contains(&ready.mesh.to_string()),
        "names the id and the live node's mesh address: {stderr}"
    );

    // The live one is untouched: same lease, still serving, and it keeps renewing.
    let s = status_json(&ready.admin()).await;
    assert_eq!(s["state"], "Serving", "{s}");
    let now = store
        .lease_of(&p1())
        .await
        .expect("store read")
        .expect("p1 still holds its lease");
    assert_eq!(now.generation, lease.generation);
    let ended = processes.terminate_all().await;
    for (node, status, log) in ended {
        closed_without_drain(&node, status, &log);
        assert!(!log.contains("lost its owner lease"), "{log}");
    }
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_right_after_a_crash_takes_its_lease_back_at_once() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let tmp = TempDir::new("restart");
    certs(&tmp.path().join("certs"), "p1");
    let config = tmp.path().join("p1.toml");
    std::fs::write(&config, node_config(&redis.url())).expect("config written");
    let mut processes = Processes::default();
    let first = processes.start("p1", &config, tmp.path()).await;
    let status = processes.kill(0).await;
    assert!(!status.success(), "killed");
    let store = store(&redis).await;
    let held = store
        .lease_of(&p1())
        .await
        .expect("store read")
        .expect("the dead process's lease is still current");

    // A supervisor restarts it at once: it asks the old holder, hears nothing, and takes over.
    let logs = tmp.path().join("restarted");
    std::fs::create_dir_all(&logs).expect("log dir");
    let again = processes.start("p1", &config, &logs).await;
    assert_ne!(again.admin, first.admin);
    let s = status_json(&again.admin()).await;
    assert_eq!(s["state"], "Serving", "{s}");
    let taken = store
        .lease_of(&p1())
        .await
        .expect("store read")
        .expect("the restarted process holds the lease");
    assert!(taken.generation > held.generation);
    let ended = processes.terminate_all().await;
    let (name, status, log) = ended.last().expect("the restarted process").clone();
    closed_without_drain(&name, status, &log);
    assert!(
        log.contains("does not answer at its mesh address: taking over its lease"),
        "the log says why it took over:\n{log}"
    );
    drop(redis);
}
