//! The seed's benchmarks over the stack, and the plain references they are compared with.
//!
//! [`raw`] runs ping-pong and streaming over the unreliable channel API between two
//! simulated boards joined by a switch, inline, threaded or under the deterministic
//! scheduler ([`harness`]); [`reliable`] runs the same over reliable `sim://` endpoints
//! of `myri-transport`, the path applications take (RPP over the board's channel). Both
//! report in the shapes of [`report`]. A
//! [`Reference`] measures the same exchange without the stack; the drivers alternate
//! stack and reference in short rounds and report medians, because this machine's
//! cross-core latency jumps between levels from second to second ([`placement`] says
//! which level a round ran at).

pub mod harness;
pub mod placement;
pub mod programs;
pub mod raw;
pub mod reference;
pub mod reliable;
pub mod report;

use std::time::Duration;

/// A plain reference measurement with no stack, run in rounds interleaved with the stack's.
pub trait Reference {
    /// Ping-pongs `iters` messages of `size` bytes; returns each round-trip time.
    fn pingpong_round(&mut self, size: usize, iters: u64) -> Vec<Duration>;
    /// Streams `count` messages of `size` bytes with at most `window` in flight and one
    /// acknowledgement at the end; returns bytes per second.
    fn stream_round(&mut self, size: usize, count: u64, window: usize) -> f64;
}

/// The median of some values (0 for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The shared-memory-ring reference for the board benchmarks, if this build has one.
pub fn reference() -> Option<Box<dyn Reference>> {
    Some(Box::new(reference::RingReference::new()))
}
