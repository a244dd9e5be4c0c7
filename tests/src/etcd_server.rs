//! A real etcd for one test: one member on free loopback ports, killed on drop.
//!
//! Tests that need etcd call [`EtcdServer::start_or_skip`]. Where etcd is not installed, that
//! prints one line and the test returns; CI sets `FERRY_REQUIRE_ETCD=1` so that a missing etcd
//! fails loudly instead of skipping.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::ports::free_port;

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
    member: Member,
}

/// One etcd process, its ports and its data.
#[derive(Debug)]
struct Member {
    name: String,
    child: Option<Child>,
    client_port: u16,
    peer_port: u16,
    initial_cluster: String,
    dir: PathBuf,
}

/// What starting etcd came to: `Err(None)` when it is not installed, `Err(Some(output))` when it
/// did not come up.
type Started<T> = Result<T, Option<String>>;

impl EtcdServer {
    /// Starts a member, or prints [`SKIP_MESSAGE`] and returns `None` if etcd is not installed
    /// (panicking instead when `FERRY_REQUIRE_ETCD=1`). Any other failure to start panics.
    pub async fn start_or_skip() -> Option<EtcdServer> {
        let mut cluster = EtcdCluster::start_or_skip(1).await?;
        cluster.members.pop().map(|member| EtcdServer { member })
    }

    /// Where to connect, as `ferry node`'s `store` takes it: `etcd://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoint())
    }

    /// The client endpoint, `127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        self.member.endpoint()
    }

    /// Kills the member at once (SIGKILL).
    pub fn stop(&mut self) {
        self.member.stop();
    }

    /// Starts the member again on its data after [`stop`](Self::stop), and waits until it
    /// serves: the same cluster, with everything it had committed.
    pub async fn restart(&mut self) {
        self.member.restart().await;
    }
}

/// A cluster of etcd members on loopback, each killed on drop.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
}

impl EtcdCluster {
    /// Starts `n` members that form one cluster, or skips as [`EtcdServer::start_or_skip`] does.
    pub async fn start_or_skip(n: usize) -> Option<EtcdCluster> {
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            match Self::start_once(n).await {
                Ok(cluster) => return Some(cluster),
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

    async fn start_once(n: usize) -> Started<EtcdCluster> {
        let port = || free_port().map_err(|e| Some(format!("no free port: {e}")));
        let mut members = Vec::with_capacity(n);
        for i in 1..=n {
            let (client_port, peer_port) = (port()?, port()?);
            let dir = temp_dir(client_port).map_err(|e| Some(format!("no temp dir: {e}")))?;
            members.push(Member {
                name: format!("m{i}"),
                child: None,
                client_port,
                peer_port,
                initial_cluster: String::new(),
                dir,
            });
        }
        let initial: Vec<String> = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let mut cluster = EtcdCluster { members };
        let mut ready = Vec::new();
        for member in &mut cluster.members {
            member.initial_cluster = initial.join(",");
            ready.push(member.spawn()?);
        }
        // Members serve clients once a quorum has formed: wait for all of them together.
        for (i, started) in ready.into_iter().enumerate() {
            let port = cluster.members[i].client_port;
            match tokio::time::timeout(READY_WITHIN, started).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(output))) => return Err(Some(output)),
                Ok(Err(_)) => return Err(Some("the output reader stopped".into())),
                Err(_) => {
                    return Err(Some(format!(
                        "etcd on port {port} did not serve within {READY_WITHIN:?}"
                    )));
                }
            }
        }
        Ok(cluster)
    }

    /// The members' client endpoints, `127.0.0.1:<port>` each.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// Kills member `i` at once (SIGKILL); its data stays for [`restart`](Self::restart).
    pub fn kill(&mut self, i: usize) {
        self.members[i].stop();
    }

    /// Starts member `i` again on its data, and waits until it serves.
    pub async fn restart(&mut self, i: usize) {
        self.members[i].restart().await;
    }

    /// Which running member leads the cluster now, as the members say.
    pub async fn leader(&self) -> Option<usize> {
        for member in self.members.iter().filter(|m| m.child.is_some()) {
            let Some(status) = post(member.client_port, "/v3/maintenance/status", "{}").await
            else {
                continue;
            };
            let leader = status["leader"].as_str().map(ToOwned::to_owned);
            if let Some(leader) = leader {
                for (i, other) in self.members.iter().enumerate() {
                    let Some(theirs) =
                        post(other.client_port, "/v3/maintenance/status", "{}").await
                    else {
                        continue;
                    };
                    if theirs["header"]["member_id"].as_str() == Some(leader.as_str()) {
                        return Some(i);
                    }
                }
            }
        }
        None
    }
}

impl Member {
    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// Starts this member's process; the receiver resolves once it serves clients.
    fn spawn(&mut self) -> Started<oneshot::Receiver<Result<(), String>>> {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let spawned = Command::new("etcd")
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
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
            .args(["--initial-cluster", &self.initial_cluster])
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
                return Err((e.kind() != std::io::ErrorKind::NotFound)
                    .then(|| format!("could not run etcd: {e}")));
            }
        };
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Some("etcd has no output pipes".into()));
        };
        // Owned from here on, so a failure later kills it.
        self.child = Some(child);
        Ok(crate::server_output::watch_for(
            stderr,
            "ready to serve client requests",
            stdout,
        ))
    }

    /// Starts this member again on its data, and waits until it serves.
    async fn restart(&mut self) {
        let started = self.spawn().expect("etcd member restarts");
        tokio::time::timeout(READY_WITHIN, started)
            .await
            .expect("the restarted member serves in time")
            .expect("output reader")
            .expect("the restarted member serves");
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Posts `body` to a member's JSON gateway and reads the answer; `None` if it does not answer.
async fn post(port: u16, path: &str, body: &str) -> Option<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        let text = String::from_utf8_lossy(&answer);
        let (_, body) = text.split_once("\r\n\r\n")?;
        // The JSON object, without any chunk framing around it.
        let json = &body[body.find('{')?..=body.rfind('}')?];
        serde_json::from_str(json).ok()
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
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
