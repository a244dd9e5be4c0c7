//! The demo, run as a user runs it: the real binary starts its three-node cluster, bots play
//! through the gateways, a node is drained, and the JSON report says what the players saw.

mod common;

use std::ffi::OsStr;
use std::process::Output;

use common::{ferry, one_line_failure};
use ferry_tests::docs::without_figures;
use ferry_tests::redis_server::RedisServer;
use serde_json::Value;

/// Runs `ferry demo --json` with small sizes and extra `args`; returns the report once the run
/// succeeded.
fn demo(args: &[&str]) -> Value {
    let out = ferry()
        .args(["demo", "--rooms", "2", "--players", "2", "--duration", "3s"])
        .args(args)
        .arg("--json")
        .output()
        .expect("the ferry binary runs");
    assert!(
        out.status.success(),
        "ferry demo failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("the report is JSON")
}

/// Checks what every demo run must show: every game played, rooms moved, no input lost, doubled or
/// reordered, and no push the game's rules do not explain.
fn check(report: &Value, store: &str) {
    assert_eq!(report["store"], store, "{report:#}");
    assert_eq!(report["nodes"], 3);
    let drain = &report["drain"];
    assert_eq!(drain["outcome"], "relocated", "{report:#}");
    assert!(drain["units_moved"].as_u64() > Some(0), "{report:#}");
    assert_eq!(drain["units_failed"], 0);
    assert!(drain["bytes_moved"].as_u64() > Some(0), "{report:#}");
    // One pause per move; a room moves with its players, and each of them is a unit moved.
    let moves = drain["pause"]["count"].as_u64().unwrap_or(0);
    assert!(moves > 0, "{report:#}");
    assert!(drain["units_moved"].as_u64() > Some(moves), "{report:#}");
    // Figures read as measured, without float noise: milliseconds to the microsecond.
    for at in [
        "/elapsed_ms",
        "/drain/elapsed_ms",
        "/bots/longest_tick_gap_ms",
    ] {
        let shown = report.pointer(at).map(Value::to_string).unwrap_or_default();
        let decimals = shown.split_once('.').map_or(0, |(_, d)| d.len());
        assert!(decimals <= 3, "{at} is {shown}");
    }
    let bots = &report["bots"];
    let games: Vec<&str> = report["games"]
        .as_array()
        .expect("games")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(games, ["chat", "fps", "bingo"], "{report:#}");
    assert_eq!(bots["players"].as_u64(), Some(3 * 2 * 2), "{report:#}");
    assert!(bots["inputs_sent"].as_u64() > Some(0), "{report:#}");
    assert_eq!(bots["inputs_applied"], bots["inputs_sent"], "{report:#}");
    assert_eq!(bots["inputs"]["lost"], 0, "{report:#}");
    assert_eq!(bots["inputs"]["duplicated"], 0, "{report:#}");
    assert_eq!(bots["inputs"]["reordered"], 0, "{report:#}");
    assert_eq!(bots["mismatches"], 0, "{report:#}");
    assert_eq!(
        bots["errors"].as_array().map(Vec::len),
        Some(0),
        "{report:#}"
    );
    assert!(bots["tick_gaps"]["count"].as_u64() > Some(0), "{report:#}");
    assert_eq!(bots["reconnected"], 0, "{report:#}");
}

#[test]
fn the_demo_drains_a_node_while_bots_play_and_they_lose_nothing() {
    check(&demo(&[]), "memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_on_a_real_redis_server() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let url = redis.url();
    let report = tokio::task::spawn_blocking(move || demo(&["--store", &url]))
        .await
        .expect("the demo ran");
    check(&report, "redis");
    drop(redis);
}

/// Runs `ferry demo` with `args` and returns its failed output.
fn failing(args: &[&str]) -> Output {
    let out = ferry()
        .arg("demo")
        .args(args)
        .output()
        .expect("the ferry binary runs");
    assert!(!out.status.success(), "ferry demo {args:?} succeeded");
    assert!(out.stdout.is_empty(), "no report on a bad flag");
    out
}

#[test]
fn bad_flags_are_refused_with_the_flag_named() {
    for (args, named) in [
        (&["--rooms", "many"][..], "--rooms"),
        (&["--rooms", "0"][..], "--rooms"),
        (&["--players", "1000"][..], "--players"),
        (&["--store", "postgres://db"][..], "redis://"),
        (&["--lines", "3"][..], "--lines"),
    ] {
        let err = String::from_utf8_lossy(&failing(args).stderr).into_owned();
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn an_unreachable_redis_is_one_clear_line() {
    // Port 1 on loopback: nothing listens there.
    let args = ["demo", "--store", "redis://127.0.0.1:1/"];
    let line = one_line_failure(&args.map(OsStr::new));
    assert!(line.contains("redis://127.0.0.1:1/"), "{line}");
    assert!(line.contains("redis-server"), "{line}");
}

#[test]
fn the_sample_output_in_the_readme_and_the_demo_page_is_what_a_run_prints() {
    let out = ferry()
        .args(["demo", "--rooms", "2", "--players", "2", "--duration", "2s"])
        .output()
        .expect("the ferry binary runs");
    let run = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{run}");
    let run: Vec<String> = run.lines().map(without_figures).collect();
    assert!(run.len() > 15, "{run:#?}");
    // The unit count says what it counts: the rooms moved and their players.
    let units = run
        .iter()
        .find(|line| line.starts_with("units moved"))
        .expect("a units line");
    assert_eq!(
        units,
        "units moved # (# rooms and their # players; # failed)"
    );
    for (page, text) in [
        ("README.md", include_str!("../../README.md")),
        ("docs/demo.md", include_str!("../../docs/demo.md")),
    ] {
        let shown = ferry_tests::docs::code_blocks(text, "text")
            .into_iter()
            .find(|block| block.contains("What the players saw"))
            .unwrap_or_else(|| panic!("{page} shows the demo's output"));
        let shown: Vec<String> = shown.lines().map(without_figures).collect();
        assert_eq!(shown, run, "{page} shows what `ferry demo` prints");
    }
}
