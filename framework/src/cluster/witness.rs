//! The second witness beside the owner lease, kept by one node: the core's
//! [`ferry_core::witness::Witness`] behind a lock, fed with the runtime's clock.
//!
//! What it decides (whether a node may run turns past its lease, when another node is taken for
//! dead) is the core's; docs/reliability.md gives the argument why this never lets two nodes run
//! one unit's turns.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub(crate) use ferry_core::witness::{Lapsed, Times, Verdict, Vouch, may_run};

use crate::ids::NodeId;

/// The runtime's clock as the core takes it (tokio's, so that tests with paused time drive it).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The mesh's account of each peer, kept by one node.
pub(crate) struct Witness(Mutex<ferry_core::witness::Witness>);

impl Witness {
    pub fn new() -> Self {
        Witness(Mutex::new(ferry_core::witness::Witness::new(now())))
    }

    /// The stamp a probe sent now carries.
    pub fn stamp(&self) -> u64 {
        self.0.lock().stamp(now())
    }

    /// A probe from `peer`, sent under its lease `generation`, arrived now. Whether to vouch for
    /// it: not if it was taken for dead under that generation.
    pub fn probed_by(&self, peer: &NodeId, generation: u64) -> bool {
        self.0.lock().probed_by(peer, generation, now())
    }

    /// `peer` answered the probe stamped `stamp`; `running` is false once it runs no turns.
    pub fn answered(&self, peer: &NodeId, stamp: u64, running: bool) {
        self.0.lock().answered(peer, stamp, running, now());
    }

    /// How long ago this node last heard from `peer`, if it ever did.
    pub fn heard_from(&self, peer: &NodeId) -> Option<Duration> {
        self.0.lock().heard_from(peer, now())
    }

    /// The peers to probe and to hear from: those of the last store read, and those that probed.
    pub fn peers(&self) -> Vec<NodeId> {
        self.0.lock().peers()
    }

    /// Until when every peer this node must hear from vouches for it.
    pub fn vouch(&self, grace: Duration) -> Vouch {
        self.0.lock().vouch(grace)
    }

    /// Takes in a store read begun at `read_at`; see [`ferry_core::witness::Witness::read`].
    pub fn read(
        &self,
        read_at: tokio::time::Instant,
        peers: &[NodeId],
        lapsed: &[Lapsed],
        times: &Times,
        meshed: bool,
    ) -> Vec<(NodeId, Verdict)> {
        let read_at = read_at.into_std();
        self.0
            .lock()
            .read(read_at, now(), peers, lapsed, times, meshed)
    }

    /// The version of a dead node's descriptor when it was taken for dead (`None`: not dead).
    pub fn dead_at(&self, node: &NodeId) -> Option<u64> {
        self.0.lock().dead_at(node)
    }

    /// Whether to read membership now; see [`ferry_core::witness::Witness::read_due`].
    pub fn read_due(&self, every: Duration, probe_every: Duration, meshed: bool) -> bool {
        self.0.lock().read_due(now(), every, probe_every, meshed)
    }
}
