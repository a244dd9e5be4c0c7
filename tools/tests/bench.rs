//! `ferry bench`, run as a user runs it, with tiny sizes: the real binary starts its cluster, moves
//! and drains rooms beside the baseline while bots play, and writes its JSON report and its SVG
//! chart. Nothing here looks at how long anything took: only that every figure is there and sane.

mod common;

use common::{TempDir, ferry};
use ferry_tests::etcd_server::EtcdServer;
use ferry_tests::redis_server::RedisServer;
use serde_json::Value;

/// Runs `ferry bench` with tiny sizes and extra `args`, writing its chart; returns what it
/// printed and the chart.
fn bench(dir: &TempDir, args: &[&str]) -> (String, String) {
    let svg = dir.path().join("pause.svg");
    let out = ferry()
        .args([
            "bench",
            "--rooms",
            "3",
            "--state-bytes",
            "512",
            "--queued",
            "5",
        ])
        .args(["--game-rooms", "1", "--players", "2", "--duration", "1s"])
        .args(args)
        .arg("--svg")
        .arg(&svg)
        .output()
        .expect("the ferry binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ferry bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chart = std::fs::read_to_string(&svg).expect("the chart is written");
    (stdout, chart)
}

/// The table a person reads: every section is there.
fn table(stdout: &str) {
    for heading in [
        "Rooms moved one at a time",
        "Drain of 3 rooms",
        "What the bots saw",
    ] {
        assert!(stdout.contains(heading), "no {heading:?} in:\n{stdout}");
    }
}

/// Checks a distribution: something was recorded, and p50 <= p99 <= p99.9 <= max.
fn distribution(report: &Value, at: &str) {
    let p = report.pointer(at).unwrap_or(&Value::Null);
    let field = |name: &str| {
        p[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{at}/{name} is a count: {report:#}"))
    };
    assert!(field("count") > 0, "{at} is empty: {report:#}");
    let (p50, p99, p999, max) = (
        field("p50_us"),
        field("p99_us"),
        field("p999_us"),
        field("max_us"),
    );
    assert!(p50 <= p99 && p99 <= p999 && p999 <= max, "{at}: {p:#}");
}

/// Checks what pre-copy sent: a round count for every move, and bytes after each seal (rooms this
/// small go whole at the seal).
fn copied(report: &Value, at: &str) {
    let moves = report
        .pointer(&format!("{at}/moves"))
        .and_then(Value::as_u64);
    let copied = report
        .pointer(&format!("{at}/copied"))
        .unwrap_or(&Value::Null);
    let by_rounds = copied["rounds"]["moves_by_rounds"]
        .as_array()
        .unwrap_or_else(|| panic!("{at}/copied has rounds: {report:#}"));
    let counted: u64 = by_rounds.iter().filter_map(Value::as_u64).sum();
    assert_eq!(Some(counted), moves, "{at}: {copied:#}");
    assert!(copied["rounds"]["p50"].as_u64() <= copied["rounds"]["max"].as_u64());
    assert!(
        copied["after_seal_bytes"].as_u64() > Some(0),
        "{at}: {copied:#}"
    );
    assert!(
        copied["after_seal_per_move"].as_u64() > Some(0),
        "{at}: {copied:#}"
    );
    assert!(copied["before_seal_bytes"].is_u64(), "{at}: {copied:#}");
}

fn clean(report: &Value, at: &str) {
    assert_eq!(report.pointer(&format!("{at}/lost")), Some(&Value::from(0)));
    assert_eq!(
        report.pointer(&format!("{at}/duplicated")),
        Some(&Value::from(0)),
        "{at}: {report:#}"
    );
}

/// What every run must show: every documented figure, sane, and nothing lost by Ferry.
fn check(report: &Value, chart: &str, store: &str) {
    assert_eq!(report["store"], store);
    assert_eq!(report["nodes"], 3);
    assert_eq!(report["sizes"]["rooms"], 3);
    assert_eq!(report["sizes"]["queued"], 5);
    assert!(report["sizes"]["change_rate"].is_number(), "{report:#}");

    let moves = &report["moves"];
    assert!(moves["ferry"]["moves"].as_u64() > Some(0), "{report:#}");
    assert!(moves["ferry"]["bytes"].as_u64() > Some(0), "{report:#}");
    for at in [
        "/moves/ferry/pause",
        "/moves/ferry/seal_to_answer",
        "/moves/baseline/handoff",
        "/drain/ferry/pause",
        "/game_rooms/pause",
        "/clients/tick_gaps",
    ] {
        distribution(report, at);
    }
    let phases = moves["ferry"]["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["phase"].as_str()).collect();
    assert_eq!(
        names,
        [
            "precopy",
            "seal_wait",
            "capture",
            "store_read",
            "encode",
            "transfer",
            "restore",
            "handover",
            "commit",
            "commit_wait"
        ]
    );
    for i in 0..names.len() {
        distribution(report, &format!("/moves/ferry/phases/{i}"));
        distribution(report, &format!("/drain/ferry/phases/{i}"));
    }
    for ratio in ["p50", "p99", "p999", "max"] {
        assert!(
            moves["pause_ratio"][ratio].as_f64() > Some(0.0),
            "{report:#}"
        );
        assert!(
            moves["answer_ratio"][ratio].as_f64() > Some(0.0),
            "{report:#}"
        );
    }
    clean(report, "/moves/ferry/tells");
    copied(report, "/moves/ferry");

    let drain = &report["drain"];
    assert_eq!(drain["rooms"], 3);
    assert_eq!(drain["ferry"]["outcome"], "relocated", "{report:#}");
    assert_eq!(drain["ferry"]["units_moved"], 3, "{report:#}");
    assert_eq!(drain["baseline"]["units_moved"], 3, "{report:#}");
    for side in ["ferry", "baseline"] {
        assert!(drain[side]["bytes_moved"].as_u64() > Some(0), "{report:#}");
        assert!(drain[side]["elapsed_ms"].as_f64() > Some(0.0), "{report:#}");
        assert!(
            drain[side]["units_per_s"].as_f64() > Some(0.0),
            "{report:#}"
        );
        assert!(drain[side]["mib_per_s"].as_f64() > Some(0.0), "{report:#}");
    }
    assert!(drain["elapsed_ratio"].as_f64() > Some(0.0), "{report:#}");
    for ratio in ["p50", "p99", "p999", "max"] {
        assert!(
            drain["pause_over_alone"][ratio].as_f64() > Some(0.0),
            "{report:#}"
        );
    }
    clean(report, "/drain/ferry/tells");
    copied(report, "/drain/ferry");

    // One FPS, one chat and one bingo room moved, with two players each.
    assert_eq!(report["game_rooms"]["rooms"], 3, "{report:#}");
    assert_eq!(report["game_rooms"]["moves"], 3, "{report:#}");

    let clients = &report["clients"];
    assert_eq!(clients["players"], 6, "{report:#}");
    assert_eq!(clients["inputs_applied"], clients["inputs_sent"]);
    clean(report, "/clients/inputs");
    assert_eq!(clients["errors"].as_array().map(Vec::len), Some(0));
    assert!(clients["gap_goal_ms"].as_f64() > clients["tick_interval_ms"].as_f64());
    assert!(clients["gap_goal_met"].is_boolean());

    let chart = chart.trim();
    assert!(chart.starts_with("<svg"), "{chart}");
    assert!(chart.ends_with("</svg>"), "{chart}");
    assert_eq!(chart.matches("<polyline").count(), 3, "{chart}");
}

#[test]
fn the_bench_reports_every_figure_on_the_memory_store() {
    let dir = TempDir::new("bench");
    // `--json` prints the report to stdout, as every other `--json` does, and nothing else.
    let (stdout, chart) = bench(&dir, &["--json", "--change-rate", "1"]);
    let report: Value = serde_json::from_str(&stdout).expect("stdout is the JSON report alone");
    check(&report, &chart, "memory");
    assert_eq!(report["sizes"]["change_rate"], 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_runs_on_a_real_redis_server() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let url = redis.url();
    let dir = TempDir::new("bench-redis");
    let (stdout, chart) = tokio::task::spawn_blocking(move || {
        let ran = bench(&dir, &["--store", &url]);
        drop(dir);
        ran
    })
    .await
    .expect("the bench ran");
    table(&stdout);
    assert!(
        stdout.contains("redis"),
        "the table names the store:\n{stdout}"
    );
    assert!(chart.trim().starts_with("<svg"), "{chart}");
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_runs_on_a_real_etcd() {
    let Some(etcd) = EtcdServer::start_or_skip().await else {
        return;
    };
    let url = etcd.url();
    let dir = TempDir::new("bench-etcd");
    let (stdout, chart) = tokio::task::spawn_blocking(move || {
        let ran = bench(&dir, &["--store", &url]);
        drop(dir);
        ran
    })
    .await
    .expect("the bench ran");
    table(&stdout);
    assert!(
        stdout.contains("etcd"),
        "the table names the store:\n{stdout}"
    );
    assert!(chart.trim().starts_with("<svg"), "{chart}");
    drop(etcd);
}

/// A tiny crash run: 20 rooms of 4 KiB with a confirmed standby on a node killed as a crash
/// would kill it. Every room plays again from its checkpoint with every confirmed input, and every
/// figure is there.
#[test]
fn a_crash_run_reports_every_room_back_and_what_it_came_back_with() {
    let out = ferry()
        .args(["bench", "--crash", "--rooms", "20", "--state-bytes", "4096"])
        .args([
            "--standby",
            "confirmed",
            "--duration",
            "2s",
            "--lease",
            "2s",
            "--json",
        ])
        .output()
        .expect("the ferry binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ferry bench --crash failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).expect("stdout is the JSON report alone");
    assert_eq!(report["standby"], "confirmed", "{report:#}");
    assert_eq!(report["state_bytes"], 4096);
    assert_eq!(report["lease_ms"], 2000);
    let running = &report["running"];
    assert!(running["seconds"].as_f64() > Some(0.0), "{report:#}");
    for field in ["checkpoints", "checkpoint_bytes"] {
        assert!(running[field].is_u64(), "{field}: {report:#}");
    }
    assert!(running["checkpoint_bytes_per_s"].is_number(), "{report:#}");
    assert!(
        running["cpu_percent_of_core"].as_f64() > Some(0.0),
        "{report:#}"
    );
    let crash = &report["crash"];
    assert_eq!(crash["rooms"], 20, "{report:#}");
    assert_eq!(
        crash["played_again"], 20,
        "every room plays again: {report:#}"
    );
    // Each room came back from its standby's checkpoint, and no input the client had an answer
    // for is missing from it.
    let promoted = crash["promoted"].as_u64().expect("a count");
    let rebuilt = crash["rebuilt"].as_u64().expect("a count");
    assert_eq!((promoted, rebuilt), (20, 0), "{report:#}");
    assert_eq!(crash["confirmed_inputs_lost"], 0, "{report:#}");
    assert_eq!(crash["back"]["count"], 20, "{report:#}");
    distribution(&report, "/crash/back");
    assert_eq!(crash["checkpoint_age"]["count"].as_u64(), Some(promoted));
    // Recovery's own account of the rooms it made again: one event per room, promoted or not.
    let said = &crash["recovery"];
    let from_nothing: u64 = said["from_nothing"]
        .as_object()
        .expect("reasons")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(said["promoted"].as_u64(), Some(promoted), "{report:#}");
    assert_eq!(from_nothing, rebuilt, "{report:#}");
    if promoted > 0 {
        distribution(&report, "/crash/checkpoint_age");
    }
}

/// A tiny steady run: the standby's CPU and traffic beside the same rooms without one.
#[test]
fn a_steady_run_reports_the_standby_cost_beside_no_standby() {
    let out = ferry()
        .args([
            "bench",
            "--steady",
            "--rooms",
            "20",
            "--state-bytes",
            "4096",
        ])
        .args([
            "--change-rate",
            "0.1",
            "--standby",
            "periodic",
            "--duration",
            "1s",
            "--json",
        ])
        .output()
        .expect("the ferry binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ferry bench --steady failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).expect("stdout is the JSON report alone");
    assert_eq!(report["standby"], "periodic", "{report:#}");
    assert_eq!(report["rooms"], 20);
    assert_eq!(report["change_rate"], 0.1);
    for side in ["with_standby", "without_standby"] {
        assert!(report[side]["seconds"].as_f64() > Some(0.0), "{report:#}");
        // A second of 20 quiet rooms may take less CPU than `/proc` counts (10 ms).
        assert!(
            report[side]["cpu_percent_of_core"].as_f64() >= Some(0.0),
            "{report:#}"
        );
        assert!(report[side]["checkpoint_bytes"].is_u64(), "{report:#}");
    }
    assert_eq!(report["without_standby"]["checkpoints"], 0, "{report:#}");
    assert_eq!(
        report["without_standby"]["checkpoint_bytes"], 0,
        "{report:#}"
    );
    assert!(
        report["cpu_ratio"].is_null() || report["cpu_ratio"].as_f64() >= Some(0.0),
        "{report:#}"
    );
    assert!(
        report["checkpoint_cpu_percent_of_core"].is_number(),
        "{report:#}"
    );
}

#[test]
fn bad_sizes_are_refused_with_the_flag_named() {
    for (args, named) in [
        (&["--rooms", "0"][..], "--rooms"),
        (&["--players", "99"][..], "--players"),
        (&["--queued", "lots"][..], "--queued"),
        (&["--change-rate", "lots"][..], "every-turn"),
        (&["--store", "mysql://x"][..], "redis://"),
        (&["--store", "etcd://x"][..], "host:port"),
        (&["--crash", "--standby", "sometimes"][..], "--standby"),
        (&["--crash", "--steady"][..], "--steady"),
    ] {
        let out = ferry()
            .arg("bench")
            .args(args)
            .output()
            .expect("the ferry binary runs");
        assert!(!out.status.success(), "ferry bench {args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
