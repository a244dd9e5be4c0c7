//! The game's host program as a studio first meets it: its `--help`, its refusals of a wrong
//! command line, and the log it writes without any `RUST_LOG`, which says what a stop did.

use std::process::{Command, Stdio};
use std::time::Duration;

use ferry::NodeId;
use ferry::mesh::ClusterCa;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A bound on waits that have no timeout of their own, so a broken build fails, not hangs.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn game() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_my-game"));
    command.env_remove("FERRY_CONFIG").env_remove("RUST_LOG");
    command
}

#[test]
fn help_prints_the_usage_and_every_key_and_exits_0() {
    for flag in ["--help", "-h"] {
        let out = game().arg(flag).output().expect("the game runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{flag}: {stdout}");
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.starts_with("Usage: my-game --config FILE\n"),
            "{stdout}"
        );
        for key in ferry_host::config::KEYS {
            assert!(stdout.contains(key), "{flag} names `{key}`: {stdout}");
        }
        assert!(stdout.contains("FERRY_<KEY>"), "{stdout}");
    }
}

#[test]
fn a_wrong_command_line_is_one_error_line_that_says_what_to_pass() {
    let failure = |args: &[&str]| {
        let out = game().args(args).output().expect("the game runs");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        stderr
    };
    let none = failure(&[]);
    assert!(
        none.starts_with("error: no config file: pass --config FILE")
            && none.contains("`id` and `certs`")
            && none.contains("--help"),
        "{none}"
    );
    let unknown = failure(&["--confg", "node.toml"]);
    assert!(
        unknown.starts_with("error: unknown argument \"--confg\"") && unknown.contains("--config"),
        "{unknown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rust_log_the_node_logs_its_stop_and_drain() {
    let dir = std::env::temp_dir().join(format!("my-game-host-program-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).expect("dirs");
    let ca = ClusterCa::generate().expect("a CA");
    ca.write_files(&certs).expect("CA files");
    let node = NodeId::new("h1").expect("node id");
    ca.issue_node(&node)
        .expect("a node certificate")
        .write_files(&certs)
        .expect("node files");
    let config = dir.join("h1.toml");
    std::fs::write(&config, "id = \"h1\"\ncerts = \"certs\"\n").expect("config");
    let log = dir.join("h1.log");
    let mut child = tokio::process::Command::from(game())
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("the game's node starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready = tokio::time::timeout(HANG_GUARD, stdout.next_line())
        .await
        .expect("a ready line in time")
        .expect("stdout readable")
        .expect("a ready line");
    assert!(ready.starts_with("ready h1 "), "{ready}");
    let pid = child.id().expect("running").to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(sent.expect("kill runs").success());
    let status = tokio::time::timeout(HANG_GUARD, child.wait())
        .await
        .expect("the node exits in time")
        .expect("exit status");
    let log = std::fs::read_to_string(&log).expect("the log");
    assert_eq!(status.code(), Some(0), "{log}");
    for said in [
        "node serving",
        "stop requested; draining, then stopping",
        "drained and stopped",
    ] {
        assert_eq!(
            log.lines().filter(|l| l.contains(said)).count(),
            1,
            "the log says {said:?} once:\n{log}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
