//! `ferry certs` as an operator uses it: the files it writes are the ones a node loads, an existing
//! CA survives a second run, and bad node ids are refused before anything is written.

mod common;

use std::ffi::OsStr;

use common::{TempDir, certs, ferry, one_line_failure};
use ferry::NodeId;
use ferry::mesh::NodeTls;

fn node(id: &str) -> NodeId {
    NodeId::new(id).expect("valid id")
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).expect("file readable")
}

#[test]
fn ferry_certs_writes_files_that_node_tls_loads() {
    let tmp = TempDir::new("certs-load");
    let dir = tmp.path().join("certs");
    let out = certs(&dir, "p1,p2,p3");
    let said = String::from_utf8_lossy(&out.stdout);
    for file in [
        "ca.pem",
        "ca.key",
        "node-p1.pem",
        "node-p1.key",
        "node-p3.key",
    ] {
        assert!(said.contains(file), "{file} reported: {said}");
    }
    // The name an HTTPS client of p1's admin endpoint checks.
    assert!(said.contains("names it 7031.node.ferry"), "{said}");
    for id in ["p1", "p2", "p3"] {
        let tls = NodeTls::load(&dir, node(id)).expect("node TLS loads");
        assert_eq!(tls.node(), &node(id));
    }
    // A certificate proves only its own node.
    std::fs::copy(dir.join("node-p1.pem"), dir.join("node-p4.pem")).expect("copy");
    std::fs::copy(dir.join("node-p1.key"), dir.join("node-p4.key")).expect("copy");
    let wrong = NodeTls::load(&dir, node("p4")).expect_err("p1's certificate is not p4's");
    assert!(wrong.to_string().contains("p4"), "{wrong}");
}

#[cfg(unix)]
#[test]
fn ferry_certs_keeps_private_keys_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = TempDir::new("certs-mode");
    certs(tmp.path(), "a");
    for key in ["ca.key", "node-a.key"] {
        let mode = std::fs::metadata(tmp.path().join(key))
            .expect("key written")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{key} is readable by others: {mode:o}");
    }
}

#[test]
fn ferry_certs_keeps_an_existing_ca_unless_forced() {
    let tmp = TempDir::new("certs-keep");
    let dir = tmp.path();
    certs(dir, "a");
    let ca = read(&dir.join("ca.pem"));
    let ca_key = read(&dir.join("ca.key"));

    // A second run issues new nodes from the same CA: the old node trusts the new one.
    let out = certs(dir, "b");
    assert!(String::from_utf8_lossy(&out.stdout).contains("kept"));
    assert_eq!(read(&dir.join("ca.pem")), ca, "CA certificate unchanged");
    assert_eq!(read(&dir.join("ca.key")), ca_key, "CA key unchanged");
    NodeTls::load(dir, node("a")).expect("a still loads");
    NodeTls::load(dir, node("b")).expect("b loads, from the same CA");

    // --force makes a new CA: nodes issued by the old one no longer fit it.
    let out = ferry()
        .arg("certs")
        .arg("--out")
        .arg(dir)
        .args(["--nodes", "c", "--force"])
        .output()
        .expect("the ferry binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(read(&dir.join("ca.pem")), ca, "a new CA");
    NodeTls::load(dir, node("c")).expect("c loads with the new CA");
    NodeTls::load(dir, node("a")).expect_err("a was issued by the old CA");
}

#[test]
fn ferry_certs_refuses_a_half_ca() {
    let tmp = TempDir::new("certs-half");
    certs(tmp.path(), "a");
    std::fs::remove_file(tmp.path().join("ca.key")).expect("remove");
    let ca = read(&tmp.path().join("ca.pem"));
    let error = one_line_failure(&[
        OsStr::new("certs"),
        OsStr::new("--out"),
        tmp.path().as_os_str(),
        OsStr::new("--nodes"),
        OsStr::new("b"),
    ]);
    assert!(
        error.contains("ca.key") && error.contains("--force"),
        "{error}"
    );
    assert_eq!(read(&tmp.path().join("ca.pem")), ca, "CA left alone");
}

#[test]
fn ferry_certs_refuses_bad_node_ids_and_writes_nothing() {
    for (nodes, words) in [
        ("p1,,p2", "invalid node id \"\""),
        ("p1, p2", "invalid node id \" p2\""),
        ("p1,p1", "listed twice"),
    ] {
        let tmp = TempDir::new("certs-bad");
        let dir = tmp.path().join("certs");
        let error = one_line_failure(&[
            OsStr::new("certs"),
            OsStr::new("--out"),
            dir.as_os_str(),
            OsStr::new("--nodes"),
            OsStr::new(nodes),
        ]);
        assert!(error.contains(words), "--nodes {nodes:?}: {error}");
        assert!(!dir.exists(), "--nodes {nodes:?} wrote {}", dir.display());
    }
    let long = "x".repeat(256);
    let tmp = TempDir::new("certs-long");
    let dir = tmp.path().join("certs");
    let error = one_line_failure(&[
        OsStr::new("certs"),
        OsStr::new("--out"),
        dir.as_os_str(),
        OsStr::new("--nodes"),
        OsStr::new(&long),
    ]);
    assert!(error.contains("1 to 255 bytes"), "{error}");
}
