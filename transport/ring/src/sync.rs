//! The primitives the ring uses: `std`'s normally, `loom`'s under `--cfg loom` so the
//! model checker explores every interleaving of producer and consumer.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// Records accesses to ring bytes so loom can report unsynchronized ones (free without
/// loom).
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    #[cfg(loom)]
    cell: loom::cell::UnsafeCell<()>,
}

impl Tracker {
    #[inline]
    pub(crate) fn reading<R>(&self, f: impl FnOnce() -> R) -> R {
        #[cfg(loom)]
        return self.cell.with(|_| f());
        #[cfg(not(loom))]
        f()
    }

    #[inline]
    pub(crate) fn writing<R>(&self, f: impl FnOnce() -> R) -> R {
        #[cfg(loom)]
        return self.cell.with_mut(|_| f());
        #[cfg(not(loom))]
        f()
    }
}
