use super::topology::{line, star};
use super::*;
use crate::wire::{Frame, Route, TYPE_CRL};
use std::time::Duration;

fn body(n: u32) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    Frame::new_unchecked(&mut b[..]).set_packet_type(TYPE_CRL);
    b[2..6].copy_from_slice(&n.to_be_bytes());
    b
}

fn send(f: &Fabric, now: Time, from: PortId, to: PortId, n: u32) {
    let route = f.route(from, to).expect("reachable");
    f.transmit(now, from, Packet::build(&route, &body(n)).unwrap())
        .unwrap();
}

fn drain(f: &Fabric, now: Time, at: PortId) -> Vec<u32> {
    std::iter::from_fn(|| f.receive(now, at))
        .map(|a| u32::from_be_bytes(a.packet.contents()[2..6].try_into().unwrap()))
        .collect()
}

/// Two hosts on one 8-port switch.
fn one_switch(seed: u64, cable: CableConfig) -> (Fabric, Vec<PortId>) {
    let mut b = FabricBuilder::new(seed);
    let hosts = star(&mut b, 2, SwitchSize::Eight, cable).unwrap();
    (b.build(), hosts)
}

#[test]
fn a_packet_crosses_one_switch_by_source_route() {
    let (f, h) = one_switch(1, CableConfig::default());
    assert_eq!(
        f.route(h[0], h[1]).unwrap(),
        Route::from_ports(&[1]).unwrap()
    );
    send(&f, Time::ZERO, h[0], h[1], 42);
    let a = f.receive(Time::ZERO, h[1]).unwrap();
    assert_eq!(
        a.packet.contents(),
        &body(42)[..],
        "the route byte was consumed"
    );
    assert!(a.packet.crc_ok(), "and the CRC recomputed");
    assert_eq!(f.counters().delivered, 1);
}

#[test]
fn a_packet_crosses_two_switches() {
    let mut b = FabricBuilder::new(1);
    let s0 = b.add_switch(SwitchSize::Sixteen);
    let s1 = b.add_switch(SwitchSize::Eight);
    let (a, z) = (b.add_host(), b.add_host());
    b.connect(
        Endpoint::Host(a),
        Endpoint::Switch(s0, 3),
        CableConfig::default(),
    )
    .unwrap();
    b.connect(
        Endpoint::Switch(s0, 15),
        Endpoint::Switch(s1, 0),
        CableConfig::default(),
    )
    .unwrap();
    b.connect(
        Endpoint::Switch(s1, 7),
        Endpoint::Host(z),
        CableConfig::default(),
    )
    .unwrap();
    let f = b.build();
    assert_eq!(f.route(a, z).unwrap().to_string(), "15.7");
    assert_eq!(f.route(z, a).unwrap().to_string(), "0.3");
    send(&f, Time::ZERO, a, z, 7);
    send(&f, Time::ZERO, z, a, 8);
    assert_eq!(drain(&f, Time::ZERO, z), vec![7]);
    assert_eq!(drain(&f, Time::ZERO, a), vec![8]);
}

#[test]
fn a_direct_cable_needs_no_route() {
    let mut b = FabricBuilder::new(1);
    let (x, y) = (b.add_host(), b.add_host());
    b.connect(Endpoint::Host(x), Endpoint::Host(y), CableConfig::default())
        .unwrap();
    let f = b.build();
    assert_eq!(f.route(x, y), Some(Route::direct()));
    send(&f, Time::ZERO, x, y, 1);
    assert_eq!(drain(&f, Time::ZERO, y), vec![1]);
}

#[test]
fn bad_route_bytes_are_dropped_and_counted() {
    let (f, h) = one_switch(1, CableConfig::default());
    // Port 10 on an 8-port switch; port 5 exists but has no cable; not a hop byte; no
    // route at all (the type field arrives at the switch).
    for route in [vec![0x8A], vec![0x85], vec![0x41], vec![]] {
        let mut contents = route.clone();
        contents.extend_from_slice(&body(0));
        f.transmit(Time::ZERO, h[0], Packet::seal(contents).unwrap())
            .unwrap();
    }
    assert_eq!(f.receive(Time::ZERO, h[1]).map(|a| a.id), None);
    assert_eq!(f.switch_bad_routes(SwitchId(0)), Some(4));
    let c = f.counters();
    assert_eq!((c.sent, c.delivered, c.bad_routes, c.dropped), (4, 0, 4, 4));
}

#[test]
fn the_receiving_port_drops_bad_crcs() {
    let (f, h) = one_switch(1, CableConfig::default());
    let mut p = Packet::build(&Route::from_ports(&[1]).unwrap(), &body(3)).unwrap();
    p.flip_bit(100);
    f.transmit(Time::ZERO, h[0], p).unwrap();
    send(&f, Time::ZERO, h[0], h[1], 4);
    assert_eq!(drain(&f, Time::ZERO, h[1]), vec![4]);
    assert_eq!(f.port_counters(h[1]).unwrap().crc_errors, 1);
}

#[test]
fn latency_and_bandwidth_shape_arrival_times() {
    let model = LinkModel {
        latency: Duration::from_micros(1),
        bytes_per_sec: 100_000_000,
    };
    let (f, h) = one_switch(
        1,
        CableConfig {
            model,
            ..Default::default()
        },
    );
    send(&f, Time::ZERO, h[0], h[1], 1);
    // 66 bytes on the first link (route + 64 + crc), 65 on the second: 0.66 us each.
    let head = f.next_arrival(h[1]).unwrap();
    assert_eq!(
        head,
        Time::from_micros(2),
        "cut-through: the head pays only latency"
    );
    assert!(
        f.receive(Time::from_nanos(1_999), h[1]).is_none(),
        "not before its head arrives"
    );
    let a = f.receive(head, h[1]).unwrap();
    assert_eq!(a.tail, Time::from_nanos(2_660));
    // A second packet sent at once queues behind the first on the wire.
    send(&f, Time::ZERO, h[0], h[1], 2);
    send(&f, Time::ZERO, h[0], h[1], 3);
    let heads: Vec<Time> = std::iter::from_fn(|| f.receive(Time::from_micros(100), h[1]))
        .map(|a| a.head)
        .collect();
    assert_eq!(heads.len(), 2);
    assert!(heads[1] > heads[0]);
}

#[test]
fn unconnected_and_unknown_ports_are_refused() {
    let mut b = FabricBuilder::new(1);
    let lonely = b.add_host();
    let f = b.build();
    let p = Packet::build(&Route::direct(), &body(0)).unwrap();
    assert_eq!(
        f.transmit(Time::ZERO, lonely, p.clone()),
        Err(TransmitError::Unconnected(lonely))
    );
    assert_eq!(
        f.transmit(Time::ZERO, PortId(9), p),
        Err(TransmitError::NoSuchPort(PortId(9)))
    );
    assert_eq!(f.port_counters(lonely).unwrap().unconnected, 1);
    assert!(f.receive(Time::ZERO, PortId(9)).is_none());
}

#[test]
fn the_builder_refuses_impossible_topologies() {
    let mut b = FabricBuilder::new(1);
    let s = b.add_switch(SwitchSize::Eight);
    let h = b.add_host();
    let c = CableConfig::default();
    assert_eq!(
        b.connect(Endpoint::Host(h), Endpoint::Host(h), c),
        Err(TopologyError::SelfLoop(Endpoint::Host(h)))
    );
    assert!(matches!(
        b.connect(Endpoint::Host(h), Endpoint::Switch(s, 8), c),
        Err(TopologyError::NoSuchEndpoint(_))
    ));
    assert!(matches!(
        b.connect(Endpoint::Host(PortId(5)), Endpoint::Switch(s, 0), c),
        Err(TopologyError::NoSuchEndpoint(_))
    ));
    b.connect(Endpoint::Host(h), Endpoint::Switch(s, 0), c)
        .unwrap();
    assert!(matches!(
        b.connect(Endpoint::Switch(s, 0), Endpoint::Switch(s, 1), c),
        Err(TopologyError::AlreadyCabled(_))
    ));
    let bad = CableConfig::symmetric(LinkModel::default(), FaultConfig::rates(2.0, 0.0, 0.0, 0.0));
    assert!(matches!(
        b.connect(Endpoint::Switch(s, 1), Endpoint::Switch(s, 2), bad),
        Err(TopologyError::Faults(_))
    ));
}

#[test]
fn line_topologies_route_everyone_to_everyone() {
    let mut b = FabricBuilder::new(1);
    let hosts = line(&mut b, 40, SwitchSize::Eight, CableConfig::default()).unwrap();
    let f = b.build();
    for &x in &hosts {
        for &y in &hosts {
            if x != y {
                send(&f, Time::ZERO, x, y, y.0);
            }
        }
    }
    for &y in &hosts {
        let got = drain(&f, Time::ZERO, y);
        assert_eq!(got.len(), hosts.len() - 1);
        assert!(got.iter().all(|&n| n == y.0));
    }
    assert_eq!(
        f.route(hosts[0], hosts[39]).unwrap().len(),
        7,
        "seven switches in a line"
    );
}

/// Sends `n` packets between two hosts over one switch whose cables have `faults` on the
/// path's first link, and returns the fabric for inspection.
fn blast(seed: u64, faults: FaultConfig, n: u32) -> (Fabric, Vec<u32>) {
    let mut b = FabricBuilder::new(seed);
    b.queue_limit(1 << 20);
    let s = b.add_switch(SwitchSize::Eight);
    let (x, y) = (b.add_host(), b.add_host());
    b.connect(
        Endpoint::Host(x),
        Endpoint::Switch(s, 0),
        CableConfig {
            faults_ab: faults,
            ..Default::default()
        },
    )
    .unwrap();
    b.connect(
        Endpoint::Switch(s, 1),
        Endpoint::Host(y),
        CableConfig::default(),
    )
    .unwrap();
    let f = b.build();
    let mut got = Vec::new();
    for i in 0..n {
        let now = Time::from_micros(u64::from(i));
        send(&f, now, x, y, i);
        got.extend(drain(&f, now, y));
    }
    got.extend(drain(&f, Time::MAX, y));
    (f, got)
}

/// True if `observed` of `n` trials is within 5 standard deviations of rate `p`.
fn within(observed: u64, n: u64, p: f64) -> bool {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt().max(1.0);
    (observed as f64 - mean).abs() <= 5.0 * sd
}

#[test]
fn each_fault_does_what_it_says_at_its_rate() {
    let n = 20_000u32;
    let (f, got) = blast(11, FaultConfig::rates(0.1, 0.0, 0.0, 0.0), n);
    let c = f.counters();
    assert!(
        within(c.link_drops, n.into(), 0.1),
        "drops {}",
        c.link_drops
    );
    assert_eq!(got.len() as u64, u64::from(n) - c.link_drops);
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "loss alone keeps order"
    );

    let (f, got) = blast(12, FaultConfig::rates(0.0, 0.05, 0.0, 0.0), n);
    let c = f.counters();
    assert!(
        within(c.corrupted, n.into(), 0.05),
        "corrupted {}",
        c.corrupted
    );
    // A flipped route byte is caught by the switch (or sends the packet back to its
    // sender, whose port then sees the bad CRC); every other flip by the receiving port.
    assert!(c.bad_routes > 0);
    assert_eq!(
        c.crc_errors + c.bad_routes,
        c.corrupted,
        "every single-bit error is caught"
    );
    assert_eq!(got.len() as u64, u64::from(n) - c.corrupted);

    let (f, got) = blast(13, FaultConfig::rates(0.0, 0.0, 0.05, 0.0), n);
    let c = f.counters();
    assert!(
        within(c.duplicated, n.into(), 0.05),
        "duplicated {}",
        c.duplicated
    );
    assert_eq!(got.len() as u64, u64::from(n) + c.duplicated);
    let dups = got.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    assert_eq!(
        dups, c.duplicated,
        "each duplicate arrives right after its original"
    );

    let reorder = FaultConfig {
        reorder: 0.05,
        reorder_delay: Duration::from_micros(3),
        ..Default::default()
    };
    let (f, got) = blast(14, reorder, n);
    let c = f.counters();
    assert!(
        within(c.reordered, n.into(), 0.05),
        "reordered {}",
        c.reordered
    );
    assert_eq!(got.len(), n as usize, "reordering loses nothing");
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..n).collect::<Vec<_>>());
    let overtaken = got.windows(2).filter(|w| w[0] > w[1]).count() as u64;
    assert!(
        overtaken > c.reordered / 2,
        "held packets are overtaken ({overtaken} of {})",
        c.reordered
    );

    let jitter = FaultConfig {
        delay: Duration::from_micros(5),
        jitter: Duration::from_micros(4),
        ..Default::default()
    };
    let mut b = FabricBuilder::new(15);
    let hosts = star(
        &mut b,
        2,
        SwitchSize::Eight,
        CableConfig::symmetric(LinkModel::default(), jitter),
    )
    .unwrap();
    let f = b.build();
    for i in 0..1000 {
        send(&f, Time::from_micros(i * 100), hosts[0], hosts[1], 0);
        let at = f.next_arrival(hosts[1]).unwrap();
        let d = at.saturating_since(Time::from_micros(i * 100));
        assert!(
            d >= Duration::from_micros(10) && d <= Duration::from_micros(18),
            "two links of 5-9 us: {d:?}"
        );
        f.receive(Time::MAX, hosts[1]).unwrap();
    }
}

#[test]
fn burst_loss_and_first_after_init() {
    let burst = FaultConfig {
        burst: Some(BurstLoss {
            enter: 0.02,
            exit: 0.25,
            loss: 1.0,
        }),
        ..Default::default()
    };
    let (f, got) = blast(21, burst, 20_000);
    let drops = f.counters().link_drops;
    let expected = BurstLoss {
        enter: 0.02,
        exit: 0.25,
        loss: 1.0,
    }
    .mean_loss();
    assert!((drops as f64 / 20_000.0 - expected).abs() < 0.02, "{drops}");
    // Losses come in runs: count gaps in the sequence.
    let gaps = got.windows(2).filter(|w| w[1] != w[0] + 1).count() as u64;
    assert!(gaps * 2 < drops, "{gaps} gaps for {drops} drops: bursts");

    let first = FaultConfig {
        drop_first_after_init: true,
        ..Default::default()
    };
    let (f, got) = blast(22, first, 10);
    assert_eq!(
        got,
        (1..10).collect::<Vec<_>>(),
        "only the very first packet is lost"
    );
    assert_eq!(f.link_counters(LinkId(0)).unwrap().dropped_first, 1);
}

#[test]
fn link_down_drops_and_link_up_resumes() {
    let cable = CableConfig::symmetric(
        LinkModel::default(),
        FaultConfig {
            drop_first_after_init: true,
            ..Default::default()
        },
    );
    let (f, h) = one_switch(3, cable);
    // Packet 0 initializes the first link, packet 1 the second; packet 2 gets through.
    for i in 0..3 {
        send(&f, Time::ZERO, h[0], h[1], i);
    }
    assert_eq!(drain(&f, Time::ZERO, h[1]), vec![2]);
    f.set_cable_up(CableId(0), false, Time::ZERO);
    assert!(!f.port_link_up(h[0]));
    send(&f, Time::ZERO, h[0], h[1], 3);
    f.set_cable_up(CableId(0), true, Time::from_micros(1));
    assert!(f.port_link_up(h[0]));
    send(&f, Time::from_micros(2), h[0], h[1], 4);
    send(&f, Time::from_micros(3), h[0], h[1], 5);
    assert_eq!(
        drain(&f, Time::MAX, h[1]),
        vec![5],
        "down, then the first after coming up"
    );
    let c = f.link_counters(LinkId(0)).unwrap();
    assert_eq!(
        (c.dropped_down, c.dropped_first, c.state_changes),
        (1, 2, 2)
    );
}

#[test]
fn flapping_links_drop_while_down() {
    let flap = FaultConfig {
        flap: Some(LinkFlap {
            mean_up: Duration::from_micros(900),
            mean_down: Duration::from_micros(100),
        }),
        ..Default::default()
    };
    let (f, got) = blast(31, flap, 50_000);
    let c = f.link_counters(LinkId(0)).unwrap();
    let frac = c.dropped_down as f64 / 50_000.0;
    assert!((0.05..0.15).contains(&frac), "down fraction {frac}");
    assert!(c.state_changes > 50);
    assert_eq!(got.len() as u64, 50_000 - c.dropped_down);
}

#[test]
fn a_full_port_queue_drops_and_counts() {
    let mut b = FabricBuilder::new(1);
    b.queue_limit(3);
    let h = star(&mut b, 2, SwitchSize::Eight, CableConfig::default()).unwrap();
    let f = b.build();
    for i in 0..5 {
        send(&f, Time::ZERO, h[0], h[1], i);
    }
    assert_eq!(drain(&f, Time::ZERO, h[1]), vec![0, 1, 2]);
    assert_eq!(f.port_counters(h[1]).unwrap().overflows, 2);
}

fn faulty_run(seed: u64) -> (u64, FabricCounters) {
    let faults = FaultConfig {
        drop: 0.05,
        corrupt: 0.02,
        duplicate: 0.02,
        reorder: 0.05,
        jitter: Duration::from_micros(2),
        burst: Some(BurstLoss {
            enter: 0.01,
            exit: 0.3,
            loss: 0.8,
        }),
        ..Default::default()
    };
    let mut b = FabricBuilder::new(seed);
    let hosts = line(
        &mut b,
        20,
        SwitchSize::Eight,
        CableConfig::symmetric(LinkModel::SAN_1280, faults),
    )
    .unwrap();
    let f = b.build();
    for round in 0..200u64 {
        let now = Time::from_micros(round * 10);
        for (i, &x) in hosts.iter().enumerate() {
            let y = hosts[(i * 7 + round as usize) % hosts.len()];
            if x != y {
                send(&f, now, x, y, round as u32);
            }
        }
        for &y in &hosts {
            drain(&f, now, y);
        }
    }
    (f.trace_hash(), f.counters())
}

#[test]
fn the_same_seed_gives_the_same_trace_and_another_seed_another() {
    let (a, ca) = faulty_run(99);
    let (b, cb) = faulty_run(99);
    let (c, _) = faulty_run(100);
    assert_eq!(a, b);
    assert_eq!(ca, cb);
    assert_ne!(a, c);
    assert!(ca.corrupted > 0 && ca.duplicated > 0 && ca.reordered > 0 && ca.link_drops > 0);
}

#[test]
fn recorded_events_explain_the_counters() {
    let mut b = FabricBuilder::new(5);
    b.record(100_000);
    let faults = FaultConfig::rates(0.1, 0.1, 0.1, 0.0);
    let h = star(
        &mut b,
        2,
        SwitchSize::Eight,
        CableConfig::symmetric(LinkModel::default(), faults),
    )
    .unwrap();
    let f = b.build();
    for i in 0..1000 {
        send(&f, Time::from_micros(i), h[0], h[1], 0);
        drain(&f, Time::from_micros(i), h[1]);
    }
    let (events, lost) = f.events();
    assert_eq!(lost, 0);
    let count = |k: fn(&EventKind) -> bool| events.iter().filter(|e| k(&e.kind)).count() as u64;
    let c = f.counters();
    assert_eq!(count(|k| matches!(k, EventKind::Sent)), c.sent);
    assert_eq!(count(|k| matches!(k, EventKind::Dropped(_))), c.link_drops);
    assert_eq!(
        count(|k| matches!(k, EventKind::Corrupted { .. })),
        c.corrupted
    );
    assert_eq!(count(|k| matches!(k, EventKind::Duplicated)), c.duplicated);
    assert_eq!(count(|k| matches!(k, EventKind::Delivered)), c.delivered);
    assert_eq!(count(|k| matches!(k, EventKind::CrcError)), c.crc_errors);
}

#[test]
fn fabric_is_shareable_across_threads() {
    fn assert_sync<T: Send + Sync>() {}
    assert_sync::<Fabric>();
}
