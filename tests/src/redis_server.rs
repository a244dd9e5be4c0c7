//! A real redis-server for one test: started on a free loopback port, killed on drop.
//!
//! Tests that need redis call [`RedisServer::start_or_skip`]. Where redis-server is not
//! installed, that prints one line and the test returns, so a developer without redis still gets
//! a green run of everything else; CI sets `FERRY_REQUIRE_REDIS=1` so that a missing server fails
//! loudly instead of skipping.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::ports::free_port;

/// The line a test prints when it skips for want of redis-server.
pub const SKIP_MESSAGE: &str = "skipped: redis-server not installed (apt-get install redis-server)";

/// Set to `1` to turn a missing redis-server into a failure instead of a skip.
pub const REQUIRE_ENV: &str = "FERRY_REQUIRE_REDIS";

/// How long a starting server may take to say it is ready. Generous, because the machine may be
/// busy compiling; the wait ends as soon as the server reports ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// Attempts at a free port, in case another process takes the one picked before redis binds it.
const ATTEMPTS: usize = 5;

/// A running redis-server owned by one test.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    kind: Kind,
}

/// What a redis-server process is started as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A server of data: a master, or a replica of the master on `replica_of` from the start.
    Data {
        /// Whether it writes every change to an append-only file before it answers, so that a
        /// restart finds what it had acknowledged.
        persistent: bool,
        /// The port of the master it replicates; it is ready once it has synced.
        replica_of: Option<u16>,
    },
    /// A sentinel (`redis-server --sentinel`) watching the master on `master` as
    /// [`SENTINEL_MASTER`], failing it over after a second of silence.
    Sentinel {
        /// The master's port.
        master: u16,
    },
}

/// The name a test sentinel knows its master by.
pub const SENTINEL_MASTER: &str = "ferry";

/// Why a redis-server could not be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// `redis-server` is not on PATH.
    NotInstalled,
    /// It is installed but did not come up; the text is its output.
    Failed(String),
}

impl RedisServer {
    /// Starts a server, or prints [`SKIP_MESSAGE`] and returns `None` if redis-server is not
    /// installed (panicking instead when `FERRY_REQUIRE_REDIS=1`). Any other failure to start
    /// panics: an installed server that does not come up is a real problem.
    pub async fn start_or_skip() -> Option<RedisServer> {
        or_skip(Self::start().await)
    }

    /// Starts a server on a free port of 127.0.0.1, without persistence, in a fresh temp dir,
    /// and returns once it reports that it accepts connections.
    pub async fn start() -> Result<RedisServer, StartError> {
        Self::start_with(false).await
    }

    /// Like [`start_or_skip`](Self::start_or_skip), for a server that persists every write
    /// (`appendonly yes`, `appendfsync always`), as a studio runs it: after
    /// [`restart_keeping_data`](Self::restart_keeping_data) it has what it acknowledged (and the
    /// keys whose expiry passed meanwhile are gone).
    pub async fn start_persistent_or_skip() -> Option<RedisServer> {
        or_skip(Self::start_with(true).await)
    }

    async fn start_with(persistent: bool) -> Result<RedisServer, StartError> {
        Self::start_kind(Kind::Data {
            persistent,
            replica_of: None,
        })
        .await
    }

    /// Starts a server of `kind` on a free port of 127.0.0.1, in a fresh temp dir.
    pub(crate) async fn start_kind(kind: Kind) -> Result<RedisServer, StartError> {
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            match Self::start_once(None, None, kind).await {
                Err(StartError::Failed(output)) if output.contains("Address already in use") => {
                    last = output;
                }
                other => return other,
            }
        }
        Err(StartError::Failed(last))
    }

    async fn start_once(
        port: Option<u16>,
        dir: Option<PathBuf>,
        kind: Kind,
    ) -> Result<RedisServer, StartError> {
        let port = match port {
            Some(port) => port,
            None => free_port().map_err(|e| StartError::Failed(format!("no free port: {e}")))?,
        };
        let dir = match dir {
            Some(dir) => dir,
            None => temp_dir(port).map_err(|e| StartError::Failed(format!("no temp dir: {e}")))?,
        };
        let mut command = Command::new("redis-server");
        let ready = match kind {
            Kind::Data {
                persistent,
                replica_of,
            } => {
                let persistence: &[&str] = if persistent {
                    &[
                        "--save",
                        "",
                        "--appendonly",
                        "yes",
                        "--appendfsync",
                        "always",
                    ]
                } else {
                    &["--save", "", "--appendonly", "no"]
                };
                command
                    .arg("--port")
                    .arg(port.to_string())
                    .args(["--bind", "127.0.0.1", "--protected-mode", "yes"])
                    .args(persistence)
                    .arg("--dir")
                    .arg(&dir)
                    // A master that gains a replica sends it its data at once, not 5 s later.
                    .args(["--repl-diskless-sync-delay", "0"]);
                match replica_of {
                    Some(master) => {
                        command.args(["--replicaof", "127.0.0.1", &master.to_string()]);
                        "MASTER <-> REPLICA sync: Finished with success"
                    }
                    None => "Ready to accept connections",
                }
            }
            Kind::Sentinel { master } => {
                // A sentinel keeps its state in its config file, which must exist and be writable.
                let conf = dir.join("sentinel.conf");
                let text = format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {master} 1\n\
                     sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
                     sentinel failover-timeout {SENTINEL_MASTER} 10000\n",
                    dir.display()
                );
                if let Err(e) = std::fs::write(&conf, text) {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(StartError::Failed(format!("no sentinel config: {e}")));
                }
                command.arg(&conf).arg("--sentinel");
                "+monitor master"
            }
        };
        let spawned = command
            .args(["--daemonize", "no", "--loglevel", "notice"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(if e.kind() == std::io::ErrorKind::NotFound {
                    StartError::NotInstalled
                } else {
                    StartError::Failed(format!("could not run redis-server: {e}"))
                });
            }
        };
        // The server is owned from here on, so any early return kills it.
        let mut server = RedisServer {
            child: None,
            port,
            dir,
            kind,
        };
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            server.child = Some(child);
            return Err(StartError::Failed(
                "redis-server has no output pipes".into(),
            ));
        };
        server.child = Some(child);
        let phrase = ready;
        let ready = crate::server_output::watch_for(stdout, phrase, stderr);
        match tokio::time::timeout(READY_WITHIN, ready).await {
            Ok(Ok(Ok(()))) => Ok(server),
            Ok(Ok(Err(output))) => Err(StartError::Failed(output)),
            Ok(Err(_)) => Err(StartError::Failed("the output reader stopped".into())),
            Err(_) => Err(StartError::Failed(format!(
                "redis-server on port {port} did not report ready ({phrase:?}) within \
                 {READY_WITHIN:?}"
            ))),
        }
    }

    /// Starts a fresh, empty server on the same port after [`stop`](Self::stop), as a redis that
    /// was restarted without persistence: clients that reconnect find no data.
    pub async fn restart(&mut self) -> Result<(), StartError> {
        self.stop();
        let mut fresh = Self::start_once(Some(self.port), None, self.kind).await?;
        self.child = fresh.child.take();
        // `fresh` now removes the old dir on drop; this server keeps the new one.
        std::mem::swap(&mut self.dir, &mut fresh.dir);
        Ok(())
    }

    /// Starts the server again on the same port and data directory after [`stop`](Self::stop):
    /// a persistent server comes back with what it had acknowledged.
    pub async fn restart_keeping_data(&mut self) -> Result<(), StartError> {
        self.stop();
        let mut again =
            Self::start_once(Some(self.port), Some(self.dir.clone()), self.kind).await?;
        self.child = again.child.take();
        // Both name the one directory: only this server removes it.
        again.dir = PathBuf::new();
        Ok(())
    }

    /// A copy of the server's data directory as it is now (a persistent server writes every
    /// change before it answers), for [`restart_from`](Self::restart_from).
    pub fn copy_data(&self) -> std::io::Result<PathBuf> {
        let copy = temp_dir(self.port)?;
        copy_tree(&self.dir, &copy)?;
        Ok(copy)
    }

    /// Stops the server and starts it again on the data of `copy` (which is used up): as a
    /// replica that had not received the latest writes and took over.
    pub async fn restart_from(&mut self, copy: &std::path::Path) -> Result<(), StartError> {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::rename(copy, &self.dir)
            .map_err(|e| StartError::Failed(format!("data not put back: {e}")))?;
        self.restart_keeping_data().await
    }

    /// Where to connect: `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts a fresh, empty server of `kind` on the same port after [`stop`](Self::stop).
    pub(crate) async fn restart_as(&mut self, kind: Kind) -> Result<(), StartError> {
        self.kind = kind;
        self.restart().await
    }

    /// Holds the process (SIGSTOP): its connections stay open, and it answers nothing until
    /// [`resume`](Self::resume).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a [paused](Self::pause) process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let sent = Command::new("kill")
                .arg(signal)
                .arg(child.id().to_string())
                .status();
            assert!(
                sent.is_ok_and(|status| status.success()),
                "kill {signal} {}",
                child.id()
            );
        }
    }

    /// Kills the server at once (SIGKILL), as a crash or a pulled cable would: connected clients
    /// see their connection drop and new connections are refused.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The server, or `None` after [`SKIP_MESSAGE`] when redis-server is not installed (a panic
/// instead when `FERRY_REQUIRE_REDIS=1`); any other failure to start panics.
pub(crate) fn or_skip(started: Result<RedisServer, StartError>) -> Option<RedisServer> {
    match started {
        Ok(server) => Some(server),
        Err(StartError::NotInstalled) => {
            if std::env::var(REQUIRE_ENV).is_ok_and(|value| value == "1") {
                panic!("{SKIP_MESSAGE}; {REQUIRE_ENV}=1 requires it");
            }
            println!("{SKIP_MESSAGE}");
            None
        }
        Err(StartError::Failed(output)) => panic!("redis-server did not start:\n{output}"),
    }
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

fn temp_dir(port: u16) -> std::io::Result<PathBuf> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ferry-redis-{}-{}-{port}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
