//! The sending half of a connection: messages held until acknowledged, their fragments,
//! the packets in flight, and loss detection from acknowledgements.
//!
//! Every transmission (first send or resend) gets the next number of one counter and
//! carries its low 32 bits on the wire; the peer echoes the latest number that brought it
//! data it did not have.
//! Loss is judged by transmission, as RACK does (RFC 8985): a packet in flight is lost
//! once a transmission `packet_threshold` numbers later has arrived, or once a later one
//! has arrived and the packet has been out for the time threshold. A lost resend is thus
//! caught as quickly as a lost first send, and no resend is declared lost by evidence
//! older than itself.

use super::{Event, MessageId};
use crate::time::Instant;
use crate::wire::{MAX_SACK_WORDS, seq_le, seq_lt};
use std::collections::VecDeque;

/// A message the application handed to `send`, kept until every fragment is acked.
#[derive(Debug)]
pub(crate) struct OutMessage<B> {
    pub(crate) id: u64,
    /// The caller's buffer; `None` once handed back.
    pub(crate) buf: Option<B>,
    pub(crate) len: usize,
    pub(crate) frags: u32,
    /// Fragments sent at least once.
    pub(crate) next_frag: u32,
    /// Fragments acknowledged.
    pub(crate) acked: u32,
}

/// The data packet [`SendState::next_new`] or [`SendState::next_retransmit`] gave out:
/// its sequence number, its fragment, and the message's length and fragment count for
/// the header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DataRef {
    pub(crate) seq: u32,
    pub(crate) msg_id: u64,
    pub(crate) frag: u32,
    pub(crate) msg_len: usize,
    pub(crate) frags: u32,
}

/// One packet sent and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    pub(crate) msg_id: u64,
    pub(crate) frag: u32,
    /// When it was last transmitted.
    pub(crate) sent_at: Instant,
    /// The number of its last transmission.
    pub(crate) order: u64,
    pub(crate) transmissions: u16,
    /// Bytes on the wire (payload and fixed header), as congestion control counts them.
    pub(crate) bytes: u32,
    pub(crate) acked: bool,
    /// Counted against the window.
    pub(crate) in_flight: bool,
    /// Declared lost and queued for retransmission.
    pub(crate) lost: bool,
    /// Declared lost by a timeout (not by acknowledgements).
    pub(crate) lost_by_timeout: bool,
    /// Sent while the application, not the window, limited the sender (see
    /// [`SendState::mark_app_limited`]).
    pub(crate) app_limited: bool,
    /// The connection's delivery state when it was last transmitted, for the delivery
    /// rate sample its acknowledgement gives: bytes delivered, when the latest of them
    /// was, and when the first packet of the flight it went in was sent.
    pub(crate) delivered: u64,
    pub(crate) delivered_time: Instant,
    pub(crate) first_sent_time: Instant,
}

/// What an acknowledgement did. Messages it completed went to the connection's events
/// ([`Event::Sent`]) as it found them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AckOutcome {
    /// Packets newly acknowledged.
    pub(crate) newly_acked: u32,
    /// Messages newly complete (their buffers handed back in [`Event::Sent`]).
    pub(crate) completed: u32,
    /// A round-trip sample in nanoseconds: the echoed transmission was newly
    /// acknowledged.
    pub(crate) rtt: Option<u64>,
    /// Packets declared lost by this acknowledgement.
    pub(crate) lost: u32,
    /// Bytes newly acknowledged.
    pub(crate) acked_bytes: u64,
    /// When the latest-sent of the newly acknowledged packets was sent.
    pub(crate) acked_sent: Instant,
    /// Packets declared lost and acknowledged before they were sent again: the loss was
    /// reordering's doing, or a timeout's.
    pub(crate) late: u32,
    /// Of those, the ones the acknowledgements had declared lost: reordering.
    pub(crate) reordered: u32,
    /// Packets newly acknowledged whose latest transmission came before the timeout mark
    /// (see [`SendState::timeout_mark`]).
    pub(crate) before_mark: u32,
    /// The delivery state at the transmission of the latest-sent packet acknowledged
    /// (the one the delivery rate sample is taken over; see [`Sent::delivered`]), and
    /// the time from the first send of its flight to its own.
    pub(crate) prior_delivered: u64,
    pub(crate) prior_time: Instant,
    pub(crate) send_elapsed: u64,
    pub(crate) sample_app_limited: bool,
}

/// An acknowledgement for packets (or transmissions) never sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BogusAck;

/// The sending half.
#[derive(Debug)]
pub(crate) struct SendState<B> {
    pub(crate) messages: VecDeque<OutMessage<B>>,
    pub(crate) next_msg_id: u64,
    /// Index in `messages` of the first message with fragments never sent.
    packetize: usize,
    /// `unacked[i]` is the packet with sequence number `snd_una + i`.
    unacked: VecDeque<Sent>,
    pub(crate) snd_una: u32,
    pub(crate) snd_nxt: u32,
    pub(crate) in_flight: u32,
    /// Bytes of the packets in flight.
    pub(crate) bytes_in_flight: u64,
    /// Bytes each packet carries besides its payload (counted by congestion control).
    overhead: u32,
    /// Bytes of the packet `next_new` or `next_retransmit` just gave out.
    pub(crate) last_bytes: u32,
    /// Whether the resend `next_retransmit` just gave out was of a packet a timeout
    /// declared lost.
    pub(crate) last_resend_by_timeout: bool,
    /// Packets declared lost since the connection last took these (count, bytes, when
    /// the latest of them was sent).
    pub(crate) lost_count: u32,
    pub(crate) lost_bytes: u64,
    pub(crate) lost_sent: Instant,
    /// Packets in flight that are resends (their numbers break the order of the rest).
    resends_in_flight: u32,
    /// Transmissions so far: the number of the latest.
    tx_order: u64,
    /// The latest transmission known to have arrived; 0 before any.
    largest_acked_order: u64,
    /// The number of the latest transmission when a timeout last declared persistent
    /// congestion, until the next acknowledgement of new data (0: none). That
    /// acknowledgement judges the timeout (the Eifel detection of RFC 3522, the echo as
    /// its timestamp, and the packets it covers that were last sent before the mark:
    /// `AckOutcome::before_mark`).
    pub(crate) timeout_mark: u64,
    /// Delivery rate estimation (draft-cheng-iccrg-delivery-rate-estimation): bytes
    /// acknowledged so far, when the latest were, and when the first packet of the
    /// current flight was sent.
    pub(crate) delivered: u64,
    pub(crate) delivered_time: Instant,
    first_sent_time: Instant,
    /// While not 0: packets sent are application-limited, until `delivered` passes it
    /// (what was in flight when the application ran dry has been delivered).
    app_limited_until: u64,
    retransmit: VecDeque<u32>,
    pub(crate) queued_bytes: usize,
    /// Sequence numbers beyond `snd_una` the peer lets us use.
    pub(crate) peer_credit: u32,
    pub(crate) max_payload: usize,
}

impl<B: AsRef<[u8]>> SendState<B> {
    pub(crate) fn new(max_payload: usize, overhead: u32, initial_credit: u32) -> SendState<B> {
        SendState {
            messages: VecDeque::new(),
            next_msg_id: 0,
            packetize: 0,
            unacked: VecDeque::new(),
            snd_una: 0,
            snd_nxt: 0,
            in_flight: 0,
            bytes_in_flight: 0,
            overhead,
            last_bytes: 0,
            last_resend_by_timeout: false,
            lost_count: 0,
            lost_bytes: 0,
            lost_sent: Instant::ZERO,
            resends_in_flight: 0,
            tx_order: 0,
            largest_acked_order: 0,
            timeout_mark: 0,
            delivered: 0,
            delivered_time: Instant::ZERO,
            first_sent_time: Instant::ZERO,
            app_limited_until: 0,
            retransmit: VecDeque::new(),
            queued_bytes: 0,
            peer_credit: initial_credit,
            max_payload,
        }
    }

    /// Queues a message of `len` bytes (its buffer's length); returns its id.
    pub(crate) fn push(&mut self, buf: B, len: usize) -> u64 {
        // One fragment (the common case) needs no division.
        let frags = if len <= self.max_payload {
            1
        } else {
            len.div_ceil(self.max_payload) as u32
        };
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        self.queued_bytes += len;
        self.messages.push_back(OutMessage {
            id,
            buf: Some(buf),
            len,
            frags,
            next_frag: 0,
            acked: 0,
        });
        id
    }

    /// Where message `id` is in the queue (0: the oldest), if it is there.
    fn message_index(&self, id: u64) -> Option<usize> {
        let front = self.messages.front()?.id;
        let i = usize::try_from(id.checked_sub(front)?).ok()?;
        (i < self.messages.len()).then_some(i)
    }

    fn message(&self, id: u64) -> Option<&OutMessage<B>> {
        self.messages.get(self.message_index(id)?)
    }

    /// The message buffer of fragment `frag` of message `id`, the fragment's bytes, and
    /// where they start in the buffer.
    pub(crate) fn fragment_of(&self, id: u64, frag: u32) -> Option<(&B, &[u8], usize)> {
        let m = self.message(id)?;
        let buf = m.buf.as_ref()?;
        let bytes = buf.as_ref();
        let len = bytes.len();
        let start = (frag as usize).checked_mul(self.max_payload)?.min(len);
        let end = (start + self.max_payload).min(m.len).clamp(start, len);
        Some((buf, &bytes[start..end], start))
    }

    fn sent_mut(&mut self, seq: u32) -> Option<&mut Sent> {
        if !(seq_lt(seq, self.snd_nxt) && seq_le(self.snd_una, seq)) {
            return None;
        }
        self.unacked
            .get_mut(seq.wrapping_sub(self.snd_una) as usize)
    }

    /// Whether anything is waiting to be sent for the first time.
    pub(crate) fn has_new(&self) -> bool {
        self.packetize < self.messages.len()
    }

    /// Whether at least `n` packets wait to be sent for the first time.
    pub(crate) fn unsent_at_least(&self, n: usize) -> bool {
        let mut unsent = 0;
        for m in self.messages.range(self.packetize..) {
            unsent += (m.frags - m.next_frag) as usize;
            if unsent >= n {
                return true;
            }
        }
        false
    }

    /// Whether anything at all is held (queued or unacknowledged).
    pub(crate) fn is_idle(&self) -> bool {
        self.messages.is_empty()
    }

    /// Sequence numbers from the oldest unacknowledged packet to the next new one: what
    /// the window bounds (selective repeat: the receiver buffers at most this span).
    pub(crate) fn span(&self) -> u32 {
        self.snd_nxt.wrapping_sub(self.snd_una)
    }

    /// Whether the window and the peer's credit let one more new packet go.
    pub(crate) fn window_open(&self, send_window: u32) -> bool {
        let span = self.span();
        span < send_window && span < self.peer_credit
    }

    /// The latest transmission's number.
    pub(crate) fn tx_order(&self) -> u64 {
        self.tx_order
    }

    /// Whether a packet last sent at or before transmission `mark` is still unacknowledged.
    pub(crate) fn unacked_sent_by(&self, mark: u64) -> bool {
        self.unacked.iter().any(|s| !s.acked && s.order <= mark)
    }

    /// Puts every packet declared lost and not yet sent again back in flight (a timeout
    /// that declared them lost proved spurious).
    pub(crate) fn restore_lost(&mut self) {
        for s in self.unacked.iter_mut() {
            if s.lost && !s.acked {
                s.lost = false;
                s.in_flight = true;
                self.in_flight += 1;
                self.bytes_in_flight += u64::from(s.bytes);
                self.resends_in_flight += u32::from(s.transmissions > 1);
            }
        }
        self.retransmit.clear();
    }

    /// The low 32 bits of the latest transmission's number, as the wire carries it.
    pub(crate) fn last_tx(&self) -> u32 {
        self.tx_order as u32
    }

    /// Numbers the next transmission. Its low 32 bits go on the wire, where zero means
    /// "none": that value is skipped.
    fn next_order(&mut self) -> u64 {
        self.tx_order += 1;
        if self.tx_order as u32 == 0 {
            self.tx_order += 1;
        }
        self.tx_order
    }

    /// Assigns the next new fragment a sequence number.
    pub(crate) fn next_new(&mut self, now: Instant) -> Option<DataRef> {
        let max_payload = self.max_payload;
        let m = self.messages.get_mut(self.packetize)?;
        let (id, frag, msg_len, frags) = (m.id, m.next_frag, m.len, m.frags);
        let payload = m
            .len
            .saturating_sub(frag as usize * max_payload)
            .min(max_payload);
        let bytes = payload as u32 + self.overhead;
        m.next_frag += 1;
        if m.next_frag == m.frags {
            self.packetize += 1;
        }
        let seq = self.snd_nxt;
        self.snd_nxt = self.snd_nxt.wrapping_add(1);
        let order = self.next_order();
        self.start_flight(now);
        self.unacked.push_back(Sent {
            msg_id: id,
            frag,
            sent_at: now,
            order,
            transmissions: 1,
            bytes,
            acked: false,
            in_flight: true,
            lost: false,
            lost_by_timeout: false,
            app_limited: self.app_limited_until != 0,
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            first_sent_time: self.first_sent_time,
        });
        self.in_flight += 1;
        self.bytes_in_flight += u64::from(bytes);
        self.last_bytes = bytes;
        Some(DataRef {
            seq,
            msg_id: id,
            frag,
            msg_len,
            frags,
        })
    }

    /// The next lost packet to send again.
    pub(crate) fn next_retransmit(&mut self, now: Instant) -> Option<DataRef> {
        while let Some(seq) = self.retransmit.pop_front() {
            let Some(id) = self
                .sent_mut(seq)
                .and_then(|s| (s.lost && !s.acked).then_some(s.msg_id))
            else {
                continue;
            };
            // An unacknowledged fragment's message is held until all of it is.
            let Some((msg_len, frags)) = self.message(id).map(|m| (m.len, m.frags)) else {
                continue;
            };
            let order = self.next_order();
            self.start_flight(now);
            let (app_limited, delivered, delivered_time, first_sent_time) = (
                self.app_limited_until != 0,
                self.delivered,
                self.delivered_time,
                self.first_sent_time,
            );
            let s = self.sent_mut(seq).expect("checked above");
            s.app_limited = app_limited;
            s.delivered = delivered;
            s.delivered_time = delivered_time;
            s.first_sent_time = first_sent_time;
            s.lost = false;
            s.in_flight = true;
            s.sent_at = now;
            s.order = order;
            s.transmissions = s.transmissions.saturating_add(1);
            let (frag, bytes) = (s.frag, s.bytes);
            self.last_resend_by_timeout = s.lost_by_timeout;
            self.in_flight += 1;
            self.bytes_in_flight += u64::from(bytes);
            self.last_bytes = bytes;
            self.resends_in_flight += 1;
            return Some(DataRef {
                seq,
                msg_id: id,
                frag,
                msg_len,
                frags,
            });
        }
        None
    }

    /// A packet is about to go at `now`: with nothing in flight it starts a new flight,
    /// whose delivery rate is measured from now (not from before an idle spell).
    #[inline]
    fn start_flight(&mut self, now: Instant) {
        if self.in_flight == 0 {
            self.first_sent_time = now;
            self.delivered_time = now;
        }
    }

    /// The application has nothing more to send while the window has room: the packets
    /// sent until what is in flight now has been delivered are application-limited, and
    /// their delivery rate samples say less than the path could carry.
    #[inline]
    pub(crate) fn mark_app_limited(&mut self) {
        self.app_limited_until = (self.delivered + self.bytes_in_flight).max(1);
    }

    fn declare_lost(&mut self, i: usize, by_timeout: bool) {
        let s = &mut self.unacked[i];
        s.in_flight = false;
        s.lost = true;
        s.lost_by_timeout = by_timeout;
        let resend = s.transmissions > 1;
        let (bytes, sent_at) = (u64::from(s.bytes), s.sent_at);
        self.in_flight -= 1;
        self.bytes_in_flight -= bytes;
        self.lost_count += 1;
        self.lost_bytes += bytes;
        self.lost_sent = self.lost_sent.max(sent_at);
        self.resends_in_flight -= u32::from(resend);
        self.retransmit
            .push_back(self.snd_una.wrapping_add(i as u32));
    }

    /// The retransmission timer fired at `now`, the `nth` time in a row without an
    /// acknowledgement of new data. The first time, only the oldest transmission in
    /// flight is declared lost, so that its resend probes the peer (as QUIC's probe
    /// timeout does); after that, every packet in flight for at least `rto` is, and at
    /// least the oldest one. Returns how many.
    ///
    /// A single timeout is weak evidence: a peer whose host did not run it for a while
    /// looks exactly like a lost window, and resending the window for it would double
    /// the traffic just when the peer is behind. The probe's acknowledgement settles it:
    /// the peer acknowledges what it has, and what it lacks, sent before the probe and
    /// out for longer than the time threshold, is lost by that evidence and resent at
    /// once ([`SendState::on_ack`]). A probe that goes unanswered too makes a lossy path
    /// likelier than a slow peer, and the window goes again.
    pub(crate) fn on_timeout(&mut self, now: Instant, rto: u64, nth: u32) -> u32 {
        let mut lost = 0;
        let mut oldest: Option<(u64, usize)> = None;
        for i in 0..self.unacked.len() {
            let s = &self.unacked[i];
            if !s.in_flight {
                continue;
            }
            if nth > 1 && now.nanos_since(s.sent_at) >= rto {
                self.declare_lost(i, true);
                lost += 1;
            } else if oldest.is_none_or(|(order, _)| s.order < order) {
                oldest = Some((s.order, i));
            }
        }
        if lost == 0
            && let Some((_, i)) = oldest
        {
            self.declare_lost(i, true);
            lost = 1;
        }
        lost
    }

    /// Marks the packet `at` places past the oldest unacknowledged one acknowledged (the
    /// oldest itself, at 0, is the cumulative acknowledgement's common case: no index
    /// arithmetic), and its message complete when that was its last packet.
    #[inline(always)]
    fn mark_acked(
        &mut self,
        at: usize,
        echo: u64,
        now: Instant,
        out: &mut AckOutcome,
        events: &mut VecDeque<Event<B>>,
    ) {
        let timeout_mark = self.timeout_mark;
        let Some(s) = nth_mut(&mut self.unacked, at) else {
            return;
        };
        if s.acked {
            return;
        }
        s.acked = true;
        out.before_mark += u32::from(s.order <= timeout_mark);
        out.late += u32::from(s.lost);
        out.reordered += u32::from(s.lost && !s.lost_by_timeout);
        let (was_in_flight, resend, msg_id, sent_at, order, bytes) = (
            s.in_flight,
            s.transmissions > 1,
            s.msg_id,
            s.sent_at,
            s.order,
            u64::from(s.bytes),
        );
        if out.newly_acked == 0 || s.delivered >= out.prior_delivered {
            // The latest-sent packet acknowledged so far: the rate sample spans from its
            // send.
            out.prior_delivered = s.delivered;
            out.prior_time = s.delivered_time;
            out.send_elapsed = sent_at.nanos_since(s.first_sent_time);
            out.sample_app_limited = s.app_limited;
        }
        s.in_flight = false;
        s.lost = false;
        if was_in_flight {
            self.in_flight -= 1;
            self.bytes_in_flight -= bytes;
            self.resends_in_flight -= u32::from(resend);
        }
        self.delivered += bytes;
        out.newly_acked += 1;
        out.acked_bytes += bytes;
        out.acked_sent = out.acked_sent.max(sent_at);
        if order == echo {
            // The echo names this very transmission: an unambiguous sample, resend or
            // not (no need for Karn's rule).
            out.rtt = Some(now.nanos_since(sent_at));
        }
        // Usually the oldest message: acknowledgements come in order.
        let Some(i) = self.message_index(msg_id) else {
            return;
        };
        let Some(m) = nth_mut(&mut self.messages, i) else {
            return;
        };
        m.acked += 1;
        if m.acked != m.frags {
            return;
        }
        let len = m.len;
        // The oldest message (the common case: acknowledgements in order) leaves the
        // queue now; a later one gives its buffer back and leaves behind the oldest.
        let buf = if i == 0 {
            self.packetize = self.packetize.saturating_sub(1);
            self.messages.pop_front().and_then(|m| m.buf)
        } else {
            m.buf.take()
        };
        if let Some(buf) = buf {
            self.queued_bytes -= len;
            out.completed += 1;
            events.push_back(Event::Sent {
                id: MessageId(msg_id),
                msg: buf,
            });
        }
    }

    /// The full transmission number an echo of its low 32 bits names, if it names one
    /// that was sent.
    fn expand_echo(&self, echo: u32) -> Result<Option<u64>, BogusAck> {
        if echo == 0 {
            return Ok(None);
        }
        let behind = u64::from((self.tx_order as u32).wrapping_sub(echo));
        match self.tx_order.checked_sub(behind) {
            Some(full) if full > 0 => Ok(Some(full)),
            _ => Err(BogusAck),
        }
    }

    /// Checks a cumulative ack and the echoed transmission number's low 32 bits against
    /// what was sent; returns the echo's full number. A checked ack stays valid while
    /// only new packets are sent before it is applied ([`SendState::on_ack`]): sending
    /// moves neither `snd_una` nor the numbers already given out.
    pub(crate) fn check_ack(&self, ack: u32, echo: u32) -> Result<Option<u64>, BogusAck> {
        if seq_lt(self.snd_nxt, ack) || seq_lt(ack, self.snd_una.wrapping_sub(1 << 30)) {
            return Err(BogusAck);
        }
        self.expand_echo(echo)
    }

    /// Whether a cumulative ack with no SACK bitmap, checked by [`SendState::check_ack`],
    /// would change nothing here: it acknowledges nothing not yet acknowledged and echoes
    /// no newer transmission (so [`SendState::on_ack`] would find no loss either).
    #[inline]
    pub(crate) fn ack_tells_nothing(&self, ack: u32, echo: Option<u64>) -> bool {
        !seq_lt(self.snd_una, ack) && echo.is_none_or(|e| e <= self.largest_acked_order)
    }

    /// Processes a cumulative ack, a SACK bitmap (bit i: `ack + 1 + i`) and the echoed
    /// transmission number, all checked by [`SendState::check_ack`]. The messages it
    /// completes go to `events`, in order.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_ack(
        &mut self,
        ack: u32,
        sack: &[u64],
        echo: Option<u64>,
        now: Instant,
        time_threshold: u64,
        packet_threshold: u32,
        events: &mut VecDeque<Event<B>>,
    ) -> AckOutcome {
        let mut out = AckOutcome::default();
        let echo_full = echo.unwrap_or(0);
        // The cumulative part: everything before `ack` is acknowledged and leaves.
        while seq_lt(self.snd_una, ack) {
            self.mark_acked(0, echo_full, now, &mut out, events);
            self.unacked.pop_front();
            self.snd_una = self.snd_una.wrapping_add(1);
        }
        debug_assert!(sack.len() <= MAX_SACK_WORDS);
        for (w, &word) in sack.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let i = bits.leading_zeros();
                bits &= !(1 << (63 - i));
                let seq = ack.wrapping_add(1 + w as u32 * 64 + i);
                if seq_lt(seq, self.snd_nxt) {
                    let at = seq.wrapping_sub(self.snd_una) as usize;
                    self.mark_acked(at, echo_full, now, &mut out, events);
                }
            }
        }
        while self.unacked.front().is_some_and(|s| s.acked) {
            self.unacked.pop_front();
            self.snd_una = self.snd_una.wrapping_add(1);
        }
        if out.newly_acked > 0 {
            self.delivered_time = now;
            self.first_sent_time = out.acked_sent;
            if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
                self.app_limited_until = 0;
            }
        }
        while self
            .messages
            .front()
            .is_some_and(|m| m.buf.is_none() && m.acked == m.frags)
        {
            self.messages.pop_front();
            self.packetize = self.packetize.saturating_sub(1);
        }
        if let Some(e) = echo
            && e > self.largest_acked_order
        {
            self.largest_acked_order = e;
            out.lost = self.detect_losses(now, time_threshold, packet_threshold);
        }
        out
    }

    /// Whether no packet waits to be sent again.
    pub(crate) fn nothing_to_resend(&self) -> bool {
        self.retransmit.is_empty()
    }

    /// Declares lost every packet in flight transmitted before the latest one known to
    /// have arrived, `packet_threshold` transmissions earlier or out for `time_threshold`.
    fn detect_losses(&mut self, now: Instant, time_threshold: u64, packet_threshold: u32) -> u32 {
        if self.in_flight == 0 {
            return 0;
        }
        let largest = self.largest_acked_order;
        let mut lost = 0;
        for i in 0..self.unacked.len() {
            let s = &self.unacked[i];
            if !s.in_flight {
                continue;
            }
            if s.order >= largest {
                if self.resends_in_flight == 0 {
                    // First sends only: their numbers grow with the sequence, so nothing
                    // further on was sent before `largest`.
                    break;
                }
                continue;
            }
            if largest - s.order >= u64::from(packet_threshold)
                || now.nanos_since(s.sent_at) >= time_threshold
            {
                self.declare_lost(i, false);
                lost += 1;
            }
        }
        lost
    }

    /// Every message not fully acknowledged, handed back (the connection failed or the
    /// peer restarted). Resets the sequence space.
    pub(crate) fn take_all(&mut self) -> Vec<B> {
        let out = self.messages.drain(..).filter_map(|m| m.buf).collect();
        self.packetize = 0;
        self.unacked.clear();
        self.retransmit.clear();
        self.snd_una = 0;
        self.snd_nxt = 0;
        self.in_flight = 0;
        self.bytes_in_flight = 0;
        self.lost_count = 0;
        self.lost_bytes = 0;
        self.resends_in_flight = 0;
        self.largest_acked_order = 0;
        self.queued_bytes = 0;
        // A peer that starts over expects message 0 first. Transmission numbers keep
        // counting: an echo from the old life can then never name a new transmission.
        self.next_msg_id = 0;
        out
    }
}

/// Element `i` of `q`; the front (the common case where acknowledgements come in
/// order) without the ring's index arithmetic.
#[inline(always)]
fn nth_mut<T>(q: &mut VecDeque<T>, i: usize) -> Option<&mut T> {
    if i == 0 { q.front_mut() } else { q.get_mut(i) }
}
