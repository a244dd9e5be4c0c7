//! The game's own node binary, twice, on a real redis-server: a counter room made on one node
//! keeps its count and its ticking timer when that node is drained and the room moves to the
//! other; then the nodes stop on SIGTERM.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use ferry::mesh::{ClusterCa, NodeTls};
use ferry::store::{LocationStore, RedisStore, RedisStoreConfig};
use ferry::{MeshSettings, Node, NodeConfig, NodeId, SpotId};
use ferry_host::admin::AdminClient;
use ferry_host::admin::wire::{Outcome, RelocateRequest, UnitKind, UnitRequest};
use ferry_tests::redis_server::RedisServer;
use my_game::{COUNTER, CounterMsg, CounterReport};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A bound on waits that have no timeout of their own, so a broken build fails, not hangs.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// How long one request to the room may take.
const ASK: Duration = Duration::from_secs(10);

fn id(text: &str) -> NodeId {
    NodeId::new(text).expect("node id")
}

/// One node process: the child, and the admin address of its ready line.
struct NodeProcess {
    child: Child,
    admin: String,
    /// Kept open so the node never writes to a closed pipe.
    _stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

/// Starts the game's binary with `config` and waits for its ready line.
async fn start(name: &str, config: &Path, log: &Path) -> NodeProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_my-game"))
        .arg("--config")
        .arg(config)
        // The test's end stops both nodes together: no drain into each other then.
        .env("FERRY_DRAIN_GRACE_MS", "0")
        .env("RUST_LOG", "warn,ferry=info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("the game's node starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(HANG_GUARD, stdout.next_line())
        .await
        .expect("a ready line in time")
        .expect("stdout readable")
        .unwrap_or_else(|| {
            panic!(
                "{name} exited: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        });
    assert!(line.starts_with(&format!("ready {name} ")), "{line}");
    let admin = line
        .split(' ')
        .find_map(|part| part.strip_prefix("admin="))
        .expect("an admin address")
        .to_owned();
    NodeProcess {
        child,
        admin,
        _stdout: stdout,
    }
}

/// Asks the room until `done` holds; each ask is a round trip over the mesh.
async fn ask_until(
    driver: &Node,
    room: &SpotId,
    done: impl Fn(&CounterReport) -> bool,
) -> CounterReport {
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let report: CounterReport = driver
                .request(room, CounterMsg::Get, ASK)
                .await
                .expect("the room answers");
            if done(&report) {
                return report;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the room reached the state in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_room_keeps_its_count_and_its_timer_when_its_node_is_drained() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("my-game-two-nodes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).expect("dirs");
    let ca = ClusterCa::generate().expect("a CA");
    ca.write_files(&certs).expect("CA files");
    for node in ["a", "b", "driver"] {
        let cert = ca.issue_node(&id(node)).expect("a node certificate");
        cert.write_files(&certs).expect("node files");
    }
    let prefix = format!("my-game-{}", std::process::id());
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "id = \"{name}\"\ncerts = \"certs\"\nstore = \"{}\"\nstore_prefix = \"{prefix}\"\n\
                 refresh_ms = 200\n",
                redis.url()
            ),
        )
        .expect("config");
        nodes.push(start(name, &config, &dir.join(format!("{name}.log"))).await);
    }

    // A driver node of the same cluster, with room for no unit, asks the room.
    let store: Arc<dyn LocationStore> = Arc::new(
        RedisStore::connect(&redis.url(), RedisStoreConfig::new(prefix.as_str()))
            .await
            .expect("redis store"),
    );
    let tls = NodeTls::load(&certs, id("driver")).expect("driver certificate");
    let mut config = NodeConfig::new(id("driver"))
        .store(store)
        .mesh(MeshSettings::new("127.0.0.1:0".parse().expect("addr"), tls));
    config.capacity = 0;
    let driver = Node::start(config, my_game::registry())
        .await
        .expect("driver starts");

    // The room is made on a, through a's admin endpoint, and counts there.
    let a = AdminClient::new(&nodes[0].admin).expect("admin address");
    let room = SpotId::new("c1").expect("spot id");
    let created = a
        .create_unit(&UnitRequest {
            kind: UnitKind::Spot,
            factory: COUNTER.to_owned(),
            id: room.to_string(),
            join: None,
        })
        .await
        .expect("the room is created");
    assert_eq!(created.node, "a");
    let added: CounterReport = driver
        .request(&room, CounterMsg::Add(5), ASK)
        .await
        .expect("the room answers");
    assert_eq!((added.count, added.node.as_str()), (5, "a"));
    let before = ask_until(&driver, &room, |r| r.ticks >= 3).await;

    // a is drained: the room moves to b with its count, and its timer ticks on there.
    let drained = a
        .relocate(&RelocateRequest::default())
        .await
        .expect("a drains");
    assert_eq!((drained.outcome, drained.moved), (Outcome::Relocated, 1));
    let moved = ask_until(&driver, &room, |r| r.node == "b").await;
    assert_eq!(moved.count, 5, "the count moved with the room");
    assert!(moved.ticks >= before.ticks, "{moved:?} after {before:?}");
    let later = ask_until(&driver, &room, |r| r.ticks >= moved.ticks + 3).await;
    assert_eq!((later.count, later.node.as_str()), (5, "b"));

    driver.shutdown().await;
    for node in &mut nodes {
        let pid = node.child.id().expect("running");
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let status = tokio::time::timeout(HANG_GUARD, node.child.wait())
            .await
            .expect("the node exits in time")
            .expect("exit status");
        assert_eq!(status.code(), Some(0));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
