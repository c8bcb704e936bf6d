//! RPP against the `kcp` crate over the same seeded lossy link (5 µs one way, 1 GB/s, 8 KiB
//! MTU, a window of 256 packets) at 0, 1, 5 and 20% loss each way: the goodput of a
//! 16 MiB transfer in 64 KiB messages, and the round trip of an 8-byte ping-pong.
//!
//! Time on the link is virtual, so the protocol figures (bytes per virtual second,
//! virtual microseconds) come first, as a table computed over three seeds; criterion
//! then measures the CPU time each run takes (seed 1), RPP next to KCP. KCP runs in fast
//! mode with each of four clock ticks, and each cell compares RPP with KCP's best tick
//! there (see `myri_benches::rpp_kcp` for why and for the other fairness rules).
//!
//! `cargo bench -p myri-benches --bench rpp_kcp`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use myri_benches::rpp_kcp::{
    Channel, KcpTick, PingPongReport, Protocol, TransferReport, pingpong, source, transfer,
};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// Loss each way, per packet.
const LOSSES: [f64; 4] = [0.0, 0.01, 0.05, 0.2];
/// Seeds the protocol table averages over (criterion times seed 1).
const SEEDS: [u64; 3] = [1, 2, 3];
/// Bytes of the bulk transfer.
const TRANSFER_BYTES: usize = 16 << 20;
/// Bytes per message of the bulk transfer: 9 packets each for both protocols, well
/// under KCP's limit of 127 fragments per message.
const MESSAGE_BYTES: usize = 64 << 10;
/// Ping-pong round trips measured per run, after a warm-up that is not counted.
const EXCHANGES: usize = 2000;
const WARMUP: usize = 20;

fn protocols() -> impl Iterator<Item = Protocol> {
    std::iter::once(Protocol::Rpp).chain(KcpTick::ALL.into_iter().map(Protocol::Kcp))
}

/// Goodput over all seeds: total bytes over total virtual time.
fn goodput(protocol: Protocol, loss: f64, data: &Rc<[u8]>) -> f64 {
    let runs: Vec<TransferReport> = SEEDS
        .iter()
        .map(|&seed| {
            transfer(protocol, &Channel::cluster(loss, seed), data, MESSAGE_BYTES)
                .unwrap_or_else(|e| panic!("{} at {loss}: {e}", protocol.name()))
        })
        .collect();
    let bytes: u64 = runs.iter().map(|r| r.bytes).sum();
    let time: Duration = runs.iter().map(|r| r.virtual_time).sum();
    bytes as f64 / time.as_secs_f64()
}

/// Mean and 99th-percentile round trip, each averaged over the seeds, in microseconds.
fn latency(protocol: Protocol, loss: f64) -> (f64, f64) {
    let runs: Vec<PingPongReport> = SEEDS
        .iter()
        .map(|&seed| {
            pingpong(protocol, &Channel::cluster(loss, seed), EXCHANGES, WARMUP)
                .unwrap_or_else(|e| panic!("{} at {loss}: {e}", protocol.name()))
        })
        .collect();
    let n = runs.len() as f64;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (
        runs.iter().map(|r| us(r.mean)).sum::<f64>() / n,
        runs.iter().map(|r| us(r.p99)).sum::<f64>() / n,
    )
}

fn pct(loss: f64) -> String {
    format!("{}%", loss * 100.0)
}

/// The best KCP tick of a cell, by a score where higher is better.
fn best_kcp(score: impl Fn(Protocol) -> f64) -> Protocol {
    // On a tie the finer tick wins.
    KcpTick::ALL
        .into_iter()
        .map(Protocol::Kcp)
        .reduce(|best, p| if score(p) > score(best) { p } else { best })
        .expect("ticks")
}

/// Prints the protocol table and returns, per loss, KCP's best tick for goodput and
/// for latency.
fn protocol_table(data: &Rc<[u8]>) -> Vec<(f64, Protocol, Protocol)> {
    let mut best = Vec::new();
    println!();
    println!(
        "RPP vs KCP, 16 MiB in 64 KiB messages and 8 B ping-pong; link 5 us one way, 1 GB/s, \
         MTU 8192, window 256 packets; seeds {SEEDS:?}"
    );
    println!(
        "{:>5} | {:>13} {:>13} {:>13} {:>13} {:>13} | {:>13} {:>10} {:>7}",
        "loss", "rpp", "kcp/1us", "kcp/10us", "kcp/100us", "kcp/1ms", "kcp best", "", "rpp/kcp"
    );
    println!("goodput, MB per virtual second (10^6 B/s):");
    let mut lossless = 0.0f64;
    for loss in LOSSES {
        let g: HashMap<Protocol, f64> = protocols()
            .map(|p| (p, goodput(p, loss, data) / 1e6))
            .collect();
        if loss == 0.0 {
            lossless = g.values().copied().fold(0.0, f64::max);
        }
        let kcp = best_kcp(|p| g[&p]);
        println!(
            "{:>5} | {:>13.1} {:>13.1} {:>13.1} {:>13.1} {:>13.1} | {:>13.1} {:>10} {:>7.2}",
            pct(loss),
            g[&Protocol::Rpp],
            g[&Protocol::Kcp(KcpTick::Micros1)],
            g[&Protocol::Kcp(KcpTick::Micros10)],
            g[&Protocol::Kcp(KcpTick::Micros100)],
            g[&Protocol::Kcp(KcpTick::Millis1)],
            g[&kcp],
            kcp.name(),
            g[&Protocol::Rpp] / g[&kcp],
        );
        best.push((loss, kcp, kcp));
    }
    println!(
        "(the link's ceiling at loss p is about the lossless goodput times 1 - p: {})",
        LOSSES
            .iter()
            .map(|&p| format!("{:.0} at {}", lossless * (1.0 - p), pct(p)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("8 B ping-pong round trip, virtual us, mean (p99):");
    for (loss, _, best_latency) in &mut best {
        let l: HashMap<Protocol, (f64, f64)> =
            protocols().map(|p| (p, latency(p, *loss))).collect();
        let kcp = best_kcp(|p| -l[&p].0);
        let cell = |p: Protocol| format!("{:.1}({:.0})", l[&p].0, l[&p].1);
        println!(
            "{:>5} | {:>13} {:>13} {:>13} {:>13} {:>13} | {:>13} {:>10} {:>7.2}",
            pct(*loss),
            cell(Protocol::Rpp),
            cell(Protocol::Kcp(KcpTick::Micros1)),
            cell(Protocol::Kcp(KcpTick::Micros10)),
            cell(Protocol::Kcp(KcpTick::Micros100)),
            cell(Protocol::Kcp(KcpTick::Millis1)),
            cell(kcp),
            kcp.name(),
            l[&Protocol::Rpp].0 / l[&kcp].0,
        );
        *best_latency = kcp;
    }
    println!(
        "(goodput ratio above 1 and latency ratio below 1 favour RPP; target: goodput at 5% >= 2x)"
    );
    println!();
    best
}

fn rpp_vs_kcp(c: &mut Criterion) {
    let data = source(TRANSFER_BYTES);
    let best = protocol_table(&data);

    let mut g = c.benchmark_group("rpp_kcp_transfer_16MiB");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Bytes(TRANSFER_BYTES as u64));
    for &(loss, kcp, _) in &best {
        let channel = Channel::cluster(loss, SEEDS[0]);
        for protocol in [Protocol::Rpp, kcp] {
            g.bench_with_input(
                BenchmarkId::new(protocol.name(), pct(loss)),
                &channel,
                |b, ch| b.iter(|| transfer(protocol, ch, &data, MESSAGE_BYTES).expect("transfer")),
            );
        }
    }
    g.finish();

    let mut g = c.benchmark_group("rpp_kcp_pingpong_8B");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements((EXCHANGES + WARMUP) as u64));
    for &(loss, _, kcp) in &best {
        let channel = Channel::cluster(loss, SEEDS[0]);
        for protocol in [Protocol::Rpp, kcp] {
            g.bench_with_input(
                BenchmarkId::new(protocol.name(), pct(loss)),
                &channel,
                |b, ch| b.iter(|| pingpong(protocol, ch, EXCHANGES, WARMUP).expect("pingpong")),
            );
        }
    }
    g.finish();
}

criterion_group!(benches, rpp_vs_kcp);
criterion_main!(benches);
