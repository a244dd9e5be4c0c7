//! One node process: from its checked settings and the application's [`Registry`] until it is
//! told to stop.
//!
//! The process prints one line, `ready <node-id> mesh=<addr> admin=<addr> sessions=<addr>
//! websocket=<addr>` (the last three only when on), once the node serves: supervisors and tests
//! wait for it instead of guessing how long start-up takes.
//!
//! SIGTERM or Ctrl-C drain the node within `drain_grace_ms` (its units move to the other nodes,
//! with their state and their players), then stop it; the run ends `Ok` only if nothing was
//! lost. The whole stop keeps to that grace from the signal: a drain or shutdown an operator
//! started first is waited for only until the grace runs out, and the node then stops at once.
//! A second signal while it drains stops the node at once. A `POST /shutdown` on the admin
//! endpoint does the same drain and stop. With `drain_grace_ms = 0` a signal stops the node
//! without a drain (for development clusters stopped as a whole): its units end, and the run
//! ends with an error that counts them, so the exit code says they were lost. A node that
//! loses its owner lease can no longer run turns; it shuts down and the run ends with an error,
//! so that a supervisor restarts it with a fresh lease.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use ferry::mesh::{NodeTls, TlsError};
use ferry::store::{LocationStore, MemoryStore, StoreError};
use ferry::{MeshSettings, Node, NodeConfig, NodeId, NodeState, Registry, StartError};

use crate::admin::auth::Access;
use crate::admin::ops::Operations;
use crate::admin::server::AdminOptions;
use crate::admin::wire::{Outcome, ShutdownReport};
use crate::admin::{AdminError, AdminServer};
use crate::config::{ConfigError, NodeSettings, StoreChoice, redact};
use crate::gateway::{self, GatewayError};
use crate::metrics::MetricsError;
use crate::signals::StopSignals;

/// The application's own admin pages, made once the node runs.
type Pages = Box<dyn FnOnce(&Node) -> Router + Send>;

/// One node process of an application: its settings, its factories, and its own admin pages.
pub struct Host {
    settings: NodeSettings,
    registry: Registry,
    pages: Option<Pages>,
}

/// Why the node did not start, or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The config file is missing or wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The certificates in `certs` are missing or do not fit this node.
    #[error("cannot load the mesh certificates of node {node} from {}: {source}", dir.display())]
    Certs {
        /// The node whose certificates they are.
        node: NodeId,
        /// The certificate directory.
        dir: PathBuf,
        /// What loading them met.
        source: TlsError,
    },
    /// No redis-server answered at the configured URL.
    #[error(
        "cannot reach the redis store at {url} ({detail}); check that redis-server runs there and \
         that `store` in the config names it"
    )]
    StoreUnreachable {
        /// The URL, without any password.
        url: String,
        /// What the connection attempt reported.
        detail: String,
    },
    /// The redis store refused the settings.
    #[error("cannot use the redis store at {url}: {source}")]
    Store {
        /// The URL, without any password.
        url: String,
        /// The store's refusal.
        source: StoreError,
    },
    /// The node itself refused to start.
    #[error("node {node} did not start: {source}")]
    Start {
        /// The node that did not start.
        node: NodeId,
        /// The node's refusal.
        source: StartError,
    },
    /// The signal handlers could not be installed, so the node could not be stopped cleanly.
    #[error("cannot listen for SIGTERM and Ctrl-C: {0}")]
    Signal(std::io::Error),
    /// The ready line could not be written.
    #[error("cannot write the ready line to stdout: {0}")]
    Stdout(std::io::Error),
    /// The client gateway's files are missing or wrong.
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    /// The admin endpoint could not start.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// The node certificate could not serve the admin endpoint's HTTPS.
    #[error(
        "cannot serve the admin endpoint of node {node} over HTTPS with its certificate: {source}; \
         `admin_tls` uses the node certificate in `certs`, or set `admin_tls = false`"
    )]
    AdminTls {
        /// The node whose admin endpoint it is.
        node: NodeId,
        /// What loading the certificate met.
        source: TlsError,
    },
    /// The metrics recorder could not be installed.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// The admin token file could not be read.
    #[error(
        "cannot read the admin token file {}: {source}; check `admin_token_file`, or write a long \
         random token in that file (`openssl rand -hex 32 > FILE`)",
        path.display()
    )]
    AdminToken {
        /// The file `admin_token_file` names.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A shutdown (asked on the admin endpoint, or by a signal) lost something.
    #[error(
        "node {node} stopped, but not cleanly: the drain ended {drain:?}{why}, so the {ended} \
         units that stayed ended with the node and their state is lost; the stop ended {stop:?}; \
         the node's log names the units concerned"
    )]
    UncleanShutdown {
        /// The node that stopped.
        node: NodeId,
        /// How its drain ended.
        drain: Outcome,
        /// Why the drain did not move everything, and what to do, when it says.
        why: String,
        /// How many units stayed and ended with the node.
        ended: usize,
        /// How its stop ended.
        stop: ferry::ShutdownOutcome,
    },
    /// A stop signal with `drain_grace_ms = 0` closed the units the node hosted.
    #[error(
        "node {node} stopped without a drain, as drain_grace_ms = 0 asks: the units it hosted \
         ({units}) were closed, and their state is gone; set drain_grace_ms (FERRY_DRAIN_GRACE_MS) \
         above 0 for a stop signal to move them to the other nodes first"
    )]
    ClosedWithoutDrain {
        /// The node that stopped.
        node: NodeId,
        /// The units it hosted.
        units: usize,
    },
    /// The grace of a stop signal ran out while an operator's drain or shutdown still ran: the
    /// node stopped at once.
    #[error(
        "node {node} stopped at once when its stop signal's grace (drain_grace_ms = {grace_ms}) \
         ran out while an operator's {operation} still ran; the units it still hosted ({units}) \
         were closed with it, and their state is gone"
    )]
    GraceExceeded {
        /// The node that stopped.
        node: NodeId,
        /// The grace, in milliseconds.
        grace_ms: u128,
        /// `"drain"` or `"shutdown"`.
        operation: &'static str,
        /// The units it still hosted.
        units: usize,
    },
    /// A second stop signal came while the node drained: it stopped at once.
    #[error(
        "node {node} stopped at once on a second stop signal, while it drained; the units it \
         still hosted ({units}) were closed with it, and their state is gone"
    )]
    Interrupted {
        /// The node that stopped.
        node: NodeId,
        /// The units it still hosted.
        units: usize,
    },
    /// Another process took over the node's id, so this one stopped running turns.
    #[error(
        "node {node} stopped: another process started as {node} took over its owner lease \
         (generation {theirs}, this process held {ours}); two processes must not share a node id, \
         so this one stopped and the other runs its units. If that was a mistake, stop the other \
         process (it answers at the mesh address the store lists for {node}), then restart this one"
    )]
    Superseded {
        /// The node that stopped, and whose id the other process now holds.
        node: NodeId,
        /// The lease generation this process held.
        ours: u64,
        /// The lease generation the other process holds.
        theirs: u64,
    },
    /// The lease ran out before it could be renewed, so this process stopped running turns.
    #[error(
        "node {0} lost its owner lease: it could not renew it in time, so it stopped running \
         turns and shut down; check the store's health and the network to it, then restart it \
         (with a fresh lease)"
    )]
    LeaseLost(NodeId),
}

impl Host {
    /// A node of `registry`'s factories, as `settings` say.
    pub fn new(settings: NodeSettings, registry: Registry) -> Self {
        Host {
            settings,
            registry,
            pages: None,
        }
    }

    /// Adds the application's own pages to the admin endpoint, made from the running node;
    /// they sit behind the same token as every route.
    pub fn pages(mut self, pages: impl FnOnce(&Node) -> Router + Send + 'static) -> Self {
        self.pages = Some(Box::new(pages));
        self
    }

    /// Runs the node until SIGTERM, Ctrl-C or `POST /shutdown`, as the module says.
    pub async fn run(self) -> Result<(), HostError> {
        let Host {
            settings,
            registry,
            pages,
        } = self;
        let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
        for warning in crate::config::misspelt_variables(names) {
            tracing::warn!("{warning}");
        }
        let tls = node_tls(&settings)?;
        let admin_tls = admin_tls(&settings, &tls)?;
        let config = node_config(&settings, tls).await?;
        let access = access(&settings)?;
        // Bound before the node starts, so a taken port fails before the node joins the cluster.
        let admin_listener = match settings.admin {
            Some(addr) => Some(bind_admin(addr, &settings.id, &config).await?),
            None => None,
        };
        // Metrics are recorded only where they can be read: with the admin endpoint.
        let metrics = match settings.admin {
            Some(_) => Some(crate::metrics::install(&settings.id)?),
            None => None,
        };
        let mut stop = StopSignals::install().map_err(HostError::Signal)?;
        let node = Node::start(config, registry)
            .await
            .map_err(|source| HostError::Start {
                node: settings.id.clone(),
                source,
            })?;
        let ops = Operations::new(node.clone());
        let admin = match (admin_listener, metrics) {
            (Some(listener), Some(metrics)) => {
                let options = AdminOptions {
                    access,
                    pages: pages.map(|pages| pages(&node)).unwrap_or_default(),
                    tls: admin_tls,
                };
                match AdminServer::start(listener, ops.clone(), metrics, options) {
                    Ok(server) => Some(server),
                    Err(error) => {
                        node.shutdown().await;
                        return Err(error.into());
                    }
                }
            }
            _ => None,
        };
        if let Err(error) = print_ready(&node, admin.as_ref()) {
            node.shutdown().await;
            close(admin).await;
            return Err(HostError::Stdout(error));
        }
        let mut state = node.watch_state();
        let lease_lost = async move {
            // The sender lives as long as the node, so an error here cannot mean a lost lease.
            if state.wait_for(|s| *s == NodeState::Error).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let outcome = tokio::select! {
            () = stop.recv() => on_signal(&ops, &mut stop, settings.drain_grace).await,
            () = lease_lost => Err(lease_lost_error(&node).await),
            report = ops.stopped() => unclean(&node, &report),
        };
        // A shutdown has stopped it already, unless a second signal cut it short.
        if node.state() != NodeState::Stopped {
            node.shutdown().await;
        }
        close(admin).await;
        outcome
    }
}

/// The first stop signal: drain within `grace`, then stop; another signal meanwhile stops the
/// node at once. An operation already running (asked on the admin endpoint) is waited for, but
/// only until `grace` from the signal has passed: then the node stops at once.
async fn on_signal(
    ops: &Arc<Operations>,
    stop: &mut StopSignals,
    grace: std::time::Duration,
) -> Result<(), HostError> {
    let node = ops.node();
    let until = tokio::time::Instant::now() + grace;
    if grace.is_zero() {
        let units = node.unit_count();
        tracing::warn!(node = %node.id(), units, "stop requested; drain_grace_ms is 0: stopping without a drain");
        node.shutdown().await;
        return match units {
            0 => Ok(()),
            units => Err(HostError::ClosedWithoutDrain {
                node: node.id().clone(),
                units,
            }),
        };
    }
    tracing::info!(node = %node.id(), grace_ms = grace.as_millis(), units = node.unit_count(), "stop requested; draining, then stopping");
    // Our own shutdown with what is left of the grace, or the report of an operator's.
    let claimed = async {
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            match ops.shutdown(left) {
                Ok(task) => break Ok(task),
                Err(_) if ops.running().is_some_and(|r| r.operation == "shutdown") => {
                    break Err(ops.stopped().await);
                }
                Err(_) => ops.idle().await,
            }
        }
    };
    let stopped = async {
        match tokio::time::timeout_at(until, claimed).await {
            // Its drain and stop keep to the deadline it was given.
            Ok(Ok(task)) => Some(task.await.ok()),
            Ok(Err(report)) => Some(Some(report)),
            Err(_) => None,
        }
    };
    tokio::select! {
        report = stopped => match report {
            Some(Some(report)) => {
                tracing::info!(node = %node.id(), outcome = ?report.drain.outcome, moved = report.drain.moved, stayed = report.drain.stayed.len(), elapsed_ms = report.drain.elapsed_ms, "drained and stopped");
                unclean(node, &report)
            }
            // The task panicked: the stop below runs anyway.
            Some(None) => Err(HostError::Interrupted { node: node.id().clone(), units: node.unit_count() }),
            None => {
                let operation = ops.running().map_or("drain", |r| r.operation);
                let units = node.unit_count();
                tracing::warn!(node = %node.id(), operation, units, "the stop's grace ran out while an operator's operation ran: stopping at once");
                node.shutdown_within(std::time::Duration::ZERO).await;
                match units {
                    0 => Ok(()),
                    units => Err(HostError::GraceExceeded {
                        node: node.id().clone(),
                        grace_ms: grace.as_millis(),
                        operation,
                        units,
                    }),
                }
            }
        },
        () = stop.recv() => {
            let units = node.unit_count();
            tracing::warn!(node = %node.id(), units, "a second stop signal: stopping at once");
            node.shutdown().await;
            if units == 0 {
                Ok(())
            } else {
                Err(HostError::Interrupted { node: node.id().clone(), units })
            }
        }
    }
}

/// `Ok` for a clean shutdown, or the error that says what it lost.
fn unclean(node: &Node, report: &ShutdownReport) -> Result<(), HostError> {
    if report.clean {
        return Ok(());
    }
    let why = report.drain.reason.map_or_else(String::new, |reason| {
        format!(" ({reason:?}: {})", crate::admin::wire::advice(reason))
    });
    Err(HostError::UncleanShutdown {
        node: node.id().clone(),
        drain: report.drain.outcome,
        why,
        ended: report.drain.stayed.len(),
        stop: report.shutdown,
    })
}

/// Who may use the admin endpoint: the token of the config or its file, if any.
fn access(settings: &NodeSettings) -> Result<Access, HostError> {
    let reads_too = settings.admin.is_some_and(|addr| !addr.ip().is_loopback());
    let token = match &settings.admin_token {
        None => return Ok(Access::open()),
        Some(crate::config::AdminToken::Value(secret)) => secret.expose().to_owned(),
        Some(crate::config::AdminToken::File(path)) => {
            let error = |source| HostError::AdminToken {
                path: path.clone(),
                source,
            };
            let token = std::fs::read_to_string(path).map_err(error)?;
            if token.trim().is_empty() {
                // An empty token would admit `Authorization: Bearer ` with nothing after it.
                return Err(error(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the file is empty; write a long random token in it",
                )));
            }
            token.trim().to_owned()
        }
    };
    Ok(Access::token(token, reads_too))
}

/// Why the lease was lost: taken over by another process of the same id, or run out.
async fn lease_lost_error(node: &Node) -> HostError {
    let ours = node.lease().generation;
    match node.store().lease_of(node.id()).await {
        Ok(Some(theirs)) if theirs.generation > ours => HostError::Superseded {
            node: node.id().clone(),
            ours,
            theirs: theirs.generation,
        },
        _ => HostError::LeaseLost(node.id().clone()),
    }
}

/// Binds the admin endpoint's port. A port in use may be a live node's with this node's id (a
/// copy of its config): that is the error to report, as `Node::start` would.
async fn bind_admin(
    addr: SocketAddr,
    id: &NodeId,
    config: &NodeConfig,
) -> Result<tokio::net::TcpListener, HostError> {
    match AdminServer::bind(addr).await {
        Ok(listener) => Ok(listener),
        Err(error) => match Node::check_id_free(config).await {
            Err(source @ StartError::IdInUse { .. }) => Err(HostError::Start {
                node: id.clone(),
                source,
            }),
            _ => Err(error.into()),
        },
    }
}

/// Prints `ready <id> mesh=<addr>`, then ` admin=<addr>`, ` sessions=<addr>` and
/// ` websocket=<addr>` when on.
fn print_ready(node: &Node, admin: Option<&AdminServer>) -> std::io::Result<()> {
    let mut line = format!("ready {}", node.id());
    let addrs = [
        ("mesh", node.mesh_addr()),
        ("admin", admin.map(AdminServer::local_addr)),
        ("sessions", node.session_addr()),
        ("websocket", node.websocket_addr()),
    ];
    for (name, addr) in addrs {
        if let Some(addr) = addr {
            line.push_str(&format!(" {name}={addr}"));
        }
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()
}

async fn close(admin: Option<AdminServer>) {
    if let Some(admin) = admin {
        admin.close().await;
    }
}

/// The node's certificates, from `certs`.
fn node_tls(settings: &NodeSettings) -> Result<NodeTls, HostError> {
    NodeTls::load(&settings.certs, settings.id.clone()).map_err(|source| HostError::Certs {
        node: settings.id.clone(),
        dir: settings.certs.clone(),
        source,
    })
}

/// The admin endpoint's HTTPS, with the node's own certificate, when `admin_tls` asks.
fn admin_tls(
    settings: &NodeSettings,
    tls: &NodeTls,
) -> Result<Option<Arc<rustls::ServerConfig>>, HostError> {
    if !settings.admin_tls {
        return Ok(None);
    }
    let config = tls
        .https_server_config()
        .map_err(|source| HostError::AdminTls {
            node: settings.id.clone(),
            source,
        })?;
    Ok(Some(Arc::new(config)))
}

/// Turns checked settings into a node config with its certificates: connects the store.
async fn node_config(settings: &NodeSettings, tls: NodeTls) -> Result<NodeConfig, HostError> {
    let store: Arc<dyn LocationStore> = match &settings.store {
        StoreChoice::Memory => Arc::new(MemoryStore::new()),
        StoreChoice::Shared { url, prefix } => ferry::store::StoreUrl::parse(url)
            .map_err(|source| store_error(url, source))?
            .open(prefix)
            .await
            .map_err(|source| store_error(url, source))?,
    };
    let mut mesh = MeshSettings::new(settings.mesh_listen, tls);
    mesh.seeds = settings.seeds.clone();
    mesh.max_frame = settings.max_frame;
    mesh.keep_alive = settings.mesh_keep_alive;
    mesh.idle_timeout = settings.mesh_idle_timeout;
    mesh.unacked_bytes = settings.mesh_unacked_bytes;
    let mut config = NodeConfig::new(settings.id.clone())
        .app_version(settings.app_version.clone())
        .store(store)
        .mesh(mesh);
    if let Some(files) = &settings.sessions {
        config = config.sessions(gateway::settings(files)?);
    }
    config.capacity = settings.capacity;
    config.weight = settings.weight;
    config.lease_ttl = settings.lease_ttl;
    config.outage_limit = settings.outage_limit;
    config.refresh = settings.refresh;
    config.recover_units = settings.recover_units;
    config.recovery_sweep = settings.recovery_sweep;
    config.max_state = settings.max_state;
    config.max_requests_in_flight = settings.max_requests_in_flight;
    Ok(config)
}

fn store_error(url: &str, source: StoreError) -> HostError {
    let url = redact(url);
    match source {
        StoreError::Unavailable { reason } => HostError::StoreUnreachable {
            url,
            detail: reason,
        },
        StoreError::Timeout { after, .. } => HostError::StoreUnreachable {
            url,
            detail: format!("no answer within {after:?}"),
        },
        source => HostError::Store { url, source },
    }
}

/// The whole `main` of a host program: reads `--config FILE` from the command line (or the
/// `FERRY_CONFIG` environment variable) and the `FERRY_<KEY>` overrides, installs the log of the
/// config's `log_format` (and `otlp_endpoint`), runs a [`Host`] of `registry` on a multi-threaded runtime, and on
/// failure prints the error as one line to stderr and exits 1. `--help` prints the usage and
/// every key, and exits 0.
pub fn main(registry: impl FnOnce() -> Registry) -> std::process::ExitCode {
    run_main(registry, None)
}

/// [`main`], with the application's own admin pages beside the host's routes, as
/// [`Host::pages`] adds them.
pub fn main_with_pages(
    registry: impl FnOnce() -> Registry,
    pages: impl FnOnce(&Node) -> Router + Send + 'static,
) -> std::process::ExitCode {
    run_main(registry, Some(Box::new(pages)))
}

fn run_main(registry: impl FnOnce() -> Registry, pages: Option<Pages>) -> std::process::ExitCode {
    let result = parse_args().and_then(|args| {
        let path = match args {
            Args::Run(path) => path,
            Args::Help => {
                let program = std::env::args_os()
                    .next()
                    .map(PathBuf::from)
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .unwrap_or_else(|| "node".to_owned());
                print!("{}", usage(&program));
                return Ok(());
            }
        };
        let settings = crate::config::load(&path).map_err(MainError::Config)?;
        // Kept to the end: dropping it sends the spans not yet exported.
        let _logs = crate::logs::install(
            settings.log_format,
            settings.otlp_endpoint.as_deref(),
            &settings.id,
        )
        .map_err(MainError::Logs)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(MainError::Runtime)?;
        let host = Host {
            settings,
            registry: registry(),
            pages,
        };
        runtime.block_on(host.run()).map_err(MainError::Host)
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            crate::logs::print_error(&error.to_string());
            std::process::ExitCode::FAILURE
        }
    }
}

/// Why [`main`] failed.
#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error(
        "no config file: pass --config FILE (or set FERRY_CONFIG), a TOML file that sets at \
         least `id` and `certs`; --help lists every key"
    )]
    NoConfig,
    #[error("unknown argument {0:?}; the only one is --config FILE (--help says more)")]
    Argument(String),
    #[error(transparent)]
    Config(ConfigError),
    #[error(transparent)]
    Logs(crate::logs::LogsError),
    #[error("could not start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Host(HostError),
}

/// What the command line asks for.
enum Args {
    /// Run the node of this config file.
    Run(PathBuf),
    /// Print the usage and exit.
    Help,
}

/// `--config FILE` or `--config=FILE` from the command line, else `FERRY_CONFIG`; or `--help`.
fn parse_args() -> Result<Args, MainError> {
    let help = |arg: &std::ffi::OsString| arg == "--help" || arg == "-h";
    let mut args = std::env::args_os().skip(1);
    let path = match args.next() {
        None => {
            return std::env::var_os("FERRY_CONFIG")
                .map(|path| Args::Run(PathBuf::from(path)))
                .ok_or(MainError::NoConfig);
        }
        Some(arg) if help(&arg) => return Ok(Args::Help),
        Some(arg) if arg == "--config" => {
            args.next().map(PathBuf::from).ok_or(MainError::NoConfig)?
        }
        Some(arg) => match arg.to_str().and_then(|a| a.strip_prefix("--config=")) {
            Some(path) => PathBuf::from(path),
            None => return Err(MainError::Argument(arg.to_string_lossy().into_owned())),
        },
    };
    match args.next() {
        None => Ok(Args::Run(path)),
        Some(arg) if help(&arg) => Ok(Args::Help),
        Some(arg) => Err(MainError::Argument(arg.to_string_lossy().into_owned())),
    }
}

/// What `--help` prints: how to run the program, and every key it reads.
fn usage(program: &str) -> String {
    let keys = crate::config::KEYS
        .chunks(4)
        .map(|keys| format!("  {}", keys.join(", ")))
        .collect::<Vec<_>>()
        .join(",\n");
    format!(
        "Usage: {program} --config FILE\n\n\
         Runs one node of the game's Ferry cluster, configured by the TOML file FILE (or the one\n\
         FERRY_CONFIG names), until SIGTERM or Ctrl-C: the first drains its rooms to the other\n\
         nodes within drain_grace_ms and stops it, a second stops it at once. It prints\n\
         `ready <node-id> mesh=<addr> admin=<addr> ...` on stdout once it serves, and logs to\n\
         stderr (RUST_LOG, default warn,ferry=info). It exits 0 only if nothing was lost.\n\n\
         The config keys (`id` and `certs` are required); each can be set in the environment\n\
         as FERRY_<KEY> (FERRY_ID, FERRY_ADMIN_TOKEN, ...), which wins over the file:\n{keys}\n"
    )
}
