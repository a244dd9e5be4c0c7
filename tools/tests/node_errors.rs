//! `ferry node` refuses what it cannot run with one line that names the problem and the fix,
//! and a non-zero exit, rather than a panic or a wall of text.

mod common;

use std::ffi::OsStr;
use std::path::Path;

use common::{TempDir, certs, one_line_failure};

/// Runs `ferry node --config path` and returns its one error line.
fn node_fails(config: &Path) -> String {
    one_line_failure(&[
        OsStr::new("node"),
        OsStr::new("--config"),
        config.as_os_str(),
    ])
}

/// Writes `text` as `name` in `dir` and returns its path.
fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("config written");
    path
}

#[test]
fn a_missing_config_file_is_named() {
    let tmp = TempDir::new("node-missing");
    let path = tmp.path().join("absent.toml");
    let error = node_fails(&path);
    assert!(error.contains("cannot read the node config"), "{error}");
    assert!(error.contains(&path.display().to_string()), "{error}");
    assert!(error.contains("--config"), "{error}");
}

#[test]
fn unparsable_toml_is_refused_with_its_line() {
    let tmp = TempDir::new("node-syntax");
    let path = write(tmp.path(), "bad.toml", "id = \"p1\"\ncerts = [\"certs\"\n");
    let error = node_fails(&path);
    assert!(error.contains("not valid TOML"), "{error}");
    assert!(error.contains("line 2"), "{error}");
}

#[test]
fn an_unknown_key_is_refused_by_name() {
    let tmp = TempDir::new("node-unknown");
    let path = write(
        tmp.path(),
        "typo.toml",
        "id = \"p1\"\ncerts = \"certs\"\nrefresh_msec = 200\n",
    );
    let error = node_fails(&path);
    assert!(error.contains("unknown key `refresh_msec`"), "{error}");
    assert!(
        error.contains("refresh_ms"),
        "the known keys are listed: {error}"
    );
}

#[test]
fn a_bad_node_id_is_refused() {
    let tmp = TempDir::new("node-id");
    let path = write(tmp.path(), "id.toml", "id = \"\"\ncerts = \"certs\"\n");
    let error = node_fails(&path);
    assert!(error.contains("bad `id`"), "{error}");
    assert!(error.contains("1 to 255 bytes"), "{error}");
}

#[test]
fn missing_certificates_point_to_ferry_certs() {
    let tmp = TempDir::new("node-certs");
    std::fs::create_dir(tmp.path().join("certs")).expect("empty certs dir");
    let path = write(tmp.path(), "p1.toml", "id = \"p1\"\ncerts = \"certs\"\n");
    let error = node_fails(&path);
    assert!(error.contains("certificates of node p1"), "{error}");
    assert!(error.contains("ferry certs"), "{error}");
}

#[test]
fn an_unreachable_redis_is_named_with_what_to_check() {
    let tmp = TempDir::new("node-redis");
    certs(&tmp.path().join("certs"), "p1");
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("redis://127.0.0.1:{port}/");
    let path = write(
        tmp.path(),
        "p1.toml",
        &format!("id = \"p1\"\ncerts = \"certs\"\nstore = \"{url}\"\n"),
    );
    let error = node_fails(&path);
    assert!(
        error.contains(&format!("cannot reach the redis store at {url}")),
        "{error}"
    );
    assert!(error.contains("redis-server"), "{error}");
}

#[test]
fn an_empty_admin_token_file_is_refused() {
    let tmp = TempDir::new("node-empty-token");
    certs(&tmp.path().join("certs"), "p1");
    // Only whitespace: a token of nothing would admit `Authorization: Bearer ` alone.
    std::fs::write(tmp.path().join("admin.token"), " \n").expect("token file");
    let path = write(
        tmp.path(),
        "p1.toml",
        "id = \"p1\"\ncerts = \"certs\"\nadmin_token_file = \"admin.token\"\n",
    );
    let error = node_fails(&path);
    assert!(
        error.contains("cannot read the admin token file"),
        "{error}"
    );
    assert!(error.contains("admin.token"), "{error}");
    assert!(error.contains("the file is empty"), "{error}");
}
