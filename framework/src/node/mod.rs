//! A node: one host's runtime. [`Node`] and everything it does, each part an `impl Node` block over
//! the state below it (`unit`, `session`, `cluster`, `relocation`).
//!
//! Layout, from the state to what uses it:
//! - `config`: what a node is started with.
//! - `handle`: the [`Node`] handle and its state, by role: the units it hosts, its right to run
//!   turns (lifecycle, owner lease, fence), its view of the cluster, its links, its moves.
//! - `hosted`: the unit types with this node filled in (routes, lane handles, staged moves).
//! - `holder`: one process per node id: the holder of a live lease is asked before a start.
//! - `lane`: the task that runs one unit's turns from its queue.
//! - `messaging`: tells, requests, terminals and calls between nodes.
//! - `unit_ref`: a sender's kept route to one unit, for tells without the lookup by id.
//! - `units`: creation, claims, records, spot membership, stopping a unit.
//! - `routing`: routes across the mesh: lookups, forwarding, activation, fences.
//! - `losses`: what the mesh could not deliver: requests end, lost tells are reported.
//! - `adapters`: the state adapters' own deltas, reached by factory type name for a move's seal.
//! - `membership`: the owner lease, descriptors, and learning peers.
//! - `recovery`: rebuilding a dead node's units on the survivors, and taking back what an
//!   earlier process of this node's id held.
//! - `gateway`: the client sessions this node serves (it is their `SessionHost`), and session
//!   frames between nodes.
//! - `source`, `target`: the two sides of a move (the target's answers reach the source through
//!   its own inbox, `Moves::to_source`); `move_ctx`: what a move from here may touch of the node;
//!   `handover`: the one place relay records and cutovers are sent; `drain`: moving every unit
//!   off this node; `sealing`: the drain's window of units sealed at once, as moves wait on it.
//! - `standby`: warm standby copies: checkpointing the rooms owned here, keeping other nodes'
//!   copies, and promoting a copy when its owner died.
//! - `dispatch`: the one entry of frames from peers, handed to the parts above.
//! - `shutdown`: stopping the node.

mod adapters;
mod config;
mod dispatch;
mod drain;
mod gateway;
pub(crate) mod handle;
pub(crate) mod handover;
pub(crate) mod holder;
pub(crate) mod hosted;
pub(crate) mod lane;
mod losses;
mod membership;
mod messaging;
mod move_ctx;
mod recovery;
mod routing;
mod sealing;
mod shutdown;
mod source;
mod standby;
mod target;
mod unit_ref;
mod units;

pub use crate::unit::envelope::{ReplyTo, Target};
pub use config::{DEFAULT_MAX_STATE, MeshSettings, NodeConfig};
pub use ferry_core::authority::NodeState;
pub use handle::Node;
pub(crate) use handle::NodeCore;
pub use shutdown::{SHUTDOWN_MARGIN, ShutdownOutcome, ShutdownReason, TEARDOWN_GRACE};
pub use standby::StandbyStatus;
pub use unit_ref::UnitRef;
