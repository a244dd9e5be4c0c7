//! Local messaging on one node, each beside a bare tokio mpsc channel doing the same work.
//!
//! - `tell/one_unit`: N tells to one unit, then one request to know they all ran.
//! - `tell/1000_units`: N tells spread over 1,000 units.
//! - `request/round_trip`: one request and its reply.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferry::{ActorId, Behavior, Ctx, Node, NodeConfig, NodeId, Registration, Registry};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

const N: u64 = 10_000;
const UNITS: usize = 1_000;
const T: Duration = Duration::from_secs(10);

/// Counts what it is told; answers its count.
struct Counter(u64);

impl Behavior for Counter {
    type Msg = u64;
    type Reply = u64;

    fn handle(&mut self, _ctx: &mut Ctx<'_>, n: u64) -> u64 {
        self.0 += n;
        self.0
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn ferry_node(rt: &Runtime, units: usize) -> (Node, Vec<ActorId>) {
    rt.block_on(async {
        let mut reg = Registry::new();
        reg.register(Registration::actor("counter", |_| Counter(0)));
        let node = Node::start(NodeConfig::new(NodeId::new("bench").expect("id")), reg)
            .await
            .expect("node");
        let mut ids = Vec::new();
        for i in 0..units {
            let id = ActorId::new(format!("c{i}")).expect("id");
            node.create_actor("counter", &id).await.expect("created");
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

fn tell(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("tell");
    group.throughput(Throughput::Elements(N));
    for (name, units) in [("one_unit", 1usize), ("1000_units", UNITS)] {
        let (node, ids) = ferry_node(&rt, units);
        group.bench_function(format!("ferry/{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    for i in 0..N as usize {
                        node.tell(&ids[i % units], 1u64).expect("told");
                    }
                    for id in &ids {
                        let _: u64 = node.request(id, 0u64, T).await.expect("synced");
                    }
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
                    for tx in &bare {
                        bare_get(tx).await;
                    }
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
