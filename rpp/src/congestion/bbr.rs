//! BBR, version 1 (draft-cardwell-iccrg-bbr-congestion-control-00, as Linux's
//! `tcp_bbr.c` runs it): a model of the path, its bottleneck bandwidth and its round trip
//! without a queue, instead of a window that loss alone steers.
//!
//! * The bandwidth estimate is the largest delivery rate ([`RateSample`]) of the last ten
//!   round trips (a windowed max filter); a sample the application limited counts only
//!   if it raises the estimate. The round-trip floor is the least round trip of the last
//!   ten seconds.
//! * The window is twice the bandwidth-delay product, plus three pacing quanta (the bytes
//!   the pacer lets out in a millisecond, from 40 to 64 KiB) for the batching of sends
//!   and acknowledgements; data is paced at the estimate times a gain.
//! * **Startup** paces and grows the window at 2/ln 2 (about 2.89) per round, the
//!   bandwidth doubling each round, until three rounds in a row raised the estimate by
//!   less than a quarter: the pipe is full. **Drain** then paces at the inverse gain
//!   until what is in flight is down to one product. **ProbeBW** cycles the pacing gain
//!   through 5/4, 3/4 and six rounds of 1: a round above the estimate to find more, one
//!   below to drain what it queued. **ProbeRTT**: when the floor is ten seconds old, the
//!   window goes to four packets for at least 200 ms and a round, so that the queue
//!   drains and a new floor is measured, then back where it was.
//! * Loss is not the signal: a loss event holds the window to what is in flight plus
//!   what each acknowledgement delivers (packet conservation) for a round, and once the
//!   flight sent before it is acknowledged, the window is back where it was. A timeout in
//!   a row (persistent congestion) takes the window to the floor, also until then.
//!
//! What it does not do: BBR v2's bounds from loss and ECN, the ack-aggregation allowance
//! (Linux's `extra_acked`: tried, and over a token bucket whose 32 KB burst inflates short
//! delivery samples it let one flow alone overrun the queue, 1.6-6% of its packets sent
//! again), and the restart from idle at the estimated rate. Known limits of v1: in a buffer
//! shallower than its probing needs it loses packets at every cycle and takes more than
//! its share from a loss-based flow (which backs off at each loss, where BBR does not);
//! in a deep buffer a loss-based flow that keeps the queue full takes more than its share
//! from BBR, whose flight is bounded by twice the product; two BBR flows of different
//! round trips do not share evenly.

use super::{Controller, RateSample, Sizes};
use crate::time::Instant;

/// Gains are in 1/256.
const UNIT: u64 = 256;
/// 2/ln 2, rounded up: the least gain that doubles the delivery rate each round.
const HIGH_GAIN: u64 = UNIT * 2885 / 1000 + 1;
/// Its inverse: Drain empties in a round the queue Startup built in its last.
const DRAIN_GAIN: u64 = UNIT * 1000 / 2885;
/// The window is twice the product in ProbeBW (room for acknowledgements that come
/// late or in bursts).
const CWND_GAIN: u64 = UNIT * 2;
/// ProbeBW's pacing gains, a round each.
const PACING_GAINS: [u64; 8] = [
    UNIT * 5 / 4,
    UNIT * 3 / 4,
    UNIT,
    UNIT,
    UNIT,
    UNIT,
    UNIT,
    UNIT,
];
/// The bandwidth filter's window, in round trips.
const BW_WINDOW_ROUNDS: u64 = 10;
/// The round-trip floor's window, nanoseconds.
const MIN_RTT_WINDOW: u64 = 10_000_000_000;
/// ProbeRTT's least time at the small window, nanoseconds.
const PROBE_RTT_TIME: u64 = 200_000_000;
/// The pipe is full once the estimate grew by less than this (5/4) ...
const FULL_BW_GROWTH: u64 = UNIT * 5 / 4;
/// ... this many rounds in a row.
const FULL_BW_ROUNDS: u32 = 3;
/// Pacing goes this much below the estimate, in percent (Linux's margin), so that a
/// flow at its estimate does not build a queue of its own.
const PACING_MARGIN_PERCENT: u64 = 1;
/// The pacing quantum is what the pacing rate sends in this long (nanoseconds) ...
const QUANTUM_INTERVAL: u64 = 1_000_000;
/// ... at least this many bytes (and two packets). With Linux's floor, two packets, RPP
/// beside a TCP BBR flow through a 200 Mbit/s bottleneck with a 10 ms queue got
/// 0.11-0.16 of the link: both flows end up bounded by their windows (twice a product of
/// a few KB at that path's 20 µs floor), so each one's three quanta decide the split,
/// and TCP's (from its segmentation-offload size) are 64 KB each. Measured there: 32 KiB
/// gave RPP 0.31-0.37, 48 KiB 0.51-0.58 (TCP down to 0.33), 40 KiB 0.45-0.49 beside TCP
/// BBR and 0.43-0.47 beside TCP CUBIC, one flow alone retransmitting 0.01-0.03% (see
/// benches/RESULTS.md). A window of 120 KiB and more is a deep queue on a slow path if
/// the estimate is too high; the pacing at the estimate is what keeps it empty there ...
const MIN_QUANTUM: u64 = 40 * 1024;
/// ... at most this many bytes.
const MAX_QUANTUM: u64 = 64 * 1024;

/// Where BBR is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BbrMode {
    /// Finding the bandwidth: the rate doubles each round.
    Startup,
    /// Emptying the queue Startup built.
    Drain,
    /// At the estimate, probing above and below it in turn.
    ProbeBw,
    /// At four packets for a while, to measure the round trip without a queue.
    ProbeRtt,
}

/// A windowed max filter over round counts, kept as three samples (the best, the best
/// since a quarter of the window ago, the best since half of it ago), as Kathleen
/// Nichols' algorithm keeps them: each update is a few comparisons, and the estimate
/// ages out a window after it was measured.
#[derive(Debug, Clone, Copy, Default)]
struct MaxFilter {
    /// (round, value), best first.
    s: [(u64, u64); 3],
}

impl MaxFilter {
    fn get(&self) -> u64 {
        self.s[0].1
    }

    fn update(&mut self, window: u64, t: u64, v: u64) {
        let fresh = (t, v);
        if v >= self.s[0].1 || t.saturating_sub(self.s[2].0) > window {
            // A new best, or nothing left in the window: start over.
            self.s = [fresh; 3];
            return;
        }
        if v >= self.s[1].1 {
            self.s[1] = fresh;
            self.s[2] = fresh;
        } else if v >= self.s[2].1 {
            self.s[2] = fresh;
        }
        let age = t.saturating_sub(self.s[0].0);
        if age > window {
            // The best has aged out: the next best takes its place (twice, if that one
            // has too).
            self.s = [self.s[1], self.s[2], fresh];
            if t.saturating_sub(self.s[0].0) > window {
                self.s = [self.s[1], self.s[2], fresh];
            }
        } else if self.s[1].0 == self.s[0].0 && age > window / 4 {
            // A quarter of the window without a second best: take one from now.
            self.s[1] = fresh;
            self.s[2] = fresh;
        } else if self.s[2].0 == self.s[1].0 && age > window / 2 {
            self.s[2] = fresh;
        }
    }
}

/// The BBR (v1) controller: see the module docs.
#[derive(Debug, Clone)]
pub struct Bbr {
    sizes: Sizes,
    cwnd: u64,
    mode: BbrMode,
    /// The bandwidth estimate, bytes per second, over round counts.
    bw: MaxFilter,
    /// Round trips so far, and the delivered count whose acknowledgement ends the current
    /// one.
    rounds: u64,
    next_round_delivered: u64,
    round_start: bool,
    /// The round-trip floor in nanoseconds (`u64::MAX` before a sample) and when it was
    /// measured.
    min_rtt: u64,
    min_rtt_stamp: Instant,
    /// ProbeRTT ends at this instant, once the flight is small (and a round has passed).
    probe_rtt_done: Option<Instant>,
    probe_rtt_round_done: bool,
    probe_rtts: u64,
    /// Packets sent before the delivered count passed this went during ProbeRTT (or
    /// while its flight was still out): their samples say what four packets deliver,
    /// not the path, and are taken as application-limited (as Linux marks them).
    probe_rtt_mark: u64,
    pacing_gain: u64,
    cwnd_gain: u64,
    /// The pacing rate, bytes per second (0: none yet).
    pacing_rate: u64,
    cycle_index: usize,
    cycle_stamp: Instant,
    /// Startup's end: the estimate at the last round it grew by a quarter, and rounds
    /// since.
    full_bw: u64,
    full_bw_rounds: u32,
    full_bw_reached: bool,
    /// The window before a loss event, a timeout or ProbeRTT, to come back to.
    prior_cwnd: u64,
    /// Packets sent at or before this instant were in flight when the current loss event
    /// began; the event ends when a later one is acknowledged.
    recovery_start: Option<Instant>,
    /// The window follows the flight (packet conservation) until the round ends.
    packet_conservation: bool,
    /// Bytes in flight as of the last sample.
    in_flight: u64,
    /// Bytes the last sample acknowledged.
    last_acked: u64,
    /// Bytes delivered in all, as of the last sample.
    delivered: u64,
}

impl Bbr {
    /// A controller for packets of at most `max_packet` bytes, starting with a window of
    /// `initial_packets` packets (at least [`MINIMUM_WINDOW_PACKETS`](super::MINIMUM_WINDOW_PACKETS)).
    pub fn new(max_packet: u64, initial_packets: u32) -> Bbr {
        let sizes = Sizes::new(max_packet, initial_packets);
        Bbr {
            sizes,
            cwnd: sizes.initial,
            mode: BbrMode::Startup,
            bw: MaxFilter::default(),
            rounds: 0,
            next_round_delivered: 0,
            round_start: false,
            min_rtt: u64::MAX,
            min_rtt_stamp: Instant::ZERO,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            probe_rtts: 0,
            probe_rtt_mark: 0,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            pacing_rate: 0,
            cycle_index: 0,
            cycle_stamp: Instant::ZERO,
            full_bw: 0,
            full_bw_rounds: 0,
            full_bw_reached: false,
            prior_cwnd: 0,
            recovery_start: None,
            packet_conservation: false,
            in_flight: 0,
            last_acked: 0,
            delivered: 0,
        }
    }

    /// Where it is in its cycle.
    pub fn mode(&self) -> BbrMode {
        self.mode
    }

    /// The bandwidth estimate, bytes per second (0 before a sample).
    pub fn bandwidth(&self) -> u64 {
        self.bw.get()
    }

    /// The round-trip floor in nanoseconds, if measured.
    pub fn min_rtt(&self) -> Option<u64> {
        (self.min_rtt != u64::MAX).then_some(self.min_rtt)
    }

    /// The pacing gain now, in 1/256.
    pub fn pacing_gain(&self) -> u64 {
        self.pacing_gain
    }

    /// Times ProbeRTT was entered.
    pub fn probe_rtts(&self) -> u64 {
        self.probe_rtts
    }

    /// Whether Startup found the pipe full.
    pub fn full_bandwidth_reached(&self) -> bool {
        self.full_bw_reached
    }

    /// `gain` (in 1/256) times the bandwidth-delay product, in bytes; the initial window
    /// before a round trip was measured.
    fn bdp(&self, gain: u64) -> u64 {
        if self.min_rtt == u64::MAX {
            return self.sizes.initial;
        }
        let bdp = u128::from(self.bw.get()) * u128::from(self.min_rtt) * u128::from(gain)
            / (1_000_000_000 * u128::from(UNIT));
        u64::try_from(bdp).unwrap_or(u64::MAX)
    }

    /// The bytes the pacer sends in a millisecond: at least 40 KiB (and two packets), at
    /// most 64 KiB (or two packets).
    fn quantum(&self) -> u64 {
        let per_interval =
            u128::from(self.pacing_rate) * u128::from(QUANTUM_INTERVAL) / 1_000_000_000;
        let two = 2 * self.sizes.max_packet;
        u64::try_from(per_interval)
            .unwrap_or(u64::MAX)
            .clamp(MIN_QUANTUM.max(two), MAX_QUANTUM.max(two))
    }

    /// The flight `gain` (in 1/256) times the product asks for, with room for the
    /// batching of sends and acknowledgements (three quanta), and two packets more in
    /// the probing round (as Linux's `bbr_quantization_budget`).
    fn inflight(&self, gain: u64) -> u64 {
        let mut cwnd = self.bdp(gain).saturating_add(3 * self.quantum());
        if self.mode == BbrMode::ProbeBw && self.cycle_index == 0 {
            cwnd += 2 * self.sizes.max_packet;
        }
        cwnd
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = BbrMode::ProbeBw;
        // Start at a phase of the cycle that flows do not share (never at 3/4, which
        // only drains what 5/4 queued): picked from the bytes delivered so far, a
        // deterministic stand-in for Linux's random pick.
        let pick = (self.delivered / self.sizes.max_packet + self.rounds) % 7;
        self.cycle_index = PACING_GAINS.len() - 1 - pick as usize;
        self.advance_cycle(now);
    }

    fn advance_cycle(&mut self, now: Instant) {
        self.cycle_index = (self.cycle_index + 1) % PACING_GAINS.len();
        self.cycle_stamp = now;
    }

    /// Whether ProbeBW moves on to its next gain: after a round trip at the gain; a
    /// probe (5/4) not before the flight reached its target or loss came; a drain (3/4)
    /// as soon as the flight is down to the product.
    fn cycle_phase_done(&self, now: Instant, prior_in_flight: u64, lost: bool) -> bool {
        let full_length = now.nanos_since(self.cycle_stamp) > self.min_rtt;
        if self.pacing_gain > UNIT {
            full_length && (lost || prior_in_flight >= self.inflight(self.pacing_gain))
        } else if self.pacing_gain < UNIT {
            full_length || prior_in_flight <= self.inflight(UNIT)
        } else {
            full_length
        }
    }

    fn save_cwnd(&mut self) {
        if self.recovery_start.is_none() && self.mode != BbrMode::ProbeRtt {
            self.prior_cwnd = self.cwnd;
        } else {
            self.prior_cwnd = self.prior_cwnd.max(self.cwnd);
        }
    }

    fn update_min_rtt(&mut self, now: Instant, rs: &RateSample) {
        let expired =
            self.min_rtt != u64::MAX && now.nanos_since(self.min_rtt_stamp) > MIN_RTT_WINDOW;
        if let Some(rtt) = rs.rtt
            && (rtt < self.min_rtt || expired)
        {
            self.min_rtt = rtt.max(1);
            self.min_rtt_stamp = now;
        }
        if expired && self.mode != BbrMode::ProbeRtt {
            self.mode = BbrMode::ProbeRtt;
            self.probe_rtts += 1;
            self.save_cwnd();
            self.probe_rtt_done = None;
        }
        if self.mode != BbrMode::ProbeRtt {
            return;
        }
        self.probe_rtt_mark = rs.total_delivered + rs.in_flight;
        match self.probe_rtt_done {
            None if rs.in_flight <= self.sizes.minimum => {
                // The flight is down to ProbeRTT's window: hold it for 200 ms and a round.
                self.probe_rtt_done = Some(now.add_nanos(PROBE_RTT_TIME));
                self.probe_rtt_round_done = false;
                self.next_round_delivered = rs.total_delivered;
            }
            None => {}
            Some(done) => {
                self.probe_rtt_round_done |= self.round_start;
                if self.probe_rtt_round_done && now >= done {
                    self.min_rtt_stamp = now;
                    self.cwnd = self.cwnd.max(self.prior_cwnd);
                    if self.full_bw_reached {
                        self.enter_probe_bw(now);
                    } else {
                        self.mode = BbrMode::Startup;
                    }
                }
            }
        }
    }

    fn update_gains(&mut self) {
        (self.pacing_gain, self.cwnd_gain) = match self.mode {
            BbrMode::Startup => (HIGH_GAIN, HIGH_GAIN),
            BbrMode::Drain => (DRAIN_GAIN, HIGH_GAIN),
            BbrMode::ProbeBw => (PACING_GAINS[self.cycle_index], CWND_GAIN),
            BbrMode::ProbeRtt => (UNIT, UNIT),
        };
    }

    fn set_pacing_rate(&mut self) {
        let bw = self.bw.get();
        if bw == 0 {
            if self.pacing_rate == 0 && self.min_rtt != u64::MAX {
                // The initial window over the first round trip, at Startup's gain.
                let rate = u128::from(self.cwnd) * 1_000_000_000 * u128::from(HIGH_GAIN)
                    / (u128::from(self.min_rtt) * u128::from(UNIT));
                self.pacing_rate = u64::try_from(rate).unwrap_or(u64::MAX);
            }
            return;
        }
        let rate = u128::from(bw)
            * u128::from(self.pacing_gain)
            * (100 - u128::from(PACING_MARGIN_PERCENT))
            / (u128::from(UNIT) * 100);
        let rate = u64::try_from(rate).unwrap_or(u64::MAX).max(1);
        // Startup never slows down (its early samples may be below the initial rate).
        if self.full_bw_reached || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    fn set_cwnd(&mut self, rs: &RateSample) {
        let acked = rs.acked;
        if rs.lost > 0 {
            self.cwnd = self.cwnd.saturating_sub(rs.lost).max(self.sizes.max_packet);
        }
        if self.packet_conservation {
            self.cwnd = self.cwnd.max(rs.in_flight + acked);
        } else {
            let target = self.inflight(self.cwnd_gain);
            if self.full_bw_reached {
                self.cwnd = (self.cwnd + acked).min(target);
            } else if self.cwnd < target
                || (rs.total_delivered < self.sizes.initial && !rs.app_limited)
            {
                // Startup: the window grows by what is delivered (by what an
                // application-limited flight delivers only up to the target: a ping-pong
                // does not inflate it).
                self.cwnd += acked;
            }
        }
        self.cwnd = self.cwnd.max(self.sizes.minimum);
        if self.mode == BbrMode::ProbeRtt {
            self.cwnd = self.cwnd.min(self.sizes.minimum);
        }
    }
}

impl Controller for Bbr {
    fn wants_rate_samples(&self) -> bool {
        true
    }

    fn on_rate_sample(&mut self, now: Instant, rs: &RateSample) {
        let prior_in_flight = rs.in_flight + rs.acked;
        self.in_flight = rs.in_flight;
        self.last_acked = rs.acked;
        self.delivered = rs.total_delivered;
        if self.recovery_start.is_some_and(|start| rs.sent > start) {
            // A packet sent after the loss event began has been acknowledged: the event
            // is over, and the window comes back.
            self.recovery_start = None;
            self.packet_conservation = false;
            self.cwnd = self.cwnd.max(self.prior_cwnd);
        }
        // A round trip ends when a packet sent after its start is acknowledged.
        self.round_start = false;
        if rs.prior_delivered >= self.next_round_delivered {
            self.next_round_delivered = rs.total_delivered;
            self.rounds += 1;
            self.round_start = true;
            self.packet_conservation = false;
        }
        // The sample: not one shorter than the round-trip floor (a compressed run of
        // acknowledgements), and an application-limited one only if it says more.
        let app_limited = rs.app_limited
            || self.mode == BbrMode::ProbeRtt
            || rs.prior_delivered < self.probe_rtt_mark;
        let floor = rs.rtt.map_or(self.min_rtt, |r| r.min(self.min_rtt));
        if rs.interval > 0 && (floor == u64::MAX || rs.interval >= floor) {
            let rate = rs.rate();
            if !app_limited || rate >= self.bw.get() {
                self.bw.update(BW_WINDOW_ROUNDS, self.rounds, rate);
            }
        }
        if self.mode == BbrMode::ProbeBw && self.cycle_phase_done(now, prior_in_flight, rs.lost > 0)
        {
            self.advance_cycle(now);
        }
        if !self.full_bw_reached && self.round_start && !app_limited {
            let bw = self.bw.get();
            if u128::from(bw) * u128::from(UNIT)
                >= u128::from(self.full_bw) * u128::from(FULL_BW_GROWTH)
            {
                self.full_bw = bw;
                self.full_bw_rounds = 0;
            } else {
                self.full_bw_rounds += 1;
                self.full_bw_reached = self.full_bw_rounds >= FULL_BW_ROUNDS;
            }
        }
        if self.mode == BbrMode::Startup && self.full_bw_reached {
            self.mode = BbrMode::Drain;
        }
        if self.mode == BbrMode::Drain && rs.in_flight <= self.inflight(UNIT) {
            self.enter_probe_bw(now);
        }
        self.update_min_rtt(now, rs);
        self.update_gains();
        self.set_pacing_rate();
        self.set_cwnd(rs);
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, _lost: u64) {
        if persistent {
            // Timeouts in a row: the window to the floor, until the flight sent before
            // them is acknowledged.
            self.save_cwnd();
            self.recovery_start = Some(now);
            self.packet_conservation = false;
            self.cwnd = self.sizes.minimum;
            return;
        }
        if self.recovery_start.is_some_and(|start| sent <= start) {
            // The same event.
            return;
        }
        // Packet conservation for a round: no more in flight than now, plus what each
        // acknowledgement delivers (the losses were taken off by the rate sample).
        self.save_cwnd();
        self.recovery_start = Some(now);
        self.packet_conservation = true;
        self.next_round_delivered = self.delivered;
        self.cwnd = (self.in_flight + self.last_acked).max(self.sizes.minimum);
    }

    fn on_spurious_congestion_event(&mut self) {
        if self.recovery_start.take().is_some() {
            self.packet_conservation = false;
            self.cwnd = self.cwnd.max(self.prior_cwnd);
        }
    }

    fn name(&self) -> &'static str {
        "bbr"
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn in_slow_start(&self) -> bool {
        self.mode == BbrMode::Startup
    }

    fn pacing_rate(&self) -> Option<u64> {
        (self.pacing_rate > 0).then_some(self.pacing_rate)
    }

    fn bandwidth_estimate(&self) -> Option<u64> {
        Some(self.bw.get())
    }
}
