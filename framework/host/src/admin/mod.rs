//! The admin endpoint every node serves, and the client the `ferry` commands reach it with.
//!
//! Layout, in the order a request flows:
//! - [`auth`]: who may call which route: the bearer token.
//! - [`wire`]: the JSON of each route, shared by both sides.
//! - [`ops`]: the one drain or shutdown that runs on a node at a time, whoever asked for it
//!   (a route, or a signal).
//! - [`client`]: a small HTTP/1.1 client (over HTTPS with the cluster CA), one request per
//!   connection.
//! - [`server`]: the axum routes over one node: status, probes, drain, shutdown, metrics, new
//!   units.
//! - [`tls`]: HTTPS with the node's own certificate, when `admin_tls` asks.
//! - [`cluster_view`]: the cluster view, nodes with their rooms and the moves of drains, live.
//! - [`play`]: the play page, a console that plays the node's own game through its gateway.

pub mod auth;
pub mod client;
pub mod cluster_view;
pub mod ops;
pub mod play;
pub mod server;
pub mod tls;
pub mod wire;

#[cfg(test)]
mod tests;

pub use client::{AdminClient, ClientError};
pub use server::{AdminError, AdminServer};
