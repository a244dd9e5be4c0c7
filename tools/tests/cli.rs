//! Every subcommand explains itself with `--help`.

mod common;

use common::ferry;

#[test]
fn every_subcommand_has_help() {
    for (command, flags) in [
        ("demo", &["--rooms", "--json"][..]),
        ("certs", &["--out", "--nodes", "--gateway", "--force"][..]),
        ("node", &["--config"][..]),
        ("status", &["<ADDR>", "--json"][..]),
        (
            "drain",
            &["<ADDR>", "--rolling-update", "--deadline", "Exit codes: 0"][..],
        ),
        ("shutdown", &["<ADDR>", "--deadline", "Exit codes: 0"][..]),
        (
            "bench",
            &[
                "--rooms",
                "--state-bytes",
                "--queued",
                "--store",
                "--json",
                "--svg",
            ][..],
        ),
    ] {
        let out = ferry()
            .args([command, "--help"])
            .output()
            .expect("the ferry binary runs");
        assert!(out.status.success(), "ferry {command} --help failed");
        let help = String::from_utf8_lossy(&out.stdout);
        for flag in flags {
            assert!(
                help.contains(flag),
                "ferry {command} --help lacks {flag}: {help}"
            );
        }
    }
    let out = ferry()
        .arg("--help")
        .output()
        .expect("the ferry binary runs");
    let help = String::from_utf8_lossy(&out.stdout);
    for command in [
        "demo", "certs", "node", "status", "drain", "shutdown", "bench",
    ] {
        assert!(
            help.contains(command),
            "ferry --help lacks {command}: {help}"
        );
    }
}
