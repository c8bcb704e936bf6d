//! Read-lending of host buffers: the `Lent` page state (module documentation of
//! [`super`]).
//!
//! A [`LentBuf`] is the host's side: it reads the bytes and is the only way back to a
//! writable [`HostBuf`]. A [`LentRead`] is the board's side: it holds one while its
//! transfers from the buffer may run. The first page of a lent buffer counts both (`1` for
//! the `LentBuf`, one per `LentRead`) in a loom-visible atomic: the board's Release when a
//! `LentRead` drops and the host's Acquire in [`LentBuf::try_unlend`] order the board's
//! last read before the host's first write. Each DMA read also pins the pages it reads
//! (`super::HostMemory::dma_read`), so the take-back cannot overlap even a transfer the
//! board started without a `LentRead`.

use super::sync::{Arc, AtomicUsize, Ordering};
use super::{DRAINING, FREE, HOST, HostBuf, HostMemory, LENT, PIN, STATE_MASK, pins_of, state_of};
use core::fmt;
use core::mem::ManuallyDrop;

impl HostBuf {
    /// Lends the buffer for reading: the host keeps read access; the board may read it by
    /// DMA (any number of transfers at once) while a [`LentRead`] lives; nobody writes it
    /// until [`LentBuf::try_unlend`] gives the `HostBuf` back.
    ///
    /// The Release store of the pages' new state makes the host's writes visible to the
    /// board's DMA reads.
    pub fn lend(self) -> LentBuf {
        let this = ManuallyDrop::new(self);
        let pages = this.mem.pages_of(this.offset, this.len);
        // Only this buffer's `LentBuf` and `LentRead`s use the count, and none exists yet.
        this.mem.pages[pages.start]
            .lenders
            .store(1, Ordering::Relaxed);
        for p in pages {
            this.mem.pages[p].state.store(LENT, Ordering::Release);
        }
        // SAFETY: `this` is never used or dropped again; moving the `Arc` out once is fine.
        let mem = unsafe { core::ptr::read(&this.mem) };
        LentBuf {
            mem,
            offset: this.offset,
            len: this.len,
        }
    }
}

/// A host buffer lent for reading ([`HostBuf::lend`]): the host reads it, the board may
/// DMA-read it while it holds a [`LentRead`], nobody writes it.
///
/// Dropping it while readers remain leaves the pages lent; they become free when the last
/// [`LentRead`] (and the last DMA read in flight on them) is gone.
pub struct LentBuf {
    mem: Arc<HostMemory>,
    offset: usize,
    len: usize,
}

impl LentBuf {
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

    /// The bytes, read-only while lent.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the range is inside the region (it was claimed), and its pages stay
        // `Lent` while this `LentBuf` lives (only `try_unlend` and `drop`, which take it by
        // value, move them on). Nobody writes lent pages: no `HostBuf` exists for them and
        // device writes to them fault; the board's DMA and other views only read them.
        unsafe { core::slice::from_raw_parts(self.mem.bytes.as_ptr().add(self.offset), self.len) }
    }

    /// Runs `f` on the bytes while telling loom about the access (same as `as_slice`
    /// without loom).
    pub fn with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let first = self.offset >> self.mem.page_shift;
        self.mem.pages[first].tracker.reading(|| f(self.as_slice()))
    }

    /// A token the board holds for the time of its transfers from this buffer.
    pub fn reader(&self) -> LentRead {
        // Relaxed, as for `Arc::clone`: the count is at least 1 (this `LentBuf`) and the
        // new token is made from it.
        lenders(&self.mem, self.offset).fetch_add(1, Ordering::Relaxed);
        LentRead {
            mem: Arc::clone(&self.mem),
            offset: self.offset,
            len: self.len,
        }
    }

    /// Board readers ([`LentRead`]s) alive now.
    pub fn readers(&self) -> usize {
        lenders(&self.mem, self.offset).load(Ordering::Acquire) - 1
    }

    /// The buffer back for writing once no reader is left (Acquire: the board's reads are
    /// over before the host writes); else the buffer itself.
    ///
    /// Also refuses (the caller tries again) while a DMA read the board started without a
    /// [`LentRead`] is still running on one of the pages.
    pub fn try_unlend(self) -> Result<HostBuf, LentBuf> {
        // Acquire: pairs with the Release of every `LentRead` drop, so the reads the board
        // made under them happen-before the host's writes.
        if lenders(&self.mem, self.offset).load(Ordering::Acquire) != 1 {
            return Err(self);
        }
        let pages = self.mem.pages_of(self.offset, self.len);
        for p in pages.clone() {
            // Acquire: pairs with the Release unpin of every transfer that read the page.
            // A pinned page (a transfer in flight) refuses.
            if self.mem.pages[p]
                .state
                .compare_exchange(LENT, HOST, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                // The earlier pages became `Host` unpinned, and nothing moves a `Host`
                // page but its owner: lend them again as they were.
                for q in pages.start..p {
                    self.mem.pages[q].state.store(LENT, Ordering::Release);
                }
                return Err(self);
            }
        }
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; moving the `Arc` out once is fine.
        let mem = unsafe { core::ptr::read(&this.mem) };
        Ok(HostBuf {
            mem,
            offset: this.offset,
            len: this.len,
        })
    }
}

impl Drop for LentBuf {
    fn drop(&mut self) {
        drop_lender(&self.mem, self.offset, self.len);
    }
}

impl fmt::Debug for LentBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LentBuf({:#x}+{}, {} readers)",
            self.bus_addr(),
            self.len,
            self.readers()
        )
    }
}

/// The board's hold on a lent buffer ([`LentBuf::reader`]) for the time of its transfers
/// from it. Dropping it ends the board's use (Release: its reads happen-before the host's
/// writes after [`LentBuf::try_unlend`]).
pub struct LentRead {
    mem: Arc<HostMemory>,
    offset: usize,
    len: usize,
}

impl LentRead {
    /// Bus address of the first byte.
    pub fn bus_addr(&self) -> u64 {
        self.mem.base + self.offset as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for LentRead {
    fn drop(&mut self) {
        drop_lender(&self.mem, self.offset, self.len);
    }
}

impl fmt::Debug for LentRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LentRead({:#x}+{})", self.bus_addr(), self.len)
    }
}

/// The count of `LentBuf` and `LentRead`s of the lent buffer at `offset`.
fn lenders(mem: &HostMemory, offset: usize) -> &AtomicUsize {
    &mem.pages[offset >> mem.page_shift].lenders
}

/// One `LentBuf` or `LentRead` of the buffer is gone; the last one releases the pages.
fn drop_lender(mem: &HostMemory, offset: usize, len: usize) {
    // Release: this side's reads happen-before the host's Acquire in `try_unlend`.
    // Acquire: when this is the last, every other side's reads happen-before the pages
    // are freed (and so before the next claim's Acquire).
    if lenders(mem, offset).fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    for p in mem.pages_of(offset, len) {
        let state = &mem.pages[p].state;
        let mut word = state.load(Ordering::Relaxed);
        loop {
            debug_assert_eq!(state_of(word), LENT, "a lent page in another state");
            // A page with DMA reads in flight (begun without a `LentRead`) is freed by the
            // last of them (`HostMemory::unpin`).
            let next = if pins_of(word) == 0 {
                FREE
            } else {
                (word & !STATE_MASK) | DRAINING
            };
            // Release: the reads of every side happen-before the next claim of the page.
            match state.compare_exchange(word, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => word = now,
            }
        }
    }
}

// The pin arithmetic above relies on pins living above the state byte.
const _: () = assert!(PIN > STATE_MASK);
