//! Hot paths of the board and fabric, each against a plain `copy_from_slice` of the same
//! bytes in the same run, so that what is reported is a ratio.
//!
//! * DMA of 8 B and 8 KiB: one control block, host memory to SRAM, through the DMA
//!   controller (ownership checks, copy, ones-complement checksum, T bit).
//! * A packet through a switch: host port to host port over one crossbar switch (route byte
//!   consumed, CRC-8 updated, fault middleware, port queue, CRC-8 checked on receive).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use myri_device::dma::{Direction, DmaBlockRepr, DmaBus, DmaController};
use myri_device::fabric::topology::star;
use myri_device::fabric::{CableConfig, FabricBuilder, SwitchSize};
use myri_device::hostmem::HostMemory;
use myri_device::sram::{Sram, SramSize};
use myri_device::time::Time;
use myri_device::wire::{Packet, Route};
use std::hint::black_box;

fn dma(c: &mut Criterion) {
    let mut g = c.benchmark_group("dma");
    for len in [8usize, 8192] {
        g.throughput(Throughput::Bytes(len as u64));
        let mut sram = Sram::new(SramSize::Mib2);
        let host = HostMemory::new(1 << 32, 1 << 16, 4096).expect("host memory");
        let mut buf = host.claim(0, 8192).expect("claim");
        buf.as_mut_slice().fill(0x5A);
        let dev = buf.to_device();
        let block = DmaBlockRepr {
            next: 0x118,
            direction: Direction::HostToLanai,
            terminal: false,
            wake: false,
            csum: 0,
            len: len as u32,
            lar: 0x10_0000,
            host_addr: dev.bus_addr(),
        };
        let bytes = block.to_bytes();
        let mut dmac = DmaController::new(0);
        g.bench_with_input(BenchmarkId::new("controller", len), &len, |b, _| {
            b.iter(|| {
                sram.write(0x100, &bytes).expect("block");
                sram.write_u32(0x118, 0x2).expect("terminal");
                dmac.write_pointer(0, 0x100);
                dmac.trigger(0, Time::ZERO);
                let mut bus = DmaBus {
                    sram: &mut sram,
                    host: Some(&host),
                    bus_master: true,
                };
                black_box(dmac.advance(Time::ZERO, &mut bus));
            })
        });
        let src = vec![0x5Au8; len];
        let mut dst = vec![0u8; len];
        g.bench_with_input(BenchmarkId::new("copy_from_slice", len), &len, |b, _| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&src));
                black_box(&dst);
            })
        });
        drop(dev);
    }
    g.finish();
}

fn switch(c: &mut Criterion) {
    let mut g = c.benchmark_group("switch");
    for len in [64usize, 8192] {
        g.throughput(Throughput::Bytes(len as u64));
        let mut b = FabricBuilder::new(1);
        let ports = star(&mut b, 2, SwitchSize::Eight, CableConfig::default()).expect("topology");
        let fabric = b.build();
        let route = Route::from_ports(&[1]).expect("route");
        let body = vec![0x3Cu8; len];
        g.bench_with_input(
            BenchmarkId::new("packet_through_switch", len),
            &len,
            |bch, _| {
                bch.iter(|| {
                    let p = Packet::build(&route, black_box(&body)).expect("packet");
                    fabric.transmit(Time::ZERO, ports[0], p).expect("transmit");
                    black_box(fabric.receive(Time::ZERO, ports[1]).expect("arrives"));
                })
            },
        );
        let mut dst = vec![0u8; len];
        g.bench_with_input(BenchmarkId::new("copy_from_slice", len), &len, |bch, _| {
            bch.iter(|| {
                dst.copy_from_slice(black_box(&body));
                black_box(&dst);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, dma, switch);
criterion_main!(benches);
