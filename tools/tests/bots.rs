//! `ferry bots` as an operator runs it against a cluster: the real binary connects to the
//! cluster's client gateways with the gateways' CA and a token, plays FPS rooms that exist
//! there, and reports what the players saw.

mod common;

use std::ffi::OsStr;
use std::path::PathBuf;

use common::{TempDir, one_line_failure};
use ferry::{ActorId, Registry, SessionLimits, SpotId};
use ferry_samples::fps;
use ferry_tests::cluster::Cluster;
use ferry_tests::sessions::{Gateways, TOKEN};
use serde_json::Value;

fn registry() -> Registry {
    let mut registry = Registry::new();
    fps::register(&mut registry, fps::Rules::default());
    registry
}

/// Two gateway nodes; room `fps-0` with players `fps-0-p0` and `fps-0-p1` on the first; the
/// gateways' CA written to `gateways.pem` in a temp dir.
async fn cluster(name: &str) -> (Cluster, TempDir, PathBuf) {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    for id in ["n1", "n2"] {
        gateways
            .add(&mut cluster, id, registry(), SessionLimits::default())
            .await;
    }
    let node = &cluster.nodes[0];
    let room = SpotId::new("fps-0").expect("valid id");
    node.create_spot_on(node.id(), fps::ROOM, &room)
        .await
        .expect("room opened");
    for p in 0..2 {
        let player = ActorId::new(format!("fps-0-p{p}")).expect("valid id");
        node.create_actor(fps::PLAYER, &player)
            .await
            .expect("player created");
        node.join(&player, &room).await.expect("player joined");
    }
    let dir = TempDir::new(name);
    let ca = dir.path().join("gateways.pem");
    std::fs::write(&ca, &gateways.ca_pem).expect("CA written");
    (cluster, dir, ca)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_play_the_rooms_of_a_cluster_and_see_every_input_applied_once_in_order() {
    let (cluster, _dir, ca) = cluster("bots").await;
    let addrs: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| n.session_addr().expect("gateway").to_string())
        .collect();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["bots", "--cluster", &addrs.join(","), "--ca"])
        .arg(&ca)
        .args(["--token", std::str::from_utf8(TOKEN).expect("utf-8")])
        .args([
            "--rooms",
            "1",
            "--players",
            "2",
            "--duration",
            "2s",
            "--json",
        ])
        .output()
        .await
        .expect("the ferry binary runs");
    cluster.shutdown().await;
    assert!(
        out.status.success(),
        "ferry bots failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
    assert_eq!(report["players"], 2, "{report:#}");
    assert!(report["inputs_sent"].as_u64() > Some(0), "{report:#}");
    assert_eq!(
        report["inputs_applied"], report["inputs_sent"],
        "{report:#}"
    );
    assert_eq!(report["inputs"]["lost"], 0, "{report:#}");
    assert_eq!(report["inputs"]["duplicated"], 0, "{report:#}");
    assert_eq!(report["inputs"]["reordered"], 0, "{report:#}");
    assert!(
        report["tick_gaps"]["count"].as_u64() > Some(0),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_a_missing_ca_and_a_bad_admin_address_are_one_clear_line() {
    let (cluster, dir, ca) = cluster("bots-errors").await;
    let addr = cluster.nodes[0]
        .session_addr()
        .expect("gateway")
        .to_string();
    let run = |ca: &std::path::Path, token: &str| {
        let args: Vec<&OsStr> = vec![
            "bots".as_ref(),
            "--cluster".as_ref(),
            addr.as_ref(),
            "--ca".as_ref(),
            ca.as_os_str(),
            "--token".as_ref(),
            token.as_ref(),
            "--duration".as_ref(),
            "1s".as_ref(),
        ];
        one_line_failure(&args)
    };
    let refused = tokio::task::block_in_place(|| run(&ca, "wrong-token"));
    assert!(refused.contains("refused the token"), "{refused}");
    let missing = dir.path().join("missing.pem");
    let unread = tokio::task::block_in_place(|| run(&missing, "good-token"));
    assert!(unread.contains("missing.pem"), "{unread}");
    assert!(unread.contains("--ca"), "{unread}");
    let args: Vec<&OsStr> = vec![
        "bots".as_ref(),
        "--cluster".as_ref(),
        addr.as_ref(),
        "--ca".as_ref(),
        ca.as_os_str(),
        "--token".as_ref(),
        "good-token".as_ref(),
        "--admin".as_ref(),
        "nowhere".as_ref(),
    ];
    let bad_admin = tokio::task::block_in_place(|| one_line_failure(&args));
    assert!(
        bad_admin.contains("bad admin address \"nowhere\""),
        "{bad_admin}"
    );
    cluster.shutdown().await;
}
