//! `integrity=` on `sim://` (issue 17): packets corrupted in the sending board's SRAM
//! (after the host DMA, before the send engine), on the fabric past the link's CRC-8 (a
//! switch that flips a bit and reseals the CRC), and in the receiving board's SRAM (before
//! the DMA to host memory) are caught by the board's DMA checksums with `integrity=dma`,
//! `sim://`'s default (counted in `bad_dma_checksum`, never delivered), and by RPP's
//! CRC-32C with `integrity=crc32c`. Seeded and in virtual time: every run is the same.
//!
//! Not covered by the DMA checksums, by construction: the sender's host memory before its
//! DMA reads the packet, and the receiver's after its DMA wrote it (the CRC-32C, computed
//! by the applications' hosts, covers those). Nor errors that cancel in a 16-bit
//! ones-complement sum: with resealed flips on both links of the path at 20% each, one
//! packet in 300 took two flips of the same bit position in opposite directions and was
//! delivered corrupted. So the fabric is corrupted on one link (switch to receiver) here:
//! one flip per packet, every one of which the sum catches.

mod common;

use common::drive_until;
use myri_device::board::SramFaults;
use myri_device::fabric::{Endpoint as FabricEnd, FaultConfig, LinkId};
use myri_device::time::Time;
use myri_transport::sim::{SimWorld, WorldConfig};
use myri_transport::{Endpoint, Integrity, OpenError, Options};

#[derive(Debug, Clone, Copy)]
enum Site {
    SenderSram,
    Fabric,
    ReceiverSram,
}

const SITES: [Site; 3] = [Site::SenderSram, Site::Fabric, Site::ReceiverSram];

fn world(name: &str, site: Site, p: f64) -> SimWorld {
    let config = WorldConfig::default().with_seed(17);
    let config = match site {
        Site::SenderSram => config.with_sram_faults(SramFaults { send: p, recv: 0.0 }),
        // Set on one link once the receiver has a port: see `corrupt_link_to`.
        Site::Fabric => config,
        Site::ReceiverSram => config.with_sram_faults(SramFaults { send: 0.0, recv: p }),
    };
    SimWorld::create(name, config).unwrap()
}

/// Makes the switch flip a bit of every packet it sends to `name` with probability `p`,
/// resealing the CRC-8.
fn corrupt_link_to(w: &SimWorld, name: &str, p: f64) {
    let port = w.port_of(name).unwrap();
    let fabric = w.fabric();
    let link = (0..2 * fabric.cables() as u32)
        .map(LinkId)
        .find(|&l| fabric.link_end(l) == Some(FabricEnd::Host(port)))
        .unwrap();
    let faults = FaultConfig {
        corrupt_resealed: p,
        ..FaultConfig::default()
    };
    fabric
        .set_faults(link, faults, Time::from_nanos(w.now()))
        .unwrap();
}

/// Bits the fabric's links flipped.
fn fabric_corruptions(w: &SimWorld) -> u64 {
    let fabric = w.fabric();
    (0..2 * fabric.cables() as u32)
        .filter_map(|l| fabric.link_counters(LinkId(l)))
        .map(|c| c.corrupted)
        .sum()
}

/// Message `i`: its index, then a pattern of it.
fn message(i: u32, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len.max(4))
        .map(|k| (k as u32).wrapping_mul(2_654_435_761).wrapping_add(i) as u8)
        .collect();
    m[..4].copy_from_slice(&i.to_be_bytes());
    m
}

fn len_of(i: u32) -> usize {
    4 + (i as usize * 997) % 9000
}

/// Sends `count` raw datagrams from a to b in world `name`; returns (intact, corrupted)
/// deliveries and b's endpoint.
fn raw_run(
    w: &SimWorld,
    name: &str,
    site: Site,
    integrity: &str,
    count: u32,
) -> (u32, u32, Endpoint) {
    let mut a = Endpoint::open(&format!(
        "sim://a?world={name}&reliable=0&integrity={integrity}"
    ))
    .unwrap();
    let mut b = Endpoint::open(&format!(
        "sim://b?world={name}&reliable=0&integrity={integrity}"
    ))
    .unwrap();
    let to_b = a.insert_addr("sim://b").unwrap();
    b.insert_addr("sim://a").unwrap();
    if let Site::Fabric = site {
        corrupt_link_to(w, "b", 0.2);
    }
    let (mut intact, mut corrupted) = (0, 0);
    for i in 0..count {
        let data = message(i, len_of(i));
        let mut m = a.alloc(data.len());
        m.copy_from_slice(&data);
        a.send(to_b, m).unwrap();
        drive_until(&mut [&mut a, &mut b], 20, |eps| {
            while let Some(d) = eps[1].recv() {
                let idx = u32::from_be_bytes(d.data[..4].try_into().unwrap());
                if idx < count && d.data[..] == message(idx, len_of(idx))[..] {
                    intact += 1;
                } else {
                    corrupted += 1;
                }
            }
            None::<()>
        });
    }
    (intact, corrupted, b)
}

#[test]
fn dma_integrity_drops_and_counts_every_corrupted_datagram() {
    for site in SITES {
        let name = format!("dma-raw-{site:?}");
        let w = world(&name, site, 0.2);
        let (intact, corrupted, mut b) = raw_run(&w, &name, site, "dma", 300);
        assert_eq!(b.integrity(), Integrity::Dma);
        let s = b.stats();
        assert_eq!(corrupted, 0, "{site:?}: no corrupted datagram delivered");
        assert!(s.bad_dma_checksum >= 20, "{site:?}: {s:?}");
        let board: u64 = b.board_drops().iter().map(|&(_, n)| n).sum();
        // Every datagram is delivered intact, or dropped: by the checksum, by the
        // board's header checks, as malformed or from an unknown source (a corrupted
        // sender header).
        assert_eq!(
            u64::from(intact) + s.bad_dma_checksum + board + s.malformed + s.unknown_source,
            300,
            "{site:?}: every datagram is accounted for"
        );
        if let Site::Fabric = site {
            let flipped = fabric_corruptions(&w);
            assert_eq!(flipped, s.bad_dma_checksum + board, "one flip, one drop");
        }
        assert!(intact >= 200, "{site:?}: {intact}");
    }
}

#[test]
fn without_a_check_the_same_corruption_reaches_the_application() {
    for site in SITES {
        let name = format!("none-raw-{site:?}");
        let w = world(&name, site, 0.2);
        let (_, corrupted, b) = raw_run(&w, &name, site, "none", 300);
        assert!(corrupted >= 20, "{site:?}: {corrupted}");
        assert_eq!(b.stats().bad_dma_checksum, 0);
    }
}

/// Reliable messages over a corrupting path: all arrive intact and in order, the damage
/// caught by the board's checksums (`dma`) or by RPP's CRC-32C (`crc32c`).
#[test]
fn reliable_messages_survive_corruption_under_either_check() {
    for site in SITES {
        for integrity in [Integrity::Crc32c, Integrity::Dma] {
            let name = format!("rel-{integrity}-{site:?}");
            let w = world(&name, site, 0.05);
            let opts = Options::default().with_integrity(integrity);
            let mut a =
                Endpoint::open_with(&format!("sim://a?world={name}"), opts.clone()).unwrap();
            let mut b = Endpoint::open_with(&format!("sim://b?world={name}"), opts).unwrap();
            let to_b = a.insert_addr("sim://b").unwrap();
            b.insert_addr("sim://a").unwrap();
            if let Site::Fabric = site {
                corrupt_link_to(&w, "b", 0.05);
                corrupt_link_to(&w, "a", 0.05);
            }
            let count = 60u32;
            for i in 0..count {
                let data = message(i, 100 + (i as usize * 4099) % 30_000);
                let mut m = a.alloc(data.len());
                m.copy_from_slice(&data);
                a.send(to_b, m).unwrap();
            }
            let mut got = Vec::new();
            drive_until(&mut [&mut a, &mut b], 3_000_000, |eps| {
                while let Some(d) = eps[1].recv() {
                    got.push(d.data.to_vec());
                }
                (got.len() == count as usize).then_some(())
            })
            .unwrap_or_else(|| panic!("{integrity} {site:?}: {} of {count}", got.len()));
            for (i, m) in got.iter().enumerate() {
                let i = i as u32;
                assert_eq!(
                    m[..],
                    message(i, 100 + (i as usize * 4099) % 30_000)[..],
                    "{integrity} {site:?}: message {i}"
                );
            }
            let (sa, sb) = (a.stats(), b.stats());
            let caught = sa.bad_dma_checksum + sb.bad_dma_checksum;
            match integrity {
                Integrity::Dma => assert!(caught > 0, "{site:?}: {sb:?}"),
                _ => {
                    assert_eq!(caught, 0, "{site:?}: the board's sums are not checked");
                    assert!(sa.rpp_dropped + sb.rpp_dropped > 0, "{site:?}: {sb:?}");
                }
            }
        }
    }
}

#[test]
fn dma_integrity_is_sim_only() {
    assert!(matches!(
        Endpoint::open("udp://127.0.0.1:0?integrity=dma"),
        Err(OpenError::Url(_))
    ));
    assert!(matches!(
        Endpoint::open_with(
            "udp://127.0.0.1:0",
            Options::default().with_integrity(Integrity::Dma)
        ),
        Err(OpenError::IntegrityNotAvailable { .. })
    ));
}

/// A reliable endpoint checks by the best its path offers unless told otherwise: the
/// boards' DMA checksums on `sim://`, RPP's CRC-32C where nothing better exists; the URL's
/// `integrity=` and the options choose another, the URL first.
#[test]
fn each_scheme_defaults_to_the_best_check_it_has() {
    let sim = |url: &str, options: Options| Endpoint::open_with(url, options).unwrap().integrity();
    let w = "world=integrity-default";
    assert_eq!(
        sim(&format!("sim://d?{w}"), Options::default()),
        Integrity::Dma
    );
    assert_eq!(
        sim(
            &format!("sim://c?{w}"),
            Options::default().with_integrity(Integrity::Crc32c)
        ),
        Integrity::Crc32c
    );
    assert_eq!(
        sim(
            &format!("sim://u?{w}&integrity=dma"),
            Options::default().with_integrity(Integrity::Crc32c)
        ),
        Integrity::Dma
    );
    let udp = Endpoint::open("udp://127.0.0.1:0").unwrap();
    assert_eq!(udp.integrity(), Integrity::Crc32c);
    // A raw endpoint is the channel as it is: corruption reaches the application unless
    // a check is asked for (see `without_a_check_the_same_corruption_reaches_the_application`).
    let raw = Endpoint::open(&format!("sim://r?{w}&reliable=0")).unwrap();
    assert_eq!(raw.integrity(), Integrity::None);
    let raw = Endpoint::open(&format!("sim://s?{w}&reliable=0&integrity=dma")).unwrap();
    assert_eq!(raw.integrity(), Integrity::Dma);
}
