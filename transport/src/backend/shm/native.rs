//! Native reliability over a shared-memory region: reliable mode with no RPP.
//!
//! Between two live processes of one host the region's rings lose nothing and keep
//! order, and the only failure, the death of a process, shows in the owner words. So a
//! reliable message goes straight onto the ring, and:
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
//!   2 ms, and after 4096 busy passes in a row), so what it published before dying is
//!   normally delivered first; what is still on the ring once its death is known is
//!   dropped, as RPP drops a failed peer's packets. A process that wants its last
//!   messages taken waits for their `Sent` (or for `has_unacked` to turn false) before
//!   closing.
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

use super::{Descriptor, SLOT_LEN, ShmBackend, direction};
use crate::backend::Sent;
use crate::buffer::{Buf, BufKind};
use crate::error::{Error, SendError};
use crate::shm::raw::SlotMut;
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
}

impl Outgoing {
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
}

impl NativeTx {
    /// Whether messages are out and not acknowledged.
    pub(super) fn busy(&self) -> bool {
        !self.outq.is_empty()
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
            return refuse(Error::TooLarge { len, max }, buf);
        }
        if self.peer_present() && self.rpp_peer() {
            let why = "the peer runs RPP over the region (Options::rpp_over_shm) and this \
                       endpoint the backend's native reliability: both sides must agree";
            return refuse(Error::Config(why.into()), buf);
        }
        if !self.peer_present() {
            // Nobody to take it yet (or any more: the endpoint refuses sends to a failed
            // peer before asking).
            return refuse(Error::WouldBlock, buf);
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
                return refuse(Error::WouldBlock, buf);
            }
        }
        let out = match buf.kind {
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
                };
                self.publish_fragments(&mut out);
                if !out.started {
                    return refuse(Error::WouldBlock, out.buf);
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
    fn collect_acks(&mut self) {
        let states = direction(self.side).states;
        let ShmBackend {
            region,
            native,
            cursor,
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
        // Mostly the oldest goes first.
        while let Some(o) = n.outq.front_mut() {
            if !o.held.is_empty() {
                o.held.retain(|s| !back(s.index()));
            }
            let done = match o.in_place {
                Some(slot) => back(slot),
                None => !o.partial() && o.held.is_empty(),
            };
            if !done {
                break;
            }
            if let Some(o) = n.outq.pop_front() {
                // The next alloc looks first at the slot that came back last: its cache
                // lines are likely still near (a ping-pong keeps using one or two slots).
                if let Some(slot) = o.in_place {
                    *cursor = slot;
                }
                n.acked.push_back((o.tag, o.buf));
            }
        }
        let mut i = 1;
        while i < n.outq.len() {
            let o = &mut n.outq[i];
            // A fragment's slot is kept (claimed) until seen back, so it cannot be reused
            // (and published again) before this looks.
            o.held.retain(|s| !back(s.index()));
            let done = match o.in_place {
                Some(slot) => back(slot),
                None => !o.partial() && o.held.is_empty(),
            };
            if done && let Some(o) = n.outq.remove(i) {
                n.acked.push_back((o.tag, o.buf));
            } else {
                i += 1;
            }
        }
    }

    /// The next acknowledged message, if any.
    pub(super) fn native_poll_acked(&mut self) -> Option<(u64, Buf)> {
        if self.native.as_ref()?.acked.is_empty() {
            self.collect_acks();
        }
        self.native.as_mut()?.acked.pop_front()
    }

    /// The peer is gone: what it gave back is acknowledged, the rest handed back (the
    /// caller frees every slot next).
    pub(super) fn native_peer_lost(&mut self) {
        self.collect_acks();
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
