//! HyStart++ (RFC 9406): the first slow start ends when the round trip starts to grow,
//! before the queue it fills overflows, instead of at the first loss.
//!
//! Slow start doubles the window every round trip until a packet is lost; by then the
//! bottleneck's queue is full and a whole window's worth of packets meets it, a burst of
//! losses and a halving. HyStart++ watches the least round trip of each round (a round
//! ends when a packet sent after it began is acknowledged): once a round's least round
//! trip is above the last one's by an eighth of it, clamped to 4-16 ms, the queue is
//! building and the controller moves to *conservative slow start*, growing by a quarter
//! of what is acknowledged. If the round trip falls back below where it was when that
//! began, the rise was noise and slow start resumes; after five rounds of conservative
//! slow start the window is taken as the threshold and congestion avoidance begins.
//!
//! Only the first slow start uses it (RFC 9406 §4.3): after a loss the threshold says
//! where to stop. The thresholds are milliseconds, so a microsecond cluster link never
//! leaves slow start by delay: there the queue, not the propagation, is what a rise of
//! 4 ms would measure.

use crate::time::Instant;

/// Round trips a round needs before its least one counts (`N_RTT_SAMPLE`).
const SAMPLES: u32 = 8;
/// The rise that ends slow start is the last round's least round trip over this
/// (`MIN_RTT_DIVISOR`), clamped to [`MIN_THRESHOLD`, `MAX_THRESHOLD`].
const DIVISOR: u64 = 8;
/// Least rise that ends slow start, in nanoseconds (`MIN_RTT_THRESH`, 4 ms).
const MIN_THRESHOLD: u64 = 4_000_000;
/// Greatest rise needed to end slow start, in nanoseconds (`MAX_RTT_THRESH`, 16 ms).
const MAX_THRESHOLD: u64 = 16_000_000;
/// Conservative slow start grows by what is acknowledged over this (`CSS_GROWTH_DIVISOR`).
pub(crate) const CSS_DIVISOR: u64 = 4;
/// Rounds of conservative slow start before congestion avoidance (`CSS_ROUNDS`).
const CSS_ROUNDS: u32 = 5;

/// How the window grows on an acknowledgement in the first slow start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Growth {
    /// By what was acknowledged (slow start).
    Full,
    /// By a [`CSS_DIVISOR`]th of it (conservative slow start).
    Conservative,
    /// Slow start is over: the present window is the threshold.
    Done,
}

/// HyStart++'s state for one connection's first slow start.
#[derive(Debug, Clone)]
pub(crate) struct HyStart {
    /// The present round ends when a packet sent at or after this is acknowledged.
    round_end: Option<Instant>,
    /// The least round trip of the last round and of this one, in nanoseconds
    /// (`u64::MAX`: none yet).
    last_min: u64,
    current_min: u64,
    /// Round trips seen this round.
    samples: u32,
    /// The least round trip measured since the last acknowledgement (`u64::MAX`: none),
    /// counted in that acknowledgement's round.
    pending: u64,
    /// In conservative slow start: the least round trip when it began, and the rounds
    /// it has lasted.
    css: Option<(u64, u32)>,
    /// Times slow start gave way to conservative slow start because the round trip grew.
    exits: u64,
}

impl Default for HyStart {
    fn default() -> HyStart {
        HyStart {
            round_end: None,
            last_min: u64::MAX,
            current_min: u64::MAX,
            samples: 0,
            pending: u64::MAX,
            css: None,
            exits: 0,
        }
    }
}

impl HyStart {
    /// A round trip measured in the first slow start (only unambiguous samples: a
    /// resend's acknowledgement says nothing of the queue). It counts in the round of
    /// the acknowledgement that follows.
    pub(crate) fn on_rtt_sample(&mut self, rtt: u64) {
        self.pending = self.pending.min(rtt);
    }

    /// An acknowledgement at `now` of data whose latest packet was sent at `sent`, in
    /// the first slow start (its round trip, if it gave one, came first through
    /// [`HyStart::on_rtt_sample`]): how the window grows.
    pub(crate) fn on_ack(&mut self, now: Instant, sent: Instant) -> Growth {
        if self.round_end.is_none_or(|end| sent >= end) {
            // A new round: what the last one saw is the baseline.
            self.round_end = Some(now);
            self.last_min = self.current_min;
            self.current_min = u64::MAX;
            self.samples = 0;
            if let Some((_, rounds)) = self.css.as_mut() {
                *rounds += 1;
                if *rounds >= CSS_ROUNDS {
                    self.css = None;
                    self.pending = u64::MAX;
                    return Growth::Done;
                }
            }
        }
        if self.pending != u64::MAX {
            self.current_min = self.current_min.min(self.pending);
            self.samples = self.samples.saturating_add(1);
            self.pending = u64::MAX;
        }
        let counted = self.samples >= SAMPLES;
        match self.css {
            None if counted && self.last_min != u64::MAX => {
                let threshold = (self.last_min / DIVISOR).clamp(MIN_THRESHOLD, MAX_THRESHOLD);
                if self.current_min >= self.last_min.saturating_add(threshold) {
                    self.css = Some((self.current_min, 0));
                    self.exits += 1;
                    return Growth::Conservative;
                }
                Growth::Full
            }
            None => Growth::Full,
            Some((baseline, _)) if counted && self.current_min < baseline => {
                // The rise did not last: slow start again.
                self.css = None;
                Growth::Full
            }
            Some(_) => Growth::Conservative,
        }
    }

    /// Times slow start gave way to conservative slow start because the round trip grew
    /// (more than once only if a rise proved noise).
    pub(crate) fn exits(&self) -> u64 {
        self.exits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(micros: u64) -> Instant {
        Instant::from_nanos(micros * 1000)
    }

    /// Drives `rounds` rounds of `per_round` acknowledgements each, every packet taking
    /// `rtt(round)` microseconds; returns the growth each acknowledgement got.
    fn rounds(h: &mut HyStart, from: u32, to: u32, rtt: impl Fn(u32) -> u64) -> Vec<Growth> {
        let mut out = Vec::new();
        for r in from..to {
            // Each round starts 100 ms after the last; its packets go out 1 ms apart.
            let start = u64::from(r) * 100_000;
            for i in 0..10 {
                let sent = start + i * 1000;
                h.on_rtt_sample(rtt(r) * 1000);
                out.push(h.on_ack(at(sent + rtt(r)), at(sent)));
            }
        }
        out
    }

    #[test]
    fn a_steady_round_trip_stays_in_slow_start() {
        let mut h = HyStart::default();
        let g = rounds(&mut h, 0, 20, |_| 20_000);
        assert!(g.iter().all(|&g| g == Growth::Full));
        assert_eq!(h.exits(), 0);
    }

    #[test]
    fn a_rising_round_trip_goes_conservative_then_ends_slow_start() {
        let mut h = HyStart::default();
        // 20 ms, then 26 ms: more than the 4 ms floor (20/8 is below it).
        let g = rounds(&mut h, 0, 3, |_| 20_000);
        assert!(g.iter().all(|&g| g == Growth::Full));
        let g = rounds(&mut h, 3, 4, |_| 26_000);
        // The first eight samples of the round are needed before it counts.
        assert_eq!(&g[..7], &[Growth::Full; 7]);
        assert_eq!(&g[7..], &[Growth::Conservative; 3]);
        // Four more rounds stay conservative; the fifth ends slow start at its first
        // acknowledgement.
        let g = rounds(&mut h, 4, 9, |_| 26_000);
        assert!(g[..40].iter().all(|&g| g == Growth::Conservative), "{g:?}");
        assert_eq!(g[40], Growth::Done);
        assert_eq!(h.exits(), 1);
    }

    #[test]
    fn a_rise_below_the_threshold_is_not_congestion() {
        let mut h = HyStart::default();
        // 40 ms then 44 ms: 4 ms is less than 40/8 = 5 ms.
        rounds(&mut h, 0, 3, |_| 40_000);
        let g = rounds(&mut h, 3, 6, |_| 44_000);
        assert!(g.iter().all(|&g| g == Growth::Full));
    }

    #[test]
    fn a_round_trip_that_falls_back_resumes_slow_start() {
        let mut h = HyStart::default();
        rounds(&mut h, 0, 3, |_| 20_000);
        rounds(&mut h, 3, 4, |_| 30_000);
        // Below the 30 ms that began the conservative phase: slow start again.
        let g = rounds(&mut h, 4, 5, |_| 21_000);
        assert_eq!(g[9], Growth::Full);
        assert_eq!(h.exits(), 1);
        // And the next rise, measured against the 21 ms round, starts it again.
        let g = rounds(&mut h, 5, 6, |_| 30_000);
        assert_eq!(g[9], Growth::Conservative);
        assert_eq!(h.exits(), 2);
    }
}
