//! The control program and the host API: myri's unreliable channel layer (seed 000).
//!
//! # What this layer does
//!
//! * [`firmware`]: the Myrinet Control Program that runs on a simulated PCI64 board's
//!   LANai: three DMA state machines (host, send, receive) around a tx pool and an rx pool,
//!   PIO send for small packets, overlapped (cut-through) send and receive for large ones,
//!   interrupt-driven or polled receive, and a network that is never blocked.
//! * [`hcb`]: the host communications block in SRAM that is all the host and the MCP
//!   share: send channel, PIO buffers, receive channels, route table, counters.
//! * [`Api`]: the host side with the semantics of seed 000's Appendix A: first-user
//!   initialization and handshake, channel reservation, copy-free send and receive buffers
//!   in DMA memory, routes and route files, pending counts and reaping. [`SharedApi`] is
//!   the locking variant.
//! * The MCP runs inline (stepped by [`Api::progress`]), on a thread of the caller's
//!   ([`McpRunner`]), or under the device crate's deterministic scheduler.
//! * [`gm`]: seed 001's GM extensions: the SRAM page allocator, sends from the SRAM
//!   workspace (OPIOM), directed sends into strided windows, and the remote-video demo.
//! * [`trapeze`]: seed 003's Trapeze endpoint: rings in board memory, inline control
//!   messages with payloads, header-id handlers, payload tokens, send completions.
//!
//! # What it does not do
//!
//! No reliability: packets are lost when the network, the rx pool or a channel drops them,
//! as seed 000 intends (a reliable protocol runs on top: the `rpp` crate). No clock is read
//! and no thread is spawned here: time comes in as `now`, and threads come from the
//! caller. Receive channels are not shared between processes (seed 000: the client locks if
//! it wants that).

pub mod firmware;
pub mod frame;
pub mod gm;
pub mod hcb;
pub mod host;
pub mod routes;
pub mod trapeze;

pub use firmware::{Mcp, McpConfig, McpCounters, RecvMode};
pub use host::{
    Api, ApiError, ChanRequest, Channel, InitOptions, LentSendBuf, McpRunner, Mode, Reclaimed,
    RecvBuf, RouteSlot, SendBuf, SendError, SharedApi, Ticket, Unit,
};
pub use routes::{RouteFile, RouteFileError, RouteId};
