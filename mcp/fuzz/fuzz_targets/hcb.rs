//! A booted MCP whose HCB a hostile or broken host overwrites with arbitrary bytes, while
//! arbitrary packets arrive from the network and a well-behaved host sends, receives and
//! reaps through the API: neither the MCP's queue readers nor the host's (SENT, the
//! completion records in the poll structure) may panic or hang, and the MCP must keep
//! its receive engine armed.
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
use myri_mcp::{Api, ChanRequest, InitOptions, Mode, RouteId, Unit};
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let mut fb = FabricBuilder::new(1);
    let ports = star(&mut fb, 2, SwitchSize::Eight, CableConfig::default()).unwrap();
    let fabric = Arc::new(fb.build());
    let mut board = Board::new(BoardConfig::pci64b(0));
    board.attach_link(fabric.clone(), ports[1]);
    let unit = Unit::new(board, 1 << 32, Mode::Inline);
    let mut api = Api::init(&unit, InitOptions::default()).unwrap();
    let chan = api.get_chan(ChanRequest::Specific(1)).unwrap();
    api.init_recv_chan(&chan).unwrap();
    let mut tickets = Vec::new();
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
        match op[0] % 6 {
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
            3 => {
                let _ = unit.with_firmware(|f| f.board.pci_write_u32(now, config::CONTROL, u32::from(op[1]) << 20));
            }
            4 => {
                // A send over the direct route to channel op[1], by PIO or DMA.
                if let Ok(mut buf) = api.get_send_buffer() {
                    let n = payload.len().min(buf.capacity());
                    buf.as_mut_slice()[..n].copy_from_slice(&payload[..n]);
                    let len = usize::from(op[2]) * 64 + n;
                    if let Ok(t) = api.send(op[1] % 8, RouteId(0), buf, len) {
                        tickets.push(t);
                    }
                }
            }
            _ => {
                // The host's readers: completions, SENT, pending sends.
                while let Ok(Some(r)) = api.recv(&chan) {
                    assert!(r.len() <= myri_mcp::hcb::MAX_PAYLOAD);
                }
                api.reap_sent();
                let _ = api.num_pending();
                tickets.retain(|t| api.buffer_busy(t));
            }
        }
        now += std::time::Duration::from_micros(1);
        unit.poll(now);
        let armed = unit.with_firmware(|f| f.board.lanai_state());
        assert!(matches!(armed, Some(RecvState::Armed { .. } | RecvState::Receiving { .. })), "receive engine left unarmed: {armed:?}");
    }
    drop(tickets);
    drop(chan);
    drop(api);
});
