//! Property test: any congestion controller, with or without pacing, over links that
//! drop, reorder, duplicate, corrupt and delay, still delivers every message exactly
//! once, in order, intact, and hands every buffer back.

use myri_rpp::congestion::{CongestionControl, MINIMUM_WINDOW_PACKETS};
use myri_rpp::testing::{LinkConfig, Pair};
use myri_rpp::{Config, Event};
use proptest::prelude::*;
use std::time::Duration;

#[derive(Debug, Clone)]
struct Case {
    cc: CongestionControl,
    pacing: bool,
    initial_window: u32,
    mtu: usize,
    loss: f64,
    reorder: f64,
    duplicate: f64,
    corrupt: f64,
    delay_us: u64,
    bandwidth: Option<u64>,
    sizes: Vec<usize>,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            Just(CongestionControl::None),
            Just(CongestionControl::NewReno),
            Just(CongestionControl::Cubic),
            Just(CongestionControl::Bbr)
        ],
        any::<bool>(),
        2u32..20,
        prop_oneof![Just(1500usize), Just(8192)],
        (0.0..0.25f64, 0.0..0.2f64, 0.0..0.05f64, 0.0..0.02f64),
        1u64..400,
        prop_oneof![Just(None), (10_000_000u64..1_000_000_000).prop_map(Some)],
        prop::collection::vec(prop_oneof![0usize..64, 0usize..40_000], 1..40),
        any::<u64>(),
    )
        .prop_map(
            |(
                cc,
                pacing,
                initial_window,
                mtu,
                (loss, reorder, duplicate, corrupt),
                delay_us,
                bandwidth,
                sizes,
                seed,
            )| Case {
                cc,
                pacing,
                initial_window,
                mtu,
                loss,
                reorder,
                duplicate,
                corrupt,
                delay_us,
                bandwidth,
                sizes,
                seed,
            },
        )
}

fn run(c: &Case) -> Result<(), TestCaseError> {
    let config = Config::default()
        .with_mtu(c.mtu)
        .with_congestion(c.cc)
        .with_pacing(c.pacing)
        .with_initial_window(c.initial_window)
        // Heavy loss both ways may leave a live peer unanswered for a while.
        .with_max_retries(60);
    let link = LinkConfig {
        loss: c.loss,
        reorder: c.reorder,
        duplicate: c.duplicate,
        corrupt: c.corrupt,
        delay: Duration::from_micros(c.delay_us),
        jitter: Duration::from_micros(c.delay_us / 4),
        bandwidth: c.bandwidth,
        mtu: c.mtu,
        ..LinkConfig::default()
    };
    let mut pair = Pair::new(config, link, c.seed);
    let msgs: Vec<Vec<u8>> = c
        .sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| (0..len).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    for m in &msgs {
        pair.a.send(m.clone()).unwrap();
    }
    pair.drive_limit(5_000_000);
    prop_assert_eq!(
        pair.b_messages(),
        msgs.clone(),
        "exactly once, in order, intact"
    );
    let returned = pair
        .a_events
        .iter()
        .filter(|e| matches!(e, Event::Sent { .. }))
        .count();
    prop_assert_eq!(returned, msgs.len());
    let s = pair.a.stats();
    prop_assert_eq!(s.bytes_in_flight, 0);
    if c.cc != CongestionControl::None {
        prop_assert!(s.cwnd >= MINIMUM_WINDOW_PACKETS * c.mtu as u64, "{:?}", s);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_controller_and_pacing_deliver_everything_exactly_once_in_order(c in case()) {
        run(&c)?;
    }
}
