//! The owner lease as the one thing that lets a node run turns: once it may have run out, nothing
//! runs, whether or not the store ever answers. And a node that stopped stays out of the store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry::store::{LocationStore, MemoryStore};
use ferry::{
    Behavior, Ctx, NodeConfig, NodeId, NodeState, OverrunPolicy, Registration, Registry, SpotId,
    Tick,
};
use ferry_tests::faults::FaultyStore;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(900);

/// A room whose timer notes when each of its turns ran.
struct Ticking {
    turns: Arc<Mutex<Vec<Instant>>>,
    ticked: Arc<tokio::sync::Notify>,
}

impl Behavior for Ticking {
    type Msg = ();
    type Reply = ();

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timer("t", Duration::from_millis(5), OverrunPolicy::SkipLateTicks);
    }

    fn on_tick(&mut self, _ctx: &mut Ctx<'_>, _tick: &Tick) {
        self.turns.lock().expect("turns").push(Instant::now());
        self.ticked.notify_one();
    }

    fn handle(&mut self, _ctx: &mut Ctx<'_>, (): ()) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_store_stops_answering_runs_no_turn_once_its_lease_may_have_run_out() {
    let turns = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::new();
    let ticked = Arc::new(tokio::sync::Notify::new());
    let (noted, notify) = (turns.clone(), ticked.clone());
    registry.register(Registration::spot("ticking", move |_| Ticking {
        turns: noted.clone(),
        ticked: notify.clone(),
    }));
    let store = FaultyStore::new(Arc::new(MemoryStore::new()));
    let shared: Arc<dyn LocationStore> = store.clone();
    let mut config = NodeConfig::new(NodeId::new("n1").expect("id")).store(shared);
    config.lease_ttl = TTL;
    let node = ferry::Node::start(config, registry).await.expect("starts");
    node.create_spot("ticking", &SpotId::new("room").expect("id"))
        .await
        .expect("created");
    let mut state = node.watch_state();
    ticked.notified().await;

    // Every renewal the node sends from now on hangs: the last confirmed one was sent before.
    let cut = Instant::now();
    store.leave_renewals_unanswered();
    tokio::time::timeout(
        Duration::from_secs(10),
        state.wait_for(|s| *s == NodeState::Error),
    )
    .await
    .expect("the node stops acting as owner though the store never answers")
    .expect("state");

    let turns = turns.lock().expect("turns").clone();
    assert!(
        turns.iter().any(|t| *t < cut),
        "the room ran before the store stopped answering"
    );
    let late: Vec<Duration> = turns
        .iter()
        .filter(|t| **t >= cut + TTL)
        .map(|t| *t - cut)
        .collect();
    assert!(
        late.is_empty(),
        "turns ran after the lease may have run out ({TTL:?} after the cut): {late:?}"
    );
    node.abort().await;
}

/// A node cut off from the store past its TTL (its peer vouches for it meanwhile) takes its lease
/// again when the store answers; if the answer to that acquisition is lost, the lease it finds
/// next is its own, not another process's, and the node runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_again_whose_answer_was_lost_is_known_as_the_nodes_own() {
    let store = FaultyStore::new(Arc::new(MemoryStore::new()));
    let shared: Arc<dyn LocationStore> = store.clone();
    let mut cluster = ferry_tests::cluster::Cluster::start_on(0, shared, Registry::new).await;
    let mut nodes = Vec::new();
    for id in ["n1", "n2"] {
        let mut config = cluster.config(id);
        config.lease_ttl = TTL;
        let mut registry = Registry::new();
        registry.register(Registration::spot("ticking", |_| Ticking {
            turns: Arc::default(),
            ticked: Arc::default(),
        }));
        nodes.push(cluster.add_with(config, registry).await);
    }
    let n1 = nodes[0].clone();
    let before = n1.lease();
    let mut state = n1.watch_state();

    // n1 cannot renew for longer than its TTL: the store lets its lease lapse.
    store.refuse_renewals_of(Some(n1.id()));
    let lapsed = tokio::time::timeout(Duration::from_secs(10), async {
        while store.lease_of(n1.id()).await.expect("lease read").is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    lapsed.await.expect("the lease lapses in the store");

    // The store answers again, but the answer to n1's next acquisition is lost after it landed.
    store.lose_acquisition_answers(1);
    store.refuse_renewals_of(None);
    let retaken = tokio::time::timeout(Duration::from_secs(10), async {
        while n1.lease().generation == before.generation && n1.state() == NodeState::Serving {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    retaken.await.expect("n1 takes its lease again or stops");
    assert_eq!(
        n1.state(),
        NodeState::Serving,
        "n1 took its own lease for another process's"
    );
    let held = store
        .lease_of(n1.id())
        .await
        .expect("lease read")
        .expect("n1 holds a lease");
    assert_eq!(
        held.generation,
        n1.lease().generation,
        "n1 holds what the store says"
    );
    assert!(held.generation > before.generation, "a new lease");
    // It stays held: renewals of the new lease go through, for longer than its TTL.
    let left = tokio::time::timeout(TTL * 3, state.wait_for(|s| *s != NodeState::Serving)).await;
    assert!(left.is_err(), "n1 stopped serving: {:?}", n1.state());
    cluster.shutdown().await;
}

/// A membership refresh that comes after its node stopped (one under way when the stop began, or
/// started by a peer's news) writes nothing: it used to put back the descriptor the shutdown had
/// just withdrawn, and the stopped node stayed in the store as a node whose lease lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_after_its_node_stopped_does_not_put_its_descriptor_back() {
    let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
    let config = NodeConfig::new(NodeId::new("n1").expect("id")).store(store.clone());
    let node = ferry::Node::start(config, Registry::new())
        .await
        .expect("starts");
    let key = ferry::cluster::authority::node_key(node.id());
    assert!(store.get(&key).await.expect("store").is_some());
    node.shutdown().await;
    assert_eq!(store.get(&key).await.expect("store"), None, "withdrawn");

    let _ = node.refresh_membership().await;
    assert_eq!(
        store.get(&key).await.expect("store"),
        None,
        "the stopped node's descriptor stays withdrawn"
    );
}
