//! Shared-memory rings: the substrate of the `shm://` backend and of the plain
//! shared-memory reference the benchmarks compare the stack with.
//!
//! [`raw`] holds the region and the single-producer/single-consumer ring of
//! variable-length records (and all of this crate's `unsafe` code).

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
