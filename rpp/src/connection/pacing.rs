//! The pacer: spreads a congestion window over the round trip instead of sending it in
//! one burst, as a token bucket (quinn-proto's pacer is the model).
//!
//! Tokens are bytes. They refill at the pacing rate, `gain x window / srtt` (the window
//! with the connection's allowance past it, see `aggregation`; gain 2 in
//! slow start, so the window can double in a round, and 5/4 after, as Linux paces), or
//! the controller's own rate where it sets one (BBR paces at its bandwidth estimate), up to
//! a burst: the bytes the rate sends in [`BURST_INTERVAL`], but at least
//! [`MIN_BURST_PACKETS`] packets and at most the window. On a microsecond-RTT link the
//! burst is the whole window, so pacing never delays a packet there; on a long path it
//! keeps the queue a burst deep. Acknowledgements are never paced.
//!
//! # A late driver
//!
//! A wait the pacer asks for ends at a deadline, and a driver on a busy host comes back
//! after it: by a tenth of a millisecond typically, by more than a millisecond one time in
//! seven (RESULTS: "RPP beside TCP: the pacer's lost time"). The tokens of that lateness
//! are kept beyond the bucket, up to [`LATE_CREDIT`]'s worth, so the next waits are that
//! much shorter, as Linux's fq forgives a late dequeue part of the next gap. Without it
//! a batch, which needs nearly a full bucket, lost every late microsecond: beside a TCP
//! flow at 1 Gbit/s the pacer, not the window, held RPP back 60% of the time. Tokens
//! earned while the window held the flow back are not kept, even past a deadline (the
//! connection says so, [`Pacer::window_holds`]): a wait only the pacer asked for is
//! late.
//!
//! # Batches
//!
//! Where the pacer spreads the window (a burst is less than the window), a flow with
//! data queued sends its new packets in batches of one burst ([`Pacer::batch`]): a batch
//! starts only when the congestion window has room for all of it and the pacer has its
//! tokens, and then goes whole, and the driver coalesces it into one
//! segmentation-offload send ([`Gather::batch_end`](crate::Gather::batch_end)). So a
//! flow's buffers grow with its rate, as Linux sizes a paced TCP flow's (a millisecond's
//! worth): a drop-tail queue that overflows then more often drops from the larger flow,
//! about as often as its share of the window, which is what evens two flows out. Sized
//! by whatever the last acknowledgement released, two flows' buffers were drawn nearer
//! a coin's odds (RESULTS: "Two flows: whose packets the queue drops").
//!
//! Batches start where a burst reaches [`MIN_BATCH_BURST`], half a segmentation-offload
//! send: below it, a flow paces its packets one by one, which costs a host little at
//! such rates. Batches were made for 1 Gbit/s; at 200 Mbit/s beside a TCP CUBIC flow
//! they took RPP's share of the link down to the line, and paced one by one it held the
//! share it had before them (RESULTS: "RPP beside TCP: the allowance, forgiving a
//! burst"). Why a batch of ten packets costs more there than the kernel flow's bursts
//! is not yet known.

use crate::time::Instant;

/// A burst is what the rate sends in this long (nanoseconds), as Linux sizes a paced TCP
/// flow's segmentation-offload bursts (`sk_pacing_shift` 10: about a millisecond). A
/// driver that comes back later than this loses the time, but for what [`LATE_CREDIT`]
/// makes good: at 250 us, a sender on a busy two-core host, whose system calls ran
/// others' network work for up to a millisecond, sent a third below its pacing rate and
/// its window never filled (RESULTS: "RPP beside TCP at 1 Gbit/s with 1,500-byte
/// frames").
pub(crate) const BURST_INTERVAL: u64 = 1_000_000;
/// A burst, and a batch (see the module documentation), is at least this many packets.
pub(crate) const MIN_BURST_PACKETS: u64 = 4;
/// The most lateness of a driver that the pacer makes good (nanoseconds; see "A late
/// driver" in the module documentation): four bursts, so a late driver sends at most
/// five at once. With one burst, the waits late by more than a millisecond (one in
/// seven) still cost the flow time.
pub(crate) const LATE_CREDIT: u64 = 4 * BURST_INTERVAL;
/// A batch is at most this many bytes (one segmentation-offload send's worth), but at
/// least [`MIN_BURST_PACKETS`].
pub(crate) const MAX_BATCH_BYTES: u64 = 64 << 10;
/// Batches start where a burst is at least this many bytes (see "Batches" in the module
/// documentation): about 250 Mbit/s of pacing rate.
pub(crate) const MIN_BATCH_BURST: u64 = MAX_BATCH_BYTES / 2;

/// The token bucket.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    tokens: u64,
    /// Most tokens held, as of the last refill.
    capacity: u64,
    /// When tokens were last added.
    last: Instant,
    /// The end of the wait the pacer last asked for, until the pacer is asked again.
    deadline: Option<Instant>,
    max_packet: u64,
}

impl Pacer {
    pub(crate) fn new(max_packet: u64, now: Instant) -> Pacer {
        let capacity = max_packet * MIN_BURST_PACKETS;
        Pacer {
            tokens: capacity,
            capacity,
            last: now,
            deadline: None,
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

    /// Whether a batch of `packets` packets of the largest size may go without asking
    /// [`Pacer::delay`].
    #[inline]
    pub(crate) fn has_tokens_for(&self, packets: u64) -> bool {
        self.tokens >= self.max_packet * packets
    }

    /// When `packets` packets of the largest size may go, if not now: `None` means now.
    /// At a `rate` (bytes per second) of 0, as without a round-trip sample, nothing is
    /// paced; a burst is at most `window` bytes (and at least [`MIN_BURST_PACKETS`]), and
    /// more packets than the bucket holds wait for a full bucket.
    #[inline]
    pub(crate) fn delay(
        &mut self,
        now: Instant,
        rate: u64,
        window: u64,
        packets: u64,
    ) -> Option<Instant> {
        if self.has_tokens_for(packets) || rate == 0 {
            return None;
        }
        self.refill(now, rate, window, packets)
    }

    /// Packets of a batch (see the module documentation) for packets of `max_packet`
    /// bytes at `rate`, or `None` where the pacer does not spread a window of `window`
    /// bytes (a burst is the whole window, as on a microsecond round trip) or a burst is
    /// below [`MIN_BATCH_BURST`].
    pub(crate) fn batch(rate: u64, window: u64, max_packet: u64) -> Option<u64> {
        let burst = Self::burst(rate);
        if rate == 0 || burst >= window || burst < MIN_BATCH_BURST {
            return None;
        }
        let most = (MAX_BATCH_BYTES / max_packet.max(1)).max(MIN_BURST_PACKETS);
        Some((burst / max_packet.max(1)).clamp(MIN_BURST_PACKETS, most))
    }

    /// The most bytes the pacer lets go at once at `rate` (bytes per second) for a window
    /// of `window` bytes and packets of `max_packet`: a burst, at most the window, at
    /// least [`MIN_BURST_PACKETS`].
    #[inline]
    pub(crate) fn capacity(rate: u64, window: u64, max_packet: u64) -> u64 {
        Self::burst(rate)
            .min(window)
            .max(max_packet * MIN_BURST_PACKETS)
    }

    /// Bytes `rate` (bytes per second) sends in [`BURST_INTERVAL`].
    #[inline]
    fn burst(rate: u64) -> u64 {
        Self::bytes_in(rate, BURST_INTERVAL)
    }

    /// Bytes `rate` (bytes per second) sends in `nanos` nanoseconds.
    #[inline]
    fn bytes_in(rate: u64, nanos: u64) -> u64 {
        u64::try_from(u128::from(rate) * u128::from(nanos) / 1_000_000_000).unwrap_or(u64::MAX)
    }

    #[inline(never)]
    fn refill(&mut self, now: Instant, rate: u64, window: u64, packets: u64) -> Option<Instant> {
        let rate = rate.max(1);
        self.capacity = Self::capacity(rate, window, self.max_packet);
        let elapsed = now.nanos_since(self.last);
        self.last = now;
        // Rounded up: a deadline computed by rounding the wait up then always finds the
        // tokens it waited for.
        let earned =
            u64::try_from((u128::from(elapsed) * u128::from(rate)).div_ceil(1_000_000_000))
                .unwrap_or(u64::MAX);
        // The tokens of a late return to the last wait, up to LATE_CREDIT's worth, are kept
        // beyond the bucket (see "A late driver" in the module documentation).
        let late = match self.deadline.take() {
            Some(deadline) if now > deadline => {
                Self::bytes_in(rate, now.nanos_since(deadline).min(LATE_CREDIT))
            }
            _ => 0,
        };
        self.tokens = self
            .tokens
            .saturating_add(earned)
            .min(self.capacity.saturating_add(late));
        let need = (self.max_packet * packets).min(self.capacity);
        if self.tokens >= need {
            return None;
        }
        let missing = need - self.tokens;
        let wait = (u128::from(missing) * 1_000_000_000).div_ceil(u128::from(rate));
        let deadline = now.add_nanos(u64::try_from(wait).unwrap_or(u64::MAX).max(1));
        self.deadline = Some(deadline);
        Some(deadline)
    }

    /// The window, not the pacer, holds the flow back now: the wait the pacer last asked
    /// for no longer decides when the next packet goes, and a return after its deadline
    /// is not late.
    #[inline]
    pub(crate) fn window_holds(&mut self) {
        self.deadline = None;
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
        let _ = self.refill(now, rate, window, 1);
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
            match p.delay(now, Pacer::rate(window, srtt, false), window, 1) {
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
    fn a_batch_waits_for_the_tokens_of_all_its_packets() {
        // 10 MB/s: a millisecond's burst is 10 packets of 1000 B.
        let (mtu, window, rate) = (1000, 100_000, 10_000_000);
        let mut p = Pacer::new(mtu, Instant::ZERO);
        assert!(p.has_tokens_for(MIN_BURST_PACKETS));
        for _ in 0..MIN_BURST_PACKETS - 1 {
            p.on_sent(mtu);
        }
        // One packet's tokens left: a single packet goes, a batch waits for three more
        // packets' worth (300 us at 10 MB/s).
        assert!(p.delay(Instant::ZERO, rate, window, 1).is_none());
        let t = p
            .delay(Instant::ZERO, rate, window, MIN_BURST_PACKETS)
            .unwrap();
        assert_eq!(t, Instant::from_nanos(300_000));
        assert!(p.delay(t, rate, window, MIN_BURST_PACKETS).is_none());
        // Batches: a millisecond's burst, from half a segmentation-offload send (32 KiB,
        // 33 MB/s) to a whole one (65 packets of 1000 B).
        assert_eq!(Pacer::batch(rate, window, mtu), None);
        assert_eq!(Pacer::batch(4 * rate, window, mtu), Some(40));
        assert_eq!(Pacer::batch(4 * rate, window, 8000), Some(5));
        assert_eq!(Pacer::batch(rate * 100, 100 * window, mtu), Some(65));
        // A batch larger than the bucket waits for a full bucket (a millisecond's worth).
        for _ in 0..MIN_BURST_PACKETS {
            p.on_sent(mtu);
        }
        let t2 = p.delay(t, rate, window, 100).unwrap();
        assert_eq!(t2.nanos_since(t), 1_000_000);
    }

    #[test]
    fn a_late_return_keeps_the_tokens_of_its_lateness_up_to_the_credit() {
        // 10 MB/s: a burst, and the bucket, is 10 packets of 1000 B; batches of 10.
        let (mtu, window, rate) = (1000, 100_000, 10_000_000);
        let batch = 10;
        let send_batch = |p: &mut Pacer| (0..batch).for_each(|_| p.on_sent(mtu));
        let mut p = Pacer::new(mtu, Instant::ZERO);
        let t0 = Instant::ZERO;
        let _ = p.delay(t0, rate, window, 1);
        send_batch(&mut p);
        let due = p.delay(t0, rate, window, batch).unwrap();
        assert_eq!(due.nanos_since(t0), 1_000_000);
        // Back 0.4 ms late: the batch goes, and the next one waits 0.6 ms, not 1.
        let back = due.add_nanos(400_000);
        assert!(p.delay(back, rate, window, batch).is_none());
        send_batch(&mut p);
        let next = p.delay(back, rate, window, batch).unwrap();
        assert_eq!(next.nanos_since(back), 600_000);
        // Back 6 ms late: four bursts of it are kept (the credit), so five batches go at
        // once and the sixth waits a whole burst.
        assert_eq!(LATE_CREDIT, 4 * BURST_INTERVAL);
        let back = next.add_nanos(6_000_000);
        for _ in 0..5 {
            assert!(p.delay(back, rate, window, batch).is_none());
            send_batch(&mut p);
        }
        let next = p.delay(back, rate, window, batch).unwrap();
        assert_eq!(next.nanos_since(back), 1_000_000);
    }

    #[test]
    fn time_the_window_held_the_flow_back_is_not_kept() {
        // As above, but the pacer was not asked to wait: the window held the flow back
        // for 3 ms, and the bucket holds one burst only.
        let (mtu, window, rate) = (1000, 100_000, 10_000_000);
        let mut p = Pacer::new(mtu, Instant::ZERO);
        let _ = p.delay(Instant::ZERO, rate, window, 1);
        (0..10).for_each(|_| p.on_sent(mtu));
        let later = Instant::from_nanos(3_000_000);
        assert!(p.delay(later, rate, window, 10).is_none());
        (0..10).for_each(|_| p.on_sent(mtu));
        let next = p.delay(later, rate, window, 10).unwrap();
        assert_eq!(next.nanos_since(later), 1_000_000);
        // A wait the pacer asked for, then the window held the flow back (a reduction,
        // say) past its deadline: that time is not kept either.
        let back = next.add_nanos(3_000_000);
        p.window_holds();
        assert!(p.delay(back, rate, window, 10).is_none());
        (0..10).for_each(|_| p.on_sent(mtu));
        let next = p.delay(back, rate, window, 10).unwrap();
        assert_eq!(next.nanos_since(back), 1_000_000);
    }

    #[test]
    fn a_microsecond_round_trip_is_never_paced() {
        let (mtu, window, srtt) = (8192, 80 * 8192, 20_000);
        let mut p = Pacer::new(mtu, Instant::ZERO);
        let mut now = Instant::ZERO;
        let rate = Pacer::rate(window, srtt, true);
        // Warm up: the burst becomes the window.
        assert!(p.delay(now, rate, window, 1).is_none());
        for _ in 0..4 {
            p.on_sent(mtu);
        }
        now = now.add_nanos(srtt);
        assert!(p.delay(now, rate, window, 1).is_none());
        assert_eq!(Pacer::batch(rate, window, mtu), None);
        assert_eq!(p.available(now, rate, window), window);
    }
}
