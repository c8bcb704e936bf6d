//! The GM extensions end to end on two boards in virtual time (seed 001).

use super::*;
use crate::gm::testbed::{Testbed, TestbedConfig};
use crate::hcb::counter;
use crate::{ChanRequest, InitOptions};

fn testbed() -> Testbed {
    Testbed::new(TestbedConfig::default()).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed) | 1)
        .collect()
}

#[test]
fn segments_belong_to_their_user_and_go_with_it() {
    let mut tb = testbed();
    let usage = tb.a.sram_usage().unwrap();
    assert!(
        usage.pages > 2000,
        "about 1.4 MB of a 2 MiB board is workspace"
    );
    assert_eq!((usage.free_runs, usage.segments), (1, 0));
    let seg = tb.a.sram_alloc(3000).unwrap();
    assert_eq!(seg.len(), 3072, "six pages");
    assert!(seg.addr() >= tb.a.layout.workspace);
    let mut other = Api::init(tb.a.unit(), InitOptions::default()).unwrap();
    assert_ne!(other.user(), tb.a.user());
    assert_eq!(
        other.sram_free(&seg),
        Err(GmError::Alloc(AllocError::NotOwner {
            page: (seg.addr() - tb.a.layout.workspace.next_multiple_of(512)) / 512,
            owner: tb.a.user(),
            caller: other.user(),
        }))
    );
    assert_eq!(other.sram_write(&seg, 0, b"x"), Err(GmError::NotYours));
    assert!(matches!(
        tb.a.sram_write(&seg, 3070, b"abc"),
        Err(GmError::OutsideSegment { .. })
    ));
    tb.a.sram_write(&seg, 10, b"hello").unwrap();
    let mut back = [0u8; 5];
    tb.a.sram_read(&seg, 10, &mut back).unwrap();
    assert_eq!(&back, b"hello");
    tb.a.sram_free(&seg).unwrap();
    assert!(matches!(
        tb.a.sram_free(&seg),
        Err(GmError::Alloc(AllocError::UnknownSegment { .. }))
    ));
    // Exhaustion is an error, and the other user's segments go when it detaches.
    let big = other.sram_alloc(usage.pages * 512).unwrap();
    assert!(matches!(
        tb.a.sram_alloc(512),
        Err(GmError::Alloc(AllocError::Exhausted {
            want: 1,
            largest: 0
        }))
    ));
    drop(other);
    assert_eq!(tb.a.sram_usage().unwrap().free_runs, 1);
    assert_eq!(tb.a.sram_usage().unwrap().segments, 0);
    drop(big);
    let again = tb.a.sram_alloc(512).unwrap();
    drop(again);
    assert_eq!(tb.a.sram_usage().unwrap().free_pages, usage.pages);
}

/// A window in B's extra memory, its bytes set to `fill` first.
fn window(tb: &mut Testbed, at: usize, len: usize, g: WindowGeometry, fill: u8) -> Window {
    let mut buf = tb.b.unit().claim_extra(at, len).unwrap();
    buf.as_mut_slice().fill(fill);
    tb.b.register_window(buf, g).unwrap()
}

fn settle(tb: &mut Testbed) {
    assert!(!tb.run_until(|_| false, 100_000), "the boards go idle");
}

#[test]
fn directed_sends_land_line_by_line_in_two_windows_of_different_pitch() {
    let mut tb = testbed();
    let g1 = WindowGeometry {
        pitch: 1024,
        bytes_per_line: 600,
        lines: 12,
    };
    let g2 = WindowGeometry {
        pitch: 300,
        bytes_per_line: 256,
        lines: 40,
    };
    let w1 = window(&mut tb, 0, 16 << 10, g1, 0xEE);
    let w2 = window(&mut tb, 16 << 10, 16 << 10, g2, 0xDD);
    let images = [pattern(600 * 12, 1), pattern(256 * 40, 2)];
    for (w, image) in [(&w1, &images[0]), (&w2, &images[1])] {
        let r = w.remote();
        let step = r.max_packet() as usize;
        // Odd-sized pieces so packets start and end mid-line.
        for (k, chunk) in image.chunks(step.min(1000)).enumerate() {
            let mut buf = tb.a.get_send_buffer().unwrap();
            buf.as_mut_slice()[..chunk.len()].copy_from_slice(chunk);
            let off = (k * step.min(1000)) as u32;
            drop(
                tb.a.send_directed(tb.route, r, off, buf, chunk.len())
                    .unwrap(),
            );
            settle(&mut tb);
        }
    }
    for (w, image, g, fill) in [(&w1, &images[0], g1, 0xEE), (&w2, &images[1], g2, 0xDD)] {
        tb.b.with_window(w, |bytes| {
            for line in 0..g.lines as usize {
                let at = line * g.pitch as usize;
                let bpl = g.bytes_per_line as usize;
                assert_eq!(
                    &bytes[at..at + bpl],
                    &image[line * bpl..(line + 1) * bpl],
                    "line {line}"
                );
                let pad_end = (at + g.pitch as usize).min(bytes.len());
                assert!(
                    bytes[at + bpl..pad_end].iter().all(|&b| b == fill),
                    "padding of line {line}"
                );
            }
        })
        .unwrap();
    }
    let c = tb.b.mcp_counters().unwrap();
    assert!(c.get(counter::DIRECTED_PLACED) >= 2);
    assert_eq!(c.get(counter::DELIVERED), 0, "no receive event");
}

#[test]
fn forged_keys_overruns_and_unknown_windows_are_dropped_and_counted() {
    let mut tb = testbed();
    let g = WindowGeometry {
        pitch: 128,
        bytes_per_line: 100,
        lines: 4,
    };
    let w = window(&mut tb, 0, 4096, g, 0x55);
    let good = w.remote();
    let send = |tb: &mut Testbed, r: RemoteWindow, off: u32, len: usize| {
        let mut buf = tb.a.get_send_buffer().unwrap();
        buf.as_mut_slice()[..len].fill(0xAB);
        let t = tb.a.send_directed(tb.route, r, off, buf, len);
        settle(tb);
        t.map(drop)
    };
    send(
        &mut tb,
        RemoteWindow {
            key: good.key ^ 1,
            ..good
        },
        0,
        50,
    )
    .unwrap();
    // The sender believes in more lines than there are: only the receiver can tell.
    send(&mut tb, RemoteWindow { lines: 10, ..good }, 380, 40).unwrap();
    send(&mut tb, RemoteWindow { id: 5, ..good }, 0, 50).unwrap();
    send(&mut tb, RemoteWindow { id: 200, ..good }, 0, 50).unwrap();
    // The sender's own check: past the image it knows.
    let e = send(&mut tb, good, 390, 20).unwrap_err();
    assert!(matches!(e.error, GmError::WindowOverrun { .. }), "{e}");
    let c = tb.b.mcp_counters().unwrap();
    assert_eq!(c.get(counter::DROP_WINDOW_KEY), 1);
    assert_eq!(c.get(counter::DROP_WINDOW_BOUNDS), 1);
    assert_eq!(c.get(counter::DROP_WINDOW_UNKNOWN), 2);
    assert_eq!(c.get(counter::DIRECTED_PLACED), 0);
    tb.b.with_window(&w, |bytes| {
        assert!(bytes.iter().all(|&b| b == 0x55), "nothing written")
    })
    .unwrap();
    // A window unregistered is unknown from then on, and its buffer comes back whole.
    send(&mut tb, good, 0, 100).unwrap();
    let buf = tb.b.unregister_window(w).unwrap();
    assert_eq!(&buf.as_slice()[..100], &[0xAB; 100][..]);
    send(&mut tb, good, 0, 100).unwrap();
    assert_eq!(
        tb.b.mcp_counters()
            .unwrap()
            .get(counter::DROP_WINDOW_UNKNOWN),
        3
    );
}

#[test]
fn windows_run_out_and_bad_geometry_is_refused() {
    let mut tb = testbed();
    let g = WindowGeometry {
        pitch: 64,
        bytes_per_line: 64,
        lines: 4,
    };
    let ws: Vec<Window> = (0..8)
        .map(|i| window(&mut tb, i * 4096, 4096, g, 0))
        .collect();
    let buf = tb.b.unit().claim_extra(8 * 4096, 4096).unwrap();
    let (e, buf) = tb.b.register_window(buf, g).unwrap_err();
    assert_eq!(e, GmError::NoFreeWindow);
    drop(ws);
    let (e, buf) =
        tb.b.register_window(buf, WindowGeometry { pitch: 10, ..g })
            .unwrap_err();
    assert!(matches!(e, GmError::BadGeometry(_)));
    let (e, _) =
        tb.b.register_window(buf, WindowGeometry { lines: 100, ..g })
            .unwrap_err();
    assert!(matches!(
        e,
        GmError::WindowTooBig {
            span: 6400,
            len: 4096
        }
    ));
}

#[test]
fn opiom_sends_from_the_workspace_to_a_channel_and_into_a_window() {
    let mut tb = testbed();
    let chan = tb.b.get_chan(ChanRequest::Specific(2)).unwrap();
    tb.b.init_recv_chan(&chan).unwrap();
    let data = pattern(30_000, 7);
    let seg = tb.a.sram_alloc(32 << 10).unwrap();
    tb.a.sram_write(&seg, 0, &data).unwrap();
    let mut req =
        tb.a.opiom_send(&seg, 0..30_000, OpiomTarget::Channel(2), tb.route)
            .unwrap();
    let mut got = Vec::new();
    let done = tb.run_until(
        |tb| {
            while let Ok(Some(r)) = tb.b.recv(&chan) {
                // No host DMA moved these bytes on the sender: its LANai summed them as
                // it copied them from the workspace.
                assert!(r.dma_checksum_ok(), "sender and landed checksums agree");
                got.extend_from_slice(r.as_slice());
            }
            tb.a.opiom_status(&mut req, tb.now).unwrap() == OpiomStatus::Done && got.len() == 30_000
        },
        100_000,
    );
    assert!(done, "got {} bytes", got.len());
    assert_eq!(got, data);
    let c = tb.a.mcp_counters().unwrap();
    assert_eq!(c.get(counter::SRAM_SENDS), 3, "12 KiB packets: three");
    assert_eq!(c.get(counter::SEND_ERRORS), 0);

    // Directed from the workspace.
    let g = WindowGeometry {
        pitch: 2048,
        bytes_per_line: 1500,
        lines: 20,
    };
    let w = window(&mut tb, 0, 64 << 10, g, 0);
    let mut req =
        tb.a.opiom_send(
            &seg,
            0..30_000,
            OpiomTarget::Window(w.remote(), 0),
            tb.route,
        )
        .unwrap();
    assert!(tb.run_until(
        |tb| tb.a.opiom_status(&mut req, tb.now).unwrap() == OpiomStatus::Done,
        100_000
    ));
    settle(&mut tb);
    tb.b.with_window(&w, |bytes| {
        for line in 0..20 {
            assert_eq!(
                &bytes[line * 2048..line * 2048 + 1500],
                &data[line * 1500..(line + 1) * 1500]
            );
        }
    })
    .unwrap();

    // Refusals: outside the segment, someone else's segment, a segment freed under a
    // request.
    assert!(matches!(
        tb.a.opiom_send(&seg, 0..40_000, OpiomTarget::Channel(2), tb.route),
        Err(GmError::OutsideSegment { .. })
    ));
    let mut other = Api::init(tb.a.unit(), InitOptions::default()).unwrap();
    assert_eq!(
        other
            .opiom_send(&seg, 0..10, OpiomTarget::Channel(2), tb.route)
            .unwrap_err(),
        GmError::NotYours
    );
    let mut req =
        tb.a.opiom_send(&seg, 0..10, OpiomTarget::Channel(2), tb.route)
            .unwrap();
    tb.a.sram_free(&seg).unwrap();
    assert_eq!(
        tb.a.opiom_status(&mut req, tb.now),
        Err(GmError::SegmentGone)
    );
}

#[test]
fn opiom_read_sent_waits_for_the_disk_then_completes_asynchronously() {
    let mut tb = testbed();
    let chan = tb.b.get_chan(ChanRequest::Specific(1)).unwrap();
    tb.b.init_recv_chan(&chan).unwrap();
    let disk_bytes = pattern(64 << 10, 3);
    let mut disk = SimDisk::new(disk_bytes.clone(), 40_000_000, Duration::from_millis(5));
    let seg = tb.a.sram_alloc(8192).unwrap();
    let start = tb.now;
    let mut req =
        tb.a.opiom_read_sent(
            &mut disk,
            4096,
            &seg,
            0..8192,
            OpiomTarget::Channel(1),
            tb.route,
            start,
        )
        .unwrap();
    assert_eq!(
        tb.a.opiom_status(&mut req, start).unwrap(),
        OpiomStatus::Reading
    );
    // Nothing goes before the blocks are in: 5 ms latency plus 8192 B at 40 MB/s.
    let ready = start + Duration::from_millis(5) + transfer_time(8192, 40_000_000);
    assert_eq!(req.ready_at(), ready);
    tb.advance_to(Time::from_nanos(ready.as_nanos() - 1_000));
    assert_eq!(
        tb.a.opiom_status(&mut req, tb.now).unwrap(),
        OpiomStatus::Reading
    );
    assert_eq!(tb.a.mcp_counters().unwrap().get(counter::SENT), 0);
    tb.advance_to(ready);
    let mut got = None;
    assert!(tb.run_until(
        |tb| {
            let s = tb.a.opiom_status(&mut req, tb.now).unwrap();
            if got.is_none() {
                got = tb.b.recv(&chan).unwrap().map(|r| r.as_slice().to_vec());
            }
            s == OpiomStatus::Done && got.is_some()
        },
        100_000
    ));
    assert_eq!(got.unwrap(), &disk_bytes[4096..4096 + 8192]);
    assert!(tb.now >= ready);
}

#[test]
fn a_hostile_host_cannot_make_the_mcp_send_its_own_memory_or_unknown_subtypes() {
    let mut tb = testbed();
    let chan = tb.b.get_chan(ChanRequest::Specific(0)).unwrap();
    tb.b.init_recv_chan(&chan).unwrap();
    let hcb = tb.a.layout.base;
    let end = tb.a.layout.workspace_end;
    // Send-from-SRAM slots naming the HCB, straddling the end of the workspace, or past
    // 32 bits: refused, nothing sent.
    for (addr, len) in [(hcb, 64usize), (end - 16, 64), (u32::MAX - 8, 64)] {
        tb.a.enqueue(
            SUBTYPE_DATA,
            0,
            tb.route,
            &[],
            Payload::Sram(addr),
            len,
            Origin::Lent,
            true,
        )
        .unwrap();
    }
    // Subtypes the send channel does not carry (Trapeze goes by its ring; 9 is nothing).
    let workspace = tb.a.layout.workspace;
    for subtype in [crate::frame::SUBTYPE_TRAPEZE, 9] {
        tb.a.enqueue(
            subtype,
            0,
            tb.route,
            &[],
            Payload::Sram(workspace),
            16,
            Origin::Lent,
            true,
        )
        .unwrap();
    }
    settle(&mut tb);
    let c = tb.a.mcp_counters().unwrap();
    assert_eq!(c.get(counter::SEND_ERRORS), 5);
    assert_eq!((c.get(counter::SENT), c.get(counter::SRAM_SENDS)), (0, 0));
    assert_eq!(tb.b.recv(&chan).unwrap().map(|r| r.len()), None);
}
