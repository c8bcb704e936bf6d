//! A host doing arbitrary things to a board through its PCI window, interleaved with the
//! control program's register writes and hardware progress: no panic, whatever the order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_device::board::{Board, BoardConfig, bring_up};
use myri_device::time::Time;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let mut board = Board::new(BoardConfig::pci64b(0));
    let mut now = Time::ZERO;
    if data.first().is_some_and(|b| b & 1 == 1) {
        now = bring_up(&mut board, now, &[]).unwrap();
    }
    for op in data.chunks_exact(9) {
        let offset = u32::from_be_bytes([op[1], op[2], op[3], op[4]]) & 0x01FF_FFFF;
        let value = u32::from_be_bytes([op[5], op[6], op[7], op[8]]);
        match op[0] % 8 {
            0 => drop(board.pci_read_u32(now, offset)),
            1 => drop(board.pci_write_u32(now, offset, value)),
            2 => drop(board.pci_write_control_byte(now, op[1], op[5])),
            3 => drop(board.pci_write_command(now, value as u16)),
            4 => now += Duration::from_micros(u64::from(value % 20_000)),
            5 => board.advance(now),
            6 => {
                if let Ok(mut l) = board.lanai() {
                    let _ = l.write_reg(now, offset & 0x1FC, value);
                }
            }
            _ => {
                let mut out = [0u8; 16];
                let _ = board.pci_read_bytes(offset, &mut out[..(value % 17) as usize]);
            }
        }
    }
});
