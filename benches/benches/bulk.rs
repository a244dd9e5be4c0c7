//! A large capture across two nodes over real QUIC on loopback, beside bare quinn streaming as many
//! bytes between two endpoints of the same process.
//!
//! - `bulk/ferry`: a room whose state is 16 MiB moves to the other of two nodes (the direction
//!   alternates); criterion times the whole move, and the time its image streamed (the report's
//!   `precopy` and `transfer` phases, for the bytes `copied` before and after the seal) is printed
//!   as MiB/s at the end.
//! - `bulk/quinn`: 16 MiB in frames of 256 KiB (a capture's chunk) on one stream, read by a server
//!   task that acknowledges the end (see `ferry_benches::bare::QuinnBulk`).
//! - `bulk_alternating`: the same two, one by one (which one goes first swaps each time), so both
//!   see the same background load; the median throughput of each and their ratio are printed.

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use ferry::relocation::protocol::MoveEnd;
use ferry::{MoveReport, SpotId, UnitId};
use ferry_benches::bare::QuinnBulk;
use ferry_benches::rooms::{Cluster, host_of, id_of};
use ferry_benches::runtime;

const MIB: usize = 1024 * 1024;
/// The room's state, and what quinn streams.
const SIZE: usize = 16 * MIB;
/// A capture's chunk: one frame each.
const CHUNK: usize = 256 * 1024;

/// What one Ferry move took.
struct Moved {
    /// The whole move, as the bench saw it.
    took: Duration,
    /// The time its image streamed to the target: the pre-copy rounds while the room ran (each
    /// snapshot and the target's answer included), and the transfer after the seal.
    transfer: Duration,
    /// The bytes that streamed: the pre-copy rounds' and the seal's.
    bytes: u64,
}

/// Moves the room to the other of the two nodes.
async fn ferry_move(cluster: &Cluster, id: &SpotId) -> Moved {
    let from = host_of(&cluster.nodes, id);
    let target = id_of(&cluster.nodes, 1 - from);
    let unit = UnitId::Spot(id.clone());
    let start = Instant::now();
    let report: MoveReport = cluster.nodes[from]
        .move_unit(&unit, Some(target))
        .await
        .expect("the move starts");
    let took = start.elapsed();
    assert_eq!(report.end, MoveEnd::Moved, "the room moved");
    Moved {
        took,
        transfer: report.phases.precopy + report.phases.transfer,
        bytes: report.copied.before_seal + report.copied.after_seal,
    }
}

/// 16 MiB as chunks of 256 KiB.
fn chunks() -> Vec<Bytes> {
    let data: Bytes = (0..SIZE)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    (0..SIZE)
        .step_by(CHUNK)
        .map(|at| data.slice(at..at + CHUNK))
        .collect()
}

/// Streams the chunks; the time until the server acknowledged all of them.
async fn quinn_transfer(quinn: &mut QuinnBulk, chunks: &[Bytes]) -> Duration {
    let start = Instant::now();
    let read = quinn.transfer(chunks).await;
    let took = start.elapsed();
    assert_eq!(read, SIZE as u64, "every byte arrived");
    took
}

fn mib_per_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / MIB as f64 / took.as_secs_f64()
}

/// The median of what each sample measured.
fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// A cluster of two with the room on the first node, and the quinn pair.
async fn start(id: &SpotId) -> (Cluster, QuinnBulk) {
    let cluster = Cluster::start(2).await;
    cluster.room(0, id, SIZE).await;
    (cluster, QuinnBulk::start().await)
}

fn bulk(c: &mut Criterion) {
    let rt = runtime();
    let id = SpotId::new("bulk").expect("a valid id");
    let (cluster, mut quinn) = rt.block_on(start(&id));
    let chunks = chunks();
    let mut transfers = Vec::new();
    let mut group = c.benchmark_group("bulk");
    group
        .throughput(Throughput::Bytes(SIZE as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20);
    group.bench_function("ferry", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let moved = ferry_move(&cluster, &id).await;
                    transfers.push(mib_per_s(moved.bytes, moved.transfer));
                    total += moved.took;
                }
                total
            })
        })
    });
    group.bench_function("quinn", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += quinn_transfer(&mut quinn, &chunks).await;
                }
                total
            })
        })
    });
    group.finish();
    rt.block_on(async {
        cluster.shutdown().await;
        quinn.shutdown().await;
    });
    if !transfers.is_empty() {
        eprintln!(
            "\nbulk/ferry: image streamed in {} moves, median {:.0} MiB/s",
            transfers.len(),
            median(transfers)
        );
    }
}

/// Ferry's moves and quinn's transfers alternating (and swapping order each time), so both see the
/// same background load; prints the median throughput of each and their ratios.
fn bulk_alternating(c: &mut Criterion) {
    let rt = runtime();
    let id = SpotId::new("bulk").expect("a valid id");
    let (cluster, mut quinn) = rt.block_on(start(&id));
    let chunks = chunks();
    let (mut moves, mut transfers, mut quinns) = (Vec::new(), Vec::new(), Vec::new());
    let mut group = c.benchmark_group("bulk_alternating");
    group
        .throughput(Throughput::Bytes(2 * SIZE as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20);
    group.bench_function("ferry_and_quinn", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    for ferry_turn in [i % 2 == 0, i % 2 == 1] {
                        if ferry_turn {
                            let moved = ferry_move(&cluster, &id).await;
                            moves.push(mib_per_s(moved.bytes, moved.took));
                            transfers.push(mib_per_s(moved.bytes, moved.transfer));
                            total += moved.took;
                        } else {
                            let took = quinn_transfer(&mut quinn, &chunks).await;
                            quinns.push(mib_per_s(SIZE as u64, took));
                            total += took;
                        }
                    }
                }
                total
            })
        })
    });
    group.finish();
    rt.block_on(async {
        cluster.shutdown().await;
        quinn.shutdown().await;
    });
    if moves.is_empty() || quinns.is_empty() {
        // Filtered out on the command line: nothing was timed.
        return;
    }
    let samples = moves.len();
    let (moved, transfer, quinn) = (median(moves), median(transfers), median(quinns));
    eprintln!(
        "\nbulk, alternating (median of {samples} each): ferry image streamed {transfer:.0} MiB/s, \
         ferry whole move {moved:.0} MiB/s, quinn {quinn:.0} MiB/s; ratio ferry/quinn: image \
         streamed {:.2}, whole move {:.2}",
        transfer / quinn,
        moved / quinn
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = bulk, bulk_alternating
}
criterion_main!(benches);
