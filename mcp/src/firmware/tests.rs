//! The control program and host API over two boards joined by a switch, stepped inline.

use crate::hcb::counter;
use crate::{Api, ChanRequest, InitOptions, McpConfig, Mode, RecvMode, RouteSlot, Unit};
use myri_device::board::{Board, BoardConfig, Timing};
use myri_device::fabric::topology::star;
use myri_device::fabric::{CableConfig, FabricBuilder, SwitchSize};
use myri_device::time::Time;
use std::sync::Arc;

pub(crate) struct Pair {
    pub a: Api,
    pub b: Api,
    pub now: Time,
}

pub(crate) fn pair(config: McpConfig) -> Pair {
    pair_with(config, CableConfig::default(), 1, Timing::default())
}

/// Two boards of `timing` on a switch, cables `cable`, faults seeded by `seed`: route 1
/// from each to the other.
pub(crate) fn pair_with(config: McpConfig, cable: CableConfig, seed: u64, timing: Timing) -> Pair {
    let mut fb = FabricBuilder::new(seed);
    let ports = star(&mut fb, 2, SwitchSize::Eight, cable).unwrap();
    let fabric = Arc::new(fb.build());
    let units: Vec<Arc<Unit>> = ports
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let mut board = Board::new(BoardConfig {
                timing,
                ..BoardConfig::pci64b(i as u32)
            });
            board.attach_link(fabric.clone(), p);
            Unit::new(board, 0x1_0000_0000 * (i as u64 + 1), Mode::Inline)
        })
        .collect();
    let opts = InitOptions {
        mcp: config,
        ..Default::default()
    };
    let mut a = Api::init(&units[0], opts).unwrap();
    let mut b = Api::init(&units[1], opts).unwrap();
    a.add_route(RouteSlot::Id(1), &fabric.route(ports[0], ports[1]).unwrap())
        .unwrap();
    b.add_route(RouteSlot::Id(1), &fabric.route(ports[1], ports[0]).unwrap())
        .unwrap();
    Pair {
        a,
        b,
        now: Time::from_micros(100_000),
    }
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn packets_of_every_path_cross_intact() {
    for mode in [RecvMode::Interrupt, RecvMode::Polled] {
        let mut p = pair(McpConfig {
            recv_mode: mode,
            ..Default::default()
        });
        let chan = p.b.get_chan(ChanRequest::Specific(3)).unwrap();
        p.b.init_recv_chan(&chan).unwrap();
        for (i, len) in [0usize, 8, 256, 257, 1000, 2048, 4096, 8192]
            .into_iter()
            .enumerate()
        {
            let data = payload(len, i as u8);
            let mut buf = p.a.get_send_buffer().unwrap();
            buf.as_mut_slice()[..len].copy_from_slice(&data);
            let ticket = p.a.send(3, crate::RouteId(1), buf, len).unwrap();
            let mut got = None;
            for _ in 0..100 {
                p.a.progress(p.now);
                p.b.progress(p.now);
                if let Some(r) = p.b.recv(&chan).unwrap() {
                    got = Some(r);
                    break;
                }
            }
            let got = got.unwrap_or_else(|| panic!("{mode:?}: {len}-byte packet never arrived"));
            assert_eq!(got.as_slice(), &data[..], "{mode:?} {len}");
            assert!(!p.a.buffer_busy(&ticket));
        }
        let c = p.a.mcp_counters().unwrap();
        assert_eq!(c.get(counter::SENT), 8);
        assert_eq!(c.get(counter::PIO_SENDS), 3, "0, 8 and 256 bytes by PIO");
        assert_eq!(
            c.get(counter::OVERLAPPED_SENDS),
            3,
            "2048, 4096, 8192 overlapped"
        );
        assert_eq!(p.b.mcp_counters().unwrap().get(counter::DELIVERED), 8);
    }
}
