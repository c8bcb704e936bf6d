//! A booted MCP whose HCB a hostile or broken host overwrites with arbitrary bytes, while
//! arbitrary packets arrive from the network: the MCP must neither panic nor hang, and
//! must keep its receive engine armed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_device::board::{Board, BoardConfig, config};
use myri_device::engines::RecvState;
use myri_device::fabric::topology::star;
use myri_device::fabric::{CableConfig, FabricBuilder, SwitchSize};
use myri_device::time::Time;
use myri_device::wire::Packet;
use myri_mcp::hcb::Layout;
use myri_mcp::host::unit::Firmware;
use myri_mcp::{Api, InitOptions, Mode, Unit};
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let mut fb = FabricBuilder::new(1);
    let ports = star(&mut fb, 2, SwitchSize::Eight, CableConfig::default()).unwrap();
    let fabric = Arc::new(fb.build());
    let mut board = Board::new(BoardConfig::pci64b(0));
    board.attach_link(fabric.clone(), ports[1]);
    let unit = Unit::new(board, 1 << 32, Mode::Inline);
    let api = Api::init(&unit, InitOptions::default()).unwrap();
    let layout = Layout::new(2 << 20).unwrap();
    let mut now = Time::from_micros(100_000);
    // Each op: a tag byte, then either HCB bytes to write or a packet to deliver.
    let mut rest = data;
    while rest.len() >= 4 {
        let (op, tail) = rest.split_at(4);
        let len = usize::from(op[3]).min(tail.len());
        let (payload, tail) = tail.split_at(len);
        rest = tail;
        let offset = u32::from(u16::from_be_bytes([op[1], op[2]])) * 4 % (layout.end - layout.base);
        match op[0] % 4 {
            0 | 1 => unit.with_firmware(|f: &mut Firmware| {
                let at = (layout.base + offset) & !3;
                let _ = f.board.pci_write_bytes(at, payload);
            }),
            2 => {
                let mut contents = vec![0x81];
                contents.extend_from_slice(payload);
                if let Ok(p) = Packet::seal(contents) {
                    let _ = fabric.transmit(now, ports[0], p);
                }
            }
            _ => {
                let _ = unit.with_firmware(|f| f.board.pci_write_u32(now, config::CONTROL, u32::from(op[1]) << 20));
            }
        }
        now += std::time::Duration::from_micros(1);
        unit.poll(now);
        let armed = unit.with_firmware(|f| f.board.lanai_state());
        assert!(matches!(armed, Some(RecvState::Armed { .. } | RecvState::Receiving { .. })), "receive engine left unarmed: {armed:?}");
    }
    drop(api);
});
