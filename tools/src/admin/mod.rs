//! The admin endpoint every `ferry node` serves, and the client the CLI reaches it with.
//!
//! Layout, in the order a request flows:
//! - [`wire`]: the JSON of each route, shared by both sides.
//! - [`client`]: a small HTTP/1.1 client, one request per connection.
//! - [`server`]: the axum routes over one node: status, drain, shutdown, metrics, new units.
//! - [`play`]: the play page, a browser playing the chat sample through this node's gateway.
//! - [`cluster_view`]: the cluster view, nodes with their rooms and the moves of drains, live.

pub mod client;
pub mod cluster_view;
pub mod play;
pub mod server;
pub mod wire;

#[cfg(test)]
mod tests;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

pub use client::{AdminClient, ClientError};
pub use server::{AdminError, AdminServer};

/// Why the metrics recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot record metrics: {0}")]
pub struct MetricsError(String);

/// Installs the process's Prometheus recorder and returns the handle `GET /metrics` renders.
/// Upkeep runs at each scrape, so no background task is needed.
pub fn install_metrics() -> Result<PrometheusHandle, MetricsError> {
    PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| MetricsError(e.to_string()))
}
