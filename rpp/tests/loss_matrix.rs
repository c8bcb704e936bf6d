//! The loss matrix: drop {0, 1, 5, 20, 50}%, each with 5% duplication, 10% reordering and
//! 1% corruption on both directions; per cell 10,000 messages of random sizes from 0 to
//! 256 KiB, every one delivered exactly once, in order, byte-identical. And the same seed
//! gives the same trace hash.

use myri_rpp::congestion::CongestionControl;
use myri_rpp::testing::{BurstLoss, LinkConfig, Pair};
use myri_rpp::{Config, Event, SendError, State};
use std::collections::VecDeque;
use std::time::Duration;

/// SplitMix64: a tiny generator for message sizes and contents (the links have their
/// own seeded generators).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const MAX_LEN: u64 = 256 * 1024;

/// The size of message `i`: small ones, ones at fragment boundaries, and uniform up to
/// 256 KiB, with both ends of the range.
fn size(rng: &mut SplitMix, i: usize, max_payload: u64) -> usize {
    (match i {
        0 => 0,
        1 => MAX_LEN,
        _ => match rng.below(10) {
            0..=2 => rng.below(1025),
            3 => (rng.below(MAX_LEN / max_payload) + 1) * max_payload + rng.below(3) - 1,
            _ => rng.below(MAX_LEN + 1),
        },
    }) as usize
}

/// The bytes of message `i` of length `len` (the receiver regenerates them to compare).
fn content(i: usize, len: usize) -> Vec<u8> {
    let mut rng = SplitMix(i as u64 ^ 0xA5A5_0000_0000);
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let w = rng.next().to_le_bytes();
        v.extend_from_slice(&w[..(len - v.len()).min(8)]);
    }
    v
}

struct Outcome {
    trace: u64,
    virtual_time: Duration,
    retransmitted: u64,
    bad_crc: u64,
    dup_packets: u64,
}

/// Sends `count` messages from a to b through `link` (both directions) and checks each
/// arrives exactly once, in order, intact.
fn run(link: LinkConfig, seed: u64, count: usize) -> Outcome {
    let config = Config::default()
        .with_rto_min(Duration::from_micros(50))
        // At 50% loss each way a probe is answered one time in four: ten unanswered in a
        // row happen by chance (6%), forty practically never (1e-5).
        .with_max_retries(40);
    let max_payload = config.max_payload() as u64;
    let mut pair = Pair::new(config, link, seed);
    let mut sizes = SplitMix(seed);
    let mut next_send = 0;
    let mut next_recv = 0;
    let mut returned = 0;
    let mut waiting: VecDeque<Vec<u8>> = VecDeque::new();
    let mut steps = 0u64;
    while next_recv < count {
        // Keep the sender's queue full: the window and credit do the pacing.
        while next_send < count {
            let msg = waiting
                .pop_front()
                .unwrap_or_else(|| content(next_send, size(&mut sizes, next_send, max_payload)));
            match pair.a.send(msg) {
                Ok(_) => next_send += 1,
                Err(SendError::WouldBlock(m)) => {
                    waiting.push_front(m);
                    break;
                }
                Err(e) => panic!("send refused: {e}"),
            }
        }
        pair.step();
        steps += 1;
        assert!(
            steps < 50_000_000,
            "no progress: {next_recv} of {count} delivered at {:?}",
            pair.now
        );
        while let Some(e) = pair.b_events.pop_front() {
            match e {
                Event::Message(m) => {
                    let expected = content(next_recv, m.len());
                    assert!(
                        m == expected,
                        "message {next_recv} ({} bytes) corrupted",
                        m.len()
                    );
                    next_recv += 1;
                    pair.b.recycle(m);
                }
                Event::Connected { .. } => {}
                other => panic!("unexpected event at b: {other:?}"),
            }
        }
        while let Some(e) = pair.a_events.pop_front() {
            match e {
                Event::Sent { .. } => returned += 1,
                Event::Connected { .. } => {}
                other => panic!("unexpected event at a: {other:?}"),
            }
        }
    }
    pair.drive();
    returned += pair
        .a_events
        .iter()
        .filter(|e| matches!(e, Event::Sent { .. }))
        .count();
    assert!(pair.b_messages().is_empty(), "a message delivered twice");
    assert_eq!(
        returned, count,
        "every buffer handed back once acknowledged"
    );
    assert_eq!(
        (pair.a.state(), pair.b.state()),
        (State::Established, State::Established)
    );
    assert!(!pair.a.has_pending());
    let s = pair.a.stats();
    let r = pair.b.stats();
    assert_eq!(r.messages_delivered, count as u64);
    Outcome {
        trace: pair.trace_hash(),
        virtual_time: pair.now - myri_rpp::Instant::ZERO,
        retransmitted: s.retransmitted,
        bad_crc: r.bad_crc + s.bad_crc,
        dup_packets: r.dup_packets,
    }
}

fn faults(loss: f64) -> LinkConfig {
    LinkConfig {
        loss,
        duplicate: 0.05,
        reorder: 0.10,
        corrupt: 0.01,
        jitter: Duration::from_micros(3),
        ..LinkConfig::default()
    }
}

fn cell(loss: f64, seed: u64) {
    let o = run(faults(loss), seed, 10_000);
    println!(
        "loss {:>4.0}%: {:>6.1} ms virtual, {} retransmitted, {} bad crc, {} duplicates, trace {:016x}",
        loss * 100.0,
        o.virtual_time.as_secs_f64() * 1e3,
        o.retransmitted,
        o.bad_crc,
        o.dup_packets,
        o.trace
    );
    assert!(
        o.bad_crc > 0 && o.dup_packets > 0,
        "the faults were injected"
    );
    if loss > 0.0 {
        assert!(o.retransmitted > 0);
    }
}

#[test]
fn loss_0_percent() {
    cell(0.0, 100);
}

#[test]
fn loss_1_percent() {
    cell(0.01, 101);
}

#[test]
fn loss_5_percent() {
    cell(0.05, 105);
}

#[test]
fn loss_20_percent() {
    cell(0.20, 120);
}

#[test]
fn loss_50_percent() {
    cell(0.50, 150);
}

#[test]
fn bursts_jitter_and_a_small_mtu() {
    let link = LinkConfig {
        burst: Some(BurstLoss {
            enter: 0.01,
            exit: 0.2,
            loss: 0.9,
        }),
        delay: Duration::from_micros(30),
        jitter: Duration::from_micros(40),
        ..faults(0.01)
    };
    let config = Config::default().with_mtu(1500);
    let mut pair = Pair::new(config, LinkConfig { mtu: 1500, ..link }, 9);
    let msgs: Vec<Vec<u8>> = (0..300).map(|i| content(i, (i * 997) % 70_000)).collect();
    for m in &msgs {
        pair.a.send(m.clone()).unwrap();
    }
    pair.drive();
    assert!(pair.a_to_b.stats.burst_dropped > 0);
    assert_eq!(pair.a_to_b.stats.oversize, 0);
    assert_eq!(pair.b_messages(), msgs);
}

/// Data both ways under heavy loss on a 1500-byte MTU: each end's data packets carry at
/// most two words of SACK bitmap, so a long bitmap is cut on them (its echo withheld) and
/// sent whole in an acknowledgement of its own; nothing is lost, doubled or reordered.
/// Congestion control is off: at 20% loss it keeps the window (and so the bitmaps) too
/// small for a cut.
#[test]
fn data_both_ways_with_cut_bitmaps() {
    let config = Config::default()
        .with_mtu(1500)
        .with_congestion(CongestionControl::None);
    let link = LinkConfig {
        mtu: 1500,
        ..faults(0.20)
    };
    let mut pair = Pair::new(config, link, 21);
    let to_b: Vec<Vec<u8>> = (0..1500).map(|i| content(i, (i * 7919) % 20_000)).collect();
    let to_a: Vec<Vec<u8>> = (0..1500)
        .map(|i| content(i + 1_000_000, (i * 104_729) % 20_000))
        .collect();
    let (mut sent_b, mut sent_a) = (0, 0);
    let (mut got_b, mut got_a) = (Vec::new(), Vec::new());
    for _ in 0..10_000_000 {
        if got_b.len() == to_b.len() && got_a.len() == to_a.len() {
            break;
        }
        while sent_b < to_b.len() && pair.a.send(to_b[sent_b].clone()).is_ok() {
            sent_b += 1;
        }
        while sent_a < to_a.len() && pair.b.send(to_a[sent_a].clone()).is_ok() {
            sent_a += 1;
        }
        assert!(pair.step(), "the pair went quiet with messages outstanding");
        got_b.extend(pair.b_messages());
        got_a.extend(pair.a_messages());
    }
    assert!(
        got_b == to_b && got_a == to_a,
        "exactly once, in order, intact"
    );
    let (a, b) = (pair.a.stats(), pair.b.stats());
    assert!(
        a.sack_cuts > 0 && b.sack_cuts > 0,
        "long bitmaps met data packets both ways: {a:?} {b:?}"
    );
    assert_eq!(pair.a_to_b.stats.oversize + pair.b_to_a.stats.oversize, 0);
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let a = run(faults(0.05), 7, 1000).trace;
    let b = run(faults(0.05), 7, 1000).trace;
    let c = run(faults(0.05), 8, 1000).trace;
    assert_eq!(a, b);
    assert_ne!(a, c);
}
