//! What the host API refuses, and why (seed 000, Appendix A: `myri_api0_rc.h`).

use crate::routes::RouteId;
use myri_device::board::{BringUpError, PciError};
use thiserror::Error;

/// An API call that could not be done.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ApiError {
    /// A channel number outside `0..NUM_CHANNELS`.
    #[error("channel {0} is out of range (0..{max})", max = crate::hcb::NUM_CHANNELS)]
    ChannelOutOfRange(u32),
    /// A specific channel asked for is reserved by someone else.
    #[error("channel {0} is in use")]
    ChannelInUse(u8),
    /// Any channel asked for, and none is free.
    #[error("no channel is free")]
    NoChannels,
    /// A channel handle from another board.
    #[error("channel {0} belongs to another board")]
    ForeignChannel(u8),
    /// Receive on a channel that was not initialized with `init_recv_chan`.
    #[error("channel {0} is not initialized for receiving")]
    NotInitialized(u8),
    /// A route id that has no route.
    #[error("{0} is not in the route table")]
    UnknownRoute(RouteId),
    /// A route id outside the table, or route 0 (the direct cable, fixed).
    #[error("route id {0} is out of range (1..{max})", max = crate::hcb::NUM_ROUTES)]
    RouteIdOutOfRange(u32),
    /// Every route id is taken.
    #[error("the route table is full")]
    RouteTableFull,
    /// A buffer from another board's DMA memory.
    #[error("buffer belongs to another board")]
    ForeignBuffer,
    /// A payload longer than a buffer holds.
    #[error("payload of {len} bytes is longer than the {max} a buffer holds")]
    TooLong {
        /// Bytes asked for.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// Every send buffer is in use: try again after some sends complete.
    #[error("no send buffer is free (would block)")]
    NoSendBuffers,
    /// Every slot of the send channel is in use: try again after some sends complete.
    #[error("the send channel is full (would block)")]
    SendQueueFull,
    /// The buffer is still being sent by the board.
    #[error("buffer is still being sent")]
    Busy,
    /// The MCP did not answer the handshake.
    #[error("the mcp did not answer the handshake after {attempts} polls")]
    HandshakeTimeout {
        /// How many times the host looked.
        attempts: u32,
    },
    /// The MCP never published its HCB (no image, or a broken one).
    #[error("no mcp is running: the hcb pointer stayed zero after {attempts} polls")]
    NoMcp {
        /// How many times the host looked.
        attempts: u32,
    },
    /// An HCB signature word is not what this API expects: mismatched API and MCP.
    #[error("hcb signature at {at:#x} is {found:#010x}, expected {expected:#010x}")]
    SignatureMismatch {
        /// SRAM address.
        at: u32,
        /// Expected value.
        expected: u32,
        /// Value found.
        found: u32,
    },
    /// The HCB's geometry or version differs from this API's.
    #[error("hcb layout mismatch: {0}")]
    LayoutMismatch(&'static str),
    /// A completion the board reported that cannot be right (a length beyond the buffer).
    #[error("channel {chan}: the board reported a {len}-byte packet in a {capacity}-byte buffer")]
    CorruptCompletion {
        /// Channel.
        chan: u8,
        /// Reported length.
        len: usize,
        /// Buffer size.
        capacity: usize,
    },
    /// The board refused a host access.
    #[error(transparent)]
    Board(#[from] PciError),
    /// Bringing the board out of reset failed.
    #[error(transparent)]
    BringUp(#[from] BringUpError),
}

/// A refused send, with the buffer handed back.
#[derive(Debug)]
pub struct SendError<B> {
    /// Why.
    pub error: ApiError,
    /// The buffer, still yours.
    pub buf: B,
}

impl<B> core::fmt::Display for SendError<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)
    }
}

impl<B: core::fmt::Debug> std::error::Error for SendError<B> {}
