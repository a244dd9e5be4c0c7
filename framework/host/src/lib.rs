//! Ferry's host: everything that turns an application's [`Registry`](ferry::Registry) into a
//! node process fit for production. A studio's server binary is a few lines around [`Host`];
//! `ferry node` is one such binary, hosting the samples.
//!
//! Layout, in dependency order:
//! - [`node_ids`]: node ids as operators type them, checked the same way everywhere.
//! - [`config`]: the TOML file of one node, the `FERRY_<KEY>` environment overrides, the
//!   defaults and the checks that turn them into settings.
//! - [`gateway`]: a node's client gateway, from its certificate and its tokens file (which
//!   Actors each token may bind).
//! - [`logs`]: the process's log output, text or JSON lines.
//! - `traces` (feature `otlp`): the relocation spans exported over OTLP beside the log.
//! - [`metrics`]: the Prometheus recorder, with the help text and type of every metric.
//! - [`ops`]: the one drain or shutdown that runs on a node at a time, whoever asked for it.
//! - [`admin`]: the admin endpoint (status, drain, shutdown, probes, metrics, new units) with its
//!   bearer token, and the client the `ferry` commands reach it with.
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
pub mod ops;
pub mod signals;
#[cfg(feature = "otlp")]
pub mod traces;

pub use config::{ConfigError, NodeSettings};
pub use host::{Host, HostError};
