//! Buffers handed between the application and a backend without copying (seed 000,
//! Buffers; CLF's copy-free mechanism).
//!
//! # Sending
//!
//! [`Endpoint::alloc`](crate::Endpoint::alloc) gives a [`Buf`] in the backend's
//! registered memory: a DMA buffer of the simulated board, a slot of the UDP endpoint's
//! registered slab, a slot of the shared-memory region. The application writes its message
//! in place and [`Endpoint::send`](crate::Endpoint::send) moves the buffer in: the backend
//! sends from it with no copy. When registered memory has run out, `alloc` hands out a heap
//! buffer instead, and the send copies it into registered memory once some is free (CLF's
//! fallback); [`Stats::copied_sends`](crate::Stats::copied_sends) counts those copies.
//! In reliable mode a message of at most [`SEND_INLINE_MAX`] bytes, which RPP copies
//! behind its header whatever holds it, is held in the `Buf` itself: no registered memory
//! is taken for it ([`Stats::inline_sends`](crate::Stats::inline_sends)).
//!
//! # Reliable mode: lent buffers
//!
//! In reliable mode the protocol keeps a message until it is acknowledged and may send it
//! again. On the simulated board the buffer is then lent to the board
//! (`myri_mcp::SendBuf::lend`): the board DMAs every transmission from it while RPP reads
//! it, nobody writes it, and the endpoint takes it back for writing before it hands it to
//! the application in [`Completion::Sent`](crate::Completion::Sent) (or in a failure's
//! hand-back), waiting for the board's last read when it must.
//!
//! A sender that keeps buffers for its next messages should keep only registered ones,
//! and take back those waiting in completions before it allocates: every send runs RPP,
//! which takes acknowledgements and queues completions as it goes
//! ([`Endpoint::pending_completions`](crate::Endpoint::pending_completions) says how many;
//! taking them runs no progress pass). A heap buffer, handed out while the board held
//! every DMA buffer, costs a copy at every send it carries for as long as it is kept.
//!
//! # External memory
//!
//! [`Buf::external`] wraps memory the application owns and keeps (a libfabric memory
//! region, say) behind an [`ExternalBytes`]: the buffer holds an `Arc` to it and a range
//! of it, read-only. Over `udp://` in reliable mode RPP keeps it until the peer
//! acknowledged the message and gathers every packet, retransmissions too, straight from
//! it; backends that send only from their own memory (`shm://`'s slots, the board's DMA
//! buffers) copy it as they copy a heap buffer. It comes back in
//! [`Completion::Sent`](crate::Completion::Sent) (or a failure's hand-back) as it went,
//! never writable; [`Stats::external_sends`](crate::Stats::external_sends) counts such
//! sends.
//!
//! # Receiving
//!
//! A received message is a [`RecvBuf`]: a view of the memory the backend received it into
//! (the board's receive buffer, the slab slot, the peer's slot in the region). Dropping it
//! gives that memory back to the backend, so hold received buffers briefly.

use crate::lock;
use core::ops::{Deref, DerefMut, Range};
use myri_ring::raw::{SlotMut, SlotView};
use std::sync::{Arc, Mutex};

/// Memory the application owns and lends to a send ([`Buf::external`]): its bytes must
/// stay as they are while a [`Buf`] made from it is held by the endpoint (until the send's
/// [`Completion::Sent`](crate::Completion::Sent) or hand-back).
///
/// Only the bytes a send reads are ever borrowed ([`ExternalBytes::bytes`] of its range),
/// so the rest of the memory may change meanwhile (a receive into another part of the
/// same registered buffer, say).
pub trait ExternalBytes: Send + Sync {
    /// How many bytes the memory holds.
    fn size(&self) -> usize;

    /// The bytes `range`, which lies within [`ExternalBytes::size`] (callers check).
    fn bytes(&self, range: Range<usize>) -> &[u8];
}

impl ExternalBytes for Vec<u8> {
    fn size(&self) -> usize {
        self.len()
    }

    fn bytes(&self, range: Range<usize>) -> &[u8] {
        &self[range]
    }
}

impl ExternalBytes for Box<[u8]> {
    fn size(&self) -> usize {
        self.len()
    }

    fn bytes(&self, range: Range<usize>) -> &[u8] {
        &self[range]
    }
}

/// Where a [`Buf`]'s bytes live.
pub(crate) enum BufKind {
    /// A send buffer in a simulated board's DMA memory.
    Board(myri_mcp::SendBuf),
    /// A board buffer lent to the board for reading while RPP holds the message (RPP
    /// reads it; the board sends it by DMA, again for a resend). Never handed to the
    /// application: the endpoint takes it back for writing first.
    Lent(myri_mcp::LentSendBuf),
    /// A slot of a registered slab (UDP).
    Pool(PoolSlot),
    /// A slot of a shared-memory region.
    Shm(SlotMut),
    /// Plain heap memory (the fallback).
    Heap(Vec<u8>),
    /// A range of memory the application owns ([`Buf::external`]): read-only, never
    /// handed back for writing.
    External(Arc<dyn ExternalBytes>, Range<usize>),
    /// A short message held in the buffer itself ([`SEND_INLINE_MAX`] bytes at most).
    Inline([u8; SEND_INLINE_MAX]),
}

/// Where a sent buffer's bytes were, for the endpoint's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendKind {
    Registered,
    External,
    Inline,
    Heap,
}

/// The longest message [`Endpoint::alloc`](crate::Endpoint::alloc) holds in the [`Buf`]
/// itself in reliable mode over RPP, which copies a message this short behind its header
/// anyway: no allocation, no registered buffer taken, no lock. (It is the room the
/// largest other kind of buffer leaves, so a `Buf` is no larger for it.)
pub const SEND_INLINE_MAX: usize = 40;

/// A message being built, to hand to [`Endpoint::send`](crate::Endpoint::send). See the
/// [module documentation](self).
///
/// Its length starts as asked of `alloc`; [`Buf::set_len`] changes it within the
/// capacity. It dereferences to the message's bytes.
pub struct Buf {
    pub(crate) kind: BufKind,
    pub(crate) len: usize,
}

impl Buf {
    pub(crate) fn new(kind: BufKind, len: usize) -> Buf {
        Buf { kind, len }
    }

    /// A heap buffer of `len` zero bytes, usable with any endpoint (the send copies it
    /// into registered memory where the backend needs that).
    pub fn heap(len: usize) -> Buf {
        Buf::new(BufKind::Heap(vec![0; len]), len)
    }

    /// A heap buffer holding `data`.
    pub fn from_vec(data: Vec<u8>) -> Buf {
        let len = data.len();
        Buf::new(BufKind::Heap(data), len)
    }

    /// `len` zero bytes held in the buffer itself (`len` at most [`SEND_INLINE_MAX`]).
    pub(crate) fn inline(len: usize) -> Buf {
        debug_assert!(len <= SEND_INLINE_MAX);
        Buf::new(
            BufKind::Inline([0; SEND_INLINE_MAX]),
            len.min(SEND_INLINE_MAX),
        )
    }

    /// A heap buffer holding a copy of `data`.
    pub fn copy_of(data: &[u8]) -> Buf {
        Buf::from_vec(data.to_vec())
    }

    /// A read-only buffer of the bytes `range` of `mem`, sent without a copy where the
    /// backend can (see the [module documentation](self)); `None` when `range` is not
    /// inside `mem`'s bytes.
    pub fn external(mem: Arc<dyn ExternalBytes>, range: Range<usize>) -> Option<Buf> {
        if range.start > range.end || range.end > mem.size() {
            return None;
        }
        let len = range.len();
        Some(Buf::new(BufKind::External(mem, range), len))
    }

    /// The vector of a heap buffer (its length the message's), for the caller to build
    /// its next message in; any other buffer comes back as it is.
    pub fn into_heap(self) -> Result<Vec<u8>, Buf> {
        match self.kind {
            BufKind::Heap(mut v) => {
                v.truncate(self.len);
                Ok(v)
            }
            kind => Err(Buf {
                kind,
                len: self.len,
            }),
        }
    }

    /// Whether the buffer is application memory from [`Buf::external`].
    pub fn is_external(&self) -> bool {
        matches!(self.kind, BufKind::External(..))
    }

    fn storage(&self) -> &[u8] {
        match &self.kind {
            BufKind::Board(b) => b.as_slice(),
            BufKind::Lent(b) => b.as_slice(),
            BufKind::Pool(p) => p.as_slice(),
            BufKind::Shm(s) => s.as_slice(),
            BufKind::Heap(v) => v,
            // A shrunken memory gives nothing rather than a panic.
            BufKind::External(m, r) => m.bytes(r.clone()),
            BufKind::Inline(b) => b,
        }
    }

    fn storage_mut(&mut self) -> &mut [u8] {
        match &mut self.kind {
            BufKind::Board(b) => b.as_mut_slice(),
            // Read-only while lent (the application never holds one).
            BufKind::Lent(_) => &mut [],
            // The application's memory: read-only.
            BufKind::External(..) => &mut [],
            BufKind::Pool(p) => p.as_mut_slice(),
            BufKind::Shm(s) => s.as_mut_slice(),
            BufKind::Heap(v) => v,
            BufKind::Inline(b) => b,
        }
    }

    /// Bytes of the message.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most bytes the buffer holds.
    pub fn capacity(&self) -> usize {
        match &self.kind {
            BufKind::Heap(_) => usize::MAX,
            _ => self.storage().len(),
        }
    }

    /// Sets the message's length. A registered buffer cannot grow past its capacity
    /// (returns false and changes nothing); a heap buffer grows with zero bytes.
    pub fn set_len(&mut self, len: usize) -> bool {
        let capacity = self.storage().len();
        match &mut self.kind {
            BufKind::Heap(v) if v.len() < len => v.resize(len, 0),
            BufKind::Heap(_) => {}
            _ if len > capacity => return false,
            _ => {}
        }
        self.len = len;
        true
    }

    /// Whether the buffer is in a backend's registered memory (false for the heap
    /// fallback, a short message held in the buffer itself, and [`Buf::external`]
    /// memory).
    pub fn is_registered(&self) -> bool {
        self.kind_for_stats() == SendKind::Registered
    }

    /// Which count of [`Stats`](crate::Stats) a send of this buffer goes to.
    #[inline]
    pub(crate) fn kind_for_stats(&self) -> SendKind {
        match self.kind {
            BufKind::Heap(_) => SendKind::Heap,
            BufKind::External(..) => SendKind::External,
            BufKind::Inline(_) => SendKind::Inline,
            _ => SendKind::Registered,
        }
    }

    /// Whether the buffer holds its (short) message in itself ([`SEND_INLINE_MAX`]).
    pub fn is_inline(&self) -> bool {
        matches!(self.kind, BufKind::Inline(_))
    }

    /// A board buffer lent to the board for reading (others as they are).
    pub(crate) fn lend(self) -> Buf {
        match self.kind {
            BufKind::Board(b) => Buf::new(BufKind::Lent(b.lend()), self.len),
            kind => Buf::new(kind, self.len),
        }
    }

    /// A lent buffer back for writing, in place, once the board reads it no more; says
    /// whether the buffer is writable now (any other kind is).
    pub(crate) fn unlend(&mut self) -> bool {
        let BufKind::Lent(l) = &mut self.kind else {
            return true;
        };
        match l.try_unlend_in_place() {
            Some(b) => {
                // The handle left behind is empty (`try_unlend_in_place`): nothing is
                // left for its drop to give back, so it need not run.
                core::mem::forget(core::mem::replace(&mut self.kind, BufKind::Board(b)));
                true
            }
            None => false,
        }
    }

    /// The lent buffer the board may read (DMA), if this is one.
    pub(crate) fn lent(&self) -> Option<&myri_mcp::LentSendBuf> {
        match &self.kind {
            BufKind::Lent(l) => Some(l),
            _ => None,
        }
    }

    /// Address of the first byte (for tests that check where bytes are).
    pub fn as_ptr(&self) -> *const u8 {
        self.storage().as_ptr()
    }
}

impl Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let storage = self.storage();
        &storage[..self.len.min(storage.len())]
    }
}

impl DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        let storage = self.storage_mut();
        let len = len.min(storage.len());
        &mut storage[..len]
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl core::fmt::Debug for Buf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let kind = match self.kind {
            BufKind::Board(_) => "board",
            BufKind::Lent(_) => "lent board",
            BufKind::Pool(_) => "slab",
            BufKind::Shm(_) => "shm",
            BufKind::Heap(_) => "heap",
            BufKind::External(..) => "external",
            BufKind::Inline(_) => "inline",
        };
        write!(f, "Buf({kind}, {} bytes)", self.len)
    }
}

/// A shared-memory slot received from the peer: gives the slot back on drop.
pub(crate) struct ShmRecv {
    pub(crate) view: SlotView,
    pub(crate) give_back: crate::backend::shm::SlotReturn,
}

impl Drop for ShmRecv {
    fn drop(&mut self) {
        self.give_back.give_back(&self.view);
    }
}

/// Where a [`RecvBuf`]'s bytes live.
pub(crate) enum RecvKind {
    Board(myri_mcp::RecvBuf),
    Pool(PoolSlot),
    /// A slab slot that holds several datagrams (UDP receive coalescing): each view is one
    /// datagram's range of it, and the slot goes back to the slab when the last view drops.
    SharedPool(Arc<PoolSlot>),
    Shm(ShmRecv),
    Heap(Vec<u8>),
    /// A short message copied out of a ring descriptor (shm's inline messages).
    Inline(InlineBytes),
}

/// Longest message a [`RecvBuf`] holds in itself (shm's inline messages).
pub(crate) const INLINE_MAX: usize = 64;

/// Up to [`INLINE_MAX`] bytes held in place, no allocation.
#[derive(Clone, Copy)]
pub(crate) struct InlineBytes {
    len: u8,
    bytes: [u8; INLINE_MAX],
}

/// A received message: a view of the memory the backend received it into. Dropping it
/// gives that memory back (a UDP slot that held several coalesced datagrams goes back
/// when the last of their views drops). See the [module documentation](self).
pub struct RecvBuf {
    kind: RecvKind,
    range: Range<usize>,
}

impl RecvBuf {
    pub(crate) fn new(kind: RecvKind, range: Range<usize>) -> RecvBuf {
        let mut r = RecvBuf { kind, range: 0..0 };
        let cap = r.storage().len();
        r.range = range.start.min(cap)..range.end.min(cap).max(range.start.min(cap));
        r
    }

    /// [`RecvBuf::new`] for a `range` the caller has checked lies within the bytes
    /// (a received datagram past its backend header): no second look at their length.
    #[inline]
    pub(crate) fn new_within(kind: RecvKind, range: Range<usize>) -> RecvBuf {
        let r = RecvBuf { kind, range };
        debug_assert!(r.range.start <= r.range.end && r.range.end <= r.storage().len());
        r
    }

    pub(crate) fn from_vec(v: Vec<u8>) -> RecvBuf {
        let len = v.len();
        RecvBuf::new(RecvKind::Heap(v), 0..len)
    }

    /// A copy of `data` held in place (at most [`INLINE_MAX`] bytes; longer is cut).
    pub(crate) fn inline(data: &[u8]) -> RecvBuf {
        let len = data.len().min(INLINE_MAX);
        let mut bytes = [0; INLINE_MAX];
        bytes[..len].copy_from_slice(&data[..len]);
        RecvBuf {
            kind: RecvKind::Inline(InlineBytes {
                len: len as u8,
                bytes,
            }),
            range: 0..len,
        }
    }

    fn storage(&self) -> &[u8] {
        match &self.kind {
            RecvKind::Board(b) => b.as_slice(),
            RecvKind::Pool(p) => p.as_slice(),
            RecvKind::SharedPool(p) => p.as_slice(),
            RecvKind::Shm(s) => s.view.as_slice(),
            RecvKind::Heap(v) => v,
            RecvKind::Inline(i) => &i.bytes[..usize::from(i.len)],
        }
    }

    /// The part `sub` (relative to the current view) of this buffer, as a new view.
    pub(crate) fn narrow(mut self, sub: Range<usize>) -> RecvBuf {
        let start = (self.range.start + sub.start).min(self.range.end);
        let end = (self.range.start + sub.end).clamp(start, self.range.end);
        self.range = start..end;
        self
    }

    /// Bytes of the message.
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// Whether the bytes are in the backend's registered memory (a view, not a copy).
    pub fn is_registered(&self) -> bool {
        !matches!(self.kind, RecvKind::Heap(_) | RecvKind::Inline(_))
    }

    /// The message as a vector (a copy unless it already is one).
    pub fn into_vec(self) -> Vec<u8> {
        match self.kind {
            RecvKind::Heap(mut v) if self.range.start == 0 => {
                v.truncate(self.range.end);
                v
            }
            _ => self.to_vec(),
        }
    }
}

impl Deref for RecvBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage()[self.range.clone()]
    }
}

impl AsRef<[u8]> for RecvBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl core::fmt::Debug for RecvBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let kind = match self.kind {
            RecvKind::Board(_) => "board",
            RecvKind::Pool(_) => "slab",
            RecvKind::SharedPool(_) => "shared slab",
            RecvKind::Shm(_) => "shm",
            RecvKind::Heap(_) => "heap",
            RecvKind::Inline(_) => "inline",
        };
        write!(f, "RecvBuf({kind}, {} bytes)", self.len())
    }
}

/// A registered slab: a fixed number of equal slots allocated once, handed out and
/// taken back (the UDP backend's registered memory).
pub(crate) struct SlotPool {
    free: Mutex<Vec<Box<[u8]>>>,
}

impl SlotPool {
    pub(crate) fn new(slots: usize, slot_len: usize) -> Arc<SlotPool> {
        Arc::new(SlotPool {
            free: Mutex::new(
                (0..slots)
                    .map(|_| vec![0u8; slot_len].into_boxed_slice())
                    .collect(),
            ),
        })
    }

    /// A free slot, if any.
    pub(crate) fn take(self: &Arc<SlotPool>) -> Option<PoolSlot> {
        let data = lock(&self.free).pop()?;
        Some(PoolSlot {
            data: Some(data),
            pool: self.clone(),
        })
    }

    /// Slots free now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        lock(&self.free).len()
    }
}

/// A slot of a [`SlotPool`]; goes back to it on drop.
pub(crate) struct PoolSlot {
    data: Option<Box<[u8]>>,
    pool: Arc<SlotPool>,
}

impl PoolSlot {
    pub(crate) fn as_slice(&self) -> &[u8] {
        self.data.as_deref().unwrap_or(&[])
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        self.data.as_deref_mut().unwrap_or(&mut [])
    }
}

impl Drop for PoolSlot {
    fn drop(&mut self) {
        if let Some(d) = self.data.take() {
            lock(&self.pool.free).push(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_buffers_grow_registered_ones_do_not() {
        let mut b = Buf::heap(4);
        assert!(!b.is_registered());
        assert!(b.set_len(10));
        assert_eq!(&b[..], &[0; 10]);
        let pool = SlotPool::new(1, 16);
        let mut r = Buf::new(BufKind::Pool(pool.take().unwrap()), 8);
        assert!(r.is_registered());
        assert_eq!(r.capacity(), 16);
        assert!(!r.set_len(17));
        assert_eq!(r.len(), 8);
        r.copy_from_slice(&[7; 8]);
        assert!(r.set_len(16));
        assert_eq!(&r[..8], &[7; 8]);
    }

    #[test]
    fn a_heap_buffer_gives_its_vector_back_and_others_stay_as_they_are() {
        let mut b = Buf::from_vec(vec![1, 2, 3, 4]);
        assert!(b.set_len(2));
        assert_eq!(b.into_heap().ok(), Some(vec![1, 2]), "cut to the message");
        let pool = SlotPool::new(1, 16);
        let r = Buf::new(BufKind::Pool(pool.take().unwrap()), 8);
        let r = r.into_heap().expect_err("a pool slot is no vector");
        assert!(r.is_registered());
        assert_eq!(r.len(), 8);
    }

    #[test]
    fn an_inline_buffer_holds_a_short_message_in_itself() {
        assert_eq!(
            size_of::<Buf>(),
            size_of::<BufKind>() + size_of::<usize>(),
            "no larger for it"
        );
        assert!(size_of::<BufKind>() <= 48);
        let mut b = Buf::inline(8);
        assert!(b.is_inline() && !b.is_registered() && !b.is_external());
        assert_eq!(&b[..], &[0; 8]);
        b.copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b.capacity(), SEND_INLINE_MAX);
        assert!(
            !b.set_len(SEND_INLINE_MAX + 1),
            "it cannot grow past itself"
        );
        assert!(b.set_len(SEND_INLINE_MAX));
        assert_eq!(&b[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[8..], &[0; SEND_INLINE_MAX - 8]);
        assert!(b.set_len(3));
        assert_eq!(format!("{b:?}"), "Buf(inline, 3 bytes)");
        let b = b.into_heap().expect_err("held in place, not a vector");
        assert_eq!(&b[..], &[1, 2, 3]);
    }

    #[test]
    fn external_buffers_are_read_only_views() {
        let mem: Arc<dyn ExternalBytes> = Arc::new((0u8..100).collect::<Vec<u8>>());
        assert!(
            Buf::external(mem.clone(), 90..101).is_none(),
            "past the end"
        );
        #[allow(clippy::reversed_empty_ranges)] // a backwards range is what is refused
        let backwards = 5..4;
        assert!(Buf::external(mem.clone(), backwards).is_none());
        let mut b = Buf::external(mem.clone(), 10..20).unwrap();
        assert!(b.is_external() && !b.is_registered());
        assert_eq!(&b[..], &(10u8..20).collect::<Vec<u8>>()[..]);
        assert_eq!(b.capacity(), 10);
        assert!(b.deref_mut().is_empty(), "never writable");
        assert!(!b.set_len(11));
        assert!(b.set_len(4));
        assert_eq!(&b[..], &[10, 11, 12, 13]);
        assert_eq!(format!("{b:?}"), "Buf(external, 4 bytes)");
        assert_eq!(Arc::strong_count(&mem), 2, "the buffer holds the memory");
        drop(b);
        assert_eq!(Arc::strong_count(&mem), 1);
    }

    #[test]
    fn pool_slots_come_back_on_drop() {
        let pool = SlotPool::new(2, 8);
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        assert!(pool.take().is_none());
        drop(a);
        assert_eq!(pool.available(), 1);
        let v = RecvBuf::new(RecvKind::Pool(b), 2..6).narrow(1..3);
        assert_eq!(v.len(), 2);
        assert!(v.is_registered());
        drop(v);
        assert_eq!(pool.available(), 2);
    }

    #[test]
    fn a_shared_slot_comes_back_when_its_last_view_drops() {
        let pool = SlotPool::new(1, 8);
        let mut slot = pool.take().unwrap();
        slot.as_mut_slice()
            .copy_from_slice(&[0, 1, 2, 3, 4, 5, 6, 7]);
        let shared = Arc::new(slot);
        let views: Vec<RecvBuf> = [0..3, 3..6, 6..8]
            .into_iter()
            .map(|r| RecvBuf::new(RecvKind::SharedPool(shared.clone()), r))
            .collect();
        drop(shared);
        assert_eq!(&views[1][..], &[3, 4, 5]);
        assert!(views.iter().all(RecvBuf::is_registered));
        assert_eq!(format!("{:?}", views[2]), "RecvBuf(shared slab, 2 bytes)");
        let mut views = views.into_iter();
        let first = views.next().unwrap();
        drop(views);
        assert_eq!(pool.available(), 0, "a view still holds the slot");
        assert_eq!(&first.narrow(1..2)[..], &[1]);
        assert_eq!(pool.available(), 1);
    }

    #[test]
    #[allow(clippy::reversed_empty_ranges)] // a backwards range is what is being tested
    fn views_never_reach_outside_their_storage() {
        let v = RecvBuf::new(RecvKind::Heap(vec![1, 2, 3]), 2..9);
        assert_eq!(&v[..], &[3]);
        let v = v.narrow(5..1);
        assert!(v.is_empty());
        assert_eq!(
            RecvBuf::from_vec(vec![4, 5]).narrow(1..2).into_vec(),
            vec![5]
        );
    }
}
