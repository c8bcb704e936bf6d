//! The PCI64 DMA controller (seed 002, §3): four channels of control-block chains in SRAM.
//!
//! Each channel has a pointer register naming its current block. Triggering a channel
//! (from the host's control register, or from the LANai's PULSE register for channels 0
//! and 2) makes it walk its chain: a terminal block (T set, or an all-zero `next` word) is
//! not executed and the channel sleeps on it; any other block is executed, then its T bit
//! is set, the ones-complement sum of the data is written to its `csum` field, WAKE_INT is
//! raised if its I bit is set, and the pointer advances. Blocks of length zero are skipped.
//! Channels are served in priority order, 0 highest, one whole block at a time.
//!
//! Nothing here trusts SRAM: a block outside SRAM, a data range outside SRAM, a host
//! address the device does not own, or a chain that cycles through zero-length blocks
//! stops the channel with a [`DmaError`] (counted), never a panic or a hang. Cycles
//! through non-empty blocks end by themselves, because executed blocks become terminal.

pub mod block;
pub mod checksum;

use crate::hostmem::{DmaFault, HostMemory};
use crate::sram::Sram;
use crate::time::{Time, transfer_time};
use block::{BLOCK_LEN, DmaBlock, FLAG_TERMINAL};
pub use block::{Direction, DmaBlockRepr};
use thiserror::Error;

/// Number of DMA channels.
pub const CHANNELS: usize = 4;
/// The bits a pointer register keeps: enough for 8 MiB, without the low three.
pub const POINTER_MASK: u32 = 0x007F_FFF8;

/// Why a channel stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DmaError {
    /// The current block does not lie inside SRAM.
    #[error("dma block at {block:#x} is outside sram")]
    BlockOutOfRange {
        /// Block address.
        block: u32,
    },
    /// The block's SRAM range does not lie inside SRAM.
    #[error("dma block at {block:#x}: sram range {lar:#x}+{len} is outside sram")]
    SramRange {
        /// Block address.
        block: u32,
        /// SRAM address.
        lar: u32,
        /// Length.
        len: u32,
    },
    /// The host side of the transfer faulted.
    #[error("dma block at {block:#x}: {fault}")]
    Host {
        /// Block address.
        block: u32,
        /// What host memory said.
        fault: DmaFault,
    },
    /// No host memory is attached to the board.
    #[error("dma block at {block:#x}: no host memory is attached")]
    NoHostMemory {
        /// Block address.
        block: u32,
    },
    /// The chain loops through blocks that never become terminal.
    #[error("dma chain cycles at block {block:#x}")]
    Cycle {
        /// A block on the cycle.
        block: u32,
    },
    /// The PCI bus-master bit is off, or the board is in reset.
    #[error("dma attempted while the board may not master the pci bus")]
    NotBusMaster,
}

/// A channel's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelState {
    /// Asleep on a terminal block (or never triggered).
    Idle,
    /// Walking its chain.
    Active,
    /// Stopped by an error until its pointer is rewritten or it is triggered again.
    Faulted(DmaError),
}

/// A completed block, for logs and traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// Channel.
    pub channel: u8,
    /// Block address.
    pub block: u32,
    /// Bytes moved.
    pub len: u32,
    /// Checksum written back.
    pub csum: u16,
    /// Completion time.
    pub at: Time,
}

/// The block the engine is moving now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Channel.
    pub channel: u8,
    /// Block address.
    pub block: u32,
    /// Bytes moved so far.
    pub done: u32,
    /// Bytes in the block.
    pub len: u32,
}

/// Counters of the controller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DmaCounters {
    /// Blocks executed.
    pub blocks: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Zero-length blocks skipped.
    pub skipped: u64,
    /// Channels stopped by an error.
    pub faults: u64,
}

/// What the board hands the controller for one [`DmaController::advance`].
pub struct DmaBus<'a> {
    /// The board's SRAM.
    pub sram: &'a mut Sram,
    /// Host memory, if the driver attached any.
    pub host: Option<&'a HostMemory>,
    /// Whether the board may master the PCI bus.
    pub bus_master: bool,
}

#[derive(Debug, Clone, Copy)]
struct Channel {
    pointer: u32,
    state: ChannelState,
    activated: Time,
    /// Blocks visited since the last trigger, bounded by the chain-walk budget.
    visits: u32,
    cycle: Brent,
}

/// Brent's cycle detection over a run of consecutive zero-length blocks.
#[derive(Debug, Clone, Copy, Default)]
struct Brent {
    tortoise: u32,
    power: u32,
    steps: u32,
}

impl Brent {
    /// Visits `addr`; true if it closes a cycle of zero-length blocks.
    fn visit(&mut self, addr: u32) -> bool {
        if self.power == 0 {
            *self = Brent {
                tortoise: addr,
                power: 1,
                steps: 0,
            };
            return false;
        }
        if addr == self.tortoise {
            return true;
        }
        self.steps += 1;
        if self.steps == self.power {
            self.tortoise = addr;
            self.power = self.power.saturating_mul(2);
            self.steps = 0;
        }
        false
    }
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    channel: u8,
    block: u32,
    len: u32,
    csum: u16,
    wake: bool,
    started: Time,
    finish: Time,
}

/// The DMA controller.
#[derive(Debug, Clone)]
pub struct DmaController {
    channels: [Channel; CHANNELS],
    in_flight: Option<InFlight>,
    free_at: Time,
    bytes_per_sec: u64,
    counters: DmaCounters,
    log: Option<Vec<Completion>>,
}

impl DmaController {
    /// A controller moving `bytes_per_sec` (0: unthrottled, every block takes no time).
    pub fn new(bytes_per_sec: u64) -> DmaController {
        let idle = Channel {
            pointer: 0,
            state: ChannelState::Idle,
            activated: Time::ZERO,
            visits: 0,
            cycle: Brent::default(),
        };
        DmaController {
            channels: [idle; CHANNELS],
            in_flight: None,
            free_at: Time::ZERO,
            bytes_per_sec,
            counters: DmaCounters::default(),
            log: None,
        }
    }

    /// Keeps a log of completed blocks (see [`DmaController::take_log`]).
    pub fn set_logging(&mut self, on: bool) {
        self.log = on.then(Vec::new);
    }

    /// Takes the log of completed blocks.
    pub fn take_log(&mut self) -> Vec<Completion> {
        self.log.as_mut().map(core::mem::take).unwrap_or_default()
    }

    /// Writes a channel's pointer register (only bits 22..3 are kept). Clears a fault.
    pub fn write_pointer(&mut self, channel: usize, value: u32) {
        if let Some(c) = self.channels.get_mut(channel) {
            c.pointer = value & POINTER_MASK;
            if matches!(c.state, ChannelState::Faulted(_)) {
                c.state = ChannelState::Idle;
            }
        }
    }

    /// Reads a channel's pointer register (0 for a channel that does not exist).
    pub fn read_pointer(&self, channel: usize) -> u32 {
        self.channels.get(channel).map_or(0, |c| c.pointer)
    }

    /// A channel's state.
    pub fn state(&self, channel: usize) -> Option<ChannelState> {
        self.channels.get(channel).map(|c| c.state)
    }

    /// Counters.
    pub fn counters(&self) -> DmaCounters {
        self.counters
    }

    /// Wakes a channel to (re)examine its current block. Harmless if already active.
    pub fn trigger(&mut self, channel: usize, now: Time) {
        if let Some(c) = self.channels.get_mut(channel)
            && c.state != ChannelState::Active
        {
            c.state = ChannelState::Active;
            c.activated = now;
            c.visits = 0;
            c.cycle = Brent::default();
        }
    }

    /// Whether no channel is active and no block is moving.
    pub fn is_idle(&self) -> bool {
        self.in_flight.is_none()
            && self
                .channels
                .iter()
                .all(|c| c.state != ChannelState::Active)
    }

    /// When the block in flight will complete, if one is moving.
    pub fn next_deadline(&self) -> Option<Time> {
        self.in_flight.map(|f| f.finish)
    }

    /// The block being moved and how far it has got at `now` (the "live DMA pointer" that
    /// overlapped send follows, seed 000, Sending).
    pub fn progress(&self, now: Time) -> Option<Progress> {
        self.in_flight.map(|f| {
            let elapsed = now.saturating_since(f.started);
            let done = if now >= f.finish {
                f.len
            } else {
                let bytes = elapsed.as_nanos() * u128::from(self.bytes_per_sec) / 1_000_000_000;
                u32::try_from(bytes).unwrap_or(u32::MAX).min(f.len)
            };
            Progress {
                channel: f.channel,
                block: f.block,
                done,
                len: f.len,
            }
        })
    }

    /// Runs the controller up to `now`. Returns true if a completed block asked for
    /// WAKE_INT.
    pub fn advance(&mut self, now: Time, bus: &mut DmaBus<'_>) -> bool {
        let mut wake = false;
        // A channel never visits more blocks per trigger than twice the number of block
        // slots in SRAM: a longer walk must be looping (see the module docs).
        let budget = (bus.sram.len() / block::BLOCK_ALIGN)
            .saturating_mul(2)
            .saturating_add(2);
        loop {
            if let Some(f) = self.in_flight {
                if now < f.finish {
                    return wake;
                }
                wake |= self.complete(f, bus.sram);
            }
            let Some(ch) = self
                .channels
                .iter()
                .position(|c| c.state == ChannelState::Active)
            else {
                return wake;
            };
            if let Err(e) = self.start_block(ch, budget, bus) {
                self.channels[ch].state = ChannelState::Faulted(e);
                self.counters.faults += 1;
            }
        }
    }

    /// Examines channel `ch`'s current block: sleeps on it, skips it, or starts it.
    fn start_block(
        &mut self,
        ch: usize,
        budget: u32,
        bus: &mut DmaBus<'_>,
    ) -> Result<(), DmaError> {
        let c = &mut self.channels[ch];
        let addr = c.pointer;
        c.visits += 1;
        let raw = bus
            .sram
            .slice(addr, BLOCK_LEN)
            .map_err(|_| DmaError::BlockOutOfRange { block: addr })?;
        let blk =
            DmaBlock::new_checked(raw).map_err(|_| DmaError::BlockOutOfRange { block: addr })?;
        if blk.is_terminal() {
            c.state = ChannelState::Idle;
            return Ok(());
        }
        if c.visits > budget {
            return Err(DmaError::Cycle { block: addr });
        }
        let (len, lar, host_addr, dir, next, wakes) = (
            blk.len(),
            blk.lar(),
            blk.host_addr(),
            blk.direction(),
            blk.next_addr(),
            blk.wakes(),
        );
        if len == 0 {
            if c.cycle.visit(addr) {
                return Err(DmaError::Cycle { block: addr });
            }
            c.pointer = next & POINTER_MASK;
            self.counters.skipped += 1;
            return Ok(());
        }
        c.cycle = Brent::default();
        if !bus.bus_master {
            return Err(DmaError::NotBusMaster);
        }
        let host = bus.host.ok_or(DmaError::NoHostMemory { block: addr })?;
        let data = bus
            .sram
            .slice_mut(lar, len as usize)
            .map_err(|_| DmaError::SramRange {
                block: addr,
                lar,
                len,
            })?;
        // The sum is computed as the bytes move (one pass over them).
        let moved = match dir {
            Direction::HostToLanai => host.dma_read(host_addr, data),
            Direction::LanaiToHost => host.dma_write(host_addr, data),
        };
        let csum = moved.map_err(|fault| DmaError::Host { block: addr, fault })?;
        // The engine runs on its own: `advance` only catches up with it, so the block
        // started when the channel was triggered or the engine came free, not at `now`.
        let started = self.free_at.max(c.activated);
        let finish = started + transfer_time(len as usize, self.bytes_per_sec);
        self.in_flight = Some(InFlight {
            channel: ch as u8,
            block: addr,
            len,
            csum,
            wake: wakes,
            started,
            finish,
        });
        Ok(())
    }

    /// Finishes the block in flight: T bit, checksum, pointer. Returns its wake bit.
    fn complete(&mut self, f: InFlight, sram: &mut Sram) -> bool {
        self.in_flight = None;
        self.free_at = f.finish;
        // The block was read from SRAM when it started, so it is in range; the control
        // program may have rewritten it since, which the hardware would also not notice.
        let next = sram.read_u32(f.block).unwrap_or(0);
        let _ = sram.write_u32(f.block, next | FLAG_TERMINAL);
        let _ = sram.write_u16(f.block + 6, f.csum);
        let c = &mut self.channels[usize::from(f.channel)];
        c.pointer = next & POINTER_MASK;
        self.counters.blocks += 1;
        self.counters.bytes += u64::from(f.len);
        if let Some(log) = &mut self.log {
            log.push(Completion {
                channel: f.channel,
                block: f.block,
                len: f.len,
                csum: f.csum,
                at: f.finish,
            });
        }
        f.wake
    }
}

#[cfg(test)]
mod tests;
