//! Host memory for DMA: one region addressed by bus address, shared by the host program
//! and the board's DMA controller (seed 000, Buffers; DESIGN.md, device).
//!
//! The region is cut into pages, and every page has one owner at a time:
//!
//! | state    | who may touch the bytes                                                  |
//! |----------|--------------------------------------------------------------------------|
//! | `Free`   | nobody                                                                   |
//! | `Host`   | the one [`HostBuf`] that claimed it                                      |
//! | `Device` | the DMA controller, one access at a time (`Busy` during it)              |
//! | `Shared` | both, but only with 32-bit atomic loads and stores                       |
//! | `Lent`   | read only: the host through its [`LentBuf`], the board by any number of concurrent DMA reads; nobody writes |
//!
//! A lent buffer ([`HostBuf::lend`]) is how a reliable protocol keeps a message it may
//! send again without copying it: the host reads it (a CRC, a retransmission) while the
//! board DMAs copies of it out. The board holds a [`LentRead`] for the time of its
//! transfers; the host gets the buffer back for writing ([`LentBuf::try_unlend`]) only
//! once no `LentRead` is left and no DMA read is in flight on its pages. A `LentBuf`
//! dropped while readers remain leaves the pages lent; they become `Free` when the last
//! reader (and the last transfer in flight) is gone.
//!
//! Ownership moves only by publishing a new page state: the host hands a buffer to the
//! board with a Release store ([`HostBuf::to_device`]) before it publishes the queue entry
//! that names it, and takes it back with an Acquire compare-exchange
//! ([`DeviceBuf::reclaim`]) after the board has published that it is done. The DMA
//! controller checks the state of every page it touches ([`HostMemory::dma_read`],
//! [`HostMemory::dma_write`]): an address from SRAM that is out of range or names a page
//! the device does not own is a [`DmaFault`], not a data race. A DMA read of lent pages
//! pins each of them for the time of the transfer (a count in the page's state word), so
//! even a read the board makes without holding a [`LentRead`] can never overlap the host's
//! writes after it takes the buffer back.
//!
//! This is the only module of the crate with `unsafe` code. Every block carries a
//! `// SAFETY:` note; the handoff is model-checked with loom (`--cfg loom`) and the
//! module's tests run under Miri.

#![allow(unsafe_code)]

mod lend;
mod sync;

pub use lend::{LentBuf, LentRead};

use crate::dma::checksum::{PieceSum, copy_summing};
use core::fmt;
use core::ptr::NonNull;
use std::alloc::{self, Layout};
use std::sync::atomic::AtomicU32;
use sync::{AccessTracker, Arc, AtomicUsize, Ordering, spin};
use thiserror::Error;

// A page's state word: the state in the low byte; for `LENT` and `DRAINING` the number of
// DMA reads in flight on the page above it (in units of `PIN`). Every other state has no
// pins, so its word is just the state.
const FREE: usize = 0;
const HOST: usize = 1;
const DEVICE: usize = 2;
const BUSY: usize = 3;
const SHARED: usize = 4;
/// Lent by a live `LentBuf` or `LentRead`.
const LENT: usize = 5;
/// Was lent; its `LentBuf` and every `LentRead` are gone, and the last DMA read still in
/// flight frees it. No new transfer may start on it.
const DRAINING: usize = 6;
const STATE_MASK: usize = 0xFF;
const PIN: usize = 1 << 8;

fn state_of(word: usize) -> usize {
    word & STATE_MASK
}

fn pins_of(word: usize) -> usize {
    word >> 8
}

/// Who owns a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Nobody.
    Free,
    /// A [`HostBuf`].
    Host,
    /// The board, idle.
    Device,
    /// The board, in the middle of a DMA.
    Busy,
    /// Both sides, atomically.
    Shared,
    /// Lent for reading: the host reads through a [`LentBuf`], the board by DMA reads.
    Lent,
}

impl Owner {
    fn from_state(word: usize) -> Owner {
        match state_of(word) {
            FREE => Owner::Free,
            HOST => Owner::Host,
            DEVICE => Owner::Device,
            BUSY => Owner::Busy,
            SHARED => Owner::Shared,
            _ => Owner::Lent,
        }
    }
}

/// A refused host-side operation on host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HostMemError {
    /// The region's geometry is impossible.
    #[error("invalid host memory layout: {0}")]
    Layout(&'static str),
    /// A range outside the region.
    #[error("range of {len} bytes at offset {offset:#x} is outside the {size:#x}-byte region")]
    OutOfRange {
        /// Start of the range.
        offset: usize,
        /// Length of the range.
        len: usize,
        /// Size of the region.
        size: usize,
    },
    /// A range that does not start on a page boundary.
    #[error("offset {offset:#x} is not on a {page_size}-byte page boundary")]
    Unaligned {
        /// Start of the range.
        offset: usize,
        /// Page size.
        page_size: usize,
    },
    /// A zero-length range.
    #[error("empty range")]
    Empty,
    /// A page that is not free.
    #[error("page {page} is already in use ({owner:?})")]
    InUse {
        /// Page index.
        page: usize,
        /// Its owner.
        owner: Owner,
    },
    /// A shared-word access not aligned to 4 bytes or outside the shared range.
    #[error("shared word access at byte {offset:#x} is unaligned or out of range")]
    BadWord {
        /// Byte offset in the shared range.
        offset: usize,
    },
}

/// A DMA the controller could not perform on host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DmaFault {
    /// The bus address range is not inside the region.
    #[error("bus address {bus:#x}+{len} is outside host memory")]
    OutOfRange {
        /// Bus address.
        bus: u64,
        /// Length.
        len: usize,
    },
    /// A page in the range is not the device's to touch.
    #[error("bus address {bus:#x}: page {page} is owned by {owner:?}, not the device")]
    NotDeviceOwned {
        /// Bus address of the transfer.
        bus: u64,
        /// Offending page.
        page: usize,
        /// Its owner.
        owner: Owner,
    },
    /// A transfer into shared (poll-word) memory that is not whole aligned 32-bit words.
    #[error("bus address {bus:#x}+{len} into shared memory is not whole aligned words")]
    SharedUnaligned {
        /// Bus address.
        bus: u64,
        /// Length.
        len: usize,
    },
}

struct Page {
    /// The state word (see `LENT`).
    state: AtomicUsize,
    /// On the first page of a lent buffer: 1 while its `LentBuf` lives, plus one per
    /// live `LentRead`. Unused otherwise.
    lenders: AtomicUsize,
    tracker: AccessTracker,
}

/// The DMA region. Create it with [`HostMemory::new`]; share it with `Arc`.
pub struct HostMemory {
    base: u64,
    len: usize,
    page_shift: u32,
    bytes: NonNull<u8>,
    layout: Layout,
    pages: Box<[Page]>,
}

// SAFETY: the region's bytes are only read or written under the page-ownership protocol
// described in the module documentation (exclusive `HostBuf`, device access under `Busy`,
// atomic access to `Shared` pages, only reads of `Lent` pages), so sharing the handle between threads cannot create a
// data race; the remaining fields are immutable or atomic.
unsafe impl Send for HostMemory {}
// SAFETY: as for `Send`.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// A zeroed region of `len` bytes at bus address `base`, with `page_size`-byte pages.
    ///
    /// `page_size` is a power of two of at least 64 bytes; `len` a non-zero multiple of it;
    /// `base` page-aligned, and `base + len` must not overflow.
    pub fn new(base: u64, len: usize, page_size: usize) -> Result<Arc<HostMemory>, HostMemError> {
        if !page_size.is_power_of_two() || page_size < 64 {
            return Err(HostMemError::Layout(
                "page size must be a power of two of at least 64",
            ));
        }
        if len == 0 || !len.is_multiple_of(page_size) {
            return Err(HostMemError::Layout(
                "length must be a non-zero multiple of the page size",
            ));
        }
        if !base.is_multiple_of(page_size as u64) || base.checked_add(len as u64).is_none() {
            return Err(HostMemError::Layout(
                "base must be page-aligned and base + len must fit in 64 bits",
            ));
        }
        let layout = Layout::from_size_align(len, page_size.max(64))
            .map_err(|_| HostMemError::Layout("length too large"))?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(bytes) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        let pages = (0..len / page_size)
            .map(|_| Page {
                state: AtomicUsize::new(FREE),
                lenders: AtomicUsize::new(0),
                tracker: AccessTracker::default(),
            })
            .collect();
        Ok(Arc::new(HostMemory {
            base,
            len,
            page_shift: page_size.trailing_zeros(),
            bytes,
            layout,
            pages,
        }))
    }

    /// Bus address of the first byte.
    pub fn bus_base(&self) -> u64 {
        self.base
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a region has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        1 << self.page_shift
    }

    /// Who owns the page holding byte `offset` (for diagnostics).
    pub fn owner(&self, offset: usize) -> Option<Owner> {
        self.pages
            .get(offset >> self.page_shift)
            .map(|p| Owner::from_state(p.state.load(Ordering::Acquire)))
    }

    fn pages_of(&self, offset: usize, len: usize) -> core::ops::Range<usize> {
        (offset >> self.page_shift)..((offset + len - 1) >> self.page_shift) + 1
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), HostMemError> {
        if len == 0 {
            return Err(HostMemError::Empty);
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => {
                return Err(HostMemError::OutOfRange {
                    offset,
                    len,
                    size: self.len,
                });
            }
        }
        if offset & (self.page_size() - 1) != 0 {
            return Err(HostMemError::Unaligned {
                offset,
                page_size: self.page_size(),
            });
        }
        Ok(())
    }

    /// Moves every page of `[offset, offset + len)` from `Free` to `to`, or none of them.
    fn take_free_pages(&self, offset: usize, len: usize, to: usize) -> Result<(), HostMemError> {
        self.check_range(offset, len)?;
        let pages = self.pages_of(offset, len);
        for p in pages.clone() {
            // Acquire: whatever the previous owner wrote before freeing the page is visible
            // to the new owner.
            if let Err(state) =
                self.pages[p]
                    .state
                    .compare_exchange(FREE, to, Ordering::Acquire, Ordering::Relaxed)
            {
                for q in pages.start..p {
                    self.pages[q].state.store(FREE, Ordering::Release);
                }
                return Err(HostMemError::InUse {
                    page: p,
                    owner: Owner::from_state(state),
                });
            }
        }
        Ok(())
    }

    /// Claims `[offset, offset + len)` for the host. `offset` must be page-aligned; whole
    /// pages are claimed (the tail of the last page stays unused).
    pub fn claim(self: &Arc<Self>, offset: usize, len: usize) -> Result<HostBuf, HostMemError> {
        self.take_free_pages(offset, len, HOST)?;
        Ok(HostBuf {
            mem: Arc::clone(self),
            offset,
            len,
        })
    }

    /// Makes `[offset, offset + len)` shared memory for poll words. Shared pages stay
    /// shared for the life of the region (the device may write them at any time).
    pub fn share(self: &Arc<Self>, offset: usize, len: usize) -> Result<SharedWords, HostMemError> {
        if !len.is_multiple_of(4) {
            return Err(HostMemError::BadWord { offset: len });
        }
        self.take_free_pages(offset, len, SHARED)?;
        Ok(SharedWords {
            mem: Arc::clone(self),
            offset,
            len,
        })
    }

    /// Translates a bus address range to an offset range, checked.
    fn offset_of(&self, bus: u64, len: usize) -> Result<usize, DmaFault> {
        let fault = DmaFault::OutOfRange { bus, len };
        let offset = bus.checked_sub(self.base).ok_or(fault)?;
        let end = offset.checked_add(len as u64).ok_or(fault)?;
        if end > self.len as u64 {
            return Err(fault);
        }
        Ok(offset as usize)
    }

    /// Starts a device transfer on every page it touches: device-owned pages become
    /// `Busy`, lent pages (reads only) get one more pin, shared pages stay as they are. If
    /// a page refuses, undoes what it did on the pages before and faults.
    fn begin_device_access(
        &self,
        bus: u64,
        offset: usize,
        len: usize,
        write: bool,
    ) -> Result<(), DmaFault> {
        let pages = self.pages_of(offset, len);
        for p in pages.clone() {
            let state = &self.pages[p].state;
            // A shared page stays shared for the life of the region: a load tells it, with
            // no read-modify-write (the poll words every completion writes are on one).
            let mut word = state.load(Ordering::Relaxed);
            let refused = loop {
                let result = match state_of(word) {
                    SHARED => {
                        let in_page = p << self.page_shift;
                        let seg_start = offset.max(in_page);
                        let seg_end = (offset + len).min(in_page + self.page_size());
                        if seg_start.is_multiple_of(4) && (seg_end - seg_start).is_multiple_of(4) {
                            break None;
                        }
                        self.end_device_access(pages.start, p);
                        return Err(DmaFault::SharedUnaligned { bus, len });
                    }
                    // Acquire: the host's writes before its Release hand-over are visible
                    // here.
                    DEVICE => {
                        state.compare_exchange(DEVICE, BUSY, Ordering::Acquire, Ordering::Relaxed)
                    }
                    // A pin keeps the page lent (neither taken back nor freed) until the
                    // transfer's Release unpin. Acquire: the host's writes before it lent
                    // the buffer are visible here.
                    LENT if !write => state.compare_exchange(
                        word,
                        word + PIN,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ),
                    _ => break Some(Owner::from_state(word)),
                };
                match result {
                    Ok(_) => break None,
                    Err(now) => word = now,
                }
            };
            if let Some(owner) = refused {
                self.end_device_access(pages.start, p);
                return Err(DmaFault::NotDeviceOwned {
                    bus,
                    page: p,
                    owner,
                });
            }
        }
        Ok(())
    }

    /// Ends a device transfer on pages `[from, to)`, all of which it started: `Busy`
    /// pages go back to `Device`, lent pages lose the transfer's pin.
    fn end_device_access(&self, from: usize, to: usize) {
        for p in from..to {
            let state = &self.pages[p].state;
            match state_of(state.load(Ordering::Relaxed)) {
                // A `Busy` page is this access's alone (the host's reclaim and every other
                // device access leave a `Busy` page alone), so a store hands it back.
                // Release: the device's writes to the page happen-before the host's
                // Acquire reclaim.
                BUSY => state.store(DEVICE, Ordering::Release),
                LENT | DRAINING => self.unpin(p),
                // Shared pages were never made `Busy`.
                _ => {}
            }
        }
    }

    /// Takes one pin off lent page `p`; the last pin of a draining page frees it.
    fn unpin(&self, p: usize) {
        let state = &self.pages[p].state;
        let mut word = state.load(Ordering::Relaxed);
        loop {
            debug_assert!(pins_of(word) > 0, "unpinning a page with no pin");
            let next = if state_of(word) == DRAINING && pins_of(word) == 1 {
                FREE
            } else {
                word - PIN
            };
            // Release: this transfer's reads happen-before the host's Acquire take-back
            // (or the next claim of a freed page). Acquire: so do the reads of the
            // transfers that unpinned before, when this one frees the page.
            match state.compare_exchange(word, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => word = now,
            }
        }
    }

    /// Runs `copy(region_offset, request_offset, len, shared)` for each page-sized piece
    /// of a device transfer, inside the page's access tracker.
    fn for_each_segment(
        &self,
        offset: usize,
        len: usize,
        write: bool,
        mut copy: impl FnMut(usize, usize, usize, bool),
    ) {
        let mut done = 0;
        while done < len {
            let at = offset + done;
            let page = at >> self.page_shift;
            let seg = (self.page_size() - (at & (self.page_size() - 1))).min(len - done);
            let p = &self.pages[page];
            let shared = state_of(p.state.load(Ordering::Relaxed)) == SHARED;
            if write {
                p.tracker.writing(|| copy(at, done, seg, shared));
            } else {
                p.tracker.reading(|| copy(at, done, seg, shared));
            }
            done += seg;
        }
    }

    /// The DMA controller reads host memory (host → LANai) into `dst`. Returns the 16-bit
    /// ones-complement sum of the bytes moved ([`crate::dma::checksum`]), computed as they
    /// are copied, in one pass.
    ///
    /// Device-owned pages are `Busy` for the transfer; lent pages ([`LentBuf`]) are read
    /// in place, concurrently with other reads of them and with the host's.
    pub fn dma_read(&self, bus: u64, dst: &mut [u8]) -> Result<u16, DmaFault> {
        if dst.is_empty() {
            return Ok(0);
        }
        let offset = self.offset_of(bus, dst.len())?;
        self.begin_device_access(bus, offset, dst.len(), false)?;
        let base = self.bytes.as_ptr();
        let mut sum = PieceSum::default();
        self.for_each_segment(offset, dst.len(), false, |at, done, seg, shared| {
            let out = &mut dst[done..done + seg];
            if shared {
                for (w, word_out) in out.chunks_exact_mut(4).enumerate() {
                    // SAFETY: `at + 4 * w` is inside the region and 4-aligned (checked in
                    // `begin_device_access`; the region is page-aligned), and shared pages
                    // are only ever accessed with 32-bit atomics.
                    let word = unsafe { AtomicU32::from_ptr(base.add(at + 4 * w).cast::<u32>()) };
                    word_out.copy_from_slice(&word.load(Ordering::Acquire).to_ne_bytes());
                }
                sum.add_bytes(done, out);
            } else {
                // SAFETY: `[at, at + seg)` is inside the region (`offset_of`), and nothing
                // writes it while this shared view lives: either its page is `Busy` (no
                // `HostBuf` can reach it and no other device access runs), or it is lent
                // and pinned by this transfer (no `HostBuf` exists for it, device writes
                // fault, and it can be neither taken back nor freed while pinned; the
                // host's `LentBuf` and other transfers only read it). `out` is a distinct
                // Rust buffer.
                let from = unsafe { core::slice::from_raw_parts(base.add(at), seg) };
                sum.add(done, copy_summing(out, from));
            }
        });
        let pages = self.pages_of(offset, dst.len());
        self.end_device_access(pages.start, pages.end);
        Ok(sum.value())
    }

    /// The DMA controller writes `src` into host memory (LANai → host). Returns the
    /// ones-complement sum of the bytes moved, computed as they are copied. Lent pages
    /// are read-only: a write to one faults with [`Owner::Lent`].
    pub fn dma_write(&self, bus: u64, src: &[u8]) -> Result<u16, DmaFault> {
        if src.is_empty() {
            return Ok(0);
        }
        let offset = self.offset_of(bus, src.len())?;
        self.begin_device_access(bus, offset, src.len(), true)?;
        let base = self.bytes.as_ptr();
        let mut sum = PieceSum::default();
        self.for_each_segment(offset, src.len(), true, |at, done, seg, shared| {
            let from = &src[done..done + seg];
            if shared {
                for (w, bytes) in from.chunks_exact(4).enumerate() {
                    let value = u32::from_ne_bytes(bytes.try_into().expect("4 bytes"));
                    // SAFETY: as in `dma_read`: in range, 4-aligned, atomics only.
                    let word = unsafe { AtomicU32::from_ptr(base.add(at + 4 * w).cast::<u32>()) };
                    word.store(value, Ordering::Release);
                }
                sum.add_bytes(done, from);
            } else {
                // SAFETY: as in `dma_read`; the page is `Busy`, so this exclusive view is the
                // only access to `[at, at + seg)` while it lives.
                let out = unsafe { core::slice::from_raw_parts_mut(base.add(at), seg) };
                sum.add(done, copy_summing(out, from));
            }
        });
        let pages = self.pages_of(offset, src.len());
        self.end_device_access(pages.start, pages.end);
        Ok(sum.value())
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: `bytes` was allocated in `new` with exactly `layout`, and no `HostBuf`,
        // `DeviceBuf`, `LentBuf`, `LentRead` or `SharedWords` outlives the region (each holds an `Arc` to it).
        unsafe { alloc::dealloc(self.bytes.as_ptr(), self.layout) };
    }
}

impl fmt::Debug for HostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostMemory")
            .field("base", &format_args!("{:#x}", self.base))
            .field("len", &self.len)
            .field("page_size", &self.page_size())
            .finish()
    }
}

/// A host-owned buffer in host memory: the host may read and write it; the board may not.
pub struct HostBuf {
    mem: Arc<HostMemory>,
    offset: usize,
    len: usize,
}

impl HostBuf {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes (never: claims are non-empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset in the region.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Bus address of the first byte, as the board's DMA controller names it.
    pub fn bus_addr(&self) -> u64 {
        self.mem.base + self.offset as u64
    }

    /// The region this buffer lives in.
    pub fn memory(&self) -> &Arc<HostMemory> {
        &self.mem
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the pages of `[offset, offset + len)` are `Host` and this `HostBuf` is
        // their only owner (claims are exclusive and `HostBuf` is neither `Clone` nor
        // `Copy`); the device never touches `Host` pages. The range is inside the region.
        unsafe { core::slice::from_raw_parts(self.mem.bytes.as_ptr().add(self.offset), self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only live reference.
        unsafe {
            core::slice::from_raw_parts_mut(self.mem.bytes.as_ptr().add(self.offset), self.len)
        }
    }

    /// Runs `f` on the bytes while telling loom about the access (same as `as_slice`
    /// without loom).
    pub fn with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let first = self.offset >> self.mem.page_shift;
        self.mem.pages[first].tracker.reading(|| f(self.as_slice()))
    }

    /// Runs `f` on the writable bytes while telling loom about the access.
    pub fn with_mut<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let first = self.offset >> self.mem.page_shift;
        let mem = Arc::clone(&self.mem);
        mem.pages[first].tracker.writing(|| f(self.as_mut_slice()))
    }

    /// Hands the buffer to the board. Call this before publishing the queue entry that
    /// names the buffer: the Release store makes the host's writes visible to the DMA.
    pub fn to_device(self) -> DeviceBuf {
        let this = core::mem::ManuallyDrop::new(self);
        for p in this.mem.pages_of(this.offset, this.len) {
            this.mem.pages[p].state.store(DEVICE, Ordering::Release);
        }
        // SAFETY: `this` is never used or dropped again; moving the `Arc` out once is fine.
        let mem = unsafe { core::ptr::read(&this.mem) };
        DeviceBuf {
            mem,
            offset: this.offset,
            len: this.len,
        }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        for p in self.mem.pages_of(self.offset, self.len) {
            self.mem.pages[p].state.store(FREE, Ordering::Release);
        }
    }
}

impl fmt::Debug for HostBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuf({:#x}+{})", self.bus_addr(), self.len)
    }
}

/// A buffer the board owns: the host holds this token but cannot touch the bytes until
/// it [reclaims](DeviceBuf::reclaim) it.
pub struct DeviceBuf {
    mem: Arc<HostMemory>,
    offset: usize,
    len: usize,
}

impl DeviceBuf {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset in the region.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Bus address of the first byte.
    pub fn bus_addr(&self) -> u64 {
        self.mem.base + self.offset as u64
    }

    /// The region this buffer lives in.
    pub fn memory(&self) -> &Arc<HostMemory> {
        &self.mem
    }

    /// Takes the buffer back. Call this only after the board has published that it is
    /// done with it; if a DMA is touching it at this instant, waits for that DMA to end.
    pub fn reclaim(self) -> HostBuf {
        let this = core::mem::ManuallyDrop::new(self);
        this.take_pages(HOST);
        // SAFETY: `this` is never used or dropped again; moving the `Arc` out once is fine.
        let mem = unsafe { core::ptr::read(&this.mem) };
        HostBuf {
            mem,
            offset: this.offset,
            len: this.len,
        }
    }

    fn take_pages(&self, to: usize) {
        for p in self.mem.pages_of(self.offset, self.len) {
            let state = &self.mem.pages[p].state;
            loop {
                // Acquire: the device's writes, published by its Release at the end of the
                // DMA, are visible to the host from here on.
                match state.compare_exchange_weak(DEVICE, to, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(BUSY) | Err(DEVICE) => spin(),
                    Err(_) => {
                        // Only this token and the device move these pages, and the device
                        // only between Device and Busy: any other state is impossible.
                        debug_assert!(false, "device-owned page in an impossible state");
                        state.store(to, Ordering::Release);
                        break;
                    }
                }
            }
        }
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        self.take_pages(FREE);
    }
}

impl fmt::Debug for DeviceBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceBuf({:#x}+{})", self.bus_addr(), self.len)
    }
}

/// Shared pages holding 32-bit poll words that the board DMAs into and the host polls.
/// Clones are further views of the same words (shared pages are only ever accessed with
/// 32-bit atomics, and stay shared for the life of the region).
#[derive(Clone)]
pub struct SharedWords {
    mem: Arc<HostMemory>,
    offset: usize,
    len: usize,
}

impl SharedWords {
    /// Bus address of the first word.
    pub fn bus_addr(&self) -> u64 {
        self.mem.base + self.offset as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn word(&self, byte_offset: usize) -> Result<&AtomicU32, HostMemError> {
        if !byte_offset.is_multiple_of(4)
            || byte_offset.checked_add(4).is_none_or(|end| end > self.len)
        {
            return Err(HostMemError::BadWord {
                offset: byte_offset,
            });
        }
        // SAFETY: the word is inside this shared range (checked), 4-aligned (the range is
        // page-aligned), lives as long as `self.mem`, and shared pages are only ever
        // accessed with 32-bit atomics.
        Ok(unsafe {
            AtomicU32::from_ptr(
                self.mem
                    .bytes
                    .as_ptr()
                    .add(self.offset + byte_offset)
                    .cast::<u32>(),
            )
        })
    }

    /// Loads the big-endian word at `byte_offset` (Acquire: what the board wrote before it
    /// is visible after).
    #[inline]
    pub fn load_be(&self, byte_offset: usize) -> Result<u32, HostMemError> {
        Ok(u32::from_be_bytes(
            self.word(byte_offset)?
                .load(Ordering::Acquire)
                .to_ne_bytes(),
        ))
    }

    /// Stores a big-endian word at `byte_offset` (Release).
    pub fn store_be(&self, byte_offset: usize, value: u32) -> Result<(), HostMemError> {
        self.word(byte_offset)?
            .store(u32::from_ne_bytes(value.to_be_bytes()), Ordering::Release);
        Ok(())
    }
}

impl fmt::Debug for SharedWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedWords({:#x}+{})", self.bus_addr(), self.len)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
