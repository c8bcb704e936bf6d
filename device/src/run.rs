//! The threaded real-time mode: every node on its own thread, time from a real clock.
//!
//! This module is an outermost driver: it is the one place in the crate that reads a
//! clock and spawns threads. Each thread polls its node, then waits for the node's next
//! deadline or for a packet at its port (the fabric unparks it), spinning for short waits
//! and parking for long ones.

use crate::fabric::Fabric;
use crate::sched::Node;
use crate::time::Time;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A monotonic clock mapped onto [`Time`], starting at zero when created.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

impl Clock {
    /// A clock reading zero now.
    pub fn new() -> Clock {
        Clock {
            origin: Instant::now(),
        }
    }

    /// The time since the clock was created.
    pub fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Waits shorter than this are spun (with yields); longer ones park.
const SPIN: Duration = Duration::from_micros(50);

/// Runs every node on its own thread until all are done or `timeout` passes. Returns the
/// nodes and whether all finished.
pub fn run_threaded<N: Node + Send>(
    fabric: &Arc<Fabric>,
    nodes: Vec<N>,
    timeout: Duration,
) -> (Vec<N>, bool) {
    let clock = Clock::new();
    let stop = AtomicBool::new(false);
    let deadline = clock.now() + timeout;
    let results: Vec<(N, bool)> = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .into_iter()
            .map(|mut node| {
                let (stop, fabric) = (&stop, fabric);
                s.spawn(move || {
                    if let Some(port) = node.port() {
                        fabric.set_waker(port, Some(std::thread::current()));
                    }
                    let mut done = false;
                    loop {
                        let now = clock.now();
                        let next = node.poll(now);
                        if node.is_done() {
                            done = true;
                            break;
                        }
                        if stop.load(Ordering::Relaxed) || now >= deadline {
                            break;
                        }
                        let until = next.unwrap_or(now + Duration::from_millis(1)).min(deadline);
                        let arrivals = node.port().map(|p| fabric.arrivals(p));
                        loop {
                            let now = clock.now();
                            if now >= until || node.port().map(|p| fabric.arrivals(p)) != arrivals {
                                break;
                            }
                            let left = until.saturating_since(now);
                            if left > SPIN {
                                std::thread::park_timeout(left - SPIN);
                            } else {
                                std::thread::yield_now();
                            }
                        }
                    }
                    if let Some(port) = node.port() {
                        fabric.set_waker(port, None);
                    }
                    (node, done)
                })
            })
            .collect();
        let results: Vec<(N, bool)> = handles
            .into_iter()
            .map(|h| h.join().expect("node thread panicked"))
            .collect();
        stop.store(true, Ordering::Relaxed);
        results
    });
    let all = results.iter().all(|(_, d)| *d);
    (results.into_iter().map(|(n, _)| n).collect(), all)
}
