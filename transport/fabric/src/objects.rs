//! The provider's objects in safe Rust: address vectors, completion queues, counters and
//! the queues they hold. The endpoint, which moves messages, is in [`crate::endpoint`];
//! the C surface that hands these to libfabric is in `capi`.

use crate::abi::{FI_ADDR_NOTAVAIL, FiAddr};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Locks `m`, taking the data even if a panicking thread poisoned it (every entry point
/// catches panics, and the queues stay consistent between statements).
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ---- Address vector ------------------------------------------------------------------

/// An address vector: peers' transport URLs by `fi_addr_t`. Both `FI_AV_MAP` and
/// `FI_AV_TABLE` hand out indices (0, 1, 2, ... in insertion order), which the map type
/// allows too.
#[derive(Debug, Default)]
pub struct AddressVector {
    entries: Vec<Option<String>>,
    by_url: HashMap<String, FiAddr>,
}

impl AddressVector {
    /// Inserts `url`, giving its address (the same one again for a URL already in).
    pub fn insert(&mut self, url: String) -> FiAddr {
        if let Some(&a) = self.by_url.get(&url) {
            return a;
        }
        let a = self.entries.len() as FiAddr;
        self.entries.push(Some(url.clone()));
        self.by_url.insert(url, a);
        a
    }

    /// Removes `addr`; false if it was not there.
    pub fn remove(&mut self, addr: FiAddr) -> bool {
        let Some(slot) = usize::try_from(addr)
            .ok()
            .and_then(|i| self.entries.get_mut(i))
        else {
            return false;
        };
        match slot.take() {
            Some(url) => {
                self.by_url.remove(&url);
                true
            }
            None => false,
        }
    }

    /// Addresses handed out so far (removed ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no address was ever inserted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The URL at `addr`.
    pub fn url(&self, addr: FiAddr) -> Option<&str> {
        self.entries.get(usize::try_from(addr).ok()?)?.as_deref()
    }

    /// The address of `url`, or `FI_ADDR_NOTAVAIL`.
    pub fn lookup_url(&self, url: &str) -> FiAddr {
        self.by_url.get(url).copied().unwrap_or(FI_ADDR_NOTAVAIL)
    }
}

/// A shared address vector.
pub type Av = Arc<Mutex<AddressVector>>;

// ---- Completion queue ----------------------------------------------------------------

/// One completion, in the widest (tagged) format plus its source; a CQ of a narrower
/// format writes a prefix of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The operation's context pointer.
    pub context: usize,
    /// `FI_SEND`/`FI_RECV`, `FI_MSG`/`FI_TAGGED`, `FI_REMOTE_CQ_DATA`.
    pub flags: u64,
    /// Bytes received (the message's length; 0 for sends).
    pub len: usize,
    /// Where the data landed (the first buffer of a receive), or 0.
    pub buf: usize,
    /// Remote CQ data, or 0.
    pub data: u64,
    /// The tag, or 0.
    pub tag: u64,
    /// The sender (receives), `FI_ADDR_NOTAVAIL` when not in the address vector.
    pub src: FiAddr,
}

/// A failed operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorEntry {
    /// As the completion would have been (`len` is what was written).
    pub entry: Entry,
    /// Bytes that did not fit (truncation).
    pub olen: usize,
    /// Positive `FI_E*` code.
    pub err: i32,
}

/// The front of a completion queue is an error: read it with `fi_cq_readerr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorFirst;

/// A completion queue's entries, in order; an error stops reads until read with
/// `fi_cq_readerr`.
#[derive(Debug, Default)]
pub struct CqQueue {
    items: VecDeque<Result<Entry, ErrorEntry>>,
}

impl CqQueue {
    /// Appends a completion.
    pub fn push(&mut self, e: Entry) {
        self.items.push_back(Ok(e));
    }

    /// Appends an error.
    pub fn push_err(&mut self, e: ErrorEntry) {
        self.items.push_back(Err(e));
    }

    /// Takes up to `max` completions from the front, handing each to `out` with its
    /// index; how many it took, or [`ErrorFirst`] when the front is an error (and nothing
    /// was taken).
    pub fn take_with(
        &mut self,
        max: usize,
        mut out: impl FnMut(usize, &Entry),
    ) -> Result<usize, ErrorFirst> {
        let mut n = 0;
        while n < max {
            match self.items.front() {
                Some(Ok(e)) => {
                    out(n, e);
                    n += 1;
                    self.items.pop_front();
                }
                Some(Err(_)) if n == 0 => return Err(ErrorFirst),
                _ => break,
            }
        }
        Ok(n)
    }

    /// Takes completions from the front into `out` until it holds `max`.
    #[cfg(test)]
    pub fn take(&mut self, max: usize, out: &mut Vec<Entry>) -> Result<(), ErrorFirst> {
        match self.take_with(max.saturating_sub(out.len()), |_, e| out.push(*e)) {
            Err(ErrorFirst) if !out.is_empty() => Ok(()),
            r => r.map(drop),
        }
    }

    /// Takes the error at the front, if the front is one.
    pub fn take_err(&mut self) -> Option<ErrorEntry> {
        match self.items.front() {
            Some(Err(e)) => {
                let e = *e;
                self.items.pop_front();
                Some(e)
            }
            _ => None,
        }
    }

    /// Completions and errors waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Something a completion queue or counter reads drive: an endpoint's progress.
pub trait Progress: Send {
    /// Runs the endpoint's progress once; returns whether it did anything or has work
    /// outstanding (a progress thread keeps polling while it does, and backs off when it
    /// does not).
    fn progress(&mut self) -> bool;
}

/// The endpoints bound to a queue or counter, which reading it drives (manual progress).
///
/// The list holds the endpoints themselves, so a poll drives them without counting
/// references; an endpoint leaves every list it joined when it is closed
/// ([`Drivers::remove`]). Lock order: a list before an endpoint (a poll holds the list
/// while it drives each endpoint), so nothing adds or removes with an endpoint's lock
/// held.
#[derive(Default)]
pub struct Drivers {
    eps: Mutex<Vec<Arc<Mutex<dyn Progress>>>>,
}

/// Whether `a` and `b` are the same endpoint.
fn same(a: &Arc<Mutex<dyn Progress>>, b: &Arc<Mutex<dyn Progress>>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

impl Drivers {
    /// Adds an endpoint (once, however often it is bound).
    pub fn add(&self, ep: Arc<Mutex<dyn Progress>>) {
        let mut eps = lock(&self.eps);
        if !eps.iter().any(|e| same(e, &ep)) {
            eps.push(ep);
        }
    }

    /// Takes an endpoint out (it is being closed).
    pub fn remove(&self, ep: &Arc<Mutex<dyn Progress>>) {
        lock(&self.eps).retain(|e| !same(e, ep));
    }

    /// How many endpoints are bound.
    pub fn len(&self) -> usize {
        lock(&self.eps).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs each endpoint's progress once; returns whether any did anything or has work
    /// outstanding.
    pub fn drive(&self) -> bool {
        let eps = lock(&self.eps);
        let mut worked = false;
        for ep in eps.iter() {
            worked |= lock(ep).progress();
        }
        worked
    }
}

// ---- Automatic progress ----------------------------------------------------------------

/// A domain's progress thread (`FI_PROGRESS_AUTO`): it drives the domain's enabled
/// endpoints whether or not the application calls in, so a send finishes, and a message
/// arrives in its queue, while the application computes. It polls while an endpoint has
/// work (a message taken, a send not all out), then spins [`AutoProgress::SPIN_PASSES`]
/// idle passes, yields until [`AutoProgress::YIELD_PASSES`], and then sleeps
/// [`AutoProgress::IDLE_SLEEP`] between passes. Completion-queue reads drive the
/// endpoints as well, as with manual progress, so an application that polls does not
/// wait for the thread. Dropping it stops and joins the thread.
pub struct AutoProgress {
    shared: Arc<AutoShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct AutoShared {
    drivers: Drivers,
    stop: std::sync::atomic::AtomicBool,
}

impl AutoProgress {
    /// Idle passes spent spinning after the last work.
    pub const SPIN_PASSES: u32 = 64;
    /// Idle passes after which the thread sleeps between passes (yielding before).
    pub const YIELD_PASSES: u32 = 1024;
    /// Sleep between idle passes: the longest an arrival waits for the thread.
    pub const IDLE_SLEEP: std::time::Duration = std::time::Duration::from_micros(100);

    /// Starts a progress thread with no endpoints yet.
    pub fn start() -> std::io::Result<AutoProgress> {
        let shared = Arc::new(AutoShared {
            drivers: Drivers::default(),
            stop: std::sync::atomic::AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("myri-progress".into())
            .spawn(move || {
                let mut idle = 0u32;
                while !s.stop.load(Ordering::Acquire) {
                    if s.drivers.drive() {
                        idle = 0;
                        continue;
                    }
                    idle = idle.saturating_add(1);
                    if idle < Self::SPIN_PASSES {
                        std::hint::spin_loop();
                    } else if idle < Self::YIELD_PASSES {
                        std::thread::yield_now();
                    } else {
                        std::thread::park_timeout(Self::IDLE_SLEEP);
                    }
                }
            })?;
        Ok(AutoProgress {
            shared,
            thread: Some(thread),
        })
    }

    /// The endpoints the thread drives.
    pub fn drivers(&self) -> &Drivers {
        &self.shared.drivers
    }
}

impl Drop for AutoProgress {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// A completion queue shared by the endpoints bound to it.
#[derive(Default)]
pub struct CompletionQueue {
    /// The entries.
    pub queue: Mutex<CqQueue>,
    /// The endpoints bound to it.
    pub drivers: Drivers,
}

/// A shared completion queue.
pub type Cq = Arc<CompletionQueue>;

// ---- Counter -------------------------------------------------------------------------

/// A counter of completions (and of errors).
#[derive(Default)]
pub struct Counter {
    /// Successful completions.
    pub value: AtomicU64,
    /// Failed ones.
    pub errors: AtomicU64,
    /// The endpoints bound to it.
    pub drivers: Drivers,
}

impl Counter {
    /// Counts one completion.
    pub fn bump(&self) {
        self.value.fetch_add(1, Ordering::Release);
    }

    /// Counts one error.
    pub fn bump_err(&self) {
        self.errors.fetch_add(1, Ordering::Release);
    }
}

/// A shared counter.
pub type Cntr = Arc<Counter>;

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(context: usize) -> Entry {
        Entry {
            context,
            flags: 0,
            len: 0,
            buf: 0,
            data: 0,
            tag: 0,
            src: FI_ADDR_NOTAVAIL,
        }
    }

    struct Counting(u32);
    impl Progress for Counting {
        fn progress(&mut self) -> bool {
            self.0 += 1;
            true
        }
    }

    #[test]
    fn drivers_drive_each_endpoint_once_until_it_is_removed() {
        let d = Drivers::default();
        let a = Arc::new(Mutex::new(Counting(0)));
        let b = Arc::new(Mutex::new(Counting(0)));
        let da: Arc<Mutex<dyn Progress>> = a.clone();
        let db: Arc<Mutex<dyn Progress>> = b.clone();
        d.add(da.clone());
        d.add(da.clone()); // bound for sends and receives: driven once
        d.add(db.clone());
        assert_eq!(d.len(), 2);
        assert!(d.drive());
        assert_eq!((lock(&a).0, lock(&b).0), (1, 1));
        d.remove(&da);
        assert!(d.drive());
        assert_eq!((lock(&a).0, lock(&b).0), (1, 2));
        d.remove(&db);
        assert!(d.is_empty() && !d.drive());
        // The list held the only other references: they are gone with it.
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (2, 2));
        drop((da, db));
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (1, 1));
    }

    #[test]
    fn av_indices_and_removal() {
        let mut av = AddressVector::default();
        assert_eq!(av.insert("udp://127.0.0.1:1".into()), 0);
        assert_eq!(av.insert("udp://127.0.0.1:2".into()), 1);
        assert_eq!(av.insert("udp://127.0.0.1:1".into()), 0);
        assert_eq!(av.lookup_url("udp://127.0.0.1:2"), 1);
        assert!(av.remove(0));
        assert!(!av.remove(0));
        assert!(!av.remove(u64::MAX));
        assert_eq!(av.url(0), None);
        assert_eq!(av.lookup_url("udp://127.0.0.1:1"), FI_ADDR_NOTAVAIL);
    }

    #[test]
    fn an_error_stops_reads_until_taken() {
        let mut q = CqQueue::default();
        q.push(entry(1));
        q.push_err(ErrorEntry {
            entry: entry(2),
            olen: 0,
            err: 1,
        });
        q.push(entry(3));
        let mut out = Vec::new();
        assert_eq!(q.take(8, &mut out), Ok(()));
        assert_eq!(out.len(), 1);
        out.clear();
        assert_eq!(q.take(8, &mut out), Err(ErrorFirst));
        assert_eq!(q.take_err().unwrap().entry.context, 2);
        assert_eq!(q.take(8, &mut out), Ok(()));
        assert_eq!(out[0].context, 3);
    }
}
