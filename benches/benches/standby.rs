//! What a confirmed standby adds to a request's reply: node A asks two counter rooms on node B
//! over real QUIC on loopback, one without a standby and one whose reply waits until its standby
//! (on a third node) acknowledged the checkpoint holding the turn. Their round trips alternate,
//! each one recorded; p50/p99/p99.9 of each and what confirmed mode adds are printed, beside the
//! room without a standby's round trip (one mesh round trip and a turn), which the target is
//! expressed in: added p99 under one mesh round trip plus 1 ms. Criterion's figure is the time of
//! one of each.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ferry_benches::runtime;
use ferry_benches::standby::Trio;
use ferry_benches::timings::{histogram, micros, record};

fn confirmed_reply(c: &mut Criterion) {
    let rt = runtime();
    let trio = rt.block_on(Trio::start());
    let mut plain = histogram();
    let mut confirmed = histogram();
    let mut group = c.benchmark_group("confirmed_reply");
    group.bench_function("plain_and_confirmed", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    for confirmed_turn in [i % 2 == 0, i % 2 == 1] {
                        let (room, hist) = if confirmed_turn {
                            (&trio.confirmed, &mut confirmed)
                        } else {
                            (&trio.plain, &mut plain)
                        };
                        let start = Instant::now();
                        black_box(trio.request(room).await);
                        let took = start.elapsed();
                        record(hist, took);
                        total += took;
                    }
                }
                total
            })
        })
    });
    group.finish();
    rt.block_on(trio.shutdown());

    if plain.is_empty() || confirmed.is_empty() {
        // Filtered out on the command line: nothing was timed.
        return;
    }
    eprintln!("\nrequest round trip to a room on another node, every timed iteration:");
    eprintln!(
        "{:<10} {:>10} {:>10} {:>10} {:>10}",
        "", "samples", "p50 µs", "p99 µs", "p99.9 µs"
    );
    for (name, hist) in [("none", &plain), ("confirmed", &confirmed)] {
        eprintln!(
            "{:<10} {:>10} {:>10.1} {:>10.1} {:>10.1}",
            name,
            hist.len(),
            micros(hist, 0.5),
            micros(hist, 0.99),
            micros(hist, 0.999)
        );
    }
    let added = micros(&confirmed, 0.99) - micros(&plain, 0.99);
    let allowed = micros(&plain, 0.99) + 1_000.0;
    eprintln!(
        "confirmed adds {:.1} µs at p50 and {added:.1} µs at p99 (ratio {:.2}); the target allows \
         one mesh round trip plus 1 ms: {allowed:.1} µs",
        micros(&confirmed, 0.5) - micros(&plain, 0.5),
        micros(&confirmed, 0.99) / micros(&plain, 0.99)
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = confirmed_reply
}
criterion_main!(benches);
