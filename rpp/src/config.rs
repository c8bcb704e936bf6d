//! Connection settings.

use crate::congestion::CongestionControl;
use crate::wire::{Integrity, MAC_LEN, MAX_DATA_HEADER_LEN, MAX_HEADER_LEN, MacKey};
use std::time::Duration;
use thiserror::Error;

/// How a [`Connection`](crate::Connection) behaves. [`Config::default`] suits a cluster
/// link: an 8 KiB MTU, microsecond-scale timers, windows of 256 packets.
///
/// The struct will grow, so it is `#[non_exhaustive]`: start from [`Config::default`]
/// and set fields with the `with_*` methods (or assign the public fields).
///
/// ```
/// use myri_rpp::Config;
/// use std::time::Duration;
///
/// let config = Config::default()
///     .with_mtu(1500)
///     .with_rto_min(Duration::from_micros(200));
/// assert_eq!(config.max_payload(), 1500 - myri_rpp::wire::MAX_DATA_HEADER_LEN);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// Largest datagram the channel carries, header included.
    pub mtu: usize,
    /// Largest message `send` accepts.
    pub max_message_len: usize,
    /// Most packets in flight (sent, not acknowledged, not declared lost).
    pub send_window: u32,
    /// Most packets the receiver buffers beyond the cumulative ack.
    pub recv_window: u32,
    /// Bytes the receiver holds for the application (out-of-order packets, partly
    /// assembled messages, delivered messages not yet taken) before its credit closes.
    pub recv_buffer_bytes: usize,
    /// Bytes of messages `send` holds (queued or unacknowledged) before it says
    /// [`SendError::WouldBlock`](crate::SendError::WouldBlock).
    pub max_queued_bytes: usize,
    /// Messages `send` holds before it says `WouldBlock`.
    pub max_queued_messages: usize,
    /// Retransmission timeout before any round-trip sample.
    pub rto_initial: Duration,
    /// Least retransmission timeout (tens of microseconds suit a cluster link).
    pub rto_min: Duration,
    /// Greatest retransmission timeout.
    pub rto_max: Duration,
    /// Acknowledge at least every this many data packets.
    pub ack_every: u32,
    /// Hold an acknowledgement at most this long.
    pub ack_delay: Duration,
    /// A packet is lost once this many later packets are acknowledged (at the start:
    /// the threshold grows on evidence of reordering, see `Stats::loss_packet_threshold`).
    pub packet_threshold: u32,
    /// A packet is lost once a later one is acknowledged and this many eighths of the
    /// round-trip time have passed since it was sent (RFC 9002 uses 9/8; it too grows on
    /// evidence of reordering, to two round trips at most).
    pub time_threshold_eighths: u32,
    /// Probe a silent peer after this long.
    pub keepalive: Duration,
    /// Consecutive timeouts (retransmissions, probes or introductions) without an answer
    /// before the peer is declared gone. On a channel that loses a fraction `p` of
    /// packets each way, a live peer is declared gone with probability about
    /// `(1 - (1 - p)^2)^max_retries`: raise it for very lossy channels.
    pub max_retries: u32,
    /// The peer is declared gone only once it has also been silent this long: with
    /// microsecond timeouts, `max_retries` backed-off retries can pass in a fraction of a
    /// second, less than a loaded host may take to schedule a live peer.
    pub peer_timeout: Duration,
    /// Hand a message that arrives whole and in order to the caller as a range of the
    /// datagram it came in ([`Received::InPlace`](crate::Received::InPlace)), instead of
    /// copying it into an event.
    pub in_place_delivery: bool,
    /// Keep a log of protocol events (see [`Connection::trace`](crate::Connection::trace)).
    pub trace: bool,
    /// The check this end puts on every packet and requires of every packet it takes
    /// ([`Integrity::Crc32c`] unless the channel below checks, see
    /// [`Integrity::External`]); a packet that names another mode is dropped and counted
    /// ([`Stats::integrity_mismatch`](crate::Stats::integrity_mismatch)). Both ends must
    /// agree.
    pub integrity: Integrity,
    /// A key shared by both ends: every packet then carries a MAC over header and payload,
    /// and a packet without the right one is dropped and counted
    /// ([`Stats::bad_mac`](crate::Stats::bad_mac)). See the crate docs' threat model.
    pub mac_key: Option<MacKey>,
    /// The congestion controller ([`CongestionControl::Cubic`] by default;
    /// [`CongestionControl::None`] turns congestion control off). See
    /// [`congestion`](crate::congestion).
    pub congestion: CongestionControl,
    /// The congestion window at the start, in packets of `mtu` bytes (at least
    /// [`MINIMUM_WINDOW_PACKETS`](crate::congestion::MINIMUM_WINDOW_PACKETS)).
    pub initial_window: u32,
    /// Spread each window over the round trip ([`Connection::poll_transmit`] holds data
    /// back until its time, [`Connection::poll_timeout`] says when). Without a congestion
    /// controller the pacing rate is the send window per round trip.
    ///
    /// [`Connection::poll_transmit`]: crate::Connection::poll_transmit
    /// [`Connection::poll_timeout`]: crate::Connection::poll_timeout
    pub pacing: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mtu: 8192,
            max_message_len: 64 << 20,
            send_window: 256,
            recv_window: 256,
            recv_buffer_bytes: 96 << 20,
            max_queued_bytes: 128 << 20,
            max_queued_messages: 4096,
            rto_initial: Duration::from_millis(5),
            rto_min: Duration::from_micros(50),
            rto_max: Duration::from_secs(1),
            ack_every: 2,
            ack_delay: Duration::from_micros(25),
            packet_threshold: 3,
            time_threshold_eighths: 9,
            keepalive: Duration::from_millis(100),
            max_retries: 10,
            peer_timeout: Duration::from_secs(2),
            in_place_delivery: false,
            trace: false,
            integrity: Integrity::Crc32c,
            mac_key: None,
            congestion: CongestionControl::Cubic,
            initial_window: 10,
            pacing: true,
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid rpp config: {0}")]
#[non_exhaustive]
pub struct ConfigError(pub &'static str);

/// One `with_*` method per field: sets it and returns the config.
macro_rules! builders {
    ($($with:ident => $field:ident: $ty:ty),* $(,)?) => {
        impl Config {
            $(
                #[doc = concat!("Sets [`Config::", stringify!($field), "`].")]
                #[must_use]
                pub fn $with(mut self, value: $ty) -> Config {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

builders! {
    with_mtu => mtu: usize,
    with_max_message_len => max_message_len: usize,
    with_send_window => send_window: u32,
    with_recv_window => recv_window: u32,
    with_recv_buffer_bytes => recv_buffer_bytes: usize,
    with_max_queued_bytes => max_queued_bytes: usize,
    with_max_queued_messages => max_queued_messages: usize,
    with_rto_initial => rto_initial: Duration,
    with_rto_min => rto_min: Duration,
    with_rto_max => rto_max: Duration,
    with_ack_every => ack_every: u32,
    with_ack_delay => ack_delay: Duration,
    with_packet_threshold => packet_threshold: u32,
    with_time_threshold_eighths => time_threshold_eighths: u32,
    with_keepalive => keepalive: Duration,
    with_max_retries => max_retries: u32,
    with_peer_timeout => peer_timeout: Duration,
    with_in_place_delivery => in_place_delivery: bool,
    with_trace => trace: bool,
    with_integrity => integrity: Integrity,
    with_mac_key => mac_key: Option<MacKey>,
    with_congestion => congestion: CongestionControl,
    with_initial_window => initial_window: u32,
    with_pacing => pacing: bool,
}

impl Config {
    /// Payload bytes one packet carries: the MTU less the largest data-packet header
    /// ([`MAX_DATA_HEADER_LEN`], and [`MAC_LEN`] with a key).
    pub fn max_payload(&self) -> usize {
        self.mtu
            .saturating_sub(MAX_DATA_HEADER_LEN + self.mac_len())
    }

    /// Bytes of MAC each packet carries.
    pub(crate) fn mac_len(&self) -> usize {
        if self.mac_key.is_some() { MAC_LEN } else { 0 }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // An acknowledgement with a full SACK bitmap must fit, and then payload does too.
        if self.mtu <= MAX_HEADER_LEN {
            return Err(ConfigError("mtu leaves no room for payload"));
        }
        if self.send_window == 0
            || self.recv_window == 0
            || self.send_window > 1 << 24
            || self.recv_window > 1 << 24
        {
            return Err(ConfigError("windows must be 1 to 2^24 packets"));
        }
        if self.max_message_len > u32::MAX as usize {
            return Err(ConfigError("messages are at most 4 GiB"));
        }
        if self.max_queued_bytes < self.max_message_len {
            return Err(ConfigError(
                "max_queued_bytes must hold at least one largest message",
            ));
        }
        if self.recv_buffer_bytes < self.max_message_len {
            return Err(ConfigError(
                "recv_buffer_bytes must hold at least one largest message",
            ));
        }
        if self.ack_every == 0
            || self.packet_threshold == 0
            || self.max_retries == 0
            || self.max_queued_messages == 0
        {
            return Err(ConfigError("counts must be at least 1"));
        }
        if self.peer_timeout.is_zero() {
            return Err(ConfigError("peer_timeout must be positive"));
        }
        if self.rto_min.is_zero() || self.rto_min > self.rto_max {
            return Err(ConfigError("rto_min must be positive and at most rto_max"));
        }
        Ok(())
    }
}
