//! A cluster on turmoil's simulated network and clock: links between nodes are partitioned, held
//! (delayed) and repaired while rooms take requests, move and drain. The store is shared and never
//! partitioned; only the mesh is.
//!
//! After every step: no two nodes ran turns of one room from the same state (every turn is logged
//! with the length of the room's log it grew), and every input a client had acknowledged, for a
//! room, ran exactly once and in order. At the end: every room holds only inputs its client sent,
//! none twice. The seed is printed, so a failure replays the same faults and moves:
//! `FERRY_TURMOIL_SEED=<seed> cargo test -p ferry-tests --test partitions -- --nocapture`. A longer
//! run: `FERRY_TURMOIL_STEPS=100`.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use ferry::mesh::ClusterCa;
use ferry::relocation::protocol::MoveEnd;
use ferry::store::{LocationStore, MemoryStore};
use ferry::{
    Behavior, Ctx, NodeConfig, NodeId, Registration, Registry, RelocateOptions, RelocateOutcome,
    RelocationPolicy, SpotId, UnitId,
};
use ferry_tests::invariants::assert_exactly_once_in_order;
use ferry_tests::sim_cluster::{SimNode, add_node};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const ROOMS: usize = 6;
/// How long a client waits for a reply.
const REQUEST: Duration = Duration::from_secs(3);
/// The pause between one client's requests, so load does not outrun the simulated clock.
const PACE: Duration = Duration::from_millis(20);

/// Every turn that grew a room's log, by room and the log's length before it: which node ran it
/// and with what input. Two owners running turns would grow one length twice.
type Turns = BTreeMap<(UnitId, usize), BTreeSet<(NodeId, u64)>>;

thread_local! {
    /// The turns of this thread's simulation: every host of one runs on one thread, so each test
    /// has its own.
    static TURNS: RefCell<Turns> = RefCell::default();
}

/// A room that logs the inputs it runs.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Room(Vec<u64>);

impl Behavior for Room {
    type Msg = Option<u64>;
    type Reply = Vec<u64>;

    fn handle(&mut self, ctx: &mut Ctx<'_>, input: Option<u64>) -> Vec<u64> {
        if let Some(n) = input {
            let turn = (ctx.id().clone(), self.0.len());
            let by = (ctx.node().id().clone(), n);
            TURNS.with(|t| t.borrow_mut().entry(turn).or_default().insert(by));
            self.0.push(n);
        }
        self.0.clone()
    }
}

/// Panics if two different turns grew one room's log from the same state.
fn check_one_owner(step: u64) {
    TURNS.with(|t| {
        for ((unit, len), turns) in t.borrow().iter() {
            assert!(
                turns.len() == 1,
                "step {step}: {unit} grew from length {len} by {turns:?}: two owners ran turns"
            );
        }
    });
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(Registration::spot("room", |_| Room::default()).policy(RelocationPolicy::serde()));
    reg
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn room(i: usize) -> SpotId {
    SpotId::new(format!("room-{i}")).expect("id")
}

/// A simulation with 1 to 5 ms links, replaying `seed`, long enough for any run.
fn simulation(seed: u64) -> turmoil::Sim<'static> {
    turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(3600))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(5))
        .udp_capacity(4096)
        .build()
}

/// Adds hosts `names` to the simulation, each running a node on one shared store.
fn add_nodes(
    sim: &mut turmoil::Sim<'static>,
    names: &[&'static str],
    tune: fn(&mut NodeConfig),
) -> mpsc::UnboundedReceiver<SimNode> {
    let store: Arc<dyn LocationStore> = Arc::new(MemoryStore::new());
    let ca = Arc::new(ClusterCa::generate().expect("cluster CA"));
    let (started, nodes) = mpsc::unbounded_channel();
    for name in names {
        add_node(
            sim,
            name,
            store.clone(),
            ca.clone(),
            registry,
            tune,
            started.clone(),
        );
    }
    nodes
}

/// Waits for `n` nodes to start, then until each has read the membership and linked with all.
async fn link(started: &mut mpsc::UnboundedReceiver<SimNode>, n: usize) -> Vec<SimNode> {
    let mut nodes = Vec::new();
    while nodes.len() < n {
        nodes.push(started.recv().await.expect("node started"));
    }
    nodes.sort_by(|a, b| a.node.id().cmp(b.node.id()));
    // Twice: the first pass publishes every node's load, the second reads all of it.
    for _ in 0..2 {
        for n in &nodes {
            n.run(|node| async move { node.refresh_membership().await })
                .await
                .expect("membership read");
        }
    }
    for a in &nodes {
        for b in &nodes {
            let peer = b.node.id().clone();
            if a.node.id() != &peer {
                a.run(move |node| async move { node.wait_peer_ready(&peer).await })
                    .await
                    .expect("peer link up");
            }
        }
    }
    nodes
}

/// Where each room runs now, by its authority record (the store is shared, so any node reads it).
/// A node may also host a staged copy it was offered; only the owner runs turns.
async fn owners(nodes: &[SimNode], rooms: &[SpotId]) -> BTreeMap<SpotId, SimNode> {
    let mut found = BTreeMap::new();
    for r in rooms {
        let id = UnitId::Spot(r.clone());
        let record = nodes[0].node.read_record(&id).await.expect("store read");
        let owner = record.and_then(|rec| nodes.iter().find(|n| n.node.id() == &rec.owner));
        if let Some(owner) = owner.filter(|n| n.node.hosts(&id)) {
            found.insert(r.clone(), owner.clone());
        }
    }
    found
}

async fn request(from: &SimNode, r: &SpotId, input: Option<u64>) -> Option<Vec<u64>> {
    let r = r.clone();
    from.run(move |node| async move { node.request(&r, input, REQUEST).await.ok() })
        .await
}

async fn shutdown(nodes: &[SimNode]) {
    for n in nodes {
        n.run(|node| async move { node.shutdown().await }).await;
    }
}

#[test]
fn a_partition_fails_a_move_cleanly_and_repair_lets_it_through() {
    let mut sim = simulation(env_u64("FERRY_TURMOIL_SEED").unwrap_or(1));
    let mut started = add_nodes(&mut sim, &["n1", "n2"], |_| {});
    sim.client("test", async move {
        let nodes = link(&mut started, 2).await;
        let (n1, n2) = (&nodes[0], &nodes[1]);
        let r = room(0);
        let id = UnitId::Spot(r.clone());
        let created = r.clone();
        n1.run(|node| async move { node.create_spot_on(node.id(), "room", &created).await })
            .await?;
        // Over the mesh, from the other node.
        assert_eq!(request(n2, &r, Some(1)).await, Some(vec![1]));

        turmoil::partition("n1", "n2");
        let (moving, to) = (id.clone(), n2.node.id().clone());
        let report = n1
            .run(move |node| async move { node.move_unit(&moving, Some(to)).await })
            .await;
        println!("across the partition: {report:?}");
        assert!(
            !matches!(&report, Ok(r) if r.end == MoveEnd::Moved),
            "a move across a partition cannot complete: {report:?}"
        );
        assert!(n1.node.hosts(&id) && !n2.node.hosts(&id), "the room stays");
        assert_eq!(request(n1, &r, Some(2)).await, Some(vec![1, 2]));

        // The offer held up by the partition still reaches n2 after the repair, followed by the
        // source's withdrawal of it: n2 drops the staged copy, and a new move goes through (at most
        // one attempt, right behind the withdrawal, can still find the copy being dropped).
        turmoil::repair("n1", "n2");
        let mut refused = 0;
        loop {
            let (moving, to) = (id.clone(), n2.node.id().clone());
            let report = n1
                .run(move |node| async move { node.move_unit(&moving, Some(to)).await })
                .await?;
            if report.end == MoveEnd::Moved {
                break;
            }
            assert!(
                n1.node.hosts(&id),
                "a refused move leaves the room where it ran"
            );
            refused += 1;
            assert!(refused <= 1, "the staged copy was not dropped: {report:?}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(n2.node.hosts(&id) && !n1.node.hosts(&id), "the room moved");
        assert_eq!(request(n1, &r, Some(3)).await, Some(vec![1, 2, 3]));
        check_one_owner(0);
        shutdown(&nodes).await;
        Ok(())
    });
    sim.run().expect("simulation");
}

/// One client's record: the inputs acknowledged, in order, and how many requests it sent and saw
/// end.
#[derive(Default)]
struct Load {
    acked: Vec<u64>,
    sent: u64,
}

/// A fault on the link between two nodes, for a while.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Nothing crosses the link.
    Partition,
    /// Everything crossing the link waits, then arrives at once: a delay.
    Hold,
    /// The link works.
    None,
}

#[test]
fn partitions_and_delays_keep_one_owner_and_exactly_once_for_graceful_moves() {
    let seed = env_u64("FERRY_TURMOIL_SEED").unwrap_or_else(rand::random);
    let steps = env_u64("FERRY_TURMOIL_STEPS").unwrap_or(16);
    println!("turmoil seed {seed}, {steps} steps (FERRY_TURMOIL_SEED={seed} replays it)");
    let mut sim = simulation(seed);
    let names = ["n1", "n2", "n3"];
    let mut started = add_nodes(&mut sim, &names, |config| {
        config.recovery_sweep = Duration::from_secs(2);
    });
    sim.client("test", async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = link(&mut started, names.len()).await;
        let rooms: Vec<SpotId> = (0..ROOMS).map(room).collect();
        for (i, r) in rooms.iter().enumerate() {
            let r = r.clone();
            nodes[i % nodes.len()]
                .run(|node| async move { node.create_spot_on(node.id(), "room", &r).await })
                .await?;
        }

        // Client load: each room gets numbered inputs by request, one after the other, sent from
        // the nodes in turn.
        let senders = Rc::new(RefCell::new(nodes.clone()));
        let stop = Rc::new(RefCell::new(false));
        let mut loads = BTreeMap::new();
        let mut clients = Vec::new();
        for r in rooms.clone() {
            let load = Rc::new(RefCell::new(Load::default()));
            loads.insert(r.clone(), load.clone());
            let (senders, stop) = (senders.clone(), stop.clone());
            clients.push(tokio::task::spawn_local(async move {
                let mut n = 0u64;
                while !*stop.borrow() {
                    let from = {
                        let senders = senders.borrow();
                        senders[n as usize % senders.len()].clone()
                    };
                    load.borrow_mut().sent += 1;
                    let answer = request(&from, &r, Some(n)).await;
                    if answer.is_some() {
                        load.borrow_mut().acked.push(n);
                    }
                    n += 1;
                    tokio::time::sleep(PACE).await;
                }
            }));
        }

        let mut drained: Option<NodeId> = None;
        let mut drain_tried = false;
        for step in 0..steps {
            let serving: Vec<SimNode> = nodes
                .iter()
                .filter(|n| Some(n.node.id()) != drained.as_ref())
                .cloned()
                .collect();
            let (a, b) = {
                let i = rng.random_range(0..names.len());
                let j = (i + rng.random_range(1..names.len())) % names.len();
                (names[i], names[j])
            };
            let fault = match rng.random_range(0..5) {
                0 | 1 => Fault::Partition,
                2 | 3 => Fault::Hold,
                _ => Fault::None,
            };
            let window = Duration::from_millis(rng.random_range(100..12_000));
            // Half the time the fault strikes a few milliseconds into the move, mid-transfer.
            let lead = match rng.random_bool(0.5) {
                true => Duration::from_millis(rng.random_range(1..40)),
                false => Duration::ZERO,
            };

            // A drain once, late enough that moves ran first; a move otherwise.
            let drain = !drain_tried && step >= steps / 2 && rng.random_ratio(1, 3);
            let placed = owners(&nodes, &rooms).await;
            let action = if drain {
                let victim = serving[rng.random_range(0..serving.len())].clone();
                drain_tried = true;
                println!(
                    "step {step}: {fault:?} {a}-{b} for {window:?} after {lead:?}, drain {}",
                    victim.node.id()
                );
                tokio::task::spawn_local(async move {
                    let options = RelocateOptions {
                        deadline: Duration::from_secs(20),
                        ..RelocateOptions::default()
                    };
                    let outcome = victim
                        .run(move |node| async move { node.relocate(options).await })
                        .await;
                    // The store never fails here: every move is decided by the drain's end.
                    let emptied = match &outcome {
                        RelocateOutcome::Relocated { .. } => Some(victim),
                        RelocateOutcome::Blocked { .. } | RelocateOutcome::Undecided { .. } => None,
                    };
                    (format!("{outcome:?}"), emptied)
                })
            } else {
                let r = rooms[rng.random_range(0..ROOMS)].clone();
                let host = placed.get(&r).cloned();
                let targets: Vec<NodeId> = serving
                    .iter()
                    .map(|n| n.node.id().clone())
                    .filter(|id| Some(id) != host.as_ref().map(|h| h.node.id()))
                    .collect();
                let to = targets[rng.random_range(0..targets.len())].clone();
                println!(
                    "step {step}: {fault:?} {a}-{b} for {window:?} after {lead:?}, move {r} -> {to}"
                );
                tokio::task::spawn_local(async move {
                    let Some(host) = host else {
                        return ("not running".to_owned(), None);
                    };
                    let id = UnitId::Spot(r);
                    let report = host
                        .run(move |node| async move { node.move_unit(&id, Some(to)).await })
                        .await;
                    (format!("{:?}", report.map(|m| m.end)), None)
                })
            };

            tokio::time::sleep(lead).await;
            match fault {
                Fault::Partition => turmoil::partition(a, b),
                Fault::Hold => turmoil::hold(a, b),
                Fault::None => {}
            }
            tokio::time::sleep(window).await;
            match fault {
                Fault::Partition => turmoil::repair(a, b),
                Fault::Hold => turmoil::release(a, b),
                Fault::None => {}
            }
            let (outcome, emptied) = action.await?;
            println!("step {step}: {outcome}");
            // A node drained empty is Relocated: it takes no more units and sends no more load.
            if let Some(victim) = emptied {
                senders
                    .borrow_mut()
                    .retain(|n| n.node.id() != victim.node.id());
                drained = Some(victim.node.id().clone());
            }
            // One owner each; every acknowledged input ran once, in order.
            check_one_owner(step);
            let placed = owners(&nodes, &rooms).await;
            for r in &rooms {
                let host = placed
                    .get(r)
                    .unwrap_or_else(|| panic!("step {step}: {r} runs nowhere"));
                let acked = loads[r].borrow().acked.clone();
                let ran = request(host, r, None)
                    .await
                    .unwrap_or_else(|| panic!("step {step}: {r} answers on its own node"));
                assert_exactly_once_in_order(r, &acked, &ran);
            }
        }

        *stop.borrow_mut() = true;
        for client in clients {
            client.await?;
        }
        // Nothing ran that was never sent: each room's log holds only inputs its client sent.
        let placed = owners(&nodes, &rooms).await;
        for (r, load) in &loads {
            let ran = request(&placed[r], r, None)
                .await
                .unwrap_or_else(|| panic!("{r} answers on its own node"));
            let load = load.borrow();
            assert_exactly_once_in_order(r, &load.acked, &ran);
            assert!(
                ran.iter().all(|n| *n < load.sent),
                "{r}: an input ran that was never sent: {ran:?}"
            );
            println!(
                "{r}: {} requests, {} acknowledged",
                load.sent,
                load.acked.len()
            );
        }
        println!("turmoil seed {seed}: ok");
        shutdown(&nodes).await;
        Ok(())
    });
    sim.run().expect("simulation");
}
