//! Local messaging on one node, each beside a bare tokio mpsc channel doing the same work.
//!
//! - `tell/one_unit`: N tells to one unit, then one request to know they all ran.
//! - `tell/1000_units`: N tells spread over 1,000 units, then one request to each, all at once.
//!
//! Ferry's tells are measured twice: `ferry` addresses each tell by id (`Node::tell`), `ferry_ref`
//! sends through a `UnitRef` per unit, taken before measuring.
//! - `request/round_trip`: one request and its reply.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferry::{ActorId, Node, NodeConfig, NodeId};
use ferry_benches::{COUNTER, registry, runtime};
use futures_util::future::join_all;
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

const N: u64 = 10_000;
const UNITS: usize = 1_000;
const T: Duration = Duration::from_secs(10);

fn ferry_node(rt: &Runtime, units: usize) -> (Node, Vec<ActorId>) {
    rt.block_on(async {
        let node = Node::start(
            NodeConfig::new(NodeId::new("bench").expect("id")),
            registry(),
        )
        .await
        .expect("node");
        let mut ids = Vec::new();
        for i in 0..units {
            let id = ActorId::new(format!("c{i}")).expect("id");
            node.create_actor(COUNTER, &id).await.expect("created");
            ids.push(id);
        }
        (node, ids)
    })
}

/// The bare baseline: one consumer task per channel, counting; a oneshot asks for the count.
enum Bare {
    Add(u64),
    Get(oneshot::Sender<u64>),
}

fn bare_units(rt: &Runtime, units: usize) -> Vec<mpsc::UnboundedSender<Bare>> {
    (0..units)
        .map(|_| {
            let (tx, mut rx) = mpsc::unbounded_channel::<Bare>();
            rt.spawn(async move {
                let mut count = 0u64;
                while let Some(m) = rx.recv().await {
                    match m {
                        Bare::Add(n) => count += n,
                        Bare::Get(reply) => {
                            let _ = reply.send(count);
                        }
                    }
                }
            });
            tx
        })
        .collect()
}

async fn bare_get(tx: &mpsc::UnboundedSender<Bare>) -> u64 {
    let (reply, answer) = oneshot::channel();
    tx.send(Bare::Get(reply)).expect("open");
    answer.await.expect("answered")
}

/// Waits until every unit has handled what it was told: one request to each, all in flight at once.
async fn ferry_sync(node: &Node, ids: &[ActorId]) {
    let asks = ids.iter().map(|id| node.request::<u64, u64>(id, 0, T));
    for answer in join_all(asks).await {
        answer.expect("synced");
    }
}

/// The same for the bare channels.
async fn bare_sync(bare: &[mpsc::UnboundedSender<Bare>]) {
    join_all(bare.iter().map(bare_get)).await;
}

fn tell(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("tell");
    group.throughput(Throughput::Elements(N));
    for (name, units) in [("one_unit", 1usize), ("1000_units", UNITS)] {
        let (node, ids) = ferry_node(&rt, units);
        let mut refs: Vec<_> = ids.iter().map(|id| node.unit_ref(id)).collect();
        group.bench_function(format!("ferry_ref/{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    for i in 0..N as usize {
                        refs[i % units].tell(1u64).expect("told");
                    }
                    ferry_sync(&node, &ids).await;
                })
            })
        });
        group.bench_function(format!("ferry/{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    for i in 0..N as usize {
                        node.tell(&ids[i % units], 1u64).expect("told");
                    }
                    ferry_sync(&node, &ids).await;
                })
            })
        });
        let bare = bare_units(&rt, units);
        group.bench_function(format!("mpsc/{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    for i in 0..N as usize {
                        bare[i % units].send(Bare::Add(1)).expect("sent");
                    }
                    bare_sync(&bare).await;
                })
            })
        });
        rt.block_on(node.shutdown());
    }
    group.finish();
}

fn request(c: &mut Criterion) {
    let rt = runtime();
    let (node, ids) = ferry_node(&rt, 1);
    let mut group = c.benchmark_group("request");
    group.bench_function("ferry/round_trip", |b| {
        b.iter(|| {
            rt.block_on(async {
                let _: u64 = node.request(&ids[0], 1u64, T).await.expect("reply");
            })
        })
    });
    let bare = bare_units(&rt, 1);
    group.bench_function("mpsc/round_trip", |b| {
        b.iter(|| rt.block_on(bare_get(&bare[0])))
    });
    group.finish();
    rt.block_on(node.shutdown());
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = tell, request
}
criterion_main!(benches);
