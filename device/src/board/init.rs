//! The host driver's side of seed 002 §2.4: bringing a board out of reset.

use super::{Board, PciError, config};
use crate::control::{InitStep, SETTLE, bits, with_multiplier};
use crate::special::{RTC_TICKS_PER_US, reg};
use crate::time::Time;
use std::time::Duration;
use thiserror::Error;

/// A bring-up that failed, and at which step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("bring-up failed at {step}: {source}")]
pub struct BringUpError {
    /// The step that failed.
    pub step: InitStep,
    /// Why.
    #[source]
    pub source: PciError,
}

/// How long the host measures the LANai's speed in step 11.
const MEASURE: Duration = Duration::from_millis(1);

/// Runs the nineteen steps of §2.4 on `board`, starting at `now`, loading `image` into
/// SRAM at address 0 in step 17. Returns the time at which the LANai runs (the sequence
/// waits 41 ms in all).
pub fn bring_up(board: &mut Board, now: Time, image: &[u8]) -> Result<Time, BringUpError> {
    let mut t = now;
    let at = |step: InitStep| move |source: PciError| BringUpError { step, source };
    let control = config::CONTROL;

    board
        .pci_write_command(t, config::COMMAND_MEMORY)
        .map_err(at(InitStep::BusMasterOff))?;
    board
        .pci_write_u32(t, control, bits::BOARD_RESET)
        .map_err(at(InitStep::BoardReset))?;
    board
        .pci_write_u32(
            t,
            control,
            bits::BOARD_RUN | bits::LANAI_RESET | bits::EBUS_RESET,
        )
        .map_err(at(InitStep::BoardRun))?;
    board
        .pci_write_u32(t, config::SPECIAL + reg::CLOCK, 0x80)
        .map_err(at(InitStep::TemporaryClockval))?;
    t += SETTLE;
    let eeprom_clockval = board
        .pci_read_u32(t, config::EEPROM)
        .map_err(at(InitStep::ReadEepromClockval))?;
    board
        .pci_write_u32(
            t,
            config::SPECIAL + reg::CLOCK,
            with_multiplier(eeprom_clockval, 0x8),
        )
        .map_err(at(InitStep::UnityClockval))?;
    t += SETTLE;
    board
        .pci_write_u32(t, control, bits::EBUS_RUN)
        .map_err(at(InitStep::EbusRun))?;
    t += SETTLE;

    // Step 11: count processor cycles against the RTC.
    let read = |board: &mut Board, t: Time, r: u32| {
        board
            .pci_read_u32(t, config::SPECIAL + r)
            .map_err(at(InitStep::MeasureSpeed))
    };
    let (c0, r0) = (read(board, t, reg::CPUC)?, read(board, t, reg::RTC)?);
    t += MEASURE;
    let (c1, r1) = (read(board, t, reg::CPUC)?, read(board, t, reg::RTC)?);
    let micros = u64::from(r1.wrapping_sub(r0)) / RTC_TICKS_PER_US;
    let mhz_at_1x = u64::from(c1.wrapping_sub(c0)) / micros.max(1);

    // Step 12: the fastest multiplier that keeps the processor within the EEPROM maximum.
    let eeprom = board
        .pci_read_u32(t, config::EEPROM + 108)
        .map_err(at(InitStep::ComputeMultiplier))?;
    let max_speed = u64::from(eeprom >> 16);
    let nibble = [(0xC, 30), (0xB, 25), (0xA, 20), (0x9, 15), (0x8, 10)]
        .into_iter()
        .find(|&(_, tenths)| mhz_at_1x * tenths / 10 <= max_speed)
        .map_or(0x8, |(n, _)| n);

    board
        .pci_write_u32(t, control, bits::EBUS_RESET)
        .map_err(at(InitStep::EbusResetForClock))?;
    board
        .pci_write_u32(
            t,
            config::SPECIAL + reg::CLOCK,
            with_multiplier(eeprom_clockval, nibble),
        )
        .map_err(at(InitStep::FinalClockval))?;
    t += SETTLE;
    board
        .pci_write_u32(t, control, bits::EBUS_RUN)
        .map_err(at(InitStep::EbusRunFinal))?;
    if !image.is_empty() {
        board
            .pci_write_bytes(0, image)
            .map_err(at(InitStep::LoadCode))?;
    }
    board
        .pci_write_command(t, config::COMMAND_MEMORY | config::COMMAND_BUS_MASTER)
        .map_err(at(InitStep::BusMasterOn))?;
    board
        .pci_write_u32(t, control, bits::LANAI_RUN)
        .map_err(at(InitStep::LanaiRun))?;
    Ok(t)
}
