//! Moving live rooms between nodes, each beside the stop-the-room handoff (what Akka-style shard
//! handoff and Orleans deactivation do) on the same cluster, with rooms of the same state.
//!
//! - `pause`: one room of S bytes with Q tells queued in it moves to the other of two nodes (the
//!   direction alternates). Ferry's figure is `MoveReport::pause` (seal until the source hears the
//!   target opened the room); the baseline's is stop to the room answering on the target, with the
//!   same Q tells buffered meanwhile and delivered before the question. At the end, every timed
//!   iteration's Ferry pause, Ferry seal-to-answer (the baseline's own measure, taken on Ferry) and
//!   baseline handoff are printed as percentiles, with the ratios.
//! - `drain`: R rooms of 4 KiB drained off one node of three (`Node::relocate`), time to
//!   `Relocated`; the baseline hands the same rooms off to the two other nodes, 128 at a time (the
//!   concurrency of a Ferry drain), until each answers on its target.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use ferry::{RelocateMode, RelocateOptions, RelocateOutcome, SpotId};
use ferry_benches::rooms::{Cluster, RoomMsg, host_of, id_of, move_with_queue, spawn_handoff};
use ferry_benches::runtime;
use ferry_benches::timings::{histogram, micros, record};
use futures_util::StreamExt;
use hdrhistogram::Histogram;

const KIB: usize = 1024;

/// (state bytes, queued tells) of the `pause` bench.
const CASES: [(usize, usize); 9] = [
    (0, 0),
    (0, 100),
    (4 * KIB, 0),
    (4 * KIB, 100),
    (4 * KIB, 10_000),
    (64 * KIB, 0),
    (64 * KIB, 100),
    (KIB * KIB, 0),
    (KIB * KIB, 100),
];

fn label(bytes: usize, queued: usize) -> String {
    let size = match bytes {
        0 => "0B".to_string(),
        b if b >= KIB * KIB => format!("{}MiB", b / (KIB * KIB)),
        b => format!("{}KiB", b / KIB),
    };
    format!("{size}_q{queued}")
}

/// What one Ferry move measured.
struct Moved {
    /// `MoveReport::pause`.
    pause: Duration,
    /// From the seal until a question queued behind the tells is answered on the target.
    answered: Duration,
}

/// Moves the room to the other of two nodes with `queued` tells queued in it, and a question
/// behind them; the seal is the first thing the room does (see `move_with_queue`).
async fn ferry_move(cluster: &Cluster, id: &SpotId, queued: usize, count: &mut u64) -> Moved {
    let from = host_of(&cluster.nodes, id);
    let target = id_of(&cluster.nodes, 1 - from);
    let moved = move_with_queue(&cluster.nodes[from], &target, id, queued)
        .await
        .expect("the room moves");
    *count += queued as u64;
    assert_eq!(moved.count, *count, "every queued tell ran once");
    Moved {
        pause: moved.report.pause.expect("the target opened the room"),
        answered: moved.answered,
    }
}

/// The baseline on the other of two nodes, with `queued` tells buffered meanwhile.
async fn baseline_move(cluster: &Cluster, id: &SpotId, queued: usize, count: &mut u64) -> Duration {
    let from = host_of(&cluster.nodes, id);
    let buffered = vec![RoomMsg::Add(1); queued];
    *count += queued as u64;
    let (handoff, took) = spawn_handoff(
        cluster.store.clone(),
        cluster.nodes[from].clone(),
        cluster.nodes[1 - from].clone(),
        id.clone(),
        buffered,
    )
    .await
    .expect("the room is handed off");
    let answer = handoff.count;
    if answer != *count {
        // A tell sent from the old host right after the room was recreated elsewhere can be
        // dropped (see docs/benchmarks.md): counted and printed, not hidden.
        assert!(answer < *count, "no tell ran twice");
        LOST.fetch_add(*count - answer, Ordering::Relaxed);
        *count = answer;
    }
    took
}

/// Buffered tells the baseline lost, over every handoff.
static LOST: AtomicU64 = AtomicU64::new(0);

/// Every timed iteration of one case.
struct Hists {
    pause: Histogram<u64>,
    answered: Histogram<u64>,
    baseline: Histogram<u64>,
}

fn pause(c: &mut Criterion) {
    let rt = runtime();
    let cluster = rt.block_on(Cluster::start(2));
    let mut results: Vec<(String, Hists)> = Vec::new();
    let mut group = c.benchmark_group("pause");
    for (i, (bytes, queued)) in CASES.into_iter().enumerate() {
        let name = label(bytes, queued);
        let ferry_room = SpotId::new(format!("ferry-{i}")).expect("a valid id");
        let base_room = SpotId::new(format!("base-{i}")).expect("a valid id");
        rt.block_on(async {
            cluster.room(0, &ferry_room, bytes).await;
            cluster.room(0, &base_room, bytes).await;
        });
        let hists = Mutex::new(Hists {
            pause: histogram(),
            answered: histogram(),
            baseline: histogram(),
        });
        let mut count = 0;
        group.bench_function(BenchmarkId::new("ferry", &name), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let moved = ferry_move(&cluster, &ferry_room, queued, &mut count).await;
                        let mut h = hists.lock().expect("sound");
                        record(&mut h.pause, moved.pause);
                        record(&mut h.answered, moved.answered);
                        total += moved.pause;
                    }
                    total
                })
            })
        });
        let mut count = 0;
        group.bench_function(BenchmarkId::new("baseline", &name), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let took = baseline_move(&cluster, &base_room, queued, &mut count).await;
                        record(&mut hists.lock().expect("sound").baseline, took);
                        total += took;
                    }
                    total
                })
            })
        });
        results.push((name, hists.into_inner().expect("sound")));
    }
    group.finish();
    rt.block_on(cluster.shutdown());

    if results
        .iter()
        .all(|(_, h)| h.pause.is_empty() || h.baseline.is_empty())
    {
        // Filtered out on the command line: nothing was timed.
        return;
    }
    eprintln!(
        "\nroom move, every timed iteration (warm-up included), µs; baseline tells lost: {}",
        LOST.load(Ordering::Relaxed)
    );
    eprintln!(
        "{:<12} {:>7} | {:>9} {:>9} {:>9} | {:>9} {:>9} | {:>9} {:>9} {:>9} | {:>7} {:>7}",
        "case",
        "moves",
        "pause p50",
        "p99",
        "max",
        "answ p50",
        "p99",
        "base p50",
        "p99",
        "max",
        "p/b p50",
        "a/b p50"
    );
    for (name, h) in &results {
        if h.pause.is_empty() || h.baseline.is_empty() {
            // Filtered out on the command line: nothing was timed.
            continue;
        }
        eprintln!(
            "{:<12} {:>7} | {:>9.1} {:>9.1} {:>9.1} | {:>9.1} {:>9.1} | {:>9.1} {:>9.1} {:>9.1} | {:>7.3} {:>7.3}",
            name,
            h.pause.len(),
            micros(&h.pause, 0.5),
            micros(&h.pause, 0.99),
            h.pause.max() as f64 / 1_000.0,
            micros(&h.answered, 0.5),
            micros(&h.answered, 0.99),
            micros(&h.baseline, 0.5),
            micros(&h.baseline, 0.99),
            h.baseline.max() as f64 / 1_000.0,
            micros(&h.pause, 0.5) / micros(&h.baseline, 0.5),
            micros(&h.answered, 0.5) / micros(&h.baseline, 0.5),
        );
    }
}

fn room_ids(rooms: usize) -> Vec<SpotId> {
    (0..rooms)
        .map(|i| SpotId::new(format!("room-{i}")).expect("a valid id"))
        .collect()
}

/// A fresh cluster of three with `rooms` rooms of 4 KiB on the first node.
async fn loaded(rooms: &[SpotId]) -> Cluster {
    let cluster = Cluster::start(3).await;
    for id in rooms {
        cluster.room(0, id, 4 * KIB).await;
    }
    cluster
}

/// Drains every room off the first node; the time to `Relocated`.
async fn ferry_drain(rooms: &[SpotId]) -> Duration {
    let cluster = loaded(rooms).await;
    let start = Instant::now();
    let outcome = cluster.nodes[0]
        .relocate(RelocateOptions {
            mode: RelocateMode::PlannedMaintenance,
            deadline: Duration::from_secs(120),
        })
        .await;
    let took = start.elapsed();
    assert_eq!(
        outcome,
        RelocateOutcome::Relocated { moved: rooms.len() },
        "every room moved"
    );
    cluster.shutdown().await;
    took
}

/// Hands every room off the first node to the two others in turn, 128 at a time; the time until
/// the last answers on its target.
async fn baseline_drain(rooms: &[SpotId]) -> Duration {
    let cluster = loaded(rooms).await;
    let start = Instant::now();
    futures_util::stream::iter(rooms.iter().enumerate())
        .map(|(i, id)| {
            let handoff = spawn_handoff(
                cluster.store.clone(),
                cluster.nodes[0].clone(),
                cluster.nodes[1 + i % 2].clone(),
                id.clone(),
                Vec::new(),
            );
            async move {
                let (handoff, _) = handoff.await.expect("the room is handed off");
                assert_eq!(handoff.count, 0, "the room kept its count");
            }
        })
        .buffer_unordered(128)
        .collect::<Vec<()>>()
        .await;
    let took = start.elapsed();
    cluster.shutdown().await;
    took
}

fn drain(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("drain");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    for rooms in [1_000usize, 10_000] {
        let ids = room_ids(rooms);
        group.bench_function(BenchmarkId::new("ferry", rooms), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += ferry_drain(&ids).await;
                    }
                    total
                })
            })
        });
        group.bench_function(BenchmarkId::new("baseline", rooms), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += baseline_drain(&ids).await;
                    }
                    total
                })
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = pause, drain
}
criterion_main!(benches);
