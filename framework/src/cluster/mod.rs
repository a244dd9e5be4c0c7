//! The cluster side of a node: authority records and descriptors in the store, placement, routing
//! across the mesh, and membership.
//!
//! Layout, in the order a remote message flows:
//! - [`authority`]: the records the store holds per unit and per node.
//! - [`placement`]: the pure choice of a node for a new unit.
//! - `routing`: the route cache, store lookups, forwarding and activation; inbound frames.
//! - `frames`: what nodes say to each other on the mesh.
//! - [`losses`]: what the mesh could not deliver: requests end, lost tells are reported.
//! - `holder`: one process per node id: the holder of a live lease is asked before a start.
//! - `witness`: the mesh's account of who is alive, the second witness beside the lease.
//! - `membership`: the owner lease, descriptors, and learning peers.
//! - [`recovery`]: rebuilding a dead node's units on the survivors.

pub use ferry_core::authority;
pub(crate) use ferry_core::frames;
#[path = "../node/holder.rs"]
pub(crate) mod holder;
#[path = "../node/losses.rs"]
pub mod losses;
#[path = "../node/membership.rs"]
pub(crate) mod membership;
pub use ferry_core::placement;
#[path = "../node/recovery.rs"]
pub mod recovery;
#[path = "../node/routing.rs"]
pub(crate) mod routing;
pub(crate) mod witness;
