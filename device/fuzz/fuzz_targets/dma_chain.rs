//! Arbitrary SRAM contents and channel pointers for the DMA controller: every walk must
//! end (idle or faulted), never hang or panic, and never touch host pages it does not own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_device::dma::{ChannelState, DmaBus, DmaController};
use myri_device::hostmem::HostMemory;
use myri_device::sram::{Sram, SramSize};
use myri_device::time::Time;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (head, image) = data.split_at(8);
    let mut sram = Sram::new(SramSize::Mib2);
    // Tile the input over the first 64 KiB so chains find structure wherever they point.
    let mut at = 0u32;
    while !image.is_empty() && at < 0x1_0000 {
        let n = image.len().min((0x1_0000 - at) as usize);
        sram.write(at, &image[..n]).unwrap();
        at += n as u32;
    }
    // Host memory at the bus addresses blocks most often name (0 and small numbers),
    // with device, host and shared pages.
    let host = HostMemory::new(0, 16 * 4096, 4096).unwrap();
    let dev = host.claim(0, 4 * 4096).unwrap().to_device();
    let owned = host.claim(4 * 4096, 4096).unwrap();
    let shared = host.share(8 * 4096, 4096).unwrap();
    let mut dma = DmaController::new(0);
    for ch in 0..4 {
        dma.write_pointer(ch, u32::from(u16::from_be_bytes([head[2 * ch], head[2 * ch + 1]])));
        dma.trigger(ch, Time::ZERO);
    }
    let mut bus = DmaBus { sram: &mut sram, host: Some(&host), bus_master: true };
    dma.advance(Time::ZERO, &mut bus);
    for ch in 0..4 {
        assert!(matches!(dma.state(ch), Some(ChannelState::Idle | ChannelState::Faulted(_))));
    }
    assert!(owned.as_slice().iter().all(|&b| b == 0), "a host-owned page was written");
    drop((dev, shared));
});
