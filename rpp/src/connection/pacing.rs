//! The pacer: spreads a congestion window over the round trip instead of sending it in
//! one burst, as a token bucket (quinn-proto's pacer is the model).
//!
//! Tokens are bytes. They refill at the pacing rate, `gain x window / srtt` (gain 2 in
//! slow start, so the window can double in a round, and 5/4 after, as Linux paces), or
//! the controller's own rate where it sets one (BBR paces at its bandwidth estimate), up to
//! a burst: the bytes the rate sends in [`BURST_INTERVAL`], but at least
//! [`MIN_BURST_PACKETS`] packets and at most the window. On a microsecond-RTT link the
//! burst is the whole window, so pacing never delays a packet there; on a long path it
//! keeps the queue a burst deep. Acknowledgements are never paced.

use crate::time::Instant;

/// A burst is what the rate sends in this long (nanoseconds), as Linux sizes a paced TCP
/// flow's segmentation-offload bursts (`sk_pacing_shift` 10: about a millisecond). A
/// driver that comes back later than this loses the time: at 250 us, a sender on a busy
/// two-core host, whose system calls ran others' network work for up to a millisecond,
/// sent a third below its pacing rate and its window never filled (RESULTS: "RPP beside
/// TCP at 1 Gbit/s with 1,500-byte frames").
pub(crate) const BURST_INTERVAL: u64 = 1_000_000;
/// A burst is at least this many packets (a GSO batch's worth).
pub(crate) const MIN_BURST_PACKETS: u64 = 4;

/// The token bucket.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    tokens: u64,
    /// Most tokens held, as of the last refill.
    capacity: u64,
    /// When tokens were last added.
    last: Instant,
    max_packet: u64,
}

impl Pacer {
    pub(crate) fn new(max_packet: u64, now: Instant) -> Pacer {
        let capacity = max_packet * MIN_BURST_PACKETS;
        Pacer {
            tokens: capacity,
            capacity,
            last: now,
            max_packet,
        }
    }

    /// Bytes per second the pacer lets through for `window` bytes per `srtt` ns.
    pub(crate) fn rate(window: u64, srtt: u64, slow_start: bool) -> u64 {
        if srtt == 0 {
            return 0;
        }
        let (num, den) = if slow_start { (2, 1) } else { (5, 4) };
        let per_sec = u128::from(window) * 1_000_000_000 * num / (u128::from(srtt) * den);
        u64::try_from(per_sec).unwrap_or(u64::MAX)
    }

    /// Whether a packet of the largest size may go without asking [`Pacer::delay`].
    #[inline]
    pub(crate) fn has_tokens(&self) -> bool {
        self.tokens >= self.max_packet
    }

    /// When a packet of the largest size may go, if not now: `None` means now. At a
    /// `rate` (bytes per second) of 0, as without a round-trip sample, nothing is paced;
    /// a burst is at most `window` bytes.
    #[inline]
    pub(crate) fn delay(&mut self, now: Instant, rate: u64, window: u64) -> Option<Instant> {
        if self.tokens >= self.max_packet || rate == 0 {
            return None;
        }
        self.refill(now, rate, window)
    }

    #[inline(never)]
    fn refill(&mut self, now: Instant, rate: u64, window: u64) -> Option<Instant> {
        let rate = rate.max(1);
        let burst = u64::try_from(u128::from(rate) * u128::from(BURST_INTERVAL) / 1_000_000_000)
            .unwrap_or(u64::MAX);
        let floor = self.max_packet * MIN_BURST_PACKETS;
        self.capacity = burst.min(window).max(floor);
        let elapsed = now.nanos_since(self.last);
        self.last = now;
        // Rounded up: a deadline computed by rounding the wait up then always finds the
        // tokens it waited for.
        let earned =
            u64::try_from((u128::from(elapsed) * u128::from(rate)).div_ceil(1_000_000_000))
                .unwrap_or(u64::MAX);
        self.tokens = self.tokens.saturating_add(earned).min(self.capacity);
        if self.tokens >= self.max_packet {
            return None;
        }
        let missing = self.max_packet - self.tokens;
        let wait = (u128::from(missing) * 1_000_000_000).div_ceil(u128::from(rate));
        Some(now.add_nanos(u64::try_from(wait).unwrap_or(u64::MAX).max(1)))
    }

    /// A packet of `bytes` went.
    #[inline]
    pub(crate) fn on_sent(&mut self, bytes: u64) {
        self.tokens = self.tokens.saturating_sub(bytes);
    }

    /// Tokens now, for a driver that asks how much it may send in one batch.
    pub(crate) fn available(&mut self, now: Instant, rate: u64, window: u64) -> u64 {
        if rate == 0 {
            return u64::MAX;
        }
        let _ = self.refill(now, rate, window);
        self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_spread_over_the_round_trip() {
        // 40 packets of 1000 B per 10 ms, after slow start: 5 MB/s; bursts of 4 packets.
        let (mtu, window, srtt) = (1000, 40_000, 10_000_000);
        let mut p = Pacer::new(mtu, Instant::ZERO);
        let mut now = Instant::ZERO;
        let mut sent_at = Vec::new();
        while sent_at.len() < 40 {
            match p.delay(now, Pacer::rate(window, srtt, false), window) {
                None => {
                    p.on_sent(mtu);
                    sent_at.push(now);
                }
                Some(t) => {
                    assert!(t > now);
                    now = t;
                }
            }
        }
        let span = sent_at[39].nanos_since(sent_at[0]);
        // 36 packets beyond the first burst at 1.25 x 40 per 10 ms: 7.2 ms.
        assert!((6_500_000..=8_000_000).contains(&span), "{span}");
        assert_eq!(
            sent_at.iter().filter(|&&t| t == Instant::ZERO).count(),
            4,
            "one burst at once"
        );
    }

    #[test]
    fn a_microsecond_round_trip_is_never_paced() {
        let (mtu, window, srtt) = (8192, 80 * 8192, 20_000);
        let mut p = Pacer::new(mtu, Instant::ZERO);
        let mut now = Instant::ZERO;
        let rate = Pacer::rate(window, srtt, true);
        // Warm up: the burst becomes the window.
        assert!(p.delay(now, rate, window).is_none());
        for _ in 0..4 {
            p.on_sent(mtu);
        }
        now = now.add_nanos(srtt);
        assert!(p.delay(now, rate, window).is_none());
        assert_eq!(p.available(now, rate, window), window);
    }
}
