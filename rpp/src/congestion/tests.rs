//! The controllers alone, driven by hand.

use super::*;

const MSS: u64 = 1000;
const RTT: u64 = 100_000; // 100 µs, in nanoseconds

fn at(micros: u64) -> Instant {
    Instant::from_nanos(micros * 1000)
}

fn both() -> [Box<dyn Controller>; 2] {
    [
        Box::new(NewReno::new(MSS, 10)),
        Box::new(Cubic::new(MSS, 10)),
    ]
}

#[test]
fn slow_start_doubles_per_round_until_a_loss_then_grows_slower() {
    for mut c in both() {
        assert_eq!(c.window(), 10 * MSS);
        assert!(c.in_slow_start());
        // One round: the whole window acknowledged, the window doubles.
        c.on_ack(at(100), at(0), 10 * MSS, RTT);
        assert_eq!(c.window(), 20 * MSS, "{c:?}");
        c.on_congestion_event(at(150), at(120), false, MSS);
        assert!(!c.in_slow_start());
        let reduced = c.window();
        assert!(reduced == 10 * MSS || reduced == 14 * MSS, "{c:?}");
        // After recovery (packets sent after it began), a round of acks grows the window
        // by far less than it acknowledged.
        for i in 0..10 {
            c.on_ack(at(300 + i), at(200 + i), MSS, RTT);
        }
        let grown = c.window() - reduced;
        assert!(grown > 0 && grown <= 2 * MSS, "{c:?}");
    }
}

#[test]
fn one_loss_event_reduces_the_window_once() {
    for mut c in both() {
        c.on_ack(at(100), at(0), 30 * MSS, RTT);
        let before = c.window();
        // Three losses of packets sent before the first was detected: one event.
        c.on_congestion_event(at(200), at(150), false, MSS);
        let after = c.window();
        assert!(after < before);
        c.on_congestion_event(at(201), at(160), false, MSS);
        c.on_congestion_event(at(205), at(199), false, MSS);
        assert_eq!(c.window(), after, "{c:?}");
        // Acks of packets sent before recovery began do not grow it either.
        c.on_ack(at(210), at(180), 5 * MSS, RTT);
        assert_eq!(c.window(), after);
        // A packet sent after recovery began and then lost is a new event.
        c.on_congestion_event(at(400), at(300), false, MSS);
        assert!(c.window() < after, "{c:?}");
    }
}

#[test]
fn being_application_limited_does_not_grow_the_window() {
    for mut c in both() {
        for i in 0..1000 {
            c.on_app_limited(at(10 * i + 5));
        }
        assert_eq!(c.window(), 10 * MSS, "{c:?}");
    }
}

#[test]
fn persistent_congestion_collapses_the_window_and_either_event_can_be_undone() {
    for mut c in both() {
        c.on_ack(at(100), at(0), 30 * MSS, RTT);
        let before = c.window();
        c.on_congestion_event(at(200), at(150), false, MSS);
        assert!(c.window() < before);
        c.on_spurious_congestion_event();
        assert_eq!(c.window(), before, "undone: {c:?}");
        c.on_congestion_event(at(300), at(250), true, 10 * MSS);
        assert_eq!(c.window(), MINIMUM_WINDOW_PACKETS * MSS, "{c:?}");
        // A timeout the connection finds spurious (its Eifel check) is undone too.
        c.on_spurious_congestion_event();
        assert_eq!(c.window(), before, "persistent congestion undone: {c:?}");
        c.on_spurious_congestion_event();
        assert_eq!(c.window(), before, "an undo once: {c:?}");
    }
}

#[test]
fn cubic_returns_towards_the_window_of_the_loss_and_beyond() {
    let mut c = Cubic::new(MSS, 100);
    c.on_congestion_event(at(0), at(0), false, MSS);
    assert_eq!(c.window(), 70 * MSS);
    // Acknowledge a window per round trip for two seconds: the curve passes w_max
    // (100 packets) after K = cbrt(30 / 0.4) = 4.2 s... so only part of the way, and
    // never faster than Reno.
    let mut now = 1000u64;
    let mut reno = 70 * MSS;
    for _ in 0..20_000 {
        now += 100;
        let w = c.window();
        c.on_ack(at(now), at(now - 100), w / 10, RTT);
        reno += MSS / 10;
    }
    assert!(c.window() > 70 * MSS, "{c:?}");
    assert!(
        c.window() as f64 >= 0.5 * reno as f64,
        "{} vs reno {reno}",
        c.window()
    );
}

/// CUBIC after a loss from 1000 packets on a 100 ms round trip, acknowledging a
/// hundredth of its window every millisecond, `acks` times; `spell(i)` is how long (in
/// microseconds, 0 for none) the application limited the flight just before ack `i`.
/// Returns the window at the end.
fn cubic_after(acks: u64, spell: impl Fn(u64) -> u64) -> u64 {
    let mut c = Cubic::new(MSS, 1000);
    c.on_congestion_event(at(0), at(0), false, MSS);
    // Acknowledgements of packets sent after the loss, a round trip later.
    let mut now = 100_000;
    for i in 1..=acks {
        now += 1000;
        let pause = spell(i);
        if pause > 0 {
            c.on_app_limited(at(now - 500));
            now += pause;
        }
        let w = c.window();
        c.on_ack(at(now), at(now - 100_000), w / 100, 100_000_000);
    }
    c.window()
}

#[test]
fn cubic_grows_as_fast_as_reno_once_back_at_the_window_before_the_loss() {
    // A millisecond round trip, where Reno's line is above CUBIC's curve (K is 4.2 s).
    let mut c = Cubic::new(MSS, 100);
    c.on_congestion_event(at(0), at(0), false, MSS);
    assert_eq!(c.window(), 70 * MSS);
    let mut now = 1000;
    // One round: the window acknowledged in ten acknowledgements a millisecond after
    // it was sent.
    let mut round = |c: &mut Cubic| {
        let w = c.window();
        now += 1000;
        for _ in 0..10 {
            c.on_ack(at(now), at(now - 1000), w / 10, 1_000_000);
        }
    };
    // 3(1 - 0.7)/(1 + 0.7) = 0.53 packets a round back to the 100 packets of the loss:
    // 57 rounds.
    let mut rounds = 0;
    while c.window() < 100 * MSS {
        round(&mut c);
        rounds += 1;
    }
    assert!((54..=60).contains(&rounds), "{rounds} rounds");
    // Then a packet a round, as Reno (RFC 9438 §4.3): a flow that lost much catches
    // up with one that lost little, instead of both gaining alike.
    let back = c.window();
    for _ in 0..20 {
        round(&mut c);
    }
    let gained = (c.window() - back) as f64 / MSS as f64;
    assert!(
        (19.0..=21.5).contains(&gained),
        "{gained} packets in 20 rounds"
    );
}

#[test]
fn cubic_pauses_its_curve_for_application_limited_spells() {
    // Twenty seconds: the curve is back at w_max after K = cbrt(300 / 0.4) = 9.1 s and
    // then climbs its convex part, far faster than Reno's half packet a round trip.
    let plain = cubic_after(20_000, |_| 0);
    assert!(plain > 1400 * MSS, "{plain}");
    // A half-millisecond spell every 20 ms: the window ends 4% lower (1,452 packets
    // against 1,520). Restarting the curve at each spell (as this controller once did)
    // put w_max at the window itself once past the loss's, where the curve is flat, and
    // left Reno's pace: 1,063 packets.
    let spells = cubic_after(20_000, |i| if i % 20 == 0 { 500 } else { 0 });
    assert!(
        spells <= plain && spells * 10 >= plain * 9,
        "{spells} against {plain} without the spells"
    );
    // A whole second of it counts for nothing: two seconds of acknowledgements after
    // it leave the window where they leave it without the pause (the curve's clock
    // running on through the second would put it 3% higher).
    let steady = cubic_after(14_000, |_| 0);
    let paused = cubic_after(14_000, |i| if i == 12_000 { 1_000_000 } else { 0 });
    assert!(
        paused.abs_diff(steady) * 200 <= steady,
        "{paused} against {steady} without the pause"
    );
}

#[test]
fn the_config_builds_the_chosen_controller() {
    assert!(CongestionControl::None.build(MSS, 10).is_none());
    let reno = CongestionControl::NewReno.build(MSS, 4).unwrap();
    assert_eq!(reno.window(), 4 * MSS);
    let cubic = CongestionControl::Cubic.build(MSS, 1).unwrap();
    assert_eq!(cubic.window(), 4 * MSS, "at least the minimum window");
    let bbr = CongestionControl::Bbr.build(MSS, 10).unwrap();
    assert_eq!(bbr.window(), 10 * MSS);
    assert!(bbr.wants_rate_samples() && bbr.in_slow_start());
    assert_eq!(
        bbr.pacing_rate(),
        None,
        "the window's pace until a round trip is measured"
    );
    let names: Vec<_> = [
        CongestionControl::None,
        CongestionControl::NewReno,
        CongestionControl::Cubic,
        CongestionControl::Bbr,
    ]
    .map(CongestionControl::name)
    .into();
    assert_eq!(names, ["off", "newreno", "cubic", "bbr"]);
    for cc in [
        CongestionControl::NewReno,
        CongestionControl::Cubic,
        CongestionControl::Bbr,
    ] {
        assert_eq!(cc.build(MSS, 10).unwrap().name(), cc.name());
    }
}

/// A BBR fed one sample a round by hand: `rate` bytes per second over a round trip of
/// `RTT`, the flight at `in_flight`; `now` moves on by the round trip.
fn bbr_round(b: &mut Bbr, now: &mut u64, delivered: &mut u64, rate: u64, in_flight: u64) {
    let prior = *delivered;
    let bytes = rate * RTT / 1_000_000_000;
    *delivered += bytes;
    let sent = Instant::from_nanos(*now);
    *now += RTT;
    b.on_rate_sample(
        Instant::from_nanos(*now),
        &RateSample {
            delivered: bytes,
            interval: RTT,
            prior_delivered: prior,
            total_delivered: *delivered,
            app_limited: false,
            acked: bytes,
            lost: 0,
            in_flight,
            rtt: Some(RTT),
            sent,
        },
    );
}

/// A controller ten rounds into a 100 MB/s path, in ProbeBW: it, the time and the bytes
/// delivered.
fn bbr_in_probe_bw() -> (Bbr, u64, u64) {
    let mut b = Bbr::new(MSS, 10);
    let (mut now, mut delivered) = (0, 0);
    for _ in 0..10 {
        bbr_round(&mut b, &mut now, &mut delivered, 100_000_000, 10 * MSS);
    }
    assert_eq!(b.mode(), BbrMode::ProbeBw);
    (b, now, delivered)
}

#[test]
fn bbr_leaves_startup_after_three_rounds_without_growth_then_drains() {
    let mut b = Bbr::new(MSS, 10);
    let (mut now, mut delivered) = (0, 0);
    // The rate doubles each round (Startup finds more), then stays at 100 MB/s.
    for rate in [12_500_000, 25_000_000, 50_000_000, 100_000_000] {
        bbr_round(&mut b, &mut now, &mut delivered, rate, 20 * MSS);
        assert_eq!(b.mode(), BbrMode::Startup, "{b:?}");
    }
    // The product: 100 MB/s over 100 µs, 10 KB. Rounds at the same rate, the flight still
    // well above it.
    for round in 1..=3 {
        bbr_round(&mut b, &mut now, &mut delivered, 100_000_000, 400 * MSS);
        let expect = if round < 3 {
            BbrMode::Startup
        } else {
            BbrMode::Drain
        };
        assert_eq!(b.mode(), expect, "round {round}: {b:?}");
    }
    assert!(b.full_bandwidth_reached());
    assert_eq!(b.bandwidth(), 100_000_000);
    assert!(b.pacing_gain() < 256, "Drain paces below the estimate");
    // Once the flight is down to a product (and the quanta), ProbeBW.
    bbr_round(&mut b, &mut now, &mut delivered, 100_000_000, 10 * MSS);
    assert_eq!(b.mode(), BbrMode::ProbeBw);
    assert_eq!(b.min_rtt(), Some(RTT));
}

#[test]
fn bbr_holds_the_window_to_the_flight_for_a_loss_then_restores_it() {
    let (mut b, mut now, mut delivered) = bbr_in_probe_bw();
    let window = b.window();
    // A loss of a packet sent before now, the flight at 30 packets: the window holds it.
    b.on_congestion_event(
        Instant::from_nanos(now),
        Instant::from_nanos(now - RTT / 2),
        false,
        MSS,
    );
    let held = b.window();
    assert!(held < window, "{held} from {window}");
    assert!(held >= MINIMUM_WINDOW_PACKETS * MSS);
    // More losses of the same flight: the same event.
    b.on_congestion_event(
        Instant::from_nanos(now + 10),
        Instant::from_nanos(now - 10),
        false,
        MSS,
    );
    assert_eq!(b.window(), held);
    // The acknowledgement of a packet sent after the event began: the window is back.
    now += 2 * RTT;
    bbr_round(&mut b, &mut now, &mut delivered, 100_000_000, 10 * MSS);
    assert!(
        b.window() >= window,
        "{} back from {held}, was {window}",
        b.window()
    );
}

#[test]
fn bbr_max_filter_keeps_the_best_for_ten_rounds_then_follows() {
    let mut b = Bbr::new(MSS, 10);
    let (mut now, mut delivered) = (0, 0);
    for _ in 0..5 {
        bbr_round(&mut b, &mut now, &mut delivered, 100_000_000, 10 * MSS);
    }
    assert_eq!(b.bandwidth(), 100_000_000);
    // The path slows to half: the old maximum stands for the filter's ten rounds, then
    // the estimate follows.
    let mut rounds = 0;
    while b.bandwidth() == 100_000_000 {
        bbr_round(&mut b, &mut now, &mut delivered, 50_000_000, 10 * MSS);
        rounds += 1;
        assert!(rounds <= 12, "{b:?}");
    }
    assert!(rounds >= 6, "{rounds} rounds");
    assert_eq!(b.bandwidth(), 50_000_000);
}

#[test]
fn bbr_probe_rtt_keeps_the_estimate_and_comes_back() {
    let (mut b, mut now, mut delivered) = bbr_in_probe_bw();
    let window = b.window();
    // Ten seconds of rounds no faster than the floor: the floor is stale.
    while now < 10_000_000_000 + 2 * RTT {
        bbr_round(&mut b, &mut now, &mut delivered, 100_000_000, 10 * MSS);
    }
    assert_eq!(b.mode(), BbrMode::ProbeRtt, "{b:?}");
    assert_eq!(b.probe_rtts(), 1);
    assert_eq!(b.window(), MINIMUM_WINDOW_PACKETS * MSS);
    // 200 ms at four packets (2,000 round trips of 100 µs, far more than the filter's
    // ten): what they deliver does not lower the estimate.
    let start = now;
    while b.mode() == BbrMode::ProbeRtt {
        bbr_round(&mut b, &mut now, &mut delivered, 40_000_000, 4 * MSS);
        assert!(now - start <= 250_000_000, "{b:?}");
    }
    assert!(now - start >= 200_000_000);
    assert_eq!(b.mode(), BbrMode::ProbeBw);
    assert_eq!(b.bandwidth(), 100_000_000);
    assert!(b.window() >= window, "{} back from {window}", b.window());
}
