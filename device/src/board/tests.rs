use super::*;
use crate::control::{InitError, InitStep, bits};
use crate::dma::{Direction, DmaBlockRepr};
use crate::fabric::topology::star;
use crate::fabric::{CableConfig, FabricBuilder, SwitchSize};
use crate::special::{isr, reg};
use crate::sram::SramError;
use crate::wire::Route;
use std::time::Duration;

fn running_board(unit: u32) -> (Board, Time) {
    let mut b = Board::new(BoardConfig::pci64b(unit));
    let t = bring_up(&mut b, Time::ZERO, b"MCP image").unwrap();
    (b, t)
}

#[test]
fn bring_up_runs_the_lanai_at_the_fastest_safe_clock() {
    let (mut b, t) = running_board(0);
    assert_eq!(t, Time::from_micros(41_000));
    assert_eq!(b.missing_init_step(), None);
    // 33 MHz PCI, LANai 9 at 2x its clock, max 134 MHz: 2.0x gives 132 MHz.
    assert_eq!(b.lanai_mhz(), 132);
    let c = b.control();
    assert_eq!(
        c & (bits::LANAI_RUN | bits::EBUS_RUN | bits::BOARD_RUN),
        bits::LANAI_RUN | bits::EBUS_RUN | bits::BOARD_RUN
    );
    assert_eq!(
        b.pci_read_u32(t, 0).unwrap(),
        u32::from_be_bytes(*b"MCP "),
        "the image is loaded at 0"
    );
    assert!(b.lanai().is_ok());

    // In a 66 MHz slot the same board must run at 1.0x.
    let mut cfg = BoardConfig::pci64b(1);
    cfg.pci_mhz = 66;
    let mut b = Board::new(cfg);
    bring_up(&mut b, Time::ZERO, &[]).unwrap();
    assert_eq!(b.lanai_mhz(), 132);
}

#[test]
fn a_board_not_brought_up_refuses_to_run_naming_the_missing_step() {
    let mut b = Board::new(BoardConfig::pci64b(0));
    assert_eq!(
        b.lanai().err(),
        Some(NotRunning {
            missing: InitStep::BusMasterOff
        })
    );
    // SRAM is not reachable while the board is in reset.
    assert_eq!(
        b.pci_read_u32(Time::ZERO, 0x100),
        Err(PciError::InReset(0x100))
    );
    // Letting the LANai run straight away is refused and names step 1.
    let err = b
        .pci_write_u32(Time::ZERO, config::CONTROL, bits::LANAI_RUN)
        .unwrap_err();
    assert_eq!(
        err,
        PciError::Init(InitError::OutOfOrder {
            attempted: InitStep::LanaiRun,
            missing: InitStep::BusMasterOff
        })
    );
    assert!(
        err.to_string()
            .contains("step 1 (turn off the pci config dma-master bit)"),
        "{err}"
    );
    assert_eq!(b.counters().pci.errors, 2);
    // After a LANai reset the control program stops until it is let run again.
    let (mut b, t) = running_board(0);
    b.pci_write_u32(t, config::CONTROL, bits::LANAI_RESET)
        .unwrap();
    assert_eq!(
        b.lanai().err(),
        Some(NotRunning {
            missing: InitStep::LanaiRun
        })
    );
    b.pci_write_u32(t, config::CONTROL, bits::LANAI_RUN)
        .unwrap();
    assert!(b.lanai().is_ok());
}

#[test]
fn the_pci_window_decodes_as_seed_002_says() {
    let (mut b, t) = running_board(7);
    assert_eq!(
        b.pci_read_u32(t, config::REMAP).unwrap(),
        0x8043_14C1,
        "device and vendor id"
    );
    assert_eq!(
        b.pci_read_u32(t, config::EEPROM + 4).unwrap() >> 16,
        0x0900,
        "cpu version"
    );
    assert_eq!(
        b.pci_read_u32(t, config::EEPROM + 200).unwrap(),
        0,
        "past the record"
    );
    assert_eq!(
        b.pci_read_u32(t, 0x0090_0000),
        Err(PciError::WriteOnly(0x0090_0000)),
        "doorbell is write-only"
    );
    assert_eq!(
        b.pci_read_u32(t, 0x0060_0000),
        Err(PciError::Unmapped(0x0060_0000)),
        "beyond a 2 MB sram"
    );
    assert_eq!(
        b.pci_read_u32(t, config::END),
        Err(PciError::Unmapped(config::END))
    );
    assert_eq!(b.pci_read_u32(t, 2), Err(PciError::Misaligned(2)));
    b.pci_write_u32(t, config::DMA_BASE + 8, 0xFFFF_FFFF)
        .unwrap();
    assert_eq!(
        b.pci_read_u32(t, config::DMA_BASE + 8).unwrap(),
        0x007F_FFF8
    );
    b.pci_write_u32(t, config::FIFO_BASE + 4, 0x1000).unwrap();
    assert_eq!(b.pci_read_u32(t, config::FIFO_BASE + 4).unwrap(), 0x1000);
    assert_eq!(
        b.pci_write_bytes(b.sram().len() - 2, &[0; 4]),
        Err(PciError::Sram(SramError::OutOfBounds {
            addr: b.sram().len() - 2,
            len: 4,
            size: b.sram().len()
        }))
    );
    // A byte write to the top byte leaves the doorbell bits alone.
    b.pci_write_u32(t, config::CONTROL, 0x13).unwrap();
    b.pci_write_control_byte(t, 3, (bits::INT_ENABLE >> 24) as u8)
        .unwrap();
    assert_eq!(b.control() & 0x1F, 0x13);
    assert_ne!(b.control() & bits::INT_ENABLE, 0);
}

#[test]
fn host_signal_and_interrupt_mask() {
    let (mut b, t) = running_board(0);
    b.pci_write_u32(t, config::SPECIAL + reg::ISR, isr::HOST_SIG | isr::WAKE_INT)
        .unwrap();
    let mut l = b.lanai().unwrap();
    assert_eq!(
        l.isr(t) & (isr::HOST_SIG | isr::WAKE_INT),
        isr::HOST_SIG,
        "the host can only raise HOST_SIG"
    );
    assert_eq!(l.pending_interrupts(t), 0, "masked");
    l.set_eimr(isr::HOST_SIG);
    assert_eq!(l.pending_interrupts(t), isr::HOST_SIG);
    l.clear_isr(isr::HOST_SIG | isr::SEND_INT);
    assert_eq!(l.isr(t) & isr::HOST_SIG, 0);
    assert_ne!(
        l.isr(t) & isr::SEND_INT,
        0,
        "SEND_INT is a level, not cleared by writing"
    );
}

#[test]
fn rtc_and_interval_timer() {
    let (mut b, t) = running_board(0);
    let mut l = b.lanai().unwrap();
    assert_eq!(l.rtc(Time::from_micros(100)), 200);
    l.set_timer0(t, Duration::from_micros(50));
    assert_eq!(l.read_reg(t, reg::IT0), 100);
    l.advance(t + Duration::from_micros(49));
    assert_eq!(l.isr(t) & isr::TIME0_INT, 0);
    l.advance(t + Duration::from_micros(50));
    assert_ne!(l.isr(t) & isr::TIME0_INT, 0);
}

#[test]
fn lanai_driven_host_dma_through_a_control_block_ring() {
    let (mut b, t) = running_board(0);
    let host = crate::hostmem::HostMemory::new(0x1_0000_0000, 1 << 16, 4096).unwrap();
    b.attach_host_memory(host.clone());
    let mut buf = host.claim(0, 4096).unwrap();
    buf.as_mut_slice()[..5].copy_from_slice(b"hello");
    let dev = buf.to_device();
    // The host points channel 0 at a terminal block; the LANai then fills it, terminates
    // the next one, makes it valid, and pulses.
    b.pci_write_u32(t, config::DMA_BASE, 0x1000).unwrap();
    let mut l = b.lanai().unwrap();
    let terminal = DmaBlockRepr {
        next: 0x1018,
        direction: Direction::HostToLanai,
        terminal: true,
        wake: true,
        csum: 0,
        len: 5,
        lar: 0x2000,
        host_addr: dev.bus_addr(),
    };
    l.sram().write(0x1000, &terminal.to_bytes()).unwrap();
    l.sram()
        .write_u32(0x1018, crate::dma::block::FLAG_TERMINAL)
        .unwrap();
    l.sram()
        .write_u32(
            0x1000,
            DmaBlockRepr {
                terminal: false,
                ..terminal
            }
            .next_word(),
        )
        .unwrap();
    l.pulse_dma(t, 0);
    l.advance(t);
    assert_eq!(l.sram_ref().slice(0x2000, 5).unwrap(), b"hello");
    assert_ne!(l.isr(t) & isr::WAKE_INT, 0);
    assert_eq!(l.board().dma().read_pointer(0), 0x1018);
}

fn two_boards(link: LinkModel, timing: Timing) -> (Board, Board, Route, Time) {
    let mut fb = FabricBuilder::new(1);
    let hosts = star(
        &mut fb,
        2,
        SwitchSize::Eight,
        CableConfig {
            model: link,
            ..Default::default()
        },
    )
    .unwrap();
    let fabric = Arc::new(fb.build());
    let route = fabric.route(hosts[0], hosts[1]).unwrap();
    let mut boards = [0u32, 1].map(|u| {
        let mut cfg = BoardConfig::pci64b(u);
        cfg.timing = timing;
        let mut b = Board::new(cfg);
        b.attach_link(fabric.clone(), hosts[u as usize]);
        b
    });
    let t = bring_up(&mut boards[0], Time::ZERO, &[]).unwrap();
    bring_up(&mut boards[1], Time::ZERO, &[]).unwrap();
    let [a, z] = boards;
    (a, z, route, t)
}

use crate::fabric::LinkModel;

/// Lays a route so it ends at the word boundary `frame` (seed 000, Figure 3) and returns
/// the word-aligned start and the send alignment.
fn place_route(l: &mut Lanai<'_>, frame: u32, route: &[u8]) -> (u32, u32) {
    let start = frame - route.len() as u32;
    let smp = start & !3;
    l.sram().write(start, route).unwrap();
    (smp, start - smp)
}

#[test]
fn send_alignment_sends_routes_of_any_length_then_the_frame() {
    for hops in 0..=5usize {
        // A chain of `hops` 8-port switches between two boards.
        let mut fb = FabricBuilder::new(1);
        let (x, y) = (fb.add_host(), fb.add_host());
        let switches: Vec<_> = (0..hops)
            .map(|_| fb.add_switch(SwitchSize::Eight))
            .collect();
        use crate::fabric::Endpoint::{Host, Switch};
        let cable = CableConfig::default();
        if hops == 0 {
            fb.connect(Host(x), Host(y), cable).unwrap();
        } else {
            fb.connect(Host(x), Switch(switches[0], 0), cable).unwrap();
            for w in switches.windows(2) {
                fb.connect(Switch(w[0], 7), Switch(w[1], 0), cable).unwrap();
            }
            fb.connect(Switch(switches[hops - 1], 7), Host(y), cable)
                .unwrap();
        }
        let fabric = Arc::new(fb.build());
        let route = fabric.route(x, y).unwrap();
        assert_eq!(route.len(), hops);
        let mut a = Board::new(BoardConfig::pci64b(0));
        let mut z = Board::new(BoardConfig::pci64b(1));
        a.attach_link(fabric.clone(), x);
        z.attach_link(fabric.clone(), y);
        let t = bring_up(&mut a, Time::ZERO, &[]).unwrap();
        bring_up(&mut z, Time::ZERO, &[]).unwrap();

        let mut la = a.lanai().unwrap();
        let frame = 0x4000;
        la.sram().write(frame, b"\x03\x70frame!").unwrap();
        let (smp, sa) = place_route(&mut la, frame, route.as_bytes());
        la.send(t, smp, sa, frame, false).unwrap();
        la.send(t, frame, 0, frame + 8, true).unwrap();

        let mut lz = z.lanai().unwrap();
        lz.arm_recv(0x8000, 0x9000).unwrap();
        lz.advance(t);
        assert_eq!(
            lz.recv_state(),
            crate::engines::RecvState::Done {
                start: 0x8000,
                end: 0x8008,
                overrun: false
            },
            "{hops} hops"
        );
        assert_eq!(lz.sram_ref().slice(0x8000, 8).unwrap(), b"\x03\x70frame!");
        assert_ne!(lz.isr(t) & isr::RECV_INT, 0);
    }
}

#[test]
fn receive_overrun_and_rearm() {
    let (mut a, mut z, route, t) = two_boards(LinkModel::default(), Timing::default());
    let mut la = a.lanai().unwrap();
    la.sram().write(0x4000, &[7u8; 100]).unwrap();
    let (smp, sa) = place_route(&mut la, 0x4000, route.as_bytes());
    la.send(t, smp, sa, 0x4000, false).unwrap();
    la.send(t, 0x4000, 0, 0x4064, true).unwrap();
    la.send(t, smp, sa, 0x4000, false).unwrap();
    la.send(t, 0x4000, 0, 0x4010, true).unwrap();
    let mut lz = z.lanai().unwrap();
    lz.arm_recv(0x8000, 0x8020).unwrap();
    lz.advance(t);
    assert_eq!(
        lz.recv_state(),
        crate::engines::RecvState::Done {
            start: 0x8000,
            end: 0x8020,
            overrun: true
        }
    );
    assert_ne!(lz.isr(t) & isr::BUFF_INT, 0);
    lz.arm_recv(0x8000, 0x8020).unwrap();
    assert_eq!(
        lz.isr(t) & (isr::BUFF_INT | isr::RECV_INT),
        0,
        "arming clears them"
    );
    lz.advance(t);
    assert_eq!(
        lz.recv_state(),
        crate::engines::RecvState::Done {
            start: 0x8000,
            end: 0x8010,
            overrun: false
        }
    );
    assert_eq!(z.counters().engines.overruns, 1);
    assert_eq!(z.counters().engines.packets_received, 1);
}

#[test]
fn engines_refuse_bad_requests_and_count_them() {
    let (mut a, _z, _route, t) = two_boards(LinkModel::default(), Timing::default());
    let mut l = a.lanai().unwrap();
    assert_eq!(
        l.send(t, 0x4002, 0, 0x4010, true),
        Err(EngineError::SendUnaligned(0x4002))
    );
    assert_eq!(
        l.send(t, 0x4000, 4, 0x4010, true),
        Err(EngineError::BadAlignment(4))
    );
    assert!(matches!(
        l.send(t, 0x4000, 0, 0x3000, true),
        Err(EngineError::SendRange { .. })
    ));
    assert!(matches!(
        l.send(t, 0x1F_FFF0, 0, 0x20_0010, true),
        Err(EngineError::SendRange { .. })
    ));
    assert!(matches!(
        l.arm_recv(0x8000, 0x7000),
        Err(EngineError::RecvRange { .. })
    ));
    assert!(matches!(
        l.arm_recv(0x1F_FFF0, 0x20_0010),
        Err(EngineError::RecvRange { .. })
    ));
    assert!(matches!(
        l.arm_recv(0x8000, 0x8000),
        Err(EngineError::RecvRange { .. })
    ));
    assert_eq!(a.counters().engines.errors, 7);
}

use crate::engines::EngineError;

#[test]
fn timed_engines_show_a_live_receive_pointer_and_a_busy_sender() {
    let link = LinkModel {
        latency: Duration::ZERO,
        bytes_per_sec: 100_000_000,
    };
    let timing = Timing {
        host_dma_bytes_per_sec: 0,
        send_bytes_per_sec: 100_000_000,
    };
    let (mut a, mut z, route, t) = two_boards(link, timing);
    let mut la = a.lanai().unwrap();
    la.sram().write(0x4000, &[1u8; 1000]).unwrap();
    let (smp, sa) = place_route(&mut la, 0x4000, route.as_bytes());
    la.send(t, smp, sa, 0x4000, false).unwrap();
    assert!(!la.send_idle(t), "sending a route byte takes 10 ns");
    assert_eq!(
        la.send(t, 0x4000, 0, 0x43E8, true),
        Err(EngineError::SendBusy)
    );
    let t1 = t + Duration::from_nanos(10);
    la.send(t1, 0x4000, 0, 0x43E8, true).unwrap();
    assert_eq!(
        la.board().next_deadline(t1),
        Some(t1 + Duration::from_micros(10))
    );

    let mut lz = z.lanai().unwrap();
    lz.arm_recv(0x8000, 0x9000).unwrap();
    lz.advance(t);
    // The head arrived at t; the tail of 1000 bytes at 100 MB/s comes 10 us later.
    let half = t + Duration::from_nanos(5_010);
    lz.advance(half);
    let p = lz.recv_pointer(half);
    assert!(
        (0x8000 + 400..0x8000 + 600).contains(&p),
        "live pointer {p:#x}"
    );
    assert_eq!(lz.isr(half) & isr::RECV_INT, 0);
    lz.advance(t + Duration::from_micros(20));
    assert_eq!(lz.recv_pointer(t), 0x8000 + 1000);
    assert_ne!(lz.isr(t) & isr::RECV_INT, 0);
}

#[test]
fn link_state_changes_raise_link_interrupts() {
    let (mut a, _z, _route, t) = two_boards(LinkModel::default(), Timing::default());
    let fabric = a.fabric().unwrap().clone();
    fabric.set_cable_up(crate::fabric::CableId(0), false, t);
    a.advance(t);
    let l = a.lanai().unwrap();
    assert_ne!(l.isr(t) & isr::LINK1_INT, 0);
    fabric.set_cable_up(crate::fabric::CableId(0), true, t);
    a.advance(t);
    assert_ne!(a.lanai().unwrap().isr(t) & isr::LINK0_INT, 0);
}

#[test]
fn doorbell_writes_reach_the_fifo_and_wake_the_lanai() {
    let (mut b, t) = running_board(0);
    b.pci_write_u32(t, config::FIFO_BASE, 0x10_0000).unwrap();
    b.pci_write_u32(t, config::CONTROL, 0).unwrap();
    let cfg = crate::doorbell::DoorbellConfig::from_bits(0);
    let mut q = crate::doorbell::DoorbellQueue::init(&mut b.sram, 0x10_0000, cfg, None).unwrap();
    b.pci_write_u32(t, 0x0090_0040, 0xCAFE).unwrap();
    let mut l = b.lanai().unwrap();
    assert_ne!(l.isr(t) & isr::WAKE_INT, 0);
    let e = l.doorbell_pop(&mut q).unwrap();
    assert_eq!((e.addr, e.data), (0x0090_0040, 0xCAFE));
}
