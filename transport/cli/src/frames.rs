//! `myri frames`: seed 001's remote-video demo. Frames of a chosen geometry are sent as
//! directed sends into a strided window the receiving board registered (a screen wider
//! than the frame), line by line, with no receive event; every line of every frame is
//! checked on arrival. Frames per second and MB/s are those of the modelled board (seed
//! 001's 133 MHz LANai 9 on 32-bit/33 MHz PCI and a Myrinet-2000 link) in virtual time,
//! printed beside the seed's own figures; the host time the simulation took is printed
//! apart.

use crate::Failure;
use crate::opts::print_json;
use clap::{Args, ValueEnum};
use myri_mcp::gm::frames::{
    FrameBoard, FrameDemoConfig, FrameSource, SEED_FPS_1024X768X4, SEED_MB_PER_S, run_frame_demo,
};
use serde_json::json;

/// Where the sender's frames come from.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceArg {
    /// Host memory, by the sending board's host DMA.
    Host,
    /// The board's SRAM workspace, by LANai copy (seed 001's OPIOM send).
    Workspace,
}

/// Arguments of `myri frames`.
#[derive(Args, Debug)]
pub struct FramesArgs {
    /// Pixels per line.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub width: u32,
    /// Lines per frame.
    #[arg(long, default_value_t = 768, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub height: u32,
    /// Bytes per pixel.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub depth: u32,
    /// Frames to send.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub frames: u32,
    /// Where the frames come from.
    #[arg(long, value_enum, default_value_t = SourceArg::Host)]
    pub source: SourceArg,
    /// Run every engine unthrottled (checks only: the rates are then meaningless).
    #[arg(long)]
    pub unthrottled: bool,
    /// Print one JSON object instead of text: frames, lines_checked, lines_bad, fps,
    /// mb_per_s (virtual time on the modelled board), and the rest of the report.
    #[arg(long)]
    pub json: bool,
}

/// Runs `myri frames`.
pub fn run(args: &FramesArgs) -> Result<(), Failure> {
    let mut cfg = FrameDemoConfig::new(args.width, args.height, args.depth, args.frames);
    cfg.source = match args.source {
        SourceArg::Host => FrameSource::HostDma,
        SourceArg::Workspace => FrameSource::Workspace,
    };
    if args.unthrottled {
        cfg.board = FrameBoard::Unthrottled;
    }
    let start = std::time::Instant::now();
    let r =
        run_frame_demo(&cfg, &mut || start.elapsed()).map_err(|e| Failure::usage(e.to_string()))?;
    if args.json {
        print_json(&json!({
            "test": "frames", "width": args.width, "height": args.height, "depth": args.depth,
            "source": format!("{:?}", args.source).to_lowercase(),
            "frames": r.frames, "lines_checked": r.lines_checked, "lines_bad": r.lines_bad,
            "bytes": r.bytes, "packets": r.packets, "dropped": r.dropped,
            "virtual_s": r.virtual_time.as_secs_f64(), "fps": r.fps, "mb_per_s": r.mb_per_s,
            "host_s": r.host_time.as_secs_f64(), "host_fps": r.host_fps,
            "host_mb_per_s": r.host_mb_per_s,
            "seed_fps_1024x768x4": SEED_FPS_1024X768X4, "seed_mb_per_s": SEED_MB_PER_S,
        }));
    } else {
        println!(
            "{} frames of {}x{}x{} from {}, directed into a remote strided window: {} lines \
             checked, {} bad; {} packets, {} dropped",
            r.frames,
            args.width,
            args.height,
            args.depth,
            match args.source {
                SourceArg::Host => "host memory",
                SourceArg::Workspace => "the SRAM workspace",
            },
            r.lines_checked,
            r.lines_bad,
            r.packets,
            r.dropped
        );
        println!(
            "  modelled board  {:>8.1} fps {:>8.1} MB/s   (seed 001: {SEED_FPS_1024X768X4} fps at \
             1024x768x4, about {SEED_MB_PER_S} MB/s)",
            r.fps, r.mb_per_s
        );
        println!(
            "  host time       {:>8.1} fps {:>8.1} MB/s   ({:.3} s to simulate)",
            r.host_fps,
            r.host_mb_per_s,
            r.host_time.as_secs_f64()
        );
    }
    if r.lines_bad > 0 || r.frames != args.frames {
        return Err(Failure::check(format!(
            "{} of {} lines arrived wrong, {} of {} frames complete",
            r.lines_bad, r.lines_checked, r.frames, args.frames
        )));
    }
    Ok(())
}
