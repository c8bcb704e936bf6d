//! The synchronization primitives host memory uses: `std`'s normally, `loom`'s when the
//! crate is built with `--cfg loom` so the model checker can explore every interleaving.

// `std`'s `Arc` in both builds: it can be a method receiver, and loom needs only the
// atomics and cells below to see every ordering.
pub(crate) use std::sync::Arc;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

/// Waits a moment for another thread to finish a short critical section.
#[inline]
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Records accesses to one page's bytes so that loom can report unsynchronized ones.
/// Without loom it is empty and free.
#[derive(Debug, Default)]
pub(crate) struct AccessTracker {
    #[cfg(loom)]
    cell: loom::cell::UnsafeCell<()>,
}

impl AccessTracker {
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
