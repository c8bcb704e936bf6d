//! The control program's view of the board: SRAM, special registers and engines.

use super::Board;
use crate::control::InitStep;
use crate::dma::Progress;
use crate::doorbell::{DoorbellQueue, FifoEntry};
use crate::engines::{EngineError, RecvState};
use crate::special::{RTC_TICKS_PER_US, isr, reg};
use crate::sram::Sram;
use crate::time::Time;
use std::time::Duration;
use thiserror::Error;

/// The LANai is not running: the board refuses to run a control program until the §2.4
/// sequence is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the lanai is not running: {missing} is missing")]
pub struct NotRunning {
    /// The first step of §2.4 still missing.
    pub missing: InitStep,
}

/// The board as the running LANai sees it. Obtained from [`Board::lanai`].
pub struct Lanai<'a> {
    board: &'a mut Board,
}

impl Board {
    /// The LANai's view of the board, if the LANai is running.
    pub fn lanai(&mut self) -> Result<Lanai<'_>, NotRunning> {
        match self.tracker.missing() {
            None => Ok(Lanai { board: self }),
            Some(missing) => Err(NotRunning { missing }),
        }
    }

    fn timer_ticks(&self, i: usize, now: Time) -> u32 {
        self.specials.timers[i].map_or(0, |t| {
            (t.saturating_since(now).as_nanos() * u128::from(RTC_TICKS_PER_US) / 1_000) as u32
        })
    }

    fn set_timer(&mut self, i: usize, now: Time, ticks: u32) {
        self.specials.timers[i] = (ticks != 0)
            .then(|| now + Duration::from_nanos(u64::from(ticks) * 1_000 / RTC_TICKS_PER_US));
    }

    /// A special register as the host or the LANai reads it.
    pub(crate) fn read_special(&self, now: Time, offset: u32) -> u32 {
        let s = &self.specials;
        match offset {
            reg::ISR => self.isr(now),
            reg::EIMR => s.eimr,
            reg::IT0 => self.timer_ticks(0, now),
            reg::IT1 => self.timer_ticks(1, now),
            reg::IT2 => self.timer_ticks(2, now),
            reg::RTC => Board::rtc(now),
            reg::RMP => self.recv.pointer(now),
            reg::RML => match self.recv.state() {
                RecvState::Armed { rml, .. } => rml,
                RecvState::Receiving { start, len, .. } => start + len,
                _ => 0,
            },
            reg::SMP => s.smp,
            reg::SA => s.sa,
            reg::TIMEOUT => s.timeout,
            reg::MYRINET => s.myrinet,
            reg::LED => s.led,
            reg::DEBUG => s.debug,
            reg::WRITE_ENABLE => s.write_enable,
            reg::CPUC => (now.as_nanos() * u64::from(self.tracker.lanai_mhz()) / 1_000) as u32,
            reg::CLOCK => self.tracker.clockval(),
            _ => 0,
        }
    }

    /// A host write of a special register: the clockval (§2.4), HOST_SIG, and the rest.
    pub(crate) fn write_special_from_host(
        &mut self,
        now: Time,
        offset: u32,
        value: u32,
    ) -> Result<(), super::PciError> {
        match offset {
            reg::CLOCK => Ok(self.tracker.write_clockval(now, value)?),
            reg::ISR => {
                // The host can only raise HOST_SIG; it clears nothing.
                self.specials.isr |= value & isr::HOST_SIG;
                Ok(())
            }
            _ => {
                let _ = self.write_special(now, offset, value);
                Ok(())
            }
        }
    }

    /// A write of a special register by the LANai (or the host, for most of them).
    fn write_special(&mut self, now: Time, offset: u32, value: u32) -> Result<(), EngineError> {
        let s = &mut self.specials;
        match offset {
            reg::ISR => s.isr &= !(value & !isr::LEVEL),
            reg::EIMR => s.eimr = value,
            reg::IT0 => self.set_timer(0, now, value),
            reg::IT1 => self.set_timer(1, now, value),
            reg::IT2 => self.set_timer(2, now, value),
            reg::PULSE => {
                if value & 0x2 != 0 {
                    self.dma.trigger(0, now);
                }
                if value & 0x4 != 0 {
                    self.dma.trigger(2, now);
                }
            }
            reg::SMP => s.smp = value,
            reg::SA => s.sa = value,
            reg::SML | reg::SMLT => {
                let (smp, sa) = (s.smp, s.sa);
                return self.start_send(now, smp, sa, value, offset == reg::SMLT);
            }
            // RMP names the buffer; writing RML arms the engine with it.
            reg::RMP => s.rmp = value,
            reg::RML => {
                let rmp = s.rmp;
                return self.arm_recv(rmp, value);
            }
            reg::TIMEOUT => s.timeout = value & 0xF,
            reg::MYRINET => s.myrinet = value,
            reg::LED => s.led = value,
            reg::DEBUG => s.debug = value,
            reg::WRITE_ENABLE => s.write_enable = value,
            _ => {}
        }
        Ok(())
    }

    fn start_send(
        &mut self,
        now: Time,
        smp: u32,
        sa: u32,
        limit: u32,
        tail: bool,
    ) -> Result<(), EngineError> {
        if tail && let Some(f) = &mut self.sram_faults {
            f.maybe_flip(&mut self.sram, true, smp + sa, limit);
        }
        let port = self.link.as_ref().map(|l| (&*l.fabric, l.port));
        let rate = self.config.timing.send_bytes_per_sec;
        let r = self.send.send(
            now,
            &self.sram,
            smp,
            sa,
            limit,
            tail,
            rate,
            port,
            &mut self.counters.engines,
        );
        if r.is_err() {
            self.counters.engines.errors += 1;
        }
        r
    }

    fn arm_recv(&mut self, rmp: u32, rml: u32) -> Result<(), EngineError> {
        let r = self.recv.arm(&self.sram, rmp, rml);
        match r {
            Ok(()) => self.specials.isr &= !(isr::RECV_INT | isr::BUFF_INT),
            Err(_) => self.counters.engines.errors += 1,
        }
        r
    }
}

impl Lanai<'_> {
    /// SRAM.
    #[inline]
    pub fn sram(&mut self) -> &mut Sram {
        &mut self.board.sram
    }

    /// SRAM, read-only.
    #[inline]
    pub fn sram_ref(&self) -> &Sram {
        &self.board.sram
    }

    /// Reads a special register.
    pub fn read_reg(&self, now: Time, offset: u32) -> u32 {
        self.board.read_special(now, offset)
    }

    /// Writes a special register. Engine registers (`SML`, `SMLT`, `RML`) return the
    /// engine's refusal, which is also counted.
    pub fn write_reg(&mut self, now: Time, offset: u32, value: u32) -> Result<(), EngineError> {
        self.board.write_special(now, offset, value)
    }

    /// The ISR.
    #[inline]
    pub fn isr(&self, now: Time) -> u32 {
        self.board.isr(now)
    }

    /// Clears latched ISR bits (write-1-to-clear).
    #[inline]
    pub fn clear_isr(&mut self, bits: u32) {
        self.board.specials.isr &= !(bits & !isr::LEVEL);
    }

    /// Sets the interrupt mask.
    pub fn set_eimr(&mut self, mask: u32) {
        self.board.specials.eimr = mask;
    }

    /// Interrupts pending: `ISR & EIMR`.
    #[inline]
    pub fn pending_interrupts(&self, now: Time) -> u32 {
        self.board.pending_interrupts(now)
    }

    /// The real-time clock (2 ticks per microsecond).
    pub fn rtc(&self, now: Time) -> u32 {
        Board::rtc(now)
    }

    /// Sets interval timer 0 to raise TIME0_INT after `after` (0 cancels).
    pub fn set_timer0(&mut self, now: Time, after: Duration) {
        let ticks = (after.as_nanos() * u128::from(RTC_TICKS_PER_US) / 1_000)
            .min(u128::from(u32::MAX)) as u32;
        self.board
            .set_timer(0, now, ticks.max(u32::from(!after.is_zero())));
    }

    /// Pulses DMA channel 0 or 2 (the only ones the LANai can trigger).
    pub fn pulse_dma(&mut self, now: Time, channel: usize) {
        let bit = match channel {
            0 => 0x2,
            2 => 0x4,
            _ => return,
        };
        let _ = self.board.write_special(now, reg::PULSE, bit);
    }

    /// The host-DMA block in flight and how far it has got (the live DMA pointer).
    pub fn dma_progress(&self, now: Time) -> Option<Progress> {
        self.board.dma.progress(now)
    }

    /// Runs the hardware up to `now` (same as [`Board::advance`]).
    #[inline]
    pub fn advance(&mut self, now: Time) {
        self.board.advance(now);
    }

    /// Sends `[smp + sa, limit)`; `tail` ends the packet.
    #[inline]
    pub fn send(
        &mut self,
        now: Time,
        smp: u32,
        sa: u32,
        limit: u32,
        tail: bool,
    ) -> Result<(), EngineError> {
        self.board.specials.smp = smp;
        self.board.specials.sa = sa;
        self.board.start_send(now, smp, sa, limit, tail)
    }

    /// Whether the send engine is idle at `now`.
    #[inline]
    pub fn send_idle(&self, now: Time) -> bool {
        self.board.send.idle(now)
    }

    /// Arms the receive engine with `[rmp, rml)`.
    #[inline]
    pub fn arm_recv(&mut self, rmp: u32, rml: u32) -> Result<(), EngineError> {
        self.board.arm_recv(rmp, rml)
    }

    /// The receive engine's state.
    #[inline]
    pub fn recv_state(&self) -> RecvState {
        self.board.recv.state()
    }

    /// The live receive pointer.
    #[inline]
    pub fn recv_pointer(&self, now: Time) -> u32 {
        self.board.recv.pointer(now)
    }

    /// Pops the next doorbell entry of `queue`.
    pub fn doorbell_pop(&mut self, queue: &mut DoorbellQueue) -> Option<FifoEntry> {
        let limits = self.board.doorbell_config().limits;
        queue.pop(&mut self.board.sram, limits)
    }

    /// The whole board, for what this view does not cover.
    pub fn board(&mut self) -> &mut Board {
        self.board
    }
}
