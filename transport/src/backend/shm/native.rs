//! Native reliability over a shared-memory region: reliable mode with no RPP.
//!
//! Between two live processes of one host the region's rings lose nothing and keep
//! order, and the only failure, the death of a process, shows in the owner words. So a
//! reliable message goes straight onto the ring.
//!
//! # The contract
//!
//! - **Acknowledged** means the peer's application is done with the message: it dropped
//!   the view of the slot (or the endpoint copied a fragment out), which stores 0 in the
//!   slot's state word. Then the sender's `Completion::Sent` hands the buffer back: for a
//!   message sent from a slot of this side ([`Backend::alloc`]), that very slot,
//!   writable again; for a heap buffer, the heap buffer (its bytes went through slots).
//! - **Peer death** (or a clean close): every message whose slots are not all back is
//!   handed back, in send order, from this side's own memory (a slot, or the original
//!   heap buffer), whether the dead process had read it or not. Its slots are free again.
//!   The peer is looked at when a progress pass finds the ring empty (at most every
//!   2 ms, and after 4096 busy passes in a row). What it published before dying is
//!   delivered all the same, also what is still on the ring once its death is known:
//!   the region outlives the process, and a sender may count a message as gone once it
//!   is on the ring (the libfabric provider completes a send then, and its program may
//!   exit). A message it was still putting out in fragments is dropped, unfinished, when
//!   a successor takes its side. A process that wants to know its last messages were
//!   taken waits for their `Sent` (or for `has_unacked` to turn false) before closing.
//! - **A short message** (at most [`INLINE_MAX`] bytes, what
//!   [`Capabilities::inject_size`] reports) is copied into its ring record, after the
//!   descriptor, so the receiver reads one or two cache lines of the ring and never the
//!   sender's slot or its state word. The receiver copies it out as it takes the record
//!   (the delivery holds its bytes in itself) and then publishes how far in the ring it
//!   has taken messages, in a word on the ring head's cache line (see [`taken_at`]). Such
//!   a message is **acknowledged when the receiving endpoint took it off the ring** (as a
//!   fragment is when copied out), not when the application drops the delivery. The
//!   sender keeps the buffer `send` took (its own slot, or the heap buffer) until that
//!   word passes the message's record; `Sent` then hands it back. On peer death, what
//!   the word does not cover is handed back with its bytes intact, exactly: a process
//!   that takes the dead one's side skips (without counting as taken) what was meant for
//!   its predecessor, and the survivor sorts its messages before it addresses the
//!   newcomer.
//! - **A message longer than a slot** goes as fragments, one slot each, all but the last
//!   flagged `MORE`; the receiver copies them into one buffer in order and frees each
//!   slot as it copies. Only one message at a time is part-way out: its remaining
//!   fragments go as slots come back (at each progress pass), and `send` pushes back
//!   until it is all out. A message of one slot is never copied.
//! - **Back-pressure**: no free slot, no room in the ring, a message still going out in
//!   fragments, or no live process on the other side yet: `send` refuses with would-block
//!   and the buffer.
//!
//! [`Backend::alloc`]: crate::backend::Backend::alloc
//! [`Capabilities::inject_size`]: crate::Capabilities::inject_size

use super::descriptor::{self, DESCRIPTOR, Descriptor, Header, INLINE};
use super::{SLOT_LEN, ShmBackend, direction};
use crate::backend::Sent;
use crate::buffer::{Buf, BufKind, INLINE_MAX};
use crate::error::{SendError, SendErrorKind};
use myri_ring::raw::SlotMut;
use myri_ring::raw::{self, RING_HEADER_FREE};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A message sent and not yet acknowledged.
struct Outgoing {
    /// The endpoint's tag (its message id).
    tag: u64,
    /// The buffer `send` took: handed back when acknowledged or when the peer dies.
    buf: Buf,
    /// `Some(slot)`: `buf` is that slot of this side, published as it is.
    in_place: Option<usize>,
    /// Bytes of `buf` published as fragments so far.
    sent: usize,
    /// At least one fragment is published (a message may be empty).
    started: bool,
    /// Slots holding published fragments the peer has not given back yet.
    held: Vec<SlotMut>,
    /// `Some(end)`: sent inline, its record ends at ring position `end` (acknowledged
    /// when the receiver's taken word reaches it).
    inline_end: Option<u64>,
}

/// Offset in the region of the word where the receiver of side `sender`'s ring publishes
/// the ring position after the last inline message it took: on the ring head's cache
/// line, which the receiver writes anyway as it takes a record.
pub(super) fn taken_at(sender: usize) -> usize {
    direction(sender).ring.offset + RING_HEADER_FREE
}

/// Whether ring position `taken` is at or past `end` (positions grow without bound, and
/// wrap only after 2^64 bytes).
fn reached(taken: u64, end: u64) -> bool {
    taken.wrapping_sub(end) < 1 << 63
}

impl Outgoing {
    /// Whether the peer took all of it: the receiver's taken word reached an inline
    /// message, or its slots are back.
    fn done(&self, taken: u64, back: &impl Fn(usize) -> bool) -> bool {
        match (self.inline_end, self.in_place) {
            (Some(end), _) => reached(taken, end),
            (None, Some(slot)) => back(slot),
            (None, None) => !self.partial() && self.held.is_empty(),
        }
    }

    /// Whether fragments remain to publish.
    fn partial(&self) -> bool {
        self.in_place.is_none() && (!self.started || self.sent < self.buf.len())
    }
}

/// The sending side's state.
#[derive(Default)]
pub(super) struct NativeTx {
    /// Sent, not yet acknowledged, in send order.
    outq: VecDeque<Outgoing>,
    /// Acknowledged, waiting for the endpoint.
    acked: VecDeque<(u64, Buf)>,
    /// Handed back when the peer was lost, waiting for the endpoint.
    pub(super) handed_back: Vec<Buf>,
    /// How far the peer has taken this side's inline messages, as its descriptors said
    /// (or its taken word, when looked at).
    peer_taken: u64,
    /// How far this side has taken the peer's inline messages (what its taken word
    /// says), carried in every descriptor sent.
    my_taken: u64,
    /// Acknowledgement passes since the peer's taken word was last read while an inline
    /// message waited.
    waiting_passes: u32,
    /// Where the record of the last inline message sent ends.
    last_inline_end: u64,
}

/// Acknowledgement passes an inline message waits for the peer's descriptors to say it
/// was taken before the peer's taken word is read (reading it every pass would pull its
/// cache line, which the receiver writes as it takes each message, back and forth).
const WORD_AFTER_PASSES: u32 = 256;
/// Messages waiting (an inline one among them), from which the taken word is read at
/// every pass (a stream with nothing coming back).
const WORD_AT_WAITING: usize = 16;

impl NativeTx {
    /// A descriptor from the peer said it has taken this side's inline messages up to
    /// ring position `taken`.
    pub(super) fn peer_took(&mut self, taken: u64) {
        if reached(taken, self.peer_taken) {
            self.peer_taken = taken;
        }
    }

    /// Whether messages are out and not acknowledged.
    pub(super) fn busy(&self) -> bool {
        !self.outq.is_empty()
    }

    /// Whether a message is part-way out.
    pub(super) fn partial(&self) -> bool {
        self.outq.back().is_some_and(Outgoing::partial)
    }
}

impl ShmBackend {
    /// Sends `buf` reliably. See the [module documentation](self).
    pub(super) fn native_send(&mut self, buf: Buf, tag: u64) -> Result<Sent, SendError> {
        self.refresh_peer();
        let len = buf.len();
        let refuse = |error, buf| Err(SendError { error, buf });
        if len > self.max_message {
            let max = self.max_message;
            return refuse(SendErrorKind::TooLarge { len, max }, buf);
        }
        if self.peer_present() && self.rpp_peer() {
            return refuse(SendErrorKind::ModeMismatch, buf);
        }
        if !self.peer_present() {
            // Nobody to take it yet (or any more: the endpoint refuses sends to a failed
            // peer before asking).
            return refuse(SendErrorKind::WouldBlock, buf);
        }
        let partial = |b: &ShmBackend| {
            b.native
                .as_ref()
                .and_then(|n| n.outq.back())
                .is_some_and(Outgoing::partial)
        };
        if partial(self) {
            self.pump();
            if partial(self) {
                return refuse(SendErrorKind::WouldBlock, buf);
            }
        }
        let out = match buf.kind {
            kind if len <= INLINE_MAX => {
                // Sent from one of this side's slots: no copy was made to send it.
                let own_slot =
                    matches!(&kind, BufKind::Shm(s) if Arc::ptr_eq(s.area(), &self.mine));
                let buf = Buf::new(kind, len);
                let end = match self.publish_inline(&buf) {
                    Ok(end) => end,
                    Err(error) => return refuse(error, buf),
                };
                let copied = !own_slot;
                if let Some(n) = self.native.as_mut() {
                    n.last_inline_end = end;
                    n.outq.push_back(Outgoing {
                        tag,
                        buf,
                        in_place: None,
                        sent: len,
                        started: true,
                        held: Vec::new(),
                        inline_end: Some(end),
                    });
                }
                return Ok(Sent { copied });
            }
            BufKind::Shm(s) if Arc::ptr_eq(s.area(), &self.mine) => {
                let index = s.index();
                let buf = Buf::new(BufKind::Shm(s), len);
                if let Err(error) = self.publish(index, len, false) {
                    return refuse(error, buf);
                }
                Outgoing {
                    tag,
                    buf,
                    in_place: Some(index),
                    sent: len,
                    started: true,
                    held: Vec::new(),
                    inline_end: None,
                }
            }
            kind => {
                let mut out = Outgoing {
                    tag,
                    buf: Buf::new(kind, len),
                    in_place: None,
                    sent: 0,
                    started: false,
                    held: Vec::new(),
                    inline_end: None,
                };
                self.publish_fragments(&mut out);
                if !out.started {
                    return refuse(SendErrorKind::WouldBlock, out.buf);
                }
                out
            }
        };
        let copied = out.in_place.is_none();
        if let Some(n) = self.native.as_mut() {
            n.outq.push_back(out);
        }
        Ok(Sent { copied })
    }

    /// What this side's descriptors say besides slot, length and flags.
    pub(super) fn header(&self) -> Header {
        Header {
            from_epoch: self.my_epoch,
            to_epoch: self.peer_epoch,
            taken: self.native.as_ref().map_or(0, |n| n.my_taken),
        }
    }

    /// Copies `buf` (at most [`INLINE_MAX`] bytes) into a ring record after its
    /// descriptor and publishes it. Returns the ring position after the record.
    fn publish_inline(&mut self, buf: &[u8]) -> Result<u64, SendErrorKind> {
        let len = buf.len();
        let header = self.header();
        let mut g = self.tx.try_reserve(DESCRIPTOR + len).map_err(|e| match e {
            raw::RingError::Full => SendErrorKind::WouldBlock,
            e => SendErrorKind::Ring(e),
        })?;
        let rec = g.as_mut_slice();
        descriptor::encode(rec, INLINE, len, header);
        rec[DESCRIPTOR..].copy_from_slice(buf);
        g.commit(DESCRIPTOR + len);
        Ok(self.tx.published())
    }

    /// An inline message was taken off the ring (its record is released), its
    /// descriptor saying the peer took this side's up to `peer_taken`: says so to the
    /// sender.
    pub(super) fn took_inline(&mut self, peer_taken: u64) {
        let taken = self.rx.released();
        if let Some(n) = self.native.as_mut() {
            n.peer_took(peer_taken);
            n.my_taken = taken;
        }
        if let Some(w) = self.region.word(taken_at(1 - self.side)) {
            // Release: this side is done with the record before the sender sees it taken.
            w.store(taken, Ordering::Release);
        }
        self.received_this_pass = true;
    }

    /// Copies and publishes as many of `out`'s remaining fragments as there are free
    /// slots and ring room for.
    fn publish_fragments(&mut self, out: &mut Outgoing) {
        let len = out.buf.len();
        while !out.started || out.sent < len {
            let Some(mut slot) = self.claim_free() else {
                return;
            };
            let n = (len - out.sent).min(SLOT_LEN);
            slot.as_mut_slice()[..n].copy_from_slice(&out.buf[out.sent..out.sent + n]);
            let more = out.sent + n < len;
            if self.publish(slot.index(), n, more).is_err() {
                // No ring room: the slot was not published and is free again.
                return;
            }
            out.sent += n;
            out.started = true;
            out.held.push(slot);
        }
    }

    /// Sends more of a message part-way out, if there is one.
    pub(super) fn pump(&mut self) {
        let present = self.peer_present();
        let Some(n) = self.native.as_mut() else {
            return;
        };
        if !present || !n.outq.back().is_some_and(Outgoing::partial) {
            return;
        }
        let Some(mut out) = n.outq.pop_back() else {
            return;
        };
        self.publish_fragments(&mut out);
        if let Some(n) = self.native.as_mut() {
            n.outq.push_back(out);
        }
    }

    /// Moves the messages whose slots have all come back to the acknowledged list.
    /// With `force`, reads the peer's taken word even if its descriptors said enough
    /// lately.
    fn collect_acks(&mut self, force: bool) {
        let states = direction(self.side).states;
        let ShmBackend {
            region,
            native,
            side,
            ..
        } = self;
        let Some(n) = native.as_mut() else {
            return;
        };
        // Acquire: the peer's reads of the slot happen before this side reuses it.
        let back = |slot: usize| {
            region
                .word(states + slot * 8)
                .is_none_or(|w| w.load(Ordering::Acquire) == 0)
        };
        // Records end in send order: the last inline message sent is the last one taken.
        if !n.outq.is_empty() && !reached(n.peer_taken, n.last_inline_end) {
            n.waiting_passes += 1;
            if force || n.outq.len() >= WORD_AT_WAITING || n.waiting_passes >= WORD_AFTER_PASSES {
                n.waiting_passes = 0;
                // Acquire: the receiver is done with the records before this side reuses
                // the buffers.
                let word = region
                    .word(taken_at(*side))
                    .map_or(0, |w| w.load(Ordering::Acquire));
                n.peer_took(word);
            }
        }
        let taken = n.peer_taken;
        // Mostly the oldest goes first.
        while let Some(o) = n.outq.front_mut() {
            if !o.held.is_empty() {
                o.held.retain(|s| !back(s.index()));
            }
            if !o.done(taken, &back) {
                break;
            }
            if let Some(o) = n.outq.pop_front() {
                n.acked.push_back((o.tag, o.buf));
            }
        }
        let mut i = 1;
        while i < n.outq.len() {
            let o = &mut n.outq[i];
            // A fragment's slot is kept (claimed) until seen back, so it cannot be reused
            // (and published again) before this looks.
            o.held.retain(|s| !back(s.index()));
            if o.done(taken, &back)
                && let Some(o) = n.outq.remove(i)
            {
                n.acked.push_back((o.tag, o.buf));
            } else {
                i += 1;
            }
        }
    }

    /// The next acknowledged message, if any.
    pub(super) fn native_poll_acked(&mut self) -> Option<(u64, Buf)> {
        if self.native.as_ref()?.acked.is_empty() {
            self.collect_acks(false);
        }
        self.native.as_mut()?.acked.pop_front()
    }

    /// The peer is gone: what it gave back is acknowledged, the rest handed back (the
    /// caller frees every slot next).
    pub(super) fn native_peer_lost(&mut self) {
        self.collect_acks(true);
        let Some(n) = self.native.as_mut() else {
            return;
        };
        n.handed_back.extend(n.outq.drain(..).map(|o| o.buf));
    }

    /// Takes a fragment (or the last part of a fragmented message): copies it out and
    /// frees its slot. Returns the message once whole.
    pub(super) fn fragment(&mut self, d: Descriptor) -> Option<Vec<u8>> {
        let Some(view) = self.theirs.view(d.slot, 0, d.len) else {
            self.counters.malformed += 1;
            self.give_back_theirs(d.slot);
            self.assembling = None;
            self.skipping = d.more;
            return None;
        };
        if self.skipping {
            drop(view);
            self.give_back_theirs(d.slot);
            self.skipping = d.more;
            return None;
        }
        if self.assembling.is_none() {
            let mut v = self.spare.pop().unwrap_or_default();
            v.clear();
            self.assembling = Some(v);
        }
        let message = self.assembling.as_mut()?;
        if message.len() + d.len > self.max_message {
            // Longer than any message: the sender is broken. Drop the rest of it.
            drop(view);
            self.give_back_theirs(d.slot);
            self.counters.malformed += 1;
            self.assembling = None;
            self.skipping = d.more;
            return None;
        }
        message.extend_from_slice(view.as_slice());
        drop(view);
        self.give_back_theirs(d.slot);
        if d.more {
            return None;
        }
        self.assembling.take()
    }
}
