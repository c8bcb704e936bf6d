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
//!   hands it back; each packet is checked end to end with CRC-32C on both sides. The run
//!   prints how many acknowledgements the receiver sent.
//! * `rpp-stream-dma` (messages): `rpp-stream` with `integrity=dma`: each packet is
//!   checked by the boards' DMA checksums (a comparison at the receiver) instead of a
//!   CRC-32C computed at both ends.
//! * `raw-stream-fit`, `rpp-stream-fit` (messages): the same with messages of RPP's
//!   largest payload per packet.
//!
//! `compare` runs valgrind with glibc's `rep movsb` copies switched off (see
//! [`FLAT_COPIES`]): callgrind would count each byte they move as an instruction.
//!
//! Virtual time moves 1 µs per hop (raw) or per progress call (the endpoints' world
//! ticks), so RPP's timers and round-trip estimate run as on a fast link; nothing is
//! lost, so nothing is retransmitted (the run checks).

use myri_benches::cost::{self, CallgrindError, FLAT_COPIES, InlinePair};
use myri_board_bench::reliable::{fit_payload, rpp_config};
use myri_device::time::Time;
use myri_mcp::{Api, Channel, RouteId};
use myri_transport::sim::{SimWorld, WorldConfig};
use myri_transport::{Buf, Completion, Endpoint, Integrity, Options, Peer};
use std::collections::VecDeque;
use std::time::Duration;
use thiserror::Error;

const USAGE: &str = "usage: rpp_board_cost MODE COUNT\n       \
                     rpp_board_cost compare [SMALL LARGE]\n\
                     modes: raw-pingpong rpp-pingpong raw-stream rpp-stream rpp-stream-dma \
                     raw-stream-fit rpp-stream-fit";

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
    RppStreamDma,
    RawStreamFit,
    RppStreamFit,
}

impl Which {
    const ALL: [Which; 7] = [
        Which::RawPingPong,
        Which::RppPingPong,
        Which::RawStream,
        Which::RppStream,
        Which::RppStreamDma,
        Which::RawStreamFit,
        Which::RppStreamFit,
    ];

    fn name(self) -> &'static str {
        match self {
            Which::RawPingPong => "raw-pingpong",
            Which::RppPingPong => "rpp-pingpong",
            Which::RawStream => "raw-stream",
            Which::RppStream => "rpp-stream",
            Which::RppStreamDma => "rpp-stream-dma",
            Which::RawStreamFit => "raw-stream-fit",
            Which::RppStreamFit => "rpp-stream-fit",
        }
    }

    fn parse(s: &str) -> Option<Which> {
        Which::ALL.into_iter().find(|w| w.name() == s)
    }

    /// Bytes per stream message.
    fn stream_size(self) -> usize {
        match self {
            Which::RawStreamFit | Which::RppStreamFit => fit_payload(),
            _ => 8192,
        }
    }
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
        Which::RppPingPong => Endpoints::new(Integrity::Crc32c).and_then(|mut e| e.pingpong(count)),
        Which::RawStream | Which::RawStreamFit => boards.raw_stream(count, which.stream_size()),
        Which::RppStream | Which::RppStreamFit => {
            Endpoints::new(Integrity::Crc32c).and_then(|mut e| e.stream(count, which.stream_size()))
        }
        Which::RppStreamDma => {
            Endpoints::new(Integrity::Dma).and_then(|mut e| e.stream(count, which.stream_size()))
        }
    }
    .map_err(|why| CostError::Run(which.name(), why))?;
    println!("{}: {what}", which.name());
    Ok(())
}

fn compare(small: u64, large: u64) -> Result<(), CostError> {
    let exe = std::env::current_exe().map_err(CallgrindError::from)?;
    let dir = cost::profile_dir("myri-rpp-board-cost")?;
    println!("instructions per exchange (ping-pong) or per message (stream), ({large} - {small}):");
    let mut per = Vec::new();
    for which in Which::ALL {
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
        per.push(cost);
    }
    // Each RPP mode against the raw mode of its benchmark.
    let cost_of = |w: Which| Which::ALL.iter().position(|&x| x == w).map(|i| per[i]);
    for (raw, rpp) in [
        (Which::RawPingPong, Which::RppPingPong),
        (Which::RawStream, Which::RppStream),
        (Which::RawStream, Which::RppStreamDma),
        (Which::RawStreamFit, Which::RppStreamFit),
    ] {
        if let (Some(a), Some(b)) = (cost_of(raw), cost_of(rpp)) {
            println!("  {:<15} / {:<15} = {:.2}", rpp.name(), raw.name(), b / a);
        }
    }
    Ok(())
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

    fn raw_pingpong(&mut self, count: u64) -> Result<String, String> {
        let mut sum = 0u64;
        for i in 0..count {
            let mut buf = self.a.get_send_buffer().map_err(|e| e.to_string())?;
            buf.as_mut_slice()[..8].copy_from_slice(&i.to_be_bytes());
            drop(
                self.a
                    .send(1, RouteId(1), buf, 8)
                    .map_err(|e| e.error.to_string())?,
            );
            let now = self.tick();
            self.a.progress(now);
            self.b.progress(now);
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
            let now = self.tick();
            self.b.progress(now);
            self.a.progress(now);
            let chan_a = self.chan_a.as_ref().ok_or("channel a")?;
            let pong = self
                .a
                .recv(chan_a)
                .map_err(|e| e.to_string())?
                .ok_or("no pong")?;
            sum += u64::from_be_bytes(pong.as_slice()[..8].try_into().expect("8 bytes"));
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
                let Ok(mut buf) = self.a.get_send_buffer() else {
                    break;
                };
                buf.as_mut_slice()[..8].copy_from_slice(&sent.to_be_bytes());
                match self.a.send(1, RouteId(1), buf, size) {
                    Ok(t) => {
                        tickets.push_back(t);
                        sent += 1;
                    }
                    Err(_) => break,
                }
            }
            let now = self.tick();
            self.a.progress(now);
            while tickets.front().is_some_and(|t| !self.a.buffer_busy(t)) {
                tickets.pop_front();
            }
            self.b.progress(now);
            while let Some(r) = self
                .b
                .recv(self.chan_b.as_ref().ok_or("channel b")?)
                .map_err(|e| e.to_string())?
            {
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
    fn new(integrity: Integrity) -> Result<Endpoints, String> {
        let world = SimWorld::create("rpp-board-cost", WorldConfig::default())
            .map_err(|e| e.to_string())?;
        let options = Options::default()
            .with_rpp(rpp_config())
            .with_integrity(integrity);
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
            let mut m = self.a.alloc(8);
            m.copy_from_slice(&i.to_be_bytes());
            self.a
                .send(self.to_b, m)
                .map_err(|e| format!("the endpoint refused a message: {}", e.error))?;
            // As an application does: `recv` progresses the endpoint when nothing waits.
            let mut answered = false;
            for _ in 0..STUCK {
                if let Some(d) = self.b.recv() {
                    let mut m = self.b.alloc(d.data.len());
                    m.copy_from_slice(&d.data);
                    drop(d);
                    self.b
                        .send(self.to_a, m)
                        .map_err(|e| format!("the endpoint refused an echo: {}", e.error))?;
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

    fn stream(&mut self, count: u64, size: usize) -> Result<String, String> {
        let (mut queued, mut received, mut sum) = (0u64, 0u64, 0u64);
        let mut spare: Vec<Buf> = Vec::new();
        let mut steps = 0u64;
        while received < count {
            while queued < count {
                let mut m = spare.pop().unwrap_or_else(|| self.a.alloc(size));
                m[..8].copy_from_slice(&queued.to_be_bytes());
                match self.a.send(self.to_b, m) {
                    Ok(_) => queued += 1,
                    Err(e) => {
                        spare.push(e.buf);
                        break;
                    }
                }
            }
            self.a.progress();
            self.b.progress();
            while let Some(d) = self.b.recv() {
                if d.data.len() != size {
                    return Err(format!("a message of {} bytes, not {size}", d.data.len()));
                }
                received += 1;
                sum += word(&d.data)?;
            }
            self.b.progress();
            self.a.progress();
            // Acknowledgements: the endpoint hands the sent messages' buffers back.
            while let Some(c) = self.a.poll_completion() {
                if let Completion::Sent { buf, .. } = c {
                    spare.push(buf);
                }
            }
            if self.a.recv().is_some() {
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
