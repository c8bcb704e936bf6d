//! LANai special registers (seed 002, §2.6) and interface-status bits.
//!
//! Offsets are those of GM's `lanai7_def.h` (memory-mapped at `0xFFFFFE00` on the LANai,
//! and at PCI offset `0x0080_4000` for the host). `CPUC` (LANai 9 cycle counter) and
//! `CLOCK` (the clockval register) complete the set used by the §2.4 initialization.

/// Register offsets.
pub mod reg {
    /// Interface status register: interrupt bits; write 1 to clear.
    pub const ISR: u32 = 0x50;
    /// External-interrupt mask register.
    pub const EIMR: u32 = 0x58;
    /// Interval timer 0: ticks down at the RTC rate; TIME0_INT at zero.
    pub const IT0: u32 = 0x60;
    /// Real-time clock: 2 ticks per microsecond.
    pub const RTC: u32 = 0x68;
    /// E-bus DMA local address (FPGA access only; not modelled).
    pub const LAR: u32 = 0x70;
    /// E-bus DMA counter (FPGA access only; not modelled).
    pub const CTR: u32 = 0x78;
    /// P0/P1/P2 output pins: bit 1 triggers DMA channel 0, bit 2 channel 2 (seed 002 §3.2).
    pub const PULSE: u32 = 0xB8;
    /// Interval timer 1.
    pub const IT1: u32 = 0xC0;
    /// Interval timer 2.
    pub const IT2: u32 = 0xC8;
    /// Receive-DMA CRC-32 pointer without trigger (not modelled).
    pub const RMW: u32 = 0xD0;
    /// Receive-DMA CRC-32 pointer (not modelled).
    pub const RMC: u32 = 0xD8;
    /// Receive-DMA pointer: where the next byte goes; advances as bytes arrive.
    pub const RMP: u32 = 0xE0;
    /// Receive-DMA limit: writing it arms the receive engine.
    pub const RML: u32 = 0xE8;
    /// Send-DMA pointer: the first (word-aligned) byte to send.
    pub const SMP: u32 = 0xF0;
    /// Send-DMA routing-header end (not modelled).
    pub const SMH: u32 = 0xF8;
    /// Send-DMA limit: writing it sends `[SMP + SA, SML)` without ending the packet.
    pub const SML: u32 = 0x100;
    /// Send-DMA limit with tail: sends `[SMP + SA, SMLT)` and ends the packet.
    pub const SMLT: u32 = 0x108;
    /// Send-DMA header CRC-32 pointer (not modelled).
    pub const SMC: u32 = 0x110;
    /// Send alignment: bytes of the first word to skip (0..=3).
    pub const SA: u32 = 0x118;
    /// Link timeout and high-availability bits (§4.2).
    pub const TIMEOUT: u32 = 0x128;
    /// Link control (§4.1).
    pub const MYRINET: u32 = 0x130;
    /// Hardware debugging.
    pub const DEBUG: u32 = 0x138;
    /// LED.
    pub const LED: u32 = 0x140;
    /// Memory protection.
    pub const WRITE_ENABLE: u32 = 0x150;
    /// LANai 9 processor cycle counter.
    pub const CPUC: u32 = 0x1F0;
    /// The clockval register (§2.4).
    pub const CLOCK: u32 = 0x1F8;
    /// Size of the special-register block in the PCI window.
    pub const BLOCK: u32 = 0x4000;
}

/// ISR bits.
pub mod isr {
    /// Set by the host to signal the LANai.
    pub const HOST_SIG: u32 = 0x4000_0000;
    /// Link timed out (§4.2).
    pub const LINK2_INT: u32 = 0x0400_0000;
    /// Link went from up to down.
    pub const LINK1_INT: u32 = 0x0200_0000;
    /// Link went from down to up.
    pub const LINK0_INT: u32 = 0x0100_0000;
    /// Interval timer 2 reached zero.
    pub const TIME2_INT: u32 = 0x0000_2000;
    /// A DMA block with its I bit completed, or a doorbell entry was queued.
    pub const WAKE_INT: u32 = 0x0000_1000;
    /// Receive blocked too long (§4.2).
    pub const NRES_INT: u32 = 0x0000_0800;
    /// Interval timer 1 reached zero.
    pub const TIME1_INT: u32 = 0x0000_0080;
    /// Interval timer 0 reached zero.
    pub const TIME0_INT: u32 = 0x0000_0040;
    /// The send engine is idle (level: set while idle).
    pub const SEND_INT: u32 = 0x0000_0008;
    /// The receive buffer filled before the end of the packet (overrun).
    pub const BUFF_INT: u32 = 0x0000_0004;
    /// A packet was received completely.
    pub const RECV_INT: u32 = 0x0000_0002;
    /// A packet header arrived (not modelled).
    pub const HEAD_INT: u32 = 0x0000_0001;
    /// Bits that reflect engine state rather than latched events: writing 1 does not
    /// clear them.
    pub const LEVEL: u32 = SEND_INT;
}

/// RTC ticks per microsecond.
pub const RTC_TICKS_PER_US: u64 = 2;
