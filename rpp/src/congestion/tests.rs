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

#[test]
fn the_config_builds_the_chosen_controller() {
    assert!(CongestionControl::None.build(MSS, 10).is_none());
    let reno = CongestionControl::NewReno.build(MSS, 4).unwrap();
    assert_eq!(reno.window(), 4 * MSS);
    let cubic = CongestionControl::Cubic.build(MSS, 1).unwrap();
    assert_eq!(cubic.window(), 4 * MSS, "at least the minimum window");
}
