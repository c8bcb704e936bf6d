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
use std::time::Duration;

/// A monotonic clock mapped onto [`Time`], starting at zero when created. It reads the
/// time stamp counter where that is invariant (`quanta`, calibrated once per process
/// against the OS clock): a driver that stamps every packet reads it on every trip, and
/// the OS clock costs two to three times as much a reading. Elsewhere it is the OS clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: quanta::Instant,
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
            origin: quanta::Instant::now(),
        }
    }

    /// The time since the clock was created.
    pub fn now(&self) -> Time {
        let since = quanta::Instant::now().saturating_duration_since(self.origin);
        Time::from_nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The counter-based clock starts near zero, never goes back, and keeps the OS
    /// clock's pace. Each reading of it is bracketed by two of the OS clock, so the
    /// stretch it measures (spun, not slept, until 5 ms have passed) must lie between the
    /// OS clock's inner and outer stretch, whatever the scheduler does between readings:
    /// a real clock's test must read real time, but none of its bounds depends on timing.
    #[test]
    fn the_clock_keeps_the_os_clocks_pace() {
        let made_before = Instant::now();
        let clock = Clock::new();
        let start_before = Instant::now();
        let first = clock.now();
        let start_after = Instant::now();
        // Near zero: no later than the OS clock's stretch since before the clock was made
        // (a millisecond's slack for the two clocks' rates).
        let since_made = start_after.duration_since(made_before) + Duration::from_millis(1);
        assert!(
            first.as_nanos() <= since_made.as_nanos() as u64,
            "starts near zero: {first:?}, made {since_made:?} ago"
        );
        let mut last = first;
        while start_before.elapsed() < Duration::from_millis(5) {
            let t = clock.now();
            assert!(t >= last, "monotonic");
            last = t;
        }
        let end_before = Instant::now();
        let counted = clock.now().saturating_since(first);
        let end_after = Instant::now();
        // The counter's calibration against the OS clock is far better than this.
        let slack = Duration::from_micros(200);
        let (inner, outer) = (end_before - start_after, end_after - start_before);
        assert!(
            counted + slack >= inner && counted <= outer + slack,
            "{counted:?} outside {inner:?}..{outer:?}"
        );
    }
}
