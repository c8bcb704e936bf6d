//! The remote-video demo of seed 001 (§4.2, §4.3): frames streamed by directed sends into
//! a window of a remote frame buffer, every line checked.
//!
//! # What it does
//!
//! Host B registers a window of `width * depth` bytes per line and `height` lines inside
//! a wider screen (the pitch is the screen's line), its bytes set to a sentinel. Host A
//! sends `frames` frames into it, each cut into packets that the receiving MCP places line
//! by line, from host memory by host DMA ([`FrameSource::HostDma`]) or from the SRAM
//! workspace by LANai copy ([`FrameSource::Workspace`], the seed's OPIOM path; the host
//! writes the blocks there by PIO). After each frame B reads its window and checks every
//! line against the frame's pattern and every pad byte between lines against the
//! sentinel. Time is virtual: fps and MB/s are those of the modelled boards; the caller's
//! clock gives the host time the simulation took.

use super::testbed::{SEED001_LANAI_MHZ, SEED001_TIMING, Testbed, TestbedConfig};
use crate::firmware::lanai_copy_rate;
use crate::gm::wire::WindowGeometry;
use crate::hcb::counter;
use crate::host::gm::{GmError, OpiomStatus, OpiomTarget, RemoteWindow};
use crate::{ApiError, McpConfig};
use myri_device::board::Timing;
use myri_device::fabric::link::LinkModel;
use std::time::Duration;
use thiserror::Error;

/// Seed 001's figure (§4.2.1): about 100 MB/s, 30 frames a second of 1024x768 at 32 bits,
/// on 32-bit/33 MHz PCI with a 133 MHz LANai.
pub const SEED_MB_PER_S: f64 = 100.0;
/// Seed 001's frame rate at 1024x768x4 (§4.2.1, §4.2.2).
pub const SEED_FPS_1024X768X4: f64 = 30.0;

/// Where the sender's frames come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameSource {
    /// Host memory, by host DMA on the sending board.
    HostDma,
    /// The SRAM workspace, by LANai copy (seed 001, `gm_opiom_send` of a directed send).
    Workspace,
}

/// The board model the demo runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameBoard {
    /// Seed 001's machine: 133 MHz LANai 9, 32-bit/33 MHz PCI, Myrinet-2000 link.
    Seed001,
    /// Every engine unthrottled (for checking alone; fps is then meaningless).
    Unthrottled,
}

/// A frame demo to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameDemoConfig {
    /// Pixels per line.
    pub width: u32,
    /// Lines per frame.
    pub height: u32,
    /// Bytes per pixel.
    pub depth: u32,
    /// Frames to send.
    pub frames: u32,
    /// Pixels per line of the receiver's screen (the window's pitch is this times the
    /// depth); at least `width`.
    pub screen_width: u32,
    /// Where the frames come from.
    pub source: FrameSource,
    /// The board model.
    pub board: FrameBoard,
}

impl FrameDemoConfig {
    /// `frames` frames of `width` x `height` x `depth` in a screen a quarter wider, from
    /// host memory, on seed 001's board.
    pub fn new(width: u32, height: u32, depth: u32, frames: u32) -> FrameDemoConfig {
        FrameDemoConfig {
            width,
            height,
            depth,
            frames,
            screen_width: width.saturating_add(width / 4),
            source: FrameSource::HostDma,
            board: FrameBoard::Seed001,
        }
    }
}

/// What a frame demo measured.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameDemoReport {
    /// Frames sent and checked.
    pub frames: u32,
    /// Lines checked (every line of every frame).
    pub lines_checked: u64,
    /// Lines that differed from the frame sent, or whose padding was touched.
    pub lines_bad: u64,
    /// Bytes of frame data sent.
    pub bytes: u64,
    /// Directed packets placed by the receiving MCP.
    pub packets: u64,
    /// Directed packets the receiving MCP dropped (bad key, window or bounds).
    pub dropped: u64,
    /// Virtual time from the first packet to the last frame's last line.
    pub virtual_time: Duration,
    /// Frames per second of virtual time.
    pub fps: f64,
    /// MB/s (10^6 bytes) of frame data in virtual time.
    pub mb_per_s: f64,
    /// Host time the simulation took (from the caller's clock).
    pub host_time: Duration,
    /// Frames per second of host time.
    pub host_fps: f64,
    /// MB/s of host time.
    pub host_mb_per_s: f64,
}

/// Why a frame demo could not run.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrameDemoError {
    /// A geometry with nothing in it, a screen narrower than the frame, or sizes that
    /// overflow.
    #[error("bad frame geometry: {0}")]
    Geometry(&'static str),
    /// The boards could not be set up or refused a call.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A GM call was refused.
    #[error(transparent)]
    Gm(#[from] GmError),
    /// The boards stopped making progress before a frame was placed.
    #[error("frame {frame} stalled: {placed} of {expected} packets placed")]
    Stalled {
        /// The frame.
        frame: u32,
        /// Packets placed so far (all frames).
        placed: u64,
        /// Packets expected by the end of this frame.
        expected: u64,
    },
}

/// The byte at `x` of line `y` of frame `f`: every frame and line differ, so a line left
/// from an earlier frame or put in the wrong place is caught.
fn pixel_byte(f: u32, y: u32, x: u32) -> u8 {
    (x.wrapping_mul(7) ^ y.wrapping_mul(131) ^ f.wrapping_mul(29)) as u8
}

fn frame_bytes(f: u32, at: u64, out: &mut [u8], bpl: u32) {
    for (i, b) in out.iter_mut().enumerate() {
        let o = at + i as u64;
        *b = pixel_byte(f, (o / u64::from(bpl)) as u32, (o % u64::from(bpl)) as u32);
    }
}

/// The sentinel in the window before any frame and between its lines.
const SENTINEL: u8 = 0xA5;
/// The workspace blocks the sender writes frames through (two, used in turn).
const WORKSPACE_BLOCK: u32 = 256 << 10;

/// Runs the demo (seed 001, §4.3). `host_clock` gives the host time elapsed since any
/// fixed origin; it is read at the start and the end only (the library reads no clock).
pub fn run_frame_demo(
    cfg: &FrameDemoConfig,
    host_clock: &mut dyn FnMut() -> Duration,
) -> Result<FrameDemoReport, FrameDemoError> {
    let bpl = cfg
        .width
        .checked_mul(cfg.depth)
        .ok_or(FrameDemoError::Geometry("width x depth overflows"))?;
    let pitch = cfg
        .screen_width
        .checked_mul(cfg.depth)
        .ok_or(FrameDemoError::Geometry("screen width x depth overflows"))?;
    if bpl == 0 || cfg.height == 0 || cfg.frames == 0 {
        return Err(FrameDemoError::Geometry("empty frame"));
    }
    if pitch < bpl {
        return Err(FrameDemoError::Geometry("screen narrower than the frame"));
    }
    let geometry = WindowGeometry {
        pitch,
        bytes_per_line: bpl,
        lines: cfg.height,
    };
    let image = u64::from(
        geometry
            .image_len()
            .ok_or(FrameDemoError::Geometry("frame larger than 4 GiB"))?,
    );
    let span = geometry
        .span()
        .ok_or(FrameDemoError::Geometry("bad window"))?;
    let window_len = usize::try_from(span)
        .map_err(|_| FrameDemoError::Geometry("window too large"))?
        .next_multiple_of(4096);
    if window_len > 1 << 30 {
        return Err(FrameDemoError::Geometry("window larger than 1 GiB"));
    }
    let (timing, link, copy) = match cfg.board {
        FrameBoard::Seed001 => (
            SEED001_TIMING,
            LinkModel::SAN_2000,
            lanai_copy_rate(SEED001_LANAI_MHZ, true),
        ),
        FrameBoard::Unthrottled => (Timing::default(), LinkModel::default(), 0),
    };
    let mut tb = Testbed::new(TestbedConfig {
        mcp: McpConfig {
            lanai_copy_bytes_per_sec: copy,
            ..McpConfig::default()
        },
        timing,
        link,
        extra_memory: window_len,
        ..TestbedConfig::default()
    })?;
    let mut fb =
        tb.b.unit().claim_extra(0, window_len).map_err(|_| {
            FrameDemoError::Geometry("window does not fit the receiver's dma memory")
        })?;
    fb.as_mut_slice().fill(SENTINEL);
    let window = tb.b.register_window(fb, geometry).map_err(|(e, _)| e)?;
    let remote = window.remote();
    let start_host = host_clock();
    let start = tb.now;
    let mut placed_before = 0u64;
    let mut report = FrameDemoReport {
        frames: 0,
        lines_checked: 0,
        lines_bad: 0,
        bytes: 0,
        packets: 0,
        dropped: 0,
        virtual_time: Duration::ZERO,
        fps: 0.0,
        mb_per_s: 0.0,
        host_time: Duration::ZERO,
        host_fps: 0.0,
        host_mb_per_s: 0.0,
    };
    let blocks = match cfg.source {
        FrameSource::Workspace => Some([
            tb.a.sram_alloc(WORKSPACE_BLOCK)?,
            tb.a.sram_alloc(WORKSPACE_BLOCK)?,
        ]),
        FrameSource::HostDma => None,
    };
    let packet = u64::from(remote.max_packet());
    for f in 0..cfg.frames {
        let packets = match &blocks {
            None => send_frame_from_host(&mut tb, remote, f, image, bpl)?,
            Some(blocks) => {
                send_frame_from_workspace(&mut tb, remote, blocks, f, image, bpl, packet)?
            }
        };
        let expected = placed_before + packets;
        let mut placed = placed_before;
        let arrived = tb.run_until(
            |tb| {
                placed =
                    tb.b.mcp_counters()
                        .map(|c| u64::from(c.get(counter::DIRECTED_PLACED)))
                        .unwrap_or(0);
                placed >= expected
            },
            50_000_000,
        );
        if !arrived {
            return Err(FrameDemoError::Stalled {
                frame: f,
                placed,
                expected,
            });
        }
        placed_before = expected;
        let (checked, bad) =
            tb.b.with_window(&window, |bytes| check_frame(bytes, f, &geometry))?;
        report.lines_checked += checked;
        report.lines_bad += bad;
        report.frames += 1;
        report.bytes += image;
    }
    let end = tb.now;
    let host_time = host_clock().saturating_sub(start_host);
    let c = tb.b.mcp_counters()?;
    report.packets = u64::from(c.get(counter::DIRECTED_PLACED));
    report.dropped = u64::from(
        c.get(counter::DROP_WINDOW_KEY)
            + c.get(counter::DROP_WINDOW_BOUNDS)
            + c.get(counter::DROP_WINDOW_UNKNOWN),
    );
    report.virtual_time = end.saturating_since(start);
    let secs = report.virtual_time.as_secs_f64();
    if secs > 0.0 {
        report.fps = f64::from(report.frames) / secs;
        report.mb_per_s = report.bytes as f64 / secs / 1e6;
    }
    report.host_time = host_time;
    let hs = host_time.as_secs_f64();
    if hs > 0.0 {
        report.host_fps = f64::from(report.frames) / hs;
        report.host_mb_per_s = report.bytes as f64 / hs / 1e6;
    }
    drop(window);
    Ok(report)
}

/// Checks every line of frame `f` and the padding after it; (lines checked, lines bad).
fn check_frame(bytes: &[u8], f: u32, g: &WindowGeometry) -> (u64, u64) {
    let mut bad = 0;
    let (bpl, pitch) = (g.bytes_per_line as usize, g.pitch as usize);
    let mut want = vec![0u8; bpl];
    for y in 0..g.lines {
        let at = y as usize * pitch;
        frame_bytes(f, u64::from(y) * bpl as u64, &mut want, g.bytes_per_line);
        let line_ok = bytes.get(at..at + bpl) == Some(&want[..]);
        let pad_end = if y + 1 == g.lines {
            at + bpl
        } else {
            at + pitch
        };
        let pad_ok = bytes
            .get(at + bpl..pad_end)
            .is_some_and(|p| p.iter().all(|&b| b == SENTINEL));
        if !(line_ok && pad_ok) {
            bad += 1;
        }
    }
    (u64::from(g.lines), bad)
}

/// Queues a frame from host memory, one directed packet at a time, stepping the boards
/// whenever the send channel or the send buffers run out; returns the packets sent.
fn send_frame_from_host(
    tb: &mut Testbed,
    remote: RemoteWindow,
    f: u32,
    image: u64,
    bpl: u32,
) -> Result<u64, FrameDemoError> {
    let packet = u64::from(remote.max_packet());
    let mut at = 0u64;
    let mut n = 0;
    while at < image {
        let len = (image - at).min(packet) as usize;
        let mut buf = loop {
            match tb.a.get_send_buffer() {
                Ok(b) => break b,
                Err(ApiError::NoSendBuffers) => {
                    tb.a.reap_sent();
                    if !tb.step() {
                        return Err(ApiError::NoSendBuffers.into());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        };
        frame_bytes(f, at, &mut buf.as_mut_slice()[..len], bpl);
        loop {
            match tb.a.send_directed(tb.route, remote, at as u32, buf, len) {
                Ok(ticket) => {
                    drop(ticket);
                    break;
                }
                Err(e) if e.error == GmError::Api(ApiError::SendQueueFull) => {
                    buf = e.buf;
                    if !tb.step() {
                        return Err(ApiError::SendQueueFull.into());
                    }
                }
                Err(e) => return Err(e.error.into()),
            }
        }
        at += len as u64;
        n += 1;
    }
    Ok(n)
}

/// Sends a frame through the two workspace blocks in turn: the host writes a block by
/// PIO, then an OPIOM directed send takes it; the other block is filled while it goes.
fn send_frame_from_workspace(
    tb: &mut Testbed,
    remote: RemoteWindow,
    blocks: &[crate::host::gm::SramSegment; 2],
    f: u32,
    image: u64,
    bpl: u32,
    packet: u64,
) -> Result<u64, FrameDemoError> {
    let block = u64::from(WORKSPACE_BLOCK) / packet * packet;
    let mut running: [Option<crate::host::gm::OpiomRequest>; 2] = [None, None];
    let mut at = 0u64;
    let mut n = 0u64;
    let mut turn = 0;
    let mut staging = vec![0u8; block as usize];
    let mut idle = 0;
    while at < image || running.iter().any(Option::is_some) {
        // Drive the requests; a finished one frees its block.
        for r in running.iter_mut() {
            if let Some(req) = r
                && tb.a.opiom_status(req, tb.now)? == OpiomStatus::Done
            {
                *r = None;
            }
        }
        if at < image && running[turn].is_none() {
            let len = (image - at).min(block);
            frame_bytes(f, at, &mut staging[..len as usize], bpl);
            tb.a.sram_write(&blocks[turn], 0, &staging[..len as usize])?;
            let req = tb.a.opiom_send(
                &blocks[turn],
                0..len as u32,
                OpiomTarget::Window(remote, at as u32),
                tb.route,
            )?;
            running[turn] = Some(req);
            n += len.div_ceil(packet);
            at += len;
            turn ^= 1;
            continue;
        }
        if tb.step() {
            idle = 0;
        } else {
            // Idle with a request still running: its status call queues what is left,
            // unless nothing moves at all.
            idle += 1;
            if idle > 1000 {
                return Err(ApiError::SendQueueFull.into());
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_clock() -> impl FnMut() -> Duration {
        let mut t = Duration::ZERO;
        move || {
            t += Duration::from_millis(10);
            t
        }
    }

    #[test]
    fn every_line_of_every_frame_arrives_from_host_memory_and_the_workspace() {
        for source in [FrameSource::HostDma, FrameSource::Workspace] {
            let cfg = FrameDemoConfig {
                source,
                ..FrameDemoConfig::new(320, 100, 2, 3)
            };
            let r = run_frame_demo(&cfg, &mut fake_clock()).unwrap();
            assert_eq!(
                (r.frames, r.lines_checked, r.lines_bad, r.dropped),
                (3, 300, 0, 0),
                "{source:?}"
            );
            assert_eq!(r.bytes, 3 * 320 * 100 * 2);
            assert!(r.fps > 0.0 && r.mb_per_s > 0.0 && r.host_time == Duration::from_millis(10));
            // On the seed's board nothing beats the 133 MB/s of its PCI bus.
            assert!(r.mb_per_s < 133.0, "{source:?}: {} MB/s", r.mb_per_s);
        }
    }

    #[test]
    fn a_frame_whose_lines_exceed_a_packet_and_a_window_at_full_screen_width() {
        // 3200 x 4 = 12,800 bytes a line: longer than a packet.
        let cfg = FrameDemoConfig {
            screen_width: 3200,
            board: FrameBoard::Unthrottled,
            ..FrameDemoConfig::new(3200, 8, 4, 2)
        };
        let r = run_frame_demo(&cfg, &mut fake_clock()).unwrap();
        assert_eq!((r.lines_checked, r.lines_bad), (16, 0));
    }

    #[test]
    fn the_check_catches_a_wrong_line_and_touched_padding() {
        let g = WindowGeometry {
            pitch: 12,
            bytes_per_line: 8,
            lines: 3,
        };
        let mut bytes = vec![SENTINEL; 32];
        for y in 0..3u32 {
            let at = y as usize * 12;
            frame_bytes(1, u64::from(y) * 8, &mut bytes[at..at + 8], 8);
        }
        assert_eq!(check_frame(&bytes, 1, &g), (3, 0));
        assert_eq!(check_frame(&bytes, 2, &g), (3, 3), "another frame's lines");
        bytes[9] ^= 1;
        assert_eq!(check_frame(&bytes, 1, &g), (3, 1), "padding after line 0");
    }

    #[test]
    fn bad_geometry_is_refused() {
        let mut c = fake_clock();
        let narrow = FrameDemoConfig {
            screen_width: 10,
            ..FrameDemoConfig::new(20, 2, 1, 1)
        };
        assert!(matches!(
            run_frame_demo(&narrow, &mut c),
            Err(FrameDemoError::Geometry(_))
        ));
        assert!(matches!(
            run_frame_demo(&FrameDemoConfig::new(0, 2, 1, 1), &mut c),
            Err(FrameDemoError::Geometry(_))
        ));
        assert!(matches!(
            run_frame_demo(&FrameDemoConfig::new(u32::MAX, 2, 4, 1), &mut c),
            Err(FrameDemoError::Geometry(_))
        ));
    }
}
