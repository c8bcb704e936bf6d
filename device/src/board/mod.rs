//! The PCI64 board: SRAM, control register, DMA controller, doorbell, EEPROM, special
//! registers, packet interface and link port (seed 002).
//!
//! The host sees the board through its 16 MB PCI window ([`Board::pci_read_u32`],
//! [`Board::pci_write_u32`] and friends, decoded as in seed 002 §2.1). A control program
//! sees it through a [`Lanai`] view, which the board hands out only once the §2.4
//! initialization has brought the LANai out of reset. Hardware progress (DMA blocks
//! finishing, packets arriving, timers expiring) happens in [`Board::advance`], which
//! takes `now` like everything else here.

mod faults;
mod init;
mod lanai;
mod pci;

pub use faults::{SramFaultCounters, SramFaults};
pub use init::{BringUpError, bring_up};
pub use lanai::{Lanai, NotRunning};
pub use pci::{PciError, config};

use crate::control::{InitStep, InitTracker};
use crate::dma::{DmaBus, DmaController};
use crate::doorbell::{Doorbell, DoorbellConfig};
use crate::eeprom::Eeprom;
use crate::engines::{EngineCounters, RecvEngine, SendEngine};
use crate::fabric::{Fabric, PortId};
use crate::hostmem::HostMemory;
use crate::special::{RTC_TICKS_PER_US, isr};
use crate::sram::Sram;
use crate::time::Time;
use std::sync::Arc;

/// How fast the board's engines move data. Zero means unthrottled (instantaneous).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timing {
    /// Host-DMA (PCI) bytes per second.
    pub host_dma_bytes_per_sec: u64,
    /// Send-engine bytes per second (the link rate).
    pub send_bytes_per_sec: u64,
}

impl Timing {
    /// A PCI64B in a 64-bit, 66 MHz slot on a SAN-2000 link: ~400 MB/s of host DMA and
    /// 250 MB/s on the wire.
    pub const PCI64B: Timing = Timing {
        host_dma_bytes_per_sec: 400_000_000,
        send_bytes_per_sec: 250_000_000,
    };
}

/// How a board is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardConfig {
    /// The EEPROM record (also gives the SRAM size).
    pub eeprom: Eeprom,
    /// PCI bus clock in MHz (33 or 66).
    pub pci_mhz: u32,
    /// Engine speeds.
    pub timing: Timing,
}

impl BoardConfig {
    /// A PCI64B with a 2 MiB SRAM in a 33 MHz slot, unthrottled, with board id derived
    /// from `unit`.
    pub fn pci64b(unit: u32) -> BoardConfig {
        let id = unit.to_be_bytes();
        BoardConfig {
            eeprom: Eeprom::pci64b(
                [0x00, 0x60, 0xdd, id[1], id[2], id[3]],
                50_000 + unit,
                crate::sram::SramSize::Mib2,
            ),
            pci_mhz: 33,
            timing: Timing::default(),
        }
    }
}

/// Counters of the host's accesses through the PCI window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PciCounters {
    /// Reads (word, byte or block) by the host.
    pub reads: u64,
    /// Writes by the host.
    pub writes: u64,
    /// Bytes moved by host reads and writes of SRAM (programmed I/O).
    pub pio_bytes: u64,
    /// Accesses refused.
    pub errors: u64,
}

/// Counters of the whole board.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BoardCounters {
    /// Host accesses.
    pub pci: PciCounters,
    /// Packet interface.
    pub engines: EngineCounters,
    /// Control-program register accesses refused.
    pub lanai_errors: u64,
}

/// What the board knows of its link.
#[derive(Debug, Clone)]
pub(crate) struct LinkPort {
    pub(crate) fabric: Arc<Fabric>,
    pub(crate) port: PortId,
    pub(crate) was_up: bool,
}

/// The latched special-register state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Specials {
    pub(crate) isr: u32,
    pub(crate) eimr: u32,
    pub(crate) timers: [Option<Time>; 3],
    pub(crate) smp: u32,
    pub(crate) sa: u32,
    pub(crate) rmp: u32,
    pub(crate) timeout: u32,
    pub(crate) myrinet: u32,
    pub(crate) led: u32,
    pub(crate) debug: u32,
    pub(crate) write_enable: u32,
}

/// A simulated PCI64 board.
pub struct Board {
    config: BoardConfig,
    pub(crate) sram: Sram,
    pub(crate) tracker: InitTracker,
    pub(crate) specials: Specials,
    pub(crate) dma: DmaController,
    pub(crate) doorbell: Doorbell,
    pub(crate) send: SendEngine,
    pub(crate) recv: RecvEngine,
    pub(crate) link: Option<LinkPort>,
    pub(crate) host: Option<Arc<HostMemory>>,
    pub(crate) counters: BoardCounters,
    pub(crate) pci_command: u16,
    pub(crate) lanai_starts: u64,
    /// Corruption of packets in SRAM, for tests of end-to-end checks.
    pub(crate) sram_faults: Option<Box<faults::SramFaultInjector>>,
}

impl Board {
    /// A powered-up board, everything held in reset.
    pub fn new(config: BoardConfig) -> Board {
        let e = &config.eeprom;
        Board {
            sram: Sram::new(e.sram_size),
            tracker: InitTracker::new(e.clockval, e.max_lanai_speed, e.is_lanai9(), config.pci_mhz),
            specials: Specials::default(),
            dma: DmaController::new(config.timing.host_dma_bytes_per_sec),
            doorbell: Doorbell::default(),
            send: SendEngine::default(),
            recv: RecvEngine::default(),
            link: None,
            host: None,
            counters: BoardCounters::default(),
            pci_command: config::COMMAND_MEMORY | config::COMMAND_BUS_MASTER,
            lanai_starts: 0,
            sram_faults: None,
            config,
        }
    }

    /// Corrupts packets in SRAM as `faults` says, drawing from a generator seeded with
    /// `seed` (see [`SramFaults`]); the default config turns it off.
    pub fn set_sram_faults(
        &mut self,
        faults: SramFaults,
        seed: u64,
    ) -> Result<(), crate::fabric::fault::BadProbability> {
        faults.validate()?;
        self.sram_faults = (faults != SramFaults::default())
            .then(|| Box::new(faults::SramFaultInjector::new(faults, seed)));
        Ok(())
    }

    /// Bits [`Board::set_sram_faults`] has flipped so far.
    pub fn sram_fault_counters(&self) -> SramFaultCounters {
        self.sram_faults
            .as_ref()
            .map_or_else(SramFaultCounters::default, |f| f.counters)
    }

    /// Plugs the board's link port into port `port` of `fabric`.
    pub fn attach_link(&mut self, fabric: Arc<Fabric>, port: PortId) {
        let was_up = fabric.port_link_up(port);
        self.link = Some(LinkPort {
            fabric,
            port,
            was_up,
        });
    }

    /// The fabric port the board is plugged into.
    pub fn link_port(&self) -> Option<PortId> {
        self.link.as_ref().map(|l| l.port)
    }

    /// The fabric the board is plugged into.
    pub fn fabric(&self) -> Option<&Arc<Fabric>> {
        self.link.as_ref().map(|l| &l.fabric)
    }

    /// Gives the board's DMA controller access to host memory.
    pub fn attach_host_memory(&mut self, host: Arc<HostMemory>) {
        self.host = Some(host);
    }

    /// The host memory the board may DMA to.
    pub fn host_memory(&self) -> Option<&Arc<HostMemory>> {
        self.host.as_ref()
    }

    /// How the board was built.
    pub fn config(&self) -> &BoardConfig {
        &self.config
    }

    /// The EEPROM record.
    pub fn eeprom(&self) -> &Eeprom {
        &self.config.eeprom
    }

    /// The control register as the host reads it.
    pub fn control(&self) -> u32 {
        self.tracker.state().read()
    }

    /// The initialization state: the first missing step, or `None` when the LANai runs.
    pub fn missing_init_step(&self) -> Option<InitStep> {
        self.tracker.missing()
    }

    /// How many times the LANai has been let run: a control program that sees this change
    /// was restarted and must boot again.
    pub fn lanai_starts(&self) -> u64 {
        self.lanai_starts
    }

    /// The LANai's clock in MHz.
    pub fn lanai_mhz(&self) -> u32 {
        self.tracker.lanai_mhz()
    }

    /// Counters.
    pub fn counters(&self) -> BoardCounters {
        self.counters
    }

    /// The DMA controller (read-only, for inspection).
    pub fn dma(&self) -> &DmaController {
        &self.dma
    }

    /// The doorbell controller (read-only, for inspection).
    pub fn doorbell(&self) -> &Doorbell {
        &self.doorbell
    }

    /// The SRAM (read-only, for inspection and tests).
    pub fn sram(&self) -> &Sram {
        &self.sram
    }

    fn doorbell_config(&self) -> DoorbellConfig {
        DoorbellConfig::from_bits(self.tracker.state().low)
    }

    /// The ISR as read: latched bits plus SEND_INT while the send engine is idle.
    pub(crate) fn isr(&self, now: Time) -> u32 {
        let level = if self.send.idle(now) {
            isr::SEND_INT
        } else {
            0
        };
        self.specials.isr | level
    }

    /// Interrupts pending for the LANai at `now`: `ISR & EIMR`.
    pub fn pending_interrupts(&self, now: Time) -> u32 {
        self.isr(now) & self.specials.eimr
    }

    /// The real-time clock at `now` (2 ticks per microsecond).
    pub(crate) fn rtc(now: Time) -> u32 {
        (now.as_nanos() * RTC_TICKS_PER_US / 1_000) as u32
    }

    /// Runs the hardware up to `now`: DMA blocks, packets arriving and finishing, timers
    /// and link-state changes. Does nothing to a board that is not running.
    pub fn advance(&mut self, now: Time) {
        if !self.tracker.state().board_running {
            return;
        }
        if !self.dma.is_idle() {
            let mut bus = DmaBus {
                sram: &mut self.sram,
                host: self.host.as_deref(),
                bus_master: self.tracker.bus_master(),
            };
            if self.dma.advance(now, &mut bus) {
                self.specials.isr |= isr::WAKE_INT;
            }
        }
        if let Some(link) = &mut self.link {
            // Only an armed engine takes a packet (and only if one has arrived: a few
            // loads), and only one receiving finishes it.
            let ready = match self.recv.state() {
                crate::engines::RecvState::Armed { .. } => link.fabric.arrived(now, link.port),
                crate::engines::RecvState::Receiving { .. } => true,
                _ => false,
            };
            if ready {
                let port = Some((&*link.fabric, link.port));
                let was_armed =
                    matches!(self.recv.state(), crate::engines::RecvState::Armed { .. });
                self.specials.isr |= self.recv.advance(
                    now,
                    &mut self.sram,
                    port,
                    &mut self.counters.engines,
                    &mut self.send.spare,
                );
                if was_armed && let Some(f) = &mut self.sram_faults {
                    match self.recv.state() {
                        crate::engines::RecvState::Receiving { start, len, .. } => {
                            f.maybe_flip(&mut self.sram, false, start, start + len);
                        }
                        crate::engines::RecvState::Done { start, end, .. } => {
                            f.maybe_flip(&mut self.sram, false, start, end);
                        }
                        _ => {}
                    }
                }
            }
            let up = link.fabric.port_link_up(link.port);
            if up != link.was_up {
                link.was_up = up;
                self.specials.isr |= if up { isr::LINK0_INT } else { isr::LINK1_INT };
            }
        }
        if self.specials.timers.iter().any(Option::is_some) {
            for (i, bit) in [isr::TIME0_INT, isr::TIME1_INT, isr::TIME2_INT]
                .into_iter()
                .enumerate()
            {
                if self.specials.timers[i].is_some_and(|t| t <= now) {
                    self.specials.timers[i] = None;
                    self.specials.isr |= bit;
                }
            }
        }
    }

    /// Whether the board is settled at `now`: [`Board::advance`] would change nothing and
    /// nothing waits for its control program. No DMA channel is active, the receive engine
    /// is armed and no packet has reached the port for it, no interval timer is set, and
    /// the link is as the board last saw it. A control program that found nothing to do on
    /// a settled board finds nothing again until the host writes to the board or this
    /// changes (drivers use it to make an idle poll cost a few loads).
    #[inline]
    pub fn settled(&self, now: Time) -> bool {
        if !self.tracker.state().board_running {
            return true;
        }
        let armed = matches!(self.recv.state(), crate::engines::RecvState::Armed { .. });
        armed
            && self.dma.is_idle()
            && self.specials.timers.iter().all(Option::is_none)
            && self.link.as_ref().is_none_or(|l| {
                !l.fabric.arrived(now, l.port) && l.fabric.port_link_up(l.port) == l.was_up
            })
    }

    /// Host accesses through the PCI window that may have changed the board: every write,
    /// and every refused access. It only grows.
    #[inline]
    pub fn pci_generation(&self) -> u64 {
        self.counters.pci.writes + self.counters.pci.errors
    }

    /// The next time something will happen on the board by itself (a DMA block or a
    /// packet finishing, a timer, a packet arriving for an armed receive engine), or
    /// `None` if nothing will until someone acts.
    pub fn next_deadline(&self, now: Time) -> Option<Time> {
        let armed = matches!(self.recv.state(), crate::engines::RecvState::Armed { .. });
        let arrival = self
            .link
            .as_ref()
            .filter(|_| armed)
            .and_then(|l| l.fabric.next_arrival(l.port));
        [
            self.dma.next_deadline(),
            self.send.busy_until(now),
            self.recv.deadline(),
            arrival,
        ]
        .into_iter()
        .chain(self.specials.timers)
        .flatten()
        .min()
    }

    /// When the send engine can take the next piece (`now` if it is idle).
    pub fn send_ready_at(&self, now: Time) -> Time {
        self.send.busy_until(now).unwrap_or(now)
    }

    /// Clears everything a board reset clears.
    fn reset(&mut self) {
        self.sram.clear();
        self.specials = Specials::default();
        self.dma = DmaController::new(self.config.timing.host_dma_bytes_per_sec);
        self.doorbell = Doorbell::default();
        self.send = SendEngine::default();
        self.recv = RecvEngine::default();
    }

    /// Stops the LANai's engines (LANai reset).
    fn reset_lanai(&mut self) {
        self.send = SendEngine::default();
        self.recv = RecvEngine::default();
        self.specials.isr = 0;
        self.specials.timers = [None; 3];
    }
}

impl core::fmt::Debug for Board {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Board")
            .field("board_id", &self.config.eeprom.board_id_string())
            .field("sram", &self.sram)
            .field("missing_init_step", &self.tracker.missing())
            .field("link", &self.link_port())
            .finish()
    }
}

#[cfg(test)]
mod tests;
