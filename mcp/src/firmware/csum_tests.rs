//! The board's checksums from host memory to host memory (issue 17): every send path
//! carries a sender checksum the receiver's landed checksum matches, and corruption in the
//! sending board's SRAM, on the fabric (past the link's CRC-8) and in the receiving board's
//! SRAM is caught by them.

use crate::hcb::{Layout, counter};
use crate::{Api, ChanRequest, Channel, McpConfig, RecvBuf, RecvMode, RouteId};
use myri_device::board::Timing;
use myri_device::dma::checksum::ones_complement_sum;
use myri_device::fabric::{CableConfig, FaultConfig, LinkModel};
use std::time::Duration;

/// Two boards on a switch (the firmware tests' pair).
type Net = super::tests::Pair;

fn net(config: McpConfig, cable: CableConfig, seed: u64) -> Net {
    net_timed(config, cable, seed, Timing::default())
}

fn net_timed(config: McpConfig, cable: CableConfig, seed: u64, timing: Timing) -> Net {
    super::tests::pair_with(config, cable, seed, timing)
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

impl Net {
    /// Runs both boards for `steps` steps of `tick`, collecting what arrives on `chan`.
    fn run(&mut self, chan: &Channel, steps: u32, tick: Duration, got: &mut Vec<RecvBuf>) {
        for _ in 0..steps {
            self.a.progress(self.now);
            self.b.progress(self.now);
            while let Some(r) = self.b.recv(chan).unwrap() {
                got.push(r);
            }
            self.now += tick;
        }
    }

    fn send(&mut self, data: &[u8], inline: &[u8]) {
        let mut buf = self.a.get_send_buffer().unwrap();
        buf.as_mut_slice()[..data.len()].copy_from_slice(data);
        self.a
            .send_inline_and_release(3, RouteId(1), inline, buf, data.len())
            .unwrap();
    }
}

/// Flips bit 0 of the first copy of `needle` in the SRAM range `[from, to)` of `api`'s
/// board; panics if it is not there.
fn flip_in_sram(api: &Api, needle: &[u8], from: u32, to: u32) -> u32 {
    api.unit().with_firmware(|f| {
        let hay = f.board.sram().slice(from, (to - from) as usize).unwrap();
        let at = hay
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("the packet is in SRAM") as u32
            + from;
        let byte = f.board.sram().slice(at, 1).unwrap()[0];
        f.board.pci_write_bytes(at, &[byte ^ 1]).unwrap();
        at
    })
}

fn layout() -> Layout {
    Layout::new(2 << 20).unwrap()
}

#[test]
fn every_path_carries_a_sender_checksum_the_landed_one_matches() {
    let slow = CableConfig::symmetric(LinkModel::SAN_1280, FaultConfig::default());
    for (mode, cable) in [
        (RecvMode::Interrupt, CableConfig::default()),
        (RecvMode::Polled, CableConfig::default()),
        // A link slower than the DMA: polled mode follows packets as they arrive
        // (overlapped receive, the landed sum built from several blocks).
        (RecvMode::Polled, slow),
    ] {
        let mut n = net(
            McpConfig {
                recv_mode: mode,
                ..Default::default()
            },
            cable,
            1,
        );
        let chan = n.b.get_chan(ChanRequest::Specific(3)).unwrap();
        n.b.init_recv_chan(&chan).unwrap();
        // (payload, inline header): PIO, DMA, odd inline lengths before a DMA, overlapped.
        let cases: Vec<(usize, usize)> = vec![
            (0, 0),
            (1, 0),
            (255, 0),
            (257, 0),
            (1001, 0),
            (1000, 3),
            (1000, 76),
            (0, 5),
            (2048, 0),
            (4097, 7),
            (8192, 0),
            (12 * 1024 - 80, 80),
        ];
        let mut got = Vec::new();
        for (i, &(len, inline)) in cases.iter().enumerate() {
            let data = payload(len, i as u8);
            let head = payload(inline, 100 + i as u8);
            n.send(&data, &head);
            n.run(&chan, 400, Duration::from_micros(1), &mut got);
            assert_eq!(got.len(), i + 1, "{mode:?} case {i} arrived");
            let r = &got[i];
            let whole = [head, data].concat();
            assert_eq!(r.as_slice(), &whole[..], "{mode:?} case {i}");
            let (sender, landed) = r.checksums();
            assert_eq!(sender, ones_complement_sum(&whole), "{mode:?} case {i}");
            assert_eq!(landed, sender, "{mode:?} case {i}");
            assert!(r.dma_checksum_ok());
        }
        let c = n.b.mcp_counters().unwrap();
        if cable == slow {
            assert!(
                c.get(counter::OVERLAPPED_RECVS) > 0,
                "overlapped receive ran"
            );
        }
        let c = n.a.mcp_counters().unwrap();
        assert!(c.get(counter::PIO_SENDS) >= 3 && c.get(counter::OVERLAPPED_SENDS) >= 2);
    }
}

/// `Api::send_pio` writes a packet into the send slot from the caller's bytes: it needs no
/// send buffer (every one is held here), arrives whole with a sender checksum the landed
/// one matches, and one too long for PIO is refused and counted with nothing sent.
#[test]
fn a_pio_send_from_host_bytes_needs_no_send_buffer() {
    let mut n = net(McpConfig::default(), CableConfig::default(), 3);
    let chan = n.b.get_chan(ChanRequest::Specific(3)).unwrap();
    n.b.init_recv_chan(&chan).unwrap();
    let held: Vec<_> = std::iter::from_fn(|| n.a.get_send_buffer().ok()).collect();
    assert!(
        !held.is_empty() && n.a.get_send_buffer().is_err(),
        "every buffer held"
    );
    let max = n.a.pio_threshold();
    assert!(max >= 96, "room for a header and a short message: {max}");
    let mut got = Vec::new();
    let cases = [(0, 1), (8, 88), (max - 40, 40), (0, max)];
    for (i, &(len, inline)) in cases.iter().enumerate() {
        let data = payload(len, i as u8);
        let head = payload(inline, 50 + i as u8);
        // The payload in two pieces: the board gathers them.
        let (first, second) = data.split_at(len / 2);
        n.a.send_pio(3, RouteId(1), &head, &[first, second])
            .unwrap();
        n.run(&chan, 100, Duration::from_micros(1), &mut got);
        assert_eq!(got.len(), i + 1, "case {i} arrived");
        let whole = [head, data].concat();
        assert_eq!(got[i].as_slice(), &whole[..], "case {i}");
        let (sender, landed) = got[i].checksums();
        assert_eq!(sender, ones_complement_sum(&whole), "case {i}");
        assert_eq!(landed, sender, "case {i}");
    }
    let sent_before = n.a.mcp_counters().unwrap().get(counter::PIO_SENDS);
    let errors_before = n.a.unit().counters().errors;
    let long = payload(max - 9, 7);
    assert_eq!(
        n.a.send_pio(3, RouteId(1), &[0; 10], &[&long]),
        Err(crate::ApiError::TooLong { len: max + 1, max })
    );
    n.run(&chan, 100, Duration::from_micros(1), &mut got);
    assert_eq!(got.len(), cases.len(), "nothing more arrived");
    let c = n.a.mcp_counters().unwrap();
    assert_eq!(c.get(counter::PIO_SENDS), sent_before, "nothing more sent");
    assert!(c.get(counter::PIO_SENDS) >= cases.len() as u32);
    assert_eq!(
        n.a.unit().counters().errors,
        errors_before + 1,
        "the refusal counted"
    );
    drop(held);
}

#[test]
fn a_turned_around_buffer_carries_its_checksum_back() {
    let mut n = net(McpConfig::default(), CableConfig::default(), 1);
    let chan_b = n.b.get_chan(ChanRequest::Specific(3)).unwrap();
    n.b.init_recv_chan(&chan_b).unwrap();
    let chan_a = n.a.get_chan(ChanRequest::Specific(3)).unwrap();
    n.a.init_recv_chan(&chan_a).unwrap();
    let data = payload(3001, 9);
    n.send(&data, &[]);
    let mut got = Vec::new();
    n.run(&chan_b, 50, Duration::from_micros(1), &mut got);
    let r = got.pop().expect("arrived");
    let len = r.len();
    n.b.send_recv_buffer_and_release(3, RouteId(1), r, len)
        .unwrap();
    let mut back = None;
    for _ in 0..50 {
        n.a.progress(n.now);
        n.b.progress(n.now);
        if let Some(r) = n.a.recv(&chan_a).unwrap() {
            back = Some(r);
            break;
        }
        n.now += Duration::from_micros(1);
    }
    let back = back.expect("echoed");
    assert_eq!(back.as_slice(), &data[..]);
    assert!(back.dma_checksum_ok());
}

/// (a) A bit flips in the sending board's SRAM after the host DMA brought the packet in
/// and before the send engine reads it: the sender checksum, taken from the DMA, no
/// longer matches what lands.
#[test]
fn corruption_in_the_senders_sram_is_caught() {
    // A slow send engine is busy with the first packet while the second waits, DMA'd, in
    // the tx pool.
    let slow = Timing {
        host_dma_bytes_per_sec: 0,
        send_bytes_per_sec: 10_000_000,
    };
    let mut n = net_timed(McpConfig::default(), CableConfig::default(), 1, slow);
    let chan = n.b.get_chan(ChanRequest::Specific(3)).unwrap();
    n.b.init_recv_chan(&chan).unwrap();
    let (first, second) = (payload(1000, 1), payload(1000, 2));
    n.send(&first, &[]);
    n.send(&second, &[]);
    n.a.progress(n.now);
    let l = layout();
    flip_in_sram(
        &n.a,
        &second[500..532],
        l.tx_pool,
        l.tx_pool + crate::hcb::TX_POOL * crate::hcb::POOL_BUF,
    );
    let mut got = Vec::new();
    n.run(&chan, 2000, Duration::from_micros(1), &mut got);
    assert_eq!(got.len(), 2);
    assert!(got[0].dma_checksum_ok() && got[0].as_slice() == &first[..]);
    assert_ne!(got[1].as_slice(), &second[..], "the corruption went out");
    assert!(!got[1].dma_checksum_ok(), "and is caught");
    assert_eq!(got[1].checksums().0, ones_complement_sum(&second));
}

/// (b) A switch flips a bit and recomputes the CRC-8 (the fault injector's resealed
/// corruption): the receiving port accepts every packet, and the checksums catch every
/// one the MCP does not drop for a bad header.
#[test]
fn corruption_the_links_crc_misses_is_caught() {
    let cable = CableConfig {
        faults_ba: FaultConfig {
            corrupt_resealed: 1.0,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut n = net(McpConfig::default(), cable, 7);
    let chan = n.b.get_chan(ChanRequest::Specific(3)).unwrap();
    n.b.init_recv_chan(&chan).unwrap();
    let count = 40;
    let mut got = Vec::new();
    for i in 0..count {
        let data = payload(16 + 397 * i % 9000, i as u8);
        n.send(&data, &[]);
        n.run(&chan, 30, Duration::from_micros(1), &mut got);
    }
    let c = n.b.mcp_counters().unwrap();
    let header_drops = c.get(counter::DROP_TYPE)
        + c.get(counter::DROP_SUBTYPE)
        + c.get(counter::DROP_CHANNEL)
        + c.get(counter::DROP_LENGTH);
    assert_eq!(
        c.get(counter::RECEIVED),
        count as u32,
        "the CRC-8 saw nothing"
    );
    assert_eq!(got.len() as u32 + header_drops, count as u32);
    assert!(got.len() > 30, "most flips hit the payload");
    for r in &got {
        assert!(!r.dma_checksum_ok(), "every corrupted packet is caught");
    }
}

/// (c) A bit flips in the receiving board's SRAM while the packet waits in the rx pool
/// for a host buffer: the DMA to the host sums what it moves, and that no longer matches
/// the sender's checksum.
#[test]
fn corruption_in_the_receivers_sram_is_caught() {
    let mut n = net(McpConfig::default(), CableConfig::default(), 1);
    let chan = n.b.get_chan(ChanRequest::Specific(3)).unwrap();
    n.b.init_recv_chan(&chan).unwrap();
    // Hold every posted buffer, so the next packet waits in the rx pool.
    let mut held = Vec::new();
    for i in 0..crate::hcb::RECV_SLOTS {
        n.send(&payload(300, i as u8), &[]);
        n.run(&chan, 3, Duration::from_micros(1), &mut held);
    }
    assert_eq!(held.len(), crate::hcb::RECV_SLOTS as usize);
    let data = payload(3000, 200);
    n.send(&data, &[]);
    let mut got = Vec::new();
    n.run(&chan, 5, Duration::from_micros(1), &mut got);
    assert!(got.is_empty(), "no buffer: the packet waits on the board");
    let l = layout();
    flip_in_sram(
        &n.b,
        &data[1000..1032],
        l.rx_pool,
        l.rx_pool + crate::hcb::RX_POOL * crate::hcb::POOL_BUF,
    );
    held.clear();
    n.run(&chan, 5, Duration::from_micros(1), &mut got);
    assert_eq!(got.len(), 1);
    assert_ne!(got[0].as_slice(), &data[..]);
    assert!(!got[0].dma_checksum_ok());
}
