//! RPP, the reliable packet protocol: reliable, in-order delivery of messages of any size
//! over a channel that may drop, corrupt, duplicate, reorder and delay datagrams.
//!
//! CLF's RPP (seed 000, History and Context) gave the Myrinet channel API sequence
//! numbers, acknowledgements, a sliding window and retransmission after a timeout. This
//! crate keeps that shape and adds what today's equivalents lack:
//!
//! * **Selective repeat**, not go-back-N: the receiver buffers packets beyond a gap, and
//!   acknowledgements carry the cumulative ack plus up to four SACK ranges and a D-SACK.
//! * **Loss detection from evidence** (a packet is lost once [`Config::packet_threshold`]
//!   later packets or 9/8 of the round-trip time have been acknowledged past it), plus a
//!   retransmission timer from measured round trips (RFC 6298: srtt, rttvar, Karn's rule,
//!   exponential backoff, a floor that goes down to tens of microseconds).
//! * **Ack coalescing** (every [`Config::ack_every`] packets or after
//!   [`Config::ack_delay`]), an immediate ack when a gap appears, acks riding on data.
//! * **Flow control** by receiver credit, with persist probes when the credit is closed;
//!   `send` says [`SendError::WouldBlock`] past a configured bound, never queues without
//!   limit.
//! * **Fragmentation** to the channel's MTU and reassembly, up to
//!   [`Config::max_message_len`] (64 MiB by default).
//! * **Copy-free sending**: [`Connection::send`] keeps the caller's buffer (any
//!   `B: AsRef<[u8]>`) until the peer acknowledged all of it, then hands it back in
//!   [`Event::Sent`]; [`Connection::poll_transmit_gather`] lends the payload for a gathered
//!   send. A whole in-order message can be delivered in place ([`Received::InPlace`]).
//! * **Integrity chosen per path** and named in every header ([`Integrity`]): an
//!   end-to-end CRC-32C over header and payload (the default: the link's CRC-8 is weak),
//!   the channel's own check ([`Integrity::External`], e.g. the board's DMA checksums:
//!   RPP then computes nothing), or none; optionally a MAC with a shared key
//!   ([`Config::mac_key`]).
//! * **Incarnations**: each end's life has a random number; after a restart no packet of
//!   the earlier life is delivered and the application learns of the restart
//!   ([`Event::PeerRestarted`]). Keepalives detect a dead peer: the connection then fails
//!   and every message not acknowledged is handed back ([`Event::Failed`]).
//! * **Congestion control** ([`congestion`]): a controller (CUBIC by default, NewReno,
//!   BBR, or none) bounds the bytes in flight, with slow start, one reduction per loss event,
//!   reordering told apart from loss (and a reduction undone when its losses turn up),
//!   and no growth while the application, not the window, limits the flight; or BBR
//!   ([`congestion::Bbr`]), which steers by its estimates of the path's bandwidth and
//!   round trip instead of loss, for a path shared with TCP BBR flows. A pacer
//!   spreads each window over the round trip on long paths (BBR sets its own rate); on a
//!   microsecond link a whole window is one burst, so a cluster link keeps its latency.
//!   Where acknowledgements come together (a driver, or its peer, that runs late), a
//!   paced flight may pass the loss-based window by what they brought late, at most a
//!   quarter of it (see "Acknowledgements that come together" in [`congestion`]).
//!
//! # Pacing and the driver
//!
//! With pacing on, [`Connection::poll_transmit`] returns `None` while the next data
//! packet's time has not come (acknowledgements still go), and
//! [`Connection::poll_timeout`] includes that time. A driver therefore needs nothing new:
//! it arms its timer for `poll_timeout`, calls [`Connection::handle_timeout`] when it
//! fires, and drains `poll_transmit` again. Where pacing spreads the window and a burst
//! (about a millisecond of the pacing rate) is at least 32 KiB, new data goes in batches
//! of one burst, and below that packet by packet; a driver that sends GSO buffers sends
//! what it holds at each [`Gather::batch_end`], so that each buffer is one batch, and
//! may ask [`Connection::send_budget`] how many full-size packets may go now. Draining
//! after each packet, it may first ask [`Connection::may_transmit`]: when that says no,
//! `poll_transmit` would give nothing, and asking it would run its whole plan. A gathered
//! packet says so itself ([`Gather::last`]), so a driver that starts its device on what it
//! posts can start it on that packet before the rest of its own bookkeeping.
//!
//! # What it does not do
//!
//! No I/O, no clock, no threads, no globals: it is sans-IO like quinn-proto. The caller
//! moves datagrams between [`Connection::poll_transmit`] and the channel, passes time in as
//! an [`Instant`], and calls [`Connection::handle_timeout`] when
//! [`Connection::poll_timeout`] says. There is no connection multiplexing: one
//! [`Connection`] per peer pair, told apart by a connection id.
//!
//! # Threat model
//!
//! RPP guards against three kinds of harm, each under a stated assumption:
//!
//! * **Corruption** on the channel: every packet is checked as its header says, and a
//!   receiver takes only packets of the mode it was configured for
//!   ([`Config::integrity`]). Under [`Integrity::External`] the channel below must check
//!   every byte from the sender's memory to the receiver's and drop what fails (the
//!   board's host-to-board and board-to-host DMA checksums together do); under
//!   [`Integrity::None`] nothing is checked unless a MAC is.
//! * **Off-path injection**: a host that cannot see the traffic but can send packets
//!   to an end (spoofing the peer's address). Every packet names the connection id and
//!   both incarnations; the caller draws all three as random 64-bit numbers
//!   ([`Connection::new`]). A packet with another connection id is dropped
//!   ([`Stats::foreign`]); one that names another incarnation of either end is dropped
//!   ([`Stats::stale`]): no reset, no acknowledgement, no delivery. An introduction from
//!   an unknown incarnation of the peer (a restart, or a forger who knows the connection
//!   id) changes nothing until a packet from that incarnation names this end's current
//!   one, which it learns only from a challenge sent to the peer's address
//!   ([`Stats::restart_challenges`], as TCP's challenge ACK of RFC 5961). Before the
//!   peer is known, the connection id alone stands between a forger and the
//!   connection: a 64-bit guess.
//! * **On-path attackers** that read the traffic learn the ids and incarnations: only a
//!   MAC ([`Config::mac_key`], keyed BLAKE3 over header and payload, 128-bit tags) stops
//!   them from injecting or altering packets ([`Stats::bad_mac`]). Replays of packets
//!   of the current life are taken as duplicates (sequence numbers and the receive
//!   window discard them); those of an earlier life name a dead incarnation.
//!
//! Out of scope: confidentiality (payloads travel in the clear), denial of service by
//! an on-path attacker (it can drop packets anyway, or keep re-triggering challenges),
//! and key distribution (the caller shares the key and the connection id).
//!
//! # Example
//!
//! ```
//! use myri_rpp::{Config, Connection, Event, Instant};
//!
//! let now = Instant::ZERO;
//! let mut a: Connection = Connection::new(Config::default(), 1, 7, now).unwrap();
//! let mut b: Connection = Connection::new(Config::default(), 1, 7, now).unwrap();
//! a.send(b"hello".to_vec()).unwrap();
//! let mut buf = vec![0u8; a.config().mtu];
//! // A perfect channel: move every datagram across until both sides are quiet.
//! loop {
//!     let mut moved = false;
//!     while let Some(n) = a.poll_transmit(now, &mut buf) {
//!         b.handle_packet(now, &buf[..n]);
//!         moved = true;
//!     }
//!     while let Some(n) = b.poll_transmit(now, &mut buf) {
//!         a.handle_packet(now, &buf[..n]);
//!         moved = true;
//!     }
//!     if !moved {
//!         break;
//!     }
//! }
//! let got: Vec<Vec<u8>> = std::iter::from_fn(|| b.poll_event())
//!     .filter_map(|e| if let Event::Message(m) = e { Some(m) } else { None })
//!     .collect();
//! assert_eq!(got, vec![b"hello".to_vec()]);
//! ```

mod config;
pub mod congestion;
mod connection;
mod rtt;
mod stats;
mod time;
pub mod wire;

#[cfg(any(test, feature = "test-utils"))]
pub mod testing;

pub use config::{Config, ConfigError};
pub use connection::{
    Connection, ConnectionError, DropReason, Event, Gather, INLINE_PAYLOAD, MessageId, Received,
    SendError, State,
};
pub use rtt::RttEstimator;
pub use stats::{Stats, Trace, TraceEvent, TraceKind};
pub use time::Instant;
pub use wire::{Integrity, MacKey};
