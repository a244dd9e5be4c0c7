//! A real etcd for one test: one member on free loopback ports, killed on drop.
//!
//! Tests that need etcd call [`EtcdServer::start_or_skip`]. Where etcd is not installed, that
//! prints one line and the test returns; CI sets `FERRY_REQUIRE_ETCD=1` so that a missing etcd
//! fails loudly instead of skipping.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

/// The line a test prints when it skips for want of etcd.
pub const SKIP_MESSAGE: &str = "skipped: etcd not installed (apt-get install etcd-server)";

/// Set to `1` to turn a missing etcd into a failure instead of a skip.
pub const REQUIRE_ENV: &str = "FERRY_REQUIRE_ETCD";

/// How long a starting member may take to say it serves clients; the wait ends as soon as it
/// does.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Attempts at free ports, in case another process takes one before etcd binds it.
const ATTEMPTS: usize = 5;

/// A running etcd member owned by one test.
#[derive(Debug)]
pub struct EtcdServer {
    child: Option<Child>,
    client_port: u16,
    dir: PathBuf,
}

impl EtcdServer {
    /// Starts a member, or prints [`SKIP_MESSAGE`] and returns `None` if etcd is not installed
    /// (panicking instead when `FERRY_REQUIRE_ETCD=1`). Any other failure to start panics.
    pub async fn start_or_skip() -> Option<EtcdServer> {
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            match Self::start_once().await {
                Ok(server) => return Some(server),
                Err(None) => {
                    if std::env::var(REQUIRE_ENV).is_ok_and(|value| value == "1") {
                        panic!("{SKIP_MESSAGE}; {REQUIRE_ENV}=1 requires it");
                    }
                    println!("{SKIP_MESSAGE}");
                    return None;
                }
                Err(Some(output)) if output.contains("address already in use") => last = output,
                Err(Some(output)) => panic!("etcd did not start:\n{output}"),
            }
        }
        panic!("etcd found no free ports:\n{last}");
    }

    /// `Err(None)`: not installed; `Err(Some(output))`: it did not come up.
    async fn start_once() -> Result<EtcdServer, Option<String>> {
        let client_port = free_port().map_err(|e| Some(format!("no free port: {e}")))?;
        let peer_port = free_port().map_err(|e| Some(format!("no free port: {e}")))?;
        let dir = temp_dir(client_port).map_err(|e| Some(format!("no temp dir: {e}")))?;
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let spawned = Command::new("etcd")
            .args(["--name", "m1"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("m1={peer}")])
            // Short raft timings make short leases possible (etcd's shortest TTL follows the
            // election timeout); large transactions carry a room with many members.
            .args(["--heartbeat-interval", "20", "--election-timeout", "200"])
            .args(["--max-txn-ops", "10000"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err((e.kind() != std::io::ErrorKind::NotFound)
                    .then(|| format!("could not run etcd: {e}")));
            }
        };
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Some("etcd has no output pipes".into()));
        };
        // Owned from here on, so any early return kills it.
        let server = EtcdServer {
            child: Some(child),
            client_port,
            dir,
        };
        match tokio::time::timeout(READY_WITHIN, watch_output(stdout, stderr)).await {
            Ok(Ok(Ok(()))) => Ok(server),
            Ok(Ok(Err(output))) => Err(Some(output)),
            Ok(Err(_)) => Err(Some("the output reader stopped".into())),
            Err(_) => Err(Some(format!(
                "etcd on port {client_port} did not serve within {READY_WITHIN:?}"
            ))),
        }
    }

    /// Where to connect, as `ferry node`'s `store` takes it: `etcd://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoint())
    }

    /// The client endpoint, `127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// Kills the member at once (SIGKILL).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads etcd's output on plain threads and resolves once it serves clients, or with its output
/// if it exits first. The threads keep draining afterwards, so etcd never blocks on a full pipe.
fn watch_output(
    stdout: impl Read + Send + 'static,
    stderr: impl Read + Send + 'static,
) -> oneshot::Receiver<Result<(), String>> {
    let (tx, rx) = oneshot::channel();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut BufReader::new(stdout), &mut std::io::sink());
    });
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.is_some() {
                if line.contains("ready to serve client requests") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(Ok(()));
                    }
                } else {
                    seen.push(line);
                }
            }
        }
        if let Some(tx) = tx {
            let _ = tx.send(Err(seen.join("\n")));
        }
    });
    rx
}

fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

fn temp_dir(port: u16) -> std::io::Result<PathBuf> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ferry-etcd-{}-{}-{port}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
