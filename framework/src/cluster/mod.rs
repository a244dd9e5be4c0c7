//! The cluster as one node keeps it: authority records and descriptors in the store, placement,
//! and the state a node holds about the others. This module is state only: the node acts on it
//! (`node::routing`, `node::membership`, `node::recovery`, `node::losses`).
//!
//! Layout:
//! - [`authority`]: the records the store holds per unit and per node.
//! - [`placement`]: the pure choice of a node for a new unit.
//! - `frames`: what nodes say to each other on the mesh.
//! - `routes`: the route cache: where units live, and what waits for a lookup, a move or a switch.
//! - `witness`: the mesh's account of who is alive, the second witness beside the lease.
//! - `lease`: until when the owner lease is certainly held.
//! - [`losses`]: the tells the mesh could not deliver, counted and reported.
//! - [`recovery`]: what crash recovery reports as it runs.

pub use ferry_core::authority;
pub(crate) use ferry_core::frames;
pub(crate) mod lease;
pub mod losses;
pub use ferry_core::placement;
pub mod recovery;
pub(crate) mod routes;
pub(crate) mod witness;
