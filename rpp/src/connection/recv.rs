//! The receiving half of a connection: the receive window, out-of-order buffering,
//! reassembly of fragments into messages in order, acknowledgement state and credit.

use crate::time::Instant;
use crate::wire::{MAX_SACK_WORDS, SACK_SPAN, seq_lt};
use std::collections::VecDeque;

/// A packet that arrived ahead of the cumulative ack.
#[derive(Debug)]
struct Buffered {
    msg_id: u64,
    frag_index: u32,
    frag_count: u32,
    msg_len: u32,
    data: Vec<u8>,
}

/// A message being put back together from its fragments.
#[derive(Debug)]
struct Reassembly {
    msg_id: u64,
    frag_count: u32,
    next: u32,
    msg_len: u32,
    data: Vec<u8>,
}

/// A fragment's identity, as its header gives it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FragmentInfo {
    pub(crate) seq: u32,
    pub(crate) msg_id: u64,
    pub(crate) frag_index: u32,
    pub(crate) frag_count: u32,
    pub(crate) msg_len: u32,
    pub(crate) tx: u32,
}

/// What a data packet did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DataOutcome {
    /// The packet is the next message, whole: the caller delivers it in place.
    InPlace,
    /// The packet is the next message, whole, copied out for the caller to deliver (the
    /// common case, kept off the general path's list of completed messages).
    Whole(Vec<u8>),
    /// Accepted (delivered or buffered); messages it completed were pushed to the
    /// caller's list.
    Accepted,
    /// Already received.
    Duplicate,
    /// Beyond the receive window or buffer: dropped.
    BeyondWindow,
    /// A fragment that contradicts what came before: the peer is broken.
    Violation(&'static str),
}

/// The receiving half.
#[derive(Debug)]
pub(crate) struct RecvState {
    /// Next sequence number expected: the cumulative ack.
    pub(crate) rcv_nxt: u32,
    /// `slots[i]` holds the packet with sequence number `rcv_nxt + i` if it arrived ahead
    /// of order (slot 0, the expected packet's, is always empty).
    slots: VecDeque<Option<Buffered>>,
    /// How many of `slots` hold a packet, and their bytes.
    buffered: u32,
    buffered_bytes: usize,
    reassembly: Option<Reassembly>,
    next_msg: u64,
    /// Bytes of delivered messages the application has not taken yet.
    pub(crate) undelivered_bytes: usize,
    window: u32,
    buffer_bytes: usize,
    max_payload: usize,
    max_message_len: usize,
    // Acknowledgement state.
    pub(crate) ack_needed: bool,
    pub(crate) ack_now: bool,
    unacked_packets: u32,
    pub(crate) oldest_unacked: Option<Instant>,
    pub(crate) dsack: u32,
    pub(crate) advertised_credit: u32,
    /// The latest transmission number (serial order) that brought data not received
    /// before, to echo, and when it arrived (the echo's ack delay runs from then).
    pub(crate) echo: u32,
    pub(crate) echo_at: Instant,
    pool: Vec<Vec<u8>>,
}

impl RecvState {
    pub(crate) fn new(
        window: u32,
        buffer_bytes: usize,
        max_payload: usize,
        max_message_len: usize,
    ) -> RecvState {
        RecvState {
            rcv_nxt: 0,
            slots: VecDeque::new(),
            buffered: 0,
            buffered_bytes: 0,
            reassembly: None,
            next_msg: 0,
            undelivered_bytes: 0,
            window,
            buffer_bytes,
            max_payload,
            max_message_len,
            ack_needed: false,
            ack_now: false,
            unacked_packets: 0,
            oldest_unacked: None,
            dsack: 0,
            advertised_credit: window,
            echo: 0,
            echo_at: Instant::ZERO,
            pool: Vec::new(),
        }
    }

    /// Forgets everything (the peer restarted).
    pub(crate) fn reset(&mut self) {
        let pool = core::mem::take(&mut self.pool);
        *self = RecvState::new(
            self.window,
            self.buffer_bytes,
            self.max_payload,
            self.max_message_len,
        );
        self.pool = pool;
    }

    /// Takes a buffer back for reuse.
    pub(crate) fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < 64 && buf.capacity() > 0 {
            buf.clear();
            self.pool.push(buf);
        }
    }

    fn buffer_with(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = self.pool.pop().unwrap_or_default();
        v.extend_from_slice(data);
        v
    }

    fn held_bytes(&self) -> usize {
        self.buffered_bytes
            + self.reassembly.as_ref().map_or(0, |r| r.data.len())
            + self.undelivered_bytes
    }

    /// Sequence numbers the peer may use beyond the cumulative ack: the window, and no
    /// more than the packets already buffered (they are inside that span) plus the room
    /// left for the application's bytes.
    pub(crate) fn credit(&self) -> u32 {
        let free = self.buffer_bytes.saturating_sub(self.held_bytes());
        let max_payload = self.max_payload.max(1);
        // Room for the whole window (the common case) needs no division.
        if free >= (self.window as usize).saturating_mul(max_payload) {
            return self.window;
        }
        let room = free / max_payload;
        let room = u32::try_from(room).unwrap_or(u32::MAX);
        self.window.min(self.buffered.saturating_add(room))
    }

    /// The SACK bitmap: bit i (from the most significant bit of word 0) is sequence
    /// number `rcv_nxt + 1 + i`, up to [`MAX_SACK_WORDS`] words. Returns the words and how
    /// many are used; `None` when nothing waits beyond a gap.
    pub(crate) fn sack_bitmap(&self) -> Option<([u64; MAX_SACK_WORDS], u8)> {
        if self.buffered == 0 {
            return None;
        }
        Some(self.sack_words_of_buffered())
    }

    /// Words of SACK bitmap an acknowledgement carries now ([`RecvState::sack_bitmap`]'s
    /// count): 0, found in one test, unless something waits beyond a gap.
    #[inline]
    pub(crate) fn sack_words(&self) -> u8 {
        if self.buffered == 0 {
            return 0;
        }
        self.sack_words_of_buffered().1
    }

    /// The SACK bitmap of the packets buffered beyond a gap.
    #[inline(never)]
    fn sack_words_of_buffered(&self) -> ([u64; MAX_SACK_WORDS], u8) {
        let mut words = [0u64; MAX_SACK_WORDS];
        let mut used = 0;
        // Slot 0 is the awaited packet, never buffered.
        for (i, slot) in self
            .slots
            .iter()
            .enumerate()
            .skip(1)
            .take(SACK_SPAN as usize)
        {
            if slot.is_some() {
                let bit = i - 1;
                words[bit / 64] |= 1 << (63 - bit % 64);
                used = bit / 64 + 1;
            }
        }
        (words, used as u8)
    }

    /// Remembers a transmission that arrived with data not received before, to echo it.
    ///
    /// A duplicate is not echoed: the echo names the transmission that brought the data,
    /// as TCP's timestamp echoes the earliest segment an acknowledgement covers (RFC
    /// 7323 §4.3). When a packet and the timeouts' resends of it arrive together (it
    /// waited behind a queue), the acknowledgement then names the first transmission,
    /// sent before the timeouts, and the sender finds them spurious (RFC 3522); had it
    /// echoed the last resend, the timeouts would look like a real outage and their
    /// persistent congestion would stand.
    fn saw_transmission(&mut self, tx: u32, now: Instant) {
        if self.echo == 0 || seq_lt(self.echo, tx) {
            self.echo = tx;
            self.echo_at = now;
        }
    }

    /// Whether nothing is buffered out of order and no message is half assembled.
    fn nothing_pending(&self) -> bool {
        self.buffered == 0 && self.reassembly.is_none()
    }

    /// Marks that an acknowledgement is owed; `now` forces it out without delay.
    pub(crate) fn owe_ack(&mut self, at: Instant, immediately: bool) {
        self.ack_needed = true;
        self.ack_now |= immediately;
        self.oldest_unacked.get_or_insert(at);
    }

    /// When the owed acknowledgement must go at the latest.
    pub(crate) fn ack_deadline(&self, delay_nanos: u64) -> Option<Instant> {
        if !self.ack_needed {
            return None;
        }
        if self.ack_now {
            return self.oldest_unacked.or(Some(Instant::ZERO));
        }
        self.oldest_unacked.map(|t| t.add_nanos(delay_nanos))
    }

    /// An acknowledgement went out (on its own or riding on data).
    pub(crate) fn ack_sent(&mut self) {
        self.ack_needed = false;
        self.ack_now = false;
        self.unacked_packets = 0;
        self.oldest_unacked = None;
        self.dsack = 0;
    }

    /// Takes one in-order fragment: returns a completed message, if any.
    fn take_in_order(
        &mut self,
        f: FragmentInfo,
        data: &[u8],
    ) -> Result<Option<Vec<u8>>, &'static str> {
        match &mut self.reassembly {
            None => {
                if f.msg_id != self.next_msg || f.frag_index != 0 {
                    return Err("a message does not start where the last one ended");
                }
                if f.msg_len as usize > self.max_message_len {
                    return Err("message longer than this receiver takes");
                }
                if f.frag_count == 1 {
                    if data.len() != f.msg_len as usize {
                        return Err("single fragment of the wrong length");
                    }
                    self.next_msg += 1;
                    return Ok(Some(self.buffer_with(data)));
                }
                let mut buf = self.pool.pop().unwrap_or_default();
                // Grow with the data, not with what an untrusted header claims.
                buf.reserve((f.msg_len as usize).min(1 << 20));
                buf.extend_from_slice(data);
                if buf.len() > f.msg_len as usize {
                    return Err("fragment longer than its message");
                }
                self.reassembly = Some(Reassembly {
                    msg_id: f.msg_id,
                    frag_count: f.frag_count,
                    next: 1,
                    msg_len: f.msg_len,
                    data: buf,
                });
                Ok(None)
            }
            Some(r) => {
                if f.msg_id != r.msg_id
                    || f.frag_index != r.next
                    || f.frag_count != r.frag_count
                    || f.msg_len != r.msg_len
                {
                    return Err("fragment out of its message's order");
                }
                r.data.extend_from_slice(data);
                r.next += 1;
                if r.data.len() > r.msg_len as usize {
                    return Err("fragments longer than their message");
                }
                if r.next < r.frag_count {
                    return Ok(None);
                }
                if r.data.len() != r.msg_len as usize {
                    return Err("fragments shorter than their message");
                }
                let r = self.reassembly.take().expect("checked above");
                self.next_msg += 1;
                Ok(Some(r.data))
            }
        }
    }

    /// A packet of data already received (`seq`): reported back at once (D-SACK), never
    /// echoed.
    #[cold]
    fn duplicate(&mut self, seq: u32, now: Instant) -> DataOutcome {
        self.dsack = seq.wrapping_add(1);
        self.owe_ack(now, true);
        DataOutcome::Duplicate
    }

    /// Takes a data packet. `in_place` says whether the caller can deliver a whole,
    /// in-order message straight from its datagram.
    pub(crate) fn on_data(
        &mut self,
        f: FragmentInfo,
        payload: &[u8],
        now: Instant,
        ack_every: u32,
        in_place: bool,
        done: &mut Vec<Vec<u8>>,
    ) -> DataOutcome {
        let offset = f.seq.wrapping_sub(self.rcv_nxt);
        if seq_lt(f.seq, self.rcv_nxt) {
            return self.duplicate(f.seq, now);
        }
        // Out-of-order packets may fill the buffer, but never so far that the packet the
        // receiver waits for has no room: that one only counts what is in order (partly
        // assembled, or delivered and not taken), so memory stays under twice the buffer.
        let held = if offset == 0 {
            self.held_bytes() - self.buffered_bytes
        } else {
            self.held_bytes()
        };
        if offset >= self.window || held + payload.len() > self.buffer_bytes {
            self.owe_ack(now, true);
            return DataOutcome::BeyondWindow;
        }
        if offset > 0 {
            let i = offset as usize;
            if self.slots.len() <= i {
                self.slots.resize_with(i + 1, || None);
            }
            if self.slots[i].is_some() {
                return self.duplicate(f.seq, now);
            }
            self.saw_transmission(f.tx, now);
            let data = self.buffer_with(payload);
            self.buffered += 1;
            self.buffered_bytes += data.len();
            self.slots[i] = Some(Buffered {
                msg_id: f.msg_id,
                frag_index: f.frag_index,
                frag_count: f.frag_count,
                msg_len: f.msg_len,
                data,
            });
            // A gap: tell the sender at once (fast retransmit depends on it).
            self.owe_ack(now, true);
            return DataOutcome::Accepted;
        }
        // In order.
        self.saw_transmission(f.tx, now);
        let gap_closed = self.buffered > 0;
        // A whole message, next in order, with nothing held before it: delivered from
        // the datagram, or copied out, with none of the assembly below. (It is what
        // `take_in_order` would accept, and `gap_closed` is false.)
        if self.nothing_pending()
            && f.frag_count == 1
            && f.frag_index == 0
            && f.msg_id == self.next_msg
            && payload.len() == f.msg_len as usize
            && (in_place || payload.len() <= self.max_message_len)
        {
            self.next_msg += 1;
            self.slots.pop_front();
            self.advance(now, ack_every, false);
            return if in_place {
                DataOutcome::InPlace
            } else {
                DataOutcome::Whole(self.buffer_with(payload))
            };
        }
        match self.take_in_order(f, payload) {
            Ok(Some(m)) => done.push(m),
            Ok(None) => {}
            Err(why) => return DataOutcome::Violation(why),
        }
        self.slots.pop_front();
        self.advance(now, ack_every, gap_closed);
        // Drain whatever the arrival made contiguous.
        while self.slots.front().is_some_and(Option::is_some) {
            let Some(Some(b)) = self.slots.pop_front() else {
                break;
            };
            self.buffered -= 1;
            self.buffered_bytes -= b.data.len();
            let info = FragmentInfo {
                seq: self.rcv_nxt,
                msg_id: b.msg_id,
                frag_index: b.frag_index,
                frag_count: b.frag_count,
                msg_len: b.msg_len,
                tx: 0,
            };
            let result = self.take_in_order(info, &b.data);
            self.recycle(b.data);
            match result {
                Ok(Some(m)) => done.push(m),
                Ok(None) => {}
                Err(why) => return DataOutcome::Violation(why),
            }
            self.advance(now, ack_every, true);
        }
        DataOutcome::Accepted
    }

    /// The packet at `rcv_nxt` has been taken (its slot, if any, already removed): move
    /// the cumulative ack. The acknowledgement is due at once every `ack_every` packets,
    /// and once the peer has used half the credit last advertised (so that a window
    /// smaller than `ack_every` never waits for the ack timer).
    fn advance(&mut self, now: Instant, ack_every: u32, immediately: bool) {
        self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
        self.unacked_packets += 1;
        let due = immediately
            || self.unacked_packets >= ack_every
            || self.unacked_packets.saturating_mul(2) >= self.advertised_credit;
        self.owe_ack(now, due);
    }

    /// Bytes held for the application right now (for tests and stats).
    pub(crate) fn held(&self) -> usize {
        self.held_bytes()
    }
}
