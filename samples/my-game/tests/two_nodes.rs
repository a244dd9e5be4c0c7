//! The game's own node binary, twice, on a real redis-server: a counter room made on one node
//! keeps its count and its ticking timer when that node is drained and the room moves to the
//! other, as the game's admin page on either node shows; SIGTERM drains it back with both; and
//! the last node, stopped without a drain, says in its exit that the room was lost.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ferry::NodeId;
use ferry::mesh::ClusterCa;
use ferry_host::admin::wire::{Outcome, RelocateRequest, UnitKind, UnitRequest};
use ferry_host::admin::{AdminClient, ClientError};
use ferry_tests::redis_server::RedisServer;
use my_game::{COUNTER, CounterReport};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A bound on waits that have no timeout of their own, so a broken build fails, not hangs.
const HANG_GUARD: Duration = Duration::from_secs(120);

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

/// Starts the game's binary with `config` and `drain_grace_ms`, and waits for its ready line.
async fn start(name: &str, config: &Path, log: &Path, drain_grace_ms: &str) -> NodeProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_my-game"))
        .arg("--config")
        .arg(config)
        .env("FERRY_DRAIN_GRACE_MS", drain_grace_ms)
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

/// Sends SIGTERM to the node, as a supervisor stopping it does.
fn sigterm(node: &NodeProcess) {
    let pid = node.child.id().expect("running");
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
}

/// Waits for the node to exit; returns how it ended and its log.
async fn exit(node: &mut NodeProcess, log: &Path) -> (std::process::ExitStatus, String) {
    let status = tokio::time::timeout(HANG_GUARD, node.child.wait())
        .await
        .expect("the node exits in time")
        .expect("exit status");
    (status, std::fs::read_to_string(log).unwrap_or_default())
}

/// Reads the room on a node's admin page until `done` holds; each read is a round trip to
/// wherever the room runs.
async fn ask_until(admin: &AdminClient, done: impl Fn(&CounterReport) -> bool) -> CounterReport {
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let report: CounterReport = admin
                .get("/counters/c1")
                .await
                .expect("the page shows the room");
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
async fn a_counter_room_keeps_its_count_and_its_timer_through_a_drain_and_a_sigterm() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("my-game-two-nodes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).expect("dirs");
    let ca = ClusterCa::generate().expect("a CA");
    ca.write_files(&certs).expect("CA files");
    for node in ["a", "b"] {
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
        // a stops last, with no node to drain to: without a drain, then.
        let grace = if name == "a" { "0" } else { "20000" };
        nodes.push(start(name, &config, &dir.join(format!("{name}.log")), grace).await);
    }
    let a = AdminClient::new(&nodes[0].admin).expect("admin address");
    let b = AdminClient::new(&nodes[1].admin).expect("admin address");

    // No room yet: the page says so, and how to make one.
    match a.get::<CounterReport>("/counters/c1").await {
        Err(ClientError::Refused {
            status, message, ..
        }) => {
            assert_eq!(status.as_u16(), 404, "{message}");
            assert!(message.contains("POST /units"), "{message}");
        }
        other => panic!("a page for a room that is not there: {other:?}"),
    }

    // The room is made on a, through a's admin endpoint, and counts there; b's page reaches it.
    let created = a
        .create_unit(&UnitRequest {
            kind: UnitKind::Spot,
            factory: COUNTER.to_owned(),
            id: "c1".to_owned(),
            join: None,
        })
        .await
        .expect("the room is created");
    assert_eq!(created.node, "a");
    let added: CounterReport = b.post("/counters/c1/add/5").await.expect("b adds");
    assert_eq!((added.count, added.node.as_str()), (5, "a"));
    let before = ask_until(&a, |r| r.ticks >= 3).await;

    // a is drained: the room moves to b with its count, and its timer ticks on there.
    let drained = a
        .relocate(&RelocateRequest::default())
        .await
        .expect("a drains");
    assert_eq!((drained.outcome, drained.moved), (Outcome::Relocated, 1));
    let moved = ask_until(&a, |r| r.node == "b").await;
    assert_eq!(moved.count, 5, "the count moved with the room");
    assert!(moved.ticks >= before.ticks, "{moved:?} after {before:?}");
    let later = ask_until(&b, |r| r.ticks >= moved.ticks + 3).await;
    assert_eq!((later.count, later.node.as_str()), (5, "b"));

    // a serves again, and a SIGTERM drains b: the room moves back to a with its count.
    a.resume().await.expect("a serves again");
    sigterm(&nodes[1]);
    let (status, log) = exit(&mut nodes[1], &dir.join("b.log")).await;
    assert_eq!(
        status.code(),
        Some(0),
        "b moved its room and lost nothing:\n{log}"
    );
    let back = ask_until(&a, |r| r.node == "a").await;
    assert_eq!(back.count, 5, "the count moved back with the room");
    assert!(back.ticks >= later.ticks, "{back:?} after {later:?}");

    // a, with no node to drain to and a grace of 0, closes the room, and its exit says so.
    sigterm(&nodes[0]);
    let (status, log) = exit(&mut nodes[0], &dir.join("a.log")).await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.lines().last().unwrap_or_default().starts_with(
            "error: node a stopped without a drain, as drain_grace_ms = 0 asks: the units it \
             hosted (1) were closed"
        ),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
