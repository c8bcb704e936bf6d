//! Raw shared memory and the ring that lives in it: the only `unsafe` code of this crate.
//!
//! A [`Region`] is a block of memory that two threads, or two processes, share: on the
//! heap, or a mapped file under `/dev/shm`. A ring is a single-producer/single-consumer
//! queue of variable-length records inside a region:
//!
//! ```text
//! +0    tail (u64)   written by the producer only: bytes ever published
//! +64   head (u64)   written by the consumer only: bytes ever released
//! +128  data         `capacity` bytes (a power of two) of records:
//!                    [len: u32][tag: u32][payload][pad to 8]
//! ```
//!
//! The producer writes a record in place, then publishes it with a Release store of
//! `tail`; the consumer observes `tail` with an Acquire load, reads the record in place,
//! then releases it with a Release store of `head`, which the producer observes with an
//! Acquire load before it writes over that space again. Each side keeps a shadow of the
//! other's index and refreshes it only when the ring looks full (or empty), so the index
//! cache lines move between cores only when they must (seed 000, Send Channel: the host
//! shadows the queue pointers and refreshes them when the queue looks full).
//!
//! The other side may be another process that is buggy or hostile: every length read
//! from the ring is checked against the ring's bounds, and a bad one is a
//! [`RingError::Corrupt`], never an access outside the region. Every `unsafe` block below
//! has a `// SAFETY:` note; the handoff is model-checked with loom and the tests run under
//! Miri.

#![allow(unsafe_code)]

use super::sync::{AtomicU64, Ordering, Tracker};
use core::ptr::NonNull;
use std::alloc::{self, Layout};
use std::sync::Arc;
use thiserror::Error;

/// Bytes before a ring's data: the tail and head, each on its own cache line. The words
/// from [`RING_HEADER_FREE`] to the end of the header (the rest of the head's cache line)
/// are not used by the ring: its user may keep consumer-side words there.
pub const RING_HEADER: usize = 128;
/// Offset in a ring's header of the first word the ring does not use (after the head, on
/// its cache line).
pub const RING_HEADER_FREE: usize = 72;
/// Bytes of a record's header.
pub const RECORD_HEADER: usize = 8;
const TAG_DATA: u32 = 0;
const TAG_WRAP: u32 = 1;

/// Why a ring operation did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RingError {
    /// No room now (producer): try again when the consumer has caught up.
    #[error("ring is full")]
    Full,
    /// Nothing to read now (consumer).
    #[error("ring is empty")]
    Empty,
    /// A record larger than half the ring can never be sent.
    #[error("record of {len} bytes is larger than the ring takes ({max})")]
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// The most a record may hold.
        max: usize,
    },
    /// The ring's indices or a record header are impossible: the other side is broken.
    #[error("ring is corrupt: {0}")]
    Corrupt(&'static str),
}

enum Backing {
    Heap(Layout),
    Map(#[allow(dead_code)] memmap2::MmapMut),
}

/// Memory shared by the two sides of one or more rings.
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: the region's bytes are accessed only through atomics (the ring indices and the
// header words) or through ring grants, which the SPSC protocol makes exclusive; the
// pointer itself is never changed.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// A zeroed region of at least `len` bytes on the heap, page-aligned.
    pub fn heap(len: usize) -> Region {
        let len = len.max(1).next_multiple_of(4096);
        let layout = Layout::from_size_align(len, 4096).expect("a page-aligned layout");
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(base) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        Region {
            base,
            len,
            backing: Backing::Heap(layout),
        }
    }

    /// A region over a mapped file (shared with whoever else maps it).
    pub fn mapped(mut map: memmap2::MmapMut) -> Region {
        let len = map.len();
        let base = NonNull::new(map.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Region {
            base,
            len,
            backing: Backing::Map(map),
        }
    }

    /// A region over the whole of `file`, shared with every process that maps it.
    pub fn map_file(file: &std::fs::File) -> std::io::Result<Region> {
        // SAFETY: the mapping is only ever accessed through this region: its header and
        // index words atomically, ring records and slots through grants and slot handles
        // whose protocol gives one side at a time the right to write them. Another process
        // mapping the same file can break that protocol; every length and index read from
        // the region is checked, so it can only garble message bytes, never make this
        // process access memory outside the mapping. The file is never truncated while
        // mapped (the transport sizes it once, before publishing it).
        let map = unsafe { memmap2::MmapMut::map_mut(file)? };
        Ok(Region::mapped(map))
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn in_bounds(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// The 8-byte-aligned word at `offset` as an atomic, if it lies inside the region.
    pub fn word(&self, offset: usize) -> Option<&AtomicU64> {
        if !offset.is_multiple_of(8) || !self.in_bounds(offset, 8) {
            return None;
        }
        // SAFETY: the word is inside the region (checked), 8-aligned (the region is
        // page-aligned and `offset` is a multiple of 8), lives as long as `&self`, and the
        // words handed out here are only ever accessed atomically.
        #[cfg(not(loom))]
        return Some(unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(offset).cast::<u64>()) });
        #[cfg(loom)]
        {
            let _ = offset;
            None
        }
    }

    /// Copies `data` into the region at `offset` (for headers written before anyone else
    /// maps the region). False if out of bounds.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> bool {
        if !self.in_bounds(offset, data.len()) {
            return false;
        }
        // SAFETY: in bounds (checked); `&mut self` means no grant or atomic view of this
        // region is alive in this process.
        unsafe {
            core::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.base.as_ptr().add(offset),
                data.len(),
            )
        };
        true
    }

    /// Copies bytes out of the region at `offset`. False if out of bounds.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        if !self.in_bounds(offset, out.len()) {
            return false;
        }
        // SAFETY: in bounds (checked). Used only for the region's immutable header words,
        // which are written once, before the region is shared.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        true
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Backing::Heap(layout) = self.backing {
            // SAFETY: allocated in `heap` with exactly this layout; no ring or view of the
            // region outlives it (each holds an `Arc<Region>`).
            unsafe { alloc::dealloc(self.base.as_ptr(), layout) };
        }
    }
}

/// Where a ring lies in a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingPlace {
    /// Offset of the ring header (a multiple of 64).
    pub offset: usize,
    /// Bytes of data (a power of two, at least 64).
    pub capacity: usize,
}

impl RingPlace {
    /// Bytes the ring takes, header included.
    pub fn size(&self) -> usize {
        RING_HEADER + self.capacity
    }
}

/// The state both ends of a ring share.
struct Shared {
    region: Arc<Region>,
    place: RingPlace,
    /// Under loom, the ring's atomics and a tracker per 8-byte word of data.
    #[cfg(loom)]
    indices: [AtomicU64; 2],
    trackers: Box<[Tracker]>,
}

impl Shared {
    fn new(region: Arc<Region>, place: RingPlace) -> Result<Arc<Shared>, RingError> {
        if !place.offset.is_multiple_of(64)
            || !place.capacity.is_power_of_two()
            || place.capacity < 64
        {
            return Err(RingError::Corrupt("ring geometry"));
        }
        if !region.in_bounds(place.offset, place.size()) {
            return Err(RingError::Corrupt("ring outside its region"));
        }
        let trackers = (0..if cfg!(loom) { place.capacity / 8 } else { 0 })
            .map(|_| Tracker::default())
            .collect();
        Ok(Arc::new(Shared {
            region,
            place,
            #[cfg(loom)]
            indices: [AtomicU64::new(0), AtomicU64::new(0)],
            trackers,
        }))
    }

    fn tail(&self) -> &AtomicU64 {
        #[cfg(loom)]
        return &self.indices[0];
        #[cfg(not(loom))]
        self.region.word(self.place.offset).expect("checked in new")
    }

    fn head(&self) -> &AtomicU64 {
        #[cfg(loom)]
        return &self.indices[1];
        #[cfg(not(loom))]
        self.region
            .word(self.place.offset + 64)
            .expect("checked in new")
    }

    /// Pointer to data byte `pos` (taken modulo nothing: `pos < capacity`).
    fn data(&self, pos: usize) -> *mut u8 {
        debug_assert!(pos <= self.place.capacity);
        // SAFETY: `pos <= capacity` and the data area lies inside the region (checked in
        // `new`), so the result is inside the allocation or one past its end.
        unsafe {
            self.region
                .base
                .as_ptr()
                .add(self.place.offset + RING_HEADER + pos)
        }
    }

    fn track<R>(&self, pos: usize, len: usize, write: bool, f: impl FnOnce() -> R) -> R {
        match self.trackers.get(pos / 8) {
            Some(t) if len > 0 => {
                if write {
                    t.writing(f)
                } else {
                    t.reading(f)
                }
            }
            _ => f(),
        }
    }

    fn read_header(&self, pos: usize) -> (u32, u32) {
        let mut h = [0u8; RECORD_HEADER];
        self.track(pos, RECORD_HEADER, false, || {
            // SAFETY: `pos + 8 <= capacity` (callers keep records 8-aligned inside the
            // data area), and the consumer reads only bytes the producer published before
            // its Release store of `tail`, which the consumer's Acquire load observed.
            unsafe { core::ptr::copy_nonoverlapping(self.data(pos), h.as_mut_ptr(), RECORD_HEADER) }
        });
        (
            u32::from_le_bytes(h[..4].try_into().expect("4")),
            u32::from_le_bytes(h[4..].try_into().expect("4")),
        )
    }

    fn write_header(&self, pos: usize, len: u32, tag: u32) {
        let mut h = [0u8; RECORD_HEADER];
        h[..4].copy_from_slice(&len.to_le_bytes());
        h[4..].copy_from_slice(&tag.to_le_bytes());
        self.track(pos, RECORD_HEADER, true, || {
            // SAFETY: `pos + 8 <= capacity`, and the producer writes only into space the
            // consumer released (its Release store of `head`, observed with Acquire) and
            // has not published yet, so no one else touches these bytes.
            unsafe { core::ptr::copy_nonoverlapping(h.as_ptr(), self.data(pos), RECORD_HEADER) }
        });
    }
}

fn round8(n: usize) -> usize {
    n.next_multiple_of(8)
}

/// Creates a ring's two ends over `place` in `region`. The ring must be zeroed (fresh),
/// or left in a consistent state by earlier ends.
pub fn ring(region: Arc<Region>, place: RingPlace) -> Result<(Producer, Consumer), RingError> {
    let shared = Shared::new(region, place)?;
    let tail = shared.tail().load(Ordering::Acquire);
    let head = shared.head().load(Ordering::Acquire);
    if tail.wrapping_sub(head) > place.capacity as u64 {
        return Err(RingError::Corrupt(
            "indices further apart than the capacity",
        ));
    }
    Ok((
        Producer {
            shared: shared.clone(),
            tail,
            head_seen: head,
        },
        Consumer {
            shared,
            head,
            tail_seen: tail,
        },
    ))
}

/// The producing end of a ring.
pub struct Producer {
    shared: Arc<Shared>,
    /// Bytes this end has published (or is about to): its own copy of `tail`.
    tail: u64,
    /// The consumer's `head` as last seen.
    head_seen: u64,
}

/// The consuming end of a ring.
pub struct Consumer {
    shared: Arc<Shared>,
    /// Bytes this end has released: its own copy of `head`.
    head: u64,
    /// The producer's `tail` as last seen.
    tail_seen: u64,
}

impl Producer {
    /// The largest record this ring takes.
    pub fn max_record(&self) -> usize {
        self.shared.place.capacity / 2 - RECORD_HEADER
    }

    /// Reserves room for a record of `len` bytes and returns a grant to write it in place.
    /// [`RingError::Full`] when there is no room now.
    pub fn try_reserve(&mut self, len: usize) -> Result<WriteGrant<'_>, RingError> {
        let cap = self.shared.place.capacity;
        let need = RECORD_HEADER + round8(len);
        if need > cap / 2 {
            return Err(RingError::TooLarge {
                len,
                max: self.max_record(),
            });
        }
        let pos = (self.tail % cap as u64) as usize;
        // A record never straddles the end of the data: pad to the start if it would.
        let pad = if pos + need > cap { cap - pos } else { 0 };
        let mut used = self.tail.wrapping_sub(self.head_seen);
        if used + (pad + need) as u64 > cap as u64 {
            // Acquire: the consumer is done reading what it released.
            self.head_seen = self.shared.head().load(Ordering::Acquire);
            used = self.tail.wrapping_sub(self.head_seen);
            if used > cap as u64 {
                return Err(RingError::Corrupt(
                    "consumer released more than was published",
                ));
            }
            if used + (pad + need) as u64 > cap as u64 {
                return Err(RingError::Full);
            }
        }
        if pad > 0 {
            self.shared.write_header(pos, 0, TAG_WRAP);
        }
        let at = if pad > 0 { 0 } else { pos };
        Ok(WriteGrant {
            producer: self,
            at,
            pad,
            len,
        })
    }

    /// Bytes published and not yet released by the consumer (looks at the consumer's
    /// index).
    pub fn unread(&mut self) -> usize {
        self.head_seen = self.shared.head().load(Ordering::Acquire);
        self.tail.wrapping_sub(self.head_seen) as usize
    }

    /// Bytes published so far (the ring position after the last committed record; grows
    /// without wrapping the capacity).
    pub fn published(&self) -> u64 {
        self.tail
    }

    /// Copies `data` into the ring as one record.
    pub fn try_send(&mut self, data: &[u8]) -> Result<(), RingError> {
        let mut g = self.try_reserve(data.len())?;
        let at = g.at + RECORD_HEADER;
        let shared = g.producer.shared.clone();
        shared.track(at, data.len(), true, || {
            g.as_mut_slice().copy_from_slice(data)
        });
        g.commit(data.len());
        Ok(())
    }
}

/// Room for one record, written in place and published by [`WriteGrant::commit`].
/// Dropping it publishes nothing.
pub struct WriteGrant<'a> {
    producer: &'a mut Producer,
    at: usize,
    pad: usize,
    len: usize,
}

impl WriteGrant<'_> {
    /// The record's bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `[at + 8, at + 8 + len)` lies in the data area (`try_reserve` checked the
        // record fits before the end) and in space the consumer has released and this
        // producer has not published; `&mut self` makes this the only view of it.
        unsafe {
            core::slice::from_raw_parts_mut(
                self.producer.shared.data(self.at + RECORD_HEADER),
                self.len,
            )
        }
    }

    /// Publishes the first `len` bytes as a record (`len` at most what was reserved).
    pub fn commit(self, len: usize) {
        let len = len.min(self.len);
        let p = &mut *self.producer;
        p.shared.write_header(self.at, len as u32, TAG_DATA);
        p.tail = p
            .tail
            .wrapping_add((self.pad + RECORD_HEADER + round8(len)) as u64);
        // Release: the record (and any wrap marker) is written before the consumer can
        // see the new tail.
        p.shared.tail().store(p.tail, Ordering::Release);
    }
}

impl Consumer {
    /// The next record, as a view in place; released when the grant is dropped.
    /// [`RingError::Empty`] when there is none now.
    pub fn try_read(&mut self) -> Result<ReadGrant<'_>, RingError> {
        let cap = self.shared.place.capacity as u64;
        loop {
            if self.head == self.tail_seen {
                // Acquire: the record bytes written before the producer's Release store of
                // `tail` are visible.
                self.tail_seen = self.shared.tail().load(Ordering::Acquire);
                if self.head == self.tail_seen {
                    return Err(RingError::Empty);
                }
            }
            let avail = self.tail_seen.wrapping_sub(self.head);
            if avail > cap || avail < RECORD_HEADER as u64 || !self.head.is_multiple_of(8) {
                return Err(RingError::Corrupt("indices"));
            }
            let pos = (self.head % cap) as usize;
            let (len, tag) = self.shared.read_header(pos);
            if tag == TAG_WRAP {
                let skip = cap - pos as u64;
                if skip > avail {
                    return Err(RingError::Corrupt("wrap marker past the tail"));
                }
                self.release(skip);
                continue;
            }
            let size = (RECORD_HEADER + round8(len as usize)) as u64;
            if tag != TAG_DATA || size > avail || pos as u64 + size > cap {
                return Err(RingError::Corrupt("record header"));
            }
            return Ok(ReadGrant {
                consumer: self,
                at: pos,
                len: len as usize,
                size,
            });
        }
    }

    /// Copies the next record into `out` (replacing its contents); returns its length.
    pub fn try_recv(&mut self, out: &mut Vec<u8>) -> Result<usize, RingError> {
        let g = self.try_read()?;
        out.clear();
        let at = g.at + RECORD_HEADER;
        g.consumer
            .shared
            .track(at, g.len, false, || out.extend_from_slice(g.as_slice()));
        Ok(g.len)
    }

    /// Bytes released so far (the ring position after the last record read and dropped;
    /// comparable with [`Producer::published`]).
    pub fn released(&self) -> u64 {
        self.head
    }

    fn release(&mut self, bytes: u64) {
        self.head = self.head.wrapping_add(bytes);
        // Release: this end is done reading the bytes before the new head.
        self.shared.head().store(self.head, Ordering::Release);
    }
}

/// A record in place; dropping it hands its space back to the producer.
pub struct ReadGrant<'a> {
    consumer: &'a mut Consumer,
    at: usize,
    len: usize,
    size: u64,
}

impl ReadGrant<'_> {
    /// The record's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `[at + 8, at + 8 + len)` lies in the data area (the header was checked
        // against the capacity and the published bytes) and was published by the
        // producer's Release store observed with Acquire; the producer will not write it
        // again before this grant releases it.
        unsafe {
            core::slice::from_raw_parts(
                self.consumer.shared.data(self.at + RECORD_HEADER),
                self.len,
            )
        }
    }

    /// Length of the record.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the record is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for ReadGrant<'_> {
    fn drop(&mut self) {
        let size = self.size;
        self.consumer.release(size);
    }
}

/// Equal slots in a region: the registered memory of a shared-memory endpoint. Each slot
/// is either claimed by one writer ([`SlotMut`]) or viewed by readers ([`SlotView`]) in
/// this process, never both: the handles check it, so a bug in the protocol above is an
/// error (`None`), not aliasing. An area made with [`SlotArea::read_only`] (the peer's
/// slots) is never claimed in this process, so its views need no counting.
pub struct SlotArea {
    region: Arc<Region>,
    offset: usize,
    slot_len: usize,
    /// Per slot: 0 free, `u32::MAX` claimed for writing, else the number of views.
    users: Box<[std::sync::atomic::AtomicU32]>,
    /// No slot is ever claimed: views are not counted.
    read_only: bool,
}

const CLAIMED: u32 = u32::MAX;

impl SlotArea {
    /// `count` slots of `slot_len` bytes from `offset` in `region`.
    pub fn new(
        region: Arc<Region>,
        offset: usize,
        slot_len: usize,
        count: usize,
    ) -> Result<Arc<SlotArea>, RingError> {
        let total = slot_len
            .checked_mul(count)
            .ok_or(RingError::Corrupt("slot area size"))?;
        if !region.in_bounds(offset, total) {
            return Err(RingError::Corrupt("slot area outside its region"));
        }
        Ok(Arc::new(SlotArea {
            region,
            offset,
            slot_len,
            users: (0..count)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            read_only: false,
        }))
    }

    /// Like [`SlotArea::new`], for slots this process only reads (another process writes
    /// them): [`SlotArea::claim`] always refuses, so a view needs no count.
    pub fn read_only(
        region: Arc<Region>,
        offset: usize,
        slot_len: usize,
        count: usize,
    ) -> Result<Arc<SlotArea>, RingError> {
        let area = SlotArea::new(region, offset, slot_len, count)?;
        let mut area = Arc::into_inner(area).ok_or(RingError::Corrupt("slot area shared"))?;
        area.read_only = true;
        Ok(Arc::new(area))
    }

    /// The region the slots lie in.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Slots in the area.
    pub fn count(&self) -> usize {
        self.users.len()
    }

    /// Bytes of each slot.
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    fn ptr(&self, index: usize, at: usize) -> *mut u8 {
        debug_assert!(index < self.count() && at <= self.slot_len);
        // SAFETY: `index < count` and `at <= slot_len` (checked by the callers), so the
        // result lies in the area, which `new` checked lies inside the region.
        unsafe {
            self.region
                .base
                .as_ptr()
                .add(self.offset + index * self.slot_len + at)
        }
    }

    /// Slot `index` to write, if no other handle of this process has it.
    pub fn claim(self: &Arc<SlotArea>, index: usize) -> Option<SlotMut> {
        if self.read_only {
            return None;
        }
        let users = self.users.get(index)?;
        users
            .compare_exchange(
                0,
                CLAIMED,
                std::sync::atomic::Ordering::Acquire,
                std::sync::atomic::Ordering::Relaxed,
            )
            .ok()?;
        Some(SlotMut {
            area: self.clone(),
            index,
        })
    }

    /// `len` bytes from `at` of slot `index` to read, if inside the slot and no writer of
    /// this process has it.
    pub fn view(self: &Arc<SlotArea>, index: usize, at: usize, len: usize) -> Option<SlotView> {
        let users = self.users.get(index)?;
        if at.checked_add(len).is_none_or(|end| end > self.slot_len) {
            return None;
        }
        if !self.read_only {
            users
                .fetch_update(
                    std::sync::atomic::Ordering::Acquire,
                    std::sync::atomic::Ordering::Relaxed,
                    |n| (n < CLAIMED - 1).then(|| n + 1),
                )
                .ok()?;
        }
        Some(SlotView {
            area: self.clone(),
            index,
            at,
            len,
        })
    }
}

/// A slot of a [`SlotArea`] this process writes; released (locally) on drop.
pub struct SlotMut {
    area: Arc<SlotArea>,
    index: usize,
}

impl SlotMut {
    /// Which slot.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The area it belongs to.
    pub fn area(&self) -> &Arc<SlotArea> {
        &self.area
    }

    /// The slot's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the slot lies in the region (`SlotArea::new`), and this handle is its
        // only one in this process (`claim` swapped 0 for CLAIMED), so no `&mut` to it
        // exists while `&self` is borrowed.
        unsafe { core::slice::from_raw_parts(self.area.ptr(self.index, 0), self.area.slot_len) }
    }

    /// The slot's bytes, to write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only reference to the
        // slot's bytes in this process.
        unsafe { core::slice::from_raw_parts_mut(self.area.ptr(self.index, 0), self.area.slot_len) }
    }
}

impl Drop for SlotMut {
    fn drop(&mut self) {
        self.area.users[self.index].store(0, std::sync::atomic::Ordering::Release);
    }
}

/// Bytes of a slot of a [`SlotArea`] this process reads.
pub struct SlotView {
    area: Arc<SlotArea>,
    index: usize,
    at: usize,
    len: usize,
}

impl SlotView {
    /// Which slot.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The area it belongs to.
    pub fn area(&self) -> &Arc<SlotArea> {
        &self.area
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `[at, at + len)` lies in the slot (checked in `view`) and so in the
        // region; no writer handle of this process exists while this view does (`view`
        // counted it in and `claim` waits for zero; or the area is read-only and `claim`
        // never hands out a writer).
        unsafe { core::slice::from_raw_parts(self.area.ptr(self.index, self.at), self.len) }
    }
}

impl Drop for SlotView {
    fn drop(&mut self) {
        if !self.area.read_only {
            self.area.users[self.index].fetch_sub(1, std::sync::atomic::Ordering::Release);
        }
    }
}

#[cfg(all(test, not(loom)))]
#[path = "raw_tests.rs"]
mod tests;

#[cfg(all(test, loom))]
#[path = "raw_loom_tests.rs"]
mod loom_tests;
