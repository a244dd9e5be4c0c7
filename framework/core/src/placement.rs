//! Where a new unit goes: a pure choice among node descriptors, so it can be tested without a cluster.

use crate::ids::NodeId;

use crate::authority::{NodeDescriptor, NodeState};

/// Picks the node for a new unit of `factory`: a Serving node that has the factory and capacity left,
/// the least loaded first (units over capacity), then the highest weight, then the lowest node id.
/// With `version`, only nodes of that application version qualify.
pub fn place<'a>(
    candidates: impl IntoIterator<Item = &'a NodeDescriptor>,
    factory: &str,
    version: Option<&str>,
) -> Option<NodeId> {
    candidates
        .into_iter()
        .filter(|d| d.state == NodeState::Serving)
        .filter(|d| d.units < d.capacity)
        .filter(|d| d.factories.iter().any(|f| f == factory))
        .filter(|d| version.is_none_or(|v| d.app_version == v))
        .min_by(|a, b| {
            // Compare units/capacity without floating point: a.units * b.cap vs b.units * a.cap.
            let load_a = u128::from(a.units) * u128::from(b.capacity);
            let load_b = u128::from(b.units) * u128::from(a.capacity);
            load_a
                .cmp(&load_b)
                .then(b.weight.cmp(&a.weight))
                .then(a.node.cmp(&b.node))
        })
        .map(|d| d.node.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, units: u64, capacity: u64, weight: u32) -> NodeDescriptor {
        NodeDescriptor {
            node: NodeId::new(id).unwrap(),
            mesh_addr: None,
            app_version: "1".into(),
            state: NodeState::Serving,
            capacity,
            units,
            weight,
            factories: vec!["room".into()],
            lease_generation: 1,
            peers: Vec::new(),
        }
    }

    fn pick(nodes: &[NodeDescriptor]) -> Option<String> {
        place(nodes, "room", None).map(|n| n.to_string())
    }

    #[test]
    fn the_least_loaded_node_wins_then_weight_then_id() {
        assert_eq!(
            pick(&[node("a", 5, 10, 1), node("b", 2, 10, 1)]).as_deref(),
            Some("b")
        );
        // 4/10 is less loaded than 3/5.
        assert_eq!(
            pick(&[node("a", 3, 5, 1), node("b", 4, 10, 1)]).as_deref(),
            Some("b")
        );
        assert_eq!(
            pick(&[node("a", 1, 10, 1), node("b", 1, 10, 2)]).as_deref(),
            Some("b")
        );
        assert_eq!(
            pick(&[node("b", 1, 10, 1), node("a", 1, 10, 1)]).as_deref(),
            Some("a")
        );
    }

    #[test]
    fn full_draining_or_unfit_nodes_are_never_chosen() {
        let mut draining = node("a", 0, 10, 1);
        draining.state = NodeState::Draining;
        let full = node("b", 10, 10, 1);
        let mut other_factory = node("c", 0, 10, 1);
        other_factory.factories = vec!["lobby".into()];
        let mut old = node("d", 0, 10, 1);
        old.app_version = "0".into();
        assert_eq!(
            pick(&[draining.clone(), full.clone(), other_factory.clone()]),
            None
        );
        assert_eq!(
            place(&[draining, full, other_factory, old], "room", Some("1")),
            None
        );
    }
}
