//! Messaging across two nodes over real QUIC on loopback, each beside bare quinn doing the same work.
//!
//! Node A sends to a counter spot on node B; the baseline is a quinn endpoint pair on one stream with
//! frames of the same length (see `ferry_benches::bare`).
//!
//! - `cross_tell`: N tells, then one request to know they all ran.
//! - `cross_request`: one request and its reply.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferry_benches::bare::QuinnPair;
use ferry_benches::cross::NodePair;
use ferry_benches::runtime;

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

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = tell, request
}
criterion_main!(benches);
