//! RPP over the board against the raw channel API, in the same run: the seed's 8-byte
//! ping-pong and 200 x 8 KiB stream between two simulated boards stepped inline, each
//! side on its own thread.
//!
//! `cargo bench -p myri-benches --bench rpp_board`
//!
//! It first alternates raw and RPP rounds (A B B A ...) and prints the medians and their
//! ratios, since this machine's timing drifts from second to second and only an
//! interleaved comparison means much; then criterion measures each on its own. Targets
//! (issues 4 and 15): RPP's 8-byte ping-pong within 1.5x of raw's one-way latency; the lossless
//! stream at no less than 85% of raw's bandwidth. The stream is also run with messages
//! of RPP's largest payload per packet ("fit"); an 8192-byte message is one packet both
//! ways (the channel's payload is 12 KiB).
//!
//! RPP runs through reliable `sim://` endpoints, the path applications take, with their
//! default integrity: the board's DMA checksums, compared at the receiver (no CRC-32C in
//! software; see `myri_transport::Integrity`). Each comparison has a run more
//! interleaved with the others: RPP with its CRC-32C instead (`integrity=crc32c`). Each
//! stream comparison has another: raw with every packet checked end to end by CRC-32C and
//! nothing else ([`raw::stream_checked`]: the sender computes a CRC-32C over each packet
//! as RPP does, the sink verifies it). Its ratio to raw is what that check costs by
//! itself, the ceiling for RPP's ratio with it; RPP-with-CRC's ratio to it is what the
//! rest of the protocol costs.
//!
//! What the comparison is: raw, the stream's sender writes a 24-byte header into each DMA
//! buffer and sends it (the rest of the 8 KiB is whatever the buffer held); over RPP the
//! application writes the same 24 bytes into a DMA buffer that is lent to the board while
//! RPP keeps the message (each packet is its header inline and the payload DMA'd from
//! there, no copy), and the receiver compares the boards' checksums (or, in the CRC-32C
//! runs, both ends run CRC-32C over header and payload). The RPP lines also
//! say how many packets RPP resent and how many acknowledgements it sent: on this busy
//! machine a descheduled receiver can make the sender's retransmission timer fire.
//!
//! On a two-vCPU virtual machine the hypervisor moves the two vCPUs between cores that
//! share a cache and cores that do not, several times a second, which moves raw's one-way
//! time about twofold and the ratios with it. Each round is probed before, between and
//! after its runs ([`myri_board_bench::placement`]), and the target lines are followed by
//! their per-round ratios split by where the CPUs sat.
//!
//! With `--test` (as `cargo test --benches` passes) every part runs once, briefly.

use criterion::{Criterion, Throughput};
use myri_board_bench::harness::{ExecMode, Setup};
use myri_board_bench::placement::Placement;
use myri_board_bench::report::RppReport;
use myri_board_bench::{median, raw, reliable};
use std::cell::RefCell;
use std::time::Duration;

/// What one interleaved comparison measures, and how big it is.
struct Sizes {
    rounds: usize,
    pingpong_iters: u64,
    stream_count: u64,
    stream_rounds: u32,
}

fn setup() -> Setup {
    Setup {
        mode: ExecMode::Inline,
        ..Setup::default()
    }
}

/// Three runs in turn: each goes first, second and third equally often.
const ORDERS_3: [[usize; 3]; 6] = [
    [0, 1, 2],
    [2, 1, 0],
    [1, 2, 0],
    [0, 2, 1],
    [2, 0, 1],
    [1, 0, 2],
];

/// Four runs in turn: each goes first, second, third and fourth equally often.
const ORDERS_4: [[usize; 4]; 4] = [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]];

/// Round trips of each probe of where the two CPUs sit (well under a millisecond).
const PROBE_TRIPS: u64 = 2_000;

/// Runs each of `runs` `rounds` times, round `r` in the order `orders[r % orders.len()]`;
/// returns each run's values and where the two CPUs sat in each round (probed before
/// each run and after the last, a round's first probe being the last of the round
/// before: [`Placement::Mixed`] if the probes disagree).
fn interleave<const N: usize>(
    rounds: usize,
    orders: &[[usize; N]],
    runs: &mut [&mut dyn FnMut() -> f64; N],
) -> ([Vec<f64>; N], Vec<Placement>) {
    let mut values: [Vec<f64>; N] = std::array::from_fn(|_| Vec::new());
    let mut placements = Vec::with_capacity(rounds);
    let mut last = Placement::probe(PROBE_TRIPS);
    for r in 0..rounds {
        let mut at = last;
        for i in orders[r % orders.len()] {
            values[i].push(runs[i]());
            last = Placement::probe(PROBE_TRIPS);
            at = at.and(last);
        }
        placements.push(at);
    }
    (values, placements)
}

fn line(what: &str, unit: &str, raw: &[f64], rpp: &[f64], at: &[Placement], target: &str) {
    compare(what, unit, ("raw", raw), ("rpp", rpp), target);
    by_placement(raw, rpp, at);
}

/// One line comparing run `b` with run `a` (each a name and its values per round).
fn compare(what: &str, unit: &str, a: (&str, &[f64]), b: (&str, &[f64]), note: &str) {
    let (x, y) = (median(a.1.to_vec()), median(b.1.to_vec()));
    let (na, nb) = (a.0, b.0);
    println!(
        "  {what:<26} {na} {x:>9.3} {unit:<5} {nb} {y:>9.3} {unit:<5} {nb}/{na} {:>5.2} \
         (median of per-round ratios {:>5.2}; {note})",
        y / x,
        median(ratios(a.1, b.1))
    );
}

/// Each round's ratio of `b` to `a`.
fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| y / x).collect()
}

/// The per-round ratios of `b` to `a` again, the rounds where the two CPUs sat near
/// each other apart from those where they sat far apart ([`myri_board_bench::placement`]).
fn by_placement(a: &[f64], b: &[f64], at: &[Placement]) {
    let all = ratios(a, b);
    let of = |p: Placement| {
        let r: Vec<f64> = all
            .iter()
            .zip(at)
            .filter(|&(_, &q)| q == p)
            .map(|(&r, _)| r)
            .collect();
        match r.len() {
            0 => "no rounds".to_string(),
            n => format!("{n} rounds, {:.2}", median(r)),
        }
    };
    let mixed = at.iter().filter(|&&p| p == Placement::Mixed).count();
    println!(
        "    {:<26} near {}; far {}; {mixed} mixed",
        "by where the CPUs sat",
        of(Placement::Near),
        of(Placement::Far)
    );
}

/// What RPP did over every round of one comparison, summed.
#[derive(Default)]
struct RppTally {
    data: u64,
    retransmitted: u64,
    timer_expiries: u64,
    acks: u64,
}

impl RppTally {
    fn add(&mut self, r: Option<&RppReport>) {
        if let Some(r) = r {
            self.data += r.client.data_sent + r.server.data_sent;
            self.retransmitted += r.retransmitted();
            self.timer_expiries += r.client.rto_expirations + r.server.rto_expirations;
            self.acks += r.client.acks_sent + r.server.acks_sent;
        }
    }

    fn print(&self) {
        println!(
            "  {:<26} {} data packets, {} resent ({} timer expiries), {} acknowledgements",
            "  rpp did", self.data, self.retransmitted, self.timer_expiries, self.acks
        );
    }
}

/// The interleaved comparison, printed.
fn interleaved(s: &Sizes) {
    let setup = setup();
    println!(
        "rpp_board: raw channel API vs RPP over it, inline, interleaved, {} rounds each",
        s.rounds
    );
    let tally = RefCell::new(RppTally::default());
    let crc_setup = Setup {
        integrity: Some(myri_transport::Integrity::Crc32c),
        ..setup
    };
    let ([raw_pp, rpp_pp, crc_pp], at) = interleave(
        s.rounds,
        &ORDERS_3,
        &mut [
            &mut || {
                raw::pingpong(&setup, 8, s.pingpong_iters, None)
                    .expect("raw pingpong")
                    .one_way_us
            },
            &mut || {
                let r =
                    reliable::pingpong(&setup, 8, s.pingpong_iters, None).expect("rpp pingpong");
                tally.borrow_mut().add(r.rpp.as_ref());
                r.one_way_us
            },
            &mut || {
                reliable::pingpong(&crc_setup, 8, s.pingpong_iters, None)
                    .expect("rpp pingpong, crc32c")
                    .one_way_us
            },
        ],
    );
    line(
        "ping-pong 8 B one-way",
        "us",
        &raw_pp,
        &rpp_pp,
        &at,
        "target <= 1.50",
    );
    compare(
        "  rpp, crc32c integrity",
        "us",
        ("raw", &raw_pp),
        ("crc", &crc_pp),
        "RPP with its CRC-32C in software instead of the board's DMA checksums",
    );
    tally.take().print();
    let fit = myri_board_bench::reliable::fit_payload();
    for (name, size) in [
        ("stream 8192 B", 8192usize),
        ("stream fit (one packet)", fit),
    ] {
        let ([raw_st, checked_st, rpp_st, crc_st], at) = interleave(
            s.rounds,
            &ORDERS_4,
            &mut [
                &mut || {
                    raw::stream(&setup, size, s.stream_count, 8, s.stream_rounds, None)
                        .expect("raw stream")
                        .mb_per_s
                },
                &mut || {
                    let r = raw::stream_checked(&setup, size, s.stream_count, 8, s.stream_rounds)
                        .expect("checked raw stream");
                    assert_eq!(r.delivered, s.stream_count * u64::from(s.stream_rounds));
                    r.mb_per_s
                },
                &mut || {
                    let r =
                        reliable::stream(&setup, size, s.stream_count, 8, s.stream_rounds, None)
                            .expect("rpp stream");
                    tally.borrow_mut().add(r.rpp.as_ref());
                    r.mb_per_s
                },
                &mut || {
                    let r = reliable::stream(
                        &crc_setup,
                        size,
                        s.stream_count,
                        8,
                        s.stream_rounds,
                        None,
                    )
                    .expect("rpp stream, crc32c integrity");
                    assert_eq!(r.delivered, s.stream_count * u64::from(s.stream_rounds));
                    r.mb_per_s
                },
            ],
        );
        let name = format!("{name} x {}", s.stream_count);
        line(&name, "MB/s", &raw_st, &rpp_st, &at, "target >= 0.85");
        tally.take().print();
        compare(
            "  rpp, crc32c integrity",
            "MB/s",
            ("raw", &raw_st),
            ("crc", &crc_st),
            "RPP with its CRC-32C in software instead of the board's DMA checksums",
        );
        compare(
            "  the check alone",
            "MB/s",
            ("raw", &raw_st),
            ("chk", &checked_st),
            "raw with each packet's CRC-32C and nothing else: that ceiling",
        );
        compare(
            "  the protocol beyond it",
            "MB/s",
            ("chk", &checked_st),
            ("crc", &crc_st),
            "RPP with its CRC-32C against that ceiling",
        );
    }
}

fn pingpong(c: &mut Criterion) {
    let mut g = c.benchmark_group("rpp_board_pingpong_8B");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Bytes(8));
    let setup = setup();
    g.bench_function("raw", |b| {
        b.iter_custom(|iters| {
            raw::pingpong(&setup, 8, iters, None)
                .expect("raw pingpong")
                .total_rtt
        })
    });
    g.bench_function("rpp", |b| {
        b.iter_custom(|iters| {
            reliable::pingpong(&setup, 8, iters, None)
                .expect("rpp pingpong")
                .total_rtt
        })
    });
    g.finish();
}

fn stream(c: &mut Criterion) {
    let mut g = c.benchmark_group("rpp_board_stream_200x8KiB");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Bytes(200 * 8192));
    let setup = setup();
    g.bench_function("raw", |b| {
        b.iter_custom(|iters| {
            raw::stream(&setup, 8192, 200, 8, iters as u32, None)
                .expect("raw stream")
                .total_time
        })
    });
    g.bench_function("rpp", |b| {
        b.iter_custom(|iters| {
            reliable::stream(&setup, 8192, 200, 8, iters as u32, None)
                .expect("rpp stream")
                .total_time
        })
    });
    g.finish();
}

fn main() {
    let test = std::env::args().any(|a| a == "--test");
    interleaved(&if test {
        Sizes {
            rounds: 2,
            pingpong_iters: 200,
            stream_count: 50,
            stream_rounds: 1,
        }
    } else {
        Sizes {
            rounds: 10,
            pingpong_iters: 4000,
            stream_count: 200,
            stream_rounds: 10,
        }
    });
    let mut c = Criterion::default().configure_from_args();
    pingpong(&mut c);
    stream(&mut c);
    c.final_summary();
}
