//! A sender's kept route to one unit: a stream of tells without a lookup by id for each.

use std::any::TypeId;
use std::fmt;

use super::handle::Node;
use super::hosted::Entry;
use crate::error::MessageError;
use crate::unit::envelope::{Envelope, Message, Payload, Target};

/// A unit to tell many times, addressed by id like any other, but looked up once.
///
/// [`Node::tell`] finds a unit's lane by its id for every message. A `UnitRef` keeps the local
/// route it found and pushes along it for as long as the unit stays on that lane; when the unit
/// joins or leaves a SpotWide room, moves to another node or stops, the next tell goes by id
/// and looks again. Either way the guarantees are those of [`Node::tell`]: tells from one
/// `UnitRef` are handled in the order sent, also across such a change, and also when they are
/// mixed with tells from the same task by id.
///
/// Clone it for each task that sends; each clone keeps its own route.
///
/// ```
/// # use ferry::{ActorId, Behavior, Ctx, Node, NodeConfig, NodeId, Registration, Registry};
/// # struct Counter(u64);
/// # impl Behavior for Counter {
/// #     type Msg = u64;
/// #     type Reply = u64;
/// #     fn handle(&mut self, _: &mut Ctx<'_>, n: u64) -> u64 { self.0 += n; self.0 }
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut registry = Registry::new();
/// # registry.register(Registration::actor("counter", |_| Counter(0)));
/// # let node = Node::start(NodeConfig::new(NodeId::new("n1")?), registry).await?;
/// let id = ActorId::new("c1")?;
/// node.create_actor("counter", &id).await?;
/// let mut counter = node.unit_ref(&id);
/// for _ in 0..1_000 {
///     counter.tell(1u64)?;
/// }
/// let total: u64 = node.request(&id, 0u64, std::time::Duration::from_secs(5)).await?;
/// assert_eq!(total, 1_000);
/// # node.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct UnitRef {
    node: Node,
    target: Target,
    /// The route found last time, if the unit was hosted here then.
    route: Option<Entry>,
}

impl fmt::Debug for UnitRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnitRef")
            .field("target", &self.target)
            .field("local", &self.route.is_some())
            .finish()
    }
}

impl Node {
    /// A [`UnitRef`] for telling one unit many times.
    pub fn unit_ref(&self, to: impl Into<Target>) -> UnitRef {
        let target = to.into();
        UnitRef {
            route: self.core.units.directory.get(target.id()),
            node: self.clone(),
            target,
        }
    }
}

impl UnitRef {
    /// The unit this sends to.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Sends a message to the unit, as [`Node::tell`] does.
    pub fn tell<M: Message>(&mut self, msg: M) -> Result<(), MessageError> {
        self.node.accepting()?;
        let mut payload = Payload::local(msg);
        // A unit that arrived here may still wait for what this node sent it before: by id.
        if let Some(route) = &self.route
            && !self.node.core.links.router.any_arriving()
        {
            route.check_type(self.target.id(), TypeId::of::<M>(), &payload)?;
            let envelope = Envelope {
                to: route.slot,
                payload,
                reply: None,
            };
            match route.push_kept(envelope) {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    return Err(MessageError::UnitStopped {
                        id: self.target.id().clone(),
                    });
                }
                // The unit left that lane: this one goes by id, the next along its new route.
                Err(envelope) => payload = envelope.payload,
            }
        }
        self.route = self.node.core.units.directory.get(self.target.id());
        self.node.deliver::<M>(self.target.clone(), payload, None)
    }
}
