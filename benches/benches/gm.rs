//! Seed 001's GM extensions measured (issue 18).
//!
//! * `sram_alloc`: the seed's SRAM page allocator (AVL tree of used segments, 511
//!   size-class lists) against a plain first-fit allocator, on the same seeded random
//!   workload of allocations and frees over a 2 MiB board's workspace; the fragmentation
//!   each leaves is printed before the timings.
//! * `send_path`: sending 1 MiB, and one 4 KiB or 64 B packet, from host memory (host
//!   DMA) and from the SRAM workspace (LANai copy at the seed's practical and theoretical
//!   rates) on the modelled 133 MHz LANai 9 board in a 32-bit/33 MHz slot. The
//!   virtual-time bandwidth and latency are printed before the timings; criterion then
//!   measures the host time each simulated run takes.
//!
//! `cargo bench -p myri-benches --bench gm`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use myri_device::board::Timing;
use myri_device::fabric::link::LinkModel;
use myri_device::time::Time;
use myri_mcp::firmware::lanai_copy_rate;
use myri_mcp::gm::testbed::{SEED001_LANAI_MHZ, SEED001_TIMING, Testbed, TestbedConfig};
use myri_mcp::gm::{FirstFit, OpiomTarget, SramAllocator, UserId, sram_alloc::PAGE};
use myri_mcp::{ApiError, ChanRequest, McpConfig};
use std::time::Duration;

// ---- the allocator workload ----

#[derive(Debug, Clone, Copy)]
enum Op {
    Alloc(u32),
    Free(u64),
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// File-system blocks mostly (1-8 pages), some buffers of 9-64, a few frames of 65-600;
/// a free in `free_pct` of the operations (48: the workspace fills and stays full; 52:
/// it stays partly free).
fn workload(seed: u64, n: usize, free_pct: u64) -> Vec<Op> {
    let mut r = SplitMix(seed);
    (0..n)
        .map(|_| {
            if r.next() % 100 < free_pct {
                return Op::Free(r.next());
            }
            let k = r.next() % 100;
            let pages = if k < 70 {
                1 + r.next() % 8
            } else if k < 95 {
                9 + r.next() % 56
            } else {
                65 + r.next() % 536
            };
            Op::Alloc(pages as u32)
        })
        .collect()
}

/// Pages of a 2 MiB board's workspace (what the MCP leaves free).
fn workspace_pages() -> u32 {
    let l = myri_mcp::hcb::Layout::new(2 << 20).expect("fits");
    (l.workspace_end - l.workspace) / PAGE
}

#[derive(Debug, Default)]
struct Outcome {
    /// Mean over samples taken every 100 operations.
    mean_runs: f64,
    mean_fragmentation: f64,
    failed: u64,
    live: usize,
    free_pages: u32,
    free_runs: usize,
    largest: u32,
    fragmentation: f64,
}

fn run_seed001(ops: &[Op], pages: u32) -> Outcome {
    let mut a = SramAllocator::new(0, pages * PAGE).expect("pages");
    let mut live = Vec::new();
    let mut failed = 0;
    let (mut runs, mut frag, mut samples) = (0.0, 0.0, 0.0);
    for (i, op) in ops.iter().enumerate() {
        if i % 100 == 99 {
            runs += a.free_runs() as f64;
            frag += a.fragmentation();
            samples += 1.0;
        }
        match *op {
            Op::Alloc(n) => match a.alloc(n * PAGE, UserId(1)) {
                Ok(id) => live.push(id),
                Err(_) => failed += 1,
            },
            Op::Free(pick) if !live.is_empty() => {
                let id = live.swap_remove((pick % live.len() as u64) as usize);
                a.free(id, UserId(1)).expect("live");
            }
            Op::Free(_) => {}
        }
    }
    Outcome {
        mean_runs: runs / samples,
        mean_fragmentation: frag / samples,
        failed,
        live: live.len(),
        free_pages: a.free_pages(),
        free_runs: a.free_runs(),
        largest: a.largest_free_run(),
        fragmentation: a.fragmentation(),
    }
}

fn run_first_fit(ops: &[Op], pages: u32) -> Outcome {
    let mut a = FirstFit::new(pages);
    let mut live = Vec::new();
    let mut failed = 0;
    let (mut runs, mut frag, mut samples) = (0.0, 0.0, 0.0);
    for (i, op) in ops.iter().enumerate() {
        if i % 100 == 99 {
            runs += a.free_runs() as f64;
            frag += a.fragmentation();
            samples += 1.0;
        }
        match *op {
            Op::Alloc(n) => match a.alloc(n) {
                Some(p) => live.push(p),
                None => failed += 1,
            },
            Op::Free(pick) if !live.is_empty() => {
                let p = live.swap_remove((pick % live.len() as u64) as usize);
                assert!(a.free(p));
            }
            Op::Free(_) => {}
        }
    }
    Outcome {
        mean_runs: runs / samples,
        mean_fragmentation: frag / samples,
        failed,
        live: live.len(),
        free_pages: a.free_pages(),
        free_runs: a.free_runs(),
        largest: a.largest_free_run(),
        fragmentation: a.fragmentation(),
    }
}

const OPS: usize = 20_000;
const SEED: u64 = 0x18;

fn sram_alloc(c: &mut Criterion) {
    let pages = workspace_pages();
    let mut g = c.benchmark_group("sram_alloc");
    g.throughput(Throughput::Elements(OPS as u64));
    for free_pct in [48u64, 52] {
        let ops = workload(SEED, OPS, free_pct);
        let s = run_seed001(&ops, pages);
        let f = run_first_fit(&ops, pages);
        println!(
            "sram_alloc: {OPS} ops (seed {SEED:#x}, {free_pct}% frees) over {pages} pages of 512 B"
        );
        for (name, o) in [("seed001", &s), ("first_fit", &f)] {
            println!(
                "  {name:<10} failed allocs {:>5}  mean free runs {:>6.1}  mean fragmentation {:.3}  at the end: live {:>4}  free pages {:>5}  free runs {:>4}  largest run {:>5}  fragmentation {:.3}",
                o.failed,
                o.mean_runs,
                o.mean_fragmentation,
                o.live,
                o.free_pages,
                o.free_runs,
                o.largest,
                o.fragmentation
            );
        }
        let id = format!("{free_pct}pct_frees");
        g.bench_function(BenchmarkId::new("seed001", &id), |b| {
            b.iter(|| run_seed001(&ops, pages))
        });
        g.bench_function(BenchmarkId::new("first_fit", &id), |b| {
            b.iter(|| run_first_fit(&ops, pages))
        });
    }
    g.finish();
}

// ---- send paths ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    HostDma,
    /// LANai copy at the seed's practical rate (133 MB/s at 133 MHz).
    SramPractice,
    /// At the theoretical rate (266 MB/s).
    SramTheory,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::HostDma => "host_dma",
            Path::SramPractice => "sram_practice",
            Path::SramTheory => "sram_theory",
        }
    }
}

fn testbed(path: Path) -> Testbed {
    let copy = match path {
        Path::SramTheory => lanai_copy_rate(SEED001_LANAI_MHZ, false),
        _ => lanai_copy_rate(SEED001_LANAI_MHZ, true),
    };
    Testbed::new(TestbedConfig {
        mcp: McpConfig {
            lanai_copy_bytes_per_sec: copy,
            ..McpConfig::default()
        },
        timing: SEED001_TIMING,
        // The receiver in a 64-bit/66 MHz slot, so the sending paths are what differ.
        timing_b: Some(Timing::PCI64B),
        link: LinkModel::SAN_2000,
        ..TestbedConfig::default()
    })
    .expect("testbed")
}

/// A testbed set up for one path: B's channel 0 open, A's workspace segment holding the
/// bytes to send (put there by a disk, seed 001 §2.2.3).
struct Rig {
    path: Path,
    tb: Testbed,
    chan: myri_mcp::Channel,
    seg: myri_mcp::gm::SramSegment,
}

impl Rig {
    fn new(path: Path) -> Rig {
        let mut tb = testbed(path);
        let chan = tb.b.get_chan(ChanRequest::Specific(0)).expect("chan");
        tb.b.init_recv_chan(&chan).expect("init");
        let seg = tb.a.sram_alloc(STREAM as u32).expect("workspace");
        tb.a.sram_write(&seg, 0, &vec![0x5A; STREAM]).expect("pio");
        Rig {
            path,
            tb,
            chan,
            seg,
        }
    }

    /// Sends `total` bytes in packets of up to 12 KiB; returns the virtual time from the
    /// first send to the last byte received.
    fn stream(&mut self, total: usize) -> Duration {
        let tb = &mut self.tb;
        let start = tb.now;
        let mut received = 0usize;
        let mut sent = 0usize;
        let mut req = (self.path != Path::HostDma).then(|| {
            tb.a.opiom_send(
                &self.seg,
                0..total as u32,
                OpiomTarget::Channel(0),
                tb.route,
            )
            .expect("opiom")
        });
        while received < total {
            match &mut req {
                Some(r) => {
                    tb.a.opiom_status(r, tb.now).expect("status");
                }
                None => {
                    while sent < total {
                        let n = (total - sent).min(12 << 10);
                        let Ok(buf) = tb.a.get_send_buffer() else {
                            break;
                        };
                        match tb.a.send_and_release(0, tb.route, buf, n) {
                            Ok(()) => sent += n,
                            Err(e) if e.error == ApiError::SendQueueFull => break,
                            Err(e) => panic!("{}", e.error),
                        }
                    }
                }
            }
            while let Ok(Some(r)) = tb.b.recv(&self.chan) {
                received += r.len();
            }
            if received < total {
                assert!(tb.step(), "stalled at {received} of {total}");
            }
        }
        // Let the last sends finish so the next run starts from an idle board.
        while tb.step() {}
        tb.now.saturating_since(start)
    }

    /// One packet of `len` bytes: virtual time from the send to its receipt.
    fn one_way(&mut self, len: usize) -> Duration {
        let tb = &mut self.tb;
        let start: Time = tb.now;
        let mut req = match self.path {
            Path::HostDma => {
                let buf = tb.a.get_send_buffer().expect("buf");
                tb.a.send_and_release(0, tb.route, buf, len).expect("send");
                None
            }
            _ => Some(
                tb.a.opiom_send(&self.seg, 0..len as u32, OpiomTarget::Channel(0), tb.route)
                    .expect("opiom"),
            ),
        };
        loop {
            if let Some(r) = &mut req {
                tb.a.opiom_status(r, tb.now).expect("status");
            }
            if tb.b.recv(&self.chan).expect("recv").is_some() {
                let t = tb.now.saturating_since(start);
                while tb.step() {}
                return t;
            }
            assert!(tb.step(), "stalled");
        }
    }
}

const PATHS: [Path; 3] = [Path::HostDma, Path::SramPractice, Path::SramTheory];
const STREAM: usize = 1 << 20;

fn send_path(c: &mut Criterion) {
    println!(
        "send_path: virtual time on a 133 MHz LANai 9, 32-bit/33 MHz PCI (133 MB/s host DMA), Myrinet-2000 link (250 MB/s); receiver in a 64-bit/66 MHz slot"
    );
    for p in PATHS {
        let mut rig = Rig::new(p);
        let t = rig.stream(STREAM);
        let lat4k = rig.one_way(4096);
        let lat64 = rig.one_way(64);
        println!(
            "  {:<14} 1 MiB stream {:>7.1} MB/s ({:?})  one-way 4 KiB {:>6.2} us  64 B {:>5.2} us",
            p.name(),
            STREAM as f64 / t.as_secs_f64() / 1e6,
            t,
            lat4k.as_nanos() as f64 / 1e3,
            lat64.as_nanos() as f64 / 1e3,
        );
    }
    let mut g = c.benchmark_group("send_path_host_time");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Bytes(STREAM as u64));
    for p in PATHS {
        let mut rig = Rig::new(p);
        g.bench_function(BenchmarkId::new("stream_1MiB", p.name()), |b| {
            b.iter_custom(|iters| {
                let t0 = std::time::Instant::now();
                for _ in 0..iters {
                    rig.stream(STREAM);
                }
                t0.elapsed()
            })
        });
    }
    g.throughput(Throughput::Elements(1));
    for p in PATHS {
        let mut rig = Rig::new(p);
        g.bench_function(BenchmarkId::new("one_way_4KiB", p.name()), |b| {
            b.iter_custom(|iters| {
                let t0 = std::time::Instant::now();
                for _ in 0..iters {
                    rig.one_way(4096);
                }
                t0.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, sram_alloc, send_path);
criterion_main!(benches);
