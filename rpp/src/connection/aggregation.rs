//! Acknowledgements that come together: how far past the congestion window the flight
//! may go to make up for them, as Linux BBR's `extra_acked` does for a path that
//! aggregates acknowledgements.
//!
//! A flight's bytes stay counted in flight until their acknowledgement is read, and a
//! driver in user space reads late: its peer acknowledges only when it runs, and it
//! reads the acknowledgements only when it runs itself. Beside a TCP CUBIC flow on a
//! busy two-core host, each side waited for a CPU a quarter of the time and the
//! acknowledgements of a millisecond's data came in one read (RESULTS: "RPP beside TCP:
//! where the longer round trip goes"). Meanwhile the window stands full of bytes the path
//! has delivered, the sender sends nothing, and the path empties of this flow: TCP, whose
//! acknowledgements are taken in softirq as they land, keeps its window in the network.
//!
//! So, for a paced loss-based controller in congestion avoidance, the connection measures
//! how many bytes the acknowledgements bring beyond the rate the flight went at since
//! they last fell behind it (an aggregation epoch, at most a round trip long), less what
//! comes together when nothing holds it (a quantum: the larger of the peer's `ack_every`
//! packets and what the pacer lets go at once, see below), and keeps the largest such
//! excess of
//! the last two spells of [`SPELL_RTTS`] round trips. The flight may exceed the window by that much, at most a quarter of the window
//! ([`MAX_SHARE`]). The pacer spreads the window and the allowance together over the
//! round trip, so the allowance fills the time the acknowledgements were late instead of
//! going in a burst when they come. Paced on the window alone, the flight met the
//! pacer's limit before the allowance's.
//!
//! # The rate the flight went at
//!
//! It is the larger of the pacing rate and the path's delivery rate, the largest of the
//! same spells' rate samples. A sample is the bytes delivered between a packet's send and
//! its acknowledgement over the longer of the sending and the acknowledging time (so
//! acknowledgements that come together do not inflate it), as Linux's `tcp_rate` takes
//! them; an application-limited sample counts only where it is larger. Acknowledgements
//! come faster than both only when something held them. Each alone was tried in the Pair
//! harness:
//!
//! * Against the window's own pace (`window / srtt`) the excess fed itself: a flight
//!   past the window is acknowledged faster than the window's pace, and so was allowed
//!   again; and the queue draining after a reduction looked like aggregation, so each
//!   reduction was a quarter smaller.
//! * Against the delivery rate alone, a paced flow whose flight ends before the round
//!   trip does (the pacer runs at 5/4 of the window per round trip) is acknowledged at
//!   the pacing rate for most of each round trip: a fifth of the window counted as
//!   aggregation where nothing was late, and CUBIC took 12% more under random loss.
//! * Without the quantum, a window of a dozen 8 KiB packets counted each acknowledgement
//!   of two as aggregation.
//!
//! # A flow's own bursts
//!
//! The pacer lets up to a burst go at once (about a millisecond of its rate, at least
//! four packets; at high rates as one batch, see the `pacing` module), and the packets
//! leave back to back. Where they meet another flow's in a queue, their
//! acknowledgements come back bunched the same way: faster than the pacing rate for a
//! burst, then not at all. That is the flow's own doing, not lateness, so one burst is
//! forgiven with the `ack_every` packets. Without it, two CUBIC flows that shared a
//! drop-tail queue in the Dumbbell harness, driven promptly, each had an allowance
//! nearly all the time, the smaller flow the larger one: it sent past its window into
//! the full queue, lost more, and the two split the link less evenly than with no
//! allowance at all (RESULTS: "RPP beside TCP: the allowance, forgiving a burst"). A
//! driver that reads late still gets what came beyond the burst.

use crate::time::Instant;

/// A spell is this many smoothed round trips: the excess is the largest of the last two
/// spells, so it lasts five to ten round trips (Linux BBR's `bbr_extra_acked_win_rtts`).
pub(crate) const SPELL_RTTS: u64 = 5;
/// The allowance is at most the window divided by this.
pub(crate) const MAX_SHARE: u64 = 4;

/// A delivery rate sample: `delivered` bytes in `interval` nanoseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Delivery {
    pub(crate) delivered: u64,
    pub(crate) interval: u64,
    /// The application, not the path, limited the flight the sample measures.
    pub(crate) app_limited: bool,
}

/// What the connection knows of the flight when an acknowledgement comes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flight {
    /// The congestion window, bytes (`u64::MAX`: none, nothing is measured).
    pub(crate) window: u64,
    /// The smoothed round trip, ns (0: no sample yet, nothing is measured).
    pub(crate) srtt: u64,
    /// What comes together when nothing holds it (the peer's `ack_every` packets, or what
    /// the pacer lets go at once where that is more): no aggregation, however small the
    /// window.
    pub(crate) quantum: u64,
    /// The pacing rate, bytes per second: acknowledgements at it are not aggregated
    /// either.
    pub(crate) pace: u64,
}

/// The measurement.
#[derive(Debug, Clone, Default)]
pub(crate) struct Aggregation {
    /// When the present aggregation epoch began, if one has.
    epoch_start: Option<Instant>,
    /// Bytes acknowledged since then.
    epoch_acked: u64,
    /// The largest excess of the present spell and of the one before.
    spells: [u64; 2],
    /// The largest delivery rate of the present spell and of the one before, bytes per
    /// second.
    rates: [u64; 2],
    /// When the present spell ends.
    spell_end: Option<Instant>,
}

impl Aggregation {
    /// `acked` bytes were newly acknowledged at `now`, in `flight`, and the
    /// acknowledgement gave the rate sample `delivery`.
    pub(crate) fn on_ack(&mut self, now: Instant, acked: u64, flight: Flight, delivery: Delivery) {
        let Flight {
            window,
            srtt,
            quantum,
            pace,
        } = flight;
        if srtt == 0 || window == u64::MAX {
            return;
        }
        if self.spell_end.is_none_or(|end| now >= end) {
            self.spells = [0, self.spells[0]];
            self.rates = [0, self.rates[0]];
            self.spell_end = Some(now.add_nanos(srtt.saturating_mul(SPELL_RTTS)));
        }
        if delivery.interval > 0 {
            let rate = u64::try_from(
                u128::from(delivery.delivered) * 1_000_000_000 / u128::from(delivery.interval),
            )
            .unwrap_or(u64::MAX);
            if !delivery.app_limited || rate > self.rate() {
                self.rates[0] = self.rates[0].max(rate);
            }
        }
        let rate = self.rate().max(pace);
        if rate == 0 {
            return;
        }
        // An epoch lasts at most a round trip: a burst long past is no reason to send
        // past the window now.
        let start = match self.epoch_start {
            Some(start) if now.nanos_since(start) <= srtt => start,
            _ => {
                self.epoch_acked = 0;
                *self.epoch_start.insert(now)
            }
        };
        // What the delivery rate would have brought since the epoch began.
        let expected =
            u64::try_from(u128::from(rate) * u128::from(now.nanos_since(start)) / 1_000_000_000)
                .unwrap_or(u64::MAX);
        let expected = if self.epoch_acked <= expected {
            // The acknowledgements fell behind the rate: a new epoch from here.
            self.epoch_start = Some(now);
            self.epoch_acked = 0;
            0
        } else {
            expected
        };
        self.epoch_acked = self.epoch_acked.saturating_add(acked);
        let excess = (self.epoch_acked - expected)
            .saturating_sub(quantum)
            .min(window);
        self.spells[0] = self.spells[0].max(excess);
    }

    /// The delivery rate, bytes per second (0 before a sample).
    #[inline]
    fn rate(&self) -> u64 {
        self.rates[0].max(self.rates[1])
    }

    /// Bytes the flight may exceed a window of `window` bytes by.
    #[inline]
    pub(crate) fn allowance(&self, window: u64) -> u64 {
        self.spells[0].max(self.spells[1]).min(window / MAX_SHARE)
    }

    /// Forgets what was measured (the path, or the controller, changed).
    pub(crate) fn reset(&mut self) {
        *self = Aggregation::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn at_us(us: u64) -> Instant {
        Instant::from_nanos(us * 1_000)
    }

    fn fl(window: u64, srtt: u64, quantum: u64, pace: u64) -> Flight {
        Flight {
            window,
            srtt,
            quantum,
            pace,
        }
    }

    /// A sample of 10 MB/s (100 KB over a 10 ms round trip).
    const TEN_MB_S: Delivery = Delivery {
        delivered: 100_000,
        interval: 10 * MS,
        app_limited: false,
    };

    #[test]
    fn acknowledgements_at_the_delivery_rate_allow_no_more_than_one_of_them() {
        // 1 KB every 0.1 ms is 10 MB/s, the rate the samples say. Past a window of
        // 100 KB, then after a reduction to 70 KB (the flight drains at the same rate):
        // neither the flight past the window nor the drain reads as aggregation.
        let mut a = Aggregation::default();
        for i in 1..=2_000u64 {
            let window = if i < 1_000 { 100_000 } else { 70_000 };
            a.on_ack(at_us(i * 100), 1_000, fl(window, 10 * MS, 0, 0), TEN_MB_S);
        }
        assert!(
            a.allowance(1_000_000) <= 1_000,
            "{}",
            a.allowance(1_000_000)
        );
    }

    #[test]
    fn acknowledgements_read_together_allow_what_came_beyond_the_rate() {
        // Every 2 ms, the acknowledgements of 2 ms at 10 MB/s come in one read.
        let mut a = Aggregation::default();
        let window = 400_000;
        for i in 1..=50u64 {
            a.on_ack(
                at_us(2_000 * i),
                20_000,
                fl(window, 10 * MS, 0, 0),
                TEN_MB_S,
            );
        }
        assert_eq!(a.allowance(window), 20_000, "one read's bytes");
        // A read only 0.5 ms after the last: 40 KB in the epoch where 5 KB were due.
        a.on_ack(at_us(100_500), 20_000, fl(window, 10 * MS, 0, 0), TEN_MB_S);
        assert_eq!(a.allowance(window), 35_000);
        assert_eq!(
            a.allowance(100_000),
            25_000,
            "at most a quarter of the window"
        );
    }

    #[test]
    fn what_one_acknowledgement_normally_covers_is_no_aggregation() {
        // Acknowledgements of two 8 KB packets, at the rate: nothing past the quantum.
        let mut a = Aggregation::default();
        for i in 1..=100u64 {
            a.on_ack(
                at_us(1_600 * i),
                16_000,
                fl(100_000, 10 * MS, 16_000, 0),
                TEN_MB_S,
            );
        }
        assert_eq!(a.allowance(100_000), 0);
        // Three quanta in one acknowledgement just after one: 64 KB in the epoch where
        // 10 B were due, and one quantum is forgiven.
        a.on_ack(
            at_us(160_001),
            48_000,
            fl(1_000_000, 10 * MS, 16_000, 0),
            TEN_MB_S,
        );
        assert_eq!(a.allowance(1_000_000), 47_990);
    }

    #[test]
    fn the_allowance_lasts_two_spells_then_goes() {
        let mut a = Aggregation::default();
        let window = 1_000_000;
        // The first acknowledgement sets the rate; the second brings 50 KB at once.
        a.on_ack(at_us(1_000), 1_000, fl(window, 10 * MS, 0, 0), TEN_MB_S);
        a.on_ack(at_us(1_010), 50_000, fl(window, 10 * MS, 0, 0), TEN_MB_S);
        assert_eq!(a.allowance(window), 50_900);
        // Acknowledgements at the rate (100 B per 0.01 ms) through the next 100 ms.
        for i in 1..=10_000u64 {
            a.on_ack(
                at_us(1_010 + i * 10),
                100,
                fl(window, 10 * MS, 0, 0),
                TEN_MB_S,
            );
            if i < 4_900 {
                assert_eq!(a.allowance(window), 50_900, "in the first spell, at {i}");
            }
        }
        assert!(a.allowance(window) <= 100, "{}", a.allowance(window));
        a.reset();
        assert_eq!(a.allowance(window), 0);
    }

    #[test]
    fn no_round_trip_or_rate_no_measurement() {
        let mut a = Aggregation::default();
        a.on_ack(at_us(1_000), 50_000, fl(100_000, 0, 0, 0), TEN_MB_S);
        a.on_ack(at_us(2_000), 50_000, fl(u64::MAX, 10 * MS, 0, 0), TEN_MB_S);
        let none = Delivery {
            interval: 0,
            ..TEN_MB_S
        };
        a.on_ack(at_us(3_000), 50_000, fl(100_000, 10 * MS, 0, 0), none);
        assert_eq!(a.allowance(100_000), 0);
    }

    #[test]
    fn an_application_limited_sample_counts_only_where_it_is_larger() {
        let mut a = Aggregation::default();
        let slow = Delivery {
            delivered: 10_000,
            app_limited: true,
            ..TEN_MB_S
        };
        a.on_ack(at_us(1_000), 1_000, fl(100_000, 10 * MS, 0, 0), TEN_MB_S);
        // A slower application-limited sample does not lower what the epoch expects (it
        // could not: the filter keeps the largest), and a faster one raises it.
        a.on_ack(at_us(1_100), 1_000, fl(100_000, 10 * MS, 0, 0), slow);
        assert_eq!(a.rate(), 10_000_000);
        let fast = Delivery {
            delivered: 200_000,
            app_limited: true,
            ..TEN_MB_S
        };
        a.on_ack(at_us(1_200), 1_000, fl(100_000, 10 * MS, 0, 0), fast);
        assert_eq!(a.rate(), 20_000_000);
    }
}
