//! What RPP costs over the board, against the channel API alone: two simulated boards
//! stepped inline on one thread (no clock, no other work), exchanging the seed's
//! benchmarks raw (the channel API) and over reliable `sim://` endpoints (RPP over the
//! same channel API, the path `myri pingpong`/`stream` and applications take). Counted in instructions under callgrind, because wall time on this machine is
//! too noisy to compare A with B.
//!
//! ```sh
//! cargo build --release -p myri-benches --bin rpp_board_cost
//! # Every mode at a small and a large count (the difference cancels set-up), and ratios:
//! target/release/rpp_board_cost compare
//! # One run by hand, and where its instructions go:
//! GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4294967295 \
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.rpp target/release/rpp_board_cost rpp-pingpong 20000
//! callgrind_annotate /tmp/cg.rpp | head -40
//! ```
//!
//! Modes (the unit of COUNT in parentheses):
//! * `raw-pingpong`, `rpp-pingpong` (exchanges): an 8-byte message and its echo. Raw, the
//!   echo turns the receive buffer around; over the endpoint it copies the 8 bytes into a
//!   new message.
//! * `raw-stream`, `rpp-stream` (messages): 8 KiB one way with at most 8 sends in the
//!   send channel, one packet per message both ways (the channel's payload is 12 KiB, so
//!   RPP's header fits beside 8 KiB). Raw, the sender writes only the 8-byte sequence
//!   number into the DMA buffer; over the endpoint the same, into a DMA buffer
//!   (`Endpoint::alloc`) lent to the board while RPP keeps the message (the packet's header
//!   goes inline, the payload by DMA from the lent buffer) and reused once its completion
//!   hands it back; each packet is checked end to end by the boards' DMA checksums (a
//!   comparison at the receiver), the endpoint's default on `sim://`. The run prints how
//!   many acknowledgements the receiver sent.
//! * `rpp-stream-crc` (messages): `rpp-stream` with `integrity=crc32c`: each packet is
//!   checked by a CRC-32C computed in software at both ends instead.
//! * `raw-stream-fit`, `rpp-stream-fit` (messages): the same with messages of RPP's
//!   largest payload per packet.
//!
//! * `raw-path`, `rpp-path` (exchanges): the ping-pong as the board bench's two threads
//!   run it, each side's next turn (a board step; over the endpoint, a progress call:
//!   the pass a delivery defers) running while its packet travels, with what the packet
//!   waits for (a send up to the board's step that puts it on the fabric, the step that
//!   finds it and the receive, the echo's copy) inside `on_path`, which `compare` counts
//!   alone.
//!
//! `compare` runs valgrind with glibc's `rep movsb` copies switched off (see
//! [`FLAT_COPIES`]): callgrind would count each byte they move as an instruction. After
//! every mode's count it splits `raw-stream` and `rpp-stream` into their two sides:
//! what runs inside [`sender`] and inside [`receiver`], each counted alone. In the board
//! bench the two sides run on threads of their own, so the stream goes at the pace of the
//! busier side; the ratio of the senders' counts is what the bench's stream ratio follows
//! while RPP's sender is the busier. It ends with the path modes under a model of the AMD EPYC hosts' caches
//! ([`cost::EPYC_CACHES`]): instructions and instruction-cache misses per exchange, all
//! of them and those on the path (less what `Endpoint::send` does after its packet has
//! gone: `Endpoint::after_send`, the events it drains and the deferred pass it settles),
//! and the code each exchange runs: the 64-byte lines of it
//! whose instructions ran at least once an exchange ([`InstrCounts`]). That is the
//! working set an instruction cache must hold for the next exchange to find its code; it
//! does not move with the code's layout in the cache's sets, as the miss count does.
//! Then the instructions an exchange by layer ([`Layers`]): the simulated board, its
//! control program, RPP, the endpoint around it (the transport), the harness: what RPP's
//! exchange adds is split between the protocol and the endpoint layer. Last, the lines of
//! code an exchange runs by function, for the functions with most of them in `rpp-path`
//! and their count in `raw-path` (a function that inlines another counts its lines): where
//! a smaller path would come from. Beside the lines, the bytes of the instructions that ran
//! (their sizes read with `objdump`), in all and by function: over 64, the fewest lines that
//! code could fill, which the layout does not move; the rest of the lines touched is code
//! jumped over.
//!
//! Virtual time moves 1 µs per hop (raw) or per progress call (the endpoints' world
//! ticks), so RPP's timers and round-trip estimate run as on a fast link; nothing is
//! lost, so nothing is retransmitted (the run checks).

use myri_benches::cost::{self, CallgrindError, FLAT_COPIES, InlinePair, InstrCounts, Layers};
use myri_board_bench::reliable::{fit_payload, rpp_config};
use myri_device::time::Time;
use myri_mcp::{Api, Channel, RecvBuf, RouteId};
use myri_transport::sim::{SimWorld, WorldConfig};
use myri_transport::{Buf, Completion, Delivery, Endpoint, Integrity, Options, Peer};
use std::collections::VecDeque;
use std::time::Duration;
use thiserror::Error;

const USAGE: &str = "usage: rpp_board_cost MODE COUNT\n       \
                     rpp_board_cost compare [SMALL LARGE]\n\
                     modes: raw-pingpong rpp-pingpong raw-stream rpp-stream rpp-stream-crc \
                     raw-stream-fit rpp-stream-fit raw-path rpp-path";

/// What went wrong.
#[derive(Debug, Error)]
enum CostError {
    #[error("{0}\n{USAGE}")]
    Usage(String),
    #[error(transparent)]
    Callgrind(#[from] CallgrindError),
    #[error("the {0} run went wrong: {1}")]
    Run(&'static str, String),
}

/// Which benchmark, raw or over RPP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    RawPingPong,
    RppPingPong,
    RawStream,
    RppStream,
    RppStreamCrc,
    RawStreamFit,
    RppStreamFit,
    RawPath,
    RppPath,
}

impl Which {
    const ALL: [Which; 9] = [
        Which::RawPingPong,
        Which::RppPingPong,
        Which::RawStream,
        Which::RppStream,
        Which::RppStreamCrc,
        Which::RawStreamFit,
        Which::RppStreamFit,
        Which::RawPath,
        Which::RppPath,
    ];

    fn name(self) -> &'static str {
        match self {
            Which::RawPingPong => "raw-pingpong",
            Which::RppPingPong => "rpp-pingpong",
            Which::RawStream => "raw-stream",
            Which::RppStream => "rpp-stream",
            Which::RppStreamCrc => "rpp-stream-crc",
            Which::RawStreamFit => "raw-stream-fit",
            Which::RppStreamFit => "rpp-stream-fit",
            Which::RawPath => "raw-path",
            Which::RppPath => "rpp-path",
        }
    }

    fn parse(s: &str) -> Option<Which> {
        Which::ALL.into_iter().find(|w| w.name() == s)
    }

    /// Whether `compare` counts this mode's path (see [`path_cost`]).
    fn is_path(self) -> bool {
        matches!(self, Which::RawPath | Which::RppPath)
    }

    /// Bytes per stream message.
    fn stream_size(self) -> usize {
        match self {
            Which::RawStreamFit | Which::RppStreamFit => fit_payload(),
            _ => 8192,
        }
    }
}

/// Runs `f`: the part of a path-mode exchange a packet waits for. Never inlined, so that
/// `valgrind --tool=callgrind --toggle-collect='rpp_board_cost::on_path*'` counts what
/// runs inside it alone (see `compare`).
#[inline(never)]
fn on_path<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Runs `f`, the stream sender's part of a turn. Never inlined, so that
/// `--toggle-collect='rpp_board_cost::sender*'` counts the sender's turns alone: in the
/// board bench each side runs on a thread of its own, so the stream goes at the pace of
/// the busier side (see `compare`). The marks in `black_box` keep it apart from
/// [`receiver`], whose code it would otherwise share under one name.
#[inline(never)]
fn sender<R>(f: impl FnOnce() -> R) -> R {
    std::hint::black_box(1u8);
    let r = f();
    std::hint::black_box(11u8);
    r
}

/// Runs `f`, the stream receiver's part of a turn (see [`sender`]).
#[inline(never)]
fn receiver<R>(f: impl FnOnce() -> R) -> R {
    std::hint::black_box(2u8);
    let r = f();
    std::hint::black_box(22u8);
    r
}

fn main() {
    if let Err(e) = run(std::env::args().skip(1).collect()) {
        eprintln!("rpp_board_cost: {e}");
        std::process::exit(2);
    }
}

fn number(arg: Option<&String>, default: u64, what: &str) -> Result<u64, CostError> {
    cost::number(arg, default, what).map_err(CostError::Usage)
}

fn run(args: Vec<String>) -> Result<(), CostError> {
    let first = args
        .first()
        .ok_or_else(|| CostError::Usage("say which mode, or compare".into()))?;
    if first == "compare" {
        let small = number(args.get(1), 1_000, "SMALL")?;
        let large = number(args.get(2), 6_000, "LARGE")?;
        if large <= small {
            return Err(CostError::Usage("LARGE must exceed SMALL".into()));
        }
        return compare(small, large);
    }
    let which =
        Which::parse(first).ok_or_else(|| CostError::Usage(format!("unknown mode {first:?}")))?;
    let count = number(args.get(1), 10_000, "COUNT")?;
    let mut boards = Boards::new();
    let what = match which {
        Which::RawPingPong => boards.raw_pingpong(count),
        Which::RppPingPong => Endpoints::new(None).and_then(|mut e| e.pingpong(count)),
        Which::RawStream | Which::RawStreamFit => boards.raw_stream(count, which.stream_size()),
        Which::RppStream | Which::RppStreamFit => {
            Endpoints::new(None).and_then(|mut e| e.stream(count, which.stream_size()))
        }
        Which::RppStreamCrc => Endpoints::new(Some(Integrity::Crc32c))
            .and_then(|mut e| e.stream(count, which.stream_size())),
        Which::RawPath => boards.raw_path(count),
        Which::RppPath => Endpoints::new(None).and_then(|mut e| e.path(count)),
    }
    .map_err(|why| CostError::Run(which.name(), why))?;
    println!("{}: {what}", which.name());
    Ok(())
}

fn compare(small: u64, large: u64) -> Result<(), CostError> {
    let exe = std::env::current_exe().map_err(CallgrindError::from)?;
    let dir = cost::profile_dir("myri-rpp-board-cost")?;
    println!("instructions per exchange (ping-pong) or per message (stream), ({large} - {small}):");
    // The path modes are counted once, with the caches, by `path_cost` below.
    let mut per = Vec::new();
    for which in Which::ALL.into_iter().filter(|w| !w.is_path()) {
        let mut totals = [0u64; 2];
        for (total, n) in totals.iter_mut().zip([small, large]) {
            let out = dir.join(format!("callgrind.{}.{n}.out", which.name()));
            let args = [which.name().to_string(), n.to_string()];
            *total = cost::instructions(&exe, &out, &args, &[("GLIBC_TUNABLES", FLAT_COPIES)])?;
        }
        let cost = (totals[1] as f64 - totals[0] as f64) / (large - small) as f64;
        println!(
            "  {:<15} {:>9.0}   (profile: {})",
            which.name(),
            cost,
            dir.join(format!("callgrind.{}.{large}.out", which.name()))
                .display()
        );
        per.push((which, cost));
    }
    // Each RPP mode against the raw mode of its benchmark.
    let cost_of = |w: Which| per.iter().find(|&&(x, _)| x == w).map(|&(_, c)| c);
    for (raw, rpp) in [
        (Which::RawPingPong, Which::RppPingPong),
        (Which::RawStream, Which::RppStream),
        (Which::RawStream, Which::RppStreamCrc),
        (Which::RawStreamFit, Which::RppStreamFit),
    ] {
        if let (Some(a), Some(b)) = (cost_of(raw), cost_of(rpp)) {
            println!("  {:<15} / {:<15} = {:.2}", rpp.name(), raw.name(), b / a);
        }
    }
    println!(
        "the stream's sides per message (in the board bench each runs on a thread of its \
         own, so the busier one sets the pace):"
    );
    let mut sides = Vec::new();
    for which in [Which::RawStream, Which::RppStream] {
        let [tx, rx] = side_costs(&exe, &dir, which, small, large)?;
        println!(
            "  {:<15} sender {tx:>7.0}  receiver {rx:>7.0}",
            which.name()
        );
        sides.push(tx);
    }
    if let [raw, rpp] = sides[..] {
        println!(
            "  raw-stream / rpp-stream, the senders: {:.3} (the bench's target for the \
             stream's rate: 0.85)",
            raw / rpp
        );
    }
    println!(
        "the ping-pong's path (a send up to the board's step that puts its packet on the \
         fabric, the step that finds it and the receive), per exchange, with a 32 KiB \
         instruction cache:"
    );
    let mut paths = Vec::new();
    for which in [Which::RawPath, Which::RppPath] {
        let p = path_cost(&exe, &dir, which, small, large)?;
        println!(
            "  {:<9} all {:>7.0} instructions {:>6.0} I1 misses;  on the path {:>7.0} \
             instructions {:>6.0} I1 misses;  code run every exchange {} lines ({:.1} KiB; \
             the instructions that ran {:.1} KiB, {} lines' worth)",
            which.name(),
            p.all[0],
            p.all[1],
            p.path[0],
            p.path[1],
            p.lines,
            p.lines as f64 / 16.0,
            p.bytes as f64 / 1024.0,
            p.bytes.div_ceil(64),
        );
        paths.push(p);
    }
    if let [raw, rpp] = &paths[..] {
        println!(
            "  rpp-path / raw-path: all {:.2}x instructions, {:.1}x I1 misses; on the path \
             {:.2}x instructions, {:.1}x I1 misses",
            rpp.all[0] / raw.all[0],
            rpp.all[1] / raw.all[1],
            rpp.path[0] / raw.path[0],
            rpp.path[1] / raw.path[1]
        );
        println!(
            "  rpp-path / raw-path: code run every exchange {:.2}x",
            rpp.lines as f64 / raw.lines as f64
        );
        println!("  instructions an exchange by layer (raw-path, rpp-path, difference):");
        for (&(layer, a), &(_, b)) in raw.layers.iter().zip(&rpp.layers) {
            println!("    {layer:<10} {a:>7.0} {b:>7.0} {:>+7.0}", b - a);
        }
        println!(
            "  lines of code an exchange runs by function, the {FUNCTIONS} with most in \
             rpp-path (raw-path, rpp-path, and the lines rpp-path's instructions that ran \
             would fill: the rest of its lines is code jumped over):"
        );
        for (function, n) in rpp.functions.iter().take(FUNCTIONS) {
            let raw_n = raw
                .functions
                .iter()
                .find(|(f, _)| f == function)
                .map_or(0, |&(_, n)| n);
            let bytes = rpp
                .function_bytes
                .iter()
                .find(|(f, _)| f == function)
                .map_or(0, |&(_, b)| b);
            println!(
                "    {raw_n:>4} {n:>4} {:>4}  {function}",
                bytes.div_ceil(64)
            );
        }
    }
    Ok(())
}

/// Instructions per message of a stream mode's sender and receiver: the calls inside
/// [`sender`] and inside [`receiver`], each counted alone (`--toggle-collect`), at
/// `small` and `large` messages.
fn side_costs(
    exe: &std::path::Path,
    dir: &std::path::Path,
    which: Which,
    small: u64,
    large: u64,
) -> Result<[f64; 2], CostError> {
    let mut per = [0f64; 2];
    for (side, cost) in ["sender", "receiver"].into_iter().zip(&mut per) {
        let toggle = format!("--toggle-collect=rpp_board_cost::{side}*");
        let mut totals = [0f64; 2];
        for (total, n) in totals.iter_mut().zip([small, large]) {
            [*total] = counted(exe, dir, which, side, n, &[toggle.as_str()], ["Ir"])?;
        }
        *cost = (totals[1] - totals[0]) / (large - small) as f64;
    }
    Ok(per)
}

/// Runs mode `which` at `n` under callgrind with `options` (profile `callgrind.MODE.TAG.N.out`
/// in `dir`), with glibc's copies kept flat, and returns the totals of `events`.
fn counted<const N: usize>(
    exe: &std::path::Path,
    dir: &std::path::Path,
    which: Which,
    tag: &str,
    n: u64,
    options: &[&str],
    events: [&str; N],
) -> Result<[f64; N], CostError> {
    let out = dir.join(format!("callgrind.{}.{tag}.{n}.out", which.name()));
    let args = [which.name().to_string(), n.to_string()];
    let totals = cost::callgrind(
        exe,
        &out,
        &args,
        &[("GLIBC_TUNABLES", FLAT_COPIES)],
        options,
    )?;
    let mut v = [0f64; N];
    for (slot, name) in v.iter_mut().zip(events) {
        *slot = totals
            .get(name)
            .ok_or_else(|| CallgrindError::NoTotal(out.clone()))? as f64;
    }
    Ok(v)
}

/// Instructions and instruction-cache misses per exchange of a path mode: `all` of them,
/// and those on the `path`; and the 64-byte `lines` of code that run in every exchange
/// (the instruction working set the cache must hold), by `functions` too; and all the
/// instructions by `layers` of the stack.
struct PathCost {
    all: [f64; 2],
    path: [f64; 2],
    lines: usize,
    layers: Vec<(&'static str, f64)>,
    /// `lines` by function, most first.
    functions: Vec<(String, usize)>,
    /// The bytes of the instructions that ran every exchange (read with `objdump`): over
    /// 64, the fewest lines they could fill.
    bytes: u64,
    /// `bytes` by function.
    function_bytes: Vec<(String, u64)>,
}

/// How many functions `compare` lists by the lines of code they run an exchange.
const FUNCTIONS: usize = 16;

/// Counts a path mode at `small` and `large` exchanges under the EPYC cache model: once
/// whole, once inside [`on_path`] alone. `Endpoint::send` drains the events the packet
/// raised and settles the pass a delivery deferred after the packet has gone
/// (`Endpoint::after_send`); that part is taken out by two runs more, one that toggles at
/// `after_send` too (leaving out its runs inside the path, adding those outside it) and
/// one that counts it alone: inside = (after - (both - path)) / 2.
fn path_cost(
    exe: &std::path::Path,
    dir: &std::path::Path,
    which: Which,
    small: u64,
    large: u64,
) -> Result<PathCost, CostError> {
    const PATH: &str = "--toggle-collect=rpp_board_cost::on_path*";
    const AFTER: &str = "--toggle-collect=myri_transport::endpoint::Endpoint::after_send";
    let events = ["Ir", "I1mr"];
    let mut at = [[[0f64; 2]; 2]; 2];
    let mut instrs = Vec::new();
    let mut layers = Vec::new();
    for (k, n) in [small, large].into_iter().enumerate() {
        let run = |tag: &str, toggles: &[&str]| -> Result<[f64; 2], CostError> {
            let options: Vec<&str> = cost::EPYC_CACHES.iter().chain(toggles).copied().collect();
            counted(exe, dir, which, tag, n, &options, events)
        };
        let all = run("all", &["--dump-instr=yes"])?;
        let out = dir.join(format!("callgrind.{}.all.{n}.out", which.name()));
        let text = std::fs::read_to_string(&out).map_err(CallgrindError::from)?;
        layers.push(Layers::parse(&text).ok_or(CallgrindError::NoInstructions(out.clone()))?);
        instrs.push(InstrCounts::parse(&text).ok_or(CallgrindError::NoInstructions(out))?);
        let path = run("path", &[PATH])?;
        let both = run("path-after", &[PATH, AFTER])?;
        let after = run("after", &[AFTER])?;
        for e in 0..2 {
            let inside = (after[e] - (both[e] - path[e])) / 2.0;
            at[k][0][e] = all[e];
            at[k][1][e] = path[e] - inside;
        }
    }
    let per = |i: usize, e: usize| (at[1][i][e] - at[0][i][e]) / (large - small) as f64;
    let (lo, hi) = instrs[1]
        .address_range()
        .ok_or_else(|| CallgrindError::NoInstructions(dir.to_path_buf()))?;
    let sizes = cost::instruction_sizes(exe, lo, hi)?;
    let (bytes, function_bytes) = instrs[1].bytes_run_since(&instrs[0], large - small, &sizes);
    Ok(PathCost {
        bytes,
        function_bytes: function_bytes
            .into_iter()
            .map(|(f, b)| (f.to_string(), b))
            .collect(),
        all: [per(0, 0), per(0, 1)],
        path: [per(1, 0), per(1, 1)],
        lines: instrs[1].lines_run_since(&instrs[0], large - small),
        functions: instrs[1]
            .lines_by_function_since(&instrs[0], large - small)
            .into_iter()
            .map(|(f, n)| (f.to_string(), n))
            .collect(),
        layers: layers[1].per_unit_since(&layers[0], large - small),
    })
}

/// Virtual time per hop.
const HOP: Duration = Duration::from_micros(1);
/// Steps one exchange or one message may take before the run calls itself stuck.
const STUCK: u32 = 10_000;

/// Two inline boards on one switch, channel 1 open on each, route 1 to the other.
struct Boards {
    a: Api,
    b: Api,
    chan_a: Option<Channel>,
    chan_b: Option<Channel>,
    now: Time,
}

impl Boards {
    fn new() -> Boards {
        let InlinePair {
            a,
            b,
            chan_a,
            chan_b,
        } = InlinePair::new();
        Boards {
            a,
            b,
            chan_a: Some(chan_a),
            chan_b: Some(chan_b),
            now: Time::from_micros(1_000_000),
        }
    }

    fn tick(&mut self) -> Time {
        self.now += HOP;
        self.now
    }

    /// A sends sequence number `i` to B in a send buffer.
    fn ping(&mut self, i: u64) -> Result<(), String> {
        let mut buf = self.a.get_send_buffer().map_err(|e| e.to_string())?;
        buf.as_mut_slice()[..8].copy_from_slice(&i.to_be_bytes());
        drop(
            self.a
                .send(1, RouteId(1), buf, 8)
                .map_err(|e| e.error.to_string())?,
        );
        Ok(())
    }

    /// B receives the ping and turns its receive buffer around as the answer.
    fn echo(&mut self) -> Result<(), String> {
        let chan_b = self.chan_b.as_ref().ok_or("channel b")?;
        let ping = self
            .b
            .recv(chan_b)
            .map_err(|e| e.to_string())?
            .ok_or("no ping")?;
        let len = ping.len();
        drop(
            self.b
                .send_recv_buffer(1, RouteId(1), ping, len)
                .map_err(|e| e.error.to_string())?,
        );
        Ok(())
    }

    /// A receives the answer (its receive buffer goes back to the board when dropped).
    fn pong(&mut self) -> Result<RecvBuf, String> {
        let chan_a = self.chan_a.as_ref().ok_or("channel a")?;
        self.a
            .recv(chan_a)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "no pong".to_string())
    }

    fn raw_pingpong(&mut self, count: u64) -> Result<String, String> {
        let mut sum = 0u64;
        for i in 0..count {
            self.ping(i)?;
            let now = self.tick();
            self.a.progress(now);
            self.b.progress(now);
            self.echo()?;
            let now = self.tick();
            self.b.progress(now);
            self.a.progress(now);
            sum += word(self.pong()?.as_slice())?;
        }
        check_sum(sum, count)?;
        Ok(format!("{count} exchanges of 8 bytes"))
    }

    /// `raw_pingpong` as the board bench's two threads run it: after each send and the
    /// board step that puts the packet on the fabric, the sender's next turn steps its
    /// board again (the send's completion) while the packet travels; the send with its
    /// step, and the step that finds the packet with the receive, are on the path.
    fn raw_path(&mut self, count: u64) -> Result<String, String> {
        let mut sum = 0u64;
        for i in 0..count {
            let now = self.tick();
            on_path(|| {
                self.ping(i)?;
                self.a.progress(now);
                Ok::<_, String>(())
            })?;
            let now = self.tick();
            self.a.progress(now);
            on_path(|| {
                self.b.progress(now);
                self.echo()?;
                self.b.progress(now);
                Ok::<_, String>(())
            })?;
            let now = self.tick();
            self.b.progress(now);
            // The answer's buffer goes back to the board after the path, as the pinger's
            // does after its next send.
            let pong = on_path(|| {
                self.a.progress(now);
                self.pong()
            })?;
            sum += word(pong.as_slice())?;
        }
        check_sum(sum, count)?;
        Ok(format!("{count} exchanges of 8 bytes"))
    }

    fn raw_stream(&mut self, count: u64, size: usize) -> Result<String, String> {
        let (mut sent, mut received, mut sum) = (0u64, 0u64, 0u64);
        let mut tickets = VecDeque::new();
        let mut steps = 0u64;
        while received < count {
            while sent < count && tickets.len() < 8 {
                let Ok(mut buf) = sender(|| self.a.get_send_buffer()) else {
                    break;
                };
                buf.as_mut_slice()[..8].copy_from_slice(&sent.to_be_bytes());
                match sender(|| self.a.send(1, RouteId(1), buf, size)) {
                    Ok(t) => {
                        tickets.push_back(t);
                        sent += 1;
                    }
                    Err(_) => break,
                }
            }
            let now = self.tick();
            sender(|| self.a.progress(now));
            while tickets
                .front()
                .is_some_and(|t| !sender(|| self.a.buffer_busy(t)))
            {
                tickets.pop_front();
            }
            receiver(|| self.b.progress(now));
            let chan = self.chan_b.as_ref().ok_or("channel b")?;
            while let Some(r) = receiver(|| self.b.recv(chan)).map_err(|e| e.to_string())? {
                received += 1;
                sum += word(r.as_slice())?;
            }
            steps += 1;
            if steps > count * u64::from(STUCK) {
                return Err(format!("stuck at {received} of {count}"));
            }
        }
        check_sum(sum, count)?;
        Ok(format!("{count} messages of {size} bytes"))
    }
}

fn word(b: &[u8]) -> Result<u64, String> {
    b.get(..8)
        .map(|w| u64::from_be_bytes(w.try_into().expect("8 bytes")))
        .ok_or_else(|| "a message shorter than 8 bytes".to_string())
}

fn check_sum(sum: u64, count: u64) -> Result<(), String> {
    if sum != (0..count).sum::<u64>() {
        return Err("the sequence numbers do not add up".into());
    }
    Ok(())
}

/// One of the two endpoints.
#[derive(Debug, Clone, Copy)]
enum Side {
    A,
    B,
}

/// A copy of `data` in a buffer of `ep`'s.
fn copy_of(ep: &mut Endpoint, data: &[u8]) -> Buf {
    let mut m = ep.alloc(data.len());
    m.copy_from_slice(data);
    m
}

/// Sends `m` to `peer`.
fn send(ep: &mut Endpoint, peer: Peer, m: Buf) -> Result<(), String> {
    ep.send(peer, m)
        .map(drop)
        .map_err(|e| format!("the endpoint refused a message: {}", e.error))
}

/// Sends the 8-byte message `i` to `peer`.
fn send_word(ep: &mut Endpoint, peer: Peer, i: u64) -> Result<(), String> {
    let m = copy_of(ep, &i.to_be_bytes());
    send(ep, peer, m)
}

/// Two reliable endpoints on a simulated world of their own whose clock ticks with every
/// progress call, stepped in turn on this thread.
struct Endpoints {
    _world: SimWorld,
    a: Endpoint,
    b: Endpoint,
    to_b: Peer,
    to_a: Peer,
}

impl Endpoints {
    /// Two endpoints checking by `integrity` (`None`: the endpoint's default).
    fn new(integrity: Option<Integrity>) -> Result<Endpoints, String> {
        let world = SimWorld::create("rpp-board-cost", WorldConfig::default())
            .map_err(|e| e.to_string())?;
        let mut options = Options::default().with_rpp(rpp_config());
        options.integrity = integrity;
        let open = |n: &str| {
            Endpoint::open_with(&format!("sim://{n}?world=rpp-board-cost"), options.clone())
                .map_err(|e| e.to_string())
        };
        let (mut a, mut b) = (open("a")?, open("b")?);
        let to_b = a.insert_addr("sim://b").map_err(|e| e.to_string())?;
        let to_a = b.insert_addr("sim://a").map_err(|e| e.to_string())?;
        Ok(Endpoints {
            _world: world,
            a,
            b,
            to_b,
            to_a,
        })
    }

    fn pingpong(&mut self, count: u64) -> Result<String, String> {
        let mut sum = 0u64;
        for i in 0..count {
            send_word(&mut self.a, self.to_b, i)?;
            // As an application does: `recv` progresses the endpoint when nothing waits.
            let mut answered = false;
            for _ in 0..STUCK {
                if let Some(d) = self.b.recv() {
                    let m = copy_of(&mut self.b, &d.data);
                    drop(d);
                    send(&mut self.b, self.to_a, m)?;
                }
                if let Some(d) = self.a.recv() {
                    sum += word(&d.data)?;
                    answered = true;
                    break;
                }
            }
            while self.a.poll_completion().is_some() || self.b.poll_completion().is_some() {}
            if !answered {
                return Err(format!("exchange {i} got no answer"));
            }
        }
        check_sum(sum, count)?;
        self.check()?;
        Ok(format!("{count} exchanges of 8 bytes"))
    }

    /// `pingpong` as the board bench's two threads run it (`Pinger` and `Echo`): each
    /// side answers as soon as `recv` hands it a message, then lets the received buffer
    /// go, and its next turn (one progress call: the pass a delivery defers, the board's
    /// step) runs while the packet travels. The receive and the answer's send are on the
    /// path, except what `send` does after the packet has gone (`Endpoint::after_send`).
    fn path(&mut self, count: u64) -> Result<String, String> {
        let mut sum = 0u64;
        let mut empty = 0u64;
        on_path(|| send_word(&mut self.a, self.to_b, 0))?;
        self.a.progress();
        for i in 0..count {
            let ping = self.path_recv(Side::B, &mut empty)?;
            on_path(|| {
                let m = copy_of(&mut self.b, &ping.data);
                send(&mut self.b, self.to_a, m)
            })?;
            drop(ping);
            self.b.progress();
            let pong = self.path_recv(Side::A, &mut empty)?;
            sum += word(&pong.data)?;
            if i + 1 < count {
                on_path(|| send_word(&mut self.a, self.to_b, i + 1))?;
            }
            drop(pong);
            self.a.progress();
            while self.a.poll_completion().is_some() || self.b.poll_completion().is_some() {}
        }
        check_sum(sum, count)?;
        self.check()?;
        Ok(format!(
            "{count} exchanges of 8 bytes, {empty} receives that found nothing"
        ))
    }

    /// The next message at `side`, received on the path. In this one-thread model the
    /// packet is on the board once its sender's step put it on the fabric: a receive
    /// that finds nothing is rare (the first few, counted in `empty`), and the other
    /// side steps again before the next try.
    fn path_recv(&mut self, side: Side, empty: &mut u64) -> Result<Delivery, String> {
        let (at, other) = match side {
            Side::A => (&mut self.a, &mut self.b),
            Side::B => (&mut self.b, &mut self.a),
        };
        loop {
            if let Some(d) = on_path(|| at.recv()) {
                return Ok(d);
            }
            *empty += 1;
            other.progress();
            if *empty > u64::from(STUCK) {
                return Err(format!("no message arrived at {side:?}"));
            }
        }
    }

    fn stream(&mut self, count: u64, size: usize) -> Result<String, String> {
        let (mut queued, mut received, mut sum) = (0u64, 0u64, 0u64);
        let mut spare: Vec<Buf> = Vec::new();
        let mut steps = 0u64;
        while received < count {
            while queued < count {
                let mut m = spare.pop().unwrap_or_else(|| sender(|| self.a.alloc(size)));
                m[..8].copy_from_slice(&queued.to_be_bytes());
                match sender(|| self.a.send(self.to_b, m)) {
                    Ok(_) => queued += 1,
                    Err(e) => {
                        spare.push(e.buf);
                        break;
                    }
                }
            }
            sender(|| self.a.progress());
            receiver(|| self.b.progress());
            while let Some(d) = receiver(|| self.b.recv()) {
                if d.data.len() != size {
                    return Err(format!("a message of {} bytes, not {size}", d.data.len()));
                }
                received += 1;
                sum += word(&d.data)?;
            }
            receiver(|| self.b.progress());
            sender(|| self.a.progress());
            // Acknowledgements: the endpoint hands the sent messages' buffers back.
            while let Some(c) = sender(|| self.a.poll_completion()) {
                if let Completion::Sent { buf, .. } = c {
                    spare.push(buf);
                }
            }
            if sender(|| self.a.recv()).is_some() {
                return Err("the sender received a message".into());
            }
            steps += 1;
            if steps > count * u64::from(STUCK) {
                return Err(format!("stuck at {received} of {count}"));
            }
        }
        check_sum(sum, count)?;
        self.check()?;
        let acks = self.b.peer_stats(self.to_a).map_or(0, |s| s.acks_sent);
        Ok(format!(
            "{count} messages of {size} bytes; the receiver sent {acks} acknowledgements"
        ))
    }

    /// Neither connection failed or retransmitted: the channel lost nothing.
    fn check(&self) -> Result<(), String> {
        for (ep, peer) in [(&self.a, self.to_b), (&self.b, self.to_a)] {
            if ep.peer_failed(peer) {
                return Err("the connection failed".into());
            }
            let s = ep.peer_stats(peer).ok_or("no connection")?;
            if s.retransmitted > 0 {
                return Err(format!(
                    "{} retransmissions on a perfect channel",
                    s.retransmitted
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every mode runs to the end at a small count: each checks its own sums and, over
    /// RPP, that no connection failed or retransmitted. (One test: the endpoint modes
    /// share one named world.) In the one-thread model a packet is on the other board
    /// once its sender's step put it on the fabric, so the path mode's receives find
    /// theirs: only the first few may not (the boards' start), which cancel out between
    /// two counts.
    #[test]
    fn every_mode_runs_clean_and_path_receives_find_their_packets() {
        for which in Which::ALL {
            if let Err(e) = run(vec![which.name().to_string(), "20".to_string()]) {
                panic!("{}: {e}", which.name());
            }
        }
        let said = Endpoints::new(None)
            .and_then(|mut e| e.path(200))
            .expect("ran");
        let empty: u64 = said
            .split(", ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .expect("a count of empty receives");
        assert!(empty <= 5, "{said}");
    }

    #[test]
    fn a_missing_or_unknown_mode_or_a_bad_count_is_a_usage_error() {
        for args in [vec![], vec!["nonsense"], vec!["raw-path", "4x"]] {
            let args = args.into_iter().map(String::from).collect();
            assert!(matches!(run(args), Err(CostError::Usage(_))));
        }
    }
}
