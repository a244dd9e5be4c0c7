//! Messaging across two nodes over real QUIC on loopback, each beside bare quinn doing the same work.
//!
//! Node A sends to a counter spot on node B; the baseline is a quinn endpoint pair on one stream with
//! frames of the same length (see `ferry_benches::bare`).
//!
//! - `cross_tell`: N tells, then one request to know they all ran.
//! - `cross_tell_alternating`: the same, Ferry's and quinn's batches alternating; the median
//!   throughput of each and their ratio are printed.
//! - `cross_request`: one request and its reply.
//! - `cross_request_percentiles`: Ferry's and quinn's round trips alternating, each one recorded;
//!   p50/p99/p99.9 of each are printed (criterion's figure is the time of one of each).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferry_benches::bare::QuinnPair;
use ferry_benches::cross::NodePair;
use ferry_benches::runtime;
use ferry_benches::timings::{histogram, micros, record};

const N: u64 = 10_000;

fn tell(c: &mut Criterion) {
    let rt = runtime();
    let pair = rt.block_on(NodePair::start());
    let mut quinn = rt.block_on(QuinnPair::start());
    let mut group = c.benchmark_group("cross_tell");
    group.throughput(Throughput::Elements(N));

    let mut expected = rt.block_on(pair.request(0));
    group.bench_function("ferry", |b| {
        b.iter(|| {
            rt.block_on(async {
                for _ in 0..N {
                    pair.tell(1);
                }
                expected += N;
                // Ordered after the tells: its answer counts all of them.
                assert_eq!(pair.request(0).await, expected, "every tell arrived");
            })
        })
    });

    let mut expected = rt.block_on(quinn.request(0));
    group.bench_function("quinn", |b| {
        b.iter(|| {
            rt.block_on(async {
                for _ in 0..N {
                    quinn.tell(1).await;
                }
                expected += N;
                assert_eq!(quinn.request(0).await, expected, "every tell arrived");
            })
        })
    });
    group.finish();

    rt.block_on(async {
        pair.shutdown().await;
        quinn.shutdown().await;
    });
}

/// Ferry's and quinn's batches of `N` tells alternating (and swapping order each time), so both see
/// the same background load; prints the median throughput of each and their ratio.
fn tell_alternating(c: &mut Criterion) {
    let rt = runtime();
    let pair = rt.block_on(NodePair::start());
    let mut quinn = rt.block_on(QuinnPair::start());
    let mut ferry_expected = rt.block_on(pair.request(0));
    let mut quinn_expected = rt.block_on(quinn.request(0));
    let (mut ferry_times, mut quinn_times) = (Vec::new(), Vec::new());
    let mut group = c.benchmark_group("cross_tell_alternating");
    group.throughput(Throughput::Elements(2 * N));
    group.bench_function("ferry_and_quinn", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    for ferry_turn in [i % 2 == 0, i % 2 == 1] {
                        let start = Instant::now();
                        if ferry_turn {
                            for _ in 0..N {
                                pair.tell(1);
                            }
                            ferry_expected += N;
                            assert_eq!(pair.request(0).await, ferry_expected, "every tell arrived");
                        } else {
                            for _ in 0..N {
                                quinn.tell(1).await;
                            }
                            quinn_expected += N;
                            assert_eq!(
                                quinn.request(0).await,
                                quinn_expected,
                                "every tell arrived"
                            );
                        }
                        let took = start.elapsed();
                        if ferry_turn {
                            ferry_times.push(took);
                        } else {
                            quinn_times.push(took);
                        }
                        total += took;
                    }
                }
                total
            })
        })
    });
    group.finish();
    rt.block_on(async {
        pair.shutdown().await;
        quinn.shutdown().await;
    });
    if ferry_times.is_empty() || quinn_times.is_empty() {
        // Filtered out on the command line: nothing was timed.
        return;
    }
    let rate = |times: &mut Vec<Duration>| {
        times.sort();
        N as f64 / times[times.len() / 2].as_secs_f64() / 1e6
    };
    let (ferry, quinn) = (rate(&mut ferry_times), rate(&mut quinn_times));
    eprintln!(
        "\ncross-node tells, alternating batches of {N} (median of {} each): ferry {ferry:.2} M msg/s, \
         quinn {quinn:.2} M msg/s, ratio ferry/quinn {:.2}",
        ferry_times.len(),
        ferry / quinn
    );
}

fn request(c: &mut Criterion) {
    let rt = runtime();
    let pair = rt.block_on(NodePair::start());
    let mut quinn = rt.block_on(QuinnPair::start());
    let mut group = c.benchmark_group("cross_request");
    group.bench_function("ferry", |b| {
        b.iter(|| black_box(rt.block_on(pair.request(1))))
    });
    group.bench_function("quinn", |b| {
        b.iter(|| black_box(rt.block_on(quinn.request(1))))
    });
    group.finish();
    rt.block_on(async {
        pair.shutdown().await;
        quinn.shutdown().await;
    });
}

fn request_percentiles(c: &mut Criterion) {
    let rt = runtime();
    let pair = rt.block_on(NodePair::start());
    let mut quinn = rt.block_on(QuinnPair::start());
    let mut ferry_hist = histogram();
    let mut quinn_hist = histogram();
    let mut group = c.benchmark_group("cross_request_percentiles");
    // Ferry's and quinn's round trips alternate (and swap order each time), so both see the same
    // background load; criterion's figure here is the time of one of each.
    group.bench_function("ferry_and_quinn", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    for ferry_turn in [i % 2 == 0, i % 2 == 1] {
                        let start = Instant::now();
                        if ferry_turn {
                            black_box(pair.request(1).await);
                        } else {
                            black_box(quinn.request(1).await);
                        }
                        let took = start.elapsed();
                        let hist = if ferry_turn {
                            &mut ferry_hist
                        } else {
                            &mut quinn_hist
                        };
                        record(hist, took);
                        total += took;
                    }
                }
                total
            })
        })
    });
    group.finish();
    rt.block_on(async {
        pair.shutdown().await;
        quinn.shutdown().await;
    });

    if ferry_hist.is_empty() || quinn_hist.is_empty() {
        // Filtered out on the command line: nothing was timed.
        return;
    }
    eprintln!("\ncross-node request round trip, every timed iteration (warm-up included):");
    eprintln!(
        "{:<6} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "", "samples", "p50 µs", "p99 µs", "p99.9 µs", "max µs"
    );
    for (name, hist) in [("ferry", &ferry_hist), ("quinn", &quinn_hist)] {
        eprintln!(
            "{:<6} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            name,
            hist.len(),
            micros(hist, 0.5),
            micros(hist, 0.99),
            micros(hist, 0.999),
            hist.max() as f64 / 1_000.0
        );
    }
    eprintln!(
        "ratio ferry/quinn: p50 {:.2}, p99 {:.2}, p99.9 {:.2}",
        micros(&ferry_hist, 0.5) / micros(&quinn_hist, 0.5),
        micros(&ferry_hist, 0.99) / micros(&quinn_hist, 0.99),
        micros(&ferry_hist, 0.999) / micros(&quinn_hist, 0.999)
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = tell, tell_alternating, request, request_percentiles
}
criterion_main!(benches);
