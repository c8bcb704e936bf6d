//! How far apart this host's two CPUs are: the round trip of one cache line between two
//! spinning threads, sampled for a few seconds.
//!
//! On the 2 vCPU KVM hosts this project is measured on, the hypervisor moves the two
//! vCPUs between cores that share a cache and cores that do not, several times a second,
//! and the round trip falls into two levels (about 100 ns and about 500 ns on the AMD
//! EPYC host of `RESULTS.md`). The board benchmarks' figures follow it: a packet crosses
//! between the two threads once each way. Run it beside a benchmark to say which level a
//! figure was taken at.
//!
//! Usage: `vcpu_pair [SECONDS]` (default 5). One line per sample of [`TRIPS`] round
//! trips, then a summary.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Round trips per sample.
const TRIPS: u64 = 20_000;
/// Samples under this many nanoseconds a round trip count as the near level.
const NEAR_NS: f64 = 250.0;

/// One cache line of its own, so that nothing else shares it.
#[repr(align(128))]
struct Line(AtomicU64);

/// The mean round trip, in nanoseconds, of [`TRIPS`] hand-offs of one counter: this
/// thread writes odd values, the other answers with the next even one.
fn sample() -> f64 {
    let line = Arc::new(Line(AtomicU64::new(0)));
    let other = Arc::clone(&line);
    let echo = std::thread::spawn(move || {
        for i in 0..TRIPS {
            while other.0.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            other.0.store(2 * i + 2, Ordering::Release);
        }
    });
    let start = Instant::now();
    for i in 0..TRIPS {
        line.0.store(2 * i + 1, Ordering::Release);
        while line.0.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let ns = start.elapsed().as_secs_f64() * 1e9 / TRIPS as f64;
    echo.join().expect("the echo thread does not panic");
    ns
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

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
        let ns = sample();
        println!(
            "{:7.2} s  {ns:6.0} ns a round trip",
            run.elapsed().as_secs_f64()
        );
        samples.push(ns);
    }
    let (near, far): (Vec<f64>, Vec<f64>) = samples.iter().partition(|&&ns| ns < NEAR_NS);
    let (n_near, n_far) = (near.len(), far.len());
    let show = |v: Option<f64>| v.map_or("-".to_string(), |ns| format!("{ns:.0} ns"));
    println!(
        "{} samples: {n_near} near (under {NEAR_NS} ns, median {}), {n_far} far (median {})",
        samples.len(),
        show(median(near)),
        show(median(far)),
    );
}
