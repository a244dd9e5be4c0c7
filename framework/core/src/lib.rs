//! Ferry's protocol core: what nodes, gateways and the store agree on, and the decisions of a move,
//! with no I/O. Nothing here opens a socket, reads a clock or spawns a task: time comes in as a
//! value, randomness from the caller, and the `ferry` crate's runtime feeds events in and carries
//! actions out. So every interleaving of a protocol can be driven by a test, or by a simulator.
//!
//! Layout, in dependency order (each module uses only those above it):
//! - [`ids`]: the logical ids callers address (spots, actors, nodes), which never change on a
//!   move, and the id of a move.
//! - [`errors`]: how a message or request ended, and why a unit could not be created or reached.
//! - [`shared_bytes`]: payloads decoded as slices of the frame they arrived in.
//! - [`reply`]: where a request's answer goes.
//! - [`timer`]: timers as data (registrations, cursors, overrun policies), so they can move.
//! - [`session`]: a client session's id, an Actor's binding to it, the client wire, and what
//!   gateways and Actors' nodes say to each other.
//! - [`authority`]: the records the store holds per unit and per node, and a node's lifecycle state.
//! - [`lease`]: whether a node whose lease lapsed takes it again or stops for good.
//! - [`conditional`]: a conditional write whose answer may be lost, settled by reading it back.
//! - [`commits`]: which of a node's conditional writes go to the store together in one call, and
//!   when (group commit, never holding a write back beyond a short window).
//! - [`witness`]: the mesh's account of who is alive beside the lease, and whether a node may
//!   run turns past its lease.
//! - [`placement`]: the choice of a node for a new unit.
//! - [`drain`]: a drain's decisions: inventory (arrivals included), order, targets spread by
//!   load, retries, what stays and why, the outcome, and when a node is safe to stop.
//! - [`sealing`]: how many units a drain keeps sealed at once, from the pauses it measures.
//! - [`routes`]: where a node sends messages for units it does not host, keeping each sender's
//!   order while units move.
//! - [`recovery`]: who coordinates recovery, which units dead nodes left, and where each is rebuilt;
//!   which units an earlier process of a node's id left, and when it certainly stopped.
//! - [`relocation`]: a move's capture, its pre-copy, frames and phases, and its two sides as state
//!   machines.
//! - [`standby`]: warm standbys: placement, checkpoints, in-order apply, release, promotion.
//! - [`frames`]: everything nodes say to each other on the mesh.
//! - [`delivery`]: frames numbered per link, kept until acknowledged and sent again after a reset.

pub mod authority;
pub mod commits;
pub mod conditional;
pub mod delivery;
pub mod drain;
pub mod errors;
pub mod frames;
pub mod ids;
pub mod lease;
pub mod placement;
pub mod recovery;
pub mod relocation;
pub mod reply;
pub mod routes;
pub mod sealing;
pub mod session;
pub mod shared_bytes;
pub mod standby;
pub mod timer;
pub mod witness;
