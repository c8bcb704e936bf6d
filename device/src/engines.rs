//! The LANai's packet interface: the send-DMA and receive-DMA engines (seed 000, Data
//! Flow, Sending, Receiving; seed 002 §4).
//!
//! **Send.** The control program points `SMP` at a word-aligned SRAM address, sets the
//! send alignment `SA` (bytes of that first word to skip: this is how a route of any length
//! is sent ending exactly where the word-aligned frame starts), then writes a limit: `SML`
//! sends `[SMP + SA, limit)` and leaves the packet open, `SMLT` sends it and ends the
//! packet. A packet may be sent in many pieces (route, then header, then payload chunk by
//! chunk as a host DMA fills the buffer: overlapped, cut-through send). When the tail is
//! sent the port appends the CRC-8 and hands the packet to the fabric. The engine is busy
//! for the time the bytes take on the link; SEND_INT is set while it is idle.
//!
//! **Receive.** The control program writes `RMP` (where to put the packet) and `RML` (the
//! limit); writing `RML` arms the engine. The next packet whose head has arrived is copied
//! in: `RMP` advances as its bytes arrive (the live pointer overlapped receive follows),
//! and at its tail RECV_INT is set and the engine disarms. A packet longer than the buffer
//! fills it, sets BUFF_INT and the rest of the packet is discarded (an overrun).

use crate::fabric::{Arrival, Fabric, PortId};
use crate::sram::Sram;
use crate::time::{Time, transfer_time};
use crate::wire::Packet;
use crate::wire::packet::MAX_WIRE_LEN;
use thiserror::Error;

/// A refused engine operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EngineError {
    /// A send was started while the engine was busy.
    #[error("send engine is busy")]
    SendBusy,
    /// `SMP` is not word aligned.
    #[error("send pointer {0:#x} is not word aligned")]
    SendUnaligned(u32),
    /// `SA` is not 0..=3.
    #[error("send alignment {0} is not 0..=3")]
    BadAlignment(u32),
    /// The send range is empty-inverted or outside SRAM.
    #[error("send range {start:#x}..{limit:#x} is not inside sram")]
    SendRange {
        /// First byte.
        start: u32,
        /// Limit.
        limit: u32,
    },
    /// The open packet would exceed the largest packet a link carries.
    #[error("packet of {0} bytes is longer than a link carries")]
    PacketTooLong(usize),
    /// The receive buffer is outside SRAM or inverted.
    #[error("receive buffer {start:#x}..{limit:#x} is not inside sram")]
    RecvRange {
        /// `RMP`.
        start: u32,
        /// `RML`.
        limit: u32,
    },
    /// The receive engine was re-armed while a packet was arriving.
    #[error("receive engine is busy with a packet")]
    RecvBusy,
}

/// Counters of the packet interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// Packets handed to the fabric.
    pub packets_sent: u64,
    /// Bytes sent (route bytes included).
    pub bytes_sent: u64,
    /// Packets completely received.
    pub packets_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Packets cut short by the receive limit.
    pub overruns: u64,
    /// Packets dropped because the port had no cable or the packet was too long.
    pub send_failures: u64,
    /// Engine operations refused.
    pub errors: u64,
}

/// Emptied packet buffers a board keeps for its own next sends before it gives them back
/// to the fabric: in a ping-pong the buffer a packet arrived in carries the answer, with
/// no lock taken.
pub const LOCAL_SPARES: usize = 4;

/// The send-DMA engine.
#[derive(Debug, Default)]
pub struct SendEngine {
    open: Vec<u8>,
    opened_at: Option<Time>,
    busy_until: Time,
    /// Emptied packet buffers for the next packets (at most [`LOCAL_SPARES`]).
    pub(crate) spare: Vec<Vec<u8>>,
}

impl SendEngine {
    /// Whether the engine can take another piece at `now`.
    pub fn idle(&self, now: Time) -> bool {
        now >= self.busy_until
    }

    /// When the current piece finishes, if busy at `now`.
    pub fn busy_until(&self, now: Time) -> Option<Time> {
        (now < self.busy_until).then_some(self.busy_until)
    }

    /// Bytes of the packet being sent that have not been ended yet.
    pub fn open_len(&self) -> usize {
        self.open.len()
    }

    /// Sends `[smp + sa, limit)`; with `tail`, ends the packet and transmits it.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        now: Time,
        sram: &Sram,
        smp: u32,
        sa: u32,
        limit: u32,
        tail: bool,
        bytes_per_sec: u64,
        port: Option<(&Fabric, PortId)>,
        counters: &mut EngineCounters,
    ) -> Result<(), EngineError> {
        if !self.idle(now) {
            return Err(EngineError::SendBusy);
        }
        if !smp.is_multiple_of(4) {
            return Err(EngineError::SendUnaligned(smp));
        }
        if sa > 3 {
            return Err(EngineError::BadAlignment(sa));
        }
        let start = smp + sa;
        let len = limit
            .checked_sub(start)
            .ok_or(EngineError::SendRange { start, limit })?;
        let bytes = sram
            .slice(start, len as usize)
            .map_err(|_| EngineError::SendRange { start, limit })?;
        if self.open.len() + bytes.len() + 1 > MAX_WIRE_LEN {
            self.open.clear();
            self.opened_at = None;
            counters.send_failures += 1;
            return Err(EngineError::PacketTooLong(
                self.open.len() + bytes.len() + 1,
            ));
        }
        let opened_at = *self.opened_at.get_or_insert(now);
        self.open.extend_from_slice(bytes);
        let start_time = now.max(self.busy_until);
        self.busy_until = start_time + transfer_time(bytes.len(), bytes_per_sec);
        if tail {
            // The next packet's buffer is one this board emptied before, or one the port
            // got back, if any.
            let next = self.spare.pop().unwrap_or_else(|| {
                port.map_or_else(
                    || Vec::with_capacity(256),
                    |(fabric, id)| fabric.take_buffer(id),
                )
            });
            let contents = core::mem::replace(&mut self.open, next);
            self.opened_at = None;
            counters.bytes_sent += contents.len() as u64;
            let transmitted = Packet::seal(contents).ok().and_then(|packet| {
                port.and_then(|(fabric, id)| fabric.transmit(opened_at, id, packet).ok())
            });
            match transmitted {
                Some(_) => counters.packets_sent += 1,
                None => counters.send_failures += 1,
            }
        }
        Ok(())
    }
}

/// Where the receive engine stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvState {
    /// Not armed.
    Idle,
    /// Armed with `[rmp, rml)`, waiting for a packet.
    Armed {
        /// Buffer start.
        rmp: u32,
        /// Buffer limit.
        rml: u32,
    },
    /// A packet is arriving into `[start, start + len)`; its tail arrives at `tail`.
    Receiving {
        /// Buffer start.
        start: u32,
        /// Bytes the buffer will hold.
        len: u32,
        /// When the first byte arrived.
        head: Time,
        /// When the last byte arrives.
        tail: Time,
        /// The packet was longer than the buffer.
        overrun: bool,
    },
    /// A packet was received into `[start, end)`.
    Done {
        /// Buffer start.
        start: u32,
        /// One past the last byte received.
        end: u32,
        /// The packet was cut short.
        overrun: bool,
    },
}

/// The receive-DMA engine.
#[derive(Debug)]
pub struct RecvEngine {
    state: RecvState,
}

impl Default for RecvEngine {
    fn default() -> Self {
        RecvEngine {
            state: RecvState::Idle,
        }
    }
}

impl RecvEngine {
    /// The engine's state.
    pub fn state(&self) -> RecvState {
        self.state
    }

    /// Arms the engine with the buffer `[rmp, rml)`.
    pub fn arm(&mut self, sram: &Sram, rmp: u32, rml: u32) -> Result<(), EngineError> {
        if matches!(self.state, RecvState::Receiving { .. }) {
            return Err(EngineError::RecvBusy);
        }
        let len = rml.checked_sub(rmp).ok_or(EngineError::RecvRange {
            start: rmp,
            limit: rml,
        })?;
        if len == 0 || !sram.contains(rmp, len as usize) {
            return Err(EngineError::RecvRange {
                start: rmp,
                limit: rml,
            });
        }
        self.state = RecvState::Armed { rmp, rml };
        Ok(())
    }

    /// Disarms an armed engine (a packet already arriving is not affected).
    pub fn disarm(&mut self) {
        if matches!(self.state, RecvState::Armed { .. } | RecvState::Done { .. }) {
            self.state = RecvState::Idle;
        }
    }

    /// The live `RMP`: where the next byte goes at `now`.
    pub fn pointer(&self, now: Time) -> u32 {
        match self.state {
            RecvState::Idle => 0,
            RecvState::Armed { rmp, .. } => rmp,
            RecvState::Receiving {
                start,
                len,
                head,
                tail,
                ..
            } => {
                if now >= tail {
                    return start + len;
                }
                let span = tail.saturating_since(head).as_nanos().max(1);
                let elapsed = now.saturating_since(head).as_nanos();
                start + (u128::from(len) * elapsed / span) as u32
            }
            RecvState::Done { end, .. } => end,
        }
    }

    /// Starts on an arrived packet if armed; completes a packet whose tail has come.
    /// Returns the ISR bits to set. The emptied packet buffer goes to `spare` (the board's
    /// send engine's, up to [`LOCAL_SPARES`]) or back to the fabric.
    pub fn advance(
        &mut self,
        now: Time,
        sram: &mut Sram,
        port: Option<(&Fabric, PortId)>,
        counters: &mut EngineCounters,
        spare: &mut Vec<Vec<u8>>,
    ) -> u32 {
        let mut bits = 0;
        if let RecvState::Armed { rmp, rml } = self.state
            && let Some((fabric, id)) = port
            && let Some(arrival) = fabric.receive(now, id)
        {
            self.start(arrival, rmp, rml, sram, (fabric, id), spare);
        }
        if let RecvState::Receiving {
            start,
            len,
            tail,
            overrun,
            ..
        } = self.state
            && now >= tail
        {
            self.state = RecvState::Done {
                start,
                end: start + len,
                overrun,
            };
            if overrun {
                counters.overruns += 1;
                bits |= crate::special::isr::BUFF_INT;
            } else {
                counters.packets_received += 1;
                counters.bytes_received += u64::from(len);
                bits |= crate::special::isr::RECV_INT;
            }
        }
        bits
    }

    fn start(
        &mut self,
        arrival: Arrival,
        rmp: u32,
        rml: u32,
        sram: &mut Sram,
        port: (&Fabric, PortId),
        spare: &mut Vec<Vec<u8>>,
    ) {
        let contents = arrival.packet.contents();
        let room = (rml - rmp) as usize;
        let overrun = contents.len() > room;
        let len = contents.len().min(room);
        // `arm` checked that `[rmp, rml)` is inside SRAM.
        let _ = sram.write(rmp, &contents[..len]);
        self.state = RecvState::Receiving {
            start: rmp,
            len: len as u32,
            head: arrival.head,
            tail: arrival.tail,
            overrun,
        };
        // The bytes are in SRAM now: the buffer goes back for a next send, this board's
        // first.
        let storage = arrival.packet.into_storage();
        if spare.len() < LOCAL_SPARES {
            spare.push(storage);
        } else {
            let (fabric, at) = port;
            fabric.recycle(at, PortId(arrival.id.source), storage);
        }
    }

    /// When the packet being received completes, if one is.
    pub fn deadline(&self) -> Option<Time> {
        match self.state {
            RecvState::Receiving { tail, .. } => Some(tail),
            _ => None,
        }
    }
}
