use super::block::{FLAG_HOST_TO_LANAI, FLAG_WAKE};
use super::*;
use crate::hostmem::{DeviceBuf, HostMemory};
use crate::sram::SramSize;
use std::sync::Arc;
use std::time::Duration;

const HOST_BASE: u64 = 0x2_0000_0000;

struct Rig {
    sram: Sram,
    host: Arc<HostMemory>,
    dma: DmaController,
}

impl Rig {
    fn new(rate: u64) -> Rig {
        let mut dma = DmaController::new(rate);
        dma.set_logging(true);
        Rig {
            sram: Sram::new(SramSize::Mib2),
            host: HostMemory::new(HOST_BASE, 1 << 20, 4096).unwrap(),
            dma,
        }
    }

    /// A device-owned host buffer filled with `fill`.
    fn device_buf(&self, offset: usize, len: usize, fill: impl Fn(usize) -> u8) -> DeviceBuf {
        let mut b = self.host.claim(offset, len).unwrap();
        for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
            *x = fill(i);
        }
        b.to_device()
    }

    fn block(&mut self, at: u32, repr: DmaBlockRepr) {
        self.sram.write(at, &repr.to_bytes()).unwrap();
    }

    fn terminal(&mut self, at: u32) {
        self.sram.write_u32(at, FLAG_TERMINAL).unwrap();
    }

    fn advance(&mut self, now: Time) -> bool {
        let mut bus = DmaBus {
            sram: &mut self.sram,
            host: Some(&self.host),
            bus_master: true,
        };
        self.dma.advance(now, &mut bus)
    }
}

fn to_lanai(next: u32, len: u32, lar: u32, host: u64) -> DmaBlockRepr {
    DmaBlockRepr {
        next,
        direction: Direction::HostToLanai,
        terminal: false,
        wake: false,
        csum: 0,
        len,
        lar,
        host_addr: host,
    }
}

fn to_host(next: u32, len: u32, lar: u32, host: u64) -> DmaBlockRepr {
    DmaBlockRepr {
        direction: Direction::LanaiToHost,
        ..to_lanai(next, len, lar, host)
    }
}

fn reference_sum(data: &[u8]) -> u16 {
    super::checksum::tests_reference(data)
}

#[test]
fn one_block_moves_data_sets_t_writes_csum_and_advances() {
    let mut rig = Rig::new(0);
    let buf = rig.device_buf(0, 1000, |i| (i * 7) as u8);
    rig.block(
        0x100,
        DmaBlockRepr {
            wake: true,
            ..to_lanai(0x200, 1000, 0x1000, buf.bus_addr())
        },
    );
    rig.terminal(0x200);
    rig.dma.write_pointer(0, 0x100);
    rig.dma.trigger(0, Time::ZERO);
    assert!(rig.advance(Time::ZERO), "the I bit raises WAKE_INT");

    let moved = rig.sram.slice(0x1000, 1000).unwrap().to_vec();
    assert!(moved.iter().enumerate().all(|(i, &b)| b == (i * 7) as u8));
    let blk = DmaBlock::new_checked(rig.sram.slice(0x100, BLOCK_LEN).unwrap()).unwrap();
    assert!(blk.is_terminal(), "completion sets T");
    assert_eq!(blk.next_addr(), 0x200, "the pointer bits are kept");
    assert_eq!(blk.csum(), reference_sum(&moved));
    assert_eq!(rig.dma.read_pointer(0), 0x200);
    assert_eq!(
        rig.dma.state(0),
        Some(ChannelState::Idle),
        "asleep on the terminal block"
    );
    assert_eq!(rig.dma.counters().blocks, 1);
}

#[test]
fn lanai_to_host_and_back() {
    let mut rig = Rig::new(0);
    let out = rig.device_buf(0, 64, |_| 0);
    rig.sram
        .write(0x4000, b"the quick brown fox jumps over")
        .unwrap();
    rig.block(0x100, to_host(0x118, 30, 0x4000, out.bus_addr()));
    rig.block(0x118, to_lanai(0x130, 30, 0x5000, out.bus_addr()));
    rig.terminal(0x130);
    rig.dma.write_pointer(2, 0x100);
    rig.dma.trigger(2, Time::ZERO);
    assert!(!rig.advance(Time::ZERO));
    assert_eq!(
        rig.sram.slice(0x5000, 30).unwrap(),
        b"the quick brown fox jumps over"
    );
    assert_eq!(
        &out.reclaim().as_slice()[..30],
        b"the quick brown fox jumps over"
    );
}

#[test]
fn a_terminal_block_is_not_executed_until_made_valid() {
    let mut rig = Rig::new(0);
    let buf = rig.device_buf(0, 16, |_| 0xAB);
    // The ring pattern a control program uses: the channel sleeps on B0; fill B0, make
    // B1 terminal, then clear B0's T bit and pulse.
    rig.block(
        0x100,
        DmaBlockRepr {
            terminal: true,
            ..to_lanai(0x118, 16, 0x800, buf.bus_addr())
        },
    );
    rig.dma.write_pointer(0, 0x100);
    rig.dma.trigger(0, Time::ZERO);
    rig.advance(Time::ZERO);
    assert_eq!(
        rig.sram.slice(0x800, 16).unwrap(),
        &[0u8; 16],
        "terminal: not executed"
    );
    assert_eq!(rig.dma.read_pointer(0), 0x100, "still asleep on it");

    rig.terminal(0x118);
    rig.sram
        .write_u32(0x100, 0x118 | FLAG_HOST_TO_LANAI)
        .unwrap();
    rig.dma.trigger(0, Time::ZERO);
    rig.dma.trigger(0, Time::ZERO);
    rig.advance(Time::ZERO);
    assert_eq!(rig.sram.slice(0x800, 16).unwrap(), &[0xAB; 16]);
    assert_eq!(rig.dma.read_pointer(0), 0x118);
    assert_eq!(
        rig.dma.counters().blocks,
        1,
        "a second trigger while active is harmless"
    );
}

#[test]
fn a_zero_next_word_ends_the_chain_and_zero_length_blocks_are_skipped() {
    let mut rig = Rig::new(0);
    let buf = rig.device_buf(0, 8, |i| i as u8);
    rig.block(0x100, to_lanai(0x118, 0, 0x800, buf.bus_addr()));
    rig.block(0x118, to_lanai(0x130, 8, 0x800, buf.bus_addr()));
    // 0x130 is all zeros: the end of the chain.
    rig.dma.write_pointer(1, 0x100);
    rig.dma.trigger(1, Time::ZERO);
    rig.advance(Time::ZERO);
    assert_eq!(rig.sram.slice(0x800, 8).unwrap(), &[0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(rig.dma.counters().skipped, 1);
    let skipped = DmaBlock::new_checked(rig.sram.slice(0x100, BLOCK_LEN).unwrap()).unwrap();
    assert!(
        !skipped.is_terminal(),
        "a skipped zero-length block is not marked done"
    );
    assert_eq!(rig.dma.read_pointer(1), 0x130);
}

#[test]
fn channels_run_in_priority_order_unthrottled() {
    let mut rig = Rig::new(0);
    let buf = rig.device_buf(0, 16, |_| 1);
    for (ch, base) in [(3usize, 0x300u32), (1, 0x200), (0, 0x100)] {
        rig.block(base, to_lanai(base + 0x18, 16, 0x800, buf.bus_addr()));
        rig.block(
            base + 0x18,
            to_lanai(base + 0x30, 16, 0x800, buf.bus_addr()),
        );
        rig.terminal(base + 0x30);
        rig.dma.write_pointer(ch, base);
        rig.dma.trigger(ch, Time::ZERO);
    }
    rig.advance(Time::ZERO);
    let order: Vec<(u8, u32)> = rig
        .dma
        .take_log()
        .iter()
        .map(|c| (c.channel, c.block))
        .collect();
    assert_eq!(
        order,
        vec![
            (0, 0x100),
            (0, 0x118),
            (1, 0x200),
            (1, 0x218),
            (3, 0x300),
            (3, 0x318)
        ]
    );
}

#[test]
fn a_higher_priority_chain_waits_for_the_current_block_only() {
    // 1 byte per microsecond.
    let mut rig = Rig::new(1_000_000);
    let buf = rig.device_buf(0, 100, |_| 2);
    rig.block(0x200, to_lanai(0x218, 100, 0x800, buf.bus_addr()));
    rig.block(0x218, to_lanai(0x230, 100, 0x800, buf.bus_addr()));
    rig.terminal(0x230);
    rig.dma.write_pointer(1, 0x200);
    rig.dma.trigger(1, Time::ZERO);
    rig.advance(Time::from_micros(10));
    let p = rig.dma.progress(Time::from_micros(10)).unwrap();
    assert_eq!(
        (p.channel, p.block, p.done, p.len),
        (1, 0x200, 10, 100),
        "the live pointer"
    );

    rig.block(0x100, to_lanai(0x118, 10, 0x900, buf.bus_addr()));
    rig.terminal(0x118);
    rig.dma.write_pointer(0, 0x100);
    rig.dma.trigger(0, Time::from_micros(10));
    assert_eq!(rig.dma.next_deadline(), Some(Time::from_micros(100)));
    rig.advance(Time::from_micros(1_000));
    let order: Vec<(u8, u32, Time)> = rig
        .dma
        .take_log()
        .iter()
        .map(|c| (c.channel, c.block, c.at))
        .collect();
    assert_eq!(
        order,
        vec![
            (1, 0x200, Time::from_micros(100)),
            (0, 0x100, Time::from_micros(110)),
            (1, 0x218, Time::from_micros(210)),
        ]
    );
    assert!(rig.dma.is_idle());
}

#[test]
fn cycles_of_zero_length_blocks_end_in_an_error() {
    for ring in [1u32, 2, 3, 7, 100] {
        let mut rig = Rig::new(0);
        for i in 0..ring {
            let at = 0x1000 + i * 0x20;
            let next = 0x1000 + ((i + 1) % ring) * 0x20;
            rig.block(at, to_lanai(next, 0, 0, 0));
        }
        rig.dma.write_pointer(0, 0x1000);
        rig.dma.trigger(0, Time::ZERO);
        rig.advance(Time::ZERO);
        assert!(
            matches!(
                rig.dma.state(0),
                Some(ChannelState::Faulted(DmaError::Cycle { .. }))
            ),
            "ring of {ring}"
        );
        assert_eq!(rig.dma.counters().faults, 1);
    }
}

#[test]
fn cycles_of_real_blocks_end_by_themselves() {
    let mut rig = Rig::new(0);
    let buf = rig.device_buf(0, 4, |_| 3);
    rig.block(0x100, to_lanai(0x118, 4, 0x800, buf.bus_addr()));
    rig.block(0x118, to_lanai(0x130, 0, 0, 0));
    rig.block(0x130, to_lanai(0x100, 4, 0x900, buf.bus_addr()));
    rig.dma.write_pointer(0, 0x100);
    rig.dma.trigger(0, Time::ZERO);
    rig.advance(Time::ZERO);
    assert_eq!(rig.dma.state(0), Some(ChannelState::Idle));
    assert_eq!(
        rig.dma.counters().blocks,
        2,
        "each block once, then the first is terminal"
    );
}

#[test]
fn bad_addresses_stop_the_channel_with_a_typed_error() {
    let sram_end = SramSize::Mib2.bytes();
    type Expect = fn(DmaError) -> bool;
    let cases: Vec<(&str, DmaBlockRepr, Expect)> = vec![
        (
            "sram range",
            to_lanai(0x200, 16, sram_end - 8, HOST_BASE),
            |e| matches!(e, DmaError::SramRange { .. }),
        ),
        (
            "huge length",
            to_lanai(0x200, u32::MAX, 0x800, HOST_BASE),
            |e| matches!(e, DmaError::SramRange { .. }),
        ),
        ("host out of range", to_lanai(0x200, 16, 0x800, 0x10), |e| {
            matches!(
                e,
                DmaError::Host {
                    fault: DmaFault::OutOfRange { .. },
                    ..
                }
            )
        }),
        (
            "host-owned page",
            to_host(0x200, 16, 0x800, HOST_BASE + 0x8000),
            |e| {
                matches!(
                    e,
                    DmaError::Host {
                        fault: DmaFault::NotDeviceOwned { .. },
                        ..
                    }
                )
            },
        ),
    ];
    for (name, repr, expected) in cases {
        let mut rig = Rig::new(0);
        let _host_owned = rig.host.claim(0x8000, 64).unwrap();
        rig.block(0x100, repr);
        rig.dma.write_pointer(0, 0x100);
        rig.dma.trigger(0, Time::ZERO);
        rig.advance(Time::ZERO);
        match rig.dma.state(0) {
            Some(ChannelState::Faulted(e)) => assert!(expected(e), "{name}: {e}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn a_pointer_beyond_sram_faults_and_rewriting_it_recovers() {
    let mut rig = Rig::new(0);
    rig.dma.write_pointer(0, 0x30_0000);
    rig.dma.trigger(0, Time::ZERO);
    rig.advance(Time::ZERO);
    assert_eq!(
        rig.dma.state(0),
        Some(ChannelState::Faulted(DmaError::BlockOutOfRange {
            block: 0x30_0000
        }))
    );
    // The last whole block slot of SRAM is fine; a block straddling the end is not.
    rig.dma.write_pointer(0, SramSize::Mib2.bytes() - 16);
    assert_eq!(rig.dma.state(0), Some(ChannelState::Idle));
    rig.dma.trigger(0, Time::ZERO);
    rig.advance(Time::ZERO);
    assert!(matches!(
        rig.dma.state(0),
        Some(ChannelState::Faulted(DmaError::BlockOutOfRange { .. }))
    ));
}

#[test]
fn pointer_registers_keep_bits_22_to_3() {
    let mut dma = DmaController::new(0);
    dma.write_pointer(3, 0xFFFF_FFFF);
    assert_eq!(dma.read_pointer(3), 0x007F_FFF8);
    dma.write_pointer(9, 0x100);
    assert_eq!(dma.read_pointer(9), 0, "channels beyond 3 do not exist");
}

#[test]
fn no_host_memory_or_no_bus_master_faults() {
    let mut sram = Sram::new(SramSize::Mib2);
    sram.write(0x100, &to_lanai(0x118, 4, 0x800, HOST_BASE).to_bytes())
        .unwrap();
    for (host_attached, bus_master, expected) in [
        (false, true, DmaError::NoHostMemory { block: 0x100 }),
        (true, false, DmaError::NotBusMaster),
    ] {
        let host = HostMemory::new(HOST_BASE, 4096, 4096).unwrap();
        let mut dma = DmaController::new(0);
        dma.write_pointer(0, 0x100);
        dma.trigger(0, Time::ZERO);
        let mut bus = DmaBus {
            sram: &mut sram,
            host: host_attached.then_some(&*host),
            bus_master,
        };
        dma.advance(Time::ZERO, &mut bus);
        assert_eq!(dma.state(0), Some(ChannelState::Faulted(expected)));
    }
}

#[test]
fn wake_bit_only_on_blocks_that_ask() {
    let mut rig = Rig::new(0);
    let buf = rig.device_buf(0, 4, |_| 0);
    rig.block(0x100, to_lanai(0x118, 4, 0x800, buf.bus_addr()));
    rig.terminal(0x118);
    rig.dma.write_pointer(0, 0x100);
    rig.dma.trigger(0, Time::ZERO);
    assert!(!rig.advance(Time::ZERO));
    let mut rig = Rig::new(1_000);
    let buf = rig.device_buf(0, 4, |_| 0);
    rig.block(
        0x100,
        DmaBlockRepr {
            wake: true,
            ..to_lanai(0x118, 4, 0x800, buf.bus_addr())
        },
    );
    assert_eq!(rig.sram.read_u32(0x100).unwrap() & FLAG_WAKE, FLAG_WAKE);
    rig.terminal(0x118);
    rig.dma.write_pointer(0, 0x100);
    rig.dma.trigger(0, Time::ZERO);
    assert!(!rig.advance(Time::ZERO), "not complete yet at 1000 B/s");
    assert!(rig.advance(Time::ZERO + Duration::from_millis(4)));
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any chain of blocks with in-range addresses moves exactly its bytes, and each
        /// block's checksum equals the reference sum of what it moved.
        #[test]
        fn chains_move_bytes_and_checksum_them(lens in proptest::collection::vec(0u32..3000, 1..12), seed: u8) {
            let mut rig = Rig::new(0);
            let total: usize = lens.iter().map(|&l| l as usize).sum::<usize>().max(1);
            let buf = rig.device_buf(0, total, |i| (i as u8).wrapping_mul(31).wrapping_add(seed));
            let mut at = 0x100u32;
            let mut host = buf.bus_addr();
            let mut lar = 0x10_0000u32;
            for &len in &lens {
                rig.block(at, to_lanai(at + 0x18, len, lar, host));
                at += 0x18;
                host += u64::from(len);
                lar += len;
            }
            rig.terminal(at);
            rig.dma.write_pointer(0, 0x100);
            rig.dma.trigger(0, Time::ZERO);
            rig.advance(Time::ZERO);
            prop_assert_eq!(rig.dma.state(0), Some(ChannelState::Idle));
            let moved = rig.sram.slice(0x10_0000, total).unwrap().to_vec();
            let expected = buf.reclaim();
            prop_assert_eq!(&moved[..lens.iter().sum::<u32>() as usize], &expected.as_slice()[..lens.iter().sum::<u32>() as usize]);
            let mut at = 0x100u32;
            let mut offset = 0usize;
            for &len in &lens {
                let blk = DmaBlock::new_checked(rig.sram.slice(at, BLOCK_LEN).unwrap()).unwrap();
                if len > 0 {
                    prop_assert!(blk.is_terminal());
                    prop_assert_eq!(blk.csum(), reference_sum(&moved[offset..offset + len as usize]));
                }
                at += 0x18;
                offset += len as usize;
            }
        }
    }
}
