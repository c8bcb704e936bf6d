//! The GM extensions of seed 001: the SRAM page allocator, sending from an SRAM
//! workspace, and directed sends into strided remote windows.
//!
//! # Pieces
//!
//! * [`sram_alloc`]: the 512-byte page allocator of §3.1 (AVL tree of used segments,
//!   511 size-class free lists, merging on free, owners), and [`first_fit`], the plain
//!   allocator it is measured against.
//! * [`wire`]: the directed header and the window entry in SRAM.
//! * The MCP's halves: [`crate::firmware::directed`] places directed packets line by line;
//!   the host-DMA machine copies workspace blocks into the send buffers
//!   ([`crate::McpConfig::lanai_copy_bytes_per_sec`]).
//! * [`crate::host::gm`]: the host API; its module docs map each seed call to its Rust
//!   name.
//! * [`frames`]: the remote-video demo of §4.3, [`frames::run_frame_demo`].
//! * [`testbed`]: two boards in virtual time, for the tests, the demo and the benchmarks.
//!
//! | seed 001                               | here                                        |
//! |----------------------------------------|---------------------------------------------|
//! | LANai SRAM malloc / free (§3.1)        | [`SramAllocator`]; [`crate::Api::sram_alloc`], [`crate::Api::sram_free`] |
//! | `gm_opiom_send`, `Opiom_ReadSent`, `Opiom_GetStatus` (§3.2) | [`crate::Api::opiom_send`], [`crate::Api::opiom_read_sent`], [`crate::Api::opiom_status`] |
//! | directed send (§1.3.2, §4.2)           | [`crate::Api::register_window`], [`crate::Api::send_directed`] |
//! | the remote-video demo (§4.3)           | [`frames::run_frame_demo`]                  |

pub mod first_fit;
pub mod frames;
pub mod sram_alloc;
pub mod testbed;
pub mod wire;

pub use crate::host::gm::{
    DirectedSendError, GmError, OpiomRequest, OpiomStatus, OpiomTarget, RemoteWindow, SimDisk,
    SramSegment, SramUsage, Window,
};
pub use first_fit::FirstFit;
pub use sram_alloc::{AllocError, SegmentId, SegmentInfo, SramAllocator, UserId};
