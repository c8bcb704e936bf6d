//! Seed 001's remote-video demo on the modelled board, until the `myri frames` command
//! calls the same function: `width height depth frames [host|workspace]`.
//!
//! ```sh
//! cargo run --release -p myri-benches --bin frames -- 1024 768 4 30 host
//! ```

use myri_mcp::gm::frames::{
    FrameDemoConfig, FrameSource, SEED_FPS_1024X768X4, SEED_MB_PER_S, run_frame_demo,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u32| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let source = match args.get(4).map(String::as_str) {
        Some("workspace") => FrameSource::Workspace,
        _ => FrameSource::HostDma,
    };
    let cfg = FrameDemoConfig {
        source,
        ..FrameDemoConfig::new(num(0, 1024), num(1, 768), num(2, 4), num(3, 30))
    };
    let start = std::time::Instant::now();
    match run_frame_demo(&cfg, &mut || start.elapsed()) {
        Ok(r) => {
            println!(
                "{}x{}x{} from {:?}: {} frames, {} lines checked, {} bad, {} packets, {} dropped",
                cfg.width,
                cfg.height,
                cfg.depth,
                source,
                r.frames,
                r.lines_checked,
                r.lines_bad,
                r.packets,
                r.dropped
            );
            println!(
                "virtual {:?}: {:.1} fps, {:.1} MB/s (seed 001: {SEED_FPS_1024X768X4} fps at 1024x768x4, about {SEED_MB_PER_S} MB/s)",
                r.virtual_time, r.fps, r.mb_per_s
            );
            println!(
                "host {:?}: {:.1} fps, {:.1} MB/s of simulation",
                r.host_time, r.host_fps, r.host_mb_per_s
            );
        }
        Err(e) => {
            eprintln!("frames: {e}");
            std::process::exit(1);
        }
    }
}
