//! Shared harness for the Ferry integration tests.
