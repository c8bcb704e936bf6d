//! The GM extensions of seed 001: the SRAM page allocator, sending from an SRAM
//! workspace, and directed sends into strided remote windows.
//!
//! | seed 001                               | here                                        |
//! |----------------------------------------|---------------------------------------------|
//! | LANai SRAM malloc / free (§3.1)        | [`SramAllocator`], [`crate::Api::sram_alloc`] |

pub mod first_fit;
pub mod sram_alloc;
pub mod testbed;
pub mod wire;

pub use first_fit::FirstFit;
pub use sram_alloc::{AllocError, SegmentId, SegmentInfo, SramAllocator, UserId};
