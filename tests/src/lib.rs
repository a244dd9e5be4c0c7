//! Shared harness for the Ferry integration tests.

pub mod cluster;
pub mod cut_socket;
pub mod docs;
pub mod etcd_server;
pub mod faults;
pub mod invariants;
pub mod netns;
pub mod player;
pub mod ports;
pub mod redis_sentinel;
pub mod redis_server;
pub mod rooms;
mod server_output;
pub mod sessions;
pub mod sim_cluster;
pub mod sim_socket;
pub mod standby;
pub mod store_server;
pub mod websocket;
