//! Counters and the optional event trace of a connection.

use crate::time::Instant;
use std::time::Duration;

/// What a connection has done. More counters will come: it is `#[non_exhaustive]`
/// (read the fields; [`Stats::default`] makes a zeroed one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Packets handed to the channel.
    pub packets_sent: u64,
    /// Data packets sent for the first time.
    pub data_sent: u64,
    /// Data packets sent again.
    pub retransmitted: u64,
    /// Retransmissions the peer reported it had already received (D-SACK).
    pub spurious_retransmits: u64,
    /// Packets carrying no data (acknowledgements, introductions, probes, close).
    pub acks_sent: u64,
    /// Data packets whose SACK bitmap was cut to fit (an acknowledgement of its own
    /// carried the whole one).
    pub sack_cuts: u64,
    /// Packets that acknowledged something new.
    pub acks_received: u64,
    /// Packets taken from the channel.
    pub packets_received: u64,
    /// Data packets received more than once.
    pub dup_packets: u64,
    /// Packets dropped for a bad CRC-32C.
    pub bad_crc: u64,
    /// Packets dropped for a missing or wrong MAC.
    pub bad_mac: u64,
    /// Packets dropped because they name an integrity mode (or MAC use) other than the
    /// configured one.
    pub integrity_mismatch: u64,
    /// Packets dropped as malformed (or acknowledging what was never sent).
    pub malformed: u64,
    /// Packets from an earlier life of the peer, or to an earlier life of ours.
    pub stale: u64,
    /// Packets of another connection.
    pub foreign: u64,
    /// Introductions from an unknown incarnation of the known peer, answered with a
    /// challenge it must echo before the connection takes it for a restart (see the
    /// crate docs' threat model).
    pub restart_challenges: u64,
    /// Data packets beyond the receive window or buffer.
    pub beyond_window: u64,
    /// Packets declared lost by acknowledgement evidence.
    pub lost: u64,
    /// Retransmission timer expiries.
    pub rto_expirations: u64,
    /// Messages fully acknowledged.
    pub messages_sent: u64,
    /// Messages delivered in order.
    pub messages_delivered: u64,
    /// Payload bytes delivered.
    pub bytes_delivered: u64,
    /// Keepalive and zero-credit probes sent.
    pub probes: u64,
    /// Times the sender had data but the peer's credit was zero.
    pub credit_stalls: u64,
    /// Smoothed round-trip time.
    pub srtt: Duration,
    /// Round-trip variation.
    pub rttvar: Duration,
    /// Current retransmission timeout.
    pub rto: Duration,
    /// Packets in flight.
    pub in_flight: u32,
    /// Sequence numbers from the oldest unacknowledged packet to the next new one (what
    /// the send window bounds).
    pub unacked_span: u32,
    /// Credit the peer last granted.
    pub peer_credit: u32,
    /// Bytes in flight, as congestion control counts them (payload and fixed header).
    pub bytes_in_flight: u64,
    /// The congestion window in bytes (`u64::MAX` without congestion control).
    pub cwnd: u64,
    /// Bytes the flight may go past `cwnd` to make up for acknowledgements that came
    /// together (0 but for a paced loss-based controller in congestion avoidance; see
    /// "Acknowledgements that come together" in [`congestion`](crate::congestion)).
    pub ack_aggregation: u64,
    /// The slow-start threshold in bytes (`u64::MAX` until the first loss, or without
    /// congestion control).
    pub ssthresh: u64,
    /// The rate the pacer lets data through, bytes per second (0 while pacing is off or
    /// no round trip has been measured).
    pub pacing_rate: u64,
    /// The congestion controller's name ([`Controller::name`](crate::congestion::Controller::name):
    /// `newreno`, `cubic`, `bbr`, or what a controller of the caller's own says), `off`
    /// without one.
    pub controller: &'static str,
    /// The controller's estimate of the bottleneck bandwidth, bytes per second (0 for a
    /// controller without one: only [`Bbr`](crate::congestion::Bbr) keeps one).
    pub bandwidth_estimate: u64,
    /// Losses that reduced the congestion window (one per recovery period).
    pub congestion_events: u64,
    /// Of those, persistent congestion: retransmission timeouts in a row.
    pub persistent_congestion: u64,
    /// Reductions undone because every packet they declared lost had arrived (D-SACK).
    pub congestion_undos: u64,
    /// Times the first slow start gave way to conservative growth because the round trip
    /// grew (HyStart++), before any loss: 0 or 1, more only if a rise proved noise.
    pub slow_start_delay_exits: u64,
    /// Timeouts found spurious: the first acknowledgement after a timeout that declared
    /// persistent congestion echoed a transmission sent before it (the reduction was
    /// undone, and counted in `congestion_undos` too).
    pub spurious_timeouts: u64,
    /// Steps the loss detection's reordering allowance took on evidence that packets it
    /// declared lost had arrived (see `loss_packet_threshold`).
    pub reordering_steps: u64,
    /// The loss detection's packet threshold as of now (the configured one, or more
    /// after reordering was seen).
    pub loss_packet_threshold: u32,
    /// Its time threshold, in eighths of a round trip, as of now.
    pub loss_time_threshold_eighths: u32,
    /// Spells of application-limited acknowledgements (the controller was told, and did
    /// not grow the window for them).
    pub app_limited: u64,
    /// Times the congestion window held a new packet back.
    pub cwnd_limited: u64,
    /// Times the pacer held a packet back.
    pub paced: u64,
    /// Batches of new data sent on a paced path (see [`Gather::batch_end`](crate::Gather::batch_end)).
    pub batches: u64,
    /// Times a batch's first packet waited for the congestion window to have room for
    /// the whole batch.
    pub batch_holds: u64,
    /// Packets the driver's network stack dropped on their way out, as the driver told
    /// [`Connection::on_local_congestion`](crate::Connection::on_local_congestion) (each a
    /// congestion signal; those that reduced the window count in `congestion_events`).
    pub local_congestion: u64,
}

/// What happened, in a traced protocol event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum TraceKind {
    /// The peer's incarnation became known (argument: the incarnation).
    Connected = 1,
    /// A message was delivered (argument: its id or length).
    Deliver,
    /// Packets were newly acknowledged (argument: how many).
    Acked,
    /// Packets were declared lost by acknowledgement evidence (argument: how many).
    Lost,
    /// A packet was sent again (argument: its sequence number).
    Retransmit,
    /// The retransmission timer fired (argument: timeouts in a row).
    Rto,
    /// A data packet arrived twice (argument: its sequence number).
    Duplicate,
    /// A datagram was dropped (argument: the [`DropReason`](crate::DropReason) as a
    /// number).
    Drop,
    /// The peer restarted (argument: its new incarnation).
    PeerRestarted,
    /// The peer closed the connection.
    PeerClosed,
    /// This side's close finished.
    Closed,
    /// The connection failed.
    Fail,
}

impl TraceKind {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            TraceKind::Connected => "connected",
            TraceKind::Deliver => "deliver",
            TraceKind::Acked => "acked",
            TraceKind::Lost => "lost",
            TraceKind::Retransmit => "retransmit",
            TraceKind::Rto => "rto",
            TraceKind::Duplicate => "dup",
            TraceKind::Drop => "drop",
            TraceKind::PeerRestarted => "peer_restarted",
            TraceKind::PeerClosed => "peer_closed",
            TraceKind::Closed => "closed",
            TraceKind::Fail => "fail",
        }
    }
}

/// One traced protocol event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// When.
    pub at: Instant,
    /// What.
    pub kind: TraceKind,
    /// A sequence number, message id or count the event concerns.
    pub arg: u64,
}

/// The event trace: always a hash (FNV-1a style over events), and the events themselves
/// when tracing is on (bounded).
#[derive(Debug, Clone)]
pub struct Trace {
    hash: u64,
    events: Option<Vec<TraceEvent>>,
}

/// Events kept at most.
const TRACE_LIMIT: usize = 1 << 16;

impl Trace {
    pub(crate) fn new(keep: bool) -> Trace {
        Trace {
            hash: 0xcbf2_9ce4_8422_2325,
            events: keep.then(Vec::new),
        }
    }

    #[inline]
    pub(crate) fn record(&mut self, at: Instant, kind: TraceKind, arg: u64) {
        for w in [at.as_nanos(), kind as u64, arg] {
            self.hash = (self.hash ^ w).wrapping_mul(0x0000_0100_0000_01b3);
        }
        if let Some(e) = &mut self.events
            && e.len() < TRACE_LIMIT
        {
            e.push(TraceEvent { at, kind, arg });
        }
    }

    /// A hash of every event so far: the same inputs give the same hash everywhere.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The events kept (empty unless tracing was switched on).
    pub fn events(&self) -> &[TraceEvent] {
        self.events.as_deref().unwrap_or(&[])
    }
}
