//! What the tests of the `ferry` binary share: temp dirs, and running the binary.

// Each test file uses a part of this module.
#![allow(dead_code)]

pub mod processes;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory under the system temp dir, removed with everything in it on drop (unless
/// the test failed).
pub struct TempDir(PathBuf);

impl TempDir {
    /// Makes `<temp>/ferry-tools-<name>-<pid>-<n>`.
    pub fn new(name: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ferry-tools-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    /// Where the directory is, to write the test's files in.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    /// Kept when the test failed, so that its nodes' logs can be read.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for its logs", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `ferry` binary under test.
pub fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

/// Runs `ferry certs --out dir --nodes nodes` and checks that it succeeded.
pub fn certs(dir: &Path, nodes: &str) -> Output {
    certs_with(dir, nodes, &[])
}

/// Runs `ferry certs` for `nodes` and a client gateway certificate for `localhost`.
pub fn gateway_certs(dir: &Path, nodes: &str) -> Output {
    certs_with(dir, nodes, &["--gateway", "localhost"])
}

fn certs_with(dir: &Path, nodes: &str, more: &[&str]) -> Output {
    let out = ferry()
        .arg("certs")
        .arg("--out")
        .arg(dir)
        .args(["--nodes", nodes])
        .args(more)
        .output()
        .expect("the ferry binary runs");
    assert!(
        out.status.success(),
        "ferry certs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `ferry` with `args`, checks that it failed with exactly one `error:` line on stderr and
/// no panic, and returns that line.
pub fn one_line_failure(args: &[&std::ffi::OsStr]) -> String {
    let out = ferry().args(args).output().expect("the ferry binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "ferry {args:?} succeeded: {stderr}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "exit code of ferry {args:?}: {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0].to_owned()
}
