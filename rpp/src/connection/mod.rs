//! A connection: one end of a reliable, ordered message stream between two peers.

mod aggregation;
mod incoming;
mod outgoing;
mod pacing;
mod recv;
mod send;

use crate::config::Config;
use crate::congestion::{Controller, RateSample};
use crate::rtt::RttEstimator;
use crate::stats::{Stats, Trace, TraceKind};
use crate::time::Instant;
use crate::wire::{
    self, DATA_SACK_WORDS, Header, HeaderRepr, Integrity, MAX_HEADER_LEN, MAX_SACK_WORDS, flags,
};
use aggregation::{Aggregation, Delivery, Flight};
use core::ops::Range;
use pacing::{BURST_INTERVAL, Pacer};
use recv::{DataOutcome, FragmentInfo, RecvState};
use send::{DataRef, SendState};
use std::collections::VecDeque;
use thiserror::Error;

/// Marks the branch that calls it as rarely taken, so that the compiler lays the common
/// path out straight and moves this one aside (what `std::hint::cold_path` does, stable
/// only since Rust 1.95; a call to a `#[cold]` function is the older way to say it).
#[cold]
#[inline(never)]
fn cold_path() {}

/// Identifies a message within one incarnation of a connection (they count from zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u64);

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Introducing itself; nothing heard from the peer yet.
    Connecting,
    /// Talking to a known incarnation of the peer.
    Established,
    /// [`Connection::close`] was called: finishing what is in flight.
    Closing,
    /// Closed by either side.
    Closed,
    /// Failed (see the [`Event::Failed`] it emitted).
    Failed,
}

/// Why a connection failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The peer answered nothing through `max_retries` timeouts in a row, and nothing
    /// for `peer_timeout`.
    #[error("peer unreachable: no answer after {retries} retries")]
    PeerUnreachable {
        /// The retries made.
        retries: u32,
    },
    /// The peer sent something that contradicts the protocol (a CRC-valid packet that
    /// breaks message framing): nothing it sends can be trusted.
    #[error("protocol violation by the peer: {0}")]
    ProtocolViolation(&'static str),
    /// The application (or the channel under it) gave up on the peer: see
    /// [`Connection::abort`].
    #[error("connection aborted: {0}")]
    Aborted(&'static str),
}

/// Something the application should know. See [`Connection::poll_event`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<B> {
    /// The peer's incarnation is known: the connection is established.
    Connected {
        /// The peer's incarnation.
        peer_incarnation: u64,
    },
    /// A message, delivered in order, exactly once. Give the buffer back with
    /// [`Connection::recycle`] to avoid an allocation later.
    Message(Vec<u8>),
    /// A message was fully acknowledged: its buffer is handed back.
    Sent {
        /// Its id.
        id: MessageId,
        /// The buffer `send` took.
        msg: B,
    },
    /// The peer restarted: its new incarnation has no memory of the old one. Messages
    /// not acknowledged by the old incarnation are handed back (they may or may not have
    /// been delivered there); nothing the old incarnation sent will be delivered any
    /// more.
    PeerRestarted {
        /// The incarnation that is gone.
        old: u64,
        /// The new one.
        new: u64,
        /// Messages the old incarnation had not acknowledged.
        unacked: Vec<B>,
    },
    /// The peer closed the connection. It had acknowledged everything it sent before its
    /// close; messages of ours it had not acknowledged are handed back.
    PeerClosed {
        /// Messages never sent or not acknowledged.
        unsent: Vec<B>,
    },
    /// This side's close finished: everything was acknowledged.
    Closed,
    /// The connection failed; every message not fully acknowledged is handed back.
    Failed {
        /// Why.
        error: ConnectionError,
        /// Messages never sent or not acknowledged.
        unsent: Vec<B>,
    },
}

/// `send` refused a message; the buffer comes back ([`SendError::into_inner`]).
#[derive(Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SendError<B> {
    /// The window and the bounded queue are full: try again after events.
    #[error("send queue is full (would block)")]
    WouldBlock(B),
    /// Longer than `max_message_len`.
    #[error("message longer than the connection takes")]
    TooLarge(B),
    /// The connection is closing, closed or failed.
    #[error("connection is closed")]
    Closed(B),
}

impl<B> SendError<B> {
    /// The buffer handed back.
    pub fn into_inner(self) -> B {
        match self {
            SendError::WouldBlock(b) | SendError::TooLarge(b) | SendError::Closed(b) => b,
        }
    }
}

/// Why a datagram was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DropReason {
    /// Not an RPP packet, or an impossible one.
    Malformed,
    /// CRC-32C mismatch.
    BadCrc,
    /// Another connection's.
    Foreign,
    /// From an earlier incarnation of the peer, or to an earlier one of ours.
    Stale,
    /// Beyond the receive window or buffer.
    BeyondWindow,
    /// The connection is closed or failed.
    Closed,
    /// A missing or wrong MAC.
    BadMac,
    /// The packet names an integrity mode, or MAC use, other than the configured one.
    IntegrityMismatch,
}

/// What [`Connection::handle_packet`] did with a datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// The datagram carries the next message, whole and in order, and the connection is
    /// configured for in-place delivery: the message is `datagram[payload]`, delivered
    /// now; the caller hands it to the application without a copy.
    InPlace {
        /// The message's id.
        id: MessageId,
        /// Where its bytes are in the datagram.
        payload: Range<usize>,
    },
    /// Taken: data buffered or delivered (see the events), or acknowledgements.
    Accepted,
    /// A data packet already received.
    Duplicate,
    /// Dropped, and why (also counted).
    Dropped(DropReason),
}

/// A packet ready to go, as [`Connection::poll_transmit_gather`] gives it: the header
/// in the caller's buffer and the payload borrowed from the message being sent. Send
/// `header[..header_len]` then `payload`, as one datagram. A payload of at most
/// [`INLINE_PAYLOAD`] bytes is copied behind the header instead when the caller's buffer
/// has room: `header_len` then covers the whole packet and `payload` is empty.
#[derive(Debug)]
pub struct Gather<'a, B> {
    /// Bytes of the header written.
    pub header_len: usize,
    /// The payload.
    pub payload: &'a [u8],
    /// The message the payload is part of, and where in it the payload starts (none for
    /// a packet without payload): a channel that can send from the message's own memory
    /// (a DMA from a lent buffer) finds it here.
    pub message: Option<(&'a B, usize)>,
    /// The packet ends a batch of new data on a paced path (one burst of the pacer,
    /// sent whole): a driver that coalesces packets into one segmentation-offload send
    /// sends what it holds now, so that each send is one batch (see the crate docs,
    /// "Pacing and the driver").
    pub batch_end: bool,
    /// Nothing more goes after this packet for now ([`Connection::may_transmit`] is
    /// false once it has gone): the driver need not ask again, and one that starts its
    /// device on what it sent can start it on this packet at once.
    pub last: bool,
}

/// Longest payload [`Connection::poll_transmit_gather`] copies behind the header when
/// the caller's buffer has room (a buffer of [`MAX_HEADER_LEN`]
/// `+ INLINE_PAYLOAD` bytes always does): a short packet is then contiguous, sealed in one
/// pass over it, and sent without gathering, where copying it costs less than
/// gathering it does.
pub const INLINE_PAYLOAD: usize = 192;

/// What goes in the next packet.
struct Plan {
    repr: HeaderRepr,
    /// Words of SACK bitmap the packet carries (0 when nothing waits beyond a gap). The
    /// bitmap itself is written with the header ([`Connection::emit`]): a plan is small
    /// to move, and the words are read from the receive half only when there are some.
    sack_words: u8,
    payload: Option<(u64, u32)>,
    /// The packet ends a batch.
    batch_end: bool,
}

/// The acknowledgement part of a packet: checked when the packet arrives and, for a data
/// packet without a SACK bitmap, applied at the next call that depends on it (see
/// [`Connection::handle_packet`]).
#[derive(Debug, Clone, Copy)]
struct HeldAck {
    /// When the packet arrived: round-trip samples and timers are as of then.
    at: Instant,
    ack: u32,
    /// The echoed transmission's full number, expanded when the packet arrived.
    echo: Option<u64>,
    dsack: u32,
    credit: u32,
    ack_delay_us: u16,
}

/// One end of an RPP connection. See the crate documentation for the protocol.
///
/// The methods come in four kinds (as in quinn-proto): getters ([`Connection::state`],
/// [`Connection::stats`], ...), `handle_*` for what comes in ([`Connection::handle_packet`],
/// [`Connection::handle_timeout`]), mutators ([`Connection::send`], [`Connection::close`],
/// [`Connection::recycle`]), and `poll_*` for what should go out. After any `handle_*` or
/// mutator call, drain [`Connection::poll_transmit`] until it returns `None`, then
/// [`Connection::poll_event`] until it returns `None`, then arm a timer for
/// [`Connection::poll_timeout`] and call [`Connection::handle_timeout`] when it fires.
pub struct Connection<B = Vec<u8>> {
    config: Config,
    timers: Timers,
    conn_id: u64,
    /// The integrity byte every packet sends and every packet taken must carry.
    integrity_byte: u8,
    /// An unknown incarnation of the peer introduced itself: it becomes the peer only
    /// once a packet from it names this end's incarnation (which an off-path sender
    /// never learns).
    challenge: Option<u64>,
    challenge_due: bool,
    local_incarnation: u64,
    peer_incarnation: Option<u64>,
    state: State,
    send: SendState<B>,
    recv: RecvState,
    rtt: RttEstimator,
    events: VecDeque<Event<B>>,
    messages_queued: usize,
    stats: Stats,
    trace: Trace,
    /// When the oldest packet in flight is declared lost, if nothing acknowledges it.
    rto_deadline: Option<Instant>,
    /// Retransmission timeouts in a row without an acknowledgement of new data.
    timeouts: u32,
    /// When the next introduction goes out, while connecting.
    hello_deadline: Option<Instant>,
    hello_due: bool,
    /// A data packet carried a cut SACK bitmap: an acknowledgement with the whole bitmap
    /// goes next, before more data.
    full_ack_due: bool,
    hellos: u32,
    /// When the peer was last heard from (any valid packet).
    last_heard: Instant,
    /// When the last keepalive or persist probe went out, while it is unanswered.
    probe_sent_at: Option<Instant>,
    probe_due: bool,
    probes_unanswered: u32,
    /// Persist probes sent while the peer's credit stayed closed (they back off).
    persist_probes: u32,
    /// Sequence numbers of the latest resends, and whether a timeout sent each (its
    /// D-SACK is no evidence of reordering).
    recently_retransmitted: VecDeque<(u32, bool)>,
    /// The loss detection's reordering allowance (RFC 8985's adaptive reordering
    /// window), see [`Reordering`].
    reordering: Reordering,
    /// The acknowledgement the last data packet carried, not yet applied.
    held_ack: Option<HeldAck>,
    stalled: bool,
    /// The congestion controller (none: off).
    cc: Option<Box<dyn Controller>>,
    /// Its window, as of its last change (`u64::MAX` without one): read for every
    /// packet, so kept here rather than asked through the trait object.
    cwnd: u64,
    /// How far the flight may go past `cwnd` to make up for acknowledgements that came
    /// together, as last measured (see the `aggregation` module).
    allowance: u64,
    /// The measurement behind it.
    aggregation: Aggregation,
    /// The last acknowledgement found the flight application-limited.
    app_limited: bool,
    /// The controller wants delivery rate samples ([`Controller::wants_rate_samples`]).
    rate_samples: bool,
    /// The pacer (none: off).
    pacer: Option<Pacer>,
    /// When the pacer lets the data packet it held back go.
    pacing_deadline: Option<Instant>,
    /// New packets still to go in the batch under way (see the pacer's module docs).
    batch_left: u64,
    /// The packet being planned ends a batch.
    batch_end: bool,
    /// A batch waits for room in the congestion window (counted once per wait).
    batch_held: bool,
    /// The bytes delivered once the last flight that tested the congestion window (came
    /// within a packet of it, or was held back by it) has been acknowledged: until then
    /// acknowledgements are window-limited, as Linux keeps `is_cwnd_limited` for one flight
    /// (`tcp_cwnd_validate`). Judged per acknowledgement instead, a driver that takes
    /// several acknowledgements between two sends found most batches application-limited,
    /// and CUBIC's curve never left its flat start (`benches/RESULTS.md`).
    window_tested_until: u64,
    /// Bytes of the largest packet.
    max_packet: u64,
    /// Packets the last congestion event declared lost that the peer has not yet shown
    /// (D-SACK) to have arrived: at zero the event is undone.
    undo_pending: u32,
    /// Messages the last data packet completed (kept to reuse its allocation).
    delivered: Vec<Vec<u8>>,
    /// This side closed: answer anything the peer still sends with CLOSE.
    we_closed: bool,
    close_due: bool,
}

/// The configuration's durations in nanoseconds, as the timers use them.
#[derive(Debug, Clone, Copy)]
struct Timers {
    ack_delay: u64,
    keepalive: u64,
    rto_max: u64,
    peer_timeout: u64,
}

impl Timers {
    fn new(config: &Config) -> Timers {
        let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Timers {
            ack_delay: nanos(config.ack_delay),
            keepalive: nanos(config.keepalive),
            rto_max: nanos(config.rto_max),
            peer_timeout: nanos(config.peer_timeout),
        }
    }
}

/// How much reordering the loss detection allows, adapted to what the path showed, as
/// RFC 8985 adapts RACK's reordering window: it starts at the configured thresholds (a
/// packet is lost once `packet_threshold` later transmissions arrived, or once a later
/// one arrived and it has been out `time_threshold_eighths` / 8 of a round trip). Each
/// round trip in which a packet declared lost turns out to have arrived (acknowledged
/// before its resend, or reported twice by D-SACK for a resend that no timeout sent)
/// takes a step: the packet threshold doubles (at most [`Reordering::MAX_PACKETS`]) and
/// the time threshold grows by a quarter of a round trip (at most two round trips: a
/// reordering window of one round trip, RACK's cap). After
/// [`Reordering::PERSIST`] reductions of the window with no such evidence, it returns
/// to the configured thresholds (RACK's `reo_wnd_persist`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reordering {
    packets: u32,
    eighths: u32,
    base_packets: u32,
    base_eighths: u32,
    /// When the last step was taken (one per round trip).
    stepped_at: Option<Instant>,
    /// Reductions since the last evidence.
    quiet: u32,
}

impl Reordering {
    /// The packet threshold grows at most to this.
    pub(crate) const MAX_PACKETS: u32 = 64;
    /// The time threshold grows at most to this many eighths of a round trip.
    pub(crate) const MAX_EIGHTHS: u32 = 16;
    /// Reductions without evidence before the thresholds return to the configured ones.
    pub(crate) const PERSIST: u32 = 16;

    fn new(config: &Config) -> Reordering {
        Reordering {
            packets: config.packet_threshold,
            eighths: config.time_threshold_eighths,
            base_packets: config.packet_threshold,
            base_eighths: config.time_threshold_eighths,
            stepped_at: None,
            quiet: 0,
        }
    }

    /// A packet declared lost had arrived at `now`; `srtt` in nanoseconds. Returns
    /// whether the allowance grew.
    fn evidence(&mut self, now: Instant, srtt: u64) -> bool {
        self.quiet = 0;
        if self.stepped_at.is_some_and(|t| now.nanos_since(t) < srtt) {
            return false;
        }
        let packets =
            (self.packets.saturating_mul(2)).min(Self::MAX_PACKETS.max(self.base_packets));
        let eighths = (self.eighths + 2).min(Self::MAX_EIGHTHS.max(self.base_eighths));
        if (packets, eighths) == (self.packets, self.eighths) {
            return false;
        }
        self.stepped_at = Some(now);
        (self.packets, self.eighths) = (packets, eighths);
        true
    }

    /// The window was reduced for a loss.
    fn reduced(&mut self) {
        self.quiet += 1;
        if self.quiet >= Self::PERSIST {
            self.quiet = 0;
            self.packets = self.base_packets;
            self.eighths = self.base_eighths;
            self.stepped_at = None;
        }
    }
}

/// Credit assumed before the peer has said anything.
const INITIAL_CREDIT: u32 = 16;

impl<B: AsRef<[u8]>> Connection<B> {
    /// A connection to a peer, starting at `now`. `incarnation` identifies this life of
    /// this end: a new one every time the application starts, never zero. `conn_id`
    /// must be the same at both ends. Off-path safety rests on both being unguessable:
    /// draw each from the operating system's random generator (RPP reads no randomness
    /// itself), and share the connection id with the peer out of band.
    pub fn new(
        config: Config,
        incarnation: u64,
        conn_id: u64,
        now: Instant,
    ) -> Result<Connection<B>, crate::ConfigError> {
        config.validate()?;
        if incarnation == 0 {
            return Err(crate::ConfigError("incarnation must not be zero"));
        }
        let payload = config.max_payload();
        let cc = config
            .congestion
            .build(config.mtu as u64, config.initial_window);
        Ok(Connection {
            cwnd: cc.as_ref().map_or(u64::MAX, |c| c.window()),
            allowance: 0,
            aggregation: Aggregation::default(),
            send: SendState::new(payload, wire::HEADER_LEN as u32, INITIAL_CREDIT),
            rate_samples: cc.as_ref().is_some_and(|c| c.wants_rate_samples()),
            cc,
            app_limited: false,
            pacer: config.pacing.then(|| Pacer::new(config.mtu as u64, now)),
            batch_left: 0,
            batch_end: false,
            batch_held: false,
            pacing_deadline: None,
            window_tested_until: 0,
            max_packet: config.mtu as u64,
            undo_pending: 0,
            recv: RecvState::new(
                config.recv_window,
                config.recv_buffer_bytes,
                payload,
                config.max_message_len,
            ),
            rtt: RttEstimator::new(config.rto_initial, config.rto_min, config.rto_max)
                .with_max_ack_delay(config.ack_delay),
            trace: Trace::new(config.trace),
            conn_id,
            integrity_byte: config.integrity.byte(config.mac_key.is_some()),
            challenge: None,
            challenge_due: false,
            local_incarnation: incarnation,
            peer_incarnation: None,
            state: State::Connecting,
            events: VecDeque::new(),
            messages_queued: 0,
            stats: Stats::default(),
            rto_deadline: None,
            timeouts: 0,
            hello_deadline: Some(now),
            hello_due: true,
            full_ack_due: false,
            hellos: 0,
            last_heard: now,
            probe_sent_at: None,
            probe_due: false,
            probes_unanswered: 0,
            persist_probes: 0,
            recently_retransmitted: VecDeque::new(),
            reordering: Reordering::new(&config),
            held_ack: None,
            stalled: false,
            delivered: Vec::new(),
            timers: Timers::new(&config),
            we_closed: false,
            close_due: false,
            config,
        })
    }

    // ---- Getters --------------------------------------------------------------------

    /// Where the connection is.
    pub fn state(&self) -> State {
        self.state
    }

    /// This end's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.local_incarnation
    }

    /// The peer's incarnation, once known.
    pub fn peer_incarnation(&self) -> Option<u64> {
        self.peer_incarnation
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters, and the round-trip and window figures as of now.
    pub fn stats(&self) -> Stats {
        Stats {
            srtt: self.rtt.srtt(),
            rttvar: self.rtt.rttvar(),
            rto: self.rtt.rto(),
            in_flight: self.send.in_flight,
            unacked_span: self.send.span(),
            peer_credit: self.send.peer_credit,
            bytes_in_flight: self.send.bytes_in_flight,
            cwnd: self.cwnd,
            ack_aggregation: self.allowance,
            loss_packet_threshold: self.reordering.packets,
            loss_time_threshold_eighths: self.reordering.eighths,
            ssthresh: self.cc.as_ref().map_or(u64::MAX, |c| c.ssthresh()),
            slow_start_delay_exits: self.cc.as_ref().map_or(0, |c| c.slow_start_delay_exits()),
            pacing_rate: if self.pacer.is_some() {
                self.pacing_inputs().0
            } else {
                0
            },
            controller: self.cc.as_ref().map_or("off", |c| c.name()),
            bandwidth_estimate: self
                .cc
                .as_ref()
                .and_then(|c| c.bandwidth_estimate())
                .unwrap_or(0),
            ..self.stats.clone()
        }
    }

    /// Replaces the congestion controller (`None` turns congestion control off), for a
    /// controller of the caller's own; [`Config::congestion`] picks a built-in one.
    pub fn set_controller(&mut self, controller: Option<Box<dyn Controller>>) {
        self.cc = controller;
        self.cwnd = self.cc.as_ref().map_or(u64::MAX, |c| c.window());
        self.rate_samples = self.cc.as_ref().is_some_and(|c| c.wants_rate_samples());
        self.aggregation.reset();
        self.allowance = 0;
    }

    /// The congestion controller, if any.
    pub fn controller(&self) -> Option<&dyn Controller> {
        self.cc.as_deref()
    }

    /// How many full-size data packets the congestion window and the pacer let go at
    /// `now` (`usize::MAX`: neither limits): a driver that sends GSO batches sizes its
    /// next batch by it. [`Connection::poll_transmit`] may give fewer (the send window,
    /// the peer's credit, or nothing to send), and acknowledgements are never held back.
    /// On a paced path it is 0 until a whole batch may go ([`Gather::batch_end`]).
    pub fn send_budget(&mut self, now: Instant) -> usize {
        let room = if self.cc.is_some() {
            self.flight_limit()
                .saturating_sub(self.send.bytes_in_flight)
                .div_ceil(self.max_packet)
        } else {
            u64::MAX
        };
        let (rate, window) = self.pacing_inputs();
        let paced = self.pacer.as_mut().map_or(u64::MAX, |p| {
            let tokens = p.available(now, rate, window);
            if tokens == u64::MAX {
                u64::MAX
            } else {
                tokens / self.max_packet
            }
        });
        let budget = room.min(paced);
        // A batch goes whole or not at all.
        let budget = if budget < self.batch_size() {
            0
        } else {
            budget
        };
        usize::try_from(budget).unwrap_or(usize::MAX)
    }

    /// The pacing rate in bytes per second (0: nothing paced, as before a round-trip
    /// sample) and the window that bounds a burst (the congestion window, or the send
    /// window's bytes without a controller). The rate is the controller's own if it sets
    /// one ([`Controller::pacing_rate`]), else the window spread over the smoothed round
    /// trip ([`Pacer::rate`]).
    #[inline]
    fn pacing_inputs(&self) -> (u64, u64) {
        let srtt = self.rtt.srtt_nanos();
        match &self.cc {
            Some(c) => {
                let rate = match c.pacing_rate() {
                    Some(rate) if srtt > 0 => rate,
                    // The flight the connection allows: the window and the allowance
                    // past it for acknowledgements read late.
                    _ => Pacer::rate(self.flight_limit(), srtt, c.in_slow_start()),
                };
                (rate, self.cwnd)
            }
            None => {
                let window = u64::from(self.config.send_window) * self.max_packet;
                (Pacer::rate(window, srtt, false), window)
            }
        }
    }

    /// The event trace (its hash is always kept).
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// Whether messages are waiting to be sent or acknowledged.
    pub fn has_pending(&self) -> bool {
        !self.send.is_idle()
    }

    /// Whether a message has packets not yet sent even once (held back by the send
    /// window, the peer's credit, the congestion window or the pacer): such a message
    /// reaches the peer only through later calls of [`Connection::poll_transmit`].
    pub fn has_unsent(&self) -> bool {
        self.send.has_new()
    }

    /// Whether packets declared lost wait to be sent again: they go at the next
    /// [`Connection::poll_transmit`] the windows allow.
    pub fn has_resends(&self) -> bool {
        !self.send.nothing_to_resend()
    }

    /// Whether [`Connection::poll_transmit`] may give another packet now: data not yet
    /// sent or to send again, an acknowledgement owed, or a packet of its own due (a
    /// close, a challenge, an introduction, a probe, a full acknowledgement). When false
    /// it gives none, so a driver's transmit loop can stop after a packet (which carried
    /// the acknowledgement owed) without a last call that finds nothing.
    pub fn may_transmit(&self) -> bool {
        self.send.has_new()
            || !self.send.nothing_to_resend()
            || self.recv.ack_needed
            || self.close_due
            || self.challenge_due
            || self.hello_due
            || self.probe_due
            || self.full_ack_due
            || self.state == State::Closing
    }

    /// Bytes of messages held by `send` (queued or unacknowledged).
    pub fn queued_bytes(&self) -> usize {
        self.send.queued_bytes
    }

    // ---- Mutators -------------------------------------------------------------------

    /// Queues a message for reliable, in-order delivery. The buffer is kept (not copied)
    /// until the peer has acknowledged all of it, then handed back in [`Event::Sent`].
    pub fn send(&mut self, msg: B) -> Result<MessageId, SendError<B>> {
        let len = msg.as_ref().len();
        if !matches!(self.state, State::Connecting | State::Established) {
            return Err(SendError::Closed(msg));
        }
        if len > self.config.max_message_len {
            return Err(SendError::TooLarge(msg));
        }
        if !self.has_room(len) {
            return Err(SendError::WouldBlock(msg));
        }
        if !self.send.has_new()
            && self.send.bytes_in_flight < self.flight_limit()
            && self.send.nothing_to_resend()
        {
            // Nothing left to send and room in the window: until what is in flight has
            // been delivered, the application limits the rate samples.
            self.send.mark_app_limited();
        }
        Ok(MessageId(self.send.push(msg, len)))
    }

    /// Whether [`Connection::send`] would take a message of `len` bytes now: for a
    /// producer that writes a message only where it will be accepted (a buffer it must
    /// first take from a channel, say).
    pub fn can_send(&self, len: usize) -> bool {
        matches!(self.state, State::Connecting | State::Established)
            && len <= self.config.max_message_len
            && self.has_room(len)
    }

    /// Whether [`Connection::send`] would take `count` more messages of `len` bytes in
    /// all now: for a sender whose message goes as several that the peer must get
    /// together (all taken, or none).
    pub fn can_send_many(&self, count: usize, len: usize) -> bool {
        matches!(self.state, State::Connecting | State::Established)
            && self.send.queued_bytes.saturating_add(len) <= self.config.max_queued_bytes
            && self.send.messages.len().saturating_add(count) <= self.config.max_queued_messages
    }

    fn has_room(&self, len: usize) -> bool {
        self.send.queued_bytes + len <= self.config.max_queued_bytes
            && self.send.messages.len() < self.config.max_queued_messages
    }

    /// Closes the connection once everything queued is acknowledged. `send` refuses new
    /// messages from now on.
    pub fn close(&mut self) {
        self.apply_held_ack();
        if matches!(self.state, State::Connecting | State::Established) {
            self.state = State::Closing;
        }
    }

    /// Fails the connection now, for a reason the layer below knows and the protocol
    /// cannot see (the peer's process died, its link is gone for good). Every message not
    /// fully acknowledged comes back in [`Event::Failed`]; nothing more is sent or
    /// delivered. Does nothing on a closed or failed connection.
    pub fn abort(&mut self, now: Instant, why: &'static str) {
        if !matches!(self.state, State::Closed | State::Failed) {
            self.fail(now, ConnectionError::Aborted(why));
        }
    }

    /// Takes back a buffer from [`Event::Message`] for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.recv.recycle(buf);
    }

    fn fail(&mut self, now: Instant, error: ConnectionError) {
        // What the peer acknowledged is not handed back as unsent.
        self.apply_held_ack();
        self.trace.record(now, TraceKind::Fail, 0);
        self.state = State::Failed;
        let unsent = self.send.take_all();
        self.events.push_back(Event::Failed { error, unsent });
        self.rto_deadline = None;
        self.hello_deadline = None;
        self.probe_sent_at = None;
    }
}

#[cfg(test)]
mod bbr_tests;
#[cfg(test)]
mod cc_tests;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod safety_tests;
#[cfg(test)]
mod tests;
