//! What a gateway's sessions need of the node they run on. The node implements it
//! (`node::gateway`), so that sessions reach the node only through these few calls.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::ids::{NodeId, UnitId};
use crate::store::StoreError;
use crate::unit::cell::AnyFactory;
use crate::unit::envelope::{Payload, ReplyTo};
use crate::unit::replies::Replies;

/// The node a gateway's sessions run on.
pub(crate) trait SessionHost: Clone + Send + Sync + 'static {
    /// This node's id: the gateway its sessions name in their bindings.
    fn id(&self) -> &NodeId;

    /// Sends a client's input or a session op to an Actor, through `via` when the session knows
    /// the Actor's owner (so it follows the inputs before it).
    fn send_encoded(
        &self,
        to: UnitId,
        payload: Payload,
        reply: Option<ReplyTo>,
        via: Option<&NodeId>,
    );

    /// Where binds and fences wait for their answers.
    fn replies(&self) -> &Arc<Replies>;

    /// Whether the node is stopping: a rebind stops waiting for recovery.
    fn stopping(&self) -> bool;

    /// Whether the node may have lost its owner lease: another node may run its units by now,
    /// and an input this gateway forwarded late could overtake those its client sends afterwards
    /// through another gateway, so its sessions end and forward nothing more.
    fn fenced(&self) -> bool;

    /// How often a rebind reads the Actor's record again.
    fn refresh(&self) -> Duration;

    /// The node the store names as an Actor's owner (`None`: it has no record).
    fn owner_of(
        &self,
        id: &UnitId,
    ) -> impl Future<Output = Result<Option<NodeId>, StoreError>> + Send;

    /// The factory of a type name here, which reads and checks its Actors' inputs.
    fn factory(&self, type_name: &str) -> Option<Arc<dyn AnyFactory<Self>>>;
}
