//! The demo, run as a user runs it: the real binary, its JSON report checked.

use std::process::Command;

#[test]
fn the_demo_reports_every_line_heard_once_and_in_order() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args([
            "demo",
            "--rooms",
            "3",
            "--players",
            "3",
            "--lines",
            "20",
            "--json",
        ])
        .output()
        .expect("the ferry binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["lines_said"], 3 * 3 * 20);
    assert_eq!(report["lines_heard"], 3 * 3 * 3 * 20);
    assert_eq!(report["lines_lost"], 0);
    assert_eq!(report["lines_out_of_order"], 0);
}

#[test]
fn a_bad_flag_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["demo", "--rooms", "many"])
        .output()
        .expect("the ferry binary runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--rooms"), "{err}");
}
