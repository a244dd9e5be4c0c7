//! Every subcommand explains itself with `--help`.

mod common;

use common::ferry;

#[test]
fn every_subcommand_has_help() {
    for (command, flags) in [
        ("demo", &["--rooms", "--duration", "--json"][..]),
        ("certs", &["--out", "--nodes", "--gateway", "--force"][..]),
        ("node", &["--config"][..]),
        (
            "status",
            &["<ADDR>", "--json", "--admin-ca", "--admin-node"][..],
        ),
        (
            "drain",
            &[
                "<ADDR>",
                "--rolling-update",
                "--deadline",
                "Exit codes: 0",
                "--admin-ca",
            ][..],
        ),
        (
            "resume",
            &["<ADDR>", "--admin-token-file", "--admin-ca"][..],
        ),
        (
            "shutdown",
            &["<ADDR>", "--deadline", "Exit codes: 0", "--admin-ca"][..],
        ),
        (
            "bots",
            &[
                "--cluster",
                "--ca",
                "--admin",
                "--admin-token-file",
                "--admin-ca",
            ][..],
        ),
        (
            "bench",
            &[
                "--rooms",
                "--state-bytes",
                "--change-rate",
                "--queued",
                "--duration",
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
    // The first line says what ferry is, without a list of commands that could fall behind.
    assert_eq!(
        help.lines().next(),
        Some("Ferry: game servers whose live rooms and players move between hosts while they run"),
        "{help}"
    );
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(
        listed,
        [
            "demo", "certs", "node", "status", "drain", "resume", "shutdown", "bots", "bench",
            "help"
        ],
        "{help}"
    );
}
