//! How far apart this host's two CPUs are: the round trip of one cache line between two
//! spinning threads, sampled for a few seconds ([`myri_board_bench::placement`]'s probe,
//! which the `rpp_board` bench also runs around each of its rounds). Run it beside a
//! benchmark to say which level a figure was taken at.
//!
//! Usage: `vcpu_pair [SECONDS]` (default 5). One line per sample of [`TRIPS`] round
//! trips, then how many samples were near and far and their medians.

use myri_board_bench::median;
use myri_board_bench::placement::{NEAR_NS, Placement, round_trip_ns};
use std::time::{Duration, Instant};

/// Round trips per sample.
const TRIPS: u64 = 20_000;

fn main() {
    let secs = match std::env::args().nth(1).map(|s| s.parse::<f64>()) {
        None => 5.0,
        Some(Ok(s)) if s > 0.0 && s <= 3600.0 => s,
        Some(_) => {
            eprintln!("vcpu_pair: SECONDS must be a number of seconds, over 0 and at most 3600");
            std::process::exit(2);
        }
    };
    let run = Instant::now();
    let mut samples = Vec::new();
    while run.elapsed() < Duration::from_secs_f64(secs) {
        let ns = round_trip_ns(TRIPS);
        println!(
            "{:7.2} s  {ns:6.0} ns a round trip",
            run.elapsed().as_secs_f64()
        );
        samples.push(ns);
    }
    let (near, far): (Vec<f64>, Vec<f64>) = samples
        .iter()
        .partition(|&&ns| Placement::of(ns) == Placement::Near);
    let show = |v: Vec<f64>| {
        let n = v.len();
        if n == 0 {
            "0".to_string()
        } else {
            format!("{n} (median {:.0} ns)", median(v))
        }
    };
    println!(
        "{} samples: near (under {NEAR_NS} ns) {}, far {}",
        samples.len(),
        show(near),
        show(far),
    );
}
