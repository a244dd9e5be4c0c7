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

/// The bucket bounds, in seconds, of every histogram (pauses and move phases): from 100 µs to
/// 30 s, so a room pause of any length lands in a bucket that says how long it was.
const BUCKETS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Installs the process's Prometheus recorder and returns the handle `GET /metrics` renders.
/// Durations are histograms with fixed buckets, not summaries: a summary's quantiles cover a
/// sliding window and read 0 a few minutes after the last drain, while buckets keep counting and
/// Prometheus works out quantiles over whatever range a dashboard asks. Upkeep runs at each
/// scrape, so no background task is needed.
pub fn install_metrics() -> Result<PrometheusHandle, MetricsError> {
    PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| MetricsError(e.to_string()))?
        .install_recorder()
        .map_err(|e| MetricsError(e.to_string()))
}
