//! Shared helpers for the Ferry benchmarks.
