//! Ferry's host: everything that turns an application's [`Registry`](ferry::Registry) into a
//! node process fit for production. A studio's server binary is a few lines around [`Host`];
//! `ferry node` is one such binary, hosting the samples.
//!
//! Layout, in dependency order:
//! - [`node_ids`]: node ids as operators type them, checked the same way everywhere.
//! - `traces` (feature `otlp`): the relocation spans exported over OTLP beside the log.
//! - [`logs`]: the process's log output, text or JSON lines (and the span export).
//! - [`config`]: the TOML file of one node, the `FERRY_<KEY>` environment overrides, the
//!   defaults and the checks that turn them into settings.
//! - [`gateway`]: a node's client gateway, from its certificate and its tokens file (which
//!   Actors each token may bind).
//! - [`metrics`]: the Prometheus recorder, with the help text and type of every metric.
//! - [`admin`]: the admin endpoint (status, drain, shutdown, probes, metrics, new units) with its
//!   bearer token, the one drain or shutdown that runs at a time, and the client the `ferry`
//!   commands reach it with.
//! - [`signals`]: SIGTERM and Ctrl-C, the first to drain, the second to stop at once.
//! - [`host`]: one node process from its settings: certificates, store, mesh, gateway, admin
//!   endpoint, the ready line, and the drain on SIGTERM.

pub mod admin;
pub mod config;
pub mod gateway;
pub mod host;
pub mod logs;
pub mod metrics;
pub mod node_ids;
pub mod signals;
#[cfg(feature = "otlp")]
pub mod traces;

/// The web framework of the admin endpoint, for the application's own pages ([`Host::pages`]):
/// the same version the host serves them with.
pub use axum;
pub use config::{ConfigError, NodeSettings};
pub use host::{Host, HostError};
