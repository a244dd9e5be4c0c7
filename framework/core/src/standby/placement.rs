//! Which node holds a room's standby copy: a pure choice among node descriptors.
//!
//! Each room ranks the nodes by a score drawn from its id and theirs (rendezvous hashing), so
//! that standbys spread over the nodes without anyone counting them, every node computes the same
//! choice from the same view, and a node that leaves moves only the standbys it held.
//!
//! An owner also passes over the nodes that left its checkpoints unanswered ([`Silent`]): a
//! holder that froze or crashed is still in the view until its lease lapses, and a confirmed room
//! must not wait that long to have a standby again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::authority::{NodeDescriptor, NodeState};
use crate::ids::{NodeId, UnitId};

/// How long an owner passes over a holder that left a checkpoint unanswered: about a lease, after
/// which a dead holder has left the view anyway, and one that was only slow is tried again.
pub const SILENT_FOR: Duration = Duration::from_secs(10);

/// The holders an owner passes over for now, because they left a checkpoint unanswered.
#[derive(Debug, Clone, Default)]
pub struct Silent {
    until: BTreeMap<NodeId, Instant>,
}

impl Silent {
    /// `node` left a checkpoint unanswered at `now`: passed over for [`SILENT_FOR`].
    pub fn unanswered(&mut self, node: NodeId, now: Instant) {
        self.until.insert(node, now + SILENT_FOR);
        self.until.retain(|_, until| *until > now);
    }

    /// Whether `node` is passed over at `now`.
    pub fn passes_over(&self, node: &NodeId, now: Instant) -> bool {
        self.until.get(node).is_some_and(|until| *until > now)
    }
}

/// What of a cluster view the holders of `owner`'s rooms depend on at `now`: the nodes
/// [`answering_holder`] may choose, with their factories. Views that differ only in what this
/// leaves out (a node's unit count, its peers, a lease renewed) place every room alike, so an
/// owner aims its rooms again only when this changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Candidates(Vec<(NodeId, Vec<String>)>);

/// The [`Candidates`] of `view` for `owner`'s rooms at `now`.
pub fn candidates<'a>(
    view: impl IntoIterator<Item = &'a NodeDescriptor>,
    owner: &NodeId,
    (silent, now): (&Silent, Instant),
) -> Candidates {
    let mut nodes: Vec<(NodeId, Vec<String>)> = view
        .into_iter()
        .filter(|d| may_hold(d, owner) && !silent.passes_over(&d.node, now))
        .map(|d| (d.node.clone(), d.factories.clone()))
        .collect();
    nodes.sort();
    Candidates(nodes)
}

/// The node that holds `unit`'s standby while `owner` runs it, as [`holder`] chooses, passing
/// over the nodes `silent` names at `now`. `None` if every candidate is silent: the room plays
/// on alone rather than wait for a holder that may never answer (a frozen host's lease runs on).
pub fn answering_holder<'a>(
    view: impl IntoIterator<Item = &'a NodeDescriptor>,
    owner: &NodeId,
    unit: &UnitId,
    factory: &str,
    (silent, now): (&Silent, Instant),
) -> Option<NodeId> {
    let answering = view
        .into_iter()
        .filter(|d| !silent.passes_over(&d.node, now));
    holder(answering, owner, unit, factory)
}

/// The node that holds `unit`'s standby while `owner` runs it: the serving node other than the
/// owner that registers `factory`, takes units at all (a copy is promoted where it is kept), and
/// ranks highest for the unit. `None` when there is none (a one-node cluster, or every other node
/// drains): the room runs without a standby meanwhile.
pub fn holder<'a>(
    view: impl IntoIterator<Item = &'a NodeDescriptor>,
    owner: &NodeId,
    unit: &UnitId,
    factory: &str,
) -> Option<NodeId> {
    view.into_iter()
        .filter(|d| may_hold(d, owner))
        .filter(|d| d.factories.iter().any(|f| f == factory))
        .max_by(|a, b| {
            rank(unit, &a.node)
                .cmp(&rank(unit, &b.node))
                .then(b.node.cmp(&a.node))
        })
        .map(|d| d.node.clone())
}

/// Whether node `d` may hold copies of `owner`'s rooms at all.
fn may_hold(d: &NodeDescriptor, owner: &NodeId) -> bool {
    d.node != *owner && d.state == NodeState::Serving && d.capacity > 0
}

/// The unit's score for a node.
fn rank(unit: &UnitId, node: &NodeId) -> u32 {
    let unit = crc32c::crc32c(unit.as_str().as_bytes());
    crc32c::crc32c_append(unit, node.as_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ids::SpotId;

    fn node(id: &str, state: NodeState) -> NodeDescriptor {
        NodeDescriptor {
            node: NodeId::new(id).unwrap(),
            mesh_addr: None,
            app_version: "1".into(),
            state,
            capacity: 100,
            units: 0,
            weight: 1,
            factories: vec!["room".into()],
            lease_generation: 1,
            peers: Vec::new(),
        }
    }

    fn room(i: usize) -> UnitId {
        UnitId::Spot(SpotId::new(format!("r{i}")).unwrap())
    }

    fn id(s: &str) -> NodeId {
        NodeId::new(s).unwrap()
    }

    #[test]
    fn never_on_the_owner_and_spread_over_the_others() {
        let view: Vec<_> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| node(n, NodeState::Serving))
            .collect();
        let mut held: BTreeMap<NodeId, usize> = BTreeMap::new();
        for i in 0..400 {
            let owner = id(["a", "b", "c", "d"][i % 4]);
            let standby = holder(&view, &owner, &room(i), "room").unwrap();
            assert_ne!(standby, owner);
            *held.entry(standby).or_default() += 1;
        }
        assert_eq!(held.len(), 4);
        assert!(held.values().all(|&n| n > 60), "{held:?}");
    }

    #[test]
    fn only_the_standbys_of_a_node_that_leaves_or_drains_move() {
        let mut view: Vec<_> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| node(n, NodeState::Serving))
            .collect();
        let before: Vec<_> = (0..100)
            .map(|i| holder(&view, &id("a"), &room(i), "room").unwrap())
            .collect();
        view[2].state = NodeState::Relocating;
        for (i, was) in before.iter().enumerate() {
            let now = holder(&view, &id("a"), &room(i), "room").unwrap();
            assert_ne!(now, id("c"));
            if *was != id("c") {
                assert_eq!(now, *was);
            }
        }
    }

    #[test]
    fn a_holder_that_left_a_checkpoint_unanswered_is_passed_over_for_a_while() {
        let view: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|n| node(n, NodeState::Serving))
            .collect();
        let now = Instant::now();
        let mut silent = Silent::default();
        let room = (0..100)
            .map(room)
            .find(|r| holder(&view, &id("a"), r, "room") == Some(id("b")))
            .unwrap();
        silent.unanswered(id("b"), now);
        let chosen = answering_holder(&view, &id("a"), &room, "room", (&silent, now));
        assert_eq!(chosen, Some(id("c")));
        silent.unanswered(id("c"), now);
        let chosen = answering_holder(&view, &id("a"), &room, "room", (&silent, now));
        assert_eq!(chosen, None, "none answers: the room plays on alone");
        let later = now + SILENT_FOR;
        let chosen = answering_holder(&view, &id("a"), &room, "room", (&silent, later));
        assert_eq!(chosen, Some(id("b")));
    }

    #[test]
    fn candidates_change_with_what_placement_reads_and_only_with_that() {
        let mut view: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|n| node(n, NodeState::Serving))
            .collect();
        let now = Instant::now();
        let mut silent = Silent::default();
        let before = candidates(&view, &id("a"), (&silent, now));
        view[1].units = 500;
        view[2].lease_generation = 9;
        view.reverse();
        assert_eq!(candidates(&view, &id("a"), (&silent, now)), before);
        view[1].state = NodeState::Relocating;
        let draining = candidates(&view, &id("a"), (&silent, now));
        assert_ne!(draining, before);
        view[1].state = NodeState::Serving;
        silent.unanswered(id("c"), now);
        assert_ne!(candidates(&view, &id("a"), (&silent, now)), before);
        let later = now + SILENT_FOR;
        assert_eq!(candidates(&view, &id("a"), (&silent, later)), before);
    }

    #[test]
    fn no_holder_without_another_serving_node_that_registers_the_factory() {
        let mut other = node("b", NodeState::Serving);
        other.factories = vec!["lobby".into()];
        let mut driver = node("c", NodeState::Serving);
        driver.capacity = 0;
        let view = [node("a", NodeState::Serving), other, driver];
        assert_eq!(holder(&view, &id("a"), &room(1), "room"), None);
    }
}
