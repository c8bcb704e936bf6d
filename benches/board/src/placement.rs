//! How far apart the two CPUs a benchmark's threads run on are, measured by handing one
//! cache line back and forth between two spinning threads.
//!
//! On the 2 vCPU KVM hosts this project is measured on, the hypervisor moves the two
//! vCPUs between cores that share a cache and cores that do not, several times a second:
//! the round trip falls into two levels (about 75 ns and about 450 ns on the AMD EPYC host
//! of `RESULTS.md`). A packet between the two boards of a board benchmark crosses between
//! the threads once each way, so the figures move with the level; the interleaved
//! comparisons probe it around each round and report the rounds of each level apart.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A round trip under this many nanoseconds counts as [`Placement::Near`].
pub const NEAR_NS: f64 = 250.0;

/// Where the two CPUs sat while something was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Every probe found a short round trip: the CPUs share a cache.
    Near,
    /// Every probe found a long round trip.
    Far,
    /// The probes disagreed: the placement changed meanwhile.
    Mixed,
}

impl Placement {
    /// The placement a round trip of `ns` nanoseconds shows.
    pub fn of(ns: f64) -> Placement {
        if ns < NEAR_NS {
            Placement::Near
        } else {
            Placement::Far
        }
    }

    /// The placement over two spans: the same if they agree, else [`Placement::Mixed`].
    pub fn and(self, other: Placement) -> Placement {
        if self == other {
            self
        } else {
            Placement::Mixed
        }
    }

    /// A probe's placement: the mean round trip of `trips` hand-offs.
    pub fn probe(trips: u64) -> Placement {
        Placement::of(round_trip_ns(trips))
    }
}

/// One cache line of its own, so that nothing else shares it.
#[repr(align(128))]
struct Line(AtomicU64);

/// The mean round trip, in nanoseconds, of `trips` hand-offs of one counter between this
/// thread and a spinning thread of its own: this one writes odd values, the other answers
/// each with the next even one.
pub fn round_trip_ns(trips: u64) -> f64 {
    let trips = trips.max(1);
    let line = Arc::new(Line(AtomicU64::new(0)));
    let other = Arc::clone(&line);
    let echo = std::thread::spawn(move || {
        for i in 0..trips {
            while other.0.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            other.0.store(2 * i + 2, Ordering::Release);
        }
    });
    let start = Instant::now();
    for i in 0..trips {
        line.0.store(2 * i + 1, Ordering::Release);
        while line.0.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let ns = start.elapsed().as_secs_f64() * 1e9 / trips as f64;
    echo.join().expect("the echo thread only spins and stores");
    ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_combine() {
        assert_eq!(Placement::of(74.0), Placement::Near);
        assert_eq!(Placement::of(456.0), Placement::Far);
        assert_eq!(Placement::Near.and(Placement::Near), Placement::Near);
        assert_eq!(Placement::Far.and(Placement::Far), Placement::Far);
        assert_eq!(Placement::Near.and(Placement::Far), Placement::Mixed);
        assert_eq!(Placement::Mixed.and(Placement::Mixed), Placement::Mixed);
    }

    #[test]
    fn a_probe_hands_the_line_back_every_time() {
        // Returns only once the other thread has answered every hand-off.
        let ns = round_trip_ns(1_000);
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
        assert!(round_trip_ns(0) > 0.0);
    }
}
