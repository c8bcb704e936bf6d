//! Shared-memory rings: the substrate of myri's `shm://` backend and of the plain
//! shared-memory reference the benchmarks compare the stack with.
//!
//! [`raw`] holds the region, the single-producer/single-consumer ring of variable-length
//! records and the slot areas messages are written into in place (and all of this
//! crate's `unsafe` code).
//!
//! # What it does not do
//!
//! No naming, no ownership of regions between processes, no liveness: the `shm://`
//! backend of `myri-transport` builds those on top. No clock is read and no thread is
//! spawned.
//!
//! # Checking it
//!
//! The handoff is model-checked with loom and the tests run under Miri:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test -p myri-ring --release --lib
//! cargo +nightly miri test -p myri-ring --lib
//! ```

mod sync;

pub mod raw;

pub use raw::{Consumer, Producer, ReadGrant, Region, RingError, RingPlace, WriteGrant};
use std::sync::Arc;

/// A ring of `capacity` bytes of records (a power of two, at least 64) on the heap, for
/// two threads of one process.
pub fn heap_ring(capacity: usize) -> Result<(Producer, Consumer), RingError> {
    let region = Arc::new(Region::heap(raw::RING_HEADER + capacity));
    raw::ring(
        region,
        RingPlace {
            offset: 0,
            capacity,
        },
    )
}
