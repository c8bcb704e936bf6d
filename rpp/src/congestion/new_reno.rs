//! NewReno (RFC 9002 §7, after RFC 6582): slow start, congestion avoidance of one
//! packet per window acknowledged, the window halved once per loss event.

use super::{Controller, Sizes, SlowStart, Undo};
use crate::time::Instant;

/// The NewReno controller.
#[derive(Debug, Clone)]
pub struct NewReno {
    sizes: Sizes,
    window: u64,
    ssthresh: u64,
    /// Bytes acknowledged since the window last grew by a packet (congestion avoidance).
    acked: u64,
    /// When the current recovery period began: losses of packets sent before it are the
    /// same event, and acknowledgements of them do not grow the window.
    recovery_start: Option<Instant>,
    undo: Undo,
    /// Slow start, the first one's exit by delay included.
    slow_start: SlowStart,
}

impl NewReno {
    /// A controller for packets of at most `max_packet` bytes, starting with a window of
    /// `initial_packets` packets (at least [`MINIMUM_WINDOW_PACKETS`](super::MINIMUM_WINDOW_PACKETS)).
    pub fn new(max_packet: u64, initial_packets: u32) -> NewReno {
        let sizes = Sizes::new(max_packet, initial_packets);
        NewReno {
            sizes,
            window: sizes.initial,
            ssthresh: u64::MAX,
            acked: 0,
            recovery_start: None,
            undo: Undo::default(),
            slow_start: SlowStart::new(true),
        }
    }

    /// Whether the first slow start may end by delay (HyStart++, on by default) or only
    /// at a loss.
    pub fn with_hystart(mut self, on: bool) -> NewReno {
        self.slow_start = SlowStart::new(on);
        self
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|start| sent <= start)
    }
}

impl Controller for NewReno {
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, _srtt: u64) {
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
        // Congestion avoidance: one packet per window of acknowledged bytes.
        self.acked += bytes;
        if self.acked >= self.window {
            self.acked -= self.window;
            self.window += self.sizes.max_packet;
        }
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, _lost: u64) {
        if persistent {
            // Kept: a timeout the connection later finds spurious is undone.
            self.undo = Undo {
                window: self.window,
                ssthresh: self.ssthresh,
            };
            self.ssthresh = (self.window / 2).max(self.sizes.minimum);
            self.window = self.sizes.minimum;
            self.recovery_start = Some(now);
            return;
        }
        if self.in_recovery(sent) {
            return;
        }
        self.undo = Undo {
            window: self.window,
            ssthresh: self.ssthresh,
        };
        self.recovery_start = Some(now);
        self.window = (self.window / 2).max(self.sizes.minimum);
        self.ssthresh = self.window;
        self.acked = 0;
    }

    fn on_spurious_congestion_event(&mut self) {
        if self.undo.window > 0 {
            self.window = self.window.max(self.undo.window);
            self.ssthresh = self.undo.ssthresh;
            self.undo = Undo::default();
            self.recovery_start = None;
        }
    }

    fn name(&self) -> &'static str {
        "newreno"
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
