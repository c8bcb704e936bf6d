//! Round-trip time estimation and the retransmission timeout (RFC 6298).
//!
//! `srtt` and `rttvar` follow RFC 6298 §2 (alpha = 1/8, beta = 1/4), the timeout is
//! `srtt + max(G, 4 * rttvar, srtt / 2) + max_ack_delay` clamped to a configured floor and
//! ceiling, and every
//! expiry doubles it (§5.5) until a new sample arrives (Karn's algorithm keeps the
//! backed-off value until then). Samples come only from packets sent once (Karn's rule:
//! the caller checks), and the peer's reported
//! ack delay is taken off them when it does not make them smaller than the minimum seen.

use std::time::Duration;

/// Clock granularity G of RFC 6298, in nanoseconds: this implementation's timers are
/// exact.
const GRANULARITY: u64 = 1_000;

/// The timeout's variation term is at least `srtt / SRTT_MARGIN_DIVISOR`: the timeout is
/// never shorter than 1.5 round trips (RFC 8985's probe timeout waits two). Behind a
/// steady queue every sample is the same and `rttvar` decays to nothing, so that
/// `srtt + 4 * rttvar` is the round trip itself: measured behind a 200 Mbit/s token
/// bucket with a 10 ms queue (`integration/netns/shaped.sh`), a peer host that ran its
/// driver a millisecond late then fired a timeout about every 20 ms, 185 of 224 of them
/// spurious, and two in a row collapsed the window (persistent congestion). On a
/// microsecond round trip the configured floor (`rto_min`) is the larger anyway.
const SRTT_MARGIN_DIVISOR: u64 = 2;

fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// The estimator. It keeps nanoseconds as integers: it runs on every acknowledgement.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<u64>,
    rttvar: u64,
    min_rtt: u64,
    latest: u64,
    initial: u64,
    floor: u64,
    ceiling: u64,
    max_ack_delay: u64,
    backoff: u32,
    /// `rto()`, computed when an input changes (it is read on every packet).
    rto: u64,
}

impl RttEstimator {
    /// An estimator with no samples yet: `initial` is the timeout before the first
    /// sample, `floor` and `ceiling` bound it.
    pub fn new(initial: Duration, floor: Duration, ceiling: Duration) -> RttEstimator {
        let mut r = RttEstimator {
            srtt: None,
            rttvar: 0,
            min_rtt: u64::MAX,
            latest: 0,
            initial: nanos(initial),
            floor: nanos(floor),
            ceiling: nanos(ceiling).max(nanos(floor)),
            max_ack_delay: 0,
            backoff: 0,
            rto: 0,
        };
        r.update();
        r
    }

    /// The longest the peer holds an acknowledgement: the timeout waits for it too
    /// (RFC 9002's probe timeout adds it the same way).
    pub fn with_max_ack_delay(mut self, delay: Duration) -> RttEstimator {
        self.max_ack_delay = nanos(delay);
        self.update();
        self
    }

    fn update(&mut self) {
        let base = match self.srtt {
            None => self.initial,
            Some(srtt) => srtt
                .saturating_add(
                    self.rttvar
                        .saturating_mul(4)
                        .max(GRANULARITY)
                        .max(srtt / SRTT_MARGIN_DIVISOR),
                )
                .saturating_add(self.max_ack_delay),
        };
        let base = base.clamp(self.floor, self.ceiling);
        self.rto = base.saturating_mul(1 << self.backoff).min(self.ceiling);
    }

    /// Takes one sample: the time from sending a packet to its acknowledgement, and the
    /// delay the peer says it held the acknowledgement.
    pub fn sample(&mut self, rtt: Duration, ack_delay: Duration) {
        self.sample_nanos(nanos(rtt), nanos(ack_delay));
    }

    pub(crate) fn sample_nanos(&mut self, rtt: u64, ack_delay: u64) {
        self.min_rtt = self.min_rtt.min(rtt);
        // The peer's ack delay comes off unless it is more than the sample, or would
        // take it below the smallest seen (a lying or confused peer).
        let rtt = match rtt.checked_sub(ack_delay) {
            Some(adjusted) if adjusted >= self.min_rtt => adjusted,
            _ => rtt,
        };
        self.latest = rtt;
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
        self.update();
    }

    /// A new sample arrived: the backoff ends. Karn's algorithm keeps the doubled value
    /// until then.
    pub fn reset_backoff(&mut self) {
        if self.backoff != 0 {
            self.backoff = 0;
            self.update();
        }
    }

    /// The timer expired: double the timeout (§5.5).
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(16);
        self.update();
    }

    /// The smoothed round-trip time, or the initial timeout before any sample.
    pub fn srtt(&self) -> Duration {
        Duration::from_nanos(self.srtt.unwrap_or(self.initial))
    }

    /// The round-trip variation.
    pub fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }

    /// The latest sample.
    pub fn latest(&self) -> Duration {
        Duration::from_nanos(self.latest)
    }

    /// The loss detection's time threshold: `eighths` / 8 of the larger of the smoothed
    /// and the latest round trip, in nanoseconds.
    pub(crate) fn time_threshold_nanos(&self, eighths: u32) -> u64 {
        self.srtt
            .unwrap_or(self.initial)
            .max(self.latest)
            .saturating_mul(u64::from(eighths))
            / 8
    }

    /// Whether a sample has been taken.
    pub fn has_samples(&self) -> bool {
        self.srtt.is_some()
    }

    /// The retransmission timeout, backoff included.
    pub fn rto(&self) -> Duration {
        Duration::from_nanos(self.rto)
    }

    /// The smoothed round trip in nanoseconds, 0 before any sample.
    #[inline]
    pub(crate) fn srtt_nanos(&self) -> u64 {
        self.srtt.unwrap_or(0)
    }

    /// [`RttEstimator::rto`] in nanoseconds.
    #[inline]
    pub(crate) fn rto_nanos(&self) -> u64 {
        self.rto
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn first_sample_and_smoothing_follow_rfc6298() {
        let mut r = RttEstimator::new(us(1000), us(10), us(1_000_000));
        assert_eq!(r.rto(), us(1000), "initial timeout before any sample");
        r.sample(us(100), Duration::ZERO);
        assert_eq!((r.srtt(), r.rttvar()), (us(100), us(50)));
        assert_eq!(r.rto(), us(300), "srtt + 4 * rttvar");
        r.sample(us(200), Duration::ZERO);
        // rttvar = 3/4 * 50 + 1/4 * 100 = 62.5; srtt = 7/8 * 100 + 1/8 * 200 = 112.5
        assert_eq!(r.rttvar(), Duration::from_nanos(62_500));
        assert_eq!(r.srtt(), Duration::from_nanos(112_500));
    }

    #[test]
    fn backoff_doubles_until_new_data_is_acked_and_stays_clamped() {
        let mut r = RttEstimator::new(us(1000), us(10), us(5000));
        r.sample(us(100), Duration::ZERO);
        r.back_off();
        assert_eq!(r.rto(), us(600));
        r.back_off();
        assert_eq!(r.rto(), us(1200));
        for _ in 0..10 {
            r.back_off();
        }
        assert_eq!(r.rto(), us(5000), "never above the ceiling");
        r.reset_backoff();
        assert_eq!(r.rto(), us(300));
    }

    #[test]
    fn an_ack_delay_longer_than_the_sample_is_ignored() {
        let mut r = RttEstimator::new(us(1000), us(1), us(1_000_000));
        r.sample(Duration::ZERO, Duration::ZERO);
        r.sample(us(10), us(50));
        assert_eq!(r.latest(), us(10));
    }

    #[test]
    fn the_timeout_waits_for_the_peers_ack_delay() {
        let mut r = RttEstimator::new(us(1000), us(10), us(1_000_000)).with_max_ack_delay(us(25));
        r.sample(us(100), Duration::ZERO);
        assert_eq!(r.rto(), us(325));
    }

    #[test]
    fn a_steady_round_trip_still_leaves_half_a_round_trip_of_margin() {
        // Behind a steady queue every sample is the same: rttvar decays to nothing.
        let mut r = RttEstimator::new(us(1000), us(50), us(1_000_000));
        for _ in 0..200 {
            r.sample(us(8000), Duration::ZERO);
        }
        assert!(r.rttvar() < us(1), "{:?}", r.rttvar());
        assert_eq!(r.rto(), us(12_000), "srtt + srtt / 2");
        // Where the variation is the larger, it rules as before.
        r.sample(us(16_000), Duration::ZERO);
        assert_eq!(r.rto(), r.srtt() + r.rttvar() * 4);
    }

    #[test]
    fn the_floor_can_be_tens_of_microseconds() {
        let mut r = RttEstimator::new(us(100), us(20), us(1000));
        for _ in 0..50 {
            r.sample(us(2), Duration::ZERO);
        }
        assert_eq!(r.rto(), us(20));
    }

    #[test]
    fn ack_delay_is_taken_off_unless_below_the_minimum() {
        let mut r = RttEstimator::new(us(1000), us(1), us(1_000_000));
        r.sample(us(100), Duration::ZERO);
        r.sample(us(150), us(40));
        assert_eq!(r.latest(), us(110));
        r.sample(us(120), us(60));
        assert_eq!(r.latest(), us(120), "would go below min_rtt: kept whole");
    }
}
