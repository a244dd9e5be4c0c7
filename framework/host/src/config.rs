//! The TOML file a node reads: what each key means, its default, and the checks that turn a
//! file into settings a node can start with. Every key can also be set in the environment as
//! `FERRY_<KEY>` (`FERRY_STORE`, `FERRY_ADMIN_TOKEN`, ...), which wins over the file: containers
//! take one file for a whole fleet and set what differs per node, and secrets, that way.
//!
//! Every key is listed in `docs/configuration.md`; a unit test below keeps [`KEYS`] and the
//! [`NodeFile`] fields in step, so the list printed for an unknown key is always complete.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferry::NodeId;
use serde::Deserialize;

use crate::logs::LogFormat;
use crate::node_ids::{BadNodeId, node_id};

/// Default of `app_version`.
pub const DEFAULT_APP_VERSION: &str = "1";
/// Default of `store`.
pub const DEFAULT_STORE: &str = "memory";
/// Default of `store_prefix`.
pub const DEFAULT_STORE_PREFIX: &str = "ferry";
/// Default of `capacity` (the framework's default).
pub const DEFAULT_CAPACITY: u64 = 1_000_000;
/// Default of `weight` (the framework's default).
pub const DEFAULT_WEIGHT: u32 = 1;
/// Default of `lease_ttl_ms` (the framework's default).
pub const DEFAULT_LEASE_TTL_MS: u64 = 10_000;
/// Default of `outage_limit_ms` (the framework's default).
pub const DEFAULT_OUTAGE_LIMIT_MS: u64 = 60_000;
/// Default of `refresh_ms` (the framework's default).
pub const DEFAULT_REFRESH_MS: u64 = 1_000;
/// Default of `recovery_sweep_ms` (the framework's default).
pub const DEFAULT_RECOVERY_SWEEP_MS: u64 = 10_000;
/// Default of `max_frame_bytes` (the framework's default).
pub const DEFAULT_MAX_FRAME_BYTES: usize = ferry::mesh::DEFAULT_MAX_FRAME;
/// Default of `max_state_bytes` (the framework's default).
pub const DEFAULT_MAX_STATE_BYTES: u64 = ferry::node::DEFAULT_MAX_STATE;
/// Default of `max_requests_in_flight` (the framework's default).
pub const DEFAULT_MAX_REQUESTS_IN_FLIGHT: usize = 100_000;
/// Default of `drain_grace_ms`: a stop signal's drain fits in Kubernetes' default
/// `terminationGracePeriodSeconds` of 30 s, with 5 s left for the stop itself.
pub const DEFAULT_DRAIN_GRACE_MS: u64 = 25_000;
/// The prefix of the environment variables that override the file's keys.
pub const ENV_PREFIX: &str = "FERRY_";
/// Default of `admin`: loopback only, on a free port the `ready` line shows.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:0";
/// The value of `admin` and `sessions_listen` that turns them off.
pub const OFF: &str = "off";

/// Every key a node config may hold, in the order the documentation lists them.
pub const KEYS: &[&str] = &[
    "id",
    "app_version",
    "mesh_listen",
    "certs",
    "store",
    "store_prefix",
    "capacity",
    "weight",
    "lease_ttl_ms",
    "outage_limit_ms",
    "refresh_ms",
    "recover_units",
    "recovery_sweep_ms",
    "max_frame_bytes",
    "mesh_keep_alive_ms",
    "mesh_idle_timeout_ms",
    "mesh_unacked_bytes",
    "max_state_bytes",
    "max_requests_in_flight",
    "drain_grace_ms",
    "seeds",
    "admin",
    "admin_token",
    "admin_token_file",
    "admin_tls",
    "sessions_listen",
    "sessions_cert",
    "sessions_key",
    "sessions_tokens",
    "sessions_max_frame_bytes",
    "sessions_max_held",
    "sessions_rate_per_second",
    "sessions_rate_burst",
    "sessions_max_bindings",
    "sessions_max_outbound",
    "sessions_seal_timeout_ms",
    "sessions_auth_timeout_ms",
    "sessions_idle_timeout_ms",
    "sessions_websocket",
    "sessions_websocket_plain",
    "log_format",
    "otlp_endpoint",
];

/// The keys whose value is text: an environment value is taken as it is, never as a TOML
/// number or list (an `app_version` of `7` stays the text "7").
const TEXT_KEYS: &[&str] = &[
    "id",
    "app_version",
    "mesh_listen",
    "certs",
    "store",
    "store_prefix",
    "admin",
    "admin_token",
    "admin_token_file",
    "sessions_listen",
    "sessions_cert",
    "sessions_key",
    "sessions_tokens",
    "sessions_websocket",
    "log_format",
    "otlp_endpoint",
];

/// The keys whose value is a list: an environment value is a TOML list (`["a", "b"]`) or,
/// without the brackets, items separated by commas (`a,b`).
const LIST_KEYS: &[&str] = &["seeds"];

/// The keys of whole milliseconds that also take a duration as people write it, under their
/// name without `_ms`: `drain_grace = "25s"`, `refresh = "250ms"`, `lease_ttl = "1m30s"`.
const DURATION_KEYS: [&str; 10] = [
    "lease_ttl_ms",
    "outage_limit_ms",
    "refresh_ms",
    "recovery_sweep_ms",
    "mesh_keep_alive_ms",
    "mesh_idle_timeout_ms",
    "drain_grace_ms",
    "sessions_seal_timeout_ms",
    "sessions_auth_timeout_ms",
    "sessions_idle_timeout_ms",
];

/// The duration keys, each as `(name, key of milliseconds)`: `("drain_grace", "drain_grace_ms")`.
fn duration_keys() -> impl Iterator<Item = (&'static str, &'static str)> {
    DURATION_KEYS
        .into_iter()
        .filter_map(|ms| ms.strip_suffix("_ms").map(|name| (name, ms)))
}

/// Whether `name` is a key: one of [`KEYS`], or a duration key's name.
fn is_key(name: &str) -> bool {
    KEYS.contains(&name) || duration_keys().any(|(duration, _)| duration == name)
}

/// The keys every node must set, what each is, and a value to show.
const REQUIRED: [(&str, &str, &str); 2] = [
    ("id", "this node's id, unique in the cluster", "\"p1\""),
    ("certs", "the folder `ferry certs` wrote", "\"certs\""),
];

/// The `FERRY_` variables that Ferry reads beside the config keys: no typo of a key.
const OTHER_VARIABLES: &[&str] = &["FERRY_CONFIG", "FERRY_ADMIN_CA"];

/// A node config file as written, before its values are checked.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    /// This node's id, unique in the cluster (required).
    pub id: String,
    /// The application version this node runs.
    #[serde(default = "default_app_version")]
    pub app_version: String,
    /// Where the mesh listens (UDP); port 0 picks a free one.
    #[serde(default = "default_mesh_listen")]
    pub mesh_listen: SocketAddr,
    /// The directory `ferry certs` wrote: `ca.pem` and this node's certificate and key (required).
    /// A relative path is taken from the directory of the config file.
    pub certs: PathBuf,
    /// The location store: `"memory"`, a `redis://` or `redis+sentinel://` URL (either with
    /// `?wait_replicas=N`), or an `etcd://` list.
    #[serde(default = "default_store")]
    pub store: String,
    /// The namespace of every redis key; nodes of one cluster must agree on it.
    #[serde(default = "default_store_prefix")]
    pub store_prefix: String,
    /// How many units this node takes at most; placement skips a full node.
    #[serde(default = "default_capacity")]
    pub capacity: u64,
    /// Preference among equally loaded nodes (higher first).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// How long the owner lease lasts without renewal, in milliseconds.
    #[serde(default = "default_lease_ttl_ms")]
    pub lease_ttl_ms: u64,
    /// How long past its lease the node runs turns through a store outage, in milliseconds.
    #[serde(default = "default_outage_limit_ms")]
    pub outage_limit_ms: u64,
    /// How often the node republishes itself and rereads its peers, in milliseconds.
    #[serde(default = "default_refresh_ms")]
    pub refresh_ms: u64,
    /// Whether the units of a node that died are rebuilt on the survivors.
    #[serde(default = "default_recover_units")]
    pub recover_units: bool,
    /// How often the recovery coordinator sweeps for orphans, in milliseconds.
    #[serde(default = "default_recovery_sweep_ms")]
    pub recovery_sweep_ms: u64,
    /// The largest frame a peer node may send on the mesh, in bytes.
    #[serde(default = "default_max_frame_bytes")]
    pub max_frame_bytes: usize,
    /// How often an idle mesh connection is pinged, in milliseconds.
    pub mesh_keep_alive_ms: Option<u64>,
    /// How long a mesh connection may hear nothing before it is declared lost, in milliseconds.
    pub mesh_idle_timeout_ms: Option<u64>,
    /// Bytes sent to one peer and kept until it acknowledges them.
    pub mesh_unacked_bytes: Option<usize>,
    /// The largest capture of a unit this node sends or takes in a move, in bytes.
    #[serde(default = "default_max_state_bytes")]
    pub max_state_bytes: u64,
    /// How many requests may wait for replies on this node at once.
    #[serde(default = "default_max_requests_in_flight")]
    pub max_requests_in_flight: usize,
    /// How long a stop signal's drain may take before the node stops, in milliseconds; 0 stops
    /// without a drain.
    #[serde(default = "default_drain_grace_ms")]
    pub drain_grace_ms: u64,
    /// Peers to dial at start, as `"<node-id>@<ip>:<port>"`.
    #[serde(default)]
    pub seeds: Vec<String>,
    /// Where the admin endpoint listens (HTTP, or HTTPS with `admin_tls`), or `"off"`.
    #[serde(default = "default_admin")]
    pub admin: String,
    /// The admin endpoint's bearer token (best set as `FERRY_ADMIN_TOKEN`, not in the file).
    pub admin_token: Option<String>,
    /// A file that holds the admin endpoint's bearer token.
    pub admin_token_file: Option<PathBuf>,
    /// Serve the admin endpoint over HTTPS with this node's certificate from `certs`.
    #[serde(default)]
    pub admin_tls: bool,
    /// Where game clients connect (QUIC), or `"off"`: this node is then no gateway.
    #[serde(default = "default_off")]
    pub sessions_listen: String,
    /// The PEM certificate chain the gateway shows game clients.
    pub sessions_cert: Option<PathBuf>,
    /// The PEM private key of `sessions_cert`.
    pub sessions_key: Option<PathBuf>,
    /// The file of tokens game clients may connect with, one `<token> [name]` a line.
    pub sessions_tokens: Option<PathBuf>,
    /// The largest frame a game client may send, in bytes.
    pub sessions_max_frame_bytes: Option<usize>,
    /// Inputs a session may have held while its Actors move.
    pub sessions_max_held: Option<usize>,
    /// Frames per second a client may send on average.
    pub sessions_rate_per_second: Option<u32>,
    /// Frames a client may send in one burst above that rate.
    pub sessions_rate_burst: Option<u32>,
    /// Actors one session may bind at once.
    pub sessions_max_bindings: Option<usize>,
    /// Frames waiting for a client that reads too slowly.
    pub sessions_max_outbound: Option<usize>,
    /// How long past a move's deadline a session waits for its release, in milliseconds.
    pub sessions_seal_timeout_ms: Option<u64>,
    /// How long a new connection has to authenticate, in milliseconds.
    pub sessions_auth_timeout_ms: Option<u64>,
    /// How long a connection may be silent before it is dropped, in milliseconds.
    pub sessions_idle_timeout_ms: Option<u64>,
    /// Where WebSocket game clients connect (TCP, `wss://` with `sessions_cert`), or `"off"`.
    #[serde(default = "default_off")]
    pub sessions_websocket: String,
    /// Serve `sessions_websocket` as plain `ws://` instead: for development, on loopback only.
    #[serde(default)]
    pub sessions_websocket_plain: bool,
    /// How log lines are written: `"text"` or `"json"` (one object a line).
    #[serde(default)]
    pub log_format: LogFormat,
    /// Where the relocation spans are exported over OTLP/HTTP (feature `otlp`).
    pub otlp_endpoint: Option<String>,
}

fn default_drain_grace_ms() -> u64 {
    DEFAULT_DRAIN_GRACE_MS
}

fn default_admin() -> String {
    DEFAULT_ADMIN.to_owned()
}

fn default_off() -> String {
    OFF.to_owned()
}

fn default_max_frame_bytes() -> usize {
    DEFAULT_MAX_FRAME_BYTES
}

fn default_max_state_bytes() -> u64 {
    DEFAULT_MAX_STATE_BYTES
}

fn default_max_requests_in_flight() -> usize {
    DEFAULT_MAX_REQUESTS_IN_FLIGHT
}

fn default_recover_units() -> bool {
    true
}

fn default_recovery_sweep_ms() -> u64 {
    DEFAULT_RECOVERY_SWEEP_MS
}

fn default_app_version() -> String {
    DEFAULT_APP_VERSION.to_owned()
}

/// Default of `mesh_listen`: loopback, on a free port picked at start.
fn default_mesh_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn default_store() -> String {
    DEFAULT_STORE.to_owned()
}

fn default_store_prefix() -> String {
    DEFAULT_STORE_PREFIX.to_owned()
}

fn default_capacity() -> u64 {
    DEFAULT_CAPACITY
}

fn default_weight() -> u32 {
    DEFAULT_WEIGHT
}

fn default_lease_ttl_ms() -> u64 {
    DEFAULT_LEASE_TTL_MS
}

fn default_outage_limit_ms() -> u64 {
    DEFAULT_OUTAGE_LIMIT_MS
}

fn default_refresh_ms() -> u64 {
    DEFAULT_REFRESH_MS
}

/// Which location store a node uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// An in-process store: the node is a cluster of one.
    Memory,
    /// A store shared by the cluster: a redis-server or an etcd cluster.
    Shared {
        /// The store's URL: `redis://`, `redis+sentinel://` or `etcd://`.
        url: String,
        /// The namespace of the cluster's keys.
        prefix: String,
    },
}

/// A checked node config: everything `ferry node` needs to start a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    /// This node's id.
    pub id: NodeId,
    /// The application version it runs.
    pub app_version: String,
    /// Where the mesh listens.
    pub mesh_listen: SocketAddr,
    /// The certificate directory, resolved against the config file's directory.
    pub certs: PathBuf,
    /// Which location store it uses, and where.
    pub store: StoreChoice,
    /// The most units it takes.
    pub capacity: u64,
    /// Preference among equally loaded nodes when placing units (higher first).
    pub weight: u32,
    /// The owner lease's time to live.
    pub lease_ttl: Duration,
    /// How long past its lease it runs turns while the store does not answer.
    pub outage_limit: Duration,
    /// The membership refresh period.
    pub refresh: Duration,
    /// Whether dead nodes' units are rebuilt on the survivors.
    pub recover_units: bool,
    /// The recovery coordinator's sweep period.
    pub recovery_sweep: Duration,
    /// The largest mesh frame a peer may send.
    pub max_frame: usize,
    /// How often an idle mesh connection is pinged.
    pub mesh_keep_alive: Duration,
    /// How long a silent mesh connection lasts before it is declared lost.
    pub mesh_idle_timeout: Duration,
    /// Bytes kept per peer until acknowledged.
    pub mesh_unacked_bytes: usize,
    /// The largest capture a move sends or takes.
    pub max_state: u64,
    /// The requests that may wait for replies at once.
    pub max_requests_in_flight: usize,
    /// How long a stop signal's drain may take; zero stops without one.
    pub drain_grace: Duration,
    /// The peers dialled at start.
    pub seeds: Vec<(NodeId, SocketAddr)>,
    /// Where the admin endpoint listens, if it is on.
    pub admin: Option<SocketAddr>,
    /// The admin endpoint's bearer token, if it has one.
    pub admin_token: Option<AdminToken>,
    /// Whether the admin endpoint speaks HTTPS, with this node's certificate.
    pub admin_tls: bool,
    /// The client gateway, if this node is one.
    pub sessions: Option<GatewayFiles>,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// Where the relocation spans are exported, if anywhere.
    pub otlp_endpoint: Option<String>,
}

/// Where the admin endpoint's token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminToken {
    /// `admin_token` (or `FERRY_ADMIN_TOKEN`).
    Value(Secret),
    /// `admin_token_file`, read when the node starts.
    File(PathBuf),
}

/// A secret that never shows in logs or `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that compares it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Where a gateway node listens for game clients, and the files it reads for them. Relative paths
/// are already resolved against the config file's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayFiles {
    /// Where the client listener binds.
    pub listen: SocketAddr,
    /// The certificate chain shown to clients.
    pub cert: PathBuf,
    /// The PEM private key of `cert`.
    pub key: PathBuf,
    /// The tokens game clients may connect with, one `<token> [name] [bind=...]` a line.
    pub tokens: PathBuf,
    /// The limits each game client is held to.
    pub limits: ClientLimits,
    /// The WebSocket listener beside the QUIC one, if on.
    pub websocket: Option<WebSocketListen>,
}

/// Where a gateway accepts WebSocket clients, and whether without TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebSocketListen {
    /// Where it binds.
    pub listen: SocketAddr,
    /// Plain `ws://` (loopback only) rather than `wss://` with the gateway's certificate.
    pub plain: bool,
}

/// The session limits a gateway's config sets, each the framework's default unless given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// The largest frame a game client may send, in bytes.
    pub max_frame: usize,
    /// Inputs a session may have held while its Actors move.
    pub max_held: usize,
    /// Frames per second a client may send on average.
    pub rate_per_second: u32,
    /// Frames a client may send in one burst above that rate.
    pub rate_burst: u32,
    /// Actors one session may bind at once.
    pub max_bindings: usize,
    /// Frames waiting for a client that reads too slowly.
    pub max_outbound: usize,
    /// How long past a move's deadline a session waits for the move's release (and how long a
    /// missing push is waited for) before it is closed.
    pub seal_timeout: Duration,
    /// How long a new connection has to authenticate.
    pub auth_timeout: Duration,
    /// How long a connection may be silent before it is dropped.
    pub idle_timeout: Duration,
}

impl ClientLimits {
    /// The framework's session limits these make.
    pub fn session_limits(&self) -> ferry::SessionLimits {
        ferry::SessionLimits {
            max_frame: self.max_frame,
            max_held: self.max_held,
            rate_per_second: self.rate_per_second,
            rate_burst: self.rate_burst,
            seal_timeout: self.seal_timeout,
            auth_timeout: self.auth_timeout,
            max_bindings: self.max_bindings,
            max_outbound: self.max_outbound,
            idle_timeout: self.idle_timeout,
        }
    }
}

/// Why a node config could not be used. Each names the file, the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error(
        "cannot read the node config {}: {source}; pass --config with the path of a TOML file \
         that sets at least `id` (this node's id) and `certs` (the folder `ferry certs` wrote)",
        path.display()
    )]
    Read {
        /// The node config file being loaded.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error(
        "the node config {} is not valid TOML{at}: {message}; fix the syntax: one `key = value` \
         a line, text in double quotes (`id = \"p1\"`), numbers and true/false bare, lists in \
         brackets",
        path.display()
    )]
    Syntax {
        /// The node config file being loaded.
        path: PathBuf,
        /// Where, as " (line L, column C)", or empty.
        at: String,
        /// What the parser said.
        message: String,
    },
    /// A key the node does not know: a typo, or a setting of another version.
    #[error(
        "the node config {} has an unknown key `{key}`{}; the keys are {}",
        path.display(),
        closest_key(key).map(|k| format!("; did you mean `{k}`?")).unwrap_or_default(),
        KEYS.join(", ")
    )]
    UnknownKey {
        /// The node config file being loaded.
        path: PathBuf,
        /// The unknown key, as written.
        key: String,
    },
    /// A required key is set neither in the file nor in the environment.
    #[error(
        "the node config {} does not set `{key}` ({what}): write `{key} = {example}` in it, or set \
         {} in the environment",
        path.display(),
        env_var(key)
    )]
    Missing {
        /// The node config file being loaded.
        path: PathBuf,
        /// The required key, set neither in the file nor as `FERRY_<KEY>`.
        key: &'static str,
        /// What the key is.
        what: &'static str,
        /// A value to write.
        example: &'static str,
    },
    /// A required key is missing or a value has the wrong type.
    #[error(
        "the node config {} cannot be used{at}: {message}; `id` and `certs` are required, text \
         goes in double quotes, numbers and true/false bare, and `seeds` is a list \
         (`[\"p2@10.0.0.12:7000\"]`)",
        path.display()
    )]
    Value {
        /// The node config file being loaded.
        path: PathBuf,
        /// Where, as " (line L, column C)", or empty.
        at: String,
        /// What the parser said.
        message: String,
    },
    /// The `id` is not a usable node id.
    #[error("the node config {} has a bad `id`: {source}", path.display())]
    Id {
        /// The node config file being loaded.
        path: PathBuf,
        /// What is wrong with the id.
        source: BadNodeId,
    },
    /// A value is well-typed but out of range.
    #[error("the node config {} has a bad `{key}`{origin}: {reason}", path.display())]
    Invalid {
        /// The node config file being loaded.
        path: PathBuf,
        /// The key whose value is out of range.
        key: &'static str,
        /// " (from the environment variable FERRY_<KEY>)" when the value came from there, or
        /// empty.
        origin: String,
        /// What is wrong and what to write instead.
        reason: String,
    },
}

/// Reads and checks the node config at `path`, with the `FERRY_<KEY>` overrides of this
/// process's environment.
pub fn load(path: &Path) -> Result<NodeSettings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let base = path.parent().unwrap_or_else(|| Path::new(""));
    parse_with_env(path, base, &text, |var| std::env::var(var).ok())
}

/// Checks config `text` (read from `path`) alone; relative paths are taken from `base`.
pub fn parse(path: &Path, base: &Path, text: &str) -> Result<NodeSettings, ConfigError> {
    parse_with_env(path, base, text, |_| None)
}

/// The environment variable that overrides `key`: `FERRY_` and the key in capitals.
pub fn env_var(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())
}

/// Checks config `text` (read from `path`) with the overrides `env` gives for each key's
/// [`env_var`]; relative paths are taken from `base`.
pub fn parse_with_env(
    path: &Path,
    base: &Path,
    text: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<NodeSettings, ConfigError> {
    // Syntax first, then unknown keys, then values: each error then says the one thing to fix.
    let mut table: toml::Table =
        text.parse()
            .map_err(|e: toml::de::Error| ConfigError::Syntax {
                path: path.to_owned(),
                at: position(text, &e),
                message: e.message().trim().to_owned(),
            })?;
    if let Some(key) = table.keys().find(|key| !is_key(key)) {
        return Err(ConfigError::UnknownKey {
            path: path.to_owned(),
            key: key.clone(),
        });
    }
    let mut overridden = Vec::new();
    let mut from_env: Vec<&'static str> = Vec::new();
    let durations = duration_keys().map(|(name, _)| name);
    for key in KEYS.iter().copied().chain(durations) {
        let var = env_var(key);
        if let Some(value) = env(&var) {
            table.insert(key.to_owned(), env_value(key, &value));
            overridden.push(var);
            from_env.push(key);
        }
    }
    let rewritten = durations_as_millis(path, &mut table, &from_env)?;
    // The token and its file are one setting: the environment's replaces the file's, whichever
    // of the two keys each uses (FERRY_ADMIN_TOKEN beside a file's `admin_token_file`).
    for (key, other) in [
        ("admin_token", "admin_token_file"),
        ("admin_token_file", "admin_token"),
    ] {
        if from_env.contains(&key) && !from_env.contains(&other) {
            table.remove(other);
        }
    }
    for (key, what, example) in REQUIRED {
        if !table.contains_key(key) {
            return Err(ConfigError::Missing {
                path: path.to_owned(),
                key,
                what,
                example,
            });
        }
    }
    let file: NodeFile = if overridden.is_empty() && !rewritten {
        // The file alone: errors point at its line.
        toml::from_str(text).map_err(|e| ConfigError::Value {
            path: path.to_owned(),
            at: position(text, &e),
            message: e.message().trim().to_owned(),
        })?
    } else {
        // Through text again, so the error can show the key and value it is about.
        let merged = toml::to_string(&table).unwrap_or_default();
        toml::from_str(&merged).map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .and_then(|span| merged.get(..span.start))
                .map(|before| before.matches('\n').count())
                .and_then(|n| merged.lines().nth(n))
                .map(|line| format!("at `{}`", line.trim()));
            let at = match (overridden.is_empty(), line) {
                (true, Some(line)) => format!(" ({line})"),
                (true, None) => String::new(),
                (false, line) => format!(
                    " (with {} from the environment{})",
                    overridden.join(", "),
                    line.map(|line| format!(", {line}")).unwrap_or_default()
                ),
            };
            ConfigError::Value {
                path: path.to_owned(),
                at,
                message: e.message().trim().to_owned(),
            }
        })?
    };
    check(path, base, file, &from_env)
}

/// Replaces each duration key of `table` (`drain_grace = "25s"`) with its key of milliseconds
/// (`drain_grace_ms = 25000`), and says whether there was any. Of the two, one from the
/// environment wins over one from the file; both from the same place are refused.
fn durations_as_millis(
    path: &Path,
    table: &mut toml::Table,
    from_env: &[&'static str],
) -> Result<bool, ConfigError> {
    let mut rewritten = false;
    for (name, ms) in duration_keys() {
        let Some(value) = table.remove(name) else {
            continue;
        };
        let invalid = |reason: String| ConfigError::Invalid {
            path: path.to_owned(),
            key: name,
            origin: if from_env.contains(&name) {
                format!(" (from the environment variable {})", env_var(name))
            } else {
                String::new()
            },
            reason,
        };
        match (from_env.contains(&name), from_env.contains(&ms)) {
            // The environment's millisecond key wins over the file's duration.
            (false, true) => continue,
            (true, true) | (false, false) if table.contains_key(ms) => {
                return Err(invalid(format!(
                    "it is set and so is {}; keep one of them",
                    named(ms, from_env)
                )));
            }
            _ => {}
        }
        let usage = "write a number with its unit, such as \"250ms\", \"10s\" or \"1m30s\"";
        let Some(text) = value.as_str() else {
            return Err(invalid(format!("{value} is no duration; {usage}")));
        };
        let duration = humantime::parse_duration(text)
            .map_err(|e| invalid(format!("\"{text}\" is no duration ({e}); {usage}")))?;
        let millis = i64::try_from(duration.as_millis())
            .map_err(|_| invalid(format!("\"{text}\" is too long")))?;
        table.insert(ms.to_owned(), toml::Value::Integer(millis));
        rewritten = true;
    }
    Ok(rewritten)
}

/// Warnings for the `FERRY_` variables among `names` that are no key's but close to one: a typo
/// (`FERRY_ADMN`) would otherwise be ignored without a word. Each names the key meant.
pub fn misspelt_variables(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut warnings = Vec::new();
    for name in names {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if OTHER_VARIABLES.contains(&name.as_str()) || is_key(&rest.to_ascii_lowercase()) {
            continue;
        }
        if let Some(key) = closest_key(&rest.to_ascii_lowercase()) {
            warnings.push(format!(
                "the environment variable {name} is no config key and is ignored; did you mean \
                 {} (the key `{key}`)?",
                env_var(key)
            ));
        }
    }
    warnings
}

/// The key `name` is likely a typo of: the closest by edit distance, if it is close enough.
fn closest_key(name: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|key| (strsim::levenshtein(name, key), *key))
        .min()
        .filter(|(distance, _)| *distance <= 3)
        .map(|(_, key)| key)
}

/// How an error names `key`: as the environment variable it came from, or as the file's key.
fn named(key: &str, from_env: &[&str]) -> String {
    if from_env.contains(&key) {
        env_var(key)
    } else {
        format!("`{key}`")
    }
}

/// An environment value as the TOML value of `key`: text keys as they are, list keys as a TOML
/// list or comma-separated items, others as TOML (`5`, `false`), or as text when they are not
/// TOML, so the type check names the key.
fn env_value(key: &str, value: &str) -> toml::Value {
    if TEXT_KEYS.contains(&key) {
        return toml::Value::String(value.to_owned());
    }
    if LIST_KEYS.contains(&key) && !value.trim_start().starts_with('[') {
        let items = value
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| toml::Value::String(item.to_owned()))
            .collect();
        return toml::Value::Array(items);
    }
    match format!("v = {value}").parse::<toml::Table>() {
        Ok(mut table) => table
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(value.to_owned())),
        Err(_) => toml::Value::String(value.to_owned()),
    }
}

/// Checks the values of `file`; the keys in `from_env` came from the environment, and errors
/// about them name their variable.
fn check(
    path: &Path,
    base: &Path,
    file: NodeFile,
    from_env: &[&str],
) -> Result<NodeSettings, ConfigError> {
    let invalid = |key: &'static str, reason: String| ConfigError::Invalid {
        path: path.to_owned(),
        key,
        origin: if from_env.contains(&key) {
            format!(" (from the environment variable {})", env_var(key))
        } else {
            String::new()
        },
        reason,
    };
    let id = node_id(&file.id).map_err(|source| ConfigError::Id {
        path: path.to_owned(),
        source,
    })?;
    if file.app_version.trim().is_empty() {
        return Err(invalid(
            "app_version",
            "it is empty; write the version your application runs, such as \"1\"".to_owned(),
        ));
    }
    let seeds = file
        .seeds
        .iter()
        .map(|seed| parse_seed(seed).map_err(|reason| invalid("seeds", reason)))
        .collect::<Result<Vec<_>, _>>()?;
    let admin = optional_addr(&file.admin).map_err(|reason| invalid("admin", reason))?;
    let sessions = gateway(base, &file).map_err(|(key, reason)| invalid(key, reason))?;
    let store = store_choice(&file.store, &file.store_prefix)
        .map_err(|(key, reason)| invalid(key, reason))?;
    let admin_token =
        admin_token(base, &file, admin, from_env).map_err(|(key, reason)| invalid(key, reason))?;
    if file.admin_tls && admin.is_none() {
        return Err(invalid(
            "admin_tls",
            "it is true but `admin` is \"off\"; set `admin` to an address for the endpoint, or \
             remove `admin_tls`"
                .to_owned(),
        ));
    }
    if file.lease_ttl_ms == 0 {
        return Err(invalid(
            "lease_ttl_ms",
            format!("it must be above 0; the default is {DEFAULT_LEASE_TTL_MS}"),
        ));
    }
    if file.refresh_ms == 0 {
        return Err(invalid(
            "refresh_ms",
            format!("it must be above 0; the default is {DEFAULT_REFRESH_MS}"),
        ));
    }
    if file.recovery_sweep_ms == 0 {
        return Err(invalid(
            "recovery_sweep_ms",
            format!("it must be above 0; the default is {DEFAULT_RECOVERY_SWEEP_MS}"),
        ));
    }
    // A mesh frame carries a move's chunks (256 KiB) with their header.
    const MIN_FRAME: usize = 512 * 1024;
    if file.max_frame_bytes < MIN_FRAME {
        return Err(invalid(
            "max_frame_bytes",
            format!(
                "it must be at least {MIN_FRAME} (a move's chunks travel in single frames); the \
                 default is {DEFAULT_MAX_FRAME_BYTES}"
            ),
        ));
    }
    let mesh_keep_alive = positive_ms(
        "mesh_keep_alive_ms",
        file.mesh_keep_alive_ms,
        ferry::mesh::DEFAULT_KEEP_ALIVE,
    )
    .map_err(|(key, reason)| invalid(key, reason))?;
    let mesh_idle_timeout = positive_ms(
        "mesh_idle_timeout_ms",
        file.mesh_idle_timeout_ms,
        ferry::mesh::DEFAULT_IDLE_TIMEOUT,
    )
    .map_err(|(key, reason)| invalid(key, reason))?;
    if mesh_keep_alive >= mesh_idle_timeout {
        return Err(invalid(
            "mesh_keep_alive_ms",
            format!(
                "it must be shorter than mesh_idle_timeout_ms ({} ms), or idle links are \
                 dropped; the defaults are {} and {}",
                mesh_idle_timeout.as_millis(),
                ferry::mesh::DEFAULT_KEEP_ALIVE.as_millis(),
                ferry::mesh::DEFAULT_IDLE_TIMEOUT.as_millis()
            ),
        ));
    }
    let mesh_unacked_bytes = file
        .mesh_unacked_bytes
        .unwrap_or(ferry::mesh::DEFAULT_UNACKED_BYTES);
    if mesh_unacked_bytes == 0 {
        return Err(invalid(
            "mesh_unacked_bytes",
            format!(
                "it must be above 0; the default is {}",
                ferry::mesh::DEFAULT_UNACKED_BYTES
            ),
        ));
    }
    if file.max_state_bytes == 0 {
        return Err(invalid(
            "max_state_bytes",
            format!("it must be above 0; the default is {DEFAULT_MAX_STATE_BYTES}"),
        ));
    }
    if file.max_requests_in_flight == 0 {
        return Err(invalid(
            "max_requests_in_flight",
            format!("it must be above 0; the default is {DEFAULT_MAX_REQUESTS_IN_FLIGHT}"),
        ));
    }
    Ok(NodeSettings {
        id,
        app_version: file.app_version,
        mesh_listen: file.mesh_listen,
        certs: base.join(file.certs),
        store,
        capacity: file.capacity,
        weight: file.weight,
        lease_ttl: Duration::from_millis(file.lease_ttl_ms),
        outage_limit: Duration::from_millis(file.outage_limit_ms),
        refresh: Duration::from_millis(file.refresh_ms),
        recover_units: file.recover_units,
        recovery_sweep: Duration::from_millis(file.recovery_sweep_ms),
        max_frame: file.max_frame_bytes,
        mesh_keep_alive,
        mesh_idle_timeout,
        mesh_unacked_bytes,
        max_state: file.max_state_bytes,
        max_requests_in_flight: file.max_requests_in_flight,
        drain_grace: Duration::from_millis(file.drain_grace_ms),
        seeds,
        admin,
        admin_token,
        admin_tls: file.admin_tls,
        sessions,
        log_format: file.log_format,
        otlp_endpoint: file.otlp_endpoint,
    })
}

/// The location store `store` names, with its key prefix.
fn store_choice(store: &str, prefix: &str) -> Result<StoreChoice, (&'static str, String)> {
    match ferry::store::StoreUrl::parse(store) {
        Ok(ferry::store::StoreUrl::Memory) => return Ok(StoreChoice::Memory),
        Ok(_) => {}
        // The store's own reason names the forms it takes, with any password blanked.
        Err(ferry::store::StoreError::InvalidConfig { reason }) => return Err(("store", reason)),
        Err(other) => return Err(("store", other.to_string())),
    }
    if prefix.is_empty() || prefix.contains(['{', '}']) {
        return Err((
            "store_prefix",
            format!("{prefix:?} must be non-empty and contain no '{{' or '}}'"),
        ));
    }
    Ok(StoreChoice::Shared {
        url: store.to_owned(),
        prefix: prefix.to_owned(),
    })
}

/// The admin token, from `admin_token` or `admin_token_file` (not both; an environment value of
/// one has replaced the file's other already); required when the endpoint listens beyond
/// loopback, where anyone on the network could otherwise drain the node.
fn admin_token(
    base: &Path,
    file: &NodeFile,
    admin: Option<SocketAddr>,
    from_env: &[&str],
) -> Result<Option<AdminToken>, (&'static str, String)> {
    let token = match (&file.admin_token, &file.admin_token_file) {
        (Some(_), Some(_)) => {
            return Err((
                "admin_token",
                format!(
                    "it is set and so is {}; keep one of them",
                    named("admin_token_file", from_env)
                ),
            ));
        }
        (Some(token), None) if token.trim().is_empty() => {
            return Err((
                "admin_token",
                "it is empty; write a long random token (`openssl rand -hex 32` makes one)"
                    .to_owned(),
            ));
        }
        (Some(token), None) => Some(AdminToken::Value(Secret(token.trim().to_owned()))),
        (None, Some(path)) => Some(AdminToken::File(base.join(path))),
        (None, None) => None,
    };
    if let Some(addr) = admin
        && token.is_none()
        && !addr.ip().is_loopback()
    {
        return Err((
            "admin",
            format!(
                "{addr} is beyond loopback, and the admin endpoint can drain and stop the node: \
                 set `admin_token_file` (or FERRY_ADMIN_TOKEN) so that only operators can use it, \
                 or listen on 127.0.0.1"
            ),
        ));
    }
    Ok(token)
}

/// A seed as `<node-id>@<ip>:<port>`.
fn parse_seed(seed: &str) -> Result<(NodeId, SocketAddr), String> {
    let usage = "write each seed as \"<node-id>@<ip>:<port>\", such as \"p1@10.0.0.11:7000\"";
    let Some((id, addr)) = seed.rsplit_once('@') else {
        return Err(format!("{seed:?} has no '@'; {usage}"));
    };
    let id = node_id(id).map_err(|e| format!("{seed:?}: {e}; {usage}"))?;
    let addr = addr
        .parse()
        .map_err(|_| format!("{seed:?} has no ip:port after '@'; {usage}"))?;
    Ok((id, addr))
}

/// An `ip:port`, or `None` for `"off"`.
fn optional_addr(text: &str) -> Result<Option<SocketAddr>, String> {
    if text == OFF {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        format!("{text:?} is neither \"off\" nor an ip:port such as \"127.0.0.1:7100\"")
    })
}

/// The gateway settings: all four `sessions_*` keys, or only an off `sessions_listen`.
fn gateway(base: &Path, file: &NodeFile) -> Result<Option<GatewayFiles>, (&'static str, String)> {
    let listen =
        optional_addr(&file.sessions_listen).map_err(|reason| ("sessions_listen", reason))?;
    let files = [
        ("sessions_cert", &file.sessions_cert),
        ("sessions_key", &file.sessions_key),
        ("sessions_tokens", &file.sessions_tokens),
    ];
    let websocket = websocket(file)?;
    let Some(listen) = listen else {
        if websocket.is_some() {
            return Err((
                "sessions_websocket",
                "it is set but `sessions_listen` is \"off\"; a WebSocket listener belongs to a \
                 gateway: set `sessions_listen` too"
                    .to_owned(),
            ));
        }
        return match files.iter().find(|(_, path)| path.is_some()) {
            Some((key, _)) => Err((
                *key,
                "it is set but `sessions_listen` is \"off\"; set `sessions_listen` to make \
                 this node a gateway, or remove the key"
                    .to_owned(),
            )),
            None => Ok(None),
        };
    };
    let required = |(key, path): (&'static str, &Option<PathBuf>)| match path {
        Some(path) => Ok(base.join(path)),
        None => Err((
            key,
            format!(
                "it is required when `sessions_listen` is set: the path of {}",
                match key {
                    "sessions_cert" => "the PEM certificate chain the gateway shows game clients",
                    "sessions_key" => "the PEM private key of `sessions_cert`",
                    _ => {
                        "the tokens file, one `<token> [name] [bind=<actor>,...]` a line for each \
                         player who may connect"
                    }
                }
            ),
        )),
    };
    let [cert, key, tokens] = files;
    let defaults = ferry::SessionLimits::default();
    let limits = ClientLimits {
        max_frame: positive(
            "sessions_max_frame_bytes",
            file.sessions_max_frame_bytes,
            defaults.max_frame,
        )?,
        max_held: positive(
            "sessions_max_held",
            file.sessions_max_held,
            defaults.max_held,
        )?,
        rate_per_second: positive(
            "sessions_rate_per_second",
            file.sessions_rate_per_second,
            defaults.rate_per_second,
        )?,
        rate_burst: positive(
            "sessions_rate_burst",
            file.sessions_rate_burst,
            defaults.rate_burst,
        )?,
        max_bindings: positive(
            "sessions_max_bindings",
            file.sessions_max_bindings,
            defaults.max_bindings,
        )?,
        max_outbound: positive(
            "sessions_max_outbound",
            file.sessions_max_outbound,
            defaults.max_outbound,
        )?,
        seal_timeout: positive_ms(
            "sessions_seal_timeout_ms",
            file.sessions_seal_timeout_ms,
            defaults.seal_timeout,
        )?,
        auth_timeout: positive_ms(
            "sessions_auth_timeout_ms",
            file.sessions_auth_timeout_ms,
            defaults.auth_timeout,
        )?,
        idle_timeout: positive_ms(
            "sessions_idle_timeout_ms",
            file.sessions_idle_timeout_ms,
            defaults.idle_timeout,
        )?,
    };
    Ok(Some(GatewayFiles {
        listen,
        cert: required(cert)?,
        key: required(key)?,
        tokens: required(tokens)?,
        limits,
        websocket,
    }))
}

/// The WebSocket listener of a gateway: `sessions_websocket`, plain only on loopback.
fn websocket(file: &NodeFile) -> Result<Option<WebSocketListen>, (&'static str, String)> {
    let listen =
        optional_addr(&file.sessions_websocket).map_err(|reason| ("sessions_websocket", reason))?;
    match listen {
        None if file.sessions_websocket_plain => Err((
            "sessions_websocket_plain",
            "it is set but `sessions_websocket` is \"off\"; set both, or neither".to_owned(),
        )),
        None => Ok(None),
        Some(addr) if file.sessions_websocket_plain && !addr.ip().is_loopback() => Err((
            "sessions_websocket_plain",
            format!(
                "plain ws:// on {addr} would carry tokens in the clear; use a loopback address \
                 for development, or drop this key to serve wss:// with `sessions_cert`"
            ),
        )),
        Some(listen) => Ok(Some(WebSocketListen {
            listen,
            plain: file.sessions_websocket_plain,
        })),
    }
}

/// A limit key's value, above 0, or the framework's default when it is not set.
fn positive<T: Copy + Default + PartialOrd + std::fmt::Display>(
    key: &'static str,
    value: Option<T>,
    default: T,
) -> Result<T, (&'static str, String)> {
    match value {
        None => Ok(default),
        Some(v) if v > T::default() => Ok(v),
        Some(_) => Err((key, format!("it must be above 0; the default is {default}"))),
    }
}

/// A timeout key's value in milliseconds, above 0, or the framework's default when it is not set.
fn positive_ms(
    key: &'static str,
    value: Option<u64>,
    default: Duration,
) -> Result<Duration, (&'static str, String)> {
    let default_ms = u64::try_from(default.as_millis()).unwrap_or(u64::MAX);
    positive(key, value, default_ms).map(Duration::from_millis)
}

/// " (line L, column C: `the line`)" of a parse error, or empty if the parser gave no place.
fn position(text: &str, error: &toml::de::Error) -> String {
    let Some(span) = error.span() else {
        return String::new();
    };
    let start = span.start.min(text.len());
    if !text.is_char_boundary(start) {
        return String::new();
    }
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    let source = text[line_start..line_end].trim();
    if source.is_empty() {
        format!(" (line {line}, column {column})")
    } else {
        format!(" (line {line}, column {column}: `{source}`)")
    }
}

/// A store URL fit for messages: a password in it is replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    // The authority ends at the first '/'; user info is what precedes its last '@'.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> NodeSettings {
        match parse(Path::new("node.toml"), Path::new("/etc/ferry"), text) {
            Ok(settings) => settings,
            Err(error) => panic!("config refused: {error}"),
        }
    }

    fn parse_err(text: &str) -> String {
        match parse(Path::new("node.toml"), Path::new("/etc/ferry"), text) {
            Ok(settings) => panic!("config accepted: {settings:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn defaults_are_the_frameworks() {
        let s = parse_ok("id = \"a\"\ncerts = \"certs\"\n");
        let framework = ferry::NodeConfig::new(s.id.clone());
        assert_eq!(s.app_version, framework.app_version);
        assert_eq!(s.capacity, framework.capacity);
        assert_eq!(s.weight, framework.weight);
        assert_eq!(s.lease_ttl, framework.lease_ttl);
        assert_eq!(s.outage_limit, framework.outage_limit);
        assert_eq!(s.refresh, framework.refresh);
        assert_eq!(s.recover_units, framework.recover_units);
        assert_eq!(s.recovery_sweep, framework.recovery_sweep);
        assert_eq!(s.max_state, framework.max_state);
        assert_eq!(s.max_requests_in_flight, framework.max_requests_in_flight);
        assert_eq!(s.max_frame, ferry::mesh::DEFAULT_MAX_FRAME);
        assert_eq!(s.mesh_unacked_bytes, ferry::mesh::DEFAULT_UNACKED_BYTES);
        assert_eq!(
            (s.mesh_keep_alive, s.mesh_idle_timeout),
            (
                ferry::mesh::DEFAULT_KEEP_ALIVE,
                ferry::mesh::DEFAULT_IDLE_TIMEOUT
            )
        );
        assert_eq!(s.mesh_listen.to_string(), "127.0.0.1:0");
        assert_eq!(s.store, StoreChoice::Memory);
        assert_eq!(s.certs, Path::new("/etc/ferry/certs"));
        assert!(s.seeds.is_empty());
        assert_eq!(
            s.admin.map(|a| a.to_string()).as_deref(),
            Some("127.0.0.1:0")
        );
        assert_eq!(s.sessions, None);
        assert_eq!(s.drain_grace, Duration::from_secs(25));
        assert_eq!(s.admin_token, None);
        assert_eq!(s.log_format, LogFormat::Text);
    }

    fn parse_env(text: &str, env: &[(&str, &str)]) -> Result<NodeSettings, String> {
        let lookup = |var: &str| {
            env.iter()
                .find(|(name, _)| *name == var)
                .map(|(_, value)| (*value).to_owned())
        };
        parse_with_env(
            Path::new("node.toml"),
            Path::new("/etc/ferry"),
            text,
            lookup,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn redis_behind_sentinels_with_replica_acknowledgement_is_a_store() {
        let url = "redis+sentinel://10.0.0.5:26379,10.0.0.6:26379/games?wait_replicas=2";
        let s =
            parse_env("id = \"a\"\ncerts = \"c\"\n", &[("FERRY_STORE", url)]).expect("accepted");
        assert_eq!(
            s.store,
            StoreChoice::Shared {
                url: url.into(),
                prefix: DEFAULT_STORE_PREFIX.into()
            }
        );
    }

    /// Every key of a config text, as the environment would set it: text as it is, other
    /// values as TOML.
    fn as_env(text: &str) -> Vec<(String, String)> {
        let table: toml::Table = text.parse().expect("TOML");
        table
            .into_iter()
            .map(|(key, value)| {
                let value = match value {
                    toml::Value::String(text) => text,
                    other => other.to_string(),
                };
                (env_var(&key), value)
            })
            .collect()
    }

    fn parse_owned_env(text: &str, env: &[(String, String)]) -> Result<NodeSettings, String> {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        parse_env(text, &env)
    }

    /// Another file that sets every key, each to a value other than FULL's, `admin_token`
    /// instead of `admin_token_file`.
    const OTHER: &str = r#"
        id = "n2"
        app_version = "8"
        mesh_listen = "10.0.0.2:4434"
        certs = "other-certs"
        store = "etcd://10.0.0.9:2379"
        store_prefix = "other"
        capacity = 6
        weight = 4
        lease_ttl_ms = 4000
        outage_limit_ms = 30000
        refresh_ms = 300
        recover_units = true
        recovery_sweep_ms = 3000
        max_frame_bytes = 2097152
        mesh_keep_alive_ms = 400
        mesh_idle_timeout_ms = 3000
        mesh_unacked_bytes = 2000000
        max_state_bytes = 8192
        max_requests_in_flight = 65
        drain_grace_ms = 6000
        seeds = ["p4@10.0.0.14:7000"]
        admin = "127.0.0.1:7200"
        admin_token = "s3cret"
        admin_tls = false
        sessions_listen = "0.0.0.0:7500"
        sessions_cert = "other.pem"
        sessions_key = "other.key"
        sessions_tokens = "other-tokens.txt"
        sessions_max_frame_bytes = 1001
        sessions_max_held = 12
        sessions_rate_per_second = 13
        sessions_rate_burst = 14
        sessions_max_bindings = 15
        sessions_max_outbound = 16
        sessions_seal_timeout_ms = 17
        sessions_auth_timeout_ms = 18
        sessions_idle_timeout_ms = 19
        sessions_websocket = "127.0.0.1:7501"
        sessions_websocket_plain = false
        log_format = "text"
        otlp_endpoint = "http://10.0.0.3:4318/v1/traces"
    "#;

    #[test]
    fn every_key_can_come_from_the_environment_and_wins_over_the_file() {
        let other: toml::Table = OTHER.parse().expect("TOML");
        let mut written: Vec<&str> = other.keys().map(String::as_str).collect();
        written.push("admin_token_file");
        written.sort_unstable();
        let mut listed = KEYS.to_vec();
        listed.sort_unstable();
        assert_eq!(written, listed, "OTHER sets every listed key once");
        // Each key differs between the two, so a key the environment failed to set shows.
        let full_table: toml::Table = FULL.parse().expect("TOML");
        for key in KEYS {
            assert_ne!(full_table.get(*key), other.get(*key), "{key} differs");
        }
        let (full, other) = (parse_ok(FULL), parse_ok(OTHER));
        // A file of nothing: every key from the environment.
        assert_eq!(parse_owned_env("", &as_env(FULL)), Ok(full.clone()));
        assert_eq!(parse_owned_env("", &as_env(OTHER)), Ok(other.clone()));
        // Every key from the environment wins over the file's, each one alone too.
        assert_eq!(parse_owned_env(FULL, &as_env(OTHER)), Ok(other.clone()));
        assert_eq!(parse_owned_env(OTHER, &as_env(FULL)), Ok(full));
        for (var, value) in as_env(OTHER) {
            let one = parse_owned_env(FULL, &[(var.clone(), value)]);
            let one = one.unwrap_or_else(|e| panic!("{var} alone is refused: {e}"));
            assert_ne!(one, parse_ok(FULL), "{var} changed nothing");
        }
    }

    #[test]
    fn a_list_key_takes_a_toml_list_or_commas_from_the_environment() {
        let file = "id = \"a\"\ncerts = \"c\"\n";
        let seeds = |value: &str| {
            let s = parse_env(file, &[("FERRY_SEEDS", value)]).expect("accepted");
            s.seeds
                .iter()
                .map(|(n, a)| format!("{n}={a}"))
                .collect::<Vec<_>>()
        };
        let both = ["p2=10.0.0.12:7000", "p3=10.0.0.13:7000"];
        assert_eq!(seeds(r#"["p2@10.0.0.12:7000", "p3@10.0.0.13:7000"]"#), both);
        assert_eq!(seeds("p2@10.0.0.12:7000, p3@10.0.0.13:7000"), both);
        assert_eq!(seeds("p2@10.0.0.12:7000"), ["p2=10.0.0.12:7000"]);
        assert!(seeds("").is_empty());
        let e = parse_env(file, &[("FERRY_SEEDS", "p2")]).expect_err("refused");
        assert!(
            e.contains("bad `seeds` (from the environment variable FERRY_SEEDS)"),
            "{e}"
        );
    }

    #[test]
    fn durations_are_written_as_people_write_them_and_milliseconds_still_work() {
        let s = parse_ok(
            "id = \"a\"\ncerts = \"c\"\ndrain_grace = \"1m30s\"\nrefresh = \"250ms\"\n\
             lease_ttl_ms = 4000\n",
        );
        assert_eq!(s.drain_grace, Duration::from_secs(90));
        assert_eq!(s.refresh, Duration::from_millis(250));
        assert_eq!(s.lease_ttl, Duration::from_secs(4));
        // The environment's wins over the file's, in either form.
        let file = "id = \"a\"\ncerts = \"c\"\ndrain_grace_ms = 5000\n";
        let s = parse_env(file, &[("FERRY_DRAIN_GRACE", "10s")]).expect("accepted");
        assert_eq!(s.drain_grace, Duration::from_secs(10));
        let file = "id = \"a\"\ncerts = \"c\"\ndrain_grace = \"5s\"\n";
        let s = parse_env(file, &[("FERRY_DRAIN_GRACE_MS", "7000")]).expect("accepted");
        assert_eq!(s.drain_grace, Duration::from_secs(7));
        // Each error names the key or the variable, and says what to write.
        let e = parse_err("id = \"a\"\ncerts = \"c\"\ndrain_grace = \"soon\"\n");
        assert!(
            e.contains("bad `drain_grace`") && e.contains("\"1m30s\""),
            "{e}"
        );
        let e = parse_env("id = \"a\"\ncerts = \"c\"\n", &[("FERRY_REFRESH", "10")])
            .expect_err("refused");
        assert!(e.contains("environment variable FERRY_REFRESH"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nrefresh = \"1s\"\nrefresh_ms = 1000\n");
        assert!(e.contains("`refresh_ms`") && e.contains("keep one"), "{e}");
    }

    #[test]
    fn a_misspelt_variable_is_named_with_the_key_it_is_close_to() {
        let names = [
            "FERRY_ADMN",
            "FERRY_DRAIN_GRACE_M",
            "FERRY_DRAIN_GRACE",
            "FERRY_SESION_LISTEN",
            "FERRY_ADMIN",
            "FERRY_CONFIG",
            "FERRY_ADMIN_CA",
            "FERRY_REQUIRE_REDIS",
            "PATH",
        ];
        let warnings = misspelt_variables(names.map(str::to_owned));
        assert_eq!(warnings.len(), 3, "{warnings:#?}");
        for (warning, (typo, meant)) in warnings.iter().zip([
            ("FERRY_ADMN", "FERRY_ADMIN"),
            ("FERRY_DRAIN_GRACE_M", "FERRY_DRAIN_GRACE_MS"),
            ("FERRY_SESION_LISTEN", "FERRY_SESSIONS_LISTEN"),
        ]) {
            assert!(
                warning.starts_with(&format!("the environment variable {typo} is no config key"))
                    && warning.contains(&format!("did you mean {meant} ")),
                "{warning}"
            );
        }
    }

    #[test]
    fn env_values_of_the_wrong_type_are_refused_and_secrets_stay_hidden() {
        let s = parse_env(
            "id = \"a\"\ncerts = \"c\"\ncapacity = 3\n",
            &[("FERRY_CAPACITY", "9")],
        )
        .expect("accepted");
        assert_eq!(s.capacity, 9);
        let e = parse_env("id = \"a\"\ncerts = \"c\"\n", &[("FERRY_CAPACITY", "lots")])
            .expect_err("refused");
        assert!(
            e.contains("FERRY_CAPACITY") && e.contains("capacity"),
            "{e}"
        );
        // The token never shows in Debug output.
        let s = parse_env(
            "id = \"a\"\ncerts = \"c\"\n",
            &[("FERRY_ADMIN_TOKEN", "s3cret")],
        )
        .expect("accepted");
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    #[test]
    fn an_admin_endpoint_beyond_loopback_needs_a_token() {
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nadmin = \"0.0.0.0:7100\"\n");
        assert!(
            e.contains("bad `admin`") && e.contains("admin_token_file"),
            "{e}"
        );
        let s = parse_ok(
            "id = \"a\"\ncerts = \"c\"\nadmin = \"0.0.0.0:7100\"\nadmin_token_file = \"t\"\n",
        );
        assert_eq!(s.admin_token, Some(AdminToken::File("/etc/ferry/t".into())));
        let e =
            parse_err("id = \"a\"\ncerts = \"c\"\nadmin_token = \"x\"\nadmin_token_file = \"t\"\n");
        assert!(e.contains("bad `admin_token`"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nadmin_token = \" \"\n");
        assert!(e.contains("empty"), "{e}");
    }

    #[test]
    fn an_admin_token_from_the_environment_replaces_the_files_token_file() {
        // One FERRY_ADMIN_TOKEN for the node and the `ferry` commands, beside a file that names
        // a token file: the environment wins, as it does for every key.
        let file =
            "id = \"a\"\ncerts = \"c\"\nadmin = \"0.0.0.0:7100\"\nadmin_token_file = \"t\"\n";
        let s = parse_env(file, &[("FERRY_ADMIN_TOKEN", "s3cret")]).expect("accepted");
        assert_eq!(
            s.admin_token,
            Some(AdminToken::Value(Secret("s3cret".to_owned())))
        );
        // And a token file from the environment replaces a token in the file.
        let file = "id = \"a\"\ncerts = \"c\"\nadmin_token = \"x\"\n";
        let s = parse_env(file, &[("FERRY_ADMIN_TOKEN_FILE", "/run/token")]).expect("accepted");
        assert_eq!(s.admin_token, Some(AdminToken::File("/run/token".into())));
        // Both from the environment: the error names the two variables.
        let e = parse_env(
            "id = \"a\"\ncerts = \"c\"\n",
            &[
                ("FERRY_ADMIN_TOKEN", "s3cret"),
                ("FERRY_ADMIN_TOKEN_FILE", "/run/token"),
            ],
        )
        .expect_err("refused");
        assert!(
            e.contains("(from the environment variable FERRY_ADMIN_TOKEN)")
                && e.contains("so is FERRY_ADMIN_TOKEN_FILE"),
            "{e}"
        );
        // A bad value from the environment is named by its variable.
        let e = parse_env(file, &[("FERRY_ADMIN_TOKEN", " ")]).expect_err("refused");
        assert!(
            e.contains("bad `admin_token` (from the environment variable FERRY_ADMIN_TOKEN)")
                && e.contains("empty"),
            "{e}"
        );
    }

    #[test]
    fn admin_tls_needs_an_admin_endpoint() {
        assert!(!parse_ok("id = \"a\"\ncerts = \"c\"\n").admin_tls);
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nadmin = \"off\"\nadmin_tls = true\n");
        assert!(
            e.contains("bad `admin_tls`") && e.contains("\"off\""),
            "{e}"
        );
    }

    /// A file that sets every key but `admin_token`, which excludes `admin_token_file`.
    const FULL: &str = r#"
        id = "n1"
        app_version = "7"
        mesh_listen = "0.0.0.0:4433"
        certs = "/var/lib/ferry/certs"
        store = "redis://127.0.0.1:6379/"
        store_prefix = "game"
        capacity = 5
        weight = 3
        lease_ttl_ms = 3000
        outage_limit_ms = 20000
        refresh_ms = 250
        recover_units = false
        recovery_sweep_ms = 2000
        max_frame_bytes = 1048576
        mesh_keep_alive_ms = 300
        mesh_idle_timeout_ms = 2000
        mesh_unacked_bytes = 1000000
        max_state_bytes = 4096
        max_requests_in_flight = 64
        drain_grace_ms = 5000
        seeds = ["p2@10.0.0.12:7000", "p@3@10.0.0.13:7000"]
        admin = "127.0.0.1:7100"
        admin_token_file = "admin.token"
        admin_tls = true
        sessions_listen = "0.0.0.0:7400"
        sessions_cert = "gateway.pem"
        sessions_key = "/secret/gateway.key"
        sessions_tokens = "tokens.txt"
        sessions_max_frame_bytes = 1000
        sessions_max_held = 2
        sessions_rate_per_second = 3
        sessions_rate_burst = 4
        sessions_max_bindings = 5
        sessions_max_outbound = 6
        sessions_seal_timeout_ms = 7
        sessions_auth_timeout_ms = 8
        sessions_idle_timeout_ms = 9
        sessions_websocket = "127.0.0.1:7401"
        sessions_websocket_plain = true
        log_format = "json"
        otlp_endpoint = "http://127.0.0.1:4318/v1/traces"
    "#;

    #[test]
    fn every_key_is_read() {
        let s = parse_ok(FULL);
        assert_eq!(s.id.as_str(), "n1");
        assert_eq!(s.app_version, "7");
        assert_eq!(s.mesh_listen.to_string(), "0.0.0.0:4433");
        assert_eq!(s.certs, Path::new("/var/lib/ferry/certs"));
        assert_eq!(
            s.store,
            StoreChoice::Shared {
                url: "redis://127.0.0.1:6379/".into(),
                prefix: "game".into()
            }
        );
        assert_eq!((s.capacity, s.weight), (5, 3));
        assert_eq!(s.lease_ttl, Duration::from_millis(3000));
        assert_eq!(s.outage_limit, Duration::from_secs(20));
        assert_eq!(s.refresh, Duration::from_millis(250));
        assert!(!s.recover_units);
        assert_eq!(s.recovery_sweep, Duration::from_millis(2000));
        assert_eq!(
            (s.max_frame, s.max_state, s.max_requests_in_flight),
            (1_048_576, 4096, 64)
        );
        assert_eq!(
            (s.mesh_keep_alive, s.mesh_idle_timeout),
            (Duration::from_millis(300), Duration::from_millis(2000))
        );
        assert_eq!(s.mesh_unacked_bytes, 1_000_000);
        let seeds: Vec<String> = s.seeds.iter().map(|(n, a)| format!("{n}={a}")).collect();
        assert_eq!(seeds, ["p2=10.0.0.12:7000", "p@3=10.0.0.13:7000"]);
        assert_eq!(
            s.admin.map(|a| a.to_string()).as_deref(),
            Some("127.0.0.1:7100")
        );
        assert_eq!(
            s.admin_token,
            Some(AdminToken::File("/etc/ferry/admin.token".into()))
        );
        assert_eq!(s.drain_grace, Duration::from_millis(5000));
        assert!(s.admin_tls);
        assert_eq!(s.log_format, LogFormat::Json);
        assert_eq!(
            s.sessions,
            Some(GatewayFiles {
                listen: "0.0.0.0:7400".parse().expect("addr"),
                cert: "/etc/ferry/gateway.pem".into(),
                key: "/secret/gateway.key".into(),
                tokens: "/etc/ferry/tokens.txt".into(),
                limits: ClientLimits {
                    max_frame: 1000,
                    max_held: 2,
                    rate_per_second: 3,
                    rate_burst: 4,
                    max_bindings: 5,
                    max_outbound: 6,
                    seal_timeout: Duration::from_millis(7),
                    auth_timeout: Duration::from_millis(8),
                    idle_timeout: Duration::from_millis(9),
                },
                websocket: Some(WebSocketListen {
                    listen: "127.0.0.1:7401".parse().expect("addr"),
                    plain: true,
                }),
            })
        );
        let off = parse_ok("id = \"a\"\ncerts = \"c\"\nadmin = \"off\"\n");
        assert_eq!(off.admin, None);
    }

    #[test]
    fn a_websocket_listener_needs_a_gateway_and_plain_ws_needs_loopback() {
        let gateway = "id = \"a\"\ncerts = \"c\"\nsessions_listen = \"127.0.0.1:0\"\n\
                       sessions_cert = \"g.pem\"\nsessions_key = \"g.key\"\n\
                       sessions_tokens = \"t.txt\"\n";
        let ws = |extra: &str| {
            parse_ok(&format!("{gateway}{extra}"))
                .sessions
                .expect("gateway")
        };
        assert_eq!(ws("").websocket, None);
        let tls = ws("sessions_websocket = \"0.0.0.0:7401\"\n").websocket;
        assert_eq!(tls.map(|w| (w.listen.port(), w.plain)), Some((7401, false)));
        let plain = "sessions_websocket = \"127.0.0.1:7401\"\nsessions_websocket_plain = true\n";
        assert_eq!(ws(plain).websocket.map(|w| w.plain), Some(true));
        let e = parse_err(&format!(
            "{gateway}sessions_websocket = \"0.0.0.0:7401\"\nsessions_websocket_plain = true\n"
        ));
        assert!(
            e.contains("sessions_websocket_plain") && e.contains("loopback"),
            "{e}"
        );
        let e = parse_err(&format!("{gateway}sessions_websocket_plain = true\n"));
        assert!(e.contains("sessions_websocket_plain"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nsessions_websocket = \"127.0.0.1:1\"\n");
        assert!(
            e.contains("sessions_websocket") && e.contains("sessions_listen"),
            "{e}"
        );
    }

    #[test]
    fn the_key_list_matches_the_file_type() {
        let table: toml::Table = FULL.parse().expect("TOML");
        let mut written: Vec<&str> = table.keys().map(String::as_str).collect();
        written.push("admin_token");
        let mut listed = KEYS.to_vec();
        written.sort_unstable();
        listed.sort_unstable();
        assert_eq!(written, listed, "FULL sets every listed key once");
        // serde refuses anything else, even without the key check in front of it.
        let direct: Result<NodeFile, _> = toml::from_str("id = \"a\"\ncerts = \"c\"\nzone = 1\n");
        assert!(direct.is_err_and(|e| e.message().contains("unknown field")));
    }

    #[test]
    fn client_limits_default_to_the_frameworks_and_refuse_zero() {
        let gateway = "id = \"a\"\ncerts = \"c\"\nsessions_listen = \"127.0.0.1:0\"\n\
                       sessions_cert = \"g.pem\"\nsessions_key = \"g.key\"\n\
                       sessions_tokens = \"t.txt\"\n";
        let s = parse_ok(gateway);
        let limits = s.sessions.expect("a gateway").limits.session_limits();
        assert_eq!(limits, ferry::SessionLimits::default());
        let e = parse_err(&format!("{gateway}sessions_max_held = 0\n"));
        assert!(
            e.contains("sessions_max_held") && e.contains("above 0"),
            "{e}"
        );
        for key in [
            "sessions_seal_timeout_ms",
            "sessions_auth_timeout_ms",
            "sessions_idle_timeout_ms",
        ] {
            let e = parse_err(&format!("{gateway}{key} = 0\n"));
            assert!(e.contains(key) && e.contains("above 0"), "{e}");
        }
        let e = parse_err(&format!("{gateway}sessions_seal_timeout_ms = 0\n"));
        assert!(e.contains("the default is 3000"), "{e}");
    }

    #[test]
    fn limits_out_of_range_are_refused_with_their_floor() {
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nmax_frame_bytes = 1000\n");
        assert!(
            e.contains("max_frame_bytes") && e.contains("at least 524288"),
            "{e}"
        );
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nmax_state_bytes = 0\n");
        assert!(
            e.contains("max_state_bytes") && e.contains("above 0"),
            "{e}"
        );
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nmax_requests_in_flight = 0\n");
        assert!(e.contains("max_requests_in_flight"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nmesh_idle_timeout_ms = 0\n");
        assert!(
            e.contains("mesh_idle_timeout_ms") && e.contains("above 0"),
            "{e}"
        );
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nmesh_keep_alive_ms = 5000\n");
        assert!(
            e.contains("mesh_keep_alive_ms") && e.contains("shorter than mesh_idle_timeout_ms"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_problem() {
        let e = parse_err("id = \"a\"\ncerts = [\n");
        assert!(e.contains("not valid TOML (line 2"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\ncolour = \"red\"\n");
        assert!(e.contains("unknown key `colour`"), "{e}");
        let e = parse_err("certs = \"c\"\n");
        assert!(
            e.contains("does not set `id`") && e.contains("FERRY_ID") && e.contains("id = \"p1\""),
            "{e}"
        );
        let e = parse_err("id = \"a\"\n");
        assert!(
            e.contains("does not set `certs`") && e.contains("FERRY_CERTS"),
            "{e}"
        );
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nsession_listen = \"127.0.0.1:0\"\n");
        assert!(e.contains("did you mean `sessions_listen`?"), "{e}");
        assert!(!e.contains("did you mean `colour"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\ncapacity = \"lots\"\n");
        assert!(e.contains("line 3") && e.contains("capacity"), "{e}");
        let e = parse_err("id = \"\"\ncerts = \"c\"\n");
        assert!(e.contains("bad `id`"), "{e}");
        let e = parse_err("id = \"a b\"\ncerts = \"c\"\n");
        assert!(e.contains("spaces"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nstore = \"mysql://u:pw@db/\"\n");
        assert!(e.contains("bad `store`") && !e.contains("pw"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nstore = \"redis+sentinel://s:26379\"\n");
        assert!(
            e.contains("bad `store`") && e.contains("names no master"),
            "{e}"
        );
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nstore = \"redis://h:1/?wait_replicas=x\"\n");
        assert!(
            e.contains("bad `store`") && e.contains("wait_replicas"),
            "{e}"
        );
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nrefresh_ms = 0\n");
        assert!(e.contains("bad `refresh_ms`"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nseeds = [\"10.0.0.1:7000\"]\n");
        assert!(
            e.contains("bad `seeds`") && e.contains("<node-id>@<ip>:<port>"),
            "{e}"
        );
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nseeds = [\"p2@host\"]\n");
        assert!(e.contains("bad `seeds`") && e.contains("no ip:port"), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nadmin = \"localhost\"\n");
        assert!(e.contains("bad `admin`") && e.contains("\"off\""), "{e}");
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nsessions_listen = \"127.0.0.1:0\"\n");
        assert!(
            e.contains("bad `sessions_cert`") && e.contains("required"),
            "{e}"
        );
        let e = parse_err("id = \"a\"\ncerts = \"c\"\nsessions_tokens = \"t.txt\"\n");
        assert!(
            e.contains("bad `sessions_tokens`") && e.contains("\"off\""),
            "{e}"
        );
    }

    const GUIDE: &str = include_str!("../../../docs/configuration.md");

    #[test]
    fn the_guide_lists_every_key_with_its_true_default() {
        // Rows of the key table: | `key` | type | default | meaning |
        let rows: Vec<(String, String)> = GUIDE
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let key = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                Some((key.to_owned(), (*cells.get(3)?).to_owned()))
            })
            .collect();
        let keys: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, KEYS, "the guide's table lists every key, in order");
        // Writing each documented default explicitly changes nothing.
        let mut explicit = String::from("id = \"a\"\ncerts = \"c\"\n");
        for (key, default) in &rows {
            // "required" and "none" are no values: the key has no default to write.
            if default != "required" && default != "none" {
                let literal = default.trim_matches('`');
                explicit.push_str(&format!("{key} = {literal}\n"));
            }
        }
        assert_eq!(parse_ok(&explicit), parse_ok("id = \"a\"\ncerts = \"c\"\n"));
    }

    #[test]
    fn the_guides_examples_are_valid() {
        let getting_started = include_str!("../../../docs/getting-started.md");
        for (page, count) in [(GUIDE, 3), (getting_started, 1)] {
            // A crate's Cargo.toml is no node config.
            let blocks: Vec<&str> = ferry_tests::docs::code_blocks(page, "toml")
                .into_iter()
                .filter(|block| !block.contains("[package]"))
                .collect();
            assert_eq!(blocks.len(), count);
            for block in blocks {
                parse_ok(block);
            }
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("redis://:secret@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(redact("redis://10.0.0.1:6379/"), "redis://10.0.0.1:6379/");
    }
}
