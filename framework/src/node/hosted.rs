//! The unit types as this node uses them: with [`Node`] as the node that runs their turns.

use super::handle::Node;

/// A unit's local route on this node.
pub(crate) type Entry = crate::unit::lane::Entry<Node>;

/// The sending side of a lane of this node.
pub(crate) type LaneTx = crate::unit::lane::LaneTx<Node>;

/// A room this node owns that keeps a standby.
pub(crate) type Room = crate::unit::standby::Room<Node>;

/// Work for a lane of this node.
pub(crate) type Control = crate::unit::lane::Control<Node>;

/// A move to this node, while its unit is staged here.
pub(crate) type Staging = crate::relocation::moves::Staging<Node>;
