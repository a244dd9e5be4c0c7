//! A node cut off from the network for real, under bots: three `ferry node` processes, each in a
//! network namespace of its own, linked by a bridge to a hub namespace that holds the redis-server
//! and the test's clients (`ferry bots`, `ferry status`); none of them is linked to the host's
//! network. nftables rules in one node's namespace drop everything it sends and receives: it stops
//! running turns once its lease may have lapsed, the survivors promote its rooms from the copies
//! they keep (the confirmed standby `ferry node` gives the sample games' rooms), and it runs none
//! of them again: it stops, saying its lease was lost. The bots, which keep playing through it
//! all, lose no input they were told had been applied, see no room start from nothing and no
//! mismatch.

mod common;

use std::process::Stdio;

use common::processes::{Processes, Ready, text, within};
use common::{TempDir, gateway_certs};
use ferry_tests::netns::Net;
use serde_json::Value;

/// The token the gateways take.
const TOKEN: &str = "cut-token";

/// The admin endpoints' token: they listen beyond loopback, in the namespaces.
const ADMIN_TOKEN: &str = "cut-admin-token";

const NODES: [&str; 3] = ["p1", "p2", "p3"];

/// Two rooms of each of three games, two players each.
const BOTS: u64 = 3 * 2 * 2;

/// A gateway node's config in its namespace, at `addr`, on the redis-server at `redis`.
fn config(id: &str, addr: &str, redis: &str, seeds: &[String]) -> String {
    let seeds: Vec<String> = seeds.iter().map(|s| format!("{s:?}")).collect();
    format!(
        r#"id = "{id}"
certs = "certs"
store = "redis://{redis}/"
store_prefix = "cut"
refresh_ms = 200
lease_ttl_ms = 2000
mesh_listen = "{addr}:7000"
admin = "{addr}:7100"
sessions_listen = "{addr}:7200"
sessions_cert = "certs/gateway.pem"
sessions_key = "certs/gateway.key"
sessions_tokens = "tokens.txt"
seeds = [{}]
"#,
        seeds.join(", ")
    )
}

/// `ferry status --json` of the node whose admin endpoint is `admin`, run in the hub.
async fn status(net: &Net, admin: &str) -> Value {
    let out = net
        .command(net.hub(), env!("CARGO_BIN_EXE_ferry"))
        .args(["status", admin, "--json"])
        .env("FERRY_ADMIN_TOKEN", ADMIN_TOKEN)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("ferry status runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// Polls `status` of `admin` until `done` says so.
async fn until(net: &Net, what: &str, admin: &str, done: impl Fn(&Value) -> bool) -> Value {
    within(what, async {
        loop {
            let status = status(net, admin).await;
            if done(&status) {
                return status;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_under_bots_keeps_its_rooms_elsewhere_and_never_runs_them_again() {
    let Some(net) = Net::create_or_skip(NODES.len()) else {
        return;
    };
    let tmp = TempDir::new("cut-processes");
    gateway_certs(&tmp.path().join("certs"), &NODES.join(","));
    std::fs::write(tmp.path().join("tokens.txt"), format!("{TOKEN} bots\n")).expect("tokens");
    let mut redis = net.redis(6379).await;
    let redis_addr = format!("{}:6379", net.hub_addr());

    let env = [
        ("FERRY_DRAIN_GRACE_MS", "0"),
        ("FERRY_ADMIN_TOKEN", ADMIN_TOKEN),
    ];
    let mut processes = Processes::default();
    let mut seeds = Vec::new();
    let mut ready: Vec<Ready> = Vec::new();
    for (i, name) in NODES.iter().enumerate() {
        let addr = net.addr(i).to_string();
        let path = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&path, config(name, &addr, &redis_addr, &seeds)).expect("config");
        let command = net.command(net.node(i), env!("CARGO_BIN_EXE_ferry"));
        let node = processes
            .start_as(command, name, &path, tmp.path(), &env)
            .await;
        if seeds.is_empty() {
            seeds.push(format!("{name}@{}", node.mesh));
        }
        ready.push(node);
    }
    let admins: Vec<String> = ready.iter().map(Ready::admin).collect();
    let gateways: Vec<String> = ready
        .iter()
        .filter_map(|r| r.sessions.map(|s| s.to_string()))
        .collect();
    // Linked, and each has heard the others answer: a node cut off is then taken for dead half
    // a lease after its lease lapsed (one never heard from would be, after the outage limit).
    for admin in &admins {
        until(&net, "the nodes to hear each other", admin, |s| {
            let peers = s["peers"].as_array().cloned().unwrap_or_default();
            peers
                .iter()
                .filter(|p| p["link"] == "Ready" && p["heard_ms"].is_u64())
                .count()
                == NODES.len() - 1
        })
        .await;
    }

    let bots = net
        .command(net.hub(), env!("CARGO_BIN_EXE_ferry"))
        .args(["bots", "--cluster", &gateways.join(","), "--ca"])
        .arg(tmp.path().join("certs/gateway.pem"))
        .args(["--token", TOKEN, "--admin", &admins.join(",")])
        .args(["--game", "chat,fps,bingo", "--rooms", "2", "--players", "2"])
        .args(["--duration", "30s", "--json"])
        .env("FERRY_ADMIN_TOKEN", ADMIN_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("ferry bots starts");
    // p2 runs room 1 of each game with its two players: its copies are current before it is cut
    // off.
    until(&net, "p2's standbys to hold its rooms", &admins[1], |s| {
        let rooms = s["standby"]["rooms"].as_u64();
        s["units"].as_u64() == Some(3 * 3)
            && rooms == Some(3)
            && s["standby"]["current"].as_u64() == rooms
    })
    .await;

    net.cut(1);
    // The survivors run every room and player now: p2's came back from their copies.
    within("p2's rooms to run on the survivors", async {
        loop {
            let mut units = 0;
            for admin in [&admins[0], &admins[2]] {
                units += status(&net, admin).await["units"].as_u64().unwrap_or(0);
            }
            if units == 3 * 2 * 3 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    net.mend(1);

    let out = within("ferry bots to finish", bots.wait_with_output())
        .await
        .expect("ferry bots ran");
    assert!(
        out.status.success(),
        "ferry bots failed: {}\nreport: {}",
        text(&out.stderr),
        text(&out.stdout)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
    assert_eq!(report["players"], BOTS, "{report:#}");
    assert_eq!(report["mismatches"], 0, "{report:#}");
    assert_eq!(report["confirmed_inputs_lost"], 0, "{report:#}");
    for fault in ["lost", "duplicated", "reordered"] {
        assert_eq!(report["inputs"][fault], 0, "{fault}: {report:#}");
    }
    assert_eq!(report["room_outcomes"]["rebuilt"], 0, "{report:#}");
    assert_eq!(
        report["errors"].as_array().map(Vec::len),
        Some(0),
        "{report:#}"
    );
    // p2 ran none of them again: it stopped running turns once its lease could have lapsed,
    // and, mended, it finds its lease lost and stops with a message that says so.
    let (_, exit, log) = processes.wait(1).await;
    assert_eq!(exit.code(), Some(1), "{log}");
    assert!(log.contains("node p2 lost its owner lease"), "{log}");

    for (name, _, log) in processes.terminate_all().await {
        assert!(!log.contains("panicked"), "{name}:\n{log}");
    }
    redis.kill().await.expect("redis-server stopped");
    drop(net);
}
