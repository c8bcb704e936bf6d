//! CUBIC (RFC 9438): after a loss the window grows along a cubic curve that is flat
//! around the window where the loss happened and steep away from it, never slower than
//! Reno would grow; β = 0.7, C = 0.4, with fast convergence, and Reno's own growth once
//! the window is back where it was before the last reduction.

use super::{Controller, Sizes, SlowStart, Undo};
use crate::time::Instant;

/// C of RFC 9438, in packets per second cubed.
const C: f64 = 0.4;
/// The window is multiplied by β on a loss.
const BETA: f64 = 0.7;

/// The CUBIC controller.
#[derive(Debug, Clone)]
pub struct Cubic {
    sizes: Sizes,
    window: u64,
    ssthresh: u64,
    /// The window before the last reduction, in bytes.
    w_max: f64,
    /// The window Reno would have now, in bytes (the Reno-friendly floor).
    w_est: f64,
    /// Seconds from the epoch's start until the curve reaches `w_max` again.
    k: f64,
    /// When the current curve started (the first acknowledgement in congestion avoidance
    /// after a reduction), moved later by the spells of application-limited
    /// acknowledgements since.
    epoch_start: Option<Instant>,
    /// When the present spell of application-limited acknowledgements began, if one has.
    app_limited_since: Option<Instant>,
    recovery_start: Option<Instant>,
    undo: Undo,
    /// Slow start, the first one's exit by delay included.
    slow_start: SlowStart,
}

impl Cubic {
    /// A controller for packets of at most `max_packet` bytes, starting with a window of
    /// `initial_packets` packets (at least [`MINIMUM_WINDOW_PACKETS`](super::MINIMUM_WINDOW_PACKETS)).
    pub fn new(max_packet: u64, initial_packets: u32) -> Cubic {
        let sizes = Sizes::new(max_packet, initial_packets);
        Cubic {
            sizes,
            window: sizes.initial,
            ssthresh: u64::MAX,
            w_max: 0.0,
            w_est: 0.0,
            k: 0.0,
            epoch_start: None,
            app_limited_since: None,
            recovery_start: None,
            undo: Undo::default(),
            slow_start: SlowStart::new(true),
        }
    }

    /// Whether the first slow start may end by delay (HyStart++, on by default) or only
    /// at a loss.
    pub fn with_hystart(mut self, on: bool) -> Cubic {
        self.slow_start = SlowStart::new(on);
        self
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|start| sent <= start)
    }

    /// The curve's window `t` seconds into the epoch, in bytes.
    fn w_cubic(&self, t: f64) -> f64 {
        let mss = self.sizes.max_packet as f64;
        C * (t - self.k).powi(3) * mss + self.w_max
    }
}

impl Controller for Cubic {
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, srtt: u64) {
        if self.in_recovery(sent) {
            return;
        }
        if self.window < self.ssthresh {
            // Slow start: the window grows by what is acknowledged, up to the threshold
            // (in the first one, by less once the round trip grows: HyStart++).
            self.slow_start
                .on_ack(&mut self.window, &mut self.ssthresh, now, sent, bytes);
            return;
        }
        let mss = self.sizes.max_packet as f64;
        let window = self.window as f64;
        if let (Some(since), Some(start)) = (self.app_limited_since.take(), self.epoch_start) {
            // The curve's time leaves out the spell (RFC 9438 §5.8), as Linux moves its
            // epoch on by an idle spell: it goes on from where the window stood.
            self.epoch_start = Some(start.add_nanos(now.nanos_since(since)).min(now));
        }
        let start = *self.epoch_start.get_or_insert_with(|| {
            // A new curve from the present window towards w_max.
            self.k = if self.w_max > window {
                ((self.w_max - window) / (C * mss)).cbrt()
            } else {
                0.0
            };
            if self.w_max < window {
                self.w_max = window;
            }
            self.w_est = window;
            now
        });
        let t = now.nanos_since(start) as f64 * 1e-9;
        let rtt = srtt as f64 * 1e-9;
        // Reno's growth with CUBIC's β, 3(1 - β)/(1 + β) packets per window, until the
        // estimate is back at the window before the reduction; Reno's own, one packet per
        // window, past it (RFC 9438 §4.3).
        // The window before the reduction (`cwnd_prior`) is the one its undo would
        // restore; once undone (zero) the window is back above it anyway.
        let alpha = if self.w_est >= self.undo.window as f64 {
            1.0
        } else {
            3.0 * (1.0 - BETA) / (1.0 + BETA)
        };
        self.w_est += alpha * mss * bytes as f64 / window;
        let target = self.w_cubic(t + rtt).min(1.5 * window);
        let next = if target > window {
            window + (target - window) * bytes as f64 / window
        } else {
            window
        };
        self.window = next.max(self.w_est).max(window) as u64;
    }

    fn on_app_limited(&mut self, now: Instant) {
        // The curve stands still until the window is tested again. Starting it afresh
        // instead set `w_max` to the window past it, where the curve is flat: with a
        // spell every few milliseconds, the window grew only at Reno's pace.
        self.app_limited_since.get_or_insert(now);
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, _lost: u64) {
        if !persistent && self.in_recovery(sent) {
            return;
        }
        self.undo = Undo {
            window: self.window,
            ssthresh: self.ssthresh,
        };
        self.recovery_start = Some(now);
        self.epoch_start = None;
        self.app_limited_since = None;
        let window = self.window as f64;
        // Fast convergence: a flow whose window keeps shrinking leaves room to others.
        self.w_max = if window < self.w_max {
            window * (1.0 + BETA) / 2.0
        } else {
            window
        };
        let reduced = ((window * BETA) as u64).max(self.sizes.minimum);
        self.ssthresh = reduced;
        if persistent {
            self.window = self.sizes.minimum;
        } else {
            self.window = reduced;
        }
    }

    fn on_spurious_congestion_event(&mut self) {
        if self.undo.window > 0 {
            self.window = self.window.max(self.undo.window);
            self.ssthresh = self.undo.ssthresh;
            self.w_max = self.window as f64;
            self.epoch_start = None;
            self.app_limited_since = None;
            self.undo = Undo::default();
            self.recovery_start = None;
        }
    }

    fn name(&self) -> &'static str {
        "cubic"
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    fn on_rtt_sample(&mut self, _now: Instant, rtt: u64) {
        self.slow_start.on_rtt_sample(self.ssthresh, rtt);
    }

    fn slow_start_delay_exits(&self) -> u64 {
        self.slow_start.delay_exits()
    }
}
