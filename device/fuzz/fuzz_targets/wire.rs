//! Arbitrary bytes as a packet on a wire: parse it, walk it through switches hop by hop,
//! and parse what reaches the host as a frame, a route, an EEPROM record and a DMA block.
//! Nothing may panic, and a switch hop must keep the CRC verdict.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_device::dma::DmaBlockRepr;
use myri_device::dma::block::DmaBlock;
use myri_device::eeprom::Eeprom;
use myri_device::wire::route::decode_hop;
use myri_device::wire::{Frame, Packet, Route};

fuzz_target!(|data: &[u8]| {
    let _ = Route::parse(data);
    let _ = Eeprom::from_bytes(data);
    if let Ok(block) = DmaBlock::new_checked(data) {
        let repr = DmaBlockRepr::parse(&block);
        assert_eq!(DmaBlockRepr::parse(&DmaBlock::new_checked(&repr.to_bytes()[..]).unwrap()), repr);
    }
    let Ok(mut packet) = Packet::from_wire(data.to_vec()) else { return };
    let ok = packet.crc_ok();
    // Walk switches while the first byte is a valid hop.
    for hop in 0..64 {
        let Some(byte) = packet.first_byte() else { break };
        if decode_hop(hop, byte).is_err() {
            break;
        }
        packet.consume_route_byte().expect("a byte is there");
        assert_eq!(packet.crc_ok(), ok, "a switch hop must not change the CRC verdict");
    }
    if let Ok(frame) = Frame::new_checked(packet.contents()) {
        let _ = (frame.packet_type(), frame.payload().len());
    }
});
