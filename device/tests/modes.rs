//! The two execution modes over whole fabrics of boards running the traffic generator.

use myri_device::board::{Board, BoardConfig, bring_up};
use myri_device::fabric::topology::line;
use myri_device::fabric::{CableConfig, Fabric, FabricBuilder, FaultConfig, LinkModel, SwitchSize};
use myri_device::run::run_threaded;
use myri_device::sched::{Outcome, Sim};
use myri_device::time::Time;
use myri_device::traffic::TrafficNode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

fn nodes(
    seed: u64,
    boards: usize,
    packets: u64,
    faults: FaultConfig,
    model: LinkModel,
) -> (Arc<Fabric>, Vec<TrafficNode>) {
    let mut b = FabricBuilder::new(seed);
    let ports = line(
        &mut b,
        boards,
        SwitchSize::Eight,
        CableConfig::symmetric(model, faults),
    )
    .unwrap();
    let fabric = Arc::new(b.build());
    let left = Arc::new(AtomicU64::new(boards as u64));
    let nodes = ports
        .iter()
        .enumerate()
        .map(|(i, &port)| {
            let mut board = Board::new(BoardConfig::pci64b(i as u32));
            board.attach_link(fabric.clone(), port);
            bring_up(&mut board, Time::ZERO, &[]).unwrap();
            let peers = ports
                .iter()
                .filter(|&&p| p != port)
                .map(|&p| fabric.route(port, p).unwrap())
                .collect();
            TrafficNode::new(
                i as u32,
                board,
                peers,
                packets,
                256,
                Duration::from_micros(2),
                seed,
                left.clone(),
            )
        })
        .collect();
    (fabric, nodes)
}

fn run_sim(
    seed: u64,
    faults: FaultConfig,
) -> (
    u64,
    Vec<myri_device::traffic::TrafficStats>,
    myri_device::fabric::FabricCounters,
) {
    let (fabric, nodes) = nodes(seed, 12, 300, faults, LinkModel::SAN_1280);
    let mut sim = Sim::new(fabric.clone());
    for n in nodes {
        sim.add(n);
    }
    assert_eq!(sim.run_until(Time::from_micros(10_000_000)), Outcome::Idle);
    let stats = sim.nodes().iter().map(|n| n.stats()).collect();
    (fabric.trace_hash(), stats, fabric.counters())
}

#[test]
fn every_frame_is_accounted_for_under_the_scheduler() {
    let faults = FaultConfig {
        drop: 0.02,
        corrupt: 0.01,
        duplicate: 0.02,
        reorder: 0.02,
        ..Default::default()
    };
    let (_, stats, c) = run_sim(7, faults);
    let sent: u64 = stats.iter().map(|s| s.sent).sum();
    let received: u64 = stats.iter().map(|s| s.received).sum();
    assert_eq!(sent, 12 * 300);
    assert_eq!(c.sent, sent);
    assert_eq!(
        c.delivered,
        c.sent - c.dropped + c.duplicated,
        "fabric: nothing unaccounted"
    );
    assert_eq!(
        received, c.delivered,
        "boards received every delivered frame, intact"
    );
    assert!(
        stats
            .iter()
            .all(|s| s.corrupt == 0 && s.foreign == 0 && s.overruns == 0)
    );
    assert!(c.corrupted > 0 && c.duplicated > 0 && c.link_drops > 0);
}

#[test]
fn the_same_seed_replays_exactly_and_another_does_not() {
    let faults = FaultConfig {
        drop: 0.05,
        corrupt: 0.02,
        duplicate: 0.02,
        reorder: 0.05,
        jitter: Duration::from_micros(1),
        ..Default::default()
    };
    let a = run_sim(42, faults);
    let b = run_sim(42, faults);
    let c = run_sim(43, faults);
    assert_eq!(a.0, b.0, "same seed, same trace hash");
    assert_eq!(a.1, b.1);
    assert_eq!(a.2, b.2);
    assert_ne!(a.0, c.0, "another seed, another trace");
}

#[test]
fn threaded_mode_delivers_everything_on_a_clean_fabric() {
    let (fabric, nodes) = nodes(1, 2, 500, FaultConfig::default(), LinkModel::default());
    let (nodes, finished) = run_threaded(&fabric, nodes, Duration::from_secs(60));
    assert!(finished, "all nodes finished");
    let sent: u64 = nodes.iter().map(|n| n.stats().sent).sum();
    let received: u64 = nodes.iter().map(|n| n.stats().received).sum();
    assert_eq!((sent, received), (1000, 1000));
}
