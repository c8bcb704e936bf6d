//! The sending half of a connection: messages held until acknowledged, their fragments,
//! the packets in flight, and loss detection from acknowledgements.

use crate::time::Instant;
use crate::wire::{seq_le, seq_lt};
use std::collections::VecDeque;
use std::time::Duration;

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

/// One packet sent and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    pub(crate) msg_id: u64,
    pub(crate) frag: u32,
    pub(crate) sent_at: Instant,
    /// When it was last transmitted, in the order of all transmissions (new and
    /// retransmitted): loss evidence counts transmissions, so a retransmission is only
    /// declared lost by packets sent after it.
    pub(crate) order: u64,
    pub(crate) transmissions: u16,
    pub(crate) acked: bool,
    /// Counted against the window.
    pub(crate) in_flight: bool,
    /// Declared lost and queued for retransmission.
    pub(crate) lost: bool,
}

/// What an acknowledgement did.
#[derive(Debug, Default)]
pub(crate) struct AckOutcome<B> {
    /// Packets newly acknowledged.
    pub(crate) newly_acked: u32,
    /// Messages now fully acknowledged, with their buffers.
    pub(crate) completed: Vec<(u64, B)>,
    /// A round-trip sample (Karn's rule applied).
    pub(crate) rtt: Option<Duration>,
    /// Packets declared lost by this acknowledgement.
    pub(crate) lost: u32,
    /// Whether the cumulative ack moved.
    pub(crate) advanced: bool,
}

/// An acknowledgement for packets never sent.
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
    /// Transmissions so far.
    tx_order: u64,
    /// The latest transmission (by order) known to have arrived; 0 before any.
    largest_acked_order: u64,
    retransmit: VecDeque<u32>,
    pub(crate) queued_bytes: usize,
    /// Packets beyond `snd_una` the peer lets us send.
    pub(crate) peer_credit: u32,
    pub(crate) max_payload: usize,
}

impl<B: AsRef<[u8]>> SendState<B> {
    pub(crate) fn new(max_payload: usize, initial_credit: u32) -> SendState<B> {
        SendState {
            messages: VecDeque::new(),
            next_msg_id: 0,
            packetize: 0,
            unacked: VecDeque::new(),
            snd_una: 0,
            snd_nxt: 0,
            in_flight: 0,
            tx_order: 0,
            largest_acked_order: 0,
            retransmit: VecDeque::new(),
            queued_bytes: 0,
            peer_credit: initial_credit,
            max_payload,
        }
    }

    /// Queues a message; returns its id.
    pub(crate) fn push(&mut self, buf: B) -> u64 {
        let len = buf.as_ref().len();
        let frags = len.div_ceil(self.max_payload).max(1) as u32;
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

    fn message(&self, id: u64) -> Option<&OutMessage<B>> {
        let front = self.messages.front()?.id;
        self.messages
            .get(usize::try_from(id.checked_sub(front)?).ok()?)
    }

    fn message_mut(&mut self, id: u64) -> Option<&mut OutMessage<B>> {
        let front = self.messages.front()?.id;
        self.messages
            .get_mut(usize::try_from(id.checked_sub(front)?).ok()?)
    }

    /// The bytes of fragment `frag` of message `id`, and the message's length and
    /// fragment count.
    pub(crate) fn fragment(&self, id: u64, frag: u32) -> Option<(&[u8], usize, u32)> {
        let m = self.message(id)?;
        let data = m.buf.as_ref()?.as_ref();
        let start = (frag as usize).checked_mul(self.max_payload)?;
        let end = (start + self.max_payload).min(m.len);
        Some((data.get(start..end).unwrap_or(&[]), m.len, m.frags))
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

    /// Assigns the next new fragment a sequence number: `(seq, msg_id, frag)`.
    pub(crate) fn next_new(&mut self, now: Instant) -> Option<(u32, u64, u32)> {
        let m = self.messages.get_mut(self.packetize)?;
        let (id, frag) = (m.id, m.next_frag);
        m.next_frag += 1;
        if m.next_frag == m.frags {
            self.packetize += 1;
        }
        let seq = self.snd_nxt;
        self.snd_nxt = self.snd_nxt.wrapping_add(1);
        self.tx_order += 1;
        self.unacked.push_back(Sent {
            msg_id: id,
            frag,
            sent_at: now,
            order: self.tx_order,
            transmissions: 1,
            acked: false,
            in_flight: true,
            lost: false,
        });
        self.in_flight += 1;
        Some((seq, id, frag))
    }

    /// The next lost packet to send again: `(seq, msg_id, frag)`.
    pub(crate) fn next_retransmit(&mut self, now: Instant) -> Option<(u32, u64, u32)> {
        while let Some(seq) = self.retransmit.pop_front() {
            let order = self.tx_order + 1;
            let Some(s) = self.sent_mut(seq) else {
                continue;
            };
            if s.acked || !s.lost {
                continue;
            }
            s.lost = false;
            s.in_flight = true;
            s.sent_at = now;
            s.order = order;
            s.transmissions = s.transmissions.saturating_add(1);
            let (id, frag) = (s.msg_id, s.frag);
            self.tx_order = order;
            self.in_flight += 1;
            return Some((seq, id, frag));
        }
        None
    }

    /// The retransmission timer fired at `now`: every packet in flight for at least `rto`
    /// is declared lost, and at least the oldest one in flight. Returns how many.
    pub(crate) fn on_timeout(&mut self, now: Instant, rto: Duration) -> u32 {
        let mut lost = 0;
        let mut oldest = None;
        for (i, s) in self.unacked.iter_mut().enumerate() {
            if !s.in_flight {
                continue;
            }
            oldest.get_or_insert(i);
            if now.saturating_duration_since(s.sent_at) >= rto {
                s.in_flight = false;
                s.lost = true;
                lost += 1;
                self.retransmit
                    .push_back(self.snd_una.wrapping_add(i as u32));
            }
        }
        if lost == 0
            && let Some(i) = oldest
        {
            let s = &mut self.unacked[i];
            s.in_flight = false;
            s.lost = true;
            lost = 1;
            self.retransmit
                .push_back(self.snd_una.wrapping_add(i as u32));
        }
        self.in_flight -= lost;
        lost
    }

    fn mark_acked(
        &mut self,
        seq: u32,
        out: &mut AckOutcome<B>,
        newest: &mut Option<(u64, Instant, u16)>,
    ) {
        let Some(s) = self.sent_mut(seq) else { return };
        if s.acked {
            return;
        }
        s.acked = true;
        let (was_in_flight, msg_id, sent_at, order, tx) =
            (s.in_flight, s.msg_id, s.sent_at, s.order, s.transmissions);
        s.in_flight = false;
        s.lost = false;
        if was_in_flight {
            self.in_flight -= 1;
        }
        out.newly_acked += 1;
        // Only a packet transmitted once says which transmission arrived: an ack of a
        // retransmitted one may be for its first copy, and taking it as evidence would
        // declare everything sent before the retransmission lost.
        if tx == 1 && newest.is_none_or(|(n, _, _)| n < order) {
            *newest = Some((order, sent_at, tx));
        }
        if let Some(m) = self.message_mut(msg_id) {
            m.acked += 1;
            if m.acked == m.frags
                && let Some(buf) = m.buf.take()
            {
                self.queued_bytes -= m.len;
                out.completed.push((msg_id, buf));
            }
        }
    }

    /// Processes a cumulative ack and SACK ranges.
    pub(crate) fn on_ack(
        &mut self,
        ack: u32,
        sacks: &[(u32, u32)],
        now: Instant,
        time_threshold: Duration,
        packet_threshold: u32,
    ) -> Result<AckOutcome<B>, BogusAck> {
        if seq_lt(self.snd_nxt, ack) || seq_lt(ack, self.snd_una.wrapping_sub(1 << 30)) {
            return Err(BogusAck);
        }
        let mut out = AckOutcome {
            newly_acked: 0,
            completed: Vec::new(),
            rtt: None,
            lost: 0,
            advanced: false,
        };
        let mut newest = None;
        let mut seq = self.snd_una;
        while seq_lt(seq, ack) {
            self.mark_acked(seq, &mut out, &mut newest);
            seq = seq.wrapping_add(1);
        }
        for &(start, end) in sacks {
            let mut seq = if seq_lt(start, self.snd_una) {
                self.snd_una
            } else {
                start
            };
            let end = if seq_lt(self.snd_nxt, end) {
                self.snd_nxt
            } else {
                end
            };
            while seq_lt(seq, end) {
                self.mark_acked(seq, &mut out, &mut newest);
                seq = seq.wrapping_add(1);
            }
        }
        if let Some((order, sent_at, tx)) = newest
            && order > self.largest_acked_order
        {
            self.largest_acked_order = order;
            // Karn's rule: only a packet sent once gives an unambiguous sample.
            if tx == 1 {
                out.rtt = Some(now.saturating_duration_since(sent_at));
            }
        }
        while self.unacked.front().is_some_and(|s| s.acked) {
            self.unacked.pop_front();
            self.snd_una = self.snd_una.wrapping_add(1);
            out.advanced = true;
        }
        while self
            .messages
            .front()
            .is_some_and(|m| m.buf.is_none() && m.acked == m.frags)
        {
            self.messages.pop_front();
            self.packetize = self.packetize.saturating_sub(1);
        }
        // Loss detection from ack evidence (RFC 9002 §6.1, by transmission as RACK does,
        // since a retransmission keeps its sequence number): a packet transmitted before
        // the latest one known to have arrived is lost once `packet_threshold`
        // transmissions after it have arrived, or it has been out for `time_threshold`.
        if newest.is_some() {
            let largest = self.largest_acked_order;
            for (i, s) in self.unacked.iter_mut().enumerate() {
                if s.in_flight
                    && s.order < largest
                    && (largest - s.order >= u64::from(packet_threshold)
                        || now.saturating_duration_since(s.sent_at) >= time_threshold)
                {
                    s.lost = true;
                    s.in_flight = false;
                    self.in_flight -= 1;
                    self.retransmit
                        .push_back(self.snd_una.wrapping_add(i as u32));
                    out.lost += 1;
                }
            }
        }
        Ok(out)
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
        self.largest_acked_order = 0;
        self.queued_bytes = 0;
        // A peer that starts over expects message 0 first.
        self.next_msg_id = 0;
        out
    }
}
