//! The Myrinet Control Program: the firmware that runs on the board's LANai (seed 000,
//! MCP Overview, MCP Features, Data Flow, Sending, Receiving, Appendix B).
//!
//! Three state machines, one per DMA engine, share two pools of SRAM buffers:
//!
//! * **host DMA** ([`host_dma`]) moves packets between host memory and the pools with the
//!   board's DMA controller (channel 0, a ring of control blocks). Receives go first: it
//!   takes the oldest packet of the rx pool to its channel's next posted host buffer, then
//!   DMAs the length and the channel's completion count to the host's poll words. Otherwise
//!   it takes the next send-channel slot: a PIO slot needs no DMA; a DMA slot is brought
//!   into a tx pool buffer, overlapped with the send DMA when the tx pool was empty and the
//!   packet is large.
//! * **send DMA** ([`send`]) sends the oldest tx pool packet: the route (placed with the
//!   send alignment so it ends where the word-aligned frame starts), then the frame, or,
//!   when overlapped, the frame chunk by chunk behind the live host-DMA pointer.
//! * **receive DMA** ([`recv`]) keeps the receive engine always armed with an rx pool
//!   buffer and never blocks the network: with the pool full, the packet is dropped and
//!   counted. It runs from the interrupt (RECV_INT/BUFF_INT unmasked, serviced before
//!   anything else) or polled (in its turn, which also allows overlapped receive).
//!
//! The MCP is stepped by [`Mcp::poll`]: inline by the host's progress calls, on a thread of
//! its own, or under the deterministic scheduler. It never reads a clock.

pub mod csum;
pub mod directed;
pub mod host_dma;
pub mod pool;
pub mod recv;
pub mod send;
pub mod trapeze;

use crate::hcb::{self, HCB_PTR, IMAGE_MAGIC, Layout, counter, off, state};
use myri_device::board::Lanai;
use myri_device::time::Time;
use pool::{Ring, TxEntry};

/// How the receive DMA is driven (seed 000, Receiving).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvMode {
    /// RECV_INT and BUFF_INT unmasked; received packets are handled before anything else.
    Interrupt,
    /// Handled in the main loop's turn; allows overlapped receive.
    Polled,
}

/// The control program's settings, carried in its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct McpConfig {
    /// Interrupt-driven or polled receive.
    pub recv_mode: RecvMode,
    /// Payloads up to this many bytes go by PIO (at most [`hcb::PIO_MAX`]).
    pub pio_threshold: u32,
    /// Payloads of at least this many bytes use overlapped send and receive.
    pub overlap_threshold: u32,
    /// The least a follower DMA moves at a time in overlapped mode (a multiple of 4).
    pub overlap_chunk: u32,
    /// A broken image that never answers the host's handshake (for testing the host).
    pub mute: bool,
    /// How fast the LANai copies from the SRAM workspace into a send buffer (seed 001,
    /// §3.2.2), in bytes per second; 0 is instantaneous. See [`lanai_copy_rate`].
    pub lanai_copy_bytes_per_sec: u32,
}

/// The LANai's copy rate of seed 001, §3.2.2: a 32-bit word every two cycles in theory (2
/// bytes a cycle: 266 MB/s at 133 MHz), half of that in practice, where one memory-bus
/// cycle in four goes to the packet being sent and one to instruction fetch.
pub fn lanai_copy_rate(lanai_mhz: u32, in_practice: bool) -> u32 {
    let theory = lanai_mhz.saturating_mul(2_000_000);
    if in_practice { theory / 2 } else { theory }
}

impl Default for McpConfig {
    fn default() -> McpConfig {
        McpConfig {
            recv_mode: RecvMode::Interrupt,
            pio_threshold: 256,
            overlap_threshold: 2048,
            overlap_chunk: 1024,
            mute: false,
            lanai_copy_bytes_per_sec: 0,
        }
    }
}

/// Word offsets of the image header at SRAM 0.
mod image {
    pub const MAGIC: u32 = 0x0;
    pub const FLAGS: u32 = 0x4;
    pub const PIO: u32 = 0x10;
    pub const OVERLAP: u32 = 0x14;
    pub const CHUNK: u32 = 0x18;
    pub const COPY_RATE: u32 = 0x1C;
    pub const LEN: usize = 0x20;
    pub const FLAG_POLLED: u32 = 1;
    pub const FLAG_MUTE: u32 = 2;
}

impl McpConfig {
    /// The image the host loads into SRAM at step 17 of the initialization: a header with
    /// this configuration. The word at [`HCB_PTR`] is zero until the MCP sets it.
    pub fn image(&self) -> Vec<u8> {
        let mut b = vec![0u8; image::LEN];
        let mut put =
            |at: u32, v: u32| b[at as usize..at as usize + 4].copy_from_slice(&v.to_be_bytes());
        put(image::MAGIC, IMAGE_MAGIC);
        let mut flags = 0;
        if self.recv_mode == RecvMode::Polled {
            flags |= image::FLAG_POLLED;
        }
        if self.mute {
            flags |= image::FLAG_MUTE;
        }
        put(image::FLAGS, flags);
        put(image::PIO, self.pio_threshold);
        put(image::OVERLAP, self.overlap_threshold);
        put(image::CHUNK, self.overlap_chunk);
        put(image::COPY_RATE, self.lanai_copy_bytes_per_sec);
        b
    }

    /// Reads the configuration from an image in SRAM, clamping nonsense to sane values.
    fn from_sram(l: &Lanai<'_>) -> Option<McpConfig> {
        let s = l.sram_ref();
        if s.read_u32(image::MAGIC).ok()? != IMAGE_MAGIC {
            return None;
        }
        let flags = s.read_u32(image::FLAGS).ok()?;
        Some(McpConfig {
            recv_mode: if flags & image::FLAG_POLLED != 0 {
                RecvMode::Polled
            } else {
                RecvMode::Interrupt
            },
            pio_threshold: s.read_u32(image::PIO).ok()?.min(hcb::PIO_MAX as u32),
            overlap_threshold: s.read_u32(image::OVERLAP).ok()?.max(hcb::recv_chan::SLOTS),
            overlap_chunk: (s.read_u32(image::CHUNK).ok()?.max(64)) & !3,
            mute: flags & image::FLAG_MUTE != 0,
            lanai_copy_bytes_per_sec: s.read_u32(image::COPY_RATE).ok()?,
        })
    }
}

/// Loop iterations per [`Mcp::poll`]: fewer than the rx pool holds, so that one call
/// cannot overflow it while the host waits for the call to return.
pub const SLICE: usize = 16;

/// How often the MCP looks at a live DMA pointer it follows, in virtual time.
pub const FOLLOW_TICK: std::time::Duration = std::time::Duration::from_nanos(500);

/// The MCP's counters, mirrored into the HCB for the host to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct McpCounters {
    /// Raw values, indexed by [`hcb::counter`].
    pub values: [u32; counter::COUNT as usize],
}

impl McpCounters {
    /// One counter.
    pub fn get(&self, c: u32) -> u32 {
        self.values[c as usize]
    }
}

/// The running control program.
pub struct Mcp {
    layout: Layout,
    config: McpConfig,
    counters: McpCounters,
    dirty: u32,
    host: host_dma::HostDma,
    send: send::SendDma,
    recv: recv::RecvDma,
    tx: Ring<TxEntry>,
    tpz: trapeze::TpzState,
    running: bool,
}

impl Mcp {
    /// Boots from the image in SRAM: sets up the HCB, the DMA ring and the receive DMA, and
    /// publishes the HCB address. `None` if SRAM holds no MCP image (the LANai then runs
    /// nothing useful, and the host's handshake will time out).
    pub fn boot(l: &mut Lanai<'_>) -> Option<Mcp> {
        let config = McpConfig::from_sram(l)?;
        let layout = Layout::new(l.sram_ref().len())?;
        hcb::initialize(l.sram(), &layout).ok()?;
        let host = host_dma::HostDma::new(&layout, l).ok()?;
        let mut recv = recv::RecvDma::new(&layout);
        recv.start(l, config.recv_mode);
        l.sram()
            .write_u32(layout.base + off::MCP_STATE, state::READY)
            .ok()?;
        l.sram().write_u32(HCB_PTR, layout.base).ok()?;
        Some(Mcp {
            layout,
            config,
            counters: McpCounters::default(),
            dirty: 0,
            host,
            send: send::SendDma::default(),
            recv,
            tx: Ring::new(hcb::TX_POOL),
            tpz: trapeze::TpzState::default(),
            running: false,
        })
    }

    /// The configuration read from the image.
    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// The SRAM layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Counters.
    pub fn counters(&self) -> McpCounters {
        self.counters
    }

    pub(crate) fn count(&mut self, c: u32) {
        self.counters.values[c as usize] = self.counters.values[c as usize].wrapping_add(1);
        self.dirty |= 1 << c;
    }

    fn flush_counters(&mut self, l: &mut Lanai<'_>) {
        while self.dirty != 0 {
            let c = self.dirty.trailing_zeros();
            self.dirty &= !(1 << c);
            let _ = l
                .sram()
                .write_u32(self.layout.counter(c), self.counters.values[c as usize]);
        }
    }

    /// Answers a host's handshake: a host writes a nonce and `HELLO`; the MCP writes the
    /// nonce's complement and `RUNNING`.
    fn handshake(&mut self, l: &mut Lanai<'_>) {
        let at = self.layout.base;
        if l.sram_ref().read_u32(at + off::MCP_STATE) == Ok(state::HELLO) && !self.config.mute {
            let nonce = l.sram_ref().read_u32(at + off::HANDSHAKE).unwrap_or(0);
            let _ = l.sram().write_u32(at + off::HANDSHAKE, !nonce);
            let _ = l.sram().write_u32(at + off::MCP_STATE, state::RUNNING);
            self.running = true;
        }
    }

    /// When the MCP wants to run again by itself: while it follows a live DMA pointer
    /// (overlapped send or receive) a real MCP spins; under the scheduler it asks to be
    /// woken every [`FOLLOW_TICK`] instead.
    pub fn next_wake(&self, now: Time, l: &Lanai<'_>) -> Option<Time> {
        let following_send = matches!(self.send, send::SendDma::Overlap { .. })
            || self
                .tx
                .head()
                .is_some_and(|e| e.overlapped && self.send == send::SendDma::Idle);
        let following_recv = self.host.following()
            || (self.config.recv_mode == RecvMode::Polled
                && self.recv.rx.is_empty()
                && self.host.idle()
                && matches!(
                    l.recv_state(),
                    myri_device::engines::RecvState::Receiving { .. }
                ));
        let follow =
            (self.running && (following_send || following_recv)).then(|| now + FOLLOW_TICK);
        // A LANai copy from the workspace ends by itself (seed 001, send from SRAM).
        [follow, self.host.copy_until()].into_iter().flatten().min()
    }

    /// Whether a host has completed a handshake.
    pub fn running(&self) -> bool {
        self.running
    }

    /// Runs the control program at `now` until it has nothing more to do right away.
    /// The caller has run the hardware up to `now` ([`Lanai::advance`]). Returns whether
    /// the MCP did anything (the threaded runner spins while it does).
    pub fn poll(&mut self, now: Time, l: &mut Lanai<'_>) -> bool {
        self.handshake(l);
        if !self.running {
            // Until a host has shaken hands (and so set up the DMA channel pointer), only
            // keep the network drained.
            let worked = recv::service(self, now, l, false);
            self.flush_counters(l);
            return worked;
        }
        let mut worked = false;
        // A bounded slice of work per call: an inline host gets its turn (to post more
        // receive buffers, say) before the rx pool can fill from one burst.
        let interrupt = self.config.recv_mode == RecvMode::Interrupt;
        for _ in 0..SLICE {
            // Each state machine runs only when it has something to look at (a few loads
            // each): a pass that finds nothing anywhere costs little.
            let mut progress = false;
            if recv::has_work(l) {
                progress |= recv::service(self, now, l, interrupt);
            }
            if host_dma::has_work(self, l) {
                progress |= host_dma::step(self, now, l);
            }
            if !self.tx.is_empty() {
                progress |= send::step(self, now, l);
            }
            if !progress {
                break;
            }
            // Let the hardware act on what was just started before looking again.
            l.advance(now);
            worked = true;
        }
        self.flush_counters(l);
        worked
    }
}

#[cfg(test)]
mod csum_tests;
#[cfg(test)]
mod tests;
