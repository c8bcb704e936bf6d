//! Flows that share a bottleneck: two connections' data through one drop-tail queue (the
//! [`Dumbbell`] harness, in virtual time), the second flow starting late, as two
//! programs started together never quite do. Each controller must leave the two within
//! a fifth of each other, keep the link full, and resend little.
//!
//! The path is the one `integration/netns/shaped.sh` builds: 40 µs of round trip and a
//! token bucket whose queue holds 10 ms, so the windows are almost all queue. A flow that
//! starts first leaves slow start with most of that queue; the later one meets it full,
//! loses packets of its first flight and leaves slow start small. What brings them
//! together is the reductions at later losses (each takes 30% of the larger window, and
//! as much of the smaller) and, with CUBIC, the late flow's faster growth once it is past
//! its window before the loss (RFC 9438 §4.3). At 1 Gbit/s, where the queue is 850
//! packets and the losses come about every two seconds, that takes some ten seconds, so
//! the test there measures the fifty seconds from the tenth on: over twenty, with about
//! ten losses per flow, a split is still a draw (`benches/RESULTS.md`, "Two flows: batches
//! of one burst").

use myri_rpp::congestion::CongestionControl;
use myri_rpp::testing::{Dumbbell, LinkConfig};
use myri_rpp::{Config, Instant};
use std::time::Duration;

/// The payload of one packet on a 1,500-byte path (an IPv4 UDP datagram's).
const MTU: usize = 1472;

/// What two flows did over a span of time while both were sending.
#[derive(Debug)]
struct Outcome {
    /// The slower flow's goodput over the faster one's.
    share: f64,
    /// Both flows' goodput over the link's rate.
    used: f64,
    /// Packets sent again over data packets sent, the worse of the two flows.
    resent: f64,
}

/// Two flows of `cc` through a bottleneck of `mbit` Mbit/s with a 10-ms queue, the
/// second starting `late` after the first; measured from `from` to `to` after the second
/// started.
fn two_flows(cc: CongestionControl, mbit: u64, late: Duration, from: u64, to: u64) -> Outcome {
    let rate = mbit * 1_000_000 / 8;
    let (bottleneck, back) = (LinkConfig::shaped(Some(rate)), LinkConfig::shaped(None));
    // The windows the transport gives a 1,500-byte path: what one acknowledgement maps.
    let config = Config::default()
        .with_congestion(cc)
        .with_pacing(true)
        .with_mtu(MTU)
        .with_send_window(1024)
        .with_recv_window(1024);
    let mut d = Dumbbell::new(vec![config; 2], bottleneck, back, 1);
    // Both connect on the idle path first, as the clients of the script do.
    for f in &mut d.flows {
        f.a.send(vec![1; 100]).unwrap();
    }
    d.run_until(Instant::ZERO + Duration::from_millis(1));
    let start = d.now;
    d.bulk(0, start, 65_536);
    d.bulk(1, start + late, 65_536);
    let from = start + late + Duration::from_secs(from);
    let to = start + late + Duration::from_secs(to);
    d.run_until(from);
    let before: Vec<u64> = d.flows.iter().map(|f| f.delivered).collect();
    d.run_until(to);
    let got: Vec<u64> = d
        .flows
        .iter()
        .zip(&before)
        .map(|(f, b)| f.delivered - b)
        .collect();
    let seconds = (to.as_nanos() - from.as_nanos()) as f64 * 1e-9;
    let resent = d
        .flows
        .iter()
        .map(|f| {
            let s = f.a.stats();
            s.retransmitted as f64 / s.data_sent.max(1) as f64
        })
        .fold(0.0, f64::max);
    Outcome {
        share: got[0].min(got[1]) as f64 / got[0].max(got[1]).max(1) as f64,
        used: (got[0] + got[1]) as f64 / seconds / rate as f64,
        resent,
    }
}

#[test]
fn two_flows_share_200_mbit_within_a_fifth() {
    for cc in [CongestionControl::NewReno, CongestionControl::Cubic] {
        // Together, 2 ms apart (the first owns the queue when the second comes), and a
        // tenth of a second apart (the second meets a standing queue).
        for late in [0, 2, 100].map(Duration::from_millis) {
            let o = two_flows(cc, 200, late, 0, 20);
            assert!(o.share >= 0.8, "{cc:?}, {late:?} late: {o:?}");
            // Goodput in payload bytes: the headers take about 3% of the wire.
            assert!(o.used >= 0.93, "{cc:?}, {late:?} late: {o:?}");
            assert!(o.resent <= 0.02, "{cc:?}, {late:?} late: {o:?}");
        }
    }
}

#[test]
fn two_cubic_flows_at_1_gbit_come_within_a_fifth_after_ten_seconds() {
    for late in [0, 2, 100].map(Duration::from_millis) {
        let o = two_flows(CongestionControl::Cubic, 1000, late, 10, 60);
        assert!(o.share >= 0.8, "{late:?} late: {o:?}");
        assert!(o.used >= 0.93, "{late:?} late: {o:?}");
        assert!(o.resent <= 0.02, "{late:?} late: {o:?}");
    }
}
