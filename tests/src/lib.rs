//! Shared harness for the Ferry integration tests.

pub mod redis_server;
