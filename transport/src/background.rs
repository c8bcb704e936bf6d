//! An endpoint driven by a background thread: the application sends and receives, a
//! thread of this crate calls [`Endpoint::progress`].

use crate::buffer::Buf;
use crate::endpoint::{Completion, Delivery, Endpoint, MsgId, Peer, Stats};
use crate::error::{InsertError, SendError, SpawnError};
use crate::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct Shared {
    endpoint: Mutex<Endpoint>,
    /// Signalled when deliveries or completions are waiting.
    ready: Condvar,
    stop: AtomicBool,
}

/// An [`Endpoint`] with a progress thread. The thread progresses while there is work,
/// then backs off (spinning, yielding, then sleeping [`BackgroundEndpoint::IDLE_SLEEP`])
/// until the application sends or the backend has something. Dropping it stops and joins
/// the thread.
pub struct BackgroundEndpoint {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundEndpoint {
    /// Longest sleep of an idle progress thread.
    pub const IDLE_SLEEP: Duration = Duration::from_micros(200);

    /// Starts a progress thread for `endpoint`.
    pub fn new(endpoint: Endpoint) -> Result<BackgroundEndpoint, SpawnError> {
        let shared = Arc::new(Shared {
            endpoint: Mutex::new(endpoint),
            ready: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("myri-progress".into())
            .spawn(move || run(&s))
            .map_err(SpawnError::Thread)?;
        Ok(BackgroundEndpoint {
            shared,
            thread: Some(thread),
        })
    }

    /// Runs `f` on the endpoint (for anything not wrapped here).
    pub fn with<R>(&self, f: impl FnOnce(&mut Endpoint) -> R) -> R {
        let r = f(&mut lock(&self.shared.endpoint));
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
        r
    }

    /// See [`Endpoint::insert_addr`].
    pub fn insert_addr(&self, url: &str) -> Result<Peer, InsertError> {
        self.with(|e| e.insert_addr(url))
    }

    /// See [`Endpoint::alloc`].
    pub fn alloc(&self, len: usize) -> Buf {
        self.with(|e| e.alloc(len))
    }

    /// See [`Endpoint::send`].
    pub fn send(&self, peer: Peer, buf: Buf) -> Result<MsgId, SendError> {
        self.with(|e| e.send(peer, buf))
    }

    /// The next message, if one is waiting (the thread does the progress).
    pub fn try_recv(&self) -> Option<Delivery> {
        self.with(|e| e.pending_deliveries().gt(&0).then(|| e.recv()).flatten())
    }

    /// The next message, waiting up to `timeout` for one.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Delivery> {
        let deadline = Instant::now() + timeout;
        let mut e = lock(&self.shared.endpoint);
        loop {
            if e.pending_deliveries() > 0 {
                return e.recv();
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            e = self
                .shared
                .ready
                .wait_timeout(e, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The next completion, if one is waiting.
    pub fn poll_completion(&self) -> Option<Completion> {
        self.with(Endpoint::poll_completion)
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.with(|e| e.stats())
    }

    /// Stops the thread and gives the endpoint back.
    pub fn into_inner(mut self) -> Endpoint {
        self.stop_thread();
        let shared = self.shared.clone();
        drop(self);
        match Arc::try_unwrap(shared) {
            Ok(s) => s.endpoint.into_inner().unwrap_or_else(|e| e.into_inner()),
            Err(_) => unreachable!("the thread is joined and `self` is gone"),
        }
    }

    fn stop_thread(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for BackgroundEndpoint {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

fn run(s: &Shared) {
    let mut idle = 0u32;
    while !s.stop.load(Ordering::Acquire) {
        let (worked, ready, wait) = {
            let mut e = lock(&s.endpoint);
            let worked = e.progress();
            let ready = e.pending_deliveries() > 0;
            (worked, ready, e.next_timeout())
        };
        if ready {
            s.ready.notify_all();
        }
        if worked {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < 64 {
            std::hint::spin_loop();
        } else if idle < 128 {
            std::thread::yield_now();
        } else {
            let sleep = wait.map_or(BackgroundEndpoint::IDLE_SLEEP, |w| {
                w.min(BackgroundEndpoint::IDLE_SLEEP)
            });
            std::thread::park_timeout(sleep);
        }
    }
}
