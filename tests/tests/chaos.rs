//! A seeded chaos run: rooms under client load while units move, nodes crash and new ones join.
//!
//! After every step: no unit runs on two nodes. At the end: every input a client had acknowledged,
//! for a room that only ever moved gracefully, ran exactly once and in order; every request ended.
//! The seed is printed, so a failure replays: `FERRY_CHAOS_SEED=<seed> cargo test -p ferry-tests
//! --test chaos -- --nocapture`. A longer run: `FERRY_CHAOS_STEPS=300`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferry::{Node, SpotId, UnitId};
use ferry_tests::cluster::Cluster;
use ferry_tests::invariants::assert_exactly_once_in_order;
use ferry_tests::rooms;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;

const ROOMS: usize = 12;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Where each room runs now, across the live nodes; panics if one runs on two.
fn owners(nodes: &[Node], rooms: &[SpotId]) -> BTreeMap<SpotId, Node> {
    let mut found = BTreeMap::new();
    for r in rooms {
        let hosts: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.hosts(&UnitId::Spot(r.clone())))
            .collect();
        assert!(hosts.len() <= 1, "{r} runs on {} nodes", hosts.len());
        if let Some(n) = hosts.first() {
            found.insert(r.clone(), (*n).clone());
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_keeps_one_owner_and_exactly_once_for_graceful_moves() {
    let seed = env_u64("FERRY_CHAOS_SEED").unwrap_or_else(rand::random);
    let steps = env_u64("FERRY_CHAOS_STEPS").unwrap_or(24);
    println!("chaos seed {seed}, {steps} steps (FERRY_CHAOS_SEED={seed} replays it)");
    let mut rng = StdRng::seed_from_u64(seed);

    let mut cluster = Cluster::start(0, rooms::registry).await;
    let mut next_id = 1;
    for _ in 0..4 {
        let mut config = cluster.config(&format!("n{next_id}"));
        config.lease_ttl = Duration::from_millis(800);
        cluster.add_with(config, rooms::registry()).await;
        next_id += 1;
    }
    let mut live: Vec<Node> = cluster.nodes.clone();
    let rooms: Vec<SpotId> = (0..ROOMS)
        .map(|i| SpotId::new(format!("room-{i}")).expect("id"))
        .collect();
    for (i, r) in rooms.iter().enumerate() {
        let host = &live[i % live.len()];
        host.create_spot_on(host.id(), "room", r)
            .await
            .expect("room");
    }

    // Client load: each room gets numbered inputs by request, one after the other.
    let stop = Arc::new(AtomicBool::new(false));
    let crashed: Arc<Mutex<BTreeSet<SpotId>>> = Arc::default();
    let senders = Arc::new(Mutex::new(live.clone()));
    let mut clients = Vec::new();
    for r in rooms.clone() {
        let (stop, senders) = (stop.clone(), senders.clone());
        clients.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let node = {
                    let nodes = senders.lock().await;
                    nodes[(n as usize) % nodes.len()].clone()
                };
                let answer = node
                    .request::<Option<u64>, Vec<u64>>(&r, Some(n), Duration::from_secs(3))
                    .await;
                if answer.is_ok() {
                    acked.push(n);
                }
                n += 1;
                tokio::task::yield_now().await;
            }
            (r, acked)
        }));
    }

    let mut crashes = 0;
    for step in 0..steps {
        let placed = owners(&live, &rooms);
        let crash = crashes < 2 && rng.random_ratio(1, 8) && live.len() > 2;
        if crash {
            let victim = live.remove(rng.random_range(0..live.len()));
            let mut lost = crashed.lock().await;
            for (r, n) in &placed {
                if n.id() == victim.id() {
                    lost.insert(r.clone());
                }
            }
            drop(lost);
            println!("step {step}: crash {}", victim.id());
            let mut events = live[0].recovery_events();
            senders.lock().await.retain(|n| n.id() != victim.id());
            victim.abort().await;
            cluster.nodes.retain(|n| n.id() != victim.id());
            crashes += 1;
            // A replacement joins while the survivors recover the victim's rooms.
            let mut config = cluster.config(&format!("n{next_id}"));
            config.lease_ttl = Duration::from_millis(800);
            next_id += 1;
            let fresh = cluster.add_with(config, rooms::registry()).await;
            live.push(fresh.clone());
            senders.lock().await.push(fresh);
            for n in &live {
                n.refresh_membership().await.expect("membership");
            }
            // Wait (bounded) until every room runs somewhere again.
            for _ in 0..400 {
                if owners(&live, &rooms).len() == ROOMS {
                    break;
                }
                let _ = tokio::time::timeout(Duration::from_millis(50), events.recv()).await;
            }
            assert_eq!(
                owners(&live, &rooms).len(),
                ROOMS,
                "step {step}: rooms recovered"
            );
        } else {
            let r = &rooms[rng.random_range(0..ROOMS)];
            let Some(host) = placed.get(r) else { continue };
            let others: Vec<&Node> = live.iter().filter(|n| n.id() != host.id()).collect();
            let to = others[rng.random_range(0..others.len())].id().clone();
            let report = host
                .move_unit(&UnitId::Spot(r.clone()), Some(to.clone()))
                .await;
            println!(
                "step {step}: move {r} {} -> {to}: {:?}",
                host.id(),
                report.map(|m| m.end)
            );
        }
        owners(&live, &rooms);
    }

    stop.store(true, Ordering::SeqCst);
    let lost = crashed.lock().await.clone();
    for client in clients {
        let (r, acked) = client.await.expect("every client's requests ended");
        if lost.contains(&r) {
            continue;
        }
        let host = owners(&live, &rooms).get(&r).cloned().expect("room runs");
        let ran: Vec<u64> = host
            .request(&r, None::<u64>, Duration::from_secs(5))
            .await
            .expect("log");
        assert_exactly_once_in_order(&r, &acked, &ran);
    }
    println!("chaos seed {seed}: ok ({crashes} crashes)");
    for n in &live {
        n.shutdown().await;
    }
}
