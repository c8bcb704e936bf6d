//! The Trapeze messaging system of seed 003 on the simulated board.
//!
//! # Pieces
//!
//! * [`wire`]: the endpoint's layout in board memory (send ring, receive ring, incoming
//!   payload table) and the Trapeze packet header.
//! * [`crate::firmware::trapeze`]: the MCP's half, which takes released messages off the
//!   send ring and fills the receive ring, placing payloads and checking payload tokens.
//! * [`crate::host::trapeze`]: the host API, [`TpzEndpoint`] from [`crate::Api::tpz_init`];
//!   its module docs list every `tpz_*` call of the seed with its Rust name.

pub mod wire;

pub use crate::host::trapeze::{
    DispatchReport, IoCompletion, MsgSpec, RcvMsg, SendMsg, Token, TpzCounters, TpzDelivery,
    TpzEndpoint, TpzError,
};
pub use wire::PayloadStatus;
