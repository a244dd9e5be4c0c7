//! `ferry node`: one node process, configured by a TOML file, serving until it is told to stop.
//!
//! The process prints one line, `ready <node-id> mesh=<addr> admin=<addr> sessions=<addr>
//! websocket=<addr>` (the last three only when on), once the node serves: supervisors and tests
//! wait for it instead of guessing how long start-up takes. SIGTERM or Ctrl-C shut the node down cleanly (its units close
//! and release their records, its lease is given back) and the process exits 0. So does a
//! `POST /shutdown` on the admin endpoint, after it drained the node; it exits non-zero if that
//! lost anything. A node that loses its owner lease can no longer run turns; it shuts down and
//! exits non-zero so that a supervisor restarts it with a fresh lease.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use ferry::mesh::{NodeTls, TlsError};
use ferry::store::{LocationStore, MemoryStore, StoreError};
use ferry::{MeshSettings, Node, NodeConfig, NodeId, NodeState, StartError};

use crate::admin::{self, AdminError, AdminServer, MetricsError};
use crate::config::{self, ConfigError, NodeSettings, StoreChoice, redact};
use crate::gateway::{self, GatewayError};

/// Which config file to run.
#[derive(Args, Debug, Clone)]
pub struct NodeArgs {
    /// The node's TOML config (keys and defaults: docs/configuration.md).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

/// Why the node did not start, or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The config file is missing or wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The certificates in `certs` are missing or do not fit this node.
    #[error("cannot load the mesh certificates of node {node} from {}: {source}", dir.display())]
    Certs {
        /// The node.
        node: NodeId,
        /// The certificate directory.
        dir: PathBuf,
        /// Why.
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
        /// Why.
        source: StoreError,
    },
    /// The node itself refused to start.
    #[error("node {node} did not start: {source}")]
    Start {
        /// The node.
        node: NodeId,
        /// Why.
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
    /// The metrics recorder could not be installed.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// A shutdown asked on the admin endpoint lost something.
    #[error(
        "node {node} stopped, but not cleanly: the drain ended {drain:?} and the stop ended \
         {stop:?}; the node's log names the units concerned"
    )]
    UncleanShutdown {
        /// The node.
        node: NodeId,
        /// How its drain ended.
        drain: admin::wire::Outcome,
        /// How its stop ended.
        stop: ferry::ShutdownOutcome,
    },
    /// Another process took over the node's id, so this one stopped running turns.
    #[error(
        "node {node} stopped: another process started as {node} took over its owner lease \
         (generation {theirs}, this process held {ours}); two processes must not share a node id, \
         so this one stopped and the other runs its units. If that was a mistake, stop the other \
         process (it answers at the mesh address the store lists for {node}), then restart this one"
    )]
    Superseded {
        /// The node.
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

/// Runs the node of `args.config` until SIGTERM or Ctrl-C.
pub async fn run(args: NodeArgs) -> Result<(), NodeError> {
    let settings = config::load(&args.config)?;
    let config = node_config(&settings).await?;
    // Bound before the node starts, so a taken port fails before the node joins the cluster.
    let admin_listener = match settings.admin {
        Some(addr) => Some(AdminServer::bind(addr).await?),
        None => None,
    };
    let metrics = admin::install_metrics()?;
    // Installed before the node starts, so a stop request during start-up is not lost: it is
    // acted on as soon as the node serves.
    let mut stop = StopSignals::install().map_err(NodeError::Signal)?;
    // Every sample, as the demo's nodes host them, so `ferry bots` can play any of them.
    let node = Node::start(config, crate::bots::games::registry())
        .await
        .map_err(|source| NodeError::Start {
            node: settings.id.clone(),
            source,
        })?;
    let admin = match admin_listener {
        Some(listener) => match AdminServer::start(listener, node.clone(), metrics) {
            Ok(server) => Some(server),
            Err(error) => {
                node.shutdown().await;
                return Err(error.into());
            }
        },
        None => None,
    };
    if let Err(error) = print_ready(&node, admin.as_ref()) {
        node.shutdown().await;
        close(admin).await;
        return Err(NodeError::Stdout(error));
    }
    let mut state = node.watch_state();
    let lease_lost = async move {
        // The sender lives as long as the node, so an error here cannot mean a lost lease.
        if state.wait_for(|s| *s == NodeState::Error).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let stopped = async {
        match &admin {
            Some(admin) => admin.stopped().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        () = stop.recv() => {
            tracing::info!(node = %node.id(), "stop requested; shutting down");
            Ok(())
        }
        () = lease_lost => Err(lease_lost_error(&node).await),
        report = stopped => match report {
            Some(report) if !report.clean => Err(NodeError::UncleanShutdown {
                node: node.id().clone(),
                drain: report.drain.outcome,
                stop: report.shutdown,
            }),
            _ => Ok(()),
        },
    };
    // A shutdown on the admin endpoint has stopped it already.
    if node.state() != NodeState::Stopped {
        node.shutdown().await;
    }
    close(admin).await;
    outcome
}

/// Why the lease was lost: taken over by another process of the same id, or run out.
async fn lease_lost_error(node: &Node) -> NodeError {
    let ours = node.lease().generation;
    match node.store().lease_of(node.id()).await {
        Ok(Some(theirs)) if theirs.generation > ours => NodeError::Superseded {
            node: node.id().clone(),
            ours,
            theirs: theirs.generation,
        },
        _ => NodeError::LeaseLost(node.id().clone()),
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

/// Turns checked settings into a node config: loads the certificates and connects the store.
async fn node_config(settings: &NodeSettings) -> Result<NodeConfig, NodeError> {
    let tls =
        NodeTls::load(&settings.certs, settings.id.clone()).map_err(|source| NodeError::Certs {
            node: settings.id.clone(),
            dir: settings.certs.clone(),
            source,
        })?;
    let store: Arc<dyn LocationStore> = match &settings.store {
        StoreChoice::Memory => Arc::new(MemoryStore::new()),
        StoreChoice::Redis { url, prefix } => ferry::store::StoreUrl::parse(url)
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
    config.refresh = settings.refresh;
    config.recover_units = settings.recover_units;
    config.recovery_sweep = settings.recovery_sweep;
    config.max_state = settings.max_state;
    config.max_requests_in_flight = settings.max_requests_in_flight;
    Ok(config)
}

fn store_error(url: &str, source: StoreError) -> NodeError {
    let url = redact(url);
    match source {
        StoreError::Unavailable { reason } => NodeError::StoreUnreachable {
            url,
            detail: reason,
        },
        StoreError::Timeout { after, .. } => NodeError::StoreUnreachable {
            url,
            detail: format!("no answer within {after:?}"),
        },
        source => NodeError::Store { url, source },
    }
}

/// The requests to stop: SIGTERM (what supervisors send) and Ctrl-C.
struct StopSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                term: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the first stop request.
    async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}
