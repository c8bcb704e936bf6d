//! A connection: one end of a reliable, ordered message stream between two peers.

mod recv;
mod send;

use crate::config::Config;
use crate::rtt::RttEstimator;
use crate::stats::{Stats, Trace, TraceKind};
use crate::time::Instant;
use crate::wire::{
    self, DATA_SACK_WORDS, Header, HeaderRepr, Integrity, MAX_HEADER_LEN, MAX_SACK_WORDS, flags,
};
use core::ops::Range;
use recv::{DataOutcome, FragmentInfo, RecvState};
use send::SendState;
use std::collections::VecDeque;
use thiserror::Error;

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
/// `header[..header_len]` then `payload`, as one datagram.
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
}

/// What goes in the next packet.
struct Plan {
    repr: HeaderRepr,
    /// The SACK bitmap, when packets wait beyond a gap.
    sack: Option<([u64; MAX_SACK_WORDS], u8)>,
    payload: Option<(u64, u32)>,
}

impl Plan {
    fn sack(&self) -> &[u64] {
        self.sack
            .as_ref()
            .map_or(&[], |(words, n)| &words[..usize::from(*n)])
    }
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
    recently_retransmitted: VecDeque<u32>,
    /// The acknowledgement the last data packet carried, not yet applied.
    held_ack: Option<HeldAck>,
    stalled: bool,
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
        Ok(Connection {
            send: SendState::new(payload, INITIAL_CREDIT),
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
            ..self.stats.clone()
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
        Ok(MessageId(self.send.push(msg)))
    }

    /// Whether [`Connection::send`] would take a message of `len` bytes now: for a
    /// producer that writes a message only where it will be accepted (a buffer it must
    /// first take from a channel, say).
    pub fn can_send(&self, len: usize) -> bool {
        matches!(self.state, State::Connecting | State::Established)
            && len <= self.config.max_message_len
            && self.has_room(len)
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

    // ---- Handling what comes in -----------------------------------------------------

    /// Takes one datagram from the channel. Anything that is not a valid packet of this
    /// connection is dropped and counted; nothing here panics.
    ///
    /// The acknowledgement a data packet carries is checked here (a bogus one drops the
    /// packet) but, unless it has a SACK bitmap (evidence of loss, acted on at once),
    /// applied at the next call that depends on it: [`Connection::poll_event`],
    /// [`Connection::poll_timeout`], [`Connection::handle_timeout`], the next
    /// `handle_packet`, [`Connection::close`], or a `poll_transmit` with anything to send
    /// but a new packet the window already lets go. The message the packet completes thus
    /// reaches the application, and a new packet (its answer, say) the channel, without
    /// the acknowledgement's bookkeeping in front of them; the result is the same as if it
    /// had been applied at once (round-trip samples and timers are as of the packet's
    /// arrival). Until then the getters ([`Connection::stats`],
    /// [`Connection::has_pending`], [`Connection::can_send`], ...) do not count it, and
    /// [`Connection::has_events`] says there is something to poll.
    pub fn handle_packet(&mut self, now: Instant, datagram: &[u8]) -> Received {
        self.apply_held_ack();
        self.stats.packets_received += 1;
        let h = match Header::new_checked(datagram) {
            Ok(h) if h.version() == wire::VERSION => h,
            _ => return self.dropped(now, DropReason::Malformed),
        };
        // The checks first, each as configured; nothing in the packet is believed before.
        if h.integrity_byte() != self.integrity_byte {
            return self.dropped(now, DropReason::IntegrityMismatch);
        }
        if self.config.integrity == Integrity::Crc32c && !h.crc_ok() {
            return self.dropped(now, DropReason::BadCrc);
        }
        if let Some(key) = &self.config.mac_key
            && !h.mac_ok(key)
        {
            return self.dropped(now, DropReason::BadMac);
        }
        let Ok(repr) = HeaderRepr::parse(&h) else {
            return self.dropped(now, DropReason::Malformed);
        };
        if repr.conn_id != self.conn_id {
            return self.dropped(now, DropReason::Foreign);
        }
        let names_us = repr.dst_incarnation == self.local_incarnation;
        if repr.dst_incarnation != 0 && !names_us {
            // Meant for an earlier life of ours (or made up). While introducing
            // ourselves, say who we are now at once.
            self.hello_due |= self.state == State::Connecting;
            return self.dropped(now, DropReason::Stale);
        }
        if matches!(self.state, State::Closed | State::Failed) {
            // The peer missed our CLOSE and keeps talking: tell it again.
            self.close_due |= self.we_closed
                && repr.flags & flags::CLOSE == 0
                && self.peer_incarnation == Some(repr.src_incarnation);
            return self.dropped(now, DropReason::Closed);
        }
        match self.peer_incarnation {
            None => {
                self.peer_incarnation = Some(repr.src_incarnation);
                if self.state == State::Connecting {
                    self.state = State::Established;
                }
                self.hello_deadline = None;
                self.trace
                    .record(now, TraceKind::Connected, repr.src_incarnation);
                self.events.push_back(Event::Connected {
                    peer_incarnation: repr.src_incarnation,
                });
            }
            Some(p) if p == repr.src_incarnation => {}
            // The incarnation we challenged names ours: it hears us, it is the peer's new
            // life.
            Some(p) if names_us && self.challenge == Some(repr.src_incarnation) => {
                self.challenge = None;
                self.peer_restarted(now, p, repr.src_incarnation);
            }
            Some(_) if repr.dst_incarnation == 0 && repr.flags & flags::HELLO != 0 => {
                // A new life of the peer introducing itself, or anyone who knows the
                // connection id: nothing changes until it answers a challenge naming it.
                self.challenge = Some(repr.src_incarnation);
                self.challenge_due = true;
                self.stats.restart_challenges += 1;
                return self.dropped(now, DropReason::Stale);
            }
            Some(_) => return self.dropped(now, DropReason::Stale),
        }
        self.last_heard = now;
        self.probes_unanswered = 0;
        self.probe_sent_at = None;
        let payload = h.payload();
        let data = repr.flags & flags::DATA != 0;
        if repr.flags & (flags::ACK_NOW | flags::HELLO) != 0 || repr.dst_incarnation == 0 {
            // Answer at once: a probe wants it, and an introducer must learn who we are.
            self.recv.owe_ack(now, true);
        }
        let Ok(echo) = self.send.check_ack(repr.ack, repr.echo) else {
            return self.dropped(now, DropReason::Malformed);
        };
        let held = HeldAck {
            at: now,
            ack: repr.ack,
            echo,
            dsack: repr.dsack,
            credit: repr.credit,
            ack_delay_us: repr.ack_delay_us,
        };
        // A data packet's acknowledgement waits until the message it carries is delivered
        // and whatever the application sends in answer has gone (see the method's docs),
        // unless nothing of ours awaits one or it shows losses (a SACK bitmap).
        let sack_words = h.sack_words();
        if data && sack_words == 0 && repr.flags & flags::CLOSE == 0 && !self.send.is_idle() {
            self.held_ack = Some(held);
        } else {
            let mut sack = [0u64; MAX_SACK_WORDS];
            for (i, word) in sack.iter_mut().enumerate().take(sack_words) {
                *word = h.sack_word(i);
            }
            self.on_ack(&held, &sack[..sack_words]);
        }
        if repr.flags & flags::CLOSE != 0 {
            self.trace.record(now, TraceKind::PeerClosed, 0);
            self.state = State::Closed;
            self.rto_deadline = None;
            self.hello_deadline = None;
            self.probe_sent_at = None;
            let unsent = self.send.take_all();
            self.events.push_back(Event::PeerClosed { unsent });
            return Received::Accepted;
        }
        if !data {
            return Received::Accepted;
        }
        let info = FragmentInfo {
            seq: repr.seq,
            msg_id: repr.msg_id,
            frag_index: repr.frag_index,
            frag_count: repr.frag_count,
            msg_len: repr.msg_len,
            tx: repr.tx,
        };
        let in_place = self.config.in_place_delivery && self.messages_queued == 0;
        let outcome = self.recv.on_data(
            info,
            payload,
            now,
            self.config.ack_every,
            in_place,
            &mut self.delivered,
        );
        if !self.delivered.is_empty() {
            let mut delivered = core::mem::take(&mut self.delivered);
            for m in delivered.drain(..) {
                self.deliver(now, m);
            }
            self.delivered = delivered;
        }
        match outcome {
            DataOutcome::Whole(m) => {
                self.deliver(now, m);
                Received::Accepted
            }
            DataOutcome::InPlace => {
                self.stats.messages_delivered += 1;
                self.stats.bytes_delivered += payload.len() as u64;
                self.trace.record(now, TraceKind::Deliver, repr.msg_id);
                Received::InPlace {
                    id: MessageId(repr.msg_id),
                    payload: h.header_len()..datagram.len(),
                }
            }
            DataOutcome::Accepted => Received::Accepted,
            DataOutcome::Duplicate => {
                self.stats.dup_packets += 1;
                self.trace
                    .record(now, TraceKind::Duplicate, u64::from(repr.seq));
                Received::Duplicate
            }
            DataOutcome::BeyondWindow => self.dropped(now, DropReason::BeyondWindow),
            DataOutcome::Violation(why) => {
                self.fail(now, ConnectionError::ProtocolViolation(why));
                Received::Dropped(DropReason::Malformed)
            }
        }
    }

    /// Queues a message RPP copied out for the application.
    fn deliver(&mut self, now: Instant, m: Vec<u8>) {
        self.stats.messages_delivered += 1;
        self.stats.bytes_delivered += m.len() as u64;
        self.recv.undelivered_bytes += m.len();
        self.messages_queued += 1;
        self.trace.record(now, TraceKind::Deliver, m.len() as u64);
        self.events.push_back(Event::Message(m));
    }

    fn dropped(&mut self, now: Instant, reason: DropReason) -> Received {
        let s = &mut self.stats;
        match reason {
            DropReason::Malformed => s.malformed += 1,
            DropReason::BadCrc => s.bad_crc += 1,
            DropReason::Foreign => s.foreign += 1,
            DropReason::Stale => s.stale += 1,
            DropReason::BeyondWindow => s.beyond_window += 1,
            DropReason::BadMac => s.bad_mac += 1,
            DropReason::IntegrityMismatch => s.integrity_mismatch += 1,
            DropReason::Closed => {}
        }
        self.trace.record(now, TraceKind::Drop, reason as u64);
        Received::Dropped(reason)
    }

    fn peer_restarted(&mut self, now: Instant, old: u64, new: u64) {
        self.trace.record(now, TraceKind::PeerRestarted, new);
        let unacked = self.send.take_all();
        self.recv.reset();
        self.peer_incarnation = Some(new);
        self.rto_deadline = None;
        self.timeouts = 0;
        self.recently_retransmitted.clear();
        self.send.peer_credit = INITIAL_CREDIT;
        self.events
            .push_back(Event::PeerRestarted { old, new, unacked });
    }

    /// Applies the acknowledgement held back from the last data packet, if any.
    #[inline]
    fn apply_held_ack(&mut self) {
        if self.held_ack.is_some() {
            self.apply_held_ack_now();
        }
    }

    /// Out of line, so that the calls that find nothing held cost one test.
    #[inline(never)]
    fn apply_held_ack_now(&mut self) {
        if let Some(a) = self.held_ack.take() {
            self.on_ack(&a, &[]);
        }
    }

    #[inline]
    fn on_ack(&mut self, a: &HeldAck, sack: &[u64]) {
        let now = a.at;
        let threshold = self
            .rtt
            .time_threshold_nanos(self.config.time_threshold_eighths);
        let out = self.send.on_ack(
            a.ack,
            sack,
            a.echo,
            now,
            threshold,
            self.config.packet_threshold,
        );
        if a.dsack != 0
            && self
                .recently_retransmitted
                .contains(&a.dsack.wrapping_sub(1))
        {
            self.stats.spurious_retransmits += 1;
        }
        self.send.peer_credit = a.credit;
        if a.credit > 0 {
            self.persist_probes = 0;
        }
        if out.newly_acked > 0 {
            self.stats.acks_received += 1;
            self.timeouts = 0;
            self.trace
                .record(now, TraceKind::Acked, u64::from(out.newly_acked));
        }
        if let Some(rtt) = out.rtt {
            self.rtt.sample_nanos(rtt, u64::from(a.ack_delay_us) * 1000);
            // A backed-off timeout stands until a new sample (Karn's algorithm). Going
            // back on any ack would let a timeout shorter than a queue's delay fire again
            // and again, each time resending the window.
            self.rtt.reset_backoff();
        }
        if out.lost > 0 {
            self.stats.lost += u64::from(out.lost);
            self.trace.record(now, TraceKind::Lost, u64::from(out.lost));
        }
        for (id, msg) in self.send.completed.drain(..) {
            self.stats.messages_sent += 1;
            self.events.push_back(Event::Sent {
                id: MessageId(id),
                msg,
            });
        }
        if out.newly_acked > 0 || self.send.in_flight == 0 {
            self.rto_deadline =
                (self.send.in_flight > 0).then(|| now.add_nanos(self.rtt.rto_nanos()));
        }
    }

    /// Runs the timers due at `now`: retransmission, introduction, probes.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.apply_held_ack();
        if matches!(self.state, State::Closed | State::Failed) {
            return;
        }
        let retries = self.config.max_retries;
        // Gone: every retry unanswered, and silent for long enough.
        let silent = now.nanos_since(self.last_heard) >= self.timers.peer_timeout;
        let gone = |count: u32| count > retries && silent;
        if self.rto_deadline.is_some_and(|t| t <= now) {
            self.timeouts += 1;
            self.stats.rto_expirations += 1;
            self.trace
                .record(now, TraceKind::Rto, u64::from(self.timeouts));
            if gone(self.timeouts) {
                return self.fail(now, ConnectionError::PeerUnreachable { retries });
            }
            let lost = self
                .send
                .on_timeout(now, self.rtt.rto_nanos(), self.timeouts);
            self.stats.lost += u64::from(lost);
            self.rtt.back_off();
            self.rto_deadline = Some(now.add_nanos(self.rtt.rto_nanos()));
        }
        // Introductions repeat on their own timer only while no data is in flight: data
        // sent while connecting carries the introduction, and its timer backs off.
        if self.state == State::Connecting
            && self.rto_deadline.is_none()
            && self.hello_deadline.is_some_and(|t| t <= now)
        {
            self.hellos += 1;
            if gone(self.hellos) {
                return self.fail(now, ConnectionError::PeerUnreachable { retries });
            }
            self.hello_due = true;
            // The first introduction waits one timeout for its answer, each repeat twice
            // as long as the one before.
            let wait = self
                .rtt
                .rto_nanos()
                .saturating_mul(1 << (self.hellos - 1).min(16))
                .min(self.timers.rto_max);
            self.hello_deadline = Some(now.add_nanos(wait));
        }
        if self.probe_deadline().is_some_and(|t| t <= now) {
            if self.probe_sent_at.is_some() {
                self.probes_unanswered += 1;
                if gone(self.probes_unanswered) {
                    return self.fail(now, ConnectionError::PeerUnreachable { retries });
                }
            }
            if self.stalled {
                self.persist_probes += 1;
            }
            self.probe_due = true;
            self.probe_sent_at = Some(now);
        }
    }

    /// When the next keepalive or persist probe is due: only while nothing is in flight
    /// (the retransmission timer covers the rest) and the peer is known.
    fn probe_deadline(&self) -> Option<Instant> {
        if !matches!(self.state, State::Established | State::Closing)
            || self.rto_deadline.is_some()
            || self.probe_due
        {
            return None;
        }
        let backed_off = |n: u32| {
            self.rtt
                .rto_nanos()
                .saturating_mul(1 << n.min(16))
                .min(self.timers.rto_max)
        };
        if let Some(sent) = self.probe_sent_at {
            // Unanswered: try again, backing off.
            return Some(sent.add_nanos(backed_off(self.probes_unanswered)));
        }
        let wait = if self.stalled {
            backed_off(self.persist_probes)
        } else {
            self.timers.keepalive
        };
        Some(self.last_heard.add_nanos(wait))
    }

    // ---- What goes out --------------------------------------------------------------

    /// When [`Connection::handle_timeout`] should next be called.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.apply_held_ack();
        if matches!(self.state, State::Closed | State::Failed) {
            return None;
        }
        // The peer's credit holds data back and nothing is in flight to bring a new
        // credit: a persist probe will ask for one.
        let stalled = self.send.has_new()
            && !self.send.window_open(self.config.send_window)
            && self.send.in_flight == 0;
        if stalled && !self.stalled {
            self.stats.credit_stalls += 1;
        }
        self.stalled = stalled;
        let mut next = self.recv.ack_deadline(self.timers.ack_delay);
        let hello = self
            .hello_deadline
            .filter(|_| self.state == State::Connecting && self.rto_deadline.is_none());
        for t in [self.rto_deadline, hello, self.probe_deadline()]
            .into_iter()
            .flatten()
        {
            if next.is_none_or(|n| t < n) {
                next = Some(t);
            }
        }
        next
    }

    /// Whether a packet never sent before may go: the connection may send data, some
    /// waits, and the window and the peer's credit let it.
    fn new_packet_may_go(&self, sending: bool) -> bool {
        sending && self.send.has_new() && self.send.window_open(self.config.send_window)
    }

    fn plan(&mut self, now: Instant) -> Option<Plan> {
        if self.state == State::Failed {
            return None;
        }
        if self.state == State::Closed {
            if !self.close_due {
                return None;
            }
            self.close_due = false;
            self.stats.acks_sent += 1;
            self.stats.packets_sent += 1;
            let repr = HeaderRepr {
                flags: flags::CLOSE,
                integrity: self.config.integrity,
                mac: self.config.mac_key.is_some(),
                conn_id: self.conn_id,
                src_incarnation: self.local_incarnation,
                dst_incarnation: self.peer_incarnation.unwrap_or(0),
                ack: self.recv.rcv_nxt,
                ..HeaderRepr::default()
            };
            return Some(Plan {
                repr,
                sack: None,
                payload: None,
            });
        }
        if self.challenge_due
            && let Some(candidate) = self.challenge
        {
            // Fields as a fresh connection's: the candidate knows nothing of this one.
            self.challenge_due = false;
            self.stats.acks_sent += 1;
            self.stats.packets_sent += 1;
            let repr = HeaderRepr {
                flags: flags::HELLO | flags::ACK_NOW,
                integrity: self.config.integrity,
                mac: self.config.mac_key.is_some(),
                conn_id: self.conn_id,
                src_incarnation: self.local_incarnation,
                dst_incarnation: candidate,
                credit: self.config.recv_window.min(INITIAL_CREDIT),
                ..HeaderRepr::default()
            };
            return Some(Plan {
                repr,
                sack: None,
                payload: None,
            });
        }
        // What goes: a resend, a new fragment, or a packet of its own for an
        // introduction, a probe, a close or an acknowledgement that is due.
        // No data before the peer's incarnation is known: a data packet must name the life
        // of the peer it is for, or a later life of the peer would take it (say it was
        // sent by a connection that has since failed and handed the message back).
        let sending = matches!(self.state, State::Established | State::Closing)
            && self.peer_incarnation.is_some();
        if self.held_ack.is_some()
            && !(self.new_packet_may_go(sending)
                && !self.full_ack_due
                && self.send.nothing_to_resend())
        {
            // Only a new packet, let through by the window as it stood, goes before the
            // held acknowledgement: it may free room or show losses to resend.
            self.apply_held_ack();
        }
        let data = if self.full_ack_due {
            None
        } else if let Some(d) = self.send.next_retransmit(now) {
            self.stats.retransmitted += 1;
            self.recently_retransmitted.push_back(d.0);
            if self.recently_retransmitted.len() > 256 {
                self.recently_retransmitted.pop_front();
            }
            self.trace
                .record(now, TraceKind::Retransmit, u64::from(d.0));
            Some(d)
        } else if self.new_packet_may_go(sending) {
            let d = self.send.next_new(now);
            if d.is_some() {
                self.stats.data_sent += 1;
            }
            d
        } else {
            None
        };
        let mut flags = 0;
        if data.is_some() {
            flags |= flags::DATA;
        } else if self.hello_due {
            self.hello_due = false;
            self.stats.acks_sent += 1;
        } else if self.full_ack_due {
            self.stats.acks_sent += 1;
        } else if self.probe_due {
            self.probe_due = false;
            flags |= flags::ACK_NOW;
            self.stats.probes += 1;
            self.stats.acks_sent += 1;
        } else if self.state == State::Closing && self.send.is_idle() {
            flags |= flags::CLOSE;
            self.state = State::Closed;
            self.we_closed = true;
            self.rto_deadline = None;
            self.probe_sent_at = None;
            self.trace.record(now, TraceKind::Closed, 0);
            self.events.push_back(Event::Closed);
            self.stats.acks_sent += 1;
        } else if self
            .recv
            .ack_deadline(self.timers.ack_delay)
            .is_some_and(|t| t <= now)
        {
            self.stats.acks_sent += 1;
        } else {
            return None;
        }
        if self.state == State::Connecting || self.peer_incarnation.is_none() {
            flags |= flags::HELLO;
        }
        let mut sack = self.recv.sack_bitmap();
        let mut echo = self.recv.echo;
        // A data packet has room for DATA_SACK_WORDS of bitmap. A longer one is cut, and
        // the echo withheld: it would say that packets beyond the cut arrived, and the
        // sender would take those it cannot see acknowledged for lost. An acknowledgement
        // with the whole bitmap and the echo goes next.
        self.full_ack_due = false;
        if data.is_some()
            && let Some((_, used)) = sack.as_mut()
            && usize::from(*used) > DATA_SACK_WORDS
        {
            *used = DATA_SACK_WORDS as u8;
            echo = 0;
            self.stats.sack_cuts += 1;
            self.full_ack_due = true;
        }
        let ack_delay_us = if echo == 0 {
            0
        } else {
            now.saturating_duration_since(self.recv.echo_at)
                .as_micros()
                .min(u128::from(u16::MAX)) as u16
        };
        let credit = self.recv.credit();
        let mut repr = HeaderRepr {
            flags,
            integrity: self.config.integrity,
            mac: self.config.mac_key.is_some(),
            conn_id: self.conn_id,
            src_incarnation: self.local_incarnation,
            dst_incarnation: self.peer_incarnation.unwrap_or(0),
            ack: self.recv.rcv_nxt,
            credit,
            dsack: self.recv.dsack,
            echo,
            ack_delay_us,
            ..HeaderRepr::default()
        };
        if let Some((seq, msg_id, frag)) = data {
            let (_, msg_len, frags) = self.send.fragment(msg_id, frag)?;
            repr.seq = seq;
            repr.msg_id = msg_id;
            repr.frag_index = frag;
            repr.frag_count = frags;
            repr.msg_len = msg_len as u32;
            repr.tx = self.send.last_tx();
            if self.rto_deadline.is_none() {
                self.rto_deadline = Some(now.add_nanos(self.rtt.rto_nanos()));
            }
        }
        self.recv.ack_sent();
        self.recv.advertised_credit = credit;
        self.stats.packets_sent += 1;
        Some(Plan {
            repr,
            sack,
            payload: data.map(|(_, id, frag)| (id, frag)),
        })
    }

    /// Writes the next packet to send into `buf` (at least `config.mtu` bytes); returns
    /// its length, or `None` when nothing needs to go now.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let plan = self.plan(now)?;
        let header_len = plan.repr.emit(buf, plan.sack())?;
        let payload = plan
            .payload
            .and_then(|(id, frag)| self.send.fragment(id, frag))
            .map_or(&[][..], |f| f.0);
        let total = header_len + payload.len();
        buf.get_mut(header_len..total)?.copy_from_slice(payload);
        wire::seal_packet(&mut buf[..total], self.config.mac_key.as_ref());
        Some(total)
    }

    /// Like [`Connection::poll_transmit`], without copying the payload: writes only the
    /// header into `header` (at least [`MAX_HEADER_LEN`] bytes) and lends the payload
    /// from the message being sent, for a channel that gathers the two (`sendmsg` with
    /// two iovecs, a DMA chain).
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        header: &mut [u8],
    ) -> Option<Gather<'_, B>> {
        if header.len() < MAX_HEADER_LEN {
            return None;
        }
        let plan = self.plan(now)?;
        let header_len = plan.repr.emit(header, plan.sack())?;
        let message = plan
            .payload
            .and_then(|(id, frag)| self.send.fragment_of(id, frag));
        let (payload, message) = match message {
            Some((buf, range)) => {
                let start = range.start;
                (&buf.as_ref()[range], Some((buf, start)))
            }
            None => (&[][..], None),
        };
        wire::seal(
            &mut header[..header_len],
            payload,
            self.config.mac_key.as_ref(),
        );
        Some(Gather {
            header_len,
            payload,
            message,
        })
    }

    /// Whether [`Connection::poll_event`] has something (or an acknowledgement held back
    /// to apply): a cheap test for a driver that looks after every packet.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty() || self.held_ack.is_some()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event<B>> {
        self.apply_held_ack();
        let e = self.events.pop_front()?;
        if let Event::Message(m) = &e {
            self.messages_queued -= 1;
            self.recv.undelivered_bytes -= m.len();
            // The application took bytes: if the peer was held back, say so at once.
            if self.recv.advertised_credit == 0 && self.recv.credit() > 0 {
                self.recv.owe_ack(self.last_heard, true);
            }
        }
        Some(e)
    }

    /// Bytes held for the application (buffered, being assembled, or delivered and not
    /// yet taken).
    pub fn recv_held(&self) -> usize {
        self.recv.held()
    }
}

#[cfg(test)]
mod safety_tests;
#[cfg(test)]
mod tests;
