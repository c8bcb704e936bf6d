//! The unreliable channel API's ping-pong (8 B and 8 KiB) and the seed's 200 x 8 KiB
//! stream, inline and threaded, each next to the plain shared-memory-ring reference
//! measured in the same run: what matters is the ratio.
//!
//! `cargo bench -p myri-benches --bench channel`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use myri_board_bench::Reference;
use myri_board_bench::raw::{self, ExecMode, Setup};
use myri_board_bench::reference::RingReference;
use std::time::Duration;

fn pingpong(c: &mut Criterion) {
    let mut g = c.benchmark_group("pingpong");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    let mut ring = RingReference::new();
    for size in [8usize, 8192] {
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(
            BenchmarkId::new("ring-reference", size),
            &size,
            |b, &size| b.iter_custom(|iters| ring.pingpong_round(size, iters).iter().sum()),
        );
        for mode in [ExecMode::Inline, ExecMode::Threaded] {
            let setup = Setup {
                mode,
                ..Setup::default()
            };
            g.bench_with_input(
                BenchmarkId::new(format!("stack-{}", mode.name()), size),
                &size,
                |b, &size| {
                    b.iter_custom(|iters| {
                        raw::pingpong(&setup, size, iters, None)
                            .expect("pingpong")
                            .total_rtt
                    })
                },
            );
        }
    }
    g.finish();
}

fn stream(c: &mut Criterion) {
    let mut g = c.benchmark_group("stream_200x8KiB");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Bytes(200 * 8192));
    let mut ring = RingReference::new();
    g.bench_function("ring-reference", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| Duration::from_secs_f64(200.0 * 8192.0 / ring.stream_round(8192, 200, 8)))
                .sum()
        })
    });
    for mode in [ExecMode::Inline, ExecMode::Threaded] {
        let setup = Setup {
            mode,
            ..Setup::default()
        };
        g.bench_function(format!("stack-{}", mode.name()), |b| {
            b.iter_custom(|iters| {
                raw::stream(&setup, 8192, 200, 8, iters as u32, None)
                    .expect("stream")
                    .total_time
            })
        });
    }
    g.finish();
}

criterion_group!(benches, pingpong, stream);
criterion_main!(benches);
