//! The fault core in virtual time: rates within statistical bounds for a fixed seed, real
//! reordering, duplication and corruption, delays, and the accounting identity.

use super::*;
use proptest::prelude::*;

const SEED: u64 = 0x5eed;

fn pipe(faults: FaultConfig) -> FaultPipe<u32> {
    FaultPipe::new(
        PipeConfig {
            faults,
            ..PipeConfig::default()
        },
        SEED,
        0,
    )
}

fn datagram(seq: u32) -> Vec<u8> {
    let mut d = seq.to_be_bytes().to_vec();
    d.extend_from_slice(&[0xA5; 12]);
    d
}

fn seq_of(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// Pushes `n` datagrams of flow 0, one every `spacing`, draining what is due after each
/// push and at the end (virtual time runs past every deadline); returns what came out.
fn run(p: &mut FaultPipe<u32>, n: u32, spacing: Duration) -> Vec<(Time, Vec<u8>)> {
    let mut out = Vec::new();
    let mut clock = Time::ZERO;
    let mut drain_to = |p: &mut FaultPipe<u32>, until: Option<Time>, out: &mut Vec<_>| {
        while let Some(t) = p.poll_timeout().filter(|&t| until.is_none_or(|u| t <= u)) {
            clock = clock.max(t);
            while let Some(x) = p.poll_transmit(clock) {
                out.push((clock, x.bytes));
            }
        }
    };
    let mut now = Time::ZERO;
    for seq in 0..n {
        drain_to(p, Some(now), &mut out);
        p.push(now, 0, datagram(seq));
        drain_to(p, Some(now), &mut out);
        now += spacing;
    }
    drain_to(p, None, &mut out);
    out
}

/// `received = dropped + queue_full + unsent_at_exit + pending + forwarded - duplicated`.
#[track_caller]
fn assert_accounted<T: Clone + PartialEq>(p: &FaultPipe<T>) {
    let c = p.counters();
    assert_eq!(
        c.received + c.duplicated,
        c.dropped + c.queue_full + c.unsent_at_exit + p.pending() as u64 + c.forwarded,
        "{c:?}, pending {}",
        p.pending()
    );
}

/// `k` events in `n` trials at rate `p`: within five standard deviations.
#[track_caller]
fn assert_rate(k: u64, n: u64, p: f64) {
    let sd = (p * (1.0 - p) / n as f64).sqrt();
    let got = k as f64 / n as f64;
    assert!(
        (got - p).abs() <= 5.0 * sd,
        "rate {got} vs {p} (sd {sd}, {k} of {n})"
    );
}

#[test]
fn a_clean_pipe_forwards_everything_at_once_and_in_order() {
    let mut p = pipe(FaultConfig::default());
    let out = run(&mut p, 1000, Duration::from_micros(1));
    let seqs: Vec<u32> = out.iter().map(|(_, b)| seq_of(b)).collect();
    assert_eq!(seqs, (0..1000).collect::<Vec<_>>());
    assert!(out.iter().all(|(_, b)| b[4..] == [0xA5; 12]));
    assert_eq!(p.counters().forwarded, 1000);
    assert_eq!(p.poll_timeout(), None);
    assert_accounted(&p);
}

#[test]
fn loss_drops_at_the_configured_rate_and_nothing_else() {
    let n = 100_000;
    let mut p = pipe(FaultConfig::rates(0.1, 0.0, 0.0, 0.0));
    let out = run(&mut p, n, Duration::from_micros(1));
    let c = *p.counters();
    assert_rate(c.dropped, u64::from(n), 0.1);
    assert_eq!(out.len() as u64, u64::from(n) - c.dropped);
    let seqs: Vec<u32> = out.iter().map(|(_, b)| seq_of(b)).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "loss never reorders");
    assert_accounted(&p);
}

#[test]
fn duplication_sends_a_second_identical_copy_right_after() {
    let n = 50_000;
    let mut p = pipe(FaultConfig::rates(0.0, 0.0, 0.05, 0.0));
    let out = run(&mut p, n, Duration::from_micros(1));
    let c = *p.counters();
    assert_rate(c.duplicated, u64::from(n), 0.05);
    assert_eq!(out.len() as u64, u64::from(n) + c.duplicated);
    let seqs: Vec<u32> = out.iter().map(|(_, b)| seq_of(b)).collect();
    let twice = seqs.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    assert_eq!(twice, c.duplicated, "every copy follows its original");
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]));
    assert_accounted(&p);
}

#[test]
fn corruption_flips_exactly_one_bit() {
    let n = 50_000;
    let mut p = pipe(FaultConfig::rates(0.0, 0.02, 0.0, 0.0));
    let mut flipped_bits = std::collections::HashSet::new();
    let mut corrupted = 0;
    for seq in 0..n {
        let sent = datagram(seq);
        let fate = p.push(Time::ZERO, 0, sent.clone());
        let got = p.poll_transmit(Time::ZERO).expect("due at once").bytes;
        let differing: u32 = sent
            .iter()
            .zip(&got)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        match fate {
            Fate::Queued {
                flipped_bit: Some(bit),
                ..
            } => {
                assert_eq!(differing, 1);
                assert_ne!(
                    got[bit / 8] & (0x80 >> (bit % 8)),
                    sent[bit / 8] & (0x80 >> (bit % 8))
                );
                flipped_bits.insert(bit);
                corrupted += 1;
            }
            _ => assert_eq!(differing, 0),
        }
    }
    assert_eq!(p.counters().corrupted, corrupted);
    assert_rate(corrupted, u64::from(n), 0.02);
    assert!(flipped_bits.len() > 100, "bits spread over the datagram");
    // An empty datagram has no bit to flip.
    let mut all = pipe(FaultConfig::rates(0.0, 1.0, 0.0, 0.0));
    assert!(matches!(
        all.push(Time::ZERO, 0, Vec::new()),
        Fate::Queued {
            flipped_bit: None,
            ..
        }
    ));
    assert_eq!(all.counters().corrupted, 0);
}

#[test]
fn a_held_datagram_is_overtaken_by_exactly_gap_later_ones() {
    for gap in [1u32, 3] {
        let mut p = FaultPipe::new(
            PipeConfig {
                faults: FaultConfig::rates(0.0, 0.0, 0.0, 0.05),
                reorder_gap: gap,
                reorder_hold: Duration::from_secs(1),
                ..PipeConfig::default()
            },
            SEED,
            0,
        );
        let n = 20_000;
        let out = run(&mut p, n, Duration::from_micros(1));
        let c = *p.counters();
        assert_eq!(out.len(), n as usize);
        assert_rate(c.reorder_held, u64::from(n), 0.05);
        assert_eq!(c.reordered + c.reorder_unmatched, c.reorder_held);
        // Every late datagram arrives after some later one; count them at the receiver.
        let seqs: Vec<u32> = out.iter().map(|(_, b)| seq_of(b)).collect();
        let mut highest = None;
        let mut late = 0;
        for &s in &seqs {
            if highest.is_some_and(|h| s < h) {
                late += 1;
            }
            highest = highest.max(Some(s));
        }
        assert_eq!(late, c.reordered, "gap {gap}");
        // Every held datagram went out after exactly `gap` later ones, except the few at
        // the very end whose hold ran out first.
        let mut seen: Vec<u32> = Vec::new();
        let mut short = 0;
        for &s in &seqs {
            let at = seen.partition_point(|&x| x <= s);
            let overtakers = seen.len() - at;
            if overtakers > 0 && overtakers != gap as usize {
                short += 1;
            }
            seen.insert(at, s);
        }
        assert!(
            short <= gap,
            "{short} datagrams overtaken by other than {gap}"
        );
        assert!(c.reorder_unmatched <= u64::from(gap), "{c:?}");
        assert_accounted(&p);
    }
}

#[test]
fn a_held_datagram_with_no_follower_goes_when_its_hold_runs_out() {
    let hold = Duration::from_millis(10);
    let mut p: FaultPipe<u32> = FaultPipe::new(
        PipeConfig {
            faults: FaultConfig::rates(0.0, 0.0, 0.0, 1.0),
            reorder_hold: hold,
            ..PipeConfig::default()
        },
        SEED,
        0,
    );
    let t0 = Time::from_micros(5);
    assert!(matches!(
        p.push(t0, 7, datagram(1)),
        Fate::Queued { held: true, .. }
    ));
    assert_eq!(p.poll_transmit(t0), None, "held back");
    assert_eq!(p.poll_timeout(), Some(t0 + hold));
    assert_eq!(p.poll_transmit(t0 + (hold - Duration::from_nanos(1))), None);
    let x = p
        .poll_transmit(t0 + hold)
        .expect("released at its deadline");
    assert_eq!((x.tag, seq_of(&x.bytes)), (7, 1));
    assert_eq!(p.counters().reorder_unmatched, 1);
    assert_eq!(p.counters().reordered, 0);
    assert_eq!(p.poll_timeout(), None);
}

#[test]
fn only_datagrams_of_the_same_flow_overtake() {
    let mut p: FaultPipe<u32> = FaultPipe::new(
        PipeConfig {
            faults: FaultConfig::rates(0.0, 0.0, 0.0, 0.3),
            reorder_hold: Duration::from_secs(1),
            ..PipeConfig::default()
        },
        SEED,
        0,
    );
    let mut released_by_overtaking = 0;
    for seq in 0..1000 {
        let flow = seq % 3;
        p.push(Time::ZERO, flow, datagram(seq));
        while let Some(x) = p.poll_transmit(Time::ZERO) {
            let s = seq_of(&x.bytes);
            assert_eq!(x.tag, s % 3, "datagram {s} tagged with its own flow");
            if s != seq {
                assert_eq!(x.tag, flow, "datagram {s} released by another flow's {seq}");
                released_by_overtaking += 1;
            }
        }
    }
    assert!(released_by_overtaking > 200, "{released_by_overtaking}");
    assert_eq!(p.counters().reordered, released_by_overtaking);
}

#[test]
fn delay_and_jitter_hold_every_datagram_within_bounds() {
    let delay = Duration::from_millis(5);
    let jitter = Duration::from_millis(2);
    let mut p: FaultPipe<u32> = FaultPipe::new(
        PipeConfig {
            faults: FaultConfig {
                delay,
                jitter,
                ..FaultConfig::default()
            },
            ..PipeConfig::default()
        },
        SEED,
        0,
    );
    let n = 2_000u32;
    let spacing = Duration::from_micros(100);
    let mut sent_at = Vec::new();
    let mut out = Vec::new();
    let mut now = Time::ZERO;
    for seq in 0..n {
        p.push(now, 0, datagram(seq));
        sent_at.push(now);
        assert_eq!(
            p.poll_transmit(now).map(|x| seq_of(&x.bytes)),
            None,
            "nothing is due before its delay"
        );
        let next = now + spacing;
        while let Some(t) = p.poll_timeout().filter(|&t| t < next) {
            assert!(t >= now, "deadline in the past");
            now = t;
            while let Some(x) = p.poll_transmit(now) {
                out.push((now, seq_of(&x.bytes)));
            }
        }
        now = next;
    }
    while let Some(t) = p.poll_timeout() {
        now = t;
        while let Some(x) = p.poll_transmit(now) {
            out.push((now, seq_of(&x.bytes)));
        }
    }
    assert_eq!(out.len(), n as usize);
    let mut extra = Vec::new();
    for &(at, seq) in &out {
        let d = at.saturating_since(sent_at[seq as usize]);
        assert!(
            d >= delay && d <= delay + jitter,
            "datagram {seq} took {d:?}"
        );
        extra.push(d - delay);
    }
    let mean = extra.iter().map(Duration::as_secs_f64).sum::<f64>() / f64::from(n);
    assert!((mean - 0.001).abs() < 0.0001, "jitter mean {mean}");
    assert_eq!(p.counters().delayed, u64::from(n));
    // Jitter reorders some datagrams sent 100 us apart, as netem's does.
    assert!(out.windows(2).any(|w| w[0].1 > w[1].1));
}

#[test]
fn the_queue_limit_drops_and_counts() {
    let mut p: FaultPipe<u32> = FaultPipe::new(
        PipeConfig {
            faults: FaultConfig {
                delay: Duration::from_secs(1),
                ..FaultConfig::default()
            },
            queue_limit_bytes: 160,
            ..PipeConfig::default()
        },
        SEED,
        0,
    );
    let fates: Vec<Fate> = (0..12)
        .map(|s| p.push(Time::ZERO, 0, datagram(s)))
        .collect();
    assert_eq!(fates.iter().filter(|f| **f == Fate::QueueFull).count(), 2);
    assert_eq!(p.counters().queue_full, 2);
    assert_eq!(p.pending(), 10);
    p.discard();
    assert_eq!(p.counters().unsent_at_exit, 10);
    assert_eq!(p.pending(), 0);
    assert_accounted(&p);
    // Room again after the discard.
    assert!(matches!(
        p.push(Time::ZERO, 0, datagram(0)),
        Fate::Queued { .. }
    ));
}

#[test]
fn the_same_seed_makes_the_same_decisions() {
    let faults = FaultConfig {
        jitter: Duration::from_micros(50),
        ..FaultConfig::rates(0.1, 0.05, 0.05, 0.1)
    };
    let go = |seed, stream| {
        let mut p: FaultPipe<u32> = FaultPipe::new(
            PipeConfig {
                faults,
                ..PipeConfig::default()
            },
            seed,
            stream,
        );
        run(&mut p, 2000, Duration::from_micros(10))
    };
    assert_eq!(go(3, 0), go(3, 0));
    assert_ne!(go(3, 0), go(3, 1));
    assert_ne!(go(3, 0), go(4, 0));
}

#[test]
fn validation_names_the_bad_setting() {
    let bad = PipeConfig {
        faults: FaultConfig::rates(0.0, 0.0, 1.5, 0.0),
        ..PipeConfig::default()
    };
    assert_eq!(
        bad.validate().unwrap_err().to_string(),
        "fault setting duplicate = 1.5 is not a probability in [0, 1]"
    );
    let zero = PipeConfig {
        reorder_gap: 0,
        ..PipeConfig::default()
    };
    assert_eq!(zero.validate(), Err(PipeConfigError::ZeroGap));
    assert!(PipeConfig::clean().validate().is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the rates, delays, flows and times: every datagram is accounted for, none
    /// comes out before it went in, and draining to the last deadline empties the pipe.
    #[test]
    fn every_datagram_is_accounted_for(
        loss in 0.0..1.0f64, corrupt in 0.0..1.0f64, dup in 0.0..1.0f64, reorder in 0.0..1.0f64,
        delay_us in 0u64..2_000, jitter_us in 0u64..2_000, gap in 1u32..4, hold_us in 0u64..5_000,
        limit in 0usize..4_000, seed: u64,
        ops in proptest::collection::vec((0u64..500, 0u32..3, 0usize..40), 1..200),
    ) {
        let mut p: FaultPipe<u32> = FaultPipe::new(
            PipeConfig {
                faults: FaultConfig {
                    delay: Duration::from_micros(delay_us),
                    jitter: Duration::from_micros(jitter_us),
                    ..FaultConfig::rates(loss, corrupt, dup, reorder)
                },
                reorder_gap: gap,
                reorder_hold: Duration::from_micros(hold_us),
                queue_limit_bytes: limit,
            },
            seed,
            0,
        );
        let mut now = Time::ZERO;
        let mut last_out = Time::ZERO;
        for (step_us, flow, len) in ops {
            now += Duration::from_micros(step_us);
            p.push(now, flow, vec![flow as u8; len]);
            while let Some(x) = p.poll_transmit(now) {
                prop_assert!(x.bytes.len() < 40);
                last_out = now;
            }
            assert_accounted(&p);
        }
        while let Some(t) = p.poll_timeout() {
            now = now.max(t);
            while p.poll_transmit(now).is_some() {}
        }
        prop_assert_eq!(p.pending(), 0);
        assert_accounted(&p);
        let c = p.counters();
        prop_assert_eq!(c.reordered + c.reorder_unmatched, c.reorder_held);
        prop_assert!(last_out <= now);
    }
}
