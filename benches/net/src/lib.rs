//! Ping-pong and streaming between processes and machines: `myri serve` and the
//! `--transport` runs of `myri pingpong` and `myri stream`, with the plain references
//! they are compared with.
//!
//! A [`Server`] holds a transport endpoint (`udp://` or `shm://`, reliable or raw) and
//! answers any number of clients, one after another or at once: it echoes pings and
//! counts (and with `verify`, checks byte for byte) streamed data. Beside it, in the same
//! polling loop, it offers the plain references: a bare UDP socket ([`bare_udp`]) and a
//! TCP listener ([`tcp`]) for `udp://`, a bare shared-memory ring pair ([`ring`]) for
//! `shm://`. A [`Client`] opens a session ([`wire::Control::Hello`]), learns where the
//! references are, runs rounds and says goodbye, getting the server's counters back.
//!
//! [`measure`] alternates transport and reference rounds (A B A B, short rounds) and
//! reports medians, because this machine's timing drifts from second to second: every
//! figure comes with the reference measured in the same run.
//!
//! This is a driver: it reads the clock and spins; nothing below it does.

pub mod bare_udp;
pub mod client;
pub mod cores;
pub mod measure;
pub mod ring;
pub mod server;
pub mod tcp;
pub mod wire;

pub use client::{Client, ClientConfig, ClientError, Sample};
pub use server::{
    RppFigures, ServeError, Server, ServerConfig, ServerEvent, ServerTotals, StopReason,
};

use std::time::Duration;

/// RPP's retries before a silent peer is declared failed, in sessions of this module.
/// RPP's timeout doubles from its round-trip estimate (50 us at least) up to 1 s, so a
/// peer silent for about 3.5 s is still alive (a process starved on a loaded machine, a
/// client busy with a reference round), one silent for about 7.5 s has failed.
pub const FAILURE_RETRIES: u32 = 20;

/// The RPP settings of this module's endpoints.
pub fn rpp_config() -> myri_rpp::Config {
    myri_rpp::Config::default().with_max_retries(FAILURE_RETRIES)
}

/// One ping-pong round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundTime {
    /// Time for all the exchanges.
    pub elapsed: Duration,
    /// Exchanges made.
    pub exchanges: u64,
    /// Exchanges that timed out (raw mode: a ping or its echo was lost).
    pub timeouts: u64,
}

impl RoundTime {
    /// Mean round-trip time of the round, in microseconds.
    pub fn rtt_us(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6 / self.exchanges.max(1) as f64
    }
}

/// One stream round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamRound {
    /// From the first message sent to the server's answer after the last.
    pub elapsed: Duration,
    /// Messages (or datagrams, records) sent.
    pub sent: u64,
    /// Of those, received by the server.
    pub received: u64,
    /// Bytes the server received.
    pub bytes: u64,
    /// Errors the server found (out of order, bad length or content).
    pub errors: u64,
}

impl StreamRound {
    /// Goodput: bytes received per second, in MB/s (10^6 bytes).
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9) / 1e6
    }
}
