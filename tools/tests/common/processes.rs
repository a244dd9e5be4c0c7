//! `ferry node` processes started by a test: the ready line awaited and read, SIGTERM to stop,
//! SIGKILL to crash one, and every process killed if the test fails; the `ferry` commands run
//! against them, raw HTTP to their admin endpoints, and the driver node a test joins to their
//! cluster.

use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ferry::client::{Client, ClientEvent};
use ferry::cluster::authority::node_key;
use ferry::mesh::NodeTls;
use ferry::store::{LocationStore, StoreUrl};
use ferry::{ActorId, MeshSettings, Node, NodeConfig, NodeId, Registry};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout, Command};

/// Reads a client's events until it said that its gateway bound each of `players` again by itself
/// (the node running it died). Pushes, and reports of inputs in doubt, on the way are passed over;
/// anything else fails the test.
pub async fn rebound<P: DeserializeOwned + Debug>(client: &mut Client, players: &[ActorId]) {
    let mut waiting = players.to_vec();
    within(&format!("word that {waiting:?} were bound again"), async {
        while !waiting.is_empty() {
            match client.recv::<P>().await.expect("the client runs") {
                ClientEvent::Rebound { actor } => waiting.retain(|p| *p != actor),
                ClientEvent::Push { .. } | ClientEvent::Undelivered { .. } => {}
                other => panic!("{other:?} while {waiting:?} were to be bound again"),
            }
        }
    })
    .await;
}

/// A bound on waits for events that have no timeout of their own (a ready line, a link, an exit),
/// so that a broken build fails instead of hanging. Far above what any of them needs.
pub const HANG_GUARD: Duration = Duration::from_secs(120);

/// Awaits `fut`, failing the test if it hangs.
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(HANG_GUARD, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: still waiting after {HANG_GUARD:?}"),
    }
}

/// What a node's ready line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    /// Where its mesh listens.
    pub mesh: SocketAddr,
    /// Where its admin endpoint listens, if on.
    pub admin: Option<SocketAddr>,
    /// Where its client gateway listens, if on.
    pub sessions: Option<SocketAddr>,
}

impl Ready {
    /// Reads `ready <node> mesh=<addr>[ admin=<addr>][ sessions=<addr>]`.
    pub fn parse(node: &str, line: &str) -> Ready {
        let rest = line
            .strip_prefix(&format!("ready {node} "))
            .unwrap_or_else(|| panic!("{node} printed {line:?}, not its ready line"));
        let mut ready = Ready {
            mesh: SocketAddr::from(([0, 0, 0, 0], 0)),
            admin: None,
            sessions: None,
        };
        let mut names = Vec::new();
        for part in rest.split(' ') {
            let (name, addr) = part
                .split_once('=')
                .unwrap_or_else(|| panic!("{part:?} in {line:?} is not name=addr"));
            let addr: SocketAddr = addr
                .parse()
                .unwrap_or_else(|_| panic!("{part:?} in {line:?} has no address"));
            match name {
                "mesh" => ready.mesh = addr,
                "admin" => ready.admin = Some(addr),
                "sessions" => ready.sessions = Some(addr),
                other => panic!("unknown part {other:?} in {line:?}"),
            }
            names.push(name);
        }
        assert_eq!(names.first(), Some(&"mesh"), "mesh comes first: {line:?}");
        ready
    }

    /// The admin address, which the test's config turned on.
    pub fn admin(&self) -> String {
        self.admin.expect("admin endpoint on").to_string()
    }
}

/// One `ferry node` process.
pub struct NodeProcess {
    /// Its node id.
    pub id: String,
    child: Child,
    log: PathBuf,
    /// Its stdout, kept open after the ready line so the node never writes to a closed pipe.
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
}

/// The node processes of a test. Dropping it (a failed test) kills those still running.
#[derive(Default)]
pub struct Processes(pub Vec<NodeProcess>);

impl Drop for Processes {
    fn drop(&mut self) {
        for p in &mut self.0 {
            // Already reaped processes refuse this; that is fine.
            let _ = p.child.start_kill();
        }
    }
}

impl Processes {
    /// Starts `ferry node --config config` and returns what its ready line says. A signal
    /// stops it without a drain (`FERRY_DRAIN_GRACE_MS=0`), so that a test's nodes, stopped
    /// together at its end, do not drain into each other.
    pub async fn start(&mut self, node: &str, config: &Path, logs: &Path) -> Ready {
        self.start_with(node, config, logs, &[("FERRY_DRAIN_GRACE_MS", "0")])
            .await
    }

    /// Starts `ferry node --config config` with `env` set, and returns what its ready line says.
    pub async fn start_with(
        &mut self,
        node: &str,
        config: &Path,
        logs: &Path,
        env: &[(&str, &str)],
    ) -> Ready {
        let command = Command::new(env!("CARGO_BIN_EXE_ferry"));
        self.start_as(command, node, config, logs, env).await
    }

    /// Starts `ferry node --config config` with `env` set through `command` (the `ferry` binary,
    /// or a command that runs it, such as inside a network namespace), and returns what its ready
    /// line says.
    pub async fn start_as(
        &mut self,
        mut command: Command,
        node: &str,
        config: &Path,
        logs: &Path,
        env: &[(&str, &str)],
    ) -> Ready {
        let log = logs.join(format!("{node}.log"));
        let stderr = std::fs::File::create(&log).expect("log file");
        let mut child = command
            .arg("node")
            .arg("--config")
            .arg(config)
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn,ferry=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("ferry node starts");
        let stdout = child.stdout.take().expect("piped stdout");
        // Owned by the guard before anything can fail, so a failure below kills it.
        self.0.push(NodeProcess {
            id: node.to_owned(),
            child,
            log: log.clone(),
            stdout: BufReader::new(stdout).lines(),
        });
        let stdout = &mut self.0.last_mut().expect("just pushed").stdout;
        let line = within(&format!("{node}'s ready line"), stdout.next_line()).await;
        let line = line
            .expect("stdout readable")
            .unwrap_or_else(|| panic!("{node} exited before it was ready:\n{}", read_log(&log)));
        Ready::parse(node, &line)
    }

    /// Sends SIGTERM to every process still running, waits for each to exit, and returns how
    /// each ended.
    pub async fn terminate_all(&mut self) -> Vec<(String, ExitStatus, String)> {
        for p in &self.0 {
            let Some(pid) = p.child.id() else {
                continue;
            };
            let status = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .expect("kill runs");
            assert!(status.success(), "SIGTERM to {}", p.id);
        }
        let mut ended = Vec::new();
        for i in 0..self.0.len() {
            ended.push(self.wait(i).await);
        }
        ended
    }

    /// Sends SIGTERM to the `i`th process, as a supervisor stopping it does.
    pub fn terminate(&self, i: usize) {
        self.signal(i, "TERM");
    }

    /// Sends the signal named `name` (`TERM`, `STOP`, `CONT`) to the `i`th process.
    pub fn signal(&self, i: usize, name: &str) {
        let p = &self.0[i];
        let pid = p.child.id().expect("the process runs");
        let status = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "SIG{name} to {}", p.id);
    }

    /// Kills the `i`th process with SIGKILL, as a crash does: it gets no chance to release its
    /// lease or its units. Returns how it ended, once it has.
    pub async fn kill(&mut self, i: usize) -> ExitStatus {
        let p = &mut self.0[i];
        // tokio's kill sends SIGKILL on Unix.
        p.child.start_kill().expect("SIGKILL sent");
        let (_, status, _) = self.wait(i).await;
        status
    }

    /// Whether the `i`th process still runs.
    pub fn running(&mut self, i: usize) -> bool {
        matches!(self.0[i].child.try_wait(), Ok(None))
    }

    /// Waits for the `i`th process to exit and returns its id, exit status and log.
    pub async fn wait(&mut self, i: usize) -> (String, ExitStatus, String) {
        let p = &mut self.0[i];
        let status = match tokio::time::timeout(HANG_GUARD, p.child.wait()).await {
            Ok(status) => status.expect("exit status"),
            Err(_) => {
                let _ = p.child.start_kill();
                panic!("{} did not exit:\n{}", p.id, read_log(&p.log));
            }
        };
        (p.id.clone(), status, read_log(&p.log))
    }
}

/// Checks how a node stopped by [`Processes::terminate_all`] ended, when it was started with
/// the test's `drain_grace_ms = 0` ([`Processes::start`]): exit 0 if it hosted nothing, or exit 1
/// with the one error line that counts the units it closed without a drain; never a panic.
/// Returns that count.
pub fn closed_without_drain(name: &str, status: ExitStatus, log: &str) -> usize {
    assert!(!log.contains("panicked"), "{name} panicked:\n{log}");
    if status.code() == Some(0) {
        return 0;
    }
    assert_eq!(status.code(), Some(1), "{name}:\n{log}");
    let last = log.lines().last().unwrap_or_default();
    let units = last
        .strip_prefix(&format!(
            "error: node {name} stopped without a drain, as drain_grace_ms = 0 asks: the units \
             it hosted ("
        ))
        .and_then(|rest| rest.split_once(')'))
        .and_then(|(units, _)| units.parse().ok())
        .unwrap_or_else(|| panic!("{name} exited 1 for another reason:\n{log}"));
    assert!(units > 0, "{name} exited 1 with nothing closed:\n{log}");
    units
}

/// A process's log, or why there is none.
pub fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("(no log: {e})"))
}

/// The store revision of each node's descriptor.
async fn descriptor_versions(store: &Arc<dyn LocationStore>, nodes: &[NodeId]) -> Vec<u64> {
    let mut versions = Vec::new();
    for node in nodes {
        let found = store.get(&node_key(node)).await.expect("store read");
        versions.push(found.expect("descriptor published").version);
    }
    versions
}

/// Waits until every node in `nodes` has republished its descriptor twice. A node publishes at the
/// start of each membership refresh and then reads every live peer, so the second publication
/// proves that a whole refresh ran after this call began: every node live by then is its peer.
pub async fn wait_two_refreshes(store: &Arc<dyn LocationStore>, nodes: &[NodeId]) {
    let mut last = descriptor_versions(store, nodes).await;
    let mut changes = vec![0_u32; nodes.len()];
    within("two membership refreshes of every process", async {
        while changes.iter().any(|c| *c < 2) {
            tokio::task::yield_now().await;
            let now = descriptor_versions(store, nodes).await;
            for ((seen, old), new) in changes.iter_mut().zip(&mut last).zip(now) {
                if new != *old {
                    *seen += 1;
                    *old = new;
                }
            }
        }
    })
    .await;
}

/// Starts a test's driver node: it joins the processes' cluster (same store and `prefix`, a
/// certificate `ferry certs` wrote for `driver` in `certs_dir`, the same `version`) to place units
/// and talk to them, with room for no unit, so that it never takes one.
pub async fn driver(
    store_url: &str,
    prefix: &str,
    version: &str,
    certs_dir: &Path,
    registry: Registry,
) -> (Node, Arc<dyn LocationStore>) {
    let store = StoreUrl::parse(store_url)
        .expect("store url")
        .open(prefix)
        .await
        .expect("the processes' store");
    let id = NodeId::new("driver").expect("valid node id");
    let tls = NodeTls::load(certs_dir, id.clone()).expect("driver certificate");
    let mut mesh = MeshSettings::new("127.0.0.1:0".parse().expect("addr"), tls);
    mesh.initial_rtt = Duration::from_millis(10);
    let mut config = NodeConfig::new(id)
        .app_version(version)
        .store(store.clone())
        .mesh(mesh);
    config.capacity = 0;
    config.refresh = Duration::from_millis(200);
    let node = Node::start(config, registry).await.expect("driver starts");
    (node, store)
}

/// Waits until the driver links to every node and all of them know each other.
pub async fn settle(driver: &Node, store: &Arc<dyn LocationStore>, nodes: &[NodeId]) {
    for node in nodes {
        within(&format!("link to {node}"), async {
            loop {
                driver.refresh_membership().await.expect("membership read");
                if driver.cluster_view().iter().any(|d| d.node == *node) {
                    break;
                }
            }
            driver.wait_peer_ready(node).await
        })
        .await
        .expect("peer link up");
    }
    wait_two_refreshes(store, nodes).await;
}

/// Runs `ferry args...` to its end.
pub async fn run_ferry(args: &[&str]) -> Output {
    within(
        &format!("ferry {args:?}"),
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(args)
            .output(),
    )
    .await
    .expect("the ferry binary runs")
}

/// A command's output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `ferry status --json ADDR`, parsed.
pub async fn status_json(addr: &str) -> Value {
    let out = run_ferry(&["status", "--json", addr]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// Sends `request` as it is on a fresh connection and returns the status code and body.
pub async fn raw_http(addr: &str, request: &str) -> (u16, String) {
    let stream = TcpStream::connect(addr)
        .await
        .expect("admin endpoint reachable");
    exchange(stream, request).await
}

/// Sends `request` as it is over HTTPS on a fresh connection, trusting only the cluster CA in
/// the file `ca` for any node's certificate, and returns the status code and body.
pub async fn raw_https(addr: &str, ca: &Path, request: &str) -> (u16, String) {
    let pem = std::fs::read_to_string(ca).expect("CA file");
    let (config, name) = ferry::mesh::https_client_config(&pem, None).expect("a usable CA");
    let tcp = TcpStream::connect(addr)
        .await
        .expect("admin endpoint reachable");
    let tls = within(
        "a TLS handshake",
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .expect("the TLS handshake passes");
    exchange(tls, request).await
}

/// Writes `request` on `stream`, reads the answer to its end, and returns its status code and
/// body.
async fn exchange<S>(mut stream: S, request: &str) -> (u16, String)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request sent");
    let mut answer = String::new();
    within("an HTTP answer", stream.read_to_string(&mut answer))
        .await
        .expect("answer read");
    let code = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// A GET request for `raw_http` and `raw_https`.
pub fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
}

/// A POST request for `raw_http` and `raw_https`.
pub fn post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Runs `promtool check metrics` on a scrape and returns what it found wrong (empty when
/// clean), or `None` when promtool is not installed and `FERRY_REQUIRE_PROMTOOL=1` does not
/// demand it (CI installs it: Debian's `prometheus` package).
pub fn promtool_problems(scrape: &str) -> Option<String> {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if std::env::var("FERRY_REQUIRE_PROMTOOL").is_ok_and(|v| v == "1") {
                panic!(
                    "promtool is not installed (apt-get install prometheus); FERRY_REQUIRE_PROMTOOL=1 requires it"
                );
            }
            println!(
                "promtool is not installed (apt-get install prometheus): the metrics check is skipped"
            );
            return None;
        }
        Err(error) => panic!("promtool did not start: {error}"),
    };
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(scrape.as_bytes())
        .expect("scrape written");
    let out = child.wait_with_output().expect("promtool ran");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    if out.status.success() && said.trim().is_empty() {
        Some(String::new())
    } else {
        Some(format!("exit {:?}: {said}", out.status.code()))
    }
}
