//! Congestion control: how many bytes a connection may have in flight, as a small
//! trait in the manner of quinn-proto's congestion module, and three controllers.
//!
//! # What the connection tells a controller
//!
//! The connection counts every data packet's bytes (payload and fixed header) while it
//! is in flight and lets a new packet, or a resend, go only while the bytes in flight are
//! below [`Controller::window`] (and within the send window and the peer's credit, as
//! before). It calls:
//!
//! * [`Controller::on_sent`] for every data packet it sends;
//! * [`Controller::on_ack`] once per acknowledgement that acknowledges new data, with the
//!   bytes it acknowledged and when the latest of them was sent, if it acknowledges bytes
//!   of the last flight that tested the window (came within one packet of it, or was held
//!   back by it), as Linux keeps `is_cwnd_limited` for a flight: a driver that takes
//!   several acknowledgements between two sends still finds them window-limited. An
//!   application-limited acknowledgement is not passed on, as Linux calls no
//!   `cong_avoid` for a flight that is not window-limited (RFC 7661): an idle ping-pong
//!   would otherwise inflate the window without ever testing it;
//! * [`Controller::on_rtt_sample`] with the unambiguous round-trip sample such an
//!   acknowledgement gave, if any (HyStart++ watches them), just before its `on_ack`;
//! * [`Controller::on_app_limited`] instead, once per spell of application-limited
//!   acknowledgements;
//! * [`Controller::on_congestion_event`] when packets are declared lost, with when the
//!   latest of them was sent: loss judged by the RACK-style rules of the send half (a
//!   packet is lost once `packet_threshold` later transmissions or 9/8 of the round trip
//!   have passed it, bounds that grow, as RFC 8985's reordering window does, once the
//!   path shows packets declared lost that had arrived), so reordering within those
//!   bounds is no congestion. A controller keeps a recovery period: losses of packets
//!   sent before it began belong to the same event and reduce the window once. A second
//!   retransmission timeout in a row (the first only probes) is persistent congestion,
//!   once per silence;
//! * [`Controller::on_rate_sample`], if the controller asks for them
//!   ([`Controller::wants_rate_samples`]), for every acknowledgement of new data,
//!   application-limited or not, first of all: a [`RateSample`] of the rate the path
//!   delivered at since the latest acknowledged packet was sent. Each packet records the
//!   connection's delivered count and time when it goes (a few stores on the send path);
//!   the application is taken to limit the flight when it queues a message with nothing
//!   left to send and room in the window, until what was in flight then is delivered;
//! * [`Controller::on_spurious_congestion_event`] when the peer reports (D-SACK) that
//!   every packet the last event declared lost had in fact arrived: the reduction was
//!   reordering's doing and is undone, as Linux's undo does; or when the first
//!   acknowledgement after a persistent-congestion timeout echoes a transmission sent
//!   before it (RFC 3522's Eifel detection; the peer echoes the transmission that
//!   brought it new data, never a duplicate): the acknowledgements were late, not the
//!   packets lost, and the collapse is undone.
//!
//! # Acknowledgements that come together
//!
//! A flight's bytes count as in flight until their acknowledgement is read. A driver in
//! user space on a busy host reads them late, and its peer acknowledges late: beside a
//! TCP flow on a two-core host, the acknowledgements of a millisecond's data came in one
//! read, and meanwhile the window stood full of bytes the path had delivered. TCP takes
//! its acknowledgements in softirq as they land and keeps its window in the network. So
//! for a paced loss-based controller ([`NewReno`], [`Cubic`]) in congestion avoidance,
//! the connection measures the bytes acknowledgements bring beyond the rate the flight
//! went at (the pacing rate, or the path's delivery rate where that is larger) since they
//! last fell behind it, within a round trip, less what comes together when nothing holds
//! it (one acknowledgement's packets, or one of the pacer's bursts); keeps the largest
//! of the last five to ten round trips; and lets the flight go past the window by that
//! much, at most a quarter of the window, as Linux BBR's `extra_acked` does for paths
//! that aggregate acknowledgements. The pacer spreads the window and the allowance
//! together, at 5/4 of them per round trip. The controller's window and its reductions
//! are unchanged;
//! [`Stats::ack_aggregation`](crate::Stats::ack_aggregation) says what the allowance is.
//! [`Bbr`] sizes its flight from its own model and gets none, and neither does an
//! unpaced flow, whose acknowledgements release the window at once.
//!
//! # Controllers
//!
//! [`NewReno`] (RFC 9002 §7: slow start, then one packet per window of acknowledged
//! bytes, halving on loss) and [`Cubic`] (RFC 9438: the cubic window curve with its
//! Reno-friendly floor, β = 0.7). [`CongestionControl`] in the config picks one, or none.
//! Both turn their first slow start into conservative growth by HyStart++ (RFC 9406)
//! when the round trip grows by a queue's worth (4-16 ms), before a deep queue
//! overflows; [`NewReno::with_hystart`] and [`Cubic::with_hystart`] turn it off.
//!
//! [`Bbr`] (BBR v1, `cc=bbr`) steers by a model of the path instead: the bottleneck
//! bandwidth (the largest delivery rate of the last ten round trips) and the round trip
//! without a queue (the least of the last ten seconds). It paces at the estimate times a
//! gain ([`Controller::pacing_rate`]: 2.89 in Startup, then 5/4, 3/4 and six rounds of 1)
//! and bounds the flight to twice the product (plus three pacing quanta), measuring the
//! round trip afresh at four packets every ten seconds (ProbeRTT). A loss holds its window
//! to the flight for a round (packet conservation) and no more. It is for a path shared
//! with TCP BBR flows, beside which a loss-based flow gets what BBR leaves. What it does
//! not do: v2's bounds from loss and ECN, ack-aggregation allowance, restart from idle.
//! What v1 is known to do: in a shallow buffer it keeps losing packets and takes more
//! than its share from loss-based flows (they back off at each loss, it does not); in a
//! deep one, a loss-based flow that keeps the queue full takes more than its share from
//! it; flows of different round trips do not share evenly. See the [`Bbr`] docs.
//!
//! Other controllers plug in through [`Connection::set_controller`](crate::Connection::set_controller).

mod bbr;
mod cubic;
mod hystart;
mod new_reno;

pub use bbr::{Bbr, BbrMode};
pub use cubic::Cubic;
pub use new_reno::NewReno;

use crate::time::Instant;
use core::fmt;

/// A congestion controller: it is told what the connection sends, what is acknowledged
/// and what is lost, and says how many bytes may be in flight. Every hook but
/// [`Controller::on_congestion_event`] and [`Controller::window`] has a default that does
/// nothing.
pub trait Controller: Send + fmt::Debug {
    /// A data packet of `bytes` was sent at `now`.
    fn on_sent(&mut self, now: Instant, bytes: u64) {
        let _ = (now, bytes);
    }

    /// `bytes` of data were newly acknowledged at `now`, from a flight that tested the
    /// window; the latest of those packets was sent at `sent`. `srtt` is the smoothed
    /// round trip in nanoseconds.
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, srtt: u64) {
        let _ = (now, sent, bytes, srtt);
    }

    /// A round trip of `rtt` nanoseconds was measured at `now`, from an acknowledgement
    /// that named the transmission it answers (never a resend's ambiguous one), just
    /// before that acknowledgement's [`Controller::on_ack`] (so only from flights that
    /// tested the window).
    fn on_rtt_sample(&mut self, now: Instant, rtt: u64) {
        let _ = (now, rtt);
    }

    /// Acknowledgements began to come for a flight that did not test the window: the
    /// application, not the window, limits the sender (see the module docs).
    fn on_app_limited(&mut self, now: Instant) {
        let _ = now;
    }

    /// Packets of `lost_bytes` were declared lost at `now`, the latest of them sent at
    /// `sent`; `persistent`: after retransmission timeouts in a row.
    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        lost_bytes: u64,
    );

    /// Every packet the last congestion event declared lost had arrived after all: undo
    /// its reduction.
    fn on_spurious_congestion_event(&mut self) {}

    /// Bytes that may be in flight.
    fn window(&self) -> u64;

    /// The slow-start threshold (`u64::MAX` while in the first slow start, or for a
    /// controller without one).
    fn ssthresh(&self) -> u64 {
        u64::MAX
    }

    /// Whether the window grows by what is acknowledged (slow start).
    fn in_slow_start(&self) -> bool {
        self.window() < self.ssthresh()
    }

    /// Times the first slow start gave way to conservative growth because the round trip
    /// grew (HyStart++), not at a loss.
    fn slow_start_delay_exits(&self) -> u64 {
        0
    }

    /// Whether the controller wants a [`RateSample`] for every acknowledgement of new
    /// data ([`Controller::on_rate_sample`]); asked once, when the connection takes the
    /// controller. The connection keeps the delivery state either way.
    fn wants_rate_samples(&self) -> bool {
        false
    }

    /// A delivery rate sample at `now`, for every acknowledgement of new data, whether
    /// the flight tested the window or not (the sample says whether the application
    /// limited it), before that acknowledgement's [`Controller::on_rtt_sample`] and
    /// [`Controller::on_ack`] or [`Controller::on_app_limited`], and before any
    /// [`Controller::on_congestion_event`] for losses it revealed. Called only if
    /// [`Controller::wants_rate_samples`].
    fn on_rate_sample(&mut self, now: Instant, sample: &RateSample) {
        let _ = (now, sample);
    }

    /// Bytes per second the pacer should let through, if the controller sets the pace
    /// itself; `None` (the default): the pacer spreads the window over the smoothed
    /// round trip (see the pacer).
    fn pacing_rate(&self) -> Option<u64> {
        None
    }

    /// The controller's name, for the statistics: the built-in ones say what
    /// [`CongestionControl::name`] says of them.
    fn name(&self) -> &'static str {
        "custom"
    }

    /// The controller's estimate of the path's bottleneck bandwidth in bytes per second,
    /// if it keeps one (for the statistics).
    fn bandwidth_estimate(&self) -> Option<u64> {
        None
    }
}

/// What one acknowledgement says of the rate at which the path delivers, as
/// draft-cheng-iccrg-delivery-rate-estimation measures it: every packet records, when
/// sent, how many bytes the connection had delivered by then and when; the
/// acknowledgement of the latest-sent of the packets it acknowledges gives the bytes
/// delivered since over the time they took (the longer of the send and the
/// acknowledgement intervals, so that neither a burst of sends nor a compressed run of
/// acknowledgements reads faster than the path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateSample {
    /// Bytes delivered over the sample's interval.
    pub delivered: u64,
    /// The sample's interval in nanoseconds (0: no sample, say the first packet of an
    /// idle connection acknowledged at the instant it went).
    pub interval: u64,
    /// Bytes the connection had delivered in all when the sample's packet was sent (a
    /// round trip ends once a packet sent after its start is acknowledged).
    pub prior_delivered: u64,
    /// Bytes the connection has delivered in all, this acknowledgement included.
    pub total_delivered: u64,
    /// The sample's packet went while the application, not the window, limited the
    /// sender: the rate is a lower bound of what the path carries.
    pub app_limited: bool,
    /// Bytes this acknowledgement newly acknowledged.
    pub acked: u64,
    /// Bytes this acknowledgement declared lost.
    pub lost: u64,
    /// Bytes in flight once this acknowledgement (and the losses it revealed) are taken
    /// into account.
    pub in_flight: u64,
    /// The unambiguous round trip this acknowledgement measured, in nanoseconds.
    pub rtt: Option<u64>,
    /// When the latest-sent of the acknowledged packets was sent.
    pub sent: Instant,
}

impl RateSample {
    /// The delivery rate in bytes per second (0 without an interval).
    pub fn rate(&self) -> u64 {
        if self.interval == 0 {
            return 0;
        }
        u64::try_from(u128::from(self.delivered) * 1_000_000_000 / u128::from(self.interval))
            .unwrap_or(u64::MAX)
    }
}

/// A built-in controller's slow start: the window grows by what is acknowledged up to the
/// threshold, and in the first one (threshold still `u64::MAX`) HyStart++, when on,
/// slows it once the round trip grows and may end it.
#[derive(Debug, Clone)]
pub(crate) struct SlowStart {
    hystart: Option<hystart::HyStart>,
}

impl SlowStart {
    /// Slow start with HyStart++ on or off.
    pub(crate) fn new(hystart: bool) -> SlowStart {
        SlowStart {
            hystart: hystart.then(hystart::HyStart::default),
        }
    }

    /// Grows `window` (below `ssthresh`) on an acknowledgement at `now` of `bytes` whose
    /// latest packet was sent at `sent`; when HyStart++ ends the first slow start, the
    /// window becomes the threshold instead.
    pub(crate) fn on_ack(
        &mut self,
        window: &mut u64,
        ssthresh: &mut u64,
        now: Instant,
        sent: Instant,
        bytes: u64,
    ) {
        let grow = match self.hystart.as_mut().filter(|_| *ssthresh == u64::MAX) {
            None => bytes,
            Some(h) => match h.on_ack(now, sent) {
                hystart::Growth::Full => bytes,
                hystart::Growth::Conservative => bytes / hystart::CSS_DIVISOR,
                hystart::Growth::Done => {
                    *ssthresh = *window;
                    return;
                }
            },
        };
        *window = (*window + grow).min((*ssthresh).max(*window));
    }

    /// A round-trip sample, for HyStart++ in the first slow start.
    pub(crate) fn on_rtt_sample(&mut self, ssthresh: u64, rtt: u64) {
        if ssthresh == u64::MAX
            && let Some(h) = self.hystart.as_mut()
        {
            h.on_rtt_sample(rtt);
        }
    }

    /// [`Controller::slow_start_delay_exits`].
    pub(crate) fn delay_exits(&self) -> u64 {
        self.hystart.as_ref().map_or(0, hystart::HyStart::exits)
    }
}

/// Which congestion controller a connection runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CongestionControl {
    /// None: the send window and the receiver's credit are the only brakes (a
    /// provisioned link that nobody shares).
    None,
    /// [`NewReno`].
    NewReno,
    /// [`Cubic`] (the default, as in Linux and quinn).
    #[default]
    Cubic,
    /// [`Bbr`]: a model of the path's bandwidth and round trip instead of loss (BBR v1).
    Bbr,
}

/// The least window of the built-in controllers, in packets: four, not RFC 9002's two,
/// so that a window at its floor still holds a packet and the three after it that
/// declare it lost by acknowledgement (the packet threshold) instead of by timeout, the
/// reason RFC 3042's limited transmit exists. Measured over the rpp_kcp link at 20%
/// random loss each way: with a floor of two the flow spent its time in timeouts.
pub const MINIMUM_WINDOW_PACKETS: u64 = 4;

/// Settings common to the built-in controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizes {
    /// Bytes of the largest packet.
    pub(crate) max_packet: u64,
    /// The window at the start, in bytes.
    pub(crate) initial: u64,
    /// The least window, in bytes ([`MINIMUM_WINDOW_PACKETS`] packets).
    pub(crate) minimum: u64,
}

impl Sizes {
    pub(crate) fn new(max_packet: u64, initial_packets: u32) -> Sizes {
        let max_packet = max_packet.max(1);
        Sizes {
            max_packet,
            initial: max_packet * u64::from(initial_packets).max(MINIMUM_WINDOW_PACKETS),
            minimum: max_packet * MINIMUM_WINDOW_PACKETS,
        }
    }
}

impl CongestionControl {
    /// A controller of this kind for packets of at most `max_packet` bytes, starting with
    /// a window of `initial_packets` packets; `None` for [`CongestionControl::None`].
    pub fn build(self, max_packet: u64, initial_packets: u32) -> Option<Box<dyn Controller>> {
        match self {
            CongestionControl::None => None,
            CongestionControl::NewReno => Some(Box::new(NewReno::new(max_packet, initial_packets))),
            CongestionControl::Cubic => Some(Box::new(Cubic::new(max_packet, initial_packets))),
            CongestionControl::Bbr => Some(Box::new(Bbr::new(max_packet, initial_packets))),
        }
    }

    /// The controller's name as the transport's URLs and the statistics spell it:
    /// `off`, `newreno`, `cubic` or `bbr`.
    pub fn name(self) -> &'static str {
        match self {
            CongestionControl::None => "off",
            CongestionControl::NewReno => "newreno",
            CongestionControl::Cubic => "cubic",
            CongestionControl::Bbr => "bbr",
        }
    }
}

/// What a controller keeps to undo its last reduction.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Undo {
    pub(crate) window: u64,
    pub(crate) ssthresh: u64,
}

#[cfg(test)]
mod tests;
