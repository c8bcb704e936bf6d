//! The board control register (seed 002, §2.3) and the initialization sequence (§2.4).
//!
//! The control register is little-endian and write-activated: in bits 31..20 only a `1`
//! does anything ("allow LANai to run", "hold E-bus in reset", "DMA trigger 2", ...),
//! while bits 4..0 are an ordinary register rewritten by every full-word write.
//!
//! [`InitTracker`] follows the nineteen steps of §2.4 as the host performs them through
//! PCI writes, and refuses any write that comes out of order with an [`InitError`] naming
//! the step that is missing. The 10 ms settling delays are checked against the `now` each
//! write carries. Steps the board cannot observe (reading the EEPROM, measuring the
//! processor, computing the multiplier, loading code) are the host's business.

use crate::time::Time;
use core::fmt;
use std::time::Duration;
use thiserror::Error;

/// Bit numbers and masks of the control register.
pub mod bits {
    /// Write: allow the LANai to run. Read: the LANai is running.
    pub const LANAI_RUN: u32 = 1 << 31;
    /// Write: hold the LANai in reset. Read: the LANai is stopped.
    pub const LANAI_RESET: u32 = 1 << 30;
    /// Write: allow the E-bus to run. Read: the E-bus is running.
    pub const EBUS_RUN: u32 = 1 << 29;
    /// Write: hold the E-bus in reset. Read: the E-bus is disabled.
    pub const EBUS_RESET: u32 = 1 << 28;
    /// Write: allow the board to run. Read: the board is running.
    pub const BOARD_RUN: u32 = 1 << 27;
    /// Write: hold the board in reset. Read: the board is disabled.
    pub const BOARD_RESET: u32 = 1 << 26;
    /// Write: allow interrupts. Read: interrupts enabled.
    pub const INT_ENABLE: u32 = 1 << 25;
    /// Write: disable interrupts. Read: interrupts disabled.
    pub const INT_DISABLE: u32 = 1 << 24;
    /// DMA trigger for channel `n` (0..=3) is bit `20 + n`.
    pub const DMA_TRIGGER_SHIFT: u32 = 20;
    /// All four DMA trigger bits.
    pub const DMA_TRIGGERS: u32 = 0xF << DMA_TRIGGER_SHIFT;
    /// Read: a correct RST/REQ64 power-up sequence was detected (a 64-bit slot).
    pub const RST_REQ64_OK: u32 = 1 << 14;
    /// "Do not use" production-diagnostic bits 13..9.
    pub const DO_NOT_USE: u32 = 0x1F << 9;
    /// Write: force 64-bit mode. Read: forcing 64-bit mode.
    pub const FORCE_64: u32 = 1 << 7;
    /// Write: force 32-bit mode. Read: forcing 32-bit mode.
    pub const FORCE_32: u32 = 1 << 6;
    /// Enable doorbell limit checking.
    pub const DOORBELL_LIMITS: u32 = 1 << 4;
    /// Enable four doorbell queues instead of one.
    pub const DOORBELL_MULTI_QUEUE: u32 = 1 << 3;
    /// Doorbell queue size select (bits 2..0).
    pub const DOORBELL_SIZE: u32 = 0b111;
    /// The ordinary-register bits 4..0.
    pub const LOW_REGISTER: u32 = 0x1F;
}

/// The settling delay the sequence asks for after each clock change.
pub const SETTLE: Duration = Duration::from_millis(10);

/// The steps of seed 002 §2.4, numbered as there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InitStep {
    /// 1) Turn off the PCI config bus-master bit.
    BusMasterOff = 1,
    /// 2) Hold the board in reset.
    BoardReset = 2,
    /// 3) Board out of reset, LANai and E-bus held in reset.
    BoardRun = 3,
    /// 4) Write the temporary clockval `0x80`.
    TemporaryClockval = 4,
    /// 5) Wait 10 ms.
    SettleTemporaryClock = 5,
    /// 6) Read the clockval from the EEPROM.
    ReadEepromClockval = 6,
    /// 7) Write the 1x clockval.
    UnityClockval = 7,
    /// 8) Wait 10 ms.
    SettleUnityClock = 8,
    /// 9) Take the E-bus out of reset.
    EbusRun = 9,
    /// 10) Wait 10 ms.
    SettleEbus = 10,
    /// 11) Measure the LANai's speed.
    MeasureSpeed = 11,
    /// 12) Compute the clock multiplier.
    ComputeMultiplier = 12,
    /// 13) Hold the E-bus in reset again.
    EbusResetForClock = 13,
    /// 14) Write the final clockval.
    FinalClockval = 14,
    /// 15) Wait 10 ms.
    SettleFinalClock = 15,
    /// 16) Take the E-bus out of reset.
    EbusRunFinal = 16,
    /// 17) Load code into SRAM.
    LoadCode = 17,
    /// 18) Turn on the PCI config bus-master bit.
    BusMasterOn = 18,
    /// 19) Let the LANai run.
    LanaiRun = 19,
}

impl InitStep {
    /// The step's text in seed 002 §2.4.
    pub fn describe(self) -> &'static str {
        match self {
            InitStep::BusMasterOff => "turn off the pci config dma-master bit",
            InitStep::BoardReset => "hold the board in reset",
            InitStep::BoardRun => "take the board out of reset with lanai and e-bus held in reset",
            InitStep::TemporaryClockval => "write the temporary clockval 0x80",
            InitStep::SettleTemporaryClock => "wait 10 ms after the temporary clockval",
            InitStep::ReadEepromClockval => "read the clockval from the eeprom",
            InitStep::UnityClockval => "write the 1x clockval",
            InitStep::SettleUnityClock => "wait 10 ms after the 1x clockval",
            InitStep::EbusRun => "take the e-bus out of reset",
            InitStep::SettleEbus => "wait 10 ms after the e-bus starts",
            InitStep::MeasureSpeed => "measure the lanai's speed",
            InitStep::ComputeMultiplier => "compute the clock multiplier",
            InitStep::EbusResetForClock => "hold the e-bus in reset to change the clock",
            InitStep::FinalClockval => "write the final clockval",
            InitStep::SettleFinalClock => "wait 10 ms after the final clockval",
            InitStep::EbusRunFinal => "take the e-bus out of reset again",
            InitStep::LoadCode => "load code into sram",
            InitStep::BusMasterOn => "turn on the pci config dma-master bit",
            InitStep::LanaiRun => "let the lanai run",
        }
    }
}

impl fmt::Display for InitStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {} ({})", *self as u8, self.describe())
    }
}

/// A control-register or configuration write the board refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum InitError {
    /// A step came before the one that must precede it.
    #[error("{attempted} refused: {missing} is missing")]
    OutOfOrder {
        /// What the write tried to do.
        attempted: InitStep,
        /// The step that has to happen first.
        missing: InitStep,
    },
    /// A write asked for both "run" and "reset" of one unit.
    #[error("control write {value:#010x} asks to run and reset the {unit} at once")]
    Conflicting {
        /// The value written.
        value: u32,
        /// The unit named twice.
        unit: &'static str,
    },
    /// A write set one of the "do not use" diagnostic bits.
    #[error("control write {value:#010x} sets a do-not-use diagnostic bit")]
    DoNotUse {
        /// The value written.
        value: u32,
    },
    /// A clockval whose multiplier bits are not one of 1.0x ... 3.0x.
    #[error("clockval {0:#010x} has no valid multiplier in bits 7..4")]
    BadMultiplier(u32),
    /// A clockval whose other bits differ from the EEPROM's.
    #[error("clockval {written:#010x} does not keep the eeprom's bits {eeprom:#010x}")]
    ClockvalMismatch {
        /// The value written.
        written: u32,
        /// The EEPROM clockval.
        eeprom: u32,
    },
    /// A clockval that would run the processor above the EEPROM's maximum speed.
    #[error("clockval {clockval:#010x} runs the lanai at {mhz} mhz, above the {max} mhz maximum")]
    Overclocked {
        /// The value written.
        clockval: u32,
        /// The resulting processor speed.
        mhz: u32,
        /// The EEPROM's `max_lanai_speed`.
        max: u16,
    },
    /// The LANai was asked to run with no clockval ever written.
    #[error("the clockval register was written while the e-bus was running")]
    ClockvalWhileRunning,
}

/// The multiplier encoded in bits 7..4 of a clockval, in tenths (10 = 1.0x).
pub fn multiplier_tenths(clockval: u32) -> Option<u32> {
    match (clockval >> 4) & 0xF {
        0x8 => Some(10),
        0x9 => Some(15),
        0xA => Some(20),
        0xB => Some(25),
        0xC => Some(30),
        _ => None,
    }
}

/// The bits of a clockval outside the multiplier nibble (bits 7..4).
const NON_MULTIPLIER: u32 = 0xFFFF_FF0F;

/// The clockval with the EEPROM's other bits and the given multiplier nibble (`0x8` is
/// 1.0x, `0x9` 1.5x, ... `0xC` 3.0x).
pub fn with_multiplier(eeprom_clockval: u32, nibble: u32) -> u32 {
    (eeprom_clockval & NON_MULTIPLIER) | ((nibble & 0xF) << 4)
}

/// The state the control register reports, and the ordinary bits 4..0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlState {
    /// The LANai is running.
    pub lanai_running: bool,
    /// The E-bus is running.
    pub ebus_running: bool,
    /// The board is running.
    pub board_running: bool,
    /// Host interrupts are enabled.
    pub interrupts_enabled: bool,
    /// The slot performed a correct 64-bit power-up sequence.
    pub rst_req64_ok: bool,
    /// Forcing 64-bit mode.
    pub force_64: bool,
    /// Forcing 32-bit mode.
    pub force_32: bool,
    /// Bits 4..0: doorbell limit checking, multi-queue, queue size.
    pub low: u8,
}

impl ControlState {
    /// The state after power-up: everything held in reset.
    pub fn power_on() -> ControlState {
        ControlState {
            lanai_running: false,
            ebus_running: false,
            board_running: false,
            interrupts_enabled: false,
            rst_req64_ok: true,
            force_64: false,
            force_32: false,
            low: 0,
        }
    }

    /// The register as the host reads it.
    pub fn read(&self) -> u32 {
        let pick = |on: bool, yes: u32, no: u32| if on { yes } else { no };
        pick(self.lanai_running, bits::LANAI_RUN, bits::LANAI_RESET)
            | pick(self.ebus_running, bits::EBUS_RUN, bits::EBUS_RESET)
            | pick(self.board_running, bits::BOARD_RUN, bits::BOARD_RESET)
            | pick(self.interrupts_enabled, bits::INT_ENABLE, bits::INT_DISABLE)
            | pick(self.rst_req64_ok, bits::RST_REQ64_OK, 0)
            | pick(self.force_64, bits::FORCE_64, 0)
            | pick(self.force_32, bits::FORCE_32, 0)
            | u32::from(self.low)
    }
}

/// What one control write does once it has been accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Effects {
    /// The board was put in reset: SRAM, engines and registers must be cleared.
    pub board_reset: bool,
    /// The LANai was put in reset.
    pub lanai_reset: bool,
    /// The LANai started running.
    pub lanai_started: bool,
    /// DMA channels triggered (bit `n` = channel `n`).
    pub dma_triggers: u8,
}

/// Where the host is in the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for `expected`; `since` is when the previous step happened.
    Expect { expected: InitStep, since: Time },
    /// Sequence complete and the LANai running.
    Running,
    /// Sequence complete; the LANai was later put back in reset (to load a new MCP).
    LanaiHeld,
}

/// Follows the host through the §2.4 sequence; see the module documentation.
#[derive(Debug, Clone)]
pub struct InitTracker {
    phase: Phase,
    bus_master: bool,
    eeprom_clockval: u32,
    max_lanai_speed: u16,
    lanai9: bool,
    pci_mhz: u32,
    clockval: u32,
    state: ControlState,
}

impl InitTracker {
    /// A powered-up board with the given EEPROM values and PCI bus clock.
    pub fn new(eeprom_clockval: u32, max_lanai_speed: u16, lanai9: bool, pci_mhz: u32) -> Self {
        InitTracker {
            phase: Phase::Expect {
                expected: InitStep::BusMasterOff,
                since: Time::ZERO,
            },
            bus_master: true,
            eeprom_clockval,
            max_lanai_speed,
            lanai9,
            pci_mhz,
            clockval: 0,
            state: ControlState::power_on(),
        }
    }

    /// The control register state.
    pub fn state(&self) -> &ControlState {
        &self.state
    }

    /// Whether the PCI bus-master bit is on (the DMA controller may master the bus).
    pub fn bus_master(&self) -> bool {
        self.bus_master
    }

    /// The clockval register.
    pub fn clockval(&self) -> u32 {
        self.clockval
    }

    /// Whether the whole sequence has completed and the LANai runs.
    pub fn lanai_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// The first step still missing before the LANai may run, or `None` when it runs.
    pub fn missing(&self) -> Option<InitStep> {
        match self.phase {
            Phase::Expect { expected, .. } => Some(expected),
            Phase::Running => None,
            Phase::LanaiHeld => Some(InitStep::LanaiRun),
        }
    }

    /// The processor clock the current clockval gives, in MHz (0 before any clockval).
    pub fn lanai_mhz(&self) -> u32 {
        self.mhz_for(self.clockval)
    }

    fn mhz_for(&self, clockval: u32) -> u32 {
        let tenths = multiplier_tenths(clockval).unwrap_or(0);
        let mhz = self.pci_mhz * tenths / 10;
        if self.lanai9 { mhz * 2 } else { mhz }
    }

    fn expect(&self, attempted: InitStep, now: Time) -> Result<(), InitError> {
        let missing = match self.phase {
            Phase::Expect { expected, .. } if expected == attempted => {
                return self.settled(attempted, now);
            }
            Phase::Expect { expected, .. } => expected,
            Phase::LanaiHeld if attempted == InitStep::LanaiRun => return Ok(()),
            Phase::LanaiHeld => InitStep::LanaiRun,
            Phase::Running => InitStep::BusMasterOff,
        };
        Err(InitError::OutOfOrder { attempted, missing })
    }

    /// Checks the 10 ms delay that must precede `step`.
    fn settled(&self, step: InitStep, now: Time) -> Result<(), InitError> {
        let delay_step = match step {
            InitStep::UnityClockval => InitStep::SettleTemporaryClock,
            InitStep::EbusRun => InitStep::SettleUnityClock,
            InitStep::EbusResetForClock => InitStep::SettleEbus,
            InitStep::EbusRunFinal => InitStep::SettleFinalClock,
            _ => return Ok(()),
        };
        match self.phase {
            Phase::Expect { since, .. } if now.saturating_since(since) >= SETTLE => Ok(()),
            _ => Err(InitError::OutOfOrder {
                attempted: step,
                missing: delay_step,
            }),
        }
    }

    fn advance(&mut self, done: InitStep, now: Time) {
        let next = match done {
            InitStep::BusMasterOff => InitStep::BoardReset,
            InitStep::BoardReset => InitStep::BoardRun,
            InitStep::BoardRun => InitStep::TemporaryClockval,
            InitStep::TemporaryClockval => InitStep::UnityClockval,
            InitStep::UnityClockval => InitStep::EbusRun,
            InitStep::EbusRun => InitStep::EbusResetForClock,
            InitStep::EbusResetForClock => InitStep::FinalClockval,
            InitStep::FinalClockval => InitStep::EbusRunFinal,
            InitStep::EbusRunFinal => InitStep::BusMasterOn,
            InitStep::BusMasterOn => InitStep::LanaiRun,
            InitStep::LanaiRun => {
                self.phase = Phase::Running;
                return;
            }
            _ => return,
        };
        self.phase = Phase::Expect {
            expected: next,
            since: now,
        };
    }

    /// A write of the PCI configuration command register's bus-master bit.
    pub fn write_bus_master(&mut self, now: Time, on: bool) -> Result<(), InitError> {
        if on == self.bus_master {
            return Ok(());
        }
        let step = if on {
            InitStep::BusMasterOn
        } else {
            InitStep::BusMasterOff
        };
        match (self.phase, on) {
            // Turning the bus master off is always allowed; from a running board it starts
            // a fresh bring-up.
            (_, false) => {
                self.bus_master = false;
                if !matches!(
                    self.phase,
                    Phase::Expect {
                        expected: InitStep::BusMasterOff,
                        ..
                    }
                ) {
                    // Off in the middle of a sequence: keep the sequence where it is,
                    // unless the board already ran, in which case start over.
                    if matches!(self.phase, Phase::Running | Phase::LanaiHeld) {
                        self.phase = Phase::Expect {
                            expected: InitStep::BoardReset,
                            since: now,
                        };
                    }
                    return Ok(());
                }
                self.advance(step, now);
                Ok(())
            }
            (_, true) => {
                self.expect(step, now)?;
                self.bus_master = true;
                self.advance(step, now);
                Ok(())
            }
        }
    }

    /// A write of the LANai clockval register.
    pub fn write_clockval(&mut self, now: Time, value: u32) -> Result<(), InitError> {
        let step = match self.phase {
            Phase::Expect {
                expected: InitStep::TemporaryClockval,
                ..
            } => InitStep::TemporaryClockval,
            Phase::Expect {
                expected: InitStep::UnityClockval,
                ..
            } => InitStep::UnityClockval,
            Phase::Expect {
                expected: InitStep::FinalClockval,
                ..
            } => InitStep::FinalClockval,
            _ if self.state.ebus_running => return Err(InitError::ClockvalWhileRunning),
            Phase::Expect { expected, .. } => {
                return Err(InitError::OutOfOrder {
                    attempted: InitStep::FinalClockval,
                    missing: expected,
                });
            }
            Phase::Running | Phase::LanaiHeld => {
                return Err(InitError::OutOfOrder {
                    attempted: InitStep::FinalClockval,
                    missing: InitStep::EbusResetForClock,
                });
            }
        };
        self.expect(step, now)?;
        match step {
            InitStep::TemporaryClockval if value != 0x80 => {
                return Err(InitError::OutOfOrder {
                    attempted: InitStep::UnityClockval,
                    missing: step,
                });
            }
            InitStep::UnityClockval if value != with_multiplier(self.eeprom_clockval, 0x8) => {
                return Err(InitError::ClockvalMismatch {
                    written: value,
                    eeprom: self.eeprom_clockval,
                });
            }
            InitStep::FinalClockval => {
                if multiplier_tenths(value).is_none() {
                    return Err(InitError::BadMultiplier(value));
                }
                if value & NON_MULTIPLIER != self.eeprom_clockval & NON_MULTIPLIER {
                    return Err(InitError::ClockvalMismatch {
                        written: value,
                        eeprom: self.eeprom_clockval,
                    });
                }
                let mhz = self.mhz_for(value);
                if mhz > u32::from(self.max_lanai_speed) {
                    return Err(InitError::Overclocked {
                        clockval: value,
                        mhz,
                        max: self.max_lanai_speed,
                    });
                }
            }
            _ => {}
        }
        self.clockval = value;
        self.advance(step, now);
        Ok(())
    }

    /// A write of the control register (all 32 bits when `mask` is `u32::MAX`, or only
    /// the bytes selected by `mask` for byte writes). Nothing changes if it is refused.
    pub fn write_control(
        &mut self,
        now: Time,
        value: u32,
        mask: u32,
    ) -> Result<Effects, InitError> {
        let value = value & mask;
        for (run, reset, unit) in [
            (bits::LANAI_RUN, bits::LANAI_RESET, "lanai"),
            (bits::EBUS_RUN, bits::EBUS_RESET, "e-bus"),
            (bits::BOARD_RUN, bits::BOARD_RESET, "board"),
            (bits::INT_ENABLE, bits::INT_DISABLE, "interrupt enable"),
        ] {
            if value & run != 0 && value & reset != 0 {
                return Err(InitError::Conflicting { value, unit });
            }
        }
        if value & bits::DO_NOT_USE != 0 {
            return Err(InitError::DoNotUse { value });
        }
        // Validate the whole write on a copy, then commit: a refused write changes nothing.
        let mut next = self.clone();
        let mut effects = Effects::default();
        next.apply_commands(now, value, &mut effects)?;
        if mask & bits::LOW_REGISTER != 0 {
            next.state.low = (value & bits::LOW_REGISTER) as u8;
        }
        match value & (bits::FORCE_64 | bits::FORCE_32) {
            0 => {}
            v if v == bits::FORCE_64 | bits::FORCE_32 => {
                next.state.force_64 = false;
                next.state.force_32 = false;
            }
            v => {
                next.state.force_64 = v == bits::FORCE_64;
                next.state.force_32 = v == bits::FORCE_32;
            }
        }
        if next.state.board_running {
            effects.dma_triggers = ((value & bits::DMA_TRIGGERS) >> bits::DMA_TRIGGER_SHIFT) as u8;
        }
        *self = next;
        Ok(effects)
    }

    fn apply_commands(
        &mut self,
        now: Time,
        value: u32,
        effects: &mut Effects,
    ) -> Result<(), InitError> {
        if value & bits::INT_ENABLE != 0 {
            self.state.interrupts_enabled = true;
        }
        if value & bits::INT_DISABLE != 0 {
            self.state.interrupts_enabled = false;
        }
        if value & bits::BOARD_RESET != 0 {
            if self.bus_master {
                return Err(InitError::OutOfOrder {
                    attempted: InitStep::BoardReset,
                    missing: InitStep::BusMasterOff,
                });
            }
            self.state.board_running = false;
            self.state.ebus_running = false;
            self.state.lanai_running = false;
            self.state.low = 0;
            self.clockval = 0;
            self.phase = Phase::Expect {
                expected: InitStep::BoardRun,
                since: now,
            };
            effects.board_reset = true;
        }
        if value & bits::BOARD_RUN != 0 && !self.state.board_running {
            self.expect(InitStep::BoardRun, now)?;
            self.state.board_running = true;
            self.advance(InitStep::BoardRun, now);
        }
        if value & bits::EBUS_RESET != 0 && self.state.ebus_running {
            if matches!(
                self.phase,
                Phase::Expect {
                    expected: InitStep::EbusResetForClock,
                    ..
                }
            ) {
                self.expect(InitStep::EbusResetForClock, now)?;
                self.advance(InitStep::EbusResetForClock, now);
            }
            self.state.ebus_running = false;
        }
        if value & bits::EBUS_RUN != 0 && !self.state.ebus_running {
            let step = match self.phase {
                Phase::Expect {
                    expected: InitStep::EbusRunFinal,
                    ..
                } => InitStep::EbusRunFinal,
                Phase::Expect {
                    expected: InitStep::EbusRun,
                    ..
                } => InitStep::EbusRun,
                Phase::Expect { expected, .. } if expected < InitStep::EbusRun => InitStep::EbusRun,
                _ => InitStep::EbusRunFinal,
            };
            self.expect(step, now)?;
            self.state.ebus_running = true;
            self.advance(step, now);
        }
        if value & bits::LANAI_RESET != 0 && self.state.lanai_running {
            self.state.lanai_running = false;
            self.phase = Phase::LanaiHeld;
            effects.lanai_reset = true;
        }
        if value & bits::LANAI_RUN != 0 && !self.state.lanai_running {
            self.expect(InitStep::LanaiRun, now)?;
            if !self.state.ebus_running {
                return Err(InitError::OutOfOrder {
                    attempted: InitStep::LanaiRun,
                    missing: InitStep::EbusRunFinal,
                });
            }
            self.state.lanai_running = true;
            self.advance(InitStep::LanaiRun, now);
            effects.lanai_started = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EEPROM_CLOCKVAL: u32 = 0x0520_82a0;

    fn tracker() -> InitTracker {
        // A LANai 9 in a 33 MHz slot: 2.0x gives 132 MHz, under the 134 MHz maximum.
        InitTracker::new(EEPROM_CLOCKVAL, 134, true, 33)
    }

    fn ms(n: u64) -> Time {
        Time::from_nanos(n * 1_000_000)
    }

    fn control(t: &mut InitTracker, now: Time, v: u32) -> Result<Effects, InitError> {
        t.write_control(now, v, u32::MAX)
    }

    /// Runs the sequence up to (not including) `stop`, returning the time reached.
    fn run_until(t: &mut InitTracker, stop: InitStep) -> Time {
        let final_clock = with_multiplier(EEPROM_CLOCKVAL, 0xA);
        let steps: [(InitStep, u64); 11] = [
            (InitStep::BusMasterOff, 0),
            (InitStep::BoardReset, 1),
            (InitStep::BoardRun, 2),
            (InitStep::TemporaryClockval, 3),
            (InitStep::UnityClockval, 14),
            (InitStep::EbusRun, 25),
            (InitStep::EbusResetForClock, 36),
            (InitStep::FinalClockval, 37),
            (InitStep::EbusRunFinal, 48),
            (InitStep::BusMasterOn, 49),
            (InitStep::LanaiRun, 50),
        ];
        for (step, at) in steps {
            if step == stop {
                return ms(at);
            }
            let now = ms(at);
            match step {
                InitStep::BusMasterOff => t.write_bus_master(now, false).unwrap(),
                InitStep::BoardReset => {
                    control(t, now, bits::BOARD_RESET).unwrap();
                }
                InitStep::BoardRun => {
                    control(
                        t,
                        now,
                        bits::BOARD_RUN | bits::LANAI_RESET | bits::EBUS_RESET,
                    )
                    .unwrap();
                }
                InitStep::TemporaryClockval => t.write_clockval(now, 0x80).unwrap(),
                InitStep::UnityClockval => t
                    .write_clockval(now, with_multiplier(EEPROM_CLOCKVAL, 8))
                    .unwrap(),
                InitStep::EbusRun | InitStep::EbusRunFinal => {
                    control(t, now, bits::EBUS_RUN).unwrap();
                }
                InitStep::EbusResetForClock => {
                    control(t, now, bits::EBUS_RESET).unwrap();
                }
                InitStep::FinalClockval => t.write_clockval(now, final_clock).unwrap(),
                InitStep::BusMasterOn => t.write_bus_master(now, true).unwrap(),
                InitStep::LanaiRun => {
                    control(t, now, bits::LANAI_RUN).unwrap();
                }
                _ => unreachable!(),
            }
        }
        ms(51)
    }

    #[test]
    fn the_full_sequence_runs_the_lanai() {
        let mut t = tracker();
        run_until(&mut t, InitStep::LoadCode);
        assert!(t.lanai_running());
        assert_eq!(t.missing(), None);
        assert_eq!(t.lanai_mhz(), 132);
        let read = t.state().read();
        assert_eq!(
            read & (bits::LANAI_RUN | bits::EBUS_RUN | bits::BOARD_RUN),
            bits::LANAI_RUN | bits::EBUS_RUN | bits::BOARD_RUN
        );
    }

    #[test]
    fn each_out_of_order_step_is_refused_naming_the_missing_one() {
        // Skipping any one step makes the next write fail and name the skipped step.
        let cases: [(InitStep, InitStep); 9] = [
            (InitStep::BoardReset, InitStep::BusMasterOff),
            (InitStep::BoardRun, InitStep::BoardReset),
            (InitStep::TemporaryClockval, InitStep::BoardRun),
            (InitStep::UnityClockval, InitStep::TemporaryClockval),
            (InitStep::EbusRun, InitStep::UnityClockval),
            (InitStep::FinalClockval, InitStep::EbusResetForClock),
            (InitStep::EbusRunFinal, InitStep::FinalClockval),
            (InitStep::LanaiRun, InitStep::BusMasterOn),
            (InitStep::BusMasterOn, InitStep::EbusRunFinal),
        ];
        for (attempt, missing) in cases {
            let mut t = tracker();
            let now = run_until(&mut t, missing);
            let err = match attempt {
                InitStep::BoardReset => control(&mut t, now, bits::BOARD_RESET).unwrap_err(),
                InitStep::BoardRun => control(&mut t, now, bits::BOARD_RUN).unwrap_err(),
                InitStep::TemporaryClockval | InitStep::UnityClockval | InitStep::FinalClockval => {
                    t.write_clockval(now, with_multiplier(EEPROM_CLOCKVAL, 8))
                        .unwrap_err()
                }
                InitStep::EbusRun | InitStep::EbusRunFinal => {
                    control(&mut t, now, bits::EBUS_RUN).unwrap_err()
                }
                InitStep::LanaiRun => control(&mut t, now, bits::LANAI_RUN).unwrap_err(),
                InitStep::BusMasterOn => t.write_bus_master(now, true).unwrap_err(),
                _ => unreachable!(),
            };
            match err {
                InitError::OutOfOrder { missing: m, .. } => {
                    assert_eq!(m, missing, "attempt {attempt}")
                }
                InitError::ClockvalWhileRunning => assert_eq!(missing, InitStep::EbusResetForClock),
                other => panic!("attempt {attempt}: unexpected {other}"),
            }
            assert!(!t.lanai_running());
        }
    }

    #[test]
    fn settling_delays_are_enforced() {
        let mut t = tracker();
        let now = run_until(&mut t, InitStep::UnityClockval);
        let early = Time::from_nanos(now.as_nanos() - 2_000_000);
        assert_eq!(
            t.write_clockval(early, with_multiplier(EEPROM_CLOCKVAL, 8)),
            Err(InitError::OutOfOrder {
                attempted: InitStep::UnityClockval,
                missing: InitStep::SettleTemporaryClock
            })
        );
        let mut t = tracker();
        run_until(&mut t, InitStep::EbusRun);
        let err = control(&mut t, ms(16), bits::EBUS_RUN).unwrap_err();
        assert_eq!(
            err,
            InitError::OutOfOrder {
                attempted: InitStep::EbusRun,
                missing: InitStep::SettleUnityClock
            }
        );
    }

    #[test]
    fn bad_clockvals_are_refused() {
        let mut t = tracker();
        let now = run_until(&mut t, InitStep::FinalClockval);
        // 3.0x of 33 MHz on a LANai 9 is 198 MHz, above 134.
        assert_eq!(
            t.write_clockval(now, with_multiplier(EEPROM_CLOCKVAL, 0xC)),
            Err(InitError::Overclocked {
                clockval: with_multiplier(EEPROM_CLOCKVAL, 0xC),
                mhz: 198,
                max: 134
            })
        );
        assert_eq!(
            t.write_clockval(now, with_multiplier(EEPROM_CLOCKVAL, 0x3)),
            Err(InitError::BadMultiplier(with_multiplier(
                EEPROM_CLOCKVAL,
                0x3
            )))
        );
        assert!(matches!(
            t.write_clockval(now, 0xA0),
            Err(InitError::ClockvalMismatch { .. })
        ));
    }

    #[test]
    fn conflicting_and_diagnostic_bits_are_refused_without_effect() {
        let mut t = tracker();
        let before = t.state().read();
        assert!(matches!(
            control(&mut t, Time::ZERO, bits::LANAI_RUN | bits::LANAI_RESET),
            Err(InitError::Conflicting { unit: "lanai", .. })
        ));
        assert!(matches!(
            control(&mut t, Time::ZERO, 1 << 11),
            Err(InitError::DoNotUse { .. })
        ));
        assert_eq!(t.state().read(), before);
    }

    #[test]
    fn low_bits_are_an_ordinary_register_and_byte_writes_preserve_them() {
        let mut t = tracker();
        run_until(&mut t, InitStep::LoadCode);
        control(&mut t, ms(60), 0b1_0101).unwrap();
        assert_eq!(t.state().low, 0b1_0101);
        // A byte write to the top byte leaves bits 4..0 alone.
        t.write_control(ms(61), bits::INT_ENABLE, 0xFF00_0000)
            .unwrap();
        assert_eq!(t.state().low, 0b1_0101);
        assert!(t.state().interrupts_enabled);
        // A full-word write rewrites them.
        control(&mut t, ms(62), bits::INT_DISABLE).unwrap();
        assert_eq!(t.state().low, 0);
        // Forcing modes, and both bits to stop forcing.
        control(&mut t, ms(63), bits::FORCE_64).unwrap();
        assert!(t.state().force_64);
        control(&mut t, ms(64), bits::FORCE_64 | bits::FORCE_32).unwrap();
        assert!(!t.state().force_64 && !t.state().force_32);
    }

    #[test]
    fn dma_triggers_need_a_running_board() {
        let mut t = tracker();
        assert_eq!(
            control(&mut t, Time::ZERO, 1 << 21).unwrap().dma_triggers,
            0
        );
        run_until(&mut t, InitStep::LoadCode);
        assert_eq!(
            control(&mut t, ms(60), (1 << 20) | (1 << 23))
                .unwrap()
                .dma_triggers,
            0b1001
        );
    }

    #[test]
    fn a_held_lanai_runs_again_and_a_reset_board_starts_over() {
        let mut t = tracker();
        run_until(&mut t, InitStep::LoadCode);
        assert!(
            control(&mut t, ms(60), bits::LANAI_RESET)
                .unwrap()
                .lanai_reset
        );
        assert_eq!(t.missing(), Some(InitStep::LanaiRun));
        assert!(
            control(&mut t, ms(61), bits::LANAI_RUN)
                .unwrap()
                .lanai_started
        );
        // Board reset with the bus master still on is refused.
        assert_eq!(
            control(&mut t, ms(62), bits::BOARD_RESET),
            Err(InitError::OutOfOrder {
                attempted: InitStep::BoardReset,
                missing: InitStep::BusMasterOff
            })
        );
        t.write_bus_master(ms(63), false).unwrap();
        assert!(
            control(&mut t, ms(64), bits::BOARD_RESET)
                .unwrap()
                .board_reset
        );
        assert_eq!(t.missing(), Some(InitStep::BoardRun));
    }
}
