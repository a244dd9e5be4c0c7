//! Rooms that carry a blob of state, on a cluster of Ferry nodes sharing one `MemoryStore`, for the
//! relocation benches; and the baseline they are measured against: the stop-the-room handoff.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ferry::mesh::ClusterCa;
use ferry::store::{BatchOutcome, LocationStore, MemoryStore, Op};
use ferry::{
    Behavior, Ctx, Node, NodeId, Registration, Registry, RelocationPolicy, SpotId, UnitId,
};
use serde::{Deserialize, Serialize};

/// The factory name of the room spot (SpotWide, `RelocationPolicy::serde()`).
pub const ROOM: &str = "room";

/// How long a bench request may take before the bench fails.
pub const T: Duration = Duration::from_secs(30);

/// A room: a blob of state and a count of what it was told.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Room {
    /// The room's state, as many bytes as the bench asks for.
    pub blob: Vec<u8>,
    /// The sum of the `Add`s it handled.
    pub count: u64,
}

/// What a room is told.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RoomMsg {
    /// Adds to the count.
    Add(u64),
    /// Replaces the blob with this many bytes.
    Grow(usize),
    /// Holds the room's turn until [`open_gate`] (see [`close_gate`]).
    Hold,
    /// Answers the room's whole state, serialized ([`Answer::State`]).
    Snapshot,
    /// Replaces the room's whole state with these serialized bytes.
    Load(Vec<u8>),
    /// Answers the count.
    Get,
}

/// What a room answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Answer {
    /// The count.
    Count(u64),
    /// The state, serialized.
    State(Vec<u8>),
}

impl Answer {
    /// The count; panics on another answer.
    pub fn count(self) -> u64 {
        match self {
            Answer::Count(n) => n,
            Answer::State(_) => panic!("a count was expected"),
        }
    }
}

/// One gate for the whole process: a `Hold` turn waits while it is closed.
static GATE: Mutex<bool> = Mutex::new(false);
static GATE_CV: Condvar = Condvar::new();
static HELD: AtomicBool = AtomicBool::new(false);

/// Closes the gate: the next `Hold` turn will wait for [`open_gate`].
pub fn close_gate() {
    *GATE.lock().expect("the gate lock is sound") = true;
    HELD.store(false, Ordering::SeqCst);
}

/// Whether a `Hold` turn is waiting at the gate.
pub fn held() -> bool {
    HELD.load(Ordering::SeqCst)
}

/// Opens the gate: the waiting `Hold` turn returns.
pub fn open_gate() {
    *GATE.lock().expect("the gate lock is sound") = false;
    GATE_CV.notify_all();
}

impl Behavior for Room {
    type Msg = RoomMsg;
    type Reply = Answer;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, msg: RoomMsg) -> Answer {
        match msg {
            RoomMsg::Add(n) => self.count += n,
            RoomMsg::Grow(n) => self.blob = (0..n).map(|i| (i % 251) as u8).collect(),
            RoomMsg::Hold => {
                let mut closed = GATE.lock().expect("the gate lock is sound");
                HELD.store(true, Ordering::SeqCst);
                while *closed {
                    closed = GATE_CV.wait(closed).expect("the gate lock is sound");
                }
            }
            RoomMsg::Snapshot => {
                return Answer::State(postcard::to_allocvec(self).expect("a room serializes"));
            }
            RoomMsg::Load(bytes) => {
                *self = postcard::from_bytes(&bytes).expect("a room deserializes");
            }
            RoomMsg::Get => {}
        }
        Answer::Count(self.count)
    }
}

/// A registry with the room.
pub fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(Registration::spot(ROOM, |_| Room::default()).policy(RelocationPolicy::serde()));
    reg
}

/// Nodes `n1`, `n2`, ... on one `MemoryStore`, linked over QUIC on loopback.
pub struct Cluster {
    /// The nodes.
    pub nodes: Vec<Node>,
    /// Their store.
    pub store: Arc<dyn LocationStore>,
}

impl Cluster {
    /// Starts `n` nodes and waits until each links to every other.
    pub async fn start(n: usize) -> Cluster {
        let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
        let ca = ClusterCa::generate().expect("a cluster CA");
        let mut nodes = Vec::new();
        for i in 1..=n {
            let config = crate::cross::config(&format!("n{i}"), store.clone(), &ca);
            nodes.push(
                Node::start(config, registry())
                    .await
                    .expect("a node starts"),
            );
        }
        // Twice: the first pass publishes each node, the second reads the others.
        for _ in 0..2 {
            for node in &nodes {
                node.refresh_membership()
                    .await
                    .expect("the membership is read");
            }
        }
        for a in &nodes {
            for b in &nodes {
                if a.id() != b.id() {
                    a.wait_peer_ready(b.id()).await.expect("the link comes up");
                }
            }
        }
        Cluster { nodes, store }
    }

    /// Creates a room on `node` with `bytes` of state.
    pub async fn room(&self, node: usize, id: &SpotId, bytes: usize) {
        let host = &self.nodes[node];
        host.create_spot_on(host.id(), ROOM, id)
            .await
            .expect("the room is created");
        let _: Answer = host
            .request(id, RoomMsg::Grow(bytes), T)
            .await
            .expect("the room grows");
    }

    /// Shuts every node down.
    pub async fn shutdown(self) {
        for node in &self.nodes {
            node.shutdown().await;
        }
    }
}

/// The store key the baseline saves a room's state under.
fn state_key(id: &SpotId) -> String {
    format!("bench/state/{id}")
}

/// The baseline: hands a room from `source` to `target` the way Akka-style shard handoff and
/// Orleans deactivation do. The room's state is taken and it is stopped on the source, the state is
/// written to the store, the room is created on the target, which reads the state back and loads
/// it; then `buffered` (held by the sender meanwhile) is delivered from the source, and the room's
/// count is asked from the source. Returns that count.
pub async fn stop_the_room_handoff(
    store: &Arc<dyn LocationStore>,
    source: &Node,
    target: &Node,
    id: &SpotId,
    buffered: &[RoomMsg],
) -> u64 {
    let state = match source
        .request(id, RoomMsg::Snapshot, T)
        .await
        .expect("the room answers its state")
    {
        Answer::State(bytes) => bytes,
        Answer::Count(_) => panic!("a state was expected"),
    };
    source
        .stop_unit(&UnitId::Spot(id.clone()))
        .await
        .expect("the room stops");
    let key = state_key(id);
    let saved = store
        .batch(
            Vec::new(),
            vec![Op::Put {
                key: key.clone(),
                value: Bytes::from(state),
            }],
        )
        .await
        .expect("the store answers");
    assert!(
        matches!(saved, BatchOutcome::Committed { .. }),
        "the state is saved"
    );
    source
        .create_spot_on(target.id(), ROOM, id)
        .await
        .expect("the room is created on the target");
    let saved = store
        .get(&key)
        .await
        .expect("the store answers")
        .expect("the state is there");
    let _: Answer = target
        .request(id, RoomMsg::Load(saved.value.to_vec()), T)
        .await
        .expect("the room loads its state");
    for msg in buffered {
        source.tell(id, msg.clone()).expect("told");
    }
    source
        .request::<_, Answer>(id, RoomMsg::Get, T)
        .await
        .expect("the room answers on the target")
        .count()
}

/// The node that hosts `id` among `nodes`.
pub fn host_of(nodes: &[Node], id: &SpotId) -> usize {
    let unit = UnitId::Spot(id.clone());
    nodes
        .iter()
        .position(|n| n.hosts(&unit))
        .expect("some node hosts the room")
}

/// The node id of `nodes[i]`.
pub fn id_of(nodes: &[Node], i: usize) -> NodeId {
    nodes[i].id().clone()
}
