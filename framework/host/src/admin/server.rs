//! The admin endpoint of one node: status, drain, shutdown, metrics and creating units over
//! HTTP (or HTTPS, [`super::tls`]), for the `ferry` CLI, scripts and Prometheus.
//!
//! Beside them it serves the cluster view ([`super::cluster_view`]), the play page
//! ([`super::play`]) and the game's own pages.
//!
//! Drains and shutdowns run as the node's [`Operations`]: on tasks of their own, one at a time.
//! Every refusal is a 4xx with a JSON body that says what to do; [`super::auth`] decides who
//! may ask.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ferry::{ActorId, InvalidId, Node, NodeState, RelocateMode, SpotId, UnitError, UnitId};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::auth::Access;
use super::tls::TlsListener;
use super::wire::{
    DrainReport, ErrorBody, Mode, PeerBody, ProgressBody, RelocateRequest, Resumed, RunningBody,
    ShutdownReport, ShutdownRequest, StandbyBody, StatusBody, UnitCreated, UnitKind, UnitRequest,
    millis,
};
use crate::admin::ops::{Busy, Operations};

/// The largest request body taken: every valid one is far smaller.
const MAX_BODY: usize = 16 * 1024;

/// How long closing the endpoint waits for answers still being written.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The routes, for error messages.
const ROUTES: &str = "GET /status, GET /healthz, GET /readyz, POST /relocate, POST /resume, \
                      POST /shutdown, GET /metrics, POST /units, GET /play (the play page) and \
                      GET /cluster (the cluster view), beside any pages of the game's own";

/// A `POST /units` body, for error messages.
const UNIT_EXAMPLE: &str =
    "{\"kind\": \"actor\", \"factory\": \"fps-player\", \"id\": \"fps-0-p0\", \"join\": \"fps-0\"}";

/// Why the admin endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The listen address could not be bound.
    #[error(
        "cannot listen for the admin endpoint on {addr}: {source}; pick a free port in `admin`, \
         or set it to \"off\""
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The bound socket could not say its address.
    #[error(
        "cannot read the address of the admin endpoint: {0}; set `admin` to \"off\" to run without it"
    )]
    Address(std::io::Error),
}

/// What an admin endpoint serves beside its own routes, and whom it lets in.
#[derive(Default)]
pub struct AdminOptions {
    /// Who may use it.
    pub access: Access,
    /// The application's own pages (GET routes), merged in behind the same token.
    pub pages: Router,
    /// HTTPS with this TLS (the node's certificate), or plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// A running admin endpoint. Dropping it leaves the server running until the process ends; call
/// [`AdminServer::close`] to stop it.
pub struct AdminServer {
    addr: SocketAddr,
    close: watch::Sender<bool>,
    task: JoinHandle<()>,
    /// The metrics upkeep, which ends with the endpoint.
    upkeep: JoinHandle<()>,
}

impl AdminServer {
    /// Binds `addr` (before the node starts, so a taken port fails fast).
    pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, AdminError> {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| AdminError::Bind { addr, source })
    }

    /// Serves the node of `ops` on `listener`, rendering `metrics` for `GET /metrics` (and
    /// keeping up their histograms meanwhile).
    pub fn start(
        listener: tokio::net::TcpListener,
        ops: Arc<Operations>,
        metrics: PrometheusHandle,
        options: AdminOptions,
    ) -> Result<AdminServer, AdminError> {
        let addr = listener.local_addr().map_err(AdminError::Address)?;
        let (close, mut closing) = watch::channel(false);
        let closed = async move {
            // An error means the sender is gone, which is also a reason to stop.
            let _ = closing.wait_for(|close| *close).await;
        };
        let tls = options.tls.clone();
        let router = router(ops, metrics.clone(), options);
        let task = match tls {
            Some(tls) => {
                let listener = TlsListener::new(listener, tls).map_err(AdminError::Address)?;
                tokio::spawn(serve(listener, router, closed))
            }
            None => tokio::spawn(serve(listener, router, closed)),
        };
        let upkeep = crate::metrics::spawn_upkeep(metrics);
        Ok(AdminServer {
            addr,
            close,
            task,
            upkeep,
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops taking requests, lets answers in flight be written (for a few seconds at most),
    /// and stops.
    pub async fn close(mut self) {
        self.upkeep.abort();
        let _ = self.close.send(true);
        if tokio::time::timeout(CLOSE_GRACE, &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

/// Serves `router` on `listener` until `closed`, then lets answers in flight be written.
async fn serve<L>(listener: L, router: Router, closed: impl Future<Output = ()> + Send + 'static)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(closed)
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "the admin endpoint stopped");
    }
}

/// The routes over the node of `ops`, the application's pages beside them, every one behind the
/// access check.
pub fn router(ops: Arc<Operations>, metrics: PrometheusHandle, options: AdminOptions) -> Router {
    let node = ops.node().clone();
    let shared = Arc::new(Shared { ops, metrics });
    let cluster_view = super::cluster_view::routes(node.clone());
    let play = super::play::routes(node);
    Router::new()
        .route("/status", get(status))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/relocate", post(relocate))
        .route("/resume", post(resume))
        .route("/shutdown", post(shutdown))
        .route("/metrics", get(render_metrics))
        .route("/units", post(create_unit))
        .with_state(shared)
        .merge(options.pages)
        .merge(cluster_view)
        .merge(play)
        // Last, so that they answer for the pages' routes too.
        .fallback(not_found)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            options.access,
            super::auth::guard,
        ))
}

/// What every handler shares.
struct Shared {
    ops: Arc<Operations>,
    metrics: PrometheusHandle,
}

impl Shared {
    fn node(&self) -> &Node {
        self.ops.node()
    }

    /// A refusal for an operation that another holds.
    fn busy(&self, Busy(other): Busy) -> Refusal {
        Refusal::new(
            StatusCode::CONFLICT,
            format!(
                "node {} is already running a {other}; wait for it to end (`ferry status` \
                 shows its progress), then ask again",
                self.node().id()
            ),
        )
    }
}

/// A request refused: its status and what to do.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    error: String,
}

impl Refusal {
    fn new(status: StatusCode, error: impl Into<String>) -> Self {
        Refusal {
            status,
            error: error.into(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorBody { error: self.error })).into_response()
    }
}

async fn status(State(shared): State<Arc<Shared>>) -> Json<StatusBody> {
    let node = shared.node();
    let host = node.watch_status().borrow().clone();
    let running = shared.ops.running().map(|r| {
        let (mode, version) = match &r.options.mode {
            RelocateMode::PlannedMaintenance => (Mode::Maintenance, None),
            RelocateMode::RollingUpdate { target_version } => {
                (Mode::RollingUpdate, Some(target_version.clone()))
            }
        };
        RunningBody {
            operation: r.operation.to_owned(),
            mode,
            version,
            elapsed_ms: millis(r.started.elapsed()),
        }
    });
    Json(StatusBody {
        node: node.id().to_string(),
        state: node.state().to_string(),
        app_version: node.config().app_version.clone(),
        units: node.unit_count(),
        sessions: node.session_addr().map(|_| node.session_count()),
        peers: node
            .peers()
            .into_iter()
            .map(|p| PeerBody {
                node: p.node.to_string(),
                link: format!("{:?}", p.state),
                addr: p.addr.map(|a| a.to_string()),
                heard_ms: node.heard_from(&p.node).map(millis),
            })
            .collect(),
        progress: ProgressBody::from(&host),
        safe_to_shutdown: safe_to_shutdown(node, &host, running.is_some()),
        running,
        last_drain: shared.ops.last_drain(),
        recovery_waiting: node.recovery_stall().map(Into::into),
        standby: StandbyBody::from(&node.standby_status()),
    })
}

/// Whether stopping the node now loses nothing: it hosts no unit and moves none. A fresh node
/// that never took a unit is as safe to stop as a drained one.
fn safe_to_shutdown(node: &Node, host: &ferry::HostStatus, running: bool) -> bool {
    let idle = matches!(
        node.state(),
        NodeState::Serving | NodeState::Relocated | NodeState::Stopped
    );
    host.safe_to_shutdown || (idle && !running && node.unit_count() == 0)
}

async fn relocate(
    State(shared): State<Arc<Shared>>,
    body: Body,
) -> Result<Json<DrainReport>, Refusal> {
    let request: RelocateRequest = read_json(body, "{\"mode\": \"maintenance\"}").await?;
    let options = request
        .options()
        .map_err(|e| Refusal::new(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let report = shared
        .ops
        .drain(options)
        .map_err(|busy| shared.busy(busy))?;
    report.await.map(Json).map_err(task_failed)
}

/// Puts a drained node back into service. Refused while a drain or shutdown runs, and on a
/// node that is stopping or stopped.
async fn resume(State(shared): State<Arc<Shared>>) -> Result<Json<Resumed>, Refusal> {
    let node = shared.node();
    if let Some(running) = shared.ops.running() {
        return Err(Refusal::new(
            StatusCode::CONFLICT,
            format!(
                "node {} is running a {}; wait for it to end (`ferry status` shows its \
                 progress), then resume it",
                node.id(),
                running.operation
            ),
        ));
    }
    let was = node.state();
    node.resume()
        .await
        .map_err(|e| Refusal::new(StatusCode::CONFLICT, e.to_string()))?;
    Ok(Json(Resumed {
        node: node.id().to_string(),
        state: node.state().to_string(),
        was: was.to_string(),
    }))
}

async fn shutdown(
    State(shared): State<Arc<Shared>>,
    body: Body,
) -> Result<Json<ShutdownReport>, Refusal> {
    let request: ShutdownRequest = read_json(body, "{\"deadline_ms\": 30000}").await?;
    let deadline = super::wire::deadline(request.deadline_ms)
        .map_err(|e| Refusal::new(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let report = shared
        .ops
        .shutdown(deadline)
        .map_err(|busy| shared.busy(busy))?;
    report.await.map(Json).map_err(task_failed)
}

/// 200 while the process serves its admin endpoint: for a liveness probe.
async fn healthz() -> &'static str {
    "ok\n"
}

/// 200 while the node serves and takes units; 503 while it starts, drains, stops or after it
/// lost its lease: for a readiness probe, so a load balancer sends no new players its way.
async fn readyz(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    let state = shared.node().state();
    if state == NodeState::Serving {
        (StatusCode::OK, "ready\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: node {} is {state}\n", shared.node().id()),
        )
    }
}

async fn create_unit(
    State(shared): State<Arc<Shared>>,
    body: Body,
) -> Result<(StatusCode, Json<UnitCreated>), Refusal> {
    let request: UnitRequest = read_required_json(body, UNIT_EXAMPLE).await?;
    let node = shared.node();
    let state = node.state();
    if state != NodeState::Serving {
        return Err(Refusal::new(
            StatusCode::CONFLICT,
            format!(
                "node {} is {state}, not Serving, and takes no new units; create them through \
                 the admin endpoint of a serving node",
                node.id()
            ),
        ));
    }
    let invalid = |field: &str, error: InvalidId| {
        Refusal::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("`{field}` is not a valid id: {error}"),
        )
    };
    let created = match request.kind {
        UnitKind::Spot => {
            if request.join.is_some() {
                return Err(Refusal::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "`join` is only for an actor; leave it out to create a spot",
                ));
            }
            let id = SpotId::new(&request.id).map_err(|e| invalid("id", e))?;
            node.create_spot_on(node.id(), &request.factory, &id)
                .await
                .map_err(|e| unit_refused(node, e))?;
            UnitCreated {
                unit: UnitId::Spot(id).to_string(),
                node: node.id().to_string(),
                joined: None,
            }
        }
        UnitKind::Actor => {
            let id = ActorId::new(&request.id).map_err(|e| invalid("id", e))?;
            let join = match &request.join {
                Some(spot) => Some(SpotId::new(spot).map_err(|e| invalid("join", e))?),
                None => None,
            };
            node.create_actor(&request.factory, &id)
                .await
                .map_err(|e| unit_refused(node, e))?;
            if let Some(spot) = &join
                && let Err(error) = node.join(&id, spot).await
            {
                // All or nothing: an actor that could not join does not stay behind.
                let unit = UnitId::Actor(id.clone());
                if let Err(stop) = node.stop_unit(&unit).await {
                    tracing::warn!(%unit, error = %stop, "an actor that could not join was not stopped");
                }
                return Err(join_refused(node, spot, error));
            }
            UnitCreated {
                unit: UnitId::Actor(id).to_string(),
                node: node.id().to_string(),
                joined: join.map(|spot| spot.to_string()),
            }
        }
    };
    Ok((StatusCode::CREATED, Json(created)))
}

/// A creation the node refused, with the status that says whose move it is.
fn unit_refused(node: &Node, error: UnitError) -> Refusal {
    let status = match &error {
        UnitError::AlreadyExists { .. } | UnitError::NotServing { .. } => StatusCode::CONFLICT,
        UnitError::NoCapacity { .. }
        | UnitError::Unavailable { .. }
        | UnitError::StoreUnavailable { .. }
        | UnitError::Moving { .. }
        | UnitError::MembershipNotRecorded { .. }
        | UnitError::NoStandbyCopy { .. } => StatusCode::SERVICE_UNAVAILABLE,
        UnitError::InvalidId(_)
        | UnitError::UnknownType { .. }
        | UnitError::UnknownId { .. }
        | UnitError::TypeMismatch { .. }
        | UnitError::NotAllowed { .. } => StatusCode::UNPROCESSABLE_ENTITY,
    };
    Refusal::new(
        status,
        format!("node {} did not create it: {error}", node.id()),
    )
}

/// A join the node refused: mostly a spot that is not on this node.
fn join_refused(node: &Node, spot: &SpotId, error: UnitError) -> Refusal {
    match error {
        UnitError::UnknownId { .. } => Refusal::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "no spot {spot} runs on node {}: an actor joins a spot of the node that creates \
                 it, so create the spot first, or ask the admin endpoint of the node it runs on",
                node.id()
            ),
        ),
        error => unit_refused(node, error),
    }
}

fn task_failed(error: tokio::task::JoinError) -> Refusal {
    tracing::error!(%error, "an admin operation failed");
    Refusal::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("the operation failed inside the node ({error}); its log says more"),
    )
}

async fn render_metrics(State(shared): State<Arc<Shared>>) -> Response {
    let running = shared.ops.running().is_some();
    record_gauges(shared.node(), running);
    shared.metrics.run_upkeep();
    let mut text = shared.metrics.render();
    text.push_str(&crate::metrics::process_text(shared.node().id()));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Sets the node's gauges just before a scrape reads them; the recorder adds the `node` label.
fn record_gauges(node: &Node, running: bool) {
    let host = node.watch_status().borrow().clone();
    let state = node.state();
    for each in NodeState::ALL {
        metrics::gauge!("ferry_node_state", "state" => each.to_string())
            .set(f64::from(u8::from(each == state)));
    }
    let ready = node
        .peers()
        .iter()
        .filter(|p| p.state == ferry::mesh::PeerState::Ready)
        .count();
    let gauges = [
        ("ferry_node_units", node.unit_count() as f64),
        ("ferry_node_peers_ready", ready as f64),
        ("ferry_drain_units", host.total as f64),
        ("ferry_drain_moved_units", host.moved as f64),
        ("ferry_drain_failed_units", host.failed as f64),
        ("ferry_drain_bytes", host.bytes as f64),
        (
            "ferry_node_safe_to_shutdown",
            f64::from(u8::from(safe_to_shutdown(node, &host, running))),
        ),
    ];
    for (name, value) in gauges {
        metrics::gauge!(name).set(value);
    }
    let standby = node.standby_status();
    let oldest = standby.oldest_unheld.unwrap_or_default().as_secs_f64();
    for (name, value) in [
        ("ferry_standby_rooms", standby.rooms as f64),
        ("ferry_standby_current_rooms", standby.current as f64),
        ("ferry_standby_behind_rooms", standby.behind as f64),
        ("ferry_standby_alone_rooms", standby.alone as f64),
        ("ferry_standby_oldest_unheld_seconds", oldest),
        ("ferry_standby_copies", standby.copies as f64),
    ] {
        metrics::gauge!(name).set(value);
    }
    metrics::counter!("ferry_standby_checkpoints_total").absolute(standby.checkpoints_sent);
    metrics::counter!("ferry_standby_checkpoint_bytes_total").absolute(standby.bytes_sent);
    // Only a gateway holds sessions: on any other node the gauge would be a misleading 0.
    if node.session_addr().is_some() {
        metrics::gauge!("ferry_node_sessions").set(node.session_count() as f64);
    }
}

async fn not_found(method: Method, uri: Uri) -> Refusal {
    Refusal::new(
        StatusCode::NOT_FOUND,
        format!(
            "there is no {method} {}; the routes are {ROUTES}",
            uri.path()
        ),
    )
}

async fn wrong_method(method: Method, uri: Uri) -> Refusal {
    let path = uri.path();
    let pages = path.starts_with("/play") || path.starts_with("/cluster");
    let takes = match path {
        "/relocate" | "/resume" | "/shutdown" | "/units" => format!("takes POST, not {method}"),
        "/status" | "/metrics" | "/healthz" | "/readyz" => format!("takes GET, not {method}"),
        _ if pages => format!("takes GET, not {method}"),
        // One of the game's own pages: the host does not know its methods.
        _ => format!("does not take {method}"),
    };
    Refusal::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{path} {takes}; the routes are {ROUTES}"),
    )
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes; an empty body is the default request.
async fn read_json<T: DeserializeOwned + Default>(body: Body, example: &str) -> Result<T, Refusal> {
    match read_body(body, example).await? {
        Some(bytes) => parse_json(&bytes, example),
        None => Ok(T::default()),
    }
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes that must be there.
async fn read_required_json<T: DeserializeOwned>(body: Body, example: &str) -> Result<T, Refusal> {
    match read_body(body, example).await? {
        Some(bytes) => parse_json(&bytes, example),
        None => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("the body is empty; send a JSON object such as {example}"),
        )),
    }
}

/// A body of at most [`MAX_BODY`] bytes, or `None` when it is empty or blank.
async fn read_body(body: Body, example: &str) -> Result<Option<axum::body::Bytes>, Refusal> {
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body is over {MAX_BODY} bytes; send a small JSON object such as {example}"
            ),
        )
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    Ok(Some(bytes))
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8], example: &str) -> Result<T, Refusal> {
    serde_json::from_slice(bytes).map_err(|e| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            format!(
                "the body is not the JSON this route takes ({e}); send an object such as {example}"
            ),
        )
    })
}
