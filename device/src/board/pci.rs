//! The host's view of the board: the 16 MB PCI window of seed 002 §2.1.
//!
//! ```text
//! 0x0000_0000  LANai SRAM (2, 4 or 8 MB; big-endian)
//! 0x0080_0000  configuration space remap (64 bytes)
//! 0x0080_0040  control register (little-endian)
//! 0x0080_0100  DMA chain bases 0..3, FIFO bases 0..3 (little-endian)
//! 0x0080_4000  LANai special registers
//! 0x0080_8000  doorbell region (write-only) ...
//! 0x00A0_0000  ... overlapped by the EEPROM record (read-only)
//! 0x0100_0000  end
//! ```
//!
//! Values are passed as numbers: the byte order of little-endian registers is the host
//! bus's business. SRAM is reachable only while the board and the E-bus run (§2.4 loads
//! code after step 16); the EEPROM, configuration space and control register always.

use super::Board;
use crate::control::InitError;
use crate::doorbell::{WINDOW_END, WINDOW_START};
use crate::eeprom::RECORD_LEN;
use crate::special::reg;
use crate::sram::SramError;
use crate::time::Time;
use thiserror::Error;

/// PCI window offsets and configuration-space layout.
pub mod config {
    /// Start of the configuration-space remap.
    pub const REMAP: u32 = 0x0080_0000;
    /// The control register.
    pub const CONTROL: u32 = 0x0080_0040;
    /// DMA chain base `n` is at `DMA_BASE + 4 * n`.
    pub const DMA_BASE: u32 = 0x0080_0100;
    /// FIFO base `n` is at `FIFO_BASE + 4 * n`.
    pub const FIFO_BASE: u32 = 0x0080_0110;
    /// The LANai special registers.
    pub const SPECIAL: u32 = 0x0080_4000;
    /// The EEPROM record.
    pub const EEPROM: u32 = 0x00A0_0000;
    /// End of the EEPROM region.
    pub const EEPROM_END: u32 = 0x00E0_0000;
    /// End of the window.
    pub const END: u32 = 0x0100_0000;
    /// Myricom's PCI vendor id.
    pub const VENDOR_ID: u16 = 0x14C1;
    /// The PCI64's device id.
    pub const DEVICE_ID: u16 = 0x8043;
    /// The PCI64's revision id.
    pub const REVISION_ID: u8 = 0x3;
    /// Configuration offset of the command register.
    pub const COMMAND: u32 = 0x04;
    /// Command register: memory space enable.
    pub const COMMAND_MEMORY: u16 = 1 << 1;
    /// Command register: bus master enable (the "pci_config_dma_master bit" of §2.4).
    pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
}

/// A host access the board refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PciError {
    /// Nothing is mapped at the offset (beyond a small SRAM, gaps, past 16 MB).
    #[error("nothing is mapped at pci offset {0:#x}")]
    Unmapped(u32),
    /// The offset is read-only (the EEPROM).
    #[error("pci offset {0:#x} is read-only")]
    ReadOnly(u32),
    /// The offset is write-only (the doorbell region).
    #[error("pci offset {0:#x} is write-only")]
    WriteOnly(u32),
    /// A 32-bit access not aligned to 4 bytes.
    #[error("pci access at {0:#x} is not word aligned")]
    Misaligned(u32),
    /// SRAM was accessed while the board or its E-bus is held in reset.
    #[error("sram at {0:#x} is not reachable: board or e-bus held in reset")]
    InReset(u32),
    /// The SRAM access itself was refused.
    #[error(transparent)]
    Sram(#[from] SramError),
    /// The write was refused by the control logic or the initialization sequence.
    #[error(transparent)]
    Init(#[from] InitError),
    /// The doorbell write could not be queued.
    #[error(transparent)]
    Doorbell(#[from] crate::doorbell::DoorbellError),
}

impl Board {
    fn count<T>(&mut self, write: bool, r: Result<T, PciError>) -> Result<T, PciError> {
        let c = &mut self.counters.pci;
        match &r {
            Ok(_) if write => c.writes += 1,
            Ok(_) => c.reads += 1,
            Err(_) => c.errors += 1,
        }
        r
    }

    fn sram_reachable(&self, offset: u32) -> Result<(), PciError> {
        let s = self.tracker.state();
        if s.board_running && s.ebus_running {
            Ok(())
        } else {
            Err(PciError::InReset(offset))
        }
    }

    /// Reads the 32-bit value at PCI offset `offset`.
    pub fn pci_read_u32(&mut self, now: Time, offset: u32) -> Result<u32, PciError> {
        let r = self.read_u32_inner(now, offset);
        self.count(false, r)
    }

    fn read_u32_inner(&mut self, now: Time, offset: u32) -> Result<u32, PciError> {
        if !offset.is_multiple_of(4) {
            return Err(PciError::Misaligned(offset));
        }
        if offset < self.sram.len() {
            self.sram_reachable(offset)?;
            self.counters.pci.pio_bytes += 4;
            return Ok(self.sram.read_u32(offset)?);
        }
        match offset {
            config::REMAP..config::CONTROL => Ok(self.config_read_u32(offset - config::REMAP)),
            config::CONTROL => Ok(self.control()),
            o if (config::DMA_BASE..config::FIFO_BASE).contains(&o) => {
                Ok(self.dma.read_pointer(((o - config::DMA_BASE) / 4) as usize))
            }
            o if (config::FIFO_BASE..config::FIFO_BASE + 16).contains(&o) => Ok(self
                .doorbell
                .read_base(((o - config::FIFO_BASE) / 4) as usize)),
            o if (config::SPECIAL..config::SPECIAL + reg::BLOCK).contains(&o) => {
                Ok(self.read_special(now, o - config::SPECIAL))
            }
            o if (config::EEPROM..config::EEPROM_END).contains(&o) => {
                let at = (o - config::EEPROM) as usize;
                if at + 4 <= RECORD_LEN {
                    let bytes = self.config.eeprom.to_bytes();
                    Ok(u32::from_be_bytes(
                        bytes[at..at + 4].try_into().expect("4 bytes"),
                    ))
                } else {
                    Ok(0)
                }
            }
            o if (WINDOW_START..WINDOW_END).contains(&o) => Err(PciError::WriteOnly(o)),
            o => Err(PciError::Unmapped(o)),
        }
    }

    /// Writes the 32-bit value `value` at PCI offset `offset`.
    pub fn pci_write_u32(&mut self, now: Time, offset: u32, value: u32) -> Result<(), PciError> {
        let r = self.write_u32_inner(now, offset, value);
        self.count(true, r)
    }

    fn write_u32_inner(&mut self, now: Time, offset: u32, value: u32) -> Result<(), PciError> {
        if !offset.is_multiple_of(4) {
            return Err(PciError::Misaligned(offset));
        }
        if offset < self.sram.len() {
            self.sram_reachable(offset)?;
            self.counters.pci.pio_bytes += 4;
            return Ok(self.sram.write_u32(offset, value)?);
        }
        match offset {
            config::REMAP..config::CONTROL => {
                self.config_write_u32(now, offset - config::REMAP, value)
            }
            config::CONTROL => self.write_control(now, value, u32::MAX),
            o if (config::DMA_BASE..config::FIFO_BASE).contains(&o) => {
                self.dma
                    .write_pointer(((o - config::DMA_BASE) / 4) as usize, value);
                Ok(())
            }
            o if (config::FIFO_BASE..config::FIFO_BASE + 16).contains(&o) => {
                self.doorbell
                    .write_base(((o - config::FIFO_BASE) / 4) as usize, value);
                Ok(())
            }
            o if (config::SPECIAL..config::SPECIAL + reg::BLOCK).contains(&o) => {
                self.write_special_from_host(now, o - config::SPECIAL, value)
            }
            o if (config::EEPROM..config::EEPROM + RECORD_LEN as u32).contains(&o) => {
                // The doorbell region overlaps the EEPROM: writes there are doorbells.
                self.ring_doorbell(o, value)
            }
            o if (WINDOW_START..WINDOW_END).contains(&o) => self.ring_doorbell(o, value),
            o => Err(PciError::Unmapped(o)),
        }
    }

    fn ring_doorbell(&mut self, offset: u32, value: u32) -> Result<(), PciError> {
        let cfg = self.doorbell_config();
        self.doorbell.write(&mut self.sram, cfg, offset, value)?;
        self.specials.isr |= crate::special::isr::WAKE_INT;
        Ok(())
    }

    /// A byte write into the control register (bits 31..24, 23..16, 15..8 or 7..0 alone),
    /// which leaves the other bytes, and so bits 4..0, as they are.
    pub fn pci_write_control_byte(
        &mut self,
        now: Time,
        byte: u8,
        value: u8,
    ) -> Result<(), PciError> {
        let shift = 8 * u32::from(byte.min(3));
        let r = self.write_control(now, u32::from(value) << shift, 0xFF << shift);
        self.count(true, r)
    }

    fn write_control(&mut self, now: Time, value: u32, mask: u32) -> Result<(), PciError> {
        let effects = self.tracker.write_control(now, value, mask)?;
        if effects.board_reset {
            self.reset();
        }
        if effects.lanai_reset {
            self.reset_lanai();
        }
        if effects.lanai_started {
            self.lanai_starts += 1;
        }
        for ch in 0..4 {
            if effects.dma_triggers & (1 << ch) != 0 {
                self.dma.trigger(ch, now);
            }
        }
        Ok(())
    }

    /// Copies `data` into SRAM at `offset` (programmed I/O, e.g. a PIO send buffer).
    pub fn pci_write_bytes(&mut self, offset: u32, data: &[u8]) -> Result<(), PciError> {
        let r = self
            .sram_reachable(offset)
            .and_then(|()| Ok(self.sram.write(offset, data)?));
        if r.is_ok() {
            self.counters.pci.pio_bytes += data.len() as u64;
        }
        self.count(true, r)
    }

    /// Copies SRAM at `offset` into `out`.
    pub fn pci_read_bytes(&mut self, offset: u32, out: &mut [u8]) -> Result<(), PciError> {
        let r = self
            .sram_reachable(offset)
            .and_then(|()| Ok(self.sram.read(offset, out)?));
        if r.is_ok() {
            self.counters.pci.pio_bytes += out.len() as u64;
        }
        self.count(false, r)
    }

    fn config_read_u32(&self, at: u32) -> u32 {
        match at & !3 {
            0x00 => u32::from(config::DEVICE_ID) << 16 | u32::from(config::VENDOR_ID),
            0x04 => u32::from(self.pci_command),
            // Class 0x02 (network), subclass 0x80 (other), revision 3.
            0x08 => 0x0280_0000 | u32::from(config::REVISION_ID),
            _ => 0,
        }
    }

    fn config_write_u32(&mut self, now: Time, at: u32, value: u32) -> Result<(), PciError> {
        if at & !3 == config::COMMAND {
            let command = value as u16;
            self.tracker
                .write_bus_master(now, command & config::COMMAND_BUS_MASTER != 0)?;
            self.pci_command = command;
        }
        Ok(())
    }

    /// Writes the PCI configuration command register (the bus-master bit is step 1 and
    /// step 18 of §2.4).
    pub fn pci_write_command(&mut self, now: Time, command: u16) -> Result<(), PciError> {
        let r = self.config_write_u32(now, config::COMMAND, u32::from(command));
        self.count(true, r)
    }
}
